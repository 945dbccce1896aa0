"""The classes of issue 43 that an independent re-run of ~2,450 inputs found still open, after
tests/test_contract_cases.py: each ends as the contract says (one line naming the field and a fix that is itself
accepted, nothing written first), and each test failed on the code before (a silent result or the wrong field).
All unit level: nothing here trains, generates data or submits a job.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
from pathlib import Path

import pytest

from tests.conftest import write_image_tree
from tutorial_lib.engine.config import ConfigError, make_config, validate
from tutorial_lib.exits import EXIT_REFUSED


# ------------------------------------------------------------------ Slurm: the warning's lead against the limit
@pytest.mark.parametrize("time, lead", [("1:00:00", 3590), ("1:00:00", 1801), ("00:04:00", 121), ("10", 600)])
def test_a_warning_that_leaves_the_job_seconds_to_train_is_refused_with_fixes_that_are_accepted(time, lead,
                                                                                                tmp_path):
    """``time 1:00:00`` with ``--signal=B:USR1@3590`` was accepted: the job would be warned 10 s after it started,
    stop to checkpoint and requeue, again and again. The warning may come at most halfway through the limit."""
    from tutorial_lib.jobs.site import Site
    from tutorial_lib.jobs.slurm_values import check_sbatch_option, check_time, check_time_against_warning
    from tutorial_lib.jobs.spec import make_spec

    options = [f"--signal=B:USR1@{lead}"]
    with pytest.raises(ConfigError, match=r"^time: .* too little time to train: Slurm warns the job \d+ s before "
                                          r".* Fix: ") as refused:
        check_time_against_warning(time, options)
    assert "\n" not in str(refused.value)
    longer, shorter = re.search(r"e\.g\. '([^']+)' .*, or .*\('(--signal=B:USR1@\d+)'\)", str(refused.value)).groups()
    assert check_time(longer) == longer  # each fix it gives is accepted
    check_time_against_warning(longer, options)
    check_time_against_warning(time, [check_sbatch_option(shorter)])
    with pytest.raises(ConfigError, match=r"^site\.time: .* too little time to train"):  # where a site says it
        Site.from_dict({"partition": "p", "time": time, "sbatch_options": options})
    cfg = make_config("smoke", name="t", output_root=str(tmp_path))
    with pytest.raises(ConfigError, match=r"^time: .* too little time to train"):  # and a job asks for it
        make_spec(cfg, time=time, sbatch_options=options, on_cluster=True, check_data=False)
    assert make_spec(cfg, time=time, sbatch_options=[shorter], on_cluster=True, check_data=False).time == time


# ------------------------------------------------------------------ memory: the field that makes a step too big
def _main(main, argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        status = main(argv)
    return status, err.getvalue()


def test_a_classifier_too_big_for_memory_names_num_classes(tmp_path):
    """``--num-classes 1000000000`` was refused naming image_size/batch_size: the classifier's 4 TB of weights and
    gradients were blamed on the image size."""
    from tutorial_lib.engine.trainer import main

    status, err = _main(main, ["--profile", "smoke", "--dataset", "synthetic", "--output-root", str(tmp_path),
                               "--name", "many", "--progress", "false", "--num-classes", "1000000000"])
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert status == EXIT_REFUSED and len(lines) == 1 and "Traceback" not in err, err[-2000:]
    assert lines[0].startswith("error: num_classes: ") and "classifier of 1,000,000,000 classes" in lines[0]
    assert re.search(r"needs at least [\d.]+ (TB|PB) of memory .* and [\d.]+ \w+ is available here; nothing was "
                     r"allocated\. Fix: pass a smaller num_classes", lines[0]), lines[0]
    assert not (tmp_path / "many").exists()


def _bench_args(argv: list[str]):
    from tutorial_lib.bench.cli import build_parser

    return build_parser().parse_args(argv)


def test_the_bench_names_num_classes_when_the_classifier_is_what_cannot_fit():
    from tutorial_lib.bench.arguments import check_arguments

    with pytest.raises(ConfigError, match=r"^--num-classes: .* Fix: pass a smaller --num-classes"):
        check_arguments(_bench_args(["train", "--device", "cpu", "--num-classes", "1000000000"]))
    with pytest.raises(ConfigError, match=r"^--image-size/--batch-size: "):  # the image is still blamed for itself
        check_arguments(_bench_args(["train", "--device", "cpu", "--image-size", "100000"]))


@pytest.mark.parametrize("command", ["train", "e2e", "data"])
def test_the_bench_estimates_the_image_size_in_effect_when_no_flag_gives_it(command, monkeypatch):
    """Without ``--image-size`` the memory estimate was skipped, though the device default was used."""
    from tutorial_lib.bench import arguments
    from tutorial_lib.bench.compute import defaults
    from tutorial_lib.engine import memory

    monkeypatch.setattr(memory, "available_bytes", lambda device="cpu": 1000)
    monkeypatch.setattr(arguments, "available_bytes", lambda device="cpu": 1000)
    size = defaults("cpu")["image_size"]
    jpeg = ["--jpeg-size", "1x1"] if command != "train" else []  # its own estimate fits in 1 KB
    with pytest.raises(ConfigError, match=rf"^--image-size/--batch-size: .* {size}x{size} px.* 1 KB is available"):
        arguments.check_arguments(_bench_args([command, "--device", "cpu", *jpeg]))


# ------------------------------------------------------------------ bench: every subcommand's flags up front
@pytest.mark.parametrize("argv, flag", [
    (["shards", "--sets", "x;y"], "--sets"), (["shards", "--sets", ""], "--sets"),
    (["shards", "--steps", "pack,tar"], "--steps"), (["shards", "--jpeg-images", "5"], "--jpeg-images"),
    (["e2e", "--input-pipeline", "tpu"], "--input-pipeline"), (["e2e", "--input-pipeline", "cpu,x;y"],
                                                               "--input-pipeline"),
    (["extract", "--classes", "21"], "--classes"), (["prepare", "--classes", "5000"], "--classes"),
])
def test_every_bench_subcommands_flags_are_checked_before_the_command_runs(argv, flag):
    """``bench shards --sets x;y`` and ``e2e --input-pipeline tpu`` were checked only inside the commands (shards
    named ``steps, sets``), after the arguments' check had let them through."""
    from tutorial_lib.bench.arguments import check_arguments

    with pytest.raises(ConfigError, match=rf"^{flag}: .* Fix: ") as refused:
        check_arguments(_bench_args(argv))
    assert "\n" not in str(refused.value)


