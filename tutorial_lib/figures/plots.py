"""Small matplotlib plots for the monitor, the notebooks and the batch report.

Every function takes data plus an optional matplotlib ``ax``; without one it makes a new figure
(through pyplot, so it shows inline in a notebook). Each returns the axes it drew on
(``ax.figure`` is the figure). Runs can be given as a list of :class:`tutorial_lib.jobs.Job`
(anything with ``.name`` and ``.metrics(event)``), or as a mapping ``label -> DataFrame`` (or a
list of metric records) holding that plot's event rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

from tutorial_lib.figures.readable import (
    add_note,
    has_data,
    keep_tick_labels_apart,
    mark_coinciding,
    place_legend,
    say_empty,
)


def _axes(ax, figsize=(6.4, 4.0)):
    if ax is not None:
        return ax
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=figsize, layout="constrained")[1]


def _runs(jobs, event: str) -> list[tuple[str, pd.DataFrame]]:
    """(label, DataFrame of ``event`` rows) for each run, in order."""
    if isinstance(jobs, Mapping):
        items = list(jobs.items())
    else:
        if not isinstance(jobs, Sequence):
            jobs = [jobs]
        items = [(getattr(job, "name", str(job)), job.metrics(event)) for job in jobs]
    runs = []
    for label, data in items:
        frame = data if isinstance(data, pd.DataFrame) else pd.DataFrame.from_records(list(data))
        if "event" in frame.columns:
            frame = frame[frame["event"] == event]
        runs.append((str(label), frame))
    return runs


LONG_NOTE = 90  # characters: a longer note on coinciding lines would squeeze a panel without its own legend


def _finish(ax, xlabel: str, ylabel: str, title: str, empty_note: str = "waiting for metrics...",
            legend: bool = True) -> None:
    """Labels and title; lines drawn on top of each other marked (:func:`readable.mark_coinciding`); the legend
    where it covers no data (``legend=False``: the caller draws one, e.g. the monitor's figure legend); an
    empty axes says ``empty_note`` and shows no numeric axis."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    if not has_data(ax):
        say_empty(ax, empty_note)
        return
    mark_coinciding(ax, named_at_most=None if legend else LONG_NOTE)  # without a legend, the caller's names them
    if legend:
        place_legend(ax, fontsize="small")


def run_color(index: int) -> str:
    """The colour of the ``index``-th run, the same in every panel (a run missing from one panel shifts no other)."""
    return f"C{index % 10}"


def _line_per_run(jobs, event: str, column: str, ax, **style):
    steps = []
    for index, (label, frame) in enumerate(_runs(jobs, event)):
        if {"step", column} <= set(frame.columns) and len(frame):
            marker = "o" if len(frame) < 3 else None  # a line of one point is only seen by its marker
            ax.plot(frame["step"], frame[column], label=label, color=run_color(index), marker=marker, **style)
            steps += list(frame["step"])
    if steps:
        whole_number_axis(ax, steps)
    return ax


def whole_number_axis(ax, values) -> None:
    """An x axis of counts (steps, epochs) with whole-number ticks only: the values themselves where they span
    less than two, else integer ticks (matplotlib's locator alone ticks 0.96 .. 1.04 around a single step)."""
    from matplotlib.ticker import MaxNLocator

    low, high = min(values), max(values)
    if high - low < 2:
        ax.set_xlim(low - 0.5, high + 0.5)
        ax.set_xticks(sorted({int(v) for v in values}))
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if low >= 0 > ax.get_xlim()[0]:  # matplotlib's margin: no step -12 before the first one
            ax.set_xlim(left=0)


def plot_throughput(jobs, ax=None, empty_note: str = "waiting for metrics...", legend: bool = True):
    """Global training throughput (images/s summed over all ranks) against the step, one line per run.

    ``empty_note`` is written on the axes while no run has a point (e.g. "no step logged" once they ended);
    ``legend=False`` leaves the legend to the caller (the monitor draws one for all its panels)."""
    ax = _line_per_run(jobs, "step", "images_per_sec", _axes(ax))
    _finish(ax, "training step", "throughput (images/s, all ranks)", "Throughput", empty_note, legend)
    return ax


def plot_loss(jobs, ax=None, empty_note: str = "waiting for metrics...", legend: bool = True):
    """Training loss (mean over the logging window and all ranks) against the step, one line per run."""
    ax = _line_per_run(jobs, "step", "loss", _axes(ax))
    _finish(ax, "training step", "training loss (cross-entropy)", "Training loss", empty_note, legend)
    return ax


def epoch_axis(ax, epochs: int) -> None:
    """An x axis of whole epochs 1..``epochs`` (a tick per epoch up to 12, else whole numbers): an epoch axis
    never shows 0.6 of an epoch, nor epochs that neither ran nor were planned."""
    from matplotlib.ticker import MaxNLocator

    epochs = max(1, int(epochs))
    ax.set_xlim(0.5, epochs + 0.5)
    if epochs <= 12:
        ax.set_xticks(range(1, epochs + 1))
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def plot_accuracy(jobs, ax=None, empty_note: str = "waiting for metrics...", legend: bool = True,
                  title: str = "Accuracy (top-1 solid, top-5 dashed)", name_missing: bool = True):
    """Validation top-1 (solid) and top-5 (dashed) accuracy against the epoch, one colour per run.

    The epoch axis spans the planned epochs (from the runs' ``start`` events when given), so a single
    epoch is a point at 1 of N, not a point on an axis zoomed to nothing. ``name_missing``: a run without an
    epoch (unfinished, failed, cancelled) is named in the panel with its state where the job has one (04's LARS
    figure drew SGD only and said nothing); the live monitor, whose table shows every job's state, passes False."""
    ax = _axes(ax)
    last_epoch, missing = 0, []
    for index, (label, frame) in enumerate(_runs(jobs, "epoch")):
        if not len(frame) or "top1" not in frame.columns:
            missing.append(label)
            continue
        color = run_color(index)
        ax.plot(frame["epoch"], frame["top1"], marker="o", color=color, label=f"{label} top-1")
        if "top5" in frame.columns:
            ax.plot(frame["epoch"], frame["top5"], linestyle="--", marker=".", color=color, label=f"{label} top-5")
        last_epoch = max(last_epoch, int(frame["epoch"].max()))
    if last_epoch:
        planned = [frame["epochs"].max() for _, frame in _runs(jobs, "start") if "epochs" in frame.columns]
        epoch_axis(ax, max([last_epoch] + [int(n) for n in planned if pd.notna(n)]))
    _finish(ax, "epoch", "validation accuracy (%)", title, empty_note, legend)
    if name_missing and missing and has_data(ax):
        states = {} if isinstance(jobs, Mapping) else {getattr(j, "name", ""): getattr(j, "state", None)
                                                       for j in (jobs if isinstance(jobs, Sequence) else [jobs])}
        add_note(ax, "(not drawn, no epoch logged: " + ", ".join(
            label + (f", {states[label]}" if states.get(label) else "") for label in missing) + ")")
    return ax


def plot_lr_schedules(schedules: Mapping[str, Sequence[float]], steps_per_epoch: int, ax=None, log: bool = True,
                      until: float | None = None, title: str = "Learning-rate schedules"):
    """Learning rate per optimiser step (``{label: [lr, ...]}``) against the epoch, one line per schedule.

    ``log``: a log y axis (default), on which every step decay by 10x is a step of the same height; on a
    linear axis the later decays (e.g. 0.032 -> 0.0032 after 3.2) are too small to see. Pass ``log=False``
    for a zoom on the warmup, which is linear in the LR. ``until``: only the first ``until`` epochs (a zoom
    draws the part it shows, so no line runs past the axis)."""
    ax = _axes(ax)
    for label, values in schedules.items():
        epochs = [step / steps_per_epoch for step in range(len(values))]
        shown = [(e, v) for e, v in zip(epochs, values, strict=True) if until is None or e <= until]
        ax.plot([e for e, _ in shown], [v for _, v in shown], label=str(label))
    ax.set_xlim(0, until if until is not None else max([len(v) / steps_per_epoch for v in schedules.values()] + [1]))
    if log:
        ax.set_yscale("log")
    _finish(ax, "epoch", "learning rate" + (" (log scale)" if log else ""), title)
    return ax


def _log2_gpu_axis(ax, gpus) -> None:
    from matplotlib.ticker import FixedLocator, NullLocator, ScalarFormatter

    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(sorted(set(gpus))))
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_locator(NullLocator())


