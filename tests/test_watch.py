"""The one watcher (tutorial_lib/jobs/watch.py) and what cancel may signal (tutorial_lib/jobs/processes.py).

* one batched squeue for any number of jobs and callers, at most once per interval (a stand-in squeue on PATH that
  logs its calls; no cluster needed);
* a controller that times out is ``unknown``, never a verdict: the stand-in of issue 41 answers the watching
  process (only it, never the job) with ``slurm_load_jobs error: Socket timed out on send/recv operation`` for its
  2nd to 5th calls, on the emulated cluster; the job completes and is reported COMPLETED;
* a forged local record (the pid of an unrelated program, no start time or command line): cancel is refused in
  one line and nothing is signalled;
* a local job whose supervisor is gone is lost at once, with the run directory's last event, and ``wait`` ends.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tutorial_lib import jobs
from tutorial_lib.engine.config import make_config
from tutorial_lib.jobs import watch
from tutorial_lib.jobs.processes import identity
from tutorial_lib.jobs.record import write_job_file
from tutorial_lib.jobs.spec import JobError
from tutorial_lib.rundir.metrics import MetricsWriter

SMALL = dict(dataset="digits", image_size=16, arch="resnet18", batch_size=16, progress=False, workers=0, device="cpu")
TIMEOUT_ERROR = "slurm_load_jobs error: Socket timed out on send/recv operation"


@pytest.fixture
def fresh_watcher():
    """This process's watcher, started afresh for the test and put back after it."""
    before = watch.watcher()
    yield watch.replace_watcher()
    watch.replace_watcher(before)


def _write_tool(folder: Path, name: str, text: str) -> None:
    folder.mkdir(exist_ok=True)
    (folder / name).write_text(text)
    (folder / name).chmod(0o755)


# ----------------------------------------------------------------------- one query for all
FAKE_SQUEUE = """#!/bin/bash
# squeue's stand-in: logs its arguments, answers RUNNING for every job of --jobs= in the watcher's format
echo "$*" >> "$FAKE_SQUEUE_LOG"
[[ -n ${FAKE_SQUEUE_FAIL:-} ]] && { echo "$FAKE_SQUEUE_FAIL" >&2; exit 1; }
for arg in "$@"; do
    case $arg in --jobs=*) ids=${arg#--jobs=} ;; esac
done
for id in ${ids//,/ }; do
    fields=("$id" "job$id" RUNNING None 1 node1 node1 0:05 30:00 0 0 /r/slurm-%j.out /r/job.sbatch)
    printf '%s\\x1f' "${fields[@]}"
    echo
done
"""


def _slurm_jobs(tmp_path: Path, count: int) -> list[jobs.Job]:
    handles = []
    for n in range(count):
        run_dir = tmp_path / f"j{n}"
        write_job_file(run_dir, {"backend": "slurm", "id": str(101 + n), "name": f"j{n}", "spec": {}})
        handles.append(jobs.attach(run_dir))
    return handles


def test_any_number_of_jobs_and_callers_share_one_query_per_interval(tmp_path, monkeypatch):
    """20 jobs, each asked for its state many times (Job.state, status, the monitor's poll): one squeue, naming
    all 20; before, every Job.state was an scontrol of its own (20 jobs x the monitor's 2 s poll: 10 a second)."""
    from tutorial_lib.figures.monitor import Monitor

    _write_tool(tmp_path / "bin", "squeue", FAKE_SQUEUE)
    log = tmp_path / "squeue.log"
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SQUEUE_LOG", str(log))
    watcher = watch.replace_watcher(watch.Watcher(min_interval=3600, max_interval=3600))
    watched = _slurm_jobs(tmp_path, 20)  # each Job is followed from when it is made
    try:
        for _ in range(5):
            assert [job.state for job in watched] == ["RUNNING"] * 20
        Monitor(watched, notebook=False).poll()
        watcher.refresh(watched[0])  # asks again as soon as the rate limit allows: not before the interval
        assert watched[0].status()["watch"] == "running"
        calls = log.read_text().splitlines()
        assert len(calls) == 1 and watcher.calls == {"squeue": 1}, calls
        assert f"--jobs={','.join(str(101 + n) for n in range(20))}" in calls[0].split()
        fields = watched[3].queue_fields()  # the queue report's fields, from the same answer
        assert (fields["JobId"], fields["NodeList"], fields["StdOut"]) == ("104", "node1", "/r/slurm-104.out")
    finally:
        watch.replace_watcher()


