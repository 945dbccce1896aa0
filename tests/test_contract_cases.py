"""The cases of issue 43 that no parser checked: each ends as the contract says (one line naming the field and the
fix, the documented exit status, nothing written first). One test per case or class of cases; each failed on the
code before issue 43 (a traceback, a hang, a silent result or the wrong field). The generated-input side of the same
contract is tests/test_contract.py.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
import shutil
import tarfile
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import write_image_tree
from tutorial_lib.engine.config import ConfigError, make_config, validate
from tutorial_lib.exits import EXIT_DIVERGED, EXIT_REFUSED

TINY = dict(image_size=16, batch_size=8, epochs=1, max_steps_per_epoch=2, log_every=1)


def _main(main, argv: list[str]) -> tuple[int, str]:
    """``main(argv)`` in this process: its status and stderr (an exception escaping is a traceback: the test fails)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        status = main(argv)
    return status, err.getvalue()


def _error_line(text: str) -> str:
    assert "Traceback" not in text, text[-3000:]
    lines = [line for line in text.splitlines() if line.startswith("error: ") or ": error: " in line]
    assert len(lines) == 1, text[-3000:]
    assert "Fix" in lines[0] or "usage" in text, lines[0]
    return lines[0]


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# ------------------------------------------------------------------ the site block
@pytest.mark.parametrize("python", ["-c", "--version", "-m", "-"])
def test_site_python_is_a_path_or_a_command_never_an_option(python):
    """``site: {python: -c}`` was accepted; the job failed in srun naming --cpus-per-task, never site.python."""
    from tutorial_lib.jobs.site import Site

    with pytest.raises(ConfigError, match=r"^site\.python: .* Fix: e\.g\. python: /opt/venv/bin/python"):
        Site.from_dict({"python": python})
    assert Site.from_dict({"python": "python3"}).python == "python3"
    assert Site.from_dict({"python": "/opt/venv-1/bin/python"}).python == "/opt/venv-1/bin/python"


@pytest.mark.parametrize("time, read_as", [("99:99:99", "4-04:41:00"), ("1-99:99:99", "5-04:41:00"),
                                           ("00:60:00", "01:00:00"), ("1-24", "2-00:00:00"), ("10:75", "00:12:00"),
                                           ("1-00:00:60", "1-00:01:00")])
def test_a_slurm_time_is_checked_as_slurm_reads_it(time, read_as, tmp_path):
    """99:99:99 was accepted as the site's and the job's time; Slurm reads it as 4-04:41:00."""
    from tutorial_lib.jobs.site import Site
    from tutorial_lib.jobs.spec import make_spec

    with pytest.raises(ConfigError, match=rf"^site\.time: .* Slurm would add it up and run the job for {read_as}"):
        Site.from_dict({"time": time})
    cfg = make_config("smoke", name="t", output_root=str(tmp_path))
    with pytest.raises(ConfigError, match=rf"^time: .* {read_as}"):
        make_spec(cfg, time=time, check_data=False)


@pytest.mark.parametrize("time, seconds", [("90", 5400), ("10:30", 630), ("1:00:00", 3600), ("1-02", 93600),
                                           ("1-02:30", 95400), ("2-00:00:10", 172810), ("1440", 86400)])
def test_every_slurm_time_form_is_read_as_slurm_reads_it(time, seconds):
    """Days-hours forms were read as days-minutes (1-02 was 1 day 2 minutes; Slurm: 1 day 2 hours)."""
    from tutorial_lib.jobs.slurm_values import check_time, time_limit_seconds

    assert check_time(time) == time and time_limit_seconds(time) == seconds


