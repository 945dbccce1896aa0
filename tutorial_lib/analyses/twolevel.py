"""Notebook 07's two-level network: flat vs hierarchical all-reduce measured on an emulated network, beside
the scaling model's prediction for the same network.

:func:`measure` starts a lab (:class:`tutorial_lib.jobs.netlab.Lab`: network namespaces as nodes, each
node's port capped with tbf) per inter-node rate and runs ``python -m tutorial_lib.bench allreduce
--algorithm flat,hierarchical --links --ddp-steps N`` in it: all-reduce times per size, point-to-point times
inside a node and across nodes, and DDP training steps with each algorithm. :func:`allreduce_table` and
:func:`training_table` put the model beside each measurement, its links fitted to the point-to-point times
(:func:`tutorial_lib.scaling.fit_point_to_point`); :func:`closing_claims` words the result.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from tutorial_lib.bench.records import append_records, human_bytes, read_records
from tutorial_lib.bench.timing import Spread
from tutorial_lib.figures.readable import place_legend
from tutorial_lib.jobs import netlab
from tutorial_lib.scaling import (
    Cluster,
    bus_bandwidth_bytes_s,
    exposed_communication_s,
    fit_point_to_point,
    flat_allreduce_s,
    hierarchical_allreduce_s,
)
from tutorial_lib.scaling.model import DEFAULT_OVERLAP_FRACTION
from tutorial_lib.text import claims, verdicts

ALGORITHMS = ("flat", "hierarchical")


LAB_NODES = 2  # the emulated nodes of 07's lab


def check_lab_ranks(nodes: int, ranks_per_node: int, name: str = "ranks_per_node") -> None:
    """Refuse a lab of more rank processes than this machine runs at once (every emulated node is a namespace of
    this machine; r43ab: ``ranks_per_node`` 100,000 was handed to torchrun). ConfigError naming ``name``."""
    from tutorial_lib.engine.device import most_local_ranks
    from tutorial_lib.engine.errors import ConfigError
    from tutorial_lib.numbers import shown

    most = most_local_ranks()
    if nodes * ranks_per_node > most:
        raise ConfigError(f"{name}: {shown(ranks_per_node)} ranks on each of {nodes} emulated nodes is more than the "
                          f"{most} rank processes this machine runs at once. Fix: at most {most // nodes} ranks per "
                          "node (e.g. 2).")


def measure(rates_mbit=(200, 1000), nodes: int = LAB_NODES, ranks_per_node: int = 2, sizes: str = "64K,1M,4M",
            repeats: int = 3, ddp_steps: int = 1, min_time: float = 0.05, out: str | Path | None = None,
            timeout: float = 600, phases: bool = False) -> list[dict] | str:
    """One benchmark record per inter-node rate (Mbit/s), measured in a fresh lab; also appended to ``out``.

    Returns the sentence saying why nothing was measured where no lab can be built (not root). ``phases``
    adds the time of each phase of a hierarchical all-reduce of the largest size.
    """
    check_lab_ranks(nodes, ranks_per_node)
    reason = netlab.unavailable()
    if reason:
        return f"The two-level network was not built, so nothing below is measured: {reason}."
    netlab.remove_orphans()  # labs left by a killed run on this machine
    records = []
    for rate in rates_mbit:
        with netlab.Lab(nodes, rate) as lab, tempfile.TemporaryDirectory() as tmp:
            target = Path(tmp) / "allreduce.jsonl"
            lab.torchrun(["-m", "tutorial_lib.bench", "allreduce", "--algorithm", ",".join(ALGORITHMS), "--links",
                          "--sizes", sizes, "--repeats", str(repeats), "--min-time", str(min_time), "--ddp-steps",
                          str(ddp_steps), "--device", "cpu", "--quiet", "--out", str(target)] + ["--phases"] * phases,
                         ranks_per_node, timeout=timeout)
            records.append(read_records(target, kind="allreduce")[-1])
    if out:
        append_records(out, records)
    return records


def cluster_of(record: dict) -> Cluster:
    """The model's network for a record: intra and inter links fitted to its point-to-point times."""
    links = {level: fit_point_to_point([(r["bytes"], r["seconds"]) for r in data["results"]])
             for level, data in record["links"].items()}
    return Cluster(record["local_world_size"], intra=links["intra"], inter=links["inter"])


def predicted_allreduce_s(record: dict, nbytes: float, algorithm: str) -> float:
    """The model's time of one all-reduce of ``nbytes`` on the record's network with ``algorithm``."""
    cluster, world = cluster_of(record), record["world_size"]
    if algorithm == "flat":
        return flat_allreduce_s(nbytes, world, cluster, "ring")
    return hierarchical_allreduce_s(nbytes, world, cluster, "ring")


def _spread(result: dict, key: str) -> Spread:
    return Spread(result[key], result.get(f"{key}_low", result[key]), result.get(f"{key}_high", result[key]),
                  tuple(result.get(f"{key}_samples", ())))


