"""The sentences a notebook closes with, chosen from the numbers it measured.

A notebook's text must not contradict its own measurements. Every claim that depends on a
measured value ("grows with workers", "channels_last matters little", "the fit reproduces the
times", "the device waits for data") is made here, from the values, as a :class:`Claim`: a
machine-checkable ``verdict`` and the ``sentence`` shown to the student. Speeds come as
:class:`tutorial_lib.bench.timing.Spread` (median and range over interleaved rounds): two speeds
whose ranges overlap are "not distinguishable here", never ranked. The notebooks display these
claims and hand them to :func:`tutorial_lib.lessons.course.summarize`, so ``SUMMARY.md`` says the
same; ``tests/test_claims.py`` feeds them recorded and contradicting numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

from tutorial_lib.bench.timing import Spread, distinguishable

NOT_DISTINGUISHABLE = "not distinguishable here"
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


def show(*claims: Claim) -> None:
    """Print claims one per line (works the same in JupyterLab and papermill)."""
    for claim in claims:
        print(f"{claim.topic}: {claim.sentence}")


def _ratio_verdict(new: Spread, old: Spread, better: str, worse: str) -> str:
    ratio = new.median / old.median if old.median else float("inf")
    if abs(ratio - 1) <= LITTLE:
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
    best = max(spreads, key=lambda k: spreads[k].median)
    top = [best] + [k for k in spreads if k != best and not distinguishable(spreads[k], spreads[best])]
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
        return Claim("fastest setting", "no fp32 baseline", f"fastest here: {listed} img/s (no fp32 measurement)")
    which = _label(best) if len(top) == 1 else " and ".join(_label(k) for k in top)
    tie = "" if len(top) == 1 else " (not distinguishable from each other)"
    return Claim("fastest setting", "faster",
                 f"{which} {'is' if len(top) == 1 else 'are'} the fastest here{tie}, "
                 f"{spreads[best].median / spreads[base].median:.2f}x fp32 ({listed} vs fp32 {spreads[base].text()} "
                 "img/s; median and range over the rounds)")


def channels_last_effect(records: list[dict]) -> Claim:
    """What channels_last does to each precision's speed: helps, hurts, matters little, or not
    distinguishable here; ``helps some``/``hurts some``/``mixed`` when the precisions differ."""
    spreads = _train_spreads(records)
    parts, verdicts = [], []
    for (precision, cl, mode), (with_cl, _) in spreads.items():
        if not cl or (precision, False, mode) not in spreads:
            continue
        without = spreads[(precision, False, mode)][0]
        verdict = _ratio_verdict(with_cl, without, "helps", "hurts")
        verdicts.append(verdict)
        parts.append(f"{precision}: {with_cl.median / without.median:.2f}x ({verdict}; "
                     f"{with_cl.text()} vs {without.text()} img/s)")
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


def precision_accuracy(top1: dict, tolerance_points: float = 5.0) -> Claim:
    """Whether the training runs in different precisions ended with the same top-1 (within
    ``tolerance_points``, about what two seeds differ by in these short runs)."""
    values = {k: float(v) for k, v in top1.items() if v is not None}
    if len(values) < 2:
        return Claim("accuracy", "not measured", "fewer than two training runs finished")
    gap = max(values.values()) - min(values.values())
    listed = ", ".join(f"{k} {v:.1f}%" for k, v in values.items())
    if gap <= tolerance_points:
        return Claim("accuracy", "same", f"the precisions ended within {gap:.1f} points of each other ({listed}), "
                     f"inside this short run's noise ({tolerance_points:g} points): precision changed the speed, "
                     "not what the network learned")
    return Claim("accuracy", "differs", f"the precisions ended {gap:.1f} points apart ({listed}), more than this "
                 f"short run's noise ({tolerance_points:g} points): look at the runs before trusting a precision")


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
    steps = [_ratio_verdict(b, a, "grows", "falls") for (_, a), (_, b) in zip(rows, rows[1:], strict=False)]
    (_, base), best = rows[0], max(range(len(rows)), key=lambda i: rows[i][1].median)
    against_base = [_ratio_verdict(s, base, "above", "below") for _, s in rows[1:]]
    if all(step == "grows" for step in steps):
        verdict, text = "grows", f"loader throughput grows with every added worker{cores_text}"
    elif best > 0 and against_base[best - 1] == "above":
        factor = f"{rows[best][1].median / base.median:.2f}x {name(rows[0][0])}"
        if all(step == "grows" for step in steps[:best]):
            verdict = "stops growing"
            text = (f"loader throughput grows up to {name(rows[best][0])} ({factor}), then {steps[best]}"
                    f"{cores_text}")
        else:
            verdict = "uneven"
            changes = "; ".join(f"{a} -> {name(b)}: {step}"
                                for (a, _), (b, _), step in zip(rows, rows[1:], steps, strict=False))
            text = (f"the loader is fastest with {name(rows[best][0])} ({factor}){cores_text}, but not every added "
                    f"worker helps ({changes})")
    elif "below" in against_base and "above" not in against_base:
        verdict, text = "falls", (f"adding workers made the loader slower{cores_text}: the workers compete with "
                                  "this process for the same cores")
    elif all(v == "matters little" for v in against_base):
        verdict = "matters little"
        text = f"the number of workers changed loader throughput by less than 10%{cores_text}"
    else:
        verdict, text = NOT_DISTINGUISHABLE, f"loader throughput against workers is {NOT_DISTINGUISHABLE}{cores_text}"
    return Claim("workers", verdict, f"{text} ({listed} img/s; median and range)")


def data_wait(model: Spread | None, pipeline: Spread | None, pipeline_name: str,
              wait_fraction: float | None = None) -> Claim:
    """Is the device waiting for data? The best input pipeline's speed against the model's."""
    if model is None or pipeline is None:
        return Claim("waiting for data", "not measured", "the model or the loader could not be measured here")
    numbers = f"the model trains at {model.text()} img/s, {pipeline_name} delivers {pipeline.text()}"
    waited = "" if wait_fraction is None else (f"; fed from the files, the trainer waited for data "
                                               f"{100 * wait_fraction:.0f}% of the time")
    if not distinguishable(model, pipeline):
        return Claim("waiting for data", NOT_DISTINGUISHABLE,
                     f"whether the device waits for data is {NOT_DISTINGUISHABLE}: {numbers}{waited}")
    if pipeline.median < model.median:
        return Claim("waiting for data", "waits", f"the device waits for data: {numbers}, "
                     f"{model.median / pipeline.median:.1f}x less{waited}")
    return Claim("waiting for data", "keeps up", f"the input pipeline keeps up, the model is the slow part: "
                 f"{numbers} ({pipeline.median / model.median:.1f}x more){waited}")


def model_vs_files(model: Spread | None, from_files: Spread | None) -> Claim:
    """Consistency: the trainer fed from JPEG files cannot beat the same step on ready batches."""
    if model is None or from_files is None:
        return Claim("model vs files", "not measured", "the model alone or the trainer on files was not measured")
    if from_files.low > model.high:
        return Claim("model vs files", "inconsistent",
                     f"the trainer fed from files ({from_files.text()} img/s) measured faster than the model alone "
                     f"({model.text()}): the load on this machine changed between the measurements; rerun them")
    numbers = f"the trainer fed from files runs at {from_files.text()} img/s, the model alone at {model.text()}"
    if from_files.high < model.low:
        return Claim("model vs files", "slower", f"{numbers}: the input pipeline costs the step time even when it "
                     "does not keep it waiting, because its work competes with training for this machine's cores")
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
    verdict = _ratio_verdict(gpu, cpu, "gpu pipeline faster", "cpu workers faster")
    if verdict == "gpu pipeline faster":
        sentence = f"decoding on the GPU speeds the trainer up {gpu.median / cpu.median:.2f}x: {numbers}"
    elif verdict == "cpu workers faster":
        sentence = (f"the CPU workers feed the trainer faster here ({cpu.median / gpu.median:.2f}x): {numbers}; "
                    "the GPU pipeline's decoding competes with the training step for the GPU")
    else:
        sentence = f"the two input pipelines {verdict}: {numbers}"
    return Claim("input pipelines", verdict, sentence)


# --------------------------------------------------------------------------- notebook 07
def fit_quality(median_error: float, max_error: float) -> Claim:
    """Whether a fitted alpha-beta model reproduces the measured all-reduce times."""
    numbers = f"median error {100 * median_error:.0f}%, largest {100 * max_error:.0f}%"
    if median_error <= 0.10 and max_error <= 0.25:
        return Claim("all-reduce fit", "reproduces", f"the latency/bandwidth fit reproduces the measured times "
                     f"({numbers})")
    if median_error <= 0.35:
        return Claim("all-reduce fit", "rough", f"the fit follows the measured times only roughly ({numbers}); "
                     "on a busy machine the small messages scatter most")
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
        kinds = [_ratio_verdict(r["hierarchical"], r["flat"], "wins", "loses") for r in here]
        verdicts += kinds
        largest.append(kinds[-1])
        said = []
        for kind, word in (("wins", "faster"), ("loses", "slower"), ("matters little", "within 10%"),
                           (NOT_DISTINGUISHABLE, NOT_DISTINGUISHABLE)):
            sizes = [r for r, k in zip(here, kinds, strict=True) if k == kind]
            if sizes:
                ratios = ", ".join(f"{human_bytes(r['bytes'])} {r['hierarchical'].median / r['flat'].median:.2f}x"
                                   for r in sizes)
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
    return Claim("hierarchical all-reduce", verdict, "; ".join(parts) + " (bus bandwidth against flat; "
                 "median and range over interleaved rounds)")


def model_error(errors: dict[str, float], limit: float = 0.25) -> Claim:
    """How far the scaling model's predictions are from what was measured: ``errors`` maps a label to the
    relative error (model / measured - 1)."""
    if not errors:
        return Claim("model vs measured", "not measured", "no prediction could be compared here")
    worst = max(errors, key=lambda k: abs(errors[k]))
    within = [k for k, e in errors.items() if abs(e) <= limit]
    numbers = (f"median {100 * sorted(abs(e) for e in errors.values())[len(errors) // 2]:.0f}%, largest "
               f"{100 * errors[worst]:+.0f}% ({worst})")
    if len(within) == len(errors):
        return Claim("model vs measured", "within", f"the model, its links fitted to point-to-point times on the "
                     f"same namespaces, predicts all {len(errors)} measurements within {100 * limit:.0f}% ({numbers})")
    return Claim("model vs measured", "off", f"the model is within {100 * limit:.0f}% for {len(within)} of "
                 f"{len(errors)} measurements ({numbers})")
