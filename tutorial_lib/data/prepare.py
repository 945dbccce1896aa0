"""``prepare(SOURCE, DEST)``: any form of ImageNet (see :mod:`.layouts`) as ``DEST/{train,val}/<wnid>/``.

Nothing under SOURCE is moved, renamed or changed. Unpacked sources become relative links (one per training
class folder, one per validation image; :mod:`.links`); archives are extracted (:mod:`.extract`), one class
(train) or one image (val) at a time through a temporary name, so an interrupted run resumes where it stopped.

Everything that can be checked is checked before the first file is written (:func:`plan`): the class list, the
validation listing against its ground truth, the devkit, names used twice, the free space DEST needs. DEST must
be new, empty, or a folder this command started (it holds :data:`MARK`, which names its SOURCE); one run at a
time writes into a DEST (a lock), and a file in DEST that this command did not write is never replaced.

torchvision's ``parse_train_archive``/``parse_val_archive`` extract into the archive's own folder and
delete the inner tars, and check the MD5 of the full archives, so they do not fit; the archive names
and the devkit reading follow them.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tutorial_lib.data import PREPARE_COMMAND
from tutorial_lib.data.extract import (
    BROKEN,
    check_unique,
    class_archive_name,
    extract_class,
    extract_val,
    list_class,
    member_name,
    member_ranges,
    why,
)
from tutorial_lib.data.file_index import class_folders
from tutorial_lib.data.layouts import FULL_SET, PrepareError, Source, detect, val_labels
from tutorial_lib.data.links import HUBS, MARK, make_link
from tutorial_lib.data.names import is_class_folder, is_image, is_system_file
from tutorial_lib.paths import in_system_folder

LOCK = ".tutorial_prepare.lock"  # flock'ed while a run writes into DEST (stays, empty, afterwards)


def check_destination(dest: Path, source: Source) -> dict:
    """The state of an earlier prepare of ``source`` into ``dest`` ({} if new); PrepareError unless DEST is
    absent, empty, or started by this command from the same SOURCE (never overwrite user files). Paths are
    compared resolved, so a link into SOURCE (or to it) is seen for what it is. A DEST whose SOURCE is gone
    (moved) may be prepared again from the new place: its links are pointed there."""
    try:
        real_dest, real_source = dest.resolve(), source.root.resolve()
    except (OSError, RuntimeError) as exc:  # a link to itself: RuntimeError before Python 3.13
        raise PrepareError(f"DEST: {dest} cannot be followed ({exc}). Fix: pass a new or empty folder, not a link "
                           "that points at itself.") from None
    system = in_system_folder(real_dest)
    if system is not None:  # /dev lives in memory, /proc and /sys are the kernel's: nothing of ours goes there
        raise PrepareError(f"DEST: {dest} {system}, where no data set belongs. Fix: pass a new or empty folder of "
                           "your own, e.g. ~/data/imagenet.")
    if real_dest == real_source or real_source in real_dest.parents or real_dest in real_source.parents:
        raise PrepareError(f"DEST: {dest} overlaps SOURCE {source.root} (resolved: {real_dest} and {real_source}), "
                           "and SOURCE must stay unchanged. Fix: pass a DEST outside SOURCE (and not a folder "
                           "holding it).")
    if dest.exists() and not dest.is_dir():
        raise PrepareError(f"DEST: {dest} is not a folder. Fix: pass a new or empty folder to {PREPARE_COMMAND}.")
    if not dest.is_dir() or not any(e.name != LOCK for e in dest.iterdir()):
        return {}
    mark = dest / MARK
    if not mark.is_file():
        raise PrepareError(f"DEST: {dest} already holds files that {PREPARE_COMMAND} did not write; refusing to "
                           "write into it. Fix: pass a new or empty folder.")
    try:
        state = json.loads(mark.read_bytes())
        recorded = state["source"]
        kinds = {"skipped_train": dict, "totals": dict, "form": str, "moved_from": str}
        if not isinstance(recorded, str) or any(not isinstance(state[k], kind) for k, kind in kinds.items()
                                                if k in state):
            raise TypeError(recorded)
        if not all(isinstance(n, int) and not isinstance(n, bool) for n in state.get("skipped_train", {}).values()):
            raise TypeError(recorded)
    except (ValueError, KeyError, TypeError, IndexError):
        raise PrepareError(f"DEST: {mark} is torn or not this command's (not its JSON). Fix: pass a new or empty "
                           f"folder; or, if DEST is a prepare of yours, delete {mark.name} and run again "
                           "(it resumes).") from None
    if recorded != str(source.root) and recorded != str(real_source):
        if Path(recorded).exists() or state.get("form") != source.form:
            raise PrepareError(f"DEST: {dest} was prepared from {recorded}, not {source.root}. Fix: pass a new "
                               "or empty folder, or the SOURCE it was prepared from.")
        state["moved_from"] = recorded
    return state


@contextlib.contextmanager
def locked(dest: Path, lock: str = LOCK, field: str = "DEST", command: str = PREPARE_COMMAND):
    """Hold ``dest/lock`` (flock) while writing into ``dest``; PrepareError naming ``field`` if another
    ``command`` holds it."""
    fd = os.open(dest / lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise PrepareError(f"{field}: another {command} is writing into {dest} now. Fix: wait for it "
                               "to finish (running it again afterwards resumes or finds it done).") from None
        yield
    finally:
        os.close(fd)


def _write_state(dest: Path, state: dict) -> None:
    tmp = dest / f"{MARK}.tmp"
    tmp.write_text(json.dumps(state, indent=1))
    os.replace(tmp, dest / MARK)


def _bar(total: int, desc: str, show: bool, unit: str = "it"):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, unit_scale=unit == "B", disable=not show, leave=False)


def _list_images(folder: Path) -> tuple[list[str], int]:
    """The image files of ``folder`` (sorted) and how many system files (``._*``, ``.DS_Store``) it holds."""
    with os.scandir(folder) as entries:
        files = [e.name for e in entries if not e.is_dir()]
    return sorted(n for n in files if is_image(n)), sum(map(is_system_file, files))


def _check_labels(stems: list[str], labels: dict[str, str], classes: list[str], source: Source) -> None:
    unlabelled = [s for s in stems if s not in labels]
    absent = sorted(set(labels) - set(stems))
    if unlabelled or absent:
        raise PrepareError(f"SOURCE: {len(stems)} validation images and {len(labels)} labels in {source.labels} do "
                           f"not match (no label: {unlabelled[:3] or 'none'}; label but no image: "
                           f"{absent[:3] or 'none'}). Fix: pass the complete validation set and its own ground truth.")
    unknown = sorted(set(labels.values()) - set(classes))
    if unknown:
        raise PrepareError(f"SOURCE: the ground truth {source.labels} names classes that the training set does not "
                           f"have: {unknown[:5]}. Fix: pass the training set and the ground truth of one data set.")


def _free(dest: Path) -> int:
    existing = next(p for p in (dest, *dest.parents) if p.exists())
    return shutil.disk_usage(existing).free


def _listing(archive: Path) -> list[tarfile.TarInfo]:
    """The members of ``archive`` (headers only); PrepareError naming it when it is corrupt or truncated."""
    try:
        with tarfile.open(archive) as tar:
            return tar.getmembers()
    except BROKEN as exc:
        raise PrepareError(f"SOURCE: {archive} is corrupt or truncated ({why(exc)}). Fix: download it again.") from None


def plan(found: Source, dest: Path) -> dict:
    """Everything read and checked before DEST is written: the classes, the validation ground truth against the
    validation listing, names used twice, and (archives) the free space DEST needs. PrepareError otherwise."""
    if found.form == "folders":
        return {}
    if found.form == "archives":
        members = [m for m in _listing(found.train) if not (m.isdir() and m.name.rstrip("/") in (".", ""))]
        top_skipped = sum(is_system_file(m.name.rstrip("/")) for m in members)  # __MACOSX/ too
        members = [m for m in members if not is_system_file(m.name.rstrip("/"))]
        names = [class_archive_name(m, str(found.train)) for m in members]  # refuses any other folder
        check_unique(names, str(found.train))
        classes = sorted(Path(n).stem for n in names)
        val = [m for m in _listing(found.val) if not m.isdir()]
        val_skipped = sum(is_system_file(m.name) for m in val)
        val = [m for m in val if not is_system_file(m.name)]
        val_names = [member_name(m, str(found.val)) for m in val]
        check_unique(val_names, str(found.val))
        stems = [Path(n).stem for n in val_names]
    else:
        entries = os.listdir(found.train)
        folders = {e for e in entries if (found.train / e).is_dir()}
        top_skipped = sum(is_system_file(e) or (e in folders and not is_class_folder(e)) for e in entries)
        classes = sorted(e for e in folders if is_class_folder(e))
        val_names, val_skipped = _list_images(found.val)
        stems = [Path(n).stem for n in val_names]
        check_unique(stems, str(found.val))
    labels = val_labels(found.labels, classes)
    _check_labels(stems, labels, classes, found)
    result = {"classes": classes, "labels": labels, "val_names": val_names,
              "skipped": val_skipped + top_skipped}
    if found.form == "archives":
        needed = sum(m.size for m in members if not (dest / "train" / Path(m.name).stem).is_dir())
        needed += sum(m.size for m, n in zip(val, val_names, strict=True)
                      if not (dest / "val" / labels[Path(n).stem] / n).exists())
        free = _free(dest)
        if needed > free:
            raise PrepareError(f"DEST: extracting needs {needed / 1e9:.1f} GB more, {dest} has {free / 1e9:.1f} GB "
                               "free. Fix: free space or pass a DEST on a larger disk (the run resumes where it "
                               "stopped).")
        result.update(members=members, val_members=val)
    return result


def _link_hubs(found: Source, dest: Path, sources: list[Path]) -> dict[str, Path]:
    """DEST's one link to each split of SOURCE (:data:`.links.HUBS`), which the class and image links go
    through; PrepareError if a file of the user's has that name."""
    hubs = {split: dest / name for split, name in HUBS.items()}
    for split, hub in hubs.items():
        if not make_link(getattr(found, split), hub, sources):
            raise PrepareError(f"DEST: {hub} is not a link of {PREPARE_COMMAND}'s; refusing to replace it. Fix: "
                               "move it out of DEST and run again.")
    return hubs


