"""The per-epoch reshuffle, checked on the index order itself.

Every epoch is a new permutation of the training set, split over the ranks so that each index is
trained on exactly once per epoch; the order is a function of (seed, epoch) only, so a rebuilt loader,
a resumed run and an uninterrupted run see the same images in the same order. Checked on the loaders
``loaders_for`` builds (both input pipelines), on the indices a Trainer really reads, and on the two
ranks of a real two-process trainer (which also wraps the model in DDP with ``bucket_cap_mb``).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from tests.conftest import subprocess_env
from tutorial_lib import REPO_ROOT, free_port
from tutorial_lib.engine.config import make_config
from tutorial_lib.engine.input.loaders import loaders_for
from tutorial_lib.engine.trainer import Trainer

CPU = torch.device("cpu")
TRAIN_IMAGES, BATCH = 32, 4  # the jpeg_tree fixture: 32 training images; 2 ranks x 4 batches of 4


def epoch_order(loaders, epoch: int, skip_batches: int = 0) -> list[int]:
    """The dataset indices the training loader of ``epoch`` reads, in order (batches flattened)."""
    loader = loaders.train_epoch(epoch, skip_batches)
    loader = getattr(loader, "loader", loader)  # the GPU pipeline wraps the DataLoader of file bytes
    return [index for batch in loader.batch_sampler for index in batch]


def _config(tree, **fields):
    return make_config("smoke", dataset="imagefolder", data_dir=str(tree), image_size=8, batch_size=BATCH,
                       device="cpu", workers=0, progress=False, **fields)


@pytest.mark.parametrize("pipeline", ["cpu", "gpu"])
def test_each_epoch_is_a_new_permutation_split_over_the_ranks(jpeg_tree, pipeline):
    cfg = _config(jpeg_tree, input_pipeline=pipeline)
    ranks = [loaders_for(cfg, rank, 2, CPU) for rank in range(2)]
    orders = {epoch: [epoch_order(loaders, epoch) for loaders in ranks] for epoch in range(3)}
    for epoch, (rank0, rank1) in orders.items():
        assert len(rank0) == len(rank1) == TRAIN_IMAGES // 2
        assert sorted(rank0 + rank1) == list(range(TRAIN_IMAGES)), f"epoch {epoch}: each image exactly once"
    for rank in range(2):
        assert len({tuple(orders[epoch][rank]) for epoch in orders}) == 3, f"rank {rank}: an epoch repeated"
        assert len({frozenset(orders[epoch][rank]) for epoch in orders}) == 3, "the split over ranks changes too"


@pytest.mark.parametrize("pipeline", ["cpu", "gpu"])
def test_the_order_depends_on_the_epoch_and_the_seed_only(jpeg_tree, pipeline):
    cfg = _config(jpeg_tree, input_pipeline=pipeline, seed=3)
    first = loaders_for(cfg, 0, 1, CPU)
    orders = [epoch_order(first, epoch) for epoch in range(3)]
    rebuilt = loaders_for(cfg, 0, 1, CPU)  # a new process, a resumed job: asked in another order
    assert [epoch_order(rebuilt, epoch) for epoch in (2, 0, 1)] == [orders[2], orders[0], orders[1]]
    assert epoch_order(rebuilt, 1, skip_batches=3) == orders[1][3 * BATCH:]  # resumed in the middle
    assert epoch_order(first, 1) == orders[1]  # asking again does not move the order on
    other_seed = loaders_for(_config(jpeg_tree, input_pipeline=pipeline, seed=4), 0, 1, CPU)
    assert epoch_order(other_seed, 0) != orders[0]


def _trained_indices(cfg, monkeypatch) -> list[int]:
    """Train ``cfg`` in this process; return the training-set indices its loaders read, in order."""
    trainer = Trainer(cfg)
    read = []
    try:
        trainer.setup()
        train_set = trainer.loaders.train.dataset
        original = type(train_set).__getitem__

        def recording(self, index):
            if self is train_set:
                read.append(index)
            return original(self, index)

        monkeypatch.setattr(type(train_set), "__getitem__", recording)
        trainer.fit()
    finally:
        monkeypatch.undo()
        trainer.close()
    return read


def test_the_trainer_reads_a_new_order_each_epoch_and_the_same_after_a_resume(tmp_path, jpeg_tree, monkeypatch):
    steps = dict(epochs=3, max_steps_per_epoch=3, warmup_epochs=0)
    per_epoch = 3 * BATCH
    cfg = _config(jpeg_tree, output_root=str(tmp_path), name="straight", checkpoint=False, **steps)
    straight = _trained_indices(cfg, monkeypatch)
    assert len(straight) == 3 * per_epoch
    epochs = [straight[i:i + per_epoch] for i in range(0, len(straight), per_epoch)]
    assert len({tuple(e) for e in epochs}) == 3, "the trainer trained two epochs in the same order"
    sampler = loaders_for(cfg, 0, 1, CPU)
    for epoch, indices in enumerate(epochs):  # epoch e reads the start of epoch e's permutation
        assert indices == epoch_order(sampler, epoch)[:per_epoch], f"epoch {epoch}"

    paused = _config(jpeg_tree, output_root=str(tmp_path), name="paused", **steps)
    first = _trained_indices(make_config(**{**paused.to_dict(), "stop_after_epochs": 1}), monkeypatch)
    second = _trained_indices(paused, monkeypatch)  # a new trainer that resumes at epoch 2
    assert first + second == straight


# ------------------------------------------------------------------------- two ranks of a real trainer
TWO_RANKS = """
import json, sys
from pathlib import Path
from tutorial_lib.engine.cli import config_from_args
from tutorial_lib.engine.trainer import Trainer
out = Path(sys.argv[1])
trainer = Trainer(config_from_args(sys.argv[2:]))
try:
    trainer.setup()
    loader = trainer.loaders
    orders = []
    for epoch in range(3):
        batches = loader.train_epoch(epoch)
        orders.append([i for batch in getattr(batches, "loader", batches).batch_sampler for i in batch])
    model = trainer.step.train_model
    report = {"rank": trainer.info.rank, "world_size": trainer.info.world_size, "orders": orders,
              "ddp": type(model).__name__, "bucket_bytes_cap": getattr(model, "bucket_bytes_cap", None)}
    (out / f"rank{trainer.info.rank}.json").write_text(json.dumps(report))
