"""Node-local staging, measured: the copy's time, then one read of every image from the data's own place
("shared") and from the staged copy, in interleaved rounds (:mod:`tutorial_lib.data.staging`).

A read is what a DataLoader worker does first for each image: open the file and read its bytes (no
decoding), for every file of ``train/`` and ``val/``. Records name the device, the load average and
whether the two places are on the same file system (on a development machine they are: one disk).
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import torch

from tutorial_lib.bench.timing import Spread
from tutorial_lib.data import staging
from tutorial_lib.engine.device import environment_facts


def read_all(root: str | os.PathLike) -> dict:
    """Open and read every image of ``root/train`` and ``root/val`` as the trainer lists them
    (:func:`tutorial_lib.data.file_index.scan`: a class folder linked out of the split, to the home folder or
    ``/``, is skipped; r43q: every file under it was read, or ``/`` walked): images, bytes, seconds."""
    from tutorial_lib.data.file_index import scan

    paths = []
    for split in ("train", "val"):
        folder = Path(root) / split
        paths += [folder / name for files in scan(folder)["files"] for name in files]
    started, total = time.perf_counter(), 0
    for path in paths:
        with open(path, "rb") as handle:
            total += len(handle.read())
    return {"images": len(paths), "bytes": total, "seconds": time.perf_counter() - started}


def _record(mode: str, round_: int, measured: dict, source: Path, target: Path) -> dict:
    seconds = max(measured["seconds"], 1e-9)
    return {"kind": "staging", "status": "ok", "mode": mode, "round": round_, **measured,
            "images_per_sec": measured["images"] / seconds, "mb_per_sec": measured["bytes"] / 1e6 / seconds,
            "source": str(source), "stage_to": str(target),
            "same_file_system": os.stat(source).st_dev == os.stat(target).st_dev,
            "load_average_1m": os.getloadavg()[0], "device": "cpu", "env": environment_facts(torch.device("cpu")),
            "timestamp": time.time()}


def measure_staging(data_dir: str | os.PathLike, stage_to: str | os.PathLike | None = None,
                    repeats: int = 3) -> list[dict]:
    """``repeats`` rounds of: stage ``data_dir`` to ``stage_to`` (default: a temporary folder), read it from
    where it is and from the copy (the order alternating between rounds), remove the copy."""
    source = Path(data_dir).absolute()
    records = []
    stage_to = Path(stage_to).absolute() if stage_to else None  # r43q: a relative one was a StagingError traceback
    with tempfile.TemporaryDirectory(prefix="bench-staging-", dir=stage_to) as target:
        target = Path(target)
        for round_ in range(repeats):
            copy = staging.stage(source, str(target), f"bench-{round_}", "this-node")
            records.append(_record("copy", round_, {"images": copy.files, "bytes": copy.bytes,
                                                    "seconds": copy.seconds}, source, target))
            places = [("shared", source), ("staged", copy.path)]
            for mode, root in places if round_ % 2 == 0 else places[::-1]:
                records.append(_record(mode, round_, read_all(root), source, target))
            staging.remove(copy.path)
    return records


def spreads(records: list[dict], key: str = "seconds") -> dict[str, Spread]:
    """``{mode: Spread of key}`` over the rounds of :func:`measure_staging`'s records (copy, shared, staged)."""
    modes = {}
    for record in records:
        if record.get("kind") == "staging" and record.get("status") == "ok":
            modes.setdefault(record["mode"], []).append(record[key])
    return {mode: Spread.of(values) for mode, values in modes.items()}
