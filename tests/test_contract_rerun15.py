"""What the twelfth re-run of issue 43 (/work/wt/notes/r43s-report.md) found at bce4e65, each failing on the code
before (checked by reverting the library change):

* T1: a written path through a dangling link followed by ``..`` (``dang/../runs``): the dangling-link check took
  ``os.path.abspath`` first, which drops ``dang/..`` before the link is seen, and the job ran in the link's
  missing target (made for it);
* T2: a ``module_args`` string with a lone surrogate (``'\\ud800'``): a UnicodeEncodeError traceback from
  make_spec;
* T3: Slurm's answers read as numbers with ``str.isdigit()`` (true for ``'²'`` and for 5,000 digits, which
  ``int()`` refuses) or decoded as strict UTF-8: every Job method raised; the same reading of a ``--val-labels``
  file, ``sinfo``'s CPU counts and the rendezvous helper's job id.
"""

from __future__ import annotations

import os

import pytest

from tests.conftest import command_in_process
from tests.test_contract_rerun2 import _one_line
from tutorial_lib import jobs
from tutorial_lib.engine.config import ConfigError, make_config
from tutorial_lib.exits import EXIT_REFUSED
from tutorial_lib.figures import monitor
from tutorial_lib.jobs import watch
from tutorial_lib.jobs.record import write_job_file
from tutorial_lib.numbers import whole_number


@pytest.fixture
def no_backend(monkeypatch):
    for place, name in ((jobs, "submit_local"), (jobs.slurm, "submit_slurm")):
        monkeypatch.setattr(place, name, lambda *a, **k: pytest.fail("a job was handed to a backend"))


