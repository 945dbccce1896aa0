"""The training augmentation's random draws (RandomResizedCrop boxes and flips), both pipelines' one source.

Each image's draws are a pure function of (seed, epoch, dataset index), from a counter-based hash: no
random state lives in a DataLoader worker or a process, so the crops do not depend on which worker (or
how many) handled an image, and a run resumed at an epoch boundary or in the middle of an epoch gets
exactly the crops and flips of an uninterrupted run. The CPU pipeline draws in its workers, the GPU
pipeline in the training process; for the same (seed, epoch, index) both draw the same box and flip.
"""

from __future__ import annotations

import functools
import math

import numpy as np

RATIO = (3 / 4, 4 / 3)  # RandomResizedCrop's default aspect-ratio range
ATTEMPTS = 10  # RandomResizedCrop's tries before it falls back to a center crop
DRAWS = 2 * ATTEMPTS + 3  # uniforms per image: areas, ratios, the position (2) and the flip


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser on uint64 arrays (wrapping arithmetic): a strong integer hash."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


@functools.lru_cache(maxsize=64)
def _epoch_key(seed: int, epoch: int) -> np.ndarray:
    return _mix(_mix(np.array([seed], dtype=np.uint64)) ^ np.uint64(epoch))


@functools.lru_cache(maxsize=8)
def _counters(count: int) -> np.ndarray:
    return _mix(np.arange(1, count + 1, dtype=np.uint64))[None, :]


def uniforms(seed: int, epoch: int, indices, count: int) -> np.ndarray:
    """``count`` uniform [0, 1) numbers per dataset index, a pure function of (seed, epoch, index)."""
    # the per-(seed, epoch) and per-draw parts are cached: the CPU pipeline asks for one image at a time
    per_image = _mix(_epoch_key(seed, epoch) ^ np.asarray(indices, dtype=np.uint64))
    draws = _mix(per_image[:, None] ^ _counters(count))
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


def crops_and_flips(heights, widths, *, seed: int, epoch: int, indices, min_scale: float,
                    hflip: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Per image: its RandomResizedCrop box (top, left, height, width) and whether it is flipped,
    drawn from (seed, epoch, index)."""
    u = uniforms(seed, epoch, indices, DRAWS)
    return crop_boxes(heights, widths, u, min_scale), (u[:, -1] < 0.5) & hflip
