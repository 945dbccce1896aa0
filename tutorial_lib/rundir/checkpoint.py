"""Atomic checkpoints: written to a temporary file, flushed to disk, then renamed into place.

A crash during a save leaves the previous checkpoint intact; a reader never sees half a file. A save that
fails (disk full, quota, read-only file system) removes its temporary file and raises :class:`SaveError`,
whose one line names the path and the cause.
"""

from __future__ import annotations

import errno
import os
import pickle
import re
import tempfile
import warnings
from pathlib import Path

import torch

from tutorial_lib.rundir.lock import RunDirError


class SaveError(OSError):
    """A file of the run could not be written; the message names the path and the cause in one line."""


def _cause(exc: BaseException, folder: Path) -> str:
    """The operating system's reason behind ``exc`` (torch wraps a failed write in a RuntimeError)."""
    seen = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno:
            return f"{seen.strerror or os.strerror(seen.errno)} (errno {seen.errno})"
        seen = seen.__cause__ or seen.__context__
    try:
        stats = os.statvfs(folder)
        if stats.f_bavail * stats.f_frsize < 1 << 20:
            return f"{os.strerror(errno.ENOSPC)} (less than 1 MiB free)"
    except OSError:
        pass
    return str(exc).strip().splitlines()[-1][:200] if str(exc).strip() else type(exc).__name__


def _write_atomic(path: Path, write) -> Path:
    tmp_name = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(handle, "wb") as tmp:
            write(tmp)
            tmp.flush()
            os.fsync(tmp.fileno())
        os.replace(tmp_name, path)
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except (OSError, RuntimeError) as exc:
        if tmp_name is not None:
            Path(tmp_name).unlink(missing_ok=True)
        raise SaveError(f"could not save {path}: {_cause(exc, path.parent)}; the previous version of the file "
                        "is kept and nothing half-written was left. Fix: free space (or quota) on that file "
                        "system or make it writable, or choose another output_root, then run again to "
                        "resume") from None
    except BaseException:
        if tmp_name is not None:
            Path(tmp_name).unlink(missing_ok=True)
        raise
    return path


def save_atomic(state: dict, path: str | os.PathLike) -> Path:
    """Write ``state`` with torch.save to ``path`` atomically (temp file, fsync, rename, fsync dir).

    Raises SaveError (one line: path and cause) if the file system refuses; the old file stays."""
    return _write_atomic(Path(path), lambda handle: torch.save(state, handle))


def write_text_atomic(text: str, path: str | os.PathLike) -> Path:
    """Write ``text`` to ``path`` atomically, as :func:`save_atomic` does (``config.json``, ``DONE``)."""
    return _write_atomic(Path(path), lambda handle: handle.write(text.encode()))


def remove_stale_temp_files(path: str | os.PathLike) -> list[Path]:
    """Delete the temporary files that saves of ``path`` killed mid-write (SIGKILL, node failure) left.

    Only call it while no save of ``path`` can be running (the trainer does, holding the run lock).
    Returns the removed paths.
    """
    path = Path(path)
    stale = sorted(path.parent.glob(f".{path.name}.*.tmp"))
    for tmp in stale:
        tmp.unlink(missing_ok=True)
    return stale


class CheckpointError(RunDirError):
    """A checkpoint or model file that holds more than tensors and plain values (refused unread)."""


