"""The sentences a notebook closes with, chosen from the numbers it measured.

A notebook's text must not contradict its own measurements. Every claim that depends on a
measured value ("grows with workers", "channels_last matters little", "the fit reproduces the
times", "the device waits for data") is made here, from the values, as a :class:`Claim`: a
machine-checkable ``verdict`` and the ``sentence`` shown to the student. Speeds come as
:class:`tutorial_lib.bench.timing.Spread` (median and range over interleaved rounds): two speeds
whose ranges overlap are "not distinguishable here", never ranked. The notebooks display these
claims and hand them to :func:`tutorial_lib.course.summarize`, so ``SUMMARY.md`` says the
same; ``tests/test_claims.py`` feeds them recorded and contradicting numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tutorial_lib.bench.records import share_of_matmul
from tutorial_lib.bench.timing import Spread, distinguishable

NOT_DISTINGUISHABLE = "not distinguishable here"
NOT_MEASURED_HERE = "not measured here"
CANNOT_DECIDE = "cannot decide here"  # the measurement cannot show the difference asked about (same disk, say)
LITTLE = 0.10  # a speed ratio within 10% of 1 "matters little"


@dataclass(frozen=True)
class Claim:
    """A closing statement: ``topic``, a machine-checkable ``verdict`` and the ``sentence`` to show."""

    topic: str
    verdict: str
    sentence: str

    def __str__(self) -> str:
        return self.sentence

    def _repr_markdown_(self) -> str:
        return f"**{self.topic}:** {self.sentence}"


def likely_cause(text: str) -> str:
    """A cause a sentence offers that this run did not measure, worded so: ``a likely cause, not measured here:
    <text>``. Every sentence naming a cause either says what measured it or goes through here
    (``tests/test_claim_wording.py`` finds the others)."""
    return f"a likely cause, {NOT_MEASURED_HERE}: {text}"


def show(*claims: Claim) -> None:
    """Print claims one per line (works the same in JupyterLab and papermill)."""
    for claim in claims:
        print(f"{claim.topic}: {claim.sentence}")


def _ratio_text(new: Spread, old: Spread) -> str:
    """``new / old`` as the ratio of the medians and the extremes the two ranges allow: a ratio taken
    from one median hides how far a wide range lets it move."""
    if not old.median or old.low <= 0:
        return "not defined (a zero speed)"
    return (f"{_ratio_number(new.median / old.median)}x (between {_ratio_number(new.low / old.high)}x and "
            f"{_ratio_number(new.high / old.low)}x)")


def _ratio_number(ratio: float) -> str:
    """A ratio to about three significant digits, two decimals at most (02 printed 270.86x and 644.26x)."""
    return f"{ratio:,.{2 if abs(ratio) < 10 else 1 if abs(ratio) < 100 else 0}f}"


def top_group(spreads: dict) -> list:
    """The keys whose speeds are not distinguishable from the highest median, highest median first:
    a single winner only where its range separates from every other."""
    best = max(spreads, key=lambda k: spreads[k].median)
    return [best] + [k for k in sorted(spreads, key=lambda k: -spreads[k].median)
                     if k != best and not distinguishable(spreads[k], spreads[best])]


def within_little(ratio: float, little: float = LITTLE) -> bool:
    """True when ``ratio`` lies within ``little`` of 1 seen from either side (1/1.1..1.1 for 10%), so that a
    pair and the same pair swapped (0.90x and 1.11x) get the same verdict."""
    return 0 < ratio < float("inf") and max(ratio, 1 / ratio) <= 1 + little


def _ranges_within_little(new: Spread, old: Spread) -> bool:
    """Both extreme ratios the two ranges allow (``new.low / old.high`` and ``new.high / old.low``) lie within
    :data:`LITTLE` of 1."""
    if old.low <= 0 or old.high <= 0:
        return False
    return within_little(new.low / old.high) and within_little(new.high / old.low)


def ratio_verdict(new: Spread, old: Spread, better: str, worse: str) -> str:
    """``better`` or ``worse`` for ``new`` against ``old``, "matters little" within :data:`LITTLE` (either
    way round: :func:`within_little`), or not distinguishable here where their ranges overlap.

    Where the ranges overlap, "matters little" needs every ratio the two ranges allow within the band, not only
    the medians': 0.93x with ranges allowing 0.69x..1.79x decided nothing (the issue-44 read of notebook 02)."""
    ratio = new.median / old.median if old.median else float("inf")
    if within_little(ratio) and (distinguishable(new, old) or _ranges_within_little(new, old)):
        return "matters little"
    if not distinguishable(new, old):
        return NOT_DISTINGUISHABLE
    return better if ratio > 1 else worse


