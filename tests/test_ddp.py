"""Data parallelism is exact: N workers with batch B train like one worker with batch N*B, also when the ranks
hold unevenly many readable images, and a step on which one rank has none is skipped by all of them together."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch
from torch.utils.data import DistributedSampler

from tests.conftest import write_image_tree
from tutorial_lib.engine.input.cpu import CountingImageFolder
from tutorial_lib.engine.input.samplers import ShardSampler
from tutorial_lib.rundir.layout import CONFIG_FILE, DONE_FILE

B = 8  # per-worker batch of the 2-process run; the 1-process run uses 2 * B

# GroupNorm, not BatchNorm: BatchNorm normalises with the statistics of each worker's own batch
# (B images per worker vs 2B in one process), so the two runs would legitimately differ.
# No augmentation, so both runs see the very same pixels; no warmup, so the LR is the same constant.
EXACT = dict(norm="group", train_augment=False, epochs=1, max_steps_per_epoch=4, warmup_epochs=0,
             image_size=16, seed=3, log_every=2)
CLASSES = 4


def batch_files(root: Path, rank: int, step: int, batch_size: int, seed: int, world_size: int = 2) -> list[Path]:
    """The training files of ``rank``'s batch ``step`` in epoch 0, drawn as the trainer's loader draws them
    (torch's DistributedSampler over the ImageFolder order, shuffled with the run's seed, last batch dropped)."""
    dataset = CountingImageFolder(root / "train")
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed,
                                 drop_last=True)
    sampler.set_epoch(0)
    order = list(sampler)[step * batch_size:(step + 1) * batch_size]
    return [Path(dataset.samples[index][0]) for index in order]


def unreadable(files: list[Path]) -> None:
    for path in files:
        path.write_bytes(b"not an image")


def test_two_workers_equal_one_worker_with_double_batch(runs, tmp_path):
    """Rank 1 reads 5 of its 8 images in the first step: each rank's loss is weighted by its share of the step's
    images, so the averaged gradient is still the mean over all 13 (before: rank 1's 5 counted as much as rank 0's
    8, and the weights differed by up to 5.7e-3)."""
    data = tmp_path / "uneven"
    write_image_tree(data, {"train": {c: 16 for c in "abcd"}, "val": {c: 2 for c in "abcd"}}, 16, ".jpg")
    unreadable(batch_files(data, rank=1, step=0, batch_size=B, seed=EXACT["seed"])[:3])
    runs.torchrun(2, runs.flags("ddp2", data_dir=data, batch_size=B, **EXACT))
    runs.in_process(runs.config("single", data_dir=data, batch_size=2 * B, **EXACT))

    two, one = runs.weights(runs.run_dir("ddp2")), runs.weights(runs.run_dir("single"))
    difference = runs.max_difference(two, one)
    print(f"max |w_2proc - w_1proc| = {difference:.3e}")
    # Summation order differs (two half-batch means, all-reduced), so equality is up to rounding:
    # measured 6e-8 on CPU. Training with batch B instead of 2B, or at twice the LR (gradients
    # summed, not averaged), differs by 1.6e-2 and 3e-2.
    runs.assert_same_weights(two, one, atol=1e-4)
    # The runs really trained: the weights moved away from the shared initialisation.
    assert runs.max_difference(one, _initial_weights()) > 1e-3
    assert [e["skipped_images"] for e in runs.events(runs.run_dir("ddp2"), "epoch")] == [3]

    start, = runs.events(runs.run_dir("ddp2"), "start")
    assert start["world_size"] == 2
    assert start["global_batch"] == 2 * B
    config = json.loads((runs.run_dir("ddp2") / CONFIG_FILE).read_text())
    assert config["world_size"] == 2 and config["global_batch"] == 2 * B
    assert len(config["hosts"]) == 2
    assert (runs.run_dir("ddp2") / DONE_FILE).is_file()


def _initial_weights() -> dict:
    """The model the runs started from (seeded like the trainer seeds it)."""
    from tutorial_lib.engine.models import build_model

    torch.manual_seed(EXACT["seed"])
    return build_model("resnet18", num_classes=CLASSES, norm="group").state_dict()


@pytest.fixture(scope="module")
def dry_rank(make_runs, tmp_path_factory):
    """Two ranks on a tiny tree whose validation split is uneven (4 images on rank 0, 3 on rank 1) and where every
    training image of rank 1's second batch is unreadable: that rank runs dry on step 2 of 3."""
    runs, data = make_runs(), tmp_path_factory.mktemp("dry") / "tiny"
    write_image_tree(data, {"train": {"a": 4, "b": 4, "c": 4}, "val": {"a": 3, "b": 2, "c": 2}}, 16, ".jpg")
    unreadable(batch_files(data, rank=1, step=1, batch_size=2, seed=0))
    started = time.monotonic()
    result = runs.torchrun(2, runs.flags("dry", data_dir=data, batch_size=2, image_size=16, epochs=1, seed=0,
                                         max_steps_per_epoch=3, warmup_epochs=0, log_every=1, bad_data="skip"))
    print(f"2 ranks, rank 1 dry on step 2: ended in {time.monotonic() - started:.1f} s (torchrun start included)")
    return runs, result


def test_distributed_validation_counts_each_image_once(dry_rank):
    runs, _ = dry_rank
    epoch, = runs.events(runs.run_dir("dry"), "epoch")
    assert epoch["val_images"] == 7  # 4 on rank 0 + 3 on rank 1: none dropped, none padded in twice
    correct = epoch["top1"] * 7 / 100
    assert correct == pytest.approx(round(correct), abs=1e-6)  # accuracy is k/7 for a whole k


def test_a_rank_without_a_readable_image_skips_the_step_with_the_others(dry_rank):
    """Before: rank 1 ran a backward without DDP's forward and rank 0 waited in the gradient all-reduce until the
    process group's 600 s timeout. Now both skip step 2 together and the run ends; the skipped images are counted
    once: rank 1's 2 unreadable ones and rank 0's 2 that the skipped step did not use."""
    runs, result = dry_rank
    epoch, = runs.events(runs.run_dir("dry"), "epoch")
    assert (epoch["skipped_images"], epoch["skipped_steps"]) == (4, 1)
    losses = {e["step"]: e["loss"] for e in runs.events(runs.run_dir("dry"), "step")}
    assert losses[2] is None and losses[1] is not None and losses[3] is not None  # step 2 trained on no rank
    assert result.stderr.count("warning: skipping unreadable image") == 2


@pytest.mark.parametrize("length", [0, 1, 2, 7, 10, 11, 101])
@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 8])
def test_shard_sampler_partitions_the_dataset(length, world_size):
    shards = [list(ShardSampler(length, rank, world_size)) for rank in range(world_size)]
    together = [index for shard in shards for index in shard]
    assert sorted(together) == list(range(length))  # every index, none twice
    assert [len(ShardSampler(length, rank, world_size)) for rank in range(world_size)] == [len(s) for s in shards]
    assert max(map(len, shards)) - min(map(len, shards)) <= 1  # balanced
