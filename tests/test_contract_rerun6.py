"""What the fourth re-run of issue 43 (/work/wt/notes/r43f-report.md) found beyond the run-directory links and pipes
(tests/test_contract_rerun5.py): a sweep without a cap, torch files and records that are damaged or hold what the
project never writes, folders of the system as places to write, flags whose refusal named another flag, sizes
refused only inside a started job. Each ends as one line naming the field or flag and the fix, before anything is
written or submitted; each test failed on the code before (r43f's cases, re-run by hand). Unit level: the check
functions are called, nothing trains, submits or runs a notebook.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import zipfile
from pathlib import Path

import psutil
import pytest
import torch

from tests.test_contract_rerun2 import _main, _one_line
from tests.test_contract_rerun4 import _bench_refusal
from tutorial_lib.engine.config import ConfigError, make_config, validate
from tutorial_lib.exits import EXIT_REFUSED


def _tiny(tmp_path, **values):
    return make_config("smoke", dataset="synthetic", output_root=str(tmp_path / "runs"), **values)


# ------------------------------------------------------------------ hang: a sweep of 10,000 values
def test_a_sweep_longer_than_the_cap_is_refused_before_any_value_is_checked(tmp_path, monkeypatch):
    """``sweep(over='seed', values=range(10000))`` ran minutes of checks, then submitted one job per value."""
    from tutorial_lib import jobs
    from tutorial_lib.engine import config as config_module

    submitted = []
    monkeypatch.setattr(jobs, "_launch", lambda spec, *a: submitted.append(spec.config))

    def no_check(*args, **kwargs):
        raise AssertionError("a value was checked before the length was")

    monkeypatch.setattr(config_module, "validate", no_check)
    with pytest.raises(ConfigError, match=r"^values: 10,000 values would submit 10,000 jobs.* Fix: give at most 64"):
        jobs.sweep(_tiny(tmp_path), over="seed", values=list(range(10_000)), backend="local")
    assert submitted == []


# ------------------------------------------------------------------ jobs: records, arguments
def _ended_local_job(tmp_path, state_file: str | None, done: bool) -> tuple[Path, dict]:
    """A local job's run directory whose supervisor has gone (a pid that has ended) after writing ``state_file``."""
    run_dir = tmp_path / "job"
    run_dir.mkdir()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    record = {"id": f"local-{gone.pid}", "backend": "local", "name": "job", "submitted": 0.0,
              "supervisor": {"pid": gone.pid, "start": 1.0, "cmdline": ["python"]}}
    (run_dir / "job.json").write_text(json.dumps(record))
    if state_file == "LINK":
        (run_dir / "job_state.json").symlink_to("/proc/self/status")
    elif state_file is not None:
        (run_dir / "job_state.json").write_text(state_file)
    if done:
        (run_dir / "DONE").write_text("")
    return run_dir, record


DAMAGED_STATES = {"link to /proc": "LINK", "unknown state": '{"state": "EXPLODED"}', "a list": '["RUNNING"]',
                  "exit code nan": '{"state": "COMPLETED", "exit_code": NaN}',
                  "exit code text": '{"state": "COMPLETED", "exit_code": "0"}'}


@pytest.mark.parametrize("damage", DAMAGED_STATES)
def test_a_damaged_job_state_of_a_finished_run_is_no_lost_supervisor(tmp_path, damage):
    """A COMPLETED job (DONE written) with a damaged job_state.json was reported FAILED, "lost: its supervisor (pid
    ...) is gone", and an exit code NaN was given out as ``exit code nan``; job_state.json was never named."""
    from tutorial_lib.jobs.local import local_seen

    run_dir, record = _ended_local_job(tmp_path, DAMAGED_STATES[damage], done=True)
    seen = local_seen(run_dir, record)
    assert (seen.state, seen.exit_code) == ("completed", 0) and "job_state.json is damaged" in seen.reason


