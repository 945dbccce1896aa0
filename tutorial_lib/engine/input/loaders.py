"""The trainer's loaders: :func:`loaders_for` picks the input pipeline ``cfg.input_pipeline`` asks for.

Both pipelines read class folders or packed shards (``data_format``, :mod:`.shards`) and share the samplers,
the DataLoader settings (persistent workers: forked once per run, not once per epoch) and the :class:`Loaders`
interface; each adds its own step that turns the
workers' batches into normalised float32 batches on the training device. The GPU pipeline's module
is imported only when it is asked for.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils.data import DataLoader, DistributedSampler

from tutorial_lib.engine.input import cpu, shards
from tutorial_lib.engine.input.files import Batch, Normalizer, resize_size
from tutorial_lib.engine.input.folders import DataError, check_same_classes
from tutorial_lib.engine.input.samplers import ShardSampler, SkipFirst


class SyntheticLoader:
    """Random batches made once on the device: measures the model, not the input pipeline."""

    def __init__(self, batch_size: int, image_size: int, num_classes: int, steps: int,
                 device: torch.device, seed: int = 0, channels_last: bool = False):
        generator = torch.Generator().manual_seed(seed)
        images = torch.randn(batch_size, 3, image_size, image_size, generator=generator)
        if channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        self.batch = Batch(images.to(device), torch.randint(0, num_classes, (batch_size,),
                                                            generator=generator).to(device))
        self.steps = steps
        self.sampler = None

    def __iter__(self):
        for _ in range(self.steps):
            yield self.batch

    def __len__(self) -> int:
        return self.steps


@dataclass
class Loaders:
    """What the trainer needs from the data layer. ``train`` is the workers' DataLoader (its length is
    the epoch's batches); ``val`` and :meth:`train_epoch` give device batches."""

    train: object
    val: object
    train_sampler: DistributedSampler | None
    num_classes: int
    train_images: int
    val_images: int
    on_device: Callable | None = None  # (loader, epoch) -> iterable of device Batches

    def train_epoch(self, epoch: int, skip_batches: int = 0):
        """The training batches of ``epoch`` (reshuffled), starting after ``skip_batches`` batches."""
        if self.train_sampler is None:
            return self.train
        self.train_sampler.set_epoch(epoch)
        loader = self.train
        if skip_batches:  # a one-off loader for the rest of a resumed epoch
            skip = SkipFirst(self.train_sampler, skip_batches * loader.batch_size)
            loader = DataLoader(loader.dataset, batch_size=loader.batch_size, sampler=skip,
                                num_workers=loader.num_workers, collate_fn=loader.collate_fn,
                                pin_memory=loader.pin_memory, drop_last=True)
        return self.on_device(loader, epoch)


def _check_batch(cfg, images: int, world_size: int, where: str) -> None:
    if images < cfg.batch_size * world_size:
        raise DataError(f"batch_size: the global batch {cfg.batch_size * world_size} is larger than the "
                        f"{images} training images in {where}. Fix: lower --batch-size.")


def folder_loaders(cfg, train_set, val_set, collate_fn, rank: int, world_size: int,
                   device: torch.device) -> tuple[DataLoader, DataLoader, DistributedSampler]:
    """Check two ImageFolder splits agree, then shard them: DistributedSampler (train), ShardSampler (val).
    A pack of shards (``data_format: shards``): its own order (:class:`.shards.ShardOrder`), the same counts."""
    root = Path(cfg.data_dir)
    check_same_classes(root, train_set.classes, val_set.classes)
    if cfg.data_format == "shards":
        _check_batch(cfg, len(train_set), world_size, f"the shards of {root}")
        sampler = shards.ShardOrder(train_set.part.counts, rank, world_size, seed=cfg.seed)
    else:
        _check_batch(cfg, len(train_set), world_size, f"{root}/train")
        sampler = DistributedSampler(train_set, num_replicas=world_size, rank=rank, shuffle=True,
                                     seed=cfg.seed, drop_last=True)
    common = dict(num_workers=cfg.workers, collate_fn=collate_fn, pin_memory=device.type == "cuda")
    if cfg.workers > 0:
        common.update(prefetch_factor=cfg.prefetch, persistent_workers=True)
    train = DataLoader(train_set, batch_size=cfg.batch_size, sampler=sampler, drop_last=True, **common)
    val = DataLoader(val_set, batch_size=cfg.batch_size, sampler=ShardSampler(len(val_set), rank, world_size),
                     **common)
    return train, val, sampler


