"""What the tenth re-run of issue 43 (/work/wt/notes/r43q-report.md) found at 6221301, each failing on the code
before (checked by reverting the library change):

* records read back with numbers Python cannot use: a lost local job whose last metrics event has ``time: 1e999``
  (OverflowError in ``time.localtime``), a job.json ``submitted`` of 400 digits (in ``float``), a supervisor pid of
  400 digits or ``1e999`` (in ``os.kill``, ``psutil.Process``), an ``images_per_sec`` of 400 digits in
  ``bench runs`` (in ``math.isfinite``);
* a run directory that is a dangling symbolic link: ``jobs.submit`` followed it and made the run at its target;
* path arguments and settings that are a symbolic link loop: ``course --out`` a RuntimeError traceback, ``course -p
  data_dir`` a notebook failing at a cell, ``evaluate --data-dir`` blamed on prepare's mark file ("move it away");
* ``submit(module_args=['x' * 10**6])`` accepted, the job failing at exec (E2BIG);
* ``bench staging`` with a relative ``--stage-to`` (a StagingError traceback), and with a class folder linked to the
  home folder (its files read as images); ``bench loader``'s torchvision recipe walked a class linked to ``/``;
* ``bench table`` of a file with no benchmark record: blank lines, exit 0.
"""

from __future__ import annotations

import json
import os

import pytest

from tests.conftest import command_in_process, write_image_tree
from tests.test_contract_rerun2 import _one_line
from tutorial_lib import jobs
from tutorial_lib.engine.config import ConfigError, make_config
from tutorial_lib.exits import EXIT_REFUSED

HUGE = "9" * 400


def _lost_local_job(run_dir, submitted: str = "1e9", pid: str = "1", supervisor: bool = True):
    """A local job's records as they are when its supervisor is lost (RUNNING, no process), with ``submitted`` and
    the supervisor's ``pid`` written as raw JSON (numbers Python's json reads but cannot use); without
    ``supervisor`` and its state file, a job whose supervisor never wrote a word."""
    run_dir.mkdir(parents=True)
    record = (f'{{"backend": "local", "id": "local-1", "name": "{run_dir.name}", "submitted": {submitted}'
              + (f', "supervisor": {{"pid": {pid}, "start": 1, "cmdline": ["python"]}}}}' if supervisor else "}"))
    (run_dir / "job.json").write_text(record)
    if supervisor:
        (run_dir / "job_state.json").write_text(json.dumps({"state": "RUNNING", "time": 1.0e9}))
    (run_dir / "metrics.jsonl").write_text('{"event": "start", "time": 1.0e9}\n')
    return run_dir


@pytest.mark.parametrize("case", ["metrics-time-inf", "metrics-time-nan", "submitted-400-digits", "submitted-list",
                                  "supervisor-pid-400-digits", "supervisor-pid-inf", "supervisor-pid-list"])
def test_a_lost_jobs_records_with_numbers_python_cannot_use_are_explained(tmp_path, case):
    """Each was a traceback (OverflowError, TypeError) from ``state``, ``explain`` or ``cancel``."""
    run_dir = tmp_path / "job1"
    if case.startswith("metrics"):
        _lost_local_job(run_dir)
        with open(run_dir / "metrics.jsonl", "a") as handle:
            handle.write(f'{{"event": "step", "time": {"1e999" if case.endswith("inf") else "NaN"}, "step": 9}}\n')
    elif case.startswith("submitted"):
        _lost_local_job(run_dir, submitted=HUGE if "digits" in case else "[1]", supervisor=False)
    else:
        _lost_local_job(run_dir, pid={"supervisor-pid-400-digits": HUGE, "supervisor-pid-inf": "1e999",
                                      "supervisor-pid-list": "[1]"}[case])
    job = jobs.attach(run_dir)
    assert job.state == "FAILED"  # lost: no process is proven to be its supervisor
    explained = job.explain()
    assert "ended FAILED" in explained and ("at ?" in explained if case.startswith("metrics") else True)
    assert job.cancel(wait=1) == "FAILED"  # nothing signalled


