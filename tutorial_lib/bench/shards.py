"""Packed shards against class folders, measured (``python -m tutorial_lib.bench shards``; ``results/shards.jsonl``).

Two sets, each made once under ``work_dir`` and packed (``step: pack``):

* ``jpeg``: a generated ImageNet-like set of real JPEG size (500x375, about 110 KB; :mod:`.fake_imagenet`),
* ``10k``, ``100k``, ``full``: :mod:`.scale`'s tree of tiny files at that count (``full``: ImageNet's 1,331,167),
  where the file count, not the bytes, is what is measured.

Then, in interleaved rounds (the order turns each round), each run started after the disk went quiet
(:func:`.disk.settle`) and timed until ``sync`` returns:

* ``stage``: :func:`tutorial_lib.data.staging.stage` of the class folders (``format: files``) and of the pack
  (``shards``) to a new node-local folder, and GNU ``cp -r`` of the pack (``copy``: the bytes with no per-file
  work, the floor). Every copy is kept until all are timed, then deleted.
* ``load``: the trainer's CPU loader (``loaders_for``, class folders or shards) over ``load_images`` training
  images with 1 and 2 workers (``jpeg`` set), images per second from its first batch on.
* ``first_step``: a 4-rank job's launch to its first training step (:func:`.scale_job.measure_first_step`),
  from the class folders and from the shards.

Every record names the step, the format, the images in the set, the seconds, the load and the device; the table
in docs/imagenet.md is made from them (:mod:`.shards_table`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

from tutorial_lib.bench.disk import settle
from tutorial_lib.engine.errors import ConfigError

STEPS = ("pack", "stage", "load", "first_step")
SETS = ("jpeg", "10k", "100k", "full")


def _record(step: str, fmt: str, data_set: str, images: int, seconds: float, load: float, **extra) -> dict:
    return {"kind": "shards", "status": "ok", "step": step, "format": fmt, "set": data_set, "files": images,
            "seconds": seconds, "load_average_1m": load, "device": "cpu", "cpus": os.cpu_count(),
            "timestamp": time.time(), **extra}


# the "jpeg" set: 20 classes of 500x375 JPEGs, 5 validation images each; its size is refused naming --jpeg-images
# (r43aa: refused naming classes, not a shards flag)
JPEG_CLASSES, JPEG_SIZE, JPEG_VAL_PER_CLASS = 20, (500, 375), 5
JPEG_SIZED_BY = ("--jpeg-images", "fewer --jpeg-images (e.g. --jpeg-images 3000)")


def _jpeg_per_class(jpeg_images: int) -> int:
    return max(1, jpeg_images // JPEG_CLASSES)


def make_set(data_set: str, work: Path, jpeg_images: int) -> Path:
    """The class folders of ``data_set`` under ``work`` (made once, reused)."""
    if data_set == "jpeg":
        from tutorial_lib.bench.fake_imagenet import make_fake_imagenet

        return make_fake_imagenet(work / f"jpeg-{jpeg_images}", JPEG_CLASSES, _jpeg_per_class(jpeg_images),
                                  JPEG_SIZE, val_per_class=JPEG_VAL_PER_CLASS, sized_by=JPEG_SIZED_BY)
    from tutorial_lib.bench.scale import SIZES, build_base, make_form

    base = work / f"base-{data_set}"
    state = build_base(base, SIZES[data_set])
    return make_form(base, state, "folders", work / f"folders-{data_set}")


def _images(root: Path) -> int:
    from tutorial_lib.data.file_index import scan

    return sum(len(files) for split in ("train", "val") for files in scan(root / split)["files"])


def _pack(prepared: Path, shards: Path, data_set: str, images: int, quiet_s: int) -> dict:
    from tutorial_lib.data.pack import pack

    shutil.rmtree(shards, ignore_errors=True)
    settled = settle(shards.parent, False, quiet_s)
    load, began = os.getloadavg()[0], time.perf_counter()
    done = pack(prepared, shards, progress=False)
    os.sync()
    return _record("pack", "shards", data_set, images, time.perf_counter() - began, load, bytes=done["bytes"],
                   shards=done["shards"], **settled)


def _copy(fmt: str, source: Path, dest: Path) -> None:
    if fmt == "copy":
        subprocess.run(["cp", "-r", str(source), str(dest)], check=True)
        return
    from tutorial_lib.data import staging

    dest.mkdir()
    staging.stage(source, str(dest), run="bench", node="here")


def _stage_rounds(prepared: Path, shards: Path, data_set: str, images: int, rounds: int, work: Path,
                  quiet_s: int, emit) -> None:
    sides = {"files": prepared, "shards": shards, "copy": shards}
    made = []
    for round_ in range(rounds):
        for fmt in list(sides) if round_ % 2 == 0 else list(reversed(sides)):
            dest = work / f"stage-{data_set}-{fmt}-{round_}"
            shutil.rmtree(dest, ignore_errors=True)
            settled = settle(work, False, quiet_s)
            load, began = os.getloadavg()[0], time.perf_counter()
            _copy(fmt, sides[fmt], dest)
            os.sync()
            seconds = time.perf_counter() - began
            made.append(dest)
            emit(_record("stage", fmt, data_set, images, seconds, load, round=round_, **settled))
    for dest in made:
        shutil.rmtree(dest)


def load_speed(data_dir: Path, fmt: str, workers: int, images: int, batch_size: int = 32,
               image_size: int = 224) -> dict:
    """The trainer's CPU loader over about ``images`` training images of ``data_dir`` (``fmt``: files or shards):
    images per second from the first batch on, and the images read."""
    import torch

    from tutorial_lib.engine.config import make_config
    from tutorial_lib.engine.input.loaders import loaders_for

    cfg = make_config("smoke", dataset="imagefolder", data_format=fmt, data_dir=str(data_dir), workers=workers,
                      batch_size=batch_size, image_size=image_size, min_crop_scale=0.08)
    loaders = loaders_for(cfg, 0, 1, torch.device("cpu"))
    batches, read, began = iter(loaders.train_epoch(0)), 0, None
    for batch in batches:
        if began is None:
            began = time.perf_counter()  # after the workers' start and the first batch
            continue
        read += len(batch.targets) + batch.skipped
        if read >= images:
            break
    seconds = time.perf_counter() - began
    del batches, loaders  # the workers end
    return {"images": read, "seconds": seconds, "images_per_sec": read / seconds}


def _load_rounds(prepared: Path, shards: Path, images: int, workers: list[int], rounds: int, load_images: int,
                 emit) -> None:
    sides = {"files": prepared, "shards": shards}
    for round_ in range(rounds):
        for count in workers:
            for fmt in list(sides) if round_ % 2 == 0 else list(reversed(sides)):
                load = os.getloadavg()[0]
                measured = load_speed(sides[fmt], fmt, count, load_images)
                emit(_record("load", fmt, "jpeg", images, measured["seconds"], load, round=round_, workers=count,
                             images_read=measured["images"], images_per_sec=measured["images_per_sec"]))


def measure_shards(sets=("jpeg", "full"), steps=STEPS, rounds: int = 2, work_dir: str | os.PathLike = "data/shards",
                   jpeg_images: int = 3000, workers=(1, 2), load_images: int = 1024, quiet_s: int = 5,
                   emit=print) -> None:
    """Measure ``steps`` on each of ``sets`` (see the module's docstring), passing each record to ``emit`` as it is
    made. What the benchmark made is deleted once its runs are timed, except the generated sets (reused)."""
    unknown = sorted(set(steps) - set(STEPS)) + sorted(set(sets) - set(SETS))
    if unknown:
        raise ConfigError(f"steps, sets: {', '.join(unknown)} not known. Fix: steps of {', '.join(STEPS)}, sets of "
                          f"{', '.join(SETS)}.")
    if rounds < 1 or jpeg_images < 40 or load_images < 1 or not workers or min(workers) < 0:
        raise ConfigError(f"rounds, jpeg-images, load-images, workers: {rounds}, {jpeg_images}, {load_images}, "
                          f"{list(workers)} do not make a benchmark. Fix: 1 or more rounds, 40 or more JPEGs, 1 or "
                          "more images to load, worker counts of 0 or more.")
    work = Path(os.path.realpath(work_dir))  # as the kernel reads '..' after a link; staging refuses '..' (r43t)
    if "jpeg" in sets:  # before the work folder is made (r43ab: an empty one was left behind)
        from tutorial_lib.bench.fake_imagenet import check_set_fits

        check_set_fits(work, JPEG_CLASSES * (_jpeg_per_class(jpeg_images) + JPEG_VAL_PER_CLASS), JPEG_SIZE,
                       *JPEG_SIZED_BY)
    work.mkdir(parents=True, exist_ok=True)
    for data_set in sets:
        prepared = make_set(data_set, work, jpeg_images)
        images, shards = _images(prepared), work / f"shards-{data_set}"
        emit(_pack(prepared, shards, data_set, images, quiet_s))  # packed every time: pack is measured too
        if "stage" in steps:
            _stage_rounds(prepared, shards, data_set, images, rounds, work, quiet_s, emit)
        if "load" in steps and data_set == "jpeg":
            _load_rounds(prepared, shards, images, list(workers), rounds, load_images, emit)
        if "first_step" in steps:
            from tutorial_lib.bench.scale_job import measure_first_step

            for round_ in range(rounds):
                for fmt in ("files", "shards") if round_ % 2 == 0 else ("shards", "files"):
                    load = os.getloadavg()[0]
                    job = measure_first_step(shards if fmt == "shards" else prepared, work / "runs", data_format=fmt)
                    emit(_record("first_step", fmt, data_set, images, job.pop("seconds"), load, round=round_, **job))
        shutil.rmtree(shards)
        shutil.rmtree(work / "runs", ignore_errors=True)


def _opened(data_dir: Path, fmt: str, batch_size: int, image_size: int) -> tuple[int, int]:
    """Files one epoch of the trainer's loader (one process, no workers) opens, and the training images it read:
    class folders open a file per image read, shards only when a shard is not open yet (counted by the dataset)."""
    import torch

    from tutorial_lib.engine.config import make_config
    from tutorial_lib.engine.input.loaders import loaders_for

    cfg = make_config("smoke", dataset="imagefolder", data_format=fmt, data_dir=str(data_dir), workers=0,
                      batch_size=batch_size, image_size=image_size)
    loaders = loaders_for(cfg, 0, 1, torch.device("cpu"))
    dataset, reads = loaders.train.dataset, []
    read = dataset.read
    dataset.read = lambda index: reads.append(index) or read(index)  # every image read goes through read()
    images = sum(len(batch.targets) + batch.skipped for batch in loaders.train_epoch(0))
    return (dataset.opened if fmt == "shards" else len(reads)), images


def compare_formats(data_dir: str | os.PathLike, workers: int = 1, batch_size: int = 8, image_size: int = 64,
                    repeats: int = 3, stage_to: str | os.PathLike | None = None) -> dict:
    """Notebook 02's comparison on its own class folders: pack them (into a temporary folder, about 8 shards),
    then count the files an epoch opens in each format, time the trainer's loader (``workers``) and staging in
    ``repeats`` interleaved rounds. Returns the counts and Spreads; everything made is deleted."""
    import tempfile

    from tutorial_lib.bench.timing import Spread
    from tutorial_lib.data import staging
    from tutorial_lib.data.pack import pack

    source = Path(data_dir).absolute()
    images = _images(source)
    size_mb = sum(p.stat().st_size for p in source.rglob("*") if p.is_file()) / 1e6
    with tempfile.TemporaryDirectory(prefix="shards-", dir=stage_to) as tmp:
        shards = Path(tmp) / "shards"
        packed = pack(source, shards, shard_mb=max(size_mb / 8, 0.01), progress=False)
        sides = {"files": source, "shards": shards}
        opened = {fmt: _opened(root, fmt, batch_size, image_size) for fmt, root in sides.items()}
        load, stage = {fmt: [] for fmt in sides}, {fmt: [] for fmt in sides}
        for round_ in range(repeats):
            for fmt in list(sides) if round_ % 2 == 0 else list(reversed(sides)):
                load[fmt].append(load_speed(sides[fmt], fmt, workers, images, batch_size, image_size)["images_per_sec"])
                began = time.perf_counter()
                copy = staging.stage(sides[fmt], tmp, run=f"{fmt}-{round_}", node="here")
                os.sync()
                stage[fmt].append(time.perf_counter() - began)
                staging.remove(copy.path)
    return {"images": images, "train_images": opened["files"][1], "shards": packed["shards"], "workers": workers,
            "opened": {fmt: count for fmt, (count, _) in opened.items()},
            "load": {fmt: Spread.of(values) for fmt, values in load.items()},
            "stage": {fmt: Spread.of(values) for fmt, values in stage.items()}}
