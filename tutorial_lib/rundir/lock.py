"""One job per run directory: a LOCK file naming its holder, taken over only when provably stale."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path

from tutorial_lib.rundir.layout import LOCK_FILE


class RunLockedError(RuntimeError):
    """Another live job holds this run directory."""


def _slurm_job_alive(job_id: str) -> bool | None:
    """True/False if Slurm knows whether the job still runs; None if Slurm cannot be asked."""
    try:
        result = subprocess.run(["squeue", "-h", "-o", "%T", "-j", str(job_id)], capture_output=True,
                                text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if result.returncode != 0:
        return False if "Invalid job id" in result.stderr else None
    return result.stdout.strip() in ("RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "STOPPED")


def pid_alive(pid: int) -> bool:
    """True if process ``pid`` runs on this host (a zombie, finished but not reaped, is not alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


class RunLock:
    """The run directory's lock. A holder is stale when it ran on this host and its process is gone,
    when its Slurm job has ended, or when it was an earlier run of the same Slurm job (a requeue)."""

    def __init__(self, run_dir: str | os.PathLike):
        self.path = Path(run_dir) / LOCK_FILE
        self.owner = {"host": socket.gethostname(), "pid": os.getpid(),
                      "slurm_job_id": os.environ.get("SLURM_JOB_ID"), "since": time.time()}

    def holder(self) -> dict | None:
        """The current holder's record, or None if the directory is free (or the lock is stale)."""
        try:
            record = json.loads(self.path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, json.JSONDecodeError):
            return None  # a torn lock file cannot belong to a live writer that finished writing it
        if record.get("slurm_job_id") and record["slurm_job_id"] == self.owner["slurm_job_id"]:
            return None
        if record.get("host") == self.owner["host"] and not pid_alive(int(record.get("pid", 0))):
            return None
        if record.get("slurm_job_id") and _slurm_job_alive(record["slurm_job_id"]) is False:
            return None  # its Slurm job has ended, wherever it ran
        if record.get("pid") == self.owner["pid"] and record.get("host") == self.owner["host"]:
            return None
        return record

    def check(self) -> None:
        """Raise RunLockedError if a live job holds the directory."""
        record = self.holder()
        if record is not None:
            who = f"pid {record.get('pid')} on {record.get('host')}"
            if record.get("slurm_job_id"):
                who += f" (Slurm job {record['slurm_job_id']})"
            raise RunLockedError(
                f"run directory {self.path.parent} is in use by {who}. Fix: wait for that job or cancel "
                f"it, or choose another run name; if you are sure it is dead, delete {self.path}.")

    def acquire(self) -> None:
        """Take the lock (atomically), or raise RunLockedError."""
        self.check()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{LOCK_FILE}.{os.getpid()}")
        tmp.write_text(json.dumps(self.owner))
        os.replace(tmp, self.path)

    def release(self) -> None:
        """Drop the lock if this process holds it."""
        try:
            record = json.loads(self.path.read_text())
        except (OSError, json.JSONDecodeError):
            return
        if record.get("pid") == self.owner["pid"] and record.get("host") == self.owner["host"]:
            self.path.unlink(missing_ok=True)
