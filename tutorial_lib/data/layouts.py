"""Which form of ImageNet a folder holds, and the validation ground truth of each form.

Forms (:attr:`Source.form`):

* ``archives``: ``ILSVRC2012_img_train.tar`` (one tar per class inside), ``ILSVRC2012_img_val.tar``
  (50,000 images, flat) and ``ILSVRC2012_devkit_t12.tar.gz`` (the validation ground truth);
* ``kaggle``: ``ILSVRC/Data/CLS-LOC/train/<wnid>/``, a flat ``ILSVRC/Data/CLS-LOC/val/``,
  ``LOC_val_solution.csv`` and ``LOC_synset_mapping.txt``;
* ``flat_val``: ``train/<wnid>/`` and a flat ``val/`` plus a ground-truth file (``LOC_val_solution.csv``,
  a ``val.txt`` of ``FILE LABEL`` lines, or the devkit archive);
* ``folders``: ``train/<class>/`` and ``val/<class>/``: nothing to convert.

The file names of the archives are torchvision's (``torchvision.datasets.imagenet.ARCHIVE_META``, copied in
:mod:`.names` so that this tool starts without importing torch).
"""

from __future__ import annotations

import csv
import io
import os
import re
from dataclasses import dataclass
from pathlib import Path

from tutorial_lib.data import PREPARE_COMMAND, PrepareError
from tutorial_lib.data.devkit import FORMS_TEXT, devkit_labels, is_devkit
from tutorial_lib.data.names import DEVKIT_DIR, DEVKIT_TAR, TRAIN_TAR, VAL_TAR, is_class_folder, is_image
from tutorial_lib.numbers import whole_number

__all__ = ["PrepareError", "Source", "detect", "is_image", "val_labels"]

KAGGLE_ROOT = Path("ILSVRC/Data/CLS-LOC")
KAGGLE_SOLUTION, KAGGLE_MAPPING = "LOC_val_solution.csv", "LOC_synset_mapping.txt"
GROUND_TRUTH_NAMES = (KAGGLE_SOLUTION, "val.txt", "val_labels.txt", DEVKIT_TAR, DEVKIT_DIR)
LABELS_TEXT = f"LOC_val_solution.csv, a val.txt of 'FILE LABEL' lines, or the devkit ({FORMS_TEXT})"
FULL_SET = {"train": 1_281_167, "val": 50_000, "classes": 1_000}
_WNID = re.compile(r"^n\d{8}$")


@dataclass(frozen=True)
class Source:
    """Where a form keeps its splits: ``train``/``val`` are folders or archives; ``labels`` the
    validation ground truth (None for ``folders``)."""

    form: str
    root: Path
    train: Path
    val: Path
    labels: Path | None = None


def _subdirs(folder: Path) -> list[str]:
    with os.scandir(folder) as entries:
        return sorted(e.name for e in entries if e.is_dir() and is_class_folder(e.name))


def _has_images(folder: Path) -> bool:
    with os.scandir(folder) as entries:
        return any(e.is_file() and is_image(e.name) for e in entries)


def detect(root: str | os.PathLike, val_labels: str | os.PathLike | None = None) -> Source:
    """The form of ImageNet under ``root`` (see the module docstring); PrepareError if none fits.
    ``val_labels`` names the ground-truth file of a flat ``val/`` when it has none of the usual names."""
    root = Path(root).expanduser().absolute()
    if not root.is_dir():
        raise PrepareError(f"SOURCE: {root} is not a folder. Fix: pass the folder that holds your ImageNet "
                           f"(the archives, the Kaggle download or train/ and val/) to {PREPARE_COMMAND}.")
    labels = Path(val_labels).expanduser().absolute() if val_labels else None
    if labels is not None and not (labels.is_file() or labels.is_dir() and is_devkit(labels)):
        raise PrepareError(f"--val-labels: {labels} is not a file. Fix: pass {LABELS_TEXT}.")
    if (root / TRAIN_TAR).is_file() or (root / VAL_TAR).is_file():
        missing = [name for name in (TRAIN_TAR, VAL_TAR) if not (root / name).is_file()]
        labels = labels or _existing(root / DEVKIT_TAR) or _existing(root / DEVKIT_DIR)
        if missing or labels is None:
            missing += [] if labels else [DEVKIT_TAR]
            raise PrepareError(f"SOURCE: {root} holds ImageNet archives but not {', '.join(missing)}. Fix: put "
                               f"{TRAIN_TAR}, {VAL_TAR} and {DEVKIT_TAR} in one folder and run {PREPARE_COMMAND}.")
        return Source("archives", root, root / TRAIN_TAR, root / VAL_TAR, labels)
    if (root / KAGGLE_ROOT / "train").is_dir():
        labels = labels or _existing(root / KAGGLE_SOLUTION)
        if labels is None or not (root / KAGGLE_ROOT / "val").is_dir():
            raise PrepareError(f"SOURCE: {root} has the Kaggle layout but no {KAGGLE_SOLUTION} or no "
                               f"{KAGGLE_ROOT}/val. Fix: unpack the whole Kaggle download into SOURCE, "
                               f"then run {PREPARE_COMMAND}.")
        return Source("kaggle", root, root / KAGGLE_ROOT / "train", root / KAGGLE_ROOT / "val", labels)
    train, val = root / "train", root / "val"
    if not (train.is_dir() and val.is_dir() and _subdirs(train)):
        raise PrepareError(f"SOURCE: {root} holds no form of ImageNet this command knows (looked for {TRAIN_TAR}, "
                           f"{KAGGLE_ROOT}/train, and train/<class>/ beside val/). Fix: pass the folder that holds "
                           f"one of them to {PREPARE_COMMAND}.")
    if _subdirs(val) and not _has_images(val):
        return Source("folders", root, train, val)
    labels = labels or next(filter(None, (_existing(root / name) for name in GROUND_TRUTH_NAMES)), None)
    if labels is None:
        raise PrepareError(f"SOURCE: {val} holds its images flat, and no ground-truth file says their classes "
                           f"(looked for {', '.join(GROUND_TRUTH_NAMES)} in {root}). Fix: run {PREPARE_COMMAND} "
                           f"--val-labels FILE with {LABELS_TEXT}.")
    return Source("flat_val", root, train, val, labels)


