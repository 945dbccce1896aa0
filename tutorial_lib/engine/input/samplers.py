"""Samplers: which images each rank reads, in which order.

Training batches are sharded with torch's DistributedSampler (shuffled per epoch via set_epoch).
Validation uses :class:`ShardSampler`, which gives each image to exactly one rank, because
DistributedSampler pads the last shard with duplicates and would count some images twice.
"""

from __future__ import annotations

from torch.utils.data import Sampler


class ShardSampler(Sampler[int]):
    """Indices ``rank, rank + world, ...`` of a dataset, in order, without padding.

    Written by hand because DistributedSampler always pads shards to equal length (duplicating
    images), which would make distributed top-1 count some validation images twice.
    """

    def __init__(self, length: int, rank: int, world_size: int):
        self.indices = list(range(rank, length, world_size))

    def __iter__(self):
        return iter(self.indices)

    def __len__(self) -> int:
        return len(self.indices)


class SkipFirst(Sampler[int]):
    """Wrap a sampler and drop its first ``skip`` indices (resume in the middle of an epoch)."""

    def __init__(self, sampler: Sampler, skip: int = 0):
        self.sampler, self.skip = sampler, skip

    def __iter__(self):
        for position, index in enumerate(self.sampler):
            if position >= self.skip:
                yield index

    def __len__(self) -> int:
        return max(0, len(self.sampler) - self.skip)

    def set_epoch(self, epoch: int) -> None:
        """Forward to the wrapped DistributedSampler."""
        self.sampler.set_epoch(epoch)
