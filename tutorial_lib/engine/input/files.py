"""The file list both input pipelines read, and the rules they share, each written once here.

* Which files: an ImageFolder tree (``<split>/<class>/<image>``); empty class folders keep their
  label, so one emptied folder does not renumber the others.
* Unreadable images: a file that is not a regular file (a FIFO would block forever), that PIL
  cannot open or decode, or whose header declares more pixels than PIL's ``Image.MAX_IMAGE_PIXELS``
  (a decompression bomb: refused before decoding, from the header alone), is skipped and named on
  stderr (``bad_data: skip``) or stops the run with a DataError naming the file (``bad_data: error``).
* Orientation: the EXIF orientation tag is ignored in both pipelines (pixels as stored, as
  torchvision's ImageFolder and nvJPEG do), so both agree on every image's shape.
* The validation resize: short side to ``ceil(image_size * 256 / 224)``, then the center crop.
* Normalisation: batches travel as uint8 and are normalised on the training device
  (:class:`Normalizer`), with ImageNet's mean and standard deviation.
"""

from __future__ import annotations

import io
import math
import os
import stat
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError
from torchvision import datasets
from torchvision.io import ImageReadMode, decode_jpeg

from tutorial_lib.data import file_index
from tutorial_lib.data.names import is_image
from tutorial_lib.engine.input.folders import DataError
from tutorial_lib.engine.input.jpeg import is_complete_jpeg, read_header

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
# torchvision 0.29 deprecates its image I/O for TorchCodec: said once here, not per image
warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torchvision\.io")
UNREADABLE = (OSError, ValueError, Image.DecompressionBombError)  # what reading a bad image raises
WARNED_IMAGES = 20  # unreadable images named in a warning, at most, per data set and process (the rest: counted)


def resize_size(image_size: int) -> int:
    """The short side an image is resized to before the center crop of ``image_size`` (validation)."""
    return math.ceil(image_size * 256 / 224)


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


def check_pixel_limit(width: int, height: int) -> None:
    """Raise DecompressionBombError (PIL's own wording) when an image declares more pixels than
    ``Image.MAX_IMAGE_PIXELS`` (read at call time; None: no limit). PIL itself only warns up to twice
    the limit; both pipelines refuse at the limit, from the header, before decoding anything."""
    limit = Image.MAX_IMAGE_PIXELS
    if limit is not None and width * height > limit:
        raise Image.DecompressionBombError(f"Image size ({width * height} pixels) exceeds limit of {limit} "
                                           "pixels, could be decompression bomb DOS attack.")


def decode_image(data: bytes) -> torch.Tensor:
    """Decode an image file's bytes to a uint8 RGB CHW tensor, as both pipelines' workers do.

    A complete JPEG of a form libjpeg-turbo decodes straight to RGB (1 or 3 components, 8-bit, Huffman:
    :attr:`JpegHeader.device_decodable`) is decoded by torchvision's ``decode_jpeg`` (measured faster
    than PIL's decoder here: ``bench loader``); anything else (CMYK/YCCK, PNG named .JPEG, a truncated
    JPEG) by PIL, whose refusals name the problem. The pixel limit is checked first, from the header."""
    header = read_header(data) if is_complete_jpeg(data) else None
    if header is not None:
        check_pixel_limit(header.width, header.height)
        if header.device_decodable:
            try:
                return decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8), mode=ImageReadMode.RGB)
            except RuntimeError:
                pass  # PIL decides, and names what is wrong
    return torch.from_numpy(np.asarray(decode_rgb(data)).transpose(2, 0, 1).copy())


def decode_rgb(data: bytes) -> Image.Image:
    """Decode an image file's bytes with PIL to RGB, refusing it first if its header is over the pixel limit."""
    if not data:
        raise OSError("empty file (0 bytes)")
    try:
        image = Image.open(io.BytesIO(data))
    except UnidentifiedImageError:  # PIL's message names an in-memory buffer, not the file
        raise UnidentifiedImageError("cannot identify image file (not an image format PIL reads)") from None
    check_pixel_limit(*image.size)
    return image.convert("RGB")


