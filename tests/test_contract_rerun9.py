"""What the seventh re-run of issue 43 (/work/wt/notes/r43m-report.md) found: the pre-flight's rank program run by
hand (tracebacks, a user's file appended to), ``bench data`` hanging on class folders without an image and the other
bench commands not naming ``--data-dir``, ``--jpeg-images`` without a bound, ``allreduce --sizes 100G`` failing in
the allocator, ``--tree`` and ``--reference`` not named, 10^9 px called too small, and a site file's unquoted
``time: 1:00:00`` read by YAML 1.1 as 3,600 (minutes, to Slurm). Each ends as one line naming the field and the
fix, before anything is written or started; each test failed on the code before (checked by reverting the library
change). Unit level: no job is started.
"""

from __future__ import annotations

import pytest

from tests.test_contract_rerun2 import _main, _one_line
from tutorial_lib import bench
from tutorial_lib.engine.config import ConfigError, make_config, validate
from tutorial_lib.exits import EXIT_REFUSED

TORCHRUN_ENV = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2",
                "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29999"}


def test_the_preflight_rank_program_by_hand_is_refused_and_never_appends_to_a_users_file(tmp_path, monkeypatch):
    """Before: outside torchrun ``ValueError: ... RANK expected``; ``--out <folder>`` IsADirectoryError;
    ``--timeout nan`` a ValueError traceback; ``--out ~/file`` appended a JSON line to the user's file."""
    from tutorial_lib.jobs import preflight

    for name in TORCHRUN_ENV:
        monkeypatch.delenv(name, raising=False)
    status, err = _main(preflight.main, ["--out", str(tmp_path / "preflight.jsonl")])
    assert status == EXIT_REFUSED and "run by torchrun" in _one_line(err, "python -m tutorial_lib.jobs.preflight")
    for name, value in TORCHRUN_ENV.items():
        monkeypatch.setenv(name, value)
    mine = tmp_path / "notes.txt"
    mine.write_text("mine\n")
    for out in (mine, tmp_path, tmp_path / "missing" / "preflight.jsonl"):
        status, err = _main(preflight.main, ["--out", str(out)])
        assert status == EXIT_REFUSED and _one_line(err, "--out: ")
    assert mine.read_text() == "mine\n" and not (tmp_path / "missing").exists()
    status, err = _main(preflight.main, ["--out", str(tmp_path / "preflight.jsonl"), "--timeout", "nan"])
    assert status == 2 and "argument --timeout: 'nan' is not a positive number of seconds" in err
    assert "Traceback" not in err and not (tmp_path / "preflight.jsonl").exists()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", ["data", "loader", "e2e"])
def test_bench_on_class_folders_without_an_image_names_data_dir(tmp_path, command):
    """Before: ``bench data`` looped for ever (an order of 0 images never fills), ``loader`` said "Found no valid
    file" without --data-dir and ``e2e`` said to lower --batch-size."""
    for split in ("train", "val"):
        (tmp_path / "set" / split / "n01").mkdir(parents=True)
    (tmp_path / "set" / "train" / "n01" / "notes.txt").write_text("not an image")
    extra = ["--device", "cpu"] if command != "loader" else []
    status, err = _main(bench.main, [command, "--quiet", "--data-dir", str(tmp_path / "set"), *extra])
    assert status == EXIT_REFUSED and "hold no image" in _one_line(err, "data_dir: the 1 class folder(s) of ")


def test_bench_shards_refuses_more_jpegs_than_a_set_may_have(tmp_path):
    """Before: --jpeg-images 99999999999 had no bound and ran out of memory, --jpeg-images never named."""
    status, err = _main(bench.main, ["shards", "--quiet", "--sets", "jpeg", "--jpeg-images", "99999999999",
                                     "--work-dir", str(tmp_path / "work")])
    assert status == EXIT_REFUSED and _one_line(err, "--jpeg-images: 99999999999 is refused")
    assert not (tmp_path / "work").exists()


def test_allreduce_sizes_beyond_the_memory_are_refused_with_the_estimate(monkeypatch):
    """Before: ``torchrun ... allreduce --sizes 100G``: each rank's allocator raised a RuntimeError traceback."""
    for name, value in TORCHRUN_ENV.items():
        monkeypatch.setenv(name, value)
    status, err = _main(bench.main, ["allreduce", "--quiet", "--device", "cpu", "--sizes", "4K,100G"])
    line = _one_line(err, "--sizes: the all-reduce's tensors (")
    assert status == EXIT_REFUSED and "on each of 2 rank(s) of this cpu" in line and "needs at least" in line


def test_a_path_with_a_name_too_long_for_a_file_system_names_its_flag_or_field(tmp_path):
    """Before: ``bench scan --tree <dir>/<300 characters>`` said "File name too long (errno 36)" naming only the
    path; the trainer's output_root did the same."""
    long = str(tmp_path / ("a" * 300))
    status, err = _main(bench.main, ["scan", "--quiet", "--tree", long])
    assert status == EXIT_REFUSED and "has a name of 300 bytes" in _one_line(err, "--tree: ")
    with pytest.raises(ConfigError, match=r"^output_root: .* has a name of 300 bytes, .* Fix: "):
        validate(make_config("smoke", output_root=long), check_paths=False)


def test_bench_runs_names_a_reference_that_is_no_run(tmp_path):
    """Before: ``bench runs RUN --reference nope`` said "nope: no config.json" without --reference."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text("{}")
    status, err = _main(bench.main, ["runs", str(run), "--reference", str(tmp_path / "nope"), "--quiet"])
    assert status == EXIT_REFUSED and _one_line(err, "--reference: ")


def test_an_image_size_too_large_to_shape_gets_the_memory_estimate_not_too_small(tmp_path):
    """Before: 10^9 px overflowed the meta device's shapes and was refused as "too small for resnet18"."""
    from tutorial_lib.engine.trainer import main

    status, err = _main(main, ["--image-size", "1000000000", "--output-root", str(tmp_path / "runs"), "--name", "big"])
    line = _one_line(err, "image_size/batch_size: a training step of resnet18 on batches of 32 images of 1000000000")
    assert status == EXIT_REFUSED and "needs at least" in line and "too small" not in line
    assert not (tmp_path / "runs" / "big" / "config.json").exists()
    with pytest.raises(ConfigError, match=r"^image_size: 16 px is too small for vgg11"):  # small sizes: as before
        validate(make_config("smoke", arch="vgg11", image_size=16), check_paths=False)


def test_an_unquoted_slurm_time_in_a_site_file_is_read_as_written(tmp_path):
    """Before: YAML 1.1 read ``time: 1:00:00`` as 3600, passed to sbatch as ``--time=3600`` (60 hours)."""
    from tutorial_lib.jobs.site import load_site
    from tutorial_lib.yamlfile import parse_yaml

    site_file = tmp_path / "site.yaml"
    site_file.write_text("site:\n  partition: gpu\n  time: 1:00:00\n")
    assert load_site(str(site_file)).time == "1:00:00"
    assert parse_yaml("epochs: 1:30\nlr: 0.5\nsteps: 1_000", "t") == {"epochs": "1:30", "lr": 0.5, "steps": 1000}
    with pytest.raises(ConfigError, match=r"^epochs: "):  # a count written as a time is refused, not read as 90
        make_config("smoke", yaml_path=str(_written(tmp_path / "c.yaml", "epochs: 1:30\n")))


def _written(path, text):
    path.write_text(text)
    return path
