"""How long ``python -m tutorial_lib.data prepare`` takes for each form of a generated ImageNet.

Each form is written by :func:`tutorial_lib.bench.fake_forms.make_fake_source` (same images in every
form), then prepared, timed from the command's start to its last count check.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import torch

from tutorial_lib.bench.fake_forms import FORMS, make_fake_source
from tutorial_lib.data.prepare import prepare
from tutorial_lib.engine.device import environment_facts


def _size(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())


PREPARE_IMAGE_SIZE = (120, 90)  # the generated sources' JPEGs: small, so that the files, not the pixels, are timed


def measure_prepare(forms=FORMS, classes: int = 20, per_class: int = 100, val_per_class: int = 10,
                    size: tuple[int, int] = PREPARE_IMAGE_SIZE,
                    work_dir: str | os.PathLike | None = None) -> list[dict]:
    """One record per form: images, source and DEST bytes on disk, seconds, images per second, load average."""
    records = []
    with tempfile.TemporaryDirectory(prefix="bench-prepare-", dir=work_dir) as tmp:
        for form in forms:
            source, dest = Path(tmp) / f"source-{form}", Path(tmp) / f"dest-{form}"
            make_fake_source(source, form, classes, per_class, val_per_class, size)
            load = os.getloadavg()[0]
            started = time.perf_counter()
            summary = prepare(source, dest, progress=False)
            seconds = time.perf_counter() - started
            images = summary["train"] + summary["val"]
            records.append({"kind": "prepare", "status": "ok", "form": form, "made": summary["made"],
                            "classes": summary["classes"], "train_images": summary["train"],
                            "val_images": summary["val"], "image_size": list(size), "source_bytes": _size(source),
                            "dest_bytes": _size(dest), "seconds": seconds, "images_per_sec": images / seconds,
                            "load_average_1m": load, "device": "cpu", "env": environment_facts(torch.device("cpu")),
                            "timestamp": time.time()})
    return records
