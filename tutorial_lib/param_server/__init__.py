"""Parameter server with bounded staleness vs all-reduce, for real, on CPU (gloo).

Rank 0 holds the weights; worker ranks 1..W pull weights, compute the gradient of a small MLP
on their shard of scikit-learn's handwritten digits, and push it back with point-to-point
send/recv of flattened float64 tensors. The server applies the average of the W gradients of
round r (every worker's r-th batch) once all of them have arrived; that update makes weight
version r+1.

Staleness bound s: a worker may start round r on any version >= r - s. With s = 0 it must wait
for version r, which is bulk-synchronous SGD: the trained weights equal all-reduce data
parallelism and single-process SGD on the concatenated batch (same shuffle, same shards).
With s > 0, fast workers run ahead on stale weights instead of waiting for stragglers.

    python -m tutorial_lib.param_server --workers 2 --staleness 0 1 4 --steps 100 \\
        --straggler-delay 0.02 --straggler-prob 0.2 --json runs/ps.jsonl
"""

from __future__ import annotations

import datetime
import random
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from tutorial_lib import compat, free_port
from tutorial_lib.param_server.checks import ExperimentError as ExperimentError  # the API raises it
from tutorial_lib.param_server.checks import check_experiment

DTYPE = torch.float64  # exact comparisons between the three ways of training
PUSH_HEADER = 3  # round, weight version the gradient was computed on, batch loss


@dataclass(frozen=True)
class ExperimentConfig:
    """One experiment: W workers, per-worker batch, plain SGD, optional random stragglers."""

    workers: int = 2
    steps: int = 60
    per_worker_batch: int = 32
    lr: float = 0.5
    hidden: int = 32
    seed: int = 0
    test_images: int = 297
    straggler_delay_s: float = 0.0
    straggler_prob: float = 0.0


@dataclass
class RunResult:
    """Per-step records of one run and its final flattened weights."""

    name: str
    mode: str  # "parameter_server", "allreduce" or "sgd"
    staleness_bound: int
    records: list[dict]
    final_weights: torch.Tensor


@dataclass(frozen=True)
class Digits:
    """Train and test split of the digits as float64 features in [0, 1] and int64 labels."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor


def load_digits_split(cfg: ExperimentConfig) -> Digits:
    """scikit-learn's 1,797 8x8 digits (bundled, no download), shuffled once by ``cfg.seed``."""
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    order = np.random.default_rng(cfg.seed).permutation(len(y))
    x = torch.tensor(x[order] / 16.0, dtype=DTYPE)
    y = torch.tensor(y[order], dtype=torch.int64)
    cut = len(y) - cfg.test_images
    return Digits(x[:cut], y[:cut], x[cut:], y[cut:])


def build_model(cfg: ExperimentConfig) -> nn.Module:
    """The 64-hidden-10 MLP, initialised identically in every process."""
    with torch.random.fork_rng(devices=[]):  # CPU only: a forked worker must not touch CUDA
        torch.manual_seed(cfg.seed)
        return nn.Sequential(nn.Linear(64, cfg.hidden), nn.ReLU(),
                             nn.Linear(cfg.hidden, 10)).to(DTYPE)


def shard_indices(cfg: ExperimentConfig, train_size: int, step: int, worker: int) -> np.ndarray:
    """Worker ``worker``'s slice of step ``step``'s global batch: one shuffle per epoch,
    partitioned across workers (the shuffling Goyal et al. recommend)."""
    global_batch = cfg.workers * cfg.per_worker_batch
    steps_per_epoch = train_size // global_batch
    if steps_per_epoch == 0:
        raise ValueError(f"global batch {global_batch} exceeds the {train_size} train images")
    epoch, offset = divmod(step, steps_per_epoch)
    order = np.random.default_rng([cfg.seed, epoch]).permutation(train_size)
    start = offset * global_batch + worker * cfg.per_worker_batch
    return order[start:start + cfg.per_worker_batch]


def loss_and_gradient(model: nn.Module, weights: torch.Tensor, x: torch.Tensor,
                      y: torch.Tensor) -> tuple[float, torch.Tensor]:
    """Mean cross-entropy of ``model`` with ``weights`` on (x, y) and its flattened gradient."""
    vector_to_parameters(weights, model.parameters())
    model.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    return loss.item(), torch.cat([p.grad.reshape(-1) for p in model.parameters()])


@torch.no_grad()
def evaluate(model: nn.Module, weights: torch.Tensor, x: torch.Tensor,
             y: torch.Tensor) -> tuple[float, float]:
    """(mean cross-entropy, accuracy) of ``weights`` on (x, y)."""
    vector_to_parameters(weights, model.parameters())
    logits = model(x)
    return F.cross_entropy(logits, y).item(), (logits.argmax(1) == y).double().mean().item()