def _link_train(train: Path, dest: Path, sources: list[Path], classes: list[str], show: bool) -> None:
    (dest / "train").mkdir(parents=True, exist_ok=True)
    with _bar(len(classes), "train: linking class folders", show) as bar:
        for name in classes:
            make_link(train / name, dest / "train" / name, sources)
            bar.update(1)


def _link_val(val: Path, dest: Path, sources: list[Path], todo: dict, show: bool) -> None:
    made = set()
    with _bar(len(todo["val_names"]), "val: linking images into class folders", show) as bar:
        for name in todo["val_names"]:
            folder = dest / "val" / todo["labels"][Path(name).stem]
            if folder not in made:
                folder.mkdir(parents=True, exist_ok=True)
                made.add(folder)
            make_link(val / name, folder / name, sources)
            bar.update(1)


def _extract_train(found: Source, dest: Path, todo: dict, state: dict, show: bool) -> dict[str, int]:
    """The class tars not extracted yet, one at a time: GNU tar writes a class (in a thread that mostly waits
    on tar) while Python lists and checks the next one. Returns the images of each class written, as checked
    on disk after tar (the final count lists only the classes of an earlier run)."""
    train = dest / "train"
    train.mkdir(parents=True, exist_ok=True)
    skipped = state.setdefault("skipped_train", {})
    members = [m for m in todo["members"] if not (train / Path(m.name).stem).is_dir()]
    counts: dict[str, int] = {}

    def finish(running) -> None:  # wait for the class being written, then count it
        if running is None:
            return
        wnid, future = running
        counts[wnid], system_files = future.result()
        if system_files:  # kept for a resumed run's count; a mark rewritten per class cost ~7 ms each
            skipped[wnid] = system_files
            _write_state(dest, state)
        bar.set_postfix_str(f"{sum(counts.values()):,} images, {len(counts):,}/{len(members):,} classes",
                            refresh=False)

    with tarfile.open(found.train) as outer, open(found.train, "rb") as raw, ThreadPoolExecutor(1) as writer, \
            _bar(sum(m.size for m in members), "train: extracting", show, "B") as bar:
        running = None
        for member in members:
            wnid, label = Path(member.name).stem, f"{found.train}:{member.name}"
            names = list_class(outer, raw.fileno(), member, label)
            finish(running)
            running = wnid, writer.submit(extract_class, raw.fileno(), member, names, train / f".part-{wnid}",
                                          train / wnid, label, bar)
        finish(running)
    return counts


