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
* :func:`interleave_records`: the same for measurements that return whole records (loader, e2e).
* :func:`job_threads`: on a CPU, measure on the threads a training job gets, so benchmark and jobs agree;
  :func:`torch_threads`: on a given number of threads (one, as in a DataLoader worker).

Built on these: :mod:`tutorial_lib.bench.rounds` (benchmarks re-timed for the notebooks) and
:func:`tutorial_lib.bench.comm.allreduce_rounds`. Notebooks word their conclusions from these spreads
with :mod:`tutorial_lib.text.claims`.
"""

from __future__ import annotations

import math
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

    def text(self, digits: int | None = None) -> str:
        """``88.2 (80.1-95.0)``: median, then the range; ``digits`` decimals, by default those of
        :func:`significant_decimals` for the median, the rounding every place that shows a Spread uses (01 showed
        one speed as 0.7 and 0.714, 02 one cost as 0.7 (0.5-0.8) and 0.717 (0.516-0.751))."""
        digits = significant_decimals(self.median) if digits is None else digits
        return f"{self.median:,.{digits}f} ({self.low:,.{digits}f}-{self.high:,.{digits}f})"


def significant_decimals(value: float) -> int:
    """Decimals that keep about three significant digits (at least one place below 100)."""
    if not math.isfinite(value) or value == 0:
        return 1
    return max(1, 2 - int(math.floor(math.log10(abs(value)))))


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
def torch_threads(count: int):
    """Run the block with torch's intra-op thread pool set to ``count`` threads, then restore it."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(max(1, int(count)))
    try:
        yield torch.get_num_threads()
    finally:
        torch.set_num_threads(before)


@contextmanager
def job_threads(device_type: str):
    """Run the block on the CPU threads a training job gets, so a benchmark and the course's jobs agree.

    :mod:`tutorial_lib.jobs` starts CPU jobs with ``OMP_NUM_THREADS`` (1 unless set); with torch's
    default of one thread per core instead, a step on a busy machine can be several times slower
    (its threads wait for each other). On a GPU nothing changes.
    """
    import torch

    count = int(os.environ.get("OMP_NUM_THREADS") or 1) if device_type == "cpu" else torch.get_num_threads()
    with torch_threads(count) as threads:
        yield threads


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
