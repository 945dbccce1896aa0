"""Validation's numbers against a hand computation: fixed logits whose targets sit at ranks 1 to 8.

The model returns a stored row of logits for each image, so top-1, top-5 and the loss are known exactly:
top-1 counts the targets at rank 1, top-5 those at ranks 1-5, and the loss is plain cross-entropy (no label
smoothing: that belongs to the training loss only). A 2-rank validation over gloo gives the same numbers,
each image counted once.
"""

from __future__ import annotations

import json
import math
import os
from contextlib import nullcontext

import pytest
import torch
from torch import nn

from tutorial_lib import free_port
from tutorial_lib.engine.distributed import DistInfo
from tutorial_lib.engine.evaluate import evaluate
from tutorial_lib.engine.input.files import Batch
from tutorial_lib.engine.input.samplers import ShardSampler

IMAGES, CLASSES, BATCH = 13, 8, 4
RANKS = [1, 2, 3, 4, 5, 6, 1, 7, 2, 8, 1, 6, 5]  # where each image's target sits in its sorted logits
SKIPPED = 3  # unreadable images, reported in their own field and counted nowhere else


def logits_and_targets() -> tuple[list[list[float]], list[int]]:
    """Distinct logits per image, and the class whose logit has the rank ``RANKS[i]`` (1 = largest)."""
    generator = torch.Generator().manual_seed(0)
    rows, targets = [], []
    for i, rank in enumerate(RANKS):
        row = (torch.randperm(CLASSES, generator=generator).double() * 0.7 - 2.0 + 0.1 * i).tolist()
        order = sorted(range(CLASSES), key=lambda c: -row[c])
        rows.append(row)
        targets.append(order[rank - 1])
    return rows, targets


def by_hand() -> dict:
    """top-1, top-5 (percent) and the mean plain cross-entropy, from the rows with Python floats."""
    rows, targets = logits_and_targets()
    losses = [math.log(sum(math.exp(v) for v in row)) - row[t] for row, t in zip(rows, targets, strict=True)]
    return {"top1": 100 * sum(r == 1 for r in RANKS) / IMAGES, "top5": 100 * sum(r <= 5 for r in RANKS) / IMAGES,
            "val_loss": sum(losses) / IMAGES, "val_images": IMAGES, "val_skipped_images": SKIPPED}


class StoredLogits(nn.Module):
    """Returns row ``k`` of a fixed table for an image whose pixels hold ``k``."""

    def __init__(self, rows):
        super().__init__()
        self.register_buffer("table", torch.tensor(rows, dtype=torch.float32))

    def forward(self, images):
        return self.table[images[:, 0, 0, 0].long()]


def shard_batches(rank: int, world_size: int) -> list[Batch]:
    """This rank's validation batches (ShardSampler's split), plus an empty batch of unreadable images."""
    _, targets = logits_and_targets()
    mine = list(ShardSampler(IMAGES, rank, world_size))
    batches = [Batch(torch.tensor(mine[i:i + BATCH], dtype=torch.float32).view(-1, 1, 1, 1),
                     torch.tensor([targets[k] for k in mine[i:i + BATCH]]))
               for i in range(0, len(mine), BATCH)]
    if rank == 0:  # every image of one batch unreadable: 2 skipped, nothing to score (and more batches after it)
        batches.insert(1, Batch(torch.zeros(0, 1, 1, 1), torch.zeros(0, dtype=torch.long), skipped=2))
    if rank == world_size - 1:
        batches[0] = Batch(batches[0].images, batches[0].targets, skipped=SKIPPED - 2)  # rank 0 skipped 2
    return batches


def run_evaluate(rank: int, world_size: int, info: DistInfo) -> dict:
    rows, _ = logits_and_targets()
    model = StoredLogits(rows)
    calls = []
    result = evaluate(model, shard_batches(rank, world_size), torch.device("cpu"), info, False, nullcontext,
                      on_batch=lambda: calls.append(1))
    assert model.training  # handed back in train mode
    return {**result, "batches_seen": len(calls)}


def test_hand_computation_is_what_the_rows_say():
    """The fixture itself: the targets really sit at the ranks named (a test of the test)."""
    rows, targets = logits_and_targets()
    for row, target, rank in zip(rows, targets, RANKS, strict=True):
        assert 1 + sum(v > row[target] for v in row) == rank
    assert by_hand()["top1"] == pytest.approx(300 / 13) and by_hand()["top5"] == pytest.approx(900 / 13)


