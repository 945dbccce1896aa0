"""What a resume may change: a checkpoint's recipe compared with the configuration that restarts it.

Started again on a run directory, the trainer resumes from its checkpoint. Settings that only say how long,
where or how fast to run (:data:`SAFE_TO_CHANGE`, e.g. more ``epochs``) may differ, and the differences are
recorded in the ``resume`` event; the schedule then follows the new plan (:mod:`tutorial_lib.engine.schedule`),
and ``epochs`` fewer than the work already done is refused. Any other difference (arch, classes, image size,
batch, precision, optimiser, schedule, ranks...) would train something else on top of the old weights and is
refused in one line before anything is written.
"""

from __future__ import annotations

import dataclasses
import os

from tutorial_lib.engine.errors import ConfigError, shorten

# Fields a resume may change: they say how long, where, how fast or how verbosely to run, not what is trained.
SAFE_TO_CHANGE = frozenset({
    "name", "output_root", "profile", "data_dir", "epochs", "stop_after_epochs", "workers", "prefetch",
    "input_pipeline", "bad_data", "stage_to", "index_dir", "device", "compile", "bucket_cap_mb", "allreduce",
    "log_every", "checkpoint",
    "progress",
})

_PATHS = ("output_root", "data_dir")
_WHERE = ("name", "output_root")  # where the run directory is now (it may have been moved), not the recipe


def recipe_changes(old: dict, new: dict, defaults: dict) -> tuple[dict, dict]:
    """``(safe, refused)``: the fields whose value differs between a checkpoint's recipe ``old`` and ``new``,
    each as ``{field: [old, new]}``. A field the checkpoint does not record had its default then."""
    safe, refused = {}, {}
    for key, value in new.items():
        if key in _WHERE:
            continue
        before = old.get(key, defaults.get(key))
        if key in _PATHS and isinstance(before, str) and isinstance(value, str):
            before, value = os.path.abspath(before), os.path.abspath(value)  # jobs store them absolute
        if before != value:
            (safe if key in SAFE_TO_CHANGE else refused)[key] = [before, value]
    return safe, refused


def check_resume(checkpoint: dict, cfg, facts: dict, run_dir) -> dict:
    """The safe changes of resuming ``checkpoint`` with ``cfg``; ConfigError naming every refused field.

    ``facts`` are measured values that are part of the recipe too (``world_size``, ``num_classes``), compared
    with those the checkpoint recorded (a checkpoint without them is compared on the configuration alone)."""
    defaults = dataclasses.asdict(type(cfg)())
    check_recorded_config(checkpoint.get("config") or {}, defaults, run_dir)
    safe, refused = recipe_changes(checkpoint.get("config") or {}, cfg.to_dict(), defaults)
    for key, value in facts.items():
        if checkpoint.get(key) is not None and checkpoint[key] != value:
            refused[key] = [checkpoint[key], value]
    if refused:
        changed = ", ".join(f"{key} {shorten(a, 30)} -> {shorten(b, 30)}" for key, (a, b) in sorted(refused.items()))
        raise ConfigError(
            f"resume: the checkpoint in {run_dir} was trained with another recipe ({changed}); resuming would train "
            "something else on its weights, so nothing was written. Fix: pass another --name for a new run, or "
            f"start this one over (jobs.submit(..., fresh=True), or python -m tutorial_lib.rundir fresh {run_dir})")
    check_plan_length(checkpoint.get("progress") or {}, cfg.epochs, run_dir)
    return safe


def check_recorded_config(recorded: dict, defaults: dict, run_dir) -> None:
    """ConfigError when a checkpoint's ``config`` holds a field of a type the trainer never writes (``epochs: 'x'``
    was compared as a safe change, "epochs x -> 3", and resumed): its recipe cannot be trusted."""
    from tutorial_lib.engine.config import check_type

    for key, value in recorded.items():
        if key not in defaults:  # a field of another version: recipe_changes compares only today's fields
            continue
        try:
            check_type(key, value)
        except ConfigError:
            raise ConfigError(
                f"checkpoint: {run_dir}/checkpoint.pt holds config.{key} = {shorten(value)}, a value the trainer "
                f"never writes, so its recipe cannot be compared and nothing was loaded. Fix: start this run over "
                f"(python -m tutorial_lib.rundir fresh {run_dir}) or restore the checkpoint the trainer wrote"
            ) from None


def check_plan_length(progress: dict, epochs: int, run_dir) -> None:
    """ConfigError when ``epochs`` ends the plan before the work the checkpoint already holds (its ``progress``):
    the weights would be more trained than the plan says, and its schedule's end already passed."""
    done, into = progress.get("epoch", 0), progress.get("step_in_epoch", 0)
    if epochs > done or (epochs == done and not into):
        return
    held = f"{done} epochs" + (f" and {into} steps of epoch {done + 1}" if into else "")
    raise ConfigError(
        f"epochs: {epochs} is fewer than the checkpoint in {run_dir} has trained already ({held}), so nothing was "
        f"written. Fix: pass --epochs {done + (1 if into else 0)} or more to go on from it, or another --name for a "
        f"new run of {epochs} epochs")
