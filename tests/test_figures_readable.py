"""Every figure the course draws can be read (issue 44): drawn by the library's own figure functions from data
shaped like a course run's (tests/figure_gallery.py; no job, no notebook), then checked with matplotlib's
geometry after a real draw (tests/figure_checks.py): no text over plotted data, no legend over data, no line
outside its axis or under its spine, coinciding lines drawn so that both show and said so, no empty panel
without a message or with a numeric axis of nothing, an epoch axis of whole epochs that fits the epochs run,
and a figure of single runs that says so.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from figure_checks import problems  # noqa: E402
from figure_gallery import course_figures, monitor_figure, run_events  # noqa: E402


@pytest.fixture(scope="module")
def gallery(tmp_path_factory):
    shown = course_figures(tmp_path_factory.mktemp("gallery"))
    yield shown
    plt.close("all")


def test_every_course_figure_is_readable(gallery):
    found = [problem for shown in gallery for problem in problems(shown.figure, shown.name, shown.epochs)]
    assert not found, f"{len(found)} problems in {len(gallery)} figures:\n" + "\n".join(found)


def test_the_gallery_covers_every_notebook(gallery):
    assert {shown.name[:2] for shown in gallery} == {f"0{n}" for n in range(8)}


def test_a_figure_of_single_runs_says_so_and_shows_the_spread_it_has(gallery):
    """06's points are one run each: the figure says so and draws each run's per-epoch range as a whisker;
    04's accuracy against the batch has no spread to show and says that its noise is not measured."""
    for shown in (s for s in gallery if s.single_runs):
        words = " ".join(ax.get_title() for ax in shown.figure.axes).lower()
        assert "one run" in words, f"{shown.name}: its titles do not say that each point is one run: {words!r}"
        whiskers = [c for ax in shown.figure.axes for c in ax.collections]
        assert whiskers or "not measured" in words, f"{shown.name}: no spread drawn and none said to be missing"


def test_the_checks_catch_each_kind_of_defect():
    """The checks themselves: each defect planted in a plain matplotlib figure is reported."""
    fig, (crowded, empty) = plt.subplots(1, 2, layout="constrained")
    crowded.plot([0, 1, 2], [0, 1, 2], label="a")
    crowded.plot([0, 1, 2], [0, 1, 2], label="b")  # hides a, nothing says so
    crowded.plot([0, 2], [2.4, 2.4], label="edge")
    crowded.set_ylim(0, 2.4)  # the "edge" line lies under the top spine
    crowded.text(1, 1, "over the line")
    crowded.legend(loc="center")  # over the lines
    empty.set_ylabel("(%)")  # a numeric axis of nothing, no message
    found = "\n".join(problems(fig, "planted"))
    for expected in ("lies over plotted data", "legend covers", "on the axes' edge", "hides 'a'",
                     "nothing says so", "an empty panel without a message", "numeric axis"):
        assert expected in found, (expected, found)
    fig2, ax = plt.subplots()
    ax.plot([1], [50.0], "o")
    ax.set_xlabel("epoch")
    ax.set_xlim(0.5, 1.5)
    assert any("shows fractions" in p for p in problems(fig2, "one epoch", epochs=1))
    fig4, ax = plt.subplots(figsize=(15, 3))  # 07's projections: 6.5 pt at 15 inches; 04's monitor: 8-line titles
    ax.plot([0, 1], [0, 1])
    ax.set_title("\n".join(["a title line"] * 9))
    ax.text(0.1, 0.8, "tiny", fontsize=6.5)
    found = "\n".join(problems(fig4, "crowded titles"))
    assert "which it squeezes" in found and "'tiny' is 6 px high in a notebook" in found, found
    fig3, ax = plt.subplots()  # two schedules that meet after a warmup: the same values over a stretch
    ax.plot(range(10), [0.1, 0.5, 1, 1, 1, 1, 0.1, 0.1, 0.1, 0.1], label="warmup")
    ax.plot(range(10), [1, 1, 1, 1, 1, 1, 0.1, 0.1, 0.1, 0.1], label="no warmup")
    ax.plot(range(10), [0.2] * 10, label="crosses")  # crossing lines share a few pixels only: not reported
    found = "\n".join(problems(fig3, "partial"))
    assert "'no warmup' hides 'warmup' (over" in found and "'no warmup' and 'warmup' coincide and nothing" in found
    assert "crosses" not in found, found
    plt.close("all")


