"""Datasets and loaders: the digits set exported to ImageFolder, ImageNet-layout folders, synthetic.

Training batches are sharded with torch's DistributedSampler (shuffled per epoch via set_epoch).
Validation uses :class:`ShardSampler`, which gives each image to exactly one rank, because
DistributedSampler pads the last shard with duplicates and would count some images twice.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import stat
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from PIL import Image
from torch.utils.data import DataLoader, DistributedSampler, Sampler
from torchvision import datasets, transforms

from tutorial_lib.data import PREPARE_COMMAND, file_index
from tutorial_lib.rundir.owned import describe, foreign_tree_files

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
_IMAGE_SUFFIXES = datasets.folder.IMG_EXTENSIONS
_DIGITS_MARKER = "digits_export.json"
PREPARE_FIX = f"make it with `{PREPARE_COMMAND}` from the archives, the Kaggle download or a flat val/"


class DataError(ValueError):
    """The data on disk is missing, in the wrong layout, or unreadable."""


def export_digits(root: str | os.PathLike, image_size: int = 32, val_fraction: float = 0.2,
                  seed: int = 0) -> Path:
    """Export scikit-learn's handwritten digits (1,797 real 8x8 scans) to an ImageFolder tree.

    Writes ``root/train/<digit>/*.jpg`` and ``root/val/<digit>/*.jpg`` as RGB JPEGs of
    ``image_size`` pixels with a fixed stratified split, so training reads real files like
    ImageNet. Idempotent: an export with the same settings is reused. Safe for concurrent callers
    (the tree is written to a temporary folder and renamed into place).
    """
    from sklearn.datasets import load_digits

    root = Path(root)
    settings = {"image_size": image_size, "val_fraction": val_fraction, "seed": seed, "version": 1}
    marker = root / _DIGITS_MARKER
    if foreign_tree_files(root, _DIGITS_MARKER) is not None and json.loads(marker.read_text()) == settings:
        return root
    check_digits_target(root)
    digits = load_digits()
    generator = torch.Generator().manual_seed(seed)
    root.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".digits-", dir=root.parent))
    for label in range(10):
        indices = [i for i, t in enumerate(digits.target) if t == label]
        order = torch.randperm(len(indices), generator=generator).tolist()
        n_val = round(len(indices) * val_fraction)
        for rank, pos in enumerate(order):
            index = indices[pos]
            split = "val" if rank < n_val else "train"
            folder = staging / split / str(label)
            folder.mkdir(parents=True, exist_ok=True)
            pixels = (digits.images[index] * (255.0 / 16.0)).clip(0, 255).astype("uint8")
            image = Image.fromarray(pixels, mode="L").resize((image_size, image_size), Image.BICUBIC)
            image.convert("RGB").save(folder / f"{index:04d}.jpg", quality=95)
    (staging / _DIGITS_MARKER).write_text(json.dumps(settings))
    return publish_tree(staging, root, _DIGITS_MARKER, DIGITS_TARGET_FIX)


def check_replaceable(root: Path, marker: str, fix: str = "") -> None:
    """Raise DataError unless ``root`` is absent, an empty folder, or a tree this project wrote (its ``marker``
    holds the generator's settings and every other file is one of its images): the project never replaces
    anything it did not create. ``fix`` starts with the field name."""
    root = Path(root)
    foreign = foreign_tree_files(root, marker) if root.is_dir() else None
    if root.is_symlink() and not root.exists() or root.exists() and not root.is_dir():
        problem = "is not a folder"
    elif root.is_dir() and foreign is None and any(root.iterdir()):
        problem = f"already holds files that this project did not write (no {marker} of ours in it)"
    elif foreign:
        problem = f"holds files that this project did not write beside its own ({describe(foreign)})"
    else:
        return
    field, _, fix = (fix or "folder: pass a new or empty folder").partition(": ")
    raise DataError(f"{field}: {root} {problem}; refusing to replace it. Fix: {fix}.")


DIGITS_TARGET_FIX = ("data_dir: with --dataset digits, pass --data-dir a new or empty folder for the export "
                     "(e.g. data/digits); to train on the images in this folder, pass --dataset imagefolder")


def check_digits_target(data_dir: str | os.PathLike) -> None:
    """Raise DataError unless the digits export may be written to ``data_dir`` (see check_replaceable)."""
    check_replaceable(Path(data_dir), _DIGITS_MARKER, DIGITS_TARGET_FIX)


def publish_tree(staging: Path, root: Path, marker: str, fix: str = "") -> Path:
    """Move a finished ``staging`` folder to ``root``, replacing an older tree that holds ``marker`` (an
    earlier export of ours) or an empty folder, never anything else; readers never see half a tree.
    If another process published an identical tree first, keep theirs."""
    try:
        check_replaceable(root, marker, fix)
    except DataError:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if root.is_dir() and foreign_tree_files(root, marker) is None:
        try:
            root.rmdir()  # empty: rmdir refuses if anything appeared in it meanwhile
        except OSError:
            pass
    elif root.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{root.name}-old-", dir=root.parent))
        os.replace(root, old / "tree")
        shutil.rmtree(old, ignore_errors=True)
    try:
        os.replace(staging, root)
    except OSError:  # another process won the race with an identical tree (or the folder filled up)
        shutil.rmtree(staging, ignore_errors=True)
    return root


def check_imagefolder(data_dir: str | os.PathLike) -> Path:
    """Check ``data_dir`` has ImageNet layout (train/ and val/, one folder per class); raise DataError."""
    root = Path(data_dir)
    if not root.is_dir():
        raise DataError(f"data_dir: {root} does not exist. Fix: pass --data-dir with the folder that holds "
                        f"train/ and val/ (ImageNet layout; {PREPARE_FIX}), or use --dataset digits or synthetic.")
    for split in ("train", "val"):
        split_dir = root / split
        if not split_dir.is_dir():
            raise DataError(f"data_dir: {root} has no {split}/ folder. Fix: {PREPARE_FIX}, or arrange the "
                            f"data as {root}/train/<class>/<image>.JPEG and {root}/val/<class>/<image>.JPEG.")
        classes = [d for d in split_dir.iterdir() if d.is_dir()]
        if not classes:
            raise DataError(f"data_dir: {split_dir} has no class folders. Fix: {PREPARE_FIX} (it sorts a flat "
                            f"val/ by its ground truth), or put each class's images in {split_dir}/<class>/.")
    return root


def open_regular_file(path: str | os.PathLike):
    """Open ``path`` for reading, refusing (OSError) anything but a regular file: a FIFO or a device
    named like an image would block open() or read() forever. One open (non-blocking, so a FIFO does
    not wait for a writer) and an fstat of the open file: no second lookup of the path."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError("not a regular file (a FIFO, device or socket)")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


class CountingImageFolder(datasets.ImageFolder):
    """ImageFolder that names the file when an image cannot be read, and can skip it.

    With ``bad_data="skip"`` an unreadable image yields ``None`` (dropped by :func:`collate_skipping`
    and counted); with ``"error"`` loading stops with a DataError naming the file. Empty class
    folders are allowed (they keep their class index) so one bad folder does not renumber labels.
    """

    def __init__(self, root: str | os.PathLike, transform=None, bad_data: str = "skip"):
        super().__init__(str(root), transform=transform, allow_empty=True)
        self.bad_data = bad_data

    def find_classes(self, directory: str) -> tuple[list[str], dict[str, int]]:
        """The class folders from the job's file index (:mod:`tutorial_lib.data.file_index`), else a scan."""
        known = file_index.classes(directory)
        if known is None:
            return super().find_classes(directory)
        return known, {name: label for label, name in enumerate(known)}

    @staticmethod
    def make_dataset(directory, class_to_idx, extensions=None, is_valid_file=None, allow_empty=False):
        """The (path, label) list from the job's file index, else torchvision's walk of the folders."""
        listed = file_index.samples(directory, class_to_idx)
        if listed is not None:
            return listed
        return datasets.DatasetFolder.make_dataset(directory, class_to_idx, extensions, is_valid_file, allow_empty)

    def __getitem__(self, index: int):
        path, target = self.samples[index]
        try:
            with open_regular_file(path) as handle:
                image = Image.open(handle)
                image = image.convert("RGB")
        except (OSError, ValueError, Image.DecompressionBombError) as exc:
            return self.unreadable(path, exc)
        if self.transform is not None:
            image = self.transform(image)
        return image, target

    def unreadable(self, path: str, exc: Exception) -> None:
        """Name an unreadable image: raise DataError (``bad_data="error"``) or warn and return None."""
        if self.bad_data == "error":
            raise DataError(f"cannot read image {path}: {exc}. Fix: replace or delete the file, "
                            "or pass --bad-data skip to skip and count unreadable images.") from exc
        print(f"warning: skipping unreadable image {path}: {exc}", file=sys.stderr, flush=True)
        return None


@dataclass
class Batch:
    """A training or validation batch plus how many images were skipped as unreadable."""

    images: torch.Tensor
    targets: torch.Tensor
    skipped: int = 0


def collate_skipping(samples: list) -> Batch:
    """Stack (image, target) pairs, dropping the ``None`` that stands for an unreadable image."""
    good = [s for s in samples if s is not None]
    skipped = len(samples) - len(good)
    if not good:
        return Batch(torch.empty(0), torch.empty(0, dtype=torch.long), skipped)
    images, targets = zip(*good, strict=True)
    return Batch(torch.stack(images), torch.tensor(targets), skipped)


class ShardSampler(Sampler[int]):
    """Indices ``rank, rank + world, ...`` of a dataset, in order, without padding.

    Written by hand because DistributedSampler always pads shards to equal length (duplicating
    images), which would make distributed top-1 count some validation images twice.
    """

    def __init__(self, length: int, rank: int, world_size: int):
        self.indices = list(range(rank, length, world_size))

    def __iter__(self):
        return iter(self.indices)

    def __len__(self) -> int:
        return len(self.indices)


class SkipFirst(Sampler[int]):
    """Wrap a sampler and drop its first ``skip`` indices (resume in the middle of an epoch)."""

    def __init__(self, sampler: Sampler, skip: int = 0):
        self.sampler, self.skip = sampler, skip

    def __iter__(self):
        for position, index in enumerate(self.sampler):
            if position >= self.skip:
                yield index

    def __len__(self) -> int:
        return max(0, len(self.sampler) - self.skip)

    def set_epoch(self, epoch: int) -> None:
        """Forward to the wrapped DistributedSampler."""
        self.sampler.set_epoch(epoch)


def train_transform(image_size: int, augment: bool = True, min_crop_scale: float = 0.08,
                    hflip: bool = True):
    """ImageNet training transform: random resized crop + flip (or a plain resize if no augment)."""
    if augment:
        steps = [transforms.RandomResizedCrop(image_size, scale=(min_crop_scale, 1.0), antialias=True)]
        if hflip:
            steps.append(transforms.RandomHorizontalFlip())
    else:
        steps = [transforms.Resize(image_size, antialias=True), transforms.CenterCrop(image_size)]
    return transforms.Compose(steps + [transforms.ToTensor(), transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD)])


def val_transform(image_size: int):
    """ImageNet validation transform: resize to size*256/224, center crop ``image_size``."""
    return transforms.Compose([
        transforms.Resize(math.ceil(image_size * 256 / 224), antialias=True),
        transforms.CenterCrop(image_size),
        transforms.ToTensor(),
        transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD),
    ])


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
    """What the trainer needs from the data layer."""

    train: object
    val: object
    train_sampler: DistributedSampler | None
    num_classes: int
    train_images: int
    val_images: int

    def train_epoch(self, epoch: int, skip_batches: int = 0):
        """The training loader for ``epoch`` (reshuffled), starting after ``skip_batches`` batches."""
        if self.train_sampler is None:
            return self.train
        self.train_sampler.set_epoch(epoch)
        if skip_batches == 0:
            return self.train
        skip = SkipFirst(self.train_sampler, skip_batches * self.train.batch_size)
        return DataLoader(self.train.dataset, batch_size=self.train.batch_size, sampler=skip,
                          num_workers=self.train.num_workers, collate_fn=self.train.collate_fn,
                          pin_memory=self.train.pin_memory, drop_last=True)


def prepare_dataset(cfg) -> None:
    """Make the data of ``cfg.dataset`` ready on disk (exports digits; checks an ImageFolder tree)."""
    if cfg.dataset == "digits":
        export_digits(cfg.data_dir, image_size=cfg.image_size)
    elif cfg.dataset == "imagefolder":
        check_imagefolder(cfg.data_dir)


def build_loaders(cfg, rank: int, world_size: int, device: torch.device) -> Loaders:
    """Loaders for ``cfg.dataset`` sharded for this rank (call :func:`prepare_dataset` first)."""
    if cfg.dataset == "synthetic":
        num_classes = cfg.num_classes or 1000
        steps = max(1, cfg.synthetic_images // (cfg.batch_size * world_size))
        make = lambda seed: SyntheticLoader(cfg.batch_size, cfg.image_size, num_classes, steps,  # noqa: E731
                                            device, seed, cfg.channels_last)
        return Loaders(make(cfg.seed + rank), make(cfg.seed + 10_000 + rank), None, num_classes,
                       steps * cfg.batch_size * world_size, steps * cfg.batch_size * world_size)
    root = check_imagefolder(cfg.data_dir)
    train_set = CountingImageFolder(root / "train", train_transform(cfg.image_size, cfg.train_augment,
                                                                 cfg.min_crop_scale, cfg.hflip),
                                    cfg.bad_data)
    val_set = CountingImageFolder(root / "val", val_transform(cfg.image_size), cfg.bad_data)
    return folder_loaders(cfg, root, train_set, val_set, collate_skipping, rank, world_size, device)


def folder_loaders(cfg, root: Path, train_set, val_set, collate_fn, rank: int, world_size: int,
                   device: torch.device) -> Loaders:
    """Check two ImageFolder splits agree, then shard them: DistributedSampler (train), ShardSampler (val)."""
    if train_set.classes != val_set.classes:  # labels are folder positions: they would silently disagree
        only_train = sorted(set(train_set.classes) - set(val_set.classes))
        only_val = sorted(set(val_set.classes) - set(train_set.classes))
        raise DataError(f"data_dir: {root}/train and {root}/val have different class folders (only in train: "
                        f"{only_train[:5] or 'none'}; only in val: {only_val[:5] or 'none'}), so their labels would "
                        "not match. Fix: give both splits the same class folders (a folder may be empty; "
                        f"`{PREPARE_COMMAND}` does).")
    if len(train_set) < cfg.batch_size * world_size:
        raise DataError(f"batch_size: the global batch {cfg.batch_size * world_size} is larger than the "
                        f"{len(train_set)} training images in {root}/train. Fix: lower --batch-size.")
    sampler = DistributedSampler(train_set, num_replicas=world_size, rank=rank, shuffle=True,
                                 seed=cfg.seed, drop_last=True)
    common = dict(num_workers=cfg.workers, collate_fn=collate_fn, pin_memory=device.type == "cuda",
                  persistent_workers=False)
    if cfg.workers > 0:
        common["prefetch_factor"] = 4
    train = DataLoader(train_set, batch_size=cfg.batch_size, sampler=sampler, drop_last=True, **common)
    val = DataLoader(val_set, batch_size=cfg.batch_size, sampler=ShardSampler(len(val_set), rank, world_size),
                     **common)
    num_classes = cfg.num_classes or len(train_set.classes)
    return Loaders(train, val, sampler, num_classes, len(train_set), len(val_set))