@pytest.fixture
def dangling(tmp_path, monkeypatch):
    """A working folder holding ``dang``, a symbolic link to ``gone/x`` (``gone`` does not exist)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dang").symlink_to(tmp_path / "gone" / "x")
    return tmp_path


def test_an_output_root_through_a_dangling_link_and_dotdot_is_refused(dangling, no_backend):
    cfg = make_config("smoke", output_root="dang/../runs", name="r", epochs=1, progress=False)
    for call in (lambda: jobs.make_spec(cfg), lambda: jobs.submit(cfg, backend="local")):
        with pytest.raises(ConfigError, match=r"^output_root: .*symbolic link .*dang.*Fix: ") as caught:
            call()
        assert "\n" not in str(caught.value)
    assert not (dangling / "gone").exists()


@pytest.mark.parametrize("command", ["prepare", "pack"])
def test_a_data_destination_through_a_dangling_link_and_dotdot_is_refused(dangling, jpeg_tree, command):
    from tutorial_lib.data.__main__ import main

    result = command_in_process(main, [command, str(jpeg_tree), "dang/../made"])
    assert result.returncode == EXIT_REFUSED, result
    line = _one_line(result.stderr, "DEST" if command == "prepare" else "SHARDS")
    assert "symbolic link" in line and "dang" in line
    assert not (dangling / "gone").exists()


def test_module_args_with_a_lone_surrogate_are_refused_naming_module_args(tmp_path, no_backend):
    cfg = make_config("smoke", output_root=str(tmp_path / "runs"), name="r")
    for call in (lambda: jobs.make_spec(cfg, module="tutorial_lib.bench", module_args=["ok", "\ud800"]),
                 lambda: jobs.submit(cfg, backend="local", module="tutorial_lib.bench", module_args=["\ud800"])):
        with pytest.raises(ConfigError, match=r"^module_args: argument \d .*lone surrogate.*Fix: "):
            call()
    # a surrogate-escaped byte (what os.fsdecode makes of a non-UTF-8 name) is an argument like any other
    assert jobs.make_spec(cfg, module="tutorial_lib.bench", module_args=["\udcff"]).module_args == ["\udcff"]
    assert not (tmp_path / "runs").exists()


# ------------------------------------------------------------------------ T3: numbers Slurm printed
ANSWER = """#!/bin/bash
# squeue's or sacct's stand-in: prints the bytes of $FAKE_<NAME>_OUT
name=$(basename "$0"); var="FAKE_${name^^}_OUT"
[[ -n ${!var:-} ]] && cat "${!var}"
exit 0
"""


def _squeue_line(exit_code: bytes, reason: bytes = b"None", state: bytes = b"COMPLETED") -> bytes:
    values = {"JobId": b"12345", "JobName": b"r", "JobState": state, "Reason": reason, "NumNodes": b"1",
              "NodeList": b"n1", "BatchHost": b"n1", "RunTime": b"0:05", "TimeLimit": b"30:00", "Restarts": b"0",
              "ExitCode": exit_code, "StdOut": b"/r/slurm-%j.out", "Command": b"/r/job.sbatch"}
    return watch._SEP.encode().join(values[name] for name in watch.SQUEUE_FIELDS.values()) + b"\n"


CASES = {
    "squeue exit code '²:0'": (_squeue_line("²:0".encode()), b""),
    "squeue exit code of 5,000 digits": (_squeue_line(b"9" * 5000 + b":0"), b""),
    "squeue wait status of 5,000 digits": (_squeue_line(b"9" * 5000), b""),
    "squeue reason in Latin-1": (_squeue_line(b"0:0", reason=b"caf\xe9", state=b"PENDING"), b""),
    "sacct exit code '²:0'": (b"", "12345|COMPLETED|²:0\n".encode()),
}


@pytest.mark.parametrize("case", CASES)
def test_slurm_answers_no_number_reads_as_are_no_traceback(tmp_path, monkeypatch, case):
    squeue_out, sacct_out = CASES[case]
    folder = tmp_path / "bin"
    folder.mkdir()
    for name, text in (("squeue", squeue_out), ("sacct", sacct_out)):
        (folder / name).write_text(ANSWER)
        (folder / name).chmod(0o755)
        (tmp_path / f"{name}.out").write_bytes(text)
        monkeypatch.setenv(f"FAKE_{name.upper()}_OUT", str(tmp_path / f"{name}.out"))
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    write_job_file(tmp_path / "run", {"backend": "slurm", "id": "12345", "name": "r", "spec": {}})
    watch.replace_watcher(watch.Watcher(min_interval=0.01, max_backoff=0.04))
    try:
        job = jobs.attach(tmp_path / "run")
        assert job.state in ("COMPLETED", "PENDING", "UNKNOWN")
        assert job.status()["exit_code"] in (None, 0)
        job.explain(), repr(job), job.done()
        assert job.wait(timeout=0.5, poll=0.05, check=False) in ("COMPLETED", "PENDING", "UNKNOWN")
    finally:
        watch.replace_watcher()


@pytest.mark.parametrize("text, below, expected", [
    ("0", 2**31, 0), ("2147483647", 2**31, 2**31 - 1), ("2147483648", 2**31, None), ("²", 2**31, None),
    ("٣", 2**31, None), ("9" * 5000, 2**31, None), ("", 2**31, None), ("-1", 2**31, None), ("3", 3, None),
    ("2", 3, 2),
])
def test_whole_number_takes_plain_ascii_digits_in_range(text, below, expected):
    assert whole_number(text, below) == expected


def test_sinfo_counts_no_number_reads_stay_text():
    from tutorial_lib.jobs.slurm import parse_sinfo

    node, = parse_sinfo(f"n1|gpu*|idle|²|{'9' * 5000}|(null)\n")
    assert node["cpus"] == "²" and node["memory_mb"] == "9" * 5000


@pytest.mark.parametrize("label", ["²", "9" * 5000])
def test_val_labels_of_digits_python_cannot_read_are_refused_naming_the_line(tmp_path, label):
    from tutorial_lib.data import PrepareError
    from tutorial_lib.data.layouts import val_labels

    labels = tmp_path / "labels.txt"
    labels.write_text(f"a.JPEG 0\nb.JPEG {label}\n")
    with pytest.raises(PrepareError, match=r"^--val-labels: line 2 of .* Fix:"):
        val_labels(labels, ["n01440764", "n01443537"])


@pytest.mark.parametrize("job_id", ["²", "9" * 5000, "4294967296"])
def test_the_rendezvous_helper_refuses_a_job_id_it_cannot_read(job_id):
    from tutorial_lib.jobs.rendezvous import main

    result = command_in_process(main, [job_id])
    assert result.returncode == EXIT_REFUSED and result.stderr.startswith("error: JOB_ID"), result


@pytest.mark.parametrize("value", ["²", "9" * 5000])
def test_hand_inputs_of_digits_python_cannot_read_name_the_variable(value):
    from tutorial_lib.jobs.record import read_launch
    from tutorial_lib.jobs.spec import JobError

    with pytest.raises(JobError, match=r"^RANKS_PER_NODE: .* is not a whole number") as caught:
        read_launch({"RANKS_PER_NODE": value})
    assert len(str(caught.value)) < 400  # r43t: 5,000 digits were echoed whole


def test_rundir_fresh_of_a_linked_run_directory_names_the_link_and_removes_nothing(tmp_path):
    """r43r (acceptable, imprecise): "is not a folder" for a link to a folder, with a fix that did not fit."""
    from tutorial_lib.rundir.__main__ import main

    target = tmp_path / "theirs"
    target.mkdir()
    (target / "metrics.jsonl").write_text("{}\n")
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "r").symlink_to(target)
    result = command_in_process(main, ["fresh", str(tmp_path / "runs" / "r")])
    assert result.returncode == EXIT_REFUSED
    assert "symbolic link to" in _one_line(result.stderr, "fresh: ")
    assert (target / "metrics.jsonl").read_text() == "{}\n"


def test_the_submit_line_names_the_run_directory_the_job_reports(tmp_path, capsys):
    """r43r (acceptable, inconsistent): a run directory that is a link to an empty folder of the user's was printed
    as the link at submit, while the Job said the folder it leads to."""
    target = tmp_path / "mine"
    target.mkdir()
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "r").symlink_to(target)
    cfg = make_config("smoke", output_root=str(tmp_path / "runs"), name="r", dataset="synthetic", epochs=1,
                      max_steps_per_epoch=1, image_size=16, batch_size=4, progress=False)
    job = jobs.submit(cfg, backend="local", ranks_per_node=1, verbose=True)
    try:
        assert f"run directory {job.run_dir};" in capsys.readouterr().out
    finally:
        job.cancel()
        job.wait(timeout=120, check=False)


# ------------------------------------------------------------------------ T4: seconds no clock can count
@pytest.mark.parametrize("call", [
    lambda job: job.wait(timeout=10**400, check=False), lambda job: job.wait(timeout=1e300, check=False),
    lambda job: job.wait(poll=1e300, check=False),
    lambda job: monitor.watch(job, timeout="10"), lambda job: monitor.watch(job, timeout=10**400),
    lambda job: monitor.watch(job, refresh=-1), lambda job: monitor.watch(job, refresh=0),
    lambda job: monitor.follow(job, every=-1), lambda job: monitor.follow(job, timeout=float("nan")),
], ids=["wait-timeout-int", "wait-timeout-1e300", "wait-poll-1e300", "watch-timeout-text", "watch-timeout-int",
        "watch-refresh-negative", "watch-refresh-zero", "follow-every-negative", "follow-timeout-nan"])
def test_seconds_no_clock_can_count_are_refused_naming_the_argument(tmp_path, call):
    from tests.test_live_view import fake_job

    job = fake_job(tmp_path, "done", "COMPLETED", epochs_done=1)
    with pytest.raises(ConfigError, match=r"^(timeout|poll|refresh|every): expected a number of seconds .* Fix: "):
        call(job)


# ------------------------------------------------------------------------ T6-T9: the bench and evaluate flags
@pytest.fixture
def user_file_link(tmp_path, monkeypatch):
    """``uf``, a symbolic link to a user's file, in the working folder."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "user.txt").write_text("mine\n")
    (tmp_path / "uf").symlink_to(tmp_path / "user.txt")
    return tmp_path