def test_a_controller_error_is_unknown_with_backoff_and_the_run_directory_still_ends_a_job(tmp_path, monkeypatch):
    _write_tool(tmp_path / "bin", "squeue", FAKE_SQUEUE)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SQUEUE_LOG", str(tmp_path / "squeue.log"))
    monkeypatch.setenv("FAKE_SQUEUE_FAIL", TIMEOUT_ERROR)
    watcher = watch.replace_watcher(watch.Watcher(min_interval=0.01, max_backoff=0.04))
    job, = _slurm_jobs(tmp_path, 1)
    try:
        status = job.status()
        assert (status["state"], status["watch"], status["source"]) == ("UNKNOWN", "unknown", "no answer")
        assert TIMEOUT_ERROR in status["reason"] and not job.done()
        delays = []
        while len(delays) < 4:  # each failure doubles the wait before the next question, up to max_backoff
            cluster = watcher._clusters[None]
            if not delays or cluster.failures > len(delays):
                delays.append(cluster.delay)
            job.status()
        assert delays == [0.02, 0.04, 0.04, 0.04], delays
        # the batch script's last act: its exit line ends the job without asking the controller
        (job.run_dir / "job_exits.jsonl").write_text('{"job_id": "101", "status": 0, "requeued": false, "time": 1, '
                                                   '"source": "batch script"}\n')
        assert job.wait(timeout=30) == "COMPLETED" and job.status()["source"] == "exit record"
        assert [state for _, state, _ in watcher.history(job)] == ["unknown", "completed"]
    finally:
        watch.replace_watcher()


# ----------------------------------------------------------- the flaky controller of issue 41
FLAKY = """#!/bin/bash
# Slurm's client commands as a loaded controller answers them: the process that watches (FLAKY_WATCHER_PID, the
# test) gets a socket timeout for its 2nd to 5th call; anyone else (the job itself) always gets the real answer.
if [[ $PPID == "$FLAKY_WATCHER_PID" ]]; then
    exec 9>>"$FLAKY_COUNT.lock"; flock 9
    n=$(( $(cat "$FLAKY_COUNT" 2>/dev/null || echo 0) + 1 )); echo "$n" > "$FLAKY_COUNT"
    echo "$n $(basename "$0") $*" >> "$FLAKY_COUNT.log"
    if (( n >= 2 && n <= 5 )); then
        echo "slurm_load_jobs error: Socket timed out on send/recv operation" >&2
        exit 1
    fi
    exec 9>&-
fi
PATH=$FLAKY_REAL_PATH exec "$(basename "$0")" "$@"
"""


@pytest.mark.slurm
def test_a_controller_that_times_out_is_not_a_verdict_the_job_is_reported_completed(tmp_path, digits_dir, slurm,
                                                                                     monkeypatch, fresh_watcher):
    """Before: the 2nd call's timeout made Job.wait raise 'ended FAILED ... Slurm could not open its output file'
    while scontrol said JobState=RUNNING."""
    for name in ("scontrol", "squeue", "sacct"):
        _write_tool(tmp_path / "bin", name, FLAKY)
    count = tmp_path / "calls"
    monkeypatch.setenv("FLAKY_REAL_PATH", os.environ["PATH"])
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FLAKY_WATCHER_PID", str(os.getpid()))
    monkeypatch.setenv("FLAKY_COUNT", str(count))
    cfg = make_config("smoke", name="flaky", output_root=str(tmp_path / "runs"), data_dir=str(digits_dir), epochs=1,
                      max_steps_per_epoch=4, **SMALL)
    job = jobs.submit(cfg, backend="slurm", verbose=False)
    assert job.wait(timeout=900) == "COMPLETED", job.explain()
    calls = (tmp_path / "calls.log").read_text().splitlines()
    # at least the first timeout was served to the watcher (call 2); a job that ends before call 5 is finished
    # from the run directory's records (DONE, the exit record), which is also no verdict of the timeouts
    assert len(calls) >= 2, calls
    seen = [state for _, state, _ in fresh_watcher.history(job)]
    assert "unknown" in seen and seen[-1] == "completed", seen
    assert not {"failed", "cancelled", "timeout"} & set(seen), seen


# ----------------------------------------------------------------- what cancel may signal
def _local_record(run_dir: Path, **fields) -> None:
    write_job_file(run_dir, {"backend": "local", "name": run_dir.name, "time": "00:10:00",
                             "spec": {"nodes": 1, "ranks_per_node": 1}, "submitted": time.time() - 600, **fields})


