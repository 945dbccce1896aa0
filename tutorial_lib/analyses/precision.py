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
