"""Speeds that hold on a busy machine: minimum durations, repeats, interleaving, median and spread.

A speed timed once, over a few steps, on a machine where other work runs, can be off by a factor of
ten. Here every setting is timed for at least ``min_time`` seconds per round (not a fixed step
count), the settings take turns round-robin for ``repeats`` rounds (so a burst of load hits all of
them, not one), and the result is the median over the rounds with its spread (lowest and highest
round). Two settings are told apart only when their spreads do not overlap
(:func:`distinguishable`); otherwise a notebook says "not distinguishable here".

* :class:`Spread`: median, low, high of a set of samples.
* :func:`interleave`: round-robin repeats of several measurements, each returning one sample.
* :func:`step_rate`: calls per second of a callable, timed with ``torch.utils.benchmark`` over at
  least ``min_time`` (it synchronises CUDA around the timed blocks).
* :func:`retime_training`: re-time the ``train`` records of :func:`tutorial_lib.bench.sweep_training`
  interleaved, keeping their memory and FLOP figures.
* :func:`interleave_records`: the same for measurements that return whole records (loader, e2e).
* :func:`model_and_files`: the model alone and the trainer fed from JPEG files, interleaved (notebook 02).
* :func:`allreduce_rounds`: all-reduce times per message size, the sizes interleaved (``bench allreduce``).
* :func:`job_threads`: on a CPU, measure on the threads a training job gets, so benchmark and jobs agree.

Notebooks word their conclusions from these spreads with :mod:`tutorial_lib.lessons.claims`.
"""

from __future__ import annotations

import os
import statistics
from contextlib import contextmanager
from dataclasses import dataclass

DEFAULT_MIN_TIME = {"cpu": 0.5, "cuda": 2.0}  # seconds per setting per round
DEFAULT_REPEATS = 3
SPREAD_METHOD = "median of the rounds; spread = lowest..highest round (settings interleaved round-robin)"


@dataclass(frozen=True)
class Spread:
    """The median of repeated measurements and their range (``low``..``high``)."""

    median: float
    low: float
    high: float
    samples: tuple = ()

    @classmethod
    def of(cls, samples) -> Spread:
        """A Spread of the given samples (at least one)."""
        values = [float(v) for v in samples]
        if not values:
            raise ValueError("a spread needs at least one sample")
        return cls(statistics.median(values), min(values), max(values), tuple(values))

    @classmethod
    def from_record(cls, record: dict, key: str = "images_per_sec") -> Spread | None:
        """The spread stored in a record by :func:`store` (a plain value counts as no spread)."""
        if record is None or record.get("status", "ok") != "ok" or record.get(key) is None:
            return None
        value = float(record[key])
        return cls(value, float(record.get(f"{key}_low", value)), float(record.get(f"{key}_high", value)),
                   tuple(record.get(f"{key}_samples", (value,))))

    def text(self, digits: int = 1) -> str:
        """``88.2 (80.1-95.0)``: median, then the range."""
        return f"{self.median:,.{digits}f} ({self.low:,.{digits}f}-{self.high:,.{digits}f})"


def distinguishable(a: Spread, b: Spread) -> bool:
    """True when the two ranges do not overlap, so the measurements rank ``a`` and ``b``."""
    return a.low > b.high or b.low > a.high


def compare(a: Spread, b: Spread, name_a: str, name_b: str, what: str = "faster") -> str:
    """One sentence ranking two measurements, or saying they are not distinguishable here."""
    if not distinguishable(a, b):
        return f"{name_a} and {name_b} are not distinguishable here ({a.text()} vs {b.text()})"
    (fast, fast_name), (slow, slow_name) = sorted(((a, name_a), (b, name_b)), key=lambda x: -x[0].median)
    return f"{fast_name} is {what} than {slow_name}: {fast.median / slow.median:.2f}x ({fast.text()} vs {slow.text()})"


