"""Data parallelism is exact: N workers with batch B train like one worker with batch N*B."""

from __future__ import annotations

import json

import pytest
import torch

from tests.conftest import write_image_tree
from tutorial_lib.engine.input.samplers import ShardSampler
from tutorial_lib.rundir.layout import CONFIG_FILE, DONE_FILE

B = 8  # per-worker batch of the 2-process run; the 1-process run uses 2 * B

# GroupNorm, not BatchNorm: BatchNorm normalises with the statistics of each worker's own batch
# (B images per worker vs 2B in one process), so the two runs would legitimately differ.
# No augmentation, so both runs see the very same pixels; no warmup, so the LR is the same constant.
EXACT = dict(norm="group", train_augment=False, epochs=1, max_steps_per_epoch=4, warmup_epochs=0,
             image_size=16, seed=3, log_every=2)


def test_two_workers_equal_one_worker_with_double_batch(runs):
    runs.torchrun(2, runs.flags("ddp2", batch_size=B, **EXACT))
    runs.in_process(runs.config("single", batch_size=2 * B, **EXACT))

    two, one = runs.weights(runs.run_dir("ddp2")), runs.weights(runs.run_dir("single"))
    difference = runs.max_difference(two, one)
    print(f"max |w_2proc - w_1proc| = {difference:.3e}")
    # Summation order differs (two half-batch means, all-reduced), so equality is up to rounding:
    # measured 6e-8 on CPU. Training with batch B instead of 2B, or at twice the LR (gradients
    # summed, not averaged), differs by 1.6e-2 and 3e-2.
    runs.assert_same_weights(two, one, atol=1e-4)
    # The runs really trained: the weights moved away from the shared initialisation.
    assert runs.max_difference(one, _initial_weights()) > 1e-3

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
    return build_model("resnet18", num_classes=10, norm="group").state_dict()


def test_distributed_validation_counts_each_image_once(runs, tmp_path):
    data = tmp_path / "tiny"
    write_image_tree(data, {"train": {"a": 4, "b": 4, "c": 4}, "val": {"a": 3, "b": 2, "c": 2}}, 16, ".jpg")
    runs.torchrun(2, runs.flags("oddval", data_dir=data, batch_size=2, image_size=16, epochs=1,
                                max_steps_per_epoch=2, warmup_epochs=0))

    epoch, = runs.events(runs.run_dir("oddval"), "epoch")
    assert epoch["val_images"] == 7  # 4 on rank 0 + 3 on rank 1: none dropped, none padded in twice
    correct = epoch["top1"] * 7 / 100
    assert correct == pytest.approx(round(correct), abs=1e-6)  # accuracy is k/7 for a whole k


@pytest.mark.parametrize("length", [0, 1, 2, 7, 10, 11, 101])
@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 8])
def test_shard_sampler_partitions_the_dataset(length, world_size):
    shards = [list(ShardSampler(length, rank, world_size)) for rank in range(world_size)]
    together = [index for shard in shards for index in shard]
    assert sorted(together) == list(range(length))  # every index, none twice
    assert [len(ShardSampler(length, rank, world_size)) for rank in range(world_size)] == [len(s) for s in shards]
    assert max(map(len, shards)) - min(map(len, shards)) <= 1  # balanced