@settings(max_examples=60, derandomize=True, deadline=None, database=None)
@given(lead=st.integers(0, 65535), short=st.integers(1, 100))
def test_the_time_a_warning_refusal_suggests_is_accepted(lead, short):
    """``--signal=B:USR1@99999`` with 1:00:00 was refused, and the fix it suggested (00:1671:00) was refused too."""
    from tutorial_lib.jobs.slurm_values import check_time, check_time_against_warning

    options = [f"--signal=B:USR1@{lead}"]
    minutes = max(1, lead * short // 100 // 60)  # whole minutes, at most the lead
    time = f"{minutes // 60:02d}:{minutes % 60:02d}:00"
    if lead >= 60:  # the refusal, then its own suggestion
        with pytest.raises(ConfigError) as refused:
            check_time_against_warning(time, options)
        suggested = re.search(r"e\.g\. '([^']+)'", str(refused.value)).group(1)
        assert check_time(suggested) == suggested
        check_time_against_warning(suggested, options)


def test_a_warning_longer_than_sbatch_allows_is_refused():
    from tutorial_lib.jobs.slurm_values import check_sbatch_option

    with pytest.raises(ConfigError, match=r"sbatch_options: .*1 to 65535"):
        check_sbatch_option("--signal=B:USR1@99999")
    assert check_sbatch_option("--signal=B:USR1@65535") == "--signal=B:USR1@65535"


@pytest.mark.parametrize("stage_to, leaves", [("$HOME/../../etc", "$HOME"), ("${TMPDIR}/a/../../x", "${TMPDIR}"),
                                              ("/local/scratch/../../etc", "/local/scratch"),
                                              ("$TMPDIR/..", "$TMPDIR")])
def test_stage_to_is_refused_when_it_climbs_out_of_the_root_it_names(stage_to, leaves, tmp_path):
    """``stage_to: '$HOME/../../etc'`` was accepted; a real job copied 1,798 files into <home>/../../etc/."""
    from tutorial_lib.data.staging import StagingError, target_root

    cfg = make_config("smoke", dataset="imagefolder", data_dir=str(tmp_path), stage_to=stage_to)
    with pytest.raises(ConfigError, match=rf"^stage_to: .* leaves {re.escape(leaves)}, .* Fix: "):
        validate(cfg, check_paths=False)
    with pytest.raises(StagingError, match=r"^stage_to: .* leaves "):  # and on the node, where it is expanded
        target_root(stage_to, {"HOME": str(tmp_path), "TMPDIR": str(tmp_path)})
    inside = make_config("smoke", dataset="imagefolder", data_dir=str(tmp_path), stage_to="$TMPDIR/a/../b")
    assert validate(inside, check_paths=False).stage_to == "$TMPDIR/a/../b"  # '..' that stays inside


@pytest.mark.parametrize("site", [[1, 2], 5, True, b"site.yaml", 1.5])
def test_make_spec_with_a_site_of_another_type_is_one_line(site, tmp_path):
    """``make_spec(site=[1, 2])`` was a TypeError traceback."""
    from tutorial_lib.jobs.spec import make_spec

    cfg = make_config("smoke", name="t", output_root=str(tmp_path))
    with pytest.raises(ConfigError, match=r"^site: expected a Site, a site: mapping or the path of a YAML file"):
        make_spec(cfg, site=site, on_cluster=True, check_data=False)


@pytest.mark.parametrize("over, values, field", [("name", ["a"], "over"), ("nodes", None, "values"),
                                                 ("nodes", "12", "values"), (5, [1], "over"), ("nodes", [], "values"),
                                                 (["nodes"], [1], "over"), ("nodes", [1, 0], "nodes"),
                                                 ("batch_size", [16, -1], "batch_size"),
                                                 ("precision", ["fp32", "fp64"], "precision")])
def test_sweep_checks_every_value_before_the_first_job(over, values, field, tmp_path, monkeypatch):
    """``sweep(over='name')`` and ``sweep(values=None)`` were TypeError tracebacks; a bad value after a good one was
    found only after the first job was submitted."""
    from tutorial_lib import jobs

    submitted = []
    monkeypatch.setattr(jobs, "_launch", lambda spec, *args: submitted.append(spec.config))
    cfg = make_config("smoke", name="sw", output_root=str(tmp_path))
    with pytest.raises(ConfigError, match=rf"^{field}: .*Fix: "):
        jobs.sweep(cfg, over=over, values=values, backend="local")
    assert submitted == []
    jobs.sweep(cfg, over="batch_size", values=[16, 32], backend="local")
    assert [c.batch_size for c in submitted] == [16, 32]


def test_records_nested_past_pythons_limit_are_garbled_lines_not_tracebacks(tmp_path):
    """A job.json or a metrics.jsonl line of 100,000 ``[`` was a RecursionError through both readers (the independent
    re-run of issue 43's inputs found it)."""
    from tutorial_lib.jobs.record import read_job_file
    from tutorial_lib.jobs.spec import JobError
    from tutorial_lib.rundir.metrics import read_metrics

    (tmp_path / "job.json").write_bytes(b"[" * 100_000)
    with pytest.raises(JobError, match="is not a complete job record"):
        read_job_file(tmp_path)
    (tmp_path / "metrics.jsonl").write_bytes(b"[" * 100_000 + b'\n{"event": "epoch", "epoch": 1}\n')
    assert read_metrics(tmp_path) == [{"event": "epoch", "epoch": 1}]


# ------------------------------------------------------------------ the trainer
@pytest.mark.parametrize("flags", [["--image-size", "100000"], ["--batch-size", "100000000"]])
def test_a_step_that_cannot_fit_is_refused_with_its_estimate_before_anything_is_written(flags, tmp_path):
    """``--image-size 100000`` printed nothing, grew to 18.8 GB and was OOM-killed, leaving a stale LOCK (a traceback
    under a memory cap)."""
    from tutorial_lib.engine.trainer import main

    status, err = _main(main, ["--profile", "smoke", "--dataset", "synthetic", "--output-root", str(tmp_path),
                               "--name", "huge", "--progress", "false", *flags])
    line = _error_line(err)
    assert status == EXIT_REFUSED and line.startswith("error: image_size/batch_size: ")
    assert re.search(r"needs at least [\d.]+ (TB|PB|GB) of memory .* and [\d.]+ \w+ is available here", line), line
    assert not (tmp_path / "huge").exists()


def test_a_run_ending_with_a_non_finite_validation_loss_is_a_failed_run(runs, tmp_path):
    """``--base-lr 1e6 --max-steps-per-epoch 2`` exited 0 with ``val loss nan``, wrote DONE and model.pt."""
    from tutorial_lib.engine.trainer import main
    from tutorial_lib.rundir.layout import CHECKPOINT_FILE, DONE_FILE, MODEL_FILE

    write_image_tree(tmp_path / "data", {"train": {"a": 8, "b": 8}, "val": {"a": 1, "b": 1}})
    status, err = _main(main, runs.flags("nan-val", **{**TINY, "base_lr": 1e6, "warmup_epochs": 0.0, "log_every": 2,
                                                       "data_dir": str(tmp_path / "data")}))
    line = _error_line(err)
    assert status == EXIT_DIVERGED and line.startswith("error: validation loss is nan after epoch 1"), line
    run_dir = runs.run_dir("nan-val")
    steps = runs.events(run_dir, "step")
    assert steps and all(math.isfinite(e["loss"]) for e in steps)  # the training loss never said so
    assert not any((run_dir / name).exists() for name in (DONE_FILE, MODEL_FILE, CHECKPOINT_FILE))
    assert runs.events(run_dir, "error")[-1]["kind"] == "TrainingDiverged" and not runs.events(run_dir, "end")


@pytest.mark.parametrize("text", ["{0}", "{0: 1, epochs: 2}", "{null: 1}", "{1.5: 1}"])
def test_a_config_file_whose_keys_are_not_names_is_one_line(text, tmp_path):
    """A config file holding ``{0}`` was a TypeError traceback (through --config and make_config)."""
    from tutorial_lib.engine.trainer import main

    (tmp_path / "c.yaml").write_text(text)
    with pytest.raises(ConfigError, match=r"is not a setting name .* Fix: write field: value pairs"):
        make_config(yaml_path=str(tmp_path / "c.yaml"))
    status, err = _main(main, ["--config", str(tmp_path / "c.yaml"), "--output-root", str(tmp_path / "out")])
    assert status == EXIT_REFUSED and "is not a setting name" in _error_line(err)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("field", ["data_dir", "output_root", "name", "arch", "stage_to", "index_dir"])
def test_a_long_value_is_cut_never_the_field_or_the_fix(field, tmp_path):
    """A config with a 1 MB data_dir printed one 2 KB line with the field and the fix cut away."""
    from tutorial_lib.engine.trainer import main

    value = ("/" if field in ("stage_to", "index_dir") else "") + "x" * 1_000_000
    (tmp_path / "c.yaml").write_text(f"dataset: imagefolder\n{field}: {value}\n")
    status, err = _main(main, ["--profile", "smoke", "--config", str(tmp_path / "c.yaml"), "--progress", "false"])
    line = _error_line(err)
    assert status == EXIT_REFUSED and len(line) < 2100, len(line)
    assert line.startswith(f"error: {field}: ") and re.search(r"Fix: [^.]{8,}", line), line


def test_one_line_and_the_errors_cut_the_middle_of_a_message():
    from tutorial_lib.engine.input.folders import DataError
    from tutorial_lib.exits import one_line

    message = "data_dir: " + "y" * 100_000 + " does not exist. Fix: pass the folder."
    for text in (one_line(message), str(ConfigError(message)), str(DataError(message))):
        assert text.startswith("data_dir: yyy") and text.endswith("Fix: pass the folder.") and len(text) <= 2000


def test_a_digits_data_dir_that_links_to_an_empty_folder_names_data_dir(tmp_path):
    """``--data-dir`` a link to an empty user folder: "No such file or directory ... check the path", no field."""
    from tutorial_lib.engine.trainer import main

    (tmp_path / "empty").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "empty")
    status, err = _main(main, ["--profile", "smoke", "--data-dir", str(tmp_path / "link"),
                               "--output-root", str(tmp_path / "out"), "--progress", "false"])
    line = _error_line(err)
    assert status == EXIT_REFUSED and line.startswith("error: data_dir: ") and "symbolic link" in line, line
    assert list((tmp_path / "empty").iterdir()) == [] and not (tmp_path / "out").exists()


