"""The GPU pipeline's crops and resizes, for a whole batch at once (any device; fp16 matmuls on CUDA).

How a batch is resized: every output image is ``Wy @ crop @ Wx^T``, where ``Wy`` and ``Wx`` hold
PIL's antialiased bilinear weights (a triangle filter widened by the downscale factor, the filter
torchvision's RandomResizedCrop and Resize use on PIL images). The crops are copied into one padded
batch, so one batched matmul per axis resizes them all, to a different box each; a flip is ``Wx``
with its rows reversed. Why not ``roi_align`` or ``grid_sample``: both sample bilinearly without
PIL's antialias filter, so downscaled crops would alias and differ from the CPU pipeline's pixels.

Crop and flip draws: :mod:`.draws`, the same as the CPU pipeline's for the same (seed, epoch, index).
"""

from __future__ import annotations

import numpy as np
import torch

from tutorial_lib.engine.input.draws import crops_and_flips

PAD_BUDGET = 2**29  # most elements of one padded crop batch (>= any image under PIL's pixel limit)
PLAN_COLUMNS = 13  # per image: the y plan (6), the x plan (6), the flip


# --------------------------------------------------------------------------- batched resampling
def _center_plan(length: np.ndarray, resized: np.ndarray, crop: int) -> np.ndarray:
    """Per image, one axis of "resize to ``resized``, take the center ``crop``" as a resampling plan."""
    scale = length / resized
    offset = np.round((resized - crop) / 2.0)  # CenterCrop's int(round(...)), half to even like Python
    first = (offset + 0.5) * scale
    last = (offset + crop - 0.5) * scale
    support = np.maximum(scale, 1.0)
    start = np.maximum(np.floor(first - support), 0)
    stop = np.minimum(np.ceil(last + support) + 1, length)
    return np.stack([start, stop - start, np.zeros_like(length), length, offset * scale, scale], axis=1)


def _crop_plan(start: np.ndarray, size: np.ndarray, crop: int) -> np.ndarray:
    """One axis of "crop [start, start+size), resize to ``crop``" (RandomResizedCrop) as a plan."""
    return np.stack([start, size, start, start + size, start, size / crop], axis=1)


def _axis_weights(plan: torch.Tensor, out: int, length: int, flip: torch.Tensor | None) -> torch.Tensor:
    """(N, out, length) resampling weights, PIL's antialiased bilinear filter, one row per output pixel.

    ``plan`` rows: window start and length (the pixels copied), the valid source range [lo, hi), the
    position of output pixel 0's left edge and the scale (source pixels per output pixel).
    """
    start, _, lo, hi, origin, scale = plan.unbind(1)
    centers = origin[:, None] + (torch.arange(out, device=plan.device) + 0.5) * scale[:, None]
    source = start[:, None] + torch.arange(length, device=plan.device) + 0.5  # pixel centers
    support = scale.clamp(min=1.0)[:, None, None]
    weights = (1 - (source[:, None, :] - centers[:, :, None]).abs() / support).clamp(min=0)
    inside = (source >= lo[:, None]) & (source < hi[:, None])
    weights = weights * inside[:, None, :]
    weights = weights / weights.sum(-1, keepdim=True)
    if flip is not None:
        weights = torch.where(flip[:, None, None], weights.flip(1), weights)
    return weights


def batch_plans(heights: np.ndarray, widths: np.ndarray, out: int, *, train: bool, resize_to: int,
                indices=(), seed: int = 0, epoch: int = 0, min_scale: float = 0.08,
                hflip: bool = True) -> np.ndarray:
    """(N, PLAN_COLUMNS) float32 plans: RandomResizedCrop boxes and flips drawn from (seed, epoch,
    index) when ``train``, else torchvision's Resize(resize_to) (short side to ``resize_to``, long side
    ``int(resize_to * long / short)``) and the center crop ``out``."""
    plans = np.zeros((len(heights), PLAN_COLUMNS), dtype=np.float32)
    if train:
        boxes, flips = crops_and_flips(heights, widths, seed=seed, epoch=epoch, indices=indices,
                                       min_scale=min_scale, hflip=hflip)
        boxes = boxes.astype(np.float64)
        plans[:, 0:6] = _crop_plan(boxes[:, 0], boxes[:, 2], out)
        plans[:, 6:12] = _crop_plan(boxes[:, 1], boxes[:, 3], out)
        plans[:, 12] = flips
    else:
        short = np.minimum(heights, widths)
        new_h = np.where(heights <= widths, resize_to, np.floor(resize_to * heights / short))
        new_w = np.where(widths < heights, resize_to, np.floor(resize_to * widths / short))
        plans[:, 0:6] = _center_plan(heights, new_h, out)
        plans[:, 6:12] = _center_plan(widths, new_w, out)
    return plans


def windows(plans: np.ndarray) -> np.ndarray:
    """(N, 4) int rows (y0, rows, x0, cols): the source pixels each plan reads."""
    return plans[:, [0, 1, 6, 7]].astype(np.int64)


def chunks(window: np.ndarray, budget: int = PAD_BUDGET) -> list[tuple[int, int]]:
    """Consecutive (start, stop) ranges of ``window`` rows whose padded batch 3*n*rows*cols stays within
    ``budget`` elements (a single window over it, possible only without PIL's pixel limit, goes alone)."""
    ranges, start, rows, cols = [], 0, 0, 0
    for i, (_, ny, _, nx) in enumerate(window):
        rows, cols = max(rows, ny), max(cols, nx)
        if i > start and 3 * (i + 1 - start) * rows * cols > budget:
            ranges.append((start, i))
            start, rows, cols = i, ny, nx
    return ranges + [(start, len(window))] if len(window) else ranges


def resample(images: list[torch.Tensor], plans: torch.Tensor, window: np.ndarray, out: int,
             budget: int = PAD_BUDGET) -> torch.Tensor:
    """Crop, resize and flip each uint8 CHW image by its plan row: float (N, 3, out, out), values 0-255.

    ``plans`` is on the images' device, ``window`` its :func:`windows` on the host. The windows are
    copied into padded batches (chunked by :func:`chunks`; sort the images by window size first for
    less padding) and resized by two batched matmuls each: fp16 on CUDA (exact for uint8 input, fp32
    accumulation), fp32 on CPU.
    """
    device = plans.device
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    result = torch.empty(len(images), 3, out, out, device=device, dtype=dtype)
    for start, stop in chunks(window, budget):
        part = window[start:stop]
        rows, cols = int(part[:, 1].max()), int(part[:, 3].max())
        padded = torch.zeros(stop - start, 3, rows, cols, dtype=torch.uint8, device=device)
        torch._foreach_copy_([padded[k, :, :ny, :nx] for k, (_, ny, _, nx) in enumerate(part)],
                             [images[start + k][:, y0:y0 + ny, x0:x0 + nx] for k, (y0, ny, x0, nx) in enumerate(part)])
        plan = plans[start:stop]
        wy = _axis_weights(plan[:, 0:6], out, rows, None).to(dtype)
        wx = _axis_weights(plan[:, 6:12], out, cols, plan[:, 12] > 0.5).to(dtype)
        columns = (padded.to(dtype).view(stop - start, 3 * rows, cols) @ wx.transpose(1, 2)).view(
            stop - start, 3, rows, out)
        result[start:stop] = wy[:, None] @ columns
    return result
