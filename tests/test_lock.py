"""The run lock's exclusivity, tested deterministically (no race that a broken lock may win by chance).

Taking the lock is one atomic step: open LOCK, flock it exclusively, judge the holder recorded in it,
write our record, close. Checked here: that step really holds an exclusive flock; a second taker that
arrives during it waits (seen in /proc/locks, not guessed from timing) and then finds the first
holder; and a live holder refuses every later taker, from this process or another one.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.test_files import HOLD_LOCK
from tutorial_lib.rundir.layout import LOCK_FILE
from tutorial_lib.rundir.lock import RunLock, RunLockedError


@pytest.fixture(autouse=True)
def no_slurm_job(monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)


def _flock_free(path: Path) -> bool:
    """Whether an exclusive flock on ``path`` can be taken right now (taken and dropped at once)."""
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)  # also drops a flock taken here


def test_the_atomic_step_holds_an_exclusive_flock(tmp_path):
    lock = RunLock(tmp_path)
    fd = lock._locked_file(create=True)  # the step acquire() and release() judge and write under
    try:
        assert os.fstat(fd).st_ino == os.stat(tmp_path / LOCK_FILE).st_ino
        for _ in range(3):
            assert not _flock_free(tmp_path / LOCK_FILE), "a second taker could enter the atomic step"
    finally:
        os.close(fd)
    assert _flock_free(tmp_path / LOCK_FILE)  # closing ends the step


def _waiting_for_flock(path: Path) -> bool:
    """Whether some process waits for a flock on ``path`` (a ``->`` line of /proc/locks names its inode)."""
    inode = os.stat(path).st_ino
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if "->" in fields and "FLOCK" in fields and any(f.split(":")[-1] == str(inode) for f in fields):
            return True
    return False


@pytest.mark.skipif(not Path("/proc/locks").is_file(), reason="needs Linux's /proc/locks to see a waiting taker")
def test_a_taker_during_anothers_atomic_step_waits_and_then_finds_the_holder(tmp_path):
    path = tmp_path / LOCK_FILE
    step = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(step, fcntl.LOCK_EX)  # another taker is inside its atomic step
    outcome = []

    def take():
        try:
            RunLock(tmp_path).acquire()
            outcome.append("held")
        except RunLockedError:
            outcome.append("refused")

    taker = threading.Thread(target=take)
    taker.start()
    try:
        deadline = time.monotonic() + 30
        while taker.is_alive() and not _waiting_for_flock(path) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert taker.is_alive() and _waiting_for_flock(path), f"the second taker did not wait: {outcome}"
        # The first taker finishes its step: it records itself (a live job elsewhere) and closes the file.
        os.pwrite(step, json.dumps({"host": "some-other-node", "pid": 4242, "slurm_job_id": None,
                                    "since": 0.0}).encode(), 0)
    finally:
        os.close(step)
        taker.join(30)
    assert outcome == ["refused"]
    assert json.loads(path.read_text())["host"] == "some-other-node"  # the holder's record is intact


TRY_LOCK = """
import sys
from tutorial_lib.rundir.lock import RunLock, RunLockedError
for _ in range(int(sys.argv[2])):
    try:
        RunLock(sys.argv[1]).acquire()
        print("held")
    except RunLockedError:
        print("refused")
"""


def test_a_live_holder_refuses_every_other_taker(tmp_path, child_env):
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(tmp_path)], env=child_env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        for _ in range(20):  # from this process ...
            with pytest.raises(RunLockedError):
                RunLock(tmp_path).acquire()
        other = subprocess.run([sys.executable, "-c", TRY_LOCK, str(tmp_path), "20"], env=child_env,
                               capture_output=True, text=True, timeout=600)
        assert other.stdout.split() == ["refused"] * 20, other.stderr  # ... and from another one
        assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == holder.pid
        RunLock(tmp_path).release()  # not ours: left alone
        assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == holder.pid
    finally:
        holder.kill()
        holder.wait()