def test_a_batch_left_with_one_image_and_hidden_folders_train_as_the_contract_says(runs, tmp_path):
    """A batch whose other images were unreadable kept one image: ``ValueError: Expected more than 1 value per
    channel when training`` (a class folder of 20,000 empty JPEGs at batch 64). And a ``.ipynb_checkpoints``
    folder in train/ and val/ became a class: a model of one class more was trained. Here: 2 classes of 2
    images, batch 2, one image unreadable (so one batch holds one image), a hidden folder in both splits."""
    from tutorial_lib.engine.model_file import load_model
    from tutorial_lib.rundir.layout import MODEL_FILE

    data = tmp_path / "data"
    write_image_tree(data, {"train": {"a": 2, "b": 2, ".ipynb_checkpoints": 2}, "val": {"a": 1, "b": 1,
                                                                                         ".ipynb_checkpoints": 1}})
    (data / "train" / "a" / "0.png").write_bytes(b"")
    out = io.StringIO()
    with contextlib.redirect_stderr(out):
        summary = runs.in_process(runs.config("lone", **{**TINY, "batch_size": 2, "data_dir": str(data),
                                                         "base_lr": 0.01, "hflip": False}))
    assert summary["status"] == "completed"
    assert "skipping 1 folder(s)" in out.getvalue() and ".ipynb_checkpoints" in out.getvalue()
    epoch, = runs.events(runs.run_dir("lone"), "epoch")
    assert epoch["skipped_images"] == 2  # the unreadable one, and the one left alone in its batch
    _, meta = load_model(runs.run_dir("lone") / MODEL_FILE)
    assert meta["classes"] == ["a", "b"] and meta["num_classes"] == 2


