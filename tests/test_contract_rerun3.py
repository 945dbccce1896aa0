"""The third independent re-run of issue 43's contract (/work/wt/notes/r43e-report.md): a forged job record that
made cancel() kill a stranger, tracebacks, hangs on records that are FIFOs, wrong fields and silent results. Each
ends as one line naming the field and a fix, before anything is written or started; each test failed on the code
before. Unit level: nothing here trains or submits.
"""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from tests.conftest import write_image_tree
from tests.test_contract_rerun2 import _main, _one_line
from tutorial_lib import jobs
from tutorial_lib.engine.config import ConfigError, make_config, validate
from tutorial_lib.exits import EXIT_REFUSED
from tutorial_lib.jobs import processes
from tutorial_lib.jobs.record import write_job_file


def _state(run_dir, state: str, **fields) -> None:
    """A state file naming no supervisor (``write_state`` would name this very process, which a cancel on the
    old code signalled: the test run itself)."""
    (run_dir / "job_state.json").write_text(json.dumps({"state": state, **fields}))


def _still_runs(process) -> None:
    """A signal is delivered asynchronously: the process must still run 2 s after the cancel returned."""
    with pytest.raises(subprocess.TimeoutExpired):
        process.wait(timeout=2)


@pytest.fixture
def stranger():
    """A process of the user's own that the project did not start (the re-run used ``sleep 3000``)."""
    process = subprocess.Popen(["sleep", "300"], start_new_session=True)  # leads its group, as a shell's job
    deadline = time.monotonic() + 30
    # until it has exec'd: before that its command line reads empty (a loaded CI machine recorded it so)
    while processes.identity(process.pid) is None or processes.identity(process.pid)["cmdline"] != ["sleep", "300"]:
        assert time.monotonic() < deadline, "the stranger process did not start within 30 s"
        time.sleep(0.01)
    try:
        yield process
    finally:
        process.kill()
        process.wait()


# ------------------------------------------------------------------ 1. cancel() and a forged supervisor block
def test_cancel_refuses_a_record_naming_a_strangers_process_as_its_supervisor(tmp_path, stranger):
    """A job.json whose ``supervisor`` named the stranger's pid, real start time and command line made
    ``attach(d).cancel()`` kill it: start time and command line matched, but it was no supervisor of that run."""
    write_job_file(tmp_path, {"id": f"local-{stranger.pid}", "backend": "local", "name": "forged",
                              "supervisor": processes.identity(stranger.pid)})
    job = jobs.attach(tmp_path)
    assert job.state == "FAILED"  # lost: no supervisor of this run runs
    with pytest.raises(jobs.JobError, match=r"^cancel refused: .* not this run directory's supervisor .*Fix: "):
        job.cancel(wait=0)
    _still_runs(stranger)


def test_cancel_never_kills_a_stranger_listed_as_an_agent(tmp_path, stranger):
    """The state file's ``agents`` (killed when the supervisor is gone) were signalled on their record alone."""
    write_job_file(tmp_path, {"id": "local-1", "backend": "local", "name": "forged"})
    _state(tmp_path, "RUNNING", agents=[processes.identity(stranger.pid)])  # no supervisor: its agents are killed
    jobs.attach(tmp_path).cancel(wait=0)
    _still_runs(stranger)


# ------------------------------------------------------------------ 2. tracebacks
def test_a_vision_transformer_at_another_image_size_is_refused_naming_image_size():
    """``train --arch vit_b_16 --image-size 16`` ended in ``AssertionError: Wrong image height! Expected 224``,
    after config.json, file_index.json and metrics.jsonl were written."""
    with pytest.raises(ConfigError, match=r"^image_size: 16 px, and vit_b_16 takes only 224 px .*Fix: pass "
                                          r"--image-size 224"):
        validate(make_config("smoke", arch="vit_b_16", image_size=16, dataset="synthetic", batch_size=2),
                 check_paths=False, cuda_available=False)


@pytest.mark.parametrize(("argv", "flag"), [
    (["prepare", "--per-class", "100000000000"], "--per-class"),  # ValueError: Sample larger than population
    (["loader", "--min-time", "0"], "--min-time"),  # ZeroDivisionError
    (["staging", "--stage-to", ""], "--stage-to"),  # StagingError traceback, after the data set was generated
    (["staging", "--stage-to", "/no/such/folder"], "--stage-to"),  # named a temporary bench-staging-... path
    (["extract", "--work-dir", "/no/such/folder"], "--work-dir"),  # named a temporary bench-extract-... path
])
def test_bench_flags_that_crashed_or_named_a_temporary_path_are_refused_first(tmp_path, monkeypatch, argv, flag):
    from tutorial_lib.bench.cli import main

    monkeypatch.chdir(tmp_path)
    status, err = _main(main, [*argv, "--out", str(tmp_path / "out.jsonl")])
    assert status == EXIT_REFUSED
    _one_line(err, flag)
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing generated, nothing written