class _Recorder:
    """Builds the per-step records: full train-set loss, test accuracy, staleness seen."""

    def __init__(self, model: nn.Module, data: Digits):
        self.model, self.data, self.start = model, data, time.perf_counter()
        self.records: list[dict] = []
        self.final: torch.Tensor | None = None

    def add(self, step: int, weights: torch.Tensor, batch_loss: float,
            staleness: list[int]) -> None:
        wall = time.perf_counter() - self.start
        loss, _ = evaluate(self.model, weights, self.data.x_train, self.data.y_train)
        _, accuracy = evaluate(self.model, weights, self.data.x_test, self.data.y_test)
        self.records.append({"step": step, "wall_s": wall, "loss": loss, "accuracy": accuracy,
                             "batch_loss": batch_loss, "staleness_max": max(staleness),
                             "staleness_mean": sum(staleness) / len(staleness)})


class _Straggler:
    """Sleeps ``delay`` with probability ``prob`` per step, the same draws in every run."""

    def __init__(self, cfg: ExperimentConfig, worker: int):
        self.cfg, self.rng = cfg, random.Random(cfg.seed * 100_003 + worker)

    def maybe_sleep(self) -> None:
        if self.rng.random() < self.cfg.straggler_prob:
            time.sleep(self.cfg.straggler_delay_s)


def _serve(cfg: ExperimentConfig, staleness: int, model: nn.Module, data: Digits) -> _Recorder:
    """Rank 0: hand out weights within the staleness bound, apply each complete round."""
    weights = parameters_to_vector(model.parameters()).detach().clone()
    message = torch.empty(PUSH_HEADER + weights.numel(), dtype=DTYPE)
    recorder, version = _Recorder(model, data), 0
    arrivals: dict[int, dict[int, tuple]] = defaultdict(dict)  # round -> worker -> push
    waiting: dict[int, int] = {rank: 0 for rank in range(1, cfg.workers + 1)}  # rank -> round
    while version < cfg.steps:
        for rank, needed_round in sorted(waiting.items()):
            if version >= needed_round - staleness:
                dist.send(torch.cat([torch.tensor([version], dtype=DTYPE), weights]), dst=rank)
                del waiting[rank]
        rank = dist.recv(message)
        rnd, used = int(message[0]), int(message[1])
        arrivals[rnd][rank] = (message[PUSH_HEADER:].clone(), used, message[2].item())
        if rnd + 1 < cfg.steps:
            waiting[rank] = rnd + 1
        while len(arrivals.get(version, ())) == cfg.workers:
            complete = arrivals.pop(version)
            pushes = [complete[r] for r in sorted(complete)]
            weights -= cfg.lr * (torch.stack([g for g, _, _ in pushes]).sum(0) / cfg.workers)
            recorder.add(version + 1, weights, sum(p[2] for p in pushes) / cfg.workers,
                         [version - used for _, used, _ in pushes])
            version += 1
    recorder.final = weights
    return recorder


def _work(cfg: ExperimentConfig, worker: int, model: nn.Module, data: Digits) -> None:
    """Worker rank: pull weights, compute the gradient on its shard, push it; ``steps`` times."""
    size = parameters_to_vector(model.parameters()).numel()
    received = torch.empty(1 + size, dtype=DTYPE)
    straggler = _Straggler(cfg, worker)
    for rnd in range(cfg.steps):
        dist.recv(received, src=0)
        idx = shard_indices(cfg, len(data.y_train), rnd, worker)
        loss, grad = loss_and_gradient(model, received[1:], data.x_train[idx],
                                       data.y_train[idx])
        straggler.maybe_sleep()
        header = torch.tensor([rnd, received[0].item(), loss], dtype=DTYPE)
        dist.send(torch.cat([header, grad]), dst=0)


def _allreduce(cfg: ExperimentConfig, worker: int, model: nn.Module, data: Digits,
               group) -> _Recorder:
    """Worker rank of synchronous data parallelism: sum gradients (and losses) with all-reduce."""
    weights = parameters_to_vector(model.parameters()).detach().clone()
    recorder, straggler = _Recorder(model, data), _Straggler(cfg, worker)
    for step in range(cfg.steps):
        idx = shard_indices(cfg, len(data.y_train), step, worker)
        loss, grad = loss_and_gradient(model, weights, data.x_train[idx], data.y_train[idx])
        straggler.maybe_sleep()
        packed = torch.cat([grad, torch.tensor([loss], dtype=DTYPE)])
        dist.all_reduce(packed, group=group)
        weights -= cfg.lr * (packed[:-1] / cfg.workers)
        if worker == 0:
            recorder.add(step + 1, weights, packed[-1].item() / cfg.workers, [0])
    recorder.final = weights
    return recorder


