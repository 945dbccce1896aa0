"""Node-local staging: a copy of the data on each node's own disk, made once per node and removed afterwards.

HPC centres ask ImageNet users to copy the data set to the node's local disk (``$TMPDIR``, ``/local``)
before training, so that 1.33 million small reads per epoch do not hit the shared file system. With
``stage_to`` set, the job's launcher on each node (:mod:`tutorial_lib.jobs.staged`, one per node, before
torchrun starts any rank) calls :func:`stage`, runs the ranks with :data:`STAGED_DATA_ENV` pointing at the
copy, and calls :func:`remove` when they end, whatever the outcome.

The copy goes to ``STAGE_TO/tutorial-stage-<run>-<node>``: first into ``<that>.partial`` (a marker and the
list of files it will hold are written before any image), then renamed, so a complete copy is never
confused with an interrupted one; an interrupted copy of the same source is resumed (files of the right size
and time are kept). A complete copy is reused only while it holds exactly the source's files, each of the same
size and modification time; when the source changed (a file added, removed or rewritten), the copy is brought
up to date the same way, its files that the source no longer has deleted, before any rank reads it.
:func:`remove` deletes only the files on that list, the marker and the folders left empty: anything else found
there survives, and a folder of that name that is not ours is refused.

``stage_to`` may be a folder others can write (``/tmp``, a group scratch), so a mark alone proves nothing:
the copy's folder is made with an exclusive ``mkdir`` (mode 0700), and one found there is used only if it is
a real folder (not a link) owned by the user who runs the job that no one else may write; anything else is
refused in one line and nothing is read from it. Removal works through directory file descriptors opened
with ``O_NOFOLLOW``: a link planted in the copy is never followed, whatever the file list names.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from tutorial_lib.data.file_index import class_link_problem
from tutorial_lib.data.links import HUBS
from tutorial_lib.data.names import is_class_folder

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
    refreshed: bool = False  # a copy of an earlier job brought up to date: the source had changed since


def _fail(problem: str, fix: str):
    raise StagingError(f"stage_to: {problem}. Fix: {fix}.")


def climbs_out(stage_to: str) -> str | None:
    """The node-local root that ``stage_to`` names (its leading ``$VARIABLE``, or its absolute path up to the first
    ``..``) when its ``..`` parts lead out of that root (``$HOME/../../etc``); None when it stays inside."""
    parts = stage_to.split("/")
    if ".." not in parts:
        return None
    first = 1 if stage_to.startswith("$") else parts.index("..")
    depth = 0
    for part in parts[first:]:
        depth += -1 if part == ".." else 0 if part in ("", ".") else 1
        if depth < 0:
            return "/".join(parts[:first]) or "/"
    return None


def target_root(stage_to: str, environ=os.environ) -> Path:
    """``stage_to`` with its environment variables expanded in ``environ`` (the node's), checked absolute and
    inside the root it names (:func:`climbs_out`)."""
    left = climbs_out(stage_to)
    if left is not None:
        _fail(f"{stage_to} leaves {left}, the node-local folder it names ('..' climbs out of it)",
              f"name a folder inside it, without '..' (e.g. {left}/stage), or the node's $TMPDIR")
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
    """``(relative path, size)`` of every file under ``source`` (links followed: a prepared tree is links; its
    links to SOURCE's splits, :data:`~tutorial_lib.data.links.HUBS`, are the way in, not data)."""
    source = Path(source)
    found = []
    for folder, dirs, names in os.walk(source, followlinks=True):
        if folder == str(source):
            dirs[:] = [d for d in dirs if d not in HUBS.values()]
        dirs[:] = sorted(d for d in dirs if is_class_folder(d))  # no .ipynb_checkpoints: no class, no data
        rel = os.path.relpath(folder, source)
        if rel != "." and os.sep not in rel:  # a split: a linked class folder only to a flat folder of images
            dirs[:] = [d for d in dirs if not (os.path.islink(os.path.join(folder, d))
                                               and class_link_problem(os.path.join(folder, d)))]
        for name in sorted(names):
            found.append((os.path.normpath(os.path.join(rel, name)), os.stat(os.path.join(folder, name)).st_size))
    return found


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def _check_owned(folder: Path, node: str) -> bool:
    """False if nothing is at ``folder``; True if it is a real folder of this user that no one else may write;
    StagingError otherwise (a link, a file, another user's folder, or one others may write into)."""
    try:
        found = os.lstat(folder)
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(found.st_mode) or not stat.S_ISDIR(found.st_mode):
        _fail(f"{folder} exists on node {node} and is {'a link' if stat.S_ISLNK(found.st_mode) else 'not a folder'}; "
              "nothing was read from it or copied", "remove or rename it yourself, or choose another stage_to")
    if found.st_uid != os.geteuid():
        _fail(f"{folder} on node {node} belongs to another user (uid {found.st_uid}), not to you (uid "
              f"{os.geteuid()}); nothing was read from it or copied", "choose a stage_to of your own (the node's "
              "$TMPDIR), or ask its owner to remove it")
    if found.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        _fail(f"{folder} on node {node} may be written by others (mode {stat.S_IMODE(found.st_mode):o}), so its "
              "content cannot be trusted; nothing was read from it or copied", "remove it yourself, or choose "
              "another stage_to")
    return True


def _read_inside(folder: Path, name: str) -> str | None:
    """The text of ``folder/name`` read without following a link (None if it is not a regular file)."""
    try:
        fd = os.open(os.path.join(folder, name), os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    with os.fdopen(fd, "rb") as file:
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            return None
        return file.read().decode("utf-8", errors="replace")


def _ours(folder: Path, source: Path) -> bool:
    """The marker (read without following links) names ``source``, and the file list is there."""
    try:
        marker = json.loads(_read_inside(folder, MARKER) or "null")
    except ValueError:
        return False
    return isinstance(marker, dict) and marker.get("source") == str(source) and _read_inside(folder, MANIFEST) \
        is not None


def _same(src: str, dst: str) -> bool:
    try:
        a, b = os.stat(src), os.stat(dst, follow_symlinks=False)
    except OSError:
        return False
    return a.st_size == b.st_size and a.st_mtime_ns == b.st_mtime_ns


def _out_of_date(copy: Path, source: Path, files: list[tuple[str, int]]) -> bool:
    """True when ``copy`` does not hold exactly ``files`` of ``source`` as they are now: a file added, removed,
    or of another size or modification time since it was copied (one ``stat`` per file on each side)."""
    manifest = _read_inside(copy, MANIFEST)
    if manifest is None or sorted(manifest.splitlines()) != sorted(rel for rel, _ in files):
        return True
    return not all(_same(str(source / rel), str(copy / rel)) for rel, _ in files)


def _drop_files_not_in(copy: Path, keep: set[str]) -> None:
    """Delete the files of ``copy``'s file list that the source no longer has (never through a link)."""
    top = os.open(copy, _DIR_FLAGS)
    try:
        for rel in (_read_at(top, MANIFEST) or "").splitlines():
            parts = Path(rel).parts
            if rel and rel not in keep and not os.path.isabs(rel) and ".." not in parts:
                _unlink_regular(top, parts)
    finally:
        os.close(top)


def copy_name(run: str, node: str) -> str:
    """The folder a node's copy gets inside ``stage_to``: one per run and node (emulated nodes share a disk)."""
    return "tutorial-stage-" + _UNSAFE.sub("_", f"{run}-{node}")[:120]


def check_stage_root(source: str | os.PathLike, stage_to: str, node: str, environ=os.environ) -> Path:
    """``stage_to``'s folder on ``node`` (:func:`target_root`), checked: an existing folder there that this user may
    write, outside ``source``; StagingError otherwise. A local job's nodes are this machine, so its submit calls this
    before anything is written (r43g: the job started, wrote its run directory, and only then failed here)."""
    source = Path(source).absolute()
    root = target_root(stage_to, environ)
    if not root.is_dir():
        _fail(f"{root} is not a folder on node {node}", "create it first, or point stage_to at the node's local disk")
    if not os.access(root, os.W_OK | os.X_OK):
        _fail(f"{root} is not writable on node {node}", "use a folder you may write to ($TMPDIR on most sites)")
    if root.resolve().is_relative_to(source.resolve()):
        _fail(f"{root} is inside the data folder {source}", "stage to a folder outside the data (the node's $TMPDIR)")
    return root


def stage(source: str | os.PathLike, stage_to: str, run: str, node: str, environ=os.environ) -> Staged:
    """Copy ``source`` to ``stage_to``'s folder for ``run`` on ``node`` (or reuse / resume ours); return it.

    Raises StagingError before copying anything if ``stage_to`` is unusable: not a writable folder, inside
    ``source``, too little free space for the data, or already holding a folder of that name that is not ours."""
    source = Path(source).absolute()
    root = check_stage_root(source, stage_to, node, environ)
    final = root / copy_name(run, node)
    partial = final.with_name(final.name + ".partial")
    present_at = {folder: _check_owned(folder, node) for folder in (final, partial)}  # owner first, then marker
    for folder, present in present_at.items():
        if present and not _ours(folder, source):
            _fail(f"{folder} exists and was not staged from {source} by this project; nothing was copied",
                  "remove or rename it yourself, or choose another stage_to")
    files = listing(source)
    total = sum(size for _, size in files)
    if present_at[final]:  # a complete copy of this run on this node, left by an earlier job of it
        if not _out_of_date(final, source, files):
            return Staged(final, len(files), total, 0.0, reused=True)
        if present_at[partial]:
            remove(partial)
        os.rename(final, partial)  # the source changed since: brought up to date like an interrupted copy
        present_at[partial] = True
    refreshing = present_at[final]
    present = sum(size for rel, size in files if _same(str(source / rel), str(partial / rel)))
    free = shutil.disk_usage(root).free
    if total - present + SPARE_BYTES > free:
        _fail(f"the data needs {(total - present) / 1e9:.2f} GB but {root} has {free / 1e9:.2f} GB free on node "
              f"{node}", "free space there, or choose a node-local folder with room for the data")
    started = time.perf_counter()
    if not present_at[partial]:
        try:
            os.mkdir(partial, 0o700)  # exclusive: a folder someone made meanwhile is not taken as ours
        except FileExistsError:
            _fail(f"{partial} appeared on node {node} while this job checked it; nothing was copied",
                  "look who made it, remove it, and run again (or choose another stage_to)")
    if present_at[partial]:
        _drop_files_not_in(partial, {rel for rel, _ in files})
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
    return Staged(final, len(files), total, time.perf_counter() - started, refreshed=refreshing)


def remove(copy: str | os.PathLike) -> list[Path]:
    """Delete what :func:`stage` copied to ``copy`` (a ``.partial`` one too), and the folders left empty;
    return what is left there (files it did not copy, which are never deleted).

    Nothing is removed unless ``copy`` is a real folder of this user holding the marker and the file list;
    every path is opened relative to a directory file descriptor with ``O_NOFOLLOW``, so a link inside the
    copy (``a`` -> another user's folder) is never followed, whatever the file list names."""
    copy = Path(copy)
    try:
        top = os.open(copy, _DIR_FLAGS)
    except OSError:  # gone, a link, or not a folder: nothing of ours
        return []
    try:
        if os.fstat(top).st_uid != os.geteuid():
            return []
        manifest, marker = _read_at(top, MANIFEST), _read_at(top, MARKER)
        if manifest is None or marker is None:
            return []
        for rel in manifest.splitlines():
            parts = Path(rel).parts
            if rel and not os.path.isabs(rel) and ".." not in parts and parts[-1] not in (MARKER, MANIFEST):
                _unlink_regular(top, parts)
        for name in (MARKER, MANIFEST):
            _unlink_regular(top, (name,))
        _prune(top)
    finally:
        os.close(top)
    try:
        os.rmdir(copy)  # only if empty; rmdir never follows a link
    except OSError:
        pass
    return _left(copy)


def _read_at(folder_fd: int, name: str) -> str | None:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), dir_fd=folder_fd)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as file:
        return file.read().decode("utf-8", errors="replace") if stat.S_ISREG(os.fstat(fd).st_mode) else None


def _unlink_regular(top: int, parts: tuple[str, ...]) -> None:
    """Unlink ``top/parts...`` if it is a regular file reached through real folders only (no link followed)."""
    opened = []
    try:
        here = top
        for part in parts[:-1]:
            here = os.open(part, _DIR_FLAGS, dir_fd=here)
            opened.append(here)
        if stat.S_ISREG(os.stat(parts[-1], dir_fd=here, follow_symlinks=False).st_mode):
            os.unlink(parts[-1], dir_fd=here)
    except OSError:  # a link on the way (ELOOP, ENOTDIR), or already gone: not ours to remove
        pass
    finally:
        for fd in reversed(opened):
            os.close(fd)


def _prune(folder_fd: int) -> None:
    """Remove the empty real folders below ``folder_fd``, deepest first, never through a link."""
    with os.scandir(folder_fd) as entries:
        names = [entry.name for entry in entries if entry.is_dir(follow_symlinks=False)]
    for name in names:
        try:
            sub = os.open(name, _DIR_FLAGS, dir_fd=folder_fd)
        except OSError:
            continue
        try:
            _prune(sub)
        finally:
            os.close(sub)
        try:
            os.rmdir(name, dir_fd=folder_fd)
        except OSError:  # holds something we did not copy
            pass


def _left(copy: Path) -> list[Path]:
    if not copy.is_dir() or copy.is_symlink():
        return []
    found = []
    for folder, dirs, names in os.walk(copy):  # links are listed, never followed
        found += [Path(folder, name) for name in names]
        found += [Path(folder, name) for name in dirs if os.path.islink(os.path.join(folder, name))]
    return sorted(found)


def read_location(data_dir: str) -> str:
    """Where this process reads ``data_dir`` from: the node's staged copy if its launcher made one of it."""
    copy, source = os.environ.get(STAGED_DATA_ENV), os.environ.get(STAGED_FROM_ENV)
    if copy and source and os.path.abspath(source) == os.path.abspath(data_dir):
        return copy
    return data_dir
