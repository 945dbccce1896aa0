"""Comparisons of runs (tutorial_lib.analyses.analysis) on run directories written with known contents."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import matplotlib
import pytest
import torch

from tutorial_lib.analyses import analysis
from tutorial_lib.engine.config import make_config
from tutorial_lib.rundir.checkpoint import save_atomic
from tutorial_lib.rundir.layout import CHECKPOINT_FILE, CONFIG_FILE, DONE_FILE
from tutorial_lib.rundir.metrics import MetricsWriter

matplotlib.use("Agg")


def _weights(shift: float = 0.0, where: tuple = (1, 2)) -> dict:
    weight = torch.arange(12, dtype=torch.float32).reshape(3, 4) / 10  # max |w| = 1.1
    weight[where] += shift
    return {"conv.weight": weight, "fc.bias": torch.full((4,), 0.25),
            "bn.num_batches_tracked": torch.tensor(7)}


def _checkpoint(run_dir, weights: dict):
    save_atomic({"model": weights, "optimizer": {}, "progress": {}}, run_dir / CHECKPOINT_FILE)
    return run_dir


def test_compare_checkpoints_finds_a_known_difference(tmp_path):
    a = _checkpoint(tmp_path / "a", _weights())
    b = _checkpoint(tmp_path / "b", _weights(shift=0.5))
    result = analysis.compare_checkpoints(a, b)
    assert result["max_abs_diff"] == pytest.approx(0.5, rel=1e-6)
    size = math.sqrt(sum(v**2 for v in _weights()["conv.weight"].flatten().tolist()) + 4 * 0.25**2)
    assert result["rel_diff"] == pytest.approx(0.5 / size, rel=1e-6)
    conv_size = math.sqrt(sum(v**2 for v in _weights()["conv.weight"].flatten().tolist()))
    assert result["max_rel_diff"] == pytest.approx(0.5 / conv_size, rel=1e-6)
    assert result["worst_tensor"] == "conv.weight"
    assert result["tensors"] == 3 and result["elements"] == 12 + 4 + 1
    # every tensor's own difference, for where the differences sit (notebook 03's weight_differences claim)
    assert result["per_tensor"]["conv.weight"] == {"max_abs_diff": pytest.approx(0.5, rel=1e-6), "ndim": 2}
    assert result["per_tensor"]["fc.bias"] == {"max_abs_diff": 0.0, "ndim": 1}
    assert analysis.verdict(result).startswith("DIFFERENT")


def test_compare_checkpoints_of_identical_and_nearly_identical_weights(tmp_path):
    a = _checkpoint(tmp_path / "a", _weights())
    same = analysis.compare_checkpoints(a, _checkpoint(tmp_path / "b", _weights()))
    assert same["max_abs_diff"] == 0.0 and same["rel_diff"] == 0.0 and same["max_rel_diff"] == 0.0
    # one float32 rounding step on a weight of 0.6: far inside the rounding tolerance
    nudged = _weights()
    nudged["conv.weight"][1, 2] = torch.nextafter(nudged["conv.weight"][1, 2], torch.tensor(1.0))
    close = analysis.compare_checkpoints(a, _checkpoint(tmp_path / "c", nudged))
    assert 0 < close["max_abs_diff"] < 1e-7 and 0 < close["rel_diff"] < 1e-7
    assert analysis.verdict(close).startswith("equal within float rounding")


def test_compare_checkpoints_counts_integer_buffers(tmp_path):
    changed = _weights()
    changed["bn.num_batches_tracked"] = torch.tensor(9)
    result = analysis.compare_checkpoints(_checkpoint(tmp_path / "a", _weights()),
                                          _checkpoint(tmp_path / "b", changed))
    assert result["max_abs_diff"] == 2.0 and result["worst_tensor"] == "bn.num_batches_tracked"
    assert result["rel_diff"] == 0.0  # the floating-point weights are the same


def test_compare_checkpoints_relative_difference_of_a_near_zero_tensor(tmp_path):
    a, b = _weights(), _weights()
    a["fc.bias"], b["fc.bias"] = torch.full((4,), 1e-3), torch.full((4,), 1e-3 + 1e-5)
    result = analysis.compare_checkpoints(_checkpoint(tmp_path / "a", a), _checkpoint(tmp_path / "b", b))
    assert result["max_rel_diff"] == pytest.approx(1e-2, rel=1e-3)  # relative to that tiny tensor
    assert result["rel_diff"] < 1e-4  # relative to the whole model
    assert analysis.verdict(result, tolerance=1e-4).startswith("equal")


def test_compare_checkpoints_accepts_jobs_and_checkpoint_files(tmp_path):
    a = _checkpoint(tmp_path / "a", _weights())
    b = _checkpoint(tmp_path / "b", _weights(shift=-0.25))
    job = SimpleNamespace(run_dir=a, name="job-a")
    result = analysis.compare_checkpoints(job, b / CHECKPOINT_FILE)
    assert result["max_abs_diff"] == pytest.approx(0.25, rel=1e-6)


def test_compare_checkpoints_refuses_different_models_and_missing_files(tmp_path):
    a = _checkpoint(tmp_path / "a", _weights())
    other = _weights()
    other["fc.weight"] = other.pop("fc.bias")
    with pytest.raises(ValueError, match="different models"):
        analysis.compare_checkpoints(a, _checkpoint(tmp_path / "b", other))
    reshaped = _weights()
    reshaped["conv.weight"] = reshaped["conv.weight"].reshape(4, 3)
    with pytest.raises(ValueError, match="shape"):
        analysis.compare_checkpoints(a, _checkpoint(tmp_path / "c", reshaped))
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        analysis.compare_checkpoints(a, tmp_path / "empty")


def _fake_run(run_dir, batch_size, world_size, warmup, top1s, losses, optimizer="sgd", done=True):
    run_dir.mkdir(parents=True)
    global_batch = batch_size * world_size
    config = {"name": run_dir.name, "batch_size": batch_size, "world_size": world_size, "global_batch": global_batch,
              "scaled_lr": 0.1 * global_batch / 256, "warmup_epochs": warmup, "optimizer": optimizer}
    (run_dir / CONFIG_FILE).write_text(json.dumps(config))
    writer = MetricsWriter(run_dir)
    writer.write("start", world_size=world_size, global_batch=global_batch)
    for step, loss in enumerate(losses, start=1):
        writer.write("step", epoch=1, step=step * 5, loss=loss, lr=0.1)
    for epoch, top1 in enumerate(top1s, start=1):
        writer.write("epoch", epoch=epoch, top1=top1, top5=99.0, train_loss=losses[-1], epoch_time=2.5)
    if done:
        (run_dir / DONE_FILE).write_text("{}")
    return run_dir


def test_final_accuracy_one_row_per_run(tmp_path):
    small = _fake_run(tmp_path / "b64", 64, 1, 0.0, [80.0, 90.0], [2.0, 1.0])
    big = _fake_run(tmp_path / "b256", 128, 2, 1.0, [60.0, 55.0], [2.0, 1.5], done=False)
    lars = _fake_run(tmp_path / "lars", 256, 1, 1.0, [70.0], [float("nan")], optimizer="lars")
    table = analysis.final_accuracy([small, SimpleNamespace(run_dir=big, name="big", state="RUNNING"), lars])
    assert list(table["run"]) == ["b64", "big", "lars"]
    assert list(table["global_batch"]) == [64, 256, 256]
    # the running job's last epoch is not its result (it has none yet): no top-1, no verdict on it
    assert table["top1"].tolist()[::2] == [90.0, 70.0] and math.isnan(table.loc[1, "top1"])
    assert table["best_top1"].tolist()[::2] == [90.0, 70.0] and math.isnan(table.loc[1, "best_top1"])
    assert table.loc[1, "peak_lr"] == pytest.approx(0.1)
    assert list(table["recipe"]) == ["SGD, no warmup", "SGD, warmup 1 ep", "LARS, warmup 1 ep"]
    assert list(table["diverged"]) == [False, False, True]
    assert list(table["outcome"]) == ["learns", "unfinished (epoch 2)", "diverged"]
    assert list(table["state"]) == ["COMPLETED", "RUNNING", "COMPLETED"]
    assert list(table["epochs"]) == [2, 2, 1] and table.loc[0, "train_time_s"] == 5.0


def test_a_run_still_going_when_the_table_is_made_is_judged_by_no_claim(tmp_path):
    """The issue-44 read of 04: its watch timed out at load 7-9 with batch 256 at epoch 3 of 4 and LARS before its
    first epoch; the notebook called batch 256 "near chance" (it reached 16.7%, then LARS 93.0% once finished)
    and said LARS "did not finish". An unfinished Job has no top-1 in the table, the claims leave it out, and
    the figure says which run it did not plot."""
    from tutorial_lib.text import training_claims

    sgd = [_fake_run(tmp_path / f"b256-w{w}", 256, 1, w, [10.0, 10.0, 10.0], [2.3, 2.3]) for w in (0, 1)]
    lars = _fake_run(tmp_path / "lars", 256, 1, 1.0, [40.0], [2.0, 1.0], optimizer="lars", done=False)
    going = SimpleNamespace(run_dir=sgd[1], name="b256-w1", state="RUNNING")
    table = analysis.final_accuracy([sgd[0], going])
    assert table.loc[1, "outcome"] == "unfinished (epoch 3)"
    warmup = training_claims.warmup_effect(table.to_dict("records"))
    assert warmup.verdict == "not measured"  # no pair: the running one is not half of it
    _, said = analysis.lars_comparison([sgd[0], SimpleNamespace(run_dir=lars, name="lars", state="PENDING")])
    assert said.verdict == "not measured" and "did not both finish" in said.sentence
    ax = analysis.plot_accuracy_vs_batch(table)
    assert "not plotted: b256-w1" in ax.get_title().replace("\n", " ")
    finished = analysis.final_accuracy([sgd[0], SimpleNamespace(run_dir=sgd[1], name="b256-w1", state="COMPLETED")])
    assert training_claims.warmup_effect(finished.to_dict("records")).verdict == "neither learned"


def test_step_table_aligns_runs_by_step(tmp_path):
    a = _fake_run(tmp_path / "a", 8, 2, 0, [50.0], [2.0, 1.5, 1.0])
    b = _fake_run(tmp_path / "b", 16, 1, 0, [50.0], [2.0, 1.4])
    table = analysis.step_table([a, b])
    assert list(table.columns) == ["a", "b"] and list(table.index) == [5, 10, 15]
    assert table.loc[10, "b"] == 1.4 and math.isnan(table.loc[15, "b"])
    assert (table["a"] - table["b"]).abs().max() == pytest.approx(0.1)


def test_plot_accuracy_vs_batch_draws_one_line_per_recipe(tmp_path):
    runs = [_fake_run(tmp_path / f"r{b}-{w}", b, 1, w, [90.0 - b / 64 - 3 * (w == 0)], [1.0])
            for b in (16, 64, 256) for w in (0, 1)]
    table = analysis.final_accuracy(runs)
    ax = analysis.plot_accuracy_vs_batch(table)
    assert [line.get_label() for line in ax.lines] == ["SGD, no warmup", "SGD, warmup 1 ep"]
    assert list(ax.lines[0].get_xdata()) == [16, 64, 256]
    assert ax.get_xscale() == "log"


def test_schedules_follow_linear_scaling_and_warmup():
    cfg = make_config("smoke", epochs=4, base_lr=0.1, lr_schedule="step", lr_milestones=[3], warmup_epochs=1.0,
                      warmup_start_factor=0.25)
    spe = 10
    small = analysis.schedule_for(cfg, 256, steps_per_epoch=spe)
    big = analysis.schedule_for(cfg, 1024, steps_per_epoch=spe)
    cold = analysis.schedule_for(cfg, 1024, warmup_epochs=0, steps_per_epoch=spe)
    assert len(big) == 4 * spe
    assert big[0] == pytest.approx(0.25 * 0.4)          # warmup starts at start_factor x scaled LR
    assert big[spe] == pytest.approx(0.4)               # ... and reaches 0.1 x 1024/256 after 1 epoch
    assert big[spe] == pytest.approx(4 * small[spe])    # linear scaling rule
    assert cold[0] == pytest.approx(0.4)                # no warmup: the full LR from the first step
    assert cold[3 * spe] == pytest.approx(0.04)         # step decay at epoch 3

    table = analysis.lr_table({"256": small, "1024": big, "1024 cold": cold}, spe, [0, 0.5, 1, 3.5, 99])
    assert list(table.index) == [0, 0.5, 1, 3.5, 99]
    assert table.loc[0.5].to_dict() == {"256": 0.0625, "1024": 0.25, "1024 cold": 0.4}
    assert table.loc[99, "1024"] == 0.04  # past the end: the last value


def test_lr_explorer_draws_a_static_figure_without_a_frontend(monkeypatch):
    monkeypatch.setenv("TUTORIAL_MONITOR_CONTROLS", "0")
    assert analysis.frontend_present() is False
    cfg = make_config("smoke", epochs=3, warmup_epochs=1.0)
    ax = analysis.lr_explorer(cfg, global_batch=4096, warmup_epochs=2.0)
    assert len(ax.lines) == 2
    reference, large = ax.lines[0].get_ydata(), ax.lines[1].get_ydata()
    assert max(large) == pytest.approx(cfg.base_lr * 4096 / cfg.lr_reference_batch)
    # Goyal et al.: warmup starts at the reference batch's LR; the reference itself needs none
    assert large[0] == pytest.approx(cfg.base_lr) and reference[0] == pytest.approx(cfg.base_lr)
    plain = analysis.lr_explorer(cfg, global_batch=4096, warmup_epochs=2.0, start_at_reference=False)
    assert plain.lines[1].get_ydata()[0] == pytest.approx(cfg.warmup_start_factor * max(large))


def test_ddp_buckets_follow_backward_order_and_caps():
    from torch import nn

    # 4 bytes per float. Backward order: 3.bias (1 KiB), 3.weight (256 KiB), 2.weight (512 KiB),
    # 1.weight (2 MiB), 0.weight (2 MiB). A bucket closes once it reaches its cap, with the tensor that
    # crossed it: the 1 MiB first bucket takes the first four, the 2 MiB cap then fits 0.weight alone.
    model = nn.Sequential(nn.Linear(512, 1024, bias=False), nn.Linear(1024, 512, bias=False),
                          nn.Linear(512, 256, bias=False), nn.Linear(256, 256))
    table = analysis.ddp_buckets(model, bucket_cap_mb=2, first_bucket_mb=1)
    assert list(table["first"]) == ["3.bias", "0.weight"]
    assert list(table["last"]) == ["1.weight", "0.weight"]
    assert list(table["tensors"]) == [4, 1]
    # a 0.5 MiB first bucket closes at 2.weight; 1 MiB buckets then take one 2 MiB tensor each
    assert list(analysis.ddp_buckets(model, bucket_cap_mb=1, first_bucket_mb=0.5)["tensors"]) == [3, 1, 1]
    assert table["mib"].sum() == pytest.approx(sum(p.numel() * 4 for p in model.parameters()) / 2**20)


def test_ddp_buckets_match_torchs_own_assignment():
    import torch.distributed as dist

    from tutorial_lib.engine.models import build_model

    compute = getattr(dist, "_compute_bucket_assignment_by_size", None)
    if compute is None:
        pytest.skip("this torch has no _compute_bucket_assignment_by_size; install the pinned torch of "
                    "constraints.txt (`make setup`)")
    model = build_model("resnet18", num_classes=10)
    params = list(model.parameters())
    for cap_mb in (1, 5, 25):
        buckets, _ = compute(list(reversed(params)), [2**20, cap_mb * 2**20], [False] * len(params))
        table = analysis.ddp_buckets(model, bucket_cap_mb=cap_mb)
        assert list(table["tensors"]) == [len(b) for b in buckets]


def test_lr_explorer_adds_sliders_with_a_frontend(monkeypatch):
    import matplotlib.pyplot as plt

    monkeypatch.setattr(plt, "show", lambda *args, **kwargs: None)
    cfg = make_config("smoke", epochs=3, warmup_epochs=1.0)
    shown = analysis.lr_explorer(cfg, global_batch=1000, batches=[256, 1024, 4096], interactive=True)
    sliders = {child.description: child for child in shown.widget.children if hasattr(child, "description")}
    assert sliders["global batch"].value == 1024  # the nearest offered batch
    assert sliders["global batch"].options == (256, 1024, 4096)
    assert sliders["warmup epochs"].max == 3.0
    sliders["warmup epochs"].value = 2.0  # moving a slider redraws without error


def test_outcome_trend_is_the_epochs_mean_train_loss(tmp_path):
    """The loss trend names one measure: the mean train loss of the first and last epoch, not the first logged
    step's loss against the last epoch's mean (2.22 -> 0.60 in a fresh-clone run, matching neither)."""
    run_dir = tmp_path / "ddp"
    run_dir.mkdir()
    (run_dir / CONFIG_FILE).write_text(json.dumps({"name": "ddp", "num_classes": 10}))
    writer = MetricsWriter(run_dir)
    for step, loss in ((5, 2.22), (10, 1.0), (15, 0.32)):
        writer.write("step", epoch=1, step=step, loss=loss, lr=0.1)
    for epoch, loss in ((1, 2.293), (2, 1.1), (3, 0.601)):
        writer.write("epoch", epoch=epoch, top1=90.0, top5=99.0, train_loss=loss, epoch_time=1.0)
    claim = analysis.outcome(run_dir)
    assert claim.verdict == "learns"
    assert "mean train loss of epoch 1 -> epoch 3: 2.29 -> 0.60" in claim.sentence
    assert "2.22" not in claim.sentence


def test_outcome_non_finite_step_loss_diverges(tmp_path):
    """A non-finite step loss still makes the run diverged when the epochs' means are finite."""
    run_dir = tmp_path / "nan"
    run_dir.mkdir()
    (run_dir / CONFIG_FILE).write_text(json.dumps({"name": "nan", "num_classes": 10}))
    writer = MetricsWriter(run_dir)
    writer.write("step", epoch=1, step=5, loss=float("nan"), lr=0.1)
    writer.write("epoch", epoch=1, top1=90.0, top5=99.0, train_loss=2.3, epoch_time=1.0)
    writer.write("epoch", epoch=2, top1=90.0, top5=99.0, train_loss=1.0, epoch_time=1.0)
    assert analysis.outcome(run_dir).verdict == "diverged"