def test_prepare_into_a_link_to_itself_is_refused_naming_dest(tmp_path):
    """``data prepare SOURCE ~/loop`` (DEST a link to itself) ended in ``RuntimeError: Symlink loop``."""
    from tutorial_lib.data.__main__ import main

    write_image_tree(tmp_path / "src", {"train": {"a": 1, "b": 1}, "val": {"a": 1, "b": 1}})
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    status, err = _main(main, ["prepare", str(tmp_path / "src"), str(tmp_path / "loop"), "--subset"])
    assert status == EXIT_REFUSED
    _one_line(err, "DEST: ")


@pytest.mark.parametrize("run_dir", [None, 5, "", "loop"])
def test_attach_refuses_what_is_no_run_directory_in_one_line(tmp_path, run_dir):
    """``jobs.attach(None)``, ``attach(5)``: TypeError; ``attach('~/loop')``: RuntimeError: Symlink loop."""
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    given = str(tmp_path / "loop") if run_dir == "loop" else run_dir
    with pytest.raises(jobs.JobError, match=r"^run_dir: .*Fix: "):
        jobs.attach(given)


@pytest.mark.parametrize(("method", "arguments", "field"), [
    ("logs", {"tail": "x"}, "tail"), ("logs", {"tail": -1}, "tail"), ("wait", {"timeout": "10"}, "timeout"),
    ("wait", {"timeout": float("nan")}, "timeout"), ("cancel", {"wait": "10"}, "wait"),
    ("wait", {"check": "no", "timeout": 1}, "check"),  # r43m: 'no' was read as True
])
def test_job_methods_refuse_arguments_of_the_wrong_kind_naming_them(tmp_path, method, arguments, field):
    """``Job.logs(tail='x')`` and ``Job.wait(timeout='10')`` ended in TypeError."""
    write_job_file(tmp_path, {"id": "local-1", "backend": "local", "name": "done"})
    _state(tmp_path, "RUNNING")
    with pytest.raises(ConfigError, match=rf"^{field}: .*Fix: "):
        getattr(jobs.attach(tmp_path), method)(**arguments)


# ------------------------------------------------------------------ 3. hangs: records that are named pipes
@pytest.mark.timeout(60)
def test_a_job_state_file_that_is_a_named_pipe_is_refused_not_read(tmp_path):
    """``job_state.json`` as a FIFO: ``jobs.attach(d).state`` and ``.cancel()`` blocked."""
    from tutorial_lib.jobs.states import read_state

    write_job_file(tmp_path, {"id": "local-1", "backend": "local", "name": "piped"})
    os.mkfifo(tmp_path / "job_state.json")
    assert read_state(tmp_path) is None
    with pytest.raises(jobs.JobError, match=r"^run_dir: .*job_state\.json is a named pipe.*Fix: move it away"):
        jobs.attach(tmp_path)


@pytest.mark.timeout(60)
def test_a_prepared_mark_that_is_a_named_pipe_is_refused_naming_data_dir(tmp_path):
    """``.tutorial_prepared.json`` as a FIFO in --data-dir: evaluate and train blocked (killed at 60/90 s)."""
    from tutorial_lib.engine.input.folders import DataError, check_imagefolder

    write_image_tree(tmp_path, {"train": {"a": 1, "b": 1}, "val": {"a": 1, "b": 1}})
    os.mkfifo(tmp_path / ".tutorial_prepared.json")
    with pytest.raises(DataError, match=r"^data_dir: .*\.tutorial_prepared\.json is a named pipe.*Fix: "):
        check_imagefolder(tmp_path)


def test_a_prepared_mark_naming_a_source_no_path_can_be_names_data_dir(tmp_path):
    """A mark with a 100 KB ``source``: evaluate said "'aaa...' File name too long. Fix: use a shorter path"."""
    from tutorial_lib.data.links import MARK, moved_source

    (tmp_path / "train" / "a").mkdir(parents=True)
    (tmp_path / "train" / "a" / "x.JPEG").symlink_to(tmp_path / "gone.JPEG")
    (tmp_path / MARK).write_text(json.dumps({"source": "a" * 100_000, "form": "folders"}))
    assert moved_source(tmp_path).startswith(f"data_dir: {tmp_path / MARK} names a source")


# ------------------------------------------------------------------ 4. wrong fields
def test_a_checkpoint_that_links_to_itself_is_named_not_the_run_directory(tmp_path):
    """checkpoint.pt a link to itself, on resume: "the run directory ... cannot be created (Too many levels...)"."""
    from tutorial_lib.rundir.lock import RunDirError, prepare_run_dir

    (tmp_path / "checkpoint.pt").symlink_to(tmp_path / "checkpoint.pt")
    with pytest.raises(RunDirError, match=r"^output_root: '.*checkpoint\.pt' \(unreadable .*Fix: move it away"):
        prepare_run_dir(tmp_path)


