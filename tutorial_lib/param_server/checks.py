"""The parameter-server experiment's settings checked before any process starts (one line naming the setting)."""

from __future__ import annotations

from tutorial_lib.numbers import finite, shown

DIGITS = 1797  # scikit-learn's bundled set
MOST_WORKERS = 15  # with the server 16 processes, what a job may always start on one machine (MIN_LOCAL_RANKS)
MOST_STEPS = 100_000


class ExperimentError(ValueError):
    """A setting no experiment can run with: one line naming it and the fix."""


def check_experiment(cfg, staleness: tuple = (0,), names: dict | None = None) -> None:
    """Raise :class:`ExperimentError` for the first setting of ``cfg`` (or a staleness bound) no run can use, before
    any process starts: whole numbers in range, a global batch the training digits hold, a finite positive learning
    rate, a straggler probability in [0, 1]. ``names`` shows a field under another name (the command's flags, the
    notebook's parameters)."""
    names = names or {}
    train_images = DIGITS - cfg.test_images if isinstance(cfg.test_images, int) else DIGITS

    def refuse(field: str, value, rule: str, example) -> None:
        raise ExperimentError(f"{names.get(field, field)}: {shown(value):.60} {rule}. Fix: e.g. "
                              f"{names.get(field, field)} {example}.")

    # test_images first: the batch's range follows from it (r43w: test_images 1797 was blamed on per_worker_batch)
    wholes = {"test_images": (1, DIGITS - 1, 297), "workers": (1, MOST_WORKERS, 2), "steps": (1, MOST_STEPS, 60),
              "per_worker_batch": (1, train_images, 32), "hidden": (1, 4096, 32), "seed": (0, 2**32 - 1, 0)}
    for field, (low, high, example) in wholes.items():
        value = getattr(cfg, field)
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
            refuse(field, value, f"is not a whole number from {low:,} to {high:,}", example)
    for bound in staleness:
        if not isinstance(bound, int) or isinstance(bound, bool) or not 0 <= bound <= MOST_STEPS:
            refuse("staleness", bound, f"is not a whole number from 0 to {MOST_STEPS:,}", 1)
    if cfg.workers * cfg.per_worker_batch > train_images:
        refuse("per_worker_batch", cfg.per_worker_batch, f"times {cfg.workers} workers is more than the "
               f"{train_images:,} training digits", train_images // cfg.workers)
    reals = {"lr": (0.0, 1e6, 0.5, False), "straggler_delay_s": (0.0, 60.0, 0.02, True),
             "straggler_prob": (0.0, 1.0, 0.2, True)}
    for field, (low, high, example, zero) in reals.items():
        value = getattr(cfg, field)
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not number or not finite(value) or not (low <= value if zero else low < value) or value > high:
            refuse(field, value, f"is not a number {'from' if zero else 'above'} {low:g} {'to' if zero else 'up to'} "
                   f"{high:g}", example)
