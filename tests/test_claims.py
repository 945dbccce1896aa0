"""The course's closing claims against recorded numbers: a contradiction between text and numbers fails here.

Each notebook's measured claims (01: fastest setting, channels_last, accuracy; 02: workers, waiting for
data, model vs files; 07: the all-reduce fit) are chosen by :mod:`tutorial_lib.text.claims`. These
tests feed those functions the numbers of real runs, including the contradicting ones found in a
course run on a loaded 2-core machine (issue 14), and check the verdicts; then they check that the
notebooks and SUMMARY.md take their sentences from the same functions.
"""

import json
import re
from pathlib import Path

import pytest

from tutorial_lib import course
from tutorial_lib.bench.timing import Spread, compare, distinguishable, interleave, interleave_records, store
from tutorial_lib.text import claims, verdicts

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def train(precision, rates, channels_last=False):
    record = {"kind": "train", "status": "ok", "precision": precision, "channels_last": channels_last,
              "compile": "none"}
    return store(record, "images_per_sec", Spread.of(rates))


def loader(workers, rates):
    record = {"kind": "data", "status": "ok", "pipeline": "cpu-dataloader", "workers": workers}
    return store(record, "images_per_sec", Spread.of(rates))


# --------------------------------------------------------------------------- the timing machinery
def test_spread_and_distinguishable():
    a, b = Spread.of([10, 12, 11]), Spread.of([11.5, 13, 14])
    assert (a.median, a.low, a.high) == (11, 10, 12)
    assert not distinguishable(a, b) and "not distinguishable here" in compare(a, b, "a", "b")
    c = Spread.of([20, 21, 22])
    assert distinguishable(a, c) and compare(a, c, "a", "c").startswith("c is faster than a: 1.91x")


def test_interleave_takes_turns_and_rotates():
    calls = []
    spreads = interleave({name: (lambda n=name: calls.append(n) or len(calls)) for name in "abc"}, repeats=3)
    assert calls == list("abc") + list("bca") + list("cab")
    assert spreads["a"].samples == (1, 6, 8)


def test_interleave_records_keeps_a_skipped_setting_out_of_further_rounds():
    counts = {"ok": 0, "skipped": 0}

    def ok():
        counts["ok"] += 1
        return {"status": "ok", "images_per_sec": float(counts["ok"])}

    def skipped():
        counts["skipped"] += 1
        return {"status": "skipped", "reason": "needs a GPU"}

    merged = interleave_records({"ok": ok, "skipped": skipped}, repeats=3)
    assert counts == {"ok": 3, "skipped": 1}
    assert merged["ok"]["images_per_sec"] == 2 and merged["ok"]["images_per_sec_low"] == 1
    assert merged["ok"]["repeats"] == 3 and merged["skipped"]["status"] == "skipped"


# --------------------------------------------------------------------------- notebook 01
def test_01_recorded_contradiction_cannot_say_channels_last_matters_little():
    """Issue 14's run: fp32 16.8, bf16 389, bf16 + channels_last 9 img/s (one short window each),
    while the text said channels_last "matters little"."""
    records = [train("fp32", [16.8]), train("bf16", [389]), train("bf16", [9], channels_last=True)]
    claim = claims.channels_last_effect(records)
    assert claim.verdict == "hurts" and "matters little" not in claim.sentence
    assert "slows training down" in claim.sentence and "0.02x" in claim.sentence


def test_01_overlapping_ranges_name_no_winner():
    records = [train("fp32", [80, 95, 120]), train("bf16", [90, 140, 100]),
               train("fp32", [70, 80, 110], channels_last=True), train("bf16", [60, 85, 150], channels_last=True)]
    fastest = claims.fastest_setting(records)
    assert fastest.verdict == claims.NOT_DISTINGUISHABLE and "are not distinguishable here" in fastest.sentence
    assert "fp32 95.0 (80.0-120.0)" in fastest.sentence
    layout = claims.channels_last_effect(records)
    assert layout.verdict == claims.NOT_DISTINGUISHABLE and "is not distinguishable here" in layout.sentence


def test_01_a_clear_speed_up_is_named_with_its_factor():
    records = [train("fp32", [80, 85, 90]), train("bf16", [160, 170, 175]), train("bf16", [168, 171, 180], True)]
    claim = claims.fastest_setting(records)
    assert claim.verdict == "faster" and "2.01x (between 1.87x and 2.25x) fp32" in claim.sentence
    assert "bf16 +channels_last and bf16 are the fastest here (not distinguishable from each other)" in claim.sentence
    # bf16 170 (160-175) against +channels_last 171 (168-180): medians within 10%, ranges allowing up to 1.125x
    assert claims.channels_last_effect(records).verdict == claims.NOT_DISTINGUISHABLE
    close = [train("bf16", [168, 170, 172]), train("bf16", [169, 171, 173], True)]
    assert claims.channels_last_effect(close).verdict == "matters little"


