"""Figures and tables for notebook 07 (communication): how all-reduce algorithms move bytes, what
they cost in the alpha-beta model of :mod:`tutorial_lib.scaling`, a measured all-reduce against
its fit, scaling projections against published ImageNet runs, and parameter-server runs.

The all-reduce diagrams are drawn from explicit schedules (:func:`ring_schedule`,
:func:`halving_doubling_schedule`): lists of steps, each a list of simultaneous
:class:`Transfer` s. :func:`simulate` replays a schedule on symbolic data, so a test can check
that it really is an all-reduce and that every rank sends ``2(p-1)/p`` of the buffer.
Every plotting function takes optional matplotlib axes and returns the figure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from tutorial_lib.scaling import (
    Cluster,
    DataPipeline,
    Link,
    ScalingModel,
    halving_doubling_allreduce_s,
    hierarchical_allreduce_s,
    ring_allreduce_s,
    ring_traffic_factor,
)
from tutorial_lib.scaling.reference import Preset

MIB = 1 << 20


# ------------------------------------------------------------------ all-reduce schedules
@dataclass(frozen=True)
class Transfer:
    """Rank ``src`` sends ``chunks`` (indices of the buffer's p equal chunks) to ``dst``, which
    adds them to its own (``reduce``) or stores them (all-gather)."""

    src: int
    dst: int
    chunks: tuple[int, ...]
    reduce: bool


def ring_schedule(ranks: int) -> list[list[Transfer]]:
    """Ring all-reduce: p-1 reduce-scatter steps, then p-1 all-gather steps; in every step each
    rank r sends one chunk to rank r+1 (mod p)."""
    if ranks < 2:
        raise ValueError("a ring needs at least 2 ranks")
    scatter = [[Transfer(r, (r + 1) % ranks, ((r - s) % ranks,), True) for r in range(ranks)]
               for s in range(ranks - 1)]
    gather = [[Transfer(r, (r + 1) % ranks, ((r + 1 - s) % ranks,), False) for r in range(ranks)]
              for s in range(ranks - 1)]
    return scatter + gather


def halving_doubling_schedule(ranks: int) -> list[list[Transfer]]:
    """Recursive halving (reduce-scatter: partners at distance p/2, p/4, ..., 1 swap half of what
    they still own) then recursive doubling (all-gather, distances 1, 2, ..., p/2): 2 log2(p)
    steps. ``ranks`` must be a power of two."""
    if ranks < 2 or ranks & (ranks - 1):
        raise ValueError("recursive halving-doubling needs a power of two ranks >= 2")
    owned = {r: list(range(ranks)) for r in range(ranks)}  # chunks each rank still reduces
    steps = []
    distance = ranks // 2
    while distance >= 1:
        step = []
        for r in range(ranks):
            lower, upper = owned[r][:len(owned[r]) // 2], owned[r][len(owned[r]) // 2:]
            keep, give = (upper, lower) if r & distance else (lower, upper)
            step.append(Transfer(r, r ^ distance, tuple(give), True))
            owned[r] = keep
        steps.append(step)
        distance //= 2
    distance = 1
    while distance < ranks:
        step = [Transfer(r, r ^ distance, tuple(owned[r]), False) for r in range(ranks)]
        owned = {r: sorted(owned[r] + owned[r ^ distance]) for r in range(ranks)}
        steps.append(step)
        distance *= 2
    return steps


def simulate(ranks: int, schedule: Sequence[Sequence[Transfer]]) -> list[list[list[frozenset]]]:
    """Replay ``schedule`` on symbolic data: ``states[k][rank][chunk]`` is the set of ranks whose
    contribution that chunk holds after step k (``states[0]``: before any step). Transfers of a
    step read the previous state. Adding a contribution twice raises ValueError."""
    state = [[frozenset({r}) for _ in range(ranks)] for r in range(ranks)]
    states = [state]
    for step in schedule:
        new = [list(row) for row in state]
        for t in step:
            for c in t.chunks:
                if t.reduce:
                    if state[t.dst][c] & state[t.src][c]:
                        raise ValueError(f"rank {t.dst} would add chunk {c} from rank {t.src} twice")
                    new[t.dst][c] = new[t.dst][c] | state[t.src][c]
                else:
                    new[t.dst][c] = state[t.src][c]
        state = new
        states.append(state)
    return states


def is_allreduce(ranks: int, schedule: Sequence[Sequence[Transfer]]) -> bool:
    """Whether every rank ends with the sum of all ranks' data in every chunk."""
    everyone = frozenset(range(ranks))
    return all(cell == everyone for row in simulate(ranks, schedule)[-1] for cell in row)


def buffer_fraction_sent(ranks: int, schedule: Sequence[Sequence[Transfer]]) -> list[float]:
    """For each rank, the bytes it sends over the whole schedule as a multiple of the buffer."""
    sent = [0] * ranks
    for step in schedule:
        for t in step:
            sent[t.src] += len(t.chunks)
    return [count / ranks for count in sent]


# ------------------------------------------------------------------ diagrams
def _step_titles(schedule: Sequence[Sequence[Transfer]]) -> list[str]:
    titles, counts = [], {True: 0, False: 0}
    for step in schedule:
        phase = step[0].reduce
        counts[phase] += 1
        titles.append(f"{'reduce-scatter' if phase else 'all-gather'} {counts[phase]}")
    return titles


def _arrow_lanes(step: Sequence[Transfer]) -> list[float]:
    """x position of each transfer's arrow: transfers moving the same chunks share their columns
    side by side, so no two arrows of a step lie on top of each other."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, t in enumerate(step):
        groups.setdefault(t.chunks, []).append(i)
    xs = [0.0] * len(step)
    for chunks, members in groups.items():
        lo, width = min(chunks), max(chunks) + 1 - min(chunks)
        for lane, i in enumerate(members):
            xs[i] = lo + (lane + 0.5) * width / len(members)
    return xs


CELL = 0.62  # height of a chunk cell in a rank's row of height 1; arrows cross the gap below it


def draw_schedule(ranks: int, schedule: Sequence[Sequence[Transfer]], title: str, axes=None):
    """One panel for the start and one per step: rows are ranks, columns the buffer's chunks,
    shading = how many ranks' data a chunk holds (the number printed in it; a black edge marks
    a chunk that changed in this step); one arrow per transfer of that step, from the sender to
    the receiver (red: added to the receiver's chunk, blue: copied)."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, Rectangle

    states = simulate(ranks, schedule)
    panels = len(states)
    if axes is None:
        side = 0.42 * ranks + 0.4
        fig, axes = plt.subplots(1, panels, figsize=(side * panels + 0.6, side + 1.0), layout="constrained")
    axes = list(np.atleast_1d(axes))
    titles = _step_titles(schedule)
    cmap = plt.get_cmap("Greens")
    for k, (ax, state) in enumerate(zip(axes, states, strict=True)):
        for r in range(ranks):
            for c in range(ranks):
                held = len(state[r][c])
                changed = k > 0 and state[r][c] != states[k - 1][r][c]
                ax.add_patch(Rectangle((c, r), 1, CELL, facecolor=cmap(0.15 + 0.75 * held / ranks),
                                       edgecolor="black" if changed else "white",
                                       linewidth=1.4 if changed else 0.8))
                ax.text(c + 0.5, r + CELL / 2, str(held), ha="center", va="center", fontsize=7,
                        color="white" if held > ranks / 2 else "black")
        if k > 0:
            step = schedule[k - 1]
            for t, x in zip(step, _arrow_lanes(step), strict=True):
                down = t.dst > t.src
                start = (x, t.src + CELL) if down else (x, t.src)
                end = (x, t.dst) if down else (x, t.dst + CELL)
                bend = 0.0 if abs(t.dst - t.src) == 1 else (0.3 if down else -0.3)
                ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=8, linewidth=1.1,
                                             shrinkA=0, shrinkB=0, connectionstyle=f"arc3,rad={bend}",
                                             color="tab:red" if t.reduce else "tab:blue", zorder=3))
        ax.set_xlim(-0.05, ranks + 0.05)
        ax.set_ylim(ranks, -0.05)
        ax.set_aspect("equal")
        ax.set_xticks([c + 0.5 for c in range(ranks)], [str(c) for c in range(ranks)], fontsize=7)
        ax.set_yticks([r + CELL / 2 for r in range(ranks)], [f"rank {r}" for r in range(ranks)], fontsize=7)
        ax.tick_params(length=0)
        ax.grid(False)
        for spine in ax.spines.values():
            spine.set_visible(False)
        ax.set_title("start" if k == 0 else titles[k - 1], fontsize=8)
        if k == 0:
            ax.set_xlabel("chunk", fontsize=7)
        else:
            ax.set_yticklabels([])
    fig = axes[0].figure
    fig.suptitle(title, fontsize=9)
    return fig


