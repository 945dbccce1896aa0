"""Benchmarks that write JSON lines: model speed, input pipeline speed, and all-reduce bandwidth.

    python -m tutorial_lib.bench train --precision fp32,bf16 --channels-last off,on --out results/train.jsonl
    python -m tutorial_lib.bench data --workers 0,1,2 --out results/data.jsonl
    python -m tutorial_lib.bench e2e --workers 2 --out results/e2e.jsonl
    torchrun --nproc-per-node 2 -m tutorial_lib.bench allreduce --out results/allreduce.jsonl
    python -m tutorial_lib.bench matmul                      # dense matrix-product rate of this device
    python -m tutorial_lib.bench table results/train.jsonl   # markdown tables of result files

* ``train``: images/s of the trainer's own step (autocast, GradScaler for fp16, fused SGD on GPU) on
  synthetic batches already on the device. Warm-up steps are excluded; the step time is the median
  of several timed windows (CUDA events on a GPU, ``perf_counter`` on the CPU). Reports peak memory
  and the achieved TFLOP/s (FLOPs counted with FlopCounterMode) beside :func:`matmul_peak`.
* ``data`` / ``e2e``: see :mod:`tutorial_lib.bench.data` (JPEG loader speed; training fed from JPEGs).
* ``allreduce``: nccl-tests' algorithm and bus bandwidth, run under torchrun (gloo on CPU, nccl on GPU);
  the record has the shape :func:`tutorial_lib.scaling.load_allreduce_samples` reads.

Every record names the device, the library versions and all settings. Defaults depend on the device
(:data:`DEFAULTS`): tiny on a CPU, ResNet-50 / 224 px / batch 256 on a GPU. Unsupported settings
(fp16 on a CPU, say) give a record with ``status: "skipped"`` and the reason.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import platform
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

import torch

from tutorial_lib import REPO_ROOT
from tutorial_lib.engine.config import COMPILE_MODES, PRECISIONS

AMP_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
FLOPS_METHOD = "FlopCounterMode on one forward+backward (meta device; convolutions and matmuls)"
DEFAULTS = {
    "cpu": dict(arch="resnet18", image_size=64, batch_size=8, steps=3, warmup=1, windows=3,
                precisions=["fp32", "bf16"], channels_last=[False], compile=["none"],
                classes=2, per_class=16, workers=[0, 1, 2], loader_batches=4, e2e_steps=3,
                allreduce_sizes=[4 << 10, 64 << 10, 1 << 20, 4 << 20], allreduce_iters=5, allreduce_warmup=2),
    "cuda": dict(arch="resnet50", image_size=224, batch_size=256, steps=50, warmup=15, windows=5,
                 precisions=list(PRECISIONS), channels_last=[False, True], compile=["none"],
                 classes=100, per_class=150, workers=None, loader_batches=48, e2e_steps=40,
                 allreduce_sizes=[8 << 10, 64 << 10, 512 << 10, 4 << 20, 32 << 20, 128 << 20, 512 << 20],
                 allreduce_iters=20, allreduce_warmup=5),
}


# --------------------------------------------------------------------------- device and environment
def resolve_device(device: str | torch.device | None = "auto") -> torch.device:
    """``auto``/None: the current CUDA GPU if there is one, else the CPU."""
    if isinstance(device, torch.device):
        return device
    if device in (None, "auto"):
        return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    return torch.device(device)


def defaults(device: str | torch.device | None = "auto") -> dict:
    """The default benchmark sizes for ``device`` (a copy of :data:`DEFAULTS`)."""
    kind = resolve_device(device).type
    values = dict(DEFAULTS["cuda" if kind == "cuda" else "cpu"])
    if values["workers"] is None:  # GPU machine: 1, 2, 4, ... up to the CPUs this process may use
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        values["workers"] = [2**k for k in range(int(math.log2(cpus)) + 1)]
    return values


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@functools.lru_cache(maxsize=1)
def _nvidia_driver() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError, IndexError):
        return None


def environment(device: str | torch.device | None = "auto") -> dict:
    """Where a measurement ran: device and CPU names, driver/CUDA, library versions, host."""
    import PIL
    import torchvision

    device = resolve_device(device)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    env = {"device": str(device), "device_name": _cpu_model(), "cpu_model": _cpu_model(), "cpus": cpus,
           "torch_threads": torch.get_num_threads(), "hostname": socket.gethostname(),
           "python": platform.python_version(), "torch": torch.__version__, "torchvision": torchvision.__version__,
           "pillow": PIL.__version__, "cuda": torch.version.cuda, "driver": None}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env.update(device_name=props.name, compute_capability=f"{props.major}.{props.minor}",
                   gpu_memory_gb=round(props.total_memory / 2**30, 1), gpus=torch.cuda.device_count(),
                   cudnn=torch.backends.cudnn.version(), driver=_nvidia_driver())
    return env


def synchronize(device: torch.device) -> None:
    """Wait for queued GPU work (no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


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
    if precision == "bf16":
        try:
            native = torch.cuda.is_bf16_supported(including_emulation=False)
        except TypeError:  # older torch
            native = torch.cuda.is_bf16_supported()
        if not native:
            return "this GPU has no native bf16 (compute capability 8.0 or newer needed)"
    return None


def compile_support(mode: str, device: str | torch.device | None = "auto") -> str | None:
    """None if torch.compile ``mode`` can run on ``device``, else the reason."""
    if mode not in COMPILE_MODES:
        return f"unknown compile mode {mode!r} (use one of {', '.join(COMPILE_MODES)})"
    if mode == "reduce-overhead" and resolve_device(device).type != "cuda":
        return "reduce-overhead uses CUDA graphs and needs a GPU"
    return None


# --------------------------------------------------------------------------- compute ceilings
@functools.lru_cache(maxsize=8)
def _matmul_peak_cached(device: str, dtype: str, size: int, min_time: float) -> float:
    dev = torch.device(device)
    torch_dtype = getattr(torch, dtype)
    a = torch.randn(size, size, device=dev).to(torch_dtype)
    b = torch.randn(size, size, device=dev).to(torch_dtype)
    flops = 2.0 * size**3
    for _ in range(3):
        a @ b
    from tutorial_lib.bench.timing import step_rate

    rounds = [step_rate(lambda: a @ b, min_time) for _ in range(3)]  # a ceiling: the least disturbed round
    return flops * max(rounds) / 1e12


def matmul_peak(device: str | torch.device | None = "auto", dtype: str | None = None,
                size: int | None = None, min_time: float | None = None) -> dict:
    """Measured dense matrix-product rate: bf16 8192x8192 on a GPU, fp32 1024x1024 on the CPU.

    This is the practical compute ceiling that a training step's achieved TFLOP/s is compared with.
    Cached per process. Returns ``{"matmul_tflops", "matmul_dtype", "matmul_size"}``.
    """
    device = resolve_device(device)
    gpu = device.type == "cuda"
    dtype = dtype or ("bfloat16" if gpu else "float32")
    size = size or (8192 if gpu else 1024)
    min_time = min_time or (0.5 if gpu else 0.3)
    tflops = _matmul_peak_cached(str(device), dtype, size, min_time)
    return {"matmul_tflops": tflops, "matmul_dtype": dtype, "matmul_size": size}


@functools.lru_cache(maxsize=32)
def train_flops_per_image(arch: str, image_size: int, num_classes: int = 1000) -> float:
    """FLOPs of one training image (forward + backward), counted by FlopCounterMode on the meta device.

    Only convolutions and matrix products are counted (normalisation and activations are a few
    percent more), so this matches the usual "3 x forward multiply-adds x 2" estimate.
    """
    from torch.utils.flop_counter import FlopCounterMode

    from tutorial_lib.engine.models import build_model

    with torch.device("meta"):
        model = build_model(arch, num_classes)
        images = torch.randn(2, 3, image_size, image_size)
        targets = torch.randint(0, num_classes, (2,))
    with FlopCounterMode(display=False) as counter:
        torch.nn.functional.cross_entropy(model(images), targets).backward()
    return counter.get_total_flops() / 2


# --------------------------------------------------------------------------- the training step
class TrainStep:
    """The trainer's step (:meth:`tutorial_lib.engine.trainer.Trainer.train_step`) without the LR schedule.

    Same model factory, optimiser (fused SGD on a GPU), autocast for fp16/bf16, GradScaler for fp16,
    TF32 flags and torch.compile as the trainer builds them from a :class:`TrainConfig`.
    """

    def __init__(self, cfg, num_classes: int, device: torch.device):
        from tutorial_lib.engine.config import derived
        from tutorial_lib.engine.models import build_model
        from tutorial_lib.engine.optim import build_optimizer
        from tutorial_lib.engine.trainer import set_precision_flags

        set_precision_flags(cfg.precision)
        self.device, self.channels_last = device, cfg.channels_last
        self.model = build_model(cfg.arch, num_classes, cfg.zero_init_residual, cfg.norm,
                                 cfg.channels_last).to(device)
        self.train_model = torch.compile(self.model, mode=cfg.compile) if cfg.compile != "none" else self.model
        self.optimizer = build_optimizer(self.model, cfg, derived(cfg, 1)["scaled_lr"], fused=device.type == "cuda")
        self.scaler = torch.amp.GradScaler(device.type, enabled=cfg.precision == "fp16")
        self.criterion = torch.nn.CrossEntropyLoss(label_smoothing=cfg.label_smoothing)
        dtype = AMP_DTYPES.get(cfg.precision)
        self.amp = (lambda: torch.autocast(device.type, dtype=dtype)) if dtype else nullcontext
        self.train_model.train()

    def __call__(self, images: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        with self.amp():
            loss = self.criterion(self.train_model(images), targets)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        return loss.detach()


def bench_config(device: torch.device, **overrides):
    """A validated TrainConfig for benchmarking: the device's profile plus ``overrides``."""
    from tutorial_lib.engine.config import make_config, validate

    values = dict(name="bench", output_root=str(Path(tempfile.gettempdir()) / "tutorial-bench"), progress=False,
                  checkpoint=False, device=device.type, workers=0, dataset="synthetic")
    values.update(overrides)
    cfg = make_config("gpu" if device.type == "cuda" else "smoke", **values)
    return validate(cfg, cuda_available=torch.cuda.is_available())


def timed_windows(run_steps, window_steps: int, windows: int, device: torch.device) -> list[float]:
    """Seconds per window of ``window_steps`` calls of ``run_steps`` (CUDA events on a GPU)."""
    times = []
    for _ in range(windows):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            run_steps(window_steps)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1000)
        else:
            begin = time.perf_counter()
            run_steps(window_steps)
            times.append(time.perf_counter() - begin)
    return times


def _peak_memory_start(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def current_rss() -> int:
    """This process's resident memory now, in bytes (0 where /proc is missing)."""
    try:
        return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def peak_memory(device: torch.device, baseline_rss: int = 0) -> dict:
    """Peak memory since the measurement started: CUDA allocator peak, or the process's max RSS.

    ``training_memory_bytes`` is what the training itself needed: the CUDA peak, or on the CPU the
    max RSS minus ``baseline_rss`` (the process before the model was built; meaningful only in a
    fresh process, see ``isolate`` of :func:`measure_training`).
    """
    if device.type == "cuda":
        peak = int(torch.cuda.max_memory_allocated(device))
        return {"peak_memory_bytes": peak, "training_memory_bytes": peak,
                "peak_memory_source": "torch.cuda.max_memory_allocated"}
    scale = 1 if sys.platform == "darwin" else 1024  # Linux reports KiB
    peak = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale)
    return {"peak_memory_bytes": peak, "training_memory_bytes": max(0, peak - baseline_rss),
            "baseline_rss_bytes": baseline_rss,
            "peak_memory_source": "getrusage max RSS of the whole process (torch itself included)"}


def release_memory(device: torch.device) -> None:
    """Free what a finished measurement left behind (garbage, cached CUDA blocks, compiled graphs)."""
    import gc

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    if "torch._dynamo" in sys.modules:  # something was compiled: drop its graphs and guards
        sys.modules["torch._dynamo"].reset()


def measure_training(arch: str | None = None, precision: str = "fp32", channels_last: bool = False,
                     batch_size: int | None = None, image_size: int | None = None, steps: int | None = None,
                     warmup: int | None = None, compile_mode: str = "none", device: str | torch.device | None = "auto",
                     windows: int | None = None, num_classes: int = 1000, isolate: bool | str = False,
                     matmul_tflops: float | None = None) -> dict:
    """Training throughput of ``arch`` on synthetic batches already on ``device``: one JSON-able record.

    ``steps`` timed steps are split into ``windows`` windows after ``warmup`` untimed ones; the
    result is the median window. ``isolate=True`` (or ``"auto"``: on the CPU) measures in a fresh
    Python process, so the CPU's max-RSS peak memory belongs to this configuration alone.
    ``None`` sizes take :func:`defaults` of the device; ``channels_last="auto"`` means on a GPU only.
    Unsupported precisions or compile modes give ``status: "skipped"`` with the reason; a failure
    (e.g. out of memory) gives ``status: "error"``.
    """
    device = resolve_device(device)
    d = defaults(device)
    if channels_last == "auto":
        channels_last = device.type == "cuda"
    settings = dict(arch=arch or d["arch"], precision=precision, channels_last=bool(channels_last),
                    compile=compile_mode, batch_size=batch_size or d["batch_size"],
                    image_size=image_size or d["image_size"], steps=steps or d["steps"],
                    warmup=d["warmup"] if warmup is None else warmup, windows=windows or d["windows"],
                    num_classes=num_classes, device=device.type)
    record = {"kind": "train", **settings, "env": environment(device), "timestamp": time.time()}
    reason = precision_support(precision, device) or compile_support(compile_mode, device)
    if reason:
        return {**record, "status": "skipped", "reason": reason}
    if matmul_tflops is None:
        record.update(matmul_peak(device))
    else:
        record.update(matmul_tflops=matmul_tflops, matmul_dtype="bfloat16" if device.type == "cuda" else "float32")
    if isolate == "auto":
        isolate = device.type == "cpu"
    if isolate:
        return {**record, **_measure_in_child(settings, record["matmul_tflops"])}
    try:
        record.update(_measure(settings, device))
    except (RuntimeError, ValueError) as exc:  # torch.OutOfMemoryError is a RuntimeError
        record.update(status="error", reason=f"{type(exc).__name__}: {str(exc)[:400]}")
    finally:
        release_memory(device)
    if record.get("status") == "ok":
        flops = train_flops_per_image(settings["arch"], settings["image_size"], num_classes)
        achieved = flops * record["images_per_sec"] / 1e12
        record.update(flops_per_image=flops, flops_method=FLOPS_METHOD, achieved_tflops=achieved,
                      fraction_of_matmul=achieved / record["matmul_tflops"])
    return record


def _measure(s: dict, device: torch.device) -> dict:
    cfg = bench_config(device, arch=s["arch"], precision=s["precision"], channels_last=s["channels_last"],
                       compile=s["compile"], batch_size=s["batch_size"], image_size=s["image_size"])
    _peak_memory_start(device)
    baseline_rss = current_rss()
    torch.manual_seed(0)
    step = TrainStep(cfg, s["num_classes"], device)
    images = torch.randn(s["batch_size"], 3, s["image_size"], s["image_size"], device=device)
    if s["channels_last"]:
        images = images.contiguous(memory_format=torch.channels_last)
    targets = torch.randint(0, s["num_classes"], (s["batch_size"],), device=device)
    last = {}

    def run_steps(count: int) -> None:
        for _ in range(count):
            last["loss"] = step(images, targets)

    started = time.perf_counter()
    run_steps(s["warmup"])
    synchronize(device)
    warmup_s = time.perf_counter() - started
    windows = max(1, min(s["windows"], s["steps"]))
    window_steps = max(1, s["steps"] // windows)
    times = timed_windows(run_steps, window_steps, windows, device)
    step_s = statistics.median(times) / window_steps
    return {"status": "ok", "images_per_sec": s["batch_size"] / step_s, "step_time_ms": step_s * 1000,
            "window_images_per_sec": [s["batch_size"] * window_steps / t for t in times],
            "timed_steps": window_steps * windows, "warmup_s": warmup_s, "final_loss": float(last["loss"]),
            "timer": "torch.cuda.Event" if device.type == "cuda" else "time.perf_counter",
            **peak_memory(device, baseline_rss)}


def _measure_in_child(s: dict, matmul_tflops: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "record.jsonl"
        command = [sys.executable, "-m", "tutorial_lib.bench", "train", "--quiet", "--isolate", "no",
                   "--arch", s["arch"], "--precision", s["precision"],
                   "--channels-last", "on" if s["channels_last"] else "off", "--compile", s["compile"],
                   "--batch-size", str(s["batch_size"]), "--image-size", str(s["image_size"]),
                   "--steps", str(s["steps"]), "--warmup", str(s["warmup"]), "--windows", str(s["windows"]),
                   "--num-classes", str(s["num_classes"]), "--device", s["device"],
                   "--matmul-tflops", repr(matmul_tflops), "--out", str(out)]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT),
                                                          env.get("PYTHONPATH")]))
        result = subprocess.run(command, capture_output=True, text=True, env=env)
        records = read_records(out)
        if result.returncode != 0 or not records:
            return {"status": "error", "reason": f"child process exited {result.returncode}: {result.stderr[-600:]}"}
        child = records[-1]
    child.pop("env", None)
    return {**child, "isolated": True}


