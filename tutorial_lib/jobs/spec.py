"""What a job is before it runs: its validated resources and program (its record: :mod:`tutorial_lib.jobs.record`).

Every value that reaches sbatch, torchrun or a shell is checked here first. Values are always
passed as separate argv elements (never through a shell string), so even a value that passed
validation is an inert literal.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tutorial_lib.engine.config import (
    ConfigError,
    TrainConfig,
    check_is_config,
    shorten,
    to_cli_args,
    validate,
    validate_name,
)
from tutorial_lib.jobs.site import Site, load_site, local_site
from tutorial_lib.jobs.slurm_values import (
    check_sbatch_option,
    check_time,
    check_time_against_warning,
    check_word,
    time_limit_seconds,
)
from tutorial_lib.paths import resolve_problem, way_problem

JOB_MODULES = ("tutorial_lib.train", "tutorial_lib.bench", "tutorial_lib.jobs.preflight")


class JobError(RuntimeError):
    """A job could not be submitted, or it failed; the message says why and what to do."""


@dataclass
class JobSpec:
    """A training job's resources plus its resolved training config."""

    config: TrainConfig
    nodes: int = 1
    ranks_per_node: int = 1  # processes per node: one per GPU on a GPU cluster, CPU processes otherwise
    time: str = "00:30:00"  # Slurm time limit ([D-]HH:MM:SS or minutes); also enforced locally
    time_note: str = ""  # one line: where the time limit came from (job_time's rule)
    partition: str | None = None
    account: str | None = None
    sbatch_options: list[str] = field(default_factory=list)
    max_restarts: int = 0  # torchrun --max-restarts: restart all ranks if one dies
    python: str = sys.executable  # on the compute nodes: the site's python, else this interpreter
    site: Site = field(default_factory=Site)  # Slurm jobs only: the site's settings (an empty Site locally)
    module: str = "tutorial_lib.train"  # what each rank runs (tutorial_lib.bench for measurement jobs)
    module_args: list[str] | None = None  # its arguments; None = the training config's flags

    @property
    def asks_for_gpus(self) -> bool:
        """Whether the job's ranks ask Slurm for GPUs (one per rank)."""
        return self.config.device == "cuda" or self.config.profile in ("gpu", "hal")

    def program_args(self) -> list[str]:
        """The arguments given to ``python -m <module>`` on every rank."""
        return list(self.module_args) if self.module_args is not None else to_cli_args(self.config)

    @property
    def run_dir(self) -> Path:
        """Absolute run directory of the job."""
        return Path(os.path.abspath(self.config.run_dir))  # a link as the run directory is not followed (r43q)

    def to_dict(self) -> dict:
        """JSON-friendly form (stored in the run directory's job.json)."""
        data = asdict(self)
        data["config"] = self.config.to_dict()
        data["site"] = self.site.to_dict()
        return data




ARG_MOST_BYTES = 131_071  # Linux's MAX_ARG_STRLEN less the terminating NUL: a longer argument fails exec (E2BIG)
ARGS_MOST_BYTES = 1 << 20  # half of the usual ARG_MAX, which the environment and torchrun's own arguments share


def _bytes(argument: str) -> int:
    """What ``argument`` takes of exec's room: its bytes (:data:`ARG_MOST_BYTES`), its NUL and argv's pointer to it
    in the total (:data:`ARGS_MOST_BYTES`) counted by the caller."""
    return len(argument.encode(errors="surrogateescape"))


DEFAULT_TIME = "00:30:00"  # the time limit of a job when neither the job nor the site block names one


