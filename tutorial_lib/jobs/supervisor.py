"""Runs a local job detached from the notebook: starts torchrun agents, records the outcome.

``python -m tutorial_lib.jobs.supervisor RUN_DIR`` reads ``RUN_DIR/job.json`` (written by
:mod:`tutorial_lib.jobs`), starts one torchrun agent per emulated node in its own process group,
and writes ``RUN_DIR/job_state.json`` (:mod:`tutorial_lib.jobs.states`) as the state changes: RUNNING,
then COMPLETED, FAILED, CANCELLED (SIGTERM from Job.cancel) or TIMEOUT (the job's time limit). Output goes to
``RUN_DIR/job.log``. It waits for a job it depends on (``after``) before starting: sweeps run one
job at a time so their throughput numbers do not compete for the same cores.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

import psutil

from tutorial_lib import REPO_ROOT
from tutorial_lib.jobs import processes
from tutorial_lib.jobs.record import launch_of
from tutorial_lib.jobs.rendezvous import with_free_endpoint
from tutorial_lib.jobs.slurm_values import time_limit_seconds
from tutorial_lib.jobs.states import FINAL_STATES, read_state, write_state
from tutorial_lib.rundir.layout import JOB_FILE, JOB_LOG, STOP_FILE

STOP_GRACE_S = 15


class Supervisor:
    """Owns the agent processes of one local job."""

    def __init__(self, run_dir: Path):
        self.run_dir = run_dir
        self.record = json.loads((run_dir / JOB_FILE).read_text())
        self.procs: list[subprocess.Popen] = []
        self.ranks: dict[int, psutil.Process] = {}  # every process under the agents, seen while stopping
        self.cancelled = False
        signal.signal(signal.SIGTERM, self._on_cancel)
        signal.signal(signal.SIGINT, self._on_cancel)

    def _on_cancel(self, _signum, _frame) -> None:
        self.cancelled = True

    def _wait_for_dependency(self) -> bool:
        after = self.record.get("after")
        while after and not self.cancelled:
            state = read_state(Path(after))
            if state and state["state"] in FINAL_STATES:
                return True
            if state is None and not (Path(after) / JOB_FILE).exists():
                return True
            time.sleep(0.5)
        return not self.cancelled

    def _terminate(self, sig: int) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    pass

    def _note_ranks(self) -> None:
        """Remember every process under the agents: torchrun starts its ranks in sessions of their own, so a rank
        that outlives its agent (killed after the grace period) is no longer in any group this supervisor kills."""
        for proc in self.procs:
            try:
                for child in psutil.Process(proc.pid).children(recursive=True):
                    self.ranks.setdefault(child.pid, child)
            except psutil.NoSuchProcess:
                pass

    def _kill_ranks(self, grace_until: float) -> None:
        """After a stop: wait for the remembered ranks until ``grace_until``, then SIGKILL those still running
        (psutil checks each one's start time: a pid reused by another program is left alone)."""
        alive = [rank for rank in self.ranks.values() if rank.is_running()]
        _, alive = psutil.wait_procs(alive, timeout=max(0.0, grace_until - time.time()))
        for rank in alive:
            try:
                rank.kill()
            except psutil.NoSuchProcess:
                pass

    def run(self) -> int:
        """Start the agents, wait for them (or cancel / time limit) and record the final state."""
        write_state(self.run_dir, "PENDING")
        if not self._wait_for_dependency():
            write_state(self.run_dir, "CANCELLED", exit_code=None)
            return 0
        limit = time_limit_seconds(self.record["time"])
        # The trainer honours a STOP file that exists when it starts (a launcher's request), so a stale
        # one from an earlier run (e.g. our own time-limit stop) is removed here, as train.sbatch does.
        (self.run_dir / STOP_FILE).unlink(missing_ok=True)
        log = open(self.run_dir / JOB_LOG, "ab", buffering=0)
        # every agent names this run directory (TUTORIAL_RUN_DIR), a record without a launch block too: it is
        # what proves an agent the project's when a cancel finds the supervisor gone (processes.started_for)
        launch = dataclasses.replace(launch_of(self.record), run_dir=str(self.run_dir))
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), **launch.environment()}
        names = self.record.get("node_names") or [None] * len(self.record["commands"])
        commands, moved = with_free_endpoint(self.record["commands"])  # its port may be taken since the submit
        if moved:
            log.write(f"{moved}\n".encode())
        for command, name in zip(commands, names, strict=True):
            node_env = {**env, "TUTORIAL_NODE_NAME": name} if name else env  # an emulated node's name
            self.procs.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=node_env,
                                               cwd=self.record["workdir"], start_new_session=True))
        # each agent as it was started (pid, start time, command line): what a cancel may signal once we are gone
        agents = [{**(processes.identity(p.pid) or {}), "pid": p.pid, "cmdline": command}
                  for p, command in zip(self.procs, commands, strict=True)]
        write_state(self.run_dir, "RUNNING", agents=agents)
        started, final, term_sent = time.time(), None, None
        while any(p.poll() is None for p in self.procs):
            if self.cancelled and final is None:
                final = "CANCELLED"
            elif time.time() - started > limit and final is None:
                final = "TIMEOUT"
                (self.run_dir / STOP_FILE).touch()  # ask for a checkpoint first, as Slurm's warning signal does
            failed = any(p.poll() not in (None, 0) for p in self.procs)
            if (final or failed) and term_sent is None:
                # cancelled, out of time, or one agent failed (the others would wait for it forever)
                term_sent = time.time()
                self._note_ranks()
                self._terminate(signal.SIGTERM)
            elif term_sent is not None and time.time() - term_sent > STOP_GRACE_S:
                self._note_ranks()
                self._terminate(signal.SIGKILL)
            elif term_sent is not None:
                self._note_ranks()
            time.sleep(0.2)
        if term_sent is not None:
            self._kill_ranks(term_sent + STOP_GRACE_S)
        codes = [p.returncode for p in self.procs]
        exit_code = next((c for c in codes if c != 0), 0)
        if final is None:
            final = "COMPLETED" if exit_code == 0 else "FAILED"
        write_state(self.run_dir, final, exit_code=exit_code, ended=time.time())
        log.write(f"\n[local job ended: {final}, exit code {exit_code}]\n".encode())
        return 0


def main() -> int:
    """Entry point: ``python -m tutorial_lib.jobs.supervisor RUN_DIR``.

    An error of the supervisor itself is recorded, not left for the watcher to find as a lost job: its agents are
    killed, the state file says FAILED with the error's last line, and the traceback goes to stderr
    (``supervisor.log``, which :meth:`tutorial_lib.jobs.Job.explain` shows)."""
    run_dir = Path(sys.argv[1])
    supervisor = None
    try:
        supervisor = Supervisor(run_dir)
        return supervisor.run()
    except Exception as exc:
        traceback.print_exc()
        if supervisor is not None:
            supervisor._terminate(signal.SIGKILL)
        error = (traceback.format_exception_only(exc)[-1].strip() or type(exc).__name__)[:500]
        try:
            write_state(run_dir, "FAILED", exit_code=None, ended=time.time(), error=error)
        except OSError:
            traceback.print_exc()
        return 1


if __name__ == "__main__":
    sys.exit(main())