def test_01_channels_last_verdict_over_precisions():
    """A CPU run under load: fp32 0.78x but overlapping, bf16 1.05x: nothing helps, nothing is ranked."""
    records = [train("fp32", [100.0, 110.8, 113.8]), train("fp32", [86.0, 86.7, 127.1], True),
               train("bf16", [84.9, 94.7, 161.5]), train("bf16", [86.8, 99.0, 120.5], True)]
    claim = claims.channels_last_effect(records)
    assert claim.verdict == claims.NOT_DISTINGUISHABLE and "helps" not in claim.sentence.split(":")[0]
    records[3] = train("bf16", [200, 210, 220], True)
    assert claims.channels_last_effect(records).verdict == "helps some"
    records[1] = train("fp32", [40, 41, 42], True)
    assert claims.channels_last_effect(records).verdict == "mixed"


def test_01_fp32_fastest_only_when_nothing_overlaps_it():
    """A CPU run under load: fp32 110.8 (100.0-113.8) had the highest median, bf16 reached 161.5 in one round."""
    overlapping = [train("fp32", [100.0, 110.8, 113.8]), train("bf16", [84.9, 94.7, 161.5])]
    assert claims.fastest_setting(overlapping).verdict == claims.NOT_DISTINGUISHABLE
    clear = [train("fp32", [100.0, 110.8, 113.8]), train("bf16", [60, 70, 75])]
    claim = claims.fastest_setting(clear)
    assert claim.verdict == "fp32" and "do not pay on this device" in claim.sentence


def test_01_issue_14_single_windows_name_what_they_measured():
    """One window per setting: the ratio is that of the two measurements, its range collapses onto it (no spread
    is invented), and both measured rates are named. Derived from the inputs, not copied from an output."""
    fp32, bf16 = 16.8, 389.0
    records = [train("fp32", [fp32]), train("bf16", [bf16]), train("bf16", [9], channels_last=True)]
    claim = claims.fastest_setting(records)
    assert claim.verdict == "faster"
    ratio = f"{claims._ratio_number(bf16 / fp32)}x"
    assert f"bf16 is the fastest here, {ratio} (between {ratio} and {ratio}) fp32" in claim.sentence
    assert f"bf16 {bf16:.1f}" in claim.sentence and f"fp32 {fp32:.1f}" in claim.sentence


def test_01_accuracy_gap_against_noise():
    assert claims.precision_accuracy({"fp32": 91.0, "bf16": 89.5}).verdict == "same"
    differs = claims.precision_accuracy({"fp32": 91.0, "bf16": 70.0})
    assert differs.verdict == "differs" and "21.0 points apart" in differs.sentence
    assert claims.precision_accuracy({"fp32": 91.0}).verdict == "not measured"


# --------------------------------------------------------------------------- notebook 02
def test_02_recorded_contradiction_cannot_say_grows_with_workers():
    """Issue 14's run: 0 workers 101, 1 worker 53, 2 workers 85 img/s, text "grows with worker processes"."""
    claim = claims.workers_scaling([loader(0, [101]), loader(1, [53]), loader(2, [85])], cores=2)
    assert claim.verdict == "falls" and "grows" not in claim.sentence


def test_02_workers_verdicts():
    growing = [loader(0, [50, 52, 55]), loader(1, [90, 95, 99]), loader(2, [170, 180, 175])]
    assert claims.workers_scaling(growing, 2).verdict == "grows"
    stops = [loader(0, [50, 52, 55]), loader(1, [90, 95, 99]), loader(2, [60, 92, 180])]
    claim = claims.workers_scaling(stops, 2)
    assert claim.verdict == "stops growing"
    assert ("up to 1 worker (1.83x (between 1.64x and 1.98x) 0 workers, not distinguishable from 2 workers), then"
            in claim.sentence)
    # a CPU run under load: 1 worker no better than 0, 2 workers clearly faster
    uneven = [loader(0, [78.0, 116.0, 116.6]), loader(1, [92.7, 105.6, 108.3]), loader(2, [123.8, 191.2, 241.1])]
    claim = claims.workers_scaling(uneven, 2)
    assert claim.verdict == "uneven"
    assert "highest median is 2 workers (1.65x (between 1.06x and 3.09x) 0 workers" in claim.sentence
    # 116.0 (78.0-116.6) against 105.6 (92.7-108.3): medians within 10%, but the ranges allow 0.80x..1.39x
    assert "0 -> 1 worker: not distinguishable here" in claim.sentence and "grows with every" not in claim.sentence
    noisy = [loader(0, [40, 90, 60]), loader(1, [50, 100, 75])]
    assert claims.workers_scaling(noisy, 2).verdict == claims.NOT_DISTINGUISHABLE
    assert "1 worker " in claims.workers_scaling(noisy, 2).sentence  # singular
    assert "1 workers" not in claims.workers_scaling(noisy, 2).sentence


