"""Memory a step needs, estimated before anything is allocated: a size whose tensors cannot fit is refused in one
line with the estimate and the memory there is, instead of growing until the kernel's OOM killer ends the run.

The estimate is a lower bound, so that it never refuses a run that fits: the weights and their gradients, the
optimiser's momentum buffers (one more copy of the weights: SGD with momentum, LARS), the batch as float32 on the
device, and the outputs of the model's convolutions and linear layers for the batch
(autograd keeps at least those for the backward pass). Those outputs are counted by running the model on
PyTorch's ``meta`` device, which computes shapes and allocates nothing (a model that will not run at that size
there, such as a ViT at another image size, is counted without them). Available memory: ``psutil`` for the host,
``torch.cuda.mem_get_info`` for a GPU.
"""

from __future__ import annotations

import functools
import re
import resource

import psutil
import torch
from torch import nn

from tutorial_lib.engine.errors import ConfigError

AMP_BYTES = {"fp16": 2, "bf16": 2}  # bytes per activation under autocast; 4 otherwise
MOMENTUM_BYTES = 4  # the optimiser's float32 momentum buffer, per weight


def human_bytes(count: float) -> str:
    """``count`` bytes as a short figure (``3.2 GB``, ``640 TB``)."""
    if count >= 1e300:  # an int past float's range has no float form (r43v)
        from tutorial_lib.numbers import magnitude

        return f"{magnitude(int(count))} B"
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if abs(count) < 1000 or unit == "PB":
            return f"{count:.3g} {unit}" if unit != "B" else f"{int(count)} B"
        count /= 1000
    return f"{count:.3g} EB"  # pragma: no cover


def available_bytes(device: torch.device | str = "cpu") -> int:
    """Memory that can be allocated now: free GPU memory on a CUDA device, else the host's available memory."""
    device = torch.device(device)
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    return min(int(psutil.virtual_memory().available), address_space_left())


def address_space_left() -> int:
    """What this process may still map under its address-space limit (``ulimit -v``, RLIMIT_AS; a job or a shell
    may set one): an allocation beyond it fails whatever the host has free (``--jpeg-size 20000x20000`` under a 6
    GB limit ended in "Unable to allocate 5.96 GiB" with 20 GB free)."""
    limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    if limit == resource.RLIM_INFINITY:
        return 2**63 - 1
    return max(0, limit - psutil.Process().memory_info().vms)


@functools.lru_cache(maxsize=16)
def _layer_outputs(arch: str, num_classes: int, image_size: int, norm: str) -> tuple[int, int]:
    """(elements output by the convolutions and linear layers for one image, parameters) of ``arch`` at
    ``image_size``, computed on the meta device; no outputs counted if the model does not run at that size."""
    from tutorial_lib.engine.models import meta_model

    model = meta_model(arch, num_classes, norm)
    total = 0

    def count(_module, _inputs, output) -> None:
        nonlocal total
        if isinstance(output, torch.Tensor):
            total += output.numel()

    for module in model.modules():
        if isinstance(module, (nn.Conv2d, nn.Linear)):
            module.register_forward_hook(count)
    parameters = sum(p.numel() for p in model.parameters())
    try:
        with torch.no_grad():
            model.eval()(torch.empty(1, 3, image_size, image_size, device="meta"))  # eval: BatchNorm takes 1 image
    except (RuntimeError, ValueError, AssertionError, TypeError):  # e.g. a ViT asserts its one image size
        return 0, parameters
    return total, parameters


def training_bytes(arch: str, num_classes: int, image_size: int, batch_size: int, precision: str = "fp32",
                   norm: str = "batch", momentum: bool = True) -> dict[str, int]:
    """A lower bound of the memory one rank's training step needs, by part (``total`` included). ``momentum``: the
    optimiser keeps a momentum buffer per weight (SGD with momentum > 0, LARS; r43g: convnext_large under a 6 GiB
    limit passed an estimate without it and failed in the SGD step)."""
    outputs, parameters = _layer_outputs(arch, max(int(num_classes), 1), int(image_size), norm)
    parts = {"weights and gradients": 8 * parameters,
             "optimizer state": MOMENTUM_BYTES * parameters if momentum else 0,
             "activations": batch_size * outputs * AMP_BYTES.get(precision, 4),
             "the batch": batch_size * 3 * image_size * image_size * 4}
    return {**parts, "total": sum(parts.values())}


def check_fits(needed: int, available: int, what: str, fix: str, parts: dict[str, int] | None = None) -> None:
    """Raise ConfigError (``what`` starts with the field) when ``needed`` bytes exceed ``available``: one line with
    the estimate, its parts and the memory there is."""
    if needed <= available:
        return
    shown = "; ".join(f"{name} {human_bytes(size)}" for name, size in (parts or {}).items() if size)
    raise ConfigError(f"{what} needs at least {human_bytes(needed)} of memory{f' ({shown})' if shown else ''}, "
                      f"and {human_bytes(available)} is available here; nothing was allocated. Fix: {fix}.")


@functools.lru_cache(maxsize=16)
def classifier_parameters(arch: str, num_classes: int) -> int:
    """Parameters of ``arch``'s classifier that grow with ``num_classes`` (the model's parameters less those of the
    same model with one class; meta device, nothing allocated)."""
    return _layer_outputs(arch, max(int(num_classes), 1), 1, "batch")[1] - _layer_outputs(arch, 1, 1, "batch")[1]


