"""Verdicts on whole runs and models, chosen from their numbers: did a training run learn (against chance
and its loss trend), is a projection flat and why, what staleness did, how well a fitted model reproduces
measured times, where hierarchical all-reduce wins. Each is a :class:`tutorial_lib.text.claims.Claim`,
shown by the notebooks and carried into ``SUMMARY.md`` like the speed claims of :mod:`claims`.
"""

from __future__ import annotations

import math
import statistics

from tutorial_lib.bench.timing import Spread, distinguishable
from tutorial_lib.text.claims import NOT_DISTINGUISHABLE, Claim, _ratio_text, likely_cause, ratio_verdict

LEARNED_SHARE = 0.5  # "learns": top-1 covers at least half the way from chance to 100%


def training_outcome(name: str, top1: float | None, num_classes: int, losses: list,
                     step_losses: list = ()) -> Claim:
    """Whether one training run learned, against chance (100 / ``num_classes`` %) and its loss trend
    (``losses``: its epochs' mean train losses in order; ``step_losses``: its logged step losses, only
    checked for non-finite values). The sentence names the one measure it compares: the mean train loss
    of the first epoch against that of the last.

    * ``diverged``: a non-finite loss, or the last epoch's mean loss above the first's (training made it worse);
    * ``near chance``: top-1 below twice chance;
    * ``learns``: top-1 at least ``LEARNED_SHARE`` of the way from chance to 100%;
    * ``above chance``: in between (learned something, not much).
    """
    chance = 100.0 / max(1, int(num_classes or 1))
    finite = [float(v) for v in losses if v is not None and math.isfinite(float(v))]
    given = [v for v in list(losses) + list(step_losses) if v is not None]
    if top1 is None or (isinstance(top1, float) and math.isnan(top1)):
        return Claim(name, "not measured", "no validation accuracy was recorded")
    if not finite:
        trend = "no finite train loss"
    elif len(losses) == 1:
        trend = f"mean train loss of epoch 1: {finite[0]:.2f}"
    else:
        trend = f"mean train loss of epoch 1 -> epoch {len(losses)}: {finite[0]:.2f} -> {finite[-1]:.2f}"
    numbers = f"top-1 {top1:.1f}% against {chance:.1f}% for guessing; {trend}"
    if any(not math.isfinite(float(v)) for v in given) or not finite or finite[-1] > finite[0]:
        verdict = "diverged"
    elif top1 < 2 * chance:
        verdict = "near chance"
    elif top1 >= chance + LEARNED_SHARE * (100 - chance):
        verdict = "learns"
    else:
        verdict = "above chance"
    return Claim(name, verdict, f"{verdict} ({numbers})")


def runs_learn(outcomes: list) -> Claim:
    """One sentence over several :func:`training_outcome` claims: ``every run learns`` or which did not."""
    if not outcomes:
        return Claim("learning", "not measured", "no run finished")
    failed = [o for o in outcomes if o.verdict != "learns"]
    listed = "; ".join(f"{o.topic}: {o.sentence}" for o in outcomes)
    if not failed:
        return Claim("learning", "every run learns", f"every run learns: {listed}")
    return Claim("learning", "not every run learns", f"{len(failed)} of {len(outcomes)} runs did not learn: {listed}")