@pytest.mark.parametrize("args, flag", [
    (["loader", "--data-dir", "uf/x", "--workers", "0", "--batch-size", "2", "--image-size", "16"], "--data-dir"),
    (["scan", "--tree", "uf/x", "--ranks", "1", "--classes", "2"], "--tree"),
    (["loader", "--data-dir", "user.txt/x", "--workers", "0"], "--data-dir"),
])
def test_a_bench_path_through_a_file_names_its_flag(user_file_link, args, flag):
    """T6: "'uf': File exists (errno 17)" and "'uf/x/train/n01440764': Not a directory", naming no flag."""
    from tutorial_lib.bench.cli import main

    result = command_in_process(main, args)
    assert result.returncode == EXIT_REFUSED
    assert "which is a file, not a folder" in _one_line(result.stderr, f"{flag}: ")
    assert (user_file_link / "user.txt").read_text() == "mine\n"


def test_an_output_root_through_a_file_names_output_root(user_file_link, no_backend):
    cfg = make_config("smoke", output_root="uf/runs", name="r", epochs=1, progress=False)
    with pytest.raises(ConfigError, match=r"^output_root: .*which is a file, not a folder.*Fix: "):
        jobs.submit(cfg, backend="local")


def test_bench_repeats_that_never_end_are_refused(tmp_path):
    """T7: ``scan --repeats 10000000000`` ran on, printing nothing."""
    from tutorial_lib.bench.cli import main

    result = command_in_process(main, ["scan", "--tree", str(tmp_path / "t"), "--ranks", "1", "--repeats",
                                       "10000000000"])
    assert result.returncode == EXIT_REFUSED and "at most 1000" in _one_line(result.stderr, "--repeats: ")
    assert not (tmp_path / "t").exists()


