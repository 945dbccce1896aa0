"""Job states, as both backends report them, and the local supervisor's state file.

``PENDING``, ``RUNNING``, then one of :data:`FINAL_STATES`. Slurm's many states are mapped onto these
(:func:`from_slurm`); a local job's state is what its supervisor last wrote to ``job_state.json``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from tutorial_lib.rundir.layout import STATE_FILE

FINAL_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")
STATES = ("PENDING", "RUNNING", *FINAL_STATES)
_SLURM_STATE_MAP = {"CONFIGURING": "PENDING", "REQUEUED": "PENDING", "REQUEUE_HOLD": "PENDING",
                    "REQUEUE_FED": "PENDING", "RESIZING": "RUNNING", "COMPLETING": "RUNNING",
                    "SUSPENDED": "RUNNING", "STOPPED": "RUNNING", "SIGNALING": "RUNNING",
                    "STAGE_OUT": "RUNNING", "PREEMPTED": "PENDING", "NODE_FAIL": "FAILED",
                    "BOOT_FAIL": "FAILED", "DEADLINE": "TIMEOUT", "OUT_OF_MEMORY": "FAILED",
                    "SPECIAL_EXIT": "FAILED", "REVOKED": "CANCELLED"}


def from_slurm(raw: str) -> str:
    """One of :data:`STATES` for a Slurm job state (``REQUEUED`` -> PENDING, ``NODE_FAIL`` -> FAILED...)."""
    return _SLURM_STATE_MAP.get(raw, raw if raw in STATES else "FAILED")


def write_state(run_dir: Path, state: str, **fields) -> None:
    """Atomically record a local job's state (and e.g. exit_code) in job_state.json."""
    tmp = run_dir / f".{STATE_FILE}.tmp"
    tmp.write_text(json.dumps({"state": state, "time": time.time(), "supervisor_pid": os.getpid(), **fields}))
    tmp.replace(run_dir / STATE_FILE)


def read_state(run_dir: Path) -> dict | None:
    """A local job's last recorded state, or None."""
    try:
        return json.loads((run_dir / STATE_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return None
