"""One scan per job: the (file, label) list of an ImageFolder tree, made once and read by every rank.

Without it every rank of a job walks the whole tree (ImageNet: 1,000 + 1,000 folders and 1.33 million
entries; 64 ranks read 85 million directory entries from the shared file system). With it, rank 0
walks the tree once (:func:`build`) and writes ``file_index.json`` in the run directory; every rank
(:func:`use`) then reads that one file instead of the folders. Nothing is written into the data folders.

The walk is torchvision's (``os.walk`` with ``followlinks=True``, sorted) with the project's rules of which
files are images (:func:`tutorial_lib.data.names.is_image`: system files such as ``._x.JPEG`` are not) and which
folders are classes (:func:`tutorial_lib.data.names.is_class_folder`: not ``.ipynb_checkpoints``); the trainer's
ImageFolder makes the same list with :func:`scan` when there is no index. An index is used only for the root it
was made for.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from tutorial_lib.data.names import is_class_folder, is_image
from tutorial_lib.rundir.layout import INDEX_FILE
from tutorial_lib.rundir.owned import is_index_file

_active: dict[str, dict] = {}  # this process's index, by split root


def class_folders(root: str | os.PathLike, warn: bool = True) -> tuple[list[str], list[str]]:
    """The sorted class folders of an ImageFolder split, and the folders skipped as no class (hidden, such as
    ``.ipynb_checkpoints``, or an operating system's: :func:`tutorial_lib.data.names.is_class_folder`; a link that
    leads out of a class: :func:`class_link_problem`), which a warning names and counts."""
    with os.scandir(root) as entries:
        listed = sorted((e.name, e.is_symlink()) for e in entries if _is_dir(e))
    here = os.path.realpath(root)
    # a link back to the split or above it (``up -> ..``) would hold every class again, and walking it never ends
    loops = {name for name, _ in listed if _contains(os.path.realpath(os.path.join(root, name)), here)}
    links = {name: problem for name, link in listed if link and name not in loops
             and (problem := class_link_problem(os.path.join(root, name)))}
    folders = [name for name, _ in listed]
    skipped = [name for name in folders if not is_class_folder(name) or name in loops or name in links]
    if warn and links:
        print(f"warning: skipping {len(links)} linked folder(s) of {root} that are not classes: "
              f"{'; '.join(f'{name} ({problem})' for name, problem in list(links.items())[:5])}",
              file=sys.stderr, flush=True)
    if warn and len(skipped) > len(links):
        print(f"warning: skipping {len(skipped) - len(links)} folder(s) of {root} that are not classes (hidden or "
              f"system folders): {', '.join([name for name in skipped if name not in links][:5])}",
              file=sys.stderr, flush=True)
    return [name for name in folders if name not in skipped], skipped


def class_link_problem(link: str) -> str | None:
    """Why the linked folder ``link`` is no class (None: it is one). A class is a flat folder of images: a link is
    followed (a class kept on another disk) only to a folder that holds images directly, and never to the home
    folder or a folder above it, which holds the user's own files."""
    target = os.path.realpath(link)
    if _contains(target, os.path.realpath(os.path.expanduser("~"))):
        return f"it leads to {target}, the home folder or above it"
    try:
        with os.scandir(target) as entries:
            if any(is_image(e.name) and e.is_file() for e in entries):
                return None
    except OSError as exc:
        return f"{target} cannot be read: {exc.strerror}"
    return f"{target} holds no images directly"