def test_bench_runs_reference_too_long_for_a_path_names_reference(tmp_path):
    """T8: "'xxxx…/config.json' (5,012 characters): File name too long", --reference not named."""
    from tutorial_lib.bench.cli import main

    (tmp_path / "run").mkdir()
    result = command_in_process(main, ["runs", str(tmp_path / "run"), "--reference", "x" * 5000])
    assert result.returncode == EXIT_REFUSED
    _one_line(result.stderr, "--reference: ")


def test_an_argparse_error_cuts_a_long_value_and_keeps_the_flag_and_choices(tmp_path):
    """T9: evaluate echoed a 1 MB ``--device`` value whole (a 1,000,625-byte stderr)."""
    from tutorial_lib.engine.model_file import main

    result = command_in_process(main, [str(tmp_path), "--data-dir", str(tmp_path), "--device", "L" * 1_000_000])
    assert result.returncode == EXIT_REFUSED and len(result.stderr) < 2000, len(result.stderr)
    assert "argument --device: invalid choice" in result.stderr
    assert "(choose from 'auto', 'cpu', 'cuda')" in result.stderr


# ------------------------------------------------------------------------ T10: the course's parameters
@pytest.mark.parametrize("name, value, starts", [
    ("data_dir", "uf", "parameters: data_dir: "), ("data_dir", "mine", "parameters: data_dir: "),
    ("data_dir", "''", "parameters: data_dir: "), ("data_dir", "/proc/x", "parameters: data_dir: "),
    ("image_size", "1000000000", "parameters: image_size: "), ("backend", "pbs", "parameters: backend: "),
    ("output_root", "uf", "parameters: output_root: "), ("output_root", "uf/x", "parameters: output_root: "),
])
def test_course_parameters_a_notebook_would_fail_on_are_refused_before_any_runs(user_file_link, name, value, starts):
    """T10: refused only inside notebook 00, after --out was written (rc 1); ``output_root`` a file ran on."""
    from tutorial_lib.course.runner import main

    (user_file_link / "mine").mkdir()
    (user_file_link / "mine" / "thesis.txt").write_text("mine\n")
    result = command_in_process(main, ["--only", "00", "-p", name, value, "--out", "out"])
    assert result.returncode == EXIT_REFUSED, result
    _one_line(result.stderr, starts)
    assert not (user_file_link / "out").exists()  # nothing was run
    assert (user_file_link / "mine" / "thesis.txt").read_text() == "mine\n"


