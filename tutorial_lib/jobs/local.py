"""The local backend: a job on this machine, run by a detached supervisor (:mod:`tutorial_lib.jobs.supervisor`).

Several nodes are emulated by one torchrun agent per node meeting at a c10d rendezvous on this host. The
supervisor is recorded by its pid, start time and command line (:mod:`tutorial_lib.jobs.processes`): only that
proven process is ever signalled, and a job whose supervisor is gone without writing how the job ended is
reported lost at once, with the run directory's last event (:func:`local_seen`, which the watcher reads).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from tutorial_lib import REPO_ROOT, free_port
from tutorial_lib.jobs import processes
from tutorial_lib.jobs.commands import Rendezvous, spec_torchrun_command
from tutorial_lib.jobs.record import launch_settings, write_job_file
from tutorial_lib.jobs.spec import JobError, JobSpec
from tutorial_lib.jobs.states import FINAL_STATES, Seen, load_state, read_state
from tutorial_lib.rundir.layout import DONE_FILE, JOB_FILE, STATE_FILE, SUPERVISOR_LOG
from tutorial_lib.rundir.lock import is_pid, pid_alive
from tutorial_lib.rundir.metrics import read_metrics, record_time

PENDING_ID = "local-pending"  # the record's id while its supervisor is being started
START_GRACE_S = 30.0  # how long a record may name no supervisor yet: the moment submit_local takes to start it
# before a supervisor whose pid still runs is called lost, it is looked at again after these pauses: "lost" is
# final, and one unproven look (seen once in CI, the supervisor running again a moment later) must not make it so
RECHECK_PAUSES_S = (0.1, 0.3, 0.6)


def submit_local(spec: JobSpec, after_run_dir: Path | None = None) -> str:
    """Start ``spec`` under a detached supervisor (after the job of ``after_run_dir`` ends); return the job id."""
    # with stage_to, one launcher per emulated node copies the data, then starts that node's torchrun
    staged = [spec.python, "-m", "tutorial_lib.jobs.staged"] if spec.config.stage_to else []
    if spec.nodes == 1:
        commands, node_names = [staged + spec_torchrun_command(spec)], None
    else:
        endpoint = f"127.0.0.1:{free_port()}"
        commands = [staged + spec_torchrun_command(spec, Rendezvous(endpoint, spec.config.name, is_host=n == 0))
                    for n in range(spec.nodes)]
        node_names = [f"local-node{n + 1}" for n in range(spec.nodes)]  # each agent's TUTORIAL_NODE_NAME
    record = {"backend": "local", "name": spec.config.name, "spec": spec.to_dict(),
              "launch": dataclasses.asdict(launch_settings(spec)), "commands": commands, "node_names": node_names,
              "workdir": str(REPO_ROOT),
              "time": spec.time, "after": str(after_run_dir) if after_run_dir else None, "submitted": time.time()}
    (spec.run_dir / STATE_FILE).unlink(missing_ok=True)
    write_job_file(spec.run_dir, {**record, "id": PENDING_ID})
    argv = [sys.executable, "-m", "tutorial_lib.jobs.supervisor", str(spec.run_dir)]
    supervisor = subprocess.Popen(argv, cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=open(spec.run_dir / SUPERVISOR_LOG, "ab"), start_new_session=True)
    job_id = f"local-{supervisor.pid}"
    # Popen returns once the child has exec'd: its start time and command line are the supervisor's own
    write_job_file(spec.run_dir, {**record, "id": job_id,
                                  "supervisor": {**(processes.identity(supervisor.pid) or {}), "pid": supervisor.pid,
                                                 "cmdline": argv}})
    return job_id


def recorded_supervisor(record: dict, state: dict | None) -> dict | None:
    """The supervisor as recorded at its start: by submit_local in job.json, else by the supervisor itself in
    its state file (:func:`tutorial_lib.jobs.states.write_state`); a job.json of an older version names its pid
    (and start time), which the state file's record completes when it names the same pid."""
    if isinstance(record.get("supervisor"), dict):
        return record["supervisor"]
    own = (state or {}).get("supervisor")
    pid = record.get("supervisor_pid")
    if pid and not (isinstance(own, dict) and own.get("pid") == pid):
        return {"pid": pid, "start": record.get("supervisor_start")}
    return own if isinstance(own, dict) else None


def last_event(run_dir: Path) -> str:
    """The run directory's last event in words: ``step (epoch 2, global step 12) at 22:31:05``."""
    events = read_metrics(run_dir) if Path(run_dir).is_dir() else []
    if not events:
        return "none (the job logged nothing)"
    last = events[-1]
    where = ", ".join(f"{key.replace('_', ' ')} {last[key]}" for key in ("epoch", "step", "global_step")
                      if key in last)
    when = record_time(last.get("time"))
    at = time.strftime("%H:%M:%S", time.localtime(when)) if when is not None else "?"
    return f"{last['event']}{f' ({where})' if where else ''} at {at}"


def _ended(state: dict | None) -> Seen | None:
    if state is not None and state["state"] in FINAL_STATES:
        reason = state.get("error")
        return Seen(state["state"].lower(), "supervisor", exit_code=state.get("exit_code"),
                    reason=f"its supervisor failed: {reason}" if isinstance(reason, str) and reason else "")
    return None