# --------------------------------------------------------------------------- notebook 01
def _train_spreads(records: list[dict]) -> dict[tuple, tuple[Spread, dict]]:
    spreads = {}
    for record in records:
        if record.get("kind") == "train" and record.get("status") == "ok":
            key = (record["precision"], bool(record.get("channels_last")), record.get("compile", "none"))
            spreads[key] = (Spread.from_record(record), record)
    return spreads


def _label(key: tuple) -> str:
    precision, cl, mode = key
    return precision + (" +channels_last" if cl else "") + ("" if mode == "none" else f" compile={mode}")


def fastest_setting(records: list[dict]) -> Claim:
    """Which measured settings train fastest (those not distinguishable from the highest median) and
    whether they are really faster than plain fp32: ``faster``, ``fp32`` (nothing beats it), not
    distinguishable here, or ``no fp32 baseline``."""
    spreads = {key: spread for key, (spread, _) in _train_spreads(records).items()}
    if not spreads:
        return Claim("fastest setting", "no measurement", "no setting could be measured on this device")
    top = top_group(spreads)
    best = top[0]
    base = ("fp32", False, "none")
    listed = ", ".join(f"{_label(k)} {spreads[k].text()}" for k in top)
    if base in top and len(top) > 1:
        return Claim("fastest setting", NOT_DISTINGUISHABLE,
                     f"{_label(best)} has the highest median, but the fastest settings are not distinguishable "
                     f"here ({listed} img/s; median and range over the rounds)")
    if base in top:
        return Claim("fastest setting", "fp32", f"fp32 is the fastest here ({listed} img/s): mixed precision and "
                     "channels_last do not pay on this device")
    if base not in spreads:
        return Claim("fastest setting", "no fp32 baseline", f"fastest here: {listed} img/s (plain fp32, in the default "
                     "memory layout without compiling, was not measured: nothing is compared with it)")
    numbers = f"({listed} vs fp32 {spreads[base].text()} img/s; median and range over the rounds)"
    if len(top) == 1:
        return Claim("fastest setting", "faster", f"{_label(best)} is the fastest here, "
                     f"{_ratio_text(spreads[best], spreads[base])} fp32 {numbers}")
    # a member of the tied top group is called faster than fp32 only where its own range separates from fp32's,
    # and each gets its own ratio: the best one's would overstate the others
    beat = [k for k in top if distinguishable(spreads[k], spreads[base])]
    tied = [k for k in top if k not in beat]
    ratios = ", ".join(f"{_label(k)} {_ratio_text(spreads[k], spreads[base])} fp32" for k in beat)
    head = (f"{' and '.join(_label(k) for k in beat)} are the fastest here (not distinguishable from each other)"
            if len(beat) > 1 else f"{_label(beat[0])} is the fastest here")
    rest = "" if not tied else (f"; {' and '.join(_label(k) for k in tied)} "
                                f"{'is' if len(tied) == 1 else 'are'} {NOT_DISTINGUISHABLE} from "
                                f"{_label(best)} nor from fp32")
    return Claim("fastest setting", "faster", f"{head}: {ratios}{rest} {numbers}")