def projection_flat(efficiencies: list, top_units: int, per_unit_rate: float, measured: float | None,
                    measured_units: int | None, unit: str = "GPUs", basis: str = "",
                    measured_range: tuple[float, float] | None = None, undecided: str | None = None) -> Claim:
    """Why a scaling projection sits at (nearly) 100%, and what the measured efficiency beside it means.

    ``efficiencies``: the projected efficiencies (%); ``per_unit_rate``: the measured img/s per rank
    the projection starts from; ``measured``: the measured efficiency (%) at ``measured_units``, with
    ``measured_range`` (%) the range its runs' per-epoch speeds allow; ``basis``: what that rate was measured on
    (model, image size, device), named in the sentence; ``undecided``: the reason :func:`scaling_verdict` did
    not rank the measured runs, where it did not (the measured efficiency is then given as not distinguishable
    here, with no number)."""
    lowest = min(efficiencies) if efficiencies else float("nan")
    counted = "GPUs" if unit == "GPUs" else "modelled ranks"
    source = f"this run's {per_unit_rate:.1f} img/s per rank" + (f" ({basis})" if basis else "")
    if measured is not None and measured > lowest:  # above the model: the runs met different conditions
        why = likely_cause("this machine's other work slowed the smaller run more than the larger one")
    elif unit != "GPUs":
        why = likely_cause("on this machine the ranks share its CPU cores with each other, with the all-reduce and "
                           "with its other work, which the model's cluster (one GPU per rank, a real network) does not "
                           "have")
    else:
        why = likely_cause("this machine's GPUs and links differ from the reference cluster's the projection uses")
    spread = "" if measured_range is None else (
        " (one epoch per run measured: no range)" if measured_range[0] == measured_range[1] else
        f" (between {measured_range[0]:.0f}% and {measured_range[1]:.0f}% over its runs' epochs)")
    if measured is None:
        beside = ""
    elif undecided is not None:
        beside = (f" The measured efficiency at {measured_units} {unit} is {NOT_DISTINGUISHABLE} ({undecided}; its "
                  f"runs' epochs allow {measured_range[0]:.0f}% to {measured_range[1]:.0f}%); where it is low, that "
                  f"is another thing ({why}).") if measured_range else (
                  f" The measured efficiency at {measured_units} {unit} is {NOT_DISTINGUISHABLE} ({undecided}).")
    else:
        beside = f" The measured {measured:.1f}% at {measured_units} {unit}{spread} is another thing ({why})."
    if lowest >= 99.5:
        return Claim("projection", "flat", f"the model projects {lowest:.1f}% or more at every count up to {top_units} "
                     f"{counted} (flat): it starts from {source}, and in the model a step that "
                     f"slow hides the whole all-reduce behind backward, with no file-system limit modelled.{beside}")
    return Claim("projection", "falls", f"the model projects {lowest:.1f}% at {top_units} {counted} from "
                 f"{source}.{beside}")


MODEL_AGREES_POINTS = 5.0  # model and published efficiency within 5 points "agree" (a chosen threshold)


def model_vs_published(name: str, rows: list[dict], agree_points: float = MODEL_AGREES_POINTS) -> Claim:
    """The scaling model's efficiency against a reference's published one (``rows``: ``compare(preset)["rows"]``,
    fractions, with ``limited_by``), over every published GPU count beyond the smallest (each efficiency is taken
    against it), each point stated.

    Verdict: ``agrees`` (every point within ``agree_points``), ``model more efficient`` (the reference lost more
    at every point that differs: something the model lacks), ``model less efficient`` (the model's limit is
    stricter at every point that differs) or ``points disagree`` (some each way: the issue-44 read of 07, where the
    headline came from 64 GPUs while the largest gap, at 32, went the other way)."""
    published = [r for r in rows if r.get("reference_efficiency") is not None]
    if len(published) < 2:
        return Claim(f"model vs {name}", "not measured", f"{name} publishes no efficiency to compare with")

    def gap(row):
        return 100 * (row["model_efficiency"] - row["reference_efficiency"])

    def counts(points):
        listed = [f"{r['gpus']:,}" for r in points]
        return (", ".join(listed[:-1]) + " and " if len(listed) > 1 else "") + listed[-1] + " GPUs"

    def widest(points):
        row = max(points, key=lambda r: abs(gap(r)))
        return f"{abs(gap(row)):.0f} points at {row['gpus']:,} GPUs, limited by {row['limited_by']}"

    compared = published[1:]
    more = [r for r in compared if gap(r) > agree_points]
    less = [r for r in compared if gap(r) < -agree_points]
    if more and less:
        verdict, head = "points disagree", (
            f"the published points disagree on which way the model is off, so no one verdict covers them: the model "
            f"is more efficient than {name} at {counts(more)} (up to {widest(more)}) and less efficient at "
            f"{counts(less)} (up to {widest(less)})")
    elif more:
        verdict, head = "model more efficient", (
            f"{name} lost more than the model at {counts(more)}, up to {widest(more)}: something the model leaves "
            "out (stragglers and synchronisation jitter are candidates, not measured here)")
    elif less:
        limits = sorted({r["limited_by"] for r in less})
        verdict, head = "model less efficient", (
            f"the model loses more than {name} did at {counts(less)}, up to {widest(less)}: its "
            f"{' and '.join(limits)} limit is stricter than what the runs met")
    else:
        verdict, head = "agrees", (f"the model agrees with {name}'s published efficiency within {agree_points:g} "
                                   f"points at every published count ({counts(compared)})")
    each = ", ".join(f"{r['gpus']:,} GPUs {100 * r['model_efficiency']:.0f}% vs {100 * r['reference_efficiency']:.0f}%"
                     for r in compared)
    return Claim(f"model vs {name}", verdict, f"{head}. Each point, model vs published: {each} (time-based "
                 f"efficiency against the smallest published run, {published[0]['gpus']:,} GPUs; the model's "
                 "numbers, not this machine's)")


