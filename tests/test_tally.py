"""EpochTally, the sums behind an epoch's figures, on numbers chosen by hand (fast: no training)."""

from __future__ import annotations

import pytest

from tutorial_lib.engine.tally import EpochTally


def test_figures_of_an_epoch_in_two_parts_are_those_of_the_whole_epoch():
    tally = EpochTally.for_epoch(0, {"loss_sum": 99.0})  # at an epoch's start a saved tally is never used
    assert tally == EpochTally()
    tally.add_loss(2.0, 2)
    tally.add_loss(1.0, 2)
    tally.add_part(64.0, 1.0, 4.0)
    tally.skipped_steps += 1  # a step every rank skipped (one had no readable image): carried across the stop
    saved = tally.as_dict()
    assert saved == {"loss_sum": 6.0, "loss_steps": 4, "images": 64, "skipped": 1, "skipped_steps": 1,
                     "seconds": 4.0, "first_step": 0}

    resumed = EpochTally.for_epoch(4, saved)
    resumed.add_loss(0.5, 2)
    resumed.add_part(32.0, 2.0, 4.0)
    figures = resumed.figures(steps_per_epoch=6)
    assert figures == {"train_loss": pytest.approx(7.0 / 6), "epoch_time": 8.0, "images_per_sec": 12.0,
                       "train_images": 99, "skipped_images": 3, "skipped_steps": 1, "train_steps": 6,
                       "partial": False}


def test_a_checkpoint_without_sums_gives_partial_figures_of_the_resumed_steps():
    tally = EpochTally.for_epoch(4, None)
    assert tally.first_step == 4 and tally.loss_steps == 0
    tally.add_loss(3.0, 2)
    tally.add_part(32, 0, 2.0)
    figures = tally.figures(steps_per_epoch=6)
    assert (figures["train_loss"], figures["images_per_sec"], figures["epoch_time"]) == (3.0, 16.0, 2.0)
    assert (figures["train_steps"], figures["partial"]) == (2, True)


def test_no_steps_and_no_time_give_zeros_not_a_division_error():
    figures = EpochTally().figures(steps_per_epoch=3)
    assert (figures["train_loss"], figures["images_per_sec"], figures["epoch_time"]) == (0.0, 0.0, 0.0)
    assert (figures["train_steps"], figures["partial"]) == (3, False)


def test_counts_are_whole_numbers_from_the_all_reduced_floats():
    tally = EpochTally()
    tally.add_part(31.0, 2.0, 1.5)
    assert isinstance(tally.images, int) and isinstance(tally.skipped, int)
    assert tally.figures(1)["images_per_sec"] == pytest.approx(31 / 1.5)


def test_boundaries_one_step_under_a_second_from_the_first_step():
    """A single logged step, a part shorter than a second, sums that miss only step 0: each counted as it is."""
    tally = EpochTally.for_epoch(1, None)
    tally.add_loss(5.0, 1)
    tally.add_part(8, 0, 0.5)
    figures = tally.figures(steps_per_epoch=2)
    assert (figures["train_loss"], figures["images_per_sec"]) == (5.0, 16.0)
    assert (figures["train_steps"], figures["partial"]) == (1, True)
