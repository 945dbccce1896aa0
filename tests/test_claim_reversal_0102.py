"""Reversal tests (issue 30, Deliver 4) for the claims notebooks 01 and 02 print: each comparison fed
measured-like numbers, then the same numbers reversed; the verdict and the sentence must reverse, or say
"not distinguishable here" where the ranges overlap."""

from __future__ import annotations

from tutorial_lib.bench.timing import Spread
from tutorial_lib.text import claims, pipeline_claims

# notebook 02's parts of one image, as the issue-30 read measured them (ms per image)
READ, DECODE, AUGMENT = Spread(0.087, 0.080, 0.095), Spread(1.38, 1.30, 1.50), Spread(6.59, 6.00, 7.00)


def test_largest_part_reverses():
    measured = pipeline_claims.largest_part({"read": READ, "decode": DECODE, "augment": AUGMENT})
    reversed_ = pipeline_claims.largest_part({"read": READ, "decode": AUGMENT, "augment": DECODE})
    assert measured.verdict == "augment largest" and measured.sentence.startswith("augmenting")
    assert reversed_.verdict == "decode largest" and reversed_.sentence.startswith("decoding the JPEG")
    assert "4.78x (between 4.00x and 5.38x) the time of decode" in measured.sentence
    overlapping = pipeline_claims.largest_part({"read": READ, "decode": DECODE, "augment": Spread(1.2, 0.6, 1.4)})
    assert overlapping.verdict == claims.NOT_DISTINGUISHABLE and "largest part" not in overlapping.sentence
    assert pipeline_claims.largest_part({"read": READ}).verdict == "not measured"


def test_process_vs_worker_reverses():
    slow, fast = Spread(124.0, 110.0, 130.0), Spread(573.0, 500.0, 600.0)
    measured = pipeline_claims.process_vs_worker(slow, fast)
    reversed_ = pipeline_claims.process_vs_worker(fast, slow)
    assert measured.verdict == "worker faster" and "4.62x" in measured.sentence
    assert reversed_.verdict == "process faster" and "4.62x" in reversed_.sentence
    # after the one-thread fix, on a busy 2-core machine: 0 workers 309 (161-312), 1 worker 221 (182-305)
    overlap = pipeline_claims.process_vs_worker(Spread(309.3, 160.9, 311.7), Spread(221.1, 181.9, 305.1))
    assert overlap.verdict == claims.NOT_DISTINGUISHABLE and "faster" not in overlap.sentence
    close = pipeline_claims.process_vs_worker(Spread(100.0, 99.0, 101.0), Spread(105.0, 104.0, 106.0))
    assert close.verdict == "matters little" and "the worker 1.05x" in close.sentence
    close_reversed = pipeline_claims.process_vs_worker(Spread(105.0, 104.0, 106.0), Spread(100.0, 99.0, 101.0))
    assert close_reversed.verdict == "matters little" and "the process 1.05x" in close_reversed.sentence
    assert pipeline_claims.process_vs_worker(None, fast).verdict == "not measured"


def test_benchmark_vs_jobs_reverses():
    bench_fast = {"fp32": Spread(230.0, 220.0, 238.0)}
    jobs_slow = {"fp32": Spread(150.0, 140.0, 160.0)}
    measured = claims.benchmark_vs_jobs(bench_fast, jobs_slow)
    reversed_ = claims.benchmark_vs_jobs(jobs_slow, bench_fast)
    assert measured.verdict == reversed_.verdict == "differ"
    assert "fp32: jobs 150.0 (140.0-160.0) img/s, slower than the benchmark's" in measured.sentence
    assert "fp32: jobs 230.0 (220.0-238.0) img/s, faster than the benchmark's" in reversed_.sentence
    overlap = claims.benchmark_vs_jobs({"fp32": Spread(228.7, 115.2, 238.1)}, {"fp32": Spread(190.1, 153.3, 236.5)})
    assert overlap.verdict == "agree" and claims.NOT_DISTINGUISHABLE in overlap.sentence


