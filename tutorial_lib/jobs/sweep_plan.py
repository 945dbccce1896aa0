"""A sweep's plan: one (config, submit arguments) per value of the swept field, every value checked before any job
is submitted (:func:`tutorial_lib.jobs.sweep` submits them)."""

from __future__ import annotations

import dataclasses
import re

from tutorial_lib.engine.config import ConfigError, TrainConfig, check_is_config, shorten, validate
from tutorial_lib.jobs.spec import check_counts

RENAMED_ARGUMENTS = {"gpus_per_node": "ranks_per_node"}
SWEEP_PATH_FIELDS = ("output_root", "data_dir", "stage_to", "index_dir")  # refused as a sweep's `over`
# The most jobs one sweep submits. The course's sweeps have 2-6 values and a scaling study a few more; 64 jobs
# already hold a cluster's queue for days. 10,000 values ran minutes of checks, then submitted 10,000 jobs (r43f):
# a longer list is a mistake (range(10000) for range(10)), refused in one line before any check or submit.
MAX_SWEEP_VALUES = 64
MAX_NAME = 100  # a run name's characters at most (engine.config's safe-name pattern)


def sweep_plan(config: TrainConfig, over: str, values) -> list[tuple[TrainConfig, dict]]:
    """The (config, submit arguments) of each job of a sweep, every value checked (ConfigError naming ``over``
    or ``values`` and the fix)."""
    check_is_config(config)
    if isinstance(over, str) and over in RENAMED_ARGUMENTS:
        raise ConfigError(f"over: {over} was renamed {RENAMED_ARGUMENTS[over]}. Fix: over={RENAMED_ARGUMENTS[over]!r}.")
    fields = {f.name for f in dataclasses.fields(TrainConfig)} - {"name"}  # the name is made from the value
    if not isinstance(over, str) or over not in fields | {"nodes", "ranks_per_node"}:
        raise ConfigError(f"over: cannot sweep {shorten(over)}. Fix: use 'nodes', 'ranks_per_node' or a TrainConfig "
                          "field other than name (each job's name is made from it).")
    if over in SWEEP_PATH_FIELDS:  # a path cannot be a run name's suffix (/tmp/x would make 'x-output_root/tmp/x')
        raise ConfigError(f"over: {over} is a path, and a sweep names each job after its value. Fix: build one "
                          f"config per {over} (dataclasses.replace(config, {over}=..., name=...)) and submit each.")
    if isinstance(values, (str, bytes, dict)) or not isinstance(values, (list, tuple, range)) or not values:
        raise ConfigError(f"values: expected a non-empty list of values for {over}, got {shorten(values)}. "
                          f"Fix: e.g. values=[1, 2] (one job per value).")
    if len(values) > MAX_SWEEP_VALUES:
        raise ConfigError(f"values: {len(values):,} values would submit {len(values):,} jobs, and a sweep submits at "
                          f"most {MAX_SWEEP_VALUES}. Fix: give at most {MAX_SWEEP_VALUES} values (e.g. values=[1, 2, "
                          "4, 8]), or split the sweep and submit each part after the last has ended.")
    planned = []
    for value in values:
        if over in ("nodes", "ranks_per_node"):  # the value first: a name is made of it (r43x: 5,000 digits were
            check_counts(**{over: value})  # str()'s ValueError)
        else:
            validate(dataclasses.replace(config, **{over: value}), check_paths=False, cuda_available=True)
        name = f"{config.name}-{over}{name_suffix(value)}"
        if len(name) > MAX_NAME:  # r43aa: refused as the user's unsafe ``name``
            raise ConfigError(f"values: {shorten(value)} makes the run name {shorten(name, 60)}, over the "
                              f"{MAX_NAME} characters a run name may have. Fix: a shorter value or "
                              f"config name, or one config per value with a name of your own "
                              f"(dataclasses.replace(config, {over}=..., name=...)).")
        # the second would find the first's job; 1 and 1.0, 0.0 and -0.0 are one setting with two names (r43aa)
        earlier = zip(planned, values[:len(planned)], strict=True)
        if any(job_config.name == name or swept == value for (job_config, _), swept in earlier):
            once = [v for index, v in enumerate(values) if all(v != before for before in values[:index])]
            raise ConfigError(f"values: {shorten(value)} is given twice, and each value is one job of its own "
                              f"name ({shorten(name, 60)}). Fix: give each value once, e.g. values={shorten(once)}.")
        if over in ("nodes", "ranks_per_node"):
            check_counts(**{over: value})
            planned.append((dataclasses.replace(config, name=name), {over: value}))
        else:
            job_config = dataclasses.replace(config, name=name, **{over: value})
            validate(job_config, check_paths=False, cuda_available=True)  # the data and GPUs: at submit
            planned.append((job_config, {}))
    return planned


def name_suffix(value) -> str:
    """A swept value as a run name's suffix: a list's items joined by '_' (``[30, 60]``: ``30_60``; none: ``none``),
    any character a run name may not hold made '_' (r43z: ``lr_milestones=[1]`` made the name 'r-lr_milestones[1]',
    refused as the user's ``name``)."""
    text = ("_".join(str(item) for item in value) or "none") if isinstance(value, (list, tuple)) else str(value)
    return re.sub(r"[^A-Za-z0-9._-]", "_", text)
