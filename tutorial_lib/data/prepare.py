"""``prepare(SOURCE, DEST)``: any form of ImageNet (see :mod:`.layouts`) as ``DEST/{train,val}/<wnid>/``.

Nothing under SOURCE is moved, renamed or changed. Unpacked sources become links (one per training
class folder, one per validation image); archives are extracted, one class (train) or one image (val)
at a time through a temporary name, so an interrupted run resumes where it stopped. DEST must be new,
empty, or a folder this command started (it holds :data:`MARK`, which names its SOURCE).

torchvision's ``parse_train_archive``/``parse_val_archive`` extract into the archive's own folder and
delete the inner tars, and check the MD5 of the full archives, so they do not fit; the archive names
and the devkit reading follow them.
"""

from __future__ import annotations

import json
import os
import shutil
import tarfile
import time
from pathlib import Path

from tutorial_lib.data import PREPARE_COMMAND
from tutorial_lib.data.layouts import FULL_SET, PrepareError, Source, detect, is_image, val_labels

MARK = ".tutorial_prepared.json"


def check_destination(dest: Path, source: Source) -> dict:
    """The state of an earlier prepare of ``source`` into ``dest`` ({} if new); PrepareError unless DEST is
    absent, empty, or started by this command from the same SOURCE (never overwrite user files)."""
    if dest == source.root or source.root in dest.parents or dest in source.root.parents:
        raise PrepareError(f"DEST: {dest} overlaps SOURCE {source.root}, and SOURCE must stay unchanged. "
                           "Fix: pass a DEST outside SOURCE (and not a folder holding it).")
    if dest.exists() and not dest.is_dir():
        raise PrepareError(f"DEST: {dest} is not a folder. Fix: pass a new or empty folder to {PREPARE_COMMAND}.")
    if not dest.is_dir() or not any(dest.iterdir()):
        return {}
    mark = dest / MARK
    if not mark.is_file():
        raise PrepareError(f"DEST: {dest} already holds files that {PREPARE_COMMAND} did not write; refusing to "
                           "write into it. Fix: pass a new or empty folder.")
    state = json.loads(mark.read_text())
    if state.get("source") != str(source.root):
        raise PrepareError(f"DEST: {dest} was prepared from {state.get('source')}, not {source.root}. Fix: pass "
                           "a new or empty folder, or the SOURCE it was prepared from.")
    return state


def _write_state(dest: Path, state: dict) -> None:
    tmp = dest / f"{MARK}.tmp"
    tmp.write_text(json.dumps(state, indent=1))
    os.replace(tmp, dest / MARK)


def _bar(total: int, desc: str, show: bool, unit: str = "it"):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, unit_scale=unit == "B", disable=not show, leave=False)


def _list_images(folder: Path) -> list[str]:
    with os.scandir(folder) as entries:
        return sorted(e.name for e in entries if is_image(e.name) and not e.is_dir())


def _link(target: Path, link: Path) -> None:
    if link.is_symlink() and os.readlink(link) == str(target):
        return
    if link.is_symlink():
        link.unlink()  # a link of ours to another target (a resumed run after the source changed)
    tmp = link.with_name(f".{link.name}.tmp")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(target)
    os.replace(tmp, link)


def _link_train(source: Source, dest: Path, show: bool) -> dict[str, int]:
    """One directory link per class; returns images per class (as ImageFolder will count them)."""
    counts = {}
    classes = [e for e in sorted(os.listdir(source.train)) if (source.train / e).is_dir()]
    (dest / "train").mkdir(parents=True, exist_ok=True)
    with _bar(len(classes), "train: linking class folders", show) as bar:
        for name in classes:
            counts[name] = len(_list_images(source.train / name))
            _link(source.train / name, dest / "train" / name)
            bar.update(1)
    return counts


def _link_val(source: Source, dest: Path, labels: dict[str, str], show: bool) -> dict[str, int]:
    """One link per validation image, in the folder of its class; returns images per class."""
    images = _list_images(source.val)
    _check_labels([Path(n).stem for n in images], labels, source)
    counts: dict[str, int] = {}
    with _bar(len(images), "val: linking images into class folders", show) as bar:
        for name in images:
            wnid = labels[Path(name).stem]
            folder = dest / "val" / wnid
            if wnid not in counts:
                folder.mkdir(parents=True, exist_ok=True)
                counts[wnid] = 0
            counts[wnid] += 1
            _link(source.val / name, folder / name)
            bar.update(1)
    return counts


def _check_labels(stems: list[str], labels: dict[str, str], source: Source) -> None:
    unlabelled = [s for s in stems if s not in labels]
    absent = sorted(set(labels) - set(stems))
    if unlabelled or absent:
        raise PrepareError(f"SOURCE: {len(stems)} validation images and {len(labels)} labels in {source.labels} do "
                           f"not match (no label: {unlabelled[:3] or 'none'}; label but no image: "
                           f"{absent[:3] or 'none'}). Fix: pass the complete validation set and its own ground truth.")


def _safe_name(member: tarfile.TarInfo, archive: Path) -> str:
    name = member.name.rsplit("/", 1)[-1]
    if name in ("", ".", "..") or not member.isfile():
        raise PrepareError(f"SOURCE: {archive} holds {member.name!r}, which is not an image file. "
                           "Fix: pass the original ImageNet archives.")
    return name


def _extract_file(handle, target: Path) -> None:
    tmp = target.with_name(f".{target.name}.tmp")
    with open(tmp, "wb") as out:
        shutil.copyfileobj(handle, out, 1 << 20)
    os.replace(tmp, target)


def _check_space(dest: Path, needed: int) -> None:
    free = shutil.disk_usage(dest).free
    if needed > free:
        raise PrepareError(f"DEST: extracting needs {needed / 1e9:.1f} GB more, {dest} has {free / 1e9:.1f} GB "
                           "free. Fix: free space or pass a DEST on a larger disk (the run resumes where it stopped).")


