"""Training and validation images read from packed shards (``--data-format shards``; :mod:`tutorial_lib.data.pack`).

Which images, in which order: :class:`ShardOrder`, a sampler like torch's DistributedSampler. Each epoch the
shards are put in an order drawn from (seed, epoch), the same on every rank; their samples, in that order, are cut
to ``world * (N // world)`` (the class-folder path's rule with ``drop_last``: the few left over are left out this
epoch, others the next) and each rank takes its contiguous share, which it reads through a shuffle buffer drawn
from (seed, epoch, rank). So every rank has the same number of images and steps, each training image is read at
most once per epoch (all of them when the count divides), and the order is a pure function of (seed, epoch,
rank, world): a resumed run skips the batches it did (``SkipFirst``) and consumes the same images as an
uninterrupted one. Validation: ``ShardSampler`` over the pack's order, each image once.

How a sample is read: the pack's index (:mod:`tutorial_lib.data.shard_index`) holds each sample's span in its
shard, so reading it is one ``pread`` of a shard this process already holds open (the last
:data:`OPEN_SHARDS` stay open per process): an epoch opens each shard about once per worker instead of every
image's file. The sample's tar members are checked as they are parsed; a damaged sample or one without its label
is an unreadable image, as is an image that cannot be decoded: skipped and named (``--bad-data skip``) or a
DataError naming the shard and the sample (``error``), through the same code as an image file
(:class:`.files.ImageFiles`). Decoding, crops (:mod:`.draws`, from (seed, epoch, position in the pack)) and the
GPU pipeline's device decode are the class-folder path's own.

Why not the webdataset library's reader (the shards are written by its ``TarWriter`` and read by it as they
are): its pipeline streams shards through ``split_by_node`` / ``split_by_worker`` and a shuffle buffer inside
each worker, so a rank's image count follows from how the shards divide (ranks and workers get unequal counts,
and DDP needs the same number of steps on every rank), what a worker has consumed is not known outside it, and
resuming mid-epoch means replaying the stream. A map-style dataset over sample positions, with the order made in
the training process, gives exact counts, exact resume and DataLoader's own batching of worker results.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Sampler

from tutorial_lib.data.shard_index import ShardError, Split, read_index, sample_bytes, split
from tutorial_lib.engine.input import cpu
from tutorial_lib.engine.input.files import open_regular_file
from tutorial_lib.engine.input.folders import DataError

OPEN_SHARDS = 16  # shards a process keeps open (the shuffle buffer spans a few)
SHUFFLE_BUFFER = 4096  # samples in each rank's shuffle buffer


class ShardOrder(Sampler[int]):
    """This rank's sample positions of an epoch (see the module's docstring); ``set_epoch`` like
    DistributedSampler's."""

    def __init__(self, counts: list[int], rank: int, world_size: int, seed: int = 0, buffer: int = SHUFFLE_BUFFER):
        self.counts, self.rank, self.world, self.seed, self.buffer = list(counts), rank, world_size, seed, buffer
        self.starts = np.concatenate([[0], np.cumsum(self.counts)[:-1]]).astype(np.int64)
        self.per_rank = sum(self.counts) // world_size
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """The epoch whose order the next iteration gives."""
        self.epoch = epoch

    def __len__(self) -> int:
        return self.per_rank

    def order(self) -> np.ndarray:
        """This rank's positions in the order they are read this epoch."""
        shards = np.random.default_rng([self.seed, self.epoch]).permutation(len(self.counts))
        stream = np.concatenate([np.arange(self.starts[s], self.starts[s] + self.counts[s]) for s in shards])
        mine = stream[self.rank * self.per_rank:(self.rank + 1) * self.per_rank]
        return buffer_shuffle(mine, self.buffer, np.random.default_rng([self.seed, self.epoch, self.rank, 1]))

    def __iter__(self):
        return iter(self.order().tolist())