def _singular(unit: str) -> str:
    return unit[:-1] if unit.endswith("s") else unit


def _whiskers(ax, xs, ys, ranges, color) -> None:
    """Black whiskers from each range's low to its high around the points (xs, ys)."""
    below = [max(0.0, y - low) for y, (low, _) in zip(ys, ranges, strict=True)]
    above = [max(0.0, high - y) for y, (_, high) in zip(ys, ranges, strict=True)]
    ax.errorbar(xs, ys, yerr=[below, above], fmt="none", ecolor=color, capsize=4)


def plot_scaling(gpus: Sequence[int], throughput: Sequence[float], ax=None, label: str = "measured",
                 unit: str = "GPUs", ranges: Sequence[tuple[float, float]] | None = None, note: str | None = None):
    """Measured global throughput against the rank count, with ideal linear scaling from the smallest run.

    The ideal line is ``throughput[smallest] * ranks / smallest`` (the 1-rank point when there is one).
    The x axis is log2 (1, 2, 4, 8...); ``unit`` names what a rank was ("GPUs", "CPU ranks": labels say
    what ran). ``ranges`` (low, high) per point draws its spread as a whisker (e.g. over a run's epochs);
    ``note`` goes under the title (e.g. that each point is one run).
    """
    ax = _axes(ax)
    points = sorted(zip(gpus, throughput, ranges or [None] * len(gpus), strict=True), key=lambda p: p[0])
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    if xs:
        ax.plot(xs, [ys[0] * x / xs[0] for x in xs], linestyle="--", color="gray",
                label=f"ideal (linear from {xs[0]} {unit if xs[0] != 1 else _singular(unit)})")
        (line,) = ax.plot(xs, ys, marker="o", label=label)
        if ranges:
            _whiskers(ax, xs, ys, [p[2] for p in points], line.get_color())
        _log2_gpu_axis(ax, xs)
    _finish(ax, unit, f"throughput (images/s, all {unit})", "Scaling", empty_note="no measurements")
    if note and xs:
        add_note(ax, f"({note})")
    return ax


