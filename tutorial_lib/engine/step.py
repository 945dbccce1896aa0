"""The one training step, and the numeric settings it runs under.

:class:`TrainStep` owns the model (wrapped in DDP when there are several ranks, compiled when asked),
the optimiser, the LR schedule, the GradScaler and the loss. The trainer calls it once per batch;
the benchmarks (:mod:`tutorial_lib.bench`) time this same object, so a benchmark's speed is the
trainer's speed.

Ranks agree before they step (:func:`agree_on_images`): a batch may hold fewer images than
``batch_size`` (unreadable images skipped with ``bad_data: skip``, an uneven last batch or shard), even
none. A rank without an image cannot take part in DDP's forward and backward, and a rank that leaves
them out waits alone in the gradient all-reduce until the process group's timeout (issue 47). So every
rank all-reduces its count of usable images before the forward, and when any rank has none, all of
them skip the step together. Why a joint skip rather than the empty rank joining with a zero-weight
input: a placeholder image would pass through BatchNorm and move its running statistics, and a step
in which no rank has an image would still apply momentum and weight decay; a skipped step changes
nothing but the schedule's position. The count costs one all-reduce of two integers per step, and reading
it back waits for the device: synthetic batches are always full, so their runs (the benchmarks') skip it.
"""

from __future__ import annotations

import warnings
from contextlib import nullcontext

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from tutorial_lib.engine.comm_hooks import register_allreduce
from tutorial_lib.engine.config import TrainConfig, scaled_batch_and_lr
from tutorial_lib.engine.input.files import Batch
from tutorial_lib.engine.models import build_model, has_batch_norm
from tutorial_lib.engine.optim import build_optimizer
from tutorial_lib.engine.schedule import SchedulePlan, build_scheduler

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


def agree_on_images(count: int, distributed: bool, device: torch.device) -> tuple[int, bool]:
    """``(images of every rank together, whether every rank has at least one)`` for this step, given this
    rank's ``count`` of usable images. Every rank must call it at every step, in the same order (it is a
    collective when ``distributed``); a rank that has run out of batches calls it with 0."""
    if not distributed:
        return count, count > 0
    counts = torch.tensor([count, int(count == 0)], dtype=torch.int64, device=device)
    dist.all_reduce(counts)
    total, empty_ranks = counts.tolist()
    return total, empty_ranks == 0


class TrainStep:
    """Forward, backward (DDP overlaps the gradient all-reduce with it), optimiser and LR step.

    Built from a :class:`TrainConfig`: the model factory, DDP when ``distributed``, torch.compile,
    the optimiser (fused SGD on a GPU) with the linearly scaled LR for ``world_size`` ranks, the
    warmup + decay schedule over ``steps_per_epoch``, GradScaler for fp16, and the loss.
    """

    def __init__(self, cfg: TrainConfig, num_classes: int, device: torch.device, steps_per_epoch: int,
                 world_size: int = 1, distributed: bool = False):
        set_backend_flags(cfg.precision)
        self.cfg, self.device, self.world_size, self.distributed = cfg, device, world_size, distributed
        self.batches_may_differ = distributed and cfg.dataset != "synthetic"  # see agree_on_images
        self.model = build_model(cfg.arch, num_classes, cfg.zero_init_residual, cfg.norm,
                                 cfg.channels_last).to(device)
        wrapped = (DistributedDataParallel(self.model, device_ids=[device] if device.type == "cuda" else None,
                                           bucket_cap_mb=cfg.bucket_cap_mb) if distributed else self.model)
        self.comm = register_allreduce(wrapped, cfg.allreduce) if distributed else None  # hook state or None
        self.train_model, self.eval_model = wrapped, self.model
        if cfg.compile != "none":
            self.train_model = torch.compile(wrapped, mode=cfg.compile)
            self.eval_model = torch.compile(self.model, mode=cfg.compile)
        self.lr = scaled_batch_and_lr(cfg, world_size)["scaled_lr"]
        self.optimizer = build_optimizer(self.model, cfg, self.lr, fused=device.type == "cuda")
        self.plan = SchedulePlan.of(cfg, steps_per_epoch)
        self.scheduler = build_scheduler(self.optimizer, self.plan, self.lr)
        self.scaler = torch.amp.GradScaler(device.type, enabled=cfg.precision == "fp16")
        self.criterion = torch.nn.CrossEntropyLoss(label_smoothing=cfg.label_smoothing)
        # BatchNorm cannot train on one image (ValueError): a batch left with one is skipped (input.files)
        self.needs_two_images = has_batch_norm(cfg.arch, cfg.norm)
        self.train_model.train()

    def autocast(self):
        """The autocast context of this step's precision."""
        return autocast(self.cfg.precision, self.device)

    def __call__(self, batch: Batch) -> torch.Tensor | None:
        """Train on one batch (on the host or already on the device); return the loss, still on the device,
        or None when the step was skipped on every rank because one of them had no usable image.

        Each rank's loss is weighted by its share of the step's images (``world_size * count / total``), so
        the gradient DDP averages is the mean over every image of the step however unevenly the ranks hold
        them (exactly 1 when they hold equally many: an even step is computed as before)."""
        count = len(batch.targets)
        if self.batches_may_differ:
            total, every_rank_has_images = agree_on_images(count, True, self.device)
        else:
            total, every_rank_has_images = count * self.world_size, count > 0
        if not every_rank_has_images:
            with warnings.catch_warnings():  # torch warns of a schedule step before any optimiser step
                warnings.simplefilter("ignore", UserWarning)
                self.scheduler.step()  # the schedule follows the step's place in the plan, trained or not
            return None
        images, targets = to_device(batch, self.device, self.cfg.channels_last)
        with self.autocast():
            loss = self.criterion(self.train_model(images), targets)
        share = self.world_size * count / total
        self.scaler.scale(loss if share == 1.0 else loss * share).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()
        return loss.detach()

    def start_at(self, global_step: int) -> None:
        """Position the LR schedule of this step's plan at ``global_step`` (a resume): the schedule is rebuilt
        from the plan this run has now, never taken from a checkpoint (:mod:`tutorial_lib.engine.schedule`)."""
        self.scheduler = build_scheduler(self.optimizer, self.plan, self.lr, start_step=global_step)

    def state_dict(self) -> dict:
        """Model, optimiser and scaler state (what a checkpoint needs of the step; the schedule is a function
        of the plan and the step, see :meth:`start_at`)."""
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "scaler": self.scaler.state_dict()}

    def load_state_dict(self, state: dict, global_step: int) -> None:
        """Restore what :meth:`state_dict` returned and go on at ``global_step`` of this run's plan (a
        ``scheduler`` entry of an older checkpoint is ignored: it holds the plan it was saved with)."""
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scaler.load_state_dict(state["scaler"])
        self.start_at(global_step)