def buffer_shuffle(items: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    """``items`` through a shuffle buffer of ``size`` (WebDataset's ``shuffle``: each new item takes the place of
    a random one in the buffer, which is given out; the rest in random order at the end)."""
    if len(items) <= size:
        return rng.permutation(items)
    out, held = np.empty_like(items), items[:size].copy()
    picks = rng.integers(0, size, len(items) - size)
    for k, (item, slot) in enumerate(zip(items[size:], picks, strict=True)):
        out[k], held[slot] = held[slot], item
    out[len(items) - size:] = rng.permutation(held)
    return out


def read_pack(root) -> dict:
    """The index of the pack in ``root`` (read once per rank; checked before training by ``validate``);
    DataError, one line, if it is not there."""
    try:
        return read_index(root)
    except ShardError as exc:
        raise DataError(str(exc)) from None


class SampleNames:
    """``(name, label)`` of each sample of a split, made on demand (a million tuples are not kept): the name is the
    shard's path and the sample's place in it."""

    def __init__(self, root: Path, part: Split, labels: np.ndarray, shard_of: np.ndarray, starts: np.ndarray):
        self.root, self.part, self.labels, self.shard_of, self.starts = root, part, labels, shard_of, starts

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[str, int]:
        shard = int(self.shard_of[index])
        return f"{self.root / self.part.shards[shard]['name']}[{index - int(self.starts[shard])}]", int(
            self.labels[index])


class ShardFiles:
    """One split of a pack with the interface of :class:`.files.ImageFiles` (``samples``, ``classes``,
    ``read(index)``, ``unreadable``), for the pipelines' datasets (:class:`CountingShards`, the GPU pipeline's
    ``EncodedShards``) to put before their class-folder base."""

    def _init_split(self, root, name: str, bad_data: str, index: dict):
        self.root = Path(root)
        part = split(index, name)
        counts = part.counts
        self.classes = part.classes
        self.class_to_idx = {c: i for i, c in enumerate(part.classes)}
        self.starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        shard_of = np.repeat(np.arange(len(counts)), counts)
        spans = [s for shard in part.shards for s in shard["spans"]]
        self.spans = np.array(spans, dtype=np.int64).reshape(-1, 2)
        labels = np.array([label for shard in part.shards for label in shard["labels"]], dtype=np.int64)
        # only the names stay: the index's lists (a million spans as Python objects) are not kept per rank
        part = Split(part.name, part.classes, [{"name": s["name"], "samples": s["samples"]} for s in part.shards])
        self.part, self.bad_data, self.warned = part, bad_data, set()  # warned: as ImageFiles.unreadable keeps it
        self.samples = SampleNames(self.root, part, labels, shard_of, self.starts)
        self.transform = None
        self.opened = 0  # shards this process opened (a measure of the file system's metadata load)
        self._open: OrderedDict[int, object] = OrderedDict()
        self._pid = os.getpid()

    def _shard(self, shard: int):
        if self._pid != os.getpid():  # a DataLoader worker forked with the parent's handles: its own
            self._open, self._pid = OrderedDict(), os.getpid()
        handle = self._open.get(shard)
        if handle is None:
            handle = open_regular_file(self.root / self.part.shards[shard]["name"])
            self.opened += 1
            self._open[shard] = handle
            if len(self._open) > OPEN_SHARDS:
                self._open.popitem(last=False)[1].close()
        self._open.move_to_end(shard)
        return handle

    def read(self, index: int) -> bytes:
        """The image bytes of sample ``index`` (OSError for a truncated shard, damaged members, a missing or
        wrong label)."""
        shard = int(self.samples.shard_of[index])
        offset, length = (int(v) for v in self.spans[index])
        chunk = os.pread(self._shard(shard).fileno(), length, offset)
        if len(chunk) != length:
            raise OSError(f"the shard ends {length - len(chunk)} bytes early (truncated)")
        _, data, label = sample_bytes(chunk)
        if label != self.samples.labels[index]:
            raise OSError(f"its label {label} is not the index's {self.samples.labels[index]} (another pack's shard)")
        return data

    def close(self) -> None:
        """Close the shards this process holds open."""
        for handle in self._open.values():
            handle.close()
        self._open.clear()


class CountingShards(ShardFiles, cpu.CountingImageFolder):
    """The CPU pipeline's dataset over one split of a pack: samples ``(uint8 CHW tensor, target)`` or None."""

    def __init__(self, root, name: str, transform=None, bad_data: str = "skip", index: dict | None = None):
        self._init_split(root, name, bad_data, index if index is not None else read_pack(root))
        self.transform = transform
        self.epoch = torch.zeros((), dtype=torch.int64).share_memory_()  # as CountingImageFolder's
