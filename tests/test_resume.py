"""Resume is exact: a run stopped and started again ends where an uninterrupted run ends; so does one whose run
directory's disk filled up at a save, or was read-only for a while."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import tmpfs
from tutorial_lib.engine.trainer import Trainer
from tutorial_lib.rundir.checkpoint import SaveError, load_checkpoint
from tutorial_lib.rundir.layout import CHECKPOINT_FILE, DONE_FILE, STOP_FILE

# Augmentation stays on: random crops and flips, drawn from (seed, epoch, image index) in both pipelines.
SMALL = dict(image_size=16, batch_size=16, epochs=2, max_steps_per_epoch=6, log_every=2)
ATOL = 1e-6  # measured: identical (0.0) on CPU; without the RNG or momentum state the difference is > 1


@pytest.fixture(scope="module")
def straight(make_runs):
    """Weights and events of 2 epochs run without a break (shared by the tests here)."""
    runs = make_runs()
    summary = runs.in_process(runs.config("straight", **SMALL))
    assert summary["status"] == "completed"
    return runs.weights(runs.run_dir("straight")), runs.events(runs.run_dir("straight"))


def _check_continuous(events: list[dict], steps_per_epoch: int) -> None:
    """Epochs 1 and 2 logged once each, global steps strictly increasing up to the last step."""
    assert [e["epoch"] for e in events if e["event"] == "epoch"] == [1, 2]
    steps = [e["step"] for e in events if e["event"] == "step"]
    assert steps == sorted(set(steps))
    assert steps[-1] == 2 * steps_per_epoch
    assert [e["event"] for e in events].count("end") == 1
    assert events[-1]["event"] == "end" and events[-1]["global_step"] == 2 * steps_per_epoch


def test_resume_at_epoch_boundary_is_exact(runs, straight):
    straight_weights, straight_events = straight
    first = runs.in_process(runs.config("resumed", stop_after_epochs=1, **SMALL))
    assert first["status"] == "stopped"
    run_dir = runs.run_dir("resumed")
    assert not (run_dir / DONE_FILE).exists()
    second = runs.in_process(runs.config("resumed", **SMALL))  # the same command without the stop
    assert second["status"] == "completed"

    difference = runs.max_difference(straight_weights, runs.weights(run_dir))
    print(f"epoch-boundary resume: max |w_straight - w_resumed| = {difference:.3e}")
    runs.assert_same_weights(straight_weights, runs.weights(run_dir), atol=ATOL)

    events = runs.events(run_dir)
    kinds = [e["event"] for e in events]
    assert kinds.count("start") == 1 and kinds.count("stop") == 1 and kinds.count("resume") == 1
    assert kinds.index("stop") < kinds.index("resume")
    resume, = (e for e in events if e["event"] == "resume")
    assert (resume["epoch"], resume["step_in_epoch"], resume["global_step"]) == (1, 0, 6)
    _check_continuous(events, steps_per_epoch=6)
    # The resumed run's second epoch is the uninterrupted run's second epoch.
    last, = (e for e in events if e["event"] == "epoch" and e["epoch"] == 2)
    reference, = (e for e in straight_events if e["event"] == "epoch" and e["epoch"] == 2)
    assert last["top1"] == pytest.approx(reference["top1"])
    assert last["train_loss"] == pytest.approx(reference["train_loss"], rel=1e-4)
    assert (run_dir / DONE_FILE).is_file()


def test_resume_in_the_middle_of_an_epoch_is_exact(runs, straight, monkeypatch):
    straight_weights, _ = straight
    run_dir = runs.run_dir("midepoch")
    original_step, calls = Trainer.train_step, []

    def step_then_ask_to_stop(self, batch):
        loss = original_step(self, batch)
        calls.append(1)
        if len(calls) == 3:  # a STOP file after step 3: seen at the next agreement, step 4 (log_every 2)
            (run_dir / STOP_FILE).write_text("")
        return loss

    monkeypatch.setattr(Trainer, "train_step", step_then_ask_to_stop)
    first = runs.in_process(runs.config("midepoch", **SMALL))
    monkeypatch.undo()
    assert first["status"] == "stopped"
    stop, = runs.events(run_dir, "stop")
    assert (stop["epoch"], stop["step_in_epoch"], stop["global_step"]) == (0, 4, 4)
    assert stop["reason"] == "STOP file"

    second = runs.in_process(runs.config("midepoch", **SMALL))  # deletes STOP, resumes at step 5
    assert second["status"] == "completed"
    assert not (run_dir / STOP_FILE).exists()
    resume, = runs.events(run_dir, "resume")
    assert (resume["epoch"], resume["step_in_epoch"], resume["global_step"]) == (0, 4, 4)
    _check_continuous(runs.events(run_dir), steps_per_epoch=6)

    difference = runs.max_difference(straight_weights, runs.weights(run_dir))
    print(f"mid-epoch resume: max |w_straight - w_resumed| = {difference:.3e}")
    runs.assert_same_weights(straight_weights, runs.weights(run_dir), atol=ATOL)


def test_resume_at_epoch_boundary_is_exact_with_worker_processes(runs, jpeg_tree, single_thread):
    """Persistent workers once drew the crops from their own RNG, carried from epoch to epoch: the resumed run's
    fresh workers cropped epoch 2 otherwise (weights differed by 0.17). The crops are drawn from
    (seed, epoch, index) now, whichever worker reads an image."""
    fields = dict(SMALL, data_dir=str(jpeg_tree), batch_size=8, max_steps_per_epoch=3, workers=2, hflip=True)
    assert runs.in_process(runs.config("straight-workers", **fields))["status"] == "completed"
    assert runs.in_process(runs.config("resumed-workers", stop_after_epochs=1, **fields))["status"] == "stopped"
    assert runs.in_process(runs.config("resumed-workers", **fields))["status"] == "completed"
    straight, resumed = runs.run_dir("straight-workers"), runs.run_dir("resumed-workers")
    difference = runs.max_difference(runs.weights(straight), runs.weights(resumed))
    print(f"epoch-boundary resume, 2 workers: max |w_straight - w_resumed| = {difference:.3e}")
    runs.assert_same_weights(runs.weights(straight), runs.weights(resumed), atol=ATOL)
    epochs = [{e["epoch"]: (e["top1"], e["train_loss"]) for e in runs.events(d, "epoch")} for d in (straight, resumed)]
    assert epochs[0] == epochs[1] and set(epochs[0]) == {1, 2}


# --------------------------------------------------------- faults of the run directory's disk (docs/reliability.md)
@pytest.fixture
def own_disk(tmp_path):
    """A 128 MiB tmpfs: room for one checkpoint of these runs (about 90 MB: the weights and their momentum), not
    for its atomic replacement beside it."""
    with tmpfs(tmp_path / "disk", "128m") as mount:
        yield mount


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_disk_full_at_save_time_keeps_the_previous_checkpoint_and_the_run_resumes(make_runs, own_disk, straight):
    runs = make_runs()
    runs.output_root = own_disk
    with pytest.raises(SaveError) as full:  # epoch 2's checkpoint does not fit beside epoch 1's
        runs.in_process(runs.config("full", **SMALL))
    message = str(full.value)
    assert str(own_disk / "full" / CHECKPOINT_FILE) in message and "No space left on device" in message
    assert "\n" not in message
    assert load_checkpoint(own_disk / "full" / CHECKPOINT_FILE)["progress"]["epoch"] == 1  # epoch 1's, intact
    assert not [p for p in (own_disk / "full").iterdir() if p.name.endswith(".tmp")]
    assert [e["epoch"] for e in runs.events(own_disk / "full", "epoch")] == [1]

    subprocess.run(["mount", "-o", "remount,size=512m", str(own_disk)], check=True)  # room made
    assert runs.in_process(runs.config("full", **SMALL))["status"] == "completed"
    resume, = runs.events(own_disk / "full", "resume")
    assert (resume["epoch"], resume["step_in_epoch"]) == (1, 0)  # work lost: epoch 2, redone
    runs.assert_same_weights(straight[0], runs.weights(own_disk / "full"), atol=ATOL)


def test_a_run_directory_on_a_read_only_file_system_is_one_line_and_nothing_changes(make_runs, own_disk,
                                                                                    straight):
    runs = make_runs()
    runs.output_root = own_disk
    subprocess.run(["mount", "-o", "remount,size=512m", str(own_disk)], check=True)
    assert runs.in_process(runs.config("ro", stop_after_epochs=1, **SMALL))["status"] == "stopped"
    before = _files(own_disk / "ro")
    subprocess.run(["mount", "-o", "remount,ro", str(own_disk)], check=True)
    refused = runs.main(runs.flags("ro", **SMALL))
    assert refused.returncode == 1, refused.stderr[-2000:]
    assert "Traceback" not in refused.stderr
    line = refused.stderr.strip().splitlines()[-1]
    assert line.startswith("error:") and "Read-only file system" in line and str(own_disk / "ro") in line, line
    assert _files(own_disk / "ro") == before

    subprocess.run(["mount", "-o", "remount,rw", str(own_disk)], check=True)
    assert runs.in_process(runs.config("ro", **SMALL))["status"] == "completed"
    runs.assert_same_weights(straight[0], runs.weights(own_disk / "ro"), atol=ATOL)
