"""How the printed sentences word what the numbers cannot carry (issue 44):

* a verdict that decides nothing prints no ratio as its headline: where two ranges overlap, the sentence gives
  the medians and ranges and says "not distinguishable here", never "0.88x";
* a sentence that names a cause says what measured it, or says it is a likely cause not measured here
  (``claims.likely_cause``): checked on the source of every module that words a Claim;
* a setting called the fastest beside fp32 is one whose own range separates from fp32's.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from hypothesis import given
from test_claim_reversal import GENERATED, loader, overlapping, train
from test_markdown_claims import notebook_sentences

from tutorial_lib.bench.timing import Spread
from tutorial_lib.text import claims, pipeline_claims, verdicts
from tutorial_lib.text.claims import NOT_DISTINGUISHABLE

ROOT = Path(__file__).resolve().parents[1]
RATIO = re.compile(r"\b\d+\.\d+x\b")
# issue 44's numbers: notebook 01 (img/s), 07's two-level network at 64 KiB (GB/s)
FP32, FP32_CL = Spread(70.0, 66.3, 74.8), Spread(61.9, 55.5, 76.8)
BF16, BF16_CL = Spread(95.0, 88.0, 101.0), Spread(83.0, 71.9, 107.2)


def undecided_clauses(sentence: str) -> list[str]:
    """The clauses (split at ';' and ':') that say "not distinguishable here" of something."""
    return [clause for clause in re.split(r"[;:]", sentence) if NOT_DISTINGUISHABLE in clause]


def test_an_undecided_comparison_prints_no_ratio():
    layout = claims.channels_last_effect([train("fp32", FP32), train("fp32", FP32_CL, True)])
    assert layout.verdict == NOT_DISTINGUISHABLE and not RATIO.search(layout.sentence), layout.sentence
    assert "61.9 (55.5-76.8) vs 70.0 (66.3-74.8)" in layout.sentence
    rows = [{"rate_mbit": 1000, "bytes": 2**16, "flat": Spread(0.014, 0.008, 0.015),
             "hierarchical": Spread(0.012, 0.007, 0.016, (0.007, 0.012, 0.016))},
            {"rate_mbit": 1000, "bytes": 2**24, "flat": Spread(0.10, 0.09, 0.11, (0.09, 0.10, 0.11)),
             "hierarchical": Spread(0.07, 0.065, 0.075, (0.065, 0.07, 0.075))}]
    network = verdicts.hierarchical_vs_flat(rows)
    for clause in undecided_clauses(network.sentence):
        assert not RATIO.search(clause), network.sentence
    training = verdicts.hierarchical_training([
        {"rate_mbit": 200, "algorithm": "flat", "images_per_sec": Spread(15.8, 15.2, 16.6, (15.2, 15.8, 16.6))},
        {"rate_mbit": 200, "algorithm": "hierarchical", "images_per_sec": Spread(18.0, 16.0, 19.0, (16, 18, 19))}])
    assert training.verdict == NOT_DISTINGUISHABLE and not RATIO.search(training.sentence), training.sentence


@GENERATED
@given(overlapping(4))
def test_no_claim_that_decides_nothing_carries_a_ratio(spread):
    a, b, c, d = spread
    fed = [claims.fastest_setting([train("fp32", a), train("bf16", b), train("bf16", c, True)]),
           claims.channels_last_effect([train("fp32", a), train("fp32", b, True), train("bf16", c),
                                        train("bf16", d, True)]),
           claims.workers_scaling([loader(w, s) for w, s in enumerate(spread)]),
           claims.data_wait(a, {"cpu": b, "gpu": c}), claims.input_pipelines(a, b),
           pipeline_claims.process_vs_worker(a, b),
           verdicts.measured_scaling([(1, a), (2, b)], "CPU ranks")]
    for claim in fed:
        if claim.verdict == NOT_DISTINGUISHABLE:  # what it leaves undecided carries no ratio (a decided part may)
            for clause in undecided_clauses(claim.sentence):
                assert not RATIO.search(clause), claim


def _two_runs(one_rank: tuple, two_ranks: tuple):
    """06's study frame of two CPU-rank runs, each with its per-epoch speeds (the first epoch already left out)."""
    from tutorial_lib.analyses import study

    return study.collect([{"name": f"r{n}", "gpus": n, "nodes": 1, "global_batch": 32 * n, "images_per_sec":
                           sum(rates) / len(rates), "images_per_sec_low": min(rates), "images_per_sec_high": max(rates),
                           "epoch_rates": rates, "epochs_measured": len(rates), "on_gpu": False}
                          for n, rates in ((1, one_rank), (2, two_ranks))])