def test_one_image_per_rank_with_batchnorm_is_refused_before_training():
    """``--batch-size 1`` ended at the first step in the same ValueError (BatchNorm's statistics need two)."""
    with pytest.raises(ConfigError, match=r"^batch_size: 1 image per rank cannot train resnet18: .* Fix: "):
        validate(make_config("smoke", batch_size=1), check_paths=False)
    assert validate(make_config("smoke", batch_size=1, norm="group"), check_paths=False).batch_size == 1


def test_a_hidden_folder_is_no_class_for_any_reader(tmp_path, fake_sources):
    """Every reader of class folders skips ``.ipynb_checkpoints`` and counts it: the job's file index, the datasets
    (training, validation, evaluate), the class count the configuration checks, prepare, staging."""
    from tutorial_lib.data import file_index, staging
    from tutorial_lib.data.prepare import prepare
    from tutorial_lib.engine.input.cpu import CountingImageFolder

    data = tmp_path / "data"
    write_image_tree(data, {"train": {"a": 1, "b": 1, ".ipynb_checkpoints": 1}, "val": {"a": 1, "b": 1}})
    (data / "train" / "a" / ".hidden").mkdir()
    (data / "train" / "a" / ".hidden" / "x.png").write_bytes((data / "train" / "a" / "0.png").read_bytes())
    listed = file_index.scan(data / "train")
    assert listed["classes"] == ["a", "b"] and listed["skipped_folders"] == [".ipynb_checkpoints"]
    assert listed["files"] == [["a/0.png"], ["b/0.png"]]
    assert CountingImageFolder(data / "train").classes == ["a", "b"] and len(CountingImageFolder(data / "train")) == 2
    validate(make_config("smoke", dataset="imagefolder", data_dir=str(data), num_classes=2))
    assert not any(".ipynb_checkpoints" in rel or ".hidden" in rel for rel, _ in staging.listing(data))
    source = tmp_path / "kaggle"
    shutil.copytree(fake_sources["kaggle"], source, symlinks=True)
    (source / "ILSVRC/Data/CLS-LOC/train/.ipynb_checkpoints").mkdir()
    summary = prepare(source, tmp_path / "dest", progress=False)
    assert summary["classes"] == 3 and summary["skipped"] >= 1
    assert ".ipynb_checkpoints" not in os.listdir(tmp_path / "dest" / "train")


