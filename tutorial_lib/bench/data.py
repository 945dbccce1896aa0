"""Input-pipeline benchmarks: loader speed of both input pipelines, and training fed from JPEGs.

* :func:`measure_loader`: the trainer's CPU pipeline (``CountingImageFolder`` + ``train_transform``
  in DataLoader workers): images/s, MB/s read, and the per-image cost of reading, decoding and
  augmenting in one process.
* :func:`measure_gpu_pipeline`: the trainer's GPU pipeline (:func:`tutorial_lib.engine.input.loaders.build_gpu_loaders`:
  workers read file bytes, the device decodes and augments in batches); on a CPU the same code with
  torchvision's CPU decoder.
* :func:`measure_e2e`: the trainer's own step (:class:`tutorial_lib.engine.step.TrainStep`) fed by the
  trainer's own loaders (:func:`tutorial_lib.engine.input.loaders.loaders_for`, either input pipeline), timed as
  the trainer runs.

The generated ImageNet-like JPEG set is :mod:`tutorial_lib.bench.fake_imagenet` (its names are
re-exported here). Used by ``python -m tutorial_lib.bench data|e2e`` and by notebook 02.
"""

from __future__ import annotations

import math
import os
import time

import torch

from tutorial_lib.bench.compute import bench_config, defaults, measure_training, release_memory
from tutorial_lib.bench.fake_imagenet import (  # noqa: F401  (re-exported for notebooks)
    DEFAULT_FAKE_DIR,
    FAKE_MARKER,
    dataset_summary,
    make_fake_imagenet,
    prepare_fake_imagenet,
    real_data_set,
    split_dir,
)
from tutorial_lib.bench.timing import torch_threads
from tutorial_lib.engine.device import (
    compile_support,
    environment_facts,
    precision_support,
    resolve_device,
    synchronize,
)

# DataLoader starts every worker with torch.set_num_threads(1). The one-process measurements run on one
# thread too: with torch's default of a thread per core, the antialiased resize of the crop split its work
# over threads that wait for each other on a busy machine (augment 4.5-7.2 ms per image against 0.5-1.1 ms
# on one thread, 2 cores, load 0.5-1.1), and 0 workers measured 3-4x slower than 1 worker doing the same work.
WORKER_THREADS = 1


def _order(length: int, count: int, seed: int = 0) -> list[int]:
    """``count`` indices: shuffled passes over the data set, as many as needed."""
    generator = torch.Generator().manual_seed(seed)
    order: list[int] = []
    while len(order) < count:
        order += torch.randperm(length, generator=generator).tolist()
    return order[:count]


