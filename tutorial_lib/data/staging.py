"""Node-local staging: a copy of the data on each node's own disk, made once per node and removed afterwards.

HPC centres ask ImageNet users to copy the data set to the node's local disk (``$TMPDIR``, ``/local``)
before training, so that 1.33 million small reads per epoch do not hit the shared file system. With
``stage_to`` set, the job's launcher on each node (:mod:`tutorial_lib.jobs.staged`, one per node, before
torchrun starts any rank) calls :func:`stage`, runs the ranks with :data:`STAGED_DATA_ENV` pointing at the
copy, and calls :func:`remove` when they end, whatever the outcome.

The copy goes to ``STAGE_TO/tutorial-stage-<run>-<node>``: first into ``<that>.partial`` (a marker and the
list of files it will hold are written before any image), then renamed, so a complete copy is never
confused with an interrupted one; an interrupted copy of the same source is resumed (files of the right size
and time are kept). :func:`remove` deletes only the files on that list, the marker and the folders left
empty: anything else found there survives, and a folder of that name that is not ours is refused.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

MARKER = ".tutorial_staged.json"  # {"source", "node", "run", "version"}: this project made the folder
MANIFEST = ".tutorial_staged.files"  # the relative path of every file the copy holds, one a line
STAGE_TO_ENV = "TUTORIAL_STAGE_TO"  # the job's stage_to as given ($TMPDIR is expanded on each node)
STAGE_FROM_ENV = "TUTORIAL_STAGE_FROM"  # the job's absolute data_dir
STAGED_DATA_ENV = "TUTORIAL_STAGED_DATA"  # set by the node launcher for its ranks: the local copy
STAGED_FROM_ENV = "TUTORIAL_STAGED_FROM"  # ... and the data_dir it is a copy of
SPARE_BYTES = 64 << 20  # free space kept beyond the data's size
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


class StagingError(ValueError):
    """The data cannot be staged there (one line naming ``stage_to`` and the fix)."""


@dataclass
class Staged:
    """A node's copy of the data: where it is, how big, and how long the copy took (0 when reused)."""

    path: Path
    files: int
    bytes: int
    seconds: float
    reused: bool = False


def _fail(problem: str, fix: str):
    raise StagingError(f"stage_to: {problem}. Fix: {fix}.")


def target_root(stage_to: str, environ=os.environ) -> Path:
    """``stage_to`` with its environment variables expanded in ``environ`` (the node's), checked absolute."""
    expanded = os.path.expandvars(stage_to) if environ is os.environ else _expand(stage_to, environ)
    if "$" in expanded:
        _fail(f"{stage_to} names a variable that is not set on this node",
              "use a variable the site sets on compute nodes ($TMPDIR), or an absolute path")
    if not os.path.isabs(expanded):
        _fail(f"{stage_to} is not an absolute path ({expanded})", "give the node-local folder as an absolute path")
    return Path(expanded)


def _expand(text: str, environ) -> str:
    return re.sub(r"\$(\w+)|\$\{(\w+)\}", lambda m: environ.get(m.group(1) or m.group(2), m.group(0)), text)


def listing(source: str | os.PathLike) -> list[tuple[str, int]]:
    """``(relative path, size)`` of every file under ``source`` (links followed: a prepared tree is links)."""
    source = Path(source)
    found = []
    for folder, dirs, names in os.walk(source, followlinks=True):
        dirs.sort()
        rel = os.path.relpath(folder, source)
        for name in sorted(names):
            found.append((os.path.normpath(os.path.join(rel, name)), os.stat(os.path.join(folder, name)).st_size))
    return found


def _ours(folder: Path, source: Path) -> bool:
    try:
        marker = json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(marker, dict) and marker.get("source") == str(source) and (folder / MANIFEST).is_file()


def _same(src: str, dst: str) -> bool:
    try:
        a, b = os.stat(src), os.stat(dst, follow_symlinks=False)
    except OSError:
        return False
    return a.st_size == b.st_size and a.st_mtime_ns == b.st_mtime_ns


