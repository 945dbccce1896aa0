"""The smoke profile really learns the digits, and its run directory holds what watchers read."""

from __future__ import annotations

import json

import pytest
import torch
import torchvision

from tutorial_lib.rundir.layout import CONFIG_FILE, DONE_FILE

# Measured final top-1 of the smoke profile: 96.7% with 2 threads (lead's run and 3 of ours, in and
# out of process), 96.1% with OMP_NUM_THREADS=1 (other rounding), 96.7% with --seed 1. Chance is
# 10%; after 2 of the 3 epochs it is 85-89%, so the bound leaves ~11 points for other CPUs' numerics.
MIN_TOP1 = 85.0

STEP_FIELDS = {"epoch", "step", "loss", "lr", "images_per_sec"}
EPOCH_FIELDS = {"epoch", "train_loss", "val_loss", "top1", "top5", "epoch_time", "images_per_sec", "val_images"}
END_FIELDS = {"total_time", "best_top1"}


@pytest.fixture(scope="module")
def smoke_run(make_runs):
    """The smoke profile as shipped (digits, 32 px, resnet18, 3 epochs), trained once."""
    runs = make_runs()
    cfg = runs.config("smoke", fast=False, profile="smoke")
    summary = runs.in_process(cfg)
    return cfg, summary, runs.run_dir("smoke"), runs.events(runs.run_dir("smoke"))


def test_smoke_profile_learns_the_digits(smoke_run):
    cfg, summary, _, events = smoke_run
    epochs = [e for e in events if e["event"] == "epoch"]
    print("smoke top-1 per epoch:", [round(e["top1"], 2) for e in epochs])
    assert summary["status"] == "completed"
    assert [e["epoch"] for e in epochs] == list(range(1, cfg.epochs + 1))
    assert epochs[-1]["top1"] >= MIN_TOP1
    assert epochs[-1]["top5"] >= epochs[-1]["top1"]
    assert epochs[-1]["train_loss"] < epochs[0]["train_loss"]
    assert epochs[-1]["val_loss"] < epochs[0]["val_loss"]
    assert summary["best_top1"] == pytest.approx(max(e["top1"] for e in epochs))


def test_metrics_events_have_the_documented_fields(smoke_run):
    cfg, summary, run_dir, events = smoke_run
    kinds = [e["event"] for e in events]
    assert kinds[0] == "start" and kinds[-1] == "end"
    assert kinds.count("start") == 1 and kinds.count("end") == 1
    assert "resume" not in kinds and "stop" not in kinds

    start = events[0]
    assert start["world_size"] == 1 and start["global_batch"] == cfg.batch_size
    assert start["epochs"] == cfg.epochs and start["arch"] == cfg.arch

    steps = [e for e in events if e["event"] == "step"]
    assert steps and all(STEP_FIELDS <= e.keys() for e in steps)
    assert [e["step"] for e in steps] == sorted({e["step"] for e in steps})
    assert steps[-1]["step"] == cfg.epochs * start["steps_per_epoch"]
    assert {e["epoch"] for e in steps} == set(range(1, cfg.epochs + 1))
    assert all(e["images_per_sec"] > 0 and e["loss"] > 0 and e["lr"] >= 0 for e in steps)

    epochs = [e for e in events if e["event"] == "epoch"]
    assert all(EPOCH_FIELDS <= e.keys() for e in epochs)
    assert all(0 <= e["top1"] <= e["top5"] <= 100 and e["epoch_time"] > 0 for e in epochs)

    end = events[-1]
    assert END_FIELDS <= end.keys() and end["total_time"] > 0
    assert end["best_top1"] == pytest.approx(max(e["top1"] for e in epochs))
    done = json.loads((run_dir / DONE_FILE).read_text())
    assert done["best_top1"] == pytest.approx(end["best_top1"])


def test_config_json_records_the_resolved_run(smoke_run):
    cfg, _, run_dir, events = smoke_run
    config = json.loads((run_dir / CONFIG_FILE).read_text())
    fields = {k: v for k, v in cfg.to_dict().items() if k != "num_classes"}  # 0 = "from the data"
    assert {k: config[k] for k in fields} == fields  # every field as resolved
    assert config["num_classes"] == 10  # resolved from the dataset's class folders
    assert config["world_size"] == 1
    assert config["global_batch"] == cfg.batch_size
    assert config["scaled_lr"] == pytest.approx(cfg.base_lr * cfg.batch_size / cfg.lr_reference_batch)
    assert config["torch"] == torch.__version__ and config["torchvision"] == torchvision.__version__
    assert config["device"] == "cpu" and config["device_name"]
    assert len(config["hosts"]) == 1
    epoch = next(e for e in events if e["event"] == "epoch")
    assert config["val_images"] == epoch["val_images"] > 0
    assert config["train_images"] + config["val_images"] == 1797  # all of scikit-learn's digits