def test_a_forged_record_is_refused_in_one_line_and_nothing_is_signalled(tmp_path, fresh_watcher):
    """Before: cancel() of a job.json naming an unrelated program's pid (no start time) killed that program and
    returned 'FAILED'; .state had shown 'PENDING', and wait() never returned."""
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    try:
        forged = tmp_path / "forged"
        _local_record(forged, id=f"local-{other.pid}", supervisor_pid=other.pid)
        job = jobs.attach(forged)
        with pytest.raises(JobError) as refused:
            job.cancel(wait=5)
        message = str(refused.value)
        assert "\n" not in message and "cancel refused" in message and "nothing was signalled" in message, message
        assert f"pid {other.pid} without its start time and command line" in message
        assert job.wait(timeout=60, check=False) == "FAILED"  # it cannot be followed: said, not waited for ever
        assert "cannot be told from another program" in job.status()["reason"]
        # a record naming the program's own pid and start time but another command line: not the job's either
        copied = tmp_path / "copied"
        _local_record(copied, id=f"local-{other.pid}", supervisor={**identity(other.pid),
                                                                    "cmdline": ["python", "-m", "supervisor"]})
        assert jobs.attach(copied).cancel(wait=5) == "FAILED"
        time.sleep(0.5)
        assert other.poll() is None  # untouched by both
    finally:
        other.kill()
        other.wait()


def test_a_record_whose_supervisor_never_started_is_lost_not_pending(tmp_path, fresh_watcher):
    """Before: a job.json left at 'local-pending' (its submitter died before starting the supervisor) was PENDING
    for ever."""
    run_dir = tmp_path / "never"
    _local_record(run_dir, id="local-pending")
    MetricsWriter(run_dir).write("start", world_size=1)
    job = jobs.attach(run_dir)
    assert job.wait(timeout=60, check=False) == "FAILED"
    reason = job.status()["reason"]
    assert reason.startswith("lost: its record names no supervisor") and "last event" in reason and "start" in reason


# A torchrun agent's stand-in: logs a step event, starts a "rank" in a session of its own (as torchrun does) that
# writes its pid and sleeps, and sleeps itself.
AGENT = r"""
import subprocess, sys, time
from tutorial_lib.rundir.metrics import MetricsWriter
MetricsWriter(sys.argv[1]).write("step", epoch=1, step=3, global_step=3, loss=2.0)
subprocess.Popen([sys.executable, "-c", "import os, sys, time\n"
                  "open(sys.argv[1], 'w').write(str(os.getpid()))\n"
                  "time.sleep(600)", sys.argv[2]], start_new_session=True)
time.sleep(600)
"""


def test_a_lost_local_supervisor_ends_wait_with_the_last_event(tmp_path, fresh_watcher):
    """The supervisor SIGKILLed mid-run while its agent and rank live on: wait() ends at once, the job lost with the
    run directory's last event; cancel then stops the agent it had started (proven by its record) and the agent's
    rank. Before: the job was FAILED without the last event, and the rank in its own session stayed."""
    import psutil

    run_dir, rank_file = tmp_path / "orphan", tmp_path / "rank.pid"
    argv = [sys.executable, "-m", "tutorial_lib.jobs.supervisor", str(run_dir)]
    record = {"backend": "local", "name": "orphan", "time": "00:10:00", "workdir": str(tmp_path), "submitted": 0.0,
              "spec": {"nodes": 1}, "commands": [[sys.executable, "-c", AGENT, str(run_dir), str(rank_file)]]}
    write_job_file(run_dir, {**record, "id": "local-pending"})
    supervisor = subprocess.Popen(argv, env={**os.environ, "PYTHONPATH": str(Path(jobs.__file__).parents[2])})
    write_job_file(run_dir, {**record, "id": f"local-{supervisor.pid}",  # as submit_local records it
                             "supervisor": {**identity(supervisor.pid), "cmdline": argv}})
    job, rank = jobs.attach(run_dir), None
    try:
        deadline = time.monotonic() + 300
        while not (rank_file.is_file() and rank_file.read_text()):
            assert time.monotonic() < deadline and job.state in ("PENDING", "RUNNING"), job.status()
            time.sleep(0.2)
        rank = psutil.Process(int(rank_file.read_text()))
        assert job.state == "RUNNING"
        supervisor.kill()
        supervisor.wait()
        assert job.wait(timeout=60, check=False) == "FAILED"  # at its first look, not at the ceiling
        reason = job.status()["reason"]
        assert reason.startswith(f"lost: its supervisor (pid {supervisor.pid}) is gone"), reason
        assert "last event" in reason and "step (epoch 1, step 3, global step 3) at" in reason, reason
        assert "lost" in job.explain().splitlines()[0]
        job.cancel(wait=5)  # the supervisor is gone: the agent it recorded, and what that agent started, are stopped
        assert not psutil.wait_procs([rank], timeout=30)[1], f"rank {rank.pid} still runs after cancel"
    finally:
        supervisor.kill()  # (already gone where the test got this far)
        supervisor.wait()
        with contextlib.suppress(AttributeError, psutil.Error):
            rank.kill()


