"""What the eighth re-run of issue 43 (/work/wt/notes/r43n-report.md, P4 and P7-P9) found in the benchmarks:
``bench matmul --dtype ,`` (or ``''``) measured float32 and exited 0, and a data set whose training images are all
unreadable (0-byte JPEGs) ended ``bench loader`` and ``bench e2e`` in tracebacks and ``bench data`` in a line
naming no path. Each now ends as one line naming the flag and the fix (exit 2) before anything is measured or
written; a set with only some unreadable images is measured, its unreadable images skipped and counted. Each test
failed on the code before (checked by reverting the library change). Tiny images, in this process.
"""

from __future__ import annotations

import json

import pytest
from PIL import Image

from tests.conftest import command_in_process
from tests.test_contract_rerun2 import _main, _one_line
from tutorial_lib import bench
from tutorial_lib.bench.arguments import check_arguments
from tutorial_lib.bench.cli import build_parser
from tutorial_lib.engine.config import ConfigError
from tutorial_lib.exits import EXIT_REFUSED

SMALL = ["--workers", "0", "--batch-size", "2", "--image-size", "16"]


def _data_set(root, bad: dict[str, int], per_class: int = 4):
    """An ImageNet-layout set of 3 classes of tiny JPEGs whose first ``bad[class]`` training files are empty."""
    for split in ("train", "val"):
        for label, name in enumerate("abc"):
            folder = root / split / name
            folder.mkdir(parents=True)
            for index in range(per_class if split == "train" else 1):
                path = folder / f"x{index}.JPEG"
                if split == "train" and index < bad.get(name, 0):
                    path.write_bytes(b"")
                else:
                    Image.new("RGB", (24, 20), (80 * label, 40 * index, 200)).save(path, "JPEG")
    return root


# ------------------------------------------------------------------ P4: an empty comma list measured the default
@pytest.mark.parametrize("dtype", [",", ""])
def test_matmul_refuses_an_empty_dtype_list(tmp_path, dtype):
    """Before: exit 0, a float32 record (the value ignored)."""
    out = tmp_path / "matmul.jsonl"
    status, err = _main(bench.main, ["matmul", "--device", "cpu", "--dtype", dtype, "--out", str(out)])
    assert status == EXIT_REFUSED and "'' is refused" in _one_line(err, "--dtype: ")
    assert not out.exists()


@pytest.mark.parametrize("flags", [["train", "--precision", ","], ["train", "--compile", ","],
                                   ["train", "--channels-last", ","], ["allreduce", "--sizes", ","]])
def test_every_comma_list_refuses_an_empty_list(flags):
    """Before: the same rule was missing for these lists too (train took its default precisions, compile modes and
    memory formats; allreduce its default sizes); --arch, --workers, --forms, ... already refused it."""
    with pytest.raises(ConfigError, match=rf"^{flags[1]}: '' is refused\. Fix: a comma list of "):
        check_arguments(build_parser().parse_args(flags))


# ------------------------------------------------------------------ P7-P9: a split of unreadable images
@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", ["data", "loader", "e2e"])
def test_bench_on_a_split_of_unreadable_images_names_data_dir(tmp_path, command):
    """Before: ``loader`` a ValueError traceback (torch.frombuffer of an empty file), ``e2e`` a TypeError
    (float(None): every step skipped), ``data`` "error: empty file (0 bytes). Fix: check that path" (no path)."""
    data = _data_set(tmp_path / "set", {"a": 3, "b": 3, "c": 3}, per_class=3)
    out = tmp_path / "bench.jsonl"
    extra = ["--device", "cpu", "--min-time", "0"] if command == "data" else ["--min-time", "0.1", "--repeats", "1"]
    extra = ["--device", "cpu", "--steps", "2"] if command == "e2e" else extra
    result = command_in_process(bench.main, [command, "--quiet", "--data-dir", str(data), *SMALL, *extra,
                                             "--out", str(out)])
    line = _one_line(result.stderr, "--data-dir: none of the 9 image file(s) tried in ")
    assert result.returncode == EXIT_REFUSED and "empty file (0 bytes)" in line and str(data / "train") in line
    assert not out.exists() and result.stdout == ""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", ["data", "e2e"])
def test_bench_on_a_split_with_some_unreadable_images_skips_and_counts_them(tmp_path, command):
    """Before: ``data`` stopped at the first empty file of its decode-cost sample ("error: empty file"), ``e2e`` in
    BatchNorm's ValueError on a batch left with one readable image. A whole class of unreadable files passes the
    check (a few files of each class are tried)."""
    data = _data_set(tmp_path / "set", {"a": 4, "b": 1})
    extra = ["--batches", "3", "--gpu-pipeline", "no"] if command == "data" else ["--steps", "4", "--warmup", "1",
                                                                                   "--no-reference"]
    result = command_in_process(bench.main, [command, "--device", "cpu", "--quiet", "--data-dir", str(data),
                                             *SMALL, *extra])
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert records and all(r["status"] == "ok" for r in records)
    if command == "data":
        assert records[0]["cost_skipped_images"] == 5 and records[0]["cost_sample_images"] == 7
    else:
        assert records[0]["images_per_sec"] > 0 and "skipped_images" in records[0]


def test_the_decoder_comparison_skips_unreadable_files(tmp_path):
    """Before: ``torch.frombuffer`` of an empty file, a ValueError traceback of ``bench loader``."""
    from tutorial_lib.bench.loader import compare_decoders

    record = compare_decoders(_data_set(tmp_path / "set", {"a": 2}), images=12, repeats=1)
    assert record["status"] == "ok" and record["images"] == 10 and record["skipped_images"] == 2
