"""Packed shards as the trainer reads them: the index of a pack (``SHARDS/shards.json``), the checks made on it
before training, and one sample read back from a shard (no torch).

A pack (:mod:`.pack`) is tar files in the WebDataset layout: each sample is two members, ``<key>.cls`` (the class
number as text) and ``<key>.jpg`` (the image's bytes), next to each other; each shard starts with a PAX global
header naming its pack (``tutorial.pack``), which tar, tarfile and the webdataset library skip as metadata. The
index names every shard with its samples, bytes and SHA-256, the class list of each split, what ``--max-side``
changed, and, per shard, where each sample starts, how many bytes it spans and its label (``spans``, ``labels``):
with them a sample is one ``pread`` of an already open shard, and the job's one scan is reading this file, not
listing the shards.

:func:`check` is what the trainer runs before training (``validate``): the index is a pack's of this format;
every shard it names exists, has its bytes (a truncated copy is refused) and carries the index's pack id (an index
from another pack is refused); both splits have the same classes. A sample whose members are damaged or lack
their label is found when it is read (:func:`sample_bytes` raises OSError) and handled as an unreadable image.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
from dataclasses import dataclass
from pathlib import Path

INDEX = "shards.json"
FORMAT = "tutorial-shards"
VERSION = 1
PACK_HEADER = "tutorial.pack"  # the PAX global header each shard starts with: the pack's id
PACK_COMMAND = "python -m tutorial_lib.data pack PREPARED SHARDS"


class ShardError(ValueError):
    """A pack the trainer cannot read (one line naming data_dir, what is wrong, and the fix)."""


def _fail(root: Path, problem: str, fix: str = f"pack the data again with `{PACK_COMMAND}`") -> None:
    raise ShardError(f"data_dir: {root} {problem}. Fix: {fix}.")


@dataclass(frozen=True)
class Split:
    """One split of a pack: its shards (in pack order), their sample counts and where each sample lies."""

    name: str
    classes: list[str]
    shards: list[dict]  # {"name", "samples", "bytes", "sha256", "spans": [[offset, length], ...], "labels": [...]}

    @property
    def counts(self) -> list[int]:
        """Samples per shard, in pack order."""
        return [shard["samples"] for shard in self.shards]

    def __len__(self) -> int:
        return sum(self.counts)


def index_path(root: str | os.PathLike) -> Path:
    """Where a pack's index is."""
    return Path(root) / INDEX


def is_pack(root: str | os.PathLike) -> bool:
    """Whether ``root`` holds a pack's index (the trainer's ``--data-format shards`` reads it)."""
    return index_path(root).is_file()


def read_index(root: str | os.PathLike) -> dict:
    """The index of the pack in ``root``; ShardError (one line) if it is missing or not a pack's index."""
    root = Path(root)
    path = index_path(root)
    if not path.is_file():
        _fail(root, f"has no {INDEX} (not a pack of shards)", f"pass the folder `{PACK_COMMAND}` wrote, or "
              "--data-format files for class folders")
    try:
        index = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        _fail(root, f"has an unreadable {INDEX} ({exc})")
    if not isinstance(index, dict) or index.get("format") != FORMAT or index.get("version") != VERSION:
        _fail(root, f"has a {INDEX} that is not a pack index of this project (format {FORMAT} version {VERSION})")
    return index


def split(index: dict, name: str) -> Split:
    """The ``train`` or ``val`` split of a pack index."""
    part = index["splits"][name]
    return Split(name, list(part["classes"]), list(part["shards"]))


def pack_id(path: str | os.PathLike) -> str | None:
    """The pack id a shard's PAX global header names (None: no such header, or not a tar)."""
    try:
        with tarfile.open(path, "r:") as tar:
            tar.next()
            return tar.pax_headers.get(PACK_HEADER)
    except (OSError, tarfile.TarError):
        return None


def check(root: str | os.PathLike) -> dict:
    """The index of the pack in ``root`` after the checks made before training (see the module's docstring);
    ShardError naming the first problem. Reads the index and one header of each shard, never a sample."""
    root = Path(root)
    index = read_index(root)
    train, val = split(index, "train"), split(index, "val")
    if train.classes != val.classes:
        only_train = sorted(set(train.classes) - set(val.classes))[:5] or "none"
        only_val = sorted(set(val.classes) - set(train.classes))[:5] or "none"
        _fail(root, f"has training and validation shards of different classes (only in train: {only_train}; only "
              f"in val: {only_val}), so their labels would not match", "pack both splits from one prepared folder "
              f"(`{PACK_COMMAND}` refuses splits whose class folders differ)")
    if not len(train):
        _fail(root, "has no training images")
    for part in (train, val):
        for shard in part.shards:
            path = root / shard["name"]
            if not path.is_file():
                _fail(root, f"lacks the shard {shard['name']} that its {INDEX} names", "copy the whole pack (every "
                      f"shard and {INDEX}) or pack again")
            size = path.stat().st_size
            if size != shard["bytes"]:
                _fail(root, f"has a shard {shard['name']} of {size:,} bytes where its {INDEX} says "
                      f"{shard['bytes']:,} (truncated or changed)", "copy that shard again from the pack, or pack "
                      "again")
            found = pack_id(path)
            if found != index["pack"]:
                _fail(root, f"has a shard {shard['name']} of another pack ({found or 'no pack id'}, the index is "
                      f"{index['pack']}): {INDEX} and the shards were written by different packs", "keep each "
                      f"pack's {INDEX} with its own shards, or pack again")
    return index


def sample_bytes(chunk: bytes) -> tuple[str, bytes, int]:
    """``(key, image bytes, label)`` of one sample's members (a shard's bytes at the sample's span); OSError
    naming what is wrong when the members are damaged, or the image or its label is missing."""
    members: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(chunk), mode="r:") as tar:
            for member in tar:
                data = tar.extractfile(member) if member.isfile() else None
                if data is not None:
                    members[member.name] = data.read()
    except tarfile.TarError as exc:
        raise OSError(f"damaged tar members ({exc})") from None
    images = [name for name in members if name.endswith(".jpg")]
    if len(images) != 1:
        raise OSError(f"not one image member (.jpg) but {sorted(members) or 'none'}")
    key = images[0][:-len(".jpg")]
    label = members.get(key + ".cls")
    if label is None:
        raise OSError(f"sample {key} has no label member ({key}.cls)")
    try:
        return key, members[images[0]], int(label.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        raise OSError(f"sample {key} has a label that is not a class number ({label[:20]!r})") from None
