"""The device a run uses and the facts recorded about it (one place for both the trainer and the benchmarks).

* :func:`resolve_device`, :func:`synchronize`; :func:`usable_cpus` and :func:`loader_workers` (``workers: auto``);
* :func:`precision_support` / :func:`compile_support`: whether a setting can run here, and why not;
* :func:`environment_facts`: device and CPU names, driver, CUDA and library versions, host; written into
  ``config.json`` by the trainer and into every benchmark record.
"""

from __future__ import annotations

import functools
import os
import platform
import socket
import subprocess
from pathlib import Path

import torch

from tutorial_lib import compat
from tutorial_lib.engine.config import AUTO, COMPILE_MODES, PRECISIONS

MAX_AUTO_WORKERS = 8  # the gpu and hal profiles' fixed count before "auto"; more is a choice (workers: 16)


def resolve_device(device: str | torch.device | None = "auto") -> torch.device:
    """``auto``/None: the current CUDA GPU if there is one, else the CPU."""
    if isinstance(device, torch.device):
        return device
    if device in (None, "auto"):
        return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    return torch.device(device)


def synchronize(device: torch.device) -> None:
    """Wait for queued GPU work (no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def usable_cpus() -> int:
    """CPU cores this process may use (its affinity set where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


MIN_LOCAL_RANKS = 16  # a job may always start this many ranks on one machine, whatever its CPU count


def most_local_ranks() -> int:
    """The most rank processes one job may start on this machine: two per usable CPU core, or 16. The course
    oversubscribes a laptop on purpose (2-4 CPU ranks); 100 ranks on 2 cores ran at a load of 95 (r43p)."""
    return max(MIN_LOCAL_RANKS, 2 * usable_cpus())


def loader_workers(setting: int | str, ranks_sharing: int = 1) -> int:
    """DataLoader workers for this rank: ``setting`` itself, or for ``"auto"`` min(8, its share of the CPUs - 1),
    at least 0 (one CPU stays with the training process). The share is the CPUs this process may use (its
    affinity: on Slurm, the CPUs its task was given, not the node's count) divided among the ``ranks_sharing``
    ranks of its node, which one torchrun starts inside one task, so they share that task's CPUs."""
    if setting != AUTO:
        return setting
    return max(0, min(MAX_AUTO_WORKERS, usable_cpus() // max(1, ranks_sharing) - 1))


def precision_support(precision: str, device: str | torch.device | None = "auto") -> str | None:
    """None if ``device`` can train in ``precision``, else the reason it cannot."""
    device = resolve_device(device)
    if precision not in PRECISIONS:
        return f"unknown precision {precision!r} (use one of {', '.join(PRECISIONS)})"
    if device.type != "cuda":
        if precision in ("tf32", "fp16"):
            return f"{precision} needs a CUDA GPU (the trainer refuses it on the CPU)"
        return None
    major, _ = torch.cuda.get_device_capability(device)
    if precision == "tf32" and major < 8:
        return "TF32 needs tensor cores of compute capability 8.0 (Ampere) or newer"
    if precision == "bf16" and not torch.cuda.is_bf16_supported(including_emulation=False):
        return "this GPU has no native bf16 (compute capability 8.0 or newer needed)"
    return None


def compile_support(mode: str, device: str | torch.device | None = "auto") -> str | None:
    """None if torch.compile ``mode`` can run on ``device``, else the reason."""
    if mode not in COMPILE_MODES:
        return f"unknown compile mode {mode!r} (use one of {', '.join(COMPILE_MODES)})"
    if mode == "reduce-overhead" and resolve_device(device).type != "cuda":
        return "reduce-overhead uses CUDA graphs and needs a GPU"
    return None


def parse_cpu_model(cpuinfo: str) -> str | None:
    """The CPU model name from the text of ``/proc/cpuinfo`` (x86 ``model name``, ARM ``Model``...)."""
    for key in ("model name", "Model", "cpu model", "Processor", "cpu"):
        for line in cpuinfo.splitlines():
            name, sep, value = line.partition(":")
            if sep and name.strip() == key and value.strip():
                return value.strip()
    return None


@functools.lru_cache(maxsize=1)
def cpu_model() -> str:
    """This machine's CPU model name (``/proc/cpuinfo``, else what ``platform`` knows)."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        text = ""
    return parse_cpu_model(text) or platform.processor() or platform.machine()


@functools.lru_cache(maxsize=1)
def _nvidia_driver() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError, IndexError):
        return None


def environment_facts(device: str | torch.device | None = "auto") -> dict:
    """Where a run or measurement ran: device and CPU names, driver/CUDA, library versions, host."""
    import PIL
    import torchvision

    device = resolve_device(device)
    facts = {"device": str(device), "device_name": cpu_model(), "cpu_model": cpu_model(), "cpus": usable_cpus(),
             "torch_threads": torch.get_num_threads(), "hostname": socket.gethostname(),
             "python": platform.python_version(), "torch": torch.__version__, "torchvision": torchvision.__version__,
             "pillow": PIL.__version__, "cuda": torch.version.cuda, "driver": None, "compat": compat.features()}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        facts.update(device_name=props.name, compute_capability=f"{props.major}.{props.minor}",
                     gpu_memory_gb=round(props.total_memory / 2**30, 1), gpus=torch.cuda.device_count(),
                     cudnn=torch.backends.cudnn.version(), driver=_nvidia_driver())
    return facts