def _loaders(cfg, train_set, val_set, collate_fn, rank, world_size, device, on_device) -> Loaders:
    train, val, sampler = folder_loaders(cfg, train_set, val_set, collate_fn, rank, world_size, device)
    return Loaders(train, on_device(val, 0), sampler, cfg.num_classes or len(train_set.classes), len(train_set),
                   len(val_set), on_device)


def build_cpu_loaders(cfg, rank: int, world_size: int, device: torch.device) -> Loaders:
    """The CPU pipeline's loaders for ``cfg.data_dir`` (ImageFolder layout), sharded for this rank."""
    root = Path(cfg.data_dir)
    train_transform = cpu.train_transform(cfg.image_size, cfg.train_augment, cfg.min_crop_scale, cfg.hflip, cfg.seed)
    if cfg.data_format == "shards":
        index = shards.read_pack(root)
        train_set = shards.CountingShards(root, "train", train_transform, cfg.bad_data, index)
        val_set = shards.CountingShards(root, "val", cpu.val_transform(cfg.image_size), cfg.bad_data, index)
    else:
        train_set = cpu.CountingImageFolder(root / "train", train_transform, cfg.bad_data)
        val_set = cpu.CountingImageFolder(root / "val", cpu.val_transform(cfg.image_size), cfg.bad_data)
    normalize = Normalizer(device, cfg.channels_last)
    return _loaders(cfg, train_set, val_set, cpu.collate_skipping, rank, world_size, device,
                    lambda loader, epoch: cpu.NormalizedBatches(loader, normalize, epoch))


def build_gpu_loaders(cfg, rank: int, world_size: int, device: torch.device) -> Loaders:
    """The GPU pipeline's loaders for ``cfg.data_dir``, sharded for this rank; ``cfg.prefetch`` batches
    are decoded ahead on CUDA."""
    from tutorial_lib.engine.input import gpu

    root = Path(cfg.data_dir)
    if cfg.data_format == "shards":
        index = shards.read_pack(root)
        train_set = gpu.EncodedShards(root, "train", cfg.bad_data, index)
        val_set = gpu.EncodedShards(root, "val", cfg.bad_data, index)
    else:
        train_set = gpu.EncodedImageFolder(root / "train", bad_data=cfg.bad_data)
        val_set = gpu.EncodedImageFolder(root / "val", bad_data=cfg.bad_data)
    common = dict(device=device, image_size=cfg.image_size, channels_last=cfg.channels_last)
    train = gpu.DeviceTransform(train_set, train=cfg.train_augment, resize_to=cfg.image_size,
                                min_crop_scale=cfg.min_crop_scale, hflip=cfg.hflip, seed=cfg.seed, **common)
    val = gpu.DeviceTransform(val_set, train=False, resize_to=resize_size(cfg.image_size), **common)
    return _loaders(cfg, train_set, val_set, gpu.collate_encoded, rank, world_size, device,
                    lambda loader, epoch: gpu.DeviceBatches(loader, val if loader.dataset is val_set else train,
                                                            epoch, cfg.prefetch))


def loaders_for(cfg, rank: int, world_size: int, device: torch.device) -> Loaders:
    """The loaders ``cfg.input_pipeline`` asks for, sharded for this rank (the synthetic data set has
    no input pipeline). The ImageFolder tree was checked by ``validate``; digits must be exported first
    (:func:`tutorial_lib.engine.input.folders.prepare_dataset`)."""
    if cfg.dataset == "synthetic":
        num_classes = cfg.num_classes or 1000
        steps = max(1, cfg.synthetic_images // (cfg.batch_size * world_size))
        make = lambda seed: SyntheticLoader(cfg.batch_size, cfg.image_size, num_classes, steps,  # noqa: E731
                                            device, seed, cfg.channels_last)
        images = steps * cfg.batch_size * world_size
        return Loaders(make(cfg.seed + rank), make(cfg.seed + 10_000 + rank), None, num_classes, images, images)
    if cfg.input_pipeline == "gpu":
        return build_gpu_loaders(cfg, rank, world_size, device)
    return build_cpu_loaders(cfg, rank, world_size, device)