def plot_efficiency(gpus: Sequence[int], efficiency: Sequence[float], ax=None, label: str = "measured",
                    unit: str = "GPUs", ranges: Sequence[tuple[float, float]] | None = None, note: str | None = None):
    """Scaling efficiency (a fraction: 1.0 = perfect linear scaling) against the rank count (``unit``: what a
    rank was), shown in %; ``ranges`` (fractions) as whiskers and ``note`` as in :func:`plot_scaling`."""
    ax = _axes(ax)
    points = sorted(zip(gpus, efficiency, ranges or [None] * len(gpus), strict=True), key=lambda p: p[0])
    if points:
        xs, ys = [p[0] for p in points], [100 * p[1] for p in points]
        ax.axhline(100, linestyle="--", color="gray", label="ideal")
        (line,) = ax.plot(xs, ys, marker="o", label=label)
        if ranges:
            _whiskers(ax, xs, ys, [(100 * p[2][0], 100 * p[2][1]) for p in points], line.get_color())
        _log2_gpu_axis(ax, xs)
        ax.set_ylim(0, max([110.0] + [100 * p[2][1] * 1.05 for p in points if p[2]]))
    _finish(ax, unit, "scaling efficiency (% of linear)", "Scaling efficiency", empty_note="no measurements")
    if note and points:
        add_note(ax, f"({note})")
    return ax


def plot_bars(labels: Sequence[str], values: Sequence[float], ylabel: str, ax=None, title: str = "",
              fmt: str | None = None, ranges: Sequence[tuple[float, float]] | None = None):
    """A bar per value (e.g. throughput per precision); ``ylabel`` should carry the unit. ``fmt``: the values'
    format, by default the rounding every printed Spread uses (:func:`tutorial_lib.bench.timing.significant_decimals`:
    01 labelled a bar of 0.714 img/s "1").

    ``ranges`` (low, high) per bar draws the spread of repeated measurements as a black whisker. Each bar's
    value is written under its name, below the axis, where no whisker or line can cross it.
    """
    ax = _axes(ax)
    from tutorial_lib.bench.timing import significant_decimals

    names = [f"{label}\n{fmt.format(value) if fmt else f'{value:,.{significant_decimals(value)}f}'}"
             for label, value in zip(labels, values, strict=True)]
    ax.bar(names, list(values), color=[f"C{i}" for i in range(len(values))])
    if ranges:
        _whiskers(ax, names, list(values), ranges, "black")
    ax.margins(y=0.12)
    _finish(ax, "", ylabel, title, empty_note="no values")
    if has_data(ax):
        keep_tick_labels_apart(ax)
    return ax


