"""Which file names are images, and which are an operating system's litter, decided once for the whole project.

Used by ``prepare`` (:mod:`.prepare`), the job's file index (:mod:`.file_index`) and the trainer's datasets
(:class:`tutorial_lib.engine.input.files.ImageFiles`), so an image counted by one is read by the others.

The constants are torchvision's (``IMG_EXTENSIONS``, ``ARCHIVE_META``), written out here so that the data tool
does not import torch (tests check they still agree).
"""

from __future__ import annotations

import os

IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
TRAIN_TAR, VAL_TAR, DEVKIT_TAR = "ILSVRC2012_img_train.tar", "ILSVRC2012_img_val.tar", "ILSVRC2012_devkit_t12.tar.gz"
DEVKIT_DIR = "ILSVRC2012_devkit_t12"
# Finder, Windows Explorer and friends: never images, whatever their suffix
SYSTEM_FILES = frozenset({".ds_store", "thumbs.db", "desktop.ini", "ehthumbs.db", ".directory", "icon\r", "__macosx",
                          ".spotlight-v100", ".trashes", ".fseventsd", "$recycle.bin"})


def _base(name: str | os.PathLike) -> str:
    """The last part of ``name`` (``os.path.basename`` without its per-call overhead: called per file, millions of
    times for ImageNet)."""
    name = os.fspath(name)
    return name[name.rfind("/") + 1:]


def is_system_file(name: str | os.PathLike) -> bool:
    """Whether ``name`` (a file or folder name, or a path) is litter of an operating system, not data: macOS
    AppleDouble ``._*`` files, ``.DS_Store`` and ``__MACOSX/``, Windows ``Thumbs.db``/``desktop.ini``, KDE
    ``.directory``. Such a folder is never a class; such a file never an image."""
    base = _base(name)
    return base.startswith("._") or base.lower() in SYSTEM_FILES


def is_class_folder(name: str | os.PathLike) -> bool:
    """Whether a folder of that name (or path) can be a class: not hidden (``.ipynb_checkpoints``, ``.git``,
    ``.Trash-1000``: never data) and not an operating system's litter. Every reader of class folders (training,
    validation, evaluate, ``prepare``, the file index, staging) asks this one rule, and skips the others."""
    base = _base(name)
    return bool(base) and not base.startswith(".") and not is_system_file(base)


def is_image(name: str | os.PathLike) -> bool:
    """Whether ``name`` (a file name or path) is an image to train on: an image suffix torchvision's ImageFolder
    reads, and not a system file (a macOS ``._x.JPEG`` is metadata, not an image)."""
    base = _base(name)
    return base.lower().endswith(IMG_EXTENSIONS) and not is_system_file(base)