@pytest.mark.parametrize("damage", DAMAGED_STATES)
def test_a_damaged_job_state_of_an_unfinished_run_is_named_as_damaged(tmp_path, damage):
    from tutorial_lib.jobs.local import local_seen

    run_dir, record = _ended_local_job(tmp_path, DAMAGED_STATES[damage], done=False)
    seen = local_seen(run_dir, record)
    assert seen.state == "failed" and seen.exit_code is None
    assert seen.reason.startswith(f"damaged: its state file {run_dir / 'job_state.json'} is ")
    assert "Fix: " in seen.reason


def test_job_logs_with_tail_zero_gives_no_line_and_explain_refuses_a_status_of_another_type(tmp_path):
    """``Job.logs(tail=0)`` returned the whole log; ``Job.explain(status='x')`` raised TypeError."""
    from tutorial_lib import jobs

    run_dir, _ = _ended_local_job(tmp_path, '{"state": "COMPLETED", "exit_code": 0}', done=True)
    (run_dir / "job.log").write_text("one\ntwo\nthree\n")
    job = jobs.attach(run_dir)
    assert job.logs(tail=0) == "" and job.logs(tail=1) == "" and job.logs(tail=2) == "three\n"
    with pytest.raises(ConfigError, match=r"^status: expected a dict from job.status\(\) or None, got 'x'\. Fix: "):
        job.explain(status="x")


def test_attach_refuses_a_path_with_a_nul_byte():
    """``jobs.attach('\\x00')``: ValueError traceback (embedded null byte)."""
    from tutorial_lib import jobs

    with pytest.raises(jobs.JobError, match=r"^run_dir: .* contains a NUL byte.* Fix: "):
        jobs.attach("\x00")


def test_make_spec_refuses_module_args_with_a_nul_byte(tmp_path):
    """``module_args=['\\x00']`` was accepted: Slurm's submit raised "embedded null byte", a local job was lost."""
    from tutorial_lib.jobs.spec import make_spec

    with pytest.raises(ConfigError, match=r"^module_args: .*without NUL bytes\. Fix: "):
        make_spec(_tiny(tmp_path), module="tutorial_lib.bench", module_args=["\x00"])


@pytest.mark.parametrize("value", [True, False, None, 1.5])
def test_a_site_env_value_that_is_not_text_is_refused_with_the_fix_to_quote_it(value):
    """``env: {A: true}`` was exported as ``A=True``."""
    from tutorial_lib.jobs.site import load_site

    with pytest.raises(ConfigError, match=r"^site\.env\.A: .* not text.* Fix: quote the value"):
        load_site({"env": {"A": value}})
    assert dict(load_site({"env": {"A": "true", "N": 4}}).env) == {"A": "true", "N": "4"}


def test_make_config_names_a_number_too_large_for_a_float():
    """``make_config('smoke', base_lr=10**400)``: OverflowError traceback."""
    with pytest.raises(ConfigError, match=r"^base_lr: expected float, got .* Fix: "):
        make_config("smoke", base_lr=10**400)


# ------------------------------------------------------------------ folders of the system
@pytest.mark.parametrize(("field", "value"), [("output_root", "/"), ("output_root", "/dev"),
                                              ("output_root", "/proc/self"), ("stage_to", "/"),
                                              ("stage_to", "/sys/x"), ("stage_to", "/proc/x")])
def test_validate_refuses_the_system_folders_as_output_root_and_stage_to(tmp_path, field, value):
    """output_root '/' wrote the run to /r ('/dev': a 45 MB model into RAM); stage_to '/' staged into
    /tutorial-stage-r-vm, and /sys/x or /proc/x failed only inside the started job."""
    cfg = make_config("smoke", dataset="imagefolder", data_dir=str(tmp_path / "data"), **{field: value},
                      **({} if field == "output_root" else {"output_root": str(tmp_path / "runs")}))
    with pytest.raises(ConfigError, match=rf"^{field}: '{value}' is (the root folder|under /\w+), .* Fix: "):
        validate(cfg, check_paths=False)


