"""What the fourth re-run of issue 43 (/work/wt/notes/r43f-report.md) found, as it is fixed: a run directory's
LOCK or metrics.jsonl that is a link to a user's file (a resume wrote the lock record into ``~/.bashrc``), and a
LOCK or file_index.json that is a named pipe (a resume blocked, or named no file). Each is refused by
``prepare_run_dir`` (the trainer's first step in a run directory) in one line naming the file, and the user's file
is untouched. Unit level: nothing trains.
"""

from __future__ import annotations

import os

import pytest

from tutorial_lib.rundir.layout import CONFIG_FILE, INDEX_FILE, LOCK_FILE, METRICS_FILE
from tutorial_lib.rundir.lock import RunDirError, RunLock, prepare_run_dir


def _earlier_run(tmp_path):
    run_dir = tmp_path / "runs" / "run"
    run_dir.mkdir(parents=True)
    (run_dir / CONFIG_FILE).write_text('{"name": "run"}')
    return run_dir


@pytest.mark.parametrize("name", [LOCK_FILE, METRICS_FILE])
def test_a_run_file_that_links_to_a_users_file_is_refused_and_the_file_untouched(tmp_path, name):
    """Before: the trainer took the lock (or appended its events) through the link, into the user's file."""
    run_dir, victim = _earlier_run(tmp_path), tmp_path / "home" / ".bashrc"
    victim.parent.mkdir()
    victim.write_text("mine\n")
    (run_dir / name).symlink_to(victim)
    with pytest.raises(RunDirError) as refused:
        prepare_run_dir(run_dir)
    message = str(refused.value)
    assert "\n" not in message and message.startswith("output_root: ")
    assert f"{run_dir / name}" in message and "symbolic link" in message and "Fix: " in message
    assert victim.read_text() == "mine\n" and (run_dir / name).is_symlink()


@pytest.mark.parametrize("name", [LOCK_FILE, INDEX_FILE])
def test_a_run_file_that_is_a_named_pipe_is_refused_without_opening_it(tmp_path, name):
    """Before: a FIFO file_index.json blocked a resume; a FIFO LOCK ended in 'Illegal seek' naming no file."""
    run_dir = _earlier_run(tmp_path)
    os.mkfifo(run_dir / name)
    with pytest.raises(RunDirError, match=rf"{name}' \(a named pipe\).*Fix: "):
        prepare_run_dir(run_dir)


def test_the_lock_is_never_taken_through_a_link(tmp_path):
    """The lock's own open refuses a link (a link made after the run directory was checked): nothing written."""
    run_dir, victim = _earlier_run(tmp_path), tmp_path / "victim"
    victim.write_text("mine\n")
    (run_dir / LOCK_FILE).symlink_to(victim)
    with pytest.raises(OSError):
        RunLock(run_dir).acquire()
    assert victim.read_text() == "mine\n"


@pytest.mark.parametrize("name", [LOCK_FILE, METRICS_FILE])
def test_a_run_file_that_is_a_hard_link_to_a_users_file_is_refused_and_the_file_untouched(tmp_path, name):
    """r43g: a LOCK hard-linked to ~/data/keep.txt was overwritten by the lock record on resume, a hard-linked
    metrics.jsonl got the resumed run's events (the symbolic-link check did not see them). A file written in place
    with another name is refused."""
    run_dir, victim = _earlier_run(tmp_path), tmp_path / "home" / "keep.txt"
    victim.parent.mkdir()
    victim.write_text("mine\n")
    os.link(victim, run_dir / name)
    with pytest.raises(RunDirError) as refused:
        prepare_run_dir(run_dir)
    message = str(refused.value)
    assert "\n" not in message and f"{run_dir / name}" in message and "hard link" in message and "Fix: " in message
    assert victim.read_text() == "mine\n"