def job_time(own: str | int | None, site_time: str | None) -> tuple[str, str]:
    """A job's time limit and the one line that says where it came from: the one rule for both sources.

    The site block's ``time`` is the longest a job of the site may run (a partition's MaxTime, its queue's
    limit) and the limit of every job that names none; a job's own time (``submit(time=...)``, a notebook's
    ``time_limit``) is used when given, and refused when longer than the site's: Slurm would leave such a job
    pending for ever (Reason=PartitionTimeLimit) or refuse it."""
    own = None if own in (None, "") else check_time(own)
    if own is None:
        if site_time is None:
            return DEFAULT_TIME, f"time {DEFAULT_TIME}: the default (neither the job nor the site block sets one)"
        return site_time, f"time {site_time}: the site block's time (the job sets none)"
    if site_time is None:
        return own, f"time {own}: the job's own (the site block sets no time)"
    if time_limit_seconds(own) > time_limit_seconds(site_time):
        raise ConfigError(f"time: {own} is longer than the site block's time {site_time}, the longest a job of this "
                          f"site may run. Fix: ask for at most {site_time} (a notebook's time_limit, submit's "
                          "time=), or leave it out to get the site's; or raise site.time where the site allows it.")
    if own == site_time:
        return own, f"time {own}: the job's own, the same as the site block's"
    return own, f"time {own}: the job's own, within the site block's time {site_time} (the longest a job may run)"


_COUNT_MINIMUM = {"nodes": 1, "ranks_per_node": 1, "max_restarts": 0}
# the largest each may be: more nodes than the largest clusters have, more ranks than a node has cores, more
# restarts than a job could ever use (a typo of 10**9 would otherwise be submitted)
COUNT_MAXIMUM = {"nodes": 100_000, "ranks_per_node": 4096, "max_restarts": 1000}


def check_counts(**counts) -> None:
    """Refuse a count (``nodes``, ``ranks_per_node``, ``max_restarts``) that is not a whole number at or above its
    minimum, naming the parameter the user set (before anything is derived from it, such as a per-rank batch)."""
    for what, value in counts.items():
        low = _COUNT_MINIMUM[what]
        high = COUNT_MAXIMUM[what]
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ConfigError(f"{what}: must be an integer >= {low} and <= {high:,}, got {shorten(value)}. "
                              f"Fix: pass e.g. {what}={low + 1}.")


MOST_SECONDS = 1e9  # about 31 years: more is no wait anyone means, and time.sleep refuses far more


def check_seconds(name: str, value, allow_none: bool = True, positive: bool = False) -> None:
    """Refuse a number of seconds that is not a finite real number >= 0 (> 0 with ``positive``; or None where
    allowed), naming it: ``timeout='10'`` would fail deep inside, ``nan`` or -1 would wait wrongly."""
    if value is None and allow_none:
        return
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    # compared before isfinite: math.isfinite(10**400) and time.sleep(1e300) raise OverflowError (r43s)
    if not number or not value <= MOST_SECONDS or not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise ConfigError(f"{name}: expected a number of seconds {'> 0' if positive else '>= 0'} and at most "
                          f"{MOST_SECONDS:.0e}{' or None' if allow_none else ''}, got {shorten(value)}. "
                          f"Fix: e.g. {name}=10.")


def check_flags(**flags) -> None:
    """Refuse an on/off argument (``check_data``, ``fresh``, ``sequential``...) that is not True or False, naming
    it: ``fresh="no"`` is a non-empty string, which Python would take as true."""
    for what, value in flags.items():
        if not isinstance(value, bool):
            raise ConfigError(f"{what}: must be True or False, got {shorten(value)} ({type(value).__name__}). "
                              f"Fix: pass {what}=True or {what}=False.")


