"""A durations record of a test run, as one JSON line: the slowest tests, the total, the load and the machine.

Enabled by an environment variable (``tests/conftest.py`` calls the hooks below)::

    TUTORIAL_DURATIONS=results/test_durations.jsonl make test

Each run appends one line: ``{"commit", "dirty", "nproc", "load_start", "load_end", "total_s", "tests",
"outcomes", "workers", "slowest": [{"test", "s"}, ...30], "files": {"tests/test_x.py": s, ...}}``. A test's
seconds are its setup, call and teardown together (a module-scoped fixture counts in the first test that asks
for it). Under pytest-xdist only the controller writes the line; the total is the wall time of the whole session.

``make test`` hands the test files to its pytest-xdist workers heaviest first, by the ``files`` seconds of the
last line of ``results/test_durations.jsonl`` (:func:`heaviest_first`; a file the record does not know goes
first, as it may be heavy): a long file started last would leave one worker running it alone at the end.
pytest-xdist's own order (``--loadscope-reorder``, the default, which the Makefile turns off) goes by the number
of tests in a file, which put the few long tests of the notebooks and the browser last.

The compat record (``make test-compat``, which sets ``TUTORIAL_COMPAT_RECORD``) is the same count in the form
``results/compat.jsonl`` keeps, one line per torch/torchvision pair and run: ``{"torch", "torchvision", "python",
"numpy", "passed", "failed", "skipped", "seconds", "install_s", "load", "nproc", "commit", "dirty", "time"}``
(:class:`CompatRecord`; ``install_s`` is what the Makefile measured when it made the venv, if it did).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

ENV_VAR = "TUTORIAL_DURATIONS"
COMPAT_ENV_VAR = "TUTORIAL_COMPAT_RECORD"
SLOWEST = 30
INSTALL_SECONDS = ".install_seconds"  # written into a compat venv by the Makefile (test-compat's venv rule)


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
            "files": file_seconds(self.seconds),
        }

    def write(self, workers: int) -> dict:
        """Append :meth:`record` to the file as one line; returns it."""
        record = self.record(workers)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as handle:
            handle.write(json.dumps(record) + "\n")
        return record

    @staticmethod
    def summary(written: dict) -> str:
        """What the session prints about the record it appended."""
        return f"durations record: {written['tests']} tests, {written['total_s']} s"

    def _git(self, *args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=self.root, capture_output=True, text=True,
                                  timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""


def test_file(nodeid: str) -> str:
    """The file of a test id (``tests/test_x.py::test_y[a]`` -> ``tests/test_x.py``), the scope that
    ``--dist loadfile`` keeps on one worker."""
    return nodeid.split("::", 1)[0]


def file_seconds(seconds: dict[str, float]) -> dict[str, float]:
    """``{test id: seconds}`` summed per test file, heaviest first."""
    totals: dict[str, float] = defaultdict(float)
    for nodeid, spent in seconds.items():
        totals[test_file(nodeid)] += spent
    return {name: round(total, 1) for name, total in sorted(totals.items(), key=lambda item: -item[1])}


def recorded_file_seconds(path: Path) -> dict[str, float]:
    """The ``files`` of the last line of a durations record that has them; {} without one (or a damaged file:
    the order is then pytest's own, nothing fails)."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return {}
    for line in reversed(lines):
        try:
            files = json.loads(line).get("files")
        except (ValueError, AttributeError):
            continue
        if isinstance(files, dict):
            return {name: float(s) for name, s in files.items() if isinstance(s, (int, float))}
    return {}


def heaviest_first(items: list, seconds: dict[str, float]) -> list:
    """``items`` (pytest's, with ``nodeid``) grouped by file, the files in order of ``seconds`` (heaviest first;
    files without a figure first of all, in their collection order), each file's own items in their order."""
    order: dict[str, int] = {}
    for item in items:
        order.setdefault(test_file(item.nodeid), len(order))
    known = sorted((name for name in order if name in seconds), key=lambda name: -seconds[name])
    rank = {name: position for position, name in
            enumerate([name for name in order if name not in seconds] + known)}
    return sorted(items, key=lambda item: rank[test_file(item.nodeid)])  # stable: a file keeps its order


class CompatRecord(DurationsRecord):
    """The same counts as one line of ``results/compat.jsonl``: which pair ran, what passed, how long it took."""

    def record(self, workers: int) -> dict:
        """The compat line of the session so far (``workers`` is not part of it)."""
        import numpy
        import torch
        import torchvision

        install = Path(sys.prefix) / INSTALL_SECONDS
        return {
            "torch": torch.__version__, "torchvision": torchvision.__version__,
            "python": platform.python_version(), "numpy": numpy.__version__,
            "passed": self.outcomes["passed"], "failed": self.outcomes["failed"],
            "skipped": self.outcomes["skipped"],
            "seconds": round(time.monotonic() - self.started, 1),
            "install_s": int(install.read_text()) if install.is_file() else None,
            "load": {"start": [round(x, 2) for x in self.load_start], "end": [round(x, 2) for x in os.getloadavg()]},
            "nproc": os.cpu_count(),
            "commit": self._git("rev-parse", "HEAD"),
            "dirty": bool(self._git("status", "--porcelain", "--untracked-files=no")),
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }

    @staticmethod
    def summary(written: dict) -> str:
        """What the session prints about the line it appended."""
        return (f"compat record: torch {written['torch']}, torchvision {written['torchvision']}: "
                f"{written['passed']} passed, {written['failed']} failed, {written['skipped']} skipped, "
                f"{written['seconds']} s")


_KINDS = (("durations_record", ENV_VAR, DurationsRecord), ("compat_record", COMPAT_ENV_VAR, CompatRecord))


def start(config, root: Path) -> None:
    """At session start: attach a :class:`DurationsRecord` to ``config`` if ``TUTORIAL_DURATIONS`` names a file,
    and a :class:`CompatRecord` if ``TUTORIAL_COMPAT_RECORD`` does (on the controller only: xdist workers send
    their reports to it)."""
    if hasattr(config, "workerinput"):
        return
    for attribute, variable, kind in _KINDS:
        target = os.environ.get(variable)
        if target:
            setattr(config, attribute, kind(Path(target) if Path(target).is_absolute() else root / target, root))


def _kept(config) -> list[DurationsRecord]:
    return [record for attribute, _, _ in _KINDS if (record := getattr(config, attribute, None)) is not None]


def add(config, report) -> None:
    """Count one report in each record being kept."""
    for record in _kept(config):
        record.add(report)


def finish(config) -> None:
    """Append each record being kept."""
    for record in _kept(config):
        workers = getattr(config.option, "numprocesses", None) or 0
        written = record.write(int(workers) if str(workers).isdigit() else 0)
        print(f"\n{record.summary(written)} -> {record.path}")