# --------------------------------------------------------------------------- notebook 07
STALENESS_TAIL = 0.1  # the share of a run's last evaluations whose range is its noise band (at least 3)


def _tail_spread(records: list, key: str, tail: float):
    """Median and range of ``key`` over the last ``tail`` share of ``records`` (at least 3 of them), or
    None where the run has fewer than 3 evaluations (then no noise band can be measured)."""
    values = [float(r[key]) for r in records if r.get(key) is not None]
    count = max(3, math.ceil(tail * len(values)))
    return Spread.of(values[-count:]) if len(values) >= 3 else None


def _direction(stale, sync, higher_is_better: bool) -> str:
    """``better``/``worse`` for the stale run where the two bands separate, else not distinguishable."""
    if stale is None or sync is None or not distinguishable(stale, sync):
        return NOT_DISTINGUISHABLE
    return "better" if (stale.median > sync.median) == higher_is_better else "worse"


def staleness_effect(runs: dict, tail: float = STALENESS_TAIL) -> Claim:
    """What bounded staleness did per step, from each run's evaluations (``{bound: [{"loss", "accuracy",
    "wall_s"}, ...]}`` in step order, bound 0 = synchronous; a single record per bound is accepted and
    decides nothing).

    One run per bound measures no seed-to-seed noise, so the band is each run's own: the range of its loss
    and accuracy over its last ``tail`` share of evaluations. A stale run ``costs`` where its loss band lies
    above synchronous or its accuracy band below (and neither says the opposite), ``helps`` the other way,
    and where loss and accuracy point opposite ways the verdict says so (``loss and accuracy disagree``).
    Overall: the one verdict every stale bound got, else ``mixed``; bands that overlap are not
    distinguishable here.
    """
    runs = {bound: [value] if isinstance(value, dict) else list(value) for bound, value in runs.items()}
    if 0 not in runs or len(runs) < 2 or not all(runs.values()):
        return Claim("staleness", "not measured", "staleness was not run against the synchronous bound 0")
    bands = {bound: (_tail_spread(records, "loss", tail), _tail_spread(records, "accuracy", tail))
             for bound, records in runs.items()}
    sync_loss, sync_acc = bands[0]
    if sync_loss is None:
        finals = "; ".join(f"staleness {b}: loss {r[-1]['loss']:.3f}, accuracy {r[-1]['accuracy']:.3f}"
                           for b, r in sorted(runs.items()))
        return Claim("staleness", NOT_DISTINGUISHABLE, f"per step, what staleness did is {NOT_DISTINGUISHABLE}: "
                     f"each bound ran once and too few evaluations were kept to measure a run's noise ({finals})")
    head = {"costs": "cost progress per step", "helps": "helped progress per step (one run each: not a general "
            "result)", NOT_DISTINGUISHABLE: f"is {NOT_DISTINGUISHABLE} from synchronous SGD per step",
            "loss and accuracy disagree": "ended with loss and accuracy pointing opposite ways"}
    verdicts, parts = [], []
    for bound in sorted(b for b in runs if b != 0):
        loss, acc = bands[bound]
        found = {_direction(loss, sync_loss, False), _direction(acc, sync_acc, True)} - {NOT_DISTINGUISHABLE}
        verdict = ("loss and accuracy disagree" if len(found) == 2 else
                   {"worse": "costs", "better": "helps"}[found.pop()] if found else NOT_DISTINGUISHABLE)
        verdicts.append(verdict)
        parts.append(f"staleness {bound} {head[verdict]} (loss {loss.text(3)}, accuracy {acc.text(3)})")
    overall = verdicts[0] if len(set(verdicts)) == 1 else "mixed"
    band = (f"median and range over each run's last {math.ceil(tail * 100)}% of evaluations, at least 3; one run "
            "per bound, so seed-to-seed noise is not measured")
    return Claim("staleness", overall, f"{'; '.join(parts)}; against staleness 0: loss {sync_loss.text(3)}, "
                 f"accuracy {sync_acc.text(3)} ({band})")


