"""What this machine (and its cluster) offers, and a first look at the data set.

    from tutorial_lib.course import environment
    info = environment.report()             # a dict: versions, GPUs, CPU, RAM, Slurm
    environment.report_table(info)          # the same as a two-column DataFrame
    environment.dataset_summary("data/digits")
    environment.sample_grid("data/digits", n=16)   # a matplotlib Figure of labelled images

Everything degrades politely: no GPU, no ``/proc`` (macOS), no Slurm or a ``sinfo`` that fails
each give a value that says so instead of an exception.
"""

from __future__ import annotations

import os
import platform
import random
from pathlib import Path

from tutorial_lib.engine.device import parse_cpu_model

_GIB = 1024**3
_IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


# ----------------------------------------------------------------- parsing (pure)
def parse_meminfo_total(meminfo: str) -> int | None:
    """Total RAM in bytes from the text of ``/proc/meminfo`` (its ``MemTotal: N kB`` line)."""
    for line in meminfo.splitlines():
        if line.startswith("MemTotal:"):
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                unit = parts[2].lower() if len(parts) > 2 else "kb"
                return int(parts[1]) * {"kb": 1024, "mb": 1024**2, "gb": _GIB}.get(unit, 1)
    return None


def format_cudnn_version(version: int | None) -> str | None:
    """cuDNN's integer version as text: 90100 -> "9.1.0" (cuDNN 9 packs major*10000 + minor*100 + patch),
    8902 -> "8.9.2" (cuDNN 8 and older: major*1000 + minor*100 + patch)."""
    if not version:
        return None
    if version >= 10000:
        return f"{version // 10000}.{version % 10000 // 100}.{version % 100}"
    return f"{version // 1000}.{version % 1000 // 100}.{version % 100}"