def test_02_waiting_for_data_verdict_follows_the_numbers():
    slow_model, fast_loader = Spread.of([3.5, 4.0, 4.2]), Spread.of([90, 100, 110])
    keeps_up = claims.data_wait(slow_model, {"2 workers": fast_loader}, 0.02)
    assert keeps_up.verdict == "keeps up" and "model is the slow part" in keeps_up.sentence
    waits = claims.data_wait(Spread.of([3000, 3100, 3050]), {"2 workers": Spread.of([400, 410, 420])}, 0.6)
    assert waits.verdict == "waits" and "waited for data 60%" in waits.sentence
    assert claims.data_wait(Spread.of([90, 120, 100]), {"x": Spread.of([95, 105, 130])}).verdict == \
        claims.NOT_DISTINGUISHABLE


def test_02_model_alone_slower_than_reading_files_is_flagged():
    """Issue 14's run: the model alone 1.2 img/s, the trainer reading JPEGs 4.0 img/s."""
    claim = claims.model_vs_files(Spread.of([1.2]), Spread.of([4.0]))
    assert claim.verdict == "inconsistent" and "rerun" in claim.sentence
    assert claims.model_vs_files(Spread.of([4.0, 4.2, 4.4]), Spread.of([3.6, 4.1, 4.3])).verdict == "consistent"
    assert claims.model_vs_files(Spread.of([14, 15, 16]), Spread.of([1.0, 1.2, 1.5])).verdict == "slower"
    for model, files in ((None, Spread.of([4.0])), (Spread.of([4.0]), None)):
        assert claims.model_vs_files(model, files) == claims.Claim(
            "model vs files", "not measured", "the model alone or the trainer on files was not measured")


def test_02_workers_takes_the_measured_dataloader_rows_in_worker_order():
    unlabelled = loader(1, [90, 95, 99])
    del unlabelled["pipeline"]  # older records: the CPU DataLoader
    rows = [loader(2, [170, 180, 175]), loader(0, [50, 52, 55]), unlabelled,
            {**loader(3, [10, 11, 12]), "status": "failed"}, {**loader(4, [1, 2, 3]), "pipeline": "gpu-dali"}]
    claim = claims.workers_scaling(rows, 2)
    assert claim.verdict == "grows"
    assert claim.sentence.startswith("loader throughput grows with every added worker on 2 CPU cores (0 workers ")
    assert "1 worker " in claim.sentence and "3 workers" not in claim.sentence and "4 workers" not in claim.sentence
    assert "CPU cores" not in claims.workers_scaling(rows).sentence
    assert claims.workers_scaling([loader(0, [50])]) == claims.Claim(
        "workers", "not measured", "fewer than two worker counts were measured")


def test_02_workers_stop_growing_without_a_tie_and_matter_little():
    peak = [loader(0, [50, 52, 55]), loader(1, [170, 175, 180]), loader(2, [90, 95, 99])]
    claim = claims.workers_scaling(peak, 2)
    assert claim.verdict == "stops growing"
    assert claim.sentence.startswith("loader throughput grows up to 1 worker (") and "then falls on 2 CPU cores" \
        in claim.sentence
    assert "not distinguishable from" not in claim.sentence  # 1 worker's range parts from every other
    flat = [loader(0, [100, 101, 102]), loader(1, [103, 104, 105])]
    claim = claims.workers_scaling(flat, 2)
    assert claim.verdict == "matters little"
    assert claim.sentence.startswith("the number of workers changed loader throughput by less than 10% on 2 CPU cores")


# --------------------------------------------------------------------------- notebook 07
def test_07_recorded_fit_does_not_reproduce():
    """Issue 14's run: median fit error 31%, largest 38%, text "reproduces the measured times"."""
    claim = verdicts.fit_quality(0.31, 0.38)
    assert claim.verdict == "rough" and "reproduces" not in claim.sentence
    assert verdicts.fit_quality(0.05, 0.12).verdict == "reproduces"
    assert verdicts.fit_quality(0.6, 0.9).verdict == "does not fit"


def test_input_pipelines_are_ranked_only_when_their_ranges_part():
    faster = claims.input_pipelines(Spread.of([1900, 1960, 2000]), Spread.of([5100, 5300, 5400]), 0.52, 0.03, 16)
    assert faster.verdict == "gpu pipeline faster" and "2.70x (between 2.55x and 2.84x)" in faster.sentence
    assert "16 CPU workers" in faster.sentence and "52%" in faster.sentence and "3%" in faster.sentence
    slower = claims.input_pipelines(Spread.of([5000, 5100]), Spread.of([3000, 3100]), workers=1)
    assert slower.verdict == "cpu workers faster" and "1 CPU worker " in slower.sentence
    assert claims.input_pipelines(Spread.of([900, 1000, 1500]), Spread.of([1300, 1400, 1600])).verdict == \
        claims.NOT_DISTINGUISHABLE
    assert claims.input_pipelines(Spread.of([1000, 1010]), Spread.of([1040, 1050])).verdict == "matters little"
    assert claims.input_pipelines(Spread.of([1000]), None).verdict == "not measured"


