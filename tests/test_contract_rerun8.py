"""What the sixth re-run of issue 43 (/work/wt/notes/r43k-report.md) found: every regnet failing every pre-check
on the meta device, ``make_config(yaml_path=5)`` and ``preflight.run(None)`` tracebacks, a damaged Slurm record whose
5,000-character id broke ``explain()``, ``bench scan`` starting any number of processes and not naming ``--tree``,
``bench staging`` refusing a ``..`` stage only after generating its data set, and a literal ``$HOME/runs`` that made
a folder named ``$HOME``. Each ends as one line naming the field and the fix, before anything is written; each test
failed on the code before (checked by reverting the library change). Unit level: no job is started.
"""

from __future__ import annotations

import json

import pytest

from tests.test_contract_rerun2 import _main, _one_line
from tutorial_lib.engine.config import ConfigError, make_config, validate

LINE_LIMIT = 2100  # docs/reliability.md: a message is one line of about 2,100 characters at most


@pytest.mark.parametrize("arch", ["regnet_y_400mf", "regnet_x_400mf"])
def test_a_regnet_passes_the_pre_checks_and_its_estimate_counts_its_weights(arch):
    """Before: ``NotImplementedError: Cannot copy out of meta tensor`` from validate (its size check), the memory
    estimate and the trainer's BatchNorm check: regnet computes its block widths with tensors it reads back."""
    from tutorial_lib.bench.compute import train_flops_per_image
    from tutorial_lib.engine import memory, models

    assert validate(make_config("smoke", arch=arch, image_size=32), check_paths=False).arch == arch
    assert models.has_batch_norm(arch) and models.fixed_image_size(arch) is None
    parts = memory.training_bytes(arch, 10, 32, 4)
    assert parts["weights and gradients"] == 8 * models.count_parameters(models.build_model(arch, 10))
    assert parts["activations"] > 0 and train_flops_per_image(arch, 32) > 0


@pytest.mark.parametrize("value", [5, [1], 2.5])
def test_a_yaml_path_that_is_not_a_path_is_named(value):
    with pytest.raises(ConfigError, match=r"^yaml_path: expected the path of a YAML config file, got .* Fix: "):
        make_config("smoke", yaml_path=value)


def test_the_preflight_of_what_is_not_a_config_is_one_line():
    from tutorial_lib.jobs import preflight

    with pytest.raises(ConfigError, match=r"^config: expected a TrainConfig, got None \(NoneType\)\. Fix: "):
        preflight.run(None, backend="slurm", site={"partition": "compute", "time": "1:00:00"})


@pytest.mark.parametrize("job_id", ["x" * 5000, "5" * 5000])
def test_a_slurm_record_with_a_5000_character_id_is_explained_in_lines_of_bounded_length(tmp_path, job_id):
    """Before: ``OSError: File name too long`` from the log's path (the id fills in its name); an id of 5,000 digits
    (the eighth re-run, r43n) ``ValueError: Exceeds the limit (4300 digits)`` from ``int()`` in the watcher."""
    from tutorial_lib import jobs

    run_dir = tmp_path / "r"
    run_dir.mkdir()
    (run_dir / "job.json").write_text(json.dumps({"backend": "slurm", "id": job_id, "name": "r"}))
    job = jobs.attach(run_dir)
    assert job.state == "FAILED" and job.logs() == ""
    explained = job.explain()
    assert "sbatch never answered" in explained and max(map(len, explained.splitlines())) < LINE_LIMIT, explained


@pytest.mark.parametrize("flags, named", [(["--ranks", "100000"], "--ranks"), (["--tree", "FILE"], "--tree")])
def test_bench_scan_refuses_more_ranks_than_the_machine_takes_and_a_tree_that_is_a_file(tmp_path, flags, named):
    """Before: ``--ranks 100000`` started 909 processes in 75 s (load 520); ``--tree`` a file said "Not a
    directory ... check the path" without the flag."""
    from tutorial_lib.bench.cli import main

    (tmp_path / "file").write_text("mine\n")
    argv = ["scan", "--tree", str(tmp_path / "tree"), "--classes", "2", "--train-per-class", "2",
            "--val-per-class", "1", "--repeats", "1"] + [str(tmp_path / "file") if f == "FILE" else f for f in flags]
    status, err = _main(main, argv)
    assert status == 2 and _one_line(err, named)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]  # no tree made
    assert (tmp_path / "file").read_text() == "mine\n"