def test_evaluate_gives_exact_top1_top5_and_plain_cross_entropy():
    result = run_evaluate(0, 1, DistInfo())
    expected = by_hand()
    assert result["top1"] == pytest.approx(expected["top1"], abs=1e-9)
    assert result["top5"] == pytest.approx(expected["top5"], abs=1e-9)
    assert result["val_loss"] == pytest.approx(expected["val_loss"], rel=1e-6)
    smoothed = torch.nn.functional.cross_entropy(StoredLogits(logits_and_targets()[0]).table,
                                                 torch.tensor(logits_and_targets()[1]), label_smoothing=0.1)
    assert abs(result["val_loss"] - smoothed.item()) > 1e-3  # the check above tells the two losses apart
    assert (result["val_images"], result["val_skipped_images"]) == (IMAGES, SKIPPED)
    assert result["batches_seen"] == len(shard_batches(0, 1))  # on_batch: once per batch, empty ones included


def test_evaluate_with_fewer_classes_than_five_counts_every_image_in_top5():
    rows = [[0.0, 1.0, 2.0], [2.0, 1.0, 0.0]]
    batch = Batch(torch.tensor([0.0, 1.0]).view(-1, 1, 1, 1), torch.tensor([0, 0]))
    result = evaluate(StoredLogits(rows), [batch], torch.device("cpu"), DistInfo(), False, nullcontext)
    assert (result["top1"], result["top5"]) == (50.0, 100.0)


def test_evaluate_of_one_image_scores_that_image():
    rows = [[0.0, 3.0, 1.0]]
    result = evaluate(StoredLogits(rows), [Batch(torch.zeros(1, 1, 1, 1), torch.tensor([1]))], torch.device("cpu"),
                      DistInfo(), False, nullcontext)
    assert (result["top1"], result["top5"], result["val_images"]) == (100.0, 100.0, 1)
    assert result["val_loss"] == pytest.approx(math.log(math.exp(0) + math.exp(3) + math.exp(1)) - 3)


def test_a_huge_loss_does_not_swallow_a_small_one():
    """The sums are float64: in float32, 2**24 + log(2) rounds back to 2**24."""
    rows = [[0.0, -2.0**24], [0.0, 0.0]]
    batches = [Batch(torch.full((1, 1, 1, 1), float(i)), torch.tensor([1])) for i in range(2)]
    result = evaluate(StoredLogits(rows), batches, torch.device("cpu"), DistInfo(), False, nullcontext)
    assert result["val_loss"] == pytest.approx((2.0**24 + math.log(2)) / 2, rel=1e-9, abs=0)


def test_evaluate_feeds_channels_last_images_when_asked():
    seen = []

    class Recorder(StoredLogits):
        def forward(self, images):
            seen.append(images.is_contiguous(memory_format=torch.channels_last))
            return super().forward(images)

    batch = Batch(torch.zeros(2, 3, 2, 2), torch.tensor([0, 0]))
    for channels_last in (True, False):
        evaluate(Recorder([[1.0, 0.0]]), [batch], torch.device("cpu"), DistInfo(), channels_last, nullcontext)
    assert seen == [True, False]


def test_shard_sampler_gives_each_image_to_exactly_one_rank():
    shards = [list(ShardSampler(IMAGES, rank, 3)) for rank in range(3)]
    assert shards == [[0, 3, 6, 9, 12], [1, 4, 7, 10], [2, 5, 8, 11]]
    assert [len(ShardSampler(IMAGES, rank, 3)) for rank in range(3)] == [5, 4, 4]


def test_skip_first_drops_the_batches_already_trained_and_forwards_the_epoch():
    from torch.utils.data import DistributedSampler

    from tutorial_lib.engine.input.samplers import SkipFirst

    assert list(SkipFirst(range(5))) == [0, 1, 2, 3, 4]
    inner = DistributedSampler(range(10), num_replicas=2, rank=0, shuffle=True, seed=1)
    skipping = SkipFirst(inner, skip=2)
    skipping.set_epoch(3)
    assert inner.epoch == 3 and len(skipping) == 3 and len(SkipFirst(inner, skip=9)) == 0
    assert list(skipping) == list(inner)[2:]


def _worker(rank: int, port: int, out: str) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    result = run_evaluate(rank, 2, DistInfo(rank, 2, rank, 2, "gloo"))
    with open(f"{out}.{rank}", "w") as handle:
        json.dump(result, handle)
    dist.destroy_process_group()


def test_two_rank_validation_counts_each_image_once(tmp_path):
    out = tmp_path / "result"
    torch.multiprocessing.spawn(_worker, args=(free_port(), str(out)), nprocs=2, join=True)
    expected = by_hand()
    for rank in range(2):
        result = json.loads((tmp_path / f"result.{rank}").read_text())
        assert (result["val_images"], result["val_skipped_images"]) == (IMAGES, SKIPPED)  # 7 + 6, not 14
        assert result["top1"] == pytest.approx(expected["top1"], abs=1e-9)
        assert result["top5"] == pytest.approx(expected["top5"], abs=1e-9)
        assert result["val_loss"] == pytest.approx(expected["val_loss"], rel=1e-6)
