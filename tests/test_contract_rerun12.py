"""What the ninth re-run of issue 43 (/work/wt/notes/r43p-report.md) found after its Q5, each failing on the code
before (checked by reverting the library change):

* Q1 (late): a sweep submitted, and locally ran, its first job before a later job's run directory was refused
  (a user's file in it, a file in its place, a user's file beside a ``fresh`` run's).
* Q2 (traceback): an ``output_root`` (or a run name) that is a symbolic link loop was a ``RuntimeError: Symlink
  loop`` from ``jobs.submit``.
* Q3 (wrong field): ``sweep(over='ranks_per_node', values=[1, 100])`` was refused as "image_size/batch_size ...
  pass a smaller image_size"; without a memory cap ``submit(ranks_per_node=100)`` started 100 ranks on 2 cores.
* Q4 (late): the trainer wrote ``file_index.json`` in a new run directory before it refused train/ and val/ with
  different class folders.
* Q6 (wrong field and fix): ``bench loader`` on a split with some unreadable images stopped in torchvision's
  plain recipe with "cannot identify image file ... Fix: check that path", naming no flag; the trainer's pipeline
  warned again for every file in every epoch (1,300 lines from 9 files).
"""

from __future__ import annotations

import json
import shutil

import pytest

from tests.conftest import command_in_process, write_image_tree
from tests.test_contract_rerun2 import _one_line
from tutorial_lib import jobs
from tutorial_lib.engine import memory
from tutorial_lib.engine.config import ConfigError, make_config
from tutorial_lib.exits import EXIT_REFUSED


def _never_launched(*args, **kwargs):
    raise AssertionError("a job was handed to a backend before every job was checked")


@pytest.fixture
def no_backend(monkeypatch):
    """Both backends replaced by a failure: a job that reaches one fails the test (and starts nothing)."""
    monkeypatch.setattr(jobs, "submit_local", _never_launched)
    monkeypatch.setattr(jobs.slurm, "submit_slurm", _never_launched)


def _cfg(tmp_path, jpeg_tree, **overrides):
    values = dict(dataset="imagefolder", data_dir=str(jpeg_tree), output_root=str(tmp_path / "runs"), name="r",
                  image_size=16, epochs=1, batch_size=4, progress=False, device="cpu")
    return make_config("smoke", **{**values, **overrides})


def _user_file(run_dir):
    run_dir.mkdir(parents=True)
    (run_dir / "thesis.tex").write_text("mine")


def _a_file(run_dir):
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    run_dir.write_text("mine")


def _run_with_a_user_file(run_dir):  # usable without fresh; fresh would have to remove the user's file
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.jsonl").write_text(json.dumps({"event": "epoch", "time": 1.0}) + "\n")
    (run_dir / "thesis.tex").write_text("mine")


@pytest.mark.parametrize("blocker, fresh, message", [
    (_user_file, False, r"^output_root: the run directory .*r-image_size24 .*already holds files that are not"),
    (_a_file, False, r"^output_root: the run directory .*r-image_size24 .*exists but is not a folder"),
    (_run_with_a_user_file, True, r"^fresh: .*r-image_size24 holds files that this project did not write "
                                  r"\('thesis.tex'\)")],
    ids=["user-file", "a-file", "fresh-beside-a-user-file"])
def test_a_sweep_checks_every_run_directory_before_the_first_job(tmp_path, jpeg_tree, no_backend, blocker, fresh,
                                                                 message):
    blocker(tmp_path / "runs" / "r-image_size24")
    with pytest.raises(ConfigError, match=message + r".* Fix: "):
        jobs.sweep(_cfg(tmp_path, jpeg_tree), over="image_size", values=[16, 24], backend="local", fresh=fresh)
    assert not (tmp_path / "runs" / "r-image_size16").exists()  # the first job's run directory was not made
    assert "mine" in {p.read_text() for p in (tmp_path / "runs").rglob("*") if p.is_file()}