def fit_quality(median_error: float, max_error: float, worst: str = "") -> Claim:
    """Whether a fitted alpha-beta model reproduces the measured all-reduce times (relative errors; ``worst``:
    the message size of the largest error, named in the sentence)."""
    numbers = f"median error {100 * median_error:.0f}%, largest {100 * max_error:.0f}%" + \
        (f" (at {worst})" if worst else "")
    if median_error <= 0.10 and max_error <= 0.25:
        return Claim("all-reduce fit", "reproduces", f"the latency/bandwidth fit reproduces the measured times "
                     f"({numbers})")
    if median_error <= 0.35:
        return Claim("all-reduce fit", "rough", f"the fit follows the measured times only roughly ({numbers})")
    return Claim("all-reduce fit", "does not fit", f"the fit does not reproduce the measured times ({numbers}); "
                 "treat alpha and beta as rough guesses")


# --------------------------------------------------------------------------- notebook 07: two-level network
def hierarchical_vs_flat(rows: list[dict]) -> Claim:
    """Where hierarchical all-reduce beats flat on the emulated two-level network, where it does not.

    ``rows``: ``{"rate_mbit", "bytes", "flat", "hierarchical"}`` with bus bandwidths as Spreads (higher is
    better). Verdict: ``wins``, ``wins at large messages``, ``loses``, ``mixed`` or not distinguishable here.
    """
    from tutorial_lib.bench.records import human_bytes

    if not rows:
        return Claim("hierarchical all-reduce", "not measured", "no two-level measurement was made here")
    verdicts, largest, parts = [], [], []
    for rate in sorted({r["rate_mbit"] for r in rows}):
        here = sorted((r for r in rows if r["rate_mbit"] == rate), key=lambda r: r["bytes"])
        kinds = [NOT_DISTINGUISHABLE if _too_few_rounds(r["hierarchical"], r["flat"])
                 or not _apart_as_printed(r["hierarchical"], r["flat"], 3) else
                 ratio_verdict(r["hierarchical"], r["flat"], "wins", "loses") for r in here]
        verdicts += kinds
        largest.append(kinds[-1])
        said = []
        for kind, word in (("wins", "faster"), ("loses", "slower"), ("matters little", "within 10%"),
                           (NOT_DISTINGUISHABLE, NOT_DISTINGUISHABLE)):
            sizes = [r for r, k in zip(here, kinds, strict=True) if k == kind]
            if sizes and kind == NOT_DISTINGUISHABLE:  # decided nothing: both ranges, no ratio
                said.append(f"{word} at " + ", ".join(f"{human_bytes(r['bytes'])} ({r['hierarchical'].text(3)} "
                                                      f"vs {r['flat'].text(3)} GB/s)" for r in sizes))
            elif sizes:  # the ratio with the extremes its ranges allow, and both medians and ranges it comes from
                ratios = ", ".join(f"{human_bytes(r['bytes'])} {_ratio_text(r['hierarchical'], r['flat'])} "
                                   f"({r['hierarchical'].text(3)} vs {r['flat'].text(3)} GB/s)" for r in sizes)
                said.append(f"{word} at {ratios}")
        parts.append(f"at {rate:g} Mbit/s hierarchical is " + "; ".join(said))
    found = set(verdicts)
    if found == {"wins"}:
        verdict = "wins"
    elif set(largest) == {"wins"}:
        verdict = "wins at large messages"
    elif "wins" in found:
        verdict = "mixed"
    elif "loses" in found:
        verdict = "loses"
    else:
        verdict = NOT_DISTINGUISHABLE
    thin = [s for r in rows if _too_few_rounds(r["hierarchical"], r["flat"]) for s in (r["hierarchical"], r["flat"])]
    return Claim("hierarchical all-reduce", verdict, "; ".join(parts) + " (bus bandwidth against flat; "
                 "median and range over interleaved rounds" + (f"; {_rounds_note(*thin)}" if thin else "") + ")")


MIN_ROUNDS_TO_RANK = 3  # a range of two values is too thin to rank two settings (a chosen rule)


def _apart_as_printed(a: Spread, b: Spread, digits: int) -> bool:
    """Whether the two ranges stay apart as the sentence prints them (``digits`` decimals): ranges that print as
    touching or overlapping ("0.010-0.013" and "0.013-0.016") are not called distinct, however their unrounded
    ends fall, so the reader's check of the printed numbers and the verdict agree."""
    return distinguishable(Spread(a.median, round(a.low, digits), round(a.high, digits)),
                           Spread(b.median, round(b.low, digits), round(b.high, digits)))


