"""The trainer's own speed as a record (``bench runs``) and the GPU measurement script's CPU-safe parts.

A real short training run is summarised; only the record's shape and its arithmetic over the run's
own step events are checked, never a speed.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT
from tests.test_bench import ENV_KEYS, check_common, lines
from tutorial_lib import bench

SCRIPT = REPO_ROOT / "cluster_scripts" / "gpu_bench.sh"
SMALL = dict(image_size=16, batch_size=16, epochs=2, max_steps_per_epoch=4, log_every=1, checkpoint=False)


@pytest.fixture(scope="module")
def two_runs(make_runs):
    """A run from JPEG-like files through the GPU input pipeline's CPU form, and one on synthetic batches."""
    runs = make_runs()
    runs.in_process(runs.config("files", input_pipeline="gpu", **SMALL))
    runs.in_process(runs.config("synthetic", dataset="synthetic", synthetic_images=64, num_classes=10, **SMALL))
    return runs


def test_runs_summarises_the_steady_state_of_a_real_trainer_run(tmp_path, two_runs):
    files, synthetic = two_runs.run_dir("files"), two_runs.run_dir("synthetic")
    out = tmp_path / "trainer.jsonl"
    assert bench.main(["runs", str(files), str(synthetic), "--reference", str(synthetic), "--quiet",
                       "--out", str(out)]) == 0
    record, reference = lines(out)
    for r in (record, reference):
        check_common(r, "trainer")
        assert r["status"] == "ok" and ENV_KEYS - {"hostname"} <= set(r["env"]) and r["env"]["device"] == "cpu"
    assert (record["run"], record["dataset"], record["input_pipeline"]) == ("files", "imagefolder", "gpu")
    assert reference["dataset"] == "synthetic" and record["batch_size"] == 16 and record["world_size"] == 1
    steps = two_runs.events(files, "step")
    assert len(steps) == 8 and record["step_events"] == 8
    steady = [e["images_per_sec"] for e in steps if e["step"] not in (1, 5)]  # each epoch's first window is out
    assert record["dropped_events"] == 2 and record["steady_events"] == 6
    assert record["images_per_sec"] == pytest.approx(statistics.median(steady))
    assert (record["images_per_sec_low"], record["images_per_sec_high"]) == (min(steady), max(steady))
    assert record["fraction_of_reference"] == pytest.approx(record["images_per_sec"] / reference["images_per_sec"])
    assert reference["fraction_of_reference"] == pytest.approx(1.0)

    later = bench.main(["runs", str(files), "--skip-steps", "6", "--quiet", "--out", str(tmp_path / "later.jsonl")])
    (late,) = lines(tmp_path / "later.jsonl")
    assert later == 0 and late["steady_events"] == 2 and late["first_steady_step"] == 7


def test_runs_without_a_steady_window_or_a_run_dir(tmp_path, two_runs, capsys):
    assert bench.main(["runs", str(two_runs.run_dir("files")), "--skip-steps", "8", "--quiet",
                       "--out", str(tmp_path / "none.jsonl")]) == 0
    (record,) = lines(tmp_path / "none.jsonl")
    assert record["status"] == "skipped" and "--max-steps-per-epoch" in record["reason"]
    assert bench.main(["runs", str(tmp_path)]) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and "config.json" in error and "Fix:" in error


def _script(*args, env=None, timeout=600) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=full_env,
                          timeout=timeout)


def test_gpu_bench_script_parses_and_lists_its_stages():
    assert subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True).returncode == 0
    stages = "env precision batch compile cudagraphs autotune data e2e trainer peer course allreduce table".split()
    text = SCRIPT.read_text()
    for stage in stages:
        assert f"stage_{stage}() {{" in text, stage  # every listed stage has its function
    helped = _script("help")
    assert helped.returncode == 0 and all(f"  {stage} " in helped.stdout for stage in stages)
    wrong = _script("trainer", "nosuch")
    assert wrong.returncode == 2 and "unknown stage 'nosuch'" in wrong.stderr
    assert all(stage in wrong.stderr for stage in stages) and "===" not in wrong.stdout  # nothing ran


def test_gpu_bench_table_stage_runs_on_the_cpu(tmp_path, two_runs):
    results = tmp_path / "results"
    assert bench.main(["runs", str(two_runs.run_dir("files")), "--quiet",
                       "--out", str(results / "gpu_trainer.jsonl")]) == 0
    done = _script("table", env={"RESULTS": str(results), "PYTHON": sys.executable})
    assert done.returncode == 0, done.stderr
    table = (results / "gpu_bench.md").read_text()
    assert "### trainer" in table and "| files | imagefolder | gpu |" in table
    assert json.loads((results / "gpu_trainer.jsonl").read_text().splitlines()[0])["kind"] == "trainer"