def allreduce_rows(records: list[dict]) -> list[dict]:
    """Per rate, size and algorithm: measured time and bus bandwidth (median, range) and the model's."""
    rows = []
    for record in records:
        for result in record["results"]:
            predicted = predicted_allreduce_s(record, result["bytes"], result["algorithm"])
            rows.append({"rate_mbit": record["network"]["rate_mbit"], "bytes": result["bytes"],
                         "algorithm": result["algorithm"], "seconds": _spread(result, "seconds"),
                         "busbw_GBps": _spread(result, "busbw_GBps"), "model_s": predicted,
                         "model_busbw_GBps": bus_bandwidth_bytes_s(result["bytes"], predicted,
                                                                   record["world_size"]) / 1e9,
                         "model_error": predicted / result["seconds"] - 1})
    return rows


def allreduce_table(records: list[dict]):
    """The all-reduce measurements and predictions as a table (pandas)."""
    import pandas as pd

    return pd.DataFrame([{"inter-node Mbit/s": r["rate_mbit"], "size": human_bytes(r["bytes"]),
                          "algorithm": r["algorithm"], "measured ms": f"{r['seconds'].median * 1e3:.1f} "
                          f"({r['seconds'].low * 1e3:.1f}-{r['seconds'].high * 1e3:.1f})",
                          "bus GB/s": r["busbw_GBps"].text(3),
                          "model ms": round(r["model_s"] * 1e3, 1), "model off by": f"{100 * r['model_error']:+.0f}%"}
                         for r in allreduce_rows(records)])


def training_rows(records: list[dict]) -> list[dict]:
    """Per rate and algorithm: DDP training img/s measured (median, range) and the model's, whose compute time
    is the same step measured without DDP on every rank at once."""
    rows = []
    for record in records:
        training = record.get("ddp_training")
        if not training:
            continue
        by_name = {r["algorithm"]: r for r in training["results"]}
        compute = by_name["none"]["step_s"]
        images = training["batch_size"] * record["world_size"]
        for algorithm in ALGORITHMS:
            if algorithm not in by_name:
                continue
            comm = predicted_allreduce_s(record, training["gradient_bytes"], algorithm)
            step = compute + exposed_communication_s(comm, 2 / 3 * compute, DEFAULT_OVERLAP_FRACTION)
            measured = _spread(by_name[algorithm], "images_per_sec")
            rows.append({"rate_mbit": record["network"]["rate_mbit"], "algorithm": algorithm,
                         "images_per_sec": measured, "model_images_per_sec": images / step,
                         "model_error": images / step / measured.median - 1, "steps_per_round": training.get("steps")})
    return rows


def training_table(records: list[dict]):
    """The DDP training speeds and predictions as a table (pandas)."""
    import pandas as pd

    return pd.DataFrame([{"inter-node Mbit/s": r["rate_mbit"], "all-reduce": r["algorithm"],
                          "measured img/s": r["images_per_sec"].text(1),
                          "model img/s": round(r["model_images_per_sec"], 1),
                          "model off by": f"{100 * r['model_error']:+.0f}%"} for r in training_rows(records)])


def closing_claims(records: list[dict]) -> list[claims.Claim]:
    """Where hierarchical wins, where not (bus bandwidth), whether it trains faster (DDP img/s), and how far
    the model is off."""
    rows = allreduce_rows(records)
    pairs = {}
    for row in rows:
        pairs.setdefault((row["rate_mbit"], row["bytes"]), {})[row["algorithm"]] = row["busbw_GBps"]
    compared = [{"rate_mbit": rate, "bytes": size, **spreads} for (rate, size), spreads in pairs.items()
                if set(ALGORITHMS) <= set(spreads)]
    errors = {f"{r['algorithm']} {human_bytes(r['bytes'])} at {r['rate_mbit']:g} Mbit/s": r["model_error"]
              for r in rows}
    errors.update({f"training {r['algorithm']} at {r['rate_mbit']:g} Mbit/s": r["model_error"]
                   for r in training_rows(records)})
    return [verdicts.hierarchical_vs_flat(compared), verdicts.hierarchical_training(training_rows(records)),
            verdicts.model_error(errors)]


def plot(records: list[dict]):
    """Bus bandwidth against message size: measured (markers, range as error bars) and the model (lines)."""
    import matplotlib.pyplot as plt

    rows = allreduce_rows(records)
    rates = sorted({r["rate_mbit"] for r in rows})
    fig, axes = plt.subplots(1, len(rates), figsize=(5 * len(rates), 3.6), squeeze=False, sharey=True,
                             layout="constrained")
    for ax, rate in zip(axes[0], rates, strict=True):
        for algorithm, color in zip(ALGORITHMS, ("tab:blue", "tab:orange"), strict=True):
            mine = sorted((r for r in rows if r["rate_mbit"] == rate and r["algorithm"] == algorithm),
                          key=lambda r: r["bytes"])
            x = [r["bytes"] for r in mine]
            bw = [r["busbw_GBps"] for r in mine]
            ax.errorbar(x, [b.median for b in bw], fmt="o", color=color, label=f"{algorithm}, measured",
                        yerr=[[b.median - b.low for b in bw], [b.high - b.median for b in bw]])
            ax.plot(x, [r["model_busbw_GBps"] for r in mine], "--", color=color, label=f"{algorithm}, model")
        ax.set(xscale="log", xlabel="message bytes", title=f"inter-node port {rate:g} Mbit/s")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("bus bandwidth, GB/s")
    place_legend(axes[0][0], fontsize=8)
    return fig