def _start_supervisor(run_dir: Path, command: list[str], workdir: Path) -> subprocess.Popen:
    """A real supervisor for ``run_dir`` running ``command`` as its one agent, recorded as submit_local does."""
    argv = [sys.executable, "-m", "tutorial_lib.jobs.supervisor", str(run_dir)]
    record = {"backend": "local", "name": run_dir.name, "time": "00:10:00", "workdir": str(workdir),
              "submitted": time.time(), "spec": {"nodes": 1}, "commands": [command]}
    write_job_file(run_dir, {**record, "id": "local-pending"})
    supervisor = subprocess.Popen(argv, env={**os.environ, "PYTHONPATH": str(Path(jobs.__file__).parents[2])},
                                  stderr=open(run_dir / "supervisor.log", "ab"), start_new_session=True)
    write_job_file(run_dir, {**record, "id": f"local-{supervisor.pid}",
                             "supervisor": {**identity(supervisor.pid), "cmdline": argv}})
    return supervisor


def test_a_supervisor_that_fails_itself_records_why_and_the_explanation_shows_its_errors(tmp_path, fresh_watcher):
    """The supervisor cannot start its agent (its working folder is gone): before, it died with a traceback only in
    supervisor.log and the job was 'lost' with an empty log; now it records FAILED with the error's last line, and
    explain() shows it and the supervisor's own error output."""
    run_dir = tmp_path / "sup-fails"
    supervisor = _start_supervisor(run_dir, [sys.executable, "-c", "pass"], tmp_path / "no-such-folder")
    assert supervisor.wait(timeout=120) == 1
    job = jobs.attach(run_dir)
    status = job.status()
    assert (status["state"], status["source"]) == ("FAILED", "supervisor"), status
    assert status["reason"].startswith("its supervisor failed: FileNotFoundError") and "no-such-folder" in \
        status["reason"], status
    explained = job.explain()
    assert "Its supervisor failed: FileNotFoundError" in explained.splitlines()[0], explained
    assert f"The supervisor's own errors ({run_dir / 'supervisor.log'}):" in explained, explained
    assert "FileNotFoundError" in explained.split("own errors", 1)[1], explained


def test_a_live_supervisor_not_proven_at_one_look_is_not_called_lost(tmp_path, fresh_watcher, monkeypatch):
    """One look at a live supervisor that fails its proof (injected: processes.runs says no once, as a /proc read
    that fails for a moment would): before, that one look made the job FAILED ('lost') for good while it ran on (seen
    in CI); now the live pid is looked at again, and the job is RUNNING."""
    from tutorial_lib.jobs import local, processes

    run_dir = tmp_path / "sup-blinks"
    supervisor = _start_supervisor(run_dir, [sys.executable, "-c", "import time; time.sleep(600)"], tmp_path)
    try:
        job = jobs.attach(run_dir)
        deadline = time.monotonic() + 120
        while job.state != "RUNNING":
            assert time.monotonic() < deadline and job.state == "PENDING", job.status()
            time.sleep(0.2)
        looks = []
        real_runs = processes.runs

        def runs_but_once(recorded, run_dir=None):
            looks.append(recorded)
            return len(looks) > 1 and real_runs(recorded, run_dir)

        monkeypatch.setattr(local.processes, "runs", runs_but_once)
        status = job.status()
        assert status["state"] == "RUNNING" and len(looks) >= 2, (status, len(looks))
        assert "failed" not in [state for _, state, _ in fresh_watcher.history(job)]
        monkeypatch.setattr(local.processes, "runs", lambda recorded, run_dir=None: False)  # and when it truly is gone
        started = time.monotonic()
        supervisor.kill()
        supervisor.wait()
        assert job.status()["reason"].startswith("lost: its supervisor"), job.status()
        assert time.monotonic() - started < 5
    finally:
        monkeypatch.undo()
        job = jobs.attach(run_dir)
        job.cancel(wait=10)
        supervisor.kill()
        supervisor.wait()
