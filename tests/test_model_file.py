"""A model you can take away (model.pt), weights-only checkpoints, and `python -m tutorial_lib.evaluate`."""

from __future__ import annotations

import json
import os
import pickle
import random
import subprocess
import sys

import numpy as np
import pytest
import torch
import torchvision

from tests.conftest import command_in_process, subprocess_env
from tutorial_lib import REPO_ROOT, free_port
from tutorial_lib.engine import model_file
from tutorial_lib.engine.model_file import evaluate_run
from tutorial_lib.rundir.layout import CHECKPOINT_FILE, CONFIG_FILE, METRICS_FILE, MODEL_FILE

TINY = dict(image_size=16, batch_size=8, epochs=1, max_steps_per_epoch=3)


@pytest.fixture(scope="module")
def finished(make_runs):
    """One finished tiny run on the digits (10 classes)."""
    runs = make_runs()
    result = runs.in_process(runs.config("takeaway", **TINY))
    assert result["status"] == "completed"
    return runs, runs.run_dir("takeaway")


def _last_epoch(run_dir) -> dict:
    events = [json.loads(line) for line in (run_dir / METRICS_FILE).read_text().splitlines()]
    return [e for e in events if e["event"] == "epoch"][-1]


def test_a_finished_run_leaves_a_weights_only_torchvision_model(finished):
    _, run_dir = finished
    saved = torch.load(run_dir / MODEL_FILE, weights_only=True)
    assert saved["classes"] == [str(d) for d in range(10)] and saved["arch"] == "resnet18"
    model = torchvision.models.resnet18(num_classes=len(saved["classes"]))
    model.load_state_dict(saved["state_dict"])  # strict: every key of torchvision's own model
    checkpoint = torch.load(run_dir / CHECKPOINT_FILE, weights_only=True)  # the checkpoint too
    for name, value in checkpoint["model"].items():
        assert torch.equal(value, saved["state_dict"][name]), name


def test_evaluate_reports_the_runs_own_top1_in_one_process_and_under_torchrun(finished):
    runs, run_dir = finished
    epoch = _last_epoch(run_dir)
    result = evaluate_run(run_dir, runs.data_dir, batch_size=16, workers=0, device="cpu")
    assert result["val_images"] == epoch["val_images"]
    assert result["top1"] == pytest.approx(epoch["top1"]) and result["top5"] == pytest.approx(epoch["top5"])
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
               "--master-port", str(free_port()), "-m", "tutorial_lib.evaluate", str(run_dir), "--data-dir",
               str(runs.data_dir), "--workers", "0", "--device", "cpu"]
    done = subprocess.run(command, env=subprocess_env(), cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"top-1 {epoch['top1']:.2f}%" in done.stdout and "(2 rank(s))" in done.stdout
    assert f"on {epoch['val_images']:,} images" in done.stdout


def test_evaluate_refuses_a_data_set_with_other_classes(finished, tmp_path):
    (tmp_path / "val" / "n01440764").mkdir(parents=True)
    result = command_in_process(model_file.main, [str(finished[1]), "--data-dir", str(tmp_path)])
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert result.stderr.startswith("error: --data-dir:") and "not the 10 classes" in result.stderr


def test_the_course_keeps_model_pt_when_it_drops_checkpoints(finished, tmp_path):
    import shutil

    from tutorial_lib.course import drop_finished_checkpoints

    copy = tmp_path / "course" / "run"
    shutil.copytree(finished[1], copy)
    assert drop_finished_checkpoints(tmp_path / "course", since=0) > 0
    assert not (copy / CHECKPOINT_FILE).exists()
    assert torch.load(copy / MODEL_FILE, weights_only=True)["classes"]


def test_rng_states_survive_a_weights_only_checkpoint(tmp_path):
    from tutorial_lib.engine.rng import rng_state, set_rng_state

    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    np.random.standard_normal()  # a cached Gaussian in numpy's state
    torch.save({"rng": [rng_state()]}, tmp_path / "state.pt")
    expected = (random.random(), np.random.standard_normal(3).tolist(), torch.rand(3).tolist())
    set_rng_state(torch.load(tmp_path / "state.pt", weights_only=True)["rng"][0])
    assert (random.random(), np.random.standard_normal(3).tolist(), torch.rand(3).tolist()) == expected


class _Planted:
    """A pickle that, when loaded, creates a folder: what a crafted checkpoint could do."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.mkdir, (self.marker,)


def test_a_crafted_pickle_checkpoint_is_refused_and_runs_nothing(runs, tmp_path):
    marker = tmp_path / "code-ran"
    run_dir = runs.run_dir("crafted")
    run_dir.mkdir(parents=True)
    # a run directory as the project leaves it (its first event), whose checkpoint someone replaced
    started = json.dumps({"event": "start", "time": 0.0}) + "\n"
    (run_dir / METRICS_FILE).write_text(started)
    with open(run_dir / CHECKPOINT_FILE, "wb") as handle:
        pickle.dump({"model": _Planted(marker)}, handle, protocol=2)
    result = runs.main(runs.flags("crafted", **TINY))
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: checkpoint:")
    assert "posix.mkdir" in result.stderr and "nothing was loaded or run" in result.stderr
    assert not marker.exists()
    assert (run_dir / METRICS_FILE).read_text() == started and not (run_dir / CONFIG_FILE).exists()
    with open(run_dir / MODEL_FILE, "wb") as handle:  # the same through `python -m tutorial_lib.evaluate`
        pickle.dump({"format": 1, "state_dict": _Planted(marker)}, handle)
    done = command_in_process(model_file.main, [str(run_dir), "--data-dir", str(runs.data_dir)])
    assert done.returncode == 2 and done.stderr.startswith("error: checkpoint:") and not marker.exists()