# --------------------------------------------------------------------------- notebooks and SUMMARY.md use them
MEASURED_PHRASES = ("grows with worker", "throughput grows with the number", "shows up here as", "matters little",
                    "reproduces the measured", "the model is the slow part", "without losing accuracy here",
                    "every run learns", "measure the same thing", "staleness costs", "short run's noise")


@pytest.mark.parametrize("notebook", ["01_mixed_precision", "02_data_pipeline", "03_ddp_one_node", "04_large_batches",
                                      "05_multi_node_slurm", "06_scaling_study", "07_communication"])
def test_notebooks_word_measured_claims_by_code_and_pass_them_to_the_summary(notebook):
    cells = json.loads((NOTEBOOKS / f"{notebook}.ipynb").read_text())["cells"]
    text = ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]
    code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    for phrase in MEASURED_PHRASES:
        assert not any(phrase in t for t in text), f"{notebook}: '{phrase}' is typed into the text, not measured"
    assert re.search(r"claims\.\w+\(|analysis\.outcome\(", code), f"{notebook} words no claim by code"
    summary_call = code[code.index("closing."):]  # the last cell: one call of course/closing.py, which summarizes
    assert "claims=" in summary_call, f"{notebook}: its closing call gets no claims, so SUMMARY.md would differ"


def test_summary_md_shows_the_claims_spreads_and_rounded_values(tmp_path, monkeypatch):
    monkeypatch.setenv(course.SUMMARY_ENV, str(tmp_path / "summary"))
    loaders = [loader(0, [101]), loader(1, [53]), loader(2, [85])]
    claim = claims.workers_scaling(loaders, cores=2)
    course.summarize("02_data_pipeline", {"loader images/s, 1 worker": Spread.from_record(loaders[1]),
                                          "model images/s": Spread.of([3.9, 4.0, 4.45]),
                                          "RAM (GiB)": 701.9743, "share waiting": 0.0123456}, claims=[claim])
    text = course.write_summary(tmp_path, {"02_data_pipeline": 12.3}).read_text()
    assert f"- workers: {claim.sentence}" in text
    assert "| model images/s | 4.00 (3.90-4.45) |" in text
    assert "| RAM (GiB) | 702.0 |" in text and "701.9743" not in text
    assert "| share waiting | 0.0123 |" in text


# --------------------------------------------------------------------------- issue 23: numbers from a course run
def issue_23_claims() -> list:
    """The claims a fresh-clone course run (issue 23) made with its own numbers, re-made by the rules."""
    loaders = {"0 workers": Spread(300.0, 210.0, 520.0), "1 worker": Spread(420.0, 250.0, 700.0),
               "2 workers": Spread(451.5, 228.9, 870.6)}
    return [
        claims.data_wait(Spread(80.0, 70.0, 90.0), loaders, 0.01),
        claims.precision_accuracy({"fp32": 93.0, "bf16": 91.0}, 5.0, chance=10.0),
        claims.matmul_yardstick(0.070, 0.04),
        claims.benchmark_vs_jobs({"fp32": Spread(131.0, 125.0, 136.0), "bf16": Spread(166.0, 160.0, 170.0)},
                                 {"fp32": Spread(199.0, 190.0, 205.0), "bf16": Spread(242.0, 236.0, 250.0)}),
        verdicts.runs_learn([verdicts.training_outcome("06-scale-ranks_per_node1", 20.6, 10, [2.4, 2.2, 2.1]),
                           verdicts.training_outcome("06-scale-ranks_per_node2", 15.9, 10, [2.4, 2.3, 2.2])]),
        verdicts.training_outcome("multi-node job", 17.5, 10, [2.42, 2.55, 2.70]),
        verdicts.training_outcome("04-warmup0-batch_size256", 10.3, 10, [2.35, 2.30, 2.31]),
        verdicts.staleness_effect({0: {"loss": 0.162, "accuracy": 0.953, "wall_s": 3.1},
                                 1: {"loss": 0.160, "accuracy": 0.955, "wall_s": 2.9},
                                 4: {"loss": 0.158, "accuracy": 0.960, "wall_s": 2.6}}),
        verdicts.projection_flat([100.0] * 7, 64, 70.2, 51.9, 2, "CPU ranks"),
    ]


