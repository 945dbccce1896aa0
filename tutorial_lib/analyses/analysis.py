"""Comparing finished runs: weights, loss curves, final accuracy, and LR schedules side by side.

    from tutorial_lib.analyses import analysis
    diff = analysis.compare_checkpoints("runs/course/03-one", "runs/course/03-two")
    print(analysis.verdict(diff))                       # computed, never typed in
    analysis.final_accuracy(jobs)                       # one row per run: global batch, LR, top-1...
    analysis.plot_accuracy_vs_batch(table)              # Goyal et al.'s error-vs-minibatch figure, small

A run is given as a :class:`tutorial_lib.jobs.Job`, its run directory, or (for checkpoints) the
path of a ``checkpoint.pt`` file.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from tutorial_lib.jobs.states import FINAL_STATES
from tutorial_lib.rundir.checkpoint import load_checkpoint
from tutorial_lib.rundir.layout import CHECKPOINT_FILE, CONFIG_FILE, DONE_FILE
from tutorial_lib.rundir.metrics import read_metrics
from tutorial_lib.text import claims, verdicts

# Two float32 runs that add the same numbers in a different order differ by a few float32 ulps
# (eps = 1.2e-7 relative) per step; over tens of steps that stays below this bound, while a real
# difference in the recipe (another global batch, LR, data order, BatchNorm split) is above 1e-3.
ROUNDING_TOLERANCE = 1e-5


def run_dir_of(run) -> Path:
    """The run directory of a Job, a run directory path, or a checkpoint file's folder."""
    path = Path(getattr(run, "run_dir", run))
    return path.parent if path.is_file() else path


def run_label(run) -> str:
    """A short label for a run: the Job's name or the run directory's name."""
    return str(getattr(run, "name", None) or run_dir_of(run).name)


def load_weights(run) -> dict:
    """The model ``state_dict`` stored in a run's ``checkpoint.pt`` (or in the checkpoint file given)."""
    path = Path(getattr(run, "run_dir", run))
    if path.is_dir():
        path = path / CHECKPOINT_FILE
    state = load_checkpoint(path)
    if state is None:
        raise FileNotFoundError(f"no checkpoint at {path}. Fix: pass the run directory of a finished run "
                                "(trained with checkpoint=True), or the path of its checkpoint.pt.")
    return state["model"] if "model" in state else state


def compare_checkpoints(run_a, run_b) -> dict:
    """Compare the model weights of two runs tensor by tensor.

    Returns

    * ``max_abs_diff``: the largest ``|a - b|`` over every element of every tensor;
    * ``rel_diff``: ``||a - b|| / ||a||`` over all floating-point tensors together (L2 norms): how far
      apart the two models are relative to their size. Float32 rounding is about 1e-7 of this scale;
    * ``max_rel_diff``: the largest per-tensor ``||a_t - b_t|| / ||a_t||``. Tensors that are still near
      zero (e.g. the zero-initialised last norm scale of each ResNet block after a few steps) make
      this much larger than ``rel_diff`` for the same absolute difference;
    * ``tensors`` (how many were compared), ``elements`` (their total size) and ``worst_tensor``
      (where ``max_abs_diff`` was found);
    * ``per_tensor``: ``{name: {"max_abs_diff", "ndim"}}`` for every non-empty tensor, for
      :func:`tutorial_lib.text.training_claims.weight_differences` (where the differences sit).

    Integer buffers (e.g. BatchNorm's ``num_batches_tracked``) count towards ``max_abs_diff`` only.
    Raises ValueError when the two models do not have the same tensors and shapes.
    """
    a, b = load_weights(run_a), load_weights(run_b)
    if a.keys() != b.keys():
        only_a, only_b = sorted(set(a) - set(b)), sorted(set(b) - set(a))
        raise ValueError(f"the checkpoints hold different models: only in {run_label(run_a)}: {only_a[:5]}, "
                         f"only in {run_label(run_b)}: {only_b[:5]}. Fix: compare runs of the same arch, norm "
                         "and number of classes.")
    max_abs, max_rel, worst, elements = 0.0, 0.0, None, 0
    diff_sq, size_sq, per_tensor = 0.0, 0.0, {}
    for key, tensor_a in a.items():
        tensor_b = b[key]
        if tensor_a.shape != tensor_b.shape:
            raise ValueError(f"tensor {key}: shape {tuple(tensor_a.shape)} vs {tuple(tensor_b.shape)}. "
                             "Fix: compare runs of the same model.")
        elements += tensor_a.numel()
        if tensor_a.numel() == 0:
            continue
        da, db = tensor_a.detach().double(), tensor_b.detach().double()
        diff = (da - db).abs().max().item()
        per_tensor[key] = {"max_abs_diff": diff, "ndim": tensor_a.dim()}
        if worst is None or diff > max_abs:
            max_abs, worst = diff, key
        if tensor_a.is_floating_point():
            tensor_diff_sq, tensor_size_sq = (da - db).square().sum().item(), da.square().sum().item()
            diff_sq, size_sq = diff_sq + tensor_diff_sq, size_sq + tensor_size_sq
            max_rel = max(max_rel, _ratio(tensor_diff_sq, tensor_size_sq))
    return {"max_abs_diff": max_abs, "rel_diff": _ratio(diff_sq, size_sq), "max_rel_diff": max_rel,
            "tensors": len(a), "elements": elements, "worst_tensor": worst, "per_tensor": per_tensor}


