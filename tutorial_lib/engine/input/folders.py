"""Data folders on disk: the digits set exported as ImageNet-layout JPEGs, the layout check of an
ImageFolder tree, and the rule that the project only ever replaces a tree it wrote itself."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import torch
from PIL import Image

from tutorial_lib.data import PREPARE_COMMAND
from tutorial_lib.data.file_index import class_folders
from tutorial_lib.data.links import moved_source
from tutorial_lib.data.names import is_image
from tutorial_lib.engine.errors import OneLineError
from tutorial_lib.engine.memory import available_bytes, check_fits
from tutorial_lib.rundir.owned import describe, foreign_tree_files

_DIGITS_MARKER = "digits_export.json"
PREPARE_FIX = f"make it with `{PREPARE_COMMAND}` from the archives, the Kaggle download or a flat val/"


class DataError(OneLineError):
    """The data on disk is missing, in the wrong layout, or unreadable."""


def export_digits(root: str | os.PathLike, image_size: int = 32, val_fraction: float = 0.2,
                  seed: int = 0) -> Path:
    """Export scikit-learn's handwritten digits (1,797 real 8x8 scans) to an ImageFolder tree.

    Writes ``root/train/<digit>/*.jpg`` and ``root/val/<digit>/*.jpg`` as RGB JPEGs of
    ``image_size`` pixels with a fixed stratified split, so training reads real files like
    ImageNet. Idempotent: an export with the same settings is reused. Safe for concurrent callers
    (the tree is written to a temporary folder and renamed into place).
    """
    root = Path(root)
    if isinstance(image_size, bool) or not isinstance(image_size, int) or image_size < 1:
        raise DataError(f"image_size: {image_size!r:.40} is not a size in pixels. Fix: a whole number, e.g. 32.")
    check_digits_size(image_size)
    settings = {"image_size": image_size, "val_fraction": val_fraction, "seed": seed, "version": 1}
    marker = root / _DIGITS_MARKER
    if foreign_tree_files(root, _DIGITS_MARKER) is not None and json.loads(marker.read_text()) == settings:
        return root
    check_digits_target(root)
    from sklearn.datasets import load_digits  # only here: every rank of a digits job gets to the return above

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
    elif root.is_symlink() and foreign is None:  # a link is never replaced, and writing through it is not ours
        problem = f"is a symbolic link to an empty folder ({os.path.realpath(root)})"
    else:
        return
    field, _, fix = (fix or "folder: pass a new or empty folder").partition(": ")
    raise DataError(f"{field}: {root} {problem}; refusing to replace it. Fix: {fix}.")


DIGITS_TARGET_FIX = ("data_dir: with --dataset digits, pass --data-dir a new or empty folder for the export "
                     "(e.g. data/digits); to train on the images in this folder, pass --dataset imagefolder")


def check_digits_size(image_size: int) -> None:
    """Raise ConfigError (naming image_size, with the estimate) where one exported digit image cannot fit in memory:
    the grey image and its RGB copy at once (r43k: 100,000 px died in PIL with an empty MemoryError)."""
    check_fits(4 * image_size * image_size, available_bytes(), f"image_size: one digit image of {image_size} px",
               "a smaller image_size, e.g. 32 (the scans are 8x8 pixels)")


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
    moved = moved_source(root)
    if moved is not None:
        raise DataError(moved)
    for split in ("train", "val"):
        split_dir = root / split
        if not split_dir.is_dir():
            raise DataError(f"data_dir: {root} has no {split}/ folder. Fix: {PREPARE_FIX}, or arrange the "
                            f"data as {root}/train/<class>/<image>.JPEG and {root}/val/<class>/<image>.JPEG.")
        classes = class_folders(split_dir, warn=False)[0]
        if not classes:
            raise DataError(f"data_dir: {split_dir} has no class folders. Fix: {PREPARE_FIX} (it sorts a flat "
                            f"val/ by its ground truth), or put each class's images in {split_dir}/<class>/.")
        if not any(_holds_an_image(split_dir / name) for name in classes):  # r43m: a loader's order never filled
            raise DataError(f"data_dir: the {len(classes)} class folder(s) of {split_dir} hold no image. Fix: "
                            f"{PREPARE_FIX}, or put each class's images in {split_dir}/<class>/.")
    return root


def check_same_classes(root: Path, train: list[str], val: list[str]) -> None:
    """Refuse (DataError naming data_dir) splits whose class folders differ: labels are folder positions, so they
    would silently disagree."""
    if train != val:
        only_train = sorted(set(train) - set(val))
        only_val = sorted(set(val) - set(train))
        raise DataError(f"data_dir: {root}/train and {root}/val have different class folders (only in train: "
                        f"{only_train[:5] or 'none'}; only in val: {only_val[:5] or 'none'}), so their labels would "
                        "not match. Fix: give both splits the same class folders (a folder may be empty; "
                        f"`{PREPARE_COMMAND}` does).")


def _holds_an_image(folder: Path) -> bool:
    """Whether ``folder`` holds an image file directly (the scan stops at the first one)."""
    try:
        with os.scandir(folder) as entries:
            return any(is_image(entry.name) for entry in entries if not entry.is_dir())
    except OSError:  # unreadable: the loader names it when it gets there
        return True


def prepare_dataset(cfg) -> None:
    """Make the data of ``cfg.dataset`` ready on disk: export the digits set (idempotent).

    An ImageFolder tree is checked once per start, by ``validate`` (config.py) before anything is
    written; the loaders do not check it again."""
    if cfg.dataset == "digits":
        export_digits(cfg.data_dir, image_size=cfg.image_size)

