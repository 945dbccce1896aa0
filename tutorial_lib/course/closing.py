"""Each notebook's last cell: the numbers it records for ``SUMMARY.md``, in one call per notebook.

Every function picks its notebook's measured numbers from what the notebook already holds (jobs, tables,
records), labels them as the summary shows them, and hands them with the notebook's claims and figures to
:func:`tutorial_lib.course.summary.summarize`, whose table it returns. A number that is a single run's says so
in its label, and a speed carries the spread it has.
"""

from __future__ import annotations

import json

from tutorial_lib.course.summary import summarize


def setup(info: dict, summary, grid) -> object:
    """00: this machine, the cluster, the data set; the sample grid."""
    return summarize("00_setup", {
        "GPUs": len(info["gpus"]),
        "CPU cores usable": info["cpu"]["usable_cores"],
        "RAM (GiB)": info["ram_gib"],
        "Slurm answers": info["slurm"]["available"],
        "Slurm nodes": len({node["node"] for node in info["slurm"]["nodes"]}),
        "classes": int(summary.loc["train", "classes"]),
        "training images": int(summary.loc["train", "images"]),
        "validation images": int(summary.loc["val", "images"]),
    }, figures={"samples": grid})


def mixed_precision(records: list[dict], trained: list[str], accuracy, figure, claims) -> object:
    """01: the settings measured and skipped, every speed (median and range), the matmul yardstick where it is
    a ceiling, and each training job's top-1 (one run per precision)."""
    from tutorial_lib.bench import rounds
    from tutorial_lib.bench.timing import Spread

    ok = [r for r in records if r.get("status") == "ok"]
    numbers = {"settings measured": len(ok), "settings skipped": len(records) - len(ok), **rounds.speeds(records)}
    if ok:  # the share only where the matmul rate is a ceiling (the step stayed below it)
        best = max(ok, key=lambda r: r["images_per_sec"])
        numbers["matmul TFLOP/s"] = best["matmul_tflops"]
        if best.get("fraction_of_matmul") is not None:  # with the range its rounds allow, as the sentence gives it
            share, rate = best["fraction_of_matmul"], best["images_per_sec"]
            numbers["highest median's share of matmul rate (range over its rounds)"] = Spread(
                share, *(share * best.get(f"images_per_sec_{end}", rate) / rate for end in ("low", "high")))
    numbers.update({f"top-1 {p} (%), one run": top1 for p, top1 in zip(trained, accuracy["top1"], strict=True)})
    return summarize("01_mixed_precision", numbers, figures={"throughput_memory": figure}, claims=claims)


def data_pipeline(summary: dict, parts: dict, loader: list[dict], gpu_pipeline: dict, model: dict, e2e: dict,
                  needed, both: dict, stage_times: dict, packed: dict, figures: dict, claims) -> object:
    """02: the data set, one image's parts (``{part: Spread}``), the loader per worker count, the GPU pipeline,
    the model against the files, the cores needed, both input pipelines, staging, class folders against shards
    (``packed``: :func:`tutorial_lib.bench.shards.compare_formats`)."""
    from tutorial_lib.bench.timing import Spread

    def workers(record):
        return f"{record['workers']} worker{'s' * (record['workers'] != 1)}"

    numbers = {"training images": summary["images"], "validation images": summary["val_images"],
               "mean training file size (KB)": summary["mean_file_kb"],
               **{f"{part} ms/image": spread for part, spread in parts.items()},
               **{f"loader images/s, {workers(r)}": Spread.from_record(r) for r in loader},
               "read MB/s at the most workers": Spread.from_record(loader[-1], "mb_per_sec"),
               "GPU-pipeline images/s": Spread.from_record(gpu_pipeline) or gpu_pipeline["status"],
               "model images/s (synthetic batches)": Spread.from_record(model),
               "trainer images/s from JPEG files": Spread.from_record(e2e),
               "share of time waiting for data": Spread.from_record(e2e, "data_wait_fraction"),
               "CPU cores needed (one core: the loader with 0 workers)": needed,
               **{f"trainer images/s, {p} input pipeline": Spread.from_record(r) for p, r in both.items()},
               **{f"share waiting, {p} input pipeline": Spread.from_record(r, "data_wait_fraction")
                  for p, r in both.items()},
               "staging: copy s": stage_times["copy"], "staging: read all s, from where it is": stage_times["shared"],
               "staging: read all s, from the copy": stage_times["staged"],
               **{f"files opened per epoch, {fmt}": count for fmt, count in packed["opened"].items()},
               # the shard comparison's own rounds, timed otherwise than the loader table and the staging above
               **{f"shard comparison: loader images/s from {fmt}, {packed['workers']} workers": spread
                  for fmt, spread in packed["load"].items()},
               **{f"shard comparison: staging s (copy + sync), {fmt}": spread
                  for fmt, spread in packed["stage"].items()}}
    return summarize("02_data_pipeline", numbers, figures=figures, claims=claims)