def make_spec(config: TrainConfig, nodes: int = 1, ranks_per_node: int = 1, time: str | int | None = None,
              partition: str | None = None, account: str | None = None, sbatch_options=(),
              max_restarts: int = 0, check_data: bool = True, on_cluster: bool = False,
              module: str = "tutorial_lib.train", module_args: list[str] | None = None, site=None) -> JobSpec:
    """Validate everything about a job before anything is submitted; return its JobSpec, the one that
    ``jobs.submit`` hands to the backend (its paths made absolute: the job may run in another directory).

    ``check_data``: check the data folder (the trainer's jobs only; another ``module`` reads no data).
    ``on_cluster``: the job runs on Slurm compute nodes, which may have GPUs this machine lacks; it then
    gets ``site`` (a :class:`Site`, a ``site:`` mapping, a YAML file; None: :func:`load_site`'s default),
    whose partition, account and time apply where the arguments leave them out.
    """
    check_is_config(config)
    check_flags(check_data=check_data, on_cluster=on_cluster)
    config = absolute_config(config)
    gpus_elsewhere = True if on_cluster and config.device != "cpu" else None
    validate(config, check_paths=check_data and module == "tutorial_lib.train", cuda_available=gpus_elsewhere)
    validate_name(config.name, "name")
    check_counts(nodes=nodes, ranks_per_node=ranks_per_node, max_restarts=max_restarts)
    odd = next((c for c in config.output_root if c in "%\\" or not c.isprintable()), None)
    if odd is not None:  # Slurm expands % and \\ in --output: the job would fail with no log file
        raise ConfigError(f"output_root: {shorten(config.output_root)} contains {odd!r}, which Slurm treats "
                          "specially in log paths. Fix: choose a folder path without '%', '\\' or control characters.")
    if module not in JOB_MODULES:
        raise ConfigError(f"module: {shorten(module)} cannot be run as a job. "
                          f"Fix: use one of {', '.join(JOB_MODULES)}.")
    if module_args is not None and (not isinstance(module_args, (list, tuple))
                                    or not all(isinstance(a, str) and "\n" not in a and "\x00" not in a
                                                           for a in module_args)):  # NUL: no argv can hold it
        raise ConfigError("module_args: must be a list of single-line strings without NUL bytes. Fix: e.g. "
                          "['allreduce', '--out', 'x']")
    for index, argument in enumerate(module_args or ()):
        try:
            _bytes(argument)
        except UnicodeEncodeError:  # r43s: a lone surrogate such as '\ud800' has no bytes an argv can carry
            raise ConfigError(f"module_args: argument {index} ({shorten(argument)}) holds a character that has no "
                              "bytes in a command line (a lone surrogate). Fix: remove that character, or build the "
                              "argument with os.fsdecode() from the bytes you mean.") from None
    sizes = [_bytes(a) for a in module_args or ()]
    if max(sizes, default=0) > ARG_MOST_BYTES or sum(sizes) + 9 * len(sizes) > ARGS_MOST_BYTES:  # r43q: E2BIG
        raise ConfigError(f"module_args: {len(sizes):,} argument(s) of {sum(sizes):,} bytes (the longest "
                          f"{max(sizes):,}; {sum(sizes) + 9 * len(sizes):,} with a NUL and a pointer each) are more "
                          f"than a program can be given: one at most {ARG_MOST_BYTES:,} bytes (Linux's MAX_ARG_STRLEN),"
                          f" all at most {ARGS_MOST_BYTES:,}. Fix: write long values to a file and pass its path.")
    if not isinstance(sbatch_options, (str, list, tuple)):
        raise ConfigError(f"sbatch_options: expected a list of options, got {shorten(sbatch_options)}. Fix: e.g. "
                          "sbatch_options=['--constraint=a100'].")
    options = [check_sbatch_option(o) for o in (list(sbatch_options) if not isinstance(sbatch_options, str)
                                                  else [sbatch_options])]
    if not on_cluster:  # the local backend's nodes are this machine: each rank is a process here
        check_local_ranks(nodes, ranks_per_node)
    if not on_cluster and module == "tutorial_lib.train":
        check_fits_here(config, nodes * ranks_per_node)
        if config.stage_to:
            check_stage_here(config)
    site = load_site(site) if on_cluster else local_site(site)
    partition, account = site.resolve(partition, account)
    time, time_note = job_time(time, site.time)
    if on_cluster:
        check_time_against_warning(time, [*site.sbatch_options, *options])
    return JobSpec(config=config, nodes=nodes, ranks_per_node=ranks_per_node, time=time, time_note=time_note,
                   partition=check_word("partition", partition), account=check_word("account", account),
                   sbatch_options=options, max_restarts=max_restarts, module=module,
                   module_args=list(module_args) if module_args is not None else None,
                   python=site.python or sys.executable, site=site)