def channels_last_effect(records: list[dict]) -> Claim:
    """What channels_last does to each precision's speed: helps, hurts, matters little, or not
    distinguishable here; ``helps some``/``hurts some``/``mixed`` when the precisions differ."""
    spreads = _train_spreads(records)
    parts, verdicts = [], []
    for (precision, cl, mode), (with_cl, _) in spreads.items():
        if not cl or (precision, False, mode) not in spreads:
            continue
        without = spreads[(precision, False, mode)][0]
        verdict = ratio_verdict(with_cl, without, "helps", "hurts")
        verdicts.append(verdict)
        numbers = f"{with_cl.text()} vs {without.text()} img/s"
        parts.append(f"{precision}: {NOT_DISTINGUISHABLE} ({numbers})" if verdict == NOT_DISTINGUISHABLE else
                     f"{precision}: {with_cl.median / without.median:.2f}x ({verdict}; {numbers})")
    if not verdicts:
        return Claim("channels_last", "not measured", "channels_last was not measured against the default layout")
    found = set(verdicts)
    if len(found) == 1:
        overall = verdicts[0]
    elif {"helps", "hurts"} <= found:
        overall = "mixed"
    elif found & {"helps", "hurts"}:
        overall = f"{(found & {'helps', 'hurts'}).pop()} some"
    else:
        overall = NOT_DISTINGUISHABLE  # some within 10%, the others not distinguishable
    head = {"helps": "channels_last speeds training up here",
            "hurts": "channels_last slows training down here",
            "helps some": "channels_last speeds up some precisions here, not all",
            "hurts some": "channels_last slows down some precisions here, not all",
            "matters little": "channels_last matters little here (within 10%)",
            NOT_DISTINGUISHABLE: f"channels_last against the default layout is {NOT_DISTINGUISHABLE}",
            "mixed": "channels_last speeds up some precisions and slows down others here"}[overall]
    return Claim("channels_last", overall, f"{head}: " + "; ".join(parts))


def precision_accuracy(top1: dict, tolerance_points: float = 5.0, chance: float | None = None) -> Claim:
    """Whether the training runs in different precisions ended with the same top-1.

    Each precision ran once, so no noise was measured: ``tolerance_points`` is a threshold the
    notebook sets (``accuracy_tolerance``), and the sentence calls it one. With ``chance`` (top-1 of
    guessing, %), runs that ended near it (below twice chance) compare nothing: verdict ``near chance``.
    """
    values = {k: float(v) for k, v in top1.items() if v is not None}
    if len(values) < 2:  # counted from the runs that finished (issue 44: "two jobs" where one ran)
        ran = f"only {', '.join(values)} finished" if values else "none finished"
        return Claim("accuracy", "not measured", f"one training run per precision was to compare, but {ran}: "
                     "fewer than two, so no precision's accuracy is compared here")
    gap = max(values.values()) - min(values.values())
    listed = ", ".join(f"{k} {v:.1f}%" for k, v in values.items())
    threshold = (f"the {tolerance_points:g}-point threshold set by accuracy_tolerance (a chosen threshold, not a "
                 "measured noise: each precision ran once)")
    if chance is not None and min(values.values()) < 2 * chance:
        return Claim("accuracy", "near chance", f"at least one run ended near chance ({listed}; guessing gives "
                     f"{chance:.1f}%): these runs say nothing about what precision does to accuracy")
    if gap <= tolerance_points:
        return Claim("accuracy", "same", f"the precisions ended within {gap:.1f} points of each other ({listed}), "
                     f"inside {threshold}: no effect of precision on accuracy is visible at this size")
    return Claim("accuracy", "differs", f"the precisions ended {gap:.1f} points apart ({listed}), more than "
                 f"{threshold}: look at the runs before trusting a precision")


def benchmark_vs_jobs(benchmark: dict, jobs: dict) -> Claim:
    """Whether the benchmark's step speed and the training jobs' own speed agree, precision by precision
    (``{precision: Spread}`` each): ``agree`` where every pair's ranges overlap (not distinguishable),
    ``differ`` where every pair's separate, ``differ for some`` otherwise; each precision's part says which
    was faster, or that the two are not distinguishable here."""
    pairs = {p: (benchmark[p], jobs[p]) for p in benchmark if p in jobs and benchmark[p] and jobs[p]}
    if not pairs:
        return Claim("benchmark vs jobs", "not measured", "no job ran in a setting the benchmark measured (the same "
                     "precision, memory layout and compile mode): the two are not compared")
    parts, apart = [], []
    for p, (b, j) in pairs.items():
        if not distinguishable(b, j):
            parts.append(f"{p}: jobs {j.text()} and benchmark {b.text()} img/s, {NOT_DISTINGUISHABLE}")
            continue
        apart.append(p)
        parts.append(f"{p}: jobs {j.text()} img/s, {'faster' if j.median > b.median else 'slower'} than the "
                     f"benchmark's {b.text()}: {_ratio_text(j, b)}")
    listed = "; ".join(parts)
    if not apart:
        return Claim("benchmark vs jobs", "agree", f"for every precision the training jobs' speed and the benchmark's "
                     f"are {NOT_DISTINGUISHABLE} ({listed})")
    verdict = "differ" if len(apart) == len(pairs) else "differ for some"
    which = "every precision" if verdict == "differ" else " and ".join(apart)
    return Claim("benchmark vs jobs", verdict, f"the training jobs and the benchmark measured different speeds for "
                 f"{which} ({listed}); they do not time the same work (the jobs also read and augment image files, "
                 "in processes of their own), so compare settings within the benchmark table, not against the jobs")


