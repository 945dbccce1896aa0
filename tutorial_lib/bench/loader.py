"""The CPU input pipeline against the plain torchvision recipe, and PIL's JPEG decoder against torchvision's.

* :func:`measure_recipe`: images/s (and per worker) and the peak memory (PSS of this process and its
  DataLoader workers, sampled) of one loader: ``plain`` is torchvision's recipe as its ImageNet example
  writes it (ImageFolder, RandomResizedCrop, flip, ToTensor, Normalize, the default collate);
  ``tutorial`` is the trainer's CPU pipeline (:func:`tutorial_lib.engine.input.loaders.build_cpu_loaders`:
  uint8 batches, persistent workers, normalised in this process, as on the training device). Same files,
  same order, same image size, batch and workers.
* :func:`compare_recipes`: both, interleaved round-robin (:func:`tutorial_lib.bench.timing.interleave_records`),
  plus a ``loader_ratio`` record per worker count: tutorial/plain per round, median and range.
* :func:`compare_decoders`: milliseconds per image to decode the same JPEG files to RGB with PIL and with
  ``torchvision.io.decode_jpeg`` (libjpeg-turbo), interleaved, and their ratio round by round; the
  pipelines decode ordinary JPEGs with torchvision's decoder because this measured it faster in every round.

Used by ``python -m tutorial_lib.bench loader``; the machine's load average is in every record.
"""

from __future__ import annotations

import io
import os
import sys
import threading
import time
from pathlib import Path

import torch

from tutorial_lib.bench.compute import bench_config
from tutorial_lib.bench.timing import Spread, interleave, interleave_records, store
from tutorial_lib.engine.device import environment_facts

RECIPES = ("plain", "tutorial")


def _tree_pss_mb() -> float:
    """Proportional set size (MB) of this process and its children: shared pages counted once in total."""
    pids = [os.getpid()]
    for task in Path("/proc/self/task").iterdir():
        try:
            pids += [int(p) for p in (task / "children").read_text().split()]
        except OSError:
            pass
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
        except OSError:  # a worker that just ended
            pass
    return total / 1024


class _PeakMemory:
    """Samples :func:`_tree_pss_mb` every ``interval`` seconds on a thread (reading smaps is not free); ``peak``
    is the largest."""

    def __init__(self, interval: float = 0.25):
        self.interval, self.peak, self._stop = interval, 0.0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, _tree_pss_mb())
            self._stop.wait(self.interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _tree_pss_mb())


def _plain_batches(data_dir, workers: int, batch_size: int, image_size: int, seed: int):
    """torchvision's recipe, endless: a new DataLoader iterator (its workers forked again) per epoch."""
    from torch.utils.data import DataLoader, RandomSampler
    from torchvision import datasets, transforms

    from tutorial_lib.data.file_index import class_folders

    class Classes(datasets.ImageFolder):  # the trainer's class folders: a folder linked to the home folder or /
        def find_classes(self, directory):  # was walked whole (r43q); the same classes for both recipes
            names = class_folders(directory, warn=False)[0]
            return names, {name: index for index, name in enumerate(names)}

    normalize = transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
    dataset = Classes(str(Path(data_dir) / "train"), transforms.Compose([
        transforms.RandomResizedCrop(image_size), transforms.RandomHorizontalFlip(), transforms.ToTensor(), normalize]))
    loader = DataLoader(dataset, batch_size=batch_size, num_workers=workers, drop_last=True,
                        sampler=RandomSampler(dataset, generator=torch.Generator().manual_seed(seed)))
    while True:
        yield from loader


