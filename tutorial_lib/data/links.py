"""The links ``prepare`` makes from DEST into an unpacked SOURCE, and what a moved SOURCE does to them.

Each split of SOURCE gets one link in DEST (``DEST/.source_val`` -> ``../imagenet/val``, see :data:`HUBS`), and
the class folders and validation images link through it (``../../.source_val/ILSVRC2012_val_00000001.JPEG``).
So every target is short: ext4 stores a target of up to 59 bytes in the link's inode and gives a longer one a
4 KiB block of its own (a direct link from ``val/<wnid>/`` into Kaggle's ``ILSVRC/Data/CLS-LOC/val`` is ~70
bytes: ~200 MB for 50,000 links). Links are relative: SOURCE and DEST moved together keep working. A SOURCE
moved alone leaves them dangling; :func:`moved_source` says so in one line, and ``prepare NEW_SOURCE DEST``
points the two split links at the new place (it replaces only links of its own).
"""

from __future__ import annotations

import os
from pathlib import Path

from tutorial_lib.data import PREPARE_COMMAND
from tutorial_lib.paths import not_a_file
from tutorial_lib.rundir.metrics import parse_json

MARK = ".tutorial_prepared.json"
HUBS = {"train": ".source_train", "val": ".source_val"}  # DEST's one link to each split of SOURCE
INLINE_TARGET = 59  # the longest link target ext4 keeps in the inode (no data block)


def _target(link: Path) -> str:
    """Where ``link`` points, as a normalised absolute path (not resolved: a dangling link has one too)."""
    return os.path.normpath(os.path.join(link.parent, os.readlink(link)))


def is_ours(link: Path, sources: list[Path]) -> bool:
    """Whether ``link`` is a symlink prepare made: it points into one of ``sources`` (this run's SOURCE, or
    the one DEST was prepared from before it moved)."""
    if not link.is_symlink():
        return False
    target = _target(link)
    return any(target == str(root) or target.startswith(str(root) + os.sep) for root in sources)


def make_link(target: Path, link: Path, sources: list[Path]) -> bool:
    """Make ``link`` a relative link to ``target``; replace only a link of ours (see :func:`is_ours`). Returns
    False, changing nothing, when ``link`` is something else (a user's file): it is never replaced."""
    relative = os.path.relpath(target, link.parent)
    if link.is_symlink() and os.readlink(link) == relative:
        return True
    if os.path.lexists(link) and not is_ours(link, sources):
        return False
    tmp = link.with_name(f".{link.name}.tmp")
    if tmp.is_symlink():
        tmp.unlink()  # our own leftover of an interrupted run (a file of that name is left alone: rename fails)
    tmp.symlink_to(relative)
    os.replace(tmp, link)
    return True


def _dangling(root: Path) -> bool:
    """Whether the first link of ``root``'s splits leads nowhere (the links hold together or not at all)."""
    for split in ("train", "val"):
        first = root / split
        while first.is_dir() and not first.is_symlink():
            with os.scandir(first) as entries:
                names = sorted(e.name for e in entries)
            if not names:
                break
            first = first / names[0]
        if first.is_symlink():
            return not first.exists()
    return False


def moved_source(data_dir: str | os.PathLike) -> str | None:
    """One line saying that the SOURCE a prepared ``data_dir`` links to is gone and how to fix it, or None."""
    root = Path(data_dir)
    odd = not_a_file(root / MARK)
    if odd is not None:
        return (f"data_dir: {root / MARK} is {odd}, not the mark that `prepare` writes; nothing was read from it. "
                f"Fix: move it away, or pass a data_dir that `{PREPARE_COMMAND}` made.")
    try:
        state = parse_json((root / MARK).read_bytes())
    except (OSError, ValueError):  # garbled or nested past Python: not the mark prepare writes
        return None
    if not isinstance(state, dict) or not isinstance(state.get("source"), str):  # not the mark prepare writes
        return None
    source = state["source"]
    if state.get("form") == "archives" or not source or not _dangling(root):
        return None
    try:
        if Path(source).exists():
            return None
    except OSError:  # a source no path can be (a name too long): not the mark prepare writes
        return (f"data_dir: {root / MARK} names a source that no path can be ({source[:60]!r}...). Fix: run "
                f"`{PREPARE_COMMAND.replace('SOURCE DEST', f'SOURCE {root}')}` again to rewrite it.")
    return (f"data_dir: {root} was prepared from {source}, which is gone (moved or removed), so its links lead "
            f"nowhere. Fix: run `{PREPARE_COMMAND.replace('SOURCE DEST', f'NEW_SOURCE {root}')}` with the place "
            "it moved to (only the links are rewritten).")
