"""The trainer's own speed as a benchmark record: ``python -m tutorial_lib.bench runs RUN_DIR...``.

A training run writes a ``step`` event every ``log_every`` steps with the images/s of that window
(``metrics.jsonl``) and its resolved settings and environment (``config.json``). :func:`trainer_record`
turns them into one JSON line of kind ``trainer``, like the benchmarks' records: the median images/s
of the steady-state windows and their range, the settings (data set, input pipeline, precision...)
and the device. Steady state leaves out the first window of every epoch (loader start-up, and in
the first epoch torch.compile's compilation and cuDNN's autotuning) and every window that ends at
or before ``skip_steps``.

A step line whose images/s is no measurement (not a number, not finite, zero or negative, or above
:data:`MAX_IMAGES_PER_SEC`, which no machine reaches: 1e308 would make the median and range meaningless) is left
out, never used: the record counts such lines (``rejected_events``) and a warning on stderr names the file and
how many lines there were.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from tutorial_lib.bench.timing import Spread, store
from tutorial_lib.paths import not_a_file
from tutorial_lib.rundir.layout import CONFIG_FILE, METRICS_FILE
from tutorial_lib.rundir.metrics import parse_json, read_metrics

SETTINGS = ("dataset", "input_pipeline", "arch", "precision", "channels_last", "compile", "batch_size",
            "global_batch", "image_size", "workers", "world_size", "log_every", "epochs", "max_steps_per_epoch",
            "steps_per_epoch", "optimizer", "data_dir")
ENV_KEYS = ("device", "device_name", "cpu_model", "cpus", "torch_threads", "hostname", "python", "torch",
            "torchvision", "pillow", "cuda", "driver")


# The largest metrics.jsonl read (checked before reading): a 90-epoch ImageNet run logging every step at 8 x 256
# images writes ~34 MB; a 16 GiB file (sparse, or another file) ran out of memory after 36 s, naming no file.
METRICS_MOST_BYTES = 256 << 20
MAX_IMAGES_PER_SEC = 1e8  # ~80 ImageNet epochs a second: beyond the largest published runs (~1e6 images/s)


def is_measured_rate(value) -> bool:
    """Whether a step event's ``images_per_sec`` can be a measurement (see the module's docstring)."""
    # compared, never converted: math.isfinite(10**400) raised OverflowError (r43q); NaN and inf fail the range
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= MAX_IMAGES_PER_SEC


class RunSummaryError(ValueError):
    """A folder that is not a trainer's run directory (the message names the fix)."""


def steady_windows(steps: list[dict], skip_steps: int = 0) -> tuple[list[dict], int]:
    """The ``step`` events of the steady state and how many were left out (see the module's docstring)."""
    kept, seen_epochs = [], set()
    for event in steps:
        first_of_epoch = event.get("epoch") not in seen_epochs
        seen_epochs.add(event.get("epoch"))
        if not first_of_epoch and event["step"] > skip_steps and event.get("images_per_sec"):
            kept.append(event)
    return kept, len(steps) - len(kept)


def trainer_record(run_dir: str | os.PathLike, skip_steps: int = 0) -> dict:
    """One ``kind: "trainer"`` record of a run directory: steady-state images/s (median and range of
    the logged windows), its settings and the device it ran on. Too few windows: ``status: "skipped"``."""
    run_dir = Path(run_dir)
    config_path = run_dir / CONFIG_FILE
    if not config_path.is_file():
        raise RunSummaryError(f"{run_dir}: no {CONFIG_FILE}. Fix: pass the run directory of a training run "
                              "(output_root/name) that has started")
    try:
        config = parse_json(config_path.read_bytes())
    except ValueError:  # torn, empty, not UTF-8, not JSON or nested past Python
        config = None
    if not isinstance(config, dict):
        raise RunSummaryError(f"{config_path}: not a complete {CONFIG_FILE} (torn, empty or not a JSON object). "
                              "Fix: pass the run directory of a training run that has started")
    metrics = run_dir / METRICS_FILE
    odd = "a symbolic link" if metrics.is_symlink() else not_a_file(metrics)
    if odd is None and metrics.is_file() and metrics.stat().st_size > METRICS_MOST_BYTES:
        odd = f"{metrics.stat().st_size / 2**20:,.0f} MiB, more than a run writes ({METRICS_MOST_BYTES >> 20} MiB)"
    if odd is not None:  # a named pipe would block the reader, a device never ends, a link leads to another file
        raise RunSummaryError(f"{metrics}: is {odd}, not the metrics the trainer writes; nothing was read from it. "
                              "Fix: pass the run directory of a training run")
    events = read_metrics(run_dir)
    if not events and metrics.is_file() and metrics.stat().st_size:
        raise RunSummaryError(f"{metrics}: holds no event the trainer writes (garbled or another file). Fix: pass "
                              "the run directory of a training run")
    steps = [e for e in events if e.get("event") == "step" and "step" in e]
    measured = [e for e in steps if is_measured_rate(e.get("images_per_sec"))]
    rejected = len(steps) - len(measured)
    if rejected:
        print(f"warning: {metrics}: {rejected} step line(s) with an images_per_sec that is no measurement (not a "
              f"number in (0, {MAX_IMAGES_PER_SEC:g}]) were left out", file=sys.stderr)
    kept, dropped = steady_windows(measured, skip_steps)
    record = {"kind": "trainer", "run": config.get("name", run_dir.name), "run_dir": str(run_dir),
              **{key: config.get(key) for key in SETTINGS}, "skip_steps": skip_steps,
              "step_events": len(steps), "rejected_events": rejected, "dropped_events": dropped,
              "steady_events": len(kept),
              "env": {key: config.get(key) for key in ENV_KEYS}, "timestamp": time.time()}
    last = max((e["step"] for e in measured), default=None)
    if not kept and last is not None and last <= skip_steps:
        return {**record, "status": "skipped", "reason": f"--skip-steps {skip_steps} leaves out every step event (the "
                f"last one logged is step {last}). Fix: pass a smaller --skip-steps, or run more steps per epoch "
                "(--max-steps-per-epoch)"}
    if not kept:
        return {**record, "status": "skipped", "reason": f"{len(steps)} step events, none in the steady state "
                "(the first of each epoch is left out). Fix: run more steps per epoch (--max-steps-per-epoch) "
                "or log more often (--log-every)"}
    record.update(status="ok", first_steady_step=kept[0]["step"], last_step=kept[-1]["step"],
                  spread_method="median of the logged windows; spread = slowest..fastest window",
                  timer="the trainer's step events (time.perf_counter; a device synchronisation per window)")
    return store(record, "images_per_sec", Spread.of([e["images_per_sec"] for e in kept]))


def compare_to(records: list[dict], reference: dict) -> list[dict]:
    """``records`` with ``reference_run``, ``reference_images_per_sec`` and ``fraction_of_reference``
    (each run's median over the reference's; e.g. JPEG files over synthetic batches)."""
    if reference.get("status") != "ok":
        return records
    base = reference["images_per_sec"]
    return [{**r, "reference_run": reference["run"], "reference_images_per_sec": base,
             "fraction_of_reference": r["images_per_sec"] / base} if r.get("status") == "ok" else r
            for r in records]
