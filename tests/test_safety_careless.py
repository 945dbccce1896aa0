"""Nothing lost, nothing silent (issue 18): what a careless input gets now.

One section per class of defect: a folder recognised only by a file name, a resume with another recipe,
non-finite settings and losses and empty epochs, names that end in a newline, a full disk during a save,
a recorded pid that now belongs to another program, and the exit status of a stopped run. Each test failed
on the code before issue 18 (checked by running this file there, with the new names shimmed in), except two
cases of the whole-match test (a NUL and an escape sequence), which the old character class already refused.
"""

from __future__ import annotations

import dataclasses
import json
import math
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.conftest import REPO_ROOT, subprocess_env, tmpfs, write_image_tree
from tutorial_lib import jobs
from tutorial_lib.engine.config import ConfigError, make_config, validate, validate_name
from tutorial_lib.engine.input.folders import DataError, export_digits
from tutorial_lib.engine.optim import lr_schedule_values
from tutorial_lib.engine.recipe import SAFE_TO_CHANGE, check_resume
from tutorial_lib.engine.stop import EXIT_DIVERGED, EXIT_STOPPED
from tutorial_lib.engine.trainer import Trainer, TrainingDiverged
from tutorial_lib.engine.validate import FLOAT_RANGES
from tutorial_lib.jobs.record import write_job_file
from tutorial_lib.jobs.spec import make_spec
from tutorial_lib.jobs.states import write_state
from tutorial_lib.rundir.checkpoint import SaveError, load_checkpoint, save_atomic
from tutorial_lib.rundir.layout import CHECKPOINT_FILE, CONFIG_FILE, DONE_FILE, INDEX_FILE, METRICS_FILE, STOP_FILE
from tutorial_lib.rundir.lock import RunDirError, prepare_run_dir, process_start
from tutorial_lib.rundir.metrics import MetricsWriter
from tutorial_lib.rundir.owned import clear_run_dir

TINY = dict(image_size=16, batch_size=8, epochs=1, max_steps_per_epoch=2, log_every=1)


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _user_folder(root: Path, **extra: bytes) -> dict[str, bytes]:
    """A user's folder: a thesis, notes, and whatever ``extra`` names (files that look like the project's)."""
    files = {"thesis.tex": b"\\chapter{Results}\n", "notes.txt": b"do not delete\n", **extra}
    root.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        (root / name).write_bytes(content)
    return files


def _one_line_error(result: subprocess.CompletedProcess, status: int, starts: str) -> str:
    assert result.returncode == status, f"exit {result.returncode}:\n{result.stdout}\n{result.stderr[-3000:]}"
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    error = result.stderr.strip().splitlines()[-1]
    assert error.startswith(f"error: {starts}") and "Fix" in error, error
    return error


@pytest.fixture(scope="module")
def finished(make_runs):
    """One real finished run (1 epoch of 2 steps), copied by the tests that need a run directory."""
    runs = make_runs()
    assert runs.in_process(runs.config("base", **TINY))["status"] == "completed"
    return runs


def _copy_run(finished, runs, name: str) -> Path:
    target = runs.run_dir(name)
    shutil.copytree(finished.run_dir("base"), target)
    return target


# ------------------------------------------------------------------ 1. marks by content, fresh removes only ours
@pytest.mark.parametrize("mark", [DONE_FILE, STOP_FILE])
def test_fresh_never_removes_a_folder_marked_only_by_a_file_name(tmp_path, digits_dir, mark):
    """A user's folder with a file named DONE or an empty STOP beside a thesis was deleted by fresh=True."""
    root = tmp_path / "runs"
    files = _user_folder(root / "thesis", **{mark: b"" if mark == STOP_FILE else b"done\n"})
    cfg = make_config("smoke", name="thesis", output_root=str(root), data_dir=str(digits_dir),
                      dataset="imagefolder", **TINY)
    with pytest.raises(ConfigError, match="Fix"):
        jobs.submit(cfg, backend="local", fresh=True, verbose=False)
    assert _files(root / "thesis") == files
    with pytest.raises(RunDirError, match="output_root"):  # the trainer refuses it too, before writing
        prepare_run_dir(root / "thesis")
    assert _files(root / "thesis") == files


