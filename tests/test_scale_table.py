"""The growth table of docs/imagenet.md is the one results/scale.jsonl gives, and its growth figures are right."""

from __future__ import annotations

import math

import pytest

from tutorial_lib import REPO_ROOT
from tutorial_lib.bench.pairs import shown_between
from tutorial_lib.bench.records import read_records
from tutorial_lib.bench.scale_table import BEGIN, END, TAR_BEGIN, TAR_END, growth, scale_table, tar_table, update


def _record(step: str, files: int, seconds: float, timestamp: float = 0.0) -> dict:
    return {"kind": "scale", "status": "ok", "step": step, "form": "kaggle", "files": files, "seconds": seconds,
            "load_average_1m": 3.0, "timestamp": timestamp}


def test_the_docs_table_is_the_one_the_results_give():
    shown = shown_between(REPO_ROOT / "docs" / "imagenet.md", BEGIN, END)
    assert shown is not None, "docs/imagenet.md lost its scale table markers"
    assert shown == scale_table(read_records(REPO_ROOT / "results" / "scale.jsonl")).strip()


def test_every_cell_of_the_docs_table_is_its_latest_measurement_and_the_growth_between_them():
    """Read back from the page, not compared with the generator: each time is the latest ok record of its step,
    form and size in results/scale.jsonl, and each k is log(t_large / t_small) / log(n_large / n_small) of the
    times it spans (a generator that picked the first record, or inverted k, passed the test above)."""
    latest_of = {}
    for record in read_records(REPO_ROOT / "results" / "scale.jsonl"):
        if record.get("kind") == "scale" and record.get("status") == "ok":
            key = (record["step"], record["form"], record["files"])
            if key not in latest_of or record["timestamp"] >= latest_of[key]["timestamp"]:
                latest_of[key] = record
    lines = shown_between(REPO_ROOT / "docs" / "imagenet.md", BEGIN, END).splitlines()
    sizes = [int(cell.removesuffix(" files").replace(",", "")) for cell in lines[0].strip("| ").split(" | ")[2:5]]
    assert sizes == [10_000, 100_000, 1_331_167]
    rows = set()
    for line in lines[2:]:
        step, form, *times, k_small, k_middle = line.strip("| ").split(" | ")
        rows.add((step, form))
        seconds = {}
        for files, cell in zip(sizes, times, strict=True):
            record = latest_of.get((step, form, files))
            assert (cell == "-") is (record is None), (step, form, files, cell)
            if record is not None:
                seconds[files] = record["seconds"]
                value, load = cell.split(" s ")[0], cell.split("(load ")[1].rstrip(")")
                decimals = len(value.partition(".")[2])  # as shown: to within half its last digit
                assert float(value) == pytest.approx(record["seconds"], abs=0.5 * 10 ** -decimals), (step, form, files)
                assert load == f"{record['load_average_1m']:.0f}", (step, form, files)
        for cell, points in ((k_small, seconds), (k_middle, {n: t for n, t in seconds.items() if n >= sizes[1]})):
            if len(points) < 2:
                assert cell == "-"
                continue
            k = math.log(points[max(points)] / points[min(points)]) / math.log(max(points) / min(points))
            assert cell == f"{k:.2f} ({'linear or better' if k <= 1.05 else 'worse than linear'})", (step, form)
    measured = {(step, form) for step, form, _ in latest_of if step in ("prepare", "tar", "scan", "job", "stage")}
    assert rows == measured


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


def _paired(step: str, files: int, seconds: float, round_: int, timestamp: float) -> dict:
    return {**_record(step, files, seconds, timestamp), "form": "archives", "round": round_, "disk_wait_s": 5.0}


