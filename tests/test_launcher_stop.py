"""The launcher's STOP after a resume, without Slurm: the trainer resuming from a checkpoint honours it and keeps it.

train.sbatch runs here as it would under Slurm, with stand-ins for ``srun`` (one task on this machine) and
``scontrol`` (the head's host name; a requeue is written to a file): it removes a stale STOP, writes STOP when the
time-limit warning (SIGUSR1) comes, its node launcher (``python -m tutorial_lib.jobs.launch``) starts torchrun,
and it requeues the job when the trainer stopped before the end.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import as_flags, subprocess_env

from tutorial_lib import REPO_ROOT
from tutorial_lib.rundir.checkpoint import load_checkpoint
from tutorial_lib.rundir.layout import CHECKPOINT_FILE, DONE_FILE, STOP_FILE

TINY = dict(image_size=16, batch_size=16, epochs=3, max_steps_per_epoch=4, log_every=1)  # a missed stop ends soon

FAKE_SRUN = """#!/bin/bash
# srun's stand-in: one task on this machine. FAKE_WARN_EARLY=1: Slurm's time-limit warning reaches the batch
# script as this task starts, so its STOP is there before the trainer resumes.
while [[ $1 == --* ]]; do shift; done
if [[ ${FAKE_WARN_EARLY:-0} == 1 ]]; then
    kill -USR1 $PPID
    for _ in $(seq 600); do [[ -e $TUTORIAL_STOP_FILE ]] && break; sleep 0.1; done
fi
export SLURM_NODEID=0 SLURM_LOCALID=0
exec "$@"
"""
FAKE_SCONTROL = """#!/bin/bash
case $1 in
    show) echo 127.0.0.1 ;;
    requeue) echo "requeue $2" >> "$FAKE_SLURM_LOG" ;;
esac
"""


def job_id_with_a_free_port() -> int:
    """A job id whose rendezvous port (train.sbatch: 20000 + id % 20000) is free now."""
    for port in random.Random().sample(range(21000, 39000), 200):  # its own generator: the trainer seeds random
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port - 20000
    raise AssertionError("no free port between 21000 and 39000")


def wait_for(predicate, timeout: float, what: str, log: Path):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}; the job's log:\n{log.read_text()}")


def stopped_after_one_epoch(runs, name: str) -> Path:
    """A run directory whose checkpoint holds one finished epoch (the job's earlier run)."""
    assert runs.in_process(runs.config(name, stop_after_epochs=1, **TINY))["status"] == "stopped"
    return runs.run_dir(name)


def test_stop_written_by_the_launcher_before_a_resume_is_honoured(runs, monkeypatch):
    """In process: STOP is there (the launcher's, TUTORIAL_STOP_FILE) when the trainer resumes from a checkpoint."""
    run_dir = stopped_after_one_epoch(runs, "resume-stop")
    (run_dir / STOP_FILE).touch()
    monkeypatch.setenv("TUTORIAL_STOP_FILE", str(run_dir / STOP_FILE))
    assert runs.in_process(runs.config("resume-stop", **TINY))["status"] == "stopped"
    resume, = runs.events(run_dir, "resume")
    stop = runs.events(run_dir, "stop")[-1]
    assert (resume["epoch"], resume["step_in_epoch"]) == (1, 0)
    assert (stop["epoch"], stop["step_in_epoch"], stop["reason"]) == (1, 1, "STOP file")  # the first agreement
    assert (run_dir / STOP_FILE).exists()  # the launcher's file: left for it
    assert load_checkpoint(run_dir / CHECKPOINT_FILE)["progress"]["global_step"] == 5


@pytest.mark.parametrize("warning", ["before the resume", "after the resume"])
def test_train_sbatch_stop_after_a_resume_without_slurm(runs, tmp_path, warning):
    run_dir = stopped_after_one_epoch(runs, "sbatch")
    (run_dir / STOP_FILE).touch()  # left by the job's earlier run: train.sbatch removes it first
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    for name, text in (("srun", FAKE_SRUN), ("scontrol", FAKE_SCONTROL)):
        (fake_bin / name).write_text(text)
        (fake_bin / name).chmod(0o755)
    slurm_log, job_log, job_id = tmp_path / "slurm.log", tmp_path / "job.out", job_id_with_a_free_port()
    env = {**subprocess_env(), "PATH": f"{fake_bin}{os.pathsep}{os.environ['PATH']}", "SLURM_JOB_ID": str(job_id),
           "SLURM_JOB_NODELIST": "node0", "SLURM_NNODES": "1", "SLURM_RESTART_COUNT": "1",
           "RANKS_PER_NODE": "1", "TUTORIAL_PYTHON": sys.executable, "TUTORIAL_WORKDIR": str(REPO_ROOT),
           "TUTORIAL_RUN_DIR": str(run_dir), "TUTORIAL_STOP_FILE": str(run_dir / STOP_FILE),
           "FAKE_SLURM_LOG": str(slurm_log), "FAKE_WARN_EARLY": "1" if warning == "before the resume" else "0"}
    with open(job_log, "w") as out:
        job = subprocess.Popen(["bash", str(REPO_ROOT / "cluster_scripts" / "train.sbatch"),
                                *as_flags(runs.settings("sbatch", **TINY))],
                               env=env, cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT)
    try:
        if warning == "after the resume":
            resumed = wait_for(lambda: runs.events(run_dir, "resume"), 240, "the resume", job_log)[0]
            wait_for(lambda: [e for e in runs.events(run_dir, "step") if e["step"] > resumed["global_step"]],
                     120, "a step after the resume", job_log)
            job.send_signal(signal.SIGUSR1)  # Slurm's time-limit warning (--signal=B:USR1@120)
        rc = job.wait(timeout=300)
    finally:
        job.kill()
        job.wait()
    log = job_log.read_text()
    assert rc == 1, log  # the trainer's 75 (stopped) comes back through torchrun and srun as 1
    resume, = runs.events(run_dir, "resume")
    stop = runs.events(run_dir, "stop")[-1]
    assert stop["reason"] == "STOP file" and stop["time"] > resume["time"], log
    if warning == "before the resume":
        assert (stop["epoch"], stop["step_in_epoch"]) == (1, 1), log  # at the first agreement after the resume
    else:
        assert stop["global_step"] >= resume["global_step"] + 2, log  # not the stale STOP: that one was removed
    assert not (run_dir / DONE_FILE).exists()
    assert slurm_log.read_text().split() == ["requeue", str(job_id)], log
    assert "training not finished: requeueing" in log
