"""Fake ImageNet in each form people download it in, so tests prepare and train from every form.

:func:`make_fake_source` writes one form (``archives``, ``kaggle``, ``flat_val``, ``folders``; see
:mod:`tutorial_lib.data.layouts`) with ImageNet's real wnids and file names (``n01440764_10026.JPEG``,
``ILSVRC2012_val_00000001.JPEG``) and returns the truth: which images belong to which class. The
same settings give the same images in every form, so prepared forms can be compared file by file.
"""

from __future__ import annotations

import csv
import io
import json
import os
import random
import shutil
import tarfile
import tempfile
from pathlib import Path

from tutorial_lib.bench.fake_imagenet import FAKE_MARKER, _fake_image

FORMS = ("archives", "kaggle", "flat_val", "folders")
# The first ImageNet classes in wnid order (label 0-19), with the words of LOC_synset_mapping.txt.
IMAGE_NUMBERS = 16_000  # a class's file numbers are drawn from 1..15,999 (per class at most that many)
REAL_CLASSES = (
    ("n01440764", "tench, Tinca tinca"), ("n01443537", "goldfish, Carassius auratus"),
    ("n01484850", "great white shark, white shark, man-eater, man-eating shark, Carcharodon carcharias"),
    ("n01491361", "tiger shark, Galeocerdo cuvieri"), ("n01494475", "hammerhead, hammerhead shark"),
    ("n01496331", "electric ray, crampfish, numbfish, torpedo"), ("n01498041", "stingray"),
    ("n01514668", "cock"), ("n01514859", "hen"), ("n01518878", "ostrich, Struthio camelus"),
    ("n01530575", "brambling, Fringilla montifringilla"), ("n01531178", "goldfinch, Carduelis carduelis"),
    ("n01532829", "house finch, linnet, Carpodacus mexicanus"), ("n01534433", "junco, snowbird"),
    ("n01537544", "indigo bunting, indigo finch, indigo bird, Passerina cyanea"),
    ("n01558993", "robin, American robin, Turdus migratorius"), ("n01560419", "bulbul"), ("n01580077", "jay"),
    ("n01582220", "magpie"), ("n01592084", "chickadee"),
)


def _images(staging: Path, classes: int, per_class: int, val_per_class: int, size: tuple[int, int],
            seed: int) -> dict:
    """Write the images once (``staging/train/<wnid>/``, flat ``staging/val/``); return the truth."""
    rng = random.Random(seed)
    truth: dict = {"train": {}, "val": {}}
    for label, (wnid, _) in enumerate(REAL_CLASSES[:classes]):
        folder = staging / "train" / wnid
        folder.mkdir(parents=True)
        numbers = sorted(rng.sample(range(1, IMAGE_NUMBERS), per_class))
        truth["train"][wnid] = [f"{wnid}_{n}.JPEG" for n in numbers]
        for index, name in enumerate(truth["train"][wnid]):
            _fake_image(seed * 1_000_003 + label * 10_007 + index, size, 90, folder / name)
    val_wnids = [wnid for wnid, _ in REAL_CLASSES[:classes] for _ in range(val_per_class)]
    rng.shuffle(val_wnids)  # like ImageNet: the flat val/ is not in class order
    (staging / "val").mkdir()
    for number, wnid in enumerate(val_wnids, 1):
        name = f"ILSVRC2012_val_{number:08d}.JPEG"
        truth["val"][name] = wnid
        _fake_image(seed * 1_000_003 + 500_009 + number, size, 90, staging / "val" / name)
    return truth


def _tar_folder(tar_path: Path, files: list[Path]) -> None:
    with tarfile.open(tar_path, "w") as tar:
        for path in files:
            tar.add(path, arcname=path.name)