def matmul_yardstick(achieved_tflops: float | None, matmul_tflops: float | None, what: str = "the training step",
                     achieved_range: tuple[float, float] | None = None) -> Claim:
    """The step's achieved rate against the dense matmul benchmark. A yardstick the step beats is no
    ceiling: then no share is given (``beaten``); otherwise the share of it (``ceiling``). ``achieved_range``:
    the step's lowest and highest rate over its rounds; with it the share is given as the range those allow,
    no single percentage (the step's median is one of several settings the rounds may not tell apart)."""
    if not achieved_tflops or not matmul_tflops:
        return Claim("matmul yardstick", "not measured", "the step or the matmul rate was not measured")
    low, high = achieved_range or (achieved_tflops, achieved_tflops)
    numbers = f"{what} reached {achieved_tflops:.3f} TFLOP/s"
    if achieved_range:
        numbers += f" ({low:.3f}-{high:.3f} over its rounds)"
    numbers += f", the dense matmul benchmark {matmul_tflops:.3f}"
    if share_of_matmul(high, matmul_tflops) is None:
        rounds = "" if not achieved_range else " in its fastest round"
        return Claim("matmul yardstick", "beaten", f"{numbers}: the step beat the benchmark{rounds}, so that benchmark "
                     "is no ceiling on this device and no share of it is given ("
                     + likely_cause("the benchmark ran on fewer threads or under more load than the step") + ")")
    if not achieved_range:
        return Claim("matmul yardstick", "ceiling",
                     f"{numbers}: {100 * share_of_matmul(achieved_tflops, matmul_tflops):.0f}% of the matmul rate")
    return Claim("matmul yardstick", "ceiling", f"{numbers}: between {100 * low / matmul_tflops:.0f}% and "
                 f"{100 * high / matmul_tflops:.0f}% of the matmul rate (the step's range over its rounds; the matmul "
                 "rate measured once)")


# --------------------------------------------------------------------------- notebook 02
def workers_scaling(loader_records: list[dict], cores: int | None = None) -> Claim:
    """How loader throughput changes with DataLoader workers: ``grows`` (at every step), ``stops
    growing`` (grows up to the fastest count, then not), ``uneven`` (the fastest count beats 0 workers
    but not every step grows), ``falls``, ``matters little`` or not distinguishable here."""
    rows = sorted(((r["workers"], Spread.from_record(r)) for r in loader_records
                   if r.get("status") == "ok" and r.get("pipeline", "cpu-dataloader") == "cpu-dataloader"),
                  key=lambda x: x[0])
    if len(rows) < 2:
        return Claim("workers", "not measured", "fewer than two worker counts were measured")

    def name(count: int) -> str:
        return f"{count} worker{'s' * (count != 1)}"

    cores_text = f" on {cores} CPU cores" if cores else ""
    listed = ", ".join(f"{name(w)} {s.text()}" for w, s in rows)
    steps = [ratio_verdict(b, a, "grows", "falls") for (_, a), (_, b) in zip(rows, rows[1:], strict=False)]
    (_, base), best = rows[0], max(range(len(rows)), key=lambda i: rows[i][1].median)
    against_base = [ratio_verdict(s, base, "above", "below") for _, s in rows[1:]]
    tied = [name(rows[i][0]) for i in top_group({i: s for i, (_, s) in enumerate(rows)})[1:]]
    tie = f", not distinguishable from {' and '.join(tied)}" if tied else ""
    if all(step == "grows" for step in steps):
        verdict, text = "grows", f"loader throughput grows with every added worker{cores_text}"
    elif best > 0 and against_base[best - 1] == "above":
        factor = f"{_ratio_text(rows[best][1], base)} {name(rows[0][0])}{tie}"
        if all(step == "grows" for step in steps[:best]):
            verdict = "stops growing"
            text = (f"loader throughput grows up to {name(rows[best][0])} ({factor}), then {steps[best]}"
                    f"{cores_text}")
        else:
            verdict = "uneven"
            changes = "; ".join(f"{a} -> {name(b)}: {step}"
                                for (a, _), (b, _), step in zip(rows, rows[1:], steps, strict=False))
            text = (f"the loader's highest median is {name(rows[best][0])} ({factor}){cores_text}, but not every "
                    "added "
                    f"worker helps ({changes})")
    elif "below" in against_base and "above" not in against_base:
        verdict, text = "falls", (f"adding workers made the loader slower{cores_text} ("
                                  + likely_cause("the workers and this process take turns on the same cores") + ")")
    elif all(v == "matters little" for v in against_base):
        verdict = "matters little"
        text = f"the number of workers changed loader throughput by less than 10%{cores_text}"
    else:
        verdict, text = NOT_DISTINGUISHABLE, f"loader throughput against workers is {NOT_DISTINGUISHABLE}{cores_text}"
    return Claim("workers", verdict, f"{text} ({listed} img/s; median and range)")