def test_fresh_removes_only_the_projects_files_and_lists_the_others(finished, runs, tmp_path):
    """A user's notes.txt inside a real run directory was removed by fresh=True."""
    run_dir = _copy_run(finished, runs, "with-notes")
    (run_dir / "notes.txt").write_text("what I saw in this run\n")
    before = _files(run_dir)
    cfg = runs.config("with-notes", **TINY)
    with pytest.raises(ConfigError) as error:
        jobs.submit(cfg, backend="local", fresh=True, verbose=False)
    assert "'notes.txt'" in str(error.value) and "nothing was removed" in str(error.value)
    assert _files(run_dir) == before
    (run_dir / "notes.txt").unlink()
    removed = {p.name for p in clear_run_dir(run_dir)}
    assert {CONFIG_FILE, METRICS_FILE, CHECKPOINT_FILE, DONE_FILE} <= removed and not run_dir.exists()


def test_a_slurm_jobs_batch_script_is_the_projects_and_a_users_job_sbatch_is_not(finished, runs):
    """A Slurm run directory holds job.sbatch (the job's copy of train.sbatch): rerunning a notebook with fresh=True
    refused its own run directory ("holds files that this project did not write ('job.sbatch')")."""
    from tutorial_lib.jobs.commands import batch_script
    from tutorial_lib.rundir.layout import JOB_SCRIPT

    run_dir = _copy_run(finished, runs, "slurm-rerun")
    spec = make_spec(runs.config("slurm-rerun", **TINY), nodes=1, ranks_per_node=1, check_data=False)
    (run_dir / JOB_SCRIPT).write_text(batch_script(spec))
    assert JOB_SCRIPT in {p.name for p in clear_run_dir(run_dir)} and not run_dir.exists()

    run_dir = _copy_run(finished, runs, "users-script")
    (run_dir / JOB_SCRIPT).write_text("#!/bin/bash\n#SBATCH --time=01:00:00\npython my_experiment.py\n")
    with pytest.raises(RunDirError, match="job.sbatch"):
        clear_run_dir(run_dir)
    assert (run_dir / JOB_SCRIPT).read_text().endswith("my_experiment.py\n")


def test_a_preflight_jobs_results_are_the_projects_and_a_users_preflight_jsonl_is_not(finished, runs):
    """Notebook 05's pre-flight job leaves preflight.jsonl (one line per rank): rerunning the notebook refused its own
    run directory ("holds files that this project did not write ('preflight.jsonl')")."""
    from tutorial_lib.rundir.layout import PREFLIGHT_FILE

    run_dir = _copy_run(finished, runs, "preflight-rerun")
    line = {"rank": 0, "world": 2, "node": "node1", "python": "/usr/bin/python3", "torch": "2.14.1"}
    (run_dir / PREFLIGHT_FILE).write_text(json.dumps(line) + "\n" + json.dumps({**line, "allreduce_sum": 2.0}) + "\n")
    assert PREFLIGHT_FILE in {p.name for p in clear_run_dir(run_dir)} and not run_dir.exists()

    run_dir = _copy_run(finished, runs, "users-preflight")
    (run_dir / PREFLIGHT_FILE).write_text("my own notes on the pre-flight\n")
    with pytest.raises(RunDirError, match="preflight.jsonl"):
        clear_run_dir(run_dir)
    assert (run_dir / PREFLIGHT_FILE).read_text() == "my own notes on the pre-flight\n"


