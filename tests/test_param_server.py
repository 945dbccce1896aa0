"""Parameter server over gloo: s = 0 is synchronous SGD, s > 0 stays within its bound."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tutorial_lib.param_server import ExperimentConfig, run_experiment, run_sgd_reference

REPO = Path(__file__).resolve().parents[1]
CONFIG = ExperimentConfig(workers=2, steps=30, straggler_delay_s=0.005, straggler_prob=0.3)


@pytest.fixture(scope="module")
def runs():
    """One start of 1 server + 2 workers for all three runs (process start-up dominates)."""
    return run_experiment(CONFIG, staleness=(0, 2), allreduce=True)


def test_staleness_zero_equals_synchronous_sgd(runs):
    reference = run_sgd_reference(CONFIG)
    bsp, allreduce = runs["ps_s0"].final_weights, runs["allreduce"].final_weights
    torch.testing.assert_close(bsp, allreduce, rtol=0, atol=1e-12)
    torch.testing.assert_close(bsp, reference.final_weights, rtol=0, atol=1e-10)
    assert all(r["staleness_max"] == 0 for r in runs["ps_s0"].records)
    assert runs["ps_s0"].records[-1]["loss"] < runs["ps_s0"].records[0]["loss"]


def test_bounded_staleness_stays_within_its_bound(runs):
    records = runs["ps_s2"].records
    assert [r["step"] for r in records] == list(range(1, CONFIG.steps + 1))
    observed = [r["staleness_max"] for r in records]
    assert max(observed) <= 2
    # The first worker to push a round always gets weights one round old: s > 0 is really used.
    assert max(observed) >= 1
    assert records[-1]["loss"] < records[0]["loss"]


def test_records_have_what_a_notebook_plots(runs):
    record = runs["allreduce"].records[0]
    assert {"step", "wall_s", "loss", "accuracy", "batch_loss", "staleness_max",
            "staleness_mean"} <= set(record)
    walls = [r["wall_s"] for r in runs["ps_s2"].records]
    assert walls == sorted(walls)


def test_cli_writes_jsonl(tmp_path):
    out = tmp_path / "ps.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "tutorial_lib.param_server", "--workers", "2", "--staleness", "0",
         "1", "--steps", "5", "--json", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=600, check=True)
    assert "ps_s1" in done.stdout and "max |weights(ps_s0) - weights(allreduce)|" in done.stdout
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert {line["run"] for line in lines} == {"ps_s0", "ps_s1", "allreduce"}
    assert len(lines) == 15
    again = subprocess.run(done.args, cwd=REPO, capture_output=True, text=True, timeout=600)  # its own file: replaced
    assert again.returncode == 0 and len(out.read_text().splitlines()) == 15


@pytest.mark.parametrize("flags, named", [
    (["--workers", "0"], "--workers: 0 "), (["--workers", "100"], "--workers: 100 "), (["--batch", "0"], "--batch: 0 "),
    (["--staleness", "0", "-1"], "--staleness: -1 "), (["--steps", "9" * 400], "--steps: 999"),
    (["--batch", "1000"], "--batch: 1000 times 2 workers"), (["--lr", "nan"], "--lr: nan "),
    (["--straggler-prob", "2"], "--straggler-prob: 2.0 "), (["--straggler-delay", "-1"], "--straggler-delay: -1.0 "),
    (["--seed", "-1"], "--seed: -1 "), (["--json", "/proc/self/x"], "--json: '/proc/self/x' lies in /proc"),
    (["--json", "NOTES"], "--json: 'NOTES' exists and is not a file of this command's records"),
    (["--json", "NOTES/x.jsonl"], "is a file, not a folder"),
])
def test_cli_refuses_a_bad_setting_in_one_line_before_any_process_starts(tmp_path, flags, named):
    """r43v: ``--workers 0`` and ``--staleness -1`` were ValueError tracebacks, ``--batch 0`` a ZeroDivisionError,
    ``--json`` overwrote a user's file and an unwritable one failed after the whole experiment ran."""
    (tmp_path / "NOTES").write_text("my notes\n")
    flags = [tmp_path / "NOTES" if f == "NOTES" else tmp_path / "NOTES" / "x.jsonl" if f == "NOTES/x.jsonl" else f
             for f in flags]
    flags = [str(f) if not isinstance(f, str) else f for f in flags]
    done = subprocess.run([sys.executable, "-m", "tutorial_lib.param_server", "--steps", "2", *flags], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and "Fix: " in done.stderr
    assert named.replace("'NOTES'", repr(str(tmp_path / "NOTES"))) in done.stderr
    assert (tmp_path / "NOTES").read_text() == "my notes\n" and sorted(p.name for p in tmp_path.iterdir()) == ["NOTES"]


def test_the_api_refuses_what_the_command_refuses_naming_the_field():
    from tutorial_lib.param_server import ExperimentError

    with pytest.raises(ExperimentError, match=r"^per_worker_batch: 0 is not a whole number"):
        run_experiment(ExperimentConfig(per_worker_batch=0))
    with pytest.raises(ExperimentError, match=r"^staleness: -1 "):
        run_experiment(ExperimentConfig(), staleness=(-1,))
    with pytest.raises(ExperimentError, match=r"^test_images: 1797 is not a whole number from 1 to 1,796"):
        run_experiment(ExperimentConfig(test_images=1797))  # r43w X7: it was blamed on per_worker_batch


def test_workers_build_the_model_without_touching_cuda(monkeypatch):
    """On a GPU machine the notebook's process has initialised CUDA before the workers fork, and a forked child
    that touches CUDA dies ("Cannot re-initialize CUDA in forked subprocess": notebook 07 on one H200). The MLP
    lives on the CPU, so building it saves and restores the CPU generator only."""
    from tutorial_lib.param_server import build_model

    def forked_cuda(*args, **kwargs):
        raise RuntimeError("Cannot re-initialize CUDA in forked subprocess")

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_rng_state", forked_cuda)
    monkeypatch.setattr(torch.cuda, "set_rng_state", forked_cuda)
    before = torch.get_rng_state()
    first, second = build_model(ExperimentConfig()), build_model(ExperimentConfig())
    pairs = zip(first.state_dict().values(), second.state_dict().values(), strict=True)
    assert all(torch.equal(a, b) for a, b in pairs)
    assert torch.equal(torch.get_rng_state(), before)  # the caller's CPU stream is left where it was
