"""One node's launcher when the job stages its data: copy once, run the node's torchrun, remove the copy.

``python -m tutorial_lib.jobs.staged COMMAND...`` (the local backend's per-node command) and
:mod:`tutorial_lib.jobs.launch` (Slurm's per-node task) call :func:`run` when the job environment has
``TUTORIAL_STAGE_TO``: one process per node copies ``TUTORIAL_STAGE_FROM`` there
(:func:`tutorial_lib.data.staging.stage`) before torchrun starts any rank of that node, gives the ranks the
copy's place (``TUTORIAL_STAGED_DATA``), waits for torchrun, passing on the signals it gets (cancel, time
limit), and removes the copy however torchrun ended.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tutorial_lib.data import staging
from tutorial_lib.data.staging import STAGE_FROM_ENV, STAGE_TO_ENV

_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2)


def node_label(environ=os.environ) -> str:
    """This node's name as the trainer records it (emulated node, Slurm node, else host name)."""
    return environ.get("TUTORIAL_NODE_NAME") or environ.get("SLURMD_NODENAME") or os.uname().nodename


def run(command: list[str], environ=os.environ) -> int:
    """Stage the data for this node, run ``command`` on it, remove the copy; return the command's exit code
    (2 if the data could not be staged: the one-line reason is printed, nothing runs)."""
    node = node_label(environ)
    run_name = Path(environ.get("TUTORIAL_RUN_DIR", "run")).name
    source = environ[STAGE_FROM_ENV]
    try:
        copy = staging.stage(source, environ[STAGE_TO_ENV], run_name, node, environ)
    except staging.StagingError as exc:
        print(f"ConfigError: {exc}", file=sys.stderr, flush=True)
        return 2
    how = ("reused the copy left by an earlier attempt" if copy.reused else f"copied in {copy.seconds:.1f} s"
           + (" (the copy of an earlier attempt, brought up to date: the source changed since)" if copy.refreshed
              else ""))
    print(f"node {node}: staged {copy.files:,} files ({copy.bytes / 1e6:.1f} MB) of {source} to {copy.path}: "
          f"{how}", flush=True)
    env = {**environ, staging.STAGED_DATA_ENV: str(copy.path), staging.STAGED_FROM_ENV: source}
    child = None
    previous = {sig: signal.getsignal(sig) for sig in _FORWARDED}

    def forward(signum, _frame):
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    for sig in _FORWARDED:
        signal.signal(sig, forward)
    try:
        child = subprocess.Popen(command, env=env)
        return child.wait()  # a forwarded signal does not interrupt the wait (PEP 475)
    finally:
        if child is not None and child.poll() is None:
            child.kill()
            child.wait()
        left = staging.remove(copy.path)
        print(f"node {node}: removed the staged copy {copy.path}"
              + (f" (kept {len(left)} file(s) it did not copy)" if left else ""), flush=True)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def main() -> int:
    """Entry point: ``python -m tutorial_lib.jobs.staged COMMAND...``."""
    return run(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