def _process(rank: int, world: int, port: int, cfg: ExperimentConfig, data: Digits,
             plan: list[tuple], out_dir: str) -> None:
    """Entry point of every started rank: run each planned (name, mode, staleness) in turn."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=120))
    workers_group = dist.new_group(list(range(1, world)))
    try:
        for name, mode, staleness in plan:
            model = build_model(cfg)
            dist.barrier()
            recorder = None
            if mode == "parameter_server":
                if rank == 0:
                    recorder = _serve(cfg, staleness, model, data)
                else:
                    _work(cfg, rank - 1, model, data)
            elif rank > 0:
                recorder = _allreduce(cfg, rank - 1, model, data, workers_group)
            if recorder is not None and (mode == "parameter_server" or rank == 1):
                torch.save({"records": recorder.records, "weights": recorder.final},
                           Path(out_dir) / f"{name}.pt")
        dist.barrier()
    finally:
        compat.leave_process_group()


def default_start_method() -> str:
    """``fork`` on Linux (children start in milliseconds, torch already imported), else
    ``spawn`` (a fresh interpreter per rank: slower, but safe everywhere)."""
    return "fork" if sys.platform == "linux" else "spawn"


def run_experiment(cfg: ExperimentConfig = ExperimentConfig(), staleness: tuple[int, ...] = (0,),
                   allreduce: bool = True, start_method: str | None = None,
                   ) -> dict[str, RunResult]:
    """Start 1 server + W workers once and run a parameter-server training per staleness bound
    (named ``ps_s<bound>``), plus all-reduce data parallelism (``allreduce``) if asked."""
    check_experiment(cfg, staleness)
    plan = [(f"ps_s{s}", "parameter_server", s) for s in staleness]
    if allreduce:
        plan.append(("allreduce", "allreduce", 0))
    data = load_digits_split(cfg)
    with tempfile.TemporaryDirectory(prefix="param_server_") as out_dir:
        args = (cfg.workers + 1, free_port(), cfg, data, plan, out_dir)
        mp.start_processes(_process, args=args, nprocs=cfg.workers + 1, join=True,
                           start_method=start_method or default_start_method())
        results = {}
        for name, mode, bound in plan:
            saved = torch.load(Path(out_dir) / f"{name}.pt", weights_only=True)
            results[name] = RunResult(name, mode, bound, saved["records"], saved["weights"])
    return results


def run_parameter_server(cfg: ExperimentConfig = ExperimentConfig(),
                         staleness: int = 0) -> RunResult:
    """One parameter-server run with staleness bound ``staleness``."""
    return run_experiment(cfg, (staleness,), allreduce=False)[f"ps_s{staleness}"]


def run_allreduce(cfg: ExperimentConfig = ExperimentConfig()) -> RunResult:
    """One all-reduce (synchronous data-parallel) run."""
    return run_experiment(cfg, (), allreduce=True)["allreduce"]


def run_sgd_reference(cfg: ExperimentConfig = ExperimentConfig()) -> RunResult:
    """Single-process SGD on the concatenated global batch: what s = 0 must reproduce."""
    data, model = load_digits_split(cfg), build_model(cfg)
    weights = parameters_to_vector(model.parameters()).detach().clone()
    recorder = _Recorder(model, data)
    for step in range(cfg.steps):
        idx = np.concatenate([shard_indices(cfg, len(data.y_train), step, w)
                              for w in range(cfg.workers)])
        loss, grad = loss_and_gradient(model, weights, data.x_train[idx], data.y_train[idx])
        weights -= cfg.lr * grad
        recorder.add(step + 1, weights, loss, [0])
    return RunResult("sgd", "sgd", 0, recorder.records, weights)


def summary_lines(results: dict[str, RunResult]) -> list[str]:
    """One line per run: final loss and accuracy, wall time, staleness seen."""
    lines = [f"{'run':<10} {'steps':>5} {'loss':>7} {'test acc':>8} {'wall s':>7} "
             f"{'max stale':>9} {'mean stale':>10}"]
    for name, run in results.items():
        last = run.records[-1]
        mean_stale = np.mean([r["staleness_mean"] for r in run.records])
        lines.append(f"{name:<10} {last['step']:>5} {last['loss']:>7.4f} "
                     f"{last['accuracy']:>8.3f} {last['wall_s']:>7.2f} "
                     f"{max(r['staleness_max'] for r in run.records):>9} {mean_stale:>10.2f}")
    return lines

