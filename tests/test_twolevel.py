"""Notebook 07's two-level measurements read back: the model beside them, and the sentences chosen from them."""

from __future__ import annotations

import pytest

from tutorial_lib.analyses import twolevel
from tutorial_lib.bench.timing import Spread
from tutorial_lib.scaling import Cluster, Link, fit_point_to_point, flat_allreduce_s, hierarchical_allreduce_s
from tutorial_lib.text import claims, verdicts

INTRA, INTER = Link(5.0, 20.0), Link(0.2, 100.0)
SIZES = [64 << 10, 1 << 20, 4 << 20, 25_000_000]


def _record(rate=200, flat_factor=1.0, hier_factor=1.0, training=True) -> dict:
    """A record as `bench allreduce --links --ddp-steps` writes it, with times of a known network."""
    cluster = Cluster(2, INTRA, INTER)
    p2p = {level: {"ranks": [0, peer], "results": [{"bytes": n, "seconds": link.latency_s + n / link.bytes_per_s}
                                                   for n in SIZES]}
           for level, peer, link in (("intra", 1, INTRA), ("inter", 2, INTER))}
    results = []
    for n in SIZES:
        for algorithm, seconds in (("flat", flat_factor * flat_allreduce_s(n, 4, cluster)),
                                   ("hierarchical", hier_factor * hierarchical_allreduce_s(n, 4, cluster))):
            bus = n / seconds * 1.5 / 1e9
            results.append({"algorithm": algorithm, "bytes": n, "seconds": seconds, "seconds_low": 0.98 * seconds,
                            "seconds_high": 1.02 * seconds, "busbw_GBps": bus, "busbw_GBps_low": bus / 1.02,
                            "busbw_GBps_high": bus / 0.98})
    record = {"kind": "allreduce", "world_size": 4, "local_world_size": 2, "results": results, "links": p2p,
              "network": {"kind": "netlab", "rate_mbit": rate}}
    if training:
        compute, grad = 0.5, 44_700_000
        comm = {"flat": flat_allreduce_s(grad, 4, cluster), "hierarchical": hierarchical_allreduce_s(grad, 4, cluster)}
        step = {a: compute + max(0.0, s - 0.8 * 2 / 3 * compute) for a, s in comm.items()}
        record["ddp_training"] = {"batch_size": 16, "gradient_bytes": grad, "results": [
            {"algorithm": "none", "step_s": compute},
            *({"algorithm": a, "images_per_sec": 64 / s, "images_per_sec_low": 60 / s, "images_per_sec_high": 68 / s}
              for a, s in step.items())]}
    return record


def test_point_to_point_fit_recovers_the_link():
    link = fit_point_to_point([(n, 1e-4 + n / 25e6) for n in SIZES])
    assert link.bandwidth_gbit_s == pytest.approx(0.2, rel=1e-6) and link.latency_us == pytest.approx(100, rel=1e-6)


def test_a_noisy_link_whose_small_message_was_slower_still_gets_a_bandwidth():
    """Measured in CI on the emulated network (intra-node link, load): 64 KiB in 1.053 ms, 1 MiB in 0.566 ms."""
    link = fit_point_to_point([(65536, 1.053e-3), (1048576, 0.566e-3)])
    through_origin = (65536 * 1.053e-3 + 1048576 * 0.566e-3) / (65536**2 + 1048576**2)
    assert link.latency_us == 0 and link.bandwidth_gbit_s == pytest.approx(8 / through_origin / 1e9, rel=1e-9)
    assert 10 < link.bandwidth_gbit_s < 20  # about the large message's own rate (14.8 Gbit/s)
    with pytest.raises(ValueError, match="positive"):
        fit_point_to_point([(65536, 0.0), (1048576, 1e-3)])


def test_the_model_beside_a_measurement_of_its_own_network_is_exact():
    records = [_record(200), _record(1000)]
    rows = twolevel.allreduce_rows(records)
    assert len(rows) == 2 * 2 * len(SIZES) and max(abs(r["model_error"]) for r in rows) < 1e-6
    assert all(abs(r["model_error"]) < 1e-6 for r in twolevel.training_rows(records))
    verdict, training, model = twolevel.closing_claims(records)
    assert training.topic == "hierarchical training" and "at 200 Mbit/s hierarchical" in training.sentence
    assert model.verdict == "within", model.sentence
    assert verdict.verdict == "wins", verdict.sentence  # at 200 Mbit/s the hierarchy sends 1.0x instead of 1.5x
    assert "at 200 Mbit/s hierarchical is faster at 64 KiB 1.53x" in verdict.sentence
    table = twolevel.allreduce_table(records)
    assert set(table["model off by"]) <= {"+0%", "-0%"} and len(table) == 16


def test_model_error_is_reported_where_the_measurement_disagrees():
    off = twolevel.closing_claims([_record(200, flat_factor=1.5)])[2]
    assert off.verdict == "off" and "-33% (flat" in off.sentence  # the model predicted 1/1.5 of the time


def _rows(pairs, width=0.05):
    return [{"rate_mbit": 200, "bytes": n, "flat": Spread(f, (1 - width) * f, (1 + width) * f),
             "hierarchical": Spread(h, (1 - width) * h, (1 + width) * h)} for n, f, h in pairs]


@pytest.mark.parametrize("pairs, verdict, words", [
    ([(1 << 20, 1.0, 1.5), (4 << 20, 1.0, 1.5)], "wins", "faster at 1 MiB 1.50x (between 1.36x and 1.66x) "
     "(1.500 (1.425-1.575) vs 1.000 (0.950-1.050) GB/s), 4 MiB 1.50x"),
    ([(1 << 16, 1.0, 0.5), (4 << 20, 1.0, 1.5)], "wins at large messages", "slower at 64 KiB 0.50x"),
    ([(1 << 16, 1.0, 1.5), (4 << 20, 1.0, 0.5)], "mixed", "faster at 64 KiB"),
    ([(1 << 16, 1.0, 0.5), (4 << 20, 1.0, 0.6)], "loses", "slower at 64 KiB 0.50x (between 0.45x and 0.55x) "
     "(0.500 (0.475-0.525) vs 1.000 (0.950-1.050) GB/s), 4 MiB 0.60x"),
    ([(1 << 16, 1.0, 1.05)], "matters little", "within 10% at 64 KiB"),
    ([(1 << 16, 1.0, 1.12)], claims.NOT_DISTINGUISHABLE, "not distinguishable here at 64 KiB"),  # ranges overlap
])
def test_hierarchical_claim_follows_the_bus_bandwidths(pairs, verdict, words):
    width = {claims.NOT_DISTINGUISHABLE: 0.1, "matters little": 0.02}.get(verdict, 0.05)  # ranges inside the band
    claim = verdicts.hierarchical_vs_flat(_rows(pairs, width))
    if verdict == "matters little":
        assert claim.verdict == claims.NOT_DISTINGUISHABLE  # neither wins: said as such
    else:
        assert claim.verdict == verdict, claim.sentence
    assert words in claim.sentence, claim.sentence


def test_without_root_the_notebook_gets_a_sentence_not_a_traceback(monkeypatch):
    monkeypatch.setattr(twolevel.netlab, "unavailable", lambda: "not root: run as root")
    said = twolevel.measure([200])
    assert isinstance(said, str) and said.startswith("The two-level network was not built") and "root" in said
