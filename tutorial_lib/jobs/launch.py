"""One node of a Slurm job: ``python -m tutorial_lib.jobs.launch PROGRAM_ARGS...`` (run by train.sbatch's srun task).

Reads the job's settings through the one reader (:func:`tutorial_lib.jobs.record.read_launch`: the record in
``$TUTORIAL_RUN_DIR``, or a by-hand batch script's environment inputs), builds this node's torchrun command with
:func:`tutorial_lib.jobs.commands.torchrun_command` (the one the local backend uses too) from Slurm's variables
(``SLURM_NNODES``, ``SLURM_NODEID``, ``SLURM_JOB_ID``) and the rendezvous that train.sbatch chose (``HEAD``,
``PORT``), prints it, and replaces itself with it; a job that stages its data runs it under
:func:`tutorial_lib.jobs.staged.run` instead. Node 0 first tells the run directory what Slurm says about an
earlier job that left its LOCK there (:func:`note_ended_holder`), so that the trainer may take the LOCK over.
Kept out of ``tutorial_lib.jobs.__init__`` so that running it with ``-m`` imports it only once.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from tutorial_lib.data.staging import STAGE_FROM_ENV, STAGE_TO_ENV
from tutorial_lib.engine.cli import config_from_args
from tutorial_lib.engine.errors import ConfigError
from tutorial_lib.jobs import staged
from tutorial_lib.jobs.commands import Rendezvous, torchrun_command
from tutorial_lib.jobs.record import Launch, python_of, read_launch
from tutorial_lib.rundir.job_exits import record_exit
from tutorial_lib.rundir.lock import RunLock


def node_command(program_args: list[str], environ=os.environ, launch: Launch | None = None) -> list[str]:
    """This node's torchrun argv, from Slurm's variables and the job's launch settings."""
    launch = read_launch(environ) if launch is None else launch
    rendezvous = Rendezvous(endpoint=f"{environ['HEAD']}:{environ['PORT']}", run_id=environ["SLURM_JOB_ID"],
                            is_host=environ.get("SLURM_NODEID", "0") == "0")
    return torchrun_command(python_of(launch), int(environ.get("SLURM_NNODES", "1")), launch.ranks(environ),
                            launch.max_restarts, launch.module, program_args, rendezvous)


def _config(program_args: list[str]):
    """The trainer's config from its flags, or None (the trainer reports a bad flag itself)."""
    try:
        return config_from_args(program_args)
    except (ConfigError, SystemExit):
        return None


def stage_env(program_args: list[str]) -> dict:
    """The staging variables of a job that sbatch started directly with ``--stage-to`` among the trainer's
    flags (or in its ``--config`` file); a job's record carries its own. Empty when the job stages nothing."""
    if not any(arg.startswith(("--stage-to", "--stage_to", "--config")) for arg in program_args):
        return {}
    cfg = _config(program_args)
    return {STAGE_TO_ENV: cfg.stage_to, STAGE_FROM_ENV: os.path.abspath(cfg.data_dir)} if cfg and cfg.stage_to else {}


def note_ended_holder(run_dir: Path, environ=os.environ) -> str | None:
    """If an earlier Slurm job holds ``run_dir``'s LOCK (its rank 0 was killed, or its node lost) and Slurm says
    that job has ended, record so in the run directory (:mod:`tutorial_lib.rundir.job_exits`): the trainer then
    takes the LOCK over. Returns that job's Slurm state, or None."""
    from tutorial_lib.jobs.watch import Watched, watcher

    holder = RunLock(run_dir).holder()
    other = str((holder or {}).get("slurm_job_id") or "")
    if not other or other == environ.get("SLURM_JOB_ID"):
        return None
    seen = watcher().status(Watched("slurm", other, run_dir, {"slurm_conf": environ.get("SLURM_CONF")}))
    if seen.final and seen.source in ("slurm", "sacct"):
        record_exit(run_dir, other, state=seen.slurm_state, source="slurm",
                    seen_by=f"job {environ.get('SLURM_JOB_ID')}")
        return seen.slurm_state
    return None


def main(argv: list[str] | None = None) -> int:
    """Print this node's torchrun command and exec it (under :func:`tutorial_lib.jobs.staged.run` with stage_to).
    A bad by-hand input (``RANKS_PER_NODE=x``) is one line and exit status 2, as every command's (r43ab: a
    traceback)."""
    from tutorial_lib.exits import run_main
    from tutorial_lib.jobs.spec import JobError

    return run_main(lambda: _launch(sys.argv[1:] if argv is None else argv), refused=(JobError, ConfigError))


def _launch(argv: list[str]) -> None:
    launch = read_launch()
    command = node_command(argv, os.environ, launch)
    os.environ.update(launch.environment())
    if not os.environ.get(STAGE_TO_ENV):
        os.environ.update(stage_env(argv))
    if os.environ.get("SLURM_NODEID", "0") == "0":
        print("node 0 runs:", shlex.join(command), flush=True)
        cfg = None if launch.run_dir else _config(argv)
        run_dir = Path(launch.run_dir) if launch.run_dir else (cfg.run_dir if cfg else None)
        if run_dir is not None and run_dir.is_dir():
            ended = note_ended_holder(run_dir)
            if ended:
                print(f"the run directory's LOCK was left by an earlier job, which Slurm says ended {ended}: "
                      "it is taken over", flush=True)
    if os.environ.get(STAGE_TO_ENV):
        sys.exit(staged.run(command))
    os.execvp(command[0], command)


if __name__ == "__main__":
    sys.exit(main())
