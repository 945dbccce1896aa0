"""Waiting for a disk to go quiet before a timed run that writes to it.

On a disk mounted with online ``discard`` (this development machine's ext4), deleting a million files keeps
the disk busy for minutes after ``rm`` returns, and a run timed then took 3-5x as long as the same run on a
quiet disk (measured at ImageNet's 1.33 million files: GNU tar 316 s right after a delete, 57 s without one).
A side-by-side comparison therefore waits, before each timed run, until the disk has done (almost) no I/O for
a few seconds, read from the block device's ``stat`` file in sysfs (its ``io_ticks``: milliseconds busy).
"""

from __future__ import annotations

import os
import time
from pathlib import Path


def busy_ms(path: str | os.PathLike) -> int | None:
    """Milliseconds the block device holding ``path`` has spent doing I/O since boot (``io_ticks``); None where
    sysfs does not say (not Linux, a network or virtual file system)."""
    device = os.stat(path).st_dev
    stat = Path(f"/sys/dev/block/{os.major(device)}:{os.minor(device)}/stat")
    try:
        return int(stat.read_text().split()[9])
    except (OSError, IndexError, ValueError):
        return None


def wait_for_quiet_disk(path: str | os.PathLike, quiet_s: int = 5, busy_share: float = 0.05,
                        timeout_s: float = 900, clock=time.monotonic, sleep=time.sleep) -> float:
    """Sync, then wait until the disk holding ``path`` has been busy less than ``busy_share`` of each second for
    ``quiet_s`` seconds in a row (at most ``timeout_s``); returns the seconds waited. Returns at once where the
    disk's activity cannot be read."""
    os.sync()
    began, calm = clock(), 0
    last = busy_ms(path)
    while last is not None and calm < quiet_s and clock() - began < timeout_s:
        sleep(1.0)
        now = busy_ms(path)
        calm = calm + 1 if now - last < busy_share * 1000 else 0
        last = now
    return clock() - began


def drop_page_cache() -> bool:
    """Write out and drop the page cache and the cached inodes and dentries (root only, Linux): the next run reads
    from the disk and starts with the memory the previous one filled given back (after a million files written,
    the next run may otherwise pay for reclaiming it); False where they cannot be dropped."""
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError:
        return False
    return True


def settle(path: str | os.PathLike, cold_cache: bool = False, quiet_s: int = 5) -> dict:
    """Before a timed run that writes under ``path``: wait for a quiet disk, then (``cold_cache``) drop the caches;
    returns what the run's record keeps of it (``disk_wait_s``, ``cold_cache``: whether they were dropped)."""
    waited = wait_for_quiet_disk(path, quiet_s)
    return {"disk_wait_s": waited, "cold_cache": drop_page_cache() if cold_cache else False}
