"""An epoch's running sums (loss, images, skipped images and steps, seconds), carried in the checkpoint across a stop.

A run stopped in the middle of an epoch saves the sums of the steps it did; the resumed run adds its own, so the
epoch's ``train_loss``, ``epoch_time`` and ``images_per_sec`` cover the whole epoch as if it had never stopped
(``epoch_time`` counts training time only, not the time between the stop and the resume). A checkpoint written
before the sums were kept has none: the epoch's figures then cover the resumed steps only, and the epoch event
says so (``partial``, ``train_steps``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass
class EpochTally:
    """What an epoch's figures are computed from; ``first_step`` > 0 marks sums that miss the epoch's start."""

    loss_sum: float = 0.0  # sum of the logged mean losses (mean over ranks), each weighted by its steps
    loss_steps: int = 0
    images: int = 0  # images trained on, all ranks together
    skipped: int = 0  # images not trained on (unreadable, or on a skipped step), all ranks together
    skipped_steps: int = 0  # steps skipped by every rank because one had no usable image (the same on every rank)
    seconds: float = 0.0  # training time of the parts of the epoch done so far
    first_step: int = 0  # the first step of the epoch these sums include (0: all of them)

    @classmethod
    def for_epoch(cls, step_in_epoch: int, saved: dict | None) -> EpochTally:
        """The sums to continue: fresh at an epoch's start, the checkpoint's in the middle of an epoch, or (a
        checkpoint without them) empty sums that start at ``step_in_epoch``."""
        if step_in_epoch == 0:
            return cls()
        if saved is None:
            return cls(first_step=step_in_epoch)
        return cls(**saved)

    def add_loss(self, mean_loss: float, steps: int) -> None:
        """Count ``steps`` steps whose mean loss (over steps and ranks) was ``mean_loss``."""
        self.loss_sum += mean_loss * steps
        self.loss_steps += steps

    def add_part(self, images: float, skipped: float, seconds: float) -> None:
        """Count a part of the epoch (up to a stop, or to its end): its images, skipped images and time."""
        self.images += int(images)
        self.skipped += int(skipped)
        self.seconds += seconds

    def as_dict(self) -> dict:
        """Plain numbers, for the checkpoint."""
        return dataclasses.asdict(self)

    def figures(self, steps_per_epoch: int) -> dict:
        """The epoch event's training figures: mean loss, time, images/s, the images consumed (``train_images``:
        trained on or skipped as unreadable, all ranks), skipped images, and the steps they cover (``partial``
        when they miss the epoch's first steps)."""
        return {"train_loss": self.loss_sum / max(self.loss_steps, 1), "epoch_time": self.seconds,
                "images_per_sec": self.images / self.seconds if self.seconds > 0 else 0.0,
                "train_images": self.images + self.skipped, "skipped_images": self.skipped,
                "skipped_steps": self.skipped_steps,
                "train_steps": steps_per_epoch - self.first_step,
                "partial": self.first_step > 0}
