"""Every figure the course draws, made by the library's figure functions from run data shaped like a
course run's (no job runs, no notebook executes): :func:`course_figures` returns them with what each shows.

The data carry the cases the course met: two runs with identical values (03's equivalence pair), lines that
coincide over a stretch (04's schedules with and without warmup after it, runs' top-5 at 100%, two recipes' top-1
at the smaller batches), a cancelled
job that logged no epoch (05), 1-epoch jobs (03), seven jobs on one monitor (04), whiskers beside value labels
(01, 02), an all-reduce fit whose link line meets the top of its axis (07), what-if lines at 100% (07), and
the two-level network's recorded measurement (``results/netlab_allreduce.jsonl``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import matplotlib
import pandas as pd

matplotlib.use("Agg")

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Shown:
    """One figure: its name (notebook and what), the figure, the epochs its runs ran or planned (epoch axes
    may reach one past them), and whether each point of it is a single run (it must say so)."""

    name: str
    figure: object
    epochs: int | None = None
    single_runs: bool = False


def run_events(epochs: int, top1: list[float], steps_per_epoch: int = 8, planned: int | None = None,
               rate: float = 150.0, wobble: float = 0.0, loss0: float = 2.3) -> pd.DataFrame:
    """A run's metrics events as train.py writes them: start, a step event every 2 steps, an epoch event each
    epoch (``top1`` per epoch; top-5 near 100)."""
    events = [{"event": "start", "epochs": planned or epochs, "world_size": 2, "global_batch": 64}]
    for epoch in range(1, epochs + 1):
        for step in range((epoch - 1) * steps_per_epoch + 2, epoch * steps_per_epoch + 1, 2):
            events.append({"event": "step", "epoch": epoch, "step": step, "loss": loss0 * math.exp(-step / 20),
                           "images_per_sec": rate * (1 + wobble * math.sin(step))})
        events.append({"event": "epoch", "epoch": epoch, "top1": top1[epoch - 1],
                       "top5": min(100.0, top1[epoch - 1] + 25), "images_per_sec": rate * (1 + wobble * epoch),
                       "epoch_time": 10.0, "train_loss": loss0 / epoch})
    return pd.DataFrame(events)


def table(runs: dict, state: str = "COMPLETED"):
    from tutorial_lib.figures import plots

    rows = []
    for name, frame in runs.items():
        epochs = frame[frame["event"] == "epoch"]
        last = epochs.iloc[-1] if len(epochs) else {}
        rows.append({"name": name, "id": f"local-{name}", "backend": "local", "state": state, "world_size": 2,
                     "epoch": int(last["epoch"]) if len(epochs) else 0,
                     "epochs": int(frame[frame["event"] == "start"]["epochs"].iloc[0]),
                     "top1": last["top1"] if len(epochs) else None,
                     "images_per_sec": last["images_per_sec"] if len(epochs) else None})
    return plots.table_from_rows(rows)


def monitor_figure(runs: dict, state: str = "COMPLETED"):
    from matplotlib.figure import Figure

    from tutorial_lib.figures import monitor

    return monitor.draw_jobs(Figure(figsize=(12, 8), layout="constrained"), runs, table(runs, state), True)


def _bars_01_gpu():
    """01's speed bars on a GPU: gpu.yaml's 16 settings (4 precisions x channels_last x compile none/default)."""
    import matplotlib.pyplot as plt

    from tutorial_lib.figures import plots

    labels = [f"{p}{cl}{mode}" for mode in ("", " default") for cl in ("", " +CL") for p in ("fp32", "tf32", "fp16",
                                                                                              "bf16")]
    values = [2909.9 + 61.0 * i for i in range(len(labels))]
    fig, (speed, memory) = plt.subplots(1, 2, figsize=(11, 4), layout="constrained")
    plots.plot_bars(labels, values, "images/s", ax=speed, ranges=[(v * 0.9, v * 1.1) for v in values],
                    title="throughput")
    plots.plot_bars(labels, [5685.4 - 300.0 * i for i in range(len(labels))], "MiB", ax=memory, title="memory")
    return fig


def _bars_01():
    import matplotlib.pyplot as plt

    from tutorial_lib.figures import plots

    fig, (speed, memory) = plt.subplots(1, 2, figsize=(11, 4), layout="constrained")
    plots.plot_bars(["fp32", "fp32 +CL", "bf16", "bf16 +CL"], [70.0, 61.9, 95.0, 83.0], "images/s", ax=speed,
                    ranges=[(66.3, 74.8), (55.5, 76.8), (88.0, 101.0), (71.9, 107.2)], title="throughput")
    plots.plot_bars(["fp32", "fp32 +CL", "bf16", "bf16 +CL"], [310.0, 305.0, 170.0, 168.0], "MiB", ax=memory,
                    title="memory")
    return fig


def _loader_02():
    import matplotlib.pyplot as plt

    from tutorial_lib.figures import plots

    fig, (rate, bandwidth) = plt.subplots(1, 2, figsize=(11, 4), layout="constrained")
    plots.plot_bars(["0 workers", "1 worker", "2 workers"], [223.4, 344.0, 38.0], "images/s", ax=rate,
                    ranges=[(203.9, 253.1), (300.0, 380.0), (25.0, 60.0)], title="loader throughput")
    plots.plot_bars(["0 workers", "1 worker", "2 workers"], [25.0, 38.0, 4.2], "MB/s read", ax=bandwidth,
                    ranges=[(22.0, 28.0), (33.0, 42.0), (2.8, 6.6)], title="read bandwidth")
    return fig


def _decode_02():
    from tutorial_lib.figures import plots

    return plots.plot_bars(["read", "decode", "augment"], [0.07, 2.77, 0.79], "ms per image", fmt="{:.2f}",
                           ranges=[(0.05, 0.19), (2.5, 2.92), (0.7, 0.9)], title="one image in one process").figure


def _waiting_02(model_rate: float = 120.0, rates=(223.4, 344.0, 38.0)):
    from tutorial_lib.figures import plots

    loader = [{"status": "ok", "pipeline": "cpu-dataloader", "workers": w, "images_per_sec": v,
               "images_per_sec_low": v * 0.9, "images_per_sec_high": v * 1.1} for w, v in enumerate(rates)]
    loader.append({"status": "skipped", "pipeline": "gpu"})
    model = {"status": "ok", "images_per_sec": model_rate, "images_per_sec_low": 0.68 * model_rate / 1.44,
             "images_per_sec_high": 1.54 * model_rate / 1.44}
    return plots.plot_loader_vs_model(loader, model).figure


def _equivalence_03():
    same = run_events(1, [40.0], steps_per_epoch=8, rate=80.0)
    return {"03-group-2w": same.assign(images_per_sec=same["images_per_sec"] * 0.8), "03-group-1w": same,
            "03-batch-2w": run_events(1, [38.0], loss0=2.4), "03-batch-1w": run_events(1, [41.0], loss0=2.2)}


def _group_loss_03():
    from tutorial_lib.figures import plots

    same = run_events(1, [40.0])
    return plots.plot_loss({"03-group-2w": same, "03-group-1w": same}).figure


def _sweep_04() -> dict:
    runs = {}
    for warmup in (0, 1):
        for i, batch in enumerate((16, 64, 256)):
            top1 = [60.0 - 10 * i + 5 * warmup, 85.0 - 8 * i, 92.0 - 6 * i + warmup, 95.0 - 5 * i + warmup]
            runs[f"04-warmup{warmup}-batch_size{batch}"] = run_events(4, top1, steps_per_epoch=4, rate=140.0 + 7 * i,
                                                                      loss0=2.3 + 0.1 * i + 0.05 * warmup)
    runs["04-lars"] = run_events(4, [50.0, 80.0, 90.0, 93.0], steps_per_epoch=4)
    return runs


def goyal_schedule(batch: int, warmup_epochs: float = 5, steps_per_epoch: int = 20, epochs: int = 90) -> list:
    """Goyal et al.'s LR per step at ``batch``: 0.1 x batch / 256, reached linearly from 0.1 over the warmup, divided
    by 10 at epochs 30, 60 and 80 (the values the trainer's scheduler gives; its own test is tests/test_optim.py:
    computing them here keeps torch's optimiser, and its import, out of a figure test)."""
    peak, values = 0.1 * batch / 256, []
    for step in range(epochs * steps_per_epoch):
        epoch = step / steps_per_epoch
        lr = peak * 0.1 ** sum(epoch >= m for m in (30, 60, 80))
        if epoch < warmup_epochs:
            lr = 0.1 + (peak - 0.1) * epoch / warmup_epochs
        values.append(lr)
    return values


def _schedules_04():
    import matplotlib.pyplot as plt

    from tutorial_lib.figures import plots

    schedules = {f"batch {b}": goyal_schedule(b) for b in (256, 1024, 8192)}
    schedules["batch 8192, no warmup"] = goyal_schedule(8192, warmup_epochs=0)
    fig, (full, zoom) = plt.subplots(1, 2, figsize=(11, 3.6), layout="constrained")
    plots.plot_lr_schedules(schedules, 20, full)
    plots.plot_lr_schedules(schedules, 20, zoom, log=False, until=10, title="The first epochs: gradual warmup")
    # analysis.lr_explorer's static figure: the same function, the reference batch beside the chosen one
    explorer = plt.subplots(figsize=(7, 3.5), layout="constrained")[1]
    plots.plot_lr_schedules({"batch 256 (reference)": goyal_schedule(256), "batch 8192, warmup 5 ep":
                             goyal_schedule(8192)}, 20, explorer, title="Linear scaling: peak LR = 0.1 x 8192 / 256")
    return fig, explorer.figure


def _accuracy_vs_batch_04():
    from tutorial_lib.analyses import analysis

    rows = [{"recipe": recipe, "global_batch": batch, "top1": top1} for recipe, points in
            (("SGD, no warmup", ((16, 95.0), (64, 95.0), (256, 80.0))),
             ("SGD, warmup 1 ep", ((16, 95.0), (64, 95.0), (256, 88.0)))) for batch, top1 in points]
    # the same top-1 at the two smaller batches (the issue-44 read's 04: the lines met there, unlabelled)
    return analysis.plot_accuracy_vs_batch(pd.DataFrame(rows), title="Top-1 after 4 epochs").figure


def _lars_04():
    from tutorial_lib.figures import plots

    runs = _sweep_04()
    largest = {name: runs[name] for name in ("04-warmup0-batch_size256", "04-warmup1-batch_size256", "04-lars")}
    return plots.plot_accuracy(largest).figure


def _cancelled_05():
    events = pd.DataFrame([{"event": "start", "epochs": 50, "world_size": 2, "global_batch": 64},
                           {"event": "step", "epoch": 1, "step": 1, "loss": 2.3, "images_per_sec": 90.0}])
    return monitor_figure({"05-cancel-me": events}, state="CANCELLED")


def _study_06(tmp_path: Path):
    """Two recorded-shaped runs of the scaling study (per-epoch speeds as issue 44 quotes them)."""
    from tutorial_lib.analyses import study

    records = []
    for gpus, rates in ((1, (165.4, 187.2, 241.6)), (2, (192.8, 173.0, 134.7))):
        frame = run_events(3, [90.0, 94.0, 95.5])
        epochs = [r for r in frame.to_dict("records") if r["event"] == "epoch"]
        for record, rate in zip(epochs, rates, strict=True):
            record["images_per_sec"] = rate
        spread = study.epoch_spread(epochs)
        records.append({"name": f"06-scale-ranks_per_node{gpus}", "gpus": gpus, "nodes": 1, "gpus_per_node": gpus,
                        "global_batch": 32 * gpus, "images_per_sec": spread.median, "images_per_sec_low": spread.low,
                        "images_per_sec_high": spread.high, "epochs_measured": len(spread.samples),
                        "epochs_run": 3, "top1": 95.5, "top5": 100.0, "on_gpu": False, "arch": "resnet18",
                        "image_size": 16, "measured_epoch_s": 10.0, "hosts": ["h"], "epochs": epochs})
    return study.collect([{k: v for k, v in r.items() if k != "epochs"} for r in records]), records


def _scaling_06(results):
    import matplotlib.pyplot as plt

    from tutorial_lib.analyses import reference, study
    from tutorial_lib.figures import plots

    fig, (scale, eff) = plt.subplots(1, 2, figsize=(11, 4), layout="constrained")
    study.plot_scaling_results(results, scale, eff)
    published = reference.reference_frame("hal")
    fig_cmp, (ref, ref_eff) = plt.subplots(1, 2, figsize=(11, 4), layout="constrained")
    plots.plot_scaling(published["gpus"], published["images_per_sec"], ax=ref, label="the HAL benchmark (V100)")
    reference.plot_efficiency_vs_reference(results, published, ax=ref_eff, label="this study (smoke)",
                                           reference_label="the HAL benchmark (V100)")
    return fig, fig_cmp


def _comm_07():
    import numpy as np

    from tutorial_lib import scaling
    from tutorial_lib.analyses import allreduce
    from tutorial_lib.figures import comm_figures
    from tutorial_lib.scaling.presets import PRESETS

    sizes = [4096 * 4**k for k in range(7)]
    link = scaling.Link(8 * 0.50037, 30.0)  # Gbit/s: the fitted 0.50037 GB/s of issue 44
    samples = [(n, float(comm_figures.fitted_seconds(link, [n], 2)[0]) * (1.0 + 0.02 * np.sin(i)))
               for i, n in enumerate(sizes)]
    fitted = scaling.fit_link(samples, 2)
    large = [(n, float(comm_figures.fitted_seconds(link, [n], 2)[0])) for n in (2**20, 2**22, 2**24)]
    figures = [Shown("07 ring all-reduce", allreduce.draw_ring_allreduce(4)),
               Shown("07 halving-doubling", allreduce.draw_halving_doubling_allreduce(4)),
               Shown("07 all-reduce fit", comm_figures.plot_allreduce_fit(samples, 2, fitted)),
               # only bandwidth-bound sizes: the fit meets the link's line, which then sat on the top spine
               Shown("07 all-reduce fit, large messages", comm_figures.plot_allreduce_fit(
                   large, 2, scaling.fit_link(large, 2)))]
    gpus = [2**k for k in range(13)]
    hal = PRESETS["hal"]
    calibrated = scaling.calibrate(hal.model, samples, 2, hal.model.workload.images_per_sec_per_gpu, level="inter")
    figures.append(Shown("07 projections", comm_figures.plot_projections(
        PRESETS, gpus, extra={"hal, measured link as inter": (hal, calibrated)})))
    figures.append(Shown("07 what-if", comm_figures.plot_what_if(PRESETS["goyal"], gpus, {
        "bandwidth_gbit_s": [5, 10, 25, 50, 100], "overlap": [0.0, 0.4, 0.8, 1.0],
        "per_gpu_batch": [4, 8, 16, 32, 64]})))
    return figures


def _staleness_07():
    from types import SimpleNamespace

    from tutorial_lib.figures import comm_figures

    def records(slow: float, per_step_s: float):
        return [{"step": s, "wall_s": s * per_step_s, "loss": 2.3 * math.exp(-s / (30 * slow)),
                 "accuracy": 1 - 0.9 * math.exp(-s / (30 * slow))} for s in range(0, 151, 10)]

    runs = {"ps_s0": SimpleNamespace(records=records(1.0, 0.02)),
            "ps_s1": SimpleNamespace(records=records(1.2, 0.015)),
            "ps_s4": SimpleNamespace(records=records(1.5, 0.012)),
            "allreduce": SimpleNamespace(records=records(1.0, 0.018))}
    return comm_figures.plot_staleness_runs(runs)


def _twolevel_07():
    from tutorial_lib.analyses import twolevel
    from tutorial_lib.bench.records import read_records

    return twolevel.plot(read_records(ROOT / "results" / "netlab_allreduce.jsonl", kind="allreduce")[-2:])


def course_figures(tmp_path: Path) -> list[Shown]:
    """Every figure of notebooks 00-07, drawn by the library from course-shaped data."""
    from conftest import write_image_tree

    from tutorial_lib.course import environment
    from tutorial_lib.figures import plots

    write_image_tree(tmp_path / "digits", {"train": {str(c): 3 for c in range(10)}, "val": {"0": 1}})
    shown = [Shown("00 sample grid", environment.sample_grid(tmp_path / "digits", n=16))]
    shown += [Shown("01 speed and memory", _bars_01()), Shown("01 speed and memory on a GPU", _bars_01_gpu()),
              Shown("01 monitor", monitor_figure({"01-amp-precisionfp32": run_events(3, [60.0, 80.0, 88.0]),
                                                  "01-amp-precisionbf16": run_events(3, [58.0, 79.0, 89.0])}), 3)]
    shown += [Shown("02 one image", _decode_02()), Shown("02 loader", _loader_02()),
              Shown("02 waiting for data", _waiting_02()),
              # the issue-44 read: bf16 on this CPU trained at 1.4 img/s, the loaders delivered 96-125
              Shown("02 waiting for data, a slow model", _waiting_02(1.44, (125.1, 113.1, 96.5)))]
    shown += [Shown("03 equivalence monitor", monitor_figure(_equivalence_03()), 1),
              Shown("03 GroupNorm losses", _group_loss_03())]
    schedules, explorer = _schedules_04()
    shown += [Shown("04 LR schedules", schedules, 90), Shown("04 LR explorer", explorer, 90),
              Shown("04 sweep monitor", monitor_figure(_sweep_04()), 4),
              Shown("04 accuracy vs batch", _accuracy_vs_batch_04(), single_runs=True),
              Shown("04 LARS", _lars_04(), 4)]
    # 40 steps per epoch: matplotlib's margin put the step axis at -6 (the re-read's 04 monitor: -12.55)
    shown += [Shown("05 multi-node monitor", monitor_figure({"05-multinode": run_events(3, [85.0, 93.0, 96.0],
                                                                                      steps_per_epoch=40)}), 3),
              Shown("05 cancelled job monitor", _cancelled_05(), 50)]
    results, records = _study_06(tmp_path)
    scaling_fig, reference_fig = _scaling_06(results)
    shown += [Shown("06 scaling", scaling_fig, single_runs=True), Shown("06 vs reference", reference_fig,
                                                                       single_runs=True),
              Shown("06 accuracy", plots.plot_accuracy({f"{r['gpus']} CPU rank(s)": pd.DataFrame(r["epochs"])
                                                        for r in records}).figure, 3)]
    shown += _comm_07()
    shown += [Shown("07 staleness", _staleness_07()), Shown("07 two-level network", _twolevel_07())]
    return shown