def check_step_fits(arch: str, num_classes: int, image_size: int, batch_size: int, device: torch.device | str,
                    precision: str = "fp32", norm: str = "batch", share: int = 1, flags: bool = False,
                    momentum: bool = True) -> None:
    """Refuse (ConfigError) a training step whose tensors cannot fit in the memory of ``device``, ``share`` steps
    of it at once (ranks sharing a host). The error names the field that makes it too big: ``num_classes`` where
    the classifier's weights, gradients and momentum are the largest part, else ``image_size/batch_size``; as the
    command line's flags (``--num-classes``) where ``flags``. ``momentum``: see :func:`training_bytes`."""
    def name(field: str) -> str:
        return f"--{field.replace('_', '-')}" if flags else field

    parts = training_bytes(arch, num_classes, image_size, batch_size, precision, norm, momentum)
    total = parts.pop("total") * share
    weights = classifier_parameters(arch, num_classes)
    classifier = (8 + (MOMENTUM_BYTES if momentum else 0)) * weights
    on = f"{torch.device(device).type}{f', {share} ranks' if share > 1 else ''}"
    rest = {**parts, "weights and gradients": parts["weights and gradients"] - 8 * weights,
            "optimizer state": parts["optimizer state"] - (MOMENTUM_BYTES * weights if momentum else 0)}
    available = available_bytes(device)
    if total > available and share > 1 and total // share <= available:  # one rank's step fits: the ranks do not
        what = (f"ranks_per_node: {share} ranks sharing this machine, each a training step of {arch} on batches of "
                f"{batch_size} images of {image_size}x{image_size} px ({precision}, {torch.device(device).type}),")
        fix = (f"start at most {max(available // (total // share), 1)} rank(s) here (fewer ranks_per_node or nodes), "
               f"or pass a smaller {name('image_size')} or {name('batch_size')}")
    elif classifier >= max(rest.values()):  # the classifier's share outweighs every other part
        what = (f"{name('num_classes')}: a training step of {arch} with a classifier of {num_classes:,} classes "
                f"(its weights, gradients and optimizer state alone: {human_bytes(classifier)}; {on})")
        fix = f"pass a smaller {name('num_classes')} (ImageNet: 1000)"
    else:
        what = (f"{name('image_size')}/{name('batch_size')}: a training step of {arch} on batches of {batch_size} "
                f"images of {image_size}x{image_size} px ({precision}, {on})")
        fix = f"pass a smaller {name('image_size')} (ImageNet: 224) or {name('batch_size')}"
    check_fits(total, available, what, fix, parts)


def _keeps_momentum(cfg) -> bool:
    return cfg.optimizer == "lars" or cfg.momentum > 0  # LARS keeps its buffer at momentum 0 too


def check_training_fits(cfg, num_classes: int, device: torch.device, ranks_here: int = 1) -> None:
    """:func:`check_step_fits` for a training step of ``cfg`` on ``device`` (on the CPU: ``ranks_here`` ranks of
    this node share its memory)."""
    check_step_fits(cfg.arch, num_classes, cfg.image_size, cfg.batch_size, device, cfg.precision, cfg.norm,
                    share=ranks_here if torch.device(device).type == "cpu" else 1, momentum=_keeps_momentum(cfg))


class StepOutOfMemory(MemoryError):
    """The training step ran out of memory although the estimate made before it fitted (one line: the fields, the
    estimate and the fix)."""


_CPU_ALLOCATOR_FAILURE = re.compile(r"DefaultCPUAllocator: can't allocate memory: you tried to allocate (\d+) bytes")


def step_out_of_memory(cfg, exc: BaseException) -> StepOutOfMemory | None:
    """The one-line error for torch's CPU allocator failing in a training step of ``cfg`` (a RuntimeError with a
    traceback otherwise), or None when ``exc`` is something else. The estimate (:func:`training_bytes`) is a lower
    bound, so a run close to the limit may pass it and still fail here: the line gives the estimate and the fix
    (r43g: convnext_large under a 6 GiB address-space limit)."""
    asked = _CPU_ALLOCATOR_FAILURE.search(str(exc)) if isinstance(exc, RuntimeError) else None
    if asked is None:
        return None
    parts = training_bytes(cfg.arch, cfg.num_classes or 1000, cfg.image_size, cfg.batch_size, cfg.precision,
                           cfg.norm, _keeps_momentum(cfg))
    total = parts.pop("total")
    shown = "; ".join(f"{name} {human_bytes(size)}" for name, size in parts.items() if size)
    return StepOutOfMemory(
        f"image_size/batch_size: a training step of {cfg.arch} on batches of {cfg.batch_size} images of "
        f"{cfg.image_size}x{cfg.image_size} px ran out of memory here: {human_bytes(int(asked[1]))} more could not "
        f"be allocated, beyond the estimate of at least {human_bytes(total)} ({shown}) that fitted at the start "
        f"(the process itself and its data loading need more). Fix: pass a smaller --batch-size or --image-size, "
        "a smaller --arch, or run where more memory is allowed (ulimit -v, the job's memory); then run again.")


def check_training_memory(cfg, device: torch.device, info) -> None:
    """:func:`check_training_fits` on every rank of a job (``info``: its DistInfo), which all refuse together (no
    rank left waiting for one that stopped), before anything is allocated or written."""
    from tutorial_lib.engine import distributed as dist_utils

    problem = None
    try:
        check_training_fits(cfg, cfg.num_classes or 1000, device, dist_utils.env_rank_info()[3])
    except ConfigError as exc:
        problem = exc
    if dist_utils.all_reduce_sum([float(problem is not None)], info, device)[0]:
        raise problem or ConfigError("image_size/batch_size: the training step does not fit in the memory of another "
                                     "rank's node (its error gives the estimate and names the field). Fix: pass a "
                                     "smaller --image-size or --batch-size (or fewer classes).")
