"""The run directory's ``metrics.jsonl``: one JSON object per line, each with an ``event`` field.

Events (:data:`EVENTS`): ``start``, ``resume``, ``step``, ``epoch``, ``stop`` (checkpointed on request), ``end``,
``error`` (a step that raised).
Readers tolerate a torn last line (a writer killed mid-write), so a live job can always be read.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from tutorial_lib.rundir.layout import CONFIG_FILE, JOB_FILE, LOCK_FILE, METRICS_FILE, STATE_FILE

EVENTS = ("start", "resume", "step", "epoch", "stop", "end", "error")  # every event the trainer writes


class MetricsWriter:
    """Append events to ``metrics.jsonl``; each line is flushed so watchers see it at once."""

    def __init__(self, run_dir: str | os.PathLike, enabled: bool = True):
        self.path = Path(run_dir) / METRICS_FILE
        self.enabled = enabled
        if enabled:
            self._repair_torn_tail()

    def _repair_torn_tail(self) -> None:
        """Drop a partial last line left by a killed writer, so appends start on a fresh line."""
        if not self.path.is_file() or self.path.stat().st_size == 0:
            return
        data = self.path.read_bytes()
        if not data.endswith(b"\n"):
            keep = data[: data.rfind(b"\n") + 1]
            with open(self.path, "wb") as handle:
                handle.write(keep)

    def write(self, event: str, **fields) -> dict:
        """Append one event (with a wall-clock ``time``) and return it."""
        record = {"event": event, "time": time.time(), **fields}
        if self.enabled:
            with open(self.path, "a") as handle:
                handle.write(json.dumps(record, default=_jsonable) + "\n")
                handle.flush()
        return record


def _jsonable(value):
    if hasattr(value, "item"):
        return value.item()
    return str(value)


LATEST_RECORD_TIME = 32_503_680_000  # the year 3000, in seconds since 1970: a later time is no record's


def record_time(value) -> float | None:
    """A time read back from a record (seconds since 1970), or None where it can be none: not a number, not finite,
    negative or past the year 3000 (r43q: ``1e999`` and a 400-digit number raised OverflowError in
    ``time.localtime`` and ``float``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if 0 <= value <= LATEST_RECORD_TIME else None


def parse_json(text: str | bytes):
    """The value of a JSON text; ValueError for anything that is none: garbled, not UTF-8, or nested deeper than
    Python's recursion limit (``'[' * 50000`` raises RecursionError in :func:`json.loads`). The one reader of the
    project's small JSON records."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply to read") from None


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    """The JSON objects of a JSON-lines file, one per line; a torn or garbled line is skipped, never raised.

    The one reader of the project's JSON-lines files (``metrics.jsonl``, benchmark results). A missing
    file gives an empty list.
    """
    path = Path(path)
    if not path.is_file():
        return []
    records = []
    with open(path, "rb") as handle:
        for line in handle:
            try:
                record = parse_json(line)
            except ValueError:  # torn, garbled or deeply nested: skipped
                continue
            if isinstance(record, dict):
                records.append(record)
    return records


def append_jsonl(path: str | os.PathLike, records: list[dict]) -> Path:
    """Append ``records`` to a JSON-lines file, one per line (its folder is created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        for record in records:
            handle.write(json.dumps(record, default=_jsonable) + "\n")
    return path


# The numbers an event may hold: a record of another shape (a field of the wrong type) is skipped like a garbled
# line, so no reader meets it.
NUMBER_FIELDS = ("time", "epoch", "step", "global_step", "step_in_epoch", "loss", "lr", "images_per_sec", "top1",
                 "top5", "train_loss", "val_loss", "epoch_time", "best_top1", "total_time", "epochs")


def well_formed(record: dict) -> bool:
    """Whether ``record`` is an event as the trainer writes it: a named event, its numbers numbers (a step's
    ``loss`` may be null: a step every rank skipped, see ``engine/step.py``)."""
    if not isinstance(record.get("event"), str):
        return False
    return all(isinstance(record[key], (int, float)) and not isinstance(record[key], bool)
               for key in NUMBER_FIELDS if key in record and not (key == "loss" and record[key] is None))


def read_metrics(run_dir_or_file: str | os.PathLike) -> list[dict]:
    """All complete events of a run (a torn or garbled line, or an event of another shape, is skipped, never
    raised: :func:`well_formed`). The live reader that watchers poll: a run folder or log not made yet gives none.
    :func:`metrics_table` is the checked one for a path a user gives."""
    path = Path(run_dir_or_file)
    if path.is_dir():
        path = path / METRICS_FILE
    return [record for record in read_jsonl(path) if well_formed(record)]


# what a run folder holds before its first event: the job's record and state (jobs), the trainer's LOCK and config
_RUN_FILES = (METRICS_FILE, JOB_FILE, STATE_FILE, LOCK_FILE, CONFIG_FILE)


def check_metrics_path(run_dir_or_file) -> Path:
    """The event log a run folder or file names: ``run_dir_or_file/metrics.jsonl`` for a folder (which may not exist
    yet), else the file itself. Refused in one line naming ``run_dir_or_file`` (r43ab: a typo, a named pipe or a
    folder in the log's place read as an empty log): a path that does not exist (FileNotFoundError), or that is not a
    path (TypeError), and a log that is not a regular file (ValueError)."""
    if not isinstance(run_dir_or_file, (str, os.PathLike)):
        raise TypeError(f"run_dir_or_file: expected a run folder or its metrics.jsonl, got "
                        f"{type(run_dir_or_file).__name__}. Fix: e.g. 'runs/<name>'.")
    path = Path(run_dir_or_file)
    fix = "Fix: pass a run folder (runs/<name>) or its metrics.jsonl."
    if not os.path.exists(path):  # (a name too long for the file system too: r43ac)
        raise FileNotFoundError(f"run_dir_or_file: {str(path)[:200]!r} does not exist. {fix}")
    log = path / METRICS_FILE if path.is_dir() else path
    if path.is_dir() and not any(os.path.lexists(path / name) for name in _RUN_FILES):
        # r43ac: the output root, or the home folder, read as a run that had not logged yet
        raise ValueError(f"run_dir_or_file: {str(path)[:200]!r} is not a run folder (it holds none of "
                         f"{', '.join(_RUN_FILES)}). {fix}")
    if (log.exists() or log.is_symlink()) and not log.is_file():
        raise ValueError(f"run_dir_or_file: {str(log)[:200]!r} is not a regular file (a folder, a named pipe or a "
                         f"device). {fix}")
    return log


def metrics_table(run_dir_or_file, event: str | None = None):
    """The events as a pandas DataFrame (optionally only one kind of event). A run folder whose job has not logged
    yet gives an empty table; a path that is not a run's is refused (:func:`check_metrics_path`, and a file holding
    no event; r43aa: a typo gave an empty table)."""
    import pandas as pd

    if event is not None and event not in EVENTS:  # r43ab: event='epochs' was an empty table
        raise ValueError(f"event: {str(event)[:60]!r} is no event the trainer writes. Fix: one of "
                         f"{', '.join(EVENTS)}, or None for all.")
    path = check_metrics_path(run_dir_or_file)
    records = [record for record in read_jsonl(path) if well_formed(record)]
    if not records and path == Path(run_dir_or_file) and path.stat().st_size:  # a file given, not a run folder's
        raise ValueError(f"run_dir_or_file: {str(path)[:200]!r} holds no event of a run. Fix: pass a run folder "
                         "(runs/<name>) or its metrics.jsonl.")
    if event is not None:
        records = [r for r in records if r["event"] == event]
    return pd.DataFrame.from_records(records)


class ThroughputMeter:
    """Images per second over a sliding window of steps."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        """Start a new window now."""
        self.start, self.images = time.perf_counter(), 0

    def update(self, images: int) -> None:
        """Count ``images`` more processed images."""
        self.images += images

    def rate(self) -> float:
        """Images per second since the last reset."""
        elapsed = time.perf_counter() - self.start
        return self.images / elapsed if elapsed > 0 else 0.0