def _extract_val(found: Source, dest: Path, todo: dict, show: bool) -> None:
    pairs = [(m, dest / "val" / todo["labels"][Path(n).stem] / n)
             for m, n in zip(todo["val_members"], todo["val_names"], strict=True)]
    pairs = [(m, t) for m, t in pairs if not os.path.lexists(t)]
    if pairs:
        members, targets = map(list, zip(*pairs, strict=True))
        total = sum(size for _, size in member_ranges(members))
        with _bar(total, f"val: extracting {len(pairs):,} images", show, "B") as bar:
            extract_val(found.val, members, targets, dest / "val" / ".part-flat", bar)


def _count(split: Path, known: dict[str, int] | None = None) -> tuple[dict[str, int], int]:
    """Images per class folder of ``split`` as they are on disk now (links followed), and the system files and
    folders that are no class seen (hidden ones, and links that lead out of a class: the readers' own rule,
    :func:`tutorial_lib.data.file_index.class_folders`, which names them in a warning); the folders in ``known``
    (counted on disk by this run's extraction) are not listed again."""
    classes, not_classes = class_folders(split)  # r43n: a class linked to $HOME was counted, and said nothing
    skipped, known = len(not_classes), known or {}
    skipped += sum(is_system_file(name) for name in os.listdir(split) if not (split / name).is_dir())
    counts = {}
    for name in classes:
        if name in known:
            counts[name] = known[name]
        else:
            images, junk = _list_images(split / name)
            counts[name], skipped = len(images), skipped + junk
    return counts, skipped


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