def test_the_closing_table_decides_the_speed_up_as_the_sentence_does():
    """06: the sentence under the figure said "not distinguishable" (2 epochs per run) while the closing table
    headlined "speed-up 1.14 (1.09-1.20), efficiency 57.0%": both now take verdicts.scaling_verdict's decision."""
    from tutorial_lib.analyses import study

    thin = _two_runs((165.0, 172.0), (190.0, 200.0))  # ranges apart, but two epochs per run rank nothing
    said = study.scaling_claim(thin, load=(1.0, 1.0, 1.0))
    numbers = study.speedup_numbers(thin)
    assert said.verdict == NOT_DISTINGUISHABLE, said.sentence
    for label, value in numbers.items():
        assert isinstance(value, str) and value.startswith(NOT_DISTINGUISHABLE), (label, value)
        assert "2 epochs measured per run" in value
    assert list(study.results_table(thin)["efficiency (%)"]) == ["100.0", NOT_DISTINGUISHABLE]
    ranked = _two_runs((165.0, 170.0, 172.0), (300.0, 310.0, 320.0))
    assert study.scaling_claim(ranked, load=(1.0, 1.0, 1.0)).verdict == "faster"
    speedup = next(v for k, v in study.speedup_numbers(ranked).items() if k.startswith("measured speed-up"))
    assert isinstance(speedup, Spread) and speedup.low > 1, speedup


def test_the_matmul_share_of_an_undecided_fastest_setting_is_a_range_not_its_headline():
    """01: "44% of the matmul rate" for "the fastest setting's step" right after "not distinguishable here": the
    step is named as fastest_setting decided it, and its share is the range its rounds allow."""
    from tutorial_lib.analyses import precision

    def record(prec: str, cl: bool, spread: Spread) -> dict:
        return {**train(prec, spread, cl), "achieved_tflops": spread.median * 2e-3, "matmul_tflops": 0.4}

    records = [record("fp32", False, FP32), record("fp32", True, Spread(72.0, 50.0, 90.0))]
    fastest = claims.fastest_setting(records)
    said = claims.matmul_yardstick(**precision.best_step_yardstick(records, fastest))
    assert fastest.verdict == NOT_DISTINGUISHABLE and said.verdict == "ceiling", (fastest, said)
    assert "fastest setting's step" not in said.sentence and "the step with the highest median" in said.sentence
    assert "between 25% and 45% of the matmul rate" in said.sentence, said.sentence
    ranked = [record("fp32", False, FP32), record("bf16", False, BF16)]
    decided = claims.matmul_yardstick(**precision.best_step_yardstick(ranked, claims.fastest_setting(ranked)))
    assert "the fastest setting's step (bf16)" in decided.sentence, decided.sentence


def test_04s_closing_table_shows_batches_as_counts_and_times_the_sweep_without_lars(monkeypatch):
    """04 printed "batch 256.0" (a column with an empty cell turns to floats) and "sweep + LARS" as the sweep's
    time."""
    import pandas as pd

    from tutorial_lib.analyses import analysis
    from tutorial_lib.course import closing

    table = pd.DataFrame({"recipe": ["SGD, no warmup", "SGD, no warmup"], "global_batch": [16.0, 256.0],
                          "top1": [95.0, 80.0]})
    versus = pd.DataFrame({"optimizer": ["sgd", "lars"], "global_batch": [256.0, 256.0], "top1": [80.0, 93.0]})
    times = pd.DataFrame({"optimizer": ["sgd", "sgd", "lars"], "train_time_s": [10.0, 20.0, 40.0]})
    monkeypatch.setattr(analysis, "final_accuracy", lambda jobs: times)
    monkeypatch.setattr(analysis, "outcome", lambda job: claims.Claim("training", "learns", "it learns"))
    shown = closing.large_batches(table, versus, [object()] * 3, figures={}, claims=[])
    labels = " | ".join(shown.index)
    assert ".0," not in labels and "batch 256, one run" in labels, labels
    assert shown.loc["sweep train time (s, sum of epochs)", "value"] in (30, "30"), shown
    assert shown.loc["LARS train time (s, sum of epochs)", "value"] in (40, "40"), shown


def test_ranges_that_print_as_touching_are_not_called_distinct():
    """07: bus bandwidth ranges printed to 3 decimals that touch ("0.010-0.013" and "0.013-0.016") were ranked
    by their unrounded ends, while ranges that touch exactly are not distinguishable."""
    def row(hier: tuple, flat: tuple) -> dict:
        return {"rate_mbit": 1000, "bytes": 2**16, "hierarchical": Spread(hier[1], hier[0], hier[2], hier),
                "flat": Spread(flat[1], flat[0], flat[2], flat)}

    touching = verdicts.hierarchical_vs_flat([row((0.0101, 0.0115, 0.0131), (0.0132, 0.0150, 0.0160))])
    assert touching.verdict == NOT_DISTINGUISHABLE and "(0.010-0.013) vs 0.015 (0.013-0.016)" in touching.sentence
    apart = verdicts.hierarchical_vs_flat([row((0.0101, 0.0115, 0.0124), (0.0136, 0.0150, 0.0160))])
    assert apart.verdict == "loses", apart.sentence


