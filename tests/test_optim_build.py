"""build_optimizer and build_scheduler: every setting reaches the optimiser and the schedule (fast, no training).

Written against mutmut's survivors (``make mutants``): LARS built from the settings, SGD's groups and fused
kernels, the schedule's boundaries (one warmup step, the last cosine step, a decay other than 0.1).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tutorial_lib.engine.config import make_config
from tutorial_lib.engine.optim import LARS, build_optimizer, lr_schedule_values, parameter_groups
from tutorial_lib.engine.schedule import SchedulePlan, build_scheduler


def small_model() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.Linear(4, 2))


def test_lars_gets_every_setting_and_its_groups():
    cfg = make_config("smoke", optimizer="lars", momentum=0.8, weight_decay=3e-4, lars_trust_coefficient=0.002)
    optimizer = build_optimizer(small_model(), cfg, lr=0.25)
    assert isinstance(optimizer, LARS)
    decay, no_decay = optimizer.param_groups
    for group in (decay, no_decay):
        assert (group["lr"], group["momentum"], group["trust_coefficient"]) == (0.25, 0.8, 0.002)
    assert (decay["weight_decay"], decay["lars_exclude"]) == (3e-4, False)
    assert (no_decay["weight_decay"], no_decay["lars_exclude"]) == (0.0, True)
    assert optimizer.defaults["weight_decay"] == 3e-4


def test_lars_defaults():
    defaults = LARS([nn.Parameter(torch.zeros(1))], lr=0.1).defaults
    assert (defaults["momentum"], defaults["weight_decay"], defaults["trust_coefficient"]) == (0.9, 0.0, 0.001)


def test_sgd_groups_carry_no_lars_marker_and_the_default_weight_decay():
    optimizer = build_optimizer(small_model(), make_config("smoke", weight_decay=2e-4), lr=0.1)
    assert all("lars_exclude" not in group for group in optimizer.param_groups)
    assert optimizer.defaults["weight_decay"] == 2e-4


def test_fused_kernels_only_when_asked():
    cfg = make_config("smoke")
    assert build_optimizer(small_model(), cfg, lr=0.1).defaults["fused"] is None
    assert build_optimizer(small_model(), cfg, lr=0.1, fused=True).defaults["fused"] is True


def test_no_weight_decay_1d_setting_and_default():
    model = small_model()
    assert len(build_optimizer(model, make_config("smoke", no_weight_decay_1d=False), lr=0.1).param_groups) == 1
    assert len(build_optimizer(model, make_config("smoke", no_weight_decay_1d=True), lr=0.1).param_groups) == 2
    assert len(parameter_groups(model, 1e-4)) == 2  # on by default


def test_cosine_reaches_zero_at_the_last_step_even_for_one_step():
    cfg = make_config("smoke", epochs=1, warmup_epochs=0, lr_schedule="cosine")
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.4)
    scheduler = build_scheduler(optimizer, SchedulePlan.of(cfg, steps_per_epoch=1), base_lr=0.4)
    optimizer.step()
    scheduler.step()
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.0, abs=1e-12)


def test_step_decay_uses_lr_decay():
    cfg = make_config("smoke", epochs=2, warmup_epochs=0, lr_schedule="step", lr_milestones=[1], lr_decay=0.5,
                      base_lr=0.1, batch_size=32, lr_reference_batch=32)
    assert lr_schedule_values(cfg, steps_per_epoch=2) == pytest.approx([0.1, 0.1, 0.05, 0.05])


def test_a_warmup_of_one_step_starts_at_the_start_factor():
    cfg = make_config("smoke", epochs=2, warmup_epochs=0.5, warmup_start_factor=0.25, lr_schedule="step",
                      lr_milestones=[2], base_lr=0.1, batch_size=32, lr_reference_batch=32)
    assert lr_schedule_values(cfg, steps_per_epoch=2) == pytest.approx([0.025, 0.1, 0.1, 0.1])


def test_schedule_values_default_to_one_rank():
    cfg = make_config("smoke", base_lr=0.1, batch_size=32, lr_reference_batch=32, warmup_epochs=0)
    assert lr_schedule_values(cfg, steps_per_epoch=2)[0] == pytest.approx(0.1)
