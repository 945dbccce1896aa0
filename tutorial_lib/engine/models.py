"""torchvision model factory: any classification model by name, ResNet tweaks from Goyal et al."""

from __future__ import annotations

import functools
from unittest import mock

import torch
from torch import nn
from torchvision import models as tv_models

_RESNET_FAMILY = ("resnet", "resnext", "wide_resnet")
# Models with auxiliary classifiers: in training mode torchvision's default returns a named tuple of logits that
# no loss takes (r43g: `train --arch googlenet` failed with a TypeError), and inception_v3's aux head needs 139 px
# or more ("Output size is too small" at 75 px). Built without them, they train on their main classifier, which is
# what is evaluated; init_weights=True is torchvision's own initialisation (its default, which otherwise warns).
_AUXILIARY_HEADS = ("googlenet", "inception_v3")


@functools.lru_cache(maxsize=1)
def available_archs() -> tuple[str, ...]:
    """Names of torchvision's image-classification models (resnet50, vit_b_16, ...)."""
    return tuple(tv_models.list_models(module=tv_models))


def _group_norm(channels: int) -> nn.GroupNorm:
    return nn.GroupNorm(min(32, channels), channels)


def build_model(arch: str = "resnet50", num_classes: int = 1000, zero_init_residual: bool = True,
                norm: str = "batch", channels_last: bool = False) -> nn.Module:
    """Build an untrained torchvision model (no weights are downloaded).

    GoogLeNet and Inception v3 are built without their auxiliary classifiers (one output, plain logits).
    ``zero_init_residual`` starts the last BN gamma of every residual block at zero, so each block
    begins as the identity (Goyal et al. section 5.1). ``norm="group"`` swaps BatchNorm for GroupNorm
    in ResNets: its statistics are per image, so results do not depend on the per-worker batch.
    """
    kwargs: dict = {"weights": None, "num_classes": num_classes}
    if arch in _AUXILIARY_HEADS:
        kwargs.update(aux_logits=False, init_weights=True)
    if arch.startswith(_RESNET_FAMILY):
        kwargs["zero_init_residual"] = zero_init_residual
        if norm == "group":
            kwargs["norm_layer"] = _group_norm
    model = tv_models.get_model(arch, **kwargs)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    return model


def meta_model(arch: str, num_classes: int, norm: str = "batch") -> nn.Module:
    """``arch`` built on PyTorch's ``meta`` device: shapes only, nothing allocated (the pre-checks and estimates).

    RegNet computes its block widths with tensors it reads back (``.tolist()``), which the meta device cannot
    (r43g, r43k: every regnet failed every pre-check); that computation, a few numbers, runs on the CPU here and
    the model on meta. No torchvision option does this, hence the patch, which lasts for this one build."""
    from torchvision.models import regnet

    widths_of = regnet.BlockParams.from_init_params.__func__

    def widths_on_cpu(cls, *args, **kwargs):
        with torch.device("cpu"):
            return widths_of(cls, *args, **kwargs)

    with mock.patch.object(regnet.BlockParams, "from_init_params", classmethod(widths_on_cpu)), \
            torch.device("meta"):
        return build_model(arch, num_classes, norm=norm)


@functools.lru_cache(maxsize=32)
def has_batch_norm(arch: str, norm: str = "batch") -> bool:
    """Whether ``arch`` (built with ``norm``) has BatchNorm layers, which cannot train on a batch of one image;
    found on the meta device (nothing allocated)."""
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in meta_model(arch, 10, norm).modules())


@functools.lru_cache(maxsize=64)
def runs_at(arch: str, image_size: int) -> bool:
    """Whether ``arch`` takes ``image_size`` px images: its layers leave at least one pixel (alexnet's pooling
    does not at 16 px). Found by a forward pass on the meta device, which computes shapes and allocates nothing."""
    model = meta_model(arch, 10)
    try:
        with torch.no_grad():
            model.eval()(torch.empty(1, 3, image_size, image_size, device="meta"))
    except (RuntimeError, ValueError, AssertionError, TypeError):  # too small, or a ViT's other size
        return False
    return True


def smallest_image_size(arch: str) -> int:
    """The smallest of the usual sizes (32 to 299 px) that ``arch`` takes (:func:`runs_at`)."""
    return next((size for size in (32, 64, 96, 128, 160, 224, 299) if runs_at(arch, size)), 224)


@functools.lru_cache(maxsize=32)
def fixed_image_size(arch: str) -> int | None:
    """The one image size ``arch`` accepts (a vision transformer's, e.g. 224 for vit_b_16), None where any size
    goes; found on the meta device (nothing allocated)."""
    size = getattr(meta_model(arch, 10), "image_size", None)
    return size if isinstance(size, int) else None


def state_is_finite(model: nn.Module) -> bool:
    """Whether every floating-point weight and buffer (BatchNorm's running statistics) of ``model`` is finite."""
    return all(bool(torch.isfinite(t).all()) for t in (*model.parameters(), *model.buffers()) if t.is_floating_point())


def count_parameters(model: nn.Module) -> int:
    """Number of trainable parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
