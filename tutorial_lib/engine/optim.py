"""Optimisers and learning-rate schedules of the large-minibatch recipe.

* Linear scaling rule (Goyal et al.): LR = base_lr * global_batch / 256.
* Gradual warmup per iteration, then step or cosine decay: :mod:`tutorial_lib.engine.schedule`.
* No weight decay on normalisation weights and biases (Jia et al.).
* LARS (You et al.) for very large batches. torch has no LARS optimiser, hence the small class here.
"""

from __future__ import annotations

import torch
from torch import nn

from tutorial_lib.engine.config import scaled_batch_and_lr
from tutorial_lib.engine.schedule import SchedulePlan, lr_values


def parameter_groups(model: nn.Module, weight_decay: float, no_weight_decay_1d: bool = True) -> list[dict]:
    """Split parameters into a decayed group and, if asked, an undecayed one.

    One-dimensional tensors are normalisation scales/shifts and biases: decaying them only shrinks
    the scale of activations and hurts accuracy at large batch, so they get no weight decay.
    """
    if not no_weight_decay_1d:
        return [{"params": [p for p in model.parameters() if p.requires_grad], "weight_decay": weight_decay}]
    decay, no_decay = [], []
    for param in model.parameters():
        if param.requires_grad:
            (no_decay if param.ndim <= 1 else decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0, "lars_exclude": True}]


class LARS(torch.optim.Optimizer):
    """SGD with momentum and layer-wise adaptive rate scaling (You et al., 2017).

    Each parameter tensor's update is scaled by the trust ratio
    ``eta * ||w|| / (||g|| + weight_decay * ||w||)``, so layers whose gradients are large relative
    to their weights take proportionally smaller steps. Groups marked ``lars_exclude`` (biases and
    normalisation parameters) use the plain SGD step, as in common large-batch practice.
    """

    def __init__(self, params, lr: float, momentum: float = 0.9, weight_decay: float = 0.0,
                 trust_coefficient: float = 0.001, eps: float = 1e-9):
        defaults = dict(lr=lr, momentum=momentum, weight_decay=weight_decay,
                        trust_coefficient=trust_coefficient, eps=eps, lars_exclude=False)
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure=None):
        """One optimisation step."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for param in group["params"]:
                if param.grad is None:
                    continue
                grad = param.grad.add(param, alpha=group["weight_decay"])
                if not group["lars_exclude"]:
                    w_norm, g_norm = torch.linalg.vector_norm(param), torch.linalg.vector_norm(param.grad)
                    trust = group["trust_coefficient"] * w_norm / (
                        g_norm + group["weight_decay"] * w_norm + group["eps"])
                    grad = grad * torch.where((w_norm > 0) & (g_norm > 0), trust, torch.ones_like(trust))
                state = self.state[param]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = grad.clone()
                else:
                    state["momentum_buffer"].mul_(group["momentum"]).add_(grad)
                param.add_(state["momentum_buffer"], alpha=-group["lr"])
        return loss


def build_optimizer(model: nn.Module, cfg, lr: float, fused: bool = False) -> torch.optim.Optimizer:
    """SGD (fused/foreach kernels where the device has them) or LARS at the scaled ``lr``."""
    groups = parameter_groups(model, cfg.weight_decay, cfg.no_weight_decay_1d)
    if cfg.optimizer == "lars":
        return LARS(groups, lr=lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay,
                    trust_coefficient=cfg.lars_trust_coefficient)
    for group in groups:
        group.pop("lars_exclude", None)
    return torch.optim.SGD(groups, lr=lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay,
                           nesterov=cfg.nesterov, fused=fused or None)


def lr_schedule_values(cfg, steps_per_epoch: int, world_size: int = 1) -> list[float]:
    """The LR at every iteration of a run (for plots and tests): the trainer's schedule
    (:mod:`tutorial_lib.engine.schedule`) over the linearly scaled LR of ``world_size`` ranks."""
    return lr_values(SchedulePlan.of(cfg, steps_per_epoch), scaled_batch_and_lr(cfg, world_size)["scaled_lr"])