def _ratio(diff_sq: float, size_sq: float) -> float:
    if diff_sq == 0:
        return 0.0
    return math.sqrt(diff_sq / size_sq) if size_sq > 0 else math.inf


def verdict(result: Mapping, tolerance: float = ROUNDING_TOLERANCE) -> str:
    """A sentence judging a :func:`compare_checkpoints` result: its ``rel_diff`` against ``tolerance``."""
    rel, abs_ = result["rel_diff"], result["max_abs_diff"]
    if rel <= tolerance:
        return (f"equal within float rounding: relative difference {rel:.1e} <= {tolerance:.0e} "
                f"(max |a-b| = {abs_:.1e} over {result['tensors']} tensors)")
    return (f"DIFFERENT: relative difference {rel:.1e} > {tolerance:.0e} (max |a-b| = {abs_:.1e}, "
            f"in {result['worst_tensor']})")


def step_table(runs: Sequence, column: str = "loss"):
    """One ``column`` of the ``step`` events of several runs side by side: index ``step``, one column per run."""
    import pandas as pd

    series = {}
    for run in runs:
        records = [r for r in read_metrics(run_dir_of(run)) if r["event"] == "step" and column in r]
        series[run_label(run)] = pd.Series({r["step"]: r[column] for r in records}, dtype=float)
    table = pd.DataFrame(series)
    table.index.name = "step"
    return table


def _config(run_dir: Path) -> dict:
    path = run_dir / CONFIG_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


def run_config(run) -> dict:
    """A run's ``config.json`` (empty before the job has started), from a Job or a run directory."""
    return _config(run_dir_of(run))


def recipe_label(optimizer: str, warmup_epochs: float) -> str:
    """``"SGD, warmup 1 ep"`` / ``"LARS, no warmup"``: the series name used by :func:`final_accuracy`."""
    warm = f"warmup {warmup_epochs:g} ep" if warmup_epochs else "no warmup"
    return f"{str(optimizer).upper()}, {warm}"


def num_classes(config: Mapping) -> int:
    """The classes a run trained on: recorded in its ``config.json``, else the dataset's (digits 10,
    ImageNet 1000)."""
    return int(config.get("num_classes") or (10 if config.get("dataset", "digits") == "digits" else 1000))


def _outcome(label: str, config: Mapping, events: list) -> claims.Claim:
    epochs = [e for e in events if e["event"] == "epoch"]
    steps = [e.get("loss") for e in events if e["event"] == "step"]
    return verdicts.training_outcome(label, epochs[-1].get("top1") if epochs else None, num_classes(config),
                                     [e.get("train_loss") for e in epochs], step_losses=steps)


def outcome(run, label: str | None = None) -> claims.Claim:
    """Whether a finished run learned (:func:`tutorial_lib.text.verdicts.training_outcome`): its last
    top-1 against chance and its loss trend (the mean train loss of the first epoch against the last's; a
    non-finite step loss counts as diverged), read from its run directory (a Job or a path)."""
    run_dir = run_dir_of(run)
    return _outcome(label or run_label(run), _config(run_dir), read_metrics(run_dir))


