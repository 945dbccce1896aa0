"""Every claim a notebook prints reverses when its numbers do (issue 30, Deliver 4).

For each public function that returns a :class:`tutorial_lib.text.claims.Claim` (or a list of them) there is a
``test_<function>_reverses`` here or in another ``tests/test_claim_reversal*.py`` file (the coverage test at the
end finds the functions in the source and fails for one without its test). Each feeds numbers shaped like a
real run's, then the same numbers with the comparison reversed (the two sides swapped, a ratio inverted), and
checks that the verdict reverses, or says "not distinguishable here" / "matters little" where the ranges
overlap or lie within 10%; overlapping ranges never rank. A function that compares one number against a
threshold (no two sides to swap) is checked crossing the threshold both ways. The sentences must carry the
numbers fed, never a stale one. Hypothesis generates the Spreads where a hand-picked pair would miss the edges.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

from hypothesis import example, given, settings
from hypothesis import strategies as st

from tutorial_lib.bench.timing import Spread, distinguishable, store
from tutorial_lib.text import claims, verdicts
from tutorial_lib.text.claims import NOT_DISTINGUISHABLE

ROOT = Path(__file__).resolve().parents[1]
UNRANKED = {NOT_DISTINGUISHABLE, "matters little"}
SPREAD_IN_TEXT = re.compile(r"-?[\d,]+\.\d+ \(-?[\d,]+\.\d+--?[\d,]+\.\d+\)")


@st.composite
def spreads(draw, low=1.0, high=1000.0, min_width=0.0):
    """A measured speed: median and a range of up to -50%/+50% around it (as interleaved rounds give); with
    ``min_width`` the range is never a single point (more than one round)."""
    median = draw(st.floats(low, high))
    below, above = draw(st.floats(0, 0.5)), draw(st.floats(min_width, 0.5))
    return Spread(median, median * (1 - below), median * (1 + above))


GENERATED = settings(max_examples=60, deadline=None)


@st.composite
def overlapping(draw, count: int):
    """``count`` Spreads whose ranges all contain one common value: no two of them can be told apart."""
    common = draw(st.floats(1.0, 1000.0))
    out = []
    for _ in range(count):
        median = common * draw(st.floats(0.7, 1.3))
        low, high = min(median, common), max(median, common)
        out.append(Spread(median, low * (1 - draw(st.floats(0, 0.3))), high * (1 + draw(st.floats(0, 0.3)))))
    return out


def beyond_little(a: Spread, b: Spread) -> bool:
    """The medians differ by more than the 10% within which a speed "matters little", either way round."""
    ratio = a.median / b.median
    return max(ratio, 1 / ratio) > 1 + claims.LITTLE


def check_reverses(ab: str, ba: str, a: Spread, b: Spread, up: str, down: str, band: bool = True) -> None:
    """``ab``: the verdict for ``a`` against ``b`` (``up`` where ``a`` is higher); ``ba``: for the sides swapped.

    Overlapping ranges never rank; separated ranges beyond 10% rank ``a`` and ``b`` the right way round in both;
    within 10% (``band``: the function has the "matters little" band) neither ranks."""
    ranks = {up, down}
    if not distinguishable(a, b):
        assert ab not in ranks and ba not in ranks, (ab, ba, a, b)
    elif beyond_little(a, b):
        assert (ab, ba) == ((up, down) if a.median > b.median else (down, up)), (ab, ba, a, b)
    elif band:
        assert ab in UNRANKED and ba in UNRANKED, (ab, ba, a, b)
    else:
        assert ab not in ranks or {ab, ba} == ranks, (ab, ba, a, b)


def only_fed_numbers(sentence: str, *fed: Spread) -> None:
    """Every ``median (low-high)`` in the sentence is one of the Spreads fed, to the digits shown: no stale number."""
    found = SPREAD_IN_TEXT.findall(sentence)
    assert found, sentence

    def shows(text: str, spread: Spread) -> bool:
        # each number shown, with the decimals it shows: it must be the fed value rounded to those
        numbers = re.findall(r"(?<![\d.])-?[\d,]+\.\d+", text)
        shown = [(float(v.replace(",", "")), len(v.split(".")[1])) for v in numbers]
        return all(abs(value - exact) <= 0.5 * 10 ** -places + 1e-12
                   for (value, places), exact in zip(shown, (spread.median, spread.low, spread.high), strict=True))

    stale = [text for text in found if not any(shows(text, spread) for spread in fed)]
    assert not stale, (stale, [s.text() for s in fed])


def train(precision: str, spread: Spread, channels_last: bool = False) -> dict:
    record = {"kind": "train", "status": "ok", "precision": precision, "channels_last": channels_last,
              "compile": "none"}
    return store(record, "images_per_sec", Spread(spread.median, spread.low, spread.high, (spread.median,)))


def loader(workers: int, spread: Spread) -> dict:
    record = {"kind": "data", "status": "ok", "pipeline": "cpu-dataloader", "workers": workers}
    return store(record, "images_per_sec", Spread(spread.median, spread.low, spread.high, (spread.median,)))


# A loaded 2-core run's speeds (img/s; tests/test_claims.py's records): a clear gap and an overlap
SLOW, FAST = Spread.of([80, 85, 90]), Spread.of([160, 170, 175])
WIDE_A, WIDE_B = Spread.of([80, 95, 120]), Spread.of([90, 140, 100])


# --------------------------------------------------------------------------- the shared verdict
@GENERATED
@given(spreads(), spreads())
@example(Spread(1.0, 1.0, 1.0), Spread(1.1, 1.1, 1.1))
def test_ratio_verdict_is_symmetric_when_the_sides_swap(a, b):
    """The 10% band is the same either way round: 0.9x and 1.11x are one pair seen from its two sides."""
    check_reverses(claims.ratio_verdict(a, b, "up", "down"), claims.ratio_verdict(b, a, "up", "down"), a, b,
                   "up", "down")


def test_ratio_verdict_band_holds_for_a_pair_and_its_reverse():
    """Found by the reversal test: 90 against 100 "mattered little" (0.90x) while 100 against 90 "helped"
    (1.11x); the band is now 1/1.1..1.1, so both sides say the same."""
    a, b = Spread.of([90, 90.5]), Spread.of([100, 100.5])
    assert (claims.ratio_verdict(a, b, "up", "down"), claims.ratio_verdict(b, a, "up", "down")) == ("down", "up")
    near, base = Spread.of([91, 91.5]), Spread.of([99.5, 100])
    assert claims.ratio_verdict(near, base, "up", "down") == claims.ratio_verdict(base, near, "up", "down") == \
        "matters little"


# --------------------------------------------------------------------------- notebook 01
def test_fastest_setting_reverses():
    faster = claims.fastest_setting([train("fp32", SLOW), train("bf16", FAST)])
    reversed_ = claims.fastest_setting([train("fp32", FAST), train("bf16", SLOW)])
    assert faster.verdict == "faster" and faster.sentence.startswith("bf16 is the fastest here")
    assert reversed_.verdict == "fp32" and reversed_.sentence.startswith("fp32 is the fastest here")
    only_fed_numbers(faster.sentence, SLOW, FAST)
    only_fed_numbers(reversed_.sentence, SLOW, FAST)
    tied = claims.fastest_setting([train("fp32", WIDE_A), train("bf16", WIDE_B)])
    assert tied.verdict == NOT_DISTINGUISHABLE and "fastest settings are not distinguishable" in tied.sentence


@GENERATED
@given(spreads(), spreads())
def test_fastest_setting_ranks_only_separated_ranges(fp32, bf16):
    ab = claims.fastest_setting([train("fp32", fp32), train("bf16", bf16)])
    ba = claims.fastest_setting([train("fp32", bf16), train("bf16", fp32)])
    # "faster": bf16 above fp32; "fp32": fp32 on top; fastest_setting has no 10% band (ranges decide)
    check_reverses(ab.verdict, ba.verdict, bf16, fp32, "faster", "fp32", band=False)
    if distinguishable(fp32, bf16):
        assert {ab.verdict, ba.verdict} == {"faster", "fp32"}
    only_fed_numbers(ab.sentence, fp32, bf16)


def test_channels_last_effect_reverses():
    helps = claims.channels_last_effect([train("fp32", SLOW), train("fp32", FAST, channels_last=True)])
    hurts = claims.channels_last_effect([train("fp32", FAST), train("fp32", SLOW, channels_last=True)])
    assert (helps.verdict, hurts.verdict) == ("helps", "hurts")
    assert "2.00x" in helps.sentence and "0.50x" in hurts.sentence
    only_fed_numbers(helps.sentence, SLOW, FAST)
    only_fed_numbers(hurts.sentence, SLOW, FAST)


@GENERATED
@given(spreads(), spreads())
def test_channels_last_effect_never_ranks_overlapping_ranges(without, with_cl):
    ab = claims.channels_last_effect([train("bf16", without), train("bf16", with_cl, channels_last=True)])
    ba = claims.channels_last_effect([train("bf16", with_cl), train("bf16", without, channels_last=True)])
    check_reverses(ab.verdict, ba.verdict, with_cl, without, "helps", "hurts")
    only_fed_numbers(ab.sentence, without, with_cl)


def test_precision_accuracy_reverses():
    """One run per precision: no sides to rank, a gap against a threshold; swapping the runs changes nothing,
    crossing the threshold either way changes the verdict, and the sentence lists the top-1 fed."""
    same = claims.precision_accuracy({"fp32": 91.2, "bf16": 88.4}, tolerance_points=5.0)
    swapped = claims.precision_accuracy({"fp32": 88.4, "bf16": 91.2}, tolerance_points=5.0)
    assert same.verdict == swapped.verdict == "same"
    assert "fp32 91.2%, bf16 88.4%" in same.sentence and "fp32 88.4%, bf16 91.2%" in swapped.sentence
    assert claims.precision_accuracy({"fp32": 91.2, "bf16": 86.1}, tolerance_points=5.0).verdict == "differs"
    assert claims.precision_accuracy({"fp32": 91.2, "bf16": 86.1}, tolerance_points=5.2).verdict == "same"
    assert claims.precision_accuracy({"fp32": 91.2, "bf16": 20.0}, chance=10.0).verdict == "differs"
    assert claims.precision_accuracy({"fp32": 91.2, "bf16": 19.9}, chance=10.0).verdict == "near chance"


@GENERATED
@given(spreads(), spreads())
def test_benchmark_vs_jobs_reverses(benchmark, jobs):
    """Agreement is symmetric: swapping benchmark and jobs keeps the verdict; overlapping ranges never
    "differ", separated ones never "agree"."""
    ab = claims.benchmark_vs_jobs({"fp32": benchmark}, {"fp32": jobs})
    ba = claims.benchmark_vs_jobs({"fp32": jobs}, {"fp32": benchmark})
    assert ab.verdict == ba.verdict
    assert (ab.verdict == "agree") == (not distinguishable(benchmark, jobs))
    only_fed_numbers(ab.sentence, benchmark, jobs)


def test_benchmark_vs_jobs_names_each_precision_with_its_own_numbers():
    claim = claims.benchmark_vs_jobs({"fp32": WIDE_A, "bf16": FAST}, {"fp32": WIDE_B, "bf16": SLOW})
    parts = {m.group(1): m.group(2) for m in re.finditer(r"(fp32|bf16): ([^;]*)", claim.sentence)}
    assert set(SPREAD_IN_TEXT.findall(parts["fp32"])) == {WIDE_A.text(), WIDE_B.text()}
    assert set(SPREAD_IN_TEXT.findall(parts["bf16"])) == {FAST.text(), SLOW.text()}


def test_matmul_yardstick_reverses():
    """The step against the matmul rate: below it, a share; swap the two and the benchmark is beaten."""
    ceiling = claims.matmul_yardstick(0.020, 0.040)
    beaten = claims.matmul_yardstick(0.040, 0.020)
    assert (ceiling.verdict, beaten.verdict) == ("ceiling", "beaten")
    assert "50% of the matmul rate" in ceiling.sentence and "%" not in beaten.sentence
    assert "reached 0.020 TFLOP/s, the dense matmul benchmark 0.040" in ceiling.sentence
    assert "reached 0.040 TFLOP/s, the dense matmul benchmark 0.020" in beaten.sentence


# --------------------------------------------------------------------------- notebook 02
def test_workers_scaling_reverses():
    rows = [Spread.of([110, 124, 130]), Spread.of([300, 320, 360]), Spread.of([540, 573, 600])]
    grows = claims.workers_scaling([loader(w, s) for w, s in enumerate(rows)], cores=2)
    falls = claims.workers_scaling([loader(w, s) for w, s in enumerate(reversed(rows))], cores=2)
    assert (grows.verdict, falls.verdict) == ("grows", "falls")
    assert "grows with every added worker on 2 CPU cores" in grows.sentence
    assert "made the loader slower on 2 CPU cores" in falls.sentence
    only_fed_numbers(grows.sentence, *rows)
    only_fed_numbers(falls.sentence, *rows)


@GENERATED
@given(spreads(), spreads())
def test_workers_scaling_two_counts_reverse_or_stay_undecided(none, one):
    ab = claims.workers_scaling([loader(0, none), loader(1, one)])
    ba = claims.workers_scaling([loader(0, one), loader(1, none)])
    check_reverses(ab.verdict, ba.verdict, one, none, "grows", "falls")
    only_fed_numbers(ab.sentence, none, one)


@GENERATED
@given(spreads(), spreads())
def test_data_wait_reverses(model, pipeline):
    ab = claims.data_wait(model, {"2 workers": pipeline})
    ba = claims.data_wait(pipeline, {"2 workers": model})
    # "waits": the model is faster than the pipeline feeding it; data_wait ranks on ranges alone
    check_reverses(ab.verdict, ba.verdict, model, pipeline, "waits", "keeps up", band=False)
    if distinguishable(model, pipeline):
        assert {ab.verdict, ba.verdict} == {"waits", "keeps up"}
    only_fed_numbers(ab.sentence, model, pipeline)


def test_model_vs_files_reverses():
    """The trainer on files below the model alone is "slower"; swapped, it is impossible ("inconsistent")."""
    model, files = Spread.of([14, 15, 16]), Spread.of([1.0, 1.2, 1.5])
    slower, inconsistent = claims.model_vs_files(model, files), claims.model_vs_files(files, model)
    assert (slower.verdict, inconsistent.verdict) == ("slower", "inconsistent")
    only_fed_numbers(slower.sentence, model, files)
    only_fed_numbers(inconsistent.sentence, model, files)


@GENERATED
@given(spreads(), spreads())
def test_model_vs_files_overlap_is_consistent(model, files):
    ab, ba = claims.model_vs_files(model, files), claims.model_vs_files(files, model)
    check_reverses(ab.verdict, ba.verdict, model, files, "slower", "inconsistent", band=False)
    if not distinguishable(model, files):
        assert ab.verdict == ba.verdict == "consistent"


@GENERATED
@given(spreads(), spreads())
def test_input_pipelines_reverses(cpu, gpu):
    ab = claims.input_pipelines(cpu, gpu, workers=4)
    ba = claims.input_pipelines(gpu, cpu, workers=4)
    check_reverses(ab.verdict, ba.verdict, gpu, cpu, "gpu pipeline faster", "cpu workers faster")
    only_fed_numbers(ab.sentence, cpu, gpu)
    if ab.verdict == "gpu pipeline faster":
        assert ab.sentence.startswith("decoding on the GPU speeds the trainer up")
    if ab.verdict == "cpu workers faster":
        assert ab.sentence.startswith("the CPU workers feed the trainer faster")


def test_staging_effect_reverses():
    """Reading the staged copy faster than the shared files, then the two reads swapped."""
    copy, shared, staged = Spread.of([2.69, 2.71, 2.75]), Spread.of([0.19, 0.2, 0.21]), Spread.of([0.05, 0.06, 0.07])
    # a node-local disk apart from the shared file system (on one disk the two reads cannot rank the places)
    faster = claims.staging_effect(copy, shared, staged, 1121, same_file_system=False)
    slower = claims.staging_effect(copy, staged, shared, 1121, same_file_system=False)
    assert faster.verdict == "staged faster" and slower.verdict == "staged slower"
    assert "copying 1,121 image" in faster.sentence
    only_fed_numbers(faster.sentence, copy, shared, staged)
    only_fed_numbers(slower.sentence, copy, shared, staged)


@GENERATED
@given(spreads(0.01, 10), spreads(0.01, 10))
def test_staging_effect_never_ranks_overlapping_reads(shared, staged):
    copy = Spread.of([2.0])
    ab = claims.staging_effect(copy, shared, staged, 64, same_file_system=False)
    ba = claims.staging_effect(copy, staged, shared, 64, same_file_system=False)
    # seconds: lower is faster, so "staged faster" is shared above staged
    check_reverses(ab.verdict, ba.verdict, shared, staged, "staged faster", "staged slower", band=False)


# --------------------------------------------------------------------------- overlapping ranges never rank
@GENERATED
@given(overlapping(4))
def test_overlapping_ranges_never_rank_in_any_speed_claim(spread):
    """Every speed claim over several settings, fed ranges that all overlap: no winner, no direction."""
    a, b, c, d = spread
    fastest = claims.fastest_setting([train("fp32", a), train("bf16", b), train("bf16", c, True)])
    assert fastest.verdict == NOT_DISTINGUISHABLE, fastest
    layout = claims.channels_last_effect([train("fp32", a), train("fp32", b, True), train("bf16", c),
                                          train("bf16", d, True)])
    assert layout.verdict in UNRANKED, layout
    workers = claims.workers_scaling([loader(w, s) for w, s in enumerate(spread)])
    assert workers.verdict in UNRANKED, workers
    assert claims.data_wait(a, {"cpu": b, "gpu": c}).verdict == NOT_DISTINGUISHABLE
    assert claims.input_pipelines(a, b).verdict in UNRANKED
    assert claims.model_vs_files(a, b).verdict == "consistent"
    assert claims.staging_effect(Spread.of([1.0]), a, b, 64, same_file_system=False).verdict in UNRANKED
    rows = [{"rate_mbit": 200, "bytes": n, "flat": f, "hierarchical": h} for n, f, h in ((2**16, a, b), (2**20, c, d))]
    assert verdicts.hierarchical_vs_flat(rows).verdict in UNRANKED


# --------------------------------------------------------------------------- runs and models (verdicts.py)
def test_training_outcome_reverses():
    """A falling loss and top-1 far above chance learns; the same losses in reverse order diverge; top-1 below
    twice chance is near chance, between that and halfway to 100% is above chance."""
    learns = verdicts.training_outcome("run", 94.4, 10, [2.30, 1.10, 0.40])
    rising = verdicts.training_outcome("run", 94.4, 10, [0.40, 1.10, 2.30])
    assert (learns.verdict, rising.verdict) == ("learns", "diverged")
    assert "mean train loss of epoch 1 -> epoch 3: 2.30 -> 0.40" in learns.sentence
    assert "mean train loss of epoch 1 -> epoch 3: 0.40 -> 2.30" in rising.sentence
    assert verdicts.training_outcome("run", 94.4, 10, [2.3, 0.4], step_losses=[float("inf")]).verdict == "diverged"
    assert verdicts.training_outcome("run", 19.9, 10, [2.3, 2.2]).verdict == "near chance"
    assert verdicts.training_outcome("run", 20.0, 10, [2.3, 2.2]).verdict == "above chance"
    assert verdicts.training_outcome("run", 54.9, 10, [2.3, 2.2]).verdict == "above chance"
    assert verdicts.training_outcome("run", 55.0, 10, [2.3, 2.2]).verdict == "learns"
    assert "top-1 55.0% against 10.0% for guessing" in verdicts.training_outcome("run", 55.0, 10, [2.3]).sentence


def test_runs_learn_reverses():
    good = verdicts.training_outcome("a", 94.4, 10, [2.3, 0.4])
    bad = verdicts.training_outcome("b", 14.2, 10, [2.3, 2.2])
    assert verdicts.runs_learn([good, good]).verdict == "every run learns"
    mixed = verdicts.runs_learn([good, bad])
    assert mixed.verdict == "not every run learns" and mixed.sentence.startswith("1 of 2 runs did not learn")
    assert "top-1 14.2%" in mixed.sentence and "top-1 94.4%" in mixed.sentence


def test_projection_flat_reverses():
    """Flat at 99.5% or more, falling below it; the sentence gives the lowest projected value fed."""
    flat = verdicts.projection_flat([100.0, 99.8, 99.5], 64, 70.2, 51.9, 2, unit="CPU ranks")
    falls = verdicts.projection_flat([100.0, 99.8, 99.4], 64, 70.2, 51.9, 2, unit="CPU ranks")
    assert (flat.verdict, falls.verdict) == ("flat", "falls")
    assert "99.5% or more" in flat.sentence and "projects 99.4% at 64 " in falls.sentence
    assert "70.2 img/s per rank" in falls.sentence and "measured 51.9% at 2 CPU ranks" in falls.sentence


# staleness_effect's reversal test is in tests/test_claim_reversal_0607.py (it takes whole runs).


def test_fit_quality_reverses():
    """Errors against thresholds (10%/25%, 35%): each crossed both ways, and the sentence gives the errors fed."""
    assert verdicts.fit_quality(0.10, 0.25).verdict == "reproduces"
    assert verdicts.fit_quality(0.11, 0.25).verdict == "rough"
    assert verdicts.fit_quality(0.10, 0.26).verdict == "rough"
    assert verdicts.fit_quality(0.35, 0.9).verdict == "rough"
    assert verdicts.fit_quality(0.36, 0.9).verdict == "does not fit"
    assert "median error 36%, largest 90%" in verdicts.fit_quality(0.36, 0.9).sentence


def test_hierarchical_vs_flat_reverses():
    sizes = (65536, 1048576, 4194304)
    slow, fast = Spread.of([0.010, 0.011, 0.012]), Spread.of([0.020, 0.021, 0.023])
    rows = [{"rate_mbit": 200, "bytes": n, "flat": slow, "hierarchical": fast} for n in sizes]
    swapped = [{**r, "flat": r["hierarchical"], "hierarchical": r["flat"]} for r in rows]
    wins, loses = verdicts.hierarchical_vs_flat(rows), verdicts.hierarchical_vs_flat(swapped)
    assert (wins.verdict, loses.verdict) == ("wins", "loses")
    assert "faster at 64 KiB 1.91x" in wins.sentence and "slower at 64 KiB 0.52x" in loses.sentence
    # larger messages only: wins there, and reversed it is no longer a win anywhere
    large = [dict(r, hierarchical=slow if r["bytes"] == sizes[0] else fast) for r in rows]
    assert verdicts.hierarchical_vs_flat(large).verdict == "wins at large messages"
    large_swapped = [{**r, "flat": r["hierarchical"], "hierarchical": r["flat"]} for r in large]
    assert verdicts.hierarchical_vs_flat(large_swapped).verdict in ("mixed", "loses")


@GENERATED
@given(spreads(min_width=0.001), spreads(min_width=0.001))
def test_hierarchical_vs_flat_one_size_reverses_or_stays_undecided(flat, hierarchical):
    def verdict(f, h):
        return verdicts.hierarchical_vs_flat([{"rate_mbit": 200, "bytes": 2**20, "flat": f,
                                               "hierarchical": h}]).verdict

    check_reverses(verdict(flat, hierarchical), verdict(hierarchical, flat), hierarchical, flat, "wins", "loses")


def test_model_error_reverses():
    """Inside the limit or not (crossed both ways); a negated error keeps the verdict and flips the sign shown."""
    over = {"flat 64 KiB": 0.30, "flat 1 MiB": 0.05, "hierarchical 1 MiB": -0.10}
    under = {k: -v for k, v in over.items()}
    assert verdicts.model_error(over).verdict == verdicts.model_error(under).verdict == "off"
    assert "largest +30% (flat 64 KiB)" in verdicts.model_error(over).sentence
    assert "largest -30% (flat 64 KiB)" in verdicts.model_error(under).sentence
    assert "median 10%" in verdicts.model_error(over).sentence
    assert verdicts.model_error(over, limit=0.30).verdict == "within"
    assert verdicts.model_error(over, limit=0.29).verdict == "off"


# --------------------------------------------------------------------------- analyses that return claims
def netlab_records() -> list[dict]:
    from tutorial_lib.bench.records import read_records

    return read_records(ROOT / "results" / "netlab_allreduce.jsonl", kind="allreduce")


def test_closing_claims_reverses():
    """The recorded two-level run (results/netlab_allreduce.jsonl), then the same records with the flat and
    hierarchical results swapped: every size that hierarchical won it now loses, and the other way round; a size
    within 10% or not distinguishable stays so."""
    from tutorial_lib.analyses import twolevel

    records = netlab_records()
    swapped = json.loads(json.dumps(records))
    for record in swapped:
        for result in record["results"]:
            result["algorithm"] = {"flat": "hierarchical", "hierarchical": "flat"}[result["algorithm"]]
    recorded, reversed_ = twolevel.closing_claims(records)[0], twolevel.closing_claims(swapped)[0]

    def said(sentence: str) -> dict:
        """``{(rate, size): word}`` from "at 200 Mbit/s hierarchical is faster at 4 MiB 1.28x, ...; slower at..."."""
        out = {}
        for rate, rest in re.findall(r"at (\d+) Mbit/s hierarchical is (.*?)(?=; at \d+ Mbit/s|\(bus)", sentence):
            for word, sizes in re.findall(r"(faster|slower|within 10%|not distinguishable here) at (.*?)(?:;|$)",
                                          rest):
                for size in re.findall(r"([\d.]+ [KMG]?i?B) [\d.]+x", sizes):
                    out[(rate, size)] = word
        return out

    before, after = said(recorded.sentence), said(reversed_.sentence)
    assert before and before.keys() == after.keys()
    flip = {"faster": "slower", "slower": "faster"}
    for key, word in before.items():  # within 10% and not distinguishable stay what they were
        assert after[key] == flip.get(word, word), (key, word, after[key])
    assert {"faster", "slower"} <= set(before.values())


def test_outcome_reverses(tmp_path):
    """A run directory whose loss falls and whose top-1 is far above chance learns; the same epochs with the
    losses in reverse order diverged."""
    from tutorial_lib.analyses import analysis
    from tutorial_lib.rundir.layout import CONFIG_FILE, METRICS_FILE

    def run(name: str, losses: list, top1: float) -> Path:
        run_dir = tmp_path / name
        run_dir.mkdir()
        (run_dir / CONFIG_FILE).write_text(json.dumps({"num_classes": 10, "dataset": "digits"}))
        (run_dir / METRICS_FILE).write_text("".join(
            json.dumps({"event": "epoch", "epoch": i, "train_loss": loss, "top1": top1}) + "\n"
            for i, loss in enumerate(losses)))
        return run_dir

    learns = analysis.outcome(run("falls", [2.1, 0.9, 0.3], 97.5))
    diverged = analysis.outcome(run("rises", [0.3, 0.9, 2.1], 97.5))
    near = analysis.outcome(run("chance", [2.3, 2.2, 2.1], 14.2))
    assert (learns.verdict, diverged.verdict, near.verdict) == ("learns", "diverged", "near chance")
    assert learns.topic == "falls" and "top-1 97.5%" in learns.sentence and "2.10 -> 0.30" in learns.sentence


def test_projection_claim_reverses():
    """reference.projection_claim over a projection that stays flat, then one that falls; the measured efficiency
    and the unit (CPU ranks or GPUs) come from the results fed."""
    import pandas as pd

    from tutorial_lib.analyses import reference

    def projection(efficiencies):
        return pd.DataFrame({"projected efficiency (%)": efficiencies}, index=pd.Index([1, 8, 64], name="GPUs"))

    cpu = pd.DataFrame({"gpus": [1, 2], "images_per_sec": [70.2, 72.8], "efficiency": [1.0, 0.519],
                        "on_gpu": [False, False]})
    gpu = cpu.assign(on_gpu=[True, True], efficiency=[1.0, 0.93])
    flat = reference.projection_claim(projection([100.0, 99.9, 99.6]), cpu)
    falls = reference.projection_claim(projection([100.0, 95.0, 80.0]), gpu)
    assert (flat.verdict, falls.verdict) == ("flat", "falls")
    assert "70.2 img/s per rank" in flat.sentence and "measured 51.9% at 2 CPU ranks" in flat.sentence
    assert "projects 80.0% at 64 GPUs" in falls.sentence and "measured 93.0% at 2 GPUs" in falls.sentence


# --------------------------------------------------------------------------- every claim function has its test
def _is_claim(value: ast.expr, known: set[str]) -> bool:
    """A returned value that is a Claim: a call of ``Claim`` or of a known claim function, or a list, tuple or
    comprehension of them (``str(claim(...))`` is not)."""
    if isinstance(value, ast.Call):
        func = value.func
        return (func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")) in known | {"Claim"}
    if isinstance(value, (ast.List, ast.Tuple)):
        return any(_is_claim(element, known) for element in value.elts)
    if isinstance(value, (ast.ListComp, ast.GeneratorExp)):
        return _is_claim(value.elt, known)
    return False


def _returns_claim(node: ast.FunctionDef, known: set[str]) -> bool:
    """Annotated ``-> Claim`` / ``-> list[Claim]``; or, without an annotation, returning a Claim."""
    if node.returns is not None:
        return "Claim" in ast.unparse(node.returns)
    return any(isinstance(child, ast.Return) and child.value is not None and _is_claim(child.value, known)
               for child in ast.walk(node))


def claim_functions(package: Path = ROOT / "tutorial_lib") -> dict[str, str]:
    """``{name: module path}`` of every public module-level function in the package that returns a Claim: by
    annotation, or by returning what a claim function (a private one too) returns, repeated until nothing new."""
    nodes = [(node, str(path.relative_to(package.parent))) for path in sorted(package.rglob("*.py"))
             for node in ast.parse(path.read_text(), str(path)).body if isinstance(node, ast.FunctionDef)]
    known: dict[str, str] = {}
    while new := {node.name: where for node, where in nodes
                  if node.name not in known and _returns_claim(node, set(known))}:
        known.update(new)
    return {name: where for name, where in known.items() if not name.startswith("_")}


def reversal_tests() -> set[str]:
    """The test function names in every tests/test_claim_reversal*.py file."""
    return {node.name for path in Path(__file__).parent.glob("test_claim_reversal*.py")
            for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.FunctionDef)}


def test_the_discovery_follows_annotations_and_returns(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "a.py").write_text(
        "def typed(x) -> Claim:\n    return make(x)\n\n"
        "def listed(x) -> list[claims.Claim]:\n    return [typed(x)]\n\n"
        "def _private(x):\n    return Claim('t', 'v', 's')\n\n"
        "def passes_on(x):\n    if x:\n        return None\n    return _private(x)\n\n"
        "def helper(x) -> str:\n    return str(typed(x))\n\n"
        "def plain(x):\n    return x\n")
    (package / "b.py").write_text("from pkg import a\n\ndef other(x):\n    return a.passes_on(x)\n")
    assert claim_functions(package) == {"typed": "pkg/a.py", "listed": "pkg/a.py", "passes_on": "pkg/a.py",
                                        "other": "pkg/b.py"}


def test_the_discovery_finds_the_known_claim_functions():
    found = claim_functions()
    for name in ("fastest_setting", "staging_effect", "training_outcome", "model_error", "closing_claims",
                 "outcome", "projection_claim"):
        assert name in found, name
    for helper in ("show", "ratio_verdict", "top_group", "projection_from_run"):
        assert helper not in found, helper


def test_every_claim_function_has_a_reversal_test():
    tests = reversal_tests()
    missing = [f"{where}: {name} (add test_{name}_reverses to a tests/test_claim_reversal*.py file)"
               for name, where in sorted(claim_functions().items()) if f"test_{name}_reverses" not in tests]
    assert not missing, "claim functions without a reversal test:\n" + "\n".join(missing)
