"""Learning-rate schedules, weight-decay groups and LARS against hand computations."""

from __future__ import annotations

import math
from itertools import pairwise

import pytest
import torch
from torch import nn

from tutorial_lib.engine.config import make_config
from tutorial_lib.engine.models import build_model
from tutorial_lib.engine.optim import LARS, build_optimizer, lr_schedule_values, parameter_groups

STEPS = 10  # iterations per epoch in the schedule tests


def _schedule(world_size: int = 8, **overrides) -> list[float]:
    settings = {**dict(base_lr=0.1, batch_size=32, epochs=10, warmup_epochs=2, warmup_start_factor=0.1,
                       lr_schedule="step", lr_milestones=[4, 7], lr_decay=0.1), **overrides}
    return lr_schedule_values(make_config("smoke", **settings), STEPS, world_size)


def test_linear_scaling_rule():
    # 0.1 per 256 images; 32 per worker x 8 workers = 256 images per step -> 0.1.
    values = _schedule(warmup_epochs=0)
    assert values[0] == pytest.approx(0.1)
    for world in (1, 2, 4, 16):
        assert _schedule(world, warmup_epochs=0)[0] == pytest.approx(0.1 * 32 * world / 256)


def test_schedule_is_linear_in_world_size():
    one, many = _schedule(1), _schedule(16)
    assert len(one) == len(many) == 10 * STEPS
    assert all(m == pytest.approx(16 * o) for o, m in zip(one, many, strict=True))


def test_warmup_ramps_linearly_to_the_scaled_lr():
    values = _schedule()
    warmup = 2 * STEPS
    assert values[0] == pytest.approx(0.1 * 0.1)  # warmup_start_factor x scaled LR
    for i in range(warmup):
        assert values[i] == pytest.approx(0.01 + (0.1 - 0.01) * i / warmup)
    assert values[warmup] == pytest.approx(0.1)  # reached at the end of warmup ...
    assert max(values) == pytest.approx(0.1)  # ... and never exceeded


def test_step_decay_at_exactly_the_milestones():
    values = _schedule()
    for i in range(2 * STEPS, 4 * STEPS):
        assert values[i] == pytest.approx(0.1), i
    for i in range(4 * STEPS, 7 * STEPS):  # milestone 4: first iteration of epoch 5
        assert values[i] == pytest.approx(0.01), i
    for i in range(7 * STEPS, 10 * STEPS):
        assert values[i] == pytest.approx(0.001), i


def test_step_decay_without_warmup():
    values = _schedule(warmup_epochs=0)
    assert values[4 * STEPS - 1] == pytest.approx(0.1) and values[4 * STEPS] == pytest.approx(0.01)
    assert values[7 * STEPS - 1] == pytest.approx(0.01) and values[7 * STEPS] == pytest.approx(0.001)


def test_milestone_at_the_end_of_warmup_still_decays():
    values = _schedule(lr_milestones=[2, 7])  # warmup is epochs 1-2; decay from the first step of epoch 3
    assert values[2 * STEPS - 1] < 0.1
    assert values[2 * STEPS] == pytest.approx(0.01)
    assert values[7 * STEPS] == pytest.approx(0.001)


def test_cosine_decay_after_warmup():
    values = _schedule(lr_schedule="cosine")
    warmup, total = 2 * STEPS, 10 * STEPS
    assert values[warmup] == pytest.approx(0.1)
    for i in range(warmup, total):  # half a cosine from the scaled LR to 0 over the rest of training
        expected = 0.1 * (1 + math.cos(math.pi * (i - warmup) / (total - warmup))) / 2
        assert values[i] == pytest.approx(expected, abs=1e-9), i
    assert values[-1] < 0.001 * 0.1
    assert all(a >= b for a, b in pairwise(values[warmup:]))


# ---------------------------------------------------------------------------- weight-decay groups
def _names(model: nn.Module, params) -> set[str]:
    ids = {id(p) for p in params}
    return {name for name, p in model.named_parameters() if id(p) in ids}


@pytest.mark.parametrize("norm", ["batch", "group"])
def test_no_weight_decay_on_norm_parameters_and_biases(norm):
    model = build_model("resnet18", num_classes=10, norm=norm)
    decay, no_decay = parameter_groups(model, weight_decay=1e-4, no_weight_decay_1d=True)
    assert decay["weight_decay"] == 1e-4 and no_decay["weight_decay"] == 0.0
    norm_types = (nn.BatchNorm2d, nn.GroupNorm)
    norm_params = {f"{module_name}.{p}" for module_name, module in model.named_modules()
                   if isinstance(module, norm_types) for p in ("weight", "bias")}
    conv_weights = {f"{n}.weight" for n, m in model.named_modules() if isinstance(m, nn.Conv2d)}
    assert norm_params and conv_weights
    assert _names(model, no_decay["params"]) == norm_params | {"fc.bias"}
    assert _names(model, decay["params"]) == conv_weights | {"fc.weight"}
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))


