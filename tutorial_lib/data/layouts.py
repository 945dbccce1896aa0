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
import tarfile
from dataclasses import dataclass
from pathlib import Path

from tutorial_lib.data import PREPARE_COMMAND
from tutorial_lib.data.names import DEVKIT_TAR, TRAIN_TAR, VAL_TAR, is_image

KAGGLE_ROOT = Path("ILSVRC/Data/CLS-LOC")
KAGGLE_SOLUTION, KAGGLE_MAPPING = "LOC_val_solution.csv", "LOC_synset_mapping.txt"
GROUND_TRUTH_NAMES = (KAGGLE_SOLUTION, "val.txt", "val_labels.txt", DEVKIT_TAR)
FULL_SET = {"train": 1_281_167, "val": 50_000, "classes": 1_000}
_WNID = re.compile(r"^n\d{8}$")


class PrepareError(ValueError):
    """A source or destination folder that cannot be prepared; the message names the field and the fix."""


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
        return sorted(e.name for e in entries if e.is_dir())


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
    if labels is not None and not labels.is_file():
        raise PrepareError(f"--val-labels: {labels} is not a file. Fix: pass LOC_val_solution.csv, a val.txt "
                           f"of 'FILE LABEL' lines or {DEVKIT_TAR}.")
    if (root / TRAIN_TAR).is_file() or (root / VAL_TAR).is_file():
        missing = [name for name in (TRAIN_TAR, VAL_TAR) if not (root / name).is_file()]
        labels = labels or _existing(root / DEVKIT_TAR)
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
                           "--val-labels FILE with LOC_val_solution.csv, a val.txt of 'FILE LABEL' lines or "
                           f"{DEVKIT_TAR}.")
    return Source("flat_val", root, train, val, labels)


def _existing(path: Path) -> Path | None:
    return path if path.is_file() else None


def val_labels(path: Path, class_names: list[str]) -> dict[str, str]:
    """The validation ground truth in ``path`` as ``{image stem: wnid}``.

    ``path`` is ``LOC_val_solution.csv`` (Kaggle), the devkit archive, or a text file of
    ``FILE LABEL`` lines where LABEL is a wnid or a class index into the sorted ``class_names``
    (the common ``val.txt``).
    """
    if path.name.endswith(".tar.gz") or path.name.endswith(".tgz"):
        return _devkit_labels(path)
    if path.suffix == ".csv":
        with open(path, newline="") as handle:
            rows = list(csv.reader(handle))
        if not rows or rows[0][:2] != ["ImageId", "PredictionString"]:
            raise PrepareError(f"--val-labels: {path} is not Kaggle's {KAGGLE_SOLUTION} (its first line must be "
                               "'ImageId,PredictionString'). Fix: pass the file from the Kaggle download.")
        return {row[0]: _checked_wnid(row[1].split()[0] if row[1].split() else "", path, number)
                for number, row in enumerate(rows[1:], 2) if row}
    labels = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 2:
            raise PrepareError(f"--val-labels: line {number} of {path} is not 'FILE LABEL'. Fix: one image "
                               "name and its wnid or class index per line.")
        name, label = parts
        if label.isdigit():
            if int(label) >= len(class_names):
                raise PrepareError(f"--val-labels: line {number} of {path} names class {label}, but train/ has "
                                   f"{len(class_names)} classes. Fix: pass the ground truth of this data set.")
            label = class_names[int(label)]
        labels[Path(name).stem] = _checked_wnid(label, path, number)
    return labels


def _checked_wnid(label: str, path: Path, number: int) -> str:
    if not _WNID.match(label):
        raise PrepareError(f"--val-labels: line {number} of {path} has {label!r} where a wnid (n01440764) "
                           "belongs. Fix: pass the ground truth of this data set.")
    return label


def devkit_meta(path: Path) -> tuple[dict[int, str], list[int]]:
    """``({ILSVRC2012_ID: wnid} of the leaf synsets, the validation ground truth IDs in image order)``
    read from the devkit archive in memory.

    torchvision's ``parse_devkit_archive`` does the same, but it checks the MD5 of the real archive
    and writes ``meta.bin`` beside it (SOURCE must not change), and its parsers are inner functions;
    this follows its reading of ``meta.mat`` (scipy) and of the ground-truth text.
    """
    import scipy.io

    files = {}
    with tarfile.open(path) as tar:
        for member in tar:
            name = member.name.rsplit("/", 1)[-1]
            if member.isfile() and name in ("meta.mat", "ILSVRC2012_validation_ground_truth.txt"):
                files[name] = tar.extractfile(member).read()
    if len(files) != 2:
        raise PrepareError(f"{path} holds no data/meta.mat or data/ILSVRC2012_validation_ground_truth.txt. "
                           f"Fix: pass the original {DEVKIT_TAR}.")
    synsets = scipy.io.loadmat(io.BytesIO(files["meta.mat"]), squeeze_me=True)["synsets"]
    leaves = [s for s in synsets if int(s[4]) == 0]  # field 4: num_children; leaves are the classes
    ids = {int(s[0]): str(s[1]) for s in leaves}
    truth = [int(line) for line in files["ILSVRC2012_validation_ground_truth.txt"].decode().split()]
    return ids, truth


def _devkit_labels(path: Path) -> dict[str, str]:
    ids, truth = devkit_meta(path)
    unknown = sorted(set(truth) - set(ids))
    if unknown:
        raise PrepareError(f"{path}: the ground truth names class IDs {unknown[:5]} that meta.mat does not have. "
                           f"Fix: pass the original {DEVKIT_TAR}.")
    return {f"ILSVRC2012_val_{number:08d}": ids[label] for number, label in enumerate(truth, 1)}
