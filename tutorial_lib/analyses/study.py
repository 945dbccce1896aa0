"""Multi-node jobs and scaling studies, read back from their run directories (notebooks 05 and 06).

    from tutorial_lib import jobs
    from tutorial_lib.analyses import study
    runs = jobs.sweep(cfg, over="ranks_per_node", values=[1, 2])
    ...                                   # wait / monitor.watch(runs)
    study.scaling_table(runs)             # reference 000's table: GPUs, nodes, batch, img/s, times, top-1/5
    study.collect(runs)                   # the same numbers, unformatted (for plots)

The published studies and the scaling model's projections beside these runs are in
:mod:`tutorial_lib.analyses.reference`. :func:`hosts_table` shows which node each rank ran on (notebook 05); the
job as the scheduler sees it (its batch script, command, queue state and log) is in
:mod:`tutorial_lib.analyses.batch_jobs`.

Everything here reads the run directory contract only (``config.json``, ``job.json``,
``metrics.jsonl``), so it works on jobs from either backend, on attached jobs after a kernel restart,
and on plain run-directory paths.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from tutorial_lib.rundir.layout import CONFIG_FILE, JOB_FILE
from tutorial_lib.rundir.metrics import read_metrics
from tutorial_lib.scaling import IMAGENET_TRAIN_IMAGES, format_duration

REFERENCE_EPOCHS = 90  # reference 000 trains every run for 90 epochs


# ------------------------------------------------------------ run directories
def _ranks_per_node(spec: dict, default: int) -> int:
    """Ranks per node of a job record (``gpus_per_node`` in records written before the rename)."""
    return spec.get("ranks_per_node", spec.get("gpus_per_node", default))


def read_json(path: Path) -> dict:
    """A run directory's JSON file (config.json, job.json) as a dict; {} where it is missing or unreadable."""
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def run_dir_of(run) -> Path:
    """The run directory of a Job, or of a run directory's path."""
    if isinstance(run, (str, os.PathLike)):
        return Path(run)
    if hasattr(run, "run_dir"):
        return Path(run.run_dir)
    raise TypeError(f"expected a Job or a run directory, got {type(run).__name__}")


def hosts_table(run) -> pd.DataFrame:
    """Which node each rank ran on, from the run's ``config.json`` (``hosts``, in rank order)."""
    hosts = read_json(run_dir_of(run) / CONFIG_FILE).get("hosts")
    if not hosts:
        raise ValueError(f"{run_dir_of(run)}: config.json has no 'hosts' yet. Fix: wait until the job has started "
                         "(batch_jobs.wait_for_event(job, 'start')).")
    return pd.DataFrame({"rank": range(len(hosts)), "node": hosts}).set_index("rank")


# ----------------------------------------------------------- scaling study
def _used_epochs(epoch_records: Sequence[Mapping]) -> list[tuple[float, float | None]]:
    """(images/s, epoch time) of the epochs a run's throughput is taken from: all but the first where there
    are two or more (the first carries one-off costs: start-up, allocator and cuDNN warm-up, torch.compile)."""
    rates = [(r["images_per_sec"], r.get("epoch_time")) for r in epoch_records if r.get("images_per_sec")]
    return rates[1:] if len(rates) > 1 else rates


def measured_throughput(epoch_records: Sequence[Mapping]) -> float:
    """Global training images/s of a run, from its ``epoch`` events.

    The first epoch carries one-off costs (process start-up, allocator and cuDNN warm-up,
    torch.compile), so with two or more epochs it is left out and the rest are averaged
    (total images / total time, i.e. weighted by epoch time).
    """
    used = _used_epochs(epoch_records)
    if not used:
        return math.nan
    if all(t for _, t in used):
        return sum(rate * t for rate, t in used) / sum(t for _, t in used)
    return sum(rate for rate, _ in used) / len(used)


def epoch_spread(epoch_records: Sequence[Mapping]):
    """The run's throughput with the spread it has: :func:`measured_throughput` and the range of the same
    epochs' own rates (one run measures no run-to-run noise; its epochs are what it can show)."""
    from tutorial_lib.bench.timing import Spread

    used = [rate for rate, _ in _used_epochs(epoch_records)]
    if not used:
        return None
    return Spread(measured_throughput(epoch_records), min(used), max(used), tuple(used))