def _runs_after_all(supervisor: dict | None, run_dir: Path) -> bool:
    """Whether a supervisor that did not prove itself just now does so at one of a few short looks more; a pid
    that no longer runs is not waited for."""
    pid = supervisor.get("pid") if isinstance(supervisor, dict) else None
    for pause in RECHECK_PAUSES_S:
        if not pid_alive(pid):
            return False
        time.sleep(pause)
        if processes.runs(supervisor, run_dir):
            return True
    return False


def supervisor_errors(run_dir: Path, lines: int = 5) -> str:
    """The last ``lines`` lines of the supervisor's own error output (``supervisor.log``), or ''."""
    path = run_dir / SUPERVISOR_LOG
    if os.path.islink(path) or not path.is_file():
        return ""
    with open(path, "rb") as handle:
        handle.seek(max(0, path.stat().st_size - 8192))
        text = handle.read().decode(errors="replace")
    return "\n".join(text.strip().splitlines()[-lines:])


def local_seen(run_dir: Path, record: dict) -> Seen:
    """What the run directory says about the local job in ``run_dir``: its supervisor's state while that
    proven process runs, its final state once written; lost (failed, with the last event) when the supervisor is
    gone without writing one, or when the record cannot say which process it is."""
    state = read_state(run_dir)
    supervisor = recorded_supervisor(record, state)
    ended = _ended(state)
    if ended is None and processes.runs(supervisor, run_dir):
        return Seen((state or {}).get("state", "PENDING").lower(), "supervisor")
    ended = ended or _ended(read_state(run_dir))  # it may have written its final state just before it exited
    if ended is not None:
        return ended
    damage = load_state(run_dir)[1]
    if damage is not None:  # no verdict from the state file: the run directory's own DONE, else the damage named
        if (run_dir / DONE_FILE).is_file():
            return Seen("completed", "DONE", exit_code=0, reason=f"{run_dir / STATE_FILE} is damaged ({damage}); "
                        f"the run's {DONE_FILE} says it finished")
        return Seen("failed", "run directory", reason=f"damaged: its state file {run_dir / STATE_FILE} is {damage}, "
                    "not what its supervisor writes, so how the job ended is unknown. Fix: look at the job's log; "
                    "submit it again with the same settings to resume from its checkpoint")
    if supervisor is None and time.time() - (record_time(record.get("submitted")) or 0) < START_GRACE_S:
        return Seen("pending", "submitted")
    if _runs_after_all(supervisor, run_dir):
        state = read_state(run_dir)
        return _ended(state) or Seen((state or {}).get("state", "PENDING").lower(), "supervisor")
    who = (f"its record names no supervisor ({JOB_FILE} id {record.get('id')})" if supervisor is None else
           f"its supervisor, recorded as {processes.proof_problem(supervisor)}, cannot be told from another program"
           if supervisor.get("start") is None else f"its supervisor (pid {supervisor['pid']}) is gone (killed, or "
                                                   "crashed)")
    return Seen("failed", "run directory", reason=f"lost: {who} without recording how the job ended; last event "
                                                  f"in {run_dir}: {last_event(run_dir)}")


def local_cancel(run_dir: Path, record: dict) -> None:
    """Ask the supervisor to cancel (SIGTERM); if it is gone, kill its agents' process groups.

    Only processes proven by their recorded pid, start time and command line are signalled. A live process that
    the record names without that proof is refused with JobError (one line), and nothing is signalled."""
    state = read_state(run_dir)
    supervisor = recorded_supervisor(record, state)
    problem = processes.proof_problem(supervisor) if supervisor is not None else None
    if problem and _might_be(supervisor):
        raise JobError(f"cancel refused: {run_dir / JOB_FILE} names the job's supervisor by {problem}, which does "
                       f"not prove that the running process {supervisor['pid']} is this job's; nothing was "
                       "signalled. Fix: if the job still runs, check that process yourself (ps -o args -p "
                       f"{supervisor['pid']}) before stopping it; submit the job again with fresh=True.")
    if processes.runs(supervisor) and not processes.started_for(supervisor, run_dir):
        raise JobError(f"cancel refused: {run_dir / JOB_FILE} names as the job's supervisor the running process "
                       f"{supervisor['pid']}, which is not this run directory's supervisor (-m "
                       f"{processes.SUPERVISOR_MODULE} {run_dir}); nothing was signalled. Fix: stop the job's own "
                       "processes yourself, or submit the job again with fresh=True.")
    if processes.signal_proven(supervisor, signal.SIGTERM, run_dir):
        return
    agents = (state or {}).get("agents")
    for agent in agents if isinstance(agents, list) else []:  # the supervisor is gone: its agents, and ranks
        processes.kill_tree(agent, run_dir)


def _might_be(recorded: dict) -> bool:
    """Whether the recorded pid runs a process that the record does not rule out: its start time, where
    recorded, matches."""
    if not isinstance(recorded, dict) or not is_pid(recorded.get("pid")):
        return False
    try:
        process = psutil.Process(recorded["pid"])
        alive = process.status() != psutil.STATUS_ZOMBIE
    except (psutil.Error, ValueError, TypeError):
        return False
    start = recorded.get("start")
    return alive and (start is None or processes.identity(process.pid) is None
                      or processes.identity(process.pid)["start"] == start)
