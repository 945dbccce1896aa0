"""The data path at ImageNet's size on this disk: ``prepare`` of each form and the job's one scan, at 10k, 100k
or the full 1,331,167 files (1,281,167 training and 50,000 validation images in 1,000 classes).

Each image is the same 2-pixel JPEG (the file count is measured, not the bytes), named as in ImageNet
(``<wnid>_<n>.JPEG``, ``ILSVRC2012_val_<n>.JPEG``; the wnids are the scan tree's, in ImageNet's ``n0...`` form).
The tree of each size is built once under ``work_dir`` (``base-<size>/``: ``train/<wnid>/`` and a flat ``val/``)
and kept; the forms are hard links to it (``kaggle``, ``flat_val`` with a wnid ``val.txt``, ``folders``) or
archives made from it. Every DEST is new and removed after its measurement.

With ``--steps job,stage`` also a 4-rank job's time from launch to its first step and staging
(:mod:`tutorial_lib.bench.scale_job`).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import tarfile
import time
from functools import partial
from pathlib import Path

from tutorial_lib.bench.disk import settle
from tutorial_lib.data.names import DEVKIT_TAR, TRAIN_TAR, VAL_TAR
from tutorial_lib.engine.errors import ConfigError

SIZES = {"10k": 10_000, "100k": 100_000, "full": 1_331_167}
FULL_TRAIN, FULL_VAL, CLASSES = 1_281_167, 50_000, 1_000


def _tiny_jpeg() -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (2, 2), (120, 60, 30)).save(out, "JPEG")
    return out.getvalue()


def split_counts(files: int) -> tuple[int, int]:
    """(training, validation) images of a tree of ``files`` images, in ImageNet's proportion."""
    val = max(CLASSES, round(files * FULL_VAL / (FULL_TRAIN + FULL_VAL)))
    return files - val, val


def wnids() -> list[str]:
    """1,000 wnids in ImageNet's form (``n01440764`` first), sorted."""
    return [f"n{1440764 + label * 37:08d}" for label in range(CLASSES)]


def _member(name: str, data: bytes) -> bytes:
    """One tar member (header, bytes, padding) of a regular file ``name`` holding ``data``."""
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), 1_600_000_000, 0o644
    return info.tobuf(tarfile.GNU_FORMAT) + data + bytes(-len(data) % tarfile.BLOCKSIZE)


def _tar_bytes(names, data: bytes) -> bytes:
    """A whole tar (end blocks included) of files ``names``, each holding ``data``."""
    return b"".join(_member(name, data) for name in names) + bytes(2 * tarfile.BLOCKSIZE)


