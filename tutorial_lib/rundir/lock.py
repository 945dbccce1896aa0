"""One job per run directory: a LOCK file naming its holder, taken over only when provably stale."""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path

from tutorial_lib.paths import not_a_file
from tutorial_lib.rundir.job_exits import has_ended
from tutorial_lib.rundir.layout import (
    CHECKPOINT_FILE,
    INDEX_FILE,
    JOB_LOG,
    LOCK_FILE,
    METRICS_FILE,
    MODEL_FILE,
    SUPERVISOR_LOG,
)
from tutorial_lib.rundir.owned import RunDirError, usable_run_dir

__all__ = ["RunDirError", "RunLock", "RunLockedError", "pid_alive", "prepare_run_dir", "process_start", "same_process"]


class RunLockedError(RuntimeError):
    """Another live job holds this run directory."""


def prepare_run_dir(run_dir: str | os.PathLike, create: bool = True) -> Path:
    """Check ``run_dir`` can be this project's run directory and (``create``) make it; raise RunDirError.

    It may be absent, empty or an earlier run's; a file, an uncreatable path or a folder of other files
    is refused with a one-line message, and nothing in it is touched.
    """
    run_dir = Path(run_dir)
    try:
        problem = None
        if run_dir.is_dir():
            odd = _not_a_file(run_dir)
            if odd is not None:
                raise RunDirError(f"output_root: {odd} in the run directory exists but is not a regular file of "
                                  "its own; the trainer or its job reads and writes it as one, so nothing was "
                                  "started. Fix: move it away, or choose another run name.")
            if not usable_run_dir(run_dir):
                problem = ("already holds files that are not a training run's (no config.json, job.json or "
                           "metrics.jsonl written by this project); nothing in it was touched")
        elif run_dir.exists() or run_dir.is_symlink():
            problem = "exists but is not a folder"
        if problem is None and create:
            run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        problem = f"cannot be created ({exc.strerror or exc})"
    if problem:
        raise RunDirError(f"output_root: the run directory {run_dir} (output_root/name) {problem}. Fix: choose "
                          "an output_root that is a folder you can write to, or another run name.")
    return run_dir


def _not_a_file(run_dir: Path) -> str | None:
    """The first of the files the trainer reads back or writes in place (checkpoint, model, metrics, the lock,
    the file index, a local job's logs) that exists in ``run_dir`` but is not a regular file, or is a symbolic
    link (the project never makes one there, and writing in place would write through it into another file),
    described (``'.../checkpoint.pt' (a named pipe)``); None if there is none
    (:func:`tutorial_lib.paths.not_a_file`: nothing is opened)."""
    for name in (CHECKPOINT_FILE, MODEL_FILE, METRICS_FILE, LOCK_FILE, INDEX_FILE, JOB_LOG, SUPERVISOR_LOG):
        path = run_dir / name
        kind = not_a_file(path) or (f"a symbolic link to {os.readlink(path)!r}" if path.is_symlink() else None)
        if kind is None and name in WRITTEN_IN_PLACE:
            kind = _hard_link(path)
        if kind is not None:
            return f"{str(path)!r} ({kind})"
    return None


# Written in place (appended, or rewritten through the same inode), so another name of the same file would
# change too; the others are replaced by a rename, which leaves a hard-linked copy (``cp -al``) as it was. A local
# job's supervisor appends to job.log and supervisor.log (r43g: a job.log linked to a user's file got the job's log).
WRITTEN_IN_PLACE = (METRICS_FILE, LOCK_FILE, JOB_LOG, SUPERVISOR_LOG)


def _hard_link(path: Path) -> str | None:
    """``'a hard link: the file has 2 names'`` where ``path`` is one of several names of one file (r43g: a LOCK
    linked to a user's file was overwritten by the lock record, a linked metrics.jsonl got the events); None
    where it has one name or does not exist."""
    try:
        names = os.lstat(path).st_nlink
    except OSError:
        return None
    return f"a hard link: the file has {names} names, and writing it would change the others" if names > 1 else None


PID_MAX = 4_194_304  # Linux's largest pid_max (2**22): a larger number is no process


