"""The comparison with GNU tar at ImageNet's file size and the full archives' time shown by docs/imagenet.md and
the README are the ones results/extract.jsonl gives, and the projection scales by bytes and by file count."""

from __future__ import annotations

import json

import pytest

from tutorial_lib import REPO_ROOT
from tutorial_lib.bench.extract_table import (
    IMAGENET_ARCHIVE_BYTES,
    IMAGENET_FILES,
    TABLE_BEGIN,
    TABLE_END,
    TIME_BEGIN,
    TIME_END,
    duration,
    extract_table,
    full_set_time,
    update,
)
from tutorial_lib.bench.pairs import shown_between
from tutorial_lib.bench.records import read_records


def _record(side: str, round_: int, seconds: float, timestamp: float, images: int = 1_000,
            archive_bytes: float = 100e6, waited: bool = True) -> dict:
    record = {"kind": "extract", "status": "ok", "side": side, "round": round_, "train_images": images - 100,
              "val_images": 100, "archive_bytes": archive_bytes, "seconds_to_disk": seconds,
              "load_average_1m": 1.5, "cold_cache": True, "timestamp": timestamp}
    return {**record, "disk_wait_s": 5.0} if waited else record


def test_the_docs_and_readme_show_what_the_results_give():
    records = read_records(REPO_ROOT / "results" / "extract.jsonl")
    assert shown_between(REPO_ROOT / "docs" / "imagenet.md", TABLE_BEGIN, TABLE_END) == extract_table(records).strip()
    assert shown_between(REPO_ROOT / "README.md", TIME_BEGIN, TIME_END) == full_set_time(records).strip()
    assert "takes about" in full_set_time(records), "results/extract.jsonl holds no set timed on a quiet disk"


def test_each_set_is_a_row_decided_by_its_median_ratio_and_unsettled_runs_do_not_count():
    unsettled = [_record("gnu_tar", 0, 1.0, 1, waited=False), _record("prepare", 0, 9.0, 2, waited=False)]
    fast = [_record("gnu_tar", 0, 10.0, 3), _record("prepare", 0, 10.5, 4), _record("prepare", 1, 30.0, 5),
            _record("gnu_tar", 1, 20.0, 6), _record("gnu_tar", 2, 10.0, 7), _record("prepare", 2, 10.0, 8)]
    slow = [_record("gnu_tar", 0, 10.0, 9), _record("prepare", 0, 13.0, 10), _record("copy", 0, 2.0, 11)]
    rows = extract_table(unsettled + fast + slow).splitlines()[2:]
    assert len(rows) == 2
    assert rows[0].startswith("| 1,000 | 100 MB | 3 | 10.0, 20.0, 10.0 | 10.5, 30.0, 10.0 | 1.05, 1.50, 1.00 | 1.05 |")
    assert rows[0].endswith("| - | 1.5-1.5 | dropped | within 1.1x of tar |")
    assert rows[1].endswith("| 1.30 | 2.0 | 1.5-1.5 | dropped | 1.30x tar's time: over 1.1x |")


def test_the_full_time_scales_the_latest_largest_set_by_bytes_and_by_file_count():
    images, archive = IMAGENET_FILES // 1000, IMAGENET_ARCHIVE_BYTES / 1000
    small = [_record("gnu_tar", 0, 1.0, 1, images=50), _record("prepare", 0, 1.0, 2, images=50)]
    older = [_record("gnu_tar", 0, 1.8, 3, images, archive), _record("prepare", 0, 1.8, 4, images, archive)]
    latest = [_record("gnu_tar", 0, 3.6, 5, images, archive), _record("prepare", 0, 7.2, 6, images, archive),
              _record("prepare", 1, 7.2, 7, images, archive), _record("gnu_tar", 1, 3.6, 8, images, archive)]
    text = full_set_time(small + older + latest)
    # 3.6 s for a thousandth of the bytes is 1 h; the file count's thousandth is rounded down: a hair more
    assert "takes about 2.0 h" in text and "GNU tar doing the same work 60 min" in text and "median ratio 2.00" in text
    assert f"({images:,} images, 116 KB each" in text and "2 interleaved pairs" in text
    uneven = [_record("gnu_tar", 0, 3.6, 9, 2 * images, archive), _record("prepare", 0, 3.6, 10, 2 * images, archive)]
    assert "takes about 30-60 min" in full_set_time(uneven)  # half the mean file size: the two projections differ
    assert "not been measured" in full_set_time(small[:1])
    assert "copying" not in text.lower()  # no copy side measured: nothing said about the disk


def test_the_copy_of_the_same_bytes_says_whether_the_disk_or_the_work_per_file_sets_the_time():
    pair = [_record("gnu_tar", 0, 3.0, 1), _record("prepare", 0, 3.0, 2)]
    by_files = full_set_time(pair + [{**_record("copy", 0, 1.0, 3), "side": "copy"}])
    assert "`prepare` took 3.0x as long as copying the archives' bytes (1.0 s, 100 MB/s)" in by_files
    assert "the work per file, not this disk, sets the time" in by_files
    by_disk = full_set_time(pair + [_record("copy", 0, 2.5, 3)])
    assert "Copying the archives' bytes took about as long (2.5 s, 40 MB/s): this disk's speed sets" in by_disk


def test_a_duration_is_in_minutes_below_an_hour_and_a_half_and_one_value_where_both_ends_round_alike():
    assert duration([0.155, 0.16]) == "9-10 min" and duration([0.5, 0.5]) == "30 min"
    assert duration([1.2, 2.04]) == "1.2-2.0 h" and duration([3.01, 2.99][::-1]) == "3.0 h"


def test_update_rewrites_the_blocks_a_document_has_and_refuses_one_with_none(tmp_path):
    records = [_record("gnu_tar", 0, 2.0, 1), _record("prepare", 0, 2.1, 2)]
    doc, readme = tmp_path / "doc.md", tmp_path / "README.md"
    doc.write_text(f"intro\n{TABLE_BEGIN}\nold\n{TABLE_END}\nend\n")
    readme.write_text(f"{TIME_BEGIN}\n{TIME_END}\n")
    update([doc, readme], records)
    assert doc.read_text() == f"intro\n{TABLE_BEGIN}\n{extract_table(records)}{TABLE_END}\nend\n"
    assert readme.read_text() == f"{TIME_BEGIN}\n{full_set_time(records)}{TIME_END}\n"
    doc.write_text("no markers\n")
    with pytest.raises(ValueError, match="has no block of the extraction comparison"):
        update([doc], records)
    doc.write_text(f"{TABLE_BEGIN}\n")
    with pytest.raises(ValueError, match="lacks the marker <!-- /extract-table"):
        update([doc], records)


def test_the_command_prints_each_block_and_refuses_a_missing_result_file_in_one_line(tmp_path, capsys):
    from tutorial_lib.bench.extract_table import main

    results = tmp_path / "extract.jsonl"
    pair = [_record("gnu_tar", 0, 2.0, 1), _record("prepare", 0, 2.1, 2)]
    results.write_text("".join(f"{json.dumps(record)}\n" for record in pair))
    assert main([str(results)]) == 0 and capsys.readouterr().out == extract_table(read_records(results))
    assert main([str(results), "--time"]) == 0 and capsys.readouterr().out == full_set_time(read_records(results))
    assert main([str(tmp_path / "missing.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: results: ") and "missing.jsonl is not a file" in err and len(err.splitlines()) == 1
