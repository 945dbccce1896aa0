"""All-reduce schedules are real all-reduces, cost what scaling.py says, and are drawn step by step."""

import math

import matplotlib
import matplotlib.pyplot as plt
import pytest

from tutorial_lib.analyses import allreduce
from tutorial_lib.figures import comm_figures as cf
from tutorial_lib.param_server import RunResult
from tutorial_lib.scaling import Cluster, Link, fit_link, ring_allreduce_s, ring_traffic_factor
from tutorial_lib.scaling.presets import PRESETS

matplotlib.use("Agg")


@pytest.mark.parametrize("ranks", [2, 3, 4, 5, 8])
def test_ring_schedule_is_an_allreduce_with_the_ring_cost(ranks):
    schedule = allreduce.ring_schedule(ranks)
    assert len(schedule) == 2 * (ranks - 1)  # the latency steps of scaling.ring_allreduce_s
    assert all(len(step) == ranks and all(len(t.chunks) == 1 for t in step) for step in schedule)
    assert all(t.dst == (t.src + 1) % ranks for step in schedule for t in step)
    assert allreduce.is_allreduce(ranks, schedule)
    assert allreduce.buffer_fraction_sent(ranks, schedule) == pytest.approx([ring_traffic_factor(ranks)] * ranks)


@pytest.mark.parametrize("ranks", [2, 4, 8, 16])
def test_halving_doubling_schedule_is_an_allreduce_in_2_log2_p_steps(ranks):
    schedule = allreduce.halving_doubling_schedule(ranks)
    assert len(schedule) == 2 * int(math.log2(ranks))
    assert allreduce.is_allreduce(ranks, schedule)
    # same bytes as a ring, far fewer steps
    assert allreduce.buffer_fraction_sent(ranks, schedule) == pytest.approx([ring_traffic_factor(ranks)] * ranks)
    # pairs exchange: in every step each rank sends to the rank that sends to it
    for step in schedule:
        partner = {t.src: t.dst for t in step}
        assert all(partner[partner[r]] == r for r in range(ranks))
    # the reduce-scatter halves what is sent: p/2, p/4, ..., 1 chunks
    halving = [len(step[0].chunks) for step in schedule[:len(schedule) // 2]]
    assert halving == [ranks >> (k + 1) for k in range(len(halving))]
    # after the reduce-scatter, rank r holds exactly chunk r fully reduced
    middle = allreduce.simulate(ranks, schedule)[len(schedule) // 2]
    assert all(middle[r][r] == frozenset(range(ranks)) for r in range(ranks))


def test_halving_doubling_refuses_non_powers_of_two():
    with pytest.raises(ValueError):
        allreduce.halving_doubling_schedule(6)
    with pytest.raises(ValueError):
        allreduce.ring_schedule(1)


def test_simulate_catches_a_chunk_added_twice():
    broken = allreduce.ring_schedule(3)
    broken[1] = broken[0]  # repeating step 1 adds the same contributions again
    with pytest.raises(ValueError, match="twice"):
        allreduce.simulate(3, broken)
    assert not allreduce.is_allreduce(4, allreduce.ring_schedule(4)[:3])  # reduce-scatter alone is not enough


@pytest.mark.parametrize("ranks", [2, 3, 4, 6])
def test_ring_figure_has_one_panel_per_step_and_one_arrow_per_transfer(ranks):
    fig = allreduce.draw_ring_allreduce(ranks)
    assert len(fig.axes) == 1 + 2 * (ranks - 1)
    assert allreduce.arrow_count(fig.axes[0]) == 0
    assert [allreduce.arrow_count(ax) for ax in fig.axes[1:]] == [ranks] * (2 * (ranks - 1))
    expected = ([f"reduce-scatter {k}" for k in range(1, ranks)] + [f"all-gather {k}" for k in range(1, ranks)])
    assert [ax.get_title() for ax in fig.axes] == ["start", *expected]
    # every rank x chunk cell is drawn in every panel
    assert all(sum(type(p).__name__ == "Rectangle" for p in ax.patches) == ranks * ranks for ax in fig.axes)


@pytest.mark.parametrize("ranks", [2, 4, 8])
def test_halving_doubling_figure_has_2_log2_p_step_panels(ranks):
    fig = allreduce.draw_halving_doubling_allreduce(ranks)
    steps = 2 * int(math.log2(ranks))
    assert len(fig.axes) == 1 + steps
    assert [allreduce.arrow_count(ax) for ax in fig.axes[1:]] == [ranks] * steps
    assert fig.axes[-1].get_title() == f"all-gather {steps // 2}"


def test_arrows_of_one_step_never_coincide():
    for schedule in (allreduce.halving_doubling_schedule(8), allreduce.ring_schedule(5)):
        for step in schedule:
            lanes = allreduce._arrow_lanes(step)
            pairs = {(x, min(t.src, t.dst)) for x, t in zip(lanes, step, strict=True)}
            assert len(pairs) == len(step)


def test_cost_table_matches_the_scaling_formulas():
    cluster = Cluster(8, intra=Link(400, 5), inter=Link(100, 10))
    table = cf.allreduce_cost_table(100e6, [8, 64, 512], cluster)
    assert list(table.index) == [8, 64, 512]
    assert table.loc[64, "ring steps"] == 126 and table.loc[64, "h-d steps"] == 12
    assert table.loc[8, "ring ms"] == pytest.approx(1e3 * ring_allreduce_s(100e6, 8, cluster.intra))
    assert table.loc[512, "ring ms"] == pytest.approx(1e3 * ring_allreduce_s(100e6, 512, cluster.inter))
    # at 512 GPUs the ring pays 1022 latency terms: halving-doubling (18) is faster
    assert table.loc[512, "h-d ms"] < table.loc[512, "ring ms"]
    assert table.loc[64, "nodes"] == 8


def test_fit_plot_draws_measured_points_and_the_fitted_line():
    link = Link(bandwidth_gbit_s=8.0, latency_us=50.0)
    sizes = [4096, 65536, 1 << 20, 4 << 20]
    samples = [(s, float(cf.fitted_seconds(link, s, 2)[0])) for s in sizes]
    fitted = fit_link(samples, 2)
    assert fitted.bandwidth_gbit_s == pytest.approx(8.0, rel=1e-6)
    fig = cf.plot_allreduce_fit(samples, 2, fitted)
    time_ax, bw_ax = fig.axes
    measured, line = time_ax.lines[:2]
    assert list(measured.get_xdata()) == sizes
    assert line.get_ydata()[-1] == pytest.approx(samples[-1][1] * 1e3, rel=1e-6)


def test_projection_curves_start_at_each_reference_base():
    hal = PRESETS["hal"]
    curve = cf.preset_curve(hal, [1, 2, 4, 64, 4096])
    assert list(curve["gpus"]) == [2, 4, 64, 4096]  # HAL's efficiency is measured against 2 GPUs
    assert curve["efficiency"].iloc[0] == pytest.approx(1.0)
    published = cf.published_frame(hal)
    assert published.loc[published["gpus"] == 64, "efficiency"].item() == pytest.approx(0.57, abs=0.01)
    fig = cf.plot_projections(PRESETS, [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096])
    assert len(fig.axes) == 3
    time_labels = fig.axes[2].get_legend_handles_labels()[1]
    assert sum(label.startswith(run.label) for run in cf.OTHER_PUBLISHED for label in time_labels) == len(
        cf.OTHER_PUBLISHED)


def test_what_if_knobs_move_the_curve_the_expected_way():
    goyal, gpus = PRESETS["goyal"], [1, 64, 1024]
    slow = cf.projection_frame(cf.what_if_model(goyal, bandwidth_gbit_s=5), gpus)["efficiency"].iloc[-1]
    fast = cf.projection_frame(cf.what_if_model(goyal, bandwidth_gbit_s=400), gpus)["efficiency"].iloc[-1]
    hidden = cf.projection_frame(cf.what_if_model(goyal, overlap=1.0), gpus)["efficiency"].iloc[-1]
    exposed = cf.projection_frame(cf.what_if_model(goyal, overlap=0.0), gpus)["efficiency"].iloc[-1]
    small = cf.projection_frame(cf.what_if_model(goyal, per_gpu_batch=4), gpus)["efficiency"].iloc[-1]
    large = cf.projection_frame(cf.what_if_model(goyal, per_gpu_batch=64), gpus)["efficiency"].iloc[-1]
    assert slow < fast and exposed < hidden and small < large
    fig = cf.plot_what_if(goyal, gpus, {"bandwidth_gbit_s": [5, 50], "overlap": [0, 1]})
    assert [len(ax.lines) for ax in fig.axes] == [2, 2]


def test_staleness_plot_has_steps_and_wall_time_side_by_side():
    records = [{"step": s, "wall_s": 0.1 * s, "loss": 1 / s, "accuracy": 0.1 * s} for s in range(1, 4)]
    runs = {name: RunResult(name, "parameter_server", 0, records, None) for name in ("ps_s0", "allreduce")}
    fig = cf.plot_staleness_runs(runs)
    assert len(fig.axes) == 4
    assert all(len(ax.lines) == 2 for ax in fig.axes)
    assert list(fig.axes[1].lines[0].get_xdata()) == pytest.approx([0.1, 0.2, 0.3])


def test_what_if_widget_redraws_when_a_slider_moves():
    pytest.importorskip("ipywidgets", reason="ipywidgets is missing: `make setup` (or pip install -e '.[test]')")
    box = cf.what_if_widget(PRESETS["goyal"], [1, 16, 256])
    sliders = box.children[0].children
    assert [s.description for s in sliders] == ["Gbit/s", "overlap", "batch/GPU"]
    sliders[0].value = 5.0  # runs the redraw callback; an exception there would surface here
    assert sliders[0].value == 5.0
    assert not plt.get_fignums()  # each redraw closes its figure after showing it
