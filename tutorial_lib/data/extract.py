"""Extraction of the original archives into DEST, one class (train) or one image (val) at a time.

Path safety: only regular-file members are written, under their base name, into a folder ``prepare`` chose;
a symlink, hard link or device member, or two members of one name, is refused in one line naming it (and the
class's temporary ``.part-<wnid>`` folder is removed). System files (``._*``, ``.DS_Store``; see
:mod:`.names`) are skipped and counted. A finished file or class is never written again, and a file that is
already there (a user's) is never replaced.
"""

from __future__ import annotations

import os
import shutil
import tarfile
import zlib
from pathlib import Path

from tutorial_lib.data import PrepareError
from tutorial_lib.data.names import is_system_file

BROKEN = (tarfile.TarError, EOFError, zlib.error)  # what reading a truncated or corrupt archive raises


def member_name(member: tarfile.TarInfo, archive: str) -> str:
    """The base name ``member`` is written under; PrepareError unless it is a regular file with a usable name."""
    name = member.name.rsplit("/", 1)[-1]
    if name in ("", ".", "..") or not member.isfile():
        kind = "a symlink" if member.issym() else "a hard link" if member.islnk() else "not a regular file"
        raise PrepareError(f"SOURCE: {archive} holds {member.name!r}, which is {kind}; only image files are "
                           "extracted. Fix: pass the original ImageNet archives.")
    return name


def check_unique(names: list[str], archive: str) -> None:
    """PrepareError naming both members when two members of ``archive`` would be written under one name."""
    seen: dict[str, int] = {}
    for position, name in enumerate(names, 1):
        if name in seen:
            raise PrepareError(f"SOURCE: {archive} holds two members named {name!r} (members {seen[name]} and "
                               f"{position}); one would replace the other. Fix: pass the original archive.")
        seen[name] = position


def _write(handle, target: Path) -> None:
    tmp = target.with_name(f".{target.name}.tmp")
    with open(tmp, "wb") as out:
        shutil.copyfileobj(handle, out, 1 << 20)
    if os.path.lexists(target):
        tmp.unlink()
        return  # a file appeared meanwhile: never replaced
    os.replace(tmp, target)


def extract_class(fileobj, part: Path, folder: Path, label: str) -> int:
    """Stream one class tar (``fileobj``) into ``part``, then rename it to ``folder``; returns the system files
    skipped. ``label`` names the class tar in messages. ``part`` is removed if anything goes wrong."""
    shutil.rmtree(part, ignore_errors=True)  # an interrupted extraction of our own
    part.mkdir()
    skipped, written = 0, {}
    try:
        with tarfile.open(fileobj=fileobj, mode="r|") as inner:
            for position, image in enumerate(inner, 1):
                if image.isdir():
                    continue
                name = member_name(image, label)
                if is_system_file(name):
                    skipped += 1
                    continue
                if name in written:
                    raise PrepareError(f"SOURCE: {label} holds two members named {name!r} (members {written[name]} "
                                       f"and {position}); one would replace the other. Fix: pass the original "
                                       "archive.")
                written[name] = position
                _write(inner.extractfile(image), part / name)
    except BROKEN as exc:
        shutil.rmtree(part, ignore_errors=True)
        raise PrepareError(f"SOURCE: {label} is corrupt or truncated ({exc}). Fix: download the archive again "
                           "(the run resumes where it stopped).") from None
    except BaseException:
        shutil.rmtree(part, ignore_errors=True)
        raise
    os.replace(part, folder)
    return skipped


def extract_file(tar: tarfile.TarFile, member: tarfile.TarInfo, target: Path, archive: str) -> None:
    """Write one member of ``tar`` to ``target`` (through a temporary name), naming ``archive`` if it is broken."""
    try:
        _write(tar.extractfile(member), target)
    except BROKEN as exc:
        raise PrepareError(f"SOURCE: {archive} is corrupt or truncated at {member.name!r} ({exc}). Fix: download "
                           "it again (the run resumes where it stopped).") from None