def _extract_train(source: Source, dest: Path, show: bool) -> dict[str, int]:
    """Each inner ``<wnid>.tar`` into ``DEST/train/<wnid>/`` (through a temporary folder, so a finished
    class is never extracted twice); returns images per class."""
    train = dest / "train"
    train.mkdir(parents=True, exist_ok=True)
    counts = {}
    with tarfile.open(source.train) as outer:
        members = [m for m in outer.getmembers() if m.isfile()]
        todo = {m.name for m in members if not (train / Path(m.name).stem).is_dir()}
        _check_space(dest, sum(m.size for m in members if m.name in todo))
        with _bar(sum(m.size for m in members), "train: extracting", show, "B") as bar:
            for member in members:
                wnid = Path(_safe_name(member, source.train)).stem
                if member.name in todo:
                    part = train / f".part-{wnid}"
                    shutil.rmtree(part, ignore_errors=True)  # an interrupted extraction of our own
                    part.mkdir()
                    with tarfile.open(fileobj=outer.extractfile(member), mode="r|") as inner:
                        for image in inner:
                            _extract_file(inner.extractfile(image), part / _safe_name(image, source.train))
                    os.replace(part, train / wnid)
                counts[wnid] = len(_list_images(train / wnid))
                bar.update(member.size)
    return counts


def _extract_val(source: Source, dest: Path, labels: dict[str, str], show: bool) -> dict[str, int]:
    """Each validation image into ``DEST/val/<wnid>/``; an image already there (same size) is skipped."""
    counts: dict[str, int] = {}
    with tarfile.open(source.val) as tar:
        members = [m for m in tar.getmembers() if m.isfile()]
        _check_labels([Path(m.name).stem for m in members], labels, source)
        targets = [dest / "val" / labels[Path(m.name).stem] / _safe_name(m, source.val) for m in members]
        todo = {m.name for m, t in zip(members, targets, strict=True)
                if not (t.is_file() and t.stat().st_size == m.size)}
        _check_space(dest, sum(m.size for m in members if m.name in todo))
        with _bar(len(members), "val: extracting into class folders", show) as bar:
            for member, target in zip(members, targets, strict=True):
                if member.name in todo:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    _extract_file(tar.extractfile(member), target)
                counts[target.parent.name] = counts.get(target.parent.name, 0) + 1
                bar.update(1)
    return counts


def check_counts(counts: dict[str, dict[str, int]], source: Source, subset: bool = False) -> dict:
    """Totals of both splits; PrepareError if their classes differ, or if a source with 1,000 classes
    (it claims to be the full set) does not hold 1,281,167 / 50,000 images (unless ``subset``)."""
    train, val = counts["train"], counts["val"]
    only_val = sorted(set(val) - set(train))
    if only_val:
        raise PrepareError(f"SOURCE: validation images of classes that train/ does not have: {only_val[:5]}. "
                           "Fix: pass the training set and the ground truth of the same data set.")
    totals = {"train": sum(train.values()), "val": sum(val.values()), "classes": len(train)}
    if totals["classes"] == FULL_SET["classes"] and not subset and totals != FULL_SET:
        raise PrepareError(f"SOURCE: {source.root} has the 1,000 ImageNet classes but {totals['train']:,} training "
                           f"and {totals['val']:,} validation images, not {FULL_SET['train']:,} and "
                           f"{FULL_SET['val']:,}: some are missing. Fix: complete the download, or pass --subset if "
                           "you meant a part of ImageNet.")
    return totals


def prepare(source: str | os.PathLike, dest: str | os.PathLike, val_labels_file: str | os.PathLike | None = None,
            subset: bool = False, progress: bool = True) -> dict:
    """Make ``dest`` a class-folder ImageNet (``train/<wnid>/``, ``val/<wnid>/``) from ``source``.

    Returns a summary: the form, how DEST was made (``links``/``extracted``), image and class counts,
    seconds taken. Raises PrepareError (one line naming SOURCE, DEST or the option, and the fix) before
    writing anything when the input is wrong; a run that stopped is resumed by running it again.
    """
    started = time.perf_counter()
    found = detect(source, val_labels_file)
    dest = Path(dest).expanduser().absolute()
    state = check_destination(dest, found)
    dest.mkdir(parents=True, exist_ok=True)
    state = {"made_by": PREPARE_COMMAND, "source": str(found.root), "form": found.form,
             "complete": False, **{k: v for k, v in state.items() if k == "totals"}}
    _write_state(dest, state)
    if found.form == "folders":
        for split in ("train", "val"):
            _link(getattr(found, split), dest / split)
        counts = {split: {c: len(_list_images(getattr(found, split) / c)) for c in sorted(os.listdir(
            getattr(found, split))) if (getattr(found, split) / c).is_dir()} for split in ("train", "val")}
    else:
        if found.form == "archives":
            counts = {"train": _extract_train(found, dest, progress)}
        else:
            counts = {"train": _link_train(found, dest, progress)}
        labels = val_labels(found.labels, sorted(counts["train"]))
        if found.form == "archives":
            counts["val"] = _extract_val(found, dest, labels, progress)
        else:
            counts["val"] = _link_val(found, dest, labels, progress)
        for wnid in counts["train"]:  # a class without validation images keeps its label (same folders)
            (dest / "val" / wnid).mkdir(parents=True, exist_ok=True)
    totals = check_counts(counts, found, subset)
    state.update(complete=True, totals=totals)
    _write_state(dest, state)
    return {"form": found.form, "made": "extracted" if found.form == "archives" else "links", "dest": str(dest),
            **totals, "seconds": time.perf_counter() - started}