def is_pid(value) -> bool:
    """Whether ``value``, read from a record, can be a process id: a whole number from 1 to :data:`PID_MAX` (a pid
    of 400 digits, 1e999 or [1] raised OverflowError or TypeError in os.kill and psutil: r43p, r43q)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value <= PID_MAX


def pid_alive(pid: int) -> bool:
    """True if process ``pid`` runs on this host (a zombie, finished but not reaped, is not alive; a value that is
    no pid, :func:`is_pid`, runs nowhere)."""
    if not is_pid(pid):
        return False
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


def process_start(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot, /proc/PID/stat field 22); None if unknown.

    With the pid it names one process: a pid alone may have been reused by another program since."""
    try:
        with open(f"/proc/{int(pid)}/stat") as handle:
            return int(handle.read().rsplit(")", 1)[-1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def same_process(pid: int, start: int | None) -> bool:
    """True if ``pid`` runs and is the process recorded with ``start`` (see :func:`process_start`).

    ``start`` None (a record written before start times were kept) falls back to the pid alone."""
    if not pid_alive(pid):  # r43p: os.kill(10**29, 0) raised OverflowError
        return False
    return start is None or process_start(int(pid)) in (None, start)


class RunLock:
    """The run directory's lock. A holder is stale when it ran on this host and its process is gone,
    when the run directory records that its Slurm job has ended, or when it was an earlier run of the same Slurm
    job (a requeue)."""

    def __init__(self, run_dir: str | os.PathLike):
        self.path = Path(run_dir) / LOCK_FILE
        self.owner = {"host": socket.gethostname(), "pid": os.getpid(), "pid_start": process_start(os.getpid()),
                      "slurm_job_id": os.environ.get("SLURM_JOB_ID"), "since": time.time()}

    def holder(self) -> dict | None:
        """The current holder's record, or None if the directory is free (or the lock is stale)."""
        try:
            return self._live_holder(self.path.read_text())
        except OSError:
            return None

    def _live_holder(self, text: str) -> dict | None:
        try:
            record = json.loads(text)
            pid = int(record.get("pid") or 0) if isinstance(record, dict) else 0
        except (ValueError, TypeError, OverflowError):  # torn; a number past Python's 4,300 digits, 1e999, [1] (r43p)
            return None  # a torn or damaged lock file cannot belong to a live writer (it writes the fields itself)
        if not isinstance(record, dict):
            return None
        if record.get("slurm_job_id") and record["slurm_job_id"] == self.owner["slurm_job_id"]:
            return None
        if record.get("host") == self.owner["host"] and not same_process(pid, record.get("pid_start")):
            return None  # its process is gone (or the pid now belongs to another program)
        if record.get("slurm_job_id") and has_ended(self.path.parent, record["slurm_job_id"]):
            return None  # its Slurm job has ended, wherever it ran (rundir.job_exits: its batch script's last line,
            # or what Slurm answered the launcher of a later job)
        if record.get("pid") == self.owner["pid"] and record.get("host") == self.owner["host"]:
            return None
        return record

    def check(self) -> None:
        """Raise RunLockedError if a live job holds the directory."""
        self._refuse(self.holder())

    def _refuse(self, record: dict | None) -> None:
        if record is not None:
            who = f"pid {record.get('pid')} on {record.get('host')}"
            if record.get("slurm_job_id"):
                who += f" (Slurm job {record['slurm_job_id']})"
            raise RunLockedError(
                f"run directory {self.path.parent} is in use by {who}. Fix: wait for that job or cancel "
                f"it, or choose another run name; if you are sure it is dead, delete {self.path}.")

    def _locked_file(self, create: bool) -> int | None:
        """The LOCK file opened and flock-ed exclusively (None if absent and not ``create``).

        Takers queue on the flock, so judging the holder and writing our record is one atomic step;
        the inode check retries when the file was released (unlinked) while we waited for it."""
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_NOFOLLOW | (os.O_CREAT if create else 0), 0o644)
            except OSError:
                if create:
                    raise
                return None  # no lock file (or no run directory) to release
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError:  # a file system without flock: fall back to the (racy) plain check
                return fd
            try:
                if os.stat(self.path).st_ino == os.fstat(fd).st_ino:
                    return fd
            except FileNotFoundError:
                pass
            os.close(fd)

    def acquire(self) -> None:
        """Take the lock atomically (many simultaneous takers: exactly one wins), or raise RunLockedError."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = self._locked_file(create=True)
        try:
            self._refuse(self._live_holder(os.pread(fd, 1 << 16, 0).decode(errors="replace")))
            data = json.dumps(self.owner).encode()
            os.ftruncate(fd, 0)
            os.pwrite(fd, data, 0)
            os.fsync(fd)
        finally:
            os.close(fd)  # also drops the flock

    def release(self) -> None:
        """Drop the lock if this process holds it."""
        fd = self._locked_file(create=False)
        if fd is None:
            return
        try:
            record = json.loads(os.pread(fd, 1 << 16, 0))
            if record.get("pid") == self.owner["pid"] and record.get("host") == self.owner["host"]:
                self.path.unlink(missing_ok=True)
        except (OSError, ValueError, AttributeError):
            return
        finally:
            os.close(fd)
