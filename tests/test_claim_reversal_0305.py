"""Reversal tests of the claim functions of notebooks 03-05 (tutorial_lib.text.training_claims): each is fed
measured-like numbers, then the same numbers with the comparison reversed, and its verdict must follow."""

from __future__ import annotations

from tutorial_lib.text import training_claims as tc


def _tensors(conv: float, last_norm: float, running_var: float) -> dict:
    """Per-tensor differences of a small ResNet-like model (names as torchvision's resnet18 has them)."""
    return {"conv1.weight": {"max_abs_diff": conv / 2, "ndim": 4},
            "layer1.0.conv2.weight": {"max_abs_diff": conv, "ndim": 4},
            "layer1.0.bn1.weight": {"max_abs_diff": last_norm / 10, "ndim": 1},
            "layer1.0.bn2.weight": {"max_abs_diff": last_norm, "ndim": 1},
            "layer2.0.downsample.1.running_var": {"max_abs_diff": running_var, "ndim": 1},
            "layer2.0.downsample.1.num_batches_tracked": {"max_abs_diff": 0.0, "ndim": 0},
            "fc.weight": {"max_abs_diff": conv / 100, "ndim": 2}}


def test_weight_differences_reverses():
    # the GroupNorm pair of the run: the largest differences in convolution weights
    conv = tc.weight_differences(_tensors(conv=3e-7, last_norm=1e-7, running_var=0.0), "the GroupNorm pair")
    assert conv.verdict == tc.CONV
    assert "layer1.0.conv2.weight 3.0e-07" in conv.sentence and "convolution weights" in conv.sentence
    # reversed: the zero-initialised last norm of the block now holds the largest difference
    norm = tc.weight_differences(_tensors(conv=1e-7, last_norm=3e-7, running_var=0.0))
    assert norm.verdict == tc.LAST_NORM and norm.sentence.index("layer1.0.bn2.weight") < norm.sentence.index(
        "layer1.0.conv2.weight")
    # the BatchNorm control of that run: a running variance
    stats = tc.weight_differences(_tensors(conv=1e-3, last_norm=1e-3, running_var=2e-2))
    assert stats.verdict == tc.RUNNING_STATS and "layer2.0.downsample.1.running_var" in stats.sentence
    same = tc.weight_differences(_tensors(conv=0.0, last_norm=0.0, running_var=0.0))
    assert same.verdict == "identical"


def test_tensor_kind_names_the_last_norm_of_each_block_only():
    last = tc._last_norms(["layer1.0.bn1.weight", "layer1.0.bn2.weight", "layer4.1.bn3.bias", "layer4.1.bn1.bias"])
    assert last == {"layer1.0.bn2", "layer4.1.bn3"}
    assert tc.tensor_kind("layer1.0.bn1.weight", 1, last) == tc.OTHER_NORM
    assert tc.tensor_kind("layer4.1.bn3.bias", 1, last) == tc.LAST_NORM
    assert tc.tensor_kind("fc.bias", 1, last) == tc.CLASSIFIER


def _sweep(pairs: dict, outcome: str = "learns", outcomes: dict | None = None) -> list[dict]:
    """Sweep rows: ``{global_batch: (top1 without warmup, top1 with warmup)}``; ``outcomes``:
    ``{global_batch: (outcome without, outcome with)}`` where not ``outcome``."""
    rows = []
    for batch, (without, with_) in pairs.items():
        out_without, out_with = (outcomes or {}).get(batch, (outcome, outcome))
        rows.append({"global_batch": batch, "warmup_epochs": 0.0, "top1": without, "outcome": out_without})
        rows.append({"global_batch": batch, "warmup_epochs": 1.0, "top1": with_, "outcome": out_with})
    return rows


def test_warmup_effect_reverses():
    # the run: warmup lowered top-1 at every batch, by 0.6, 0.6 and 12 points
    measured = {16: (97.8, 97.2), 64: (96.4, 95.8), 256: (26.2, 14.2)}
    said = tc.warmup_effect(_sweep(measured))
    assert said.verdict == "mixed"  # two gaps within the 2-point threshold: not decided there
    assert "batch 16: 97.8% -> 97.2% (-0.6 points, not decided)" in said.sentence
    assert "batch 256: 26.2% -> 14.2% (-12.0 points, lower with warmup)" in said.sentence
    assert said.sentence.startswith("warmup changed top-1 by no more than the threshold (not decided) at global "
                                    "batch 16, 64; warmup lowered top-1 at global batch 256 here")
    # the fresh-clone run: neither batch-256 run learned (above chance, near chance), so nothing is decided there
    failed = tc.warmup_effect(_sweep(measured, outcomes={256: ("above chance", "near chance")}))
    assert "warmup lowered" not in failed.sentence and "lower with warmup" not in failed.sentence
    assert "neither run learned at global batch 256" in failed.sentence
    assert "batch 256: 26.2% (above chance) -> 14.2% (near chance), neither learned" in failed.sentence
    assert "one seed" in said.sentence and "not a measured noise" in said.sentence
    lower = tc.warmup_effect(_sweep(measured), tolerance_points=0.5)
    assert lower.verdict == "lower with warmup" and "warmup lowered top-1 at every global batch" in lower.sentence
    # reversed: the same numbers with and without warmup swapped
    reversed_ = {batch: (w, wo) for batch, (wo, w) in measured.items()}
    higher = tc.warmup_effect(_sweep(reversed_), tolerance_points=0.5)
    assert higher.verdict == "higher with warmup" and "warmup raised top-1" in higher.sentence
    flat = tc.warmup_effect(_sweep({16: (97.8, 97.2), 64: (96.4, 95.8)}))
    assert flat.verdict == "not decided" and "(not decided) at every global batch here" in flat.sentence
    chance = tc.warmup_effect(_sweep({256: (11.0, 14.0)}, outcome="near chance"))
    assert chance.verdict == "neither learned" and "says nothing about warmup" in chance.sentence
    one_learned = tc.warmup_effect(_sweep({256: (11.0, 60.0)}, outcomes={256: ("near chance", "learns")}))
    assert one_learned.verdict == "higher with warmup"
    assert tc.warmup_effect(_sweep({16: (97.8, 97.2)})[:1]).verdict == "not measured"


