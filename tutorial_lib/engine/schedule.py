"""The learning-rate schedule: a pure function of the step and the plan.

The factor that multiplies the linearly scaled LR at global step ``s`` depends on ``s`` and on the plan
(epochs, steps per epoch, warmup, decay) and on nothing else: gradual warmup per iteration from
``warmup_start_factor`` to 1 (Goyal et al.), then cosine decay to 0 at the plan's last step, or a step
decay by ``lr_decay`` at each of ``lr_milestones`` (epochs counted from the start of training, warmup
included; a milestone inside the warmup applies from its end).

torch's chained schedulers (LinearLR, then CosineAnnealingLR or MultiStepLR under SequentialLR) compute
the same numbers recursively and keep their position and the plan's length in their state. A checkpoint
of them resumed on a longer plan restarted the decay from the old plan's length (issue 47: LR per epoch
0.05, 0.0, 0.05, 0.0 where an uninterrupted 4-epoch run has 0.05, 0.0375, 0.0125, 0.0). Here the factor
is a closed form, applied through torch's :class:`~torch.optim.lr_scheduler.LambdaLR`, and a resume
builds the scheduler from the plan it runs now, positioned at its step: no scheduler state is trusted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch.optim.lr_scheduler import LambdaLR


@dataclass(frozen=True)
class SchedulePlan:
    """What the LR at a step depends on: the plan's length in steps, its warmup and its decay."""

    total_steps: int
    warmup_steps: int
    start_factor: float
    kind: str  # "cosine" or "step"
    milestones: tuple[int, ...]  # steps (from the start of training) at which a step decay applies
    decay: float

    @classmethod
    def of(cls, cfg, steps_per_epoch: int) -> SchedulePlan:
        """The plan of a configuration whose epochs have ``steps_per_epoch`` steps."""
        warmup = round(cfg.warmup_epochs * steps_per_epoch)
        return cls(total_steps=cfg.epochs * steps_per_epoch, warmup_steps=warmup,
                   start_factor=cfg.warmup_start_factor, kind=cfg.lr_schedule,
                   milestones=tuple(max(m * steps_per_epoch, warmup) for m in cfg.lr_milestones),
                   decay=cfg.lr_decay)

    def factor(self, step: int) -> float:
        """The fraction of the scaled LR at global ``step`` (0 is the first step)."""
        if step < self.warmup_steps:
            return self.start_factor + (1.0 - self.start_factor) * step / self.warmup_steps
        if self.kind == "cosine":
            length = max(1, self.total_steps - self.warmup_steps)
            done = min(step - self.warmup_steps, length)  # past the plan's end the LR stays at 0
            return 0.5 * (1.0 + math.cos(math.pi * done / length))
        return self.decay ** sum(1 for milestone in self.milestones if milestone <= step)


def build_scheduler(optimizer: torch.optim.Optimizer, plan: SchedulePlan, base_lr: float,
                    start_step: int = 0) -> LambdaLR:
    """A LambdaLR of ``plan`` over ``base_lr`` (the scaled LR), its LR set for global step ``start_step``.

    Call ``scheduler.step()`` once per global step, a skipped step included (the schedule follows the
    position in the plan, not the number of updates made). Every group's ``initial_lr`` is set to ``base_lr``:
    a resumed optimiser's groups carry the LR of the moment it was saved, which is not the base."""
    for group in optimizer.param_groups:
        group["initial_lr"] = base_lr
    return LambdaLR(optimizer, plan.factor, last_epoch=start_step - 1)


def lr_values(plan: SchedulePlan, base_lr: float) -> list[float]:
    """The LR at every step of ``plan`` (for plots and tests): the numbers :func:`build_scheduler` sets."""
    return [base_lr * plan.factor(step) for step in range(plan.total_steps)]
