"""Communication benchmark: all-reduce time and bandwidth per message size, as nccl-tests reports them.

Run under torchrun (gloo on CPU, nccl on GPU); the record has the shape
:func:`tutorial_lib.scaling.load_allreduce_samples` reads.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from tutorial_lib import REPO_ROOT
from tutorial_lib.bench import twolevel
from tutorial_lib.bench.compute import defaults, timed_windows
from tutorial_lib.bench.records import append_records, read_records
from tutorial_lib.bench.timing import Spread
from tutorial_lib.engine.device import environment_facts


def parse_size(text: str) -> int:
    """``4K``, ``16M``, ``1G`` (powers of 1024) or plain bytes."""
    text = str(text).strip().upper().removesuffix("B")
    factor = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    number = float(text[:-1] if factor > 1 else text)
    if not 1 <= number * factor <= 1 << 40:  # nan, inf and 0 too (ValueError: argparse names the flag)
        raise ValueError(f"{text!r} is not a message size from 1 byte to 1T")
    return int(number * factor)


def measure_allreduce(sizes: list[int] | None = None, iters: int | None = None, warmup: int | None = None,
                      dtype: str = "float32", device: str = "auto", repeats: int = 3,
                      min_time: float = 0.05, algorithms: tuple = ("flat",), links: bool = False,
                      ddp_steps: int = 0, phases: bool = False) -> dict | None:
    """All-reduce time and bandwidth per message size, across the ranks of this torchrun job.

    Call it in every rank (joins the process group from torchrun's environment: nccl on GPUs,
    gloo on the CPU). Returns the record on rank 0 and None elsewhere. ``results`` lists
    ``{"bytes", "seconds", "algbw_GBps", "busbw_GBps"}`` with busbw = algbw x 2(n-1)/n (nccl-tests);
    the time is the slowest rank's mean over at least ``iters`` calls and ``min_time`` seconds, the
    median of ``repeats`` rounds in which the sizes take turns (``seconds_low``/``_high``, see
    :func:`allreduce_rounds`). ``device="auto"`` uses the GPUs when
    every local rank has one, else the CPU (gloo), so two ranks can measure on a one-GPU machine.

    ``algorithms`` (``flat``, ``hierarchical``, ``hybrid``; nodes = torchrun's local world) are timed
    in the same interleaved rounds, each result naming its ``algorithm``. ``links`` adds point-to-point
    times inside a node and across nodes, ``ddp_steps`` the speed of DDP training steps with each
    algorithm, ``phases`` the time of each phase of a hierarchical all-reduce of the largest size
    (:mod:`tutorial_lib.bench.twolevel`). The record names the network
    (``TUTORIAL_NETLAB``, set by :class:`tutorial_lib.jobs.netlab.Lab`, else this host).
    """
    import torch.distributed as dist

    from tutorial_lib.engine import distributed as dist_utils
    from tutorial_lib.scaling import bus_bandwidth_bytes_s

    _, world, local_rank, local_world = dist_utils.env_rank_info()
    if device == "auto" and torch.cuda.is_available() and local_world > torch.cuda.device_count():
        device = "cpu"
    device = dist_utils.pick_device(device, local_rank)
    d = defaults(device)
    sizes, iters = sizes or d["allreduce_sizes"], iters or d["allreduce_iters"]
    warmup = d["allreduce_warmup"] if warmup is None else warmup
    owned = not dist.is_initialized()
    info = dist_utils.init_distributed(device) if owned else dist_utils.DistInfo(
        dist.get_rank(), dist.get_world_size(), local_rank, 1, dist.get_backend())
    if not info.distributed:
        raise RuntimeError("allreduce needs several ranks. Fix: run it under torchrun, e.g. "
                           "torchrun --nproc-per-node 2 -m tutorial_lib.bench allreduce")
    hosts = dist_utils.all_gather_objects(dist_utils.node_name(), info)
    torch_dtype = getattr(torch, dtype)
    element = torch.tensor([], dtype=torch_dtype).element_size()
    reducers = twolevel.reducers(algorithms, local_world)
    plan = [(algorithm, size) for size in sizes for algorithm in algorithms]
    results = allreduce_rounds([torch.ones(max(1, size // element), dtype=torch_dtype, device=device)
                                for _, size in plan], iters, warmup, repeats, min_time, device,
                               [reducers[algorithm] for algorithm, _ in plan])
    for (algorithm, _), result in zip(plan, results, strict=True):
        result["algorithm"] = algorithm
    for result in results:
        result["busbw_GBps"] = bus_bandwidth_bytes_s(result["bytes"], result["seconds"], info.world_size) / 1e9
        for end, other in (("low", "high"), ("high", "low")):  # the fastest round gives the highest bandwidth
            result[f"busbw_GBps_{end}"] = bus_bandwidth_bytes_s(result["bytes"], result[f"seconds_{other}"],
                                                                info.world_size) / 1e9
    extra = {}
    if links:
        extra["links"] = twolevel.point_to_point(sizes, local_world, repeats, device)
    if ddp_steps:
        extra["ddp_training"] = twolevel.ddp_step_rates(algorithms, ddp_steps, repeats, device)
    if phases and info.world_size > local_world > 1:
        extra["hierarchical_phases"] = twolevel.hierarchical_phases(max(sizes), local_world, repeats, device)
    record = None
    if info.is_main:
        record = {"kind": "allreduce", "status": "ok", "backend": info.backend, "world_size": info.world_size,
                  "gpus": info.world_size, "nodes": len(set(hosts)), "hosts": hosts, "dtype": dtype,
                  "algorithms": list(algorithms), "local_world_size": local_world,
                  "network": twolevel.network(), "loadavg_at_end": list(os.getloadavg()), **extra,
                  "iters": iters, "warmup": warmup, "repeats": repeats, "min_time_s": min_time, "device": device.type,
                  "timer": "torch.cuda.Event" if device.type == "cuda" else "time.perf_counter",
                  "results": results, "env": environment_facts(device), "timestamp": time.time()}
    if owned:
        dist_utils.shutdown(info)
    return record


def launch_allreduce(nproc: int = 2, sizes: list[int] | None = None, iters: int | None = None,
                     out: str | os.PathLike | None = None, timeout: float = 300) -> dict:
    """Run the all-reduce benchmark on this machine with ``nproc`` ranks (torchrun); return its record.

    The record also goes to ``out`` (JSON lines) if given. Feed it to
    :func:`tutorial_lib.scaling.load_allreduce_samples` / :func:`tutorial_lib.scaling.calibrate`.
    """
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "allreduce.jsonl"
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
                   "-m", "tutorial_lib.bench", "allreduce", "--quiet", "--out", str(target)]
        if sizes:
            command += ["--sizes", ",".join(str(s) for s in sizes)]
        if iters:
            command += ["--iters", str(iters)]
        env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                                 "MASTER_PORT", "LOCAL_WORLD_SIZE")}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT),
                                                          env.get("PYTHONPATH")]))
        env.setdefault("OMP_NUM_THREADS", "1")
        result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout)
        records = read_records(target)
        if result.returncode != 0 or not records:
            raise RuntimeError(f"all-reduce benchmark failed ({result.returncode}):\n{result.stderr[-2000:]}")
    if out:
        append_records(out, records[-1:])
    return records[-1]


def allreduce_rounds(tensors: list, iters: int, warmup: int, repeats: int, min_time: float, device,
                     reducers: list | None = None) -> list[dict]:
    """All-reduce times of each tensor, interleaved: call in every rank of a process group.

    ``reducers`` (one per tensor, default ``dist.all_reduce``) is the all-reduce each tensor is timed with,
    e.g. :func:`tutorial_lib.engine.comm_hooks.two_level_all_reduce` bound to its groups.

    Every tensor gets at least ``iters`` all-reduces per round, more if that would take under
    ``min_time`` seconds (all ranks agree on the count); the tensors take turns for ``repeats``
    rounds. Per tensor: ``bytes``, ``seconds`` (the slowest rank's mean per all-reduce, median over
    the rounds), ``seconds_low``/``_high``, ``algbw_GBps`` (and ``_low``/``_high``), ``iters``.
    """
    import torch.distributed as dist

    reducers = reducers or [dist.all_reduce] * len(tensors)

    def timed(index: int, count: int) -> float:
        reduce, tensor = reducers[index], tensors[index]
        return timed_windows(lambda n: [reduce(tensor) for _ in range(n)], count, 1, device)[0]

    counts = []
    for index, tensor in enumerate(tensors):
        for _ in range(warmup):
            reducers[index](tensor)
        window = torch.tensor([timed(index, iters)], dtype=torch.float64, device=device)
        dist.all_reduce(window, op=dist.ReduceOp.MAX)
        counts.append(max(iters, math.ceil(iters * min_time / max(float(window.item()), 1e-9))))
    seconds = [[] for _ in tensors]
    for round_index in range(repeats):
        order = list(range(len(tensors)))
        order = order[round_index % len(order):] + order[:round_index % len(order)]
        for index in order:
            dist.barrier()
            seconds[index].append(timed(index, counts[index]) / counts[index])
    results = []
    for tensor, count, times in zip(tensors, counts, seconds, strict=True):
        slowest = torch.tensor(times, dtype=torch.float64, device=device)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        spread = Spread.of(slowest.tolist())
        nbytes = tensor.numel() * tensor.element_size()
        results.append({"bytes": nbytes, "seconds": spread.median, "seconds_low": spread.low,
                        "seconds_high": spread.high, "seconds_samples": list(spread.samples), "iters": count,
                        "algbw_GBps": nbytes / spread.median / 1e9, "algbw_GBps_low": nbytes / spread.high / 1e9,
                        "algbw_GBps_high": nbytes / spread.low / 1e9})
    return results