def test_staging_effect_reverses():
    copy, slow, fast = Spread(2.0, 1.9, 2.1), Spread(0.50, 0.45, 0.55), Spread(0.10, 0.09, 0.12)
    measured = claims.staging_effect(copy, slow, fast, 72, same_file_system=False)
    reversed_ = claims.staging_effect(copy, fast, slow, 72, same_file_system=False)
    assert (measured.verdict, reversed_.verdict) == ("staged faster", "staged slower")
    assert "pays for itself" in measured.sentence and "pays for itself" not in reversed_.sentence
    for shared, staged in ((slow, fast), (fast, slow)):  # one disk: neither direction is a finding
        assert claims.staging_effect(copy, shared, staged, 72).verdict == claims.CANNOT_DECIDE
    overlap = claims.staging_effect(copy, Spread(0.10, 0.08, 0.12), Spread(0.11, 0.09, 0.13), 72, False)
    assert overlap.verdict == claims.NOT_DISTINGUISHABLE


def test_one_core_reverses():
    """02's one core: the loader with 0 workers against what the parts timed alone allow; a loader slower than
    its parts (the issue-44 run: 223.4 against about 275 img/s) and the two swapped."""
    parts = {"read": Spread(0.07, 0.05, 0.09), "decode": Spread(2.77, 2.70, 2.85), "augment": Spread(0.79, 0.75, 0.82)}
    slower = pipeline_claims.one_core(Spread(223.4, 203.9, 253.1), parts)
    assert slower.verdict == "loader slower" and "223.4 (203.9-253.1) img/s" in slower.sentence, slower.sentence
    assert "about 223 images/s" in slower.sentence and "likely cause, not measured here" in slower.sentence
    faster = pipeline_claims.one_core(Spread(340.0, 320.0, 360.0), parts)
    assert faster.verdict == "loader faster" and "about 340 images/s" in faster.sentence
    agree = pipeline_claims.one_core(Spread(270.0, 240.0, 300.0), parts)
    assert agree.verdict == "agree" and "about 270 images/s" in agree.sentence
    assert pipeline_claims.one_core(None, parts).verdict == "not measured"


def test_one_core_does_not_call_overlapping_ranges_with_medians_apart_agreement():
    """r44h's read of 02: the loader 239.3 (151.5-296.4) img/s against its parts' 111.9 (99.7-185.0): the ranges
    overlap, the medians are 2.1x apart and the parts' median lies outside the loader's range. Before: "the two
    agree"; the docstring's rule (the parts' median within the loader's range) decides now."""
    parts = {"read": Spread(0.5, 0.4, 0.6), "decode": Spread(7.0, 4.3, 8.0), "augment": Spread(1.436, 0.7, 1.63)}
    claim = pipeline_claims.one_core(Spread(239.3, 151.5, 296.4), parts)
    assert "allow 111.9 (" in claim.sentence, claim.sentence
    assert claim.verdict == claims.NOT_DISTINGUISHABLE and "agree, so" not in claim.sentence, claim.sentence
    assert "about 239 images/s" in claim.sentence


def test_cores_to_feed_reverses():
    """A model slower than one core needs one; the two swapped need more, with the range the ranges allow."""
    model, core = Spread(120.0, 110.0, 130.0), Spread(223.4, 203.9, 253.1)
    one = pipeline_claims.cores_to_feed(model, core)
    more = pipeline_claims.cores_to_feed(core, model)
    assert one.verdict == "one core" and "needs 1 CPU core to keep up" in one.sentence, one.sentence
    assert more.verdict == "2 cores" and "between 2 and 3 from the ranges" in more.sentence, more.sentence
    assert "223.4 (203.9-253.1)" in one.sentence and pipeline_claims.cores_to_feed(None, core).verdict == "not measured"
