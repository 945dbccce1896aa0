"""``prepare`` on the original archives against GNU tar doing the same work, side by side, timed to disk.

GNU tar's side: ``tar -xf ILSVRC2012_img_train.tar --to-command`` streams each class tar into a second ``tar -x``
in ``train/<wnid>/`` (nothing else on disk), and ``tar -xf ILSVRC2012_img_val.tar`` into a flat ``val/``
(prepare also sorts it into class folders). Each side is timed from its start until ``sync`` returns (the
files are on disk, not only in the page cache), in interleaved rounds (the order alternates), into a new folder
each time, nothing deleted until all are timed, and each run started after the disk went quiet
(:mod:`tutorial_lib.bench.disk`). The archives are made by :func:`tutorial_lib.bench.fake_forms.make_fake_source`,
by default with ImageNet's mean file size; :mod:`tutorial_lib.bench.extract_table` projects the full set's time.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from tutorial_lib.bench.disk import settle
from tutorial_lib.bench.fake_forms import REAL_CLASSES, make_fake_source
from tutorial_lib.data.names import TRAIN_TAR, VAL_TAR
from tutorial_lib.engine.errors import ConfigError

_CLASS_TAR = 'd="$DEST/${TAR_FILENAME%.tar}" && mkdir -p "$d" && tar -x -C "$d"'


def gnu_tar(source: Path, dest: Path) -> None:
    """GNU tar doing ``prepare``'s work on the original archives of ``source``: class tars into ``dest/train/<wnid>/``,
    the validation tar into a flat ``dest/val/``."""
    (dest / "val").mkdir(parents=True)
    env = {**os.environ, "DEST": str(dest / "train")}
    subprocess.run(["tar", "-xf", str(source / TRAIN_TAR), f"--to-command=sh -c '{_CLASS_TAR}'"], env=env,
                   check=True)
    subprocess.run(["tar", "-xf", str(source / VAL_TAR), "-C", str(dest / "val")], check=True)


def copy_archives(source: Path, dest: Path) -> None:
    """The archives' bytes copied as they are (GNU ``cp``): what writing the same bytes costs on this disk, with
    no file to create, the floor under both extractions."""
    dest.mkdir()
    subprocess.run(["cp", *(str(path) for path in sorted(source.glob("*.tar*"))), str(dest)], check=True)


def _prepare(source: Path, dest: Path) -> None:
    from tutorial_lib.data.prepare import prepare

    prepare(source, dest, progress=False)


def _files(root: Path) -> tuple[int, int]:
    count = size = 0
    for folder, _, names in os.walk(root):
        for name in names:
            count, size = count + 1, size + os.path.getsize(os.path.join(folder, name))
    return count, size


def _timed(run, source: Path, dest: Path, cold_cache: bool, quiet_s: int) -> dict:
    """One side into the new ``dest``: after the disk went quiet (and the caches dropped where asked), timed until
    ``sync`` returns."""
    settled = settle(dest.parent, cold_cache, quiet_s)
    load, started = os.getloadavg()[0], time.perf_counter()
    run(source, dest)
    os.sync()
    return {"seconds_to_disk": time.perf_counter() - started, "load_average_1m": load, **settled}


def measure_extract(classes: int = 20, per_class: int = 250, val_per_class: int = 25, rounds: int = 3,
                    size: tuple[int, int] = (500, 375), work_dir: str | os.PathLike | None = None,
                    cold_cache: bool = False, quiet_s: int = 5) -> list[dict]:
    """One record per side per round: seconds until on disk (``sync``), files and bytes written, load, the wait
    for a quiet disk. Sides: ``gnu_tar``, ``prepare`` and ``copy`` (:func:`copy_archives`, the disk's floor), in
    alternating order, each side into a folder of its own, nothing deleted until all are timed; ``quiet_s``:
    seconds of a quiet disk before each run. The default image size gives ImageNet's mean file size (about
    110 KB), so that the time per byte and per file keep the real archives' proportion."""
    if rounds < 1:
        raise ConfigError(f"rounds: {rounds} is not a count of rounds. Fix: pass 1 or more.")
    if not 1 <= classes <= len(REAL_CLASSES) or per_class < 1 or val_per_class < 1:
        raise ConfigError(f"classes, per-class, val-per-class: {classes}, {per_class}, {val_per_class} do not make "
                          f"a data set. Fix: 1 to {len(REAL_CLASSES)} classes, 1 or more images of each split.")
    tar_version = subprocess.run(["tar", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    records = []
    with tempfile.TemporaryDirectory(prefix="bench-extract-", dir=work_dir) as tmp:
        source = Path(tmp) / "archives"
        make_fake_source(source, "archives", classes, per_class, val_per_class, size)
        archive_bytes = sum(path.stat().st_size for path in source.glob("*.tar*"))
        needed, free = 3 * rounds * archive_bytes, shutil.disk_usage(tmp).free
        if needed > free:
            raise ConfigError(f"rounds: {rounds} rounds need about {needed / 1e9:.1f} GB, {tmp} has {free / 1e9:.1f} "
                             "GB free. Fix: fewer rounds or images, or a --work-dir on a larger disk.")
        sides = {"gnu_tar": gnu_tar, "prepare": _prepare, "copy": copy_archives}
        for round_ in range(rounds):
            for side in list(sides) if round_ % 2 == 0 else list(reversed(sides)):  # the pair's order alternates
                dest = Path(tmp) / f"dest-{side}-{round_}"
                timed = _timed(sides[side], source, dest, cold_cache, quiet_s)
                files, written = _files(dest)
                records.append({"kind": "extract", "status": "ok", "side": side, "round": round_,
                                "classes": classes, "train_images": classes * per_class,
                                "val_images": classes * val_per_class, "files": files, "bytes": written,
                                "archive_bytes": archive_bytes, "image_size": list(size), **timed,
                                "tar": tar_version, "device": "cpu", "cpus": os.cpu_count(),
                                "timestamp": time.time()})
    return records