def store(record: dict, key: str, spread: Spread, digits: int = 6) -> dict:
    """Put ``spread`` into ``record`` as ``key`` (the median), ``key_low``, ``key_high``, ``key_samples``."""
    record[key] = spread.median
    record[f"{key}_low"], record[f"{key}_high"] = spread.low, spread.high
    record[f"{key}_samples"] = [round(v, digits) for v in spread.samples]
    return record


def resolve(device_type: str, min_time: float | None, repeats: int | None) -> tuple[float, int]:
    """``min_time`` and ``repeats`` with the device's defaults filled in."""
    return (DEFAULT_MIN_TIME.get(device_type, DEFAULT_MIN_TIME["cpu"]) if min_time is None else float(min_time),
            DEFAULT_REPEATS if repeats is None else max(1, int(repeats)))


@contextmanager
def job_threads(device_type: str):
    """Run the block on the CPU threads a training job gets, so a benchmark and the course's jobs agree.

    :mod:`tutorial_lib.jobs` starts CPU jobs with ``OMP_NUM_THREADS`` (1 unless set); with torch's
    default of one thread per core instead, a step on a busy machine can be several times slower
    (its threads wait for each other). On a GPU nothing changes.
    """
    import torch

    before = torch.get_num_threads()
    if device_type == "cpu":
        torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS") or 1)))
    try:
        yield torch.get_num_threads()
    finally:
        torch.set_num_threads(before)


def interleave(measurements: dict, repeats: int = DEFAULT_REPEATS) -> dict[str, Spread]:
    """Call each measurement once per round, round-robin, for ``repeats`` rounds; a Spread per name.

    ``measurements`` maps a name to a callable returning one sample. The order rotates every round
    so that no setting always runs first (right after a pause) or last.
    """
    names = list(measurements)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for round_index in range(repeats):
        shift = round_index % max(1, len(names))
        for name in names[shift:] + names[:shift]:
            samples[name].append(float(measurements[name]()))
    return {name: Spread.of(values) for name, values in samples.items()}


def interleave_records(measurements: dict, repeats: int = DEFAULT_REPEATS,
                       keys: tuple = ("images_per_sec",)) -> dict[str, dict]:
    """Like :func:`interleave`, for callables that return whole records (``status: "ok"`` or not).

    Returns one record per name: the first round's record with each of ``keys`` replaced by the
    median over the rounds and its spread stored beside it (:func:`store`), plus ``repeats``.
    A setting whose first round is not ``ok`` (skipped, say) is not run again.
    """
    names = list(measurements)
    rounds: dict[str, list[dict]] = {name: [] for name in names}
    for round_index in range(repeats):
        shift = round_index % max(1, len(names))
        for name in names[shift:] + names[:shift]:
            if rounds[name] and rounds[name][0].get("status") != "ok":
                continue
            rounds[name].append(measurements[name]())
    merged = {}
    for name, records in rounds.items():
        record = dict(records[0])
        if record.get("status") == "ok":
            for key in keys:
                values = [r[key] for r in records if r.get("status") == "ok" and r.get(key) is not None]
                if values:
                    store(record, key, Spread.of(values))
            record.update(repeats=len(records), spread_method=SPREAD_METHOD)
        merged[name] = record
    return merged


def step_rate(step, min_time: float) -> float:
    """Calls per second of ``step()``: the median block of ``torch.utils.benchmark``'s
    ``blocked_autorange``, which runs for at least ``min_time`` seconds, on as many threads as torch
    uses here."""
    import logging

    quiet = logging.getLogger("torch.utils.cpp_extension")  # importing benchmark warns "no CUDA runtime" on CPUs
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        from torch.utils import benchmark
    finally:
        quiet.setLevel(level)
    import torch

    # Timer runs on one thread unless told otherwise; the trainer uses torch's default, so must this
    timer = benchmark.Timer(stmt="step()", globals={"step": step}, num_threads=torch.get_num_threads())
    measurement = timer.blocked_autorange(min_run_time=min_time)
    return 1.0 / measurement.median