def test_a_marker_file_without_the_generators_settings_is_not_a_mark(tmp_path):
    """digits_export.json, fake_imagenet.json or .tutorial_course_output alone made a folder replaceable."""
    from tutorial_lib import course
    from tutorial_lib.bench.fake_imagenet import FAKE_MARKER, make_fake_imagenet

    for folder, marker in (("digits", "digits_export.json"), ("fake", FAKE_MARKER), ("out", course.OUTPUT_MARKER)):
        _user_folder(tmp_path / folder, **{marker: b""})
    before = {folder: _files(tmp_path / folder) for folder in ("digits", "fake", "out")}
    with pytest.raises(DataError, match="data_dir"):
        export_digits(tmp_path / "digits", image_size=8)
    with pytest.raises(DataError, match="root"):
        make_fake_imagenet(tmp_path / "fake", classes=1, per_class=1, size=(8, 8))
    with pytest.raises(SystemExit, match="out"):
        course.check_output_folder(tmp_path / "out")
    assert {folder: _files(tmp_path / folder) for folder in before} == before


def test_an_export_is_not_replaced_while_a_users_file_is_in_it(tmp_path):
    root = tmp_path / "digits"
    export_digits(root, image_size=8)
    (root / "train" / "my-labels.csv").write_text("id,label\n")
    with pytest.raises(DataError, match="my-labels.csv"):
        export_digits(root, image_size=12)  # other settings: the old export would be replaced
    assert (root / "train" / "my-labels.csv").read_text() == "id,label\n"
    assert json.loads((root / "digits_export.json").read_text())["image_size"] == 8


# ---------------------------------------------------------------------- 2. a resume checks the recipe
@pytest.mark.parametrize("change", [dict(batch_size=16), dict(image_size=24), dict(arch="resnet34"),
                                    dict(optimizer="lars"), dict(label_smoothing=0.1)])
def test_a_resume_with_another_recipe_is_refused_before_writing(finished, runs, change):
    """Another --batch-size/--image-size resumed silently; another --arch rewrote config.json, then crashed."""
    run_dir = _copy_run(finished, runs, "changed")
    before = _files(run_dir)
    key, value = next(iter(change.items()))
    with pytest.raises(ConfigError) as error:
        runs.in_process(runs.config("changed", **{**TINY, "epochs": 2, **change}))
    message = str(error.value)
    assert message.startswith("resume:") and f"{key} {TINY.get(key, getattr(runs.config('x'), key))!r}" in message
    assert "--name" in message and "fresh" in message and "\n" not in message
    assert _files(run_dir) == before  # nothing written: config.json, metrics.jsonl, checkpoint as they were


# What a resume may change (engine/recipe.py's SAFE_TO_CHANGE), written out here: a field that changes the arithmetic
# of training added there (precision: an fp16 run resumed in fp32, a bf16 one in fp16) must fail this file.
RESUMABLE = {"name", "output_root", "profile", "data_dir", "epochs", "stop_after_epochs", "workers", "prefetch",
             "input_pipeline", "bad_data", "stage_to", "index_dir", "device", "compile", "bucket_cap_mb", "allreduce",
             "log_every", "checkpoint", "progress"}


