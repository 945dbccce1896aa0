"""The CPU input pipeline (``input_pipeline: cpu``): DataLoader workers read, decode and augment each
image as uint8 tensors, and ship uint8 batches; the training process normalises them on the device.

Why uint8: a float32 batch is four times the bytes through the workers' shared memory, the pinning
and the host-to-device copy, and ``ToTensor`` + ``Normalize`` in every worker cost as much again as
the crop. Decoding: :func:`.files.decode_image` (torchvision's libjpeg-turbo decoder for ordinary
JPEGs, PIL for the rest). The transforms are torchvision's (resized crop + flip, or resize + center
crop) on uint8 tensors, whose antialiased resize follows PIL's filter (``bench loader`` compares the
whole pipeline with torchvision's plain PIL recipe). The training crop's box and flip are not drawn
from a worker's RNG but from (seed, epoch, index) (:mod:`.draws`): the same whichever worker, or how
many, read an image, and the same after a resume; the epoch reaches persistent workers through a
shared-memory counter (:meth:`CountingImageFolder.set_epoch`).
"""

from __future__ import annotations

import torch
from PIL import Image
from torch.utils.data import default_collate
from torchvision.transforms import v2 as transforms
from torchvision.transforms.v2 import functional as F

from tutorial_lib.engine.input.draws import crops_and_flips
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
    unreadable image (named, and counted by :func:`collate_skipping`). The transform is called as
    ``transform(image, epoch, index)`` (:class:`RandomCropFlip`, :class:`FixedTransform`)."""

    def __init__(self, root, transform=None, bad_data: str = "skip"):
        super().__init__(root, transform, bad_data)
        # shared memory: persistent workers forked in epoch 0 read the epoch the trainer is in now
        self.epoch = torch.zeros((), dtype=torch.int64).share_memory_()

    def set_epoch(self, epoch: int) -> None:
        """The epoch whose crops the next images get (call before iterating the loader for it)."""
        self.epoch.fill_(epoch)

    def __getitem__(self, index: int):
        path, target = self.samples[index]
        try:
            image = decode_image(self.read(index))
        except UNREADABLE as exc:
            return self.unreadable(path, exc)
        if self.transform is not None:
            image = self.transform(image, int(self.epoch), index)
        return image, target


class RandomCropFlip:
    """RandomResizedCrop + horizontal flip of a uint8 CHW tensor (or a PIL image, made one) whose box
    and flip are drawn from (seed, epoch, index) (:func:`.draws.crops_and_flips`, torchvision's
    algorithm), not from the RNG of whichever process runs it."""

    def __init__(self, image_size: int, min_crop_scale: float = 0.08, hflip: bool = True, seed: int = 0):
        self.size, self.min_scale, self.hflip, self.seed = [image_size, image_size], min_crop_scale, hflip, seed

    def __call__(self, image, epoch: int = 0, index: int = 0) -> torch.Tensor:
        """The crop of ``image``, the ``index`` th image of the data set, in ``epoch``."""
        height, width = F.get_size(image)
        boxes, flips = crops_and_flips([height], [width], seed=self.seed, epoch=epoch, indices=[index],
                                       min_scale=self.min_scale, hflip=self.hflip)
        top, left, h, w = (int(v) for v in boxes[0])
        image = F.resized_crop(image, top, left, h, w, self.size, antialias=True)
        if flips[0]:
            image = F.horizontal_flip(image)
        return F.pil_to_tensor(image) if isinstance(image, Image.Image) else image


class FixedTransform:
    """A transform without random draws, called like :class:`RandomCropFlip` (epoch and index unused)."""

    def __init__(self, steps: list):
        self.steps = transforms.Compose(steps + [transforms.PILToTensor()])

    def __call__(self, image, epoch: int = 0, index: int = 0) -> torch.Tensor:
        """The transformed uint8 CHW tensor."""
        return self.steps(image)


def train_transform(image_size: int, augment: bool = True, min_crop_scale: float = 0.08,
                    hflip: bool = True, seed: int = 0):
    """ImageNet training transform of a uint8 CHW tensor (or a PIL image, made one): random resized crop
    + flip drawn from (seed, epoch, index) (or a resize + center crop if no augment)."""
    if augment:
        return RandomCropFlip(image_size, min_crop_scale, hflip, seed)
    return FixedTransform([transforms.Resize(image_size, antialias=True), transforms.CenterCrop(image_size)])


def val_transform(image_size: int):
    """ImageNet validation transform of a uint8 CHW tensor (or a PIL image, made one): resize to
    :func:`resize_size`, center crop ``image_size``."""
    return FixedTransform([transforms.Resize(resize_size(image_size), antialias=True),
                           transforms.CenterCrop(image_size)])


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
    """Iterate a loader of uint8 :class:`HostBatch` es of ``epoch`` (a :class:`CountingImageFolder`'s) as
    normalised float32 :class:`Batch` es on the device."""

    def __init__(self, loader, normalize: Normalizer, epoch: int = 0):
        self.loader, self.normalize, self.epoch = loader, normalize, epoch
        self.batch_size = loader.batch_size

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self):
        self.loader.dataset.set_epoch(self.epoch)  # before the workers are handed this epoch's indices
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