def test_course_path_parameters_are_taken_from_where_the_command_runs(user_file_link, monkeypatch):
    """The notebooks run in the repository's root, the checks here: a relative -p path means this folder."""
    from tutorial_lib.course.runner import from_here

    given = from_here({"data_dir": "d", "output_root": "~/runs", "arch": "resnet18", "index_dir": ""})
    assert given == {"data_dir": str(user_file_link / "d"), "output_root": os.path.expanduser("~/runs"),
                     "arch": "resnet18", "index_dir": ""}


def test_bench_shards_work_dir_with_dotdot_after_a_link_is_the_folder_the_kernel_means(tmp_path):
    """r43t U2: ``--work-dir ud/../x`` (ud a link to a folder) made and packed the set, then the staging step refused
    the '..' with a StagingError traceback."""
    from tutorial_lib.bench.cli import main

    (tmp_path / "real").mkdir()
    (tmp_path / "ud").symlink_to(tmp_path / "real")
    result = command_in_process(main, ["shards", "--jpeg-images", "40", "--sets", "jpeg", "--steps", "stage",
                                       "--rounds", "1", "--quiet", "--work-dir", f"{tmp_path}/ud/../x"])
    assert result.returncode == 0, result.stderr[-2000:]
    assert (tmp_path / "x" / "jpeg-40").is_dir()  # where the kernel puts ud/../x: beside the link's target


@pytest.mark.parametrize("args, flag", [
    (["loader", "--min-time", "1000000001"], "--min-time"), (["loader", "--min-time", "3601"], "--min-time"),
    (["data", "--batches", "10000000000"], "--batches"), (["allreduce", "--iters", "10000000000"], "--iters"),
    (["allreduce", "--warmup", "10000000000"], "--warmup"), (["extract", "--rounds", "1001"], "--rounds"),
    (["train", "--steps", "1000001"], "--steps"), (["loader", "--decode-images", "10000000000"], "--decode-images"),
])
def test_bench_counts_and_seconds_that_never_end_are_refused(tmp_path, args, flag):
    """r43t U3: T7's bound covered --repeats only; 10**10 batches or 1e9 s measured on, printing nothing."""
    from tutorial_lib.bench.cli import main

    result = command_in_process(main, [*args, "--out", str(tmp_path / "out.jsonl")])
    assert result.returncode == EXIT_REFUSED
    assert "at most" in _one_line(result.stderr, f"{flag}: ")
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------ r43t U4-U6
@pytest.mark.parametrize("only, name, value", [
    ("02", "classes", "0"), ("04", "global_batches", "[0]"), ("05", "time_limit", "'99:99:99'"),
    ("07", "allreduce_iters", "0"), ("07", "allreduce_sizes", "'x;y'"), ("01", "bench_repeats", "1001"),
    # r43u V2: a parameter whose default is None took any value, and bench's limits were not the course's
    ("01", "bench_min_time", "3601"), ("01", "bench_warmup", "-1"), ("01", "bench_warmup", "1000001"),
    ("02", "loader_batches", "1000001"), ("02", "workers_list", "[0, 100000]"), ("03", "exact_steps", "1000001"),
])
def test_course_notebook_parameters_no_notebook_can_use_are_refused_before_any_runs(tmp_path, monkeypatch, only,
                                                                                     name, value):
    """U4: a ZeroDivisionError in 02's fourth cell, 04 and 05 failing at a cell, 07 reaching sbatch, 01 running on
    with 1,001 bench rounds."""
    from tutorial_lib.course.runner import main

    monkeypatch.chdir(tmp_path)
    result = command_in_process(main, ["--only", only, "-p", name, value, "--out", "out"])
    assert result.returncode == EXIT_REFUSED, result
    _one_line(result.stderr, f"parameters: {name}: ")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("variables, named", [
    ({"RANK": "²", "WORLD_SIZE": "1"}, "RANK"), ({"RANK": "0", "WORLD_SIZE": "٢"}, "WORLD_SIZE"),
    ({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "9" * 5000}, "LOCAL_RANK"),
    ({"SLURM_PROCID": "²", "SLURM_NTASKS": "1", "MASTER_ADDR": "127.0.0.1"}, "SLURM_PROCID"),
])
def test_launcher_counts_python_cannot_read_are_refused_naming_the_variable(variables, named):
    """U5: ``RANK=²`` was a ValueError traceback; ``WORLD_SIZE=٢`` was read as 2."""
    from tutorial_lib.engine.distributed import env_rank_info

    with pytest.raises(ConfigError, match=rf"^{named}: .* is not a whole number .*Fix: ") as caught:
        env_rank_info(variables)
    assert len(str(caught.value)) < 400
    assert env_rank_info({"SLURM_PROCID": "1", "SLURM_NTASKS": "8", "MASTER_ADDR": "h", "SLURM_LOCALID": "1",
                          "SLURM_NTASKS_PER_NODE": "4(x2)"}) == (1, 8, 1, 4)  # Slurm's own form still read


