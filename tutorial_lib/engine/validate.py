"""The numeric settings' ranges: every float checked for finiteness and its range, every count for its sign.

Called by :func:`tutorial_lib.engine.config.validate`. ``nan`` passes every ``<``/``>`` comparison as False,
so each float is first checked with :func:`math.isfinite`: ``--base-lr nan``, ``inf`` and ``--momentum nan``
are refused here instead of reaching the optimiser.
"""

from __future__ import annotations

import math

from tutorial_lib.engine.errors import fail

# float fields: (low, low included, high, high included, an example for the fix). None: no bound.
FLOAT_RANGES = {
    "base_lr": (0.0, False, None, False, "--base-lr 0.1 (per lr_reference_batch images)"),
    "min_crop_scale": (0.0, False, 1.0, True, "--min-crop-scale 0.08"),
    "warmup_epochs": (0.0, True, None, False, "--warmup-epochs 5 (Goyal et al.) or 0 to turn warmup off"),
    "warmup_start_factor": (0.0, False, 1.0, True, "--warmup-start-factor 0.1"),
    "lr_decay": (0.0, False, 1.0, True, "--lr-decay 0.1"),
    "momentum": (0.0, True, 1.0, False, "--momentum 0.9"),
    "weight_decay": (0.0, True, 1.0, False, "--weight-decay 1e-4"),
    "lars_trust_coefficient": (0.0, False, 1.0, True, "--lars-trust-coefficient 0.001"),
    "label_smoothing": (0.0, True, 1.0, False, "--label-smoothing 0.1"),
}
POSITIVE_INTS = ("epochs", "batch_size", "image_size", "lr_reference_batch", "log_every", "bucket_cap_mb",
                 "synthetic_images", "prefetch")
NON_NEGATIVE_INTS = ("workers", "max_steps_per_epoch", "stop_after_epochs", "num_classes", "seed")


def _interval(low, low_in, high, high_in) -> str:
    left = "[" if low_in else "("
    right = "]" if high_in else ")"
    return f"{left}{low:g}, {'inf' if high is None else f'{high:g}'}{right}"


def check_float(name: str, value: float, low, low_in: bool, high, high_in: bool, example: str) -> None:
    """Raise ConfigError unless ``value`` is a finite number in the interval ``low..high``."""
    interval = _interval(low, low_in, high, high_in)
    if not math.isfinite(value):
        fail(name, f"must be a finite number in {interval}, got {value}", f"pass e.g. {example}")
    too_low = low is not None and (value < low or (value == low and not low_in))
    too_high = high is not None and (value > high or (value == high and not high_in))
    if too_low or too_high:
        fail(name, f"must be in {interval}, got {value:g}", f"pass e.g. {example}")


def check_numbers(cfg) -> None:
    """Check every numeric field of ``cfg`` (a TrainConfig whose types are already checked)."""
    for name, (low, low_in, high, high_in, example) in FLOAT_RANGES.items():
        check_float(name, getattr(cfg, name), low, low_in, high, high_in, example)
    for name in POSITIVE_INTS:
        if getattr(cfg, name) <= 0:
            fail(name, f"must be a positive integer, got {getattr(cfg, name)}",
                 f"pass --{name.replace('_', '-')} with a value > 0")
    for name in NON_NEGATIVE_INTS:
        value = getattr(cfg, name)
        if not isinstance(value, str) and value < 0:  # the one str a checked int field holds is "auto"
            fail(name, f"must be >= 0, got {value}",
                 "pass 0, a positive integer or auto" if name == "workers" else "pass 0 or a positive integer")
    if cfg.warmup_epochs > cfg.epochs:
        fail("warmup_epochs", f"must be between 0 and epochs ({cfg.epochs}), got {cfg.warmup_epochs:g}",
             "pass e.g. --warmup-epochs 5 (Goyal et al.) or 0 to turn warmup off")
    if sorted(cfg.lr_milestones) != cfg.lr_milestones or any(m <= 0 for m in cfg.lr_milestones):
        fail("lr_milestones", f"must be increasing positive epochs, got {cfg.lr_milestones}",
             "pass e.g. --lr-milestones 30,60,80")
