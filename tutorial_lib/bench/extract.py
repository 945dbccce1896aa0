"""``prepare`` on the original archives against GNU tar doing the same work, side by side, timed to disk.

GNU tar's side: ``tar -xf ILSVRC2012_img_train.tar --to-command`` streams each class tar into a second ``tar -x``
in ``train/<wnid>/`` (nothing else on disk), and ``tar -xf ILSVRC2012_img_val.tar`` into a flat ``val/``
(prepare also sorts it into class folders). Each side is timed from its start until ``sync`` returns (the
files are on disk, not only in the page cache), in interleaved rounds (the order alternates), into a new folder
each time. The archives are made by :func:`tutorial_lib.bench.fake_forms.make_fake_source`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from tutorial_lib.bench.fake_forms import make_fake_source
from tutorial_lib.data.names import TRAIN_TAR, VAL_TAR

_CLASS_TAR = 'd="$DEST/${TAR_FILENAME%.tar}" && mkdir -p "$d" && tar -x -C "$d"'


def gnu_tar(source: Path, dest: Path) -> None:
    """GNU tar doing ``prepare``'s work on the original archives of ``source``: class tars into ``dest/train/<wnid>/``,
    the validation tar into a flat ``dest/val/``."""
    (dest / "val").mkdir(parents=True)
    env = {**os.environ, "DEST": str(dest / "train")}
    subprocess.run(["tar", "-xf", str(source / TRAIN_TAR), f"--to-command=sh -c '{_CLASS_TAR}'"], env=env,
                   check=True)
    subprocess.run(["tar", "-xf", str(source / VAL_TAR), "-C", str(dest / "val")], check=True)


def _prepare(source: Path, dest: Path) -> None:
    from tutorial_lib.data.prepare import prepare

    prepare(source, dest, progress=False)


def _files(root: Path) -> tuple[int, int]:
    count = size = 0
    for folder, _, names in os.walk(root):
        for name in names:
            count, size = count + 1, size + os.path.getsize(os.path.join(folder, name))
    return count, size


def measure_extract(classes: int = 20, per_class: int = 100, val_per_class: int = 10, rounds: int = 3,
                    size: tuple[int, int] = (120, 90), work_dir: str | os.PathLike | None = None) -> list[dict]:
    """One record per side per round: seconds until on disk (``sync``), files and bytes written, load."""
    tar_version = subprocess.run(["tar", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    records = []
    with tempfile.TemporaryDirectory(prefix="bench-extract-", dir=work_dir) as tmp:
        source = Path(tmp) / "archives"
        make_fake_source(source, "archives", classes, per_class, val_per_class, size)
        sides = {"gnu_tar": gnu_tar, "prepare": _prepare}
        for round_ in range(rounds):
            order = list(sides) if round_ % 2 == 0 else list(reversed(sides))
            for side in order:
                dest = Path(tmp) / f"dest-{side}-{round_}"
                os.sync()
                load = os.getloadavg()[0]
                started = time.perf_counter()
                sides[side](source, dest)
                os.sync()
                seconds = time.perf_counter() - started
                files, written = _files(dest)
                records.append({"kind": "extract", "status": "ok", "side": side, "round": round_,
                                "classes": classes, "train_images": classes * per_class,
                                "val_images": classes * val_per_class, "files": files, "bytes": written,
                                "seconds_to_disk": seconds, "load_average_1m": load, "tar": tar_version,
                                "device": "cpu", "cpus": os.cpu_count(), "timestamp": time.time()})
                shutil.rmtree(dest)
    return records