def test_one_group_without_no_weight_decay_1d():
    model = build_model("resnet18", num_classes=10)
    groups = parameter_groups(model, weight_decay=1e-4, no_weight_decay_1d=False)
    assert len(groups) == 1 and groups[0]["weight_decay"] == 1e-4
    assert _names(model, groups[0]["params"]) == {n for n, _ in model.named_parameters()}


def test_frozen_parameters_are_left_out():
    model = build_model("resnet18", num_classes=10)
    model.fc.weight.requires_grad_(False)
    for flag in (True, False):
        groups = parameter_groups(model, weight_decay=1e-4, no_weight_decay_1d=flag)
        assert "fc.weight" not in set().union(*(_names(model, g["params"]) for g in groups))


def test_sgd_optimizer_uses_the_groups():
    model = build_model("resnet18", num_classes=10)
    cfg = make_config("smoke", weight_decay=5e-4, momentum=0.8, nesterov=True)
    optimizer = build_optimizer(model, cfg, lr=0.3)
    assert isinstance(optimizer, torch.optim.SGD)
    assert [g["weight_decay"] for g in optimizer.param_groups] == [5e-4, 0.0]
    assert all(g["lr"] == 0.3 and g["momentum"] == 0.8 and g["nesterov"] for g in optimizer.param_groups)
    assert isinstance(build_optimizer(model, make_config("smoke", optimizer="lars"), lr=0.3), LARS)


# -------------------------------------------------------------------------------------------- LARS
def test_lars_step_matches_hand_computation():
    torch.manual_seed(0)
    weight = nn.Parameter(torch.randn(4, 3))
    bias = nn.Parameter(torch.randn(4))
    x, y = torch.randn(5, 3), torch.randn(5, 4)
    lr, wd, eta = 0.5, 0.01, 0.001
    optimizer = LARS([{"params": [weight], "weight_decay": wd},
                      {"params": [bias], "weight_decay": 0.0, "lars_exclude": True}],
                     lr=lr, momentum=0.9, weight_decay=wd, trust_coefficient=eta)
    w0, b0 = weight.detach().clone(), bias.detach().clone()
    ((x @ weight.T + bias - y) ** 2).mean().backward()
    g_w, g_b = weight.grad.clone(), bias.grad.clone()
    optimizer.step()

    # Layer-wise trust ratio eta * ||w|| / (||g|| + wd * ||w||), applied to the decayed gradient.
    trust = eta * w0.norm() / (g_w.norm() + wd * w0.norm())
    torch.testing.assert_close(weight.detach(), w0 - lr * trust * (g_w + wd * w0))
    # Excluded group (biases, norm parameters): the plain SGD step.
    torch.testing.assert_close(bias.detach(), b0 - lr * g_b)
    assert not torch.allclose(weight.detach(), w0 - lr * (g_w + wd * w0))  # the trust ratio mattered

    # Second step: momentum accumulates the trust-scaled update.
    w1, b1 = weight.detach().clone(), bias.detach().clone()
    optimizer.zero_grad()
    ((x @ weight.T + bias - y) ** 2).mean().backward()
    g_w2, g_b2 = weight.grad.clone(), bias.grad.clone()
    optimizer.step()
    trust2 = eta * w1.norm() / (g_w2.norm() + wd * w1.norm())
    buffer_w = 0.9 * trust * (g_w + wd * w0) + trust2 * (g_w2 + wd * w1)
    torch.testing.assert_close(weight.detach(), w1 - lr * buffer_w)
    torch.testing.assert_close(bias.detach(), b1 - lr * (0.9 * g_b + g_b2))


def test_lars_zero_weights_take_a_plain_step():
    weight = nn.Parameter(torch.zeros(3))
    optimizer = LARS([weight], lr=0.1, momentum=0.0)
    weight.grad = torch.tensor([1.0, -2.0, 3.0])
    optimizer.step()  # ||w|| = 0 would give a zero trust ratio: fall back to 1
    torch.testing.assert_close(weight.detach(), torch.tensor([-0.1, 0.2, -0.3]))