@pytest.mark.parametrize("index_dir", ["/", "/proc", "/proc/self", "/sys/kernel"])
def test_an_index_dir_at_the_root_or_in_the_kernels_folders_is_refused(tmp_path, index_dir):
    """``--index-dir /`` wrote /r.file_index.json at the file system's root; ``/proc`` named a .tmp path."""
    with pytest.raises(ConfigError, match=r"^index_dir: .* where no cache belongs\. Fix: "):
        validate(make_config("smoke", dataset="synthetic", index_dir=index_dir, data_dir=str(tmp_path)),
                 check_paths=False, cuda_available=False)


@pytest.mark.parametrize("timeout", [float("nan"), -1, 0, "300"])
def test_preflight_refuses_a_timeout_before_it_submits(tmp_path, monkeypatch, timeout):
    """``preflight.run(cfg, timeout=nan)`` submitted a real job whose rank failed; ``timeout=-1`` submitted one and
    reported "still PENDING after -1 s"."""
    from tutorial_lib.jobs import preflight

    submitted = []
    monkeypatch.setattr(jobs, "submit", lambda *a, **k: submitted.append(a))
    with pytest.raises(ConfigError, match=r"^timeout: expected a number of seconds > 0.*Fix: "):
        preflight.run(make_config("smoke", dataset="synthetic", output_root=str(tmp_path)), backend="local",
                      timeout=timeout)
    assert submitted == [] and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("steps", ["99999999999999999999", "2147483647"])
def test_bench_train_steps_beyond_the_trainers_epoch_are_refused(tmp_path, steps):
    """``bench train --steps 99999999999999999999`` exited 0, each record "error (ConfigError: synthetic_images:
    must be at most ...)"."""
    from tutorial_lib.bench.cli import main

    status, err = _main(main, ["train", "--device", "cpu", "--arch", "resnet18", "--batch-size", "2",
                               "--steps", steps, "--out", str(tmp_path / "out.jsonl")])
    assert status == EXIT_REFUSED
    _one_line(err, "--steps")
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------ 5. silent results
@pytest.mark.parametrize("run_dir", ["/no/such/dir", "~", "$(echo x)"])
def test_rundir_fresh_of_no_folder_is_refused_not_reported_done(tmp_path, monkeypatch, run_dir):
    """``rundir fresh /no/such/dir``, '~' or '$(...)' exited 0 with "removed 0 file(s)"."""
    from tutorial_lib.rundir.__main__ import main

    monkeypatch.chdir(tmp_path)
    status, err = _main(main, ["fresh", run_dir])
    assert status == EXIT_REFUSED
    _one_line(err, "RUN_DIR: ")


def test_a_sweep_over_a_value_given_twice_is_refused_before_the_first_job(monkeypatch):
    """``sweep(cfg, over='arch', values=['resnet18', 'resnet18'])`` submitted the first job, then failed with
    "already has a live job"."""
    submitted = []
    monkeypatch.setattr(jobs, "_launch", lambda *a, **k: submitted.append(a))
    with pytest.raises(ConfigError, match=r"^values: 'resnet18' is given twice.*Fix: give each value once"):
        jobs.sweep(make_config("smoke", dataset="synthetic"), over="arch", values=["resnet18", "resnet18"])
    assert submitted == []


@pytest.mark.parametrize("milestones", [[1.5], [1, 1], "1,1", [True]])
def test_milestones_that_are_no_whole_increasing_epochs_are_refused(milestones):
    """``lr_milestones: [1.5]`` became [1] without a word; ``--lr-milestones 1,1`` decayed twice at epoch 1."""
    with pytest.raises(ConfigError, match=r"^lr_milestones: .*Fix: pass"):
        validate(make_config("smoke", dataset="synthetic", lr_milestones=milestones), check_paths=False,
                 cuda_available=False)


@pytest.mark.parametrize(("field", "value"), [("output_root", ""), ("output_root", "x\ny"), ("data_dir", "a\tb")])
def test_a_path_that_is_empty_or_holds_a_control_character_is_refused(tmp_path, field, value):
    """``train --output-root ''`` wrote the run into the working directory; 'x\\ny' made a folder with a newline."""
    with pytest.raises(ConfigError, match=rf"^{field}: .*Fix: pass"):
        validate(make_config("smoke", dataset="synthetic", **{field: value}), check_paths=False,
                 cuda_available=False)