def test_bench_runs_leaves_out_a_rate_of_400_digits(runs):
    from tutorial_lib.bench.cli import main

    summary = runs.in_process(runs.config("rate", epochs=1, max_steps_per_epoch=6, log_every=1))
    assert summary["status"] == "completed"
    metrics = runs.run_dir("rate") / "metrics.jsonl"
    lines = metrics.read_text().splitlines()
    step = next(i for i, line in enumerate(lines) if json.loads(line)["event"] == "step")
    lines[step] = lines[step].replace('"images_per_sec": ', f'"images_per_sec": {HUGE}, "was": ', 1)
    metrics.write_text("\n".join(lines) + "\n")
    result = command_in_process(main, ["runs", str(runs.run_dir("rate")), "--quiet"])
    assert "Traceback" not in result.stderr and result.returncode == 0, result.stderr[-1500:]
    assert "images_per_sec that is no measurement" in result.stderr


# ------------------------------------------------------------------ a dangling link as the run directory
def test_submit_does_not_follow_a_run_directory_that_is_a_dangling_link(tmp_path, monkeypatch):
    monkeypatch.setattr(jobs, "submit_local", lambda *a, **k: pytest.fail("submitted"))
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "r").symlink_to(tmp_path / "elsewhere" / "made-by-submit")
    cfg = make_config("smoke", dataset="synthetic", output_root=str(tmp_path / "runs"), name="r", device="cpu")
    with pytest.raises(ConfigError, match=r"^output_root: the run directory .*/runs/r \(output_root/name\) exists "
                                          r"but is not a folder\. Fix: "):
        jobs.submit(cfg, backend="local")
    assert not (tmp_path / "elsewhere").exists()


# ------------------------------------------------------------------ symbolic link loops in paths
@pytest.fixture
def loop(tmp_path):
    (tmp_path / "loop1").symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(tmp_path / "loop1")
    return tmp_path / "loop1"


def test_course_out_a_link_loop_is_refused_naming_out(loop):
    from tutorial_lib.course.runner import main

    result = command_in_process(main, ["--only", "00", "--out", str(loop)])
    assert result.returncode == EXIT_REFUSED
    _one_line(result.stderr, "--out: ")
    assert "cannot be followed" in result.stderr and "Fix: remove the symbolic link loop" in result.stderr


def test_course_data_dir_a_link_loop_is_refused_before_any_notebook(loop, tmp_path):
    from tutorial_lib.course.runner import main

    result = command_in_process(main, ["--only", "00", "-p", "data_dir", str(loop / "x"), "--out",
                                       str(tmp_path / "out")])
    assert result.returncode == EXIT_REFUSED
    _one_line(result.stderr, "parameters: data_dir: ")
    assert not (tmp_path / "out").exists()  # nothing was run


def test_evaluate_data_dir_a_link_loop_names_data_dir_not_a_mark_file(loop, tmp_path):
    from tutorial_lib.evaluate import main

    (tmp_path / "run").mkdir()
    result = command_in_process(main, [str(tmp_path / "run"), "--data-dir", str(loop), "--device", "cpu"])
    assert result.returncode == EXIT_REFUSED
    line = _one_line(result.stderr, "--data-dir: ")
    assert "cannot be followed" in line and "mark" not in line


def test_a_config_path_that_is_a_link_loop_is_refused_naming_the_field(loop):
    from tutorial_lib.engine.config import validate

    for field in ("data_dir", "output_root"):
        with pytest.raises(ConfigError, match=rf"^{field}: .* cannot be followed .* Fix: remove the symbolic link"):
            validate(make_config("smoke", dataset="imagefolder", **{field: str(loop)}), check_paths=False)


# ------------------------------------------------------------------ arguments no program can be given
def test_module_args_longer_than_a_program_takes_are_refused_before_submit(tmp_path, monkeypatch):
    monkeypatch.setattr(jobs, "submit_local", lambda *a, **k: pytest.fail("submitted"))
    cfg = make_config("smoke", dataset="synthetic", output_root=str(tmp_path / "runs"), name="r", device="cpu")
    # r43r: one of exactly 131,072 bytes (MAX_ARG_STRLEN counts its NUL), 120,000 short ones (a pointer each)
    for arguments in (["x" * 200_000], ["x" * 100_000] * 11, ["x" * 131_072], ["x"] * 120_000):
        with pytest.raises(ConfigError, match=r"^module_args: .* bytes .* are more than a program can be given: .* "
                                              r"Fix: write long values to a file"):
            jobs.submit(cfg, backend="local", module="tutorial_lib.bench", module_args=arguments)
    assert not (tmp_path / "runs").exists()