def final_accuracy(runs: Sequence):
    """One row per run: its recipe and the validation accuracy it ended with.

    Columns: ``run``, ``world_size``, ``batch_size`` (per worker), ``global_batch``, ``peak_lr`` (the
    linearly scaled LR), ``warmup_epochs``, ``optimizer``, ``recipe`` (:func:`recipe_label`), ``epochs``
    (finished), ``top1`` / ``top5`` (%, last epoch), ``best_top1``, ``train_loss`` (last epoch),
    ``outcome`` (:func:`tutorial_lib.text.verdicts.training_outcome`: learns, above chance, near chance
    or diverged, against chance and the loss trend), ``diverged`` (outcome is diverged), ``train_time_s``
    (sum of epoch times) and ``state`` (a Job's state when a Job was given, else COMPLETED/INCOMPLETE
    from the run directory's DONE file).

    A Job still pending or running when the table is made (a watch that timed out at a loaded machine) has no
    result yet: its ``top1``, ``top5`` and ``best_top1`` are empty and its outcome is ``unfinished (epoch k of
    n)``, so that no claim judges its last epoch as its end (the issue-44 read of 04: a batch-256 run at epoch 3
    of 4 was called "near chance" and LARS "did not finish"; both went on to finish, LARS at 93.0%).
    """
    import pandas as pd

    rows = []
    for run in runs:
        run_dir = run_dir_of(run)
        config, events = _config(run_dir), read_metrics(run_dir)
        start = next((e for e in events if e["event"] == "start"), {})
        epochs = [e for e in events if e["event"] == "epoch"]
        last = epochs[-1] if epochs else {}
        outcome = _outcome(run_label(run), config, events)
        world = config.get("world_size", start.get("world_size"))
        warmup = config.get("warmup_epochs", math.nan)
        state = getattr(run, "state", None) or ("COMPLETED" if (run_dir / DONE_FILE).exists() else "INCOMPLETE")
        if getattr(run, "state", None) is not None and state not in FINAL_STATES:
            planned = config.get("epochs", start.get("epochs"))
            at = f"epoch {len(epochs)}" + (f" of {planned}" if planned else "")
            outcome = claims.Claim(outcome.topic, f"unfinished ({at})", f"{run_label(run)} was {state} at {at}: "
                                   "not judged")
            last, epochs_top1 = {}, []
        else:
            epochs_top1 = [e["top1"] for e in epochs]
        rows.append({
            "run": run_label(run), "world_size": world, "batch_size": config.get("batch_size"),
            "global_batch": config.get("global_batch", start.get("global_batch")),
            "peak_lr": config.get("scaled_lr", start.get("scaled_lr")), "warmup_epochs": warmup,
            "optimizer": config.get("optimizer"), "recipe": recipe_label(config.get("optimizer", "?"), warmup),
            "epochs": len(epochs), "top1": last.get("top1"), "top5": last.get("top5"),
            "best_top1": max(epochs_top1, default=None), "train_loss": last.get("train_loss"),
            "outcome": outcome.verdict, "diverged": outcome.verdict == "diverged",
            "train_time_s": sum(e.get("epoch_time", 0.0) for e in epochs), "state": state})
    return pd.DataFrame(rows)


def lars_comparison(runs: Sequence, tolerance_points: float = 2.0):
    """LARS against plain SGD at one global batch: :func:`final_accuracy` of ``runs`` (the LARS run found by its
    optimizer, not by its place in the list) and the sentence that compares them
    (:func:`tutorial_lib.text.training_claims.lars_vs_sgd`). Returns ``(table, claim)``."""
    from tutorial_lib.text import training_claims

    table = final_accuracy(runs)
    lars = table[table["optimizer"] == "lars"]
    sgd = table[table["optimizer"] != "lars"]
    batch = int((lars if len(lars) else table)["global_batch"].iloc[0])
    claim = training_claims.lars_vs_sgd(lars["top1"].iloc[0] if len(lars) else None,
                                        dict(zip(sgd["recipe"], sgd["top1"], strict=True)), batch,
                                        tolerance_points=tolerance_points)
    return table, claim


def largest_gap(runs: Sequence, column: str = "loss") -> float:
    """The largest absolute difference between two runs' logged ``column`` at the same step (:func:`step_table`)."""
    table = step_table(list(runs), column)
    return float((table.iloc[:, 0] - table.iloc[:, 1]).abs().max())


