"""What each notebook will submit, decided from its parameters alone: nothing runs here.

    from tutorial_lib.course import plans
    plan = plans.multi_node(profile="smoke", output_root="runs/course", ..., site=None,
                            gpus=torch.cuda.device_count(), backend="local")
    plan.check()                      # every job validated as the notebook will submit it
    jobs = plan.submit()              # {job name: Job}

A notebook passes each parameter a plan reads by name (keyword arguments, so the notebook shows every
input of its jobs), the number of GPUs on this machine and the backend it resolved. ``site`` (the
parameter files' ``site:`` block) goes to every job, for Slurm. The plan adapts the jobs to the machine
(fewer ranks than asked when this machine has fewer GPUs and no Slurm, CPU ranks for an exactness
check that needs more ranks than GPUs) and says so in ``plan.notes``. ``tests/test_params.py`` calls
the same functions with every parameter file in ``notebooks/params/`` and a GPU assumed, so a bad
combination fails in CI instead of in the middle of a course run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tutorial_lib.engine.config import PROFILES, ConfigError, TrainConfig, make_config

_FIELDS = {f.name for f in dataclasses.fields(TrainConfig)}
DIGITS_MARKER = "digits_export.json"  # written by engine.input.folders.export_digits
DIGITS_TRAIN_IMAGES = 1438  # scikit-learn's 1,797 digits less the 20% validation split of export_digits


@dataclass
class Planned:
    """One job as a notebook will submit it: its training config, its resources, what it waits for."""

    config: TrainConfig
    nodes: int = 1
    ranks_per_node: int = 1
    options: dict = field(default_factory=dict)  # more jobs.submit arguments: time, partition, sbatch_options...
    after: str | None = None  # name of an earlier planned job this one starts after

    @property
    def name(self) -> str:
        """The job's (and run directory's) name."""
        return self.config.name


@dataclass
class Plan:
    """The jobs of one notebook, in submission order, and what was adapted to this machine."""

    jobs: list[Planned]
    backend: str
    notes: list[str] = field(default_factory=list)
    extras: dict = field(default_factory=dict)  # notebook-specific facts (e.g. 06's unmeasured GPU counts)
    submitted: dict = field(default_factory=dict, repr=False)  # {name: Job} once submitted
    groups: dict = field(default_factory=dict)  # {group: [job names]}: the runs a notebook compares together

    def __getitem__(self, name: str) -> Planned:
        return next(job for job in self.jobs if job.name == name)

    def group(self, name: str) -> list:
        """The submitted Jobs of one of the plan's groups (e.g. 04's ``sweep``), in the plan's order; the plan
        knows which runs belong together, so no notebook picks them by a name prefix or a row position."""
        if name not in self.groups:
            raise KeyError(f"group: the plan has no group {name!r}; its groups are {', '.join(self.groups)}")
        missing = [job for job in self.groups[name] if job not in self.submitted]
        if missing:
            raise KeyError(f"group {name!r}: {', '.join(missing)} not submitted yet. Fix: plan.submit() first.")
        return [self.submitted[job] for job in self.groups[name]]

    def spec(self, name: str):
        """The JobSpec ``jobs.submit`` will build for job ``name`` (validated: :meth:`check`'s, for one job)."""
        from tutorial_lib.jobs.spec import make_spec

        job = self[name]
        return make_spec(job.config, job.nodes, job.ranks_per_node, on_cluster=self.backend == "slurm",
                         **job.options)

    def check(self, gpus_assumed: bool = False, check_data: bool = True) -> list:
        """Validate every job exactly as ``jobs.submit`` will (``gpus_assumed``: as on a GPU machine);
        return the JobSpecs. Raises ConfigError naming the job, the field and the fix."""
        from tutorial_lib.jobs.spec import make_spec

        names = [job.name for job in self.jobs]
        twice = next((name for name in names if names.count(name) > 1), None)
        if twice:  # r43x: 04's global_batches [16, 16] sent the second job to sbatch, refused as a "live job"
            raise ConfigError(f"job {twice}: planned twice, and two jobs cannot share one run directory. Fix: give "
                              "each value of the notebook's list once.")
        specs = []
        for job in self.jobs:
            try:
                specs.append(make_spec(job.config, job.nodes, job.ranks_per_node,
                                       check_data=check_data, on_cluster=gpus_assumed or self.backend == "slurm",
                                       **job.options))
            except ConfigError as exc:
                raise ConfigError(f"job {job.name}: {exc}") from None
        return specs

    def submit(self, *names: str, verbose: bool = False, **submit_args) -> dict:
        """Submit the named jobs (all when none are named), ``fresh``, on the plan's backend; return
        ``{name: Job}`` in plan order. A job's ``after`` may name a job submitted by an earlier call."""
        from tutorial_lib import jobs

        submitted = {}
        for job in self.jobs:
            if names and job.name not in names:
                continue
            after = self.submitted.get(job.after) if job.after else None
            submitted[job.name] = self.submitted[job.name] = jobs.submit(
                job.config, nodes=job.nodes, ranks_per_node=job.ranks_per_node, backend=self.backend, fresh=True,
                verbose=verbose, after=after, **job.options, **submit_args)
        return submitted

    def describe(self) -> str:
        """One line per job (ranks, device, batch) and the notes."""
        lines = [f"{job.name}: {job.nodes} node(s) x {job.ranks_per_node} rank(s) on {_device(job.config)}, "
                 f"batch {job.config.batch_size} per rank" for job in self.jobs]
        return "\n".join(lines + [f"note: {note}" for note in self.notes])


# ------------------------------------------------------------------ helpers
def _device(cfg: TrainConfig) -> str:
    return "CPU processes" if cfg.device == "cpu" else "GPUs" if cfg.device == "cuda" else "auto"


def is_digits(dataset: str, data_dir: str) -> bool:
    """True when the training data is the digits export (exported here, or found by its marker file)."""
    return dataset == "digits" or (Path(data_dir) / DIGITS_MARKER).is_file()


@dataclass(frozen=True)
class Recipe:
    """A notebook's recipe parameters: the profile, and what it overrides (None: the profile's value)."""

    profile: str
    base_lr: float | None = None
    warmup_epochs: float | None = None
    train_compile: str | None = None


def recipe(base: Recipe, name: str, **fields) -> TrainConfig:
    """A notebook job's config: the profile, the notebook's recipe parameters, then ``fields``.

    On the digits (8x8 scans) crops stay large and flips stay off whatever the profile says: a
    mirrored 3 is not a 3, and an 8%-crop of 8x8 pixels holds nothing.
    """
    profile = base.profile
    values = {key: getattr(base, key) for key in ("base_lr", "warmup_epochs") if getattr(base, key) is not None}
    if base.train_compile is not None:
        values["compile"] = base.train_compile
    values.update(fields)
    defaults = {**dataclasses.asdict(TrainConfig()), **PROFILES.get(profile, {}), **values}
    if is_digits(defaults["dataset"], defaults["data_dir"]):
        values = {"hflip": False, "min_crop_scale": max(0.5, defaults["min_crop_scale"]), **values}
    return make_config(profile, name=name, **values)


def on_gpu(cfg: TrainConfig, gpus: int) -> bool:
    """Whether ``cfg``'s ranks use GPUs on a machine with ``gpus`` GPUs."""
    return cfg.device == "cuda" or (cfg.device == "auto" and gpus > 0)


def place(cfg: TrainConfig, nodes: int, ranks_per_node: int, backend: str, gpus: int) -> tuple[int, int, list[str]]:
    """Nodes and ranks per node for a job on this machine, and a note when they had to change.

    Slurm jobs and CPU ranks keep what was asked. GPU ranks run locally only as one node with at
    most one rank per GPU here: emulated nodes on one machine would all claim GPU 0, and NCCL
    refuses two ranks on one GPU.
    """
    from tutorial_lib.jobs.spec import check_counts

    check_counts(nodes=nodes, ranks_per_node=ranks_per_node)
    if backend == "slurm" or not on_gpu(cfg, gpus) or (nodes == 1 and ranks_per_node <= gpus):
        return nodes, ranks_per_node, []
    ranks = max(1, min(nodes * ranks_per_node, gpus))
    return 1, ranks, [f"{cfg.name}: {nodes} node(s) x {ranks_per_node} GPU(s) were asked for, but this machine has "
                      f"{gpus} GPU(s) and no Slurm: it runs as 1 node x {ranks} GPU(s)"]


def check_batch(cfg: TrainConfig, world: int) -> None:
    """Refuse a global batch the digits cannot fill once (every epoch would have no step)."""
    if is_digits(cfg.dataset, cfg.data_dir) and cfg.batch_size * world > DIGITS_TRAIN_IMAGES:
        raise ConfigError(f"batch_size: {cfg.name}'s global batch {cfg.batch_size * world} is larger than the "
                          f"{DIGITS_TRAIN_IMAGES} digit images of an epoch. Fix: use a global batch of at most "
                          f"{DIGITS_TRAIN_IMAGES // 2}, or an ImageNet data_dir.")


def _job(cfg: TrainConfig, nodes: int, ranks_per_node: int, backend: str, gpus: int, notes: list,
         **options) -> Planned:
    nodes, ranks_per_node, note = place(cfg, nodes, ranks_per_node, backend, gpus)
    notes += note
    check_batch(cfg, nodes * ranks_per_node)
    return Planned(cfg, nodes, ranks_per_node, options)


# ------------------------------------------------------------ the notebooks
EXACT = dict(train_augment=False, warmup_epochs=0.0, epochs=1, log_every=1, seed=3, base_lr=0.1,
             precision="fp32", compile="none", channels_last=False)


def mixed_precision(*, profile: str, output_root: str, dataset: str, data_dir: str, arch: str, image_size: int,
                    batch_size: int, epochs: int, max_steps_per_epoch: int, train_precisions: list[str], nodes: int,
                    ranks_per_node: int, base_lr: float | None = None, warmup_epochs: float | None = None,
                    train_compile: str | None = None, site=None, gpus: int = 0, backend: str = "local") -> Plan:
    """01: one training job per precision in ``train_precisions`` (the ones the time budget allows), one after
    another so that their speeds do not share the machine; the recipe of every other notebook (the parameter
    files' base_lr, warmup_epochs and train_compile; no flips on the digits)."""
    if isinstance(train_precisions, (str, bytes)) or not isinstance(train_precisions, (list, tuple)):
        raise ConfigError(f"train_precisions: expected a list such as ['fp32', 'bf16'], got {train_precisions!r}.")
    rec = Recipe(profile, base_lr, warmup_epochs, train_compile)
    notes: list[str] = []
    planned: list[Planned] = []
    for precision in train_precisions:
        cfg = recipe(rec, f"01-amp-precision{precision}", output_root=output_root, dataset=dataset, data_dir=data_dir,
                     arch=arch, image_size=image_size, batch_size=batch_size, epochs=epochs,
                     max_steps_per_epoch=max_steps_per_epoch, precision=precision)
        job = _job(cfg, nodes, ranks_per_node, backend, gpus, notes, site=site)
        job.after = planned[-1].name if planned else None
        planned.append(job)
    return Plan(planned, backend, notes, groups={"precision": [job.name for job in planned]})


def ddp_one_node(*, profile: str, output_root: str, dataset: str, data_dir: str, arch: str, image_size: int,
                 batch_size: int, epochs: int, nodes: int, ranks_per_node: int, max_steps_per_epoch: int,
                 bucket_cap_mb: int, exact_workers: int, exact_batch: int, exact_steps: int,
                 base_lr: float | None = None, warmup_epochs: float | None = None, train_compile: str | None = None,
                 site=None, gpus: int = 0, backend: str = "local") -> Plan:
    """03: one DDP job, then the equivalence check (``exact_workers`` x B against 1 x ``exact_workers``·B,
    with GroupNorm and a BatchNorm control). The check runs on GPUs where there are enough of them,
    otherwise as CPU processes (gloo), even beside a GPU."""
    notes: list[str] = []
    base = Recipe(profile, base_lr, warmup_epochs, train_compile)
    common = dict(output_root=output_root, arch=arch, image_size=image_size, dataset=dataset, data_dir=data_dir)
    cfg = recipe(base, "03-ddp-2w", batch_size=batch_size, epochs=epochs, max_steps_per_epoch=max_steps_per_epoch,
                 bucket_cap_mb=bucket_cap_mb, **common)
    planned = [_job(cfg, nodes, ranks_per_node, backend, gpus, notes, site=site)]
    if exact_workers < 2:
        raise ConfigError(f"exact_workers: the check compares 2 or more workers with 1, got {exact_workers}. "
                          "Fix: pass exact_workers=2.")
    exact = dict(EXACT, max_steps_per_epoch=exact_steps, **common)
    probe = recipe(base, "03-probe", **exact)
    if backend == "slurm" or not on_gpu(probe, gpus) or gpus >= exact_workers:
        device, ranks_on = probe.device, "the same devices as the job"
    else:
        device, ranks_on = "cpu", "CPU processes (gloo)"
        notes.append(f"the equivalence check needs {exact_workers} workers and this machine has {gpus} GPU(s): its "
                     f"runs are {exact_workers} and 1 CPU processes (gloo), which compute the same sums in the same "
                     "float32 arithmetic; a GPU run beside CPU runs would differ by the devices' arithmetic, not "
                     "by DDP")
    cpu_fields = dict(device="cpu", workers=0) if device == "cpu" else {}
    for norm in ("group", "batch"):
        two = recipe(base, f"03-{norm}-2w", norm=norm, batch_size=exact_batch, **exact, **cpu_fields)
        one = recipe(base, f"03-{norm}-1w", norm=norm, batch_size=exact_workers * exact_batch, **exact,
                     **cpu_fields)
        planned += [_job(two, 1, exact_workers, backend, gpus, notes, site=site),
                    _job(one, 1, 1, backend, gpus, notes, site=site)]
    return Plan(planned, backend, notes, {"exact_device": device, "exact_ranks_on": ranks_on,
                                          "exact_workers": exact_workers})


def large_batches(*, profile: str, output_root: str, dataset: str, data_dir: str, arch: str, image_size: int,
                  nodes: int, ranks_per_node: int, global_batches: list[int], epochs: int, base_lr: float,
                  warmup_epochs: float, max_steps_per_epoch: int, lars_base_lr: float,
                  train_compile: str | None = None, site=None, gpus: int = 0, backend: str = "local") -> Plan:
    """04: the global-batch sweep without and with warmup (each sweep one job at a time, side by side),
    then LARS at the largest batch after the no-warmup sweep."""
    steps = max_steps_per_epoch
    rec = Recipe(profile, base_lr, warmup_epochs, train_compile)
    if float(warmup_epochs) <= 0:
        raise ConfigError(f"warmup_epochs: the 'with warmup' runs need a warmup, got {warmup_epochs}. Fix: pass e.g. "
                          "warmup_epochs=1.")
    notes: list[str] = []
    base = dict(output_root=output_root, dataset=dataset, data_dir=data_dir, arch=arch, image_size=image_size,
                epochs=epochs, base_lr=base_lr, max_steps_per_epoch=steps)
    probe = recipe(rec, "04-sgd", **base)
    nodes, ranks_per_node, note = place(probe, nodes, ranks_per_node, backend, gpus)
    notes += note
    workers = nodes * ranks_per_node
    uneven = [g for g in global_batches if g % workers or g < workers]
    if uneven:
        raise ConfigError(f"global_batches: {uneven} cannot be split evenly over {workers} workers. Fix: use "
                          f"multiples of {workers}.")
    planned: list[Planned] = []
    for warmup in (0.0, float(warmup_epochs)):
        previous = None
        for batch in global_batches:
            cfg = recipe(rec, f"04-warmup{warmup:g}-batch_size{batch // workers}", **base,
                         warmup_epochs=warmup, batch_size=batch // workers)
            check_batch(cfg, workers)
            planned.append(Planned(cfg, nodes, ranks_per_node, dict(site=site), after=previous))
            previous = cfg.name
    largest = max(global_batches)
    lars = recipe(rec, "04-lars", **{**base, "base_lr": lars_base_lr}, optimizer="lars",
                  warmup_epochs=float(warmup_epochs), batch_size=largest // workers)
    planned.append(Planned(lars, nodes, ranks_per_node, dict(site=site),
                           after=f"04-warmup0-batch_size{largest // workers}"))
    sweep = [job.name for job in planned if job.name != lars.name]
    at_largest = [name for name in sweep if name.endswith(f"-batch_size{largest // workers}")] + [lars.name]
    return Plan(planned, backend, notes, {"workers": workers, "per_worker": [g // workers for g in global_batches]},
                groups={"sweep": sweep, "largest batch": at_largest})


def multi_node(*, profile: str, output_root: str, dataset: str, data_dir: str, arch: str, image_size: int,
               batch_size: int, epochs: int, max_steps_per_epoch: int, nodes: int, ranks_per_node: int,
               time_limit: str | None, extra_sbatch: str, cancel_epochs: int, base_lr: float | None = None,
               warmup_epochs: float | None = None, train_compile: str | None = None, site=None, gpus: int = 0,
               backend: str = "local") -> Plan:
    """05: the multi-node job and the long job that is cancelled, with the site and the Slurm options."""
    notes: list[str] = []
    options = dict(time=time_limit or None, site=site, sbatch_options=str(extra_sbatch).split())
    common = dict(output_root=output_root, dataset=dataset, data_dir=data_dir, arch=arch, image_size=image_size,
                  batch_size=batch_size)
    base = Recipe(profile, base_lr, warmup_epochs, train_compile)
    main = recipe(base, "05-multinode", epochs=epochs, max_steps_per_epoch=max_steps_per_epoch, **common)
    long = recipe(base, "05-cancel-me", epochs=cancel_epochs, **common)
    planned = [_job(main, nodes, ranks_per_node, backend, gpus, notes, **options),
               _job(long, nodes, ranks_per_node, backend, gpus, [], **options)]
    return Plan(planned, backend, notes)


def scaling_study(*, profile: str, output_root: str, dataset: str, data_dir: str, arch: str, image_size: int,
                  batch_size: int, epochs: int, max_steps_per_epoch: int, scale_over: str, scale_values, nodes: int,
                  ranks_per_node: int, time_limit: str | None, extra_sbatch: str, base_lr: float | None = None,
                  warmup_epochs: float | None = None, train_compile: str | None = None, site=None, gpus: int = 0,
                  backend: str = "local") -> Plan:
    """06: one job per value of ``scale_over``, one after another. Locally on GPUs, only the values
    this machine can place are measured; the others are listed in ``extras["not_measured"]``."""
    from tutorial_lib.analyses.study import int_list

    if scale_over not in ("nodes", "ranks_per_node"):
        raise ConfigError(f"scale_over: {scale_over!r} is not a resource. Fix: use 'ranks_per_node' or 'nodes'.")
    values = int_list(scale_values)
    cfg = recipe(Recipe(profile, base_lr, warmup_epochs, train_compile), "06-scale", output_root=output_root,
                 dataset=dataset, data_dir=data_dir, arch=arch, image_size=image_size, batch_size=batch_size,
                 epochs=epochs, max_steps_per_epoch=max_steps_per_epoch)
    options = dict(time=time_limit or None, site=site, sbatch_options=str(extra_sbatch).split())
    planned, skipped, notes, previous = [], [], [], None
    for value in values:
        world = {"nodes": nodes, "ranks_per_node": ranks_per_node, scale_over: value}
        if place(cfg, world["nodes"], world["ranks_per_node"], backend, gpus)[2]:
            skipped.append(value)
            continue
        job_cfg = dataclasses.replace(cfg, name=f"06-scale-{scale_over}{value}")
        check_batch(job_cfg, world["nodes"] * world["ranks_per_node"])
        planned.append(Planned(job_cfg, world["nodes"], world["ranks_per_node"], dict(options), after=previous))
        previous = job_cfg.name
    if skipped:
        notes.append(f"{scale_over} = {skipped} not measured: this machine has {gpus} GPU(s) and no Slurm, and one "
                     "GPU cannot host two ranks; the scaling model projects them below instead")
    if not planned:
        raise ConfigError(f"scale_values: none of {values} fits this machine ({gpus} GPU(s), no Slurm). Fix: "
                          "include 1, or run on a cluster.")
    return Plan(planned, backend, notes, {"measured": [v for v in values if v not in skipped],
                                          "not_measured": skipped})


def other_notebook(params: Mapping, gpus: int = 0, backend: str = "local") -> Plan:
    """The config a notebook without its own plan builds: the profile and every parameter that is a
    training setting (00 and 07 build theirs this way), with its site."""
    fields = {k: v for k, v in params.items() if k in _FIELDS and k not in ("profile", "name")}
    return Plan([Planned(make_config(params["profile"], name="config", **fields),
                         options=dict(site=params.get("site")))], backend)


PLANS: dict[str, Callable[..., Plan]] = {
    "01_mixed_precision": mixed_precision,
    "03_ddp_one_node": ddp_one_node,
    "04_large_batches": large_batches,
    "05_multi_node_slurm": multi_node,
    "06_scaling_study": scaling_study,
}


def for_notebook(stem: str) -> Callable[..., Plan]:
    """The plan function of a notebook (by file stem, e.g. ``03_ddp_one_node``)."""
    return PLANS.get(stem, other_notebook)
