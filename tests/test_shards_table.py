"""The shards comparison of docs/imagenet.md (``python -m tutorial_lib.bench.shards_table``): each set of rounds a
row, its ratios the medians of its rounds, its verdict against the goals; the docs show what the results give."""

from __future__ import annotations

from tutorial_lib import REPO_ROOT
from tutorial_lib.bench.pairs import shown_between
from tutorial_lib.bench.records import read_records
from tutorial_lib.bench.shards_table import BEGIN, END, shards_table


def _run(step, fmt, round_, seconds, t, **extra):
    return {"kind": "shards", "status": "ok", "step": step, "format": fmt, "set": "full", "files": 1_331_167,
            "seconds": seconds, "round": round_, "load_average_1m": 1.0, "timestamp": t, **extra}


def test_the_docs_show_what_the_results_give():
    records = read_records(REPO_ROOT / "results" / "shards.jsonl")
    assert shown_between(REPO_ROOT / "docs" / "imagenet.md", BEGIN, END) == shards_table(records).strip()


def test_a_staging_row_takes_the_median_of_its_rounds_and_judges_it_against_the_goals():
    records = [_run("stage", "files", 0, 600.0, 1), _run("stage", "shards", 0, 20.0, 2),
               _run("stage", "copy", 0, 18.0, 3), _run("stage", "copy", 1, 16.0, 4),
               _run("stage", "shards", 1, 24.0, 5), _run("stage", "files", 1, 500.0, 6)]
    row = shards_table(records).splitlines()[-1]
    # shards/files: 20/600 and 24/500 -> median 0.04; shards/cp: 20/18 and 24/16 -> 1.11 and 1.5, median 1.31
    assert "0.04 / 1.31" in row and "over 1.25x of cp" in row and "at most 0.2x of the files" in row
    faster_copy = [dict(r, seconds=r["seconds"] * (0.5 if r["format"] == "shards" else 1)) for r in records]
    assert "within 1.25x of cp" in shards_table(faster_copy).splitlines()[-1]


def test_a_load_row_compares_speeds_per_worker_count():
    records = [_run("load", "files", 0, 1.0, 1, workers=2, images_per_sec=100.0),
               _run("load", "shards", 0, 1.0, 2, workers=2, images_per_sec=120.0),
               _run("load", "shards", 1, 1.0, 3, workers=2, images_per_sec=90.0),
               _run("load", "files", 1, 1.0, 4, workers=2, images_per_sec=100.0)]
    row = shards_table(records).splitlines()[-1]
    assert "load, 2 workers" in row and "speed 1.05x" in row and "shards at least as fast" in row
    slower = [dict(r, images_per_sec=80.0) if r["format"] == "shards" else r for r in records]
    assert "shards slower" in shards_table(slower).splitlines()[-1]
