"""Where the torch a user has changes what the code must call: the one place that decides.

pyproject.toml admits torch 2.11 / torchvision 0.26 and newer; CI tests the pinned pair and the lowest admitted
one, which is the GPU machine's (``make test-compat``, tests/compat_plan.py). Each decision here is named after the
feature it depends on and taken from what the installed library offers (the function itself where it can be looked
up); the modules that need it call the function here instead of deciding themselves. :func:`features` lists the
decisions taken (the trainer writes them into ``config.json`` under ``env.compat``; every benchmark record carries
them).

What needs no decision over the admitted range (tests/test_compat.py checks it on every pair): ``torch.autocast``
and ``torch.amp.GradScaler(device_type)``, ``torch.load(weights_only=True)`` (passed explicitly everywhere),
``init_process_group(device_id=...)``, ``is_bf16_supported(including_emulation=...)``, DDP's comm hook API,
torchvision's batched ``decode_jpeg(list, device=...)``, and the torch.compile modes the configuration offers.
What made torch 2.3 / torchvision 0.18 too old is in docs/tests.md.

Below every layer (like :mod:`tutorial_lib.paths`), so that any layer may use it.
"""

from __future__ import annotations

import faulthandler

import torch.distributed as dist

from tutorial_lib import exits

# torch 2.14 names the single-tensor collectives *_single (the old names warn); before, only the second names exist.
SINGLE_TENSOR_NAMES = {"reduce_scatter": ("reduce_scatter_single", "reduce_scatter_tensor"),
                       "all_gather": ("all_gather_single", "all_gather_into_tensor")}


def single_tensor_collective(name: str, distributed=dist):
    """``reduce_scatter`` or ``all_gather`` between one flat tensor per rank and its shards under this torch's
    name for it (:data:`SINGLE_TENSOR_NAMES`), called as ``fn(output, input, group=...)``. ``distributed``: the
    module to look in (``torch.distributed``; the comm hooks pass the one they use, which tests replace)."""
    newer, older = SINGLE_TENSOR_NAMES[name]
    return getattr(distributed, newer, None) or getattr(distributed, older)


# Leaving a gloo group can deadlock on every admitted torch (pytorch issues 56297 and 190489, still open; seen on
# 2.11: a finished rank of a 2-rank run stuck for good in destroy_process_group, another in the garbage collection of
# interpreter finalization): the group's teardown holds the GIL while a gloo worker thread, freeing the last
# collective's tensors, waits for the GIL. A gloo group is therefore never torn down: the process ends with
# os._exit once its status is known (tutorial_lib.exits.finish). NCCL's is destroyed, under a watchdog.
LEAVE_TIMEOUT_S = 120.0


def leave_process_group(timeout_s: float = LEAVE_TIMEOUT_S, destroy: bool | None = None) -> None:
    """Leave the default process group at the end of a process's distributed work, without a hang.

    ``destroy`` None decides by backend. gloo (False): nothing is torn down, the process is marked to end with
    ``os._exit`` when its command finishes (:func:`tutorial_lib.exits.skip_finalizing`). Otherwise (True):
    ``dist.destroy_process_group()`` under faulthandler's watchdog, whose thread needs no GIL, so a stall that
    holds it still ends: after ``timeout_s`` every thread's stack goes to stderr ("Timeout (0:02:00)!") and the
    process exits with status 1. Every place that leaves a group calls this one."""
    if destroy is None:
        destroy = dist.get_backend() != "gloo"
    if not destroy:
        exits.skip_finalizing()
        return
    faulthandler.dump_traceback_later(timeout_s, exit=True)
    try:
        dist.destroy_process_group()
    finally:
        faulthandler.cancel_dump_traceback_later()


def features() -> dict:
    """The decisions taken on this torch, by feature name."""
    return {"single_tensor_collectives": {name: getattr(single_tensor_collective(name), "__name__", None)
                                          for name in SINGLE_TENSOR_NAMES}}
