"""Notebook 01: teaching demos of number formats (range and precision of fp32/TF32/fp16/bf16, underflow), and
which precisions this machine can train in the time given (from the benchmark's measured speed)."""

from __future__ import annotations

import torch


def number_formats():
    """Range and precision of fp32, TF32, fp16 and bf16 as a DataFrame (exact, machine independent)."""
    import pandas as pd

    rows = []
    for name, dtype, mantissa in (("fp32", torch.float32, 23), ("tf32 (matmul inputs)", None, 10),
                                  ("fp16", torch.float16, 10), ("bf16", torch.bfloat16, 7)):
        info = torch.finfo(dtype or torch.float32)
        rows.append({"format": name, "exponent bits": 8 if dtype in (None, torch.float32, torch.bfloat16) else 5,
                     "mantissa bits": mantissa, "largest": f"{info.max:.3g}",
                     "smallest normal": f"{info.tiny:.3g}", "relative step (eps)": f"{2.0 ** -mantissa:.3g}"})
    return pd.DataFrame(rows).set_index("format")


def underflow_demo(gradient: float = 1e-8, scale: float = 65536.0):
    """What a tiny gradient becomes in fp16 and bf16, without and with loss scaling (a DataFrame)."""
    import pandas as pd

    rows = []
    for name, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
        plain = torch.tensor(gradient).to(dtype).float().item()
        scaled = torch.tensor(gradient * scale).to(dtype).float().item() / scale
        rows.append({"format": name, "gradient": f"{gradient:.3g}", "stored": f"{plain:.3g}",
                     f"stored with loss scale {scale:g}, unscaled": f"{scaled:.3g}"})
    return pd.DataFrame(rows).set_index("format")


def affordable(records: list[dict], wanted: list[str], images: int, budget_s: float | None) -> tuple[list, list]:
    """Split ``wanted`` precisions into those whose training job fits ``budget_s`` seconds and the skipped ones.

    A job's time is predicted from the benchmark ``records`` (the plain setting: no channels_last, no compile):
    ``images`` trained images per rank (0: not known) at the measured median images/s. A CPU without bf16
    instructions emulates bf16 (on the 2-core AVX2 test machine about 40x slower than fp32), so its job would
    hold the course for many minutes. A precision not measured, or ``budget_s`` None, is kept; so is the fastest
    one when every job is over the budget.
    Returns ``(kept, [reason, ...])``, each reason a sentence naming the precision and the measured speed.
    """
    speed = {r["precision"]: r["images_per_sec"] for r in records if r.get("status") == "ok"
             and not r.get("channels_last") and r.get("compile") == "none" and r.get("images_per_sec")}
    predicted = {p: images / speed[p] for p in wanted if p in speed}
    if budget_s is None or images <= 0 or not predicted:  # whole epochs (images unknown here): keep all
        return list(wanted), []
    over = {p for p, seconds in predicted.items() if seconds > budget_s}
    if over == set(wanted):
        over.discard(min(predicted, key=predicted.get))
    fastest = max(speed[p] for p in predicted)
    reasons = [f"{p}: skipped: the benchmark measured {speed[p]:.1f} images/s here ({fastest / speed[p]:.0f}x slower "
               f"than the fastest precision), so its {images:,} images would take about {predicted[p] / 60:.0f} min, "
               f"over train_budget_s = {budget_s:g} s" for p in wanted if p in over]
    return [p for p in wanted if p not in over], reasons


def benchmark_record(records: list[dict], precision: str, config: dict) -> dict | None:
    """The benchmark record measured in the setting a training job ran in: its precision, memory layout and
    compile mode (``config``: the job's config.json; before the job starts, the plain setting). On a GPU the
    jobs run channels_last, and comparing them with the default layout's speed compared two settings."""
    setting = (precision, bool(config.get("channels_last", False)), config.get("compile", "none"))
    return next((r for r in records if r.get("status") == "ok" and r.get("kind", "train") == "train"
                 and (r["precision"], bool(r["channels_last"]), r["compile"]) == setting), None)


JOB_RATE = "job img/s: median (range) of epochs"  # the monitor's table shows the last epoch's, labelled so


