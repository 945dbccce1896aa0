"""Values checked against the data and named as the user set them, before anything is written (issue 34)."""

from __future__ import annotations

import ast
import io
import json
from contextlib import redirect_stderr
from pathlib import Path

import pytest

from tutorial_lib import REPO_ROOT
from tutorial_lib.engine.config import ConfigError, make_config


def _run(main, argv) -> tuple[int, str]:
    err = io.StringIO()
    with redirect_stderr(err):
        status = main(argv)
    text = err.getvalue()
    assert "Traceback" not in text, text
    return status, text


def _one_line(text: str) -> str:
    errors = [line for line in text.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, text
    return errors[0]


@pytest.mark.parametrize("classes", ["12", "2"])
def test_num_classes_other_than_the_class_folders_is_refused_before_the_run_directory(classes, digits_dir,
                                                                                        tmp_path):
    from tutorial_lib.engine.trainer import main

    status, text = _run(main, ["--profile", "smoke", "--dataset", "imagefolder", "--data-dir", str(digits_dir),
                               "--output-root", str(tmp_path), "--name", "n", "--num-classes", classes,
                               "--epochs", "1", "--max-steps-per-epoch", "1"])
    assert status == 2
    assert _one_line(text).startswith(f"error: num_classes: {classes} was given but ") and "10 class folders" in text
    assert list(tmp_path.iterdir()) == []  # no run directory made


def test_num_classes_is_checked_for_the_digits_too():
    from tutorial_lib.engine.config import validate

    with pytest.raises(ConfigError, match="^num_classes: 2 was given but the digits data set has 10"):
        validate(make_config("smoke", dataset="digits", num_classes=2), check_paths=False)
    validate(make_config("smoke", dataset="digits", num_classes=10), check_paths=False)


def test_a_tilde_is_the_home_folder_in_every_path_setting(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    cfg = make_config("smoke", output_root="~", data_dir="~/data", index_dir="~/index")
    assert (cfg.output_root, cfg.data_dir, cfg.index_dir) == (str(tmp_path / "home"), str(tmp_path / "home/data"),
                                                              str(tmp_path / "home/index"))
    yaml_file = tmp_path / "c.yaml"
    yaml_file.write_text("output_root: ~/runs\n")
    assert make_config(yaml_path=str(yaml_file)).output_root == str(tmp_path / "home" / "runs")


def test_digits_into_a_home_folder_given_as_tilde_is_one_line_and_writes_nothing(tmp_path, monkeypatch):
    from tutorial_lib.engine.trainer import main

    home = tmp_path / "home"
    home.mkdir()
    (home / "thesis.tex").write_text("mine")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    status, text = _run(main, ["--profile", "smoke", "--dataset", "digits", "--data-dir", "~",
                               "--output-root", str(tmp_path / "out"), "--name", "n"])
    assert status == 2 and "data_dir" in _one_line(text)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home"]  # no folder named '~', no run directory
    assert sorted(p.name for p in home.iterdir()) == ["thesis.tex"]


@pytest.mark.parametrize("text, key", [("epochs: 1\nbase_lr: 0.1\nepochs: 90\n", "epochs"),
                                       ("site:\n  python: a\n  python: b\n", "python")])
def test_a_key_given_twice_is_refused_in_every_yaml_the_project_reads(text, key, tmp_path):
    from tutorial_lib.course import main as course_main
    from tutorial_lib.engine.trainer import main as train_main
    from tutorial_lib.jobs.site import load_site

    path = tmp_path / "file.yaml"
    path.write_text(text)
    if key == "epochs":
        with pytest.raises(ConfigError, match=rf"the key '{key}' is given twice \(lines 1 and 3\)"):
            make_config(yaml_path=str(path))
        status, err = _run(train_main, ["--config", str(path), "--output-root", str(tmp_path / "o")])
        assert status == 2 and "'epochs' is given twice" in _one_line(err)
    else:
        with pytest.raises(ConfigError, match=rf"^site: .*the key '{key}' is given twice"):
            load_site(str(path))
    status, err = _run(course_main, ["--params", str(path), "--only", "00", "--out", str(tmp_path / "out")])
    assert status == 2 and f"the key '{key}' is given twice" in _one_line(err)
    assert not (tmp_path / "out").exists()


def test_a_python_tag_in_params_is_one_line_and_never_run(tmp_path):
    from tutorial_lib.course import main

    witness = tmp_path / "ran"
    path = tmp_path / "params.yaml"
    path.write_text(f"epochs: !!python/object/apply:os.system ['touch {witness}']\n")
    status, err = _run(main, ["--params", str(path), "--only", "00", "--out", str(tmp_path / "out")])
    assert status == 2 and "no Python objects, nothing is run" in _one_line(err) and "params.yaml" in err
    assert not witness.exists() and not (tmp_path / "out").exists()
    status, err = _run(main, ["-p", "epochs", "!!python/name:os.system", "--only", "00", "--out", str(tmp_path)])
    assert status == 2 and "-p epochs" in _one_line(err)


@pytest.mark.parametrize("text", ["{0}", "1: 2\n", "null: 3\n"])
def test_a_params_key_that_is_not_a_name_is_one_line(text, tmp_path):
    """A --params mapping keyed by a number (``{0}``) ended in a TypeError from difflib (found by the contract
    suite's generated inputs)."""
    from tutorial_lib.course import main

    path = tmp_path / "params.yaml"
    path.write_text(text)
    status, err = _run(main, ["--params", str(path), "--only", "00", "--out", str(tmp_path / "out")])
    assert status == 2 and "no notebook has a parameter" in _one_line(err)
    assert not (tmp_path / "out").exists()


def test_only_prefixes_that_name_no_notebook_are_refused(tmp_path):
    from tutorial_lib.course import main

    status, err = _run(main, ["--only", "99", "--out", str(tmp_path / "out")])
    assert status == 2 and "--only" in _one_line(err) and not (tmp_path / "out").exists()


def _notebook_parameters(prefix: str) -> dict:
    notebook = next((REPO_ROOT / "notebooks").glob(f"{prefix}_*.ipynb"))
    cell = next(c for c in json.loads(notebook.read_text())["cells"] if "parameters" in c["metadata"].get("tags", []))
    values = {}
    for statement in ast.parse("".join(cell["source"])).body:
        values[statement.targets[0].id] = ast.literal_eval(statement.value)
    return values


@pytest.mark.parametrize("name, value", [("ranks_per_node", -1), ("nodes", 0), ("ranks_per_node", 1.5)])
def test_notebook_04s_plan_names_the_parameter_the_user_set(name, value):
    from tutorial_lib.course import plans

    given = _notebook_parameters("04")
    wanted = ("profile", "output_root", "dataset", "data_dir", "arch", "image_size", "nodes", "ranks_per_node",
              "global_batches", "epochs", "base_lr", "warmup_epochs", "train_compile", "max_steps_per_epoch",
              "lars_base_lr", "site")
    kwargs = {key: given[key] for key in wanted}
    kwargs[name] = value
    with pytest.raises(ConfigError, match=rf"^{name}: must be an integer >= 1"):
        plans.large_batches(**kwargs, gpus=0, backend="local")


@pytest.mark.parametrize("argv, field", [(["--rate-mbit", "nan"], "rate_mbit"), (["--rate-mbit", "-5"], "rate_mbit"),
                                         (["--nodes", "300"], "nodes"), (["--nodes", "0"], "nodes")])
def test_netlab_refuses_bad_settings_up_front(argv, field, monkeypatch):
    from tutorial_lib.jobs import netlab

    def no_command(*command):
        raise AssertionError(f"ran {command} before refusing")

    monkeypatch.setattr(netlab, "_run", no_command)
    status, err = _run(netlab.main, ["up", "--tag", "tlabtest", *argv])
    assert status == 2 and _one_line(err).startswith(f"error: {field}: ")


def test_evaluate_refuses_a_batch_size_below_one(tmp_path):
    from tutorial_lib.engine.model_file import main

    status, err = _run(main, [str(tmp_path), "--data-dir", str(tmp_path), "--batch-size", "0"])
    assert status == 2 and _one_line(err).startswith("error: --batch-size: ")


def test_a_torn_config_json_in_bench_runs_is_one_line(tmp_path):
    from tutorial_lib.bench.cli import main

    (tmp_path / "config.json").write_text('{"name": ')
    status, err = _run(main, ["runs", str(tmp_path)])
    assert status == 2 and "config.json: not a complete" in _one_line(err)
    assert Path(tmp_path / "config.json").read_text() == '{"name": '


@pytest.mark.parametrize("time, options, refused", [("1", [], True), ("00:02:00", [], True), ("00:03:59", [], True),
                                                    ("00:04:00", [], False), ("1", ["--signal=B:USR1@30"], False),
                                                    ("00:10:00", ["--signal=B:USR1@900"], True)])
def test_a_time_limit_within_the_warning_lead_is_refused_before_submitting(time, options, refused, tmp_path):
    from tutorial_lib.jobs.spec import make_spec

    cfg = make_config("smoke", name="t", output_root=str(tmp_path))
    if refused:
        with pytest.raises(ConfigError, match=r"^time: .* leaves too little time to train: Slurm warns the job \d+ s "):
            make_spec(cfg, time=time, sbatch_options=options, on_cluster=True, check_data=False)
    else:
        assert make_spec(cfg, time=time, sbatch_options=options, on_cluster=True, check_data=False).time == time