def _tutorial_batches(data_dir, workers: int, batch_size: int, image_size: int, seed: int):
    """The trainer's CPU pipeline, endless over epochs, normalised here (the training device is the CPU)."""
    from tutorial_lib.engine.input.loaders import build_cpu_loaders

    cfg = bench_config(torch.device("cpu"), dataset="imagefolder", data_dir=str(data_dir), batch_size=batch_size,
                       image_size=image_size, workers=workers, input_pipeline="cpu", seed=seed)
    loaders = build_cpu_loaders(cfg, 0, 1, torch.device("cpu"))
    epoch = 0
    while True:
        for batch in loaders.train_epoch(epoch):
            yield batch.images, batch.targets
        epoch += 1


def measure_recipe(recipe: str, data_dir, workers: int = 1, batch_size: int = 32, image_size: int = 224,
                   min_time: float = 3.0, seed: int = 0) -> dict:
    """Images/s of one recipe (``plain`` or ``tutorial``) after ``workers`` warm-up batches (at least
    one; worker start-up left out), timed for ``min_time`` seconds, and the peak PSS meanwhile."""
    from tutorial_lib.engine.input.files import UNREADABLE

    make = {"plain": _plain_batches, "tutorial": _tutorial_batches}[recipe]
    facts = {"kind": "loader", "recipe": recipe, "workers": workers, "batch_size": batch_size,
             "image_size": image_size, "data_dir": str(data_dir)}
    try:
        with _PeakMemory() as memory:
            stream = make(data_dir, workers, batch_size, image_size, seed)
            for _ in range(max(1, workers)):
                images, _ = next(stream)
            t0, count = time.perf_counter(), 0
            while time.perf_counter() - t0 < min_time:
                images, targets = next(stream)
                count += len(targets)
            elapsed = time.perf_counter() - t0
            stream.close()
    except UNREADABLE as exc:  # the trainer's pipeline skips and counts such images; torchvision's recipe stops
        if recipe != "plain":
            raise
        return {**facts, "status": "skipped", "reason": f"torchvision's plain recipe stops at an unreadable image "
                f"(it skips none): {exc}", "load_average": os.getloadavg(), "timestamp": time.time()}
    rate = count / elapsed
    return {**facts, "status": "ok", "timed_images": count, "images_per_sec": rate,
            "images_per_sec_per_worker": rate / max(1, workers), "peak_pss_mb": memory.peak,
            "output_dtype": str(images.dtype).removeprefix("torch."), "load_average": os.getloadavg(),
            "timer": "time.perf_counter", "timestamp": time.time()}


def compare_recipes(data_dir, workers: list[int], batch_size: int = 32, image_size: int = 224,
                    min_time: float = 3.0, repeats: int = 3) -> list[dict]:
    """Both recipes at each worker count, interleaved for ``repeats`` rounds; then a ``loader_ratio``
    record per worker count (tutorial/plain images/s, round by round: median and range)."""
    runs = {(recipe, w): (lambda r=recipe, w=w: measure_recipe(r, data_dir, w, batch_size, image_size, min_time))
            for w in workers for recipe in RECIPES}
    load_before = os.getloadavg()
    merged = interleave_records(runs, repeats, keys=("images_per_sec", "images_per_sec_per_worker", "peak_pss_mb"))
    env = {**environment_facts("cpu"), "load_average_before": load_before, "load_average_after": os.getloadavg()}
    records = [{**record, "env": env} for record in merged.values()]
    for w in workers:
        plain, ours = merged[("plain", w)], merged[("tutorial", w)]
        if plain["status"] != "ok":  # an unreadable image: measured by the trainer's pipeline only (r43p)
            print(f"warning: --data-dir: {plain['reason']}; so the plain recipe and the ratio were not measured at "
                  f"{w} worker(s). Fix: replace or delete the unreadable images under {Path(data_dir) / 'train'} to "
                  "compare both recipes.", file=sys.stderr, flush=True)
            records.append({"kind": "loader_ratio", "status": "skipped", "workers": w, "batch_size": batch_size,
                            "image_size": image_size, "data_dir": str(data_dir), "reason": plain["reason"],
                            "env": env, "timestamp": time.time()})
            continue
        ratios = [a / b for a, b in zip(ours["images_per_sec_samples"], plain["images_per_sec_samples"], strict=True)]
        record = {"kind": "loader_ratio", "status": "ok", "workers": w, "batch_size": batch_size,
                  "image_size": image_size, "data_dir": str(data_dir), "repeats": len(ratios),
                  "what": "tutorial CPU pipeline images/s / plain torchvision recipe images/s, per round",
                  "peak_pss_mb_plain": plain["peak_pss_mb"], "peak_pss_mb_tutorial": ours["peak_pss_mb"],
                  "env": env, "timestamp": time.time()}
        records.append(store(record, "ratio", Spread.of(ratios)))
    return records