def _another(value):
    """A value of the same type that differs from ``value``."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, list):
        return [*value, 99]
    return f"{value}-other"


@pytest.mark.parametrize("before, after", [("fp16", "fp32"), ("bf16", "fp16"), ("fp32", "tf32")])
def test_a_resume_in_another_precision_is_refused(before, after):
    """Issue 47: the check was planted to accept a change of precision and no test noticed."""
    checkpoint = {"config": make_config("smoke", precision=before).to_dict(), "progress": {"epoch": 1}}
    with pytest.raises(ConfigError, match=f"precision '{before}' -> '{after}'"):
        check_resume(checkpoint, make_config("smoke", precision=after, epochs=5), {}, "runs/x")


def test_a_resume_refuses_a_change_of_every_field_but_where_how_long_and_how_fast():
    assert SAFE_TO_CHANGE == RESUMABLE
    cfg = make_config("smoke")
    checkpoint = {"config": cfg.to_dict(), "progress": {"epoch": 1}}
    for field in dataclasses.fields(cfg):
        changed = dataclasses.replace(cfg, **{field.name: _another(getattr(cfg, field.name))})
        if field.name in RESUMABLE:  # recorded as a change (the run directory's place is not one)
            allowed = check_resume(checkpoint, changed, {}, "runs/x")
            assert field.name in allowed or field.name in ("name", "output_root")
        else:
            with pytest.raises(ConfigError, match=f"{field.name} "):
                check_resume(checkpoint, changed, {}, "runs/x")


def test_a_resume_refused_on_the_command_line_is_one_line(finished, runs):
    run_dir = _copy_run(finished, runs, "other-arch")
    before = _files(run_dir)
    result = runs.main(runs.flags("other-arch", **{**TINY, "arch": "resnet34"}))
    error = _one_line_error(result, 2, "resume:")
    assert "arch 'resnet18' -> 'resnet34'" in error
    assert _files(run_dir) == before


def test_more_epochs_resume_and_the_change_is_recorded(finished, runs):
    """The resumed steps follow the longer plan's schedule (issue 47: the checkpoint's scheduler carried the old
    plan's length, so the cosine decay ran out at the old end and the LR jumped back up)."""
    run_dir = _copy_run(finished, runs, "longer")
    final = runs.config("longer", **{**TINY, "epochs": 2})
    summary = runs.in_process(final)
    assert summary["status"] == "completed"
    resume, = runs.events(run_dir, "resume")
    assert resume["changes"] == {"epochs": [1, 2]}
    assert [e["epoch"] for e in runs.events(run_dir, "epoch")] == [1, 2]
    # the LR of every resumed step: the resume's, then each step event's (the LR after that step) but the last
    steps = [e for e in runs.events(run_dir, "step") if e["step"] > resume["global_step"]]
    resumed = [resume["lr"]] + [e["lr"] for e in steps[:-1]]
    uninterrupted = lr_schedule_values(final, TINY["max_steps_per_epoch"])  # a 2-epoch run's schedule
    assert resumed == pytest.approx(uninterrupted[resume["global_step"]:], rel=1e-12)
    assert resumed[-1] == pytest.approx(resumed[0] / 2)  # half-way down the new plan's cosine, not at its end


# ------------------------------------------------------------- 3. finite settings, finite losses, real epochs
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("name", sorted(FLOAT_RANGES))
def test_every_float_setting_must_be_finite(digits_dir, name, value):
    """--base-lr nan/inf and --momentum nan passed validation; --warmup-epochs nan gave a traceback."""
    cfg = make_config("smoke", data_dir=str(digits_dir), dataset="imagefolder", **{name: value})
    with pytest.raises(ConfigError, match=f"^{name}: must be a finite number"):
        validate(cfg)


@pytest.mark.parametrize("name, value", [("momentum", 1.5), ("weight_decay", 2.0), ("lars_trust_coefficient", 0.0)])
def test_float_settings_out_of_range_are_refused(digits_dir, name, value):
    cfg = make_config("smoke", data_dir=str(digits_dir), dataset="imagefolder", **{name: value})
    with pytest.raises(ConfigError, match=f"^{name}: must be in"):
        validate(cfg)


def test_a_diverging_run_stops_with_a_reason_and_no_done(runs):
    """--base-lr 1e6 went to NaN loss and ended 'finished', exit 0, DONE written."""
    result = runs.module(runs.flags("diverges", **{**TINY, "base_lr": 1e6, "warmup_epochs": 0.0,
                                                   "max_steps_per_epoch": 6}))
    error = _one_line_error(result, EXIT_DIVERGED, "training loss is")
    run_dir = runs.run_dir("diverges")
    assert not (run_dir / DONE_FILE).exists() and not (run_dir / CHECKPOINT_FILE).exists()
    failure, = runs.events(run_dir, "error")
    assert failure["reason"] in error and failure["kind"] == "TrainingDiverged"
    assert not runs.events(run_dir, "end") and not runs.events(run_dir, "epoch")