def test_issue_23_verdicts_follow_the_numbers():
    wait, accuracy, yardstick, versus, learn, multi, big_batch, stale, projection = issue_23_claims()
    assert wait.verdict == "keeps up" and "the best loader (2 workers)" not in wait.sentence
    assert "2 workers, 1 worker, 0 workers: not distinguishable from each other" in wait.sentence
    assert "5.64x (between 2.54x and 12.4x) more" in wait.sentence  # the ratio carries the ranges' spread
    assert accuracy.verdict == "same" and "noise (" not in accuracy.sentence
    assert "5-point threshold set by accuracy_tolerance" in accuracy.sentence
    near = claims.precision_accuracy({"fp32": 12.0, "bf16": 11.0}, 5.0, chance=10.0)
    assert near.verdict == "near chance" and "say nothing" in near.sentence
    assert yardstick.verdict == "beaten" and "no ceiling" in yardstick.sentence and "%" not in yardstick.sentence
    assert claims.matmul_yardstick(0.02, 0.04).verdict == "ceiling"
    assert versus.verdict == "differ" and "same thing" not in versus.sentence
    assert claims.benchmark_vs_jobs({"fp32": Spread(131.0, 120.0, 200.0)},
                                    {"fp32": Spread(150.0, 140.0, 160.0)}).verdict == "agree"
    assert learn.verdict == "not every run learns" and "2 of 2 runs did not learn" in learn.sentence
    assert multi.verdict == "diverged" and "2.42 -> 2.70" in multi.sentence
    assert big_batch.verdict == "near chance"
    assert verdicts.training_outcome("b64", 96.4, 10, [2.3, 0.6]).verdict == "learns"
    assert verdicts.training_outcome("b16", 40.0, 10, [2.3, 1.9]).verdict == "above chance"
    assert verdicts.training_outcome("nan", 9.0, 10, [2.3, float("nan")]).verdict == "diverged"
    # one final record per bound measures no noise: nothing is decided (tests/test_claim_reversal_0607.py
    # feeds whole runs, whose own fluctuation is the band)
    assert stale.verdict == claims.NOT_DISTINGUISHABLE and "cost" not in stale.sentence
    # a short 07 run: both stale runs ended higher, one by 8% and one by 18%, one run each: still undecided
    both_higher = verdicts.staleness_effect({0: {"loss": 0.945, "accuracy": 0.758, "wall_s": 0.6},
                                           1: {"loss": 1.021, "accuracy": 0.677, "wall_s": 0.4},
                                           4: {"loss": 1.119, "accuracy": 0.660, "wall_s": 0.4}})
    assert both_higher.verdict == claims.NOT_DISTINGUISHABLE and "cost progress" not in both_higher.sentence
    assert projection.verdict == "flat" and "70.2 img/s per rank" in projection.sentence
    assert "measured 51.9% at 2 CPU ranks" in projection.sentence and "share its CPU cores" in projection.sentence
    assert verdicts.projection_flat([100.0, 90.0, 60.0], 64, 900.0, None, None).verdict == "falls"


def test_issue_23_summary_md_has_no_contradicted_sentence(tmp_path, monkeypatch):
    """The words SUMMARY.md shows for the issue's numbers: no winner among overlapping ranges, no noise
    that was never measured, no ceiling the step beat, no 'learns' near chance, no cost that did not occur."""
    monkeypatch.setenv(course.SUMMARY_ENV, str(tmp_path / "summary"))
    course.summarize("01_mixed_precision", {"settings measured": 4}, claims=issue_23_claims())
    text = course.write_summary(tmp_path, {"01_mixed_precision": 1.0}).read_text().lower()
    for contradicted in ("the best loader (2 workers)", "this short run's noise", "share of matmul rate 1.06",
                         "measure the same thing", "every run learns", "staleness costs a little progress",
                         "diverged: false"):
        assert contradicted not in text, contradicted
    for stated in ("not distinguishable from each other", "threshold", "no ceiling", "did not learn",
                   "diverged (top-1 17.5%", "near chance (top-1 10.3%", "too few evaluations were kept",
                   "measured 51.9%"):
        assert stated in text, stated


def test_a_training_step_above_the_matmul_rate_gets_no_share():
    from tutorial_lib.bench.records import describe, share_of_matmul

    assert share_of_matmul(0.070, 0.04) is None and share_of_matmul(0.02, 0.04) == pytest.approx(0.5)
    record = {"kind": "train", "status": "ok", "arch": "resnet18", "precision": "bf16", "channels_last": False,
              "compile": "none", "batch_size": 8, "image_size": 64, "images_per_sec": 40.0,
              "peak_memory_bytes": 2**30, "achieved_tflops": 0.070, "matmul_tflops": 0.04, "fraction_of_matmul": None}
    text = describe(record)
    assert "of 0.04 matmul" not in text and "above the 0.04 matmul benchmark (no ceiling here)" in text


def test_scaling_labels_say_what_ran():
    import pandas as pd

    from tutorial_lib.analyses import study

    cpu = pd.DataFrame({"gpus": [1, 2], "on_gpu": [False, False]})
    assert study.rank_unit(cpu) == "CPU ranks" and study.rank_unit(cpu.assign(on_gpu=True)) == "GPUs"