def _meta_mat(wnids: list[str], words: dict[str, str], ids: dict[str, int]) -> bytes:
    """A devkit ``meta.mat``: the leaf synsets (num_children 0) with their ILSVRC2012_IDs, plus one
    parent synset, as in the real file (which has 1,860 synsets, 1,000 of them leaves)."""
    import numpy as np
    import scipy.io

    fields = ["ILSVRC2012_ID", "WNID", "words", "gloss", "num_children", "children", "wordnet_height",
              "num_train_images"]
    synsets = np.zeros((len(wnids) + 1, 1), dtype=[(f, "O") for f in fields])
    for row, wnid in enumerate(wnids):
        synsets[row, 0] = (ids[wnid], wnid, words[wnid], "a fake gloss", 0, np.zeros((1, 0)), 0, 1300)
    parent = len(wnids) + 1
    synsets[len(wnids), 0] = (parent, "n00001740", "entity", "the root", len(wnids),
                              np.array([[ids[w] for w in wnids]], dtype=float), 19, 0)
    out = io.BytesIO()
    scipy.io.savemat(out, {"synsets": synsets})
    return out.getvalue()


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def _archives(staging: Path, root: Path, truth: dict, seed: int) -> None:
    wnids = sorted(truth["train"])
    inner = staging / "inner"
    inner.mkdir()
    for wnid in wnids:
        _tar_folder(inner / f"{wnid}.tar", [staging / "train" / wnid / n for n in truth["train"][wnid]])
    _tar_folder(root / "ILSVRC2012_img_train.tar", [inner / f"{w}.tar" for w in wnids])
    _tar_folder(root / "ILSVRC2012_img_val.tar", [staging / "val" / n for n in sorted(truth["val"])])
    order = list(range(1, len(wnids) + 1))
    random.Random(seed).shuffle(order)  # ILSVRC2012_IDs are not in wnid order (ID 1 is n02119789 in ImageNet)
    ids = dict(zip(wnids, order, strict=True))
    ground_truth = "".join(f"{ids[truth['val'][name]]}\n" for name in sorted(truth["val"]))
    with tarfile.open(root / "ILSVRC2012_devkit_t12.tar.gz", "w:gz") as tar:
        _add_bytes(tar, "ILSVRC2012_devkit_t12/data/meta.mat", _meta_mat(wnids, dict(REAL_CLASSES), ids))
        _add_bytes(tar, "ILSVRC2012_devkit_t12/data/ILSVRC2012_validation_ground_truth.txt", ground_truth.encode())
        _add_bytes(tar, "ILSVRC2012_devkit_t12/readme.txt", b"fake devkit written by tutorial_lib\n")


def _flat(staging: Path, root: Path, train: Path, val: Path) -> None:
    train.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(staging / "train", train)
    shutil.copytree(staging / "val", val)


def _kaggle(staging: Path, root: Path, truth: dict) -> None:
    base = root / "ILSVRC" / "Data" / "CLS-LOC"
    _flat(staging, root, base / "train", base / "val")
    (base / "test").mkdir()
    with open(root / "LOC_val_solution.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["ImageId", "PredictionString"])
        for name, wnid in sorted(truth["val"].items()):
            writer.writerow([Path(name).stem, f"{wnid} 12 20 300 280 {wnid} 40 50 200 220"])
    with open(root / "LOC_train_solution.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["ImageId", "PredictionString"])
        for wnid, names in truth["train"].items():
            writer.writerows([Path(n).stem, f"{wnid} 10 10 200 200"] for n in names)
    words = dict(REAL_CLASSES)
    (root / "LOC_synset_mapping.txt").write_text("".join(f"{w} {words[w]}\n" for w in sorted(truth["train"])))


def make_fake_source(root: str | os.PathLike, form: str, classes: int = 3, per_class: int = 4,
                     val_per_class: int = 2, size: tuple[int, int] = (40, 30), seed: int = 0) -> dict:
    """Write fake ImageNet in ``form`` to ``root`` (absent or empty); return the truth
    ``{"train": {wnid: [file names]}, "val": {file name: wnid}}`` (also kept in ``root/fake_imagenet.json``).

    ``flat_val`` carries its ground truth as ``val.txt`` of ``FILE CLASS_INDEX`` lines (the common
    Caffe-style file); ``folders`` sorts val/ into class folders (nothing to prepare).
    """
    if form not in FORMS:
        raise ValueError(f"form: {form!r} is not one of {', '.join(FORMS)}. Fix: pass one of them.")
    if not 1 <= classes <= len(REAL_CLASSES):
        raise ValueError(f"classes: {classes} is outside 1..{len(REAL_CLASSES)}. Fix: pass a number in that range.")
    root = Path(root)
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise ValueError(f"root: {root} is not a new or empty folder; refusing to write into it. Fix: pass one.")
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".fake-source-", dir=root.parent) as tmp:
        staging = Path(tmp)
        truth = _images(staging, classes, per_class, val_per_class, tuple(size), seed)
        if form == "archives":
            _archives(staging, root, truth, seed)
        elif form == "kaggle":
            _kaggle(staging, root, truth)
        else:
            _flat(staging, root, root / "train", root / "val")
            if form == "flat_val":
                index = {wnid: i for i, wnid in enumerate(sorted(truth["train"]))}
                (root / "val.txt").write_text("".join(f"{n} {index[w]}\n" for n, w in sorted(truth["val"].items())))
            else:
                for name, wnid in truth["val"].items():
                    (root / "val" / wnid).mkdir(exist_ok=True)
                    os.replace(root / "val" / name, root / "val" / wnid / name)
    (root / FAKE_MARKER).write_text(json.dumps({"form": form, "truth": truth}))
    return truth