def data_wait(model: Spread | None, pipelines: dict, wait_fraction: float | None = None) -> Claim:
    """Is the device waiting for data? The model's speed against the fastest input pipelines
    (``{name: Spread}``): those not distinguishable from the highest median are named together, and
    the ratio is given with the range the two ranges allow."""
    pipelines = {name: spread for name, spread in pipelines.items() if spread is not None}
    if model is None or not pipelines:
        return Claim("waiting for data", "not measured", "the model or the loader could not be measured here")
    top = top_group(pipelines)
    best = pipelines[top[0]]
    who = (f"the fastest input pipeline ({top[0]})" if len(top) == 1 else
           f"the fastest input pipelines ({', '.join(top)}: not distinguishable from each other; highest median "
           f"{top[0]})")
    verb = "delivers" if len(top) == 1 else "deliver"
    numbers = f"the model trains at {model.text()} img/s, {who} {verb} {best.text()}"
    waited = "" if wait_fraction is None else (f"; fed from the files, the trainer waited for data "
                                               f"{100 * wait_fraction:.0f}% of the time")
    below = [distinguishable(model, pipelines[n]) and pipelines[n].median < model.median for n in top]
    above = [distinguishable(model, pipelines[n]) and pipelines[n].median > model.median for n in top]
    if all(below):
        return Claim("waiting for data", "waits", f"the device waits for data: {numbers}, "
                     f"{_ratio_text(model, best)} less{waited}")
    if all(above):
        return Claim("waiting for data", "keeps up", f"the input pipeline keeps up, the model is the slow part: "
                     f"{numbers} ({_ratio_text(best, model)} more){waited}")
    return Claim("waiting for data", NOT_DISTINGUISHABLE,
                 f"whether the device waits for data is {NOT_DISTINGUISHABLE}: {numbers}{waited}")


def model_vs_files(model: Spread | None, from_files: Spread | None) -> Claim:
    """Consistency: the trainer fed from JPEG files cannot beat the same step on ready batches."""
    if model is None or from_files is None:
        return Claim("model vs files", "not measured", "the model alone or the trainer on files was not measured")
    if from_files.low > model.high:
        return Claim("model vs files", "inconsistent",
                     f"the trainer fed from files ({from_files.text()} img/s) measured faster than the model alone "
                     f"({model.text()}), which the extra work of reading files cannot explain: something else changed "
                     "between the two measurements (" + likely_cause("other work on this machine, its clock speed")
                     + "); rerun them")
    numbers = f"the trainer fed from files runs at {from_files.text()} img/s, the model alone at {model.text()}"
    if from_files.high < model.low:
        return Claim("model vs files", "slower", f"{numbers}: the input pipeline costs step time even when it "
                     "does not keep the step waiting ("
                     + likely_cause("where cores are few, its work takes them from the training step") + ")")
    return Claim("model vs files", "consistent", numbers)