def test_a_non_finite_loss_keeps_the_checkpoint_from_before(finished, runs, monkeypatch):
    run_dir = _copy_run(finished, runs, "nan-later")
    checkpoint = (run_dir / CHECKPOINT_FILE).read_bytes()
    real_step = Trainer.train_step
    monkeypatch.setattr(Trainer, "train_step", lambda self, batch: real_step(self, batch) * math.nan)
    with pytest.raises(TrainingDiverged, match="epoch 2"):
        runs.in_process(runs.config("nan-later", **{**TINY, "epochs": 2}))
    assert (run_dir / CHECKPOINT_FILE).read_bytes() == checkpoint  # epoch 1's, not the NaN weights
    assert runs.events(run_dir, "error")[-1]["epoch"] == 1 and not (run_dir / DONE_FILE).exists()


def test_an_epoch_with_no_readable_image_is_an_error(runs, tmp_path, monkeypatch):
    """An epoch whose every image was unreadable reported loss 0.000 and a speed, and finished with exit 0. (Such a
    split is refused before the run starts: tests/test_contract_rerun12.py; the files may also break after that
    check, as here.)"""
    from tutorial_lib.engine.input import files

    data = tmp_path / "unreadable"
    write_image_tree(data, {"train": {"a": 4, "b": 4}, "val": {"a": 2, "b": 2}})
    for image in (data / "train").rglob("*.png"):
        image.write_bytes(b"not an image")
    monkeypatch.setattr(files, "check_readable", lambda root, split, **kwargs: root)
    with pytest.raises(DataError, match="no training image of epoch 1 could be read"):
        runs.in_process(runs.config("unreadable", **{**TINY, "data_dir": str(data)}))
    assert runs.events(runs.run_dir("unreadable"), "error")
    assert not runs.events(runs.run_dir("unreadable"), "epoch")


# ---------------------------------------------------------------------------- 4. names matched whole
@pytest.mark.parametrize("bad", ["run\n", "run\r", "run\x00", "run\t", "run\x1b[31m"])
def test_names_and_slurm_words_are_matched_whole(tmp_path, digits_dir, bad):
    """A name, partition or account ending in a newline passed (and made a run directory 'run\\n')."""
    with pytest.raises(ConfigError, match="name"):
        validate_name(bad)
    cfg = make_config("smoke", name="ok", output_root=str(tmp_path), data_dir=str(digits_dir), dataset="imagefolder")
    for what in ("partition", "account"):
        with pytest.raises(ConfigError, match=what):
            make_spec(cfg, 1, 1, "00:10:00", **{"partition": None, "account": None, what: bad},
                      sbatch_options=(), max_restarts=0, check_data=False)
    with pytest.raises(ConfigError, match="time"):
        make_spec(cfg, 1, 1, "30" + bad[-1], None, None, (), 0, False)
    with pytest.raises(ConfigError, match="sbatch_options"):
        make_spec(cfg, 1, 1, "00:10:00", None, None, ["--exclusive" + bad[-1]], 0, False)
    assert not any(tmp_path.iterdir())


# ------------------------------------------------------------------------------- 5. faults during saves
@pytest.fixture
def small_disk(tmp_path):
    """A 4 MiB tmpfs (a full disk without filling the real one); skipped where mounting is not allowed."""
    with tmpfs(tmp_path / "disk", "4m") as mount:
        yield mount


def test_a_full_disk_during_a_save_is_one_line_and_keeps_the_old_checkpoint(small_disk):
    """A full disk ended with a 30-line chained traceback (RuntimeError: ... unexpected pos ...)."""
    path = small_disk / "run" / CHECKPOINT_FILE
    save_atomic({"weights": torch.ones(1000)}, path)
    with pytest.raises(SaveError) as error:
        save_atomic({"weights": torch.ones(2_000_000)}, path)  # 8 MB on a 4 MiB disk
    message = str(error.value)
    assert str(path) in message and "No space left on device" in message and "\n" not in message
    assert torch.equal(load_checkpoint(path)["weights"], torch.ones(1000))  # the previous checkpoint
    assert sorted(p.name for p in path.parent.iterdir()) == [CHECKPOINT_FILE]  # nothing torn left


def _limit_file_size() -> None:  # in the child: writes beyond 2 MB fail with EFBIG, as a quota would refuse them
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (2 << 20, 2 << 20))