def test_a_tied_fastest_setting_that_overlaps_fp32_is_not_called_faster():
    """01: bf16 separates from fp32, bf16 +channels_last ties with bf16 but overlaps fp32 as well."""
    said = claims.fastest_setting([train("fp32", FP32), train("bf16", BF16), train("bf16", BF16_CL, True)])
    assert said.verdict == "faster" and said.sentence.startswith("bf16 is the fastest here"), said.sentence
    assert "bf16 +channels_last is not distinguishable here from bf16 nor from fp32" in said.sentence
    assert "bf16 +channels_last 1." not in said.sentence  # no ratio against fp32 for the tied one


# --------------------------------------------------------------------------- causes
CAUSE = re.compile(r"\b(because|caus\w*|compet\w*|due to|blam\w*|share[sd]? (its|this machine's|the same) "
                   r"(cpu )?cores)\b", re.IGNORECASE)
SAYS_WHAT_MEASURED = ("not measured here", "measured by", "measured with", "measured in")
# the modules that word a Claim: text/, and the analyses that build sentences from their own numbers
WORDING = sorted((ROOT / "tutorial_lib" / "text").glob("*.py")) + [
    ROOT / "tutorial_lib" / "analyses" / name for name in ("study.py", "twolevel.py", "analysis.py")]


def _strings(tree: ast.AST):
    """Every string literal of a module (f-strings as their constant parts joined), with its line, leaving out
    docstrings and the arguments of ``likely_cause(...)`` (worded as likely and not measured by that call)."""
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)) and node.body and \
                isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant):
            skip.add(id(node.body[0].value))
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "likely_cause":
            skip.update(id(child) for arg in node.args for child in ast.walk(arg))
        if isinstance(node, ast.FunctionDef) and node.name == "likely_cause":  # the wording itself
            skip.update(id(child) for child in ast.walk(node))
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.JoinedStr):
            skip.update(id(part) for part in node.values)
            yield node.lineno, "".join(p.value for p in node.values if isinstance(p, ast.Constant))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value


def causes_without_source(path: Path) -> list[str]:
    return [f"{path.name}:{line}: {text.strip()[:100]!r}"
            for line, text in _strings(ast.parse(path.read_text())) if CAUSE.search(text)
            and not any(words in text for words in SAYS_WHAT_MEASURED)]


def test_every_cause_a_sentence_names_is_measured_or_said_to_be_likely():
    found = [problem for path in WORDING for problem in causes_without_source(path)]
    assert not found, "sentences that name a cause without saying what measured it:\n" + "\n".join(found)


def test_the_cause_check_finds_a_bare_cause_and_passes_a_likely_one(tmp_path):
    module = tmp_path / "wording.py"
    module.write_text('def f(x):\n    """Docstrings may say because."""\n'
                      '    bare = f"{x} img/s: the workers compete with this process for the cores"\n'
                      '    fine = likely_cause("the workers compete for the cores")\n'
                      '    said = "the ranks share its CPU cores (not measured here)"\n'
                      '    return bare, fine, said\n')
    found = causes_without_source(module)
    assert found == ["wording.py:3: 'img/s: the workers compete with this process for the cores'"], found


def test_a_cause_in_a_printed_sentence_is_worded_as_likely():
    zero, one = Spread(124.0, 110.0, 130.0), Spread(573.0, 500.0, 600.0)
    said = pipeline_claims.process_vs_worker(zero, one).sentence
    assert "a likely cause, not measured here: with a worker, two processes work at once" in said
    shared = verdicts.projection_flat([100.0], 64, 70.2, 35.9, 2, unit="CPU ranks", measured_range=(26.0, 46.0))
    assert "between 26% and 46%" in shared.sentence and "likely cause, not measured here" in shared.sentence
    assert "share its CPU cores" in shared.sentence
    above = verdicts.projection_flat([100.0], 64, 6.0, 139.2, 2, unit="CPU ranks", measured_range=(139.2, 139.2))
    assert "share its CPU cores" not in above.sentence and "slowed the smaller run" in above.sentence
    assert "one epoch per run measured: no range" in above.sentence


# a markdown sentence that explains this run's numbers by a cause: worded as a possibility (markdown is not chosen
# by code from the numbers, so it cannot state what they show)
EXPLAINS_RESULT = re.compile(r"\b(the efficiency|the speed-up|the throughput|img/s)\b.*\b(measures?|shows?|reflects?)"
                             r"\b.*\b(shared|sharing|compet\w*|cores)\b|" + CAUSE.pattern, re.IGNORECASE)