def test_a_node_s_ram_disk_stays_a_place_to_stage(tmp_path):
    cfg = make_config("smoke", dataset="imagefolder", data_dir=str(tmp_path), stage_to="/dev/shm/stage",
                      output_root=str(tmp_path / "runs"))
    assert validate(cfg, check_paths=False) is cfg


def test_data_prepare_refuses_a_destination_under_dev(tmp_path):
    """``data prepare tiny /dev/x`` wrote the prepared set into /dev."""
    from tests.conftest import write_image_tree
    from tutorial_lib.data.layouts import PrepareError, detect
    from tutorial_lib.data.prepare import check_destination

    write_image_tree(tmp_path / "tiny", {"train": {"n01440764": 1}, "val": {"n01440764": 1}})
    with pytest.raises(PrepareError, match=r"^DEST: /dev/i43i-x is under /dev, where no data set belongs\. Fix: "):
        check_destination(Path("/dev/i43i-x"), detect(tmp_path / "tiny"))
    assert not os.path.lexists("/dev/i43i-x")


def test_course_out_under_sys_names_the_flag(tmp_path):
    """``course --out /sys/x``: "Operation not permitted. Fix: chmod", --out never named."""
    from tutorial_lib.course.runner import check_output_folder

    with pytest.raises(SystemExit, match=r"^error: out: /sys/x is under /sys, .* Fix: pass --out "):
        check_output_folder("/sys/x")


def test_an_index_dir_that_is_a_loop_of_links_is_refused_naming_index_dir(tmp_path):
    """``train --index-dir ~/loop`` (a link to itself): ``RuntimeError: Symlink loop`` traceback."""
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    with pytest.raises(ConfigError, match=r"^index_dir: .* cannot be followed \(a symbolic link on the way leads back "
                                          r"to itself\)\. Fix: remove the symbolic link loop"):
        validate(_tiny(tmp_path, index_dir=str(tmp_path / "loop")))


# ------------------------------------------------------------------ sizes refused before the job
def test_an_image_size_too_small_for_the_model_is_refused_before_the_run_directory(tmp_path):
    """``train --arch alexnet --image-size 16``: "Output size is too small" after the run dir was written."""
    from tutorial_lib.engine.trainer import main

    status, err = _main(main, ["--profile", "smoke", "--dataset", "synthetic", "--arch", "alexnet", "--image-size",
                               "16", "--output-root", str(tmp_path), "--name", "small", "--progress", "false"])
    line = _one_line(err, "image_size: 16 px is too small for alexnet")
    assert status == EXIT_REFUSED and "Fix: pass --image-size 64 or more" in line
    assert not (tmp_path / "small").exists()


def test_a_local_job_whose_step_cannot_fit_here_is_refused_before_it_is_submitted(tmp_path):
    """``image_size=10**5`` through submit(local) started the job, which wrote its run directory and then failed."""
    from tutorial_lib.jobs.spec import make_spec

    with pytest.raises(ConfigError, match=r"^image_size/batch_size: .* needs at least [\d.]+ [TP]B of memory"):
        make_spec(_tiny(tmp_path, image_size=10**5))
    assert not (tmp_path / "runs").exists()


# ------------------------------------------------------------------ torch files and records
def _model_file(path: Path) -> Path:
    from tutorial_lib.engine.model_file import save_model
    from tutorial_lib.engine.models import build_model

    return save_model(path, build_model("resnet18", 3), make_config("smoke", arch="resnet18"), 3, ["a", "b", "c"])


