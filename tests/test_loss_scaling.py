"""fp16 with the enabled GradScaler, run on the CPU: the trainer's own TrainStep on CPU tensors.

``validate()`` refuses fp16 on a CPU (test_config.py::test_fp16_needs_a_gpu), but the step itself
runs: autocast to float16 and the GradScaler both work on CPU tensors. So the loss scaling of the ``hal``
recipe is checked here without a GPU: an overflowing step is skipped and halves the scale, the scale
grows back after ``growth_interval`` good steps, and a good step applies the unscaled gradient.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from tutorial_lib.engine.config import make_config
from tutorial_lib.engine.input.files import Batch
from tutorial_lib.engine.step import TrainStep

CPU = torch.device("cpu")
FP16 = dict(precision="fp16", device="cpu", num_classes=10, image_size=8, batch_size=4, epochs=2, warmup_epochs=0,
            dataset="synthetic")


@pytest.fixture(autouse=True)
def small_model(monkeypatch):
    """A two-layer perceptron instead of the torchvision model: fp16 convolutions take seconds a step on a
    CPU, and the model is not what these tests check. It has no buffers, so "the weights did not change"
    covers every floating-point state."""
    monkeypatch.setattr("tutorial_lib.engine.step.build_model", lambda *args, **kwargs: nn.Sequential(
        nn.Flatten(), nn.Linear(3 * 8 * 8, 32), nn.ReLU(), nn.Linear(32, 10)))


def _step(scale: float, growth_interval: int = 2) -> TrainStep:
    torch.manual_seed(0)
    step = TrainStep(make_config("smoke", **FP16), 10, CPU, steps_per_epoch=50)
    assert step.scaler.is_enabled()
    # The scaler's public state: start at ``scale`` and grow after ``growth_interval`` good steps.
    step.scaler.load_state_dict({**step.scaler.state_dict(), "scale": scale, "growth_interval": growth_interval})
    return step


def _batch() -> Batch:
    generator = torch.Generator().manual_seed(1)
    return Batch(torch.randn(4, 3, 8, 8, generator=generator), torch.randint(0, 10, (4,), generator=generator))


def _weights(step: TrainStep) -> list[torch.Tensor]:
    return [p.detach().clone() for p in step.model.parameters()]


def test_fp16_overflow_step_is_skipped_and_the_scale_grows_back():
    step, batch = _step(scale=2.0**30), _batch()  # scaled fp16 gradients overflow (max 65504)
    scales, skipped = [step.scaler.get_scale()], 0
    while True:
        before = _weights(step)
        loss = step(batch)
        assert torch.isfinite(loss)  # the loss is fine: only the scaled gradients overflow
        scales.append(step.scaler.get_scale())
        if scales[-1] == scales[-2]:
            break  # a good step
        assert scales[-1] == scales[-2] / 2, "an overflow halves the scale"
        assert all(torch.equal(a, b) for a, b in zip(before, step.model.parameters(), strict=True)), \
            "an overflow step must leave the weights alone"
        assert not step.optimizer.state, "an overflow step must not reach the optimiser (momentum untouched)"
        skipped += 1
        assert skipped < 40
    assert skipped >= 5  # 2**30 is far too large: several steps were skipped before one applied
    changed = [not torch.equal(a, b) for a, b in zip(before, step.model.parameters(), strict=True)]
    assert any(changed) and all(torch.isfinite(p).all() for p in step.model.parameters())
    step(batch)  # the second good step in a row: growth_interval 2 reached, the scale doubles
    assert step.scaler.get_scale() == scales[-1] * 2


def test_fp16_steps_apply_the_unscaled_gradient():
    step, batch = _step(scale=1024.0), _batch()
    reference = copy.deepcopy(step.model)
    with torch.autocast("cpu", dtype=torch.float16):  # the same forward, backward without any scaling
        loss = nn.functional.cross_entropy(reference(batch.images), batch.targets)
    loss.backward()
    decay = {id(p): g["weight_decay"] for g in step.optimizer.param_groups for p in g["params"]}
    lr = step.optimizer.param_groups[0]["lr"]
    expected = [p.detach() - lr * (r.grad + decay[id(p)] * p.detach())  # SGD's first step: buffer = gradient
                for p, r in zip(step.model.parameters(), reference.parameters(), strict=True)]
    step(batch)
    assert step.scaler.get_scale() == 1024.0  # not an overflow
    for new, want in zip(step.model.parameters(), expected, strict=True):
        # Scaling by 1024 and back is exact in floating point; only the fp16 rounding order differs.
        torch.testing.assert_close(new.detach(), want, atol=1e-6, rtol=1e-4)
    assert any(not torch.equal(new, old) for new, old in zip(step.model.parameters(), reference.parameters(),
                                                              strict=True))