def load_weights_only(path: str | os.PathLike, map_location="cpu") -> dict:
    """``torch.load(path, weights_only=True)``: tensors, numbers, strings, lists and dicts only, so a
    crafted file cannot run code. CheckpointError (one line) for a file holding anything else."""
    try:
        with warnings.catch_warnings():  # torch warns about the pickle protocol of a plain pickle file first
            warnings.filterwarnings("ignore", category=UserWarning, module="torch._weights_only_unpickler")
            return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        named = re.search(r"GLOBAL ([\w.]+)", str(exc))
        found = f" ({named.group(1)[:80]})" if named else ""
        raise CheckpointError(f"checkpoint: {path} holds objects that are not tensors or plain values{found}; "
                              "loading it could run code, so nothing was loaded or run. Fix: delete it if you did "
                              "not write it (an older tutorial_lib wrote numpy objects: start a new run name, or "
                              "resume with that version).") from None
    except (EOFError, KeyError, RuntimeError, ValueError, TypeError, IndexError, AttributeError, OverflowError,
            MemoryError) as exc:  # torch's words (and pickle's) for an empty, torn or foreign file
        torn = ("PytorchStreamReader", "zip", "hasRecord")  # hasRecord: a zip without torch's records in it
        if isinstance(exc, RuntimeError) and not any(word in str(exc) for word in torn):
            raise
        size = os.path.getsize(path) if os.path.exists(path) else 0
        raise CheckpointError(f"checkpoint: {path} ({size:,} bytes) is not a complete torch file (empty, torn by a "
                              "full disk or a cut copy, or another format); nothing was loaded. Fix: delete it or "
                              "restore it, then run again (a run resumes from its last good checkpoint only if "
                              "that file is whole).") from None


def load_checkpoint(path: str | os.PathLike, map_location="cpu") -> dict | None:
    """The checkpoint at ``path`` (loaded weights-only, see :func:`load_weights_only`), or None if there is none
    (a file holding None is no checkpoint the trainer writes: refused, never read as "none, start over")."""
    path = Path(path)
    if not path.is_file():
        return None
    state = load_weights_only(path, map_location)
    if state is None:
        raise CheckpointError(f"checkpoint: {path} holds None, not the trainer's dict of parts; nothing was loaded. "
                              "Fix: delete it (the run then starts over) or restore the file the trainer wrote.")
    return state


# rng: every rank's random state, which an exact resume continues (a checkpoint without it would resume silently
# with other random crops and another data order)
_PARTS = {"model": dict, "optimizer": dict, "scaler": dict, "progress": dict, "rng": list}
_OPTIONAL = {"scheduler": dict, "config": dict, "world_size": int, "num_classes": int}
_NEVER_NONE = ("config", "world_size", "num_classes")  # optional (older checkpoints lack them), never written None
_COUNTS = ("epoch", "step_in_epoch", "global_step")


def check_checkpoint(state, path: str | os.PathLike, progress_fields) -> dict:
    """``state`` (a loaded checkpoint) if it holds what a resume reads, each part of the type the trainer writes;
    CheckpointError (one line) naming the first part that is missing or of another type, before any of it is used.
    ``progress_fields``: the names a checkpoint's ``progress`` may hold."""
    def refuse(what: str) -> None:
        raise CheckpointError(f"checkpoint: {path} {what}, which the trainer never writes; nothing was loaded. Fix: "
                              "delete it (the run then starts over) or restore the file the trainer wrote.")

    if not isinstance(state, dict):
        refuse(f"holds a {type(state).__name__}, not the trainer's dict of parts")
    for key, kind in {**_PARTS, **_OPTIONAL}.items():
        given = key in _PARTS or state.get(key) is not None or (key in _NEVER_NONE and key in state)
        if given and not isinstance(state.get(key), kind):  # config None: its recipe would be made up
            refuse(f"holds {key} as {type(state.get(key)).__name__}, not {kind.__name__}")
    ranks = state.get("world_size") or max(1, len(state["rng"]))  # the trainer saves one state per rank
    if len(state["rng"]) != ranks or not all(isinstance(rank, dict) for rank in state["rng"]):
        refuse(f"holds the random state of {len(state['rng'])} rank(s) for a run of {ranks}, so the resume could "
               "not be exact")
    progress = state["progress"]
    unknown = [key for key in progress if key not in progress_fields]
    if unknown or not all(isinstance(progress.get(k), int) and not isinstance(progress.get(k), bool)
                          and 0 <= progress[k] < 2**63 for k in _COUNTS):
        refuse(f"holds progress {str(progress)[:80]} (unknown fields or counts that are not whole numbers >= 0)")
    best = progress.get("best_top1", 0.0)
    if (not isinstance(progress.get("history", []), list) or not isinstance(progress.get("epoch_tally") or {}, dict)
            or not isinstance(best, (int, float)) or isinstance(best, bool) or not 0 <= best <= 100):
        refuse("holds a progress history, epoch tally or best top-1 of another type (top-1 is a % from 0 to 100)")
    return state
