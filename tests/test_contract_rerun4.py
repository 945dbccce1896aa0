"""What the third re-run of issue 43 (/work/wt/notes/r43e-report.md) found and the first round of fixes left open:
bench flags (a kernel folder as --work-dir, empty and repeated list items, an e2e run of days), course parameters
(checked up front), a checkpoint that cannot resume exactly, an empty --config or --profile, a site value of another
type, trainer records that are no measurement and outer archive members that are no class. Each ends as one line
naming the field and a fix, before anything is written or started; each test failed on the code before. Unit level:
in-process calls, nothing trains, submits or runs a notebook.
"""

from __future__ import annotations

import json
import re
import shutil
import tarfile

import pytest

from tests.test_contract_rerun2 import _main, _one_line
from tutorial_lib.engine.config import ConfigError, make_config
from tutorial_lib.exits import EXIT_REFUSED


def _bench_refusal(argv: list[str]) -> str:
    """The bench command line's checks alone (on the old code the command would have run: the check returns)."""
    from tutorial_lib.bench.arguments import check_arguments
    from tutorial_lib.bench.cli import build_parser

    with pytest.raises(ConfigError) as refused:
        check_arguments(build_parser().parse_args(argv))
    return str(refused.value)


# ------------------------------------------------------------------ 1. a kernel folder that root may "write"
@pytest.mark.parametrize("folder", ["/proc", "/sys/kernel"])
def test_bench_extract_refuses_a_kernel_folder_as_work_dir_even_for_root(folder):
    """``bench extract --work-dir /proc`` run as root (os.access grants root every write) was not refused."""
    assert re.match(r"^--work-dir: '/(proc|sys/kernel)' is under /(proc|sys), where the project writes nothing\. "
                    r"Fix: pass a folder \(or file\) of your own", _bench_refusal(["extract", "--work-dir", folder]))


# ------------------------------------------------------------------ 2. course parameters, up front
@pytest.mark.parametrize(("argv", "named"), [
    (["-p", "n_samples", "1000000000"], "n_samples: must be a whole number of images from 1 to 64"),  # ran > 150 s
    (["-p", "image_size", "99999999999999999999"], "image_size must be at most"),  # OverflowError in cell 6
    (["-p", "dataset", "imagenet"], "dataset: "),  # notebook 00 finished, exit 0
    (["-p", "seed", "x"], "seed must be a whole number"),  # the kind check each notebook makes, made first
])
def test_course_parameters_are_checked_before_any_notebook_runs(tmp_path, argv, named):
    from tutorial_lib.course.runner import main

    status, err = _main(main, ["--only", "00", "--out", str(tmp_path / "ex"), *argv])
    assert status == EXIT_REFUSED
    assert named in _one_line(err, "parameters: ")
    assert not (tmp_path / "ex").exists()  # nothing written, no notebook started


@pytest.mark.parametrize("only", [[""], []])
def test_course_only_with_an_empty_prefix_is_refused(tmp_path, only):
    """``course --only ''`` ran the whole course ('' starts every name)."""
    from tutorial_lib.course.runner import main

    status, err = _main(main, ["--only", *only, "--out", str(tmp_path / "ex")])
    assert status == EXIT_REFUSED
    _one_line(err, "--only: ")
    assert not (tmp_path / "ex").exists()


def test_the_course_parameter_files_pass_the_up_front_check():
    """The check refuses nothing the shipped parameter files hold (a GPU assumed, as on the machines they are for)."""
    from tutorial_lib.course.runner import NOTEBOOK_DIR, check_parameter_values, load_params, notebooks

    for path in sorted((NOTEBOOK_DIR / "params").glob("*.yaml")):
        check_parameter_values(load_params(path), notebooks())


