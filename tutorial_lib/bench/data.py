"""Input-pipeline benchmarks: a generated ImageNet-like JPEG set, loader speed, and training fed from JPEGs.

* :func:`make_fake_imagenet` writes realistic-size JPEGs (500x375, about 110 KB, like ImageNet's
  average) in ImageNet layout, so decoding costs what it costs on the real data set.
* :func:`measure_loader`: the trainer's CPU pipeline (``CountingImageFolder`` + ``train_transform``
  in DataLoader workers): images/s, MB/s read, and the per-image cost of reading, decoding and
  augmenting in one process.
* :func:`measure_gpu_decode`: files read by threads, decoded in batches on the GPU with nvJPEG
  (``torchvision.io.decode_jpeg(device="cuda")``), cropped, resized and flipped on the GPU.
* :func:`measure_e2e`: the trainer's own step (:class:`tutorial_lib.engine.step.TrainStep`) fed by the
  trainer's own loader (``build_loaders`` with ``dataset="imagefolder"``), timed as the trainer runs.

Used by ``python -m tutorial_lib.bench data|e2e`` and by notebook 02.
"""

from __future__ import annotations

import io
import json
import math
import os
import random
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch

from tutorial_lib.bench.compute import bench_config, defaults, measure_training, release_memory
from tutorial_lib.engine.device import (
    compile_support,
    environment_facts,
    precision_support,
    resolve_device,
    synchronize,
)

FAKE_MARKER = "fake_imagenet.json"
DEFAULT_FAKE_DIR = "data/fake_imagenet"