def ddp_one_node(job, plan, weights: dict, loss_gap: float, figure, claims) -> object:
    """03: the DDP job (its world, global batch, last epoch) and the equivalence check's weight differences."""
    recorded = json.loads((job.run_dir / "config.json").read_text())
    final = job.metrics("epoch").iloc[-1]
    return summarize("03_ddp_one_node", {
        "DDP job: workers": recorded["world_size"],
        "DDP job: global batch": recorded["global_batch"],
        "DDP job: final top-1 (%), one run": round(final["top1"], 1),
        "DDP job: throughput, last epoch (img/s)": round(final["images_per_sec"]),
        "equivalence check ran on": plan.extras["exact_ranks_on"],
        "GroupNorm 2w vs 1w: relative weight diff": f"{weights['group']['rel_diff']:.1e}",
        "GroupNorm 2w vs 1w: max |weight diff|": f"{weights['group']['max_abs_diff']:.1e}",
        "BatchNorm 2w vs 1w: relative weight diff": f"{weights['batch']['rel_diff']:.1e}",
        "GroupNorm 2w vs 1w: largest loss gap": f"{loss_gap:.1e}",
    }, figures={"loss_curves": figure}, claims=claims)


def large_batches(table, versus, all_jobs: list, figures: dict, claims) -> object:
    """04: every sweep run's top-1 (one run per cell), LARS and the highest SGD top-1 at the largest batch, and the
    sweep's training time."""
    from tutorial_lib.analyses import analysis

    numbers = {f"top-1 (%), {row.recipe}, batch {int(row.global_batch)}, one run": round(row.top1, 1)
               for row in table.itertuples()}  # a batch is a count: never "256.0" (a column with an empty cell)
    lars, sgd = versus[versus["optimizer"] == "lars"], versus[versus["optimizer"] != "lars"]
    if len(lars):
        numbers[f"top-1 (%), LARS, batch {int(lars['global_batch'].iloc[0])}, one run"] = round(lars["top1"].iloc[0], 1)
    if len(sgd):
        numbers[f"highest SGD top-1 (%), batch {int(sgd['global_batch'].iloc[0])}"] = round(sgd["top1"].max(), 1)
    times = analysis.final_accuracy(all_jobs)
    is_lars = times["optimizer"] == "lars"  # the sweep is SGD only: LARS's time is its own line
    numbers["sweep train time (s, sum of epochs)"] = round(times.train_time_s[~is_lars].sum())
    if is_lars.any():
        numbers["LARS train time (s, sum of epochs)"] = round(times.train_time_s[is_lars].sum())
    outcomes = [analysis.outcome(job) for job in all_jobs]
    return summarize("04_large_batches", numbers, figures=figures, claims=[*claims, *outcomes])


def multi_node(job, nodes_asked: int, planned, ranks, first_step: dict, long_job, claims) -> object:
    """05: the multi-node job (nodes asked for and run as, ranks, node names, final state, last epoch) and the
    cancelled job."""
    final = job.metrics("epoch").iloc[-1]
    return summarize("05_multi_node_slurm", {
        "backend used": job.backend,
        "multi-node job: nodes asked for": nodes_asked,
        "multi-node job: nodes it ran as": planned.nodes,
        "multi-node job: ranks (world size)": len(ranks),
        "multi-node job: distinct node names of the ranks": ranks["node"].nunique(),
        "multi-node job: final state": job.state,
        "multi-node job: final top-1 (%)": round(final["top1"], 1),
        "multi-node job: throughput, last epoch (img/s)": round(final["images_per_sec"]),
        "cancelled job: global step of the first step event": first_step["step"],
        "cancelled job: state after cancel": long_job.state,
    }, claims=claims)


