"""The growth table of docs/imagenet.md is the one results/scale.jsonl gives, and its growth figures are right."""

from __future__ import annotations

import pytest

from tutorial_lib import REPO_ROOT
from tutorial_lib.bench.records import read_records
from tutorial_lib.bench.scale_table import BEGIN, END, growth, scale_table


def _record(step: str, files: int, seconds: float, timestamp: float = 0.0) -> dict:
    return {"kind": "scale", "status": "ok", "step": step, "form": "kaggle", "files": files, "seconds": seconds,
            "load_average_1m": 3.0, "timestamp": timestamp}


def test_the_docs_table_is_the_one_the_results_give():
    text = (REPO_ROOT / "docs" / "imagenet.md").read_text()
    assert BEGIN in text and END in text, "docs/imagenet.md lost its scale table markers"
    shown = text.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    assert shown == scale_table(read_records(REPO_ROOT / "results" / "scale.jsonl")).strip()


def test_growth_is_one_for_linear_below_one_for_a_fixed_cost_and_above_for_quadratic():
    assert growth({10_000: 1.0, 1_331_167: 133.1167}) == pytest.approx(1.0)
    assert growth({10_000: 5.0, 1_331_167: 5.0}) == pytest.approx(0.0)
    assert growth({10_000: 1.0, 100_000: 100.0}) == pytest.approx(2.0)
    assert growth({10_000: 1.0}) is None


def test_the_table_shows_the_latest_record_of_a_step_and_says_how_it_grows():
    table = scale_table([_record("scan", 10_000, 9.0, 1), _record("scan", 10_000, 1.0, 2),
                         _record("scan", 1_331_167, 133.1167, 3), _record("job", 10_000, 30.0, 4),
                         _record("job", 1_331_167, 40.0, 5)])
    rows = {line.split(" | ")[0].strip("| "): line for line in table.splitlines()[2:]}
    assert "1.00 s (load 3)" in rows["scan"] and "9.00 s" not in rows["scan"]
    assert rows["scan"].endswith("| 1.00 (linear or better) | - |")  # no 100k point: no second figure
    assert rows["job"].endswith("| 0.06 (linear or better) | - |") and rows["job"].count(" - ") == 2


def test_the_growth_from_100k_shows_a_step_that_turns_worse_than_linear():
    table = scale_table([_record("scan", 10_000, 1.0, 1), _record("scan", 100_000, 2.0, 2),
                         _record("scan", 1_331_167, 100.0, 3)])
    row = table.splitlines()[2]
    assert "| 0.94 (linear or better) | 1.51 (worse than linear) |" in row