# ------------------------------------------------------------------ bench staging, loader, table
@pytest.fixture
def linked_home(tmp_path):
    """A small set whose train/ and val/ each hold a class folder linked to a 'home' folder of the user's files."""
    write_image_tree(tmp_path / "d", {"train": {"a": 4, "b": 4}, "val": {"a": 2, "b": 2}}, 16, ".JPEG")
    home = tmp_path / "home"
    (home / "data").mkdir(parents=True)
    (home / "data" / "mine.JPEG").write_text("a user's file, not an image")
    for split in ("train", "val"):
        (tmp_path / "d" / split / "lnk").symlink_to(home)
    return tmp_path / "d"


def test_bench_staging_reads_the_classes_not_a_linked_home_and_takes_a_relative_stage_to(linked_home, tmp_path,
                                                                                         monkeypatch):
    from tutorial_lib.bench.cli import main

    (tmp_path / "st").mkdir()
    monkeypatch.chdir(tmp_path)
    result = command_in_process(main, ["staging", "--data-dir", str(linked_home), "--repeats", "1", "--stage-to",
                                       "st", "--out", str(tmp_path / "staging.jsonl")])
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-1500:]
    records = [json.loads(line) for line in (tmp_path / "staging.jsonl").open()]
    assert {r["mode"]: r["images"] for r in records} == {"copy": 12, "shared": 12, "staged": 12}
    assert os.listdir(tmp_path / "st") == []  # its temporary folder removed


def test_bench_loaders_torchvision_recipe_uses_the_trainers_classes(linked_home, tmp_path):
    from tutorial_lib.bench.cli import main

    result = command_in_process(main, ["loader", "--data-dir", str(linked_home), "--workers", "0", "--batch-size",
                                       "2", "--image-size", "16", "--min-time", "0.2", "--repeats", "1",
                                       "--decode-images", "0", "--out", str(tmp_path / "loader.jsonl")])
    assert result.returncode == 0 and "mine.JPEG" not in result.stderr, result.stderr[-1500:]
    statuses = {(r["kind"], r.get("recipe")): r["status"] for r in map(json.loads, open(tmp_path / "loader.jsonl"))}
    assert statuses == {("loader", "plain"): "ok", ("loader", "tutorial"): "ok", ("loader_ratio", None): "ok"}


def test_bench_table_of_a_file_with_no_benchmark_record_is_refused(tmp_path):
    from tutorial_lib.bench.cli import main

    (tmp_path / "metrics.jsonl").write_text('{"event": "step", "time": 1.0, "images_per_sec": 5.0}\n')
    result = command_in_process(main, ["table", str(tmp_path / "metrics.jsonl")])
    assert result.returncode == EXIT_REFUSED
    line = _one_line(result.stderr, "FILE: ")
    assert "holds no benchmark record" in line and "bench runs RUN_DIR" in line


# ------------------------------------------------------------------ a Slurm record's slurm_conf; wait's poll
@pytest.mark.parametrize("conf", ["[1]", '{"a": 1}', "5", "true", '"a\\u0000b"'])
def test_a_slurm_conf_of_another_type_is_a_damaged_record_not_a_traceback(tmp_path, conf):
    """A list was used as a dict key in the watcher (TypeError: unhashable), a number put into squeue's environment."""
    (tmp_path / "j").mkdir()
    record = f'{{"id": "12345", "backend": "slurm", "name": "j", "slurm_conf": {conf}}}'
    (tmp_path / "j" / "job.json").write_text(record)
    with pytest.raises(jobs.JobError, match=r"holds a job slurm_conf of another type than tutorial_lib\.jobs writes "
                                            r".* Fix: submit the job again"):
        jobs.attach(tmp_path / "j")


def test_wait_refuses_a_poll_of_zero(tmp_path):
    """``wait(poll=0)`` asked the scheduler (or read the records) in a loop without a pause."""
    run_dir = _lost_local_job(tmp_path / "job1")
    with pytest.raises(ConfigError, match=r"^poll: expected a number of seconds > 0 and at most 1e\+09, got 0\. "
                                            r"Fix: e\.g\. poll=10"):
        jobs.attach(run_dir).wait(timeout=1, poll=0)