def test_a_zip_without_torch_records_is_refused_as_no_torch_file(tmp_path):
    """model.pt / checkpoint.pt a zip holding no torch record: ``RuntimeError: Expected hasRecord("version")``."""
    from tutorial_lib.engine.model_file import load_model
    from tutorial_lib.rundir.checkpoint import CheckpointError, load_checkpoint

    with zipfile.ZipFile(tmp_path / "model.pt", "w") as archive:
        archive.writestr("x/data.pkl", b"g")
    for load in (load_model, load_checkpoint):
        with pytest.raises(CheckpointError, match=r"model.pt \(\d+ bytes\) is not a complete torch file.* Fix: "):
            load(tmp_path / "model.pt")


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_evaluate_refuses_a_model_with_non_finite_weights(tmp_path, value):
    """model.pt with NaN weights evaluated to ``top-1 33.33%`` and exit 0."""
    from tutorial_lib.engine.model_file import load_model
    from tutorial_lib.rundir.checkpoint import CheckpointError, save_atomic

    path = _model_file(tmp_path / "model.pt")
    saved = torch.load(path, weights_only=True)
    saved["state_dict"]["fc.bias"].fill_(value)
    save_atomic(saved, path)
    with pytest.raises(CheckpointError, match=rf"^model: {path} holds non-finite weights \(nan or inf in 'fc.bias'\)"):
        load_model(path)


def test_a_checkpoint_holding_none_is_refused_not_read_as_none(tmp_path):
    """checkpoint.pt holding None: the resume restarted at epoch 1 without a word, then overwrote the file."""
    from tutorial_lib.rundir.checkpoint import CheckpointError, load_checkpoint

    torch.save(None, tmp_path / "checkpoint.pt")
    with pytest.raises(CheckpointError, match=r"checkpoint.pt holds None, .* Fix: delete it"):
        load_checkpoint(tmp_path / "checkpoint.pt")
    assert load_checkpoint(tmp_path / "none.pt") is None  # no file: no checkpoint, the run starts


def test_a_checkpoint_whose_config_is_none_is_refused_as_damaged():
    """config None: "trained with another recipe (base_lr 0.1 -> 0.4, dataset 'digits' -> ...)", made up."""
    from tutorial_lib.engine.trainer import Progress
    from tutorial_lib.rundir.checkpoint import CheckpointError, check_checkpoint

    state = {"model": {}, "optimizer": {}, "scaler": {}, "rng": [{}],
             "progress": {"epoch": 1, "step_in_epoch": 0, "global_step": 2}}
    fields = list(Progress.__dataclass_fields__)
    assert check_checkpoint(state, "checkpoint.pt", fields) is state  # an older checkpoint: no config recorded
    with pytest.raises(CheckpointError, match=r"^checkpoint: checkpoint.pt holds config as NoneType, not dict"):
        check_checkpoint({**state, "config": None}, "checkpoint.pt", fields)


def test_a_prepared_mark_nested_past_python_is_read_as_no_mark(tmp_path):
    """A prepared mark holding ``'[' * 50000``: RecursionError in evaluate and train."""
    from tutorial_lib.data.links import MARK, moved_source

    (tmp_path / MARK).write_text("[" * 50_000)
    assert moved_source(tmp_path) is None


# ------------------------------------------------------------------ bench flags
def test_bench_work_dir_tilde_is_the_home_folder(tmp_path, monkeypatch):
    """``bench scale --work-dir '~'``: PrepareError traceback (the tree made in ./~, prepared from $HOME);
    ``extract --work-dir '~'`` named '~/bench-extract-xxxx', not the flag."""
    from tutorial_lib.bench.arguments import check_arguments
    from tutorial_lib.bench.cli import build_parser

    monkeypatch.setenv("HOME", str(tmp_path))
    for command in ("scale", "extract"):
        args = build_parser().parse_args([command, "--work-dir", "~"])
        check_arguments(args)
        assert args.work_dir == str(tmp_path)


@pytest.mark.parametrize("argv", [["scale", "--work-dir", "/dev"], ["scale", "--work-dir", "/sys"],
                                  ["shards", "--work-dir", "/proc/x"], ["scale", "--work-dir", "/"]])
def test_bench_work_dir_in_a_system_folder_names_the_flag(argv):
    """``bench scale --work-dir /dev`` wrote its trees into /dev; ``/sys``: "Operation not permitted. Fix: chmod"."""
    assert _bench_refusal(argv).startswith("--work-dir: ")


@pytest.mark.parametrize("argv", [["matmul", "--device", "cpu", "--out", "\n"],
                                  ["prepare", "--out", "r\x1bx.jsonl"], ["scale", "--work-dir", "\x1b"],
                                  ["extract", "--work-dir", "TMP/a\x1bb"]])