finally:
    trainer.close()
"""


@pytest.fixture(scope="module")
def two_ranks(make_runs, jpeg_tree, tmp_path_factory):
    """What each rank of a two-process trainer built (``TWO_RANKS``), by rank."""
    runs, out = make_runs(), tmp_path_factory.mktemp("two_ranks")
    flags = runs.flags("two", data_dir=str(jpeg_tree), image_size=8, batch_size=BATCH, bucket_cap_mb=3, seed=7)
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr",
               "127.0.0.1", "--master-port", str(free_port()), "--no-python", sys.executable,
               "-c", TWO_RANKS, str(out), *flags]
    result = subprocess.run(command, env=subprocess_env(), cwd=REPO_ROOT, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, f"torchrun failed:\n{result.stdout}\n{result.stderr}"
    return [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(2)]


def test_two_rank_trainer_splits_every_epoch_over_its_ranks(two_ranks):
    assert [r["rank"] for r in two_ranks] == [0, 1] and {r["world_size"] for r in two_ranks} == {2}
    rank0, rank1 = (r["orders"] for r in two_ranks)
    for epoch in range(3):
        assert sorted(rank0[epoch] + rank1[epoch]) == list(range(TRAIN_IMAGES)), f"epoch {epoch}"
    assert len({tuple(order) for order in rank0}) == 3  # reshuffled every epoch


def test_two_rank_trainer_wraps_ddp_with_the_bucket_cap(two_ranks):
    for report in two_ranks:
        assert report["ddp"] == "DistributedDataParallel"
        assert report["bucket_bytes_cap"] == 3 * 1024 * 1024