def draw_ring_allreduce(ranks: int = 4, axes=None):
    """The ring all-reduce of ``ranks`` ranks, step by step (see :func:`draw_schedule`)."""
    steps = 2 * (ranks - 1)
    title = (f"Ring all-reduce, p = {ranks}: {steps} steps of p transfers, each 1/p of the buffer; "
             f"every rank sends 2(p-1)/p = {ring_traffic_factor(ranks):.2f} buffers")
    return draw_schedule(ranks, ring_schedule(ranks), title, axes)


def draw_halving_doubling_allreduce(ranks: int = 4, axes=None):
    """The recursive halving-doubling all-reduce of ``ranks`` ranks (a power of two)."""
    steps = 2 * int(math.log2(ranks))
    title = (f"Halving-doubling all-reduce, p = {ranks}: {steps} = 2 log2(p) steps, pairs swap "
             f"1/2, 1/4, ... of the buffer; every rank sends {ring_traffic_factor(ranks):.2f} buffers")
    return draw_schedule(ranks, halving_doubling_schedule(ranks), title, axes)


def arrow_count(ax) -> int:
    """Arrows drawn on one panel (one per transfer)."""
    from matplotlib.patches import FancyArrowPatch

    return sum(isinstance(patch, FancyArrowPatch) for patch in ax.patches)