MEASURED_QUANTITY = re.compile(r"\b(efficiency|speed-up|img/s)\b", re.IGNORECASE)
HEDGED = ("not measured here", "measured by", "likely", " can ", " may ", " might ", " could ")


def causes_stated_as_fact(texts: dict[str, list[str]]) -> list[str]:
    """The sentences with a clause (split at ':' and ';') that explains a measured number by a cause unhedged."""
    return [f"{where}: {sentence[:120]}" for where, found in texts.items() for sentence in found
            if any(MEASURED_QUANTITY.search(clause) and EXPLAINS_RESULT.search(clause)
                   and not any(words in f" {clause} " for words in HEDGED) for clause in re.split(r"[:;]", sentence))]


def test_no_markdown_cell_states_the_cause_of_a_measured_number_as_fact():
    """06 cell 13 said "the efficiency measures shared cores as much as the method" of a run nothing timed apart."""
    found = causes_stated_as_fact(notebook_sentences())
    assert not found, "markdown that states a cause of this run's numbers as fact:\n" + "\n".join(found)
    planted = {"06": ["On two cores the all-reduce runs on the cores that compute, so the efficiency measures shared "
                      "cores as much as the method."]}
    assert causes_stated_as_fact(planted) == [f"06: {planted['06'][0][:120]}"]


def test_a_value_shown_in_several_places_has_one_rounding():
    """01 showed one speed as 0.7, 0.714 and (a bar label) "1"; 02 one cost as 0.7 (0.5-0.8) and 0.717
    (0.516-0.751): a sentence, SUMMARY.md's table and a bar label round a value the same way."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from tutorial_lib.course.summary import plain
    from tutorial_lib.figures import plots

    spread = Spread(0.717, 0.516, 0.751)
    assert spread.text() == plain(spread) == "0.717 (0.516-0.751)"
    assert FP32.text() == "70.0 (66.3-74.8)"  # speeds above 10 keep their one decimal
    ax = plots.plot_bars(["bf16"], [0.714], "images/s")
    assert ax.get_xticklabels()[0].get_text() == "bf16\n0.714"
    plt.close("all")


def test_06s_hal_form_table_and_projection_sentence_give_no_number_for_an_undecided_efficiency():
    """r44h's read of 06: the HAL-form table showed a bare "throughput efficiency (%) 28.7" and the projection's
    sentence "The measured 28.7% at 2 CPU ranks", where the sentence under the figure, the results table and the
    closing table call the same efficiency not distinguishable (2 epochs per run). Both now take
    verdicts.scaling_verdict's decision; a ranked pair keeps its number, with its range."""
    import pandas as pd

    from tutorial_lib.analyses import reference, study

    thin = _two_runs((165.0, 172.0), (90.0, 100.0)).assign(top1=50.0, top5=90.0)  # two epochs per run: unranked
    assert list(study.readable(thin)["throughput efficiency (%)"]) == ["100.0", NOT_DISTINGUISHABLE]
    projection = pd.DataFrame({"projected efficiency (%)": [100.0, 99.9, 99.6]},
                              index=pd.Index([1, 8, 64], name="modelled ranks"))
    said = reference.projection_claim(projection, thin)
    assert "measured 28" not in said.sentence and f"2 CPU ranks is {NOT_DISTINGUISHABLE}" in said.sentence, said
    assert "2 epochs measured per run" in said.sentence
    ranked = _two_runs((165.0, 170.0, 172.0), (120.0, 125.0, 130.0)).assign(top1=50.0, top5=90.0)
    cell = list(study.readable(ranked)["throughput efficiency (%)"])[1]
    assert cell == "37.0 (34.9-39.4)", cell
    assert "The measured 37.0% at 2 CPU ranks" in reference.projection_claim(projection, ranked).sentence


def test_ratios_keep_about_three_significant_digits_and_staging_names_its_cause_as_likely():
    """r44h's read of 02: "270.86x (between 163.97x and 644.26x)" (the project rounds to about three significant
    digits), and "the files sit in its page cache, so the difference ... is noise" (a cause nothing measured)."""
    wide = claims._ratio_text(Spread(27086.0, 16397.0, 64426.0), Spread(100.0, 100.0, 100.0))
    assert wide == "271x (between 164x and 644x)", wide
    assert claims._ratio_text(Spread(1.14, 1.10, 1.20), Spread(1.0, 1.0, 1.0)) == "1.14x (between 1.10x and 1.20x)"
    staged = claims.staging_effect(Spread(1.0, 0.9, 1.1), Spread(0.0016, 0.0015, 0.0017),
                                   Spread(0.0014, 0.0013, 0.0015), 72)
    assert "likely cause, not measured here: the files sit in its page cache" in staged.sentence, staged.sentence
    assert "is noise" not in staged.sentence
