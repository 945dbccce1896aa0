"""What this project wrote: recognised by content, never by a file name alone.

A run directory is one that holds a ``config.json``, ``job.json``, ``metrics.jsonl`` or ``LOCK`` with the
fields this project writes (:func:`is_run_dir`). A fresh start (:func:`clear_run_dir`) removes only the files
the project wrote there, each checked by its content where it has one, and refuses, listing them, while
anything else is in the folder. Generated data trees (the digits export, a fake ImageNet) are replaced only
when their marker holds the generator's settings and every other file is one of their images
(:func:`foreign_tree_files`).
"""

from __future__ import annotations

import json
import os
import re
import zipfile
from pathlib import Path

from tutorial_lib.rundir.layout import (
    CHECKPOINT_FILE,
    CONFIG_FILE,
    DONE_FILE,
    EXIT_FILE,
    INDEX_FILE,
    JOB_FILE,
    JOB_LOG,
    JOB_SCRIPT,
    JOB_SCRIPT_HEADER,
    LAUNCH_FILE,
    LOCK_FILE,
    METRICS_FILE,
    MODEL_FILE,
    PREFLIGHT_FILE,
    STATE_FILE,
    STOP_FILE,
    SUPERVISOR_LOG,
)


class RunDirError(ValueError):
    """The run directory cannot be used (not a folder, not creatable, or a folder that is not a run's)."""


def _json(path: Path, first_line: bool = False, most: int = 1 << 22):
    """The JSON value of ``path`` (its first line), or None: a file over ``most`` bytes is none, and is not read
    (r43ac: ``read(most)`` allocates ``most`` bytes first, a MemoryError under an address-space limit)."""
    try:
        with open(path, "rb") as handle:
            if first_line:
                return json.loads(handle.readline())
            return json.loads(handle.read()) if os.fstat(handle.fileno()).st_size <= most else None
    except (OSError, ValueError):
        return None


# an index lists every image's path: ImageNet's 1.28 million take some 45 MB (r43ab: a 4 MB read cut such an index,
# which then was "not a file index", and a resume was refused); a list of 100 million files is at most this
INDEX_MOST_BYTES = 1 << 32


def _has(path: Path, keys: set, first_line: bool = False) -> bool:
    record = _json(path, first_line)
    return isinstance(record, dict) and keys <= record.keys()


def _is_checkpoint(path: Path) -> bool:
    """A torch.save archive (a zip holding ``<name>/data.pkl``); only its directory is read."""
    try:
        with zipfile.ZipFile(path) as archive:
            return any(name.endswith("/data.pkl") for name in archive.namelist())
    except (OSError, zipfile.BadZipFile, ValueError):
        return False


