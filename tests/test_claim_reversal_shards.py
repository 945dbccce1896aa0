"""Reversal tests for notebook 02's sentences on class folders against packed shards
(:mod:`tutorial_lib.text.shard_claims`): measured-like numbers, then the same reversed."""

from __future__ import annotations

from tutorial_lib.bench.timing import Spread
from tutorial_lib.text import claims, shard_claims


def test_opens_per_epoch_reverses():
    measured = shard_claims.opens_per_epoch(28, 8, 28)
    reversed_ = shard_claims.opens_per_epoch(8, 28, 28)
    assert measured.verdict == "fewer with shards" and "28 files from the class folders and 8" in measured.sentence
    assert "4x fewer with shards" in measured.sentence
    assert reversed_.verdict == "fewer with files" and "3.5x more with shards" in reversed_.sentence
    assert shard_claims.opens_per_epoch(8, 8, 8).verdict == "the same"


def test_loader_speed_reverses():
    slow, fast = Spread(400.0, 380.0, 420.0), Spread(600.0, 580.0, 640.0)
    measured = shard_claims.loader_speed(slow, fast, 2)
    reversed_ = shard_claims.loader_speed(fast, slow, 2)
    assert measured.verdict == "shards faster" and "1.50x" in measured.sentence and "600.0" in measured.sentence
    assert reversed_.verdict == "files faster" and "1.50x" in reversed_.sentence
    overlap = shard_claims.loader_speed(Spread(627.3, 595.4, 659.1), Spread(500.0, 400.0, 630.0), 1)
    assert overlap.verdict == claims.NOT_DISTINGUISHABLE and "faster" not in overlap.sentence
    close = shard_claims.loader_speed(Spread(655.8, 631.1, 680.4), Spread(627.3, 595.4, 659.1), 1)
    assert close.verdict == "matters little" and close.topic == "loader from shards, 1 worker"
    assert shard_claims.loader_speed(None, fast, 1).verdict == "not measured"


def test_staging_formats_reverses():
    files, shards = Spread(0.24, 0.18, 0.30), Spread(0.08, 0.07, 0.09)
    measured = shard_claims.staging_formats(files, shards, 39, 11)
    reversed_ = shard_claims.staging_formats(shards, files, 39, 11)
    assert measured.verdict == "shards faster" and "0.33x" in measured.sentence
    assert "39 image files" in measured.sentence
    assert reversed_.verdict == "files faster" and "3.00x" in reversed_.sentence
    overlap = shard_claims.staging_formats(Spread(0.24, 0.10, 0.30), Spread(0.20, 0.08, 0.26), 39, 11)
    assert overlap.verdict == claims.NOT_DISTINGUISHABLE
    assert shard_claims.staging_formats(None, shards, 39, 11).verdict == "not measured"
