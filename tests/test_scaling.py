"""Step-time model: hand-worked all-reduce costs, identities, calibration, presets and CLI."""

import json
import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from tutorial_lib.scaling import (
    Cluster,
    DataPipeline,
    Link,
    ScalingModel,
    Workload,
    allreduce_s,
    bandwidth_to_hide_allreduce_gbit_s,
    bus_bandwidth_bytes_s,
    calibrate,
    exposed_communication_s,
    fit_link,
    format_duration,
    halving_doubling_allreduce_s,
    hierarchical_allreduce_s,
    load_allreduce_samples,
    ring_allreduce_s,
)
from tutorial_lib.scaling.presets import PRESETS, cli
from tutorial_lib.scaling.reference import compare

REPO = Path(__file__).resolve().parents[1]
TEN_GBIT = Link(bandwidth_gbit_s=10, latency_us=10)  # 1.25e9 bytes/s
CLUSTER = Cluster(gpus_per_node=4, intra=Link(400, 5), inter=Link(100, 10))


def small_model(**workload) -> ScalingModel:
    base = dict(per_gpu_batch=100, images_per_sec_per_gpu=1000, gradient_bytes=100e6,
                overlap_fraction=1.0)
    return ScalingModel(CLUSTER, Workload(**{**base, **workload}), algorithm="ring")


@pytest.mark.parametrize("algorithm", ["ring", "halving_doubling", "hierarchical"])
def test_one_gpu_costs_no_communication(algorithm):
    assert allreduce_s(100e6, 1, CLUSTER, algorithm) == 0.0
    point = small_model().project([1])[0]
    assert point.allreduce_s == point.exposed_comm_s == 0.0
    assert point.step_s == pytest.approx(0.1)
    assert point.efficiency == pytest.approx(1.0)


def test_ring_cost_worked_by_hand():
    # 4 GPUs, 100 MB over 10 Gbit/s: 2*3/4 * 1e8 B / 1.25e9 B/s = 0.12 s, plus 6 x 10 us.
    assert ring_allreduce_s(100e6, 4, TEN_GBIT) == pytest.approx(0.12 + 6 * 10e-6)
    # Each extra bucket pays the six latency terms again, not the bytes.
    assert ring_allreduce_s(100e6, 4, TEN_GBIT, buckets=3) == pytest.approx(0.12 + 18 * 10e-6)


def test_halving_doubling_has_log_latency_and_ring_bytes():
    no_latency = Link(10, 0)
    assert halving_doubling_allreduce_s(100e6, 8, no_latency) == pytest.approx(
        ring_allreduce_s(100e6, 8, no_latency))
    # 2 log2(8) = 6 latency terms instead of the ring's 2 * 7 = 14.
    assert halving_doubling_allreduce_s(0, 8, TEN_GBIT) == pytest.approx(6 * 10e-6)
    assert ring_allreduce_s(0, 8, TEN_GBIT) == pytest.approx(14 * 10e-6)


@pytest.mark.parametrize("algorithm", ["ring", "halving_doubling", "hierarchical"])
def test_faster_links_never_slow_the_allreduce(algorithm):
    times = [allreduce_s(50e6, 64, Cluster(4, Link(bw * 4, 5), Link(bw, 5)), algorithm)
             for bw in (10, 25, 50, 100, 200)]
    assert all(a > b for a, b in zip(times, times[1:], strict=False))


def test_hierarchical_identities():
    one_per_node = Cluster(1, intra=Link(400, 5), inter=TEN_GBIT)
    for gpus in (2, 8, 32):
        assert hierarchical_allreduce_s(100e6, gpus, one_per_node) == pytest.approx(
            ring_allreduce_s(100e6, gpus, TEN_GBIT))
    # Inside one node, reduce-scatter + all-gather is exactly an intra-node ring.
    assert hierarchical_allreduce_s(100e6, 4, CLUSTER) == pytest.approx(
        ring_allreduce_s(100e6, 4, CLUSTER.intra))


def test_hierarchical_beats_a_flat_ring_on_latency():
    many_buckets = dict(nbytes=100e6, gpus=256, cluster=Cluster(8, Link(160, 5), Link(50, 25)),
                        buckets=100)
    flat = allreduce_s(algorithm="ring", **many_buckets)
    assert allreduce_s(algorithm="hierarchical", **many_buckets) < flat / 3


def test_exposed_communication_is_what_backward_cannot_hide():
    assert exposed_communication_s(0.05, backward_s=0.1, overlap_fraction=1.0) == 0.0
    assert exposed_communication_s(0.15, backward_s=0.1, overlap_fraction=0.5) == pytest.approx(
        0.10)


def test_projection_with_exposed_communication_worked_by_hand():
    slow = replace(CLUSTER, inter=TEN_GBIT)
    model = replace(small_model(backward_time_s=0.05), cluster=slow)
    point = model.project([8], epochs=1, dataset_images=8000)[0]
    comm = ring_allreduce_s(100e6, 8, TEN_GBIT)  # flat ring across 2 nodes: inter link
    assert point.allreduce_s == pytest.approx(comm)
    assert point.step_s == pytest.approx(0.1 + comm - 0.05)
    assert point.images_per_s == pytest.approx(800 / point.step_s)
    assert point.time_to_train_s == pytest.approx(8000 / point.images_per_s)
    assert point.limited_by == "communication"
    assert point.efficiency == pytest.approx(0.1 / point.step_s)


