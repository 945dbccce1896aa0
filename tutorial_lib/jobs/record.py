"""The job record (``job.json``): a job's settings written once at submit, read back through one reader.

``jobs.submit`` writes it into the run directory before the job can start (:func:`write_job_file`); ``attach``,
the watcher and both launchers read it (:func:`read_job_file`). What every node needs to start the job is its
``launch`` block (:class:`Launch`); :func:`read_launch` is the one reader of it, used by each Slurm node's
launcher (:mod:`tutorial_lib.jobs.launch`, which ``cluster_scripts/train.sbatch`` runs) and by the local backend.
A Slurm job gets one variable, ``TUTORIAL_RUN_DIR``, that says where its record is (plus the Python that starts
the launcher). A batch script started by hand (``sbatch cluster_scripts/train.sbatch --key value``) has no record:
:func:`read_launch` then takes the environment inputs that train.sbatch's header documents, and the defaults
here, the only ones: train.sbatch repeats none of them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from tutorial_lib.data.staging import STAGE_FROM_ENV, STAGE_TO_ENV
from tutorial_lib.engine.config import shorten
from tutorial_lib.jobs.spec import COUNT_MAXIMUM, JOB_MODULES, JobError
from tutorial_lib.numbers import whole_number
from tutorial_lib.paths import PATH_MAX
from tutorial_lib.rundir.layout import JOB_FILE, STOP_FILE

RUN_DIR_ENV = "TUTORIAL_RUN_DIR"  # the run directory of the job, where its record is
DEFAULT_MODULE = "tutorial_lib.train"
# The inputs of a batch script started by hand (no job record), as train.sbatch's header documents them.
HAND_INPUTS = {"ranks_per_node": "RANKS_PER_NODE", "max_restarts": "TUTORIAL_MAX_RESTARTS",
               "python": "TUTORIAL_PYTHON", "module": "TUTORIAL_MODULE"}


@dataclass(frozen=True)
class Launch:
    """What every node of a job needs to start it: the job record's ``launch`` block.

    ``ranks_per_node`` 0 means: the GPUs Slurm gave this node (``SLURM_GPUS_ON_NODE``), else 1.
    """

    run_dir: str = ""
    python: str = ""  # "" = the Python that reads the record
    ranks_per_node: int = 0
    max_restarts: int = 0
    module: str = DEFAULT_MODULE
    threads: str = ""  # OMP_NUM_THREADS of every rank ("": left as it is)
    stage_to: str = ""  # copy data_dir to this node-local folder first (tutorial_lib.jobs.staged)
    stage_from: str = ""

    def ranks(self, environ=os.environ) -> int:
        """Ranks on this node."""
        return self.ranks_per_node or int(environ.get("SLURM_GPUS_ON_NODE") or 1)

    def environment(self) -> dict:
        """The variables every node's launcher, torchrun agent and rank get (the trainer reads the stop file's
        place, the staging launcher its folders)."""
        env = {"OMP_NUM_THREADS": self.threads} if self.threads else {}
        if self.run_dir:
            env.update({RUN_DIR_ENV: self.run_dir, "TUTORIAL_STOP_FILE": str(Path(self.run_dir) / STOP_FILE)})
        if self.stage_to:
            env.update({STAGE_TO_ENV: self.stage_to, STAGE_FROM_ENV: self.stage_from})
        if self.max_restarts > 0:
            # torchrun shares its rendezvous store with the ranks; after a restart the new ranks read the dead
            # ranks' addresses from it and fail to connect (pytorch/pytorch#135712). A fresh store per round fixes it.
            env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
        return env


def launch_settings(spec) -> Launch:
    """The :class:`Launch` block of a :class:`tutorial_lib.jobs.spec.JobSpec`, written once into its record."""
    threads = os.environ.get("OMP_NUM_THREADS", "1" if spec.config.device == "cpu" else "4")
    return Launch(run_dir=str(spec.run_dir), python=spec.python, ranks_per_node=spec.ranks_per_node,
                  max_restarts=spec.max_restarts, module=spec.module, threads=threads,
                  stage_to=spec.config.stage_to or "", stage_from=spec.config.data_dir if spec.config.stage_to else "")


def read_launch(environ=os.environ) -> Launch:
    """The one reader of a job's launch settings: the ``launch`` block of the record in ``$TUTORIAL_RUN_DIR``;
    without one (a batch script started by hand), the documented environment inputs over the defaults."""
    run_dir = environ.get(RUN_DIR_ENV, "")
    if run_dir and (Path(run_dir) / JOB_FILE).is_file():
        record = read_job_file(Path(run_dir))
        if isinstance(record.get("launch"), dict):
            return launch_of(record)
    given = {field: environ[name] for field, name in HAND_INPUTS.items() if environ.get(name)}
    for field in ("ranks_per_node", "max_restarts"):
        if field in given:
            if whole_number(given[field]) is None:
                raise JobError(f"{HAND_INPUTS[field]}: {shorten(given[field])} is not a whole number from 0 to "
                               f"{2**31 - 1:,}. Fix: set it to e.g. 1, or unset it for the default.")  # r43t: cut
            given[field] = whole_number(given[field])
            most = COUNT_MAXIMUM[field]  # as submit bounds them (r43ac: 100,000 ranks were handed to torchrun)
            if given[field] > most:
                raise JobError(f"{HAND_INPUTS[field]}: {given[field]:,} is over the {most:,} a job may ask for. Fix: "
                               "set it to e.g. 1, or unset it for the default.")
    if "module" in given and given["module"] not in JOB_MODULES:  # r43ab: handed to torchrun unchecked
        raise JobError(f"TUTORIAL_MODULE: {shorten(given['module'])} cannot be run as a job. Fix: one of "
                       f"{', '.join(JOB_MODULES)}, or unset it for the default.")
    if given.get("python", "").startswith("-"):
        raise JobError(f"TUTORIAL_PYTHON: {shorten(given['python'])} would be read as an option. Fix: the path of "
                       "a Python interpreter, or unset it for this one.")
    return Launch(run_dir=run_dir, threads=environ.get("OMP_NUM_THREADS", ""), **given)


def launch_of(record: dict) -> Launch:
    """The :class:`Launch` block of a job record (a key this version does not know is left out)."""
    known = {f.name: f.default for f in dataclasses.fields(Launch)}
    given = {key: value for key, value in (record.get("launch") or {}).items() if key in known}
    for key, value in given.items():
        kind = type(known[key])  # str or int, as this module writes them
        odd = (not isinstance(value, kind) or isinstance(value, bool) or (kind is int and value < 0)
               or (key == "python" and value.startswith("-")))
        if odd:
            wanted = "a whole number >= 0" if kind is int else "text" if key != "python" else "text, no option"
            raise JobError(f"job record: launch.{key} is {shorten(value)}, which tutorial_lib.jobs never writes "
                           f"({wanted}). Fix: submit the job again with another name, or with fresh=True.")
    return Launch(**given)


def python_of(launch: Launch) -> str:
    """The Python that runs the job's ranks (the one reading the record where the record names none)."""
    return launch.python or sys.executable