def _readable_jpeg(path: Path) -> bytes | None:
    """The bytes of ``path`` if both decoders compared read them (r43n: an empty file was a ValueError traceback of
    torch.frombuffer), else None (a warning names it, as the pipelines' skipping does)."""
    from PIL import Image
    from torchvision.io import ImageReadMode, decode_jpeg

    from tutorial_lib.engine.input.files import UNREADABLE, open_regular_file

    try:
        with open_regular_file(path) as handle:
            data = handle.read()
        Image.open(io.BytesIO(data)).convert("RGB")
        decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8), mode=ImageReadMode.RGB)
    except (*UNREADABLE, RuntimeError) as exc:
        print(f"warning: skipping unreadable image {path} in the decoder comparison: {exc}", file=sys.stderr,
              flush=True)
        return None
    return data


def compare_decoders(data_dir, images: int = 64, repeats: int = 7) -> dict:
    """Milliseconds per image to decode the same JPEG files to RGB arrays with PIL and with
    torchvision's ``decode_jpeg`` (one thread each, interleaved rounds; files read beforehand)."""
    import numpy as np
    from PIL import Image
    from torchvision.io import ImageReadMode, decode_jpeg

    paths = sorted((Path(data_dir) / "train").rglob("*.JPEG"))[:images]
    blobs = [blob for blob in map(_readable_jpeg, paths) if blob is not None]  # the others skipped and counted
    if not blobs:
        return {"kind": "decode", "status": "skipped", "reason": f"none of the {len(paths)} JPEG files compared could "
                "be decoded by both decoders", "skipped_images": len(paths), "data_dir": str(data_dir),
                "env": environment_facts("cpu"), "timestamp": time.time()}
    tensors = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in blobs]

    def timed(decode):
        def run():
            t0 = time.perf_counter()
            for item in decode:
                item()
            return 1000 * (time.perf_counter() - t0) / len(blobs)
        return run

    pil = [lambda b=b: np.asarray(Image.open(io.BytesIO(b)).convert("RGB")) for b in blobs]
    tv = [lambda t=t: decode_jpeg(t, mode=ImageReadMode.RGB) for t in tensors]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        spreads = interleave({"pil": timed(pil), "torchvision": timed(tv)}, repeats)
    finally:
        torch.set_num_threads(threads)
    record = {"kind": "decode", "status": "ok", "images": len(blobs), "skipped_images": len(paths) - len(blobs),
              "repeats": repeats, "data_dir": str(data_dir),
              "mean_file_kb": sum(map(len, blobs)) / 1e3 / max(1, len(blobs)), "load_average": os.getloadavg(),
              "env": environment_facts("cpu"), "timestamp": time.time()}
    for name, spread in spreads.items():
        store(record, f"{name}_ms_per_image", spread)
    ratios = [a / b for a, b in zip(spreads["pil"].samples, spreads["torchvision"].samples, strict=True)]
    store(record, "pil_over_torchvision", Spread.of(ratios))
    # the rounds are paired (interleaved, same files): faster in every round is a sign test, p = 2**-repeats
    faster = min(ratios) > 1
    record["decision"] = ("torchvision's decode_jpeg was faster in every round: the pipelines use it" if faster else
                          "torchvision's decode_jpeg was not faster in every round: not measurably faster here")
    return record
