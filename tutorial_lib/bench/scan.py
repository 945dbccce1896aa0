"""One scan per job, measured: start-up time and directory reads of N ranks building their datasets.

``before``: every rank walks the ImageFolder tree itself (what the trainer did before the file index).
``after``: rank 0 walks it once and writes the index (:mod:`tutorial_lib.data.file_index`); every
rank reads that file. The tree is made of empty files (only the scan is measured), with ImageNet's
file names. Directory reads are counted as calls of ``os.scandir``/``os.listdir`` in each rank.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import tempfile
import time
from pathlib import Path

import torch

from tutorial_lib.data import file_index
from tutorial_lib.engine.device import environment_facts
from tutorial_lib.engine.errors import ConfigError
from tutorial_lib.engine.input.cpu import CountingImageFolder

TREE_MARKER = "scan_tree.json"


def make_tree(root: str | os.PathLike, classes: int = 1000, train_per_class: int = 190,
              val_per_class: int = 10) -> Path:
    """An ImageFolder tree of empty ``.JPEG`` files (reused if one with the same settings is there)."""
    root = Path(root)
    settings = {"classes": classes, "train_per_class": train_per_class, "val_per_class": val_per_class}
    if (root / TREE_MARKER).is_file() and json.loads((root / TREE_MARKER).read_text()) == settings:
        return root
    if root.exists() and any(root.iterdir()):
        raise ConfigError(f"--tree: {root} is not empty and holds no {TREE_MARKER}. Fix: pass a new or empty "
                          "folder.")
    for label in range(classes):
        wnid = f"n{1440764 + label * 37:08d}"
        for split, count in (("train", train_per_class), ("val", val_per_class)):
            folder = root / split / wnid
            folder.mkdir(parents=True)
            for index in range(count):
                number = label * count + index + 1
                name = f"{wnid}_{index + 1}.JPEG" if split == "train" else f"ILSVRC2012_val_{number:08d}.JPEG"
                (folder / name).touch()
    (root / TREE_MARKER).write_text(json.dumps(settings))
    return root


def _counting(reads: list):
    for name in ("scandir", "listdir"):
        original = getattr(os, name)

        def counted(*args, _original=original, **kwargs):
            reads[0] += 1
            return _original(*args, **kwargs)

        setattr(os, name, counted)


def _rank(mode: str, rank: int, root: str, run_dir: str, start, ready, out) -> None:
    reads = [0]
    _counting(reads)
    start.wait()
    began = time.perf_counter()
    if mode == "after":
        if rank == 0:
            file_index.build(root, run_dir)
        ready.wait()
        file_index.use(run_dir)
    sizes = [len(CountingImageFolder(Path(root) / split)) for split in ("train", "val")]
    out.put({"rank": rank, "seconds": time.perf_counter() - began, "dir_reads": reads[0], "images": sum(sizes)})


def measure_scan(root: str | os.PathLike, ranks: int = 4, modes=("before", "after"), repeats: int = 3) -> list[dict]:
    """For each mode (in turn, ``repeats`` rounds): the job's start-up time (slowest rank, from a common
    start) and its directory reads (all ranks together)."""
    context = multiprocessing.get_context("fork")
    records = []
    files = sum(len(names) for _, _, names in os.walk(root)) - 1
    for round_ in range(repeats):
        for mode in modes:
            with tempfile.TemporaryDirectory(prefix="bench-scan-") as run_dir:
                start, ready, out = context.Barrier(ranks), context.Barrier(ranks), context.Queue()
                load = os.getloadavg()[0]
                procs = [context.Process(target=_rank, args=(mode, r, str(root), run_dir, start, ready, out))
                         for r in range(ranks)]
                for proc in procs:
                    proc.start()
                results = sorted((out.get(timeout=600) for _ in procs), key=lambda r: r["rank"])
                for proc in procs:
                    proc.join()
            records.append({"kind": "scan", "status": "ok", "mode": mode, "round": round_, "ranks": ranks,
                            "files": files, "images_per_rank": results[0]["images"],
                            "startup_s": max(r["seconds"] for r in results),
                            "dir_reads_per_job": sum(r["dir_reads"] for r in results),
                            "dir_reads_per_rank": [r["dir_reads"] for r in results], "load_average_1m": load,
                            "device": "cpu", "env": environment_facts(torch.device("cpu")), "timestamp": time.time()})
    return records