def sweep_training(archs=None, precisions=None, channels_last=None, compile_modes=None, batch_sizes=None,
                   image_size: int | None = None, steps: int | None = None, warmup: int | None = None,
                   windows: int | None = None, device: str | torch.device | None = "auto",
                   isolate: bool | str = "auto", num_classes: int = 1000, on_record=None) -> list[dict]:
    """:func:`measure_training` over every combination of the lists (``None``: device defaults).

    ``on_record(record)`` is called after each measurement (default: print a one-line summary).
    """
    on_record = on_record or (lambda record: print(describe(record), flush=True))
    device = resolve_device(device)
    d = defaults(device)
    combos = [(a, p, c, m, b) for a in (archs or [d["arch"]]) for b in (batch_sizes or [d["batch_size"]])
              for m in (compile_modes or d["compile"]) for c in (d["channels_last"] if channels_last is None
                                                                 else channels_last)
              for p in (precisions or d["precisions"])]
    peak = matmul_peak(device)["matmul_tflops"]
    records = []
    for arch, precision, cl, mode, batch in combos:
        record = measure_training(arch, precision, cl, batch, image_size, steps, warmup, mode, device, windows,
                                  num_classes, isolate=isolate, matmul_tflops=peak)
        records.append(record)
        on_record(record)
    return records


