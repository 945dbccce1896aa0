"""The ILSVRC2012 devkit in each form people have it: its ground truth of the 50,000 validation images as wnids.

Accepted forms (:func:`find_devkit` says which a path is):

* the archive ``ILSVRC2012_devkit_t12.tar.gz``;
* the extracted folder ``ILSVRC2012_devkit_t12/`` (its ``data/`` holds the two files below);
* ``ILSVRC2012_validation_ground_truth.txt`` itself, with ``meta.mat`` in the same folder.

The ground truth holds one ILSVRC2012_ID per line (1-based, in ``meta.mat``'s order, NOT the sorted-wnid
order); ``meta.mat`` maps each ID to its wnid. torchvision's ``parse_devkit_archive`` reads the same two files
but checks the MD5 of the real archive and writes ``meta.bin`` beside it (SOURCE must not change).
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

from tutorial_lib.data import PrepareError
from tutorial_lib.data.extract import why
from tutorial_lib.data.names import DEVKIT_DIR, DEVKIT_TAR

GROUND_TRUTH = "ILSVRC2012_validation_ground_truth.txt"
META = "meta.mat"
FORMS_TEXT = (f"{DEVKIT_TAR}, the extracted {DEVKIT_DIR}/ folder, or its data/{GROUND_TRUTH} with "
              f"{META} beside it")


def is_devkit(path: Path) -> bool:
    """Whether ``path`` is one of the devkit forms (by name and shape; its content is read later)."""
    if path.is_dir():
        return (path / "data" / GROUND_TRUTH).is_file() or (path / GROUND_TRUTH).is_file()
    return path.name.endswith((".tar.gz", ".tgz")) or path.name == GROUND_TRUTH


def _read_files(path: Path) -> dict[str, bytes]:
    if path.is_dir():
        data = path / "data" if (path / "data" / GROUND_TRUTH).is_file() else path
        return {name: (data / name).read_bytes() for name in (META, GROUND_TRUTH) if (data / name).is_file()}
    if path.name == GROUND_TRUTH:
        return {name: (path.parent / name).read_bytes() for name in (META, GROUND_TRUTH)
                if (path.parent / name).is_file()}
    files = {}
    try:
        with tarfile.open(path) as tar:
            for member in tar:
                name = member.name.rsplit("/", 1)[-1]
                if member.isfile() and name in (META, GROUND_TRUTH):
                    files[name] = tar.extractfile(member).read()
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise PrepareError(f"{path} is not a readable devkit archive ({why(exc)}). Fix: pass the original "
                          f"{DEVKIT_TAR} (download it again if it is truncated).") from None
    return files


def devkit_meta(path: Path) -> tuple[dict[int, str], list[int]]:
    """``({ILSVRC2012_ID: wnid} of the leaf synsets, the validation ground-truth IDs in image order)`` read from
    any devkit form (see the module docstring); PrepareError naming what is missing."""
    files = _read_files(Path(path))
    if len(files) != 2:
        missing = " and ".join(name for name in (META, GROUND_TRUTH) if name not in files)
        raise PrepareError(f"{path} holds no {missing}: the ground truth's numbers are ILSVRC2012_IDs and only "
                          f"{META} says which class each is. Fix: pass {FORMS_TEXT}.")
    import scipy.io  # here, not at the top: the data tool must start fast

    try:
        synsets = scipy.io.loadmat(io.BytesIO(files[META]), squeeze_me=True)["synsets"]
        leaves = [s for s in synsets if int(s[4]) == 0]  # field 4: num_children; leaves are the classes
        ids = {int(s[0]): str(s[1]) for s in leaves}
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise PrepareError(f"{path}: {META} is not the devkit's synset table ({exc}). Fix: pass {FORMS_TEXT}.") \
            from None
    try:
        truth = [int(line) for line in files[GROUND_TRUTH].decode().split()]
    except (UnicodeDecodeError, ValueError):
        raise PrepareError(f"{path}: {GROUND_TRUTH} is not one ILSVRC2012_ID per line. Fix: pass {FORMS_TEXT}.") \
            from None
    return ids, truth


def devkit_labels(path: Path) -> dict[str, str]:
    """``{ILSVRC2012_val_NNNNNNNN: wnid}`` from any devkit form; PrepareError for IDs ``meta.mat`` lacks."""
    ids, truth = devkit_meta(path)
    unknown = sorted(set(truth) - set(ids))
    if unknown:
        raise PrepareError(f"{path}: the ground truth names class IDs {unknown[:5]} that {META} does not have as "
                          f"classes. Fix: pass {FORMS_TEXT} of one devkit.")
    return {f"ILSVRC2012_val_{number:08d}": ids[label] for number, label in enumerate(truth, 1)}