def copy_name(run: str, node: str) -> str:
    """The folder a node's copy gets inside ``stage_to``: one per run and node (emulated nodes share a disk)."""
    return "tutorial-stage-" + _UNSAFE.sub("_", f"{run}-{node}")[:120]


def stage(source: str | os.PathLike, stage_to: str, run: str, node: str, environ=os.environ) -> Staged:
    """Copy ``source`` to ``stage_to``'s folder for ``run`` on ``node`` (or reuse / resume ours); return it.

    Raises StagingError before copying anything if ``stage_to`` is unusable: not a writable folder, inside
    ``source``, too little free space for the data, or already holding a folder of that name that is not ours."""
    source = Path(source).absolute()
    root = target_root(stage_to, environ)
    if not root.is_dir():
        _fail(f"{root} is not a folder on node {node}", "create it first, or point stage_to at the node's local disk")
    if not os.access(root, os.W_OK | os.X_OK):
        _fail(f"{root} is not writable on node {node}", "use a folder you may write to ($TMPDIR on most sites)")
    if root.resolve().is_relative_to(source.resolve()):
        _fail(f"{root} is inside the data folder {source}", "stage to a folder outside the data (the node's $TMPDIR)")
    final = root / copy_name(run, node)
    partial = final.with_name(final.name + ".partial")
    for folder in (final, partial):
        if (folder.exists() or folder.is_symlink()) and not _ours(folder, source):
            _fail(f"{folder} exists and was not staged from {source} by this project; nothing was copied",
                  "remove or rename it yourself, or choose another stage_to")
    files = listing(source)
    total = sum(size for _, size in files)
    if final.exists():  # a complete copy of this run on this node, left by a job that was killed: reuse it
        return Staged(final, len(files), total, 0.0, reused=True)
    present = sum(size for rel, size in files if _same(str(source / rel), str(partial / rel)))
    free = shutil.disk_usage(root).free
    if total - present + SPARE_BYTES > free:
        _fail(f"the data needs {(total - present) / 1e9:.2f} GB but {root} has {free / 1e9:.2f} GB free on node "
              f"{node}", "free space there, or choose a node-local folder with room for the data")
    started = time.perf_counter()
    partial.mkdir(exist_ok=True)
    (partial / MANIFEST).write_text("".join(rel + "\n" for rel, _ in files))
    (partial / MARKER).write_text(json.dumps({"source": str(source), "node": node, "run": run, "version": 1}))
    try:
        for rel, _ in files:
            src, dst = source / rel, partial / rel
            if not _same(str(src), str(dst)):
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dst)  # copies the content of a link; the time is set last (resume checks it)
        os.rename(partial, final)
    except OSError as exc:
        remove(partial)
        _fail(f"copying {source} to {partial} on node {node} failed ({exc}); what was copied is removed",
              "check the free space and permissions of that folder, or choose another stage_to")
    return Staged(final, len(files), total, time.perf_counter() - started)


def remove(copy: str | os.PathLike) -> list[Path]:
    """Delete what :func:`stage` copied to ``copy`` (a ``.partial`` one too), and the folders left empty;
    return what is left there (files it did not copy, which are never deleted)."""
    copy = Path(copy)
    if not (copy / MANIFEST).is_file() or not (copy / MARKER).is_file():
        return []
    for rel in (copy / MANIFEST).read_text().splitlines():
        path = copy / rel
        if rel and not os.path.isabs(rel) and ".." not in Path(rel).parts and path.is_file() and not path.is_symlink():
            path.unlink()
    (copy / MARKER).unlink()
    (copy / MANIFEST).unlink()
    for folder, _, _ in sorted(os.walk(copy), reverse=True):  # deepest first
        try:
            os.rmdir(folder)
        except OSError:  # holds something we did not copy
            pass
    return sorted(p for p in copy.rglob("*") if not p.is_dir()) if copy.exists() else []


def read_location(data_dir: str) -> str:
    """Where this process reads ``data_dir`` from: the node's staged copy if its launcher made one of it."""
    copy, source = os.environ.get(STAGED_DATA_ENV), os.environ.get(STAGED_FROM_ENV)
    if copy and source and os.path.abspath(source) == os.path.abspath(data_dir):
        return copy
    return data_dir
