"""Notebooks 06 and 07: the claims they print, fed measured-like numbers and the same numbers reversed
(issue 30): the sentence and verdict must follow, or say the numbers cannot decide here."""

from __future__ import annotations

import statistics

from tutorial_lib.text import verdicts

# issue 30's read: the 12 model errors of 07's two-level tables (8 all-reduce rows, 4 training rows), in %
ISSUE_30_ERRORS = [-12.0, 23.0, 16.0, -31.0, 8.0, 40.0, -26.0, 15.0, 27.0, -5.0, 33.0, 3.0]


def test_model_error_median_is_the_median_of_the_errors_shown():
    """The sentence's median is the ordinary median of the |errors| (mean of the two middle ones for an
    even count), the figure a reader computes from the table, not the upper-middle element."""
    errors = {f"row {i}": e / 100 for i, e in enumerate(ISSUE_30_ERRORS)}
    expected = statistics.median(abs(e) for e in ISSUE_30_ERRORS)
    assert expected == 19.5
    claim = verdicts.model_error(errors)
    assert "median 20%" in claim.sentence, claim.sentence  # 19.5 shown to the table's precision


def test_model_error_reverses():
    """Within the limit everywhere -> ``within``; push one error beyond it (either sign) -> ``off``."""
    small = {"flat 64 KiB": 0.05, "hierarchical 64 KiB": -0.08, "training flat": 0.12}
    assert verdicts.model_error(small).verdict == "within"
    for sign in (1, -1):
        off = verdicts.model_error({**small, "training flat": sign * 0.40})
        assert off.verdict == "off" and "2 of 3" in off.sentence and f"{sign * 40:+d}%" in off.sentence