def check_local_ranks(nodes: int, ranks_per_node: int) -> None:
    """Refuse a local job that would start more rank processes than this machine takes
    (:func:`tutorial_lib.engine.device.most_local_ranks`), naming the count: ``ranks_per_node=100`` on 2 cores was
    accepted and ran at a load of 95 (r43p)."""
    from tutorial_lib.engine.device import MIN_LOCAL_RANKS, most_local_ranks, usable_cpus

    most = most_local_ranks()
    if nodes * ranks_per_node > most:
        field = "ranks_per_node" if nodes == 1 else "nodes/ranks_per_node"
        raise ConfigError(f"{field}: a local job of {nodes} node(s) x {ranks_per_node} rank(s) would start "
                          f"{nodes * ranks_per_node:,} processes on this machine, which has {usable_cpus()} CPU "
                          f"core(s) and takes at most {most} (two per core, or {MIN_LOCAL_RANKS}). Fix: pass fewer "
                          f"ranks_per_node{' or nodes' if nodes > 1 else ''} (nodes x ranks_per_node <= {most}), or "
                          "submit to a cluster (backend='slurm').")


def check_fits_here(config: TrainConfig, ranks: int) -> None:
    """A local job's training step against this machine's memory (its ``ranks`` share it on the CPU), refused in
    one line with the estimate before the job is submitted: ``image_size=10**5`` otherwise started a job that
    wrote its run directory and only then failed. A Slurm job's nodes are not known here: its ranks check there."""
    import torch

    from tutorial_lib.engine.memory import check_training_fits

    on_gpu = config.device != "cpu" and torch.cuda.is_available()
    check_training_fits(config, config.num_classes or 1000, torch.device("cuda" if on_gpu else "cpu"),
                        ranks_here=ranks)


def check_stage_here(config: TrainConfig) -> None:
    """A local job's ``stage_to`` checked on this machine, its nodes' (the job's own check, in the same words,
    before the run directory is written); a Slurm job's nodes check theirs."""
    from tutorial_lib.data.staging import StagingError, check_stage_root
    from tutorial_lib.jobs.staged import node_label

    try:
        check_stage_root(config.data_dir, config.stage_to, node_label(os.environ))
    except StagingError as exc:
        raise ConfigError(str(exc)) from None


def absolute_config(config: TrainConfig) -> TrainConfig:
    """The config with output_root and data_dir made absolute (jobs may run in another directory); a path that
    cannot be resolved (a symbolic link loop) is refused naming its field, its run directory too."""
    from dataclasses import replace

    config = replace(config, output_root=resolved_path("output_root", config.output_root, written=True),
                     data_dir=resolved_path("data_dir", config.data_dir))
    resolved_path("output_root", config.run_dir, " (the run directory, output_root/name)")  # JobSpec.run_dir's
    return config


def resolved_path(field: str, value, what: str = "", written: bool = False) -> str:
    """``Path(value).resolve()`` as text, or a ConfigError naming ``field`` where it cannot be resolved
    (:func:`tutorial_lib.paths.resolve_problem`: r43p, a symbolic link loop was a traceback from jobs.submit) or, where
    the job writes (``written``), where a link on the way leads nowhere (:func:`tutorial_lib.paths.
    way_problem`: r43r, resolving it put the job's run wherever the link pointed)."""
    problem = resolve_problem(value) or (way_problem(value) if written else None)
    if problem is not None:
        raise ConfigError(f"{field}: {shorten(str(value))}{what} {problem[0]}. Fix: {problem[1]} as "
                          f"{field}{' or name' if what else ''}.")
    return str(Path(value).resolve())
