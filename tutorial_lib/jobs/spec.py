"""What a job is before it runs: its validated resources and program, and the job record it leaves.

Every value that reaches sbatch, torchrun or a shell is checked here first. Values are always
passed as separate argv elements (never through a shell string), so even a value that passed
validation is an inert literal.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from tutorial_lib.engine.config import ConfigError, TrainConfig, shorten, to_cli_args, validate, validate_name
from tutorial_lib.rundir.layout import JOB_FILE

# Matched whole with re.fullmatch: `$` alone would also match before a final newline.
_TIME = re.compile(r"(\d+-)?\d{1,3}(:\d{2}){0,2}")
_SLURM_WORD = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_SBATCH_OPTION = re.compile(r"--[a-z][a-z-]{1,30}(=[A-Za-z0-9_.:,@+/-]{1,200})?")
JOB_MODULES = ("tutorial_lib.train", "tutorial_lib.bench", "tutorial_lib.jobs.preflight")
# sbatch_options: only these full sbatch option names (sbatch takes an exact name as itself, while it would
# resolve an abbreviation such as --outp or --export-f to an option the library must control).
SBATCH_ALLOWED = ("--begin", "--comment", "--constraint", "--contiguous", "--core-spec", "--cores-per-socket",
                  "--cpu-freq", "--cpus-per-gpu", "--cpus-per-task", "--deadline", "--delay-boot", "--exclude",
                  "--exclusive", "--gpu-bind", "--gpu-freq", "--gres", "--gres-flags", "--hint", "--hold",
                  "--licenses", "--mail-type", "--mail-user", "--mem", "--mem-bind", "--mem-per-cpu",
                  "--mem-per-gpu", "--mincpus", "--nice", "--nodelist", "--oversubscribe", "--power", "--prefer",
                  "--priority", "--qos", "--reservation", "--signal", "--sockets-per-node", "--spread-job",
                  "--switches", "--thread-spec", "--threads-per-core", "--time-min", "--tmp", "--wckey")
# What tutorial_lib.jobs and train.sbatch set themselves (named in messages, and never passed on).
SBATCH_SET_HERE = ("--parsable", "--job-name", "--nodes", "--ntasks-per-node", "--time", "--chdir", "--output",
                   "--export", "--partition", "--account", "--gpus-per-node", "--dependency", "--open-mode",
                   "--requeue")


class JobError(RuntimeError):
    """A job could not be submitted, or it failed; the message says why and what to do."""


SITE_ENV = "TUTORIAL_SITE"  # a YAML file whose `site:` block every Slurm job gets when none is passed
GPU_REQUESTS = ("gpus-per-node", "gres")
CONTAINER_RUNTIMES = ("apptainer", "pyxis")
_MEM = re.compile(r"\d{1,9}[KMGT]?")
_COMMAND_WORD = re.compile(r"[A-Za-z0-9_./+-]{1,255}")
_IMAGE = re.compile(r"[A-Za-z0-9_./:@#+-]{1,255}")
_BIND = re.compile(r"/[A-Za-z0-9_./+-]{0,255}(:/[A-Za-z0-9_./+-]{0,255}(:(ro|rw))?)?")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
# Variables the library and train.sbatch set for every job: a site may not replace them.
_ENV_SET_HERE = ("PYTHONPATH", "RANKS_PER_NODE", "HEAD", "PORT", "SRUN_CPUS_PER_TASK")


@dataclass(frozen=True)
class Container:
    """A container every node runs the training program in: Apptainer (``apptainer exec``) or pyxis
    (``srun --container-image``); ``binds`` are ``host_path[:container_path[:ro]]``."""

    image: str
    runtime: str = "apptainer"
    binds: tuple[str, ...] = ()


@dataclass(frozen=True)
class Site:
    """What every Slurm job at a site needs (the ``site:`` block of a parameter file).

    ``cpus_per_rank``: CPUs per rank (per GPU on a GPU job); the job asks for ``--cpus-per-task``
    = cpus_per_rank x ranks per node. ``mem``: memory per node (``64G``; ``0``: all of it).
    ``gpu_request``: ``gpus-per-node`` (``--gpus-per-node=N``) or ``gres`` (``--gres=gpu:N``).
    ``setup``: shell lines each job runs before training (``module load ...``, ``source venv/bin/activate``),
    written into the job's batch script as given. ``python``: the Python command on the compute nodes
    (default: this kernel's interpreter, which exists there only on a shared file system).
    ``env``: environment variables (``NCCL_SOCKET_IFNAME``...). Explicit ``submit`` arguments win.
    """

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time: str | None = None
    cpus_per_rank: int | None = None
    mem: str | None = None
    gpu_request: str = "gpus-per-node"
    setup: tuple[str, ...] = ()
    python: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    container: Container | None = None
    sbatch_options: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, data) -> Site:
        """A checked Site from a mapping (a parameter file's ``site:`` block); errors name ``site.<key>``."""
        if data is None:
            return cls()
        if isinstance(data, Site):
            return data
        if not isinstance(data, dict):
            raise ConfigError(f"site: expected a mapping of settings, got {shorten(data)}. Fix: e.g. "
                              "site: {partition: gpu, python: python3}.")
        known = [f.name for f in fields(cls)]
        unknown = [key for key in data if key not in known]
        if unknown:
            raise ConfigError(f"site.{str(unknown[0])[:60]}: not a site setting. Fix: use one of {', '.join(known)}.")
        return cls(**{key: _SITE_CHECKS[key](value) for key, value in data.items() if value not in (None, "")})

    def resolve(self, partition=None, account=None) -> tuple:
        """``(partition, account)`` of a job: the ``submit`` arguments where given, else the site's (the time
        limit has its own rule: :func:`job_time`)."""
        return partition or self.partition, account or self.account

    def to_dict(self) -> dict:
        """The settings that are set, as the ``site:`` block would hold them."""
        data = {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) not in (None, ())}
        if "env" in data:
            data["env"] = dict(self.env)
        if self.container is not None:
            data["container"] = asdict(self.container)
        return data


def _site_word(what: str):
    return lambda value: _prefixed(_check_word, what, value)


def _prefixed(check, what: str, value):
    try:
        return check(what, value) if check is _check_word else check(value)
    except ConfigError as exc:
        raise ConfigError(f"site.{exc}") from None


def _site_int(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1024:
        raise ConfigError(f"site.cpus_per_rank: must be an integer from 1 to 1024, got {shorten(value)}. "
                          "Fix: e.g. cpus_per_rank: 8 (CPUs per GPU).")
    return value


def _site_match(what: str, pattern: re.Pattern, example: str):
    def check(value):
        if not isinstance(value, (str, int)) or isinstance(value, bool) or not pattern.fullmatch(str(value)):
            raise ConfigError(f"site.{what}: {shorten(value)} is refused. Fix: e.g. {what}: {example}.")
        return str(value)
    return check


def _site_choice(what: str, choices: tuple):
    def check(value):
        if value not in choices:
            raise ConfigError(f"site.{what}: {shorten(value)} is not one of {', '.join(choices)}. "
                              f"Fix: {what}: {choices[0]}.")
        return value
    return check


def _site_lines(value) -> tuple[str, ...]:
    lines = [value] if isinstance(value, str) else value
    if not isinstance(lines, (list, tuple)) or not all(
            isinstance(line, str) and line.isprintable() for line in lines):
        raise ConfigError("site.setup: expected a list of single-line shell commands (no line breaks or control "
                          "characters). Fix: e.g. setup: ['module load cuda/12.4', 'source ~/venv/bin/activate'].")
    return tuple(lines)


def _site_env(value) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, dict):
        raise ConfigError(f"site.env: expected a mapping NAME: value, got {shorten(value)}. "
                          "Fix: e.g. env: {NCCL_SOCKET_IFNAME: ib0}.")
    for name, text in value.items():
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
            raise ConfigError(f"site.env: {shorten(name)} is not a variable name. Fix: letters, digits and '_'.")
        if name in _ENV_SET_HERE or name.startswith(("TUTORIAL_", "SLURM_")):
            raise ConfigError(f"site.env: {name} is set by tutorial_lib.jobs itself. Fix: leave it out.")
        if not isinstance(text, (str, int, float)) or not str(text).isprintable():
            raise ConfigError(f"site.env.{name}: {shorten(text)} must be a single-line value. Fix: e.g. {name}: ib0.")
    return tuple((name, str(text)) for name, text in value.items())


def _site_container(value) -> Container:
    if isinstance(value, str):
        value = {"image": value}
    if not isinstance(value, dict) or "image" not in value or set(value) - {"image", "runtime", "binds"}:
        raise ConfigError(f"site.container: expected {{image: ..., runtime: apptainer|pyxis, binds: [...]}}, got "
                          f"{shorten(value)}. Fix: e.g. container: {{image: /images/torch.sif, binds: [/data]}}.")
    binds = value.get("binds") or []
    if not isinstance(binds, list) or not all(isinstance(b, str) and _BIND.fullmatch(b) and ".." not in b
                                              for b in binds):
        raise ConfigError(f"site.container.binds: {shorten(binds)} is refused. Fix: a list of absolute paths, "
                          "host[:container[:ro]], e.g. [/data, /scratch:/scratch:ro].")
    return Container(image=_site_match("container.image", _IMAGE, "/images/torch.sif")(value["image"]),
                     runtime=_site_choice("container.runtime", CONTAINER_RUNTIMES)(value.get("runtime", "apptainer")),
                     binds=tuple(binds))


def _site_options(value) -> tuple[str, ...]:
    options = [value] if isinstance(value, str) else value
    if not isinstance(options, (list, tuple)):
        raise ConfigError("site.sbatch_options: expected a list. Fix: e.g. sbatch_options: ['--constraint=a100'].")
    try:
        return tuple(_check_sbatch_option(option) for option in options)
    except ConfigError as exc:
        raise ConfigError(f"site.{exc}") from None


_SITE_CHECKS = {
    "partition": _site_word("partition"), "account": _site_word("account"), "qos": _site_word("qos"),
    "time": lambda value: _prefixed(check_time, "time", value), "cpus_per_rank": _site_int,
    "mem": _site_match("mem", _MEM, "64G"), "gpu_request": _site_choice("gpu_request", GPU_REQUESTS),
    "setup": _site_lines, "python": _site_match("python", _COMMAND_WORD, "python3"), "env": _site_env,
    "container": _site_container, "sbatch_options": _site_options,
}


def load_site(source=None) -> Site:
    """The Site of a ``site:`` mapping, of a YAML file holding one (a parameter file), or (``None``)
    of the file named by the ``TUTORIAL_SITE`` environment variable; an empty Site when there is none."""
    if isinstance(source, (Site, dict)):
        return Site.from_dict(source)
    path = source if source is not None else os.environ.get(SITE_ENV)
    if not path:
        return Site()
    from tutorial_lib.yamlfile import YamlFileError, read_yaml

    where = f"{SITE_ENV}={path}" if source is None else str(path)
    if not Path(path).is_file():
        raise ConfigError(f"site: {where} names no file. Fix: point it at a YAML file with a site: block.")
    try:
        data = read_yaml(path, f"site: {where}") or {}
    except YamlFileError as exc:
        raise ConfigError(str(exc)) from None
    if not isinstance(data, dict) or not isinstance(data.get("site"), dict):
        raise ConfigError(f"site: {where} holds no site: block. Fix: add one (see README, Bringing the course "
                          "to your cluster).")
    return Site.from_dict(data["site"])


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
        return self.config.run_dir.resolve()

    def to_dict(self) -> dict:
        """JSON-friendly form (stored in the run directory's job.json)."""
        data = asdict(self)
        data["config"] = self.config.to_dict()
        data["site"] = self.site.to_dict()
        return data


def check_time(value: str | int) -> str:
    """A Slurm time limit: minutes, MM:SS, HH:MM:SS or D-HH:MM:SS."""
    text = str(value).strip(" ")
    if not _TIME.fullmatch(text):
        raise ConfigError(f"time: {shorten(value)} is not a Slurm time limit. Fix: use minutes (30), "
                          "HH:MM:SS (01:30:00) or D-HH:MM:SS (1-00:00:00).")
    return text


DEFAULT_WARNING_LEAD_S = 120  # train.sbatch's #SBATCH --signal=B:USR1@120


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


def warning_lead_seconds(sbatch_options) -> int:
    """Seconds before the time limit at which Slurm warns the batch script (the last ``--signal`` given wins)."""
    leads = [int(o.rsplit("@", 1)[1]) for o in sbatch_options if re.fullmatch(r"--signal=B:USR1@\d{1,5}", o)]
    return leads[-1] if leads else DEFAULT_WARNING_LEAD_S


def check_time_against_warning(time: str, sbatch_options) -> None:
    """Refuse a Slurm time limit no longer than the warning lead: the stop warning would come at once, and the
    job would checkpoint, requeue and start again until it finished in several times the time (seen: 3 requeues)."""
    limit, lead = time_limit_seconds(time), warning_lead_seconds(sbatch_options)
    if limit <= lead:
        raise ConfigError(f"time: {time} ({limit} s) leaves no time to train: Slurm warns the job {lead} s before "
                          f"its limit (--signal=B:USR1@{lead}), and the job then stops to checkpoint and requeues. "
                          f"Fix: a time limit well above {lead} s (e.g. '00:{max(10, lead // 60 + 5):02d}:00'), "
                          "or a shorter warning in sbatch_options ('--signal=B:USR1@30').")


def time_limit_seconds(text: str) -> int:
    """Seconds in a Slurm time string (minutes, MM:SS, HH:MM:SS, D-HH:MM:SS)."""
    days = 0
    if "-" in text:
        day_text, text = text.split("-", 1)
        days = int(day_text)
    parts = [int(p) for p in text.split(":")]
    if len(parts) == 1:
        seconds = parts[0] * 60
    elif len(parts) == 2:
        seconds = parts[0] * 60 + parts[1]
    else:
        seconds = parts[0] * 3600 + parts[1] * 60 + parts[2]
    return days * 86400 + seconds


def _check_word(what: str, value: str | None) -> str | None:
    if value is not None and (not _SLURM_WORD.fullmatch(str(value)) or ".." in str(value)):
        raise ConfigError(f"{what}: {shorten(value)} is not a valid Slurm {what} name (letters, digits, '_', '.', "
                          f"'-'). Fix: pass the {what} name exactly as `sinfo`/`sacctmgr` show it.")
    return value


def _check_sbatch_option(option: str) -> str:
    if not isinstance(option, str) or not _SBATCH_OPTION.fullmatch(option):
        raise ConfigError(f"sbatch_options: {shorten(option)} is refused: only --name or --name=value options made "
                          "of letters, digits and _.:,@+/- are passed. Fix: e.g. sbatch_options=['--gres=gpu:4', "
                          "'--exclusive'].")
    name = option.split("=", 1)[0]
    if name in SBATCH_ALLOWED:
        if name == "--signal" and not re.fullmatch(r"--signal=B:USR1@\d{1,5}", option):
            raise ConfigError("sbatch_options: train.sbatch needs its warning as --signal=B:USR1@<seconds>. "
                              "Fix: e.g. '--signal=B:USR1@300' (or leave it out: 120 s).")
        return option
    meant = [full for full in SBATCH_SET_HERE + SBATCH_ALLOWED if full.startswith(name)]
    if name in SBATCH_SET_HERE or any(full in SBATCH_SET_HERE for full in meant):
        full = name if name in SBATCH_SET_HERE else next(f for f in meant if f in SBATCH_SET_HERE)
        problem = f"{name} is set by tutorial_lib.jobs itself" + (f" (it abbreviates {full})" if full != name else "")
        fix = "use submit()'s own arguments (name, nodes, time, partition, account, output_root)"
    elif len(meant) == 1:
        problem, fix = f"{name} is an abbreviation", f"write the full option name, {meant[0]}"
    else:
        problem = f"{name} is not among the sbatch options passed on"
        fix = f"use one of tutorial_lib.jobs.spec.SBATCH_ALLOWED, e.g. {', '.join(SBATCH_ALLOWED[15:22])}"
    raise ConfigError(f"sbatch_options: {problem}. Fix: {fix}.")


_COUNT_MINIMUM = {"nodes": 1, "ranks_per_node": 1, "max_restarts": 0}


def check_counts(**counts) -> None:
    """Refuse a count (``nodes``, ``ranks_per_node``, ``max_restarts``) that is not a whole number at or above its
    minimum, naming the parameter the user set (before anything is derived from it, such as a per-rank batch)."""
    for what, value in counts.items():
        low = _COUNT_MINIMUM[what]
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigError(f"{what}: must be an integer >= {low}, got {shorten(value)}. "
                              f"Fix: pass e.g. {what}={low + 1}.")


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
    if not isinstance(config, TrainConfig):
        raise ConfigError("config: expected a TrainConfig. "
                          "Fix: build one with tutorial_lib.engine.config.make_config().")
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
    if module_args is not None and not all(isinstance(a, str) and "\n" not in a for a in module_args):
        raise ConfigError("module_args: must be a list of single-line strings. Fix: e.g. ['allreduce', '--out', 'x']")
    options = [_check_sbatch_option(o) for o in (list(sbatch_options) if not isinstance(sbatch_options, str)
                                                  else [sbatch_options])]
    site = load_site(site) if on_cluster else Site()
    partition, account = site.resolve(partition, account)
    time, time_note = job_time(time, site.time)
    if on_cluster:
        check_time_against_warning(time, [*site.sbatch_options, *options])
    return JobSpec(config=config, nodes=nodes, ranks_per_node=ranks_per_node, time=time, time_note=time_note,
                   partition=_check_word("partition", partition), account=_check_word("account", account),
                   sbatch_options=options, max_restarts=max_restarts, module=module,
                   module_args=list(module_args) if module_args is not None else None,
                   python=site.python or sys.executable, site=site)


def absolute_config(config: TrainConfig) -> TrainConfig:
    """The config with output_root and data_dir made absolute (jobs may run in another directory)."""
    from dataclasses import replace

    return replace(config, output_root=str(Path(config.output_root).resolve()),
                   data_dir=str(Path(config.data_dir).resolve()))


def write_job_file(run_dir: Path, record: dict) -> None:
    """Store the job record (id, backend, command...) so attach() can find the job later."""
    run_dir.mkdir(parents=True, exist_ok=True)
    tmp = run_dir / f".{JOB_FILE}.tmp"
    tmp.write_text(json.dumps(record, indent=2, default=str))
    tmp.replace(run_dir / JOB_FILE)


def read_job_file(run_dir: Path) -> dict:
    """The job record of a run directory, or JobError (one line) naming what is missing, unreadable or torn."""
    path = Path(run_dir) / JOB_FILE
    if not path.is_file():
        raise JobError(f"{run_dir} holds no job ({JOB_FILE} missing). Fix: pass the run directory of a job "
                       "submitted with tutorial_lib.jobs.submit (output_root/name).")
    try:
        record = json.loads(path.read_bytes())
    except OSError as exc:
        raise JobError(f"{path}: cannot be read ({exc.strerror}). Fix: give yourself read permission on it, "
                       "or pass the run directory of a job you submitted.") from None
    except ValueError:  # torn (a full disk, a copy cut short), empty, or not JSON at all
        raise JobError(f"{path} is not a complete job record (torn, empty or not JSON); nothing was read from it. "
                       "Fix: submit the job again with another name, or with fresh=True.") from None
    missing = [key for key in ("id", "backend", "name") if not isinstance(record, dict) or key not in record]
    if missing:
        raise JobError(f"{path} lacks the job's {', '.join(missing)}: it was not written by tutorial_lib.jobs. "
                       "Fix: submit the job again with another name, or with fresh=True.")
    return record