def test_rank_placement_reverses():
    emulated = tc.rank_placement(["local-node1", "local-node2"], "local", machine="box")
    assert emulated.verdict == "several node names"
    assert "2 node names, local-node1, local-node2" in emulated.sentence and "this machine (box)" in emulated.sentence
    one = tc.rank_placement(["box", "box"], "local", machine="box")
    assert one.verdict == "one node name" and "all 2 ranks report one node name, box" in one.sentence
    slurm = tc.rank_placement(["node1", "node2"], "slurm")
    assert slurm.verdict == "several node names" and "SLURMD_NODENAME" in slurm.sentence
    assert tc.rank_placement(["node1", "node1"], "slurm").verdict == "one node name"
    assert "the one rank reports one node name, node1" in tc.rank_placement(["node1"], "slurm").sentence
    assert tc.rank_placement([], "local").verdict == "not measured"


def _recipes(points: dict) -> list[dict]:
    """final_accuracy-like rows: ``{recipe: {global_batch: top1}}``."""
    return [{"recipe": recipe, "global_batch": batch, "top1": top1}
            for recipe, by_batch in points.items() for batch, top1 in by_batch.items()]


def test_batch_size_accuracy_reverses():
    # the run: both recipes hold from 16 to 64 and fall at 256
    measured = {"SGD, no warmup": {16: 97.8, 64: 96.4, 256: 26.2}, "SGD, warmup 1 ep": {16: 97.2, 64: 95.8, 256: 14.2}}
    said = tc.batch_size_accuracy(_recipes(measured))
    assert said.verdict == "holds, then falls" and "batch 256 26.2% (-71.6)" in said.sentence
    # the batch it held to and the one it fell at are named: only 16, 64 and 256 ran
    assert said.sentence.startswith("top-1 held up to global batch 64 and fell by global batch 256 here (no batch "
                                    "in between ran): the breaking point of this data set at this number of "
                                    "epochs lies between them")
    apart = tc.batch_size_accuracy(_recipes({"a": {16: 97.0, 64: 96.0, 256: 30.0},
                                             "b": {16: 97.0, 32: 96.5, 64: 40.0}}))
    assert apart.verdict == "holds, then falls" and "the batch it held to differs by recipe" in apart.sentence
    assert "not a measured noise" in said.sentence
    # reversed: the largest batch is now the best one, the smallest the worst
    reversed_ = {r: dict(zip(points, reversed(list(points.values())), strict=True)) for r, points in measured.items()}
    rises = tc.batch_size_accuracy(_recipes(reversed_))
    assert rises.verdict == "rises" and "top-1 rose with the global batch" in rises.sentence
    flat = tc.batch_size_accuracy(_recipes({"SGD": {16: 97.0, 64: 96.0, 256: 95.5}}))
    assert flat.verdict == "holds" and "held at every global batch" in flat.sentence
    falls = tc.batch_size_accuracy(_recipes({"SGD": {16: 97.0, 64: 80.0, 256: 30.0}}))
    assert falls.verdict == "falls"
    both = tc.batch_size_accuracy(_recipes({"a": {16: 97.0, 64: 80.0}, "b": {16: 80.0, 64: 97.0}}))
    assert both.verdict == "mixed"
    assert tc.batch_size_accuracy(_recipes({"a": {16: 97.0}})).verdict == "not measured"


def test_lars_vs_sgd_reverses():
    sgd = {"SGD, no warmup": 26.2, "SGD, warmup 1 ep": 14.2}
    higher = tc.lars_vs_sgd(92.8, sgd, 256)
    assert higher.verdict == "LARS higher"
    assert "LARS 92.8% against the best SGD run (SGD, no warmup) 26.2% (+66.6 points) at global batch 256" in (
        higher.sentence)
    # reversed: LARS at the SGD run's top-1 and the best SGD run at LARS's
    lower = tc.lars_vs_sgd(26.2, {"SGD, no warmup": 92.8, "SGD, warmup 1 ep": 14.2}, 256)
    assert lower.verdict == "LARS lower" and "LARS ended below plain SGD" in lower.sentence
    assert tc.lars_vs_sgd(27.0, sgd, 256).verdict == "not decided"
    assert tc.lars_vs_sgd(None, sgd, 256).verdict == "not measured"


def test_lars_vs_sgd_names_tied_sgd_runs_as_tied():
    """The issue-44 read of 04: "the best SGD run" named one of two SGD runs within accuracy_tolerance."""
    tied = tc.lars_vs_sgd(80.0, {"SGD, no warmup": 95.0, "SGD, warmup 1 ep": 94.0}, 256, tolerance_points=2.0)
    assert tied.verdict == "LARS lower" and "the best SGD run " not in tied.sentence
    assert "the best SGD runs, tied within the 2-point threshold (SGD, no warmup 95.0%, SGD, warmup 1 ep 94.0%" \
        in tied.sentence
    reversed_ = tc.lars_vs_sgd(99.0, {"SGD, no warmup": 94.0, "SGD, warmup 1 ep": 95.0}, 256, tolerance_points=2.0)
    assert reversed_.verdict == "LARS higher" and "(SGD, warmup 1 ep 95.0%, SGD, no warmup 94.0%" in reversed_.sentence