# --------------------------------------------------------------------------- all-reduce
def measure_allreduce(sizes: list[int] | None = None, iters: int | None = None, warmup: int | None = None,
                      dtype: str = "float32", device: str = "auto", repeats: int = 3,
                      min_time: float = 0.05) -> dict | None:
    """All-reduce time and bandwidth per message size, across the ranks of this torchrun job.

    Call it in every rank (joins the process group from torchrun's environment: nccl on GPUs,
    gloo on the CPU). Returns the record on rank 0 and None elsewhere. ``results`` lists
    ``{"bytes", "seconds", "algbw_GBps", "busbw_GBps"}`` with busbw = algbw x 2(n-1)/n (nccl-tests);
    the time is the slowest rank's mean over at least ``iters`` calls and ``min_time`` seconds, the
    median of ``repeats`` rounds in which the sizes take turns (``seconds_low``/``_high``, see
    :func:`tutorial_lib.bench.timing.allreduce_rounds`). ``device="auto"`` uses the GPUs when
    every local rank has one, else the CPU (gloo), so two ranks can measure on a one-GPU machine.
    """
    import torch.distributed as dist

    from tutorial_lib.engine import distributed as dist_utils
    from tutorial_lib.scaling import bus_bandwidth_bytes_s

    _, world, local_rank, local_world = dist_utils.env_rank_info()
    if device == "auto" and torch.cuda.is_available() and local_world > torch.cuda.device_count():
        device = "cpu"
    device = dist_utils.pick_device(device, local_rank)
    d = defaults(device)
    sizes, iters = sizes or d["allreduce_sizes"], iters or d["allreduce_iters"]
    warmup = d["allreduce_warmup"] if warmup is None else warmup
    owned = not dist.is_initialized()
    info = dist_utils.init_distributed(device) if owned else dist_utils.DistInfo(
        dist.get_rank(), dist.get_world_size(), local_rank, 1, dist.get_backend())
    if not info.distributed:
        raise RuntimeError("allreduce needs several ranks. Fix: run it under torchrun, e.g. "
                           "torchrun --nproc-per-node 2 -m tutorial_lib.bench allreduce")
    hosts = dist_utils.all_gather_objects(dist_utils.node_name(), info)
    torch_dtype = getattr(torch, dtype)
    element = torch.tensor([], dtype=torch_dtype).element_size()
    from tutorial_lib.bench.timing import allreduce_rounds

    results = allreduce_rounds([torch.ones(max(1, size // element), dtype=torch_dtype, device=device)
                                for size in sizes], iters, warmup, repeats, min_time, device)
    for result in results:
        result["busbw_GBps"] = bus_bandwidth_bytes_s(result["bytes"], result["seconds"], info.world_size) / 1e9
        for end, other in (("low", "high"), ("high", "low")):  # the fastest round gives the highest bandwidth
            result[f"busbw_GBps_{end}"] = bus_bandwidth_bytes_s(result["bytes"], result[f"seconds_{other}"],
                                                                info.world_size) / 1e9
    record = None
    if info.is_main:
        record = {"kind": "allreduce", "status": "ok", "backend": info.backend, "world_size": info.world_size,
                  "gpus": info.world_size, "nodes": len(set(hosts)), "hosts": hosts, "dtype": dtype,
                  "iters": iters, "warmup": warmup, "repeats": repeats, "min_time_s": min_time, "device": device.type,
                  "timer": "torch.cuda.Event" if device.type == "cuda" else "time.perf_counter",
                  "results": results, "env": environment(device), "timestamp": time.time()}
    if owned:
        dist_utils.shutdown(info)
    return record


def launch_allreduce(nproc: int = 2, sizes: list[int] | None = None, iters: int | None = None,
                     out: str | os.PathLike | None = None, timeout: float = 300) -> dict:
    """Run the all-reduce benchmark on this machine with ``nproc`` ranks (torchrun); return its record.

    The record also goes to ``out`` (JSON lines) if given. Feed it to
    :func:`tutorial_lib.scaling.load_allreduce_samples` / :func:`tutorial_lib.scaling.calibrate`.
    """
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "allreduce.jsonl"
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
                   "-m", "tutorial_lib.bench", "allreduce", "--quiet", "--out", str(target)]
        if sizes:
            command += ["--sizes", ",".join(str(s) for s in sizes)]
        if iters:
            command += ["--iters", str(iters)]
        env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                                 "MASTER_PORT", "LOCAL_WORLD_SIZE")}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT),
                                                          env.get("PYTHONPATH")]))
        env.setdefault("OMP_NUM_THREADS", "1")
        result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout)
        records = read_records(target)
        if result.returncode != 0 or not records:
            raise RuntimeError(f"all-reduce benchmark failed ({result.returncode}):\n{result.stderr[-2000:]}")
    if out:
        append_records(out, records[-1:])
    return records[-1]