def plot_accuracy_vs_batch(table, ax=None, group: str = "recipe", metric: str = "top1",
                           title: str = "Accuracy against minibatch size"):
    """Validation accuracy (or another ``metric``) against the global batch, one line per ``group``.

    ``table`` is :func:`final_accuracy`'s DataFrame. The x axis is log2 like Goyal et al.'s Figure of
    error against minibatch size (they plot error = 100 - top-1; accuracy reads the same way up). The title
    says that each point is one run. Returns the axes.
    """
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, NullLocator, ScalarFormatter

    from tutorial_lib.figures.readable import add_note, mark_coinciding, place_legend

    if ax is None:
        ax = plt.subplots(figsize=(6.4, 4.0), layout="constrained")[1]
    for label, rows in table.groupby(group, sort=False):
        rows = rows.sort_values("global_batch")
        ax.plot(rows["global_batch"], rows[metric], marker="o", label=str(label))
    batches = sorted(set(table["global_batch"]))
    if batches:
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_locator(FixedLocator(batches))
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("global minibatch size (images per step)")
    ax.set_ylabel("validation top-1 (%)" if metric == "top1" else metric)
    ax.set_title(title)
    unfinished = [str(run) for run, verdict in zip(table.get("run", []), table.get("outcome", []), strict=True)
                  if str(verdict).startswith("unfinished")]
    add_note(ax, "(one run, one seed, per point: its noise is not measured)" + (
        f"; unfinished when drawn, not plotted: {', '.join(unfinished)}" if unfinished else ""))
    ax.grid(True, alpha=0.3)
    mark_coinciding(ax)
    place_legend(ax, fontsize="small")
    return ax


# ------------------------------------------------------------------ DDP buckets
def ddp_buckets(model, bucket_cap_mb: float = 25, first_bucket_mb: float = 1.0):
    """How DistributedDataParallel groups ``model``'s gradients into all-reduce buckets.

    DDP fills buckets in the order gradients become ready in backward (about the reverse of the
    parameter order: the classifier first, the stem last). The first bucket is capped at
    ``first_bucket_mb`` (torch's default 1 MiB, so communication starts early), the others at
    ``bucket_cap_mb``; a bucket closes once it reaches its cap. Each bucket's all-reduce starts as
    soon as its last gradient is ready, while backward continues with earlier layers.
    Returns a DataFrame: ``bucket`` (0 = all-reduced first), ``tensors``, ``mib``, ``first`` and
    ``last`` parameter names. Same rule as ``torch.distributed._compute_bucket_assignment_by_size``,
    written out so it can be read. (DDP's very first iteration uses one bucket for everything and
    records the real gradient order; the buckets shown are those it rebuilds from that order.)
    """
    import pandas as pd

    named = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    caps = [first_bucket_mb * 2**20, bucket_cap_mb * 2**20]
    rows, current, size = [], [], 0
    for name, param in reversed(named):
        current.append(name)
        size += param.numel() * param.element_size()
        if size >= caps[min(len(rows), 1)]:
            rows.append({"tensors": len(current), "mib": size / 2**20, "first": current[0], "last": current[-1]})
            current, size = [], 0
    if current:
        rows.append({"tensors": len(current), "mib": size / 2**20, "first": current[0], "last": current[-1]})
    table = pd.DataFrame(rows, columns=["tensors", "mib", "first", "last"])
    table.index.name = "bucket"
    return table


# ------------------------------------------------------------------ LR schedules
def schedule_for(cfg, global_batch: int, warmup_epochs: float | None = None, steps_per_epoch: int = 20,
                 **overrides) -> list[float]:
    """The LR at every iteration of ``cfg`` trained with ``global_batch`` images per step.

    Uses :func:`tutorial_lib.engine.optim.lr_schedule_values` (the trainer's own scheduler). The LR as a
    function of the *epoch* does not depend on how many iterations an epoch has, so schedules of
    different batch sizes are sampled at the same ``steps_per_epoch`` and plotted on one epoch axis.
    For the start of warmup, ``overrides`` may set e.g. ``warmup_start_factor``.
    """
    from tutorial_lib.engine.optim import lr_schedule_values

    changes = {"batch_size": global_batch, **overrides}
    if warmup_epochs is not None:
        changes["warmup_epochs"] = warmup_epochs
    return lr_schedule_values(dataclasses.replace(cfg, **changes), steps_per_epoch, world_size=1)