def input_pipelines(cpu: Spread | None, gpu: Spread | None, cpu_wait: float | None = None,
                    gpu_wait: float | None = None, workers: int | None = None) -> Claim:
    """The trainer fed by CPU workers against the trainer fed by the GPU input pipeline, same settings."""
    if cpu is None or gpu is None:
        return Claim("input pipelines", "not measured", "the two input pipelines were not both measured here "
                     "(the GPU pipeline needs a CUDA GPU)")
    waits = "" if cpu_wait is None or gpu_wait is None else (
        f"; waiting for data {100 * cpu_wait:.0f}% of the time with CPU workers, {100 * gpu_wait:.0f}% with the "
        "GPU pipeline")
    who = f"{workers} CPU worker{'s' * (workers != 1)}" if workers is not None else "CPU workers"
    numbers = f"fed by {who} the trainer runs at {cpu.text()} img/s, fed by the GPU pipeline at {gpu.text()}{waits}"
    verdict = ratio_verdict(gpu, cpu, "gpu pipeline faster", "cpu workers faster")
    if verdict == "gpu pipeline faster":
        sentence = f"decoding on the GPU speeds the trainer up {_ratio_text(gpu, cpu)}: {numbers}"
    elif verdict == "cpu workers faster":
        sentence = (f"the CPU workers feed the trainer faster here ({_ratio_text(cpu, gpu)}): {numbers}; "
                    + likely_cause("the GPU pipeline's decoding takes GPU time from the training step"))
    else:
        sentence = f"the two input pipelines {verdict}: {numbers}"
    return Claim("input pipelines", verdict, sentence)


# The HAL benchmark's (reference 000) shared file system in its 64-GPU run (epochs 10-60; scaling.presets "hal")
REFERENCE_FS = {"gb_per_sec": 3.3, "kiops": 36.5, "gpus": 64}


def _seconds(spread: Spread) -> str:
    """A spread of seconds with at least three decimals and three significant digits (a read of a small set
    from the page cache takes well under a millisecond)."""
    digits = 3 if spread.median <= 0 else max(3, 2 - math.floor(math.log10(spread.median)))
    return spread.text(digits)


def staging_effect(copy_s: Spread | None, shared_s: Spread | None, staged_s: Spread | None, images: int,
                   same_file_system: bool = True) -> Claim:
    """What staging costs (the copy of ``images`` files, seconds) and saves (seconds to read every file once
    from where the data is vs from the node-local copy), beside the HAL benchmark's (reference 000)
    file-system load. Where both places are one file system (``same_file_system``) the two reads come from
    the same disk (and, likely, its page cache), so their difference is no saving whatever the ranges: verdict
    ``cannot decide here``, and no saving or payback is computed."""
    if copy_s is None or shared_s is None or staged_s is None:
        return Claim("staging", "not measured", "staging was not measured here")
    ref = REFERENCE_FS
    per_gpu = (f"the HAL benchmark's 64 GPUs drew {ref['gb_per_sec']} GB/s and {ref['kiops']} k IOPS from the shared "
               f"file system, {ref['gb_per_sec'] * 1e3 / ref['gpus']:.0f} MB/s and "
               f"{ref['kiops'] * 1e3 / ref['gpus']:.0f} reads/s per GPU, every epoch (published, not measured "
               "here); a staged copy takes that load off it after one copy per node")
    numbers = (f"copying {images:,} image files (train/ and val/) took {_seconds(copy_s)} s; reading all of them "
               f"once took {_seconds(shared_s)} s from where they are and {_seconds(staged_s)} s from the copy")
    if same_file_system:
        return Claim("staging", CANNOT_DECIDE,
                     f"{numbers}: both places are the same disk of this machine, so the difference between the two "
                     "reads is no saving staging could make (" + likely_cause("the files sit in its page cache after "
                     "their first read") + "): what staging saves cannot be decided here, only what the copy "
                     "costs. A parallel file system's costs (metadata "
                     "requests queued behind other jobs, many nodes sharing its bandwidth) cannot happen on one "
                     f"disk; {per_gpu}.")
    if distinguishable(shared_s, staged_s) and staged_s.high < shared_s.low:
        saved = shared_s.median - staged_s.median
        verdict = "staged faster"
        sentence = (f"{numbers}: the copy saves {saved:.3g} s per epoch and pays for itself after "
                    f"{copy_s.median / saved:.1f} epochs; {per_gpu}.")
    elif distinguishable(shared_s, staged_s):
        verdict = "staged slower"
        sentence = f"{numbers}: reading the copy was slower here, so staging only cost time on this machine; {per_gpu}."
    else:
        verdict = NOT_DISTINGUISHABLE
        sentence = f"{numbers}: the two reads are {NOT_DISTINGUISHABLE}, so here the copy is pure cost; {per_gpu}."
    return Claim("staging", verdict, sentence)
