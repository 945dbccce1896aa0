"""A resumed epoch's figures cover the whole epoch: train loss, epoch time and images/s, checked by hand.

The trainer's clock is replaced by one that moves exactly one second per training step, so every time figure
is known: a window of k steps took k seconds, an epoch of 6 steps took 6 seconds, whatever the machine's load.
"""

from __future__ import annotations

import time

import pytest

from tutorial_lib.engine.trainer import Trainer
from tutorial_lib.rundir.checkpoint import load_checkpoint, save_atomic
from tutorial_lib.rundir.layout import CHECKPOINT_FILE, STOP_FILE

STEPS, BATCH = 6, 16
SMALL = dict(image_size=16, batch_size=BATCH, epochs=2, max_steps_per_epoch=STEPS, log_every=2)


class StepClock:
    """A stand-in for the ``time`` module whose ``perf_counter`` moves one second per training step only."""

    def __init__(self):
        self.now = 1000.0

    def perf_counter(self) -> float:
        return self.now

    def __getattr__(self, name):
        return getattr(time, name)


@pytest.fixture
def stepped(monkeypatch):
    """Patch the trainer: one second per step, and a STOP file written in the run directory after step N.

    Returns ``arm(run_dir, after_step)``; ``after_step=None`` writes no STOP file."""
    from tutorial_lib.engine import trainer
    from tutorial_lib.rundir import metrics

    clock, plan, original = StepClock(), {}, Trainer.train_step
    monkeypatch.setattr(trainer, "time", clock)
    monkeypatch.setattr(metrics, "time", clock)

    def one_second_step(self, batch):
        loss = original(self, batch)
        clock.now += 1.0
        plan["done"] = plan.get("done", 0) + 1
        if plan["done"] == plan.get("stop_after"):
            (plan["run_dir"] / STOP_FILE).write_text("")
        return loss

    monkeypatch.setattr(Trainer, "train_step", one_second_step)

    def arm(run_dir, after_step):
        plan.update(run_dir=run_dir, stop_after=after_step, done=0)

    return arm


def epoch_event(runs, run_dir, epoch: int) -> dict:
    found = [e for e in runs.events(run_dir, "epoch") if e["epoch"] == epoch]
    assert len(found) == 1, found
    return found[0]


def loss_by_hand(runs, run_dir, epoch: int, from_step: int = 0) -> float:
    """The mean training loss of an epoch's steps after ``from_step``, from its step events (windows of 2)."""
    first = (epoch - 1) * STEPS + from_step
    steps = [e for e in runs.events(run_dir, "step") if e["epoch"] == epoch and e["step"] > first]
    assert [e["step"] for e in steps] == list(range(first + 2, epoch * STEPS + 1, 2))
    return sum(e["loss"] for e in steps) / len(steps)


def assert_whole_epoch(runs, run_dir, epoch: int) -> None:
    event = epoch_event(runs, run_dir, epoch)
    assert event["epoch_time"] == pytest.approx(STEPS)  # 6 steps of one second, stop or no stop
    assert event["images_per_sec"] == pytest.approx(STEPS * BATCH / STEPS)
    assert event["train_loss"] == pytest.approx(loss_by_hand(runs, run_dir, epoch), rel=1e-9)
    assert (event["train_steps"], event["partial"]) == (STEPS, False)


def test_an_epoch_stopped_in_the_middle_reports_the_whole_epoch(runs, stepped):
    run_dir = runs.run_dir("middle")
    stepped(run_dir, after_step=3)  # seen at the next agreement: stops after step 4 of 6
    assert runs.in_process(runs.config("middle", **SMALL))["status"] == "stopped"
    stop, = runs.events(run_dir, "stop")
    assert (stop["epoch"], stop["step_in_epoch"]) == (0, 4)
    saved = load_checkpoint(run_dir / CHECKPOINT_FILE)["progress"]["epoch_tally"]
    assert (saved["loss_steps"], saved["images"], saved["seconds"]) == (4, 4 * BATCH, pytest.approx(4.0))

    stepped(run_dir, after_step=None)
    assert runs.in_process(runs.config("middle", **SMALL))["status"] == "completed"
    assert_whole_epoch(runs, run_dir, 1)  # today: 2 s, the mean of the 2 steps after the resume
    assert_whole_epoch(runs, run_dir, 2)
    assert load_checkpoint(run_dir / CHECKPOINT_FILE)["progress"]["epoch_tally"] is None
    for step in runs.events(run_dir, "step"):  # windows of 2 steps, 2 seconds, 2 batches
        assert step["images_per_sec"] == pytest.approx(BATCH)


def test_an_epoch_stopped_at_its_end_reports_each_epoch_once_and_whole(runs, stepped):
    run_dir = runs.run_dir("end")
    stepped(run_dir, after_step=STEPS)  # during the epoch's last step: the epoch ends, then the run stops
    assert runs.in_process(runs.config("end", **SMALL))["status"] == "stopped"
    stop, = runs.events(run_dir, "stop")
    assert (stop["epoch"], stop["step_in_epoch"]) == (1, 0)
    assert load_checkpoint(run_dir / CHECKPOINT_FILE)["progress"]["epoch_tally"] is None

    stepped(run_dir, after_step=None)
    assert runs.in_process(runs.config("end", **SMALL))["status"] == "completed"
    assert_whole_epoch(runs, run_dir, 1)
    assert_whole_epoch(runs, run_dir, 2)  # nothing of epoch 1 carried into epoch 2


def test_a_checkpoint_without_the_sums_marks_the_epoch_partial(runs, stepped, capsys):
    """A checkpoint written before the sums were kept: the figures cover the resumed steps, and say so."""
    run_dir = runs.run_dir("older")
    stepped(run_dir, after_step=3)
    assert runs.in_process(runs.config("older", **SMALL))["status"] == "stopped"
    state = load_checkpoint(run_dir / CHECKPOINT_FILE)
    del state["progress"]["epoch_tally"]  # as an older version wrote it
    save_atomic(state, run_dir / CHECKPOINT_FILE)
    capsys.readouterr()

    stepped(run_dir, after_step=None)
    assert runs.in_process(runs.config("older", **SMALL))["status"] == "completed"
    event = epoch_event(runs, run_dir, 1)
    assert (event["train_steps"], event["partial"]) == (2, True)
    assert event["epoch_time"] == pytest.approx(2.0)
    assert event["images_per_sec"] == pytest.approx(BATCH)
    assert event["train_loss"] == pytest.approx(loss_by_hand(runs, run_dir, 1, from_step=4), rel=1e-9)
    printed = capsys.readouterr().out
    assert "of the last 2 steps only: resumed from a checkpoint without the epoch's sums" in printed
    assert_whole_epoch(runs, run_dir, 2)