def scaling_study(runs: list, results, plan, scale_over: str, imagenet_epochs: float, projection, reference,
                  reference_preset: str, figures: dict, claims) -> object:
    """06: per run its throughput (one run: the median of its epochs with their range), the projected ImageNet
    time and top-1; the efficiency and speed-up with the range the runs' epochs allow; the model's projection
    and the reference's efficiencies."""
    from tutorial_lib.analyses import study
    from tutorial_lib.bench.timing import Spread

    unit = study.rank_unit(results)
    numbers = {"backend used": runs[0].backend, "swept (measured)": f"{scale_over} = {plan.extras['measured']}"}
    for _, row in results.iterrows():
        ranks = f"{unit} = {row['gpus']}"
        numbers[f"{ranks}: throughput (img/s, one run; range over its epochs)"] = Spread(
            row["images_per_sec"], row["images_per_sec_low"], row["images_per_sec_high"])
        basis = study.projection_basis(row.to_dict())  # model, image size, device: what the time projects from
        numbers[f"{ranks}: {imagenet_epochs} ImageNet epochs projected from {basis} (h)"] = \
            round(row["time_to_train_s"] / 3600, 1)
        numbers[f"{ranks}: final top-1 (%)"] = round(row["top1"], 1)
    numbers.update(study.speedup_numbers(results))  # decided as the sentence under the figure decides
    if plan.extras["not_measured"]:
        numbers[f"not measured ({scale_over})"] = str(plan.extras["not_measured"])
    top_gpus = projection.index[-1]
    numbers[f"projected by the model (not measured) from {projection.attrs['basis']}: efficiency at {top_gpus} "
            f"{projection.index.name} (%)"] = projection.loc[top_gpus, "projected efficiency (%)"]
    top = reference.iloc[-1]
    numbers[f"reference ({reference_preset}), {top['gpus']} GPUs: throughput efficiency (%)"] = \
        round(100 * top["efficiency"], 1)
    numbers[f"reference ({reference_preset}), {top['gpus']} GPUs: time-to-solution efficiency (%)"] = \
        round(100 * top["time_efficiency"], 1)
    return summarize("06_scaling_study", numbers, figures=figures, claims=claims)


def communication(ranks: int, record: dict, best_busbw, link, fit_error: float, calibrate_level: str,
                  calibrated_64, example: dict, ps_runs: dict, gap_allreduce: float, figures: dict, claims) -> object:
    """07: the measured all-reduce and its fit, the model against the references, the calibrated what-if, the
    worked cost example (``{"mb", "gpus", "cluster"}``) and the parameter-server runs."""
    from tutorial_lib import scaling
    from tutorial_lib.scaling.presets import PRESETS, compare

    def time_error(preset: str, gpus: int) -> float:
        return next(r["time_relative_error"] for r in compare(PRESETS[preset])["rows"] if r["gpus"] == gpus)

    hal_64 = next(r for r in compare(PRESETS["hal"])["rows"] if r["gpus"] == 64)
    last = {name: run.records[-1] for name, run in ps_runs.items()}
    mb, gpus = example["mb"], example["gpus"]
    return summarize("07_communication", {
        "all-reduce ranks (backend)": f"{ranks} ({record['backend']})",
        "best measured bus bandwidth (GB/s)": best_busbw,
        "fitted latency alpha (us per step)": link.latency_us,
        "fitted bandwidth 1/beta (Gbit/s)": link.bandwidth_gbit_s,
        "median fit error over message sizes (%)": 100 * fit_error,
        "ref 000, 64 GPUs: model time error (%)": 100 * time_error("hal", 64),
        "ref 000, 64 GPUs: efficiency model / published (%)":
            f"{100 * hal_64['model_efficiency']:.0f} / {100 * hal_64['reference_efficiency']:.0f}",
        "ref 004, 256 GPUs: model time error (%)": 100 * time_error("goyal", 256),
        f"hal + measured link ({calibrate_level}): efficiency at 64 GPUs (%)": 100 * calibrated_64.efficiency,
        f"{mb} MB at {gpus} GPUs: ring / halving-doubling (ms)":
            " / ".join(f"{1e3 * scaling.allreduce_s(mb * 1e6, gpus, example['cluster'], a):.1f}"
                       for a in ("ring", "halving_doubling")),
        "max |w(s=0) - w(all-reduce)|": gap_allreduce,
        "final test accuracy per run (one run each)": ", ".join(f"{n} {r['accuracy']:.3f}" for n, r in last.items()),
        "wall time per run (s)": ", ".join(f"{n} {r['wall_s']:.2f}" for n, r in last.items()),
    }, figures=figures, claims=claims)
