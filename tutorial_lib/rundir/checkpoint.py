"""Atomic checkpoints: written to a temporary file, flushed to disk, then renamed into place.

A crash during a save leaves the previous checkpoint intact; a reader never sees half a file.
"""

from __future__ import annotations

import os
import pickle
import re
import tempfile
import warnings
from pathlib import Path

import torch

from tutorial_lib.rundir.lock import RunDirError


def save_atomic(state: dict, path: str | os.PathLike) -> Path:
    """Write ``state`` with torch.save to ``path`` atomically (temp file, fsync, rename, fsync dir)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as tmp:
            torch.save(state, tmp)
            tmp.flush()
            os.fsync(tmp.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return path


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


def load_checkpoint(path: str | os.PathLike, map_location="cpu") -> dict | None:
    """The checkpoint at ``path`` (loaded weights-only, see :func:`load_weights_only`), or None if there is none."""
    path = Path(path)
    if not path.is_file():
        return None
    return load_weights_only(path, map_location)