def run_record(run) -> dict:
    """One finished run's scaling numbers, read from its run directory (a Job or a path).

    Ranks and nodes come from ``job.json`` (the resources asked for), else from ``config.json``.
    Raises ValueError naming the run if it logged no epoch (it failed, or has not finished one).
    """
    run_dir = run_dir_of(run)
    config = read_json(run_dir / CONFIG_FILE)
    spec = read_json(run_dir / JOB_FILE).get("spec", {})
    events = read_metrics(run_dir)
    epochs = [r for r in events if r.get("event") == "epoch"]
    if not epochs:
        raise ValueError(f"{run_dir.name}: no epoch was logged in {run_dir}, so it has no throughput or "
                         "accuracy yet. Fix: wait for the job (job.wait()), or read job.logs() to see why it "
                         "stopped.")
    start = next((r for r in events if r.get("event") in ("start", "resume")), {})
    world = config.get("world_size") or start.get("world_size") or \
        (spec.get("nodes", 1) * _ranks_per_node(spec, 1))
    hosts = config.get("hosts") or start.get("hosts") or []
    nodes = spec.get("nodes") or len(set(hosts)) or 1
    last = epochs[-1]
    rate = epoch_spread(epochs)
    return {
        "name": config.get("name") or run_dir.name,
        "gpus": int(world),
        "nodes": int(nodes),
        "gpus_per_node": int(_ranks_per_node(spec, 0) or max(1, int(world) // int(nodes))),
        "global_batch": int(config.get("global_batch") or start.get("global_batch")
                            or int(world) * int(config.get("batch_size", 0))),
        "images_per_sec": rate.median,
        "images_per_sec_low": rate.low,
        "images_per_sec_high": rate.high,
        "epochs_measured": len(rate.samples),
        "epoch_rates": rate.samples,
        "epochs_run": int(last.get("epoch", len(epochs))),
        "measured_epoch_s": float(sum(r.get("epoch_time", math.nan) for r in epochs) / len(epochs)),
        "top1": float(last.get("top1", math.nan)),
        "top5": float(last.get("top5", math.nan)),
        "hosts": sorted(set(hosts)),
        "on_gpu": str(config["device"]).startswith("cuda") if "device" in config else None,
        "arch": config.get("arch"),
        "image_size": config.get("image_size"),
    }


def rank_unit(frame: pd.DataFrame) -> str:
    """What a rank of these runs was: ``"CPU ranks"`` (a CPU process per rank) where the runs recorded a
    device and none was a GPU, else ``"GPUs"``: labels must say what ran."""
    known = frame["on_gpu"].dropna() if "on_gpu" in frame else []
    return "CPU ranks" if len(known) and not any(known) else "GPUs"


def projection_basis(record: Mapping, ranks: bool = True) -> str:
    """What a projection from this run's measured speed projects from, for the sentence that states it:
    ``"resnet18 at 16 px on 1 CPU rank"`` (model, image size, device; parts the run did not record are left
    out); without ``ranks`` the count is left out (``"resnet18 at 16 px on CPU ranks"``)."""
    unit = rank_unit(pd.DataFrame([{"on_gpu": record.get("on_gpu")}]))
    count = int(record.get("gpus", 1))
    what = " at ".join(str(part) for part in (record.get("arch"), record.get("image_size") and
                                              f"{record['image_size']} px") if part)
    on = f"{count} {unit if count != 1 else unit[:-1]}" if ranks else unit
    return f"{what} on {on}" if what else on


def time_projection_note(results: pd.DataFrame, epochs: float = REFERENCE_EPOCHS) -> str:
    """The sentence that goes with :func:`scaling_table`'s projected ImageNet times: what they project from
    (model, image size, device of these runs) and that they are not this model's ImageNet training times."""
    basis = projection_basis(results.iloc[0].to_dict(), ranks=False)
    return (f"The ImageNet times are projected, not measured: {epochs:g} epochs of {IMAGENET_TRAIN_IMAGES:,} images "
            f"at the img/s each run measured for {basis}. They hold only for that model, "
            "image size and device: the HAL benchmark's ResNet-50 at 224 px on V100 GPUs trains at another speed "
            "(its own rows are below).")


def projected_time_s(images_per_sec: float, epochs: float = REFERENCE_EPOCHS,
                     dataset_images: int = IMAGENET_TRAIN_IMAGES) -> float:
    """Seconds to train ``epochs`` epochs of ``dataset_images`` images at ``images_per_sec`` (steps only)."""
    if not images_per_sec or images_per_sec <= 0 or math.isnan(images_per_sec):
        return math.nan
    return epochs * dataset_images / images_per_sec


def collect(runs, epochs: float = REFERENCE_EPOCHS, dataset_images: int = IMAGENET_TRAIN_IMAGES) -> pd.DataFrame:
    """One row per run, fewest GPUs first: the measured numbers plus efficiency and projections.

    ``runs``: Jobs, run directories, or records already made by :func:`run_record`.
    ``efficiency`` = (throughput per GPU) / (throughput per GPU of the smallest run): 1.0 is linear
    scaling. ``epoch_s`` / ``time_to_train_s``: one epoch / ``epochs`` epochs of ``dataset_images``
    images (ImageNet-1k by default) at the measured throughput, training steps only (no validation,
    no start-up).
    """
    records = [dict(r) if isinstance(r, Mapping) else run_record(r) for r in runs]
    if not records:
        raise ValueError("collect: no runs given. Fix: pass the Jobs of a finished sweep.")
    frame = pd.DataFrame.from_records(records).sort_values(["gpus", "nodes"], kind="stable").reset_index(drop=True)
    per_gpu = frame["images_per_sec"] / frame["gpus"]
    frame["efficiency"] = per_gpu / per_gpu.iloc[0]
    if {"images_per_sec_low", "images_per_sec_high"} <= set(frame.columns):
        # the extremes the ranges allow: this run at its slowest epoch against the smallest run at its fastest
        low, high = frame["images_per_sec_low"] / frame["gpus"], frame["images_per_sec_high"] / frame["gpus"]
        frame["efficiency_low"] = low / high.iloc[0]
        frame["efficiency_high"] = high / low.iloc[0]
    frame["epoch_s"] = dataset_images / frame["images_per_sec"]
    frame["time_to_train_s"] = [projected_time_s(v, epochs, dataset_images) for v in frame["images_per_sec"]]
    return frame


def single_run_note(results: pd.DataFrame) -> str:
    """What a figure or table of :func:`collect`'s runs shows: one run per point, and the spread it has (the
    range of its per-epoch speeds), or that it has none (one epoch)."""
    measured = int(results["epochs_measured"].min()) if "epochs_measured" in results else 1
    if measured < 2:
        return "one run per point, one epoch measured: no spread"
    return "one run per point; whiskers: the range of its per-epoch speeds, the first epoch left out"


def results_table(results: pd.DataFrame) -> pd.DataFrame:
    """:func:`collect`'s runs as a notebook shows them: ranks (GPUs or CPU ranks), nodes, global batch, the
    throughput the study uses (time-weighted mean of the measured epochs) with the range of those epochs'
    own rates, and the efficiency with the range those ranges allow; a larger run that
    :func:`tutorial_lib.text.verdicts.scaling_verdict` does not tell from the smallest shows its efficiency
    range only, the efficiency column saying "not distinguishable here". Column names say what each number is."""
    unit = rank_unit(results)
    table = pd.DataFrame({
        "run": results["name"], unit: results["gpus"], "nodes": results["nodes"],
        "global batch": results["global_batch"],
        f"{throughput_label(results)} (one run)": results["images_per_sec"].round(1),
        "img/s per epoch: range": [f"{lo:.1f}-{hi:.1f}" for lo, hi in
                                   zip(results["images_per_sec_low"], results["images_per_sec_high"], strict=True)],
        "efficiency (%)": efficiency_cells(results, ranges=False),
        "efficiency: range allowed (%)": [f"{100 * lo:.0f}-{100 * hi:.0f}" for lo, hi in
                                          zip(results["efficiency_low"], results["efficiency_high"], strict=True)],
    })
    return table.set_index("run")


def _duration(seconds: float) -> str:
    return "-" if seconds is None or (isinstance(seconds, float) and math.isnan(seconds)) else format_duration(seconds)


def throughput_label(frame: pd.DataFrame) -> str:
    """What a :func:`collect` frame's ``images_per_sec`` is, for a column name: the time-weighted mean of the
    epochs measured (the first left out when there are two or more), not the last epoch the monitor shows (the
    issue-44 read of 06: 242.0 under the monitor, 210.974 in the table, one of them labelled)."""
    if "epochs_run" not in frame or frame["epochs_run"].isna().all():
        return "img/s"  # a published study's logged throughput
    return "img/s, epoch 1 only" if int(frame["epochs_run"].min()) < 2 else "img/s, mean of epochs 2 on"


def readable(frame: pd.DataFrame, epochs: float = REFERENCE_EPOCHS, time_note: str = "projected") -> pd.DataFrame:
    """A :func:`collect`-style frame in reference 000's table form, numbers rounded, times as 1h07m51s."""
    label = f"{epochs:g}"
    table = pd.DataFrame({
        "run": frame["name"],
        rank_unit(frame): frame["gpus"].astype(int),
        "nodes": frame["nodes"].astype(int),
        "global batch": frame["global_batch"].astype(int),
        f"throughput ({throughput_label(frame)})": frame["images_per_sec"].round(1),
        "throughput efficiency (%)": efficiency_cells(frame),
        f"ImageNet epoch ({time_note})": [_duration(s) for s in frame["epoch_s"]],
        f"{label} epochs ({time_note})": [_duration(s) for s in frame["time_to_train_s"]],
        "top-1 (%)": frame["top1"].round(1),
        "top-5 (%)": frame["top5"].round(1),
    })
    return table.set_index("run")


def efficiency_cells(frame: pd.DataFrame, ranges: bool = True) -> list:
    """An efficiency column (%): a published study's numbers as they are; for measured runs (whose epochs give
    a range) the smallest run's 100.0 and each larger run's efficiency decided as :func:`scaling_claim` decides
    it (:func:`tutorial_lib.text.verdicts.scaling_verdict`): the percentage (with the range its epochs allow,
    where ``ranges``) where that decision ranks the two runs, else "not distinguishable here" and no number
    (r44h's read of 06: a bare 28.7 in the HAL-form table beside a sentence calling it not distinguishable)."""
    from tutorial_lib.bench.timing import Spread
    from tutorial_lib.text.verdicts import NOT_DISTINGUISHABLE, scaling_verdict

    percent = (100 * frame["efficiency"]).round(1)
    if "efficiency_low" not in frame:
        return list(percent)
    spreads = [spread for _, spread in run_spreads(frame)]
    cells = [f"{percent.iloc[0]:.1f}"]
    for index in range(1, len(frame)):
        row = frame.iloc[index]
        if scaling_verdict(spreads[index], spreads[0])[0] == NOT_DISTINGUISHABLE:
            cells.append(NOT_DISTINGUISHABLE)
        else:
            cells.append(Spread(100 * row["efficiency"], 100 * row["efficiency_low"], 100 * row["efficiency_high"])
                         .text() if ranges else f"{100 * row['efficiency']:.1f}")
    return cells


def scaling_table(runs, epochs: float = REFERENCE_EPOCHS, dataset_images: int = IMAGENET_TRAIN_IMAGES) -> pd.DataFrame:
    """Reference 000's results table for finished runs: GPUs, nodes, global batch, throughput,
    efficiency, projected ImageNet epoch and ``epochs``-epoch time, final top-1 and top-5.

    Top-1/top-5 are this run's own validation numbers (on its own data set), not ImageNet's.
    """
    return readable(collect(runs, epochs, dataset_images), epochs)


def scaling_claim(results: pd.DataFrame, load: tuple | None = None):
    """What the study measured, from :func:`collect`'s runs: each larger run's throughput against the smallest
    one's, with their per-epoch ranges (:func:`tutorial_lib.text.verdicts.measured_scaling`); ``load``: this
    machine's load averages (default: read now, as the runs have just ended)."""
    from tutorial_lib.text import verdicts

    return verdicts.measured_scaling(run_spreads(results), rank_unit(results),
                                     os.getloadavg() if load is None else load, os.cpu_count())


def run_spreads(results: pd.DataFrame) -> list:
    """``(ranks, Spread of img/s)`` per run of :func:`collect`'s frame, the Spread its per-epoch range."""
    from tutorial_lib.bench.timing import Spread

    return [(int(row["gpus"]), Spread(row["images_per_sec"], row["images_per_sec_low"], row["images_per_sec_high"],
                                      tuple(row.get("epoch_rates", ()) or ())))
            for _, row in results.iterrows()]


def speedup_numbers(results: pd.DataFrame) -> dict:
    """The closing table's efficiency and speed-up of the largest run against the smallest, decided as
    :func:`scaling_claim` decides them (:func:`tutorial_lib.text.verdicts.scaling_verdict`): each a ratio with
    the range the runs' epochs allow where that decision ranks the two runs, else "not distinguishable here"
    with the reason (each run's median and range stand beside it in the table). Empty for fewer than two runs."""
    from tutorial_lib.bench.timing import Spread
    from tutorial_lib.text.verdicts import NOT_DISTINGUISHABLE, scaling_verdict

    if len(results) < 2:
        return {}
    unit, smallest, largest = rank_unit(results), results.iloc[0], results.iloc[-1]
    (_, base), (_, top) = run_spreads(results)[0], run_spreads(results)[-1]
    verdict, why = scaling_verdict(top, base)
    efficiency = f"throughput efficiency, {unit} = {largest['gpus']} (%)"
    speedup = f"measured speed-up, {unit} = {smallest['gpus']} -> {largest['gpus']}"
    if verdict == NOT_DISTINGUISHABLE:
        said = NOT_DISTINGUISHABLE + (f" ({why})" if why else " (the runs' per-epoch ranges overlap)")
        return {efficiency: said, speedup: said}
    return {efficiency: Spread(100 * largest["efficiency"], 100 * largest["efficiency_low"],
                               100 * largest["efficiency_high"]),
            speedup: Spread(top.median / base.median, top.low / base.high, top.high / base.low)}


def int_list(value) -> list[int]:
    """A list of integers from a notebook parameter: ``[1, 2]``, ``"[1, 2]"`` or ``"1,2"`` (papermill ``-p``
    passes text)."""
    if isinstance(value, str):
        value = [v for v in re.split(r"[\s,\[\]]+", value) if v]
    elif isinstance(value, int):
        value = [value]
    try:
        numbers = [int(v) for v in value]
        if any(isinstance(v, float) and v != int(v) for v in value):
            raise ValueError
    except (TypeError, ValueError):
        raise ValueError(f"expected a list of integers such as [1, 2, 4], got {value!r}") from None
    if not numbers or any(n < 1 for n in numbers):
        raise ValueError(f"expected one or more integers >= 1, got {value!r}")
    return numbers


def plot_scaling_results(results: pd.DataFrame, ax_scale=None, ax_eff=None):
    """Notebook 06's two panels for :func:`collect`'s runs: throughput against ideal scaling and the
    efficiency, each point one run with the range of its per-epoch speeds as a whisker (the title says so),
    on axes that name what a rank was. Returns the figure."""
    import matplotlib.pyplot as plt

    from tutorial_lib.figures import plots

    if ax_scale is None or ax_eff is None:
        _, (ax_scale, ax_eff) = plt.subplots(1, 2, figsize=(11, 4), layout="constrained")
    unit, note = rank_unit(results), single_run_note(results)
    rates = list(zip(results["images_per_sec_low"], results["images_per_sec_high"], strict=True))
    efficiencies = list(zip(results["efficiency_low"], results["efficiency_high"], strict=True))
    plots.plot_scaling(results["gpus"], results["images_per_sec"], ax=ax_scale, unit=unit, ranges=rates, note=note)
    plots.plot_efficiency(results["gpus"], results["efficiency"], ax=ax_eff, unit=unit, ranges=efficiencies,
                          note=note)
    return ax_scale.figure


def accuracy_runs(runs) -> dict[str, pd.DataFrame]:
    """``{"<ranks> GPUs (or CPU ranks) on <nodes> nodes, batch <B>": epoch events}`` for
    :func:`tutorial_lib.figures.plots.plot_accuracy`."""
    curves = {}
    for run in runs:
        record = run_record(run)
        gpus, nodes = record["gpus"], record["nodes"]
        unit = rank_unit(pd.DataFrame([record]))
        label = (f"{gpus} {unit if gpus > 1 else unit[:-1]} on {nodes} node{'s' if nodes > 1 else ''}, "
                 f"batch {record['global_batch']}")
        curves[label] = pd.DataFrame([r for r in read_metrics(run_dir_of(run)) if r.get("event") == "epoch"])
    return curves