def test_a_sweeps_arguments_are_checked_as_submits_are(tmp_path, jpeg_tree, no_backend):
    cfg = _cfg(tmp_path, jpeg_tree)
    with pytest.raises(ConfigError, match=r"^fresh: must be True or False"):
        jobs.sweep(cfg, over="seed", values=[1, 2], backend="local", fresh="no")
    with pytest.raises(ConfigError, match=r"^gpus_per_node: this argument was renamed ranks_per_node"):
        jobs.sweep(cfg, over="seed", values=[1, 2], backend="local", gpus_per_node=2)
    with pytest.raises(TypeError, match=r"^sweep\(\) got an unexpected keyword argument 'colour'"):
        jobs.sweep(cfg, over="seed", values=[1, 2], backend="local", colour="red")
    assert not (tmp_path / "runs").exists()


def test_a_sweep_hands_each_checked_spec_to_its_backend_once(tmp_path, jpeg_tree, monkeypatch):
    launched = []
    monkeypatch.setattr(jobs, "_launch", lambda spec, chosen, fresh, after, verbose: launched.append(
        (spec.config.name, spec.ranks_per_node, chosen, fresh)) or f"job{len(launched)}")
    jobs.sweep(_cfg(tmp_path, jpeg_tree), over="ranks_per_node", values=[1, 2], backend="local", fresh=True)
    assert launched == [("r-ranks_per_node1", 1, "local", True), ("r-ranks_per_node2", 2, "local", True)]


# ------------------------------------------------------------------ Q2: a symbolic link loop
@pytest.mark.parametrize("where", ["output_root", "run_name"])
def test_a_symbolic_link_loop_is_refused_naming_output_root(tmp_path, jpeg_tree, no_backend, where):
    (tmp_path / "loop1").symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(tmp_path / "loop1")
    if where == "output_root":
        cfg = _cfg(tmp_path, jpeg_tree, output_root=str(tmp_path / "loop1"))
    else:
        (tmp_path / "runs").mkdir()
        (tmp_path / "runs" / "r").symlink_to(tmp_path / "runs" / "r")
        cfg = _cfg(tmp_path, jpeg_tree)
    with pytest.raises(ConfigError, match=r"^output_root: .* cannot be followed \(.*\)\. Fix: remove the symbolic "
                                          r"link loop, or pass another path"):
        jobs.submit(cfg, backend="local")


def test_a_data_dir_loop_is_refused_naming_data_dir(tmp_path, jpeg_tree, no_backend):
    (tmp_path / "loop1").symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(tmp_path / "loop1")
    with pytest.raises(ConfigError, match=r"^data_dir: .* cannot be followed .* Fix: remove the symbolic link loop"):
        jobs.submit(_cfg(tmp_path, jpeg_tree, data_dir=str(tmp_path / "loop1")), backend="local")