# ------------------------------------------------------------------ 3. a checkpoint that cannot resume as written
def _checkpoint(**changes) -> dict:
    state = {"model": {}, "optimizer": {}, "scaler": {}, "rng": [{"torch": None}], "world_size": 1,
             "progress": {"epoch": 1, "step_in_epoch": 2, "global_step": 6}, "config": {"epochs": 3}}
    return {**state, **changes}


@pytest.mark.parametrize("rng", [None, "absent", [], [{}, {}]])
def test_a_checkpoint_without_every_ranks_random_state_is_refused(tmp_path, rng):
    """A checkpoint.pt with ``rng: None`` resumed without a word: the resume was not exact."""
    from tutorial_lib.engine.trainer import Progress
    from tutorial_lib.rundir.checkpoint import CheckpointError, check_checkpoint

    state = _checkpoint(rng=rng)
    if rng == "absent":
        del state["rng"]
    fields = list(Progress.__dataclass_fields__)
    with pytest.raises(CheckpointError, match=r"^checkpoint: .* (rng|random state).*Fix: "):
        check_checkpoint(state, tmp_path / "checkpoint.pt", fields)
    assert check_checkpoint(_checkpoint(), tmp_path / "checkpoint.pt", fields)  # the trainer's own form passes


@pytest.mark.parametrize(("field", "value"), [("epochs", "x"), ("base_lr", [1]), ("arch", 5)])
def test_a_checkpoint_recording_a_config_value_of_another_type_is_refused(tmp_path, field, value):
    """``config.epochs: 'x'`` printed "epochs x -> 3" and resumed."""
    from tutorial_lib.engine.recipe import check_resume

    cfg = make_config("smoke", epochs=3)
    with pytest.raises(ConfigError, match=rf"^checkpoint: .*config\.{field} = .*nothing was loaded\. Fix: "):
        check_resume(_checkpoint(config={**cfg.to_dict(), field: value}), cfg, {}, tmp_path)
    assert check_resume(_checkpoint(config={**cfg.to_dict(), "epochs": 2}), cfg, {}, tmp_path) == {"epochs": [2, 3]}


# ------------------------------------------------------------------ 4, 5. an empty --config or --profile, [] values
def test_an_empty_config_path_is_refused_naming_config():
    """``train --config ''`` was ignored: the default profile trained."""
    from tutorial_lib.engine.cli import config_from_args

    with pytest.raises(ConfigError, match=r"^config: an empty path was given\. Fix: "):
        config_from_args(["--config", ""])


@pytest.mark.parametrize("text", ["[]", "0", "''"])
def test_a_config_file_holding_no_mapping_is_refused_naming_config(tmp_path, text):
    """A --config file holding ``[]`` was read as no settings."""
    from tutorial_lib.engine.cli import config_from_args

    (tmp_path / "c.yaml").write_text(text + "\n")
    with pytest.raises(ConfigError, match=r"^config: file .* must hold a mapping of field: value pairs.*Fix: "):
        config_from_args(["--config", str(tmp_path / "c.yaml")])
    (tmp_path / "c.yaml").write_text("# nothing set yet\n")
    assert config_from_args(["--config", str(tmp_path / "c.yaml")]).profile == "smoke"  # an empty file: no settings


def test_an_empty_profile_is_refused_naming_profile():
    """``--profile ''`` trained the default profile."""
    from tutorial_lib.engine.cli import config_from_args

    with pytest.raises(ConfigError, match=r"^profile: unknown profile ''\. Fix: "):
        config_from_args(["--profile", ""])
    with pytest.raises(ConfigError, match=r"^profile: "):
        make_config("")


@pytest.mark.parametrize(("field", "value"), [("account", []), ("partition", []), ("account", "")])
def test_make_spec_refuses_a_site_value_of_another_type_naming_it(field, value):
    """``make_spec(..., account=[])`` was read as "not given" and the site's account used."""
    from tutorial_lib.jobs.spec import make_spec

    cfg = make_config("smoke", dataset="synthetic", name="spec")
    with pytest.raises(ConfigError, match=rf"^{field}: .*Fix: "):
        make_spec(cfg, check_data=False, **{field: value})


