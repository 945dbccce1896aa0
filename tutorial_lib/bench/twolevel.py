"""Measurements on a two-level network for :func:`tutorial_lib.bench.comm.measure_allreduce`.

* :func:`reducers`: the all-reduce of each algorithm (flat, hierarchical, hybrid) as one callable;
* :func:`point_to_point`: one-way message times inside a node and across nodes (ping-pong), the samples
  the scaling model's links are fitted to (:func:`tutorial_lib.scaling.fit_point_to_point`);
* :func:`ddp_step_rates`: the trainer's own step (``engine.step.TrainStep``) under DDP with each
  algorithm, and without DDP (compute only), timed in interleaved rounds;
* :func:`network`: what network the ranks ran on (a netlab lab, or this host).

Every function here is called in every rank of the job at the same point.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import time

import torch
import torch.distributed as dist

from tutorial_lib.bench.timing import Spread, store


def network() -> dict:
    """The network of this job: the lab's description (``TUTORIAL_NETLAB``) or this host."""
    described = os.environ.get("TUTORIAL_NETLAB")
    return json.loads(described) if described else {"kind": "host", "host": socket.gethostname()}


def reducers(algorithms, local_world_size: int) -> dict:
    """``{algorithm: callable(tensor)}``, each summing a tensor over all ranks in place."""
    from tutorial_lib.engine.comm_hooks import build_groups, two_level_all_reduce

    table = {}
    for algorithm in algorithms:  # the same order on every rank: the groups are created in it
        if algorithm == "flat":
            table[algorithm] = dist.all_reduce
        else:
            groups = build_groups(algorithm, local_world_size)
            table[algorithm] = functools.partial(two_level_all_reduce, groups=groups)
    return table


def _slowest(seconds: list[float], device) -> list[float]:
    values = torch.tensor(seconds, dtype=torch.float64, device=device)
    dist.all_reduce(values, op=dist.ReduceOp.MAX)
    return values.tolist()


def point_to_point(sizes: list[int], local_world_size: int, repeats: int, device) -> dict:
    """One-way times of messages between rank 0 and a rank of its node (``intra``) and of the next node
    (``inter``): half the median round trip of a ping-pong (send, then receive it back), per size."""
    world = dist.get_world_size()
    pairs = {}
    if local_world_size > 1:
        pairs["intra"] = 1
    if world > local_world_size:
        pairs["inter"] = local_world_size
    out = {}
    for level, peer in pairs.items():
        samples = []
        for size in sizes:
            tensor = torch.ones(max(1, size // 4), dtype=torch.float32, device=device)
            trips = []
            for _ in range(repeats + 1):  # the first round trip warms the connection up
                dist.barrier()
                begin = time.perf_counter()
                if dist.get_rank() == 0:
                    dist.send(tensor, peer)
                    dist.recv(tensor, peer)
                elif dist.get_rank() == peer:
                    dist.recv(tensor, 0)
                    dist.send(tensor, 0)
                trips.append(time.perf_counter() - begin)
            spread = Spread.of([t / 2 for t in trips[1:]])
            samples.append({"bytes": tensor.numel() * 4, "seconds": spread.median, "seconds_low": spread.low,
                            "seconds_high": spread.high})
        out[level] = {"ranks": [0, peer], "results": samples}
    return out


def ddp_step_rates(algorithms, steps: int, repeats: int, device, arch: str = "resnet18", image_size: int = 32,
                   batch_size: int = 16) -> dict:
    """Images/s of the trainer's step under DDP with each algorithm, and of the same step without DDP on
    every rank at once (``none``: the compute alone, for the model), in interleaved rounds of ``steps``."""
    from tutorial_lib.engine.config import make_config
    from tutorial_lib.engine.input.files import Batch
    from tutorial_lib.engine.step import TrainStep

    world = dist.get_world_size()
    step_fns = {}
    for algorithm in ("none", *algorithms):  # same order on every rank (hooked ones create groups)
        cfg = make_config("smoke", arch=arch, image_size=image_size, batch_size=batch_size, norm="group",
                          warmup_epochs=0, device=device.type, dataset="synthetic", progress=False,
                          allreduce="flat" if algorithm == "none" else algorithm)
        torch.manual_seed(0)
        step_fns[algorithm] = TrainStep(cfg, 10, device, steps_per_epoch=10 ** 6, world_size=world,
                                        distributed=algorithm != "none")
    batch = Batch(torch.randn(batch_size, 3, image_size, image_size), torch.randint(0, 10, (batch_size,)))
    for step in step_fns.values():
        step(batch)  # warm-up (DDP rebuilds its buckets after the first step)
    names = list(step_fns)
    seconds = {name: [] for name in names}
    for round_index in range(repeats):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            dist.barrier()
            begin = time.perf_counter()
            for _ in range(steps):
                step_fns[name](batch)
            seconds[name].append((time.perf_counter() - begin) / steps)
    results = []
    for name in names:
        slowest = _slowest(seconds[name], device)
        images = batch_size * (world if name != "none" else 1)
        record = {"algorithm": name}
        store(record, "step_s", Spread.of(slowest))
        store(record, "images_per_sec", Spread.of([images / s for s in slowest]), digits=2)
        results.append(record)
    model = step_fns["none"].model
    ddp = next((s.train_model for n, s in step_fns.items() if n != "none"), None)
    logged = ddp._get_ddp_logging_data() if ddp is not None else {}
    return {"arch": arch, "image_size": image_size, "batch_size": batch_size, "steps": steps, "repeats": repeats,
            "gradient_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
            "bucket_sizes": logged.get("bucket_sizes"), "results": results}


def hierarchical_phases(nbytes: int, local_world_size: int, repeats: int, device) -> dict:
    """Seconds of each phase of one hierarchical all-reduce of ``nbytes`` (median over ``repeats``, slowest
    rank): reduce-scatter in the node, the shards' all-reduce across nodes (all local ranks at once, and local
    rank 0's alone, to see whether the concurrent shards share the port as the model assumes), all-gather."""
    from tutorial_lib.engine.comm_hooks import _collective, build_groups

    groups = build_groups("hierarchical", local_world_size)
    g = groups.local_world_size
    padded = torch.ones(-(-nbytes // 4 // g) * g, device=device)
    shard = padded.new_empty(padded.numel() // g)
    alone = dist.get_rank() % g == 0
    phases = {
        "reduce_scatter": lambda: _collective("reduce_scatter")(shard, padded, group=groups.intra),
        "inter_allreduce": lambda: dist.all_reduce(shard, group=groups.inter),
        "inter_allreduce_one_shard_alone": lambda: dist.all_reduce(shard, group=groups.inter) if alone else None,
        "all_gather": lambda: _collective("all_gather")(padded, shard, group=groups.intra),
    }
    seconds = {name: [] for name in phases}
    for _ in range(repeats + 1):  # the first round warms up
        for name, run in phases.items():
            dist.barrier()
            begin = time.perf_counter()
            run()
            seconds[name].append(time.perf_counter() - begin)
    out = {"bytes": padded.numel() * 4, "shard_bytes": shard.numel() * 4}
    for name, values in seconds.items():
        store(out, f"{name}_s", Spread.of(_slowest(values[1:], device)))
    return out
