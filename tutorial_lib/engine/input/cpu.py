"""The CPU input pipeline (``input_pipeline: cpu``): DataLoader workers read, decode and augment each
image as uint8 tensors, and ship uint8 batches; the training process normalises them on the device.

Why uint8: a float32 batch is four times the bytes through the workers' shared memory, the pinning
and the host-to-device copy, and ``ToTensor`` + ``Normalize`` in every worker cost as much again as
the crop. Decoding: :func:`.files.decode_image` (torchvision's libjpeg-turbo decoder for ordinary
JPEGs, PIL for the rest). The transforms are torchvision's (RandomResizedCrop + flip, or resize +
center crop) on uint8 tensors, whose antialiased resize follows PIL's filter (``bench loader`` compares
the whole pipeline with torchvision's plain PIL recipe).
"""

from __future__ import annotations

import torch
from torch.utils.data import default_collate
from torchvision.transforms import v2 as transforms

from tutorial_lib.engine.input.files import (
    UNREADABLE,
    Batch,
    ImageFiles,
    Normalizer,
    decode_image,
    resize_size,
)


class CountingImageFolder(ImageFiles):
    """The CPU pipeline's dataset: samples are ``(uint8 CHW tensor, target)``, or None for an
    unreadable image (named, and counted by :func:`collate_skipping`)."""

    def __getitem__(self, index: int):
        path, target = self.samples[index]
        try:
            image = decode_image(self.read(index))
        except UNREADABLE as exc:
            return self.unreadable(path, exc)
        if self.transform is not None:
            image = self.transform(image)
        return image, target


def train_transform(image_size: int, augment: bool = True, min_crop_scale: float = 0.08,
                    hflip: bool = True):
    """ImageNet training transform of a uint8 CHW tensor (or a PIL image, made one): random resized crop
    + flip (or a resize + center crop if no augment)."""
    if augment:
        steps = [transforms.RandomResizedCrop(image_size, scale=(min_crop_scale, 1.0), antialias=True)]
        if hflip:
            steps.append(transforms.RandomHorizontalFlip())
    else:
        steps = [transforms.Resize(image_size, antialias=True), transforms.CenterCrop(image_size)]
    return transforms.Compose(steps + [transforms.PILToTensor()])


def val_transform(image_size: int):
    """ImageNet validation transform of a uint8 CHW tensor (or a PIL image, made one): resize to
    :func:`resize_size`, center crop ``image_size``."""
    return transforms.Compose([transforms.Resize(resize_size(image_size), antialias=True),
                               transforms.CenterCrop(image_size), transforms.PILToTensor()])


class HostBatch(Batch):
    """A uint8 batch as a worker delivers it; DataLoader pins it (``pin_memory``) before it is copied."""

    def pin_memory(self) -> HostBatch:
        """Page-locked copies, so the host-to-device copy is asynchronous (DataLoader calls this)."""
        return HostBatch(self.images.pin_memory(), self.targets.pin_memory(), self.skipped)


def collate_skipping(samples: list) -> HostBatch:
    """Stack (uint8 image, target) pairs, dropping the ``None`` that stands for an unreadable image
    (in a worker, straight into shared memory, as default_collate does)."""
    good = [s for s in samples if s is not None]
    skipped = len(samples) - len(good)
    if not good:
        return HostBatch(torch.empty(0, dtype=torch.uint8), torch.empty(0, dtype=torch.long), skipped)
    images, targets = zip(*good, strict=True)
    return HostBatch(default_collate(list(images)), torch.tensor(targets), skipped)


class NormalizedBatches:
    """Iterate a loader of uint8 :class:`HostBatch` es as normalised float32 :class:`Batch` es on the device."""

    def __init__(self, loader, normalize: Normalizer):
        self.loader, self.normalize = loader, normalize
        self.batch_size = loader.batch_size

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self):
        # the DataLoader's iterator now, not at the first batch: it draws its workers' seed from the RNG,
        # and a resumed run restores the RNG state right after iter() (as the first run drew it)
        return self._normalized(iter(self.loader))

    def _normalized(self, batches):
        device = self.normalize.device
        for batch in batches:
            targets = batch.targets.to(device, non_blocking=True)
            if batch.images.numel() == 0:
                yield Batch(torch.empty(0, device=device), targets, batch.skipped)
            else:
                yield Batch(self.normalize(batch.images), targets, batch.skipped)
