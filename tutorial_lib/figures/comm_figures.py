"""Cost figures and tables for notebook 07 (communication): what all-reduce algorithms cost in the
alpha-beta model of :mod:`tutorial_lib.scaling`, a measured all-reduce against its fit, scaling
projections against published ImageNet runs (with a what-if model and widget), and parameter-server
runs. The algorithms themselves, as schedules and step-by-step diagrams, are in
:mod:`tutorial_lib.analyses.allreduce`. Every plotting function takes optional matplotlib axes and
returns the figure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from tutorial_lib.figures.readable import mark_coinciding, place_legend
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
    measured_bw, fitted_bw = sizes / times * factor / 1e9, grid / fit * factor / 1e9
    bw_ax.semilogx(sizes, measured_bw, "o", label="measured")
    bw_ax.semilogx(grid, fitted_bw, "-", label=label)
    link_bw = link.bytes_per_s / 1e9
    bw_ax.axhline(link_bw, color="gray", linestyle="--", label=f"fitted link bandwidth ({link_bw:.3g} GB/s)")
    # the fit approaches the link's bandwidth from below: headroom above it keeps that line off the top spine
    top = max([link_bw, *measured_bw, *fitted_bw])
    bw_ax.set(xlabel="message size (bytes)", ylabel="bus bandwidth (GB/s)", title="Bus bandwidth",
              ylim=(0, 1.2 * top if top > 0 else 1.0))
    for ax in axes:
        mark_coinciding(ax)  # the fit meets the link's bandwidth at large messages
        place_legend(ax, fontsize="small")
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

    legends_apart = axes is None  # our own figure: 2 x 2, the legends in the fourth quarter (15 inches in a row
    if axes is None:              # shrank to a notebook's column read at 5 px, and three titles had no room)
        fig, grid = plt.subplots(2, 2, figsize=(11, 8), layout="constrained")
        fig.delaxes(grid[1][1])
        axes = [grid[0][0], grid[0][1], grid[1][0]]
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
    handles, labels = time_ax.get_legend_handles_labels()
    others = [i for i, text in enumerate(labels) if not text.startswith(tuple(presets))]
    for ax in axes:
        mark_coinciding(ax)  # models that agree over a range of GPU counts (all at 100% on few GPUs)
    if legends_apart:
        fig = thr_ax.figure
        fig.legend(*thr_ax.get_legend_handles_labels(), loc="upper left", bbox_to_anchor=(0.56, 0.46),
                   fontsize="small", title="models and published runs")
        fig.legend([handles[i] for i in others], [labels[i] for i in others], loc="lower left",
                   bbox_to_anchor=(0.56, 0.03), fontsize="small", title="other published runs (time to train)")
    else:
        place_legend(thr_ax, fontsize="small")
        place_legend(time_ax, handles=[handles[i] for i in others], labels=[labels[i] for i in others],
                     fontsize="small")
    return thr_ax.figure


def what_if_model(preset: Preset, bandwidth_gbit_s: float | None = None, overlap: float | None = None,
                  per_gpu_batch: int | None = None, io_limits: bool = False) -> ScalingModel:
    """The preset's model with another inter-node bandwidth, overlap fraction or per-GPU batch.

    Backward time then follows the batch (``backward_fraction`` of compute), and without
    ``io_limits`` the data-pipeline ceilings and per-epoch overheads are dropped, so the curve
    shows compute and communication only.
    """
    _check_what_if(bandwidth_gbit_s, per_gpu_batch, io_limits)
    model = preset.model
    cluster, workload = model.cluster, replace(model.workload, backward_time_s=None)
    if bandwidth_gbit_s is not None:
        cluster = replace(cluster, inter=replace(cluster.inter, bandwidth_gbit_s=float(bandwidth_gbit_s)))
    if overlap is not None:
        if isinstance(overlap, bool) or not isinstance(overlap, (int, float)) or not 0 <= overlap <= 1:  # r43ab: 1.5
            raise ValueError(f"overlap: {overlap!r:.40} is not a fraction of the backward pass from 0 to 1. Fix: "
                             "e.g. overlap=0.8.")
        workload = replace(workload, overlap_fraction=float(overlap))
    if per_gpu_batch is not None:
        workload = replace(workload, per_gpu_batch=int(per_gpu_batch))
    return replace(model, cluster=cluster, workload=workload,
                   pipeline=model.pipeline if io_limits else DataPipeline())


def _check_what_if(bandwidth_gbit_s, per_gpu_batch, io_limits) -> None:
    """ValueError naming the argument of :func:`what_if_model` that no model takes (r43ac: a bandwidth of 0, a batch
    of -32 or 2.5, ``io_limits='no'`` were modelled)."""
    number = (int, float)
    if bandwidth_gbit_s is not None and (isinstance(bandwidth_gbit_s, bool) or not isinstance(bandwidth_gbit_s, number)
                                         or not 0 < bandwidth_gbit_s < math.inf):
        raise ValueError(f"bandwidth_gbit_s: {bandwidth_gbit_s!r:.40} is not a bandwidth above 0. Fix: e.g. "
                         "bandwidth_gbit_s=100.")
    if per_gpu_batch is not None and (isinstance(per_gpu_batch, bool) or not isinstance(per_gpu_batch, int)
                                      or per_gpu_batch < 1):
        raise ValueError(f"per_gpu_batch: {per_gpu_batch!r:.40} is not a whole number of images from 1. Fix: e.g. "
                         "per_gpu_batch=32.")
    if not isinstance(io_limits, bool):
        raise ValueError(f"io_limits: must be True or False, got {io_limits!r:.40}. Fix: io_limits=False.")


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
        mark_coinciding(ax)
        place_legend(ax, fontsize="small", title=knob, title_fontsize="small")
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
    wall time (right). ``results``: name -> :class:`tutorial_lib.param_server.RunResult`."""
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
    axes[0][0].set_title("against steps")
    axes[0][1].set_title("against wall time")
    for ax in np.ravel(axes):
        mark_coinciding(ax)
        place_legend(ax, fontsize="small")
    return axes[0][0].figure