class ImageFiles(datasets.ImageFolder):
    """ImageFolder that names the file when an image cannot be read, and can skip it.

    With ``bad_data="skip"`` an unreadable image yields ``None`` (dropped and counted by the collate
    function); with ``"error"`` loading stops with a DataError naming the file. Empty class folders
    are allowed. Subclasses (one per pipeline) say what a sample is.
    """

    def __init__(self, root: str | os.PathLike, transform=None, bad_data: str = "skip"):
        super().__init__(str(root), transform=transform, is_valid_file=is_image, allow_empty=True)
        self.bad_data = bad_data
        self.warned: set[str] = set()  # the unreadable images named so far (:meth:`unreadable`)

    def find_classes(self, directory: str) -> tuple[list[str], dict[str, int]]:
        """The class folders from the job's file index (:mod:`tutorial_lib.data.file_index`), else a scan."""
        known = file_index.classes(directory)
        if known is None:
            known = file_index.class_folders(directory)[0]
        return known, {name: label for label, name in enumerate(known)}

    @staticmethod
    def make_dataset(directory, class_to_idx, extensions=None, is_valid_file=None, allow_empty=False):
        """The (path, label) list from the job's file index, else from the same walk of the folders
        (:func:`tutorial_lib.data.file_index.scan`: the project's rules of images and class folders)."""
        listed = file_index.samples(directory, class_to_idx)
        if listed is None:
            listed = file_index.samples_of(directory, file_index.scan(directory, classes=list(class_to_idx)),
                                           class_to_idx)
        if listed is None:  # classes given by the caller that are not the folders': torchvision's own walk
            return datasets.DatasetFolder.make_dataset(directory, class_to_idx, extensions, is_valid_file,
                                                       allow_empty)
        return listed

    def read(self, index: int) -> bytes:
        """The bytes of image ``index`` (OSError for anything but a regular file)."""
        with open_regular_file(self.samples[index][0]) as handle:
            return handle.read()

    def unreadable(self, path: str, exc: Exception) -> None:
        """Name an unreadable image: raise DataError (``bad_data="error"``) or warn and return None."""
        if self.bad_data == "error":
            raise DataError(f"cannot read image {path}: {exc}. Fix: replace or delete the file, "
                            "or pass --bad-data skip to skip and count unreadable images.") from exc
        # once per file and at most WARNED_IMAGES per data set and process (each skip is still counted in its
        # batch): every epoch warned again, 1,300 lines from 9 bad files in a few seconds of `bench loader` (r43p's set)
        if path not in self.warned and len(self.warned) <= WARNED_IMAGES:
            self.warned.add(path)
            more = ("; further unreadable images are skipped and counted without a warning"
                    if len(self.warned) > WARNED_IMAGES else "")
            print(f"warning: skipping unreadable image {path}: {exc}{more}", file=sys.stderr, flush=True)
        return None


@dataclass
class Batch:
    """A training or validation batch plus how many images were skipped as unreadable."""

    images: torch.Tensor
    targets: torch.Tensor
    skipped: int = 0


def without_a_lone_image(batch: Batch) -> Batch:
    """``batch``, or an empty one counting its image as skipped when unreadable images left it with one: a model
    with BatchNorm cannot train on a single image (its statistics need two), so that image is skipped and said."""
    if len(batch.targets) != 1:
        return batch
    print("warning: skipping the one readable image of a batch whose other images were unreadable (BatchNorm "
          "cannot train on one image); counted as skipped", file=sys.stderr, flush=True)
    return Batch(batch.images[:0], batch.targets[:0], batch.skipped + 1)


class Normalizer:
    """uint8 (or 0-255 float) NCHW batches to float32 ``(x/255 - mean) / std`` on ``device``;
    the constants are made once, on the device."""

    def __init__(self, device: torch.device, channels_last: bool = False):
        mean, std = torch.tensor(IMAGENET_MEAN), torch.tensor(IMAGENET_STD)
        self.shift = (-mean / std).view(1, 3, 1, 1).to(device)
        self.scale = (1 / (255 * std)).view(1, 3, 1, 1).to(device)
        self.device, self.channels_last = device, channels_last

    def __call__(self, pixels: torch.Tensor) -> torch.Tensor:
        """The normalised float32 images (on the device; NHWC when ``channels_last``)."""
        pixels = pixels.to(self.device, non_blocking=True)
        if self.channels_last:
            pixels = pixels.contiguous(memory_format=torch.channels_last)
        return torch.addcmul(self.shift, pixels.float(), self.scale)


READABLE_TRIES = 64  # image files read, at most, to find a readable one (a real ImageNet: its first one)


def check_readable(root: Path, split: str, tries: int = READABLE_TRIES, flag: str = "data_dir",
                   fix: str = "or pass --data-dir a folder of readable images") -> Path:
    """``root``, or DataError naming ``flag`` when no image of ``root/split`` that was tried could be read (r43n:
    a split of 0-byte JPEGs ended the benchmarks in tracebacks; r43p: the trainer wrote its run directory and
    refused only at epoch 1). Files are read and decoded as the pipelines do
    (:func:`decode_image`) until the first one that reads: a few from each class
    folder, the folders in a seeded random order, at most ``tries`` in all, so a real set costs one read and a set
    with some unreadable images (skipped and counted) passes. ``fix``: what else to do, after fixing the files."""
    folder = root / split
    classes = file_index.class_folders(folder, warn=False)[0]
    order = torch.randperm(len(classes), generator=torch.Generator().manual_seed(0)).tolist()
    per_class = max(1, -(-tries // max(1, len(classes))))
    tried, first = 0, None
    for index in order:
        try:
            with os.scandir(folder / classes[index]) as entries:
                names = sorted(e.name for e in entries if is_image(e.name) and not e.is_dir())[:per_class]
        except OSError:
            continue
        for name in names[:tries - tried]:
            tried += 1
            try:
                with open_regular_file(folder / classes[index] / name) as handle:
                    decode_image(handle.read())
                return root
            except UNREADABLE as exc:
                first = first or f"{folder / classes[index] / name}: {exc}"
        if tried >= tries:
            break
    if tried == 0:  # no image file could be listed: check_imagefolder found one, so the folders are unreadable
        return root
    raise DataError(f"{flag}: none of the {tried} image file(s) tried in {folder} could be read (first: "
                    f"{first}), so there is nothing to train on or measure. Fix: check the files under {folder} "
                    f"(replace or delete the unreadable ones), {fix}.")