# --------------------------------------------------------------------------- the generated data set
def _fake_image(seed: int, size: tuple[int, int], quality: int, path: Path) -> None:
    """One JPEG: a colour gradient, a few flat shapes and grainy noise (its amount sets the file size)."""
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    width, height = size
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    angle = rng.uniform(0, 2 * np.pi)
    ramp = np.cos(angle) * xx / width + np.sin(angle) * yy / height
    ramp = (ramp - ramp.min()) / (np.ptp(ramp) + 1e-6)
    start, end = rng.uniform(0, 255, 3).astype(np.float32), rng.uniform(0, 255, 3).astype(np.float32)
    pixels = start * (1 - ramp[..., None]) + end * ramp[..., None]
    image = Image.fromarray(pixels.clip(0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(image)
    for _ in range(int(rng.integers(4, 10))):
        x, y, r = rng.uniform(0, width), rng.uniform(0, height), rng.uniform(0.02, 0.25) * width
        colour = tuple(int(v) for v in rng.integers(0, 256, 3))
        box = [x - r, y - r, x + r * rng.uniform(0.5, 2), y + r * rng.uniform(0.5, 1.5)]
        (draw.ellipse if rng.random() < 0.5 else draw.rectangle)(box, fill=colour)
    sigma = rng.uniform(17, 30)
    grain = rng.standard_normal(((height + 1) // 2, (width + 1) // 2, 3), dtype=np.float32) * sigma
    grain = np.repeat(np.repeat(grain, 2, 0), 2, 1)[:height, :width]
    fine = rng.standard_normal((height, width, 3), dtype=np.float32) * (0.4 * sigma)
    out = np.asarray(image, dtype=np.float32) + grain + fine
    Image.fromarray(out.clip(0, 255).astype(np.uint8)).save(path, "JPEG", quality=quality)


def make_fake_imagenet(root: str | os.PathLike = DEFAULT_FAKE_DIR, classes: int = 2, per_class: int = 16,
                       size: tuple[int, int] = (500, 375), val_per_class: int | None = None, quality: int = 90,
                       seed: int = 0, workers: int | None = None, processes: bool | None = None) -> Path:
    """Write an ImageNet-layout JPEG set: ``root/{train,val}/n000000NN/n000000NN_I.JPEG``.

    Images are ``size`` (ImageNet's typical 500x375) and about 110 KB each. ``val_per_class``
    defaults to an eighth of ``per_class`` (at least 1). Idempotent: a set with the same settings is
    reused; the tree is built in a temporary folder and renamed into place. Images are made by
    ``workers`` threads, or processes (``processes``; default: for sets of 512 images or more).
    """
    root = Path(root)
    val_per_class = max(1, per_class // 8) if val_per_class is None else val_per_class
    settings = {"classes": classes, "per_class": per_class, "val_per_class": val_per_class, "size": list(size),
                "quality": quality, "seed": seed, "version": 1}
    marker = root / FAKE_MARKER
    if marker.is_file() and json.loads(marker.read_text()) == settings:
        return root
    from tutorial_lib.engine.data import check_replaceable, publish_tree

    check_replaceable(root, FAKE_MARKER, "root: pass make_fake_imagenet a new or empty folder")
    root.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".fake-imagenet-", dir=root.parent))
    jobs = []
    for split, count in (("train", per_class), ("val", val_per_class)):
        for label in range(classes):
            folder = staging / split / f"n{label:08d}"
            folder.mkdir(parents=True)
            for index in range(count):
                image_seed = seed * 1_000_003 + label * 10_007 + index + (0 if split == "train" else 500_009)
                jobs.append((image_seed, tuple(size), quality, folder / f"n{label:08d}_{index}.JPEG"))
    workers = workers or min(32, os.cpu_count() or 1)
    if processes if processes is not None else len(jobs) >= 512 and workers > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["tutorial_lib.bench.data"])  # imported once, then forked per worker
        with ProcessPoolExecutor(workers, mp_context=context) as pool:
            list(pool.map(_fake_image, *zip(*jobs, strict=True), chunksize=16))
    else:
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(lambda job: _fake_image(*job), jobs))
    (staging / FAKE_MARKER).write_text(json.dumps(settings))
    return publish_tree(staging, root, FAKE_MARKER, "root: pass make_fake_imagenet a new or empty folder")


def prepare_fake_imagenet(root: str | os.PathLike = DEFAULT_FAKE_DIR, classes: int = 2, per_class: int = 16,
                          size: tuple[int, int] = (500, 375), batch_size: int = 8, loader_batches: int = 4,
                          device: str | torch.device | None = "auto") -> Path:
    """The data set the benchmarks read: ``root`` as it is if it already holds images that were not
    generated here (a real ImageNet, say), else :func:`make_fake_imagenet` with at least enough
    training images for ``loader_batches + 4`` batches and the device's default e2e steps."""
    root = Path(root)
    if root.is_dir() and not (root / FAKE_MARKER).is_file() and any(root.iterdir()):
        from tutorial_lib.engine.data import check_imagefolder

        return check_imagefolder(root)
    d = defaults(device)
    needed = batch_size * max(loader_batches + 4, d["e2e_steps"] + d["warmup"] + 1)
    return make_fake_imagenet(root, classes, max(per_class, math.ceil(needed / classes)), tuple(size))


def dataset_summary(data_dir: str | os.PathLike) -> dict:
    """Image count, classes and mean file size of ``data_dir/train``."""
    from tutorial_lib.engine.data import CountingImageFolder

    dataset = CountingImageFolder(_split_dir(data_dir))
    sizes = [os.path.getsize(path) for path, _ in dataset.samples]
    return {"images": len(sizes), "classes": len(dataset.classes),
            "mean_file_kb": statistics.fmean(sizes) / 1e3 if sizes else 0.0}


def _split_dir(data_dir, split: str = "train") -> Path:
    root = Path(data_dir)
    return root / split if (root / split).is_dir() else root


def _order(length: int, count: int, seed: int = 0) -> list[int]:
    """``count`` indices: shuffled passes over the data set, as many as needed."""
    generator = torch.Generator().manual_seed(seed)
    order: list[int] = []
    while len(order) < count:
        order += torch.randperm(length, generator=generator).tolist()
    return order[:count]


# --------------------------------------------------------------------------- CPU loader
def decode_cost(data_dir: str | os.PathLike, image_size: int, images: int = 32, repeats: int = 1) -> dict:
    """Milliseconds per image to read the file, decode it (PIL) and augment it, in this one process.

    With ``repeats`` > 1 the same images are timed that many times; each figure is the median
    round, with its range in ``<figure>_low``/``_high``.
    """
    if repeats > 1:
        from tutorial_lib.bench.timing import Spread, store

        rounds = [decode_cost(data_dir, image_size, images) for _ in range(repeats)]
        merged = dict(rounds[0])
        for key in ("read_ms_per_image", "decode_ms_per_image", "augment_ms_per_image"):
            store(merged, key, Spread.of([r[key] for r in rounds]))
        return {**merged, "repeats": repeats}
    from PIL import Image

    from tutorial_lib.engine.data import train_transform

    dataset_dir = _split_dir(data_dir)
    paths = sorted(dataset_dir.rglob("*"))
    paths = [p for p in paths if p.suffix.lower() in (".jpeg", ".jpg", ".png")][:images]
    transform = train_transform(image_size)
    read = decode = augment = 0.0
    for path in paths:
        t0 = time.perf_counter()
        data = path.read_bytes()
        t1 = time.perf_counter()
        image = Image.open(io.BytesIO(data)).convert("RGB")
        t2 = time.perf_counter()
        transform(image)
        t3 = time.perf_counter()
        read, decode, augment = read + t1 - t0, decode + t2 - t1, augment + t3 - t2
    n = max(1, len(paths))
    return {"read_ms_per_image": 1000 * read / n, "decode_ms_per_image": 1000 * decode / n,
            "augment_ms_per_image": 1000 * augment / n, "cost_sample_images": len(paths)}


def measure_loader(data_dir: str | os.PathLike = DEFAULT_FAKE_DIR, workers: int = 0, batch_size: int = 8,
                   image_size: int = 64, batches: int = 4, warmup_batches: int | None = None, seed: int = 0,
                   min_time: float = 0.0, with_cost: bool = True) -> dict:
    """Images/s and MB/s of the trainer's CPU JPEG pipeline with ``workers`` DataLoader workers.

    The clock starts when the first ``warmup_batches`` batches (default: one per worker, at least
    one) have arrived, so worker start-up is left out (reported as ``startup_s``), and stops at the
    end of ``batches`` more batches, or later, once ``min_time`` seconds have passed; use several
    batches per worker for a steady-state rate. MB/s is the size of the JPEG files those batches
    read. Also reports :func:`decode_cost` (unless ``with_cost`` is False).
    """
    from torch.utils.data import DataLoader

    from tutorial_lib.engine.data import CountingImageFolder, collate_skipping, train_transform

    dataset = CountingImageFolder(_split_dir(data_dir), train_transform(image_size))
    warmup_batches = max(1, workers) if warmup_batches is None else warmup_batches
    most = batches if min_time <= 0 else max(batches, 100_000 // batch_size)  # open-ended when timed
    order = _order(len(dataset), (warmup_batches + most) * batch_size, seed)
    loader = DataLoader(dataset, batch_size=batch_size, sampler=order, num_workers=workers,
                        collate_fn=collate_skipping, prefetch_factor=4 if workers else None)
    started = time.perf_counter()
    iterator = iter(loader)
    for _ in range(warmup_batches):
        next(iterator)
    t0 = time.perf_counter()
    count = done = 0
    while done < most and (done < batches or time.perf_counter() - t0 < min_time):
        count, done = count + len(next(iterator).targets), done + 1
    elapsed = time.perf_counter() - t0
    del iterator
    batches = done
    timed = order[warmup_batches * batch_size:(warmup_batches + done) * batch_size]
    nbytes = sum(os.path.getsize(dataset.samples[i][0]) for i in timed)
    record = {"kind": "data", "status": "ok", "pipeline": "cpu-dataloader", "workers": workers,
              "batch_size": batch_size, "image_size": image_size, "batches": batches,
              "warmup_batches": warmup_batches, "data_dir": str(data_dir), "dataset_images": len(dataset),
              "images_per_sec": count / elapsed, "mb_per_sec": nbytes / 1e6 / elapsed,
              "mean_file_kb": nbytes / 1e3 / max(1, len(timed)), "startup_s": t0 - started,
              "images_per_sec_per_worker": count / elapsed / max(1, workers)}
    if with_cost:
        record.update(decode_cost(data_dir, image_size, images=min(32, len(dataset))))
    return {**record, "env": environment_facts("cpu"), "timestamp": time.time()}


# --------------------------------------------------------------------------- GPU decoding
def gpu_augment(images: list[torch.Tensor], image_size: int, min_crop_scale: float = 0.08,
                hflip: bool = True) -> torch.Tensor:
    """RandomResizedCrop + flip + ImageNet normalisation of decoded uint8 CHW images, on their device."""
    from torchvision.transforms import RandomResizedCrop

    from tutorial_lib.engine.data import IMAGENET_MEAN, IMAGENET_STD

    out = []
    for image in images:
        top, left, height, width = RandomResizedCrop.get_params(image, scale=(min_crop_scale, 1.0),
                                                                ratio=(3 / 4, 4 / 3))
        crop = image[None, :, top:top + height, left:left + width].float()
        crop = torch.nn.functional.interpolate(crop, size=(image_size, image_size), mode="bilinear",
                                               antialias=True, align_corners=False)
        out.append(crop.flip(-1) if hflip and random.random() < 0.5 else crop)
    batch = torch.cat(out) / 255.0
    device = batch.device
    mean = torch.tensor(IMAGENET_MEAN, device=device).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD, device=device).view(1, 3, 1, 1)
    return (batch - mean) / std


def measure_gpu_decode(data_dir: str | os.PathLike = DEFAULT_FAKE_DIR, batch_size: int = 8, image_size: int = 64,
                       batches: int = 4, warmup_batches: int = 1, device: str | torch.device | None = "cuda",
                       read_threads: int = 8, seed: int = 0) -> dict:
    """Images/s of reading JPEG files with threads and decoding + augmenting them in batches on the GPU.

    nvJPEG does the decoding (``decode_jpeg(list_of_files, device="cuda")``); the crops, resizes
    and flips run on the GPU too. The next batch's files are read while this one is decoded.
    ``device="cpu"`` runs the same code with torchvision's CPU decoder (for tests). On a machine
    without a GPU asking for cuda gives ``status: "skipped"``.
    """
    import warnings

    with warnings.catch_warnings():  # torchvision 0.29 deprecates its image I/O in favour of TorchCodec
        warnings.simplefilter("ignore", DeprecationWarning)
        return _gpu_decode(data_dir, batch_size, image_size, batches, warmup_batches, device, read_threads, seed)


def _gpu_decode(data_dir, batch_size, image_size, batches, warmup_batches, device, read_threads, seed) -> dict:
    from torchvision.io import ImageReadMode, decode_jpeg, read_file

    from tutorial_lib.engine.data import CountingImageFolder

    record = {"kind": "data", "pipeline": "gpu-decode", "workers": 0, "read_threads": read_threads,
              "batch_size": batch_size, "image_size": image_size, "batches": batches,
              "warmup_batches": warmup_batches, "data_dir": str(data_dir)}
    if device != "cpu" and not torch.cuda.is_available():
        return {**record, "status": "skipped", "reason": "no CUDA GPU here (nvJPEG decoding needs one)",
                "env": environment_facts("cpu"), "timestamp": time.time()}
    device = resolve_device(device)
    if device.type == "cpu":
        record["pipeline"] = "torchvision-decode-cpu"
    dataset = CountingImageFolder(_split_dir(data_dir))
    order = _order(len(dataset), (warmup_batches + batches) * batch_size, seed)
    paths = [dataset.samples[i][0] for i in order]
    groups = [paths[i:i + batch_size] for i in range(0, len(paths), batch_size)]
    decode_s, count, t0 = 0.0, 0, time.perf_counter()
    with ThreadPoolExecutor(read_threads) as pool:
        pending = pool.map(read_file, groups[0])
        for index in range(len(groups)):
            if index == warmup_batches:
                synchronize(device)
                t0, decode_s, count = time.perf_counter(), 0.0, 0
            files = list(pending)
            if index + 1 < len(groups):
                pending = pool.map(read_file, groups[index + 1])
            d0 = time.perf_counter()
            decoded = decode_jpeg(files, mode=ImageReadMode.RGB, device=device)
            synchronize(device)
            decode_s += time.perf_counter() - d0
            batch = gpu_augment(decoded, image_size)
            synchronize(device)
            count += len(batch)
    elapsed = time.perf_counter() - t0
    nbytes = sum(os.path.getsize(p) for p in paths[warmup_batches * batch_size:])
    return {**record, "status": "ok", "decode_device": str(device), "images_per_sec": count / elapsed,
            "mb_per_sec": nbytes / 1e6 / elapsed, "decode_ms_per_image": 1000 * decode_s / max(1, count),
            "output_shape": list(batch.shape), "env": environment_facts(device), "timestamp": time.time()}


# --------------------------------------------------------------------------- training fed from JPEGs
def measure_e2e(data_dir: str | os.PathLike = DEFAULT_FAKE_DIR, arch: str | None = None, precision: str = "fp32",
                channels_last: bool = False, batch_size: int | None = None, image_size: int | None = None,
                steps: int | None = None, warmup: int | None = None, workers: int = 2, compile_mode: str | None = None,
                device: str | torch.device | None = "auto", reference: bool = True, min_time: float = 0.0,
                input_pipeline: str | None = None) -> dict:
    """Training images/s when the trainer's own loader feeds the trainer's own step from the JPEG files.

    The same objects the trainer uses (:func:`tutorial_lib.engine.data.build_loaders` with
    ``dataset="imagefolder"`` and :class:`tutorial_lib.engine.step.TrainStep`), timed the way the
    trainer runs: the host queues steps without waiting for each one (one synchronisation at the
    end), so loading the next batch overlaps the device's work. ``data_wait_fraction`` is the share
    of wall time the loop spent in ``next(loader)``. ``compile_mode`` None takes the device's profile
    (``gpu``: torch.compile default; ``smoke``: none), as the trainer does. With ``reference`` the same
    step on synthetic batches (no input pipeline) is measured too (``synthetic_images_per_sec``).
    The timed steps go on past ``steps`` until ``min_time`` seconds have passed. ``input_pipeline``
    None takes the profile's (``gpu``: decode and augment on the device, as the trainer does).
    """
    from tutorial_lib.engine.gpu_input import loaders_for
    from tutorial_lib.engine.step import TrainStep

    device = resolve_device(device)
    d = defaults(device)
    if channels_last == "auto":
        channels_last = device.type == "cuda"
    if compile_mode is None:
        compile_mode = bench_config(device).compile
    if input_pipeline is None:
        input_pipeline = bench_config(device).input_pipeline
    s = dict(arch=arch or d["arch"], precision=precision, channels_last=bool(channels_last), compile=compile_mode,
             batch_size=batch_size or d["batch_size"], image_size=image_size or d["image_size"],
             steps=steps or d["e2e_steps"], warmup=d["warmup"] if warmup is None else warmup, workers=workers,
             device=device.type, data_dir=str(data_dir), input_pipeline=input_pipeline)
    record = {"kind": "e2e", **s, "env": environment_facts(device), "timestamp": time.time()}
    reason = precision_support(precision, device) or compile_support(compile_mode, device)
    if reason:
        return {**record, "status": "skipped", "reason": reason}
    cfg = bench_config(device, dataset="imagefolder", data_dir=str(data_dir), arch=s["arch"],
                       precision=precision, channels_last=s["channels_last"], compile=compile_mode,
                       batch_size=s["batch_size"], image_size=s["image_size"], workers=workers,
                       input_pipeline=input_pipeline)
    loaders = loaders_for(cfg, 0, 1, device)
    step = TrainStep(cfg, loaders.num_classes, device, steps_per_epoch=len(loaders.train))

    def batches(source):
        epoch = 0
        while True:
            yield from source.train_epoch(epoch)
            epoch += 1

    stream, wait, images = batches(loaders), 0.0, 0
    for _ in range(s["warmup"]):
        loss = step(next(stream))
    synchronize(device)
    started, done = time.perf_counter(), 0
    while done < s["steps"] or time.perf_counter() - started < min_time:
        done += 1
        t0 = time.perf_counter()
        batch = next(stream)
        wait += time.perf_counter() - t0
        loss = step(batch)
        images += len(batch.targets)
    float(loss)  # waits for the last step, as the trainer's loss logging does
    synchronize(device)
    elapsed = time.perf_counter() - started
    stream.close()
    record.update(status="ok", images_per_sec=images / elapsed, data_wait_fraction=wait / elapsed,
                  step_time_ms=1000 * elapsed / done, timed_steps=done, train_images=loaders.train_images,
                  num_classes=loaders.num_classes, timer="time.perf_counter (one synchronisation at the end)")
    del step, loaders, batch
    release_memory(device)
    if reference:
        synthetic = measure_training(s["arch"], precision, s["channels_last"], s["batch_size"], s["image_size"],
                                     s["steps"], s["warmup"], compile_mode, device,
                                     num_classes=record["num_classes"])
        record["synthetic_images_per_sec"] = synthetic.get("images_per_sec")
    return record


def plot_loader_vs_model(loader_records: list[dict], model_record: dict, ax=None):
    """Bars: images/s each input pipeline delivers; a line: images/s the model trains at.

    Bars below the line mean the accelerator waits for data with that pipeline.
    """
    from tutorial_lib.lessons.plots import plot_bars

    ok = [r for r in loader_records if r.get("status") == "ok"]
    labels = [f"{r['workers']} worker{'s' * (r['workers'] != 1)}" if r["pipeline"] == "cpu-dataloader"
              else r["pipeline"] for r in ok]
    ax = plot_bars(labels, [r["images_per_sec"] for r in ok], "images/s", ax=ax,
                   title="Is the model waiting for data?")
    if model_record.get("status") == "ok":
        rate = model_record["images_per_sec"]
        ax.axhline(rate, color="black", linestyle="--", label=f"model trains at {rate:,.0f} img/s")
        ax.set_ylim(top=max(ax.get_ylim()[1], rate * 1.15))
        ax.legend(fontsize="small")
    return ax


def worker_counts(cores: int | None = None) -> list[int]:
    """DataLoader worker counts worth trying: 0, 1, 2, 4, ... up to ``cores`` (default: the CPUs
    this process may use), with ``cores`` itself last."""
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    counts = [0] + [2**k for k in range(int(math.log2(max(1, cores))) + 1)]
    return sorted(set(counts + [cores]))


def workers_needed(model_images_per_sec: float, images_per_sec_per_worker: float) -> int:
    """Loader workers (CPU cores) needed to keep up with a model at the measured per-worker speed."""
    if images_per_sec_per_worker <= 0:
        return 0
    return math.ceil(model_images_per_sec / images_per_sec_per_worker)