def lr_table(schedules: Mapping[str, Sequence[float]], steps_per_epoch: int, epochs: Sequence[float],
             digits: int = 4):
    """The LR of each schedule at the given epochs (iteration ``round(epoch * steps_per_epoch)``),
    rounded to ``digits`` decimals: a deterministic table (index ``epoch``, one column per schedule)."""
    import pandas as pd

    rows = {}
    for epoch in epochs:
        step = round(epoch * steps_per_epoch)
        rows[epoch] = {label: round(values[min(step, len(values) - 1)], digits) for label, values in schedules.items()}
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.index.name = "epoch"
    return table


def frontend_present() -> bool:
    """True when a person is looking at a widget-capable frontend: :func:`tutorial_lib.figures.monitor.live_frontend`
    (False under papermill, nbval, plain Python; ``TUTORIAL_MONITOR_CONTROLS=1/0`` forces it)."""
    from tutorial_lib.figures.monitor import live_frontend

    return live_frontend()


def lr_explorer(cfg, global_batch: int = 256, warmup_epochs: float = 1.0, batches: Sequence[int] = (),
                reference_batch: int | None = None, steps_per_epoch: int = 20, start_at_reference: bool = True,
                interactive: bool | None = None):
    """The LR schedule of ``cfg`` at ``global_batch`` (with ``warmup_epochs``) next to the reference batch.

    ``start_at_reference``: warmup starts at the reference batch's LR, as in Goyal et al. (start
    factor ``reference / global_batch``); otherwise at ``cfg.warmup_start_factor`` x the scaled LR.

    Without a live frontend (papermill, nbval, a script) it draws one static figure and returns its
    axes, so the executed notebook keeps a picture. With one (``interactive`` defaults to
    :func:`frontend_present`) it shows ``ipywidgets.interact`` sliders over ``batches`` (global batch
    sizes, default powers of two from 64 to 32k) and warmup epochs (0 to :func:`warmup_slider_max`) that redraw
    the figure, and returns the widget.
    """
    import matplotlib.pyplot as plt

    reference = reference_batch or cfg.lr_reference_batch
    batches = list(batches) or [2**k for k in range(6, 16)]

    def draw(global_batch: int, warmup_epochs: float):
        from tutorial_lib.figures.plots import plot_lr_schedules

        ax = plt.subplots(figsize=(7, 3.5), layout="constrained")[1]
        schedules = {}
        for batch, warmup in ((reference, cfg.warmup_epochs), (global_batch, warmup_epochs)):
            start = min(1.0, reference / batch) if start_at_reference else cfg.warmup_start_factor
            label = f"batch {batch} (reference)" if batch == reference else f"batch {batch}, warmup {warmup:g} ep"
            schedules[label] = schedule_for(cfg, batch, warmup, steps_per_epoch, warmup_start_factor=start)
        plot_lr_schedules(schedules, steps_per_epoch, ax, title=f"Linear scaling: peak LR = {cfg.base_lr:g} x "
                          f"{global_batch} / {cfg.lr_reference_batch}")
        return ax

    if interactive is None:
        interactive = frontend_present()
    if not interactive:
        return draw(global_batch, warmup_epochs)
    import ipywidgets

    def redraw(global_batch, warmup_epochs):
        draw(global_batch, warmup_epochs)
        plt.show()

    start = min(batches, key=lambda b: abs(b - global_batch))
    # whole labels, and a track wide enough to set a half epoch with the mouse
    look = dict(style={"description_width": "initial"}, layout=ipywidgets.Layout(width="520px"))
    return ipywidgets.interact(
        redraw,
        global_batch=ipywidgets.SelectionSlider(options=batches, value=start, description="global batch", **look),
        warmup_epochs=ipywidgets.FloatSlider(value=warmup_epochs, min=0.0, max=warmup_slider_max(cfg, warmup_epochs),
                                             step=0.5, description="warmup epochs", **look))


def warmup_slider_max(cfg, warmup_epochs: float) -> float:
    """The warmup slider's end: warmups of interest are short (Goyal et al.: 5 of 90 epochs), so up to
    4x the larger of the shown and the configured warmup, at least 10 epochs, at most ``cfg.epochs``."""
    return float(min(cfg.epochs, max(10.0, 4 * max(warmup_epochs, cfg.warmup_epochs))))