# ------------------------------------------------------------------ 6. the same thing measured twice
@pytest.mark.parametrize(("argv", "flag"), [
    (["train", "--arch", "resnet18,,resnet18"], "--arch"),
    (["scale", "--forms", "folders,folders"], "--forms"),
    (["train", "--batch-size", "2,2"], "--batch-size"),
    (["loader", "--workers", "1,,2"], "--workers"),
])
def test_bench_lists_with_empty_or_repeated_items_are_refused_naming_the_flag(tmp_path, monkeypatch, argv, flag):
    from tutorial_lib.bench.cli import main

    monkeypatch.chdir(tmp_path)
    status, err = _main(main, argv)
    assert status == EXIT_REFUSED
    last = err.strip().splitlines()[-1]
    assert f"argument {flag}: " in last and "empty or repeated item. Fix: " in last and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------ 7. a step line that is no measurement
@pytest.mark.parametrize("rate", [1e308, float("inf"), -5.0, 0])
def test_bench_runs_leaves_out_a_rate_that_is_no_measurement_and_says_so(tmp_path, capsys, rate):
    """A step line with images_per_sec 1e308 was used in the windows (median and range)."""
    from tutorial_lib.bench.runs import trainer_record

    (tmp_path / "config.json").write_text(json.dumps({"name": "r"}))
    steps = [{"event": "step", "epoch": 0, "step": s, "images_per_sec": 100.0 + s} for s in range(1, 6)]
    steps[3]["images_per_sec"] = rate
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(e) + "\n" for e in steps))
    record = trainer_record(tmp_path)
    assert record["status"] == "ok" and record["rejected_events"] == 1
    assert (record["images_per_sec"], record["images_per_sec_low"], record["images_per_sec_high"]) == (103, 102, 105)
    assert re.search(r"^warning: .*metrics\.jsonl: 1 step line\(s\) with an images_per_sec that is no measurement",
                     capsys.readouterr().err, re.M)


# ------------------------------------------------------------------ 8. outer archive members that are no class
# (an outer member '-rf.tar' that became class '-rf': test_contract_cases.py's member refusal, '-rf.tar' added)
def test_an_outer_folder_member_is_refused_naming_it_not_skipped(tmp_path, fake_sources):
    """An outer folder member named like a class archive (``n01530575.tar``) was skipped without a word."""
    from tutorial_lib.data.layouts import PrepareError
    from tutorial_lib.data.prepare import prepare

    source = tmp_path / "archives"
    shutil.copytree(fake_sources["archives"], source)
    folder = tarfile.TarInfo("n01530575.tar")
    folder.type = tarfile.DIRTYPE
    with tarfile.open(source / "ILSVRC2012_img_train.tar", "a") as tar:
        tar.addfile(folder)
    with pytest.raises(PrepareError, match=r"^SOURCE: .* holds the folder 'n01530575\.tar', where only class archives"):
        prepare(source, tmp_path / "dest", progress=False)
    assert not (tmp_path / "dest").exists()


# ------------------------------------------------------------------ 10. an e2e run of days
def test_bench_e2e_refuses_steps_that_would_run_for_hours_with_the_estimate():
    """``bench e2e --steps N`` had a count cap only: 20 million steps of batch 2 ran on (hours on a CPU)."""
    message = _bench_refusal(["e2e", "--device", "cpu", "--steps", "20000000", "--batch-size", "2"])
    assert re.match(r"^--steps: 20000000 is refused\. Fix: fewer steps, e.g\. 50: [\d,]+ images in all "
                    r"would take at least [\d.,]+ h even at 10,000 images/s", message)
    from tutorial_lib.bench.arguments import check_arguments
    from tutorial_lib.bench.cli import build_parser

    check_arguments(build_parser().parse_args(["e2e", "--device", "cpu", "--steps", "50", "--batch-size", "2"]))
