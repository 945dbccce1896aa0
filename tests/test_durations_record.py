"""The durations record (tests/durations_record.py): one JSON line per run, the slowest tests first."""

from __future__ import annotations

import json
from types import SimpleNamespace

import durations_record


def report(nodeid: str, when: str, duration: float, outcome: str = "passed"):
    return SimpleNamespace(nodeid=nodeid, when=when, duration=duration, outcome=outcome)


def test_record_sums_the_phases_and_keeps_the_30_slowest(tmp_path):
    record = durations_record.DurationsRecord(tmp_path / "results" / "durations.jsonl", tmp_path)
    for i in range(40):
        for when, seconds in (("setup", 0.5), ("call", float(i)), ("teardown", 0.25)):
            outcome = "failed" if (i, when) == (3, "call") else "passed"
            record.add(report(f"tests/test_x.py::test_{i}", when, seconds, outcome))
    record.add(report("tests/test_x.py::test_broken_fixture", "setup", 0.1, "failed"))
    record.write(workers=2)
    record.write(workers=2)  # a second run appends a second line

    lines = (tmp_path / "results" / "durations.jsonl").read_text().splitlines()
    assert len(lines) == 2
    written = json.loads(lines[0])
    assert written["tests"] == 41 and written["workers"] == 2
    assert written["outcomes"] == {"passed": 39, "failed": 2}
    assert len(written["slowest"]) == 30
    assert written["slowest"][0] == {"test": "tests/test_x.py::test_39", "s": 39.75}
    assert [entry["s"] for entry in written["slowest"]] == sorted((i + 0.75 for i in range(10, 40)), reverse=True)
    assert written["nproc"] >= 1 and len(written["load_start"]) == 3 and written["total_s"] >= 0
    assert {"commit", "dirty", "time", "load_end"} <= written.keys()


def test_only_kept_when_the_variable_names_a_file(tmp_path, monkeypatch):
    config = SimpleNamespace()
    monkeypatch.delenv(durations_record.ENV_VAR, raising=False)
    durations_record.start(config, tmp_path)
    durations_record.add(config, report("t", "call", 1.0))
    durations_record.finish(config)
    assert not hasattr(config, "durations_record")

    monkeypatch.setenv(durations_record.ENV_VAR, "out/d.jsonl")  # relative to the checkout
    worker = SimpleNamespace(workerinput={})  # an xdist worker leaves the record to the controller
    durations_record.start(worker, tmp_path)
    assert not hasattr(worker, "durations_record")
    durations_record.start(config, tmp_path)
    assert config.durations_record.path == tmp_path / "out" / "d.jsonl"


def test_the_compat_record_is_one_line_naming_the_pair_and_its_counts(tmp_path, monkeypatch):
    """TUTORIAL_COMPAT_RECORD (make test-compat) appends the line results/compat.jsonl keeps, with the venv's
    install seconds where the Makefile wrote them."""
    import platform
    import sys

    import torch
    import torchvision

    monkeypatch.setenv(durations_record.COMPAT_ENV_VAR, "results/compat.jsonl")
    monkeypatch.delenv(durations_record.ENV_VAR, raising=False)
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    (tmp_path / durations_record.INSTALL_SECONDS).write_text("355\n")
    config = SimpleNamespace(option=SimpleNamespace(numprocesses=2))
    durations_record.start(config, tmp_path)
    assert not hasattr(config, "durations_record")
    for i, outcome in enumerate(("passed", "passed", "failed", "skipped")):
        durations_record.add(config, report(f"t{i}", "call", 1.0, outcome))
    durations_record.finish(config)

    [line] = (tmp_path / "results" / "compat.jsonl").read_text().splitlines()
    written = json.loads(line)
    assert (written["torch"], written["torchvision"]) == (torch.__version__, torchvision.__version__)
    assert written["python"] == platform.python_version() and written["install_s"] == 355
    assert (written["passed"], written["failed"], written["skipped"]) == (2, 1, 1)
    assert written["seconds"] >= 0 and len(written["load"]["start"]) == len(written["load"]["end"]) == 3
    assert {"commit", "dirty", "numpy", "nproc", "time"} <= written.keys()


def test_the_record_sums_each_file_and_make_test_starts_the_heaviest_files_first(tmp_path):
    """pytest-xdist's default order (--loadscope-reorder: the most tests first) left the few long tests of the
    notebooks and the browser to the end, one worker running them alone; the files now go heaviest first by
    the last record's per-file seconds, a file the record does not know before them, each file in its order."""
    record = durations_record.DurationsRecord(tmp_path / "d.jsonl", tmp_path)
    for nodeid, seconds in (("tests/test_many.py::a", 1.0), ("tests/test_many.py::b", 2.0),
                            ("build/nbval/01.ipynb::Cell 1", 50.0), ("tests/test_few.py::x[1]", 20.0)):
        record.add(report(nodeid, "call", seconds))
    record.write(workers=2)
    (tmp_path / "d.jsonl").write_text((tmp_path / "d.jsonl").read_text() + "not json\n")  # a damaged last line
    files = durations_record.recorded_file_seconds(tmp_path / "d.jsonl")
    assert files == {"build/nbval/01.ipynb": 50.0, "tests/test_few.py": 20.0, "tests/test_many.py": 3.0}

    collected = [SimpleNamespace(nodeid=n) for n in ("tests/test_many.py::a", "tests/test_many.py::b",
                                                     "tests/test_new.py::t", "tests/test_few.py::x[1]",
                                                     "build/nbval/01.ipynb::Cell 1", "build/nbval/01.ipynb::Cell 2")]
    ordered = [item.nodeid for item in durations_record.heaviest_first(collected, files)]
    assert ordered == ["tests/test_new.py::t", "build/nbval/01.ipynb::Cell 1", "build/nbval/01.ipynb::Cell 2",
                       "tests/test_few.py::x[1]", "tests/test_many.py::a", "tests/test_many.py::b"]
    assert durations_record.recorded_file_seconds(tmp_path / "missing.jsonl") == {}