# ------------------------------------------------------------------ cost formulas
def allreduce_cost_table(nbytes: float, gpus_list: Sequence[int], cluster: Cluster,
                         buckets: int = 1) -> pd.DataFrame:
    """Milliseconds per all-reduce of ``nbytes`` for the ring, halving-doubling (flat over all
    GPUs: the inter-node link once the job spans nodes) and hierarchical algorithms."""
    rows = []
    for gpus in gpus_list:
        link = cluster.intra if gpus <= cluster.gpus_per_node else cluster.inter
        rows.append({
            "GPUs": gpus, "nodes": cluster.nodes(gpus), "ring steps": 2 * (gpus - 1),
            "ring ms": 1e3 * ring_allreduce_s(nbytes, gpus, link, buckets),
            "h-d steps": 2 * math.ceil(math.log2(gpus)) if gpus > 1 else 0,
            "h-d ms": 1e3 * halving_doubling_allreduce_s(nbytes, gpus, link, buckets),
            "hierarchical ms": 1e3 * hierarchical_allreduce_s(nbytes, gpus, cluster, "ring", buckets),
            "sent per GPU (MB)": ring_traffic_factor(gpus) * nbytes / 1e6,
        })
    return pd.DataFrame(rows).set_index("GPUs")


# ------------------------------------------------------------------ measured all-reduce
def fitted_seconds(link: Link, nbytes, gpus: int, algorithm: str = "ring"):
    """The alpha-beta time of ``link`` for message sizes ``nbytes`` (array) on ``gpus`` ranks."""
    formula = ring_allreduce_s if algorithm == "ring" else halving_doubling_allreduce_s
    return np.array([formula(float(n), gpus, link) for n in np.atleast_1d(nbytes)])


def plot_allreduce_fit(samples: Sequence[tuple[float, float]], gpus: int, link: Link, axes=None,
                       algorithm: str = "ring"):
    """Measured all-reduce time (left) and bus bandwidth (right) against message size, with the
    fitted alpha-beta model as a line."""
    import matplotlib.pyplot as plt

    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(10, 3.6), layout="constrained")
    sizes = np.array([s for s, _ in samples], dtype=float)
    times = np.array([t for _, t in samples], dtype=float)
    grid = np.geomspace(sizes.min(), sizes.max(), 60)
    fit = fitted_seconds(link, grid, gpus, algorithm)
    label = f"fit: {link.latency_us:.0f} us/step, {link.bandwidth_gbit_s:.1f} Gbit/s"
    factor = ring_traffic_factor(gpus)
    time_ax, bw_ax = axes
    time_ax.loglog(sizes, times * 1e3, "o", label=f"measured ({gpus} ranks)")
    time_ax.loglog(grid, fit * 1e3, "-", label=label)
    time_ax.set(xlabel="message size (bytes)", ylabel="time per all-reduce (ms)",
                title="All-reduce time: measured vs fitted")
    bw_ax.semilogx(sizes, sizes / times * factor / 1e9, "o", label="measured")
    bw_ax.semilogx(grid, grid / fit * factor / 1e9, "-", label=label)
    bw_ax.axhline(link.bytes_per_s / 1e9, color="gray", linestyle="--", label="fitted link bandwidth")
    bw_ax.set(xlabel="message size (bytes)", ylabel="bus bandwidth (GB/s)", title="Bus bandwidth",
              ylim=(0, None))
    for ax in axes:
        ax.legend(fontsize="small")
    return time_ax.figure