def _too_few_rounds(*spreads) -> bool:
    """True where a speed came from fewer than ``MIN_ROUNDS_TO_RANK`` rounds (or has no range): it ranks
    nothing. A Spread that does not record its samples counts by its range alone."""
    return any(s.low == s.high or 0 < len(s.samples) < MIN_ROUNDS_TO_RANK for s in spreads)


def _rounds_note(*spreads) -> str:
    """Why a pair was not ranked: ``one round: no range`` or ``N rounds: too few to rank, 3 needed``."""
    fewest = min((len(s.samples) for s in spreads if s.samples), default=1)
    if fewest <= 1:
        return "one round: no range, so no ranking"
    return f"{fewest} rounds: too few to rank, {MIN_ROUNDS_TO_RANK} needed"


def hierarchical_training(rows: list[dict]) -> Claim:
    """Whether DDP training ran faster with the hierarchical all-reduce than with the flat one, per inter-node
    rate (``rows``: ``{"rate_mbit", "algorithm", "images_per_sec"}``, speeds as Spreads over interleaved rounds;
    optional ``model_images_per_sec`` (the scaling model's prediction) and ``steps_per_round``).

    Per rate: ``faster``, ``slower``, ``matters little`` (medians within 10%) or not distinguishable here (ranges
    overlap, or fewer than ``MIN_ROUNDS_TO_RANK`` rounds); overall the one verdict every rate got, else ``mixed``.
    Where the model ranks the two the other way round than the measurement, the sentence says so."""
    speeds, model, steps = {}, {}, set()
    for row in rows:
        speeds.setdefault(row["rate_mbit"], {})[row["algorithm"]] = row["images_per_sec"]
        if row.get("model_images_per_sec") is not None:
            model.setdefault(row["rate_mbit"], {})[row["algorithm"]] = row["model_images_per_sec"]
        if row.get("steps_per_round"):
            steps.add(int(row["steps_per_round"]))
    pairs = {rate: pair for rate, pair in sorted(speeds.items()) if {"flat", "hierarchical"} <= set(pair)}
    if not pairs:
        return Claim("hierarchical training", "not measured", "DDP training was not timed with both all-reduces here")
    found, parts, against = [], [], []
    for rate, pair in pairs.items():
        flat, hier = pair["flat"], pair["hierarchical"]
        thin = _too_few_rounds(flat, hier)
        verdict = NOT_DISTINGUISHABLE if thin else ratio_verdict(hier, flat, "faster", "slower")
        found.append(verdict)
        why = f" ({_rounds_note(flat, hier)})" if thin else ""
        ratio = "" if verdict == NOT_DISTINGUISHABLE else f", {hier.median / flat.median:.2f}x"
        parts.append(f"at {rate:g} Mbit/s hierarchical {hier.text()} against flat {flat.text()} img/s{ratio}: "
                     f"{verdict}{why}")
        predicted = model.get(rate, {})
        if {"flat", "hierarchical"} <= set(predicted) and verdict in ("faster", "slower"):
            model_faster = predicted["hierarchical"] > predicted["flat"]
            if model_faster != (verdict == "faster"):
                against.append(f"at {rate:g} Mbit/s the model predicted the opposite order (hierarchical "
                               f"{predicted['hierarchical']:.1f} against flat {predicted['flat']:.1f} img/s)")
    overall = found[0] if len(set(found)) == 1 else "mixed"
    head = {"faster": "DDP training ran faster with the hierarchical all-reduce at every rate measured",
            "slower": "DDP training ran slower with the hierarchical all-reduce at every rate measured",
            "matters little": "the all-reduce algorithm changed DDP training speed by less than 10% here",
            NOT_DISTINGUISHABLE: f"DDP training with the two all-reduces is {NOT_DISTINGUISHABLE}",
            "mixed": "in this measurement the two all-reduces did not rank the same way at every rate"}[overall]
    rounds = min((len(s.samples) for pair in pairs.values() for s in pair.values() if s.samples), default=None)
    size = ", ".join(part for part in (f"{min(steps)} DDP step{'s' * (min(steps) != 1)} per round" if steps else "",
                                       f"{rounds} rounds" if rounds else "") if part)
    tail = "; ".join(against)
    return Claim("hierarchical training", overall, f"{head}: {'; '.join(parts)} (median and range over the "
                 f"interleaved rounds{'; ' + size if size else ''})" + (f"; {tail}" if tail else ""))


