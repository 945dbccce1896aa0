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
    close = shard_claims.loader_speed(Spread(655.8, 645.1, 664.4), Spread(627.3, 620.4, 633.1), 1)
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


def test_loader_speed_within_ten_percent_needs_the_ranges_too():
    """The issue-44 read: "shards and files fed the loader within 10%" from medians 0.97x apart whose ranges
    allowed 0.69x..1.79x; such a pair decides nothing (claims.ratio_verdict, the one verdict on two Spreads)."""
    files, shards = Spread(340.4, 223.0, 376.0), Spread(330.0, 260.0, 400.0)
    claim = shard_claims.loader_speed(files, shards, 2)
    assert claim.verdict == claims.NOT_DISTINGUISHABLE and "within 10%" not in claim.sentence, claim.sentence
    narrow = shard_claims.loader_speed(Spread(340.4, 335.0, 345.0), Spread(330.0, 325.0, 336.0), 2)
    assert narrow.verdict == "matters little"


def test_compared_formats_reverses():
    """The issue-44 read of notebook 02: "2 workers" from files was 254.6 img/s in the loader table and 340.4 in the
    shard comparison, the staging of 72 files 0.0298 s in the staging section and "0.06 s" here, each pair shown as
    if one measurement. Each sentence now gives both numbers with their ranges and says they are separate runs."""
    from tutorial_lib.bench.timing import store

    packed = {"images": 72, "train_images": 64, "shards": 8, "workers": 2,
              "opened": {"files": 64, "shards": 7},
              "load": {"files": Spread(340.4, 312.9, 432.6), "shards": Spread(359.8, 324.8, 396.6)},
              "stage": {"files": Spread(0.0568, 0.0565, 0.0616), "shards": Spread(0.0307, 0.0302, 0.0322)}}
    table = {2: store({"workers": 2}, "images_per_sec", Spread(254.6, 240.1, 260.3))}
    opened, load, stage = shard_claims.compared_formats(packed, table, Spread(0.0298, 0.0290, 0.0311))
    assert opened.verdict == "fewer with shards"
    assert "340.4 (312.9-432.6)" in load.sentence and "254.6 (240.1-260.3)" in load.sentence
    assert "separate run" in load.sentence and "not one figure" in load.sentence
    assert "one epoch of 64 training images" in load.sentence
    assert "0.0568 (0.0565-0.0616) s" in stage.sentence and "0.0298 (0.0290-0.0311) s" in stage.sentence
    assert "separate run" in stage.sentence and "not one figure" in stage.sentence
    assert "0.06 (0.06-0.06)" not in stage.sentence
    swapped = {**packed, "load": {"files": packed["load"]["shards"], "shards": packed["load"]["files"]},
               "stage": {"files": packed["stage"]["shards"], "shards": packed["stage"]["files"]},
               "opened": {"files": 7, "shards": 64}}
    assert [c.verdict for c in shard_claims.compared_formats(swapped, table)] == \
        ["fewer with files", load.verdict, "files faster"] and stage.verdict == "shards faster"
    alone = shard_claims.compared_formats(packed)  # without the earlier runs: no reference to them
    assert "separate run" not in alone[1].sentence and "separate run" not in alone[2].sentence
