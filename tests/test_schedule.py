"""The LR schedule is a pure function of the global step and the current plan, and a resume follows it.

Issue 47: a run resumed with more epochs (a change the recipe check allows) restored torch's chained
schedulers from its checkpoint, which carry the old plan's length, and restarted the decay. Here, with
generated plans, stop points and allowed changes (Hypothesis), the resumed step's LR at every step is the
uninterrupted run's of the final plan. No training: the model is a stand-in (the schedule never looks at it),
so each generated case costs milliseconds; the real two-run resume is
``test_safety_careless.py::test_more_epochs_resume_and_the_change_is_recorded``.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from torch import nn
from torch.optim.lr_scheduler import CosineAnnealingLR, LinearLR, MultiStepLR, SequentialLR

from tutorial_lib.engine import step as step_module
from tutorial_lib.engine.config import ConfigError, make_config
from tutorial_lib.engine.optim import lr_schedule_values
from tutorial_lib.engine.recipe import SAFE_TO_CHANGE, check_resume
from tutorial_lib.engine.schedule import SchedulePlan, build_scheduler
from tutorial_lib.engine.step import TrainStep

CPU = torch.device("cpu")
# A changed value for every field a resume may change besides epochs: none of them may move the schedule.
OTHER_VALUES = {"name": "renamed", "output_root": "/elsewhere", "profile": "hal", "data_dir": "/data/copy",
                "stop_after_epochs": 1, "workers": 3, "prefetch": 4, "input_pipeline": "gpu", "bad_data": "error",
                "stage_to": "/local", "index_dir": "/index", "device": "cuda", "compile": "default",
                "bucket_cap_mb": 50, "allreduce": "hierarchical", "log_every": 7, "checkpoint": False,
                "progress": False}


def stand_in_model(*_args, **_kwargs) -> nn.Module:
    """Two parameter groups (a weight and a bias), like a real model's decayed and undecayed ones."""
    return nn.Linear(3, 2)


SMOKE = make_config("smoke")


@st.composite
def plans(draw):
    """A configuration's schedule fields and its steps per epoch."""
    epochs = draw(st.integers(1, 6))
    cfg = dataclasses.replace(
        SMOKE, epochs=epochs, lr_schedule=draw(st.sampled_from(["cosine", "step"])),
        warmup_epochs=draw(st.sampled_from([0.0, 0.5, 1.0, 1.5, 2.0])) * epochs / 2,
        warmup_start_factor=draw(st.sampled_from([0.1, 0.25])),
        lr_milestones=sorted(draw(st.sets(st.integers(1, 8), max_size=3))),
        lr_decay=draw(st.sampled_from([0.1, 0.5, 1.0])), batch_size=draw(st.sampled_from([8, 32])))
    return cfg, draw(st.integers(1, 5))


def first_run_checkpoint(cfg, steps_per_epoch: int, steps: int) -> dict:
    """What a run of ``cfg`` checkpoints after ``steps`` steps: the step's state (and, as checkpoints written
    before this change do, its scheduler's), the progress and the recipe. Its own LRs are its plan's."""
    first, seen = TrainStep(cfg, 2, CPU, steps_per_epoch), []
    for _ in range(steps):
        seen.append(first.optimizer.param_groups[0]["lr"])
        first.optimizer.step()
        first.scheduler.step()
    assert seen == lr_schedule_values(cfg, steps_per_epoch)[:steps]
    epoch, into = divmod(steps, steps_per_epoch)
    return {**first.state_dict(), "scheduler": first.scheduler.state_dict(), "config": cfg.to_dict(),
            "progress": {"epoch": epoch, "step_in_epoch": into, "global_step": steps}}


@settings(max_examples=60, deadline=None, derandomize=True)
@given(plan=plans(), data=st.data())
@example(plan=(make_config("smoke", epochs=2, lr_schedule="cosine", warmup_epochs=1.0), 3),  # issue 47's case
         data=None)
