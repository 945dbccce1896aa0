"""Notebook 06's figures, tables and projections say what ran (issue 30): CPU ranks where the ranks were CPU
processes, and every projection names the model, image size and device it projects from."""

from __future__ import annotations

import json

import matplotlib
import pytest
from test_study import epoch, fake_run

from tutorial_lib.analyses import reference, study
from tutorial_lib.figures import plots

matplotlib.use("Agg")


def _on(run_dir, device: str, **extra):
    config = json.loads((run_dir / "config.json").read_text())
    (run_dir / "config.json").write_text(json.dumps({**config, "device": device, "arch": "resnet18",
                                                     "image_size": 16, **extra}))
    return run_dir


@pytest.fixture(params=["cpu", "cuda:0"])
def device(request):
    return request.param


@pytest.fixture
def cpu_sweep(tmp_path, device):
    """Issue 30's study: 1 and 2 ranks of ResNet-18 on 16 px digits (CPU processes, or GPUs)."""
    return [_on(fake_run(tmp_path, "r-1", 1, 1, [epoch(20), epoch(70)]), device, parameters=11_181_642),
            _on(fake_run(tmp_path, "r-2", 1, 2, [epoch(30), epoch(73)]), device)]


def _unit(device):
    return "CPU ranks" if device == "cpu" else "GPUs"


def test_scaling_figures_name_what_ran(cpu_sweep, device):
    results = study.collect(cpu_sweep)
    unit = study.rank_unit(results)
    assert unit == _unit(device)
    ax = plots.plot_scaling(results["gpus"], results["images_per_sec"], unit=unit)
    assert ax.get_xlabel() == unit and ax.get_ylabel() == f"throughput (images/s, all {unit})"
    assert ax.lines[0].get_label() == f"ideal (linear from 1 {unit[:-1]})"
    assert plots.plot_efficiency(results["gpus"], results["efficiency"], unit=unit).get_xlabel() == unit
    both = reference.plot_efficiency_vs_reference(results, reference.reference_frame("hal"), label="this study (smoke)",
                                              reference_label="the HAL benchmark (V100)")
    # the notebook's labels carry their own brackets: the axis label does not nest them in more
    assert (both.get_xlabel() == "GPUs: the HAL benchmark (V100); CPU ranks: this study (smoke)") == (device == "cpu")
    assert list(study.accuracy_runs(cpu_sweep)) == [f"1 {unit[:-1]} on 1 node, batch 32",
                                                     f"2 {unit} on 1 node, batch 64"]
    assert unit in study.scaling_table(cpu_sweep).columns


def test_projections_name_what_they_project_from(cpu_sweep, device):
    results = study.collect(cpu_sweep)
    projection = reference.projection_from_run(cpu_sweep[0], [1, 2, 64])
    unit = _unit(device)
    assert projection.attrs["basis"] == f"resnet18 at 16 px on 1 {unit[:-1]}"
    assert (projection.index.name == "GPUs") == (device != "cpu")  # a CPU rank is no GPU of the model's cluster
    claim = reference.projection_claim(projection, results)
    assert f"img/s per rank (resnet18 at 16 px on 1 {unit[:-1]})" in claim.sentence
    assert ("64 modelled ranks" in claim.sentence) == (device == "cpu")
    note = study.time_projection_note(results, 90)
    assert f"resnet18 at 16 px on {unit}" in note and "projected, not measured" in note
