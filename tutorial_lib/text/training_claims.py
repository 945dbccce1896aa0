"""Sentences about training runs of notebooks 03-05, chosen from the runs' own numbers.

* :func:`weight_differences` (03): where the largest per-tensor differences between two runs' weights sit;
* :func:`warmup_effect` (04): what gradual warmup did to top-1 at each global batch of the sweep;
* :func:`rank_placement` (05): which node names the ranks of a job reported, and what that means.

Each returns a :class:`tutorial_lib.text.claims.Claim`; ``tests/test_claim_reversal_0305.py`` feeds each one
numbers with the comparison reversed and checks that the verdict follows.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from tutorial_lib.text.claims import Claim

RUNNING_STATS = "BatchNorm running statistics"
LAST_NORM = "the last norm layer of a residual block (zero-initialised)"
OTHER_NORM = "the other norm layers"
CONV = "convolution weights"
CLASSIFIER = "the classifier"
OTHER = "other tensors"

_BLOCK_NORM = re.compile(r"^(?P<block>layer\d+\.\d+)\.bn(?P<index>\d+)\.(weight|bias)$")


def tensor_kind(name: str, ndim: int, last_norms: frozenset = frozenset()) -> str:
    """What a ResNet ``state_dict`` tensor is, from its name and number of dimensions: running statistics,
    the last norm of a residual block (``last_norms``: the names of those norms, e.g. ``layer1.0.bn2``),
    another norm layer, a convolution weight, the classifier (``fc``), or another tensor."""
    if name.endswith(("running_mean", "running_var", "num_batches_tracked")):
        return RUNNING_STATS
    if name.startswith("fc."):
        return CLASSIFIER
    if ndim == 4:
        return CONV
    if ndim == 1 and name.endswith((".weight", ".bias")):
        return LAST_NORM if name.rsplit(".", 1)[0] in last_norms else OTHER_NORM
    return OTHER


def _last_norms(names) -> frozenset:
    """The last ``bnK`` of every residual block (``layerX.Y``): the norm ResNet zero-initialises."""
    last: dict[str, int] = {}
    for name in names:
        match = _BLOCK_NORM.match(name)
        if match:
            last[match["block"]] = max(last.get(match["block"], 0), int(match["index"]))
    return frozenset(f"{block}.bn{index}" for block, index in last.items())


def weight_differences(per_tensor: Mapping[str, Mapping], label: str = "the two runs", top: int = 3) -> Claim:
    """Where the largest absolute differences between two runs' weights sit, from their per-tensor differences
    (``{name: {"max_abs_diff", "ndim"}}``, as :func:`tutorial_lib.analyses.analysis.compare_checkpoints`
    returns under ``per_tensor``). Verdict: the kind of tensor (:func:`tensor_kind`) of the largest difference,
    or ``identical``."""
    if not per_tensor:
        return Claim(f"weights of {label}", "not measured", "no tensors were compared")
    last_norms = _last_norms(per_tensor)
    kinds = {name: tensor_kind(name, int(d.get("ndim", 0)), last_norms) for name, d in per_tensor.items()}
    ranked = sorted(per_tensor, key=lambda n: -float(per_tensor[n]["max_abs_diff"]))
    if float(per_tensor[ranked[0]]["max_abs_diff"]) == 0.0:
        return Claim(f"weights of {label}", "identical", f"the weights of {label} are bit-for-bit identical")
    largest_per_kind: dict[str, tuple[str, float]] = {}
    for name in ranked:
        largest_per_kind.setdefault(kinds[name], (name, float(per_tensor[name]["max_abs_diff"])))
    worst = kinds[ranked[0]]
    shown = ", ".join(f"{n} {float(per_tensor[n]['max_abs_diff']):.1e}" for n in ranked[:top])
    by_kind = "; ".join(f"{kind} {value:.1e} ({name})" for kind, (name, value) in largest_per_kind.items())
    return Claim(f"weights of {label}", worst,
                 f"for {label} the largest absolute weight differences sit in {worst} (largest: {shown}); "
                 f"the largest per kind of tensor: {by_kind}")


def warmup_effect(rows: Sequence[Mapping], tolerance_points: float = 2.0) -> Claim:
    """What gradual warmup did to the final top-1 at each global batch of a sweep.

    ``rows``: one per run, with ``global_batch``, ``warmup_epochs`` (0 for the runs without warmup), ``top1``
    (%) and ``outcome`` (:func:`tutorial_lib.text.verdicts.training_outcome`'s verdict). Each cell ran once
    (one seed), so no run-to-run noise is measured: a difference within ``tolerance_points`` is not decided
    (a chosen threshold, said so in the sentence). A batch where neither run learned (neither outcome is
    ``learns``) compares nothing: the sentence says so and decides nothing about warmup there. Verdict:
    ``higher with warmup``/``lower with warmup``/``not decided`` at every batch, ``neither learned`` at every
    batch, or ``mixed``.
    """
    pairs: dict[int, dict] = {}
    for row in rows:
        if not _measured(row.get("top1")):
            continue
        with_warmup = bool(row.get("warmup_epochs"))
        pairs.setdefault(int(row["global_batch"]), {})[with_warmup] = row
    pairs = {batch: pair for batch, pair in sorted(pairs.items()) if len(pair) == 2}
    if not pairs:
        return Claim("warmup", "not measured", "no global batch ran both with and without warmup")
    verdicts, parts = [], []
    for batch, pair in pairs.items():
        without, with_ = float(pair[False]["top1"]), float(pair[True]["top1"])
        gap = with_ - without
        outcomes = pair[False].get("outcome", "learns"), pair[True].get("outcome", "learns")
        if "learns" not in outcomes:
            verdicts.append("neither learned")
            parts.append(f"batch {batch}: {without:.1f}% ({outcomes[0]}) -> {with_:.1f}% ({outcomes[1]}), "
                         "neither learned")
            continue
        if abs(gap) <= tolerance_points:
            verdict = "not decided"
        else:
            verdict = "higher with warmup" if gap > 0 else "lower with warmup"
        verdicts.append(verdict)
        parts.append(f"batch {batch}: {without:.1f}% -> {with_:.1f}% ({gap:+.1f} points, {verdict})")
    overall = verdicts[0] if len(set(verdicts)) == 1 else "mixed"
    phrase = {"higher with warmup": "warmup raised top-1", "lower with warmup": "warmup lowered top-1",
              "not decided": "warmup changed top-1 by no more than the threshold (not decided)",
              "neither learned": "neither run learned"}
    if overall == "mixed":
        head = "; ".join(f"{phrase[v]} at global batch "
                         f"{', '.join(str(b) for b, w in zip(pairs, verdicts, strict=True) if w == v)}"
                         for v in dict.fromkeys(verdicts)) + " here"
    else:
        every = "at every global batch" if len(pairs) > 1 else f"at the one global batch ({next(iter(pairs))})"
        head = f"{phrase[overall]} {every} here"
    if "neither learned" in verdicts:
        head += " (a pair where neither run learned says nothing about warmup)"
    honest = (f"One run (one seed) per cell, so the run-to-run noise is not measured: a difference within "
              f"{tolerance_points:g} points (a chosen threshold, not a measured noise) is not decided, and a "
              "larger one is this sweep's result, not a general law")
    return Claim("warmup", overall, f"{head} (top-1 without -> with warmup: {'; '.join(parts)}). {honest}.")


def rank_placement(hosts: Sequence[str], backend: str, machine: str | None = None) -> Claim:
    """Which node names a job's ranks reported (``hosts``, in rank order) and what they mean for ``backend``
    (``local``: emulated nodes on ``machine``, this host; ``slurm``: the nodes Slurm gave the job). Verdict:
    ``one node name`` or ``several node names``."""
    if not hosts:
        return Claim("rank placement", "not measured", "the job recorded no node names")
    names = list(dict.fromkeys(hosts))
    listed = ", ".join(f"rank {rank} on {host}" for rank, host in enumerate(hosts))
    on = f" ({machine})" if machine else ""
    if backend == "local":
        where = (f"the local backend runs every rank on this machine{on}; it starts one torchrun agent per "
                 "emulated node and gives each its node name (TUTORIAL_NODE_NAME)")
    elif backend == "slurm":
        where = "each rank reports the node Slurm ran it on (SLURMD_NODENAME)"
    else:
        where = f"backend {backend}"
    if len(names) == 1:
        return Claim("rank placement", "one node name",
                     f"{'the one rank reports' if len(hosts) == 1 else f'all {len(hosts)} ranks report'} one node "
                     f"name, {names[0]} ({listed}): {where}")
    return Claim("rank placement", "several node names",
                 f"the {len(hosts)} ranks report {len(names)} node names, {', '.join(names)} ({listed}): {where}")


def _measured(top1) -> bool:
    """A table's top-1 that holds a value: not None and not NaN (an unfinished run's empty cell,
    :func:`tutorial_lib.analyses.analysis.final_accuracy`)."""
    return top1 is not None and top1 == top1  # NaN is the one value unequal to itself


def _gap_verdict(gap: float, tolerance_points: float, higher: str, lower: str) -> str:
    return "within" if abs(gap) <= tolerance_points else (higher if gap > 0 else lower)


def _threshold_note(tolerance_points: float) -> str:
    return (f"One run (one seed) each, so the run-to-run noise is not measured: a difference within "
            f"{tolerance_points:g} points (a chosen threshold, not a measured noise) is not decided.")


def batch_size_accuracy(rows: Sequence[Mapping], tolerance_points: float = 2.0) -> Claim:
    """Whether top-1 holds as the global batch grows (Goyal et al.'s error-against-minibatch figure, measured):
    per recipe (``recipe`` of :func:`tutorial_lib.analyses.analysis.final_accuracy`'s rows, with
    ``global_batch`` and ``top1``), each larger batch against the smallest one. Verdict: ``holds`` (every
    batch within ``tolerance_points``), ``holds, then falls`` (within up to a batch, lower from the next
    one on), ``falls`` (lower at every larger batch), ``rises`` or ``mixed`` (also when the recipes differ)."""
    recipes: dict[str, dict[int, float]] = {}
    for row in rows:
        if _measured(row.get("top1")):
            recipes.setdefault(str(row.get("recipe", "runs")), {})[int(row["global_batch"])] = float(row["top1"])
    recipes = {name: dict(sorted(points.items())) for name, points in recipes.items() if len(points) > 1}
    if not recipes:
        return Claim("accuracy against batch", "not measured", "no recipe ran at two or more global batches")
    verdicts, parts, breaks = [], [], set()
    for name, points in recipes.items():
        (smallest, base), *larger = points.items()
        steps = [_gap_verdict(top1 - base, tolerance_points, "higher", "lower") for _, top1 in larger]
        if all(s == "within" for s in steps):
            verdict = "holds"
        elif all(s == "lower" for s in steps):
            verdict = "falls"
        elif "lower" in steps and set(steps[:steps.index("lower")]) == {"within"} and set(
                steps[steps.index("lower"):]) == {"lower"}:
            verdict = "holds, then falls"
            fell = steps.index("lower")
            breaks.add((larger[fell - 1][0] if fell else smallest, larger[fell][0]))
        elif "higher" in steps and "lower" not in steps:
            verdict = "rises"
        else:
            verdict = "mixed"
        verdicts.append(verdict)
        said = ", ".join(f"batch {batch} {top1:.1f}% ({top1 - base:+.1f})" for batch, top1 in larger)
        parts.append(f"{name}: {verdict} (batch {smallest} {base:.1f}%; {said})")
    overall = verdicts[0] if len(set(verdicts)) == 1 else "mixed"
    head = {"holds": "top-1 held at every global batch here: the linear scaling rule kept the accuracy",
            "holds, then falls": _breaking_point(breaks),
            "falls": "top-1 fell at every larger global batch here",
            "rises": "top-1 rose with the global batch here",
            "mixed": "top-1 against the global batch does not follow one pattern here"}[overall]
    return Claim("accuracy against batch", overall,
                 f"{head} (each against its smallest batch: {'; '.join(parts)}). {_threshold_note(tolerance_points)}")


def _breaking_point(breaks: set) -> str:
    """The head of a ``holds, then falls`` sentence: the last batch top-1 held at and the first it fell at
    (consecutive batches of the sweep), or that they differ by recipe."""
    if len(breaks) != 1:
        return ("top-1 held up to a global batch and fell beyond it here, and the batch it held to differs by "
                "recipe (in brackets)")
    held, fell = next(iter(breaks))
    return (f"top-1 held up to global batch {held} and fell by global batch {fell} here (no batch in between "
            f"ran): the breaking point of this data set at this number of epochs lies between them")


def lars_vs_sgd(lars_top1: float | None, sgd_top1: Mapping[str, float], batch: int,
                tolerance_points: float = 2.0) -> Claim:
    """LARS against the best plain-SGD run at the same global batch (``sgd_top1``: ``{recipe: top-1 %}``).
    Verdict: ``LARS higher``, ``LARS lower`` or ``not decided`` (within ``tolerance_points``); an empty top-1
    (None or NaN: an unfinished run) is ``not measured``. SGD runs within
    ``tolerance_points`` of the highest are tied with it and named as tied, not one of them as "the best" (the
    issue-44 read of 04)."""
    sgd = {name: float(v) for name, v in sgd_top1.items() if _measured(v)}
    if not _measured(lars_top1) or not sgd:
        return Claim("LARS", "not measured", f"LARS and SGD did not both finish at batch {batch}")
    best = max(sgd, key=sgd.get)
    gap = float(lars_top1) - sgd[best]
    verdict = {"within": "not decided", "higher": "LARS higher", "lower": "LARS lower"}[
        _gap_verdict(gap, tolerance_points, "higher", "lower")]
    tied = [name for name in sorted(sgd, key=sgd.get, reverse=True) if sgd[best] - sgd[name] <= tolerance_points]
    if len(tied) > 1:
        listed = ", ".join(f"{name} {sgd[name]:.1f}%" for name in tied)
        against = (f"the best SGD runs, tied within the {tolerance_points:g}-point threshold ({listed}; "
                   f"{gap:+.1f} points from the highest)")
    else:
        against = f"the best SGD run ({best}) {sgd[best]:.1f}% ({gap:+.1f} points)"
    numbers = f"LARS {float(lars_top1):.1f}% against {against} at global batch {batch}"
    head = {"LARS higher": "LARS ended above plain SGD", "LARS lower": "LARS ended below plain SGD",
            "not decided": "LARS and plain SGD ended within the threshold of each other (not decided)"}[verdict]
    return Claim("LARS", verdict, f"{head} here: {numbers}. {_threshold_note(tolerance_points)}")