def test_lines_that_coincide_in_part_are_drawn_and_named():
    """04's LR schedules at batch 8192 with and without warmup: the same values after the warmup."""
    from tutorial_lib.figures import readable

    fig, ax = plt.subplots()
    ax.plot(range(10), [0.1, 0.5, 1, 1, 1, 1, 0.1, 0.1, 0.1, 0.1], label="batch 8192")
    ax.plot(range(10), [1, 1, 1, 1, 1, 1, 0.1, 0.1, 0.1, 0.1], label="batch 8192, no warmup")
    assert readable.mark_coinciding(ax) == [("batch 8192", "batch 8192, no warmup")]
    assert "coincide in part" in ax.get_title() and "batch 8192 and batch 8192, no warmup" in ax.get_title()
    assert not problems(fig, "marked")
    plt.close("all")


def test_two_runs_with_the_same_values_are_both_seen_and_named():
    """03's equivalence pair on the monitor: the 1-worker run's line lies on the 2-worker run's."""
    same = run_events(1, [40.0])
    fig = monitor_figure({"03-group-2w": same, "03-group-1w": same})
    loss = fig.axes[1]
    assert "03-group-1w on 03-group-2w" in loss.get_title()
    widths = sorted(line.get_linewidth() for line in loss.lines)
    assert widths[-1] >= widths[0] + 1.5


def test_lines_that_only_meet_at_a_point_are_not_marked():
    """06's measured efficiency leaves the ideal line at the smallest run, and 04's step schedules drop at the same
    epoch: they meet at a point (or share a vertical drop), no stretch, so no "coincide in part" in the title."""
    from tutorial_lib.figures import readable

    fig, (efficiency, steps) = plt.subplots(1, 2, figsize=(11, 4), layout="constrained")
    efficiency.plot([1, 2], [1.0, 1.0], "--", label="ideal")
    efficiency.plot([1, 2], [1.0, 0.4], "o-", label="measured")
    efficiency.set_ylim(0, 1.1)
    epochs = [0, 30, 30, 60, 60, 90]
    steps.plot(epochs, [0.1, 0.1, 0.01, 0.01, 0.001, 0.001], label="batch 256")
    steps.plot(epochs, [0.4, 0.4, 0.04, 0.04, 0.004, 0.004], label="batch 1024")
    steps.set_yscale("log")
    for ax in (efficiency, steps):
        assert readable.mark_coinciding(ax) == [] and "coincide" not in ax.get_title(), ax.get_title()
    assert not problems(fig, "meeting lines")
    plt.close("all")


def test_a_run_without_an_epoch_is_named_in_its_panel():
    """04's LARS figure was drawn with the two SGD runs only, saying nothing of the LARS run (unfinished)."""
    from types import SimpleNamespace

    from tutorial_lib.figures import plots

    def job(name: str, frame, state: str):
        return SimpleNamespace(name=name, state=state, metrics=lambda event: frame[frame["event"] == event])

    started = run_events(1, [50.0]).iloc[:1]  # the start event only
    ax = plots.plot_accuracy([job("04-warmup1-batch_size256", run_events(4, [50.0, 80.0, 90.0, 93.0]), "COMPLETED"),
                              job("04-lars", started, "RUNNING")])
    assert "not drawn, no epoch logged: 04-lars, RUNNING" in " ".join(ax.get_title().split()), ax.get_title()
    assert not problems(ax.figure, "LARS missing", 4)
    plt.close("all")