def test_storage_ceiling_and_epoch_overhead():
    pipeline = DataPipeline(bytes_per_image=100e3, storage_gbyte_s=1.0, epoch_overhead_s=10,
                            eval_images=1000, eval_images_per_sec_per_gpu=100)
    model = replace(small_model(), pipeline=pipeline)
    small, large = model.project([2, 64], epochs=2, dataset_images=100_000)
    assert small.limited_by == "compute" and small.images_per_s == pytest.approx(2000)
    assert large.limited_by == "storage" and large.images_per_s == pytest.approx(10_000)
    assert large.epoch_s == pytest.approx(10 + 10 + 1000 / (64 * 100))


def test_goyal_bandwidth_sanity_check():
    # Goyal et al.: ~200 MB per 0.125 s = 1600 MB/s = 12.8 Gbit/s for 100 MB of gradients.
    assert bandwidth_to_hide_allreduce_gbit_s(100e6, 0.125) == pytest.approx(12.8)
    check = PRESETS["goyal"].checks[0]
    assert check.model == pytest.approx(12.8) and check.reference == 12.8


def test_fit_link_recovers_alpha_and_beta():
    truth = Link(bandwidth_gbit_s=80, latency_us=7)
    sizes = [2**k for k in range(10, 28, 2)]
    samples = [(s, ring_allreduce_s(s, 8, truth)) for s in sizes]
    fitted = fit_link(samples, gpus=8)
    assert fitted.bandwidth_gbit_s == pytest.approx(80, rel=1e-6)
    assert fitted.latency_us == pytest.approx(7, rel=1e-6)
    assert bus_bandwidth_bytes_s(2**26, samples[-1][1], 8) == pytest.approx(truth.bytes_per_s,
                                                                            rel=0.01)


def test_calibrate_from_benchmark_json(tmp_path):
    truth = Link(25, 20)
    results = [{"bytes": s, "seconds": ring_allreduce_s(s, 4, truth)} for s in (1e4, 1e6, 1e8)]
    path = tmp_path / "allreduce.jsonl"  # the shape tutorial_lib.bench allreduce appends
    path.write_text(json.dumps({"kind": "train"}) + "\n"
                    + json.dumps({"world_size": 4, "results": results}) + "\n")
    gpus, samples = load_allreduce_samples(path)
    assert gpus == 4 and len(samples) == 3
    calibrated = calibrate(small_model(), samples, gpus, single_gpu_images_per_s=555)
    assert calibrated.cluster.inter.bandwidth_gbit_s == pytest.approx(25)
    assert calibrated.cluster.intra == CLUSTER.intra
    assert calibrated.workload.images_per_sec_per_gpu == 555
    assert load_allreduce_samples({"gpus": 2, "times_s": {"1000": 0.1}}) == (2, [(1000.0, 0.1)])


def hal_rows():
    return {row["gpus"]: row for row in compare(PRESETS["hal"])["rows"]}


def test_hal_reproduces_2_and_64_gpu_times_within_20_percent():
    rows = hal_rows()
    assert rows[2]["reference_time_to_train_s"] == pytest.approx(20 * 3600 + 36 * 60 + 51.11)
    assert rows[64]["reference_time_to_train_s"] == pytest.approx(3600 + 7 * 60 + 51.31)
    assert rows[64]["reference_efficiency"] == pytest.approx(0.57, abs=0.005)
    for gpus in (2, 64):
        assert abs(rows[gpus]["time_relative_error"]) < 0.20


def test_hal_communication_alone_cannot_explain_the_efficiency():
    report = compare(PRESETS["hal"])
    assert report["communication_only"]["efficiency"] > 0.9
    assert report["communication_only"]["time_relative_error"] < -0.2
    assert report["rows"][-1]["limited_by"] == "storage"


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_names_its_assumptions(name):
    report = compare(PRESETS[name])
    assert report["assumptions"] and all(a["name"] and a["value"] and a["source"]
                                         for a in report["assumptions"])
    assert all(math.isfinite(row["time_relative_error"]) for row in report["rows"])


def test_cli_json_is_valid_and_lists_assumptions(capsys):
    assert cli(["--preset", "hal", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["preset"] == "hal" and len(report["rows"]) == 6
    assert any("file-system" in a["name"] for a in report["assumptions"])


def test_cli_lists_presets(capsys):
    assert cli([]) == 0
    listing = capsys.readouterr().out
    assert all(name in listing for name in ("hal", "goyal", "jia"))


def test_module_runs_as_a_script():
    done = subprocess.run([sys.executable, "-m", "tutorial_lib.scaling", "--preset", "goyal"],
                          cwd=REPO, capture_output=True, text=True, timeout=600, check=True)
    assert "Assumptions (not stated by the reference)" in done.stdout
    assert "12.80 Gbit/s" in done.stdout


def test_format_duration():
    assert format_duration(74211.11) == "20h36m51s"
    assert format_duration(396) == "6m36s"
    assert format_duration(26.44) == "26.4s"