def retime_training(records: list[dict], min_time: float | None = None, repeats: int | None = None,
                    warmup: int | None = None, on_round=None) -> list[dict]:
    """Time the successful ``train`` records' settings again, interleaved, in this process.

    Every setting's trainer step (:class:`tutorial_lib.bench.TrainStep`) is built once and warmed
    up; then the settings take turns, each timed for at least ``min_time`` seconds per round, on the
    threads a training job gets (:func:`job_threads`).
    Returns copies of ``records`` whose ``images_per_sec`` is the median over the rounds, with
    ``images_per_sec_low``/``_high``/``_samples``, and whose step time and TFLOP/s follow from it;
    memory and FLOP counts stay those of the original measurement. Other records are kept as they are.
    """
    from tutorial_lib import bench

    ok = [i for i, r in enumerate(records) if r.get("status") == "ok" and r.get("kind") == "train"]
    if not ok:
        return [dict(r) for r in records]
    device = bench.resolve_device(records[ok[0]]["device"])
    min_time, repeats = resolve(device.type, min_time, repeats)
    warmup = bench.defaults(device)["warmup"] if warmup is None else warmup
    labels = {index: bench.setting_label(records[index]) for index in ok}
    with job_threads(device.type) as threads:
        steps = {index: _warm_step(records[index], device, warmup) for index in ok}
        spreads = interleave({labels[i]: (lambda i=i: records[i]["batch_size"] * step_rate(steps[i], min_time))
                              for i in ok}, repeats)
    steps.clear()
    bench.release_memory(device)
    out = []
    for index, record in enumerate(records):
        record = dict(record)
        if index in labels:
            spread = spreads[labels[index]]
            store(record, "images_per_sec", spread)
            record.update(step_time_ms=1000 * record["batch_size"] / spread.median, min_time_s=min_time,
                          repeats=repeats, timer="torch.utils.benchmark blocked_autorange", spread_method=SPREAD_METHOD,
                          torch_threads=threads)
            if record.get("flops_per_image"):
                record["achieved_tflops"] = record["flops_per_image"] * spread.median / 1e12
                record["fraction_of_matmul"] = record["achieved_tflops"] / record["matmul_tflops"]
            if on_round:
                on_round(record)
        out.append(record)
    return out


def _warm_step(record: dict, device, warmup: int):
    """A ready-to-time ``step()`` for one train record's settings (model built, warm-up steps run)."""
    from tutorial_lib import bench

    step = bench.synthetic_step(record, device)
    for _ in range(max(1, warmup)):
        step()
    bench.synchronize(device)
    return step


def bars(records: list[dict], key: str = "images_per_sec", label=None) -> tuple[list, list, list]:
    """(labels, medians, (low, high) ranges) of the ``ok`` records, for
    :func:`tutorial_lib.lessons.plots.plot_bars` with ``ranges``."""
    from tutorial_lib import bench

    label = label or bench.setting_label
    ok = [r for r in records if r.get("status") == "ok" and r.get(key) is not None]
    spreads = [Spread.from_record(r, key) for r in ok]
    return [label(r) for r in ok], [s.median for s in spreads], [(s.low, s.high) for s in spreads]


def speeds(records: list[dict], label=None, key: str = "images_per_sec", unit: str = "images/s") -> dict:
    """``{"<setting> images/s": Spread}`` of the ``ok`` records (for a notebook's summary)."""
    names, _, _ = bars(records, key, label)
    ok = [r for r in records if r.get("status") == "ok" and r.get(key) is not None]
    return {f"{name} {unit}": Spread.from_record(r, key) for name, r in zip(names, ok, strict=True)}