# --------------------------------------------------------------------------- CPU loader
def decode_cost(data_dir: str | os.PathLike, image_size: int, images: int = 32, repeats: int = 1) -> dict:
    """Milliseconds per image to read the file, decode it and augment it as the CPU pipeline does, in this
    one process, on one torch thread as in a DataLoader worker (:data:`WORKER_THREADS`).

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
    from tutorial_lib.engine.input.cpu import train_transform
    from tutorial_lib.engine.input.files import UNREADABLE, decode_image, open_regular_file

    dataset_dir = split_dir(data_dir)
    paths = sorted(dataset_dir.rglob("*"))
    paths = [p for p in paths if p.suffix.lower() in (".jpeg", ".jpg", ".png")][:images]
    transform = train_transform(image_size)
    read = decode = augment = 0.0
    timed = 0
    with torch_threads(WORKER_THREADS) as threads:
        for path in paths:
            t0 = time.perf_counter()
            try:  # an unreadable image is skipped and counted, as the loader does (r43n: OSError, unnamed)
                with open_regular_file(path) as handle:
                    data = handle.read()
                t1 = time.perf_counter()
                image = decode_image(data)
            except UNREADABLE:
                continue
            t2 = time.perf_counter()
            transform(image)
            t3 = time.perf_counter()
            read, decode, augment, timed = read + t1 - t0, decode + t2 - t1, augment + t3 - t2, timed + 1
    n = max(1, timed)
    return {"read_ms_per_image": 1000 * read / n, "decode_ms_per_image": 1000 * decode / n,
            "augment_ms_per_image": 1000 * augment / n, "cost_sample_images": timed,
            "cost_skipped_images": len(paths) - timed, "torch_threads": threads}


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

    from tutorial_lib.engine.input.cpu import CountingImageFolder, collate_skipping, train_transform

    dataset = CountingImageFolder(split_dir(data_dir), train_transform(image_size))
    warmup_batches = max(1, workers) if warmup_batches is None else warmup_batches
    most = batches if min_time <= 0 else max(batches, 100_000 // batch_size)  # open-ended when timed
    order = _order(len(dataset), (warmup_batches + most) * batch_size, seed)
    loader = DataLoader(dataset, batch_size=batch_size, sampler=order, num_workers=workers,
                        collate_fn=collate_skipping, prefetch_factor=4 if workers else None)
    with torch_threads(WORKER_THREADS) as threads:  # with 0 workers this process prepares the images itself
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
              "images_per_sec_per_worker": count / elapsed / max(1, workers), "main_process_torch_threads": threads}
    if with_cost:
        record.update(decode_cost(data_dir, image_size, images=min(32, len(dataset))))
    return {**record, "env": environment_facts("cpu"), "timestamp": time.time()}


# --------------------------------------------------------------------------- the GPU input pipeline
def measure_gpu_pipeline(data_dir: str | os.PathLike = DEFAULT_FAKE_DIR, batch_size: int = 8, image_size: int = 64,
                         batches: int = 4, warmup_batches: int | None = None,
                         device: str | torch.device | None = "auto", workers: int = 0, min_time: float = 0.0,
                         repeats: int = 1, seed: int = 0) -> dict:
    """Images/s of the trainer's own GPU input pipeline (``input_pipeline: gpu``) on ``device``.

    The loaders are the trainer's (:func:`tutorial_lib.engine.input.loaders.build_gpu_loaders`): ``workers``
    DataLoader workers read the files' bytes, the device decodes them in batches (nvJPEG on CUDA,
    torchvision's CPU decoder on the CPU) and crops, resizes, flips and normalises them in batched form.
    After ``warmup_batches`` untimed batches (default: one per worker, at least one) each of
    ``repeats`` rounds takes ``batches`` batches, or more until ``min_time`` seconds have passed,
    and synchronises the device at its end; the record holds the median round and its range
    (``images_per_sec_low``/``_high``). Asking for cuda without a GPU gives ``status: "skipped"``.
    """
    from tutorial_lib.bench.timing import Spread, store

    record = {"kind": "data", "pipeline": "gpu-pipeline", "workers": workers, "batch_size": batch_size,
              "image_size": image_size, "batches": batches, "data_dir": str(data_dir), "min_time_s": min_time}
    if str(device).startswith("cuda") and not torch.cuda.is_available():
        return {**record, "status": "skipped", "reason": "no CUDA GPU here (nvJPEG decoding needs one); "
                "--device cpu runs the same pipeline on the CPU", "env": environment_facts("cpu"),
                "timestamp": time.time()}
    from tutorial_lib.engine.input.folders import DataError
    from tutorial_lib.engine.input.loaders import build_gpu_loaders

    device = resolve_device(device)
    warmup_batches = max(1, workers) if warmup_batches is None else warmup_batches
    cfg = bench_config(device, dataset="imagefolder", data_dir=str(data_dir), batch_size=batch_size,
                       image_size=image_size, workers=workers, input_pipeline="gpu", seed=seed)
    try:
        loaders = build_gpu_loaders(cfg, 0, 1, device)
    except DataError as exc:  # a batch larger than the data set, a wrong layout: the message names the fix
        return {**record, "status": "error", "reason": str(exc), "env": environment_facts(device),
                "timestamp": time.time()}
    stream = _endless(loaders)
    for _ in range(warmup_batches):
        batch = next(stream)
    synchronize(device)
    rates, timed_batches = [], 0
    for _ in range(max(1, repeats)):
        t0, count, done = time.perf_counter(), 0, 0
        while done < batches or time.perf_counter() - t0 < min_time:
            batch = next(stream)
            count, done = count + len(batch.targets), done + 1
        synchronize(device)
        rates.append(count / (time.perf_counter() - t0))
        timed_batches += done
    stream.close()
    record.update(status="ok", warmup_batches=warmup_batches, timed_batches=timed_batches,
                  decode_device=str(device), dataset_images=loaders.train_images,
                  output_shape=list(batch.images.shape), output_dtype=str(batch.images.dtype).removeprefix("torch."),
                  repeats=len(rates), spread_method="median of the rounds; spread = lowest..highest round "
                  "(one loader, its rounds back to back)",
                  timer="time.perf_counter (the device synchronised at the end of each round)")
    store(record, "images_per_sec", Spread.of(rates))
    record["images_per_sec_per_worker"] = record["images_per_sec"] / max(1, workers)
    del loaders, batch
    release_memory(device)
    return {**record, "env": environment_facts(device), "timestamp": time.time()}


def _endless(loaders):
    """The training batches of epoch 0, 1, 2, ... back to back (as the trainer sees them)."""
    epoch = 0
    while True:
        yield from loaders.train_epoch(epoch)
        epoch += 1


# --------------------------------------------------------------------------- training fed from JPEGs
def measure_e2e(data_dir: str | os.PathLike = DEFAULT_FAKE_DIR, arch: str | None = None, precision: str = "fp32",
                channels_last: bool = False, batch_size: int | None = None, image_size: int | None = None,
                steps: int | None = None, warmup: int | None = None, workers: int = 2, compile_mode: str | None = None,
                device: str | torch.device | None = "auto", reference: bool = True, min_time: float = 0.0,
                input_pipeline: str | None = None) -> dict:
    """Training images/s when the trainer's own loader feeds the trainer's own step from the JPEG files.

    The same objects the trainer uses (:func:`tutorial_lib.engine.input.loaders.loaders_for` with
    ``dataset="imagefolder"`` and :class:`tutorial_lib.engine.step.TrainStep`), timed the way the
    trainer runs: the host queues steps without waiting for each one (one synchronisation at the
    end), so loading the next batch overlaps the device's work. ``data_wait_fraction`` is the share
    of wall time the loop spent in ``next(loader)``. ``compile_mode`` None takes the device's profile
    (``gpu``: torch.compile default; ``smoke``: none), as the trainer does. With ``reference`` the same
    step on synthetic batches (no input pipeline) is measured too (``synthetic_images_per_sec``).
    The timed steps go on past ``steps`` until ``min_time`` seconds have passed. ``input_pipeline``
    None takes the profile's (``gpu``: decode and augment on the device, as the trainer does).
    """
    from tutorial_lib.engine.input.files import without_a_lone_image
    from tutorial_lib.engine.input.loaders import loaders_for
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

    # unreadable images are skipped and counted, and a lone readable one too (BatchNorm), as the trainer does
    endless, wait, images, skipped = _endless(loaders), 0.0, 0, 0
    stream = (without_a_lone_image(batch) if step.needs_two_images else batch for batch in endless)
    for _ in range(s["warmup"]):
        step(next(stream))
    synchronize(device)
    started, done, last = time.perf_counter(), 0, None
    while done < s["steps"] or time.perf_counter() - started < min_time:
        done += 1
        t0 = time.perf_counter()
        batch = next(stream)
        wait += time.perf_counter() - t0
        loss = step(batch)  # None: no readable image in the batch, the step skipped
        last = last if loss is None else loss
        trained = 0 if loss is None else len(batch.targets)
        images, skipped = images + trained, skipped + batch.skipped + len(batch.targets) - trained
    if last is None:  # r43n: float(None) was a TypeError traceback
        from tutorial_lib.engine.input.folders import DataError

        raise DataError(f"--data-dir: no image of the {done} timed steps could be read and trained on ({skipped} "
                        f"skipped as unreadable; see the warnings), so there is nothing to measure. Fix: check the "
                        f"files under {split_dir(data_dir)} (replace or delete the unreadable ones).")
    float(last)  # waits for the last step, as the trainer's loss logging does
    synchronize(device)
    elapsed = time.perf_counter() - started
    stream.close()
    endless.close()
    record.update(status="ok", images_per_sec=images / elapsed, data_wait_fraction=wait / elapsed,
                  skipped_images=skipped, step_time_ms=1000 * elapsed / done, timed_steps=done,
                  train_images=loaders.train_images, num_classes=loaders.num_classes,
                  timer="time.perf_counter (one synchronisation at the end)")
    del step, loaders, batch
    release_memory(device)
    if reference:
        synthetic = measure_training(s["arch"], precision, s["channels_last"], s["batch_size"], s["image_size"],
                                     s["steps"], s["warmup"], compile_mode, device,
                                     num_classes=record["num_classes"])
        record["synthetic_images_per_sec"] = synthetic.get("images_per_sec")
    return record


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