@pytest.mark.parametrize("grace", ["abc", "nan", "-1", "1e9"])
def test_a_stop_grace_that_is_no_number_of_seconds_is_refused_before_training(grace, monkeypatch, tmp_path):
    """U5: ``TUTORIAL_STOP_GRACE_S=abc`` killed the watchdog thread with a traceback and training went on without
    it, rc 0."""
    from tutorial_lib.engine.stop import STOP_GRACE_ENV, StopRequest

    monkeypatch.setenv(STOP_GRACE_ENV, grace)
    with pytest.raises(ConfigError, match=rf"^{STOP_GRACE_ENV}: .* Fix: "):
        StopRequest(tmp_path)


def test_bench_e2e_names_the_warm_up_when_it_is_the_huge_one():
    """U6: ``--steps 2 --warmup 999999`` was refused as "--steps: 2 is refused. Fix: fewer steps"."""
    from tutorial_lib.bench.cli import main

    result = command_in_process(main, ["e2e", "--device", "cpu", "--batch-size", "64", "--steps", "2", "--warmup",
                                       "999999"])
    assert result.returncode == EXIT_REFUSED
    assert "fewer warm-up steps" in _one_line(result.stderr, "--warmup: 999999")


# ------------------------------------------------------------------------ r43u
@pytest.mark.parametrize("args, flag", [
    (["loader", "--repeats", "1000", "--min-time", "3600"], "--min-time"),
    (["data", "--repeats", "1000", "--min-time", "3600"], "--min-time"),
    (["data", "--repeats", "1000", "--batches", "1000000"], "--batches"),
])
def test_bench_rounds_whose_measurements_add_up_past_an_hour_are_refused(tmp_path, args, flag):
    """r43u V1: every flag within its limit, the rounds x settings x measurement over 1,000 h, silent."""
    from tutorial_lib.bench.cli import main

    result = command_in_process(main, [*args, "--data-dir", str(tmp_path / "d"), "--workers", "0", "--batch-size",
                                       "2", "--image-size", "16"])
    assert result.returncode == EXIT_REFUSED
    assert "fit in 1 h" in _one_line(result.stderr, f"{flag}: ")
    assert list(tmp_path.iterdir()) == []