def write_job_file(run_dir: Path, record: dict) -> None:
    """Store the job record (id, backend, settings...) atomically, so attach() and the launchers find it."""
    run_dir.mkdir(parents=True, exist_ok=True)
    replace_file(run_dir / JOB_FILE, json.dumps(record, indent=2, default=str))


def replace_file(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file renamed over it: a reader sees the old or the new file,
    never half of one, and a link found at ``path`` (a user's file linked into the run directory) is replaced, its
    target left as it was (r43g: job.sbatch written in place overwrote a linked user file with the batch script)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)  # our own leftover of a write that was killed (or a link planted under that name)
    tmp.write_text(text)
    tmp.replace(path)


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
    except (ValueError, RecursionError):  # torn (a full disk, a copy cut short), empty, nested past Python, not JSON
        raise JobError(f"{path} is not a complete job record (torn, empty or not JSON); nothing was read from it. "
                       "Fix: submit the job again with another name, or with fresh=True.") from None
    missing = [key for key in ("id", "backend", "name") if not isinstance(record, dict) or key not in record]
    if missing:
        raise JobError(f"{path} lacks the job's {', '.join(missing)}: it was not written by tutorial_lib.jobs. "
                       "Fix: submit the job again with another name, or with fresh=True.")
    odd = [key for key, ok in (("id", isinstance(record["id"], (str, int)) and not isinstance(record["id"], bool)),
                               ("backend", record["backend"] in ("local", "slurm")),
                               ("name", isinstance(record["name"], str)),
                               *((key, isinstance(record[key], dict)) for key in ("spec", "launch", "supervisor")
                                 if record.get(key) is not None)) if not ok]
    conf = record.get("slurm_conf")  # r43q: a list was a dict key, a number an environment value (tracebacks)
    if conf is not None and not (isinstance(conf, str) and "\x00" not in conf and len(conf) <= PATH_MAX):
        odd.append("slurm_conf")
    if odd:
        raise JobError(f"{path} holds a job {', '.join(odd)} of another type than tutorial_lib.jobs writes "
                       f"({shorten(record[odd[0]])}): it was not written by it or was changed since. Fix: submit "
                       "the job again with another name, or with fresh=True.")
    return record