def model_and_files(data_dir, arch: str, precision: str, channels_last, batch_size: int, image_size: int,
                    workers: int, device="auto", min_time: float | None = None, repeats: int | None = None,
                    warmup: int | None = None, num_classes: int = 1000) -> tuple[dict, dict]:
    """The model alone (the trainer's step on batches already on the device) and the trainer fed
    from the JPEG files by its own loader (:func:`tutorial_lib.bench.data.measure_e2e`), timed
    interleaved: ``(model_record, e2e_record)``, each with the median and range of its images/s
    (the e2e record also of ``data_wait_fraction``), both on the threads a training job gets
    (:func:`job_threads`). ``num_classes``: the data set's classes."""
    from tutorial_lib import bench
    from tutorial_lib.bench import data as bench_data

    device = bench.resolve_device(device)
    min_time, repeats = resolve(device.type, min_time, repeats)
    model = bench.measure_training(arch, precision, channels_last, batch_size, image_size, 1, warmup, "none", device,
                                   num_classes=num_classes)
    if model.get("status") != "ok":
        return model, {**model, "kind": "e2e"}
    rounds: list[dict] = []

    def from_files() -> float:
        rounds.append(bench_data.measure_e2e(data_dir, arch, precision, model["channels_last"], batch_size,
                                             image_size, 1, warmup, workers, "none", device, reference=False,
                                             min_time=min_time))
        return rounds[-1].get("images_per_sec", float("nan"))

    with job_threads(device.type) as threads:
        step = _warm_step(model, device, bench.defaults(device)["warmup"] if warmup is None else warmup)
        spreads = interleave({"model": lambda: batch_size * step_rate(step, min_time), "files": from_files}, repeats)
    bench.release_memory(device)
    retimed = dict(model)
    store(retimed, "images_per_sec", spreads["model"])
    retimed.update(step_time_ms=1000 * batch_size / spreads["model"].median, min_time_s=min_time, repeats=repeats,
                   timer="torch.utils.benchmark blocked_autorange", spread_method=SPREAD_METHOD, torch_threads=threads)
    if retimed.get("flops_per_image"):
        retimed["achieved_tflops"] = retimed["flops_per_image"] * spreads["model"].median / 1e12
        retimed["fraction_of_matmul"] = retimed["achieved_tflops"] / retimed["matmul_tflops"]
    e2e = dict(rounds[0])
    if e2e.get("status") == "ok":
        store(e2e, "images_per_sec", spreads["files"])
        store(e2e, "data_wait_fraction", Spread.of([r["data_wait_fraction"] for r in rounds]))
        e2e.update(synthetic_images_per_sec=spreads["model"].median, min_time_s=min_time, repeats=repeats,
                   spread_method=SPREAD_METHOD, torch_threads=threads)
    return retimed, e2e


def allreduce_rounds(tensors: list, iters: int, warmup: int, repeats: int, min_time: float, device) -> list[dict]:
    """All-reduce times of each tensor, interleaved: call in every rank of a process group.

    Every tensor gets at least ``iters`` all-reduces per round, more if that would take under
    ``min_time`` seconds (all ranks agree on the count); the tensors take turns for ``repeats``
    rounds. Per tensor: ``bytes``, ``seconds`` (the slowest rank's mean per all-reduce, median over
    the rounds), ``seconds_low``/``_high``, ``algbw_GBps`` (and ``_low``/``_high``), ``iters``.
    """
    import math

    import torch
    import torch.distributed as dist

    from tutorial_lib.bench.compute import timed_windows

    def timed(tensor, count: int) -> float:
        return timed_windows(lambda n: [dist.all_reduce(tensor) for _ in range(n)], count, 1, device)[0]

    counts = []
    for tensor in tensors:
        for _ in range(warmup):
            dist.all_reduce(tensor)
        window = torch.tensor([timed(tensor, iters)], dtype=torch.float64, device=device)
        dist.all_reduce(window, op=dist.ReduceOp.MAX)
        counts.append(max(iters, math.ceil(iters * min_time / max(float(window.item()), 1e-9))))
    seconds = [[] for _ in tensors]
    for round_index in range(repeats):
        order = list(range(len(tensors)))
        order = order[round_index % len(order):] + order[:round_index % len(order)]
        for index in order:
            dist.barrier()
            seconds[index].append(timed(tensors[index], counts[index]) / counts[index])
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
