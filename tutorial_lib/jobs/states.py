"""Job states: the watcher's own (:data:`WATCH_STATES`), the public ones callers compare with, and the local
supervisor's state file.

The watcher (:mod:`tutorial_lib.jobs.watch`) tells ``pending``, ``running``, ``completing``, ``completed``,
``failed``, ``cancelled``, ``timeout``, ``requeued`` and ``unknown`` apart; ``Job.state`` shows them as the public
``PENDING``, ``RUNNING``, ``UNKNOWN`` (the controller did not answer: not a verdict) and :data:`FINAL_STATES`
(:func:`public`): a requeued job is ``PENDING`` again, a completing one still ``RUNNING``. Slurm's many states are
mapped onto the watcher's (:func:`from_slurm`); a local job's is what its supervisor last wrote to
``job_state.json``.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from tutorial_lib.jobs import processes
from tutorial_lib.paths import not_a_file
from tutorial_lib.rundir.layout import STATE_FILE
from tutorial_lib.rundir.metrics import parse_json

WATCH_STATES = ("pending", "running", "completing", "completed", "failed", "cancelled", "timeout", "requeued",
                "unknown")
WATCH_FINAL = frozenset({"completed", "failed", "cancelled", "timeout"})
FINAL_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")
STATES = ("PENDING", "RUNNING", "UNKNOWN", *FINAL_STATES)
_PUBLIC = {"requeued": "PENDING", "completing": "RUNNING"}
_SLURM_STATE_MAP = {"PENDING": "pending", "CONFIGURING": "pending", "RESV_DEL_HOLD": "pending",
                    "REQUEUED": "requeued", "REQUEUE_HOLD": "requeued", "REQUEUE_FED": "requeued",
                    "PREEMPTED": "requeued", "RUNNING": "running", "RESIZING": "running", "SUSPENDED": "running",
                    "STOPPED": "running", "SIGNALING": "running", "COMPLETING": "completing",
                    "STAGE_OUT": "completing", "COMPLETED": "completed", "FAILED": "failed", "NODE_FAIL": "failed",
                    "BOOT_FAIL": "failed", "OUT_OF_MEMORY": "failed", "SPECIAL_EXIT": "failed",
                    "CANCELLED": "cancelled", "REVOKED": "cancelled", "TIMEOUT": "timeout", "DEADLINE": "timeout"}


def from_slurm(raw: str) -> str:
    """The watcher's state for a Slurm job state (``REQUEUED`` -> requeued, ``NODE_FAIL`` -> failed...);
    a state this table does not know is ``unknown``, never a verdict."""
    return _SLURM_STATE_MAP.get(raw.split()[0] if raw.strip() else raw, "unknown")


def public(state: str) -> str:
    """The public state (one of :data:`STATES`) of a watcher state."""
    return _PUBLIC.get(state, state.upper())


def write_state(run_dir: Path, state: str, **fields) -> None:
    """Atomically record a local job's state (and e.g. exit_code) in job_state.json, with the writing process (the
    supervisor) as :func:`tutorial_lib.jobs.processes.identity` names it: pid, start time, command line."""
    tmp = run_dir / f".{STATE_FILE}.tmp"
    tmp.write_text(json.dumps({"state": state, "time": time.time(), "supervisor_pid": os.getpid(),
                               "supervisor": processes.identity(os.getpid()), **fields}))
    tmp.replace(run_dir / STATE_FILE)


STATE_FILE_MOST_BYTES = 1 << 16  # the supervisor writes ~300 bytes: a larger file is none of its records


def load_state(run_dir: Path) -> tuple[dict | None, str | None]:
    """A local job's last recorded state and, where ``job_state.json`` is there but is not what its supervisor
    writes (a link, a named pipe, not JSON, an unknown state, an exit code that is no whole number), what is wrong
    with it: ``(None, None)`` when there is none yet. A named pipe is never opened (it would block the reader)."""
    path = run_dir / STATE_FILE
    odd = "a symbolic link" if os.path.islink(path) else not_a_file(path)
    if odd is not None:
        return None, odd
    try:
        with open(path, "rb") as handle:
            text = handle.read(STATE_FILE_MOST_BYTES + 1)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"unreadable ({exc.strerror or exc})"
    try:
        state = parse_json(text) if len(text) <= STATE_FILE_MOST_BYTES else None
    except ValueError:  # garbled, or nested past Python
        state = None
    if not isinstance(state, dict):
        return None, "not a JSON mapping"
    if state.get("state") not in STATES:
        return None, f"of the unknown state {str(state.get('state'))[:40]!r}"
    code = state.get("exit_code")
    if code is not None and (not isinstance(code, int) or isinstance(code, bool) or not -2**31 <= code < 2**31):
        return None, f"of the exit code {str(code)[:40]!r}, which is no whole number"
    return state, None


def read_state(run_dir: str | os.PathLike) -> dict | None:
    """A local job's last recorded state, or None (none yet, or a damaged state file: :func:`load_state`).
    ``run_dir`` is its run folder, as text or a path (r43ab: text was a TypeError of '/')."""
    if not isinstance(run_dir, (str, os.PathLike)):
        raise TypeError(f"run_dir: expected a run folder, got {type(run_dir).__name__}. Fix: e.g. 'runs/<name>'.")
    return load_state(Path(run_dir))[0]


@dataclass(frozen=True)
class Seen:
    """What the watcher knows about one job at one moment, and who said so."""

    state: str  # one of WATCH_STATES
    source: str  # "slurm", "sacct", "exit record", "DONE", "supervisor", "submitted", "no answer", "run directory"
    exit_code: int | None = None
    reason: str = ""  # why, in words (a pending job's Slurm reason, a lost supervisor, a controller's error)
    slurm_state: str | None = None  # Slurm's own word, where Slurm answered
    fields: dict = field(default_factory=dict)  # the scheduler's fields for a queue report
    time: float = field(default_factory=time.time)

    @property
    def final(self) -> bool:
        """Whether the job has ended."""
        return self.state in WATCH_FINAL