def test_the_tar_table_shows_each_set_of_pairs_and_decides_from_its_median_ratio():
    old_set = [_paired("tar", 10_000, 1.0, 0, 1), _paired("prepare", 10_000, 9.0, 0, 2)]
    new_set = [_paired("tar", 10_000, 10.0, 0, 3), _paired("prepare", 10_000, 10.5, 0, 4),
               _paired("prepare", 10_000, 30.0, 1, 5), _paired("tar", 10_000, 20.0, 1, 6),
               _paired("tar", 10_000, 10.0, 2, 7), _paired("prepare", 10_000, 10.0, 2, 8)]
    unsettled = [{**_record("tar", 10_000, 1.0, 0.5), "form": "archives", "round": 0}]  # no quiet-disk wait
    first, row, _, note = tar_table(unsettled + old_set + new_set).splitlines()[2:]
    assert first.startswith("| 10,000 | 1 | 1.00 | 9.00 | 9.00 | 9.00 |") and first.endswith("over 1.1x |")
    assert row.startswith("| 10,000 | 3 | 10.0, 20.0, 10.0 | 10.5, 30.0, 10.0 | 1.05, 1.50, 1.00 | 1.05 |")
    assert row.endswith("| kept | within 1.1x of tar |")
    assert note == ("At 10,000 files with the caches kept, 2 sets: GNU tar took 1.00-20.0 s, `prepare` 9.00-30.0 s; "
                    "single pairs 1.00-9.00x tar's time, the sets' medians 1.05-9.00; 1 of 2 within 1.1x.")


def test_the_tar_table_says_how_far_over_the_goal_a_size_is():
    table = tar_table([_paired("tar", 1_331_167, 50.0, 0, 1), _paired("prepare", 1_331_167, 66.0, 0, 2),
                       _paired("prepare", 1_331_167, 65.0, 1, 3), _paired("tar", 1_331_167, 50.0, 1, 4)])
    assert table.splitlines()[2].endswith("| 1.32, 1.30 | 1.31 | 3.0-3.0 | kept | 1.31x tar's time: over 1.1x |")
    cold = tar_table([{**_paired("tar", 10_000, 1.0, 0, 1), "cold_cache": True},
                      {**_paired("prepare", 10_000, 1.0, 0, 2), "cold_cache": True}])
    assert cold.splitlines()[2].endswith("| dropped | within 1.1x of tar |")
    kept = [_paired("tar", 10_000, 1.0, 0, 5), _paired("prepare", 10_000, 1.0, 0, 6)]
    dropped = [{**r, "cold_cache": True, "timestamp": r["timestamp"] + 10} for r in kept]
    assert "sets:" not in tar_table(kept + dropped)  # one set with the caches kept, one dropped: not pooled
    later = [{**r, "timestamp": r["timestamp"] + 10} for r in dropped]
    assert "At 10,000 files with the caches dropped, 2 sets:" in tar_table(kept + dropped + later)
    assert "sets:" not in table  # one set: nothing to say about sets


def test_the_docs_tar_table_is_the_one_the_results_give():
    shown = shown_between(REPO_ROOT / "docs" / "imagenet.md", TAR_BEGIN, TAR_END)
    assert shown is not None, "docs/imagenet.md lost its tar table markers"
    assert shown == tar_table(read_records(REPO_ROOT / "results" / "scale.jsonl")).strip()


def test_update_rewrites_the_tables_each_document_has_and_names_a_missing_marker(tmp_path):
    records = [_record("scan", 10_000, 1.0, 1), _paired("tar", 10_000, 2.0, 0, 2),
               _paired("prepare", 10_000, 2.1, 0, 3)]
    doc, readme = tmp_path / "doc.md", tmp_path / "README.md"
    doc.write_text(f"intro\n{BEGIN}\nold table\n{END}\nmiddle\n{TAR_BEGIN}\n{TAR_END}\nend\n")
    readme.write_text(f"top\n{BEGIN}\n{END}\n")
    update([doc, readme], records)
    assert doc.read_text() == (f"intro\n{BEGIN}\n{scale_table(records)}{END}\nmiddle\n{TAR_BEGIN}\n"
                               f"{tar_table(records)}{TAR_END}\nend\n")
    assert readme.read_text() == f"top\n{BEGIN}\n{scale_table(records)}{END}\n"
    doc.write_text(f"{BEGIN}\n{END}\n{TAR_BEGIN}\n")
    with pytest.raises(ValueError, match="lacks the marker <!-- /tar-table"):
        update([doc], records)
    doc.write_text("nothing generated here\n")
    with pytest.raises(ValueError, match="has no block of the scale tables"):
        update([doc], records)


def test_the_readme_shows_the_growth_table_the_results_give():
    shown = shown_between(REPO_ROOT / "README.md", BEGIN, END)
    assert shown is not None, "README.md lost its scale table markers"
    assert shown == scale_table(read_records(REPO_ROOT / "results" / "scale.jsonl")).strip()
