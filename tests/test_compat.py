"""What the code needs of the installed torch/torchvision, checked on whichever pair runs the suite.

``make test`` runs these on the pinned pair; ``make test-compat`` on the GPU machine's pair, the lowest that
pyproject.toml admits (tests/compat_plan.py). The decisions of tutorial_lib/compat.py, and what needs none.
"""

from __future__ import annotations

import importlib
import inspect
import io
import pkgutil

import torch
import torch.distributed as dist
from PIL import Image
from torchvision.io import ImageReadMode, decode_jpeg

import tutorial_lib
from tutorial_lib import compat
from tutorial_lib.engine import comm_hooks
from tutorial_lib.engine.config import COMPILE_MODES

CPU = torch.device("cpu")


def test_every_module_of_the_package_imports():
    """Nothing the package imports at module level is missing from this pair (a renamed function, a moved
    module): the compat subset touches every module at least this far."""
    names = [info.name for info in pkgutil.walk_packages(tutorial_lib.__path__, "tutorial_lib.")
             if not info.name.endswith("__main__")]
    assert len(names) > 50
    for name in names:
        importlib.import_module(name)


def test_the_hooks_collectives_exist_and_run_under_this_torchs_names(world_of_one, monkeypatch):
    """The hierarchical all-reduce's three steps (reduce-scatter, or its all-reduce stand-in where gloo lacks it;
    all-reduce; all-gather) on the real backend, under this torch's names (torch 2.14 renamed them *_single;
    earlier versions have only the old names, and the hook once asked those for ``all_gather_tensor``, which no
    torch has). One rank standing for one node of one: the hierarchy is forced on."""
    monkeypatch.setattr(comm_hooks, "uses_hierarchy", lambda nbytes, groups: True)
    groups = comm_hooks.TwoLevelGroups("hierarchical", world_size=1, local_world_size=1, intra=world_of_one,
                                       inter=world_of_one)
    tensor = torch.arange(6, dtype=torch.float32).view(2, 3)
    assert comm_hooks.two_level_all_reduce(tensor, groups) is tensor
    assert torch.equal(tensor, torch.arange(6, dtype=torch.float32).view(2, 3))  # the sum over one rank
    gathered = torch.zeros(6)
    compat.single_tensor_collective("all_gather")(gathered, tensor.view(-1), group=world_of_one)
    assert torch.equal(gathered, tensor.view(-1))


def test_the_features_are_recorded_with_a_callable_for_each_collective():
    from tutorial_lib.engine.device import environment_facts

    facts = environment_facts("cpu")["compat"]
    assert facts == compat.features()
    assert set(facts["single_tensor_collectives"]) == {"reduce_scatter", "all_gather"}
    assert all(facts["single_tensor_collectives"].values())


def test_torchvision_decodes_a_list_of_jpegs_in_one_call_on_a_named_device():
    """The GPU input pipeline's one device call per chunk (torchvision 0.18 took one tensor per call: a list was
    refused, taken for a damaged file, and every image went to the CPU decoder)."""
    encoded = []
    for size in ((8, 6), (5, 7)):
        buffer = io.BytesIO()
        Image.new("RGB", size, (200, 30, 60)).save(buffer, "JPEG")
        encoded.append(torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8))
    decoded = decode_jpeg(encoded, mode=ImageReadMode.RGB, device=CPU)
    assert [tuple(image.shape) for image in decoded] == [(3, 6, 8), (3, 7, 5)]


def test_the_amp_and_distributed_names_the_engine_calls_take_their_arguments():
    """torch.amp.GradScaler on a device type (the training step's, CPU included), the bf16 check without
    emulation (device.precision_support) and init_process_group's device_id (engine.distributed)."""
    scaler = torch.amp.GradScaler("cpu", enabled=True)
    assert scaler.is_enabled()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.ones(2, 2).matmul(torch.ones(2, 2)).dtype == torch.bfloat16
    assert "including_emulation" in inspect.signature(torch.cuda.is_bf16_supported).parameters
    assert "device_id" in inspect.signature(dist.init_process_group).parameters
    assert "weights_only" in inspect.signature(torch.load).parameters


def test_every_compile_mode_the_config_offers_is_one_this_torch_knows():
    from torch._inductor import list_mode_options

    assert set(COMPILE_MODES) - {"none"} <= set(list_mode_options())


def test_two_gloo_ranks_leave_their_group_without_hanging():
    """Every run with two or more CPU ranks ends in ``destroy_process_group``; before torch 2.8 that hung for good
    now and then (gloo's destructor held the GIL while a worker needed it: tests/gloo_destroy_cycles.py), in 2 of
    5 runs of a 2-rank script on torch 2.3, and once on 2.11 under load (test_ddp's rank 1, after rank 0 finished).
    Twenty join-reduce-leave cycles of two ranks, each leaving as the project does (compat.leave_process_group),
    each under a ceiling."""
    from gloo_destroy_cycles import hung_cycle

    hung = hung_cycle(cycles=20)
    assert hung is None, f"a rank hung leaving its gloo group: {hung}"



LEAVE_SCRIPT = """
import atexit, ctypes, sys, time
import torch.distributed as dist
from tutorial_lib import compat, exits

mode, timeout_s = sys.argv[1], float(sys.argv[2])
dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
# A C call that keeps the GIL for ten minutes, as gloo's teardown does in the deadlock
hold_gil = ctypes.PyDLL(None).sleep
hold_gil.argtypes = [ctypes.c_uint]
if mode in ("stall", "gloo"):
    dist.destroy_process_group = lambda: hold_gil(600)
if mode == "gloo":
    atexit.register(hold_gil, 600)  # and at interpreter finalization


def body():
    compat.leave_process_group(timeout_s=timeout_s, destroy=None if mode == "gloo" else True)
    print("left")  # no flush: the end must flush it
    if mode == "plain":
        time.sleep(timeout_s + 2)  # the watchdog is off once the group is left
        print("alive")
    return 0


sys.exit(exits.run_main(body))
"""


def _leave(mode: str, timeout_s: float):
    import subprocess
    import sys
    import time

    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", LEAVE_SCRIPT, mode, str(timeout_s)], capture_output=True,
                          text=True, timeout=240)
    return done, time.monotonic() - started


def test_a_gloo_group_is_left_without_teardown_and_the_command_ends_without_finalizing():
    """Injected: gloo's teardown and interpreter finalization each replaced by a C call that holds the GIL for ten
    minutes (the deadlock seen on torch 2.11: a finished rank stuck for good in destroy_process_group, another in
    finalization's garbage collection). The command still ends at once with its own status and its output
    flushed. Before: destroy_process_group was called (here: the 240 s ceiling)."""
    done, seconds = _leave("gloo", 60)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.split() == ["left"]
    assert seconds < 120, seconds


def test_a_destroy_that_stalls_holding_the_gil_ends_with_every_stack():
    """Where a group is destroyed (NCCL; forced here on gloo) and the teardown stalls holding the GIL, the watchdog
    ends the process with status 1 after its timeout, every thread's stack on stderr naming where; nothing after
    it runs."""
    done, seconds = _leave("stall", 3)
    assert done.returncode == 1, (done.returncode, done.stderr[-2000:])
    assert "Timeout (0:00:03)!" in done.stderr and "leave_process_group" in done.stderr, done.stderr[-2000:]
    assert "left" not in done.stdout
    assert seconds < 120, seconds


def test_a_destroy_that_returns_cancels_the_watchdog():
    """A group destroyed without a stall returns, and the watchdog does not fire later in the process."""
    done, _ = _leave("plain", 2)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["left", "alive"]
    assert "Timeout" not in done.stderr
