"""A cancelled local job leaves no process behind: torchrun starts its ranks in their own sessions, so killing
the agents' process groups alone (after the grace period) orphaned a rank that did not stop on SIGTERM (seen: 4
ranks of a cancelled job still running 1.5 minutes later). No torch here: stand-in agents."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil

from tutorial_lib.jobs.states import read_state

# An agent that starts a "rank" in a new session (as torchrun does), which ignores SIGTERM, writes its pid and
# sleeps; the agent itself exits on SIGTERM at once.
AGENT = r"""
import os, signal, subprocess, sys, time
rank = subprocess.Popen([sys.executable, "-c", "import os, signal, time, sys\n"
                         "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                         "open(sys.argv[1], 'w').write(str(os.getpid()))\n"
                         "time.sleep(600)", sys.argv[1]], start_new_session=True)
signal.signal(signal.SIGTERM, lambda *a: os._exit(143))
time.sleep(600)
"""


def test_cancel_kills_ranks_in_their_own_sessions_that_ignore_sigterm(tmp_path):
    run_dir, pid_file = tmp_path / "run", tmp_path / "rank.pid"
    run_dir.mkdir()
    (run_dir / "job.json").write_text(json.dumps({
        "id": "local-1", "backend": "local", "name": "tree", "time": "00:10:00", "workdir": str(tmp_path),
        "env": {}, "commands": [[sys.executable, "-c", AGENT, str(pid_file)]]}))
    supervisor = subprocess.Popen([sys.executable, "-m", "tutorial_lib.jobs.supervisor", str(run_dir)])
    rank = None
    try:
        deadline = time.monotonic() + 120
        while not (pid_file.is_file() and pid_file.read_text()):
            assert time.monotonic() < deadline and supervisor.poll() is None, "the stand-in rank did not start"
            time.sleep(0.1)
        rank = psutil.Process(int(pid_file.read_text()))
        os.kill(supervisor.pid, signal.SIGTERM)  # what Job.cancel() does
        assert supervisor.wait(timeout=120) == 0
        assert read_state(run_dir)["state"] == "CANCELLED"
        gone, alive = psutil.wait_procs([rank], timeout=10)
        assert not alive, f"rank {rank.pid} still runs after the cancelled job ended"
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
        if rank is not None and rank.is_running():
            rank.kill()