def test_bench_paths_with_a_control_character_are_refused_as_train_refuses_them(argv, tmp_path):
    """``bench ... --out '\\n'`` and ``--work-dir $'\\x1b'`` made a file or folder named with a control character
    (an existing folder so named too: its temporary folders would be made in it)."""
    (tmp_path / "a\x1bb").mkdir()
    assert " contains the control character " in _bench_refusal([a.replace("TMP", str(tmp_path)) for a in argv])


def test_bench_train_names_a_batch_size_beyond_any_count():
    """``--batch-size 2147483648``: "--steps: 1 is refused. Fix: at most 0 steps"."""
    assert _bench_refusal(["train", "--device", "cpu", "--batch-size", "2147483648", "--steps", "1"]).startswith(
        "--batch-size: 2147483648 is refused")


def test_bench_extract_estimates_a_jpeg_size_against_the_address_space_limit(monkeypatch):
    """``--jpeg-size 20000x20000`` under a 6 GB ``ulimit -v``: "out of memory (Unable to allocate 5.96 GiB)", with
    --jpeg-size never named (issue 43 item 3: the estimate names it, before allocating)."""
    mapped = psutil.Process().memory_info().vms
    monkeypatch.setattr(resource, "getrlimit", lambda which: (mapped + 2**30, resource.RLIM_INFINITY)
                        if which == resource.RLIMIT_AS else (resource.RLIM_INFINITY,) * 2)
    refusal = _bench_refusal(["extract", "--jpeg-size", "20000x20000"])
    assert refusal.startswith("--jpeg-size: generating one 20000x20000 image needs at least 51.2 GB")


def _run_with_metrics(tmp_path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"name": "run"}))
    return run


@pytest.mark.parametrize("kind", ["link to /proc", "too large"])
def test_bench_runs_names_a_metrics_file_that_is_no_trainer_record(tmp_path, kind):
    """metrics.jsonl a link to /proc/self/status: exit 0, "skipped ... Fix: run more steps per epoch"; a 16 GiB
    sparse file: "out of memory ()" after 36 s, the file never named."""
    from tutorial_lib.bench.runs import RunSummaryError, trainer_record

    run = _run_with_metrics(tmp_path)
    metrics = run / "metrics.jsonl"
    if kind == "link to /proc":
        metrics.symlink_to("/proc/self/status")
    else:
        with open(metrics, "wb") as handle:
            handle.truncate((256 << 20) + 1)  # sparse: no disk used; just over the 256 MiB a run could write
    with pytest.raises(RunSummaryError, match=rf"^{metrics}: is (a symbolic link|256 MiB, more than a run writes)"):
        trainer_record(run)


def test_bench_runs_names_skip_steps_when_it_leaves_out_every_window(tmp_path):
    """``--skip-steps 2147483648``: exit 0, "skipped ... Fix: run more steps per epoch"."""
    from tutorial_lib.bench.runs import trainer_record

    run = _run_with_metrics(tmp_path)
    steps = [{"event": "step", "epoch": 1, "step": n, "images_per_sec": 10.0} for n in range(1, 9)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(e) + "\n" for e in steps))
    assert trainer_record(run, skip_steps=0)["status"] == "ok"
    record = trainer_record(run, skip_steps=1000)
    assert record["status"] == "skipped" and record["reason"].startswith("--skip-steps 1000 leaves out every step")
    assert _bench_refusal(["runs", str(run), "--skip-steps", "2147483648"]).startswith("--skip-steps: 2147483648")


def test_the_image_size_check_does_not_fail_on_a_model_it_cannot_build_on_the_meta_device():
    """r43g: every regnet failed with "NotImplementedError: Cannot copy out of meta tensor" in the image-size
    pre-check itself (its init copies data); the check now leaves such a model to the run, and still refuses
    alexnet at 16 px."""
    from tutorial_lib.engine.models import runs_at

    assert runs_at("regnet_y_400mf", 32) is True
    assert runs_at("alexnet", 16) is False