@pytest.mark.parametrize("shared, staged, verdict, words", [
    ((0.50, 0.45, 0.55), (0.10, 0.09, 0.12), "staged faster", "pays for itself after 5.0 epochs"),
    ((0.10, 0.09, 0.12), (0.50, 0.45, 0.55), "staged slower", "only cost time"),
    ((0.10, 0.08, 0.12), (0.11, 0.09, 0.13), claims.NOT_DISTINGUISHABLE, "the copy is pure cost"),
])
def test_staging_verdict_follows_the_reads(shared, staged, verdict, words):
    claim = claims.staging_effect(Spread(2.0, 1.9, 2.1), Spread(*shared), Spread(*staged), 1000, False)
    assert claim.verdict == verdict and words in claim.sentence
    assert "HAL benchmark's 64 GPUs drew 3.3 GB/s and 36.5 k IOPS" in claim.sentence
    assert "52 MB/s and 570 reads/s per GPU" in claim.sentence
    assert "same disk" not in claim.sentence and claim.sentence.endswith(".")
    same_disk = claims.staging_effect(Spread(2.0, 1.9, 2.1), Spread(*shared), Spread(*staged), 1000)
    assert same_disk.verdict == claims.CANNOT_DECIDE and "same disk of this machine" in same_disk.sentence
    assert "pays for itself" not in same_disk.sentence
    assert claims.staging_effect(None, Spread(*shared), Spread(*staged), 1000).verdict == "not measured"


def test_a_precision_too_slow_for_the_budget_is_skipped_with_its_measured_speed():
    from tutorial_lib.analyses.precision import affordable

    def plain(precision, speed, **extra):
        return {"status": "ok", "precision": precision, "channels_last": False, "compile": "none",
                "images_per_sec": speed, **extra}

    records = [plain("fp32", 100.0), plain("bf16", 2.5), plain("bf16", 500.0, channels_last=True)]
    kept, skipped = affordable(records, ["fp32", "bf16"], images=1920, budget_s=300)
    assert kept == ["fp32"] and len(skipped) == 1
    assert skipped[0].startswith("bf16: skipped") and "2.5 images/s" in skipped[0] and "40x" in skipped[0]
    assert "13 min" in skipped[0] and "train_budget_s = 300" in skipped[0]
    assert affordable(records, ["fp32", "bf16"], images=1920, budget_s=None) == (["fp32", "bf16"], [])
    assert affordable(records, ["fp32", "bf16"], images=0, budget_s=300) == (["fp32", "bf16"], [])  # whole epochs
    assert affordable(records, ["fp32", "tf32"], images=1920, budget_s=300)[0] == ["fp32", "tf32"]  # not measured
    kept, skipped = affordable(records, ["fp32", "bf16"], images=1920, budget_s=1)  # both over: the fastest runs
    assert kept == ["fp32"] and [s.split(":")[0] for s in skipped] == ["bf16"]


def test_01_counts_its_training_jobs_from_what_runs():
    """The issue-44 read of 01: "two real training jobs" where bf16 was skipped and one ran."""
    from tutorial_lib.analyses.precision import jobs_line

    assert jobs_line(["fp32"], ["fp32", "bf16"]) == "1 training job: fp32 (of 2 wanted; bf16 skipped above)"
    assert jobs_line(["fp32", "bf16"], ["fp32", "bf16"]) == "2 training jobs: fp32, bf16"
    assert "only fp32 finished" in claims.precision_accuracy({"fp32": 90.0}).sentence
    notebook = (NOTEBOOKS / "01_mixed_precision.ipynb").read_text()
    assert "two real training jobs" not in notebook and "precision.jobs_line(" in notebook


# --------------------------------------------------------------------------- every builder's topic and edges
def _every_branch():
    """(claim, topic, verdict) for a claim from each branch of each builder."""
    fast, slow = Spread.of([200, 210, 220]), Spread.of([50, 52, 55])
    near = Spread.of([100, 101, 102])
    yield claims.fastest_setting([]), "fastest setting", "no measurement"
    yield claims.fastest_setting([train("fp32", [100, 101]), train("bf16", [99, 102])]), "fastest setting", \
        claims.NOT_DISTINGUISHABLE
    yield claims.fastest_setting([train("fp32", [200, 210]), train("bf16", [50, 52])]), "fastest setting", "fp32"
    yield claims.fastest_setting([train("bf16", [200, 210])]), "fastest setting", "no fp32 baseline"
    yield claims.fastest_setting([train("fp32", [50, 52]), train("bf16", [200, 210])]), "fastest setting", "faster"
    yield claims.channels_last_effect([train("fp32", [50])]), "channels_last", "not measured"
    yield claims.channels_last_effect([train("fp32", [50, 52]), train("fp32", [200, 210], True)]), "channels_last", \
        "helps"
    yield claims.precision_accuracy({"fp32": 90.0}), "accuracy", "not measured"
    yield claims.precision_accuracy({"fp32": 90.0, "bf16": 5.0}, chance=10.0), "accuracy", "near chance"
    yield claims.precision_accuracy({"fp32": 90.0, "bf16": 89.0}), "accuracy", "same"
    yield claims.precision_accuracy({"fp32": 90.0, "bf16": 50.0}), "accuracy", "differs"
    yield claims.data_wait(None, {"a": fast}), "waiting for data", "not measured"
    yield claims.data_wait(slow, {}), "waiting for data", "not measured"
    yield claims.data_wait(fast, {"a": slow}), "waiting for data", "waits"
    yield claims.data_wait(slow, {"a": fast}), "waiting for data", "keeps up"
    yield claims.data_wait(near, {"a": Spread.of([99, 103])}), "waiting for data", claims.NOT_DISTINGUISHABLE
    yield claims.model_vs_files(fast, slow), "model vs files", "slower"
    yield claims.benchmark_vs_jobs({}, {}), "benchmark vs jobs", "not measured"
    yield claims.matmul_yardstick(None, 1.0), "matmul yardstick", "not measured"


