"""A generated ImageNet-like JPEG set, so input-pipeline benchmarks decode what ImageNet costs to decode.

* :func:`make_fake_imagenet` writes realistic-size JPEGs (500x375, about 110 KB, like ImageNet's
  average) in ImageNet layout.
* :func:`prepare_fake_imagenet`: the set a benchmark reads (a real ImageNet-layout folder is used as it is).
* :func:`dataset_summary`: image counts (training, validation), classes and mean file size.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch

from tutorial_lib.bench.compute import defaults

FAKE_MARKER = "fake_imagenet.json"
JPEG_MAX_SIDE = 65_500  # libjpeg (PIL) writes no JPEG with a longer side
# _fake_image's peak memory a pixel: its numpy arrays peaked at 91-100 B a pixel (tracemalloc, 500x375 to
# 2000x1500 px) and the process's resident size grew 95-99 B a pixel at 4000x3000 and 8000x1000 (r43ab: the 16 B
# of its coordinate grid alone let 12000x12000 through to a MemoryError)
FAKE_PIXEL_BYTES = 128
DEFAULT_FAKE_DIR = "data/fake_imagenet"


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
                       seed: int = 0, workers: int | None = None, processes: bool | None = None,
                       sized_by: tuple[str, str] | None = None) -> Path:
    """Write an ImageNet-layout JPEG set: ``root/{train,val}/n000000NN/n000000NN_I.JPEG``.

    Images are ``size`` (ImageNet's typical 500x375) and about 110 KB each. ``val_per_class``
    defaults to an eighth of ``per_class`` (at least 1). Idempotent: a set with the same settings is
    reused; the tree is built in a temporary folder and renamed into place. Images are made by
    ``workers`` threads, or processes (``processes``; default: for sets of 512 images or more).
    A set too large for its disk or the hour is refused naming ``classes`` or ``per_class``, or
    ``sized_by`` (the caller's setting that sized it, and the fix's first words).
    """
    check_set_arguments(classes=classes, per_class=per_class, size=size, val_per_class=val_per_class,
                        quality=quality, seed=seed, workers=workers)
    if processes is not None and not isinstance(processes, bool):  # r43ac: 'no' is a true string
        from tutorial_lib.engine.errors import ConfigError

        raise ConfigError(f"processes: must be True, False or None (by the set's size), got {processes!r:.40}. Fix: "
                          "e.g. processes=False.")
    root = Path(root)
    val_per_class = default_val_per_class(per_class) if val_per_class is None else val_per_class
    settings = {"classes": classes, "per_class": per_class, "val_per_class": val_per_class, "size": list(size),
                "quality": quality, "seed": seed, "version": 1}
    marker = root / FAKE_MARKER
    from tutorial_lib.engine.input.folders import check_replaceable, publish_tree
    from tutorial_lib.rundir.owned import foreign_tree_files

    if foreign_tree_files(root, FAKE_MARKER) is not None and json.loads(marker.read_text()) == settings:
        return root

    check_replaceable(root, FAKE_MARKER, "root: pass make_fake_imagenet a new or empty folder")
    images = classes * (per_class + val_per_class)
    from tutorial_lib.engine.memory import available_bytes

    # as many images at once as memory holds (r43ac: refused for its workers after bench checked one image)
    at_once = available_bytes("cpu") // (size[0] * size[1] * FAKE_PIXEL_BYTES)
    workers = max(1, min(workers or min(32, os.cpu_count() or 1), images, at_once))
    largest = max((classes, "classes"), (per_class, "per_class"), (val_per_class, "val_per_class"),
                  key=lambda count: count[0])[1]  # the count that sized the set (r43ab: val_per_class was not named)
    check_set_fits(root, images, size, *(sized_by or (largest, _FEWER.get(largest, _FEWER["classes"]))))
    root.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".fake-imagenet-", dir=root.parent))
    try:
        _write_images(staging, classes, per_class, val_per_class, size, quality, seed, workers, processes)
    except BaseException:  # r43aa: a MemoryError left the half-made folder beside the user's
        import shutil

        shutil.rmtree(staging, ignore_errors=True)
        raise
    (staging / FAKE_MARKER).write_text(json.dumps(settings))
    return publish_tree(staging, root, FAKE_MARKER, "root: pass make_fake_imagenet a new or empty folder")


def _write_images(staging: Path, classes: int, per_class: int, val_per_class: int, size: tuple[int, int],
                  quality: int, seed: int, workers: int, processes: bool | None) -> None:
    """The JPEGs of :func:`make_fake_imagenet` in ``staging``, by threads or processes."""
    jobs = []
    for split, count in (("train", per_class), ("val", val_per_class)):
        for label in range(classes):
            folder = staging / split / f"n{label:08d}"
            folder.mkdir(parents=True)
            for index in range(count):
                image_seed = seed * 1_000_003 + label * 10_007 + index + (0 if split == "train" else 500_009)
                jobs.append((image_seed, tuple(size), quality, folder / f"n{label:08d}_{index}.JPEG"))
    if processes if processes is not None else len(jobs) >= 512 and workers > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["tutorial_lib.bench.fake_imagenet"])  # imported once, then forked per worker
        with ProcessPoolExecutor(workers, mp_context=context) as pool:
            list(pool.map(_fake_image, *zip(*jobs, strict=True), chunksize=16))
    else:
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(lambda job: _fake_image(*job), jobs))


# a JPEG byte for every 2 pixels, at least: this generator's JPEGs took 0.57-0.59 B a pixel from 500x375 to
# 2000x1500 px, and more below (0.78 at 64 px)
PIXELS_PER_JPEG_BYTE = 2
# at most, per core: ~2x what a core of this project's 2-core machine generated, 2.0-2.7 million pixels a second of
# 500x375 JPEGs (under a load of 5), and some 125 JPEGs a second of 120x90 px (r43ac: 4x let sets of 3-8 h through)
GENERATED_PIXELS_PER_SEC = 5_000_000
GENERATED_IMAGES_PER_SEC = 250


_FEWER = {"classes": "fewer classes or images per class (e.g. classes 2, per_class 16)",
          "val_per_class": "fewer validation images per class (e.g. val_per_class 2)"}


def check_set_fits(root: str | os.PathLike, images: int, size: tuple[int, int], name: str = "classes",
                   fewer: str = _FEWER["classes"]) -> None:
    """Refuse (ConfigError naming ``name``) a generated set of ``images`` JPEGs of ``size`` that cannot fit on the
    disk of ``root`` (r43y: 100,000 classes were 180 GB generated for days on a disk of 54 GB, printing nothing), or
    whose generation would take over the hour a benchmark may take even at :data:`GENERATED_PIXELS_PER_SEC` and
    :data:`GENERATED_IMAGES_PER_SEC` on every core the generator uses (r43z: 640,000 JPEGs, about 18 h here, were
    accepted). Both are lower bounds; ``fewer`` begins the fix."""
    import shutil

    from tutorial_lib.bench.durations import E2E_MAX_SECONDS, count_text
    from tutorial_lib.engine.errors import ConfigError
    from tutorial_lib.engine.memory import human_bytes

    pixels = images * size[0] * size[1]
    needed = pixels // PIXELS_PER_JPEG_BYTE  # whole numbers: a count past float's range is refused, not raised
    existing = next(p for p in (Path(root), *Path(root).parents) if p.exists())
    free = shutil.disk_usage(existing).free
    made = f"a generated set of {count_text(images)} JPEGs of {size[0]}x{size[1]} px"
    fix = f"Fix: {fewer}"
    if needed > free:
        raise ConfigError(f"{name}: {made} takes at least "
                          f"{human_bytes(needed)} on disk, and {existing} has {human_bytes(free)} free. {fix}, or a "
                          "data_dir on a larger disk.")
    cores = min(32, os.cpu_count() or 1)  # make_fake_imagenet's workers
    seconds = max(pixels // GENERATED_PIXELS_PER_SEC, images // GENERATED_IMAGES_PER_SEC) // cores
    if seconds > E2E_MAX_SECONDS:
        hours = f"{seconds / 3600:,.1f}" if seconds < 10**15 else count_text(seconds // 3600)
        raise ConfigError(f"{name}: {made} takes at least "
                          f"{hours} h to make on {cores} core(s), over the {E2E_MAX_SECONDS // 3600} h a "
                          f"benchmark may take. {fix}, or a machine with more cores.")


def prepare_fake_imagenet(root: str | os.PathLike = DEFAULT_FAKE_DIR, classes: int = 2, per_class: int = 16,
                          size: tuple[int, int] = (500, 375), batch_size: int = 8, loader_batches: int = 4,
                          device: str | torch.device | None = "auto") -> Path:
    """The data set the benchmarks read: ``root`` as it is if it already holds images that were not
    generated here (a real ImageNet, say), else :func:`make_fake_imagenet` with at least enough
    training images for ``loader_batches + 4`` batches and the device's default e2e steps."""
    check_set_arguments(classes=classes, per_class=per_class, size=size, batch_size=batch_size,
                        loader_batches=loader_batches)
    real = real_data_set(root)
    if real is not None:
        return real
    made = planned_per_class(classes, per_class, batch_size, loader_batches, device)
    if made > per_class:  # r43aa: a set sized by the batches was blamed on classes, with a fix already followed
        name = "batch_size" if batch_size * 4 >= loader_batches * 8 else "loader_batches"  # the further from default
        check_set_fits(root, classes * (made + default_val_per_class(made)), tuple(size), name,
                       "a smaller batch_size or fewer loader_batches (e.g. batch_size 8, loader_batches 4): the set "
                       "holds enough images for them")
    return make_fake_imagenet(root, classes, made, tuple(size))


# make_fake_imagenet's and prepare_fake_imagenet's counts: (least, an example for the fix)
_SET_COUNTS = {"classes": (1, 2), "per_class": (1, 16), "val_per_class": (0, 2), "quality": (1, 90), "seed": (0, 0),
               "workers": (1, 4), "batch_size": (1, 8), "loader_batches": (1, 4)}


def check_set_arguments(size, **counts) -> None:
    """Refuse (ConfigError naming the argument) a count of :data:`_SET_COUNTS` that is not a whole number at least
    its least (None is taken for ``val_per_class`` and ``workers``: their defaults), a quality over 100, and a
    ``size`` that is not two whole numbers of pixels libjpeg writes whose generation fits in memory (r43aa:
    ``classes=0`` was a ZeroDivisionError, ``batch_size=-64`` was taken, ``size=(0, 375)`` a numpy ValueError)."""
    from tutorial_lib.engine.errors import ConfigError
    from tutorial_lib.numbers import shown

    for name, value in counts.items():
        least, example = _SET_COUNTS[name]
        if value is None and name in ("val_per_class", "workers"):
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < least or (name == "quality" and
                                                                                       value > 100):
            bound = "from 1 to 100" if name == "quality" else f"of at least {least}"
            raise ConfigError(f"{name}: expected a whole number {bound}, got {shown(value)[:60]}. Fix: e.g. "
                              f"{name}={example}.")
    if (not isinstance(size, (tuple, list)) or len(size) != 2
            or any(isinstance(side, bool) or not isinstance(side, int) or not 1 <= side <= JPEG_MAX_SIDE
                   for side in size)):
        raise ConfigError(f"size: expected (width, height) in whole pixels from 1 to {JPEG_MAX_SIDE:,}, got "
                          f"{shown(size)[:60]}. Fix: e.g. size=(500, 375), ImageNet's typical size.")
    check_image_fits(size, ("size", "size"), "size=(500, 375)")


def check_image_fits(size: tuple[int, int], names: tuple[str, str], example: str, blamed: str | None = None,
                     available: int | None = None) -> None:
    """Refuse (ConfigError) a JPEG size with a side longer than libjpeg writes, naming that side's entry of ``names``
    (the width's and the height's field), or whose generation cannot fit in this host's memory at
    :data:`FAKE_PIXEL_BYTES` a pixel, naming ``blamed`` (default: the width's field); :func:`make_fake_imagenet` makes
    as many at once as memory holds. ``example`` is the fix's example; ``available``: the memory of the process that
    will generate it, where not this one's. Whole positive sides are the caller's check."""
    from tutorial_lib.engine.errors import ConfigError
    from tutorial_lib.engine.memory import available_bytes, check_fits

    width, height = size
    if max(width, height) > JPEG_MAX_SIDE:
        raise ConfigError(f"{names[0] if width > JPEG_MAX_SIDE else names[1]}: {width}x{height} px has a side longer "
                          f"than the {JPEG_MAX_SIDE:,} px of the largest JPEG libjpeg writes. Fix: e.g. {example}.")
    check_fits(width * height * FAKE_PIXEL_BYTES, available_bytes("cpu") if available is None else available,
               f"{blamed or names[0]}: generating one {width}x{height} image",
               f"e.g. {example} (ImageNet's typical size)")


def planned_per_class(classes: int, per_class: int, batch_size: int = 8, loader_batches: int = 4,
                      device: str | torch.device | None = "auto") -> int:
    """The training images per class :func:`prepare_fake_imagenet` generates: ``per_class``, raised to enough for
    ``loader_batches + 4`` batches and the device's default e2e steps."""
    d = defaults(device)
    needed = batch_size * max(loader_batches + 4, d["e2e_steps"] + d["warmup"] + 1)
    return max(per_class, -(-needed // classes))  # whole numbers: r43ab's batch_size=10**400 overflowed a float


def default_val_per_class(per_class: int) -> int:
    """The validation images per class :func:`make_fake_imagenet` writes by default: an eighth of ``per_class``,
    at least 1."""
    return max(1, per_class // 8)


def real_data_set(root: str | os.PathLike) -> Path | None:
    """``root`` checked, if it holds a data set that was not generated here (used as it is): its layout and an image
    in each split (:func:`tutorial_lib.engine.input.folders.check_imagefolder`), and a readable image in its training
    split (:func:`tutorial_lib.engine.input.files.check_readable`). None where the benchmark generates its set there
    (absent, empty, or ours)."""
    root = Path(root)
    if not (root.is_dir() and not (root / FAKE_MARKER).is_file() and any(root.iterdir())):
        return None
    from tutorial_lib.engine.input.files import check_readable
    from tutorial_lib.engine.input.folders import check_imagefolder

    return check_readable(check_imagefolder(root), "train", flag="--data-dir",
                          fix="or pass a new folder to --data-dir to measure a generated set")


def dataset_summary(data_dir: str | os.PathLike) -> dict:
    """Image count, classes and mean file size of ``data_dir/train``; ``val_images`` in ``data_dir/val`` (0
    without one) and ``files``, both together (what staging copies and reads)."""
    from tutorial_lib.engine.input.cpu import CountingImageFolder

    dataset = CountingImageFolder(split_dir(data_dir))
    sizes = [os.path.getsize(path) for path, _ in dataset.samples]
    val_dir = Path(data_dir) / "val"
    val_images = len(CountingImageFolder(val_dir).samples) if val_dir.is_dir() else 0
    return {"images": len(sizes), "classes": len(dataset.classes), "val_images": val_images,
            "files": len(sizes) + val_images, "mean_file_kb": statistics.fmean(sizes) / 1e3 if sizes else 0.0}


def split_dir(data_dir, split: str = "train") -> Path:
    """``data_dir/split`` if that folder exists, else ``data_dir`` itself."""
    root = Path(data_dir)
    return root / split if (root / split).is_dir() else root
