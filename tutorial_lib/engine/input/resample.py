"""The GPU pipeline's crops and resizes, for a whole batch at once (any device; fp16 matmuls on CUDA).

How a batch is resized: every output image is ``Wy @ crop @ Wx^T``, where ``Wy`` and ``Wx`` hold
PIL's antialiased bilinear weights (a triangle filter widened by the downscale factor, the filter
torchvision's RandomResizedCrop and Resize use on PIL images). The crops are copied into one padded
batch, so one batched matmul per axis resizes them all, to a different box each; a flip is ``Wx``
with its rows reversed. Why not ``roi_align`` or ``grid_sample``: both sample bilinearly without
PIL's antialias filter, so downscaled crops would alias and differ from the CPU pipeline's pixels.

Crop and flip draws come from a counter-based hash of (seed, epoch, dataset index): no RNG state to
save, and a run resumed in the middle of an epoch gets exactly the crops it would have had.
"""

from __future__ import annotations

import math

import numpy as np
import torch

RATIO = (3 / 4, 4 / 3)  # RandomResizedCrop's default aspect-ratio range
ATTEMPTS = 10  # RandomResizedCrop's tries before it falls back to a center crop
DRAWS = 2 * ATTEMPTS + 3  # uniforms per image: areas, ratios, the position (2) and the flip
PAD_BUDGET = 2**29  # most elements of one padded crop batch (>= any image under PIL's pixel limit)
PLAN_COLUMNS = 13  # per image: the y plan (6), the x plan (6), the flip


# --------------------------------------------------------------------------- random draws
def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser on uint64 arrays (wrapping arithmetic): a strong integer hash."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def uniforms(seed: int, epoch: int, indices, count: int) -> np.ndarray:
    """``count`` uniform [0, 1) numbers per dataset index, a pure function of (seed, epoch, index)."""
    key = _mix(_mix(np.array([seed], dtype=np.uint64)) ^ np.uint64(epoch))
    per_image = _mix(key ^ np.asarray(indices, dtype=np.uint64))
    draws = _mix(per_image[:, None] ^ _mix(np.arange(1, count + 1, dtype=np.uint64))[None, :])
    return (draws >> np.uint64(11)).astype(np.float64) * 2.0**-53


def crop_boxes(heights, widths, u: np.ndarray, min_scale: float) -> np.ndarray:
    """RandomResizedCrop.get_params for many images at once: rows of (top, left, height, width).

    Same algorithm and distribution as torchvision's: up to 10 draws of an area fraction uniform in
    [min_scale, 1] and a log-uniform aspect ratio in [3/4, 4/3]; the first that fits wins and its
    position is uniform; if none fits, a center crop clamped to the ratio range. ``u``: (N, 23).
    """
    height, width = np.asarray(heights, dtype=np.float64), np.asarray(widths, dtype=np.float64)
    area = (height * width)[:, None]
    target = area * (min_scale + (1 - min_scale) * u[:, :ATTEMPTS])
    log_lo, log_hi = math.log(RATIO[0]), math.log(RATIO[1])
    ratio = np.exp(log_lo + (log_hi - log_lo) * u[:, ATTEMPTS:2 * ATTEMPTS])
    w, h = np.round(np.sqrt(target * ratio)), np.round(np.sqrt(target / ratio))
    fits = (w > 0) & (w <= width[:, None]) & (h > 0) & (h <= height[:, None])
    first = fits.argmax(axis=1)
    rows = np.arange(len(height))
    h, w, found = h[rows, first], w[rows, first], fits.any(axis=1)
    top = np.floor(u[:, 2 * ATTEMPTS] * (height - h + 1))
    left = np.floor(u[:, 2 * ATTEMPTS + 1] * (width - w + 1))
    # the fallback of get_params: the whole image, cut to the nearest allowed ratio
    in_ratio = width / height
    fw = np.where(in_ratio > RATIO[1], np.round(height * RATIO[1]), width)
    fh = np.where(in_ratio < RATIO[0], np.round(width / RATIO[0]), height)
    h, w = np.where(found, h, fh), np.where(found, w, fw)
    top = np.where(found, top, (height - h) // 2)
    left = np.where(found, left, (width - w) // 2)
    return np.stack([top, left, h, w], axis=1).astype(np.int64)


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
        u = uniforms(seed, epoch, indices, DRAWS)
        boxes = crop_boxes(heights, widths, u, min_scale).astype(np.float64)
        plans[:, 0:6] = _crop_plan(boxes[:, 0], boxes[:, 2], out)
        plans[:, 6:12] = _crop_plan(boxes[:, 1], boxes[:, 3], out)
        plans[:, 12] = (u[:, -1] < 0.5) & hflip
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
