"""The second independent re-run of issue 43's contract: nine classes it still found (an overflowing learning rate,
a config nested too deeply, evaluate's tracebacks, the jobs API's on/off and ``after`` arguments, Slurm values
that are options or other scripts' digits, run-directory files that are not files, sweeps over paths, an
index_dir that is a device, an empty milestone). Each ends as one line naming the field and a fix that is itself
accepted, before anything is written; each test failed on the code before. Unit level: nothing here trains.
"""

from __future__ import annotations

import contextlib
import io
import os

import pytest

from tests.conftest import write_image_tree
from tutorial_lib.engine.config import ConfigError, make_config, validate
from tutorial_lib.exits import EXIT_REFUSED


def _main(main, argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        status = main(argv)
    return status, err.getvalue()


def _one_line(err: str, starts: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in err and lines[0].startswith(f"error: {starts}"), err[-2000:]
    assert " Fix: " in lines[0]
    return lines[0]


# ------------------------------------------------------------------ 1. a learning rate float32 cannot hold
@pytest.mark.parametrize("base_lr", [1e300, 1e39, 1.5e6])
def test_a_learning_rate_beyond_any_run_is_refused_naming_base_lr(base_lr):
    """``--base-lr 1e300`` ended in ``RuntimeError: value cannot be converted to type float without overflow``."""
    with pytest.raises(ConfigError, match=r"^base_lr: must be in \(0, 1e\+06\], got .* Fix: pass e\.g\. "
                                          r"--base-lr 0\.1"):
        validate(make_config("smoke", base_lr=base_lr))
    assert validate(make_config("smoke", base_lr=0.1)).base_lr == 0.1  # the fix it gives
    assert validate(make_config("smoke", base_lr=1e6)).base_lr == 1e6  # a diverging run stays possible (exit 3)


# ------------------------------------------------------------------ 2. a config file nested too deeply
def test_a_config_file_nested_ten_thousand_deep_is_one_line_naming_the_file(tmp_path):
    """10,000 nested ``[`` in ``--config`` ended in a RecursionError traceback."""
    from tutorial_lib.engine.trainer import main

    deep = tmp_path / "deep.yaml"
    deep.write_text("[" * 10_000 + "]" * 10_000 + "\n")
    with pytest.raises(ConfigError, match=r"^--config '.*deep\.yaml': .* nested too deeply .* Fix: "):
        make_config("smoke", yaml_path=str(deep))
    status, err = _main(main, ["--config", str(deep), "--output-root", str(tmp_path / "runs")])
    assert status == EXIT_REFUSED and "deep.yaml" in _one_line(err, "--config ")
    assert not (tmp_path / "runs").exists()


# ------------------------------------------------------------------ 3. evaluate: the project's user errors
@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A run directory holding a model.pt of a 2-class resnet18, and a data folder with those two classes."""
    from tutorial_lib.engine.model_file import save_model
    from tutorial_lib.engine.models import build_model

    root = tmp_path_factory.mktemp("evaluate")
    cfg = make_config("smoke", num_classes=2)
    (root / "run").mkdir()
    save_model(root / "run" / "model.pt", build_model("resnet18", 2), cfg, 2, ["a", "b"])
    write_image_tree(root / "data", {"val": {"a": 1, "b": 1}})
    return root


def test_evaluate_refuses_a_batch_too_big_for_memory_with_one_line(finished_run):
    """``--batch-size 100000000``: the right message, printed as a ConfigError traceback with exit 1."""
    from tutorial_lib.engine.model_file import main

    status, err = _main(main, [str(finished_run / "run"), "--data-dir", str(finished_run / "data"),
                               "--device", "cpu", "--batch-size", "100000000"])
    assert status == EXIT_REFUSED and "of memory" in _one_line(err, "--batch-size: ")


def test_evaluate_caps_workers_as_the_trainer_does(finished_run):
    """``--workers 100000`` was accepted (the trainer refuses more than validate.INT_LIMITS['workers']). The run
    directory here has no model.pt, so the code before failed on that instead of starting 100,000 workers."""
    from tutorial_lib.engine.model_file import main
    from tutorial_lib.engine.validate import INT_LIMITS

    status, err = _main(main, [str(finished_run / "no-run"), "--data-dir", str(finished_run / "data"),
                               "--device", "cpu", "--workers", "100000"])
    assert status == EXIT_REFUSED and f"from 0 to {INT_LIMITS['workers']}" in _one_line(err, "--workers: ")


# ------------------------------------------------------------------ 4. the jobs API's after and on/off arguments
@pytest.fixture()
def nothing_submitted(monkeypatch):
    """jobs.submit's backends replaced by a refusal: a test of bad arguments never starts a job."""
    from tutorial_lib import jobs

    def refuse(*args, **kwargs):
        raise AssertionError("a job was submitted")

    monkeypatch.setattr(jobs, "submit_local", refuse)
    monkeypatch.setattr(jobs.slurm, "submit_slurm", refuse)
    return jobs


@pytest.mark.parametrize("arguments, named", [
    ({"after": "job-1"}, "after"), ({"after": 12}, "after"), ({"fresh": "yes"}, "fresh"), ({"fresh": 1}, "fresh"),
    ({"verbose": "no"}, "verbose"),
])
def test_submit_refuses_an_after_that_is_no_job_and_an_on_off_argument_that_is_no_bool(arguments, named, tmp_path,
                                                                                       nothing_submitted):
    """``after="job-1"``: AttributeError after the run directory was taken; ``fresh="yes"`` was taken as true."""
    cfg = make_config("smoke", name="j", output_root=str(tmp_path / "runs"))
    with pytest.raises(ConfigError, match=rf"^{named}: .* Fix: ") as refused:
        nothing_submitted.submit(cfg, backend="local", check_data=False, **arguments)
    assert "\n" not in str(refused.value)
    assert not (tmp_path / "runs").exists()


def test_sweep_and_make_spec_refuse_on_off_arguments_that_are_no_bool(tmp_path, nothing_submitted):
    from tutorial_lib.jobs.spec import make_spec

    cfg = make_config("smoke", name="j", output_root=str(tmp_path / "runs"))
    with pytest.raises(ConfigError, match=r"^sequential: must be True or False, got 'yes' \(str\)\. Fix: "):
        nothing_submitted.sweep(cfg, over="batch_size", values=[8, 16], sequential="yes", backend="local")
    with pytest.raises(ConfigError, match=r"^check_data: must be True or False, got 'no' \(str\)\. Fix: "):
        make_spec(cfg, check_data="no")
    assert not (tmp_path / "runs").exists()


# ------------------------------------------------------------------ 5. Slurm values: digits and options
@pytest.mark.parametrize("time", ["٣0", "1-٠٢", "٠١:٣٠:٠٠", "３０"])
def test_a_slurm_time_of_other_scripts_digits_is_refused(time):
    """``time: "٣0"`` passed (``\\d`` and int() read Arabic-Indic digits); sbatch refuses it."""
    from tutorial_lib.jobs.site import Site
    from tutorial_lib.jobs.slurm_values import check_time

    with pytest.raises(ConfigError, match=r"^time: .* is not a Slurm time limit\. Fix: use minutes \(30\)"):
        check_time(time)
    with pytest.raises(ConfigError, match=r"^site\.time: "):
        Site.from_dict({"time": time})
    with pytest.raises(ConfigError, match=r"^site\.mem: "):
        Site.from_dict({"mem": "٦٤G"})
    assert check_time("30") == "30"


@pytest.mark.parametrize("field, value", [("partition", "-x"), ("qos", "--exclusive"), ("account", "-A"),
                                          ("partition", "--wrap=id")])
def test_a_site_value_that_sbatch_would_read_as_an_option_is_refused(field, value, tmp_path):
    from tutorial_lib.jobs.site import Site
    from tutorial_lib.jobs.spec import make_spec

    with pytest.raises(ConfigError, match=rf"^site\.{field}: .* not starting with '-'.* Fix: "):
        Site.from_dict({field: value})
    with pytest.raises(ConfigError, match=r"^site\.container\.image: "):
        Site.from_dict({"container": {"image": "-x"}})
    if field in ("partition", "account"):  # the submit arguments of the same name
        cfg = make_config("smoke", name="j", output_root=str(tmp_path))
        with pytest.raises(ConfigError, match=rf"^{field}: "):
            make_spec(cfg, check_data=False, **{field: value})
    assert Site.from_dict({field: "gpu-a100"}).to_dict()[field] == "gpu-a100"


def test_a_warning_at_the_limit_itself_is_refused():
    """``--signal=B:USR1@0`` was accepted: the warning would come with the kill, no time to checkpoint."""
    from tutorial_lib.jobs.slurm_values import check_sbatch_option

    with pytest.raises(ConfigError, match=r"^sbatch_options: '--signal=B:USR1@0': .* 1 to 65535 .* Fix: e\.g\. "
                                          r"'(--signal=B:USR1@300)'") as refused:
        check_sbatch_option("--signal=B:USR1@0")
    assert "\n" not in str(refused.value)
    assert check_sbatch_option("--signal=B:USR1@300") == "--signal=B:USR1@300"


# ------------------------------------------------------------------ 6. run-directory files that are not files
def _marked_run_dir(root):
    run_dir = root / "r"
    run_dir.mkdir()
    (run_dir / "config.json").write_text('{"name": "r", "output_root": "x", "arch": "resnet18", "global_batch": 8, '
                                         '"scaled_lr": 0.1, "world_size": 1}')
    return run_dir


@pytest.mark.parametrize("name, make, kind", [
    ("checkpoint.pt", os.mkfifo, "a named pipe"), ("checkpoint.pt", os.mkdir, "a folder"),
    ("model.pt", os.mkfifo, "a named pipe"), ("metrics.jsonl", os.mkdir, "a folder"),
    ("checkpoint.pt", lambda path: os.symlink("/nowhere/at/all", path), "a link to nothing"),
])
def test_a_run_directory_whose_checkpoint_is_not_a_file_is_refused_before_training(name, make, kind, tmp_path):
    """A ``checkpoint.pt`` that was a FIFO restarted training at epoch 1 (exit 0); a folder trained an epoch, then
    failed to save (exit 1). Refused by stat() before anything is opened (opening a FIFO would block)."""
    from tutorial_lib.rundir.lock import RunDirError, prepare_run_dir

    run_dir = _marked_run_dir(tmp_path)
    make(run_dir / name)
    with pytest.raises(RunDirError, match=rf"^output_root: '.*/r/{name}' \({kind}\) in the run directory exists "
                                          r"but is not a regular file.* Fix: move it away, or choose another run"):
        prepare_run_dir(run_dir)
    assert sorted(p.name for p in run_dir.iterdir()) == sorted(["config.json", name])


def test_the_trainer_refuses_a_fifo_checkpoint_with_one_line(tmp_path):
    from tutorial_lib.engine.trainer import main

    run_dir = _marked_run_dir(tmp_path)
    os.mkfifo(run_dir / "checkpoint.pt")
    status, err = _main(main, ["--profile", "smoke", "--dataset", "synthetic", "--synthetic-images", "64",
                               "--output-root", str(tmp_path), "--name", "r", "--epochs", "1",
                               "--max-steps-per-epoch", "1", "--progress", "false"])
    assert status == EXIT_REFUSED and "checkpoint.pt' (a named pipe)" in _one_line(err, "output_root: ")
    assert sorted(p.name for p in run_dir.iterdir()) == ["checkpoint.pt", "config.json"]


# ------------------------------------------------------------------ 7. a sweep over a path
@pytest.mark.parametrize("over", ["output_root", "data_dir", "stage_to", "index_dir"])
def test_a_sweep_over_a_path_is_refused_naming_over(over, tmp_path, nothing_submitted):
    """``sweep(over="output_root", values=["/tmp/x"])`` was refused as "name: 'x-output_root/tmp/x' is not a safe
    name", which the user cannot act on."""
    cfg = make_config("smoke", name="x", output_root=str(tmp_path / "runs"))
    with pytest.raises(ConfigError, match=rf"^over: {over} is a path.* Fix: build one config per {over}"):
        nothing_submitted.sweep(cfg, over=over, values=["/tmp/x"], backend="local")
    assert not (tmp_path / "runs").exists()


# ------------------------------------------------------------------ 8. an index_dir that cannot be a folder
@pytest.mark.parametrize("index_dir", ["/dev/null", "/dev/null/cache", "FILE", "FILE/below"])
def test_an_index_dir_that_is_a_file_or_a_device_is_refused_naming_index_dir(index_dir, tmp_path):
    """``--index-dir /dev/null``: "'/dev/null': File exists (errno 17)" at training time, index_dir not named."""
    (tmp_path / "FILE").write_text("mine")
    index_dir = index_dir.replace("FILE", str(tmp_path / "FILE"))
    with pytest.raises(ConfigError, match=r"^index_dir: .* (cannot be a folder: .* exists and is not one|"
                                            r"leads through .*, which is a file, not a folder)\. Fix: "):
        validate(make_config("smoke", index_dir=index_dir, data_dir=str(tmp_path / "digits")))
    assert (tmp_path / "FILE").read_text() == "mine"
    assert validate(make_config("smoke", index_dir=str(tmp_path / "cache"), data_dir=str(tmp_path / "digits")))


# ------------------------------------------------------------------ 9. an empty milestone
@pytest.mark.parametrize("text", ["1,,2", "1,2,", ",1", "1, ,2"])
def test_an_empty_milestone_is_refused_naming_the_flag(text):
    """``--lr-milestones 1,,2`` was accepted with the empty item skipped."""
    from tutorial_lib.engine.config import to_cli_args

    with pytest.raises(ConfigError, match=r"^lr_milestones: .* has an empty item\. Fix: .* --lr-milestones 30,60,80"):
        make_config("smoke", lr_milestones=text)
    assert make_config("smoke", lr_milestones="30,60,80").lr_milestones == [30, 60, 80]  # the fix it gives
    assert make_config("smoke", lr_milestones="30 60, 80").lr_milestones == [30, 60, 80]
    none = make_config("smoke", lr_milestones="")
    assert none.lr_milestones == [] and "" in to_cli_args(none)  # no milestones round-trips as ""
