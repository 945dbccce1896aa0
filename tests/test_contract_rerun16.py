"""What the fifteenth re-run of issue 43 (/work/wt/notes/r43v-report.md) found at 8d79f77, each failing on the code
before (checked by reverting the library change):

* W1: a course parameter of 309 digits or more (over float's range): ``math.isfinite`` of the int raised
  OverflowError, a traceback;
* W2: ``bench e2e --steps`` or ``--warmup`` of 309 digits: ``images / rate`` raised OverflowError; at 30 digits the
  refusal printed a 300-character number of hours;
* W3: ``bench data`` without ``--workers`` counted one setting where it measures the device's default list (and
  the GPU input pipeline), so three hours of rounds were accepted and ran, printing nothing;
* W4 (``python -m tutorial_lib.param_server``): in tests/test_param_server.py.
"""

from __future__ import annotations

import re

import pytest

from tests.conftest import command_in_process
from tests.test_contract_rerun2 import _one_line
from tutorial_lib.exits import EXIT_REFUSED
from tutorial_lib.numbers import finite

HUGE = "9" * 400  # past float's range: 1.8e308


@pytest.mark.parametrize("only, name, value", [
    ("01", "bench_warmup", HUGE), ("01", "bench_min_time", HUGE), ("01", "workers_list", f"[{HUGE}]"),
    ("02", "classes", HUGE), ("03", "exact_steps", HUGE), ("00", "n_samples", HUGE), ("03", "image_size", HUGE),
    ("02", "classes", str(2**63)),
    # the parameter-server experiment's settings, checked as it checks them (before: 07 ran up to its cell)
    ("07", "ps_workers", "100"), ("07", "ps_batch", "1000"), ("07", "straggler_prob", "2.0"),
])
def test_course_numbers_past_what_a_count_can_be_are_refused_naming_the_parameter(tmp_path, monkeypatch, only, name,
                                                                                  value):
    from tutorial_lib.course.runner import main

    monkeypatch.chdir(tmp_path)
    result = command_in_process(main, ["--only", only, "-p", name, value, "-p", "backend", "local", "--out", "out"])
    assert result.returncode == EXIT_REFUSED, result
    line = _one_line(result.stderr, f"parameters: {name}")
    assert len(line) < 400 and "Fix: " in line
    assert list(tmp_path.iterdir()) == []


def test_finite_takes_any_whole_number():
    assert finite(int(HUGE)) and finite(-int(HUGE)) and finite(1.5)
    assert not finite(float("inf")) and not finite(float("nan"))


@pytest.mark.parametrize("args, flag", [
    (["--steps", HUGE], "--steps"), (["--steps", "2", "--warmup", "9" * 320], "--warmup"),
    (["--steps", "2", "--warmup", "9" * 30], "--warmup"),
])
def test_bench_e2e_counts_past_float_are_refused_in_a_short_line(tmp_path, args, flag):
    from tutorial_lib.bench.cli import main

    result = command_in_process(main, ["e2e", "--device", "cpu", "--data-dir", str(tmp_path / "d"), "--workers", "0",
                                       "--batch-size", "2", "--image-size", "16", *args])
    assert result.returncode == EXIT_REFUSED, result
    line = _one_line(result.stderr, f"{flag}: ")
    assert len(line) < 400 and "fewer" in line and "over the 1 h a benchmark may take" in line
    assert not re.search(r"[\d,.]{32,}", line.split("Fix: ")[1])  # no estimate printed digit by digit
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args, settings", [
    ([], 3),  # the CPU's default worker list: 0, 1, 2
    (["--workers", "0", "--gpu-pipeline", "yes"], 2),  # one worker count and the GPU input pipeline
])
def test_bench_data_counts_the_settings_it_measures_by_default(tmp_path, args, settings):
    from tutorial_lib.bench.cli import main

    result = command_in_process(main, ["data", "--device", "cpu", "--data-dir", str(tmp_path / "d"), "--batch-size",
                                       "2", "--image-size", "16", "--min-time", "2000", *args])
    assert result.returncode == EXIT_REFUSED, result
    assert f"all 1 rounds of {settings} setting(s) fit in 1 h" in _one_line(result.stderr, "--min-time: ")
    assert list(tmp_path.iterdir()) == []