TABLE_COLUMNS = ["name", "id", "backend", "state", "world_size", "epoch", "epochs", "top1", "images_per_sec"]
LAST_EPOCH_RATE = "img/s, last epoch"  # the job table's images_per_sec as a person reads it (results tables: means)


def job_row(job, state: str | None = None, events: list[dict] | None = None) -> dict:
    """One job's table row; pass ``state``/``events`` already read to avoid reading them again."""
    state = job.state if state is None else state
    events = job.events() if events is None else events
    last = {}
    for record in events:
        last[record["event"]] = record
    setup = last.get("resume") or last.get("start") or {}
    spec = (getattr(job, "record", None) or {}).get("spec") or {}
    ranks_per_node = spec.get("ranks_per_node", spec.get("gpus_per_node", 0))  # gpus_per_node: older job records
    world_size = setup.get("world_size") or (spec.get("nodes", 0) * ranks_per_node) or None
    epoch = last.get("epoch", {})
    # the last finished epoch's rate, the quantity the notebooks' summaries report ("throughput, last epoch"):
    # the last step event's rate is one logging window's and differs from it (151 vs 140 img/s in one run)
    rate = epoch.get("images_per_sec")
    return {"name": job.name, "id": job.id, "backend": job.backend, "state": state, "world_size": world_size,
            "epoch": epoch.get("epoch", 0), "epochs": last.get("start", {}).get("epochs"),
            "top1": epoch.get("top1"), "images_per_sec": rate}


def job_table(jobs) -> pd.DataFrame:
    """One row per job: name, id, backend, state, world size, last epoch (of ``epochs``), last top-1 (%),
    and the global throughput of the last finished epoch (images/s; none before the first epoch ends)."""
    if not isinstance(jobs, Sequence):
        jobs = [jobs]
    return table_from_rows([job_row(job) for job in jobs])


def table_from_rows(rows: list[dict]) -> pd.DataFrame:
    """The job table of :func:`job_row` rows (counts as nullable integers: missing is <NA>, not NaN).

    Rounded as shown to a person: top-1 to 0.1 %, throughput to whole images/s."""
    table = pd.DataFrame(rows, columns=TABLE_COLUMNS)
    table = table.astype({"world_size": "Int64", "epoch": "Int64", "epochs": "Int64", "top1": "float64",
                          "images_per_sec": "float64"})
    return table.round({"top1": 1, "images_per_sec": 0})


LINE_TOO_LOW = 0.05  # a level below this share of a linear axis from 0 is not drawn but written


def plot_loader_vs_model(loader_records: list[dict], model_record: dict, ax=None):
    """Bars: images/s each input pipeline delivers; a line: images/s the model trains at.

    Bars below the line mean the accelerator waits for data with that pipeline. A model far slower than every
    bar (below :data:`LINE_TOO_LOW` of the axis: 1.4 img/s against 96-125 on this CPU, issue 44) gets no line,
    which would lie on the axis, but its numbers in the title.
    """
    ok = [r for r in loader_records if r.get("status") == "ok"]
    labels = [f"{r['workers']} worker{'s' * (r['workers'] != 1)}" if r["pipeline"] == "cpu-dataloader"
              else r["pipeline"] for r in ok]
    rates = [r["images_per_sec"] for r in ok]
    ranges = [(r.get("images_per_sec_low", v), r.get("images_per_sec_high", v)) for r, v in zip(ok, rates, strict=True)]
    ax = plot_bars(labels, rates, "images/s", ax=ax, ranges=ranges,
                   title="Is the model waiting for data?\n(whiskers: range over the rounds)")
    if model_record.get("status") == "ok":
        rate = model_record["images_per_sec"]
        low, high = model_record.get("images_per_sec_low", rate), model_record.get("images_per_sec_high", rate)
        shown = f"{rate:,.3g} ({low:,.3g}-{high:,.3g}) img/s"
        if rate < LINE_TOO_LOW * ax.get_ylim()[1]:
            below = all(high < bar_low for bar_low, _ in ranges)
            add_note(ax, f"(the model trains at {shown}: too low on this axis for its line"
                         + ("; every pipeline's range is above it)" if below else ")"))
        else:
            ax.axhline(rate, color="black", linestyle="--", label=f"model trains at {shown}")
            ax.set_ylim(top=max(ax.get_ylim()[1], rate * 1.15))
            place_legend(ax, fontsize="small")
    return ax
