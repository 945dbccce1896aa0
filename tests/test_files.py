"""Run-directory files survive crashes: metrics.jsonl, atomic checkpoints, the run lock."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest
import torch

from tutorial_lib.rundir.checkpoint import load_checkpoint, save_atomic
from tutorial_lib.rundir.layout import CHECKPOINT_FILE, LOCK_FILE, METRICS_FILE
from tutorial_lib.rundir.lock import RunLock, RunLockedError
from tutorial_lib.rundir.metrics import MetricsWriter, read_metrics


# ------------------------------------------------------------------------------------------ metrics
def _torn_metrics(run_dir):
    """Two complete events, then half of a third (a writer killed mid-line)."""
    lines = [json.dumps({"event": "start", "world_size": 1}), json.dumps({"event": "step", "step": 1})]
    (run_dir / METRICS_FILE).write_text("\n".join(lines) + "\n" + '{"event": "step", "st')


def test_reader_skips_a_torn_last_line(tmp_path):
    _torn_metrics(tmp_path)
    assert [r["event"] for r in read_metrics(tmp_path)] == ["start", "step"]
    assert read_metrics(tmp_path / METRICS_FILE) == read_metrics(tmp_path)


def test_reader_skips_garbled_lines_and_non_events(tmp_path):
    (tmp_path / METRICS_FILE).write_bytes(b'{"event": "start"}\n\xff\xfe garbage\n[1, 2]\n{"no_event": 1}\n'
                                          b'{"event": "end"}\n')
    assert [r["event"] for r in read_metrics(tmp_path)] == ["start", "end"]


def test_reader_of_a_missing_file(tmp_path):
    (tmp_path / "job.json").write_text("{}")  # a run whose job has not logged yet (an empty folder is no run)
    assert read_metrics(tmp_path) == []


def test_writer_repairs_a_torn_tail_before_appending(tmp_path):
    _torn_metrics(tmp_path)
    writer = MetricsWriter(tmp_path)
    writer.write("resume", epoch=1)
    writer.write("end", best_top1=50.0)
    text = (tmp_path / METRICS_FILE).read_text()
    assert text.endswith("\n")
    assert [json.loads(line)["event"] for line in text.splitlines()] == ["start", "step", "resume", "end"]
    assert read_metrics(tmp_path)[-1]["best_top1"] == 50.0


def test_disabled_writer_touches_nothing(tmp_path):
    _torn_metrics(tmp_path)
    before = (tmp_path / METRICS_FILE).read_bytes()
    record = MetricsWriter(tmp_path, enabled=False).write("step", step=2)
    assert record["event"] == "step" and record["step"] == 2
    assert (tmp_path / METRICS_FILE).read_bytes() == before


def test_writer_stores_tensor_values_as_numbers(tmp_path):
    MetricsWriter(tmp_path).write("step", loss=torch.tensor(1.5))
    assert read_metrics(tmp_path)[0]["loss"] == 1.5


# ------------------------------------------------------------------------------------- checkpoints
@pytest.mark.parametrize("failure", [OSError("No space left on device"), KeyboardInterrupt()])
def test_interrupted_save_keeps_the_previous_checkpoint(tmp_path, monkeypatch, failure):
    path = tmp_path / CHECKPOINT_FILE
    save_atomic({"epoch": 1, "weights": torch.arange(4.0)}, path)

    def dies_half_way(obj, handle, *args, **kwargs):
        handle.write(b"PK\x03\x04 half a checkpoint")
        raise failure

    monkeypatch.setattr(torch, "save", dies_half_way)
    with pytest.raises(type(failure)):
        save_atomic({"epoch": 2, "weights": torch.zeros(4)}, path)
    monkeypatch.undo()

    state = load_checkpoint(path)
    assert state["epoch"] == 1
    torch.testing.assert_close(state["weights"], torch.arange(4.0))
    assert sorted(p.name for p in tmp_path.iterdir()) == [CHECKPOINT_FILE]  # no temp file left behind


def test_save_replaces_the_checkpoint(tmp_path):
    path = tmp_path / "sub" / CHECKPOINT_FILE
    save_atomic({"epoch": 1}, path)
    save_atomic({"epoch": 2}, path)
    assert load_checkpoint(path)["epoch"] == 2
    assert sorted(p.name for p in path.parent.iterdir()) == [CHECKPOINT_FILE]
    assert load_checkpoint(tmp_path / "nothing.pt") is None


# ---------------------------------------------------------------------------------------- run lock
HOLD_LOCK = """
import sys
from tutorial_lib.rundir.lock import RunLock
RunLock(sys.argv[1]).acquire()
print("locked", flush=True)
sys.stdin.read()  # hold it until the parent closes stdin (or kills us)
"""


def test_lock_held_by_a_live_process_is_refused_and_taken_over_once_it_died(tmp_path, child_env, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(tmp_path)], env=child_env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(RunLockedError) as info:
            RunLock(tmp_path).acquire()
        assert "in use" in str(info.value) and f"pid {holder.pid}" in str(info.value)
        assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == holder.pid  # untouched
    finally:
        holder.kill()
        holder.wait()

    lock = RunLock(tmp_path)  # the holder is dead (same host, pid gone): a stale lock
    assert lock.holder() is None
    lock.acquire()
    assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == os.getpid()
    lock.release()
    assert not (tmp_path / LOCK_FILE).exists()


def _write_lock(run_dir, **record) -> None:
    (run_dir / LOCK_FILE).write_text(json.dumps({"since": 0.0, **record}))


def test_lock_from_another_host_is_not_taken_over(tmp_path, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    _write_lock(tmp_path, host="some-other-node", pid=os.getpid() + 1, slurm_job_id=None)
    with pytest.raises(RunLockedError, match="in use"):
        RunLock(tmp_path).acquire()  # its process cannot be checked from here: assume it lives


def test_lock_of_an_earlier_run_of_the_same_slurm_job_is_stale(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "4242")  # a requeued job: same id, maybe another node
    _write_lock(tmp_path, host="some-other-node", pid=12345, slurm_job_id="4242")
    RunLock(tmp_path).acquire()
    assert json.loads((tmp_path / LOCK_FILE).read_text())["host"] == socket.gethostname()


def test_release_leaves_someone_elses_lock(tmp_path, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    _write_lock(tmp_path, host="some-other-node", pid=os.getpid(), slurm_job_id=None)
    RunLock(tmp_path).release()
    assert (tmp_path / LOCK_FILE).exists()


def test_a_reused_digits_export_does_not_import_scikit_learn(tmp_path, child_env):
    """Every rank of a digits job calls export_digits: importing scikit-learn only to find the export in place
    cost each rank seconds of start-up (tens of seconds on a loaded machine). Its own export, not the session's
    shared tree: in CI's run of 2026-11-26 (files heaviest first) the shared tree was exported again here,
    likely after a test before it on the same worker added files to it (a tree with others' files is exported
    again, rightly)."""
    from tutorial_lib.engine.input.folders import export_digits

    digits_dir = export_digits(tmp_path / "digits", image_size=32)
    check = ("import sys; from tutorial_lib.engine.input.folders import export_digits; "
             f"assert export_digits({str(digits_dir)!r}, image_size=32).name == 'digits'; "
             "print(sorted(m for m in sys.modules if m.split('.')[0] == 'sklearn'))")
    shown = subprocess.run([sys.executable, "-c", check], env=child_env, capture_output=True, text=True, timeout=300)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip() == "[]"