def test_every_claim_names_its_topic():
    for claim, topic, verdict in _every_branch():
        assert (claim.topic, claim.verdict) == (topic, verdict), claim
        assert isinstance(claim.sentence, str) and claim.sentence and str(claim) == claim.sentence
        assert claim._repr_markdown_() == f"**{topic}:** {claim.sentence}"


def test_unmeasured_claims_say_what_is_missing():
    assert claims.fastest_setting([]) == claims.Claim(
        "fastest setting", "no measurement", "no setting could be measured on this device")
    assert claims.channels_last_effect([train("fp32", [50]), train("bf16", [60], True)]) == claims.Claim(
        "channels_last", "not measured", "channels_last was not measured against the default layout")
    one = claims.precision_accuracy({"fp32": 90.0, "bf16": None})
    assert one.verdict == "not measured" and "only fp32 finished" in one.sentence
    assert claims.data_wait(None, {"a": Spread.of([1])}) == claims.Claim(
        "waiting for data", "not measured", "the model or the loader could not be measured here")
    alone = claims.fastest_setting([train("bf16", [200, 210])])
    assert alone.sentence.startswith(f"fastest here: bf16 {Spread.of([200, 210]).text()} img/s (plain fp32")


def test_accuracy_thresholds_are_inclusive_where_documented():
    assert claims.precision_accuracy({"fp32": 90.0, "bf16": 85.0}).verdict == "same"  # the default 5 points
    assert claims.precision_accuracy({"fp32": 90.0, "bf16": 84.5}).verdict == "differs"
    assert claims.precision_accuracy({"fp32": 90.0, "bf16": 80.0}, tolerance_points=10).verdict == "same"
    assert claims.precision_accuracy({"fp32": 30.0, "bf16": 20.0}, 20, chance=10.0).verdict == "same"  # 2x chance
    assert claims.precision_accuracy({"fp32": 30.0, "bf16": 25.0}, 20, chance=10.0).verdict == "same"
    near = claims.precision_accuracy({"fp32": 30.0, "bf16": 19.0}, 20, chance=10.0)
    assert near.verdict == "near chance" and "fp32 30.0%, bf16 19.0%" in near.sentence


def test_ties_are_named_together():
    tied = claims.data_wait(Spread.of([1000, 1010]), {"cpu": Spread.of([100, 110]), "gpu": Spread.of([105, 112])})
    assert tied.verdict == "waits"
    assert "pipelines (gpu, cpu: not distinguishable from each other; highest median gpu)" in tied.sentence
    one = claims.data_wait(Spread.of([1000, 1010]), {"cpu": Spread.of([100, 110])})
    assert "the fastest input pipeline (cpu) delivers" in one.sentence
    two = claims.fastest_setting([train("fp32", [50, 52]), train("bf16", [200, 210]),
                                  train("fp16", [198, 212])])
    assert two.verdict == "faster" and two.sentence.startswith("bf16 and fp16 are the fastest here (not dist")


