"""The local backend: a job on this machine, run by a detached supervisor (:mod:`tutorial_lib.jobs.supervisor`).

Several nodes are emulated by one torchrun agent per node meeting at a c10d rendezvous on this host.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tutorial_lib import REPO_ROOT, free_port
from tutorial_lib.jobs.commands import Rendezvous, job_env, spec_torchrun_command
from tutorial_lib.jobs.spec import JobSpec, read_job_file, write_job_file
from tutorial_lib.jobs.states import FINAL_STATES, read_state
from tutorial_lib.rundir.layout import STATE_FILE, SUPERVISOR_LOG
from tutorial_lib.rundir.lock import process_start, same_process


def submit_local(spec: JobSpec, after_run_dir: Path | None = None) -> str:
    """Start ``spec`` under a detached supervisor (after the job of ``after_run_dir`` ends); return the job id."""
    # with stage_to, one launcher per emulated node copies the data, then starts that node's torchrun
    staged = [spec.python, "-m", "tutorial_lib.jobs.staged"] if spec.config.stage_to else []
    if spec.nodes == 1:
        commands = [staged + spec_torchrun_command(spec)]
    else:
        endpoint = f"127.0.0.1:{free_port()}"
        commands = [["env", f"TUTORIAL_NODE_NAME=local-node{n + 1}"] + staged
                    + spec_torchrun_command(spec, Rendezvous(endpoint, spec.config.name, is_host=n == 0))
                    for n in range(spec.nodes)]
    record = {"backend": "local", "name": spec.config.name, "spec": spec.to_dict(), "commands": commands,
              "workdir": str(REPO_ROOT), "time": spec.time, "env": job_env(spec),
              "after": str(after_run_dir) if after_run_dir else None, "submitted": time.time()}
    (spec.run_dir / STATE_FILE).unlink(missing_ok=True)
    write_job_file(spec.run_dir, {**record, "id": "local-pending"})
    supervisor = subprocess.Popen([sys.executable, "-m", "tutorial_lib.jobs.supervisor", str(spec.run_dir)],
                                  cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=open(spec.run_dir / SUPERVISOR_LOG, "ab"), start_new_session=True)
    job_id = f"local-{supervisor.pid}"
    write_job_file(spec.run_dir, {**record, "id": job_id, "supervisor_pid": supervisor.pid,
                                  "supervisor_start": process_start(supervisor.pid)})
    return job_id


def _supervisor(run_dir: Path) -> tuple[int | None, bool]:
    """The recorded supervisor pid, and whether that very process (pid and start time) still runs."""
    record = read_job_file(run_dir)
    pid = record.get("supervisor_pid")
    return pid, bool(pid) and same_process(int(pid), record.get("supervisor_start"))


def local_status(run_dir: Path) -> dict:
    """State and exit code of the local job in ``run_dir`` (FAILED if its supervisor died)."""
    state = read_state(run_dir)
    supervisor, alive = _supervisor(run_dir)
    if state is None:
        if supervisor and not alive:
            return {"state": "FAILED", "exit_code": None, "reason": "the local supervisor died before starting"}
        return {"state": "PENDING", "exit_code": None}
    if state["state"] not in FINAL_STATES and supervisor and not alive:
        return {"state": "FAILED", "exit_code": None, "reason": "the local supervisor was killed"}
    return {"state": state["state"], "exit_code": state.get("exit_code")}


def local_cancel(run_dir: Path) -> None:
    """Ask the supervisor to cancel (SIGTERM); if it is gone, kill its agents' process groups.

    Each process is checked by its pid and start time first: a pid reused by another program is left alone."""
    _, alive = _supervisor(run_dir)
    if alive:
        os.kill(int(read_job_file(run_dir)["supervisor_pid"]), signal.SIGTERM)
        return
    state = read_state(run_dir) or {}
    starts = state.get("pid_starts") or [None] * len(state.get("pids", []))
    for pid, start in zip(state.get("pids", []), starts, strict=False):
        if not same_process(pid, start):
            continue
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