def test_a_resume_follows_the_final_plan_at_every_step(plan, data):
    cfg, steps_per_epoch = plan
    if data is None:
        stop, change = 2 * steps_per_epoch, {"epochs": 4}
    else:
        stop = data.draw(st.integers(0, cfg.epochs * steps_per_epoch), label="stopped after steps")
        done, into = divmod(stop, steps_per_epoch)
        at_least = max(done + (1 if into else 0), math.ceil(cfg.warmup_epochs), 1)
        change = {"epochs": data.draw(st.integers(at_least, at_least + 4), label="epochs")}
        others = data.draw(st.sets(st.sampled_from(sorted(OTHER_VALUES))), label="other changes")
        change.update({key: OTHER_VALUES[key] for key in others})
    final = dataclasses.replace(cfg, **change)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(step_module, "build_model", stand_in_model)
        patch.setattr(torch, "compile", lambda model, mode=None: model)  # compile: changed, and costly to wrap
        checkpoint = first_run_checkpoint(cfg, steps_per_epoch, stop)
        check_resume(checkpoint, final, {}, "run")  # a change the recipe check allows
        resumed = TrainStep(final, 2, CPU, steps_per_epoch)
        resumed.load_state_dict(checkpoint, stop)
        seen = []
        for _ in range(stop, final.epochs * steps_per_epoch):
            seen.append([group["lr"] for group in resumed.optimizer.param_groups])
            resumed.optimizer.step()
            resumed.scheduler.step()
    uninterrupted = lr_schedule_values(final, steps_per_epoch)[stop:]
    assert seen == [[lr, lr] for lr in uninterrupted]


def test_a_schedule_can_start_at_any_step_of_a_fresh_optimiser():
    plan = SchedulePlan.of(make_config("smoke", epochs=4, lr_schedule="cosine", warmup_epochs=1.0), 3)
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.2)
    build_scheduler(optimizer, plan, 0.2, start_step=5)
    assert optimizer.param_groups[0]["lr"] == 0.2 * plan.factor(5)


def test_every_field_a_resume_may_change_has_a_changed_value_above():
    assert set(OTHER_VALUES) == SAFE_TO_CHANGE - {"epochs"}


def chained_torch_schedule(cfg, steps_per_epoch: int) -> list[float]:
    """The factors of torch's chained schedulers (LinearLR warmup, then CosineAnnealingLR or MultiStepLR under
    SequentialLR), as the trainer used them before: the reference the closed form must reproduce."""
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    warmup, total = round(cfg.warmup_epochs * steps_per_epoch), cfg.epochs * steps_per_epoch
    if cfg.lr_schedule == "cosine":
        decay = CosineAnnealingLR(optimizer, T_max=max(1, total - warmup))
    else:
        decay = MultiStepLR(optimizer, [max(0, m * steps_per_epoch - warmup) for m in cfg.lr_milestones],
                            gamma=cfg.lr_decay)
    scheduler = decay if warmup == 0 else SequentialLR(
        optimizer, [LinearLR(optimizer, cfg.warmup_start_factor, 1.0, total_iters=warmup), decay], [warmup])
    values = []
    for _ in range(total):
        values.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return values


@settings(max_examples=80, deadline=None, derandomize=True)
@given(plan=plans())
def test_the_closed_form_is_torchs_chained_warmup_and_decay(plan):
    cfg, steps_per_epoch = plan
    factors = [SchedulePlan.of(cfg, steps_per_epoch).factor(s) for s in range(cfg.epochs * steps_per_epoch)]
    assert factors == pytest.approx(chained_torch_schedule(cfg, steps_per_epoch), abs=1e-12)


def test_a_plan_shortened_below_the_work_done_is_refused_in_one_line():
    checkpoint = {"config": make_config("smoke", epochs=4).to_dict(),
                  "progress": {"epoch": 3, "step_in_epoch": 2, "global_step": 11}}
    for epochs in (2, 3):  # 3: the checkpoint holds 2 steps of epoch 4 already
        with pytest.raises(ConfigError) as refused:
            check_resume(checkpoint, make_config("smoke", epochs=epochs), {}, "runs/x")
        message = str(refused.value)
        assert message.startswith(f"epochs: {epochs} is fewer than") and "3 epochs and 2 steps of epoch 4" in message
        assert "--epochs 4 or more" in message and "\n" not in message
    assert check_resume(checkpoint, make_config("smoke", epochs=4), {}, "runs/x") == {}
    at_boundary = {**checkpoint, "progress": {"epoch": 3, "step_in_epoch": 0, "global_step": 9}}
    assert check_resume(at_boundary, make_config("smoke", epochs=3), {}, "runs/x") == {"epochs": [4, 3]}