# ------------------------------------------------------------------ Q3: ranks a machine cannot take
def test_a_local_job_of_more_ranks_than_the_machine_takes_is_refused_naming_ranks_per_node(tmp_path, jpeg_tree,
                                                                                             no_backend):
    from tutorial_lib.engine.device import most_local_ranks

    too_many = most_local_ranks() + 1
    cfg = _cfg(tmp_path, jpeg_tree)
    with pytest.raises(ConfigError, match=rf"^ranks_per_node: a local job of 1 node\(s\) x {too_many} rank\(s\) "
                                          rf"would start {too_many} processes .* Fix: pass fewer ranks_per_node "
                                          rf"\(nodes x ranks_per_node <= {too_many - 1}\)"):
        jobs.submit(cfg, backend="local", ranks_per_node=too_many)
    with pytest.raises(ConfigError, match=r"^nodes/ranks_per_node: a local job of 2 node\(s\) x .* Fix: pass fewer "
                                          r"ranks_per_node or nodes"):
        jobs.submit(cfg, backend="local", nodes=2, ranks_per_node=too_many // 2 + 1)
    with pytest.raises(ConfigError, match=r"^ranks_per_node: "):
        jobs.sweep(cfg, over="ranks_per_node", values=[1, 100], backend="local")
    assert not (tmp_path / "runs").exists()


def test_memory_that_one_rank_fits_but_not_all_of_them_names_ranks_per_node(monkeypatch):
    one = memory.training_bytes("resnet18", 10, 16, 6)["total"]
    monkeypatch.setattr(memory, "available_bytes", lambda device: 3 * one)
    with pytest.raises(ConfigError, match=r"^ranks_per_node: 8 ranks sharing this machine, each a training step of "
                                          r"resnet18 .* Fix: start at most 3 rank\(s\) here"):
        memory.check_step_fits("resnet18", 10, 16, 6, "cpu", share=8)
    memory.check_step_fits("resnet18", 10, 16, 6, "cpu", share=3)  # fits: no error
    with pytest.raises(ConfigError, match=r"^image_size/batch_size: .* Fix: pass a smaller image_size"):
        memory.check_step_fits("resnet18", 10, 160, 60, "cpu", share=2)  # one rank alone does not fit


# ------------------------------------------------------------------ Q4: classes checked before the run directory
def test_train_and_val_with_different_classes_are_refused_before_the_run_directory(tmp_path, jpeg_tree):
    from tutorial_lib.train import main

    data = tmp_path / "data"
    shutil.copytree(jpeg_tree, data)
    shutil.rmtree(data / "val" / "c")
    result = command_in_process(main, ["--dataset", "imagefolder", "--data-dir", str(data), "--output-root",
                                       str(tmp_path / "runs"), "--name", "r", "--image-size", "16", "--epochs", "1",
                                       "--batch-size", "4", "--progress", "false", "--device", "cpu"])
    assert result.returncode == EXIT_REFUSED
    _one_line(result.stderr, "data_dir: ")
    assert "only in train: ['c']" in result.stderr
    assert not (tmp_path / "runs").exists()  # file_index.json was written in runs/r first


@pytest.mark.parametrize("split", ["train", "val"])
def test_a_split_of_unreadable_images_is_refused_before_the_run_directory(tmp_path, split):
    """r43p (judged acceptable, fixed as the bench commands were): the trainer wrote config.json and metrics.jsonl
    in a new run directory, then refused at epoch 1."""
    from tutorial_lib.train import main

    write_image_tree(tmp_path / "data", {"train": {"a": 4, "b": 4}, "val": {"a": 2, "b": 2}}, 16, ".JPEG")
    for image in (tmp_path / "data" / split).rglob("*.JPEG"):
        image.write_bytes(b"")
    result = command_in_process(main, ["--dataset", "imagefolder", "--data-dir", str(tmp_path / "data"),
                                       "--output-root", str(tmp_path / "runs"), "--name", "r", "--image-size", "16",
                                       "--epochs", "1", "--batch-size", "2", "--progress", "false", "--device", "cpu"])
    assert result.returncode == EXIT_REFUSED
    line = _one_line(result.stderr, f"data_dir: none of the {8 if split == 'train' else 4} image file(s) tried in ")
    assert f"/data/{split} could be read" in line and "Fix: check the files under" in line
    assert not (tmp_path / "runs").exists()


# ------------------------------------------------------------------ Q6: bench loader on some unreadable images
def test_bench_loader_measures_its_pipeline_and_names_data_dir_when_torchvisions_recipe_stops(tmp_path):
    from tutorial_lib.bench.cli import main

    write_image_tree(tmp_path / "ld", {"train": {"a": 2, "b": 2}, "val": {"a": 1, "b": 1}}, 24, ".JPEG")
    for index in range(3):
        (tmp_path / "ld" / "train" / "a" / f"x{index}.JPEG").write_text("not a jpeg")
    result = command_in_process(main, ["loader", "--data-dir", str(tmp_path / "ld"), "--workers", "0",
                                       "--batch-size", "2", "--image-size", "16", "--min-time", "0.3", "--repeats",
                                       "2", "--decode-images", "0", "--out", str(tmp_path / "loader.jsonl")])
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    warning = [line for line in result.stderr.splitlines() if line.startswith("warning: --data-dir: ")]
    assert len(warning) == 1 and "torchvision's plain recipe stops at an unreadable image" in warning[0]
    assert " Fix: replace or delete the unreadable images under " in warning[0]
    records = {(r["kind"], r.get("recipe")): r for r in map(json.loads, (tmp_path / "loader.jsonl").open())}
    assert records[("loader", "tutorial")]["status"] == "ok" and records[("loader", "tutorial")]["timed_images"] > 0
    assert records[("loader", "plain")]["status"] == records[("loader_ratio", None)]["status"] == "skipped"
    for index in range(3):  # named once by each round's loader (2 rounds), however many epochs it read the file
        assert result.stderr.count(f"skipping unreadable image {tmp_path}/ld/train/a/x{index}.JPEG:") == 2
