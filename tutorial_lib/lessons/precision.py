"""Teaching demos of number formats (notebook 01): range and precision of fp32/TF32/fp16/bf16, and underflow."""

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


