"""Benchmarks re-timed in interleaved rounds (see :mod:`tutorial_lib.bench.timing`), for the notebooks.

* :func:`retime_training`: re-time the ``train`` records of :func:`tutorial_lib.bench.sweep_training`
  interleaved, keeping their memory and FLOP figures (notebook 01).
* :func:`model_and_files`: the model alone and the trainer fed from JPEG files, interleaved (notebook 02).
* :func:`bars` and :func:`speeds`: medians and ranges of records, for plots and summaries.
"""

from __future__ import annotations

import time

from tutorial_lib.bench.compute import defaults, measure_training, release_memory, synthetic_step
from tutorial_lib.bench.data import measure_e2e
from tutorial_lib.bench.records import setting_label, share_of_matmul
from tutorial_lib.bench.timing import (
    SPREAD_METHOD,
    Spread,
    interleave,
    job_threads,
    resolve,
    step_rate,
    store,
)
from tutorial_lib.engine.device import resolve_device, synchronize


def retime_training(records: list[dict], min_time: float | None = None, repeats: int | None = None,
                    warmup: int | None = None, progress=None) -> list[dict]:
    """Time the successful ``train`` records' settings again, interleaved, in this process.

    Every setting's trainer step (:class:`tutorial_lib.TrainStep`) is built once and warmed
    up; then the settings take turns, each timed for at least ``min_time`` seconds per round, on the
    threads a training job gets (:func:`job_threads`).
    Returns copies of ``records`` whose ``images_per_sec`` is the median over the rounds, with
    ``images_per_sec_low``/``_high``/``_samples``, and whose step time and TFLOP/s follow from it;
    memory and FLOP counts stay those of the original measurement. Other records are kept as they are.
    ``progress(line)``, when given, gets a line as each setting is ready (compiling one takes far longer
    than timing it) and one before the rounds, with how long they take at least.
    """
    ok = [i for i, r in enumerate(records) if r.get("status") == "ok" and r.get("kind") == "train"]
    if not ok:
        return [dict(r) for r in records]
    device = resolve_device(records[ok[0]]["device"])
    min_time, repeats = resolve(device.type, min_time, repeats)
    warmup = defaults(device)["warmup"] if warmup is None else warmup
    labels = {index: setting_label(records[index]) for index in ok}
    with job_threads(device.type) as threads:
        steps = {}
        for number, index in enumerate(ok, 1):
            started = time.perf_counter()
            steps[index] = _warm_step(records[index], device, warmup)
            if progress:
                progress(f"ready {number}/{len(ok)} {labels[index]}: built and warmed up in "
                         f"{time.perf_counter() - started:.1f} s")
        if progress:
            progress(f"timing {len(ok)} settings in {repeats} rounds of at least {min_time:g} s each "
                     f"(at least {len(ok) * repeats * min_time:.0f} s)")
        spreads = interleave({labels[i]: (lambda i=i: records[i]["batch_size"] * step_rate(steps[i], min_time))
                              for i in ok}, repeats)
    steps.clear()
    release_memory(device)
    out = []
    for index, record in enumerate(records):
        record = dict(record)
        if index in labels:
            spread = spreads[labels[index]]
            store(record, "images_per_sec", spread)
            record.update(step_time_ms=1000 * record["batch_size"] / spread.median, min_time_s=min_time,
                          repeats=repeats, timer="torch.utils.benchmark blocked_autorange", spread_method=SPREAD_METHOD,
                          torch_threads=threads)
            if record.get("flops_per_image"):
                record["achieved_tflops"] = record["flops_per_image"] * spread.median / 1e12
                record["fraction_of_matmul"] = share_of_matmul(record["achieved_tflops"], record["matmul_tflops"])
        out.append(record)
    return out


def _warm_step(record: dict, device, warmup: int):
    """A ready-to-time ``step()`` for one train record's settings (model built, warm-up steps run)."""
    step = synthetic_step(record, device)
    for _ in range(max(1, warmup)):
        step()
    synchronize(device)
    return step


def bars(records: list[dict], key: str = "images_per_sec", label=None) -> tuple[list, list, list]:
    """(labels, medians, (low, high) ranges) of the ``ok`` records, for
    :func:`tutorial_lib.figures.plots.plot_bars` with ``ranges``."""
    label = label or setting_label
    ok = [r for r in records if r.get("status") == "ok" and r.get(key) is not None]
    spreads = [Spread.from_record(r, key) for r in ok]
    return [label(r) for r in ok], [s.median for s in spreads], [(s.low, s.high) for s in spreads]


def speeds(records: list[dict], label=None, key: str = "images_per_sec", unit: str = "images/s") -> dict:
    """``{"<setting> images/s": Spread}`` of the ``ok`` records (for a notebook's summary)."""
    names, _, _ = bars(records, key, label)
    ok = [r for r in records if r.get("status") == "ok" and r.get(key) is not None]
    return {f"{name} {unit}": Spread.from_record(r, key) for name, r in zip(names, ok, strict=True)}


def model_and_files(data_dir, arch: str, precision: str, channels_last, batch_size: int, image_size: int,
                    workers: int, device="auto", min_time: float | None = None, repeats: int | None = None,
                    warmup: int | None = None, num_classes: int = 1000) -> tuple[dict, dict]:
    """The model alone (the trainer's step on batches already on the device) and the trainer fed
    from the JPEG files by its own loader (:func:`tutorial_lib.data.measure_e2e`), timed
    interleaved: ``(model_record, e2e_record)``, each with the median and range of its images/s
    (the e2e record also of ``data_wait_fraction``), both on the threads a training job gets
    (:func:`job_threads`). ``num_classes``: the data set's classes."""
    device = resolve_device(device)
    min_time, repeats = resolve(device.type, min_time, repeats)
    model = measure_training(arch, precision, channels_last, batch_size, image_size, 1, warmup, "none", device,
                                   num_classes=num_classes)
    if model.get("status") != "ok":
        return model, {**model, "kind": "e2e"}
    rounds: list[dict] = []

    def from_files() -> float:
        rounds.append(measure_e2e(data_dir, arch, precision, model["channels_last"], batch_size,
                                             image_size, 1, warmup, workers, "none", device, reference=False,
                                             min_time=min_time))
        return rounds[-1].get("images_per_sec", float("nan"))

    with job_threads(device.type) as threads:
        step = _warm_step(model, device, defaults(device)["warmup"] if warmup is None else warmup)
        spreads = interleave({"model": lambda: batch_size * step_rate(step, min_time), "files": from_files}, repeats)
    release_memory(device)
    retimed = dict(model)
    store(retimed, "images_per_sec", spreads["model"])
    retimed.update(step_time_ms=1000 * batch_size / spreads["model"].median, min_time_s=min_time, repeats=repeats,
                   timer="torch.utils.benchmark blocked_autorange", spread_method=SPREAD_METHOD, torch_threads=threads)
    if retimed.get("flops_per_image"):
        retimed["achieved_tflops"] = retimed["flops_per_image"] * spreads["model"].median / 1e12
        retimed["fraction_of_matmul"] = share_of_matmul(retimed["achieved_tflops"], retimed["matmul_tflops"])
    e2e = dict(rounds[0])
    if e2e.get("status") == "ok":
        store(e2e, "images_per_sec", spreads["files"])
        store(e2e, "data_wait_fraction", Spread.of([r["data_wait_fraction"] for r in rounds]))
        e2e.update(synthetic_images_per_sec=spreads["model"].median, min_time_s=min_time, repeats=repeats,
                   spread_method=SPREAD_METHOD, torch_threads=threads)
    return retimed, e2e
