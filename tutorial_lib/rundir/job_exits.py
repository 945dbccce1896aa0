"""How each run of a Slurm job ended, in the run directory's own words: ``job_exits.jsonl``.

One JSON line per ended run: ``cluster_scripts/train.sbatch`` appends one as its last act (``source: "batch
script"``, the ``status`` it exits with, ``requeued`` when it put the job back in the queue), and the launcher of a
later job appends what Slurm answered about an earlier job that left the run directory's LOCK behind (``source:
"slurm"``, its ``state``). A line that is not ``requeued`` says that run of the job has ended: the watcher
(:mod:`tutorial_lib.jobs.watch`) takes a final state from it without asking the controller, and the LOCK
(:mod:`tutorial_lib.rundir.lock`) no longer counts that job as the directory's live holder.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from tutorial_lib.rundir.layout import EXIT_FILE
from tutorial_lib.rundir.metrics import append_jsonl, read_jsonl


def last_exit(run_dir: str | os.PathLike, job_id) -> dict | None:
    """The last exit line of Slurm job ``job_id`` in ``run_dir`` (None: no run of it has ended yet)."""
    lines = [line for line in read_jsonl(Path(run_dir) / EXIT_FILE) if str(line.get("job_id")) == str(job_id)]
    return lines[-1] if lines else None


def has_ended(run_dir: str | os.PathLike, job_id) -> bool:
    """Whether the run directory records that Slurm job ``job_id`` has ended (and was not requeued)."""
    line = last_exit(run_dir, job_id)
    return line is not None and not line.get("requeued")


def record_exit(run_dir: str | os.PathLike, job_id, **fields) -> None:
    """Append one exit line for ``job_id`` (``state``, ``source``...) with the time it was written."""
    append_jsonl(Path(run_dir) / EXIT_FILE, [{"job_id": str(job_id), "time": time.time(), **fields}])