def jobs_line(trained: list[str], wanted: list[str]) -> str:
    """How many training jobs run and which, counted from ``trained`` (what :func:`affordable` kept) against
    ``wanted``: ``2 training jobs: fp32, bf16`` or ``1 training job: fp32 (of 2 wanted; bf16 skipped above)``."""
    count = f"{len(trained)} training job{'s' * (len(trained) != 1)}: {', '.join(trained) or 'none'}"
    skipped = [p for p in wanted if p not in trained]
    return count + (f" (of {len(wanted)} wanted; {', '.join(skipped)} skipped above)" if skipped else "")


def training_runs(train_jobs: list, trained: list[str], records: list[dict], tolerance_points: float):
    """01's table of its training jobs, one per precision in ``trained``: each job's top-1/top-5, loss and
    outcome, its benchmark speed (median and range over the rounds) beside the speed the job trained at (median
    and range over its epochs), and the sentences on them: the accuracy of the precisions against a chosen
    threshold, benchmark against jobs, and whether each job learned. Returns ``(table, claims)``."""
    from tutorial_lib.analyses import analysis
    from tutorial_lib.bench.timing import Spread
    from tutorial_lib.text import claims

    table = analysis.final_accuracy(train_jobs)
    table.insert(1, "precision", trained)
    matched = {p: benchmark_record(records, p, analysis.run_config(job)) for p, job in zip(trained, train_jobs,
                                                                                          strict=True)}
    speed = {p: Spread.from_record(record) for p, record in matched.items() if record}
    table["benchmark img/s"] = [speed[p].text() if p in speed else "not measured" for p in trained]
    epoch_rates = [list(job.metrics("epoch").get("images_per_sec", [])) for job in train_jobs]
    table[JOB_RATE] = [Spread.of(r).text() if r else "-" for r in epoch_rates]
    chance = 100 / analysis.num_classes(analysis.run_config(train_jobs[0])) if train_jobs else None
    finished = {p: top1 for p, top1, state in zip(trained, table["top1"], table["state"], strict=True)
                if state == "COMPLETED"}  # only runs that ended
    said = [claims.precision_accuracy(finished, tolerance_points, chance),
            claims.benchmark_vs_jobs(speed, {p: Spread.of(r) for p, r in zip(trained, epoch_rates, strict=True) if r}),
            *(analysis.outcome(job, f"{p} job") for p, job in zip(trained, train_jobs, strict=True))]
    columns = ["run", "precision", "benchmark img/s", JOB_RATE, "epochs", "top1", "top5", "train_loss",
               "outcome", "state"]
    return table[columns], said


def best_step_yardstick(records: list[dict], fastest) -> dict:
    """The keyword arguments of :func:`tutorial_lib.text.claims.matmul_yardstick` for the setting with the
    highest median, named as ``fastest`` (:func:`tutorial_lib.text.claims.fastest_setting`'s Claim) decided it:
    "the fastest setting's step" only where that claim ranked one, else "the step with the highest median"
    and that the fastest are not distinguishable; with the step's range over its rounds."""
    from tutorial_lib.bench.records import setting_label
    from tutorial_lib.text.claims import NOT_DISTINGUISHABLE

    ok = [r for r in records if r.get("status") == "ok" and r.get("achieved_tflops")]
    if not ok:
        return {"achieved_tflops": None, "matmul_tflops": None}
    best = max(ok, key=lambda r: r["images_per_sec"])
    per_image = best["achieved_tflops"] / best["images_per_sec"]  # TFLOP/s per img/s: the step's FLOPs per image
    what = (f"the step with the highest median ({setting_label(best)}; the fastest settings are {NOT_DISTINGUISHABLE})"
            if fastest.verdict == NOT_DISTINGUISHABLE else f"the fastest setting's step ({setting_label(best)})")
    return {"achieved_tflops": best["achieved_tflops"], "matmul_tflops": best["matmul_tflops"], "what": what,
            "achieved_range": (per_image * best.get("images_per_sec_low", best["images_per_sec"]),
                               per_image * best.get("images_per_sec_high", best["images_per_sec"]))}