# ------------------------------------------------------------------ data: a linked class folder
def test_a_class_folder_linked_to_the_home_folder_or_to_no_images_is_skipped_with_one_line(tmp_path, monkeypatch,
                                                                                          capsys):
    """A class folder that was a link to $HOME was walked as a class (every user file with an image suffix became
    a sample); a link to a folder of folders too. A class is a flat folder of images."""
    from tutorial_lib.data.file_index import class_folders, scan
    from tutorial_lib.data.staging import listing
    from tutorial_lib.engine.input.folders import check_imagefolder

    home = tmp_path / "home"
    write_image_tree(home, {"Pictures": {"holiday": 2}})
    (home / "notes.txt").write_text("mine")
    monkeypatch.setenv("HOME", str(home))
    write_image_tree(tmp_path / "data", {"train": {"a": 2}, "val": {"a": 1}})
    (tmp_path / "data" / "train" / "me").symlink_to(home)
    (tmp_path / "data" / "train" / "pictures").symlink_to(home / "Pictures")  # folders, no images directly
    (tmp_path / "data" / "train" / "root").symlink_to("/")
    classes, skipped = class_folders(tmp_path / "data" / "train")
    warning = [line for line in capsys.readouterr().err.splitlines() if "linked folder" in line]
    assert classes == ["a"] and skipped == ["me", "pictures", "root"]
    assert len(warning) == 1 and "me (it leads to" in warning[0] and "pictures (" in warning[0], warning
    assert scan(tmp_path / "data" / "train", warn=False)["files"] == [["a/0.png", "a/1.png"]]
    assert [path for path, _ in listing(tmp_path / "data")] == ["train/a/0.png", "train/a/1.png", "val/a/0.png"]
    assert validate(make_config("smoke", dataset="imagefolder", data_dir=str(tmp_path / "data"), num_classes=1))
    for name in ("a",):  # with no real class left, the data check names the split
        os.rename(tmp_path / "data" / "val" / name, tmp_path / "data" / f"val-{name}")
    (tmp_path / "data" / "val" / "me").symlink_to(home)
    with pytest.raises(ValueError, match=r"^data_dir: .*val has no class folders\. Fix: "):
        check_imagefolder(tmp_path / "data")