# ------------------------------------------------------------------ projections
@dataclass(frozen=True)
class PublishedRun:
    """An ImageNet / ResNet-50 training time someone published (not one of the presets)."""

    label: str
    citation: str
    accelerators: int
    accelerator: str
    minutes: float


OTHER_PUBLISHED = (
    PublishedRun("Akiba et al. 2017", "Akiba, Suzuki, Fukuda (2017), 'Extremely Large Minibatch SGD: Training "
                 "ResNet-50 on ImageNet in 15 Minutes', arXiv:1711.04325 (90 epochs, batch 32k)",
                 1024, "P100", 15.0),
    PublishedRun("You et al. 2018 (as quoted by ref 002)", "You et al., 'ImageNet Training in Minutes' (LARS; "
                 "reference 001), 20 min on 2,048 Intel KNL as quoted in reference 002", 2048, "KNL", 20.0),
    PublishedRun("Mikami et al. 2018", "Mikami et al. (2018), 'ImageNet/ResNet-50 Training in 224 Seconds', "
                 "arXiv:1811.05233 (Sony, ABCI, 2D-torus all-reduce)", 2176, "V100", 224 / 60),
    PublishedRun("Ying et al. 2018", "Ying, Kumar, Chen, Wang, Cheng (2018), 'Image Classification at "
                 "Supercomputer Scale', arXiv:1811.06992 (76.3% top-1, > 1.05 M img/s)", 1024,
                 "TPU v3 chips", 2.2),
)


def _gpu_axis(ax, label: str = "GPUs") -> None:
    """Log2 x axis with plain numbers: 1, 4, 16, ... 4096."""
    from matplotlib.ticker import LogLocator, NullLocator, ScalarFormatter

    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(LogLocator(base=4))
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel(label)


def _base_gpus(preset: Preset) -> int:
    """The GPU count efficiencies of ``preset`` are measured against (its smallest published run)."""
    return min(p.gpus for p in preset.published) if len(preset.published) > 1 else 1


def projection_frame(model: ScalingModel, gpus: Sequence[int], base_gpus: int = 1, epochs: float = 90,
                     dataset_images: int | None = None) -> pd.DataFrame:
    """Per GPU count: time to train, effective throughput (epochs x images / time to train,
    per-epoch overheads included), efficiency against ``base_gpus`` GPUs, and the limit."""
    from tutorial_lib.scaling import IMAGENET_TRAIN_IMAGES

    images = dataset_images or IMAGENET_TRAIN_IMAGES
    counts = sorted({base_gpus, *gpus})
    points = {p.gpus: p for p in model.project(counts, epochs, images)}
    base = points[base_gpus].time_to_train_s * base_gpus
    rows = [{"gpus": g, "time_to_train_s": points[g].time_to_train_s,
             "effective_images_per_s": epochs * images / points[g].time_to_train_s,
             "efficiency": base / (g * points[g].time_to_train_s), "limited_by": points[g].limited_by}
            for g in gpus]
    return pd.DataFrame(rows)


def preset_curve(preset: Preset, gpus: Sequence[int], model: ScalingModel | None = None) -> pd.DataFrame:
    """:func:`projection_frame` of a preset (or of ``model`` in its place), from its base GPU count up."""
    base = _base_gpus(preset)
    return projection_frame(model or preset.model, [g for g in gpus if g >= base], base, preset.epochs,
                            preset.dataset_images)


def published_frame(preset: Preset) -> pd.DataFrame:
    """The preset's published runs: time to train, effective throughput, efficiency vs its base."""
    base_gpus = _base_gpus(preset)
    by_gpus = {p.gpus: p for p in preset.published}
    base = by_gpus[base_gpus].time_to_train_s * base_gpus if base_gpus in by_gpus else math.nan
    return pd.DataFrame([{"gpus": p.gpus, "time_to_train_s": p.time_to_train_s,
                          "effective_images_per_s": preset.epochs * preset.dataset_images / p.time_to_train_s,
                          "efficiency": base / (p.gpus * p.time_to_train_s), "source": p.source}
                         for p in sorted(preset.published, key=lambda p: p.gpus)])