def test_a_trainer_that_cannot_write_its_checkpoint_says_so_in_one_line(runs):
    result = subprocess.run([sys.executable, "-m", "tutorial_lib.train", *runs.flags("no-room", **TINY)],
                            env=subprocess_env(), cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
                            preexec_fn=_limit_file_size)
    error = _one_line_error(result, 1, "could not save")
    run_dir = runs.run_dir("no-room")
    assert str(run_dir / CHECKPOINT_FILE) in error and "File too large" in error
    # no temp file left
    assert sorted(p.name for p in run_dir.iterdir()) == sorted([CONFIG_FILE, INDEX_FILE, METRICS_FILE])


# ------------------------------------------------------------------------ 6. a recorded pid is verified
def test_cancel_never_signals_a_program_that_reused_the_recorded_pid(tmp_path, digits_dir):
    """Job.cancel() on a stale local job sent SIGTERM to whatever program now had the supervisor's pid."""
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        run_dir = tmp_path / "stale"
        spec = make_spec(make_config("smoke", name="stale", output_root=str(tmp_path), data_dir=str(digits_dir),
                                     dataset="imagefolder"), 1, 1, "00:10:00", None, None, (), 0, False)
        started = process_start(other.pid)
        write_job_file(run_dir, {"backend": "local", "name": "stale", "id": f"local-{other.pid}",
                                 "spec": spec.to_dict(), "supervisor_pid": other.pid,
                                 "supervisor_start": started - 1})  # the supervisor that had this pid earlier
        write_state(run_dir, "RUNNING", pids=[other.pid], pid_starts=[started - 1])
        job = jobs.attach(run_dir)
        assert job.state == "FAILED" and "killed" in job.status()["reason"]
        job.cancel(wait=2)
        time.sleep(0.5)
        assert other.poll() is None  # still running, untouched
    finally:
        other.kill()
        other.wait()


# ------------------------------------------------------------------------------ 7. exit statuses
def test_a_stopped_run_exits_with_its_own_status(runs):
    """A run stopped before its end exited 0, like a finished one."""
    flags = runs.flags("stopped-early", **{**TINY, "epochs": 2, "stop_after_epochs": 1})
    stopped = runs.module(flags)
    assert stopped.returncode == EXIT_STOPPED, stopped.stderr[-2000:]
    assert not (runs.run_dir("stopped-early") / DONE_FILE).exists()
    finished = runs.module(runs.flags("stopped-early", **{**TINY, "epochs": 2}))
    assert finished.returncode == 0, finished.stderr[-2000:]
    assert (runs.run_dir("stopped-early") / DONE_FILE).is_file()


def test_the_exit_statuses_are_distinct_and_documented():
    from tutorial_lib.engine import stop

    codes = {name: getattr(stop, name) for name in dir(stop) if name.startswith("EXIT_")}
    assert len(set(codes.values())) == len(codes) == 5
    page = (REPO_ROOT / "docs" / "reliability.md").read_text()
    for value in codes.values():
        assert f"| {value} |" in page


def test_a_job_stopped_before_its_end_is_explained_as_resumable(tmp_path, digits_dir):
    run_dir = tmp_path / "stopped-job"
    spec = make_spec(make_config("smoke", name="stopped-job", output_root=str(tmp_path), data_dir=str(digits_dir),
                                 dataset="imagefolder"), 1, 1, "00:10:00", None, None, (), 0, False)
    write_job_file(run_dir, {"backend": "local", "name": "stopped-job", "id": "local-1", "spec": spec.to_dict()})
    write_state(run_dir, "FAILED", exit_code=1)  # torchrun's status for a rank that exited 75
    metrics = MetricsWriter(run_dir)
    metrics.write("start", epoch=0)
    metrics.write("stop", epoch=1, step_in_epoch=0, global_step=4, reason="STOP file")
    explanation = jobs.attach(run_dir).explain()
    assert "stopped before its end (STOP file)" in explanation and "submit it again" in explanation