# --------------------------------------------------------------- probing (impure)
def _read(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""


def cpu_info() -> dict:
    """CPU model, logical cores, and the cores this process may use (affinity / cgroup set)."""
    model = parse_cpu_model(_read("/proc/cpuinfo")) or platform.processor() or platform.machine()
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count()
    return {"model": model, "logical_cores": os.cpu_count(), "usable_cores": usable}


def ram_bytes() -> int | None:
    """Total RAM in bytes (``/proc/meminfo``, else ``sysconf``), or None if unknown."""
    total = parse_meminfo_total(_read("/proc/meminfo"))
    if total is None:
        try:
            total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (AttributeError, ValueError, OSError):
            return None
    return total


def gpu_info() -> list[dict]:
    """One dict per visible CUDA GPU: index, name, memory in GiB, compute capability, SM count."""
    import torch

    if not torch.cuda.is_available():
        return []
    gpus = []
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        gpus.append({"index": index, "name": props.name, "memory_gib": round(props.total_memory / _GIB, 1),
                     "capability": f"{props.major}.{props.minor}", "multiprocessors": props.multi_processor_count})
    return gpus


def slurm_info(timeout: float = 10) -> dict:
    """Whether a Slurm controller answers (``jobs.slurm_available``) and, if so, its nodes from sinfo
    (``jobs.slurm.cluster_nodes``: every Slurm command lives in ``jobs/``)."""
    from tutorial_lib.jobs import slurm

    available, why = slurm.slurm_available()
    info = {"available": available, "why": why, "nodes": []}
    if available:
        info["nodes"], problem = slurm.cluster_nodes(timeout)
        if problem:
            info["why"] += f"; {problem}"
    return info


def software_info() -> dict:
    """Versions of Python, torch, torchvision, CUDA and cuDNN as this torch build sees them."""
    import torch

    try:
        import torchvision

        vision = torchvision.__version__
    except Exception as exc:  # noqa: BLE001 - a broken torchvision is exactly what this report must show
        vision = f"import failed: {exc}"
    cudnn = format_cudnn_version(torch.backends.cudnn.version()) if torch.backends.cudnn.is_available() else None
    return {"python": platform.python_version(), "torch": torch.__version__, "torchvision": vision,
            "cuda_build": torch.version.cuda, "cuda_available": torch.cuda.is_available(), "cudnn": cudnn,
            "distributed_backends": [b for b, ok in (("nccl", _has_nccl()), ("gloo", _has_gloo())) if ok]}


def _has_nccl() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_nccl_available()


def _has_gloo() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_gloo_available()


def report(check_slurm: bool = True) -> dict:
    """Hardware and software of this machine, plus the Slurm cluster if one answers.

    Keys: ``host``, ``os``, ``software`` (see :func:`software_info`), ``cpu`` (:func:`cpu_info`),
    ``ram_gib``, ``gpus`` (:func:`gpu_info`, empty without CUDA) and ``slurm`` (:func:`slurm_info`).
    """
    ram = ram_bytes()
    return {"host": platform.node(), "os": f"{platform.system()} {platform.release()}",
            "software": software_info(), "cpu": cpu_info(),
            "ram_gib": round(ram / _GIB, 1) if ram else None, "gpus": gpu_info(),
            "slurm": slurm_info() if check_slurm else {"available": False, "why": "not checked", "nodes": []}}


def report_table(info: dict | None = None):
    """:func:`report` flattened to a two-column DataFrame (``item``, ``value``) for display."""
    import pandas as pd

    info = info if info is not None else report()
    software, cpu, slurm = info["software"], info["cpu"], info["slurm"]
    rows = [("host", info["host"]), ("operating system", info["os"]), ("Python", software["python"]),
            ("torch", software["torch"]), ("torchvision", software["torchvision"]),
            ("CUDA (torch build)", software["cuda_build"] or "none (CPU-only build)"),
            ("CUDA usable", software["cuda_available"]), ("cuDNN (bundled with torch)", software["cudnn"] or "none"),
            ("distributed backends", ", ".join(software["distributed_backends"]) or "none"),
            ("CPU", cpu["model"]), ("CPU cores (logical / usable)", f"{cpu['logical_cores']} / {cpu['usable_cores']}"),
            ("RAM (GiB)", info["ram_gib"]), ("GPUs", len(info["gpus"]))]
    rows += [(f"GPU {g['index']}", f"{g['name']}, {g['memory_gib']} GiB, compute {g['capability']}")
             for g in info["gpus"]]
    rows += [("Slurm", "answers" if slurm["available"] else "not available"), ("Slurm detail", slurm["why"])]
    if slurm["nodes"]:
        rows.append(("Slurm nodes", len({n["node"] for n in slurm["nodes"]})))
    return pd.DataFrame(rows, columns=["item", "value"]).set_index("item")


def slurm_nodes_table(info: dict | None = None):
    """The Slurm nodes of :func:`report` as a DataFrame (empty when no cluster answers)."""
    import pandas as pd

    info = info if info is not None else report()
    columns = ["node", "partition", "default", "state", "cpus", "memory_mb", "gres"]
    return pd.DataFrame(info["slurm"]["nodes"], columns=columns)


# ------------------------------------------------------------------------ data
def _images_in(folder: Path) -> list[Path]:
    """Image files in one class folder, sorted (os.scandir: no stat per file, fast on parallel file systems)."""
    with os.scandir(folder) as entries:
        return sorted(Path(e.path) for e in entries
                      if e.is_file() and os.path.splitext(e.name)[1].lower() in _IMAGE_SUFFIXES)


def dataset_summary(data_dir: str | os.PathLike):
    """Classes and images per split of an ImageFolder tree (``train/`` and ``val/``), as a DataFrame.

    Checks the layout with :func:`tutorial_lib.engine.input.folders.check_imagefolder` first (clear error if wrong).
    Columns: classes, images, fewest and most images in one class, empty class folders.
    """
    import pandas as pd

    from tutorial_lib.engine.input.folders import check_imagefolder

    root = check_imagefolder(data_dir)
    rows = {}
    for split in ("train", "val"):
        counts = [len(_images_in(d)) for d in sorted((root / split).iterdir()) if d.is_dir()]
        rows[split] = {"classes": len(counts), "images": sum(counts), "min_per_class": min(counts),
                       "max_per_class": max(counts), "empty_classes": sum(c == 0 for c in counts)}
    return pd.DataFrame.from_dict(rows, orient="index")


MAX_SAMPLES = 64  # a grid to look at: 8 rows of 8; drawing each of 1,438 images took over 150 s


def check_sample_count(n, name: str = "n") -> int:
    """``n`` if it is a whole number of images from 1 to :data:`MAX_SAMPLES`, else ValueError (one line naming
    ``name``)."""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_SAMPLES:
        raise ValueError(f"{name}: must be a whole number of images from 1 to {MAX_SAMPLES} (a grid to look at), "
                         f"got {str(n)[:40]}. Fix: e.g. {name}=16")
    return n


def sample_images(data_dir: str | os.PathLike, n: int = 16, split: str = "train", seed: int = 0) -> list[tuple]:
    """``n`` (path, class name) pairs drawn at random (reproducibly, by ``seed``) from one split."""
    from tutorial_lib.engine.input.folders import check_imagefolder

    check_sample_count(n)
    folder = check_imagefolder(data_dir) / split
    pool = [(path, d.name) for d in sorted(folder.iterdir()) if d.is_dir() for path in _images_in(d)]
    if not pool:
        raise ValueError(f"{folder} holds no images")
    return random.Random(seed).sample(pool, min(n, len(pool)))


def sample_grid(data_dir: str | os.PathLike, n: int = 16, split: str = "train", seed: int = 0, cols: int = 8):
    """A matplotlib Figure of ``n`` random training images, each titled with its class (folder) name.

    The figure is detached from pyplot (no double display in notebooks); show it by making it the
    last expression of a cell, or save it with ``fig.savefig``.
    """
    import matplotlib.pyplot as plt
    from PIL import Image

    picks = sample_images(data_dir, n, split, seed)
    cols = max(1, min(cols, len(picks)))
    rows = -(-len(picks) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(1.3 * cols, 1.5 * rows), squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    for ax, (path, label) in zip(axes.flat, picks, strict=False):
        with Image.open(path) as image:
            ax.imshow(image.convert("RGB"))
        ax.set_title(label, fontsize=9)
    fig.suptitle(f"{len(picks)} random {split} images of {Path(data_dir).name} (title = class)", fontsize=10)
    fig.tight_layout()
    plt.close(fig)
    return fig
