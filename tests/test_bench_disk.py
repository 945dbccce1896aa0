"""The scale benchmark's wait for a quiet disk (:mod:`tutorial_lib.bench.disk`)."""

from __future__ import annotations

import itertools
import os
import sys
from pathlib import Path

import pytest

from tutorial_lib.bench import disk


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def _wait(monkeypatch, busy_per_second, **options):
    ticks = itertools.accumulate(itertools.chain([0], busy_per_second, itertools.repeat(0)))
    monkeypatch.setattr(disk, "busy_ms", lambda path: next(ticks))
    clock = FakeClock()
    return disk.wait_for_quiet_disk(".", clock=clock, sleep=clock.sleep, **options)


def test_a_quiet_disk_is_waited_on_for_the_quiet_seconds_only(monkeypatch):
    assert _wait(monkeypatch, [], quiet_s=5) == 5


def test_a_busy_disk_is_waited_on_until_it_has_been_quiet_long_enough(monkeypatch):
    # busy for 10 s, one quiet second, busy again for 3 s, then quiet: 10 + 1 + 3 + 5
    assert _wait(monkeypatch, [900] * 10 + [0] + [500] * 3, quiet_s=5) == 19


def test_a_disk_busy_for_ever_is_waited_on_until_the_timeout(monkeypatch):
    monkeypatch.setattr(disk, "busy_ms", lambda path, ticks=itertools.count(0, 1000): next(ticks))
    clock = FakeClock()
    assert disk.wait_for_quiet_disk(".", timeout_s=30, clock=clock, sleep=clock.sleep) == 30


@pytest.mark.skipif(sys.platform != "linux", reason="io_ticks come from Linux's sysfs; run on Linux")
def test_the_busy_time_of_the_disk_is_read_where_sysfs_has_the_device_and_unknown_elsewhere(tmp_path):
    device = os.stat(tmp_path).st_dev
    listed = Path(f"/sys/dev/block/{os.major(device)}:{os.minor(device)}/stat").is_file()
    before = disk.busy_ms(tmp_path)
    with open(tmp_path / "written", "wb") as file:
        file.write(os.urandom(1 << 20))
        os.fsync(file.fileno())
    after = disk.busy_ms(tmp_path)
    if listed:
        assert isinstance(before, int) and after >= before
    else:  # an overlay or tmpfs: no block device to ask, and the wait returns at once
        assert before is None and after is None
        assert disk.wait_for_quiet_disk(tmp_path) < 1


def test_settle_waits_then_drops_the_caches_only_when_asked_and_says_whether_it_could(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(disk, "wait_for_quiet_disk", lambda path, quiet_s: calls.append(("wait", quiet_s)) or 1.5)
    monkeypatch.setattr(disk, "drop_page_cache", lambda: calls.append(("drop",)) or True)
    assert disk.settle(tmp_path) == {"disk_wait_s": 1.5, "cold_cache": False} and calls == [("wait", 5)]
    assert disk.settle(tmp_path, cold_cache=True, quiet_s=0) == {"disk_wait_s": 1.5, "cold_cache": True}
    assert calls[1:] == [("wait", 0), ("drop",)]  # the disk goes quiet first, then the caches are dropped


def test_the_caches_are_not_dropped_where_the_kernel_refuses(monkeypatch):
    def refused(self, text):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(disk.Path, "write_text", refused)
    assert disk.drop_page_cache() is False
