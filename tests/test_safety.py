"""Careless and hostile inputs: nothing deleted, nothing hung, nothing slipped past (issue 10).

Each test names the defect it guards against: a folder that the project did not write is never replaced
or removed; a file that is not a regular file never blocks the loader, and a stop request ends a trainer
in bounded time even while a read blocks; sbatch option abbreviations cannot reach options the library
sets itself; paths Slurm cannot use are refused; unusable run directories get one-line errors; the run
lock is taken atomically; values in messages are cut to a readable length.
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tutorial_lib import jobs
from tutorial_lib.engine.config import ConfigError, make_config, validate_name
from tutorial_lib.engine.input.cpu import CountingImageFolder
from tutorial_lib.engine.input.folders import DataError, export_digits, publish_tree
from tutorial_lib.engine.input.gpu import EncodedImageFolder
from tutorial_lib.jobs.spec import make_spec
from tutorial_lib.rundir.lock import RunLock, RunLockedError

REPO_ROOT = Path(__file__).resolve().parents[1]
TINY = dict(image_size=16, batch_size=8, epochs=1)


def _precious_tree(root: Path) -> dict[str, bytes]:
    """A folder the user cares about (an ImageNet copy, say); returns its files and contents."""
    files = {"train/n01/a.JPEG": b"\xff\xd8 not really a jpeg", "val/n01/b.JPEG": b"\xff\xd8 another",
             "README.txt": b"my data, do not delete\n", "config.json": b'{"mine": true}\n'}
    for name, content in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(content)
    return files


def _unchanged(root: Path, files: dict[str, bytes]) -> bool:
    found = {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    return found == files


def _one_line_error(result: subprocess.CompletedProcess, field: str) -> str:
    assert result.returncode == 2, f"exit {result.returncode}:\n{result.stdout}\n{result.stderr}"
    assert "Traceback" not in result.stderr, result.stderr
    error = result.stderr.strip().splitlines()[-1]
    assert error.startswith(f"error: {field}") and "Fix" in error, error
    return error


# ------------------------------------------------------------------------- 1. nothing deleted
def test_digits_export_refuses_a_folder_it_did_not_write(runs, tmp_path):
    """`--profile smoke --data-dir /path/to/imagenet` without `--dataset imagefolder` deleted the folder."""
    imagenet = tmp_path / "imagenet"
    files = _precious_tree(imagenet)
    result = runs.main(["--profile", "smoke", "--data-dir", str(imagenet), "--output-root",
                          str(runs.output_root), "--name", "forgot-dataset", "--progress", "false"])
    error = _one_line_error(result, "data_dir")
    assert "--dataset imagefolder" in error
    assert _unchanged(imagenet, files)
    assert not runs.run_dir("forgot-dataset").exists()  # refused before a run directory is made
    with pytest.raises(DataError, match="data_dir"):
        export_digits(imagenet, image_size=8)
    assert _unchanged(imagenet, files)


def test_digits_export_replaces_only_its_own_export_or_an_empty_folder(tmp_path):
    root = tmp_path / "digits"
    root.mkdir()
    export_digits(root, image_size=8)  # an empty folder is taken
    first = sorted(p.name for p in (root / "train" / "0").iterdir())
    export_digits(root, image_size=12)  # its own export with other settings is replaced
    assert sorted(p.name for p in (root / "train" / "0").iterdir()) == first
    assert json.loads((root / "digits_export.json").read_text())["image_size"] == 12
    a_file = tmp_path / "a-file"
    a_file.write_text("mine")
    with pytest.raises(DataError, match="data_dir"):
        export_digits(a_file, image_size=8)
    assert a_file.read_text() == "mine"


def test_publish_tree_never_replaces_a_folder_without_the_marker(tmp_path):
    target = tmp_path / "target"
    files = _precious_tree(target)
    staging = tmp_path / "staging"
    staging.mkdir()
    (staging / "marker.json").write_text("{}")
    with pytest.raises(DataError, match="refusing"):
        publish_tree(staging, target, "marker.json")
    assert _unchanged(target, files)


def test_fresh_submit_never_removes_a_folder_that_is_not_a_run_directory(tmp_path, digits_dir):
    root = tmp_path / "runs"
    files = _precious_tree(root / "thesis")
    cfg = make_config("smoke", name="thesis", output_root=str(root), data_dir=str(digits_dir),
                      dataset="imagefolder", **TINY)
    with pytest.raises(ConfigError) as error:
        jobs.submit(cfg, backend="local", fresh=True, verbose=False)
    assert "output_root" in str(error.value) and "Fix" in str(error.value)
    assert _unchanged(root / "thesis", files)


def test_trainer_never_writes_into_a_folder_that_is_not_a_run_directory(runs):
    files = _precious_tree(runs.run_dir("thesis"))
    result = runs.main(runs.flags("thesis", **TINY))
    _one_line_error(result, "output_root")
    assert _unchanged(runs.run_dir("thesis"), files)


def test_course_output_refuses_a_folder_it_did_not_write(tmp_path, monkeypatch):
    import papermill

    from tutorial_lib import course

    executed = []
    monkeypatch.setattr(papermill, "execute_notebook", lambda *a, **k: executed.append(a))
    monkeypatch.delenv(course.SUMMARY_ENV, raising=False)
    out = tmp_path / "notes"
    files = _precious_tree(out)
    (out / "SUMMARY.md").write_bytes(b"# my summary\n")
    files["SUMMARY.md"] = b"# my summary\n"
    with pytest.raises(SystemExit, match="out"):
        course.run_course(out, only=["00"])
    assert executed == [] and _unchanged(out, files)
    monkeypatch.delenv(course.SUMMARY_ENV, raising=False)
    course.run_course(tmp_path / "new", only=["00"])  # a new folder is ours, and so it stays
    course.run_course(tmp_path / "new", only=["00"])
    assert len(executed) == 2
    # a kernel started later in this process (a test's JupyterLab) would write its summary into this folder:
    # seen, 05's summary in the removed tmp_path of this test
    assert course.SUMMARY_ENV not in os.environ


# --------------------------------------------------------------- 2. nothing hung by a blocking file
@pytest.fixture
def fifo_tree(tmp_path, digits_dir):
    root = tmp_path / "tree"
    for split in ("train", "val"):
        for label in "01":
            folder = root / split / label
            folder.mkdir(parents=True)
            count = 7 if (split, label) == ("train", "0") else 8  # 15 images + the FIFO: 2 full batches of 8
            for i, source in enumerate(sorted((digits_dir / split / label).glob("*.jpg"))[:count]):
                shutil.copy(source, folder / f"img{i}.JPEG")
    os.mkfifo(root / "train" / "0" / "img.JPEG")
    return root


@pytest.mark.parametrize("pipeline, folder_class", [("cpu", CountingImageFolder), ("gpu", EncodedImageFolder)])
def test_a_fifo_named_like_an_image_is_skipped_and_named(runs, fifo_tree, pipeline, folder_class):
    fifo = fifo_tree / "train" / "0" / "img.JPEG"
    dataset = folder_class(fifo_tree / "train", bad_data="skip")
    index = [str(p) for p, _ in dataset.samples].index(str(fifo))
    result = runs.module(runs.flags(f"fifo-{pipeline}", data_dir=str(fifo_tree), input_pipeline=pipeline, **TINY),
                         timeout=600)
    assert result.returncode == 0, result.stderr
    assert f"skipping unreadable image {fifo}" in result.stderr and "not a regular file" in result.stderr
    assert runs.events(runs.run_dir(f"fifo-{pipeline}"), "epoch")[0]["skipped_images"] == 1
    with pytest.raises(DataError, match="not a regular file"):
        folder_class(fifo_tree / "train", bad_data="error")[index]


BLOCKED_TRAINER = """
import os, sys
from pathlib import Path
from tutorial_lib import train
from tutorial_lib.engine.input import cpu
reached, fifo = Path(sys.argv[1]), sys.argv[2]
original = cpu.CountingImageFolder.__getitem__
def blocked(self, index):  # a read that never returns (a FIFO here; a hung network mount in real life)
    reached.touch()
    with open(fifo, "rb") as handle:
        handle.read()
    return original(self, index)