def test_more_builders_name_their_topic_and_numbers():
    fast, slow = Spread.of([200, 210, 220]), Spread.of([50, 52, 55])
    cases = [
        (claims.benchmark_vs_jobs({"fp32": fast, "bf16": fast}, {"fp32": Spread.of([205])}), "benchmark vs jobs",
         "agree"),
        (claims.benchmark_vs_jobs({"fp32": None, "bf16": fast}, {"fp32": fast, "bf16": slow}), "benchmark vs jobs",
         "differ"),
        (claims.benchmark_vs_jobs({"fp32": None}, {"fp32": fast}), "benchmark vs jobs", "not measured"),
        (claims.matmul_yardstick(2.0, 1.0), "matmul yardstick", "beaten"),
        (claims.matmul_yardstick(0.6, 1.0), "matmul yardstick", "ceiling"),
        (claims.model_vs_files(slow, fast), "model vs files", "inconsistent"),
        (claims.model_vs_files(Spread.of([3, 4]), Spread.of([4, 5])), "model vs files", "consistent"),  # touching
        (claims.model_vs_files(Spread.of([4, 5]), Spread.of([3, 4])), "model vs files", "consistent"),
        (claims.input_pipelines(None, fast), "input pipelines", "not measured"),
        (claims.input_pipelines(slow, fast, 0.5, 0.6, 2), "input pipelines", "gpu pipeline faster"),
        (claims.input_pipelines(fast, slow, 0.5), "input pipelines", "cpu workers faster"),
        (claims.input_pipelines(Spread.of([100, 101]), Spread.of([102, 103])), "input pipelines", "matters little"),
        (claims.staging_effect(Spread.of([1.0]), Spread.of([2.0]), None, 10), "staging", "not measured"),
        (claims.staging_effect(Spread.of([1.0]), Spread.of([2.0, 2.1]), Spread.of([0.5, 0.6]), 10, False), "staging",
         "staged faster"),
        (claims.staging_effect(Spread.of([1.0]), Spread.of([2.0, 2.1]), Spread.of([2.1, 2.2]), 10, False), "staging",
         claims.NOT_DISTINGUISHABLE),  # touching ranges rank nothing
    ]
    for claim, topic, verdict in cases:
        assert (claim.topic, claim.verdict) == (topic, verdict), claim
        assert isinstance(claim.sentence, str) and claim.sentence
    by_verdict = {claim.verdict: claim.sentence for claim, _, _ in cases}
    assert (f"fp32: jobs {Spread.of([205]).text()} and benchmark {fast.text()} img/s, not distinguishable here"
            in by_verdict["agree"])
    assert by_verdict["ceiling"].endswith(": 60% of the matmul rate")
    assert "the step reached 2.000 TFLOP/s" in claims.matmul_yardstick(2.0, 1.0, "the step").sentence
    assert by_verdict["consistent"].startswith("the trainer fed from files runs at")
    gpu = by_verdict["gpu pipeline faster"]
    assert "fed by 2 CPU workers" in gpu and "waiting for data 50% of the time with CPU workers, 60% with" in gpu
    cpu = by_verdict["cpu workers faster"]
    assert cpu.startswith("the CPU workers feed") and "fed by CPU workers" in cpu and "waiting" not in cpu
    assert by_verdict["matters little"].startswith("the two input pipelines matters little: fed by")


def test_speed_ratios_with_a_zero_or_unmeasured_speed():
    assert claims.ratio_verdict(Spread.of([5, 6]), Spread.of([0]), "better", "worse") == "better"
    assert claims._ratio_text(Spread.of([5]), Spread.of([0])) == "not defined (a zero speed)"
    assert claims._ratio_text(Spread.of([5]), Spread.of([0, 2, 3])) == "not defined (a zero speed)"  # low 0
    assert claims._ratio_text(Spread.of([4]), Spread.of([0.5, 2, 4])) == "2.00x (between 1.00x and 8.00x)"


def test_train_records_only_and_compile_named():
    plain = {**train("fp32", [50, 52]), "compile": None}
    del plain["compile"]  # older records: no compile
    records = [plain, {**train("bf16", [200, 210]), "compile": "default"},
               {**train("fp16", [900, 910]), "kind": "data"}]
    claim = claims.fastest_setting(records)
    assert claim.verdict == "faster" and claim.sentence.startswith("bf16 compile=default is the fastest here, ")
    assert "fp16" not in claim.sentence


def test_show_prints_topic_and_sentence(capsys):
    claims.show(claims.Claim("a", "v", "first"), claims.Claim("b", "w", "second"))
    assert capsys.readouterr().out == "a: first\nb: second\n"


def test_channels_last_names_the_one_direction_some_precisions_took():
    base = [train("fp32", [100, 101, 102]), train("bf16", [100, 101, 102]), train("fp32", [100, 102, 103], True)]
    helps = claims.channels_last_effect(base + [train("bf16", [200, 210, 220], True)])
    hurts = claims.channels_last_effect(base + [train("bf16", [40, 41, 42], True)])
    assert (helps.verdict, hurts.verdict) == ("helps some", "hurts some")
    assert hurts.sentence.startswith("channels_last slows down some precisions here, not all: fp32: 1.01x (matters")


def test_staging_sentence_gives_the_three_times():
    copy, shared, staged = Spread.of([1.23456]), Spread.of([2.34567, 2.45678]), Spread.of([0.56789, 0.67891])
    claim = claims.staging_effect(copy, shared, staged, 12345)
    assert claim.sentence.startswith(f"copying 12,345 image files (train/ and val/) took {copy.text(3)} s; reading "
                                     f"all of them once took "
                                     f"{shared.text(3)} s from where they are and {staged.text(3)} s from the copy")
    assert copy.text(3) != copy.text(4) and shared.text(3) != shared.text(4) and staged.text(3) != staged.text(4)


def test_workers_do_not_fall_when_some_count_is_clearly_above_zero():
    """1 worker clearly below 0 workers, 2 clearly above, 3 the highest median but overlapping: not "falls"."""
    rows = [loader(0, [100, 101, 102]), loader(1, [50, 51, 52]), loader(2, [110, 115, 120]), loader(3, [90, 130, 200])]
    assert claims.workers_scaling(rows, 2).verdict == claims.NOT_DISTINGUISHABLE