def _is_dir(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir()
    except OSError:  # a link to itself (ELOOP), a folder gone meanwhile: no class
        return False


def _contains(folder: str, path: str) -> bool:
    """Whether real path ``path`` is ``folder`` or lies inside it."""
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def scan(root: str | os.PathLike, warn: bool = True, classes: list[str] | None = None) -> dict:
    """``{"classes": [...], "files": [[file paths relative to root, class 0], ...], "skipped_folders": [...]}`` of
    an ImageFolder split (hidden folders inside a class are skipped too); ``classes``: the split's class folders
    where the caller has just listed them (:func:`class_folders`), so the split is not listed twice."""
    root = Path(root)
    classes, skipped = (classes, []) if classes is not None else class_folders(root, warn)
    files = []
    for name in classes:
        found = []
        seen = set()  # the real folders walked: a link inside a class to a folder above it is walked once
        for folder, dirs, names in os.walk(root / name, followlinks=True):
            real = os.path.realpath(folder)
            if real in seen:
                dirs[:] = []
                continue
            seen.add(real)
            dirs[:] = [d for d in dirs if is_class_folder(d)]
            found.append((os.path.relpath(folder, root), sorted(f for f in names if is_image(f))))
        files.append([os.path.join(rel, f) for rel, names in sorted(found) for f in names])
    return {"classes": classes, "files": files, "skipped_folders": skipped}


def samples_of(root: str | os.PathLike, listed: dict, class_to_idx: dict[str, int]) -> list[tuple[str, int]] | None:
    """The ``(path, label)`` list of ``root`` from its index entry ``listed`` (:func:`scan`'s), or None if its
    classes differ from ``class_to_idx``."""
    if {c: i for i, c in enumerate(listed["classes"])} != class_to_idx:
        return None
    root = str(root)
    return [(os.path.join(root, rel), label) for label, files in enumerate(listed["files"]) for rel in files]


class IndexPlaceError(ValueError):
    """The index cannot be written there (a file of that name that is not an index)."""


def location(run_dir: str | os.PathLike, index_dir: str = "", run_name: str = "") -> Path:
    """Where a job's index goes: ``run_dir/file_index.json``, or ``index_dir/<run name>.file_index.json`` where
    the user placed a cache folder (TrainConfig ``index_dir``)."""
    return Path(index_dir) / f"{run_name}.{INDEX_FILE}" if index_dir else Path(run_dir) / INDEX_FILE


def build(data_dir: str | os.PathLike, run_dir: str | os.PathLike, splits=("train", "val"),
          path: str | os.PathLike | None = None) -> Path:
    """Walk each split of ``data_dir`` once and write the index to ``path`` (default: in ``run_dir``),
    atomically; return its path. A file there that is not an index is refused, never overwritten."""
    data_dir = Path(data_dir).absolute()
    path = Path(path) if path is not None else Path(run_dir) / INDEX_FILE
    if path.exists() and not is_index_file(path):
        raise IndexPlaceError(f"index_dir: {path} exists and is not a file index of this project; nothing was "
                              "written. Fix: move it away, or choose another index_dir")
    path.parent.mkdir(parents=True, exist_ok=True)
    index = {str(data_dir / split): scan(data_dir / split) for split in splits if (data_dir / split).is_dir()}
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(index, separators=(",", ":")))
    os.replace(tmp, path)
    return path


def use(run_dir: str | os.PathLike | None, copy_root: str | os.PathLike | None = None,
        path: str | os.PathLike | None = None) -> None:
    """Make this process's ImageFolder datasets read their file lists from the index at ``path`` (default: in
    ``run_dir``; both None: walk the folders).

    ``copy_root``: this rank reads a node-local copy of the data (:mod:`tutorial_lib.data.staging`) that rank 0
    indexed on its own node; each split's list is used for the same split of the copy."""
    _active.clear()
    if path is None and run_dir is not None:
        path = Path(run_dir) / INDEX_FILE
    if path is not None and Path(path).is_file():
        index = json.loads(Path(path).read_text())
        if copy_root is not None:
            index = {str(Path(copy_root).absolute() / Path(root).name): lists for root, lists in index.items()}
        _active.update(index)


def samples(root: str | os.PathLike, class_to_idx: dict[str, int]) -> list[tuple[str, int]] | None:
    """The ``(path, label)`` list of ``root`` from the active index, or None if there is none for it (or its
    classes differ from ``class_to_idx``)."""
    index = _active.get(str(Path(root).absolute()))
    return None if index is None else samples_of(root, index, class_to_idx)


def classes(root: str | os.PathLike) -> list[str] | None:
    """The sorted class folders of ``root`` from the active index, or None."""
    index = _active.get(str(Path(root).absolute()))
    return None if index is None else list(index["classes"])