def train_names(files: int) -> dict[str, list[str]]:
    """The training file names of each wnid in a tree of ``files`` images."""
    train, _ = split_counts(files)
    return {wnid: [f"{wnid}_{index + 1}.JPEG" for index in range(train // CLASSES + (label < train % CLASSES))]
            for label, wnid in enumerate(wnids())}


def val_truth(files: int) -> dict[str, str]:
    """``{validation file name: wnid}`` of a tree of ``files`` images (not in class order, as in ImageNet)."""
    classes, (_, val) = wnids(), split_counts(files)
    return {f"ILSVRC2012_val_{n:08d}.JPEG": classes[(n * 7919) % CLASSES] for n in range(1, val + 1)}


def build_base(root: Path, files: int) -> dict:
    """``root/train/<wnid>/`` and flat ``root/val/`` with ``files`` images (reused when built before); returns
    ``{"files": files, "val": {file name: wnid}}``. The tree is one tar stream made in memory and written by
    GNU tar (a Python ``write_bytes`` per file ran at ~550 files/s on the loaded machine)."""
    marker = root / "scale_tree.json"
    if marker.is_file() and json.loads(marker.read_text())["files"] == files:
        return json.loads(marker.read_text())
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    data, truth = _tiny_jpeg(), val_truth(files)
    proc = subprocess.Popen(["tar", "-x", "-f", "-", "-C", str(root)], stdin=subprocess.PIPE)
    try:
        for wnid, names in train_names(files).items():
            proc.stdin.write(b"".join(_member(f"train/{wnid}/{name}", data) for name in names))
        proc.stdin.write(b"".join(_member(f"val/{name}", data) for name in truth))
        proc.stdin.write(bytes(2 * tarfile.BLOCKSIZE))
        proc.stdin.close()
    finally:
        if proc.wait() != 0:
            raise RuntimeError(f"work_dir: tar could not write the tree under {root}. Fix: check its free space.")
    state = {"files": files, "val": truth}
    marker.write_text(json.dumps(state))
    return state


def _link_tree(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst, copy_function=os.link)


def make_form(base: Path, state: dict, form: str, root: Path) -> Path:
    """SOURCE of ``form`` under ``root`` from the base tree (hard links), or archives made in memory; reused if
    there."""
    if root.is_dir():
        return root
    tmp = root.with_name(f".{root.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    if form == "kaggle":
        data = tmp / "ILSVRC" / "Data" / "CLS-LOC"
        data.mkdir(parents=True)
        _link_tree(base / "train", data / "train")
        _link_tree(base / "val", data / "val")
        (tmp / "LOC_val_solution.csv").write_text("ImageId,PredictionString\n" + "".join(
            f"{Path(n).stem},{w} 1 1 2 2\n" for n, w in sorted(state["val"].items())))
    elif form == "flat_val":
        _link_tree(base / "train", tmp / "train")
        _link_tree(base / "val", tmp / "val")
        (tmp / "val.txt").write_text("".join(f"{n} {w}\n" for n, w in sorted(state["val"].items())))
    elif form == "folders":
        _link_tree(base / "train", tmp / "train")
        for name, wnid in state["val"].items():
            (tmp / "val" / wnid).mkdir(parents=True, exist_ok=True)
            os.link(base / "val" / name, tmp / "val" / wnid / name)
    else:
        _archives(state, tmp)
    os.replace(tmp, root)
    return root


def _archives(state: dict, root: Path) -> None:
    """The three original archives of the tree of ``state`` (made in memory: no file of the tree is read)."""
    from tutorial_lib.bench.fake_forms import _add_bytes, _meta_mat

    classes, data = wnids(), _tiny_jpeg()
    with open(root / TRAIN_TAR, "wb") as outer:
        for wnid, names in train_names(state["files"]).items():
            outer.write(_member(f"{wnid}.tar", _tar_bytes(names, data)))
        outer.write(bytes(2 * tarfile.BLOCKSIZE))
    with open(root / VAL_TAR, "wb") as tar:
        tar.write(_tar_bytes(sorted(state["val"]), data))
    ids = {wnid: i + 1 for i, wnid in enumerate(classes)}
    truth = "".join(f"{ids[state['val'][n]]}\n" for n in sorted(state["val"]))
    with tarfile.open(root / DEVKIT_TAR, "w:gz") as tar:
        _add_bytes(tar, "ILSVRC2012_devkit_t12/data/meta.mat", _meta_mat(classes, {w: w for w in classes}, ids))
        _add_bytes(tar, "ILSVRC2012_devkit_t12/data/ILSVRC2012_validation_ground_truth.txt", truth.encode())


def _record(step: str, form: str, files: int, seconds: float, load: float, **extra) -> dict:
    return {"kind": "scale", "status": "ok", "step": step, "form": form, "files": files, "seconds": seconds,
            "files_per_sec": files / seconds if seconds else None, "load_average_1m": load, "device": "cpu",
            "cpus": os.cpu_count(), "timestamp": time.time(), **extra}


def _gnu_tar_record(source: Path, dest: Path, files: int, cold_cache: bool = False, quiet_s: int = 5) -> dict:
    """GNU tar extracting the archives of ``source`` into a new ``dest`` (kept: deleting a million files keeps
    the disk busy for minutes, see :mod:`.disk`), timed until on disk after the disk went quiet: the yardstick
    of ``prepare``'s extraction at the same size, on the same disk."""
    from tutorial_lib.bench.extract import gnu_tar

    settled = settle(dest.parent, cold_cache, quiet_s)
    load, began = os.getloadavg()[0], time.perf_counter()
    gnu_tar(source, dest)
    os.sync()
    return _record("tar", "archives", files, time.perf_counter() - began, load, **settled)


STEPS = ("prepare", "tar", "scan", "job", "stage")


def _prepare_record(source: Path, dest: Path, form: str, files: int, cold_cache: bool = False,
                    quiet_s: int = 5) -> dict:
    """``prepare`` of ``source`` into a new ``dest`` (kept for the later steps), timed until on disk after the
    disk went quiet (and, ``cold_cache``, the caches were dropped)."""
    from tutorial_lib.data.prepare import prepare

    settled = settle(dest.parent, cold_cache, quiet_s)
    load, began = os.getloadavg()[0], time.perf_counter()
    summary = prepare(source, dest, progress=False, subset=True)
    os.sync()
    return _record("prepare", form, files, time.perf_counter() - began, load, made=summary["made"],
                   train_images=summary["train"], val_images=summary["val"], **settled)


def _tar_beside_prepare(source: Path, work: Path, size: str, files: int, rounds: int,
                        cold_cache: bool = False, quiet_s: int = 5) -> tuple[list[dict], Path]:
    """``rounds`` pairs of GNU tar and ``prepare`` on the archives, in alternating order, each into a folder of
    its own and nothing deleted until all are timed; returns the records and the last prepared DEST (kept)."""
    dests = [(work / f"tar-{size}-{r}", work / f"dest-archives-{size}-{r}") for r in range(rounds)]
    for path in (p for pair in dests for p in pair):
        shutil.rmtree(path, ignore_errors=True)  # an interrupted earlier run's
    needed, free = 2 * rounds * files * 5000, shutil.disk_usage(work).free  # a block and an inode a tiny file
    if needed > free:
        raise ConfigError(f"rounds: {rounds} pairs at {size} need about {needed / 1e9:.0f} GB, {work} has "
                         f"{free / 1e9:.0f} GB free. Fix: fewer rounds, or a --work-dir on a larger disk.")
    records = []
    for round_, (tar_dest, dest) in enumerate(dests):
        pair = [partial(_gnu_tar_record, source, tar_dest, files, cold_cache, quiet_s),
                partial(_prepare_record, source, dest, "archives", files, cold_cache, quiet_s)]
        records += [{**side(), "round": round_} for side in (pair if round_ % 2 == 0 else pair[::-1])]
    for path in [p for pair in dests for p in pair][:-1]:
        shutil.rmtree(path)
    return records, dests[-1][1]


def measure_scale(size: str = "10k", work_dir: str | os.PathLike = "data/scale",
                  forms=("kaggle", "flat_val", "folders", "archives"), steps=("prepare", "scan"),
                  rounds: int = 1, cold_cache: bool = False, quiet_s: int = 5) -> list[dict]:
    """For each form: ``prepare`` (seconds, to disk with sync; ``tar``: GNU tar on the same archives beside it,
    ``rounds`` pairs in alternating order, each record naming its round), the job's one scan of the prepared DEST
    (:func:`tutorial_lib.data.file_index.build`), a 4-rank job's launch to first step (``job``) and staging
    (``stage``) of it, as ``steps`` asks. ``size`` is 10k, 100k or full; ``cold_cache``: drop the caches before
    each of the paired runs (root; see :func:`tutorial_lib.bench.disk.drop_page_cache`); ``quiet_s``: seconds of
    a quiet disk before each timed ``prepare`` and ``tar``."""
    from tutorial_lib.bench.scale_job import measure_first_step, measure_stage
    from tutorial_lib.data import file_index

    if size not in SIZES:
        raise ConfigError(f"files: {size!r} is not one of {', '.join(SIZES)}. Fix: pass one of them.")
    unknown = sorted(set(steps) - set(STEPS))
    if unknown:
        raise ConfigError(f"steps: {', '.join(unknown)} not known. Fix: pick from {', '.join(STEPS)}.")
    if rounds < 1:
        raise ConfigError(f"rounds: {rounds} is not a count of rounds. Fix: pass 1 or more.")
    files, work = SIZES[size], Path(work_dir)
    started, built = time.perf_counter(), not (work / f"base-{size}" / "scale_tree.json").is_file()
    state = build_base(work / f"base-{size}", files)
    records = [_record("build", "base", files, time.perf_counter() - started, os.getloadavg()[0])] if built else []
    for form in forms:
        source = make_form(work / f"base-{size}", state, form, work / f"{form}-{size}")
        if "tar" in steps and form == "archives":  # GNU tar on the same archives beside prepare, interleaved
            paired, dest = _tar_beside_prepare(source, work, size, files, rounds, cold_cache, quiet_s)
            records += [r for r in paired if r["step"] == "tar" or "prepare" in steps]
        else:
            dest = work / f"dest-{form}-{size}"
            shutil.rmtree(dest, ignore_errors=True)
            record = _prepare_record(source, dest, form, files, quiet_s=quiet_s)
            records += [record] if "prepare" in steps else []
        if "scan" in steps:
            load, began = os.getloadavg()[0], time.perf_counter()
            index = file_index.build(dest, work / f"run-{form}-{size}")
            records.append(_record("scan", form, files, time.perf_counter() - began, load,
                                   index_bytes=index.stat().st_size))
            shutil.rmtree(work / f"run-{form}-{size}")
        if "job" in steps:
            load, job = os.getloadavg()[0], measure_first_step(dest, work / "runs")
            records.append(_record("job", form, files, job.pop("seconds"), load, **job))
        if "stage" in steps:
            load, staged = os.getloadavg()[0], measure_stage(dest, work / "stage")
            records.append(_record("stage", form, files, staged.pop("seconds"), load, **staged))
        shutil.rmtree(dest)
    return records