cpu.CountingImageFolder.__getitem__ = blocked
sys.exit(train.main(sys.argv[3:]))
"""


def opening_a_fifo(pid: int) -> bool:
    """Whether a thread of process ``pid`` waits in open() of a FIFO for its writer (the kernel's wchan)."""
    try:
        return any((task / "wchan").read_text() == "wait_for_partner" for task in Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return False


@pytest.mark.parametrize("request_stop", ["SIGTERM", "STOP file"])
def test_a_stop_request_ends_a_trainer_blocked_in_a_read(runs, tmp_path, child_env, request_stop):
    """SIGTERM was caught and the process went back to waiting: only SIGKILL ended it, leaving a LOCK."""
    fifo, reached = tmp_path / "blocking", tmp_path / "reached"
    os.mkfifo(fifo)
    grace = 3
    env = {**child_env, "TUTORIAL_STOP_GRACE_S": str(grace)}
    trainer = subprocess.Popen([sys.executable, "-c", BLOCKED_TRAINER, str(reached), str(fifo),
                                *runs.flags("blocked", **TINY)], env=env, cwd=REPO_ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not reached.exists() and trainer.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert reached.exists(), trainer.communicate(timeout=5)
        while not opening_a_fifo(trainer.pid) and time.monotonic() < deadline:  # the event, not a guessed delay
            time.sleep(0.1)
        assert opening_a_fifo(trainer.pid), "the trainer never blocked in open() of the FIFO"
        asked = time.monotonic()
        if request_stop == "SIGTERM":
            trainer.send_signal(signal.SIGTERM)
        else:
            (runs.run_dir("blocked") / "STOP").touch()
        try:
            _, stderr = trainer.communicate(timeout=grace + 30)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the trainer did not end within {grace + 30} s of the stop request")
        took = time.monotonic() - asked
    finally:
        if trainer.poll() is None:
            trainer.kill()
            trainer.wait()
    assert trainer.returncode not in (0, None)
    assert grace - 1 <= took, took  # waited its grace; the ceiling is communicate()'s timeout above
    assert "did not reach a safe point" in stderr and "TUTORIAL_STOP_GRACE_S" in stderr, stderr
    assert not (runs.run_dir("blocked") / "LOCK").exists()


# ------------------------------------------------------------------ 3. sbatch option abbreviations
# Every option that tutorial_lib.jobs or train.sbatch sets itself, plus those that move files or the
# environment: none may be given again, in full or abbreviated (sbatch resolves unique prefixes).
LIBRARY_SET = ["--parsable", "--job-name", "--nodes", "--ntasks-per-node", "--time", "--chdir", "--output",
               "--export", "--partition", "--account", "--gpus-per-node", "--dependency", "--open-mode",
               "--requeue"]
DANGEROUS = ["--export-file", "--error", "--input", "--wrap", "--uid", "--gid", "--get-user-env", "--container",
             "--clusters", "--array", "--no-requeue", "--ntasks", "--bbf", "--wait", "--test-only"]


def _abbreviations(option: str) -> list[str]:
    return [option[:n] for n in range(3, len(option) + 1)]


@pytest.mark.parametrize("option", LIBRARY_SET + DANGEROUS)
def test_sbatch_options_set_by_the_library_are_refused_in_every_abbreviation(tmp_path, digits_dir, option):
    cfg = make_config("smoke", name="abbrev", output_root=str(tmp_path), data_dir=str(digits_dir))
    for form in _abbreviations(option):
        for given in (form, f"{form}=/tmp/elsewhere"):
            with pytest.raises(ConfigError, match="sbatch_options") as error:
                make_spec(cfg, sbatch_options=[given])
            assert "Fix" in str(error.value)


def test_the_reported_abbreviations_are_refused(tmp_path, digits_dir):
    cfg = make_config("smoke", name="abbrev", output_root=str(tmp_path), data_dir=str(digits_dir))
    for given in ("--export-file=/tmp/evil.env", "--outp=/elsewhere", "--job-nam=other", "--gre=gpu:1"):
        with pytest.raises(ConfigError, match="sbatch_options"):
            make_spec(cfg, sbatch_options=[given])
    spec = make_spec(cfg, sbatch_options=["--gres=gpu:4", "--exclusive", "--mem=0", "--signal=B:USR1@60",
                                          "--constraint=a100", "--qos=debug"])
    assert spec.sbatch_options[0] == "--gres=gpu:4"


def test_every_allowed_sbatch_option_is_a_full_sbatch_option_name(slurm):
    """sbatch takes an exact name as itself; anything else could be a prefix it resolves elsewhere."""
    from tutorial_lib.jobs.slurm_values import SBATCH_ALLOWED

    listed = set(re.findall(r"--[a-z][a-z0-9-]*", subprocess.run(["sbatch", "--help"], capture_output=True,
                                                                 text=True).stdout))
    manual = subprocess.run(["man", "-P", "cat", "sbatch"], capture_output=True, text=True,
                            env={**os.environ, "MANWIDTH": "200"}).stdout
    listed |= set(re.findall(r"--[a-z][a-z0-9-]*", manual.replace("\u2010", "-")))
    assert not set(SBATCH_ALLOWED) - listed


# --------------------------------------------------------------------- 4. paths Slurm cannot use
def test_a_backslash_in_output_root_is_refused_naming_the_character(tmp_path, digits_dir):
    cfg = make_config("smoke", name="bs", output_root=str(tmp_path / "a\\b"), data_dir=str(digits_dir))
    with pytest.raises(ConfigError) as error:
        make_spec(cfg)
    assert "output_root" in str(error.value) and "'\\\\'" in str(error.value) and "Fix" in str(error.value)
    assert not (tmp_path / "a\\b").exists()


def test_explain_says_when_slurm_could_not_open_the_output_file(tmp_path):
    from tutorial_lib.jobs.record import write_job_file

    run_dir = tmp_path / "run"
    write_job_file(run_dir, {"backend": "slurm", "id": "77", "name": "run"})
    message = jobs.Job(run_dir).explain({"state": "FAILED", "exit_code": 0})
    assert "could not open" in message and str(run_dir / "slurm-77.out") in message
    assert "Fix" in message


# ----------------------------------------------------------------- 5. unusable run directories
def _unusable(tmp_path: Path, case: str) -> Path:
    if case == "run directory is a file":
        (tmp_path / "out").mkdir()
        (tmp_path / "out" / "run").write_text("x")
        return tmp_path / "out"
    if case == "output_root is a file":
        (tmp_path / "out").write_text("x")
        return tmp_path / "out"
    return Path("/proc/x")


UNUSABLE = ["run directory is a file", "output_root is a file", "/proc/x"]


@pytest.mark.parametrize("case", UNUSABLE)
def test_an_unusable_run_directory_is_a_one_line_error_from_the_trainer(runs, tmp_path, case):
    root = _unusable(tmp_path, case)
    result = runs.main(runs.flags("run", output_root=str(root), **TINY))
    _one_line_error(result, "output_root")


@pytest.mark.parametrize("case", UNUSABLE)
def test_an_unusable_run_directory_is_refused_by_submit(tmp_path, digits_dir, case):
    root = _unusable(tmp_path, case)
    cfg = make_config("smoke", name="run", output_root=str(root), data_dir=str(digits_dir),
                      dataset="imagefolder", **TINY)
    with pytest.raises(ConfigError) as error:
        jobs.submit(cfg, backend="local", verbose=False)
    assert str(error.value).startswith("output_root") and "Fix" in str(error.value)


# ---------------------------------------------------------------------------- 6. the lock race
def _take(run_dir: str, start_at: float, results, hold) -> None:
    while time.time() < start_at:  # spin, so that the takers on every core start in the same instant
        pass
    try:
        RunLock(run_dir).acquire()
        results.put("held")
    except RunLockedError:
        results.put("refused")
    hold.wait(30)  # stay alive: a live holder's lock is not stale


def test_exactly_one_of_many_simultaneous_takers_gets_the_lock(tmp_path, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    context = multiprocessing.get_context("fork")
    takers, trials = 8, 8
    for trial in range(trials):
        run_dir = tmp_path / f"run{trial}"
        run_dir.mkdir()
        start_at, hold, results = time.time() + 1.0, context.Event(), context.Queue()
        procs = [context.Process(target=_take, args=(str(run_dir), start_at, results, hold))
                 for _ in range(takers)]
        for proc in procs:
            proc.start()
        outcome = sorted(results.get(timeout=60) for _ in procs)
        hold.set()
        for proc in procs:
            proc.join(30)
        assert outcome.count("held") == 1, f"trial {trial}: {outcome.count('held')} takers got the lock"


# ------------------------------------------------------------------------ 8. readable messages
def test_a_huge_value_is_cut_in_messages(tmp_path, digits_dir):
    with pytest.raises(ConfigError) as error:
        validate_name("a" * 4096 + "/")
    assert len(str(error.value)) < 400 and "4,097 characters" in str(error.value)
    cfg = make_config("smoke", name="huge", output_root=str(tmp_path), data_dir=str(digits_dir))
    for kwargs in ({"partition": "p" * 4096 + ";"}, {"sbatch_options": ["--" + "x" * 4096]},
                   {"time": "9" * 4096 + "x"}):
        with pytest.raises(ConfigError) as error:
            make_spec(cfg, **kwargs)
        assert len(str(error.value)) < 500, kwargs.keys()
    with pytest.raises(ConfigError) as error:
        make_spec(dataclasses.replace(cfg, precision="x" * 4096))
    assert len(str(error.value)) < 400