def plot_projections(presets: Mapping[str, Preset], gpus: Sequence[int],
                     extra: Mapping[str, tuple[Preset, ScalingModel]] | None = None, axes=None):
    """Three panels against the GPU count: effective global throughput, efficiency (against each
    reference's smallest run) and time to train. Lines: the model; markers: published runs;
    grey markers on the right panel: :data:`OTHER_PUBLISHED` (other hardware and recipes).
    ``extra`` adds dashed lines for other models of a preset (e.g. a calibrated one)."""
    import matplotlib.pyplot as plt

    if axes is None:
        _, axes = plt.subplots(1, 3, figsize=(15, 4.4), layout="constrained")
    thr_ax, eff_ax, time_ax = axes
    for i, (name, preset) in enumerate(presets.items()):
        color, curve, published = f"C{i}", preset_curve(preset, gpus), published_frame(preset)
        label = f"{name}: model ({preset.reference})"
        for ax, column, scale in ((thr_ax, "effective_images_per_s", 1), (eff_ax, "efficiency", 100),
                                  (time_ax, "time_to_train_s", 1 / 60)):
            ax.plot(curve["gpus"], curve[column] * scale, color=color, label=label)
            ax.plot(published["gpus"], published[column] * scale, "o", color=color, markeredgecolor="black",
                    label=f"{name}: published")
    for i, (label, (preset, model)) in enumerate((extra or {}).items()):
        curve = preset_curve(preset, gpus, model)
        for ax, column, scale in ((thr_ax, "effective_images_per_s", 1), (eff_ax, "efficiency", 100),
                                  (time_ax, "time_to_train_s", 1 / 60)):
            ax.plot(curve["gpus"], curve[column] * scale, "--", color=f"C{len(presets) + i}", label=label)
    for j, run in enumerate(OTHER_PUBLISHED):
        time_ax.plot(run.accelerators, run.minutes, "dvs^"[j % 4], color="dimgray",
                     label=f"{run.label}: {run.accelerators} {run.accelerator}")
    thr_ax.set(yscale="log", ylabel="images/s (90 epochs / time to train)", title="Effective global throughput")
    eff_ax.axhline(100, color="gray", linestyle=":")
    eff_ax.set(ylabel="% of linear (vs smallest published run)", title="Scaling efficiency", ylim=(0, 110))
    time_ax.set(yscale="log", ylabel="minutes", title="Time to train ResNet-50 (model: 90 epochs)")
    for ax in axes:
        _gpu_axis(ax, "GPUs (or accelerators)" if ax is time_ax else "GPUs")
    thr_ax.legend(fontsize=6.5, loc="upper left")
    handles, labels = time_ax.get_legend_handles_labels()
    others = [i for i, text in enumerate(labels) if not text.startswith(tuple(presets))]
    time_ax.legend([handles[i] for i in others], [labels[i] for i in others], fontsize=6.5, loc="upper right")
    return thr_ax.figure


def what_if_model(preset: Preset, bandwidth_gbit_s: float | None = None, overlap: float | None = None,
                  per_gpu_batch: int | None = None, io_limits: bool = False) -> ScalingModel:
    """The preset's model with another inter-node bandwidth, overlap fraction or per-GPU batch.

    Backward time then follows the batch (``backward_fraction`` of compute), and without
    ``io_limits`` the data-pipeline ceilings and per-epoch overheads are dropped, so the curve
    shows compute and communication only.
    """
    model = preset.model
    cluster, workload = model.cluster, replace(model.workload, backward_time_s=None)
    if bandwidth_gbit_s is not None:
        cluster = replace(cluster, inter=replace(cluster.inter, bandwidth_gbit_s=float(bandwidth_gbit_s)))
    if overlap is not None:
        workload = replace(workload, overlap_fraction=float(overlap))
    if per_gpu_batch is not None:
        workload = replace(workload, per_gpu_batch=int(per_gpu_batch))
    return replace(model, cluster=cluster, workload=workload,
                   pipeline=model.pipeline if io_limits else DataPipeline())


