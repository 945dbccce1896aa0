"""Compute benchmarks: the device's matrix-product ceiling, FLOPs per image, and the training step's speed.

:func:`measure_training` times the trainer's own :class:`tutorial_lib.engine.step.TrainStep` fed by the
trainer's own synthetic loader (:func:`tutorial_lib.engine.input.loaders.loaders_for` with ``dataset="synthetic"``,
batches made once on the device): the model's speed without an input pipeline. Warm-up steps are excluded;
the step time is the median of several timed windows (CUDA events on a GPU, ``perf_counter`` on the CPU).
Records report peak memory and the achieved TFLOP/s (FLOPs counted with FlopCounterMode) beside
:func:`matmul_peak`.
"""

from __future__ import annotations

import functools
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from tutorial_lib import REPO_ROOT
from tutorial_lib.bench.records import describe, read_records, setting_label, share_of_matmul
from tutorial_lib.engine.config import PRECISIONS
from tutorial_lib.engine.device import (
    compile_support,
    environment_facts,
    precision_support,
    resolve_device,
    synchronize,
    usable_cpus,
)
from tutorial_lib.engine.errors import ConfigError

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



def defaults(device: str | torch.device | None = "auto") -> dict:
    """The default benchmark sizes for ``device`` (a copy of :data:`DEFAULTS`)."""
    kind = resolve_device(device).type
    values = dict(DEFAULTS["cuda" if kind == "cuda" else "cpu"])
    if values["workers"] is None:  # GPU machine: 1, 2, 4, ... up to the CPUs this process may use
        values["workers"] = [2**k for k in range(int(math.log2(usable_cpus())) + 1)]
    return values


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

    The yardstick a training step's achieved TFLOP/s is compared with; a ceiling only where the step
    stays below it (:func:`~tutorial_lib.bench.records.share_of_matmul`).
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

    from tutorial_lib.engine.models import meta_model

    model = meta_model(arch, num_classes)
    with torch.device("meta"):
        images = torch.randn(2, 3, image_size, image_size)
        targets = torch.randint(0, num_classes, (2,))
    with FlopCounterMode(display=False) as counter:
        torch.nn.functional.cross_entropy(model(images), targets).backward()
    return counter.get_total_flops() / 2


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


def check_layout(channels_last) -> None:
    """Refuse (ConfigError) a ``channels_last`` that is neither ``"auto"`` (on a GPU only) nor on/off: ``bool('no')``
    would turn channels-last on (r43w). The one check for the benchmark and the course's 02."""
    if not (channels_last == "auto" or isinstance(channels_last, bool)):
        raise ConfigError(f"channels_last: {channels_last!r:.60} is not auto, true or false. Fix: e.g. -p "
                          "channels_last auto (or false; in Python channels_last=False).")


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
    check_layout(channels_last)
    device = resolve_device(device)
    d = defaults(device)
    if channels_last == "auto":
        channels_last = device.type == "cuda"
    settings = dict(arch=arch or d["arch"], precision=precision, channels_last=bool(channels_last),
                    compile=compile_mode, batch_size=batch_size or d["batch_size"],
                    image_size=image_size or d["image_size"], steps=steps or d["steps"],
                    warmup=d["warmup"] if warmup is None else warmup, windows=windows or d["windows"],
                    num_classes=num_classes, device=device.type)
    record = {"kind": "train", **settings, "env": environment_facts(device), "timestamp": time.time()}
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
                      fraction_of_matmul=share_of_matmul(achieved, record["matmul_tflops"]))
    return record


def synthetic_step(settings: dict, device: torch.device, steps: int = 1000):
    """A zero-argument callable running one step of the trainer's own :class:`tutorial_lib.engine.step.TrainStep`
    on one batch of the trainer's synthetic loader (made on the device), with ``settings`` (arch, precision,
    channels_last, compile, batch_size, image_size, num_classes); it returns the loss, on the device."""
    from tutorial_lib.engine.input.loaders import loaders_for
    from tutorial_lib.engine.step import TrainStep

    cfg = bench_config(device, arch=settings["arch"], precision=settings["precision"],
                       channels_last=settings["channels_last"], compile=settings["compile"],
                       batch_size=settings["batch_size"], image_size=settings["image_size"],
                       num_classes=settings.get("num_classes", 1000), synthetic_images=steps * settings["batch_size"])
    torch.manual_seed(0)
    loaders = loaders_for(cfg, 0, 1, device)
    step = TrainStep(cfg, loaders.num_classes, device, steps_per_epoch=steps)
    batch = next(iter(loaders.train))
    return lambda: step(batch)


def _measure(s: dict, device: torch.device) -> dict:
    steps = max(1, s["warmup"] + s["steps"])
    _peak_memory_start(device)
    baseline_rss = current_rss()
    step = synthetic_step(s, device, steps)
    last = {}

    def run_steps(count: int) -> None:
        for _ in range(count):
            last["loss"] = step()

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
                   isolate: bool | str = "auto", num_classes: int = 1000, on_record=None,
                   progress=None) -> list[dict]:
    """:func:`measure_training` over every combination of the lists (``None``: device defaults).

    ``on_record(record)`` is called after each measurement (default: print a one-line summary);
    ``progress(line)``, when given, gets one line per setting as it ends (``3/16 bf16 +CL default: ok, 41.2 s``),
    for a sweep whose compiled settings take minutes.
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
    for number, (arch, precision, cl, mode, batch) in enumerate(combos, 1):
        started = time.perf_counter()
        record = measure_training(arch, precision, cl, batch, image_size, steps, warmup, mode, device, windows,
                                  num_classes, isolate=isolate, matmul_tflops=peak)
        records.append(record)
        on_record(record)
        if progress:
            label = setting_label(record) if "precision" in record else f"{precision} {mode}"
            progress(f"{number}/{len(combos)} {label}: {record.get('status')}, {time.perf_counter() - started:.1f} s")
    return records


