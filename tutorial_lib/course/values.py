"""The course's parameter values checked before any notebook runs: each as its notebook's default says (kind, sign),
the training settings as the trainer checks them, and what a notebook would only meet in a cell: a count of 0, a
count past what its benchmark or generator takes, benchmark rounds of hours, jobs its plan cannot build. One line
naming the parameter (SystemExit from :func:`check_parameter_values`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path


def check_parameter_values(params: dict, to_run: list[Path]) -> None:
    """Refuse, before anything runs, a parameter value that a notebook about to run would fail on: of another
    kind than its default (:func:`parameter_problem`, the check each notebook makes of papermill's values), a
    training setting that :func:`validate` refuses (a GPU assumed: the notebooks adapt to the machine), or a
    sample grid too large to draw (:func:`check_sample_count`). One line naming the parameter."""
    from tutorial_lib.bench.compute import check_layout
    from tutorial_lib.course.environment import check_sample_count
    from tutorial_lib.course.notebook import example_value, parameter_defaults, parameter_problem
    from tutorial_lib.engine.config import ConfigError, TrainConfig, make_config, validate
    from tutorial_lib.engine.input.folders import check_digits_size
    from tutorial_lib.engine.validate import check_data
    from tutorial_lib.jobs import BACKENDS

    for notebook in to_run:
        defaults = parameter_defaults(notebook)
        for name, value in params.items():
            problem = parameter_problem(defaults[name], value) if name in defaults else None
            if problem:
                raise SystemExit(f"error: parameters: {name} {problem} ({notebook.name}). Fix: e.g. -p {name} "
                                 f"{example_value(defaults[name])} (nothing was run).")
    fields = {name: value for name, value in params.items() if name in TrainConfig.__dataclass_fields__}
    layout = fields.pop("channels_last", False)  # 02's: checked as its benchmark checks it (r43w: the trainer's
    try:  # check refused auto, the notebook's on/off)
        check_layout(layout)
    except ConfigError as exc:
        raise SystemExit(f"error: parameters: {exc} (nothing was run)") from None
    try:
        if "backend" in params and params["backend"] not in BACKENDS:  # r43s: refused only in 00's fifth cell
            raise ConfigError(f"backend: unknown backend {params['backend']!r:.200}. Fix: use one of "
                              f"{', '.join(BACKENDS)}.")
        if params.get("device") == "cuda":  # 01's and 02's benchmarks run here (r43x: 02 failed in its tenth cell)
            import torch

            if not torch.cuda.is_available():
                raise ConfigError("device: cuda, but this machine has no CUDA GPU that torch can use. Fix: -p device "
                                  "auto (the GPU where there is one, else the CPU), or run on a GPU node.")
        cfg = validate(make_config(fields.pop("profile", None), **fields), check_paths=False, cuda_available=True)
        if "data_dir" in params:  # the notebooks' own data_dir defaults are theirs; a given one is checked as the
            # notebooks will use it (digits unless dataset says otherwise: 00 and every job export them there)
            check_data(dataclasses.replace(cfg, dataset=params.get("dataset", "digits")), check_paths=True)
        if "image_size" in params:  # 00 exports the digits at it (r43s: 10**9 px was refused in 00's sixth cell)
            check_digits_size(cfg.image_size)
        check_notebook_values(params)
        if "n_samples" in params:
            check_sample_count(params["n_samples"], "n_samples")
        for notebook in to_run:  # each notebook's values as it will hold them: its defaults, then what was given
            defaults = parameter_defaults(notebook)
            values = {**defaults, **{name: value for name, value in params.items() if name in defaults}}
            check_notebook_sizes(values, given=params)
            _check_imagenet_warmup(values, given=params)
            if "seed" in params and "ps_workers" in defaults:  # 07 seeds its experiment with it (r43x: 2**32 was
                _check_parameter_server(params, {**PARAMETER_SERVER_FIELDS, "seed": "seed"})  # refused in a cell)
            if params:
                check_notebook_plan(notebook, values, params)
    except (ConfigError, ValueError) as exc:
        raise SystemExit(f"error: parameters: {exc} (nothing was run)") from None


# notebook parameters (not training settings) that count something, so that 0 means nothing to do (r43t: classes 0
# was a ZeroDivisionError in 02's fourth cell, allreduce_iters 0 reached sbatch), and the largest of some
POSITIVE_PARAMETERS = ("nodes", "ranks_per_node", "imagenet_epochs", "max_gpus", "example_mb",  # r43v: 04, 07
                       "watch_timeout",  # r43w: 0 reached the watcher in 05's tenth cell
                       "classes", "per_class", "loader_batches", "bench_repeats", "jpeg_width", "jpeg_height",
                       "global_batches", "schedule_batches", "exact_batch", "exact_steps", "cancel_epochs",
                       "scale_values", "projected_gpus", "allreduce_iters", "netlab_repeats", "netlab_rates_mbit",
                       "netlab_ranks_per_node", "diagram_ranks", "ps_workers", "ps_batch", "ps_steps",
                       "example_gpus", "example_buckets", "whatif_batches", "n_samples")
# 04's ImageNet schedules are drawn at 20 points an epoch for each batch (r43aa: 2**31 epochs never ended); Goyal et
# al. train 90 epochs, the longest common ImageNet schedules a few hundred
MOST_IMAGENET_EPOCHS = 1000
MOST_PARAMETERS = {"bench_repeats": 1000, "netlab_repeats": 1000, "allreduce_iters": 1_000_000,  # bench's limits
                   "loader_batches": 1_000_000, "exact_steps": 1_000_000, "bench_warmup": 1_000_000,
                   "bench_min_time": 3600, "workers_list": 1024,
                   "watch_timeout": 1_000_000_000,  # jobs.spec.MOST_SECONDS: 03 handed a job to sbatch, then failed
                   "imagenet_epochs": MOST_IMAGENET_EPOCHS,
                   "whatif_overlaps": 1,  # a fraction of the backward pass (r43ab: 1.5 was drawn)
                   # bench's --ddp-steps and netlab.Lab's rate (r43ab: refused only in 07's netlab cell)
                   "netlab_ddp_steps": 1_000_000, "netlab_rates_mbit": 1_000_000}
# rates a worked example divides by: above 0 (r43v: 07's intra_gbit_s 0 was a ZeroDivisionError in its seventh cell)
ABOVE_ZERO = ("intra_gbit_s", "inter_gbit_s", "whatif_bandwidths")  # r43w: a what-if bandwidth of 0 too
MOST_DIAGRAM_RANKS = 16  # 07's diagrams: a ring of 16 ranks is 30 panels already (r43v: 100,000 drew on)
# parameters whose default is None (the bench's own default): a given value is checked here, kind and sign (r43u)
OPTIONAL_COUNTS = {"bench_warmup": int, "bench_min_time": (int, float), "workers_list": int}


# 07's parameter-server experiment: its parameters and the experiment's fields (r43v: ps_workers 100 ran 07 until
# the experiment's cell)
PARAMETER_SERVER_FIELDS = {"ps_workers": "workers", "ps_steps": "steps", "ps_batch": "per_worker_batch",
                           "ps_lr": "lr", "straggler_delay_s": "straggler_delay_s", "straggler_prob": "straggler_prob"}


def _check_choices_and_rates(params: dict) -> None:
    """Named settings against the names there are, rates above 0, the diagrams' rank count (r43v: 06's
    reference_preset 'x' and 07's whatif_preset failed in a cell; 07's diagram_ranks 100,000 drew on)."""
    from tutorial_lib.engine.config import ConfigError
    from tutorial_lib.scaling.presets import PRESETS

    choices = {"reference_preset": tuple(PRESETS), "whatif_preset": tuple(PRESETS),
               "calibrate_level": ("inter", "intra")}
    for name, allowed in choices.items():
        if name in params and params[name] not in allowed:
            raise ConfigError(f"{name}: {params[name]!r:.60} is not one of {', '.join(allowed)}. Fix: e.g. -p {name} "
                              f"{allowed[0]}.")
    for name in ABOVE_ZERO:
        value = params.get(name)
        if any(isinstance(v, (int, float)) and not isinstance(v, bool) and v <= 0
               for v in (value if isinstance(value, (list, tuple)) else [value])):
            raise ConfigError(f"{name}: {value!r:.60} holds a rate that is not above 0. Fix: e.g. -p {name} 100.")
    from tutorial_lib.engine.config import COMPILE_MODES, PRECISIONS

    lists = {"precisions": PRECISIONS, "train_precisions": PRECISIONS, "compile_modes": COMPILE_MODES}
    for name, allowed in lists.items():  # r43w: 01 skipped every setting of '[fp64]' and ended rc 0
        value = params.get(name)
        odd = [v for v in value if v not in allowed] if isinstance(value, (list, tuple)) else []
        if odd:
            raise ConfigError(f"{name}: {odd[0]!r:.60} is not one of {', '.join(allowed)}. Fix: e.g. -p {name} "
                              f"'[{allowed[0]}]'.")
    ranks = params.get("diagram_ranks")
    if isinstance(ranks, int) and not isinstance(ranks, bool) and (
            ranks < 2 or ranks > MOST_DIAGRAM_RANKS or ranks & (ranks - 1)):
        raise ConfigError(f"diagram_ranks: {ranks!r:.60} is not a power of two from 2 to {MOST_DIAGRAM_RANKS}. Fix: "
                          "e.g. -p diagram_ranks 4.")


def _check_imagenet_warmup(values: dict, given: dict) -> None:
    """04's ImageNet schedule: its warmup within its epochs, as the trainer checks a run's (r43aa: a warmup of 2**31
    epochs in a schedule of 90 was drawn)."""
    from tutorial_lib.engine.config import ConfigError
    from tutorial_lib.engine.errors import shorten
    from tutorial_lib.numbers import finite

    epochs, warmup = values.get("imagenet_epochs"), values.get("imagenet_warmup_epochs")
    numbers = [v for v in (epochs, warmup) if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if len(numbers) == 2 and (not finite(warmup) or not 0 <= warmup <= epochs):
        name = "imagenet_epochs" if "imagenet_warmup_epochs" not in given else "imagenet_warmup_epochs"
        raise ConfigError(f"{name}: a warmup of {shorten(warmup, 40)} epochs in a schedule of "
                          f"{shorten(epochs, 40)} epochs; the warmup lies within the schedule. Fix: e.g. -p "
                          f"imagenet_warmup_epochs 5 (Goyal et al.), from 0 to imagenet_epochs.")


def _check_parameter_server(params: dict, fields: dict = PARAMETER_SERVER_FIELDS) -> None:
    """The parameter-server experiment's settings given as parameters (``fields``: {parameter: the experiment's
    field}), checked as it checks them."""
    from tutorial_lib.param_server import ExperimentConfig, check_experiment

    given = {field: params[name] for name, field in fields.items() if name in params}
    staleness = params.get("staleness", [0])
    if given or "staleness" in params:
        names = {field: name for name, field in fields.items()}
        check_experiment(dataclasses.replace(ExperimentConfig(), **given),
                         tuple(staleness) if isinstance(staleness, (list, tuple)) else (staleness,), names)


def check_notebook_values(params: dict) -> None:
    """Refuse a notebook parameter that is of the right kind but no value its notebook can use: a count of 0, a count
    over the benchmark's limit, a Slurm time Slurm would read otherwise, an all-reduce size list bench refuses.
    Raises ConfigError naming it."""
    from tutorial_lib.bench.comm import parse_size
    from tutorial_lib.engine.config import ConfigError
    from tutorial_lib.jobs.slurm_values import check_time
    from tutorial_lib.numbers import finite

    for name, kind in OPTIONAL_COUNTS.items():
        given = params.get(name)
        values = given if isinstance(given, (list, tuple)) and name == "workers_list" else [given]
        listed = name != "workers_list" or isinstance(given, (list, tuple))  # r43v: a bare 3 failed in 02's cell 6
        if given is not None and (not listed or not values or not all(
                isinstance(v, kind) and not isinstance(v, bool) and finite(v) and v >= 0 for v in values)):
            what = ("a list of whole numbers" if name == "workers_list" else "a whole number" if kind is int
                    else "a number")
            example = "'[0, 2]'" if name == "workers_list" else "2"  # quoted for the shell (r43ac)
            raise ConfigError(f"{name}: {given!r:.100} is not {what} of 0 or more. Fix: e.g. -p {name} {example}, or "
                              "leave it out (the bench's default).")
    for name in dict.fromkeys((*POSITIVE_PARAMETERS, *OPTIONAL_COUNTS, *MOST_PARAMETERS)):
        values = params.get(name)
        values = values if isinstance(values, (list, tuple)) else [values]
        if name in POSITIVE_PARAMETERS and any(isinstance(v, (int, float)) and not isinstance(v, bool) and v < 1
                                               for v in values):
            example = "'[1, 2]'" if isinstance(params[name], (list, tuple)) else "2"
            raise ConfigError(f"{name}: {params[name]!r:.100} holds a count below 1. Fix: counts of 1 or more, e.g. "
                              f"-p {name} {example}.")
        most = MOST_PARAMETERS.get(name)
        if most is not None and any(isinstance(v, (int, float)) and not isinstance(v, bool) and v > most
                                    for v in values):
            raise ConfigError(f"{name}: {params[name]!r:.100} is over {most:,}. Fix: at most {most:,}.")
    _check_parameter_server(params)
    _check_choices_and_rates(params)
    lab_ranks = params.get("netlab_ranks_per_node")
    if isinstance(lab_ranks, int) and not isinstance(lab_ranks, bool):
        from tutorial_lib.analyses.twolevel import LAB_NODES, check_lab_ranks

        check_lab_ranks(LAB_NODES, lab_ranks, "netlab_ranks_per_node")
    if isinstance(params.get("time_limit"), str) and params["time_limit"]:
        check_time(params["time_limit"], "time_limit")
    for name in ("allreduce_sizes", "netlab_sizes"):  # r43v: 07's netlab_sizes 'x;y' was not checked
        if isinstance(params.get(name), str) and params[name]:
            for size in params[name].split(","):
                try:
                    parse_size(size)
                except ValueError:
                    raise ConfigError(f"{name}: {size!r:.60} is not a message size. Fix: a comma list such as "
                                      "4K,1M,16M (bytes, K, M, G).") from None


def check_notebook_sizes(values: dict, given: dict) -> None:
    """What one notebook's values add up to, checked as bench checks its flags (r43v: each value within its limit,
    a set of 10**9 classes generated on, JPEGs of 100,000 px a MemoryError in a cell, 1,000 rounds of an hour run
    on): 02's generated set and its JPEG size, and the least time the benchmark rounds of 01 and 02 take. Raises
    ConfigError naming the parameter (one that was ``given`` where several add up)."""
    from tutorial_lib.bench.durations import E2E_MAX_IMAGES_PER_SEC, E2E_MAX_SECONDS
    from tutorial_lib.bench.fake_imagenet import check_image_fits
    from tutorial_lib.bench.set_flags import MAX_FILES
    from tutorial_lib.course.kernel import kernel_available_bytes
    from tutorial_lib.engine.config import ConfigError

    def counts(*names: str) -> list:
        return [values.get(name) if isinstance(values.get(name), int) and not isinstance(values.get(name), bool)
                else None for name in names]

    def blamed(*names: str) -> str:  # the first of ``names`` that was given, else the first
        return next((name for name in names if name in given), names[0])

    _check_local_step(values)  # the step's memory first: a batch that cannot fit is named as such
    classes, per_class, width, height = counts("classes", "per_class", "jpeg_width", "jpeg_height")
    made, fewer = per_class, "-p classes 2 -p per_class 16"  # 02 makes more per class where its batches need them
    if classes and per_class and "loader_batches" in values:
        from tutorial_lib.bench.fake_imagenet import planned_per_class

        batch, batches = counts("batch_size", "loader_batches")
        if batch and batches and values.get("device", "auto") in ("auto", "cpu", "cuda"):
            made = planned_per_class(classes, per_class, batch, batches, values.get("device", "auto"))
    raised = made is not None and per_class is not None and made > per_class  # r43z: the set 02 makes was not counted
    set_names = (tuple(n for n in ("loader_batches", "batch_size") if counts(n)[0] != 1) or ("loader_batches",)
                 if raised else ("classes", "per_class"))
    if raised:
        fewer = "-p loader_batches 4 -p batch_size 8 (02 makes enough images for its batches)"
    if classes and made and classes * made > MAX_FILES:
        name = blamed(*set_names)
        raise ConfigError(f"{name}: {values[name]!r:.60} makes a set of {classes:,} classes x {made:,} images, "
                          f"over the {MAX_FILES:,} files a generated set may have. Fix: e.g. {fewer}.")
    if width and height:
        check_image_fits((width, height), ("jpeg_width", "jpeg_height"), "-p jpeg_width 500 -p jpeg_height 375",
                         blamed=blamed("jpeg_width", "jpeg_height"), available=kernel_available_bytes())
    if classes and made and width and height and isinstance(values.get("data_dir"), str):
        from tutorial_lib import REPO_ROOT
        from tutorial_lib.bench.fake_imagenet import check_set_fits, default_val_per_class, real_data_set

        root = Path(REPO_ROOT, values["data_dir"])  # the notebooks' cwd; a given one was made absolute
        if real_data_set(root) is None:  # generated there (a set of one's own is used as it is)
            check_set_fits(root, classes * (made + default_val_per_class(made)), (width, height),
                           blamed(*set_names, "jpeg_width", "jpeg_height"), f"fewer images, e.g. {fewer}")
    _check_listed_once(values)
    if isinstance(values.get("precisions"), list) and values["precisions"] and "compile_modes" in values:
        _runnable(values, "precisions")
    if isinstance(values.get("compile_modes"), list) and values["compile_modes"] and "precisions" in values:
        _runnable(values, "compile_modes")
    repeats, batches, batch = counts("bench_repeats", "loader_batches", "batch_size")
    min_time = values.get("bench_min_time") if isinstance(values.get("bench_min_time"), (int, float)) else None
    if not repeats or (min_time is None and not batches):
        return
    settings = _settings_at_least(values)
    seconds = (min_time or 0) * repeats * settings
    images = (batches or 0) * (batch or 1) * repeats * settings
    import torch

    gpu = values.get("device") == "cuda" or (values.get("device") != "cpu" and torch.cuda.is_available())
    at_most = E2E_MAX_IMAGES_PER_SEC["cuda" if gpu else "cpu"]  # r43x: the GPU's rate was taken on -p device cpu
    lower = max(seconds, images / at_most)
    if lower > E2E_MAX_SECONDS:
        if seconds >= images / at_most:
            name, fix = blamed("bench_min_time", "bench_repeats"), ("fewer bench_repeats or a shorter bench_min_time "
                                                                      "(e.g. -p bench_repeats 3 -p bench_min_time 2)")
        else:  # r43w: batch_size was not named; r43x: nor was a loader_batches of 1 the one to lower
            name = blamed(*[n for n in ("loader_batches", "batch_size", "bench_repeats") if counts(n)[0] != 1]
                          or ["loader_batches"])
            fix = ("fewer loader_batches, a smaller batch_size or fewer bench_repeats (e.g. -p loader_batches 4 -p "
                   "batch_size 8)")
        raise ConfigError(f"{name}: {values[name]!r:.60} makes the benchmark's {repeats:,} rounds of {settings} "
                          f"setting(s) last at least {lower / 3600:,.1f} h, over the {E2E_MAX_SECONDS // 3600} h a "
                          f"benchmark may take. Fix: {fix}.")


def _check_local_step(values: dict) -> None:
    """The model step 01's and 02's benchmarks take on their own device (batch_size x image_size; 01: its heaviest
    precision, 1,000 classes as it builds the model; 02: its precision and its set's classes), estimated as bench
    estimates it (r43x: a batch of 100,000 was accepted and the set generated first; ``bench e2e`` refuses it)."""
    from tutorial_lib.engine.device import resolve_device
    from tutorial_lib.engine.memory import check_step_fits

    batch, size = values.get("batch_size"), values.get("image_size")
    if "loader_batches" in values:  # 02
        classes, precision = values.get("classes"), values.get("precision", "fp32")
    elif isinstance(values.get("precisions"), list) and values["precisions"]:  # 01
        classes = 1000
        precision = "fp32" if {"fp32", "tf32"} & set(values["precisions"]) else values["precisions"][0]
    else:
        return
    if all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (batch, size, classes)):
        check_step_fits(values.get("arch", "resnet18"), classes, size, batch,
                        resolve_device(values.get("device", "auto")), precision)


def check_notebook_plan(notebook: Path, values: dict, given: dict) -> None:
    """Build the jobs a notebook with a plan will submit (:mod:`tutorial_lib.course.plans`, the notebook's own
    call) and validate them as ``jobs.submit`` will, a GPU assumed (r43v: 03 with
    exact_workers 1,025 failed in its third cell, after --out was written). Data folders are not checked: the
    notebooks export them first."""
    import inspect

    import torch

    from tutorial_lib.course import plans
    from tutorial_lib.engine.config import ConfigError

    function = plans.PLANS.get(notebook.stem)
    if function is None:
        return
    gpus = max(1, torch.cuda.device_count())  # a GPU assumed, as for the training settings above
    backend = "slurm" if values.get("backend") == "slurm" else "local"
    taken = inspect.signature(function).parameters
    arguments = {k: v for k, v in values.items() if k in taken and k not in ("gpus", "backend")}
    try:
        plans_of_it = function(**arguments, gpus=gpus, backend=backend)
        plans_of_it.check(gpus_assumed=True, check_data=False)
    except ConfigError as exc:  # the job is named; the parameters that made it are the user's to change
        shaped = [f"{name} {values[name]!r:.40}" for name in given if name in arguments]
        raise ConfigError(f"{exc} ({notebook.stem}'s jobs, from {', '.join(shaped) or 'its defaults'})") from None


def _settings_at_least(values: dict) -> int:
    """The settings a notebook's benchmark surely times in each round (r43w: 1 was counted where 02 tries its default
    worker list and 01 every channels_last option): 02 each worker count; 01 each channels_last option of each
    precision and compile mode its device runs."""
    if "loader_batches" in values:  # 02
        if isinstance(values.get("workers_list"), list):
            return max(1, len(values["workers_list"]))
        from tutorial_lib.bench.data import worker_counts

        return len(worker_counts())
    modes, layouts = values.get("compile_modes"), values.get("channels_last_options")
    precisions = values.get("precisions")
    if isinstance(modes, list) and isinstance(layouts, list) and isinstance(precisions, list):  # 01
        # r43x: fp32 alone was counted, and a CPU times bf16 too; r43y: and the compiled modes it runs
        return max(1, len(layouts) * len(_runnable(values, "precisions")) * len(_runnable(values, "compile_modes")))
    return 1


# lists whose repeated entry the plan refuses, naming the job it would make twice (jobs.plan.Plan.check)
PLANNED_LISTS = ("global_batches", "scale_values", "train_precisions")


def _check_listed_once(values: dict) -> None:
    """Refuse an entry listed twice in a notebook's list of settings (a size list by the bytes it names): each entry
    is measured, run or drawn once more (r43z: 01's ``compile_modes '[default, default]'`` was timed twice and
    counted once; r43aa: 07's ``allreduce_sizes 4K,4096`` measured 4 KiB twice)."""
    from tutorial_lib.bench.comm import parse_size
    from tutorial_lib.engine.config import ConfigError
    from tutorial_lib.engine.errors import shorten

    for name, listed in values.items():
        if name.endswith("_sizes") and isinstance(listed, str):  # checked as message sizes already
            texts = [text for text in listed.split(",") if text]
            sizes = [parse_size(text) for text in texts]
            for index, size in enumerate(sizes):
                if size in sizes[:index]:
                    once = [t for i, t in enumerate(texts) if sizes[i] not in sizes[:i]]
                    raise ConfigError(f"{name}: {shorten(texts[index], 40)} is {size:,} bytes again, and each size "
                                      f"is measured once. Fix: list each size once, e.g. -p {name} "
                                      f"{shorten(','.join(once), 60)}.")
        if not isinstance(listed, list) or name in PLANNED_LISTS:
            continue
        once, twice = [], []
        for item in listed:  # numbers by value (r43ab: [1, 1.0]), but True == 1: a layout is not a worker count
            (twice if any(item == seen and isinstance(item, bool) == isinstance(seen, bool) for seen in once)
             else once).append(item)
        if twice:
            shown = next(f"[{', '.join(str(v) for v in once[:count])}]" for count in range(len(once), 0, -1)
                         if count == 1 or len(", ".join(str(v) for v in once[:count])) <= 60)  # r43ab: pasted as is
            raise ConfigError(f"{name}: {shorten(twice[0], 40)} is listed twice, and each entry is measured, run or "
                              f"drawn once more. Fix: list each setting once, e.g. -p {name} '{shown}'.")


# 01's lists of settings its device may not run: (what an entry is, whether the device runs it, an example)
_RUNNABLE = {"precisions": ("precision", "precision_support", "'[fp32, bf16]'"),
             "compile_modes": ("compile mode", "compile_support", "'[none, default]'")}


def _runnable(values: dict, name: str) -> set:
    """The entries of 01's list ``name`` (precisions or compile_modes) its device runs; ConfigError where it runs
    none (r43y: precisions '[fp16, tf32]' on a CPU, r43z: compile_modes '[reduce-overhead]': every setting skipped,
    rc 0)."""
    from tutorial_lib.engine import device as devices
    from tutorial_lib.engine.config import ConfigError
    from tutorial_lib.engine.errors import shorten

    noun, support, example = _RUNNABLE[name]
    device = devices.resolve_device(values.get("device", "auto"))
    listed = values[name]
    reasons = {entry: getattr(devices, support)(entry, device) for entry in listed}
    runs = {entry for entry, reason in reasons.items() if reason is None}
    if not runs:
        raise ConfigError(f"{name}: {shorten(listed, 60)} holds no {noun} this machine's {device.type} runs "
                          f"({reasons[listed[0]]}). Fix: e.g. -p {name} {example}.")
    return runs