def plot_what_if(preset: Preset, gpus: Sequence[int], variations: Mapping[str, Sequence[float]], axes=None):
    """Small multiples: efficiency (vs 1 GPU) against the GPU count, one panel per knob of
    :func:`what_if_model` (``bandwidth_gbit_s``, ``overlap``, ``per_gpu_batch``), one line per value."""
    import matplotlib.pyplot as plt

    if axes is None:
        _, axes = plt.subplots(1, len(variations), figsize=(5 * len(variations), 3.8), layout="constrained",
                               sharey=True)
    axes = list(np.atleast_1d(axes))
    units = {"bandwidth_gbit_s": "Gbit/s", "overlap": "of backward", "per_gpu_batch": "images/GPU"}
    for ax, (knob, values) in zip(axes, variations.items(), strict=True):
        for i, value in enumerate(values):
            frame = projection_frame(what_if_model(preset, **{knob: value}), gpus)
            shade = i / max(1, len(values) - 1)  # later lines thinner: coinciding lines stay visible
            ax.plot(frame["gpus"], frame["efficiency"] * 100, linewidth=3.0 - 2.0 * shade,
                    color=plt.get_cmap("viridis")(shade), label=f"{value:g} {units.get(knob, '')}")
        ax.set(title=f"{preset.name}: varying {knob}", ylim=(0, 105))
        _gpu_axis(ax)
        ax.legend(fontsize="small", title=knob, title_fontsize="small")
    axes[0].set_ylabel("scaling efficiency (% of linear)")
    return axes[0].figure


def what_if_widget(preset: Preset, gpus: Sequence[int]):
    """ipywidgets sliders (bandwidth, overlap, per-GPU batch) redrawing efficiency and throughput;
    only useful where a live frontend displays widgets."""
    import ipywidgets as widgets
    import matplotlib.pyplot as plt
    from IPython.display import display

    output = widgets.Output()
    w = preset.model.workload
    sliders = {
        "bandwidth_gbit_s": widgets.FloatLogSlider(value=preset.model.cluster.inter.bandwidth_gbit_s, base=10,
                                                   min=0, max=3, description="Gbit/s"),
        "overlap": widgets.FloatSlider(value=w.overlap_fraction, min=0, max=1, step=0.05, description="overlap"),
        "per_gpu_batch": widgets.IntSlider(value=w.per_gpu_batch, min=4, max=512, step=4, description="batch/GPU"),
    }

    def redraw(_=None):
        frame = projection_frame(what_if_model(preset, **{k: s.value for k, s in sliders.items()}), gpus)
        with output:
            output.clear_output(wait=True)
            fig, (thr_ax, eff_ax) = plt.subplots(1, 2, figsize=(10, 3.6), layout="constrained")
            thr_ax.plot(frame["gpus"], frame["effective_images_per_s"])
            thr_ax.set(yscale="log", ylabel="images/s", title="Effective throughput")
            eff_ax.plot(frame["gpus"], frame["efficiency"] * 100)
            eff_ax.set(ylabel="% of linear", title="Efficiency", ylim=(0, 105))
            for ax in (thr_ax, eff_ax):
                _gpu_axis(ax)
            display(fig)
            plt.close(fig)  # shown once, in the output widget

    for slider in sliders.values():
        slider.observe(redraw, names="value")
    redraw()
    return widgets.VBox([widgets.HBox(list(sliders.values())), output])


# ------------------------------------------------------------------ parameter server
def plot_staleness_runs(results: Mapping, axes=None):
    """Full-train-set loss (top) and test accuracy (bottom) of each run against steps (left) and
    wall time (right). ``results``: name -> :class:`tutorial_lib.lessons.param_server.RunResult`."""
    import matplotlib.pyplot as plt

    if axes is None:
        _, axes = plt.subplots(2, 2, figsize=(11, 6.5), layout="constrained", sharey="row")
    styles = {"allreduce": dict(color="black", linestyle="--")}
    for i, (name, run) in enumerate(results.items()):
        frame = pd.DataFrame(run.records)
        style = styles.get(name, dict(color=f"C{i}"))
        for row, column in enumerate(("loss", "accuracy")):
            for col, x in enumerate(("step", "wall_s")):
                axes[row][col].plot(frame[x], frame[column], label=name, **style)
    for row, ylabel in enumerate(("train loss", "test accuracy")):
        for col, xlabel in enumerate(("step (weight version)", "wall time (s)")):
            axes[row][col].set(xlabel=xlabel, ylabel=ylabel if col == 0 else "")
            axes[row][col].legend(fontsize="small")
    axes[0][0].set_title("against steps")
    axes[0][1].set_title("against wall time")
    return axes[0][0].figure