@pytest.mark.parametrize("member", ["../x.tar", "a/n01440764.tar", ".ipynb_checkpoints.tar", "n01440764", "-rf.tar",
                                    "a\nb.tar", " .tar", "n01440764 .tar"])  # r43s: the last three became classes
def test_an_outer_archive_member_that_is_not_a_plain_class_is_refused_naming_it(member, tmp_path, fake_sources):
    """An outer tar member ``../x.tar`` became class ``x`` (and ``-rf.tar`` class ``-rf``, read as an option)."""
    from tutorial_lib.data.layouts import PrepareError
    from tutorial_lib.data.prepare import prepare

    source = tmp_path / "archives"
    shutil.copytree(fake_sources["archives"], source)
    inner = io.BytesIO()
    with tarfile.open(fileobj=inner, mode="w") as tar:
        info = tarfile.TarInfo("x_1.JPEG")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"abc"))
    with tarfile.open(source / "ILSVRC2012_img_train.tar", "a") as tar:
        info = tarfile.TarInfo(member)
        info.size = len(inner.getvalue())
        tar.addfile(info, io.BytesIO(inner.getvalue()))
    with pytest.raises(PrepareError, match=rf"holds {re.escape(repr(member))}, which is not a class archive"):
        prepare(source, tmp_path / "dest", progress=False)
    assert not (tmp_path / "dest").exists()


# ------------------------------------------------------------------ evaluate
def _model_file(run_dir: Path, **entries) -> None:
    from tutorial_lib.engine.models import build_model

    run_dir.mkdir(parents=True)
    model = build_model("resnet18", 2)
    saved = {"format": 1, "arch": "resnet18", "norm": "batch", "image_size": 16, "num_classes": 2,
             "classes": ["a", "b"], "state_dict": model.state_dict(), **entries}
    torch.save(saved, run_dir / "model.pt")


@pytest.mark.parametrize("entries, field", [({"arch": "os.system"}, "arch"), ({"num_classes": "2"}, "num_classes"),
                                            ({"classes": ["a"]}, "classes"), ({"image_size": -5}, "image_size"),
                                            ({"norm": "instance"}, "norm"), ({"state_dict": {"x": torch.ones(1)}},
                                                                             "weights")])
def test_evaluate_refuses_a_model_file_of_other_entries_in_one_line(entries, field, tmp_path, jpeg_tree):
    """A weights-only model.pt with ``arch: 'os.system'`` gave ``ValueError: Unknown model`` (a traceback)."""
    from tutorial_lib.engine.model_file import main

    _model_file(tmp_path / "run", **entries)
    status, err = _main(main, [str(tmp_path / "run"), "--data-dir", str(jpeg_tree), "--workers", "0",
                               "--device", "cpu"])
    line = _error_line(err)
    assert status == EXIT_REFUSED and line.startswith("error: model: ") and field in line, line


def test_evaluate_on_cuda_without_a_gpu_is_one_line(tmp_path, jpeg_tree, monkeypatch):
    """``--device cuda`` without a GPU was a RuntimeError traceback."""
    from tutorial_lib.engine.model_file import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    _model_file(tmp_path / "run")
    status, err = _main(main, [str(tmp_path / "run"), "--data-dir", str(jpeg_tree), "--device", "cuda"])
    assert status == EXIT_REFUSED and _error_line(err).startswith("error: --device: cuda was asked for")


