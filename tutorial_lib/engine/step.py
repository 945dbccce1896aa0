"""The one training step, and the numeric settings it runs under.

:class:`TrainStep` owns the model (wrapped in DDP when there are several ranks, compiled when asked),
the optimiser, the LR schedule, the GradScaler and the loss. The trainer calls it once per batch;
the benchmarks (:mod:`tutorial_lib.bench`) time this same object, so a benchmark's speed is the
trainer's speed.
"""

from __future__ import annotations

from contextlib import nullcontext

import torch
from torch.nn.parallel import DistributedDataParallel

from tutorial_lib.engine.comm_hooks import register_allreduce
from tutorial_lib.engine.config import TrainConfig, scaled_batch_and_lr
from tutorial_lib.engine.input.files import Batch
from tutorial_lib.engine.models import build_model, has_batch_norm
from tutorial_lib.engine.optim import build_optimizer, build_scheduler

AMP_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def set_backend_flags(precision: str) -> None:
    """TF32 matmuls and convolutions only for ``tf32`` (fp32 means true fp32: cuDNN would otherwise use TF32),
    and cuDNN's autotuner on (input sizes are fixed, so it picks the fastest convolution once)."""
    allow = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = allow
    torch.backends.cudnn.allow_tf32 = allow
    torch.backends.cudnn.benchmark = True


def autocast(precision: str, device: torch.device):
    """Autocast for fp16/bf16 on ``device``, a no-op context for fp32/tf32."""
    dtype = AMP_DTYPES.get(precision)
    return torch.autocast(device.type, dtype=dtype) if dtype else nullcontext()


def to_device(batch: Batch, device: torch.device, channels_last: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch's images (NHWC if ``channels_last``) and targets on ``device``, copied asynchronously."""
    images = batch.images.to(device, non_blocking=True)
    if channels_last:
        images = images.contiguous(memory_format=torch.channels_last)
    return images, batch.targets.to(device, non_blocking=True)


class TrainStep:
    """Forward, backward (DDP overlaps the gradient all-reduce with it), optimiser and LR step.

    Built from a :class:`TrainConfig`: the model factory, DDP when ``distributed``, torch.compile,
    the optimiser (fused SGD on a GPU) with the linearly scaled LR for ``world_size`` ranks, the
    warmup + decay schedule over ``steps_per_epoch``, GradScaler for fp16, and the loss.
    """

    def __init__(self, cfg: TrainConfig, num_classes: int, device: torch.device, steps_per_epoch: int,
                 world_size: int = 1, distributed: bool = False):
        set_backend_flags(cfg.precision)
        self.cfg, self.device = cfg, device
        self.model = build_model(cfg.arch, num_classes, cfg.zero_init_residual, cfg.norm,
                                 cfg.channels_last).to(device)
        wrapped = (DistributedDataParallel(self.model, device_ids=[device] if device.type == "cuda" else None,
                                           bucket_cap_mb=cfg.bucket_cap_mb) if distributed else self.model)
        self.comm = register_allreduce(wrapped, cfg.allreduce) if distributed else None  # hook state or None
        self.train_model, self.eval_model = wrapped, self.model
        if cfg.compile != "none":
            self.train_model = torch.compile(wrapped, mode=cfg.compile)
            self.eval_model = torch.compile(self.model, mode=cfg.compile)
        lr = scaled_batch_and_lr(cfg, world_size)["scaled_lr"]
        self.optimizer = build_optimizer(self.model, cfg, lr, fused=device.type == "cuda")
        self.scheduler = build_scheduler(self.optimizer, cfg, steps_per_epoch)
        self.scaler = torch.amp.GradScaler(device.type, enabled=cfg.precision == "fp16")
        self.criterion = torch.nn.CrossEntropyLoss(label_smoothing=cfg.label_smoothing)
        # BatchNorm cannot train on one image (ValueError): a batch left with one is skipped (input.files)
        self.needs_two_images = has_batch_norm(cfg.arch, cfg.norm)
        self.train_model.train()

    def autocast(self):
        """The autocast context of this step's precision."""
        return autocast(self.cfg.precision, self.device)

    def __call__(self, batch: Batch) -> torch.Tensor:
        """Train on one batch (on the host or already on the device); return the loss, still on the device."""
        images, targets = to_device(batch, self.device, self.cfg.channels_last)
        with self.autocast():
            if images.numel() == 0:  # every image of this batch was unreadable: join the all-reduce
                loss = sum(p.sum() for p in self.train_model.parameters()) * 0.0
            else:
                loss = self.criterion(self.train_model(images), targets)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()
        return loss.detach()

    def state_dict(self) -> dict:
        """Model, optimiser, schedule and scaler state (what a checkpoint needs of the step)."""
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(), "scaler": self.scaler.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        """Restore what :meth:`state_dict` returned."""
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.scaler.load_state_dict(state["scaler"])