def test_bench_staging_refuses_a_stage_that_climbs_out_before_generating_its_data(tmp_path):
    """Before: a StagingError traceback, after the fake data set was written."""
    from tutorial_lib.bench.cli import main

    (tmp_path / "stage").mkdir()
    status, err = _main(main, ["staging", "--data-dir", str(tmp_path / "fake"), "--classes", "2", "--per-class", "2",
                               "--repeats", "1", "--stage-to", f"{tmp_path}/stage/../stage"])
    assert status == 2 and "'..'" in _one_line(err, "--stage-to")
    assert not (tmp_path / "fake").exists()


@pytest.mark.parametrize("field", ["output_root", "data_dir", "index_dir"])
def test_a_path_naming_a_shell_variable_is_refused_not_made_as_a_folder(field, tmp_path, monkeypatch):
    """Before: ``output_root: $HOME/runs`` in a config file made a folder named ``$HOME`` in the working folder."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=rf"^{field}: '\$HOME/runs' names the shell variable \$HOME, .* Fix: write "
                                          r"the folder out, e\.g\. '/"):
        make_config("smoke", **{field: "$HOME/runs"})
    assert make_config("smoke", output_root="runs$").output_root == "runs$"  # a '$' alone is a name like any


def test_train_with_a_config_file_naming_a_shell_variable_exits_2_and_makes_nothing(tmp_path, monkeypatch):
    from tutorial_lib.train import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.yaml").write_text("output_root: $HOME/runs\n")
    status, err = _main(main, ["--config", str(tmp_path / "c.yaml"), "--name", "r", "--progress", "off"])
    assert status == 2 and _one_line(err, "output_root")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.yaml"]


def test_a_non_finite_validation_loss_says_whether_the_weights_or_only_the_outputs_are_not_finite(runs, tmp_path):
    """mnasnet1_0 at 16 px after one step: its weights and BatchNorm statistics are finite but its outputs on the
    validation images overflow. Before, the line said "the weights are no longer finite" whatever they were."""
    from tests.test_contract_cases import TINY, write_image_tree
    from tutorial_lib.engine import models
    from tutorial_lib.engine.trainer import main
    from tutorial_lib.exits import EXIT_DIVERGED

    write_image_tree(tmp_path / "data", {"train": {"a": 4, "b": 4, "c": 4}, "val": {"a": 1, "b": 1, "c": 1}})
    status, err = _main(main, runs.flags("mnas", **{**TINY, "arch": "mnasnet1_0", "image_size": 16, "batch_size": 4,
                                                    "epochs": 1, "max_steps_per_epoch": 1,
                                                    "data_dir": str(tmp_path / "data")}))
    assert status == EXIT_DIVERGED and "the weights are finite but the model's outputs on the validation images are " \
        "not" in _one_line(err, "validation loss is nan"), err[-2000:]
    model = models.build_model("resnet18", 3)
    assert models.state_is_finite(model)
    next(model.buffers()).fill_(float("inf"))  # a BatchNorm running mean
    assert not models.state_is_finite(model)


@pytest.mark.parametrize("value, named", [(100_000, r"image_size: one digit image of 100000 px needs at least "),
                                          (0, r"image_size: 0 is not a size in pixels"),
                                          ("32", r"image_size: '32' is not a size in pixels")])
def test_the_digits_export_names_an_image_size_it_cannot_make_before_writing(value, named, tmp_path):
    """Before: ``course --only 00 -p image_size 100000`` died in PIL's resize with an empty MemoryError, the line
    naming only the cell; a string or 0 failed the same way further in."""
    from tutorial_lib.engine.errors import OneLineError
    from tutorial_lib.engine.input.folders import export_digits

    with pytest.raises(OneLineError, match=rf"^{named}.* Fix: ") as raised:
        export_digits(tmp_path / "digits", value)
    assert "\n" not in str(raised.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("site_options, options", [(["--time-min=2:00:00"], []), ([], ["--time-min=1-00:00:00"])])
def test_a_time_min_longer_than_the_time_limit_is_refused_before_sbatch(site_options, options):
    """Before: ``--time-min=2:00:00`` with ``time: 1:00:00`` was passed on, and sbatch refused the job ("Invalid
    time-min specification") after the run folder was made."""
    from tutorial_lib.jobs.site import Site
    from tutorial_lib.jobs.spec import make_spec

    site = {"partition": "compute", "time": "01:00:00", "sbatch_options": site_options}
    match = r"sbatch_options: --time-min=\S+ is longer than the job's time limit .* Fix: "
    if site_options:
        with pytest.raises(ConfigError, match=rf"^site\.{match}"):
            Site.from_dict(site)
        return
    with pytest.raises(ConfigError, match=rf"^{match}"):
        make_spec(make_config("smoke"), on_cluster=True, check_data=False, site=site, sbatch_options=options)