def test_class_folders_linked_to_another_disk_are_classes(tmp_path, monkeypatch):
    """The legitimate use: a data root whose class folders are links to flat folders of images elsewhere."""
    from tutorial_lib.data.file_index import class_folders, scan
    from tutorial_lib.engine.input.folders import check_imagefolder

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    write_image_tree(tmp_path / "disk2", {"train": {"cat": 2, "dog": 1}, "val": {"cat": 1, "dog": 1}})
    for split in ("train", "val"):
        (tmp_path / "data" / split).mkdir(parents=True)
        for name in ("cat", "dog"):
            (tmp_path / "data" / split / name).symlink_to(tmp_path / "disk2" / split / name)
    assert class_folders(tmp_path / "data" / "train", warn=False) == (["cat", "dog"], [])
    assert scan(tmp_path / "data" / "train")["files"] == [["cat/0.png", "cat/1.png"], ["dog/0.png"]]
    assert check_imagefolder(tmp_path / "data") == Path(tmp_path / "data")


def test_the_pre_flight_job_asks_for_a_time_its_sites_warning_allows(tmp_path, monkeypatch):
    """A site warning its jobs 300 s before the limit (the lead sbatch_options' own message suggests) got a 5-minute
    pre-flight job, which the rule above refuses: the pre-flight asks for a time long enough for the warning."""
    from tutorial_lib import jobs
    from tutorial_lib.jobs import preflight
    from tutorial_lib.jobs.slurm_values import check_time_against_warning

    asked = []

    def submit(config, **options):
        asked.append(options["time"])
        raise jobs.JobError("not submitted here")

    monkeypatch.setattr(jobs, "choose_backend", lambda backend, verbose=False: "slurm")
    monkeypatch.setattr(jobs, "submit", submit)
    site = {"partition": "p", "time": "04:00:00", "sbatch_options": ["--signal=B:USR1@300"]}
    report = preflight.run(make_config("smoke", name="pf", output_root=str(tmp_path)), site=site)
    assert not report.ok and len(asked) == 1
    check_time_against_warning(asked[0], site["sbatch_options"])
    preflight.run(make_config("smoke", name="pf", output_root=str(tmp_path)), site={"partition": "p"})
    assert asked[1] == preflight.PREFLIGHT_TIME  # the default warning: the usual 5 minutes


# ------------------------------------------------------------------ the bench's files and launch (the 2nd re-run)
def _bench(argv, capsys):
    from tutorial_lib.bench.cli import main as bench_main

    status = bench_main(argv)
    return status, capsys.readouterr().err.strip().splitlines()


def test_bench_appends_to_no_file_that_holds_no_records(tmp_path, capsys):
    """`bench matmul --out ~/.bashrc` appended a JSON record to the user's file; /dev/full named no flag."""
    user_file = tmp_path / "bashrc"
    user_file.write_text("export X=1\n")
    for out in (user_file, "/dev/full", tmp_path):
        status, err = _bench(["matmul", "--device", "cpu", "--out", str(out)], capsys)
        assert status == 2 and len(err) == 1 and err[0].startswith("error: --out:"), err
    assert user_file.read_text() == "export X=1\n"
    table = tmp_path / "notes.md"
    table.write_text("my notes\n")
    results = tmp_path / "r.jsonl"
    results.write_text(json.dumps({"kind": "matmul", "device": "cpu"}) + "\n")
    status, err = _bench(["table", str(results), "--out", str(table)], capsys)
    assert status == 2 and err[0].startswith("error: --out:") and table.read_text() == "my notes\n"


def test_bench_table_refuses_files_that_are_not_results(tmp_path, capsys):
    """`bench table /nonexistent.jsonl` (or $HOME, /dev/null) printed blank lines and exited 0."""
    notes = tmp_path / "notes.txt"
    notes.write_text("hello\n")
    for name in (tmp_path / "missing.jsonl", notes, tmp_path):
        status, err = _bench(["table", str(name)], capsys)
        assert status == 2 and len(err) == 1 and err[0].startswith("error: files:"), err


def test_bench_launch_and_data_folder_are_named(tmp_path, capsys, monkeypatch):
    """allreduce without torchrun was a traceback; --matmul-tflops a TypeError; a file as --data-dir named the
    generator's parameter `root`; scale's empty --steps suggested numbers, which it then refused."""
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    status, err = _bench(["allreduce"], capsys)
    assert status == 2 and err == [err[0]] and "torchrun" in err[0], err
    status, err = _bench(["train", "--matmul-tflops", "0"], capsys)
    assert status == 2 and err[0].startswith("error: --matmul-tflops:"), err
    a_file = tmp_path / "bashrc"
    a_file.write_text("x\n")
    for command in ("staging", "loader", "data"):
        status, err = _bench([command, "--data-dir", str(a_file)], capsys)
        assert status == 2 and err[0].startswith("error: --data-dir:"), (command, err)
    status, err = _bench(["scale", "--steps", ""], capsys)
    assert status == 2 and "prepare, tar, scan" in err[0], err