def _existing(path: Path) -> Path | None:
    return path if path.is_file() or path.is_dir() and is_devkit(path) else None


def val_labels(path: Path, class_names: list[str]) -> dict[str, str]:
    """The validation ground truth in ``path`` as ``{image stem: wnid}``.

    ``path`` is ``LOC_val_solution.csv`` (Kaggle), a devkit form (:mod:`.devkit`), or a text file of
    ``FILE LABEL`` lines where LABEL is a wnid or a number. A number has one meaning: the 0-based index of the
    class in the sorted wnids of train/ (``class_names``; 0 is n01440764 in ImageNet), as in the common
    ``val.txt``. Numbers that cannot mean that (negative, or not below the number of classes, as the devkit's
    1-based ILSVRC2012_IDs are) are refused; an image named twice is refused, naming both lines.
    """
    if is_devkit(path):
        return devkit_labels(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        text = "\0"
    if "\0" in text:
        raise PrepareError(f"--val-labels: {path} is not a text file. Fix: pass {LABELS_TEXT}.")
    if path.suffix == ".csv":
        return _kaggle_labels(path, text)
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 2:
            raise PrepareError(f"--val-labels: line {number} of {path} is not 'FILE LABEL'. Fix: one image "
                               "name and its wnid or class index per line.")
        rows.append((number, *parts))
    numbers = [(number, label) for number, _, label in rows if not _WNID.match(label)]
    bad = next(((n, label) for n, label in numbers if whole_number(label, below=len(class_names)) is None), None)
    if bad is not None:
        used = [n for n in (whole_number(label) for _, label in numbers) if n is not None]
        hint = (f" Its numbers run {min(used)}..{max(used)}: the devkit's 1-based ILSVRC2012_IDs are not class "
                "indices, pass the devkit itself" if used and min(used) >= 1 and max(used) == len(class_names)
                else " Pass the ground truth of this data set")
        raise PrepareError(f"--val-labels: line {bad[0]} of {path} has {bad[1]!r}; a number is the 0-based index "
                           f"of the class among the {len(class_names)} sorted class folders of train/ "
                           f"(0..{len(class_names) - 1}), or a wnid (n01440764). Fix:{hint}.")
    return _unique(path, ((number, name, class_names[int(label)] if whole_number(label) is not None else label)
                          for number, name, label in rows))


def _kaggle_labels(path: Path, text: str) -> dict[str, str]:
    rows = list(csv.reader(io.StringIO(text)))
    if not rows or rows[0][:2] != ["ImageId", "PredictionString"]:
        raise PrepareError(f"--val-labels: {path} is not Kaggle's {KAGGLE_SOLUTION} (its first line must be "
                           "'ImageId,PredictionString'). Fix: pass the file from the Kaggle download.")
    return _unique(path, ((number, row[0], (row[1].split() or [""])[0] if len(row) > 1 else "")
                          for number, row in enumerate(rows[1:], 2) if row))


def _unique(path: Path, rows) -> dict[str, str]:
    """``{image stem: wnid}`` of ``(line number, image name, wnid)`` rows; PrepareError for a bad wnid or an
    image named on two lines (both named)."""
    labels, lines = {}, {}
    for number, name, wnid in rows:
        stem = Path(name).stem
        if stem in labels:
            raise PrepareError(f"--val-labels: {path} names image {stem} twice, on lines {lines[stem]} "
                               f"({labels[stem]}) and {number} ({wnid}). Fix: keep the one correct line.")
        labels[stem], lines[stem] = _checked_wnid(wnid, path, number), number
    return labels


def _checked_wnid(label: str, path: Path, number: int) -> str:
    if not _WNID.match(label):
        raise PrepareError(f"--val-labels: line {number} of {path} has {label!r} where a wnid (n01440764) "
                           "belongs. Fix: pass the ground truth of this data set.")
    return label