@pytest.mark.parametrize(("key", "value"), [("spec", "x"), ("launch", [1]), ("supervisor", 5)])
def test_a_job_record_with_blocks_of_another_type_is_refused_on_attach(tmp_path, key, value):
    """``jobs.attach`` accepted a job.json with ``spec: 'x'`` or ``launch: [1]``."""
    write_job_file(tmp_path, {"id": "local-1", "backend": "local", "name": "odd", key: value})
    with pytest.raises(jobs.JobError, match=rf"holds a job {key} of another type .*Fix: "):
        jobs.attach(tmp_path)


def test_metrics_of_an_event_that_is_no_name_is_refused(tmp_path):
    """``Job.metrics(event=5)`` returned an empty table without a word."""
    write_job_file(tmp_path, {"id": "local-1", "backend": "local", "name": "m"})
    _state(tmp_path, "COMPLETED")
    with pytest.raises(ConfigError, match=r"^event: .*Fix: "):
        jobs.attach(tmp_path).metrics(event=5)


@pytest.mark.parametrize(("count", "value"), [("nodes", 10**9), ("ranks_per_node", 2**31), ("max_restarts", 10**9)])
def test_job_counts_beyond_any_machine_are_refused(count, value):
    """``make_spec`` accepted max_restarts=10**9, nodes=10**9, ranks_per_node=2**31 without a cap."""
    from tutorial_lib.jobs.spec import check_counts

    with pytest.raises(ConfigError, match=rf"^{count}: must be an integer >= \d and <= [\d,]+, got .*Fix: "):
        check_counts(**{count: value})


@pytest.mark.timeout(60)
@pytest.mark.parametrize("metrics", ["garbled", "pipe", "folder", "device"])
def test_bench_runs_names_a_metrics_file_it_cannot_read(tmp_path, metrics):
    """``bench runs RUN`` with metrics.jsonl random bytes, a FIFO, a folder or a link to /dev/zero exited 0 with
    "skipped (0 step events...). Fix: run more steps per epoch": the file never named, the fix wrong."""
    from tutorial_lib.bench.cli import main

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"name": "run"}))
    path = run / "metrics.jsonl"
    {"garbled": lambda: path.write_bytes(bytes(range(256)) * 4), "pipe": lambda: os.mkfifo(path),
     "folder": path.mkdir, "device": lambda: path.symlink_to("/dev/zero")}[metrics]()
    status, err = _main(main, ["runs", str(run), "--out", str(tmp_path / "out.jsonl")])
    assert status == EXIT_REFUSED
    assert _one_line(err, f"{path}: ")
    assert not (tmp_path / "out.jsonl").exists()


@pytest.mark.parametrize(("action", "tag"), [("up", "tlab" + "x" * 300), ("down", "x/../y"), ("status", "tlabé"),
                                             ("down", "tlab" + "x" * 300)])
def test_netlab_refuses_a_tag_that_names_no_lab_before_anything(action, tag):
    """``netlab up --tag <tlab + 300 chars>`` failed with File name too long on a /run path; ``down``/``status``
    with invalid tags exited 0."""
    from tutorial_lib.jobs.netlab import main

    status, err = _main(main, [action, "--tag", tag])
    assert status == EXIT_REFUSED
    _one_line(err, "tag: must start with 'tlab'")


def test_netlab_reads_no_unicode_digit_as_a_node_count():
    """``netlab up --nodes ٢`` was read as 2."""
    from tutorial_lib.jobs.netlab import main

    status, err = _main(main, ["up", "--nodes", "\u0662"])
    assert status == EXIT_REFUSED and "--nodes" in err and "ASCII" in err


@pytest.mark.parametrize(("argv", "flag"), [
    (["matmul", "--out", "/proc/self/mem"], "--out"),  # Input/output error after the run, no flag named
    (["loader", "--data-dir", "LOOP"], "--data-dir"),  # "root: ... pass make_fake_imagenet a new folder"
])
def test_bench_names_the_flag_of_a_kernel_file_or_a_looping_link(tmp_path, argv, flag):
    from tutorial_lib.bench.cli import main

    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    status, err = _main(main, [a.replace("LOOP", str(tmp_path / "loop")) for a in argv])
    assert status == EXIT_REFUSED
    _one_line(err, flag)


@pytest.mark.parametrize(("argv", "flag"), [
    (["scan", "--classes", "100000000"], "--classes"),  # 197,000 files in 45 s before it was killed
    (["staging", "--per-class", "100000000000"], "--per-class"),
    (["loader", "--classes", "8", "--per-class", "10000000"], "--per-class"),
])
def test_bench_refuses_a_generated_set_beyond_imagenet_with_its_estimate(tmp_path, monkeypatch, argv, flag):
    from tutorial_lib.bench.cli import main

    monkeypatch.chdir(tmp_path)
    status, err = _main(main, argv)
    assert status == EXIT_REFUSED
    assert "files (this one: " in _one_line(err, flag)
    assert list(tmp_path.iterdir()) == []
