"""The random streams of a training process: seeded per epoch, saved in checkpoints, restored on resume."""

from __future__ import annotations

import random

import numpy as np
import torch


def seed_epoch(seed: int, epoch: int, rank: int) -> None:
    """Seed every RNG from (seed, epoch, rank) so each epoch's augmentation is reproducible."""
    value = (seed * 1_000_003 + epoch * 1_009 + rank) % (2**31)
    random.seed(value)
    np.random.seed(value)
    torch.manual_seed(value)


def rng_state() -> dict:
    """This process's RNG states (saved in checkpoints for exact mid-epoch resume), as tensors and plain
    values only, so the checkpoint loads with ``torch.load(weights_only=True)``."""
    name, keys, position, has_gauss, gauss = np.random.get_state()
    state = {"torch": torch.get_rng_state(), "python": random.getstate(),
             "numpy": [name, torch.from_numpy(keys.astype(np.int64)), int(position), int(has_gauss), float(gauss)]}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    """Restore states saved by :func:`rng_state`."""
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    name, keys, position, has_gauss, gauss = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), position, has_gauss, gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