def model_error(errors: dict[str, float], limit: float = 0.25) -> Claim:
    """How far the scaling model's predictions are from what was measured: ``errors`` maps a label to the
    relative error (model / measured - 1)."""
    if not errors:
        return Claim("model vs measured", "not measured", "no prediction could be compared here")
    worst = max(errors, key=lambda k: abs(errors[k]))
    within = [k for k, e in errors.items() if abs(e) <= limit]
    # the ordinary median (mean of the two middle values for an even count): the one a reader takes from the table
    numbers = (f"median {100 * statistics.median(abs(e) for e in errors.values()):.0f}%, largest "
               f"{100 * errors[worst]:+.0f}% ({worst})")
    if len(within) == len(errors):
        return Claim("model vs measured", "within", f"the model, its links fitted to point-to-point times on the "
                     f"same namespaces, predicts all {len(errors)} measurements within {100 * limit:.0f}% ({numbers})")
    return Claim("model vs measured", "off", f"the model is within {100 * limit:.0f}% for {len(within)} of "
                 f"{len(errors)} measurements ({numbers})")


def scaling_verdict(larger: Spread, smallest: Spread) -> tuple[str, str]:
    """The one decision on a larger run's throughput against the smallest run's, used by every place that
    shows it (the sentence of :func:`measured_scaling` and the closing table): ``(verdict, why)``, the verdict
    ``faster``, ``slower``, ``matters little`` or not distinguishable here, ``why`` the reason an undecided pair
    was not ranked ("" where the ranges overlap). An epoch or two per run is no range to rank by."""
    if _too_few_rounds(larger, smallest):
        fewest = min(len(s.samples) or 1 for s in (larger, smallest))
        return NOT_DISTINGUISHABLE, (f"{fewest} epoch{'s' * (fewest != 1)} measured per run: too few to rank, "
                                     f"{MIN_ROUNDS_TO_RANK} needed")
    return ratio_verdict(larger, smallest, "faster", "slower"), ""


def measured_scaling(runs: list[tuple[int, Spread]], unit: str = "GPUs", load: tuple | None = None,
                     cores: int | None = None) -> Claim:
    """What the scaling study measured: each larger run's global throughput against the smallest run's
    (``runs``: ``(ranks, Spread of img/s)``, one run each, the Spread its per-epoch range), as a speed-up with
    the range the two ranges allow, or not distinguishable here. One run per point measures no run-to-run
    noise, and the sentence says so; ``load`` (the load averages over 1, 5 and 15 minutes as the runs ended)
    and ``cores`` say what else the machine did. Verdict per larger run: ``faster``, ``slower``, ``matters
    little`` or not distinguishable; overall the one every run got, else ``mixed``."""
    runs = sorted((int(n), s) for n, s in runs if s is not None)
    if len(runs) < 2:
        return Claim("measured scaling", "not measured", "fewer than two rank counts were measured, so no speed-up "
                     "can be given")
    (base_n, base), found, parts = runs[0], [], []

    def name(count: int) -> str:
        return f"{count} {unit if count != 1 else unit.removesuffix('s')}"

    for count, spread in runs[1:]:
        verdict, why = scaling_verdict(spread, base)
        found.append(verdict)
        numbers = f"{name(count)} {spread.text()} against {name(base_n)} {base.text()} img/s (all ranks)"
        if verdict == NOT_DISTINGUISHABLE:
            parts.append(f"{numbers}: {NOT_DISTINGUISHABLE}{f' ({why})' if why else ''}")
        else:
            parts.append(f"{numbers}: {verdict}, a speed-up of {_ratio_text(spread, base)} for {count / base_n:g}x "
                         "the ranks")
    overall = found[0] if len(set(found)) == 1 else "mixed"
    machine = ""
    if load is not None:
        machine = (f"; this machine's load average as the runs ended: {', '.join(f'{v:.1f}' for v in load)} over "
                   f"1, 5 and 15 minutes" + (f", on {cores} cores" if cores else ""))
    below_ideal = any(spread.median / base.median < 0.9 * count / base_n for count, spread in runs[1:])
    cause = (" (" + likely_cause("the ranks share this machine's cores with each other, the all-reduce and its "
                                 "other work") + ")") if unit != "GPUs" and below_ideal else ""
    return Claim("measured scaling", overall, f"{'; '.join(parts)} (each one run: the range is its per-epoch speeds, "
                 f"the first epoch left out; run-to-run noise is not measured{machine}){cause}")
