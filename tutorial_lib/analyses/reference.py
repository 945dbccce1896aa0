"""The published scaling studies and the scaling model beside this course's runs (notebook 06).

    from tutorial_lib.analyses import reference
    reference.reference_table("hal")             # reference 000's published rows, in study.scaling_table's columns
    reference.projection_from_run(run, [8, 64])  # what the model projects from one measured run (never a result)
    reference.model_comparison_text("hal")       # the model against the published points

The runs themselves are read by :mod:`tutorial_lib.analyses.study`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd

from tutorial_lib.analyses.study import (
    REFERENCE_EPOCHS,
    projection_basis,
    rank_unit,
    read_json,
    readable,
    run_dir_of,
    run_record,
    run_spreads,
    single_run_note,
)
from tutorial_lib.rundir.layout import CONFIG_FILE
from tutorial_lib.scaling import IMAGENET_TRAIN_IMAGES, format_duration

# Reference 000: "All experiments reached a top1 accuracy of 76% and a top5 accuracy of 93%."
REFERENCE_000_TOP1, REFERENCE_000_TOP5 = 76.0, 93.0


def reference_frame(preset: str = "hal") -> pd.DataFrame:
    """A published scaling study (``tutorial_lib.scaling.presets``) in :func:`collect`'s columns.

    Throughput: the reference's logged training img/s; ``time_to_train_s``: its published wall time
    (validation and start-up included); efficiency from the logged throughput, like ours.
    For ``hal`` (reference 000) top-1/top-5 are the 76% / 93% every run reached.
    """
    from tutorial_lib.scaling.presets import PRESETS
    from tutorial_lib.scaling.reference import compare

    report = compare(PRESETS[preset])
    cluster = PRESETS[preset].model.cluster
    rows = []
    for row in report["rows"]:
        rate = row["reference_logged_images_per_s"] or math.nan
        total = row["reference_time_to_train_s"]
        rows.append({"name": f"{preset}: {row['gpus']} GPUs", "gpus": row["gpus"], "nodes": cluster.nodes(row["gpus"]),
                     "gpus_per_node": min(row["gpus"], cluster.gpus_per_node), "global_batch": row["global_batch"],
                     "images_per_sec": rate, "epoch_s": total / report["epochs"], "time_to_train_s": total,
                     "top1": REFERENCE_000_TOP1 if preset == "hal" else math.nan,
                     "top5": REFERENCE_000_TOP5 if preset == "hal" else math.nan,
                     "time_efficiency": row["reference_efficiency"]})
    frame = pd.DataFrame(rows)
    per_gpu = frame["images_per_sec"] / frame["gpus"]
    frame["efficiency"] = per_gpu / per_gpu.iloc[0]
    return frame


def reference_table(preset: str = "hal") -> pd.DataFrame:
    """:func:`reference_frame` in the same readable form as :func:`scaling_table` (times as published)."""
    from tutorial_lib.scaling.presets import PRESETS

    frame = reference_frame(preset)
    table = readable(frame, PRESETS[preset].epochs, time_note="published")
    # the one time-based figure: the same number as the "ref eff" column of model_comparison_text
    table.insert(5, "time-to-solution efficiency (%)", (100 * frame["time_efficiency"]).round(1).to_numpy())
    return table


def projection_from_run(run, gpus: Sequence[int], preset: str = "hal", epochs: float = REFERENCE_EPOCHS,
                        dataset_images: int = IMAGENET_TRAIN_IMAGES) -> pd.DataFrame:
    """What the scaling model projects for ``gpus`` GPUs from one measured run: that run's per-GPU
    throughput, per-GPU batch and gradient size (fp32 gradients, split into DDP buckets) on
    ``preset``'s cluster (GPUs per node, links), with no file-system or per-epoch limits.
    Projected, not measured: use it to say what more GPUs would buy, never as a result. The index is
    ``GPUs``, or ``modelled ranks (...)`` where the run's ranks were CPU processes; ``attrs["basis"]`` names
    the run projected from (:func:`projection_basis`)."""
    from dataclasses import replace

    from tutorial_lib.scaling import DataPipeline
    from tutorial_lib.scaling.presets import PRESETS

    record, config = run_record(run), read_json(run_dir_of(run) / CONFIG_FILE)
    gradient_bytes = 4.0 * config["parameters"]
    bucket_bytes = config.get("bucket_cap_mb", 25) * 2**20
    base = PRESETS[preset].model
    workload = replace(base.workload, per_gpu_batch=record["global_batch"] // record["gpus"],
                       images_per_sec_per_gpu=record["images_per_sec"] / record["gpus"],
                       gradient_bytes=gradient_bytes, buckets=max(1, math.ceil(gradient_bytes / bucket_bytes)),
                       backward_time_s=None)
    model = replace(base, workload=workload, pipeline=DataPipeline())
    points = model.project(gpus, epochs, dataset_images)
    # a CPU rank projected onto a GPU cluster is no GPU: the index says what is counted
    index = "GPUs" if record.get("on_gpu") is not False else "modelled ranks (each at this CPU rank's speed)"
    frame = pd.DataFrame({index: [p.gpus for p in points], "nodes": [p.nodes for p in points],
                         "global batch": [p.global_batch for p in points],
                         "projected throughput (img/s)": [round(p.images_per_s) for p in points],
                         "projected efficiency (%)": [round(100 * p.efficiency, 1) for p in points],
                         f"{epochs:g} ImageNet epochs (projected)": [format_duration(p.time_to_train_s)
                                                                     for p in points],
                         "limited by": [p.limited_by for p in points]}).set_index(index)
    frame.attrs["basis"] = projection_basis(record)
    return frame


def projection_claim(projection: pd.DataFrame, results: pd.DataFrame):
    """Why :func:`projection_from_run`'s efficiencies look as they do, beside the measured efficiency
    of ``results`` (:func:`collect`'s frame): :func:`tutorial_lib.text.verdicts.projection_flat`."""
    from tutorial_lib.text import verdicts

    first, last = results.iloc[0], results.iloc[-1]
    spread = ((100 * last["efficiency_low"], 100 * last["efficiency_high"])
              if len(results) > 1 and "efficiency_low" in results else None)
    undecided = None
    if spread is not None:
        (_, base), (_, top) = run_spreads(results)[0], run_spreads(results)[-1]
        verdict, why = verdicts.scaling_verdict(top, base)
        undecided = (why or "the runs' per-epoch ranges overlap") if verdict == verdicts.NOT_DISTINGUISHABLE else None
    return verdicts.projection_flat(list(projection["projected efficiency (%)"]), int(projection.index[-1]),
                                  first["images_per_sec"] / first["gpus"],
                                  100 * last["efficiency"] if len(results) > 1 else None, int(last["gpus"]),
                                  rank_unit(results), projection.attrs.get("basis", ""), spread, undecided)


def model_comparison_text(preset: str = "hal", details: bool = False) -> str:
    """The scaling model's table for a preset (as ``python -m tutorial_lib.scaling --preset``
    prints it); without ``details`` only the table and the lines right below it."""
    from tutorial_lib.scaling.presets import PRESETS
    from tutorial_lib.scaling.reference import compare, render_text

    text = render_text(compare(PRESETS[preset]))
    return text if details else text.split("\n\nAssumptions")[0]


def plot_efficiency_vs_reference(results: pd.DataFrame, reference: pd.DataFrame, ax=None,
                                 label: str = "this study", reference_label: str = "reference"):
    """Scaling efficiency of two studies (:func:`collect` / :func:`reference_frame` frames) on one axis,
    each against its own smallest run; this study's points with their per-epoch ranges (one run each)."""
    from tutorial_lib.figures import plots
    from tutorial_lib.figures.readable import add_note, mark_coinciding, place_legend

    ax = plots.plot_efficiency(reference["gpus"], reference["efficiency"], ax=ax, label=reference_label)
    if ax.get_legend() is not None:
        ax.get_legend().remove()
    (line,) = ax.plot(results["gpus"], 100 * results["efficiency"], marker="s", label=label)
    if "efficiency_low" in results:
        low, high = 100 * results["efficiency_low"], 100 * results["efficiency_high"]
        ax.errorbar(results["gpus"], 100 * results["efficiency"], yerr=[100 * results["efficiency"] - low,
                    high - 100 * results["efficiency"]], fmt="none", ecolor=line.get_color(), capsize=4)
        # headroom over the 100% line (drawn wide where a reference lies on it) for the legend
        ax.set_ylim(0, 1.15 * max(ax.get_ylim()[1], 1.05 * float(high.max())))
    ax.set_title("Scaling efficiency")  # plot_efficiency's notes named the reference's lines alone
    if "efficiency_low" in results:
        add_note(ax, f"({single_run_note(results)})")
    ax.set_xticks(sorted(set(reference["gpus"]) | set(results["gpus"])))
    unit = rank_unit(results)
    if unit != "GPUs":  # two kinds of rank on one axis: the label says which is which
        ax.set_xlabel(f"GPUs: {reference_label}; {unit}: {label}")
    mark_coinciding(ax)  # every line now, this study's too
    place_legend(ax, fontsize="small")
    return ax
