"""What a job is before it runs: its validated resources and program, and the job record it leaves.

Every value that reaches sbatch, torchrun or a shell is checked here first. Values are always
passed as separate argv elements (never through a shell string), so even a value that passed
validation is an inert literal.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tutorial_lib.engine.config import ConfigError, TrainConfig, shorten, to_cli_args, validate, validate_name
from tutorial_lib.rundir.layout import JOB_FILE

# Matched whole with re.fullmatch: `$` alone would also match before a final newline.
_TIME = re.compile(r"(\d+-)?\d{1,3}(:\d{2}){0,2}")
_SLURM_WORD = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_SBATCH_OPTION = re.compile(r"--[a-z][a-z-]{1,30}(=[A-Za-z0-9_.:,@+/-]{1,200})?")
JOB_MODULES = ("tutorial_lib.train", "tutorial_lib.bench")
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


@dataclass
class JobSpec:
    """A training job's resources plus its resolved training config."""

    config: TrainConfig
    nodes: int = 1
    ranks_per_node: int = 1  # processes per node: one per GPU on a GPU cluster, CPU processes otherwise
    time: str = "00:30:00"  # Slurm time limit ([D-]HH:MM:SS or minutes); also enforced locally
    partition: str | None = None
    account: str | None = None
    sbatch_options: list[str] = field(default_factory=list)
    max_restarts: int = 0  # torchrun --max-restarts: restart all ranks if one dies
    python: str = sys.executable
    module: str = "tutorial_lib.train"  # what each rank runs (tutorial_lib.bench for measurement jobs)
    module_args: list[str] | None = None  # its arguments; None = the training config's flags

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
        return data


def check_time(value: str | int) -> str:
    """A Slurm time limit: minutes, MM:SS, HH:MM:SS or D-HH:MM:SS."""
    text = str(value).strip(" ")
    if not _TIME.fullmatch(text):
        raise ConfigError(f"time: {shorten(value)} is not a Slurm time limit. Fix: use minutes (30), "
                          "HH:MM:SS (01:30:00) or D-HH:MM:SS (1-00:00:00).")
    return text


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


def make_spec(config: TrainConfig, nodes: int = 1, ranks_per_node: int = 1, time: str | int = "00:30:00",
              partition: str | None = None, account: str | None = None, sbatch_options=(),
              max_restarts: int = 0, check_data: bool = True, on_cluster: bool = False,
              module: str = "tutorial_lib.train", module_args: list[str] | None = None) -> JobSpec:
    """Validate everything about a job before anything is submitted; return its JobSpec.

    ``on_cluster``: the job runs on Slurm compute nodes, which may have GPUs this machine lacks.
    """
    if not isinstance(config, TrainConfig):
        raise ConfigError("config: expected a TrainConfig. "
                          "Fix: build one with tutorial_lib.engine.config.make_config().")
    gpus_elsewhere = True if on_cluster and config.device != "cpu" else None
    validate(config, check_paths=check_data, cuda_available=gpus_elsewhere)
    validate_name(config.name, "name")
    for what, value, low in (("nodes", nodes, 1), ("ranks_per_node", ranks_per_node, 1),
                             ("max_restarts", max_restarts, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigError(f"{what}: must be an integer >= {low}, got {shorten(value)}. "
                              f"Fix: pass e.g. {what}={low + 1}.")
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
    return JobSpec(config=config, nodes=nodes, ranks_per_node=ranks_per_node, time=check_time(time),
                   partition=_check_word("partition", partition), account=_check_word("account", account),
                   sbatch_options=options, max_restarts=max_restarts, module=module,
                   module_args=list(module_args) if module_args is not None else None)


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
    """The job record of a run directory, or JobError naming what is missing."""
    path = Path(run_dir) / JOB_FILE
    if not path.is_file():
        raise JobError(f"{run_dir} holds no job ({JOB_FILE} missing). Fix: pass the run directory of a job "
                       "submitted with tutorial_lib.jobs.submit (output_root/name).")
    return json.loads(path.read_text())
