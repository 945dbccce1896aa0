"""Benchmarks that write JSON lines: model speed, input-pipeline speed, and all-reduce bandwidth.

* :mod:`~tutorial_lib.bench.compute`: the matmul ceiling, FLOPs per image, and the speed of the
  trainer's own step (:class:`tutorial_lib.engine.step.TrainStep`) on synthetic batches;
* :mod:`~tutorial_lib.bench.data`: loader speed of both input pipelines (CPU workers, the GPU pipeline),
  and the trainer's step fed by the trainer's loaders from JPEGs;
* :mod:`~tutorial_lib.bench.fake_imagenet`: a generated ImageNet-like JPEG set;
* :mod:`~tutorial_lib.bench.runs`: a training run's own steady-state speed, from its run directory;
* :mod:`~tutorial_lib.bench.comm`: all-reduce bandwidth across the ranks of a torchrun job;
* :mod:`~tutorial_lib.bench.records`: JSON lines written and read, one-line descriptions, tables;
* :mod:`~tutorial_lib.bench.cli`: ``python -m tutorial_lib.bench ...`` (run it with ``--help``).

The names notebooks use are importable from here (``bench.measure_training``, ``bench.describe``...).
"""

from tutorial_lib.bench.cli import main
from tutorial_lib.bench.comm import launch_allreduce, measure_allreduce, parse_size
from tutorial_lib.bench.compute import (
    DEFAULTS,
    bench_config,
    defaults,
    matmul_peak,
    measure_training,
    peak_memory,
    release_memory,
    sweep_training,
    synthetic_step,
    train_flops_per_image,
)
from tutorial_lib.bench.records import (
    append_records,
    bar_values,
    describe,
    markdown_tables,
    memory_title,
    read_records,
    results_frame,
    setting_label,
    training_summary,
)
from tutorial_lib.engine.device import (
    compile_support,
    environment_facts,
    precision_support,
    resolve_device,
    synchronize,
)

__all__ = ["DEFAULTS", "append_records", "bar_values", "bench_config", "compile_support", "defaults", "describe",
           "environment_facts", "launch_allreduce", "main", "markdown_tables", "matmul_peak", "measure_allreduce",
           "measure_training", "memory_title", "parse_size", "peak_memory", "precision_support", "read_records",
           "release_memory", "resolve_device", "results_frame", "setting_label", "sweep_training", "synchronize",
           "synthetic_step", "train_flops_per_image", "training_summary"]