# ------------------------------------------------------------------ bench
@pytest.mark.parametrize("argv, flag", [
    (["extract", "--jpeg-size", "100000x100000"], "--jpeg-size"),
    (["extract", "--jpeg-size", "60000x60000"], "--jpeg-size"),
    (["staging", "--stage-to", "{data}/sub", "--data-dir", "{data}"], "--stage-to"),
    (["staging", "--classes", "0"], "--classes"),
    (["loader", "--workers", "-1"], "--workers"),
    (["loader", "--workers", "100000"], "--workers"),
    (["data", "--read-workers", "6916"], "--read-workers"),
    (["loader", "--batch-size", "0"], "--batch-size"),
    (["prepare", "--classes", "0"], "--classes"),
    (["loader", "--image-size", "100000"], "--image-size"),
    (["scale", "--forms", "x;y"], "--forms"),
    (["staging", "--repeats", "-1"], "--repeats"),
    (["data", "--image-size", "100000", "--batch-size", "64"], "--image-size"),
    (["train", "--arch", "os.system"], "--arch"),
    (["scan", "--ranks", "0", "--classes", "1", "--train-per-class", "1", "--val-per-class", "1"], "--ranks"),
])
def test_every_bench_case_is_refused_in_one_line_before_anything_is_written(argv, flag, tmp_path, monkeypatch):
    """``extract --jpeg-size 100000x100000`` (MemoryError), ``staging --stage-to`` inside the data (StagingError),
    ``staging --classes 0`` (ZeroDivisionError), ``loader --workers -1`` / ``--batch-size 0``, ``prepare
    --classes 0``: tracebacks; ``loader --image-size 100000`` hung; ``scale --forms 'x;y'`` left a folder ``x;y``;
    ``staging --repeats -1`` exited 0 after 33 s printing nothing."""
    from tutorial_lib.bench.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    before = _tree(tmp_path)
    status, err = _main(main, [a.replace("{data}", str(tmp_path / "data")) for a in argv])
    assert status == EXIT_REFUSED and _error_line(err).startswith(f"error: {flag}"), err
    assert _tree(tmp_path) == before and sorted(os.listdir(tmp_path)) == ["data"]


def test_the_pre_flight_of_a_bad_site_names_the_field_before_submitting(tmp_path, monkeypatch):
    """The pre-flight reported every check ok for the site time 99:99:99."""
    from tutorial_lib import jobs
    from tutorial_lib.jobs import preflight

    monkeypatch.setattr(jobs, "choose_backend", lambda backend, verbose=True: "slurm")
    monkeypatch.setattr(jobs.slurm, "submit_slurm", lambda *a, **k: pytest.fail("submitted"))
    cfg = make_config("smoke", name="pf", output_root=str(tmp_path))
    for site, field in (({"partition": "p", "time": "99:99:99"}, "site.time"), ({"python": "-c"}, "site.python")):
        with pytest.raises(ConfigError, match=rf"^{re.escape(field)}: "):
            preflight.run(cfg, backend="slurm", site=site)
    assert not (tmp_path / "pf-preflight").exists()


def test_records_of_another_type_are_one_line(tmp_path):
    """The records read back, with fields of another type: job.json, metrics.jsonl, the prepared mark."""
    from tutorial_lib.data.links import MARK, moved_source
    from tutorial_lib.jobs import JobError, attach
    from tutorial_lib.rundir.metrics import read_metrics

    for record in ({"id": [1], "backend": "local", "name": "x"}, {"id": 1, "backend": "os", "name": "x"},
                   {"id": 1, "backend": "local", "name": {"a": 1}}):
        (tmp_path / "job.json").write_text(json.dumps(record))
        with pytest.raises(JobError, match="of another type than tutorial_lib.jobs writes"):
            attach(tmp_path)
    (tmp_path / "metrics.jsonl").write_text('{"event": "step", "epoch": 1, "step": "2"}\n{"event": 5}\n'
                                            '{"event": "epoch", "top1": [1]}\n{"event": "end", "time": 1.0}\n')
    assert read_metrics(tmp_path) == [{"event": "end", "time": 1.0}]
    for mark in ([1], {"source": 5}, "x"):
        (tmp_path / MARK).write_text(json.dumps(mark))
        assert moved_source(tmp_path) is None


