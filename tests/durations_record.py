"""A durations record of a test run, as one JSON line: the slowest tests, the total, the load and the machine.

Enabled by an environment variable (``tests/conftest.py`` calls the hooks below)::

    TUTORIAL_DURATIONS=results/test_durations.jsonl make test

Each run appends one line: ``{"commit", "dirty", "nproc", "load_start", "load_end", "total_s", "tests",
"outcomes", "workers", "slowest": [{"test", "s"}, ...30]}``. A test's seconds are its setup, call and teardown
together (a module-scoped fixture counts in the first test that asks for it). Under pytest-xdist only the
controller writes the line; the total is the wall time of the whole session.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections import Counter, defaultdict
from pathlib import Path

ENV_VAR = "TUTORIAL_DURATIONS"
SLOWEST = 30


class DurationsRecord:
    """Collects each test's seconds from pytest's reports and appends the record at the end of the session."""

    def __init__(self, path: Path, root: Path):
        self.path, self.root = path, root
        self.started = time.monotonic()
        self.load_start = os.getloadavg()
        self.seconds: dict[str, float] = defaultdict(float)
        self.outcomes: Counter = Counter()

    def add(self, report) -> None:
        """One phase (setup, call or teardown) of one test, from ``pytest_runtest_logreport``."""
        self.seconds[report.nodeid] += report.duration
        if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
            self.outcomes[report.outcome] += 1

    def record(self, workers: int) -> dict:
        """The JSON record of the session so far."""
        slowest = sorted(self.seconds.items(), key=lambda item: item[1], reverse=True)[:SLOWEST]
        return {
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "commit": self._git("rev-parse", "HEAD"),
            "dirty": bool(self._git("status", "--porcelain", "--untracked-files=no")),
            "nproc": os.cpu_count(),
            "load_start": [round(x, 2) for x in self.load_start],
            "load_end": [round(x, 2) for x in os.getloadavg()],
            "workers": workers,
            "total_s": round(time.monotonic() - self.started, 1),
            "tests": len(self.seconds),
            "outcomes": dict(self.outcomes),
            "slowest": [{"test": nodeid, "s": round(seconds, 2)} for nodeid, seconds in slowest],
        }

    def write(self, workers: int) -> dict:
        """Append :meth:`record` to the file as one line; returns it."""
        record = self.record(workers)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as handle:
            handle.write(json.dumps(record) + "\n")
        return record

    def _git(self, *args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=self.root, capture_output=True, text=True,
                                  timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""


def start(config, root: Path) -> None:
    """At session start: attach a :class:`DurationsRecord` to ``config`` if ``TUTORIAL_DURATIONS`` names a file
    (on the controller only: xdist workers send their reports to it)."""
    target = os.environ.get(ENV_VAR)
    if target and not hasattr(config, "workerinput"):
        config.durations_record = DurationsRecord(Path(target) if Path(target).is_absolute() else root / target,
                                                  root)


def add(config, report) -> None:
    """Count one report if a record is being kept."""
    if getattr(config, "durations_record", None) is not None:
        config.durations_record.add(report)


def finish(config) -> None:
    """Append the record if one is being kept."""
    record = getattr(config, "durations_record", None)
    if record is not None:
        workers = getattr(config.option, "numprocesses", None) or 0
        written = record.write(int(workers) if str(workers).isdigit() else 0)
        print(f"\ndurations record: {written['tests']} tests, {written['total_s']} s -> {record.path}")