def _named(exc: OSError, source: Source, dest: Path) -> PrepareError:
    """One line for a fault of the file system (permissions, a full disk), naming the path and the fix."""
    path = str(exc.filename or "")
    field = "DEST" if path.startswith(str(dest)) else "SOURCE"
    fix = ("free space on DEST's disk or pass a DEST on a larger one" if exc.errno == errno.ENOSPC
           else "make it readable (and DEST writable) for you")
    return PrepareError(f"{field}: cannot read or write {path or source.root}: {exc.strerror or exc}. Fix: {fix}, "
                        "then run the same command again (it resumes).")


def prepare(source: str | os.PathLike, dest: str | os.PathLike, val_labels_file: str | os.PathLike | None = None,
            subset: bool = False, progress: bool = True) -> dict:
    """Make ``dest`` a class-folder ImageNet (``train/<wnid>/``, ``val/<wnid>/``) from ``source``.

    Returns a summary: the form, how DEST was made (``links``/``extracted``), image and class counts as DEST
    holds them, the system files skipped, seconds taken. Raises PrepareError (one line naming SOURCE, DEST or
    the option, and the fix) before writing anything when the input is wrong; a run that stopped (an error,
    Ctrl-C) is resumed by running it again.
    """
    started = time.perf_counter()
    found = detect(source, val_labels_file)
    dest = Path(dest).expanduser().absolute()
    try:
        check_destination(dest, found)  # refuses a DEST that cannot be followed (a link to itself)
        # links are relative to where DEST really is: from a DEST under a linked folder (~/scratch -> /big/u) a
        # link made from the unresolved path would climb out of the wrong folder and lead nowhere (r43g)
        dest = dest.resolve()
        todo = plan(found, dest)
        dest.mkdir(parents=True, exist_ok=True)
        with locked(dest):
            return _run(found, dest, todo, subset, progress, started)
    except OSError as exc:
        raise _named(exc, found, dest) from None


def _run(found: Source, dest: Path, todo: dict, subset: bool, progress: bool, started: float) -> dict:
    old = check_destination(dest, found)  # again, under the lock: another run may have finished meanwhile
    sources = [found.root] + ([Path(old["moved_from"])] if "moved_from" in old else [])
    state = {"made_by": PREPARE_COMMAND, "source": str(found.root), "form": found.form, "complete": False,
             **{k: v for k, v in old.items() if k in ("totals", "skipped_train")}}
    _write_state(dest, state)
    written: dict[str, int] = {}
    if found.form == "folders":
        for split in ("train", "val"):
            make_link(getattr(found, split), dest / split, sources)
    elif found.form == "archives":
        written = _extract_train(found, dest, todo, state, progress)
        _extract_val(found, dest, todo, progress)
    else:
        hubs = _link_hubs(found, dest, sources)
        sources = sources + list(hubs.values())  # links made before the split links (or into a moved SOURCE)
        _link_train(hubs["train"], dest, sources, todo["classes"], progress)
        _link_val(hubs["val"], dest, sources, todo, progress)
    for wnid in todo.get("classes", ()):  # a class without validation images keeps its label (same folders)
        (dest / "val" / wnid).mkdir(parents=True, exist_ok=True)
    (train, train_skipped), (val, val_skipped) = _count(dest / "train", written), _count(dest / "val")
    totals = check_counts({"train": train, "val": val}, found, subset)
    skipped = train_skipped + val_skipped + todo.get("skipped", 0) + sum(state.get("skipped_train", {}).values())
    state.update(complete=True, totals=totals, skipped=skipped)
    _write_state(dest, state)
    return {"form": found.form, "made": "extracted" if found.form == "archives" else "links", "dest": str(dest),
            **totals, "skipped": skipped, "seconds": time.perf_counter() - started}
