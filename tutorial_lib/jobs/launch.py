"""One node of a Slurm job: ``python -m tutorial_lib.jobs.launch PROGRAM_ARGS...`` (run by train.sbatch's srun task).

Builds this node's torchrun command with :func:`tutorial_lib.jobs.commands.torchrun_command` (the one the
local backend uses too) from Slurm's variables (``SLURM_NNODES``, ``SLURM_NODEID``, ``SLURM_JOB_ID``), the
rendezvous that train.sbatch chose (``HEAD``, ``PORT``) and the job's environment (``RANKS_PER_NODE``,
``TUTORIAL_MAX_RESTARTS``, ``TUTORIAL_MODULE``, ``TUTORIAL_PYTHON``), prints it, and replaces itself with it;
a job that stages its data (``TUTORIAL_STAGE_TO``) runs it under :func:`tutorial_lib.jobs.staged.run` instead.
Kept out of ``tutorial_lib.jobs.__init__`` so that running it with ``-m`` imports it only once.
"""

from __future__ import annotations

import os
import shlex
import sys

from tutorial_lib.data.staging import STAGE_FROM_ENV, STAGE_TO_ENV
from tutorial_lib.engine.cli import config_from_args
from tutorial_lib.engine.errors import ConfigError
from tutorial_lib.jobs import staged
from tutorial_lib.jobs.commands import DEFAULT_MODULE, Rendezvous, torchrun_command, torchrun_env


def node_command(program_args: list[str], environ=os.environ) -> list[str]:
    """This node's torchrun argv, from Slurm's and the job's environment variables."""
    nnodes = int(environ.get("SLURM_NNODES", "1"))
    ranks = environ.get("RANKS_PER_NODE") or environ.get("SLURM_GPUS_ON_NODE") or "1"
    rendezvous = Rendezvous(endpoint=f"{environ['HEAD']}:{environ['PORT']}", run_id=environ["SLURM_JOB_ID"],
                            is_host=environ.get("SLURM_NODEID", "0") == "0")
    return torchrun_command(environ.get("TUTORIAL_PYTHON") or sys.executable, nnodes, int(ranks),
                            int(environ.get("TUTORIAL_MAX_RESTARTS") or 0),
                            environ.get("TUTORIAL_MODULE") or DEFAULT_MODULE, program_args, rendezvous)


def stage_env(program_args: list[str]) -> dict:
    """The staging variables of a job that sbatch started directly with ``--stage-to`` among the trainer's
    flags (or in its ``--config`` file); ``jobs.submit`` sets them itself. Empty when the job stages nothing."""
    if not any(arg.startswith(("--stage-to", "--stage_to", "--config")) for arg in program_args):
        return {}
    try:
        cfg = config_from_args(program_args)
    except (ConfigError, SystemExit):  # the trainer reports the bad flag itself
        return {}
    return {STAGE_TO_ENV: cfg.stage_to, STAGE_FROM_ENV: os.path.abspath(cfg.data_dir)} if cfg.stage_to else {}


def main(argv: list[str] | None = None) -> None:
    """Print this node's torchrun command and exec it (under :func:`tutorial_lib.jobs.staged.run` with stage_to)."""
    argv = sys.argv[1:] if argv is None else argv
    command = node_command(argv)
    if not os.environ.get(STAGE_TO_ENV):
        os.environ.update(stage_env(argv))
    if os.environ.get("SLURM_NODEID", "0") == "0":
        print("node 0 runs:", shlex.join(command), flush=True)
    os.environ.update(torchrun_env(int(os.environ.get("TUTORIAL_MAX_RESTARTS") or 0)))
    if os.environ.get(STAGE_TO_ENV):
        sys.exit(staged.run(command))
    os.execvp(command[0], command)


if __name__ == "__main__":
    main()