@pytest.mark.parametrize("value", [True, False, 3.5, ["gpu"]])
def test_a_site_name_that_yaml_read_as_another_type_is_refused(value):
    """``partition: yes`` (YAML: true) and ``partition: 3.5`` were kept and sent to sbatch as 'True' and '3.5'."""
    from tutorial_lib.jobs.site import Site

    with pytest.raises(ConfigError, match=r"^site\.partition: .* is not a Slurm partition name\. Fix: "):
        Site.from_dict({"partition": value})
    assert Site.from_dict({"account": 1234}).account == "1234"


@pytest.mark.parametrize("field, value", [("image_size", 1e308), ("workers", 10**6), ("prefetch", 2**63),
                                          ("bucket_cap_mb", 2**63), ("lr_reference_batch", 2**63),
                                          ("batch_size", 10**12)])
def test_a_count_beyond_what_a_run_can_use_is_refused_naming_it(field, value):
    """``image_size=1e308`` was an OverflowError in the memory estimate; ``workers=10**6`` and the others passed."""
    with pytest.raises(ConfigError, match=rf"^{field}: must be at most [\d,]+, got .*Fix: pass --"):
        validate(make_config("smoke", **{field: value}), check_paths=False)


def test_a_profile_that_is_no_name_is_one_line():
    """``make_config(profile=[1])`` was a TypeError traceback."""
    with pytest.raises(ConfigError, match=r"^profile: unknown profile"):
        make_config([1])


@pytest.mark.parametrize("progress", [{"best_top1": float("nan")}, {"best_top1": 150.0}, {"epoch": 10**30},
                                      {"epoch": -1}, {"best_top1": True}])
def test_a_checkpoints_progress_out_of_its_range_is_refused_before_use(progress, tmp_path):
    """``best_top1=nan`` and ``epoch=10**30`` were accepted by the checkpoint check (the independent re-run)."""
    from tutorial_lib.rundir.checkpoint import CheckpointError, check_checkpoint

    good = {"model": {}, "optimizer": {}, "scaler": {}, "rng": [{}], "progress": {"epoch": 1, "step_in_epoch": 0,
                                                                     "global_step": 3, "best_top1": 50.0}}
    fields = ["epoch", "step_in_epoch", "global_step", "best_top1", "history", "epoch_tally"]
    assert check_checkpoint(good, tmp_path / "c.pt", fields) is good
    bad = {**good, "progress": {**good["progress"], **progress}}
    with pytest.raises(CheckpointError, match="which the trainer never writes; nothing was loaded"):
        check_checkpoint(bad, tmp_path / "c.pt", fields)


@pytest.mark.parametrize("launch", [{"max_restarts": "x"}, {"run_dir": 5}, {"python": "-c"}, {"threads": 8},
                                    {"module": None}, {"ranks_per_node": -3}, {"stage_to": ["a"]},
                                    {"max_restarts": True}])
def test_a_job_records_launch_block_of_another_type_is_one_line(launch):
    """``launch={'max_restarts': 'x'}`` was a TypeError in every node's launcher; ``python: -c`` and the others were
    used as they stood (the independent re-run of issue 43's inputs)."""
    from tutorial_lib.jobs.record import launch_of
    from tutorial_lib.jobs.spec import JobError

    assert launch_of({"launch": {"python": "python3", "max_restarts": 1}}).max_restarts == 1
    field = next(iter(launch))
    with pytest.raises(JobError, match=rf"^job record: launch\.{field} is .* Fix: "):
        launch_of({"launch": launch})


def test_an_injected_cell_that_does_not_parse_is_no_syntax_error_of_the_check():
    """``check_injected_parameters(['', 'epochs = 3', '# Parameters\\nepochs = '])`` raised SyntaxError from the check
    itself; such a cell is IPython's to refuse when it runs (papermill never writes one). A parsing one is checked."""
    from tutorial_lib.course import check_injected_parameters

    assert check_injected_parameters(["", "epochs = 3\n", "# Parameters\nepochs = \n"]) is None
    with pytest.raises(ValueError, match=r"^parameters: epochs must be a whole number"):
        check_injected_parameters(["", "epochs = 3\n", "# Parameters\nepochs = 'x'\n"])
