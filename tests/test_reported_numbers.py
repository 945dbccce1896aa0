"""Every figure the trainer writes to metrics.jsonl, on a 2-rank run, against a computation by hand.

Two ranks (gloo, CPU) train 2 epochs of 4 steps. Each rank records what it was fed: for every step, the batch's
size and the loss of that batch computed by hand (a copy of the model before the step, cross-entropy with the
run's label smoothing). The trainer's clock moves exactly one second per step, so every time and rate figure is
known. Before each validation, rank 0 keeps the weights; the test then scores the whole validation set with them
by hand (plain cross-entropy, no label smoothing; a target's rank among the logits for top-1 and top-5).
Compared: step loss, lr and images/s; epoch train loss, val loss, top-1, top-5, images/s, epoch time and lr.
"""

from __future__ import annotations

import json
import math
import os

import pytest
import torch

from tutorial_lib import free_port

WORLD, BATCH, STEPS, EPOCHS = 2, 8, 4, 2
SETTINGS = dict(image_size=16, batch_size=BATCH, epochs=EPOCHS, max_steps_per_epoch=STEPS, log_every=2,
                base_lr=0.2, lr_reference_batch=16, warmup_epochs=0.5, warmup_start_factor=0.1,
                lr_schedule="step", lr_milestones=[1], lr_decay=0.1, label_smoothing=0.1)


def lr_by_hand(steps_done: int) -> float:
    """The LR after ``steps_done`` steps: base_lr scaled by the global batch (0.2 * 16 / 16), a linear warmup from
    0.1 of it over half an epoch (2 steps), times 0.1 from the end of epoch 1 (step 4) on."""
    scaled = 0.2 * BATCH * WORLD / 16
    warmup = 0.1 + 0.9 * min(steps_done, 2) / 2
    return scaled * warmup * (0.1 if steps_done >= STEPS else 1.0)


def _worker(rank: int, port: int, cfg, out: str) -> None:
    import copy

    import torch.nn.functional as F

    from tutorial_lib.engine import trainer as trainer_module
    from tutorial_lib.engine.step import to_device
    from tutorial_lib.rundir import metrics

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(WORLD),
                      LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(WORLD), OMP_NUM_THREADS="1")
    torch.set_num_threads(1)
    from test_resumed_epoch import StepClock

    clock, fed = StepClock(), []
    trainer_module.time = metrics.time = clock
    original_step, original_evaluate = trainer_module.Trainer.train_step, trainer_module.evaluate

    def recorded_step(self, batch):
        images, targets = to_device(batch, self.device, self.cfg.channels_last)
        model = copy.deepcopy(self.step.model).train()
        with torch.no_grad():
            by_hand = F.cross_entropy(model(images), targets, label_smoothing=self.cfg.label_smoothing)
        loss = original_step(self, batch)
        clock.now += 1.0
        fed.append({"step": self.progress.global_step + 1, "images": len(targets), "loss": by_hand.item()})
        return loss

    def weights_kept(model, *args, **kwargs):
        if rank == 0:
            torch.save(model.state_dict(), f"{out}/weights-{len(fed) // STEPS}.pt")
        return original_evaluate(model, *args, **kwargs)

    trainer_module.Trainer.train_step = recorded_step
    trainer_module.evaluate = weights_kept
    summary = trainer_module.train(cfg)
    assert summary["status"] == "completed"
    with open(f"{out}/fed-{rank}.json", "w") as handle:
        json.dump(fed, handle)


def scores_by_hand(cfg, weights_file) -> dict:
    """top-1, top-5 (percent) and the mean plain cross-entropy over every validation image, one at a time."""
    from tutorial_lib.engine.input.loaders import loaders_for
    from tutorial_lib.engine.models import build_model

    loaders = loaders_for(cfg, 0, 1, torch.device("cpu"))
    model = build_model(cfg.arch, loaders.num_classes, cfg.zero_init_residual, cfg.norm, False)
    model.load_state_dict(torch.load(weights_file, weights_only=True))
    model.eval()
    ranks, losses = [], []
    with torch.no_grad():
        for batch in loaders.val:
            for logits, target in zip(model(batch.images).double().tolist(), batch.targets.tolist(), strict=True):
                ranks.append(1 + sum(value > logits[target] for value in logits))
                losses.append(math.log(sum(math.exp(value) for value in logits)) - logits[target])
    return {"top1": 100 * sum(r == 1 for r in ranks) / len(ranks),
            "top5": 100 * sum(r <= 5 for r in ranks) / len(ranks),
            "val_loss": sum(losses) / len(losses), "val_images": len(ranks)}


@pytest.fixture(scope="module")
def two_rank_run(make_runs, tmp_path_factory):
    runs = make_runs()
    out = tmp_path_factory.mktemp("fed")
    cfg = runs.config("numbers", **SETTINGS)
    torch.multiprocessing.spawn(_worker, args=(free_port(), cfg, str(out)), nprocs=WORLD, join=True)
    fed = [json.loads((out / f"fed-{rank}.json").read_text()) for rank in range(WORLD)]
    return {"cfg": cfg, "runs": runs, "run_dir": runs.run_dir("numbers"), "fed": fed, "out": out}


def test_step_events_loss_lr_and_images_per_second(two_rank_run):
    run = two_rank_run
    fed = run["fed"]
    assert [[f["step"] for f in rank] for rank in fed] == [list(range(1, EPOCHS * STEPS + 1))] * WORLD
    steps = run["runs"].events(run["run_dir"], "step")
    assert [e["step"] for e in steps] == [2, 4, 6, 8] and [e["epoch"] for e in steps] == [1, 1, 2, 2]
    for event in steps:
        window = [f for rank in fed for f in rank if event["step"] - 2 < f["step"] <= event["step"]]
        assert len(window) == 2 * WORLD
        assert event["loss"] == pytest.approx(sum(f["loss"] for f in window) / len(window), rel=1e-5)
        assert event["lr"] == pytest.approx(lr_by_hand(event["step"]), rel=1e-9)
        # the job's images (both ranks) over the window's 2 seconds
        assert event["images_per_sec"] == pytest.approx(sum(f["images"] for f in window) / 2.0)
        assert event["images_per_sec"] == pytest.approx(BATCH * WORLD)


def test_epoch_events_against_the_fed_batches_and_the_kept_weights(two_rank_run):
    run = two_rank_run
    fed, epochs = run["fed"], run["runs"].events(run["run_dir"], "epoch")
    assert [e["epoch"] for e in epochs] == [1, 2]
    for event in epochs:
        number = event["epoch"]
        mine = [f for rank in fed for f in rank if (number - 1) * STEPS < f["step"] <= number * STEPS]
        assert event["train_loss"] == pytest.approx(sum(f["loss"] for f in mine) / len(mine), rel=1e-5)
        assert event["epoch_time"] == pytest.approx(STEPS)  # one second per step
        assert event["images_per_sec"] == pytest.approx(sum(f["images"] for f in mine) / STEPS)
        assert event["lr"] == pytest.approx(lr_by_hand(number * STEPS), rel=1e-9)
        assert (event["train_steps"], event["partial"], event["skipped_images"]) == (STEPS, False, 0)
        hand = scores_by_hand(run["cfg"], run["out"] / f"weights-{number}.pt")
        assert event["val_images"] == hand["val_images"]
        assert event["top1"] == pytest.approx(hand["top1"], abs=1e-6)
        assert event["top5"] == pytest.approx(hand["top5"], abs=1e-6)
        assert event["val_loss"] == pytest.approx(hand["val_loss"], rel=1e-4)
        assert event["val_loss"] != pytest.approx(event["train_loss"], rel=1e-3)