def _is_job_script(path: Path) -> bool:
    """A Slurm job's batch script as :mod:`tutorial_lib.jobs` writes it: train.sbatch's own header."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            head = [handle.readline().rstrip("\n") for _ in range(3)]
    except OSError:
        return False
    return head[0] == "#!/bin/bash" and head[2] == JOB_SCRIPT_HEADER


def is_index_file(path: Path) -> bool:
    """Whether ``path`` holds a file index (:mod:`tutorial_lib.data.file_index`): split roots to class and file
    lists."""
    if not Path(path).is_file():  # a named pipe would block the open
        return False
    try:
        with open(path, "rb") as handle:
            if handle.read(2) not in (b'{"', b"{}"):  # as build() writes it: a large file of another kind is not read
                return False
    except OSError:
        return False
    index = _json(path, most=INDEX_MOST_BYTES)
    return isinstance(index, dict) and all(isinstance(v, dict) and {"classes", "files"} <= set(v)
                                           for v in index.values())


# The files whose content proves that this project wrote the folder, and how.
_MARKS = {
    CONFIG_FILE: lambda p: _has(p, {"name", "output_root", "arch", "global_batch", "scaled_lr", "world_size"}),
    JOB_FILE: lambda p: _has(p, {"backend", "id", "name", "spec"}),
    METRICS_FILE: lambda p: _has(p, {"event", "time"}, first_line=True),
    LOCK_FILE: lambda p: _has(p, {"host", "pid", "since"}),
}
# Every other file a run directory may hold, with its content check (None: a log, a name is all it has).
_CONTENT = {
    **_MARKS,
    CHECKPOINT_FILE: _is_checkpoint,
    MODEL_FILE: _is_checkpoint,
    INDEX_FILE: is_index_file,
    DONE_FILE: lambda p: _has(p, {"best_top1"}),
    STATE_FILE: lambda p: _has(p, {"state", "time"}),
    EXIT_FILE: lambda p: _has(p, {"job_id", "time", "source"}, first_line=True),
    LAUNCH_FILE: lambda p: isinstance(_json(p), dict),
    JOB_SCRIPT: _is_job_script,
    PREFLIGHT_FILE: lambda p: _has(p, {"rank", "world", "node", "python"}, first_line=True),
    STOP_FILE: None, JOB_LOG: None, SUPERVISOR_LOG: None,
}
_TEMP_FILES = re.compile(  # left by a killed save: checkpoint.pt, config.json, DONE, job_state.json, job.json, ...
    rf"\.(({re.escape(CHECKPOINT_FILE)}|{re.escape(MODEL_FILE)}|{re.escape(CONFIG_FILE)}|{DONE_FILE})\.[^/]+|"
    rf"{re.escape(STATE_FILE)}|{re.escape(JOB_FILE)}|{re.escape(JOB_SCRIPT)}|{re.escape(INDEX_FILE)})\.tmp")
_SLURM_LOGS = re.compile(r"slurm-\d+\.out")


def is_run_dir(run_dir: str | Path) -> bool:
    """True if ``run_dir`` holds a file whose content only this project writes (config.json with the
    trainer's fields, job.json, metrics.jsonl, LOCK); a file name alone (``DONE``, ``STOP``) is no proof."""
    run_dir = Path(run_dir)
    return any((run_dir / name).is_file() and check(run_dir / name) for name, check in _MARKS.items())


def _ours(path: Path, marked: bool) -> bool:
    """Whether the project wrote ``path`` (an entry of a run directory; ``marked``: the folder is a run's)."""
    if path.is_symlink() or not path.is_file():
        return False
    name = path.name
    if name in _CONTENT:
        check = _CONTENT[name]
        if check is None:  # logs and STOP: ours in a run directory; an empty STOP anywhere (a launcher's)
            return marked or (name == STOP_FILE and path.stat().st_size == 0)
        return check(path)
    if marked and (_TEMP_FILES.fullmatch(name) or _SLURM_LOGS.fullmatch(name)):
        return True
    # a benchmark job's records (JSON lines naming their kind), e.g. notebook 07's allreduce.jsonl
    return marked and name.endswith(".jsonl") and _has(path, {"kind"}, first_line=True)


def classify(run_dir: str | Path) -> tuple[list[Path], list[Path]]:
    """``(ours, others)``: the entries of ``run_dir`` that this project wrote, and everything else."""
    run_dir = Path(run_dir)
    marked = is_run_dir(run_dir)
    ours, others = [], []
    for entry in sorted(run_dir.iterdir()):
        (ours if _ours(entry, marked) else others).append(entry)
    return ours, others


def usable_run_dir(run_dir: str | Path) -> bool:
    """True if the trainer may write into the folder ``run_dir``: empty, a run directory, or holding only
    files that it or a launcher writes (an empty ``STOP``, say)."""
    run_dir = Path(run_dir)
    return not any(run_dir.iterdir()) or is_run_dir(run_dir) or not classify(run_dir)[1]


def describe(paths: list[Path], limit: int = 5) -> str:
    """``a.txt, thesis/, ...`` for a message: at most ``limit`` names, then how many more."""
    names = [p.name + ("/" if p.is_dir() and not p.is_symlink() else "") for p in paths[:limit]]
    more = f" and {len(paths) - limit} more" if len(paths) > limit else ""
    return ", ".join(repr(n) for n in names) + more


def clearable_files(run_dir: str | Path, what: str = "fresh") -> list[Path]:
    """The files a fresh start would remove from ``run_dir`` (those this project wrote); nothing is removed.

    Raises RunDirError if ``run_dir`` is not a folder or holds anything else (the message lists it). An absent
    folder has nothing to remove."""
    run_dir = Path(run_dir)
    if not run_dir.exists() and not run_dir.is_symlink():
        return []
    if run_dir.is_symlink():  # never removed through: the files it leads to may be anyone's
        raise RunDirError(f"{what}: {run_dir} is a symbolic link to {os.readlink(run_dir)!r}, and a fresh start "
                          "removes nothing through a link; nothing was removed. Fix: pass the folder it leads to as "
                          "the run directory, or choose another run name.")
    if not run_dir.is_dir():
        raise RunDirError(f"{what}: {run_dir} is not a folder; nothing was removed. Fix: choose another run name.")
    ours, others = classify(run_dir)
    if others:
        raise RunDirError(
            f"{what}: {run_dir} holds files that this project did not write ({describe(others)}); nothing was "
            "removed. Fix: move them out of the run directory, or choose another run name.")
    return ours


def clear_run_dir(run_dir: str | Path, what: str = "fresh") -> list[Path]:
    """Remove the files this project wrote in ``run_dir`` (a fresh start); return them.

    Raises RunDirError, removing nothing, if ``run_dir`` is not a run directory or holds anything else
    (:func:`clearable_files`)."""
    run_dir = Path(run_dir)
    ours = clearable_files(run_dir, what)
    for path in ours:
        path.unlink(missing_ok=True)
    if ours:  # an empty folder holds nothing of ours: whoever made it keeps it
        try:
            run_dir.rmdir()  # refuses if anything appeared meanwhile
        except OSError:
            pass
    return ours


# Generated data trees: marker file -> the settings its JSON holds. Their other files are images in
# train/<class>/ or val/<class>/.
_TREE_MARKERS = {
    "digits_export.json": {"image_size", "val_fraction", "seed", "version"},
    "fake_imagenet.json": {"seed", "version"},
}
_TREE_IMAGE = re.compile(r"(train|val)/[^/]+/[^/]+\.(jpe?g|png)", re.IGNORECASE)


def foreign_tree_files(root: str | Path, marker: str) -> list[Path] | None:
    """The files in the generated tree ``root`` that its generator did not write; None if ``root`` has no
    valid ``marker`` (a marker file without the generator's settings is not one)."""
    root = Path(root)
    keys = _TREE_MARKERS.get(marker, {"version"})
    if not (root / marker).is_file() or not _has(root / marker, keys):
        return None
    foreign = []
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root).as_posix()
        if path.is_symlink() or (not path.is_dir() and not path.is_file()):
            foreign.append(path)
        elif path.is_file() and relative != marker and not _TREE_IMAGE.fullmatch(relative):
            foreign.append(path)
    return foreign