# --------------------------------------------------------------------------- records and tables
def append_records(path: str | os.PathLike, records: list[dict]) -> Path:
    """Append records to a JSON-lines file (folders are created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        for record in records:
            handle.write(json.dumps(record, default=_jsonable) + "\n")
    return path


def _jsonable(value):
    return value.item() if hasattr(value, "item") else str(value)


def read_records(path: str | os.PathLike, kind: str | None = None) -> list[dict]:
    """Records of a JSON-lines file (unreadable lines skipped), optionally only one ``kind``."""
    path = Path(path)
    if not path.is_file():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and (kind is None or record.get("kind") == kind):
            records.append(record)
    return records


def human_bytes(nbytes: float) -> str:
    """``4096`` -> ``4 KiB``, ``25 << 20`` -> ``25 MiB``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(nbytes) < 1024 or unit == "GiB":
            return f"{nbytes:g} {unit}" if float(nbytes).is_integer() else f"{nbytes:.1f} {unit}"
        nbytes /= 1024
    return f"{nbytes} GiB"  # pragma: no cover


def _fmt(value, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def describe(record: dict) -> str:
    """One human line for a record."""
    kind, status = record.get("kind"), record.get("status")
    head = {"train": "{arch} {precision} cl={channels_last} compile={compile} b={batch_size} {image_size}px",
            "data": "{pipeline} workers={workers} b={batch_size} {image_size}px",
            "e2e": "{arch} {precision} workers={workers} b={batch_size} {image_size}px",
            "allreduce": "{backend} x{world_size}", "matmul": "{device}"}.get(kind, "{kind}")
    text = f"{kind}: " + head.format_map({k: _fmt(v) for k, v in record.items()})
    if status != "ok":
        return f"{text}: {status} ({record.get('reason', '')})"
    if kind == "train":
        return (f"{text}: {record['images_per_sec']:.1f} img/s, peak {record['peak_memory_bytes'] / 2**30:.2f} GiB, "
                f"{record['achieved_tflops']:.3f} TFLOP/s of {record['matmul_tflops']:.2f} matmul")
    if kind == "data":
        return f"{text}: {record['images_per_sec']:.1f} img/s, {record['mb_per_sec']:.1f} MB/s"
    if kind == "e2e":
        wait = 100 * record["data_wait_fraction"]
        return f"{text}: {record['images_per_sec']:.1f} img/s, waiting for data {wait:.0f}% of the time"
    if kind == "matmul":
        return f"{text}: {record['matmul_dtype']} {record['matmul_size']}^3: {record['matmul_tflops']:.3f} TFLOP/s"
    if kind == "allreduce":
        best = max(r["busbw_GBps"] for r in record["results"])
        return f"{text}: {len(record['results'])} sizes, best bus bandwidth {best:.2f} GB/s"
    return text


TABLE_COLUMNS = {
    "train": [("arch", "arch", 0), ("precision", "precision", 0), ("channels_last", "channels_last", 0),
              ("compile", "compile", 0), ("batch_size", "batch", 0), ("image_size", "px", 0),
              ("images_per_sec", "img/s", 1), ("images_per_sec_low", "img/s low", 1),
              ("images_per_sec_high", "img/s high", 1), ("step_time_ms", "step ms", 1),
              ("peak_memory_gib", "peak GiB", 2),
              ("training_memory_gib", "training GiB", 2),
              ("achieved_tflops", "TFLOP/s", 3), ("matmul_tflops", "matmul TFLOP/s", 2),
              ("fraction_of_matmul", "of matmul", 3), ("note", "note", 0)],
    "data": [("pipeline", "pipeline", 0), ("workers", "workers", 0), ("batch_size", "batch", 0),
             ("image_size", "px", 0), ("images_per_sec", "img/s", 1), ("images_per_sec_low", "img/s low", 1),
             ("images_per_sec_high", "img/s high", 1), ("mb_per_sec", "MB/s", 1),
             ("decode_ms_per_image", "decode ms/img", 2), ("augment_ms_per_image", "augment ms/img", 2),
             ("note", "note", 0)],
    "e2e": [("arch", "arch", 0), ("precision", "precision", 0), ("channels_last", "channels_last", 0),
            ("workers", "workers", 0), ("batch_size", "batch", 0), ("image_size", "px", 0),
            ("images_per_sec", "img/s from JPEG", 1), ("images_per_sec_low", "low", 1),
            ("images_per_sec_high", "high", 1), ("synthetic_images_per_sec", "img/s synthetic", 1),
            ("data_wait_fraction", "waiting for data", 2), ("note", "note", 0)],
    "matmul": [("device", "device", 0), ("matmul_dtype", "dtype", 0), ("matmul_size", "size", 0),
               ("matmul_tflops", "TFLOP/s", 3)],
    "allreduce": [("backend", "backend", 0), ("world_size", "ranks", 0), ("nodes", "nodes", 0),
                  ("size", "size", 0), ("time_ms", "time ms", 3), ("algbw_GBps", "algbw GB/s", 2),
                  ("busbw_GBps", "busbw GB/s", 2)],
}


def flat_rows(records: list[dict], kind: str) -> list[dict]:
    """Table rows of one kind (all-reduce records give one row per message size)."""
    rows = []
    for record in records:
        if record.get("kind") != kind:
            continue
        row = {k: v for k, v in record.items() if k not in ("env", "results")}
        row["note"] = "" if record.get("status") == "ok" else f"{record.get('status')}: {record.get('reason', '')}"
        for key in ("peak_memory", "training_memory"):
            if f"{key}_bytes" in record:
                row[f"{key}_gib"] = record[f"{key}_bytes"] / 2**30
        if kind == "allreduce":
            for result in record.get("results", []):
                rows.append({**row, **result, "time_ms": result["seconds"] * 1000,
                             "size": human_bytes(result["bytes"])})
        else:
            rows.append(row)
    return rows


def results_frame(records: list[dict], kind: str = "train"):
    """A pandas DataFrame of one kind of record with the table's readable column names."""
    import pandas as pd

    columns = TABLE_COLUMNS[kind]
    rows = [{title: row.get(key) for key, title, _ in columns} for row in flat_rows(records, kind)]
    return pd.DataFrame(rows, columns=[title for _, title, _ in columns])


def markdown_tables(records: list[dict]) -> str:
    """Markdown: the devices and library versions, then one table per kind of record."""
    lines = []
    envs = {json.dumps({k: r["env"].get(k) for k in ("device_name", "driver", "cuda", "torch", "torchvision",
                                                      "python", "cpu_model")}, sort_keys=True)
            for r in records if "env" in r}
    for env in sorted(envs):
        facts = json.loads(env)
        lines.append("- " + ", ".join(f"{k}: {v}" for k, v in facts.items() if v is not None))
    for kind, columns in TABLE_COLUMNS.items():
        rows = flat_rows(records, kind)
        if not rows:
            continue
        lines += ["", f"### {kind}", "", "| " + " | ".join(t for _, t, _ in columns) + " |",
                  "|" + "---|" * len(columns)]
        for row in rows:
            lines.append("| " + " | ".join(_fmt(row.get(key), digits).replace("|", "/") for key, _, digits in columns)
                         + " |")
    return "\n".join(lines) + "\n"


def setting_label(record: dict) -> str:
    """Short label of a train record's settings: ``bf16``, ``bf16 +CL``, ``fp16 +CL compile=default``."""
    label = record["precision"] + (" +CL" if record.get("channels_last") else "")
    if record.get("compile", "none") != "none":
        label += f" {record['compile']}"
    return label


def bar_values(records: list[dict], key: str = "images_per_sec", scale: float = 1.0) -> tuple[list, list]:
    """(labels, values) of the successful train records, for :func:`tutorial_lib.lessons.plots.plot_bars`."""
    ok = [r for r in records if r.get("status") == "ok" and r.get("kind") == "train"]
    return [setting_label(r) for r in ok], [r[key] * scale for r in ok]


def training_summary(records: list[dict]) -> dict:
    """Key numbers of a train sweep: fp32 and best throughput, the best setting, its speed-up and
    share of the matmul ceiling, and how many settings this device could not run."""
    ok = [r for r in records if r.get("status") == "ok" and r.get("kind") == "train"]
    if not ok:
        return {"settings measured": 0}
    best = max(ok, key=lambda r: r["images_per_sec"])
    fp32 = [r["images_per_sec"] for r in ok if r["precision"] == "fp32" and not r["channels_last"]]
    numbers = {"settings measured": len(ok), "settings skipped": len(records) - len(ok),
               "fp32 images/s": fp32[0] if fp32 else None, "best setting": setting_label(best),
               "best images/s": best["images_per_sec"],
               "best speed-up over fp32": best["images_per_sec"] / fp32[0] if fp32 else None,
               "best achieved TFLOP/s": best["achieved_tflops"], "matmul TFLOP/s": best["matmul_tflops"],
               "best share of matmul rate": best["fraction_of_matmul"]}
    return numbers


# --------------------------------------------------------------------------- number formats (notebook 01)
def number_formats():
    """Range and precision of fp32, TF32, fp16 and bf16 as a DataFrame (exact, machine independent)."""
    import pandas as pd

    rows = []
    for name, dtype, mantissa in (("fp32", torch.float32, 23), ("tf32 (matmul inputs)", None, 10),
                                  ("fp16", torch.float16, 10), ("bf16", torch.bfloat16, 7)):
        info = torch.finfo(dtype or torch.float32)
        rows.append({"format": name, "exponent bits": 8 if dtype in (None, torch.float32, torch.bfloat16) else 5,
                     "mantissa bits": mantissa, "largest": f"{info.max:.3g}",
                     "smallest normal": f"{info.tiny:.3g}", "relative step (eps)": f"{2.0 ** -mantissa:.3g}"})
    return pd.DataFrame(rows).set_index("format")


def underflow_demo(gradient: float = 1e-8, scale: float = 65536.0):
    """What a tiny gradient becomes in fp16 and bf16, without and with loss scaling (a DataFrame)."""
    import pandas as pd

    rows = []
    for name, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
        plain = torch.tensor(gradient).to(dtype).float().item()
        scaled = torch.tensor(gradient * scale).to(dtype).float().item() / scale
        rows.append({"format": name, "gradient": f"{gradient:.3g}", "stored": f"{plain:.3g}",
                     f"stored with loss scale {scale:g}, unscaled": f"{scaled:.3g}"})
    return pd.DataFrame(rows).set_index("format")


# --------------------------------------------------------------------------- command line
def _parse_list(text: str, kind=str) -> list:
    return [kind(v) for v in str(text).replace(" ", "").split(",") if v]


def _parse_bool(text: str) -> bool:
    value = str(text).strip().lower()
    if value in ("on", "true", "yes", "1"):
        return True
    if value in ("off", "false", "no", "0"):
        return False
    raise argparse.ArgumentTypeError(f"expected on/off, got {text!r}")


def parse_size(text: str) -> int:
    """``4K``, ``16M``, ``1G`` (powers of 1024) or plain bytes."""
    text = str(text).strip().upper().removesuffix("B")
    factor = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(float(text[:-1] if factor > 1 else text) * factor)


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m tutorial_lib.bench`` parser (see the module docstring)."""
    from tutorial_lib.bench.data import add_data_arguments

    parser = argparse.ArgumentParser(prog="python -m tutorial_lib.bench", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--device", default="auto", help="auto | cpu | cuda")
    common.add_argument("--out", help="append JSON lines here (default: print them)")
    common.add_argument("--quiet", action="store_true", help="no human-readable lines")

    train = sub.add_parser("train", parents=[common], help="training throughput on synthetic batches")
    train.add_argument("--arch", type=_parse_list, help="comma list of torchvision models")
    train.add_argument("--precision", type=_parse_list, help="comma list of fp32,tf32,fp16,bf16")
    train.add_argument("--channels-last", type=lambda t: [_parse_bool(v) for v in _parse_list(t)],
                       help="comma list of on/off")
    train.add_argument("--compile", type=_parse_list, help="comma list of torch.compile modes (none, default, ...)")
    train.add_argument("--batch-size", type=lambda t: _parse_list(t, int), help="comma list of per-GPU batches")
    for name in ("image-size", "steps", "warmup", "windows"):
        train.add_argument("--" + name, type=int)
    train.add_argument("--num-classes", type=int, default=1000)
    train.add_argument("--isolate", default="auto", choices=("auto", "yes", "no"),
                       help="each configuration in a fresh process (auto: on the CPU, for a per-run max RSS)")
    train.add_argument("--matmul-tflops", type=float, help=argparse.SUPPRESS)

    matmul = sub.add_parser("matmul", parents=[common], help="dense matrix-product rate (the compute ceiling)")
    matmul.add_argument("--dtype", type=_parse_list, help="comma list, e.g. bfloat16,float32 (default: bf16 on a "
                        "GPU, fp32 on the CPU; float32 means true fp32, TF32 off)")
    reduce = sub.add_parser("allreduce", parents=[common], help="all-reduce bandwidth (run under torchrun)")
    reduce.add_argument("--sizes", type=lambda t: [parse_size(v) for v in _parse_list(t)],
                        help="comma list of message sizes, e.g. 4K,1M,256M")
    reduce.add_argument("--iters", type=int, help="all-reduces per size per round, at least")
    reduce.add_argument("--repeats", type=int, default=3, help="rounds; the sizes take turns in every round")
    reduce.add_argument("--min-time", type=float, default=0.05, help="seconds per size per round, at least")
    reduce.add_argument("--warmup", type=int)
    reduce.add_argument("--dtype", default="float32")
    add_data_arguments(sub, common)
    table = sub.add_parser("table", help="markdown tables of result files")
    table.add_argument("files", nargs="+")
    table.add_argument("--out", help="also write the markdown here")
    return parser


def _emit(records: list[dict], args) -> None:
    if args.out:
        append_records(args.out, records)
    for record in records:
        if not args.quiet:
            print(describe(record), flush=True)
        if not args.out:
            print(json.dumps(record, default=_jsonable), flush=True)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    args = build_parser().parse_args(argv)
    if args.command == "table":
        records = [r for f in args.files for r in read_records(f)]
        text = markdown_tables(records)
        if args.out:
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(text)
        print(text)
        return 0
    if args.command == "allreduce":
        record = measure_allreduce(args.sizes, args.iters, args.warmup, args.dtype, args.device, args.repeats,
                                   args.min_time)
        if record is not None:
            _emit([record], args)
        return 0
    device = resolve_device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("error: --device cuda but no CUDA GPU is visible. Fix: run on a GPU node, or use --device cpu.",
              file=sys.stderr)
        return 2
    if args.command == "matmul":
        torch.backends.cuda.matmul.allow_tf32 = False
        for dtype in args.dtype or [None]:
            _emit([{"kind": "matmul", "status": "ok", **matmul_peak(device, dtype), "device": device.type,
                    "env": environment(device), "timestamp": time.time()}], args)
        return 0
    if args.command == "train":
        several = len(args.arch or [1]) * len(args.precision or defaults(device)["precisions"]) * len(
            args.channels_last or [1]) * len(args.compile or [1]) * len(args.batch_size or [1]) > 1
        isolate = {"yes": True, "no": False}.get(args.isolate, device.type == "cpu" and several)
        if args.matmul_tflops is not None:  # a child of an isolated sweep: one configuration
            record = measure_training(args.arch[0], args.precision[0], args.channels_last[0], args.batch_size[0],
                                      args.image_size, args.steps, args.warmup, args.compile[0], device, args.windows,
                                      args.num_classes, isolate=False, matmul_tflops=args.matmul_tflops)
            _emit([record], args)
            return 0
        sweep_training(args.arch, args.precision, args.channels_last, args.compile, args.batch_size, args.image_size,
                       args.steps, args.warmup, args.windows, device, isolate, args.num_classes,
                       on_record=lambda record: _emit([record], args))
        return 0
    from tutorial_lib.bench.data import run_data_command

    run_data_command(args, device, emit=lambda record: _emit([record], args))
    return 0
