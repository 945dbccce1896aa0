"""Benchmark records: JSON lines written and read, one human line per record, tables and figure inputs.

Every record names the device, the library versions and all settings (``env``); unsupported settings
give ``status: "skipped"`` with the reason.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from tutorial_lib.rundir.metrics import append_jsonl, read_jsonl


def append_records(path: str | os.PathLike, records: list[dict]) -> Path:
    """Append records to a JSON-lines file (folders are created)."""
    return append_jsonl(path, records)


def read_records(path: str | os.PathLike, kind: str | None = None) -> list[dict]:
    """Records of a JSON-lines file (unreadable lines skipped), optionally only one ``kind``."""
    return [r for r in read_jsonl(path) if kind is None or r.get("kind") == kind]


def human_bytes(nbytes: float) -> str:
    """``4096`` -> ``4 KiB``, ``25 << 20`` -> ``25 MiB``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(nbytes) < 1024 or unit == "GiB":
            return f"{nbytes:g} {unit}" if float(nbytes).is_integer() else f"{nbytes:.1f} {unit}"
        nbytes /= 1024
    return f"{nbytes} GiB"  # pragma: no cover


def _fmt(value, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def share_of_matmul(achieved_tflops: float, matmul_tflops: float) -> float | None:
    """The step's achieved rate as a share of the dense matmul benchmark, or None where the step beat
    it: a yardstick the measured thing exceeds is no ceiling, and a share above 1 would call it one."""
    if not matmul_tflops or achieved_tflops > matmul_tflops:
        return None
    return achieved_tflops / matmul_tflops


def _cpu_has_bf16() -> bool:
    import torch

    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def precision_note(record: dict) -> str:
    """``"; ..."``: how a half-precision setting ran on a CPU, asked of torch (oneDNN's bf16 support and the CPU's
    vector capability); empty on a GPU and for fp32/tf32. Without bf16 instructions torch computes bf16 by
    converting to and from fp32, so that speed says nothing of a GPU's bf16 (02 trained its bf16 model so)."""
    precision = record.get("precision")
    if precision not in ("bf16", "fp16") or not str(record.get("device", "cpu")).startswith("cpu"):
        return ""
    import torch

    capability = torch.backends.cpu.get_cpu_capability()
    if precision == "bf16" and _cpu_has_bf16():
        return f"; bf16 on this CPU: it has bf16 instructions ({capability}, as oneDNN reports)"
    return (f"; {precision} on this CPU is emulated (no {precision} instructions: {capability}, as oneDNN reports; "
            "computed through fp32), so this speed says nothing of a GPU's")


def describe(record: dict) -> str:
    """One human line for a record."""
    kind, status = record.get("kind"), record.get("status")
    head = {"train": "{arch} {precision} cl={channels_last} compile={compile} b={batch_size} {image_size}px",
            "data": "{pipeline} workers={workers} b={batch_size} {image_size}px",
            "e2e": "{arch} {precision} {input_pipeline}-pipeline workers={workers} b={batch_size} {image_size}px",
            "trainer": "{run}: {dataset} {input_pipeline}-pipeline {arch} {precision} b={batch_size}",
            "peer": "{peer} {arch} {precision} cl={channels_last} compile={compile} b={batch}",
            "allreduce": "{backend} x{world_size}", "matmul": "{device}",
            "loader": "{recipe} workers={workers} b={batch_size} {image_size}px",
            "loader_ratio": "workers={workers} b={batch_size} {image_size}px",
            "staging": "{mode} round {round}: {images} files",
            "shards": "{set} {step} {format}: {files} images, {seconds} s",
            "extract": "{side} round {round}: {files} files, {bytes} bytes, {seconds_to_disk} s to disk",
            "scale": "{step} {form} at {files} files: {seconds} s"}.get(kind, "{kind}")
    text = f"{kind}: " + head.format_map({k: _fmt(v) for k, v in record.items()})
    if status != "ok":
        return f"{text}: {status} ({record.get('reason', '')})"
    if kind == "train":
        share = record.get("fraction_of_matmul")
        against = (f"of {record['matmul_tflops']:.2f} matmul" if share is not None else
                   f"above the {record['matmul_tflops']:.2f} matmul benchmark (no ceiling here)")
        return (f"{text}: {record['images_per_sec']:.1f} img/s, {memory_text(record)}, "
                f"{record['achieved_tflops']:.3f} TFLOP/s {against}{precision_note(record)}")
    if kind == "data":
        read = f", {record['mb_per_sec']:.1f} MB/s" if record.get("mb_per_sec") is not None else ""
        return f"{text}: {record['images_per_sec']:.1f} img/s{read}"
    if kind == "staging":
        return (f"{text}: {record['seconds']:.3f} s, {record['images_per_sec']:,.0f} files/s, "
                f"{record['mb_per_sec']:.1f} MB/s")
    if kind == "e2e":
        wait = 100 * record["data_wait_fraction"]
        return f"{text}: {record['images_per_sec']:.1f} img/s, waiting for data {wait:.0f}% of the time"
    if kind == "trainer":
        ratio = record.get("fraction_of_reference")
        versus = f", {ratio:.2f} of {record['reference_run']}" if ratio is not None else ""
        return (f"{text}: {record['images_per_sec']:.1f} img/s (windows {record['images_per_sec_low']:.1f}-"
                f"{record['images_per_sec_high']:.1f}){versus}")
    if kind == "peer":
        return f"{text}: {record['images_per_sec']:.1f} img/s, peak {record.get('peak_mem_gb')} GB"
    if kind == "matmul":
        return f"{text}: {record['matmul_dtype']} {record['matmul_size']}^3: {record['matmul_tflops']:.3f} TFLOP/s"
    if kind == "loader":
        return (f"{text}: {record['images_per_sec_per_worker']:.1f} img/s per worker "
                f"({record['images_per_sec_low']:.1f}-{record['images_per_sec_high']:.1f} in all), "
                f"peak {record['peak_pss_mb']:.0f} MB")
    if kind == "loader_ratio":
        return f"{text}: tutorial/plain {record['ratio']:.2f}x ({record['ratio_low']:.2f}-{record['ratio_high']:.2f})"
    if kind == "decode":
        return (f"{text}: PIL {record['pil_ms_per_image']:.2f} ms/image, torchvision "
                f"{record['torchvision_ms_per_image']:.2f} ms/image, "
                f"PIL/torchvision {record['pil_over_torchvision']:.2f}x "
                f"({record['pil_over_torchvision_low']:.2f}-{record['pil_over_torchvision_high']:.2f}): "
                f"{record['decision']}")
    if kind == "allreduce":
        best = max(r["busbw_GBps"] for r in record["results"])
        return f"{text}: {len(record['results'])} sizes, best bus bandwidth {best:.2f} GB/s"
    return text


TABLE_COLUMNS = {
    "train": [("arch", "arch", 0), ("precision", "precision", 0), ("channels_last", "channels_last", 0),
              ("compile", "compile", 0), ("batch_size", "batch", 0), ("image_size", "px", 0),
              ("images_per_sec", "img/s", 1), ("images_per_sec_low", "img/s low", 1),
              ("images_per_sec_high", "img/s high", 1), ("step_time_ms", "step ms", 1),
              ("peak_memory_gib", "peak GiB", 2),
              ("training_memory_gib", "training GiB", 2),
              ("achieved_tflops", "TFLOP/s", 3), ("matmul_tflops", "matmul TFLOP/s", 2),
              ("fraction_of_matmul", "of matmul", 3), ("warmup_s", "warm-up s (with compiling)", 1),
              ("note", "note", 0)],
    "data": [("pipeline", "pipeline", 0), ("workers", "workers", 0), ("batch_size", "batch", 0),
             ("image_size", "px", 0), ("images_per_sec", "img/s", 1), ("images_per_sec_low", "img/s low", 1),
             ("images_per_sec_high", "img/s high", 1), ("mb_per_sec", "MB/s", 1),
             ("decode_ms_per_image", "decode ms/img", 2), ("augment_ms_per_image", "augment ms/img", 2),
             ("note", "note", 0)],
    "e2e": [("arch", "arch", 0), ("precision", "precision", 0), ("channels_last", "channels_last", 0),
            ("input_pipeline", "input pipeline", 0), ("workers", "workers", 0), ("batch_size", "batch", 0),
            ("image_size", "px", 0),
            ("images_per_sec", "img/s from JPEG", 1), ("images_per_sec_low", "low", 1),
            ("images_per_sec_high", "high", 1), ("synthetic_images_per_sec", "img/s synthetic", 1),
            ("data_wait_fraction", "waiting for data", 2), ("note", "note", 0)],
    "trainer": [("run", "run", 0), ("dataset", "data", 0), ("input_pipeline", "input pipeline", 0),
                ("arch", "arch", 0), ("precision", "precision", 0), ("compile", "compile", 0),
                ("batch_size", "batch", 0), ("workers", "workers", 0), ("images_per_sec", "img/s", 1),
                ("images_per_sec_low", "low", 1), ("images_per_sec_high", "high", 1),
                ("fraction_of_reference", "of reference", 2), ("reference_run", "reference", 0),
                ("note", "note", 0)],
    "peer": [("peer", "peer", 0), ("arch", "arch", 0), ("precision", "precision", 0),
             ("channels_last", "channels_last", 0), ("compile", "compile", 0), ("batch", "batch", 0),
             ("images_per_sec", "img/s", 1), ("peak_mem_gb", "peak GB", 2), ("warmup_s", "warm-up s", 1)],
    "matmul": [("device", "device", 0), ("matmul_dtype", "dtype", 0), ("matmul_size", "size", 0),
               ("matmul_tflops", "TFLOP/s", 3)],
    "allreduce": [("backend", "backend", 0), ("world_size", "ranks", 0), ("nodes", "nodes", 0),
                  ("size", "size", 0), ("time_ms", "time ms", 3), ("algbw_GBps", "algbw GB/s", 2),
                  ("busbw_GBps", "busbw GB/s", 2)],
    "staging": [("round", "round", 0), ("mode", "what", 0), ("images", "files", 0), ("seconds", "s", 3),
                ("images_per_sec", "files/s", 0), ("mb_per_sec", "MB/s", 1), ("same_file_system", "same disk", 0),
                ("load_average_1m", "load", 1)],
}


def flat_rows(records: list[dict], kind: str) -> list[dict]:
    """Table rows of one kind (all-reduce records give one row per message size)."""
    rows = []
    for record in records:
        if record.get("kind") != kind:
            continue
        row = {k: v for k, v in record.items() if k not in ("env", "results")}
        row["note"] = "" if record.get("status") == "ok" else f"{record.get('status')}: {record.get('reason', '')}"
        for key in ("peak_memory", "training_memory"):
            if f"{key}_bytes" in record:
                row[f"{key}_gib"] = record[f"{key}_bytes"] / 2**30
        if kind == "allreduce":
            for result in record.get("results", []):
                rows.append({**row, **result, "time_ms": result["seconds"] * 1000,
                             "size": human_bytes(result["bytes"])})
        else:
            rows.append(row)
    return rows


def results_frame(records: list[dict], kind: str = "train"):
    """A pandas DataFrame of one kind of record with the table's readable column names."""
    import pandas as pd

    columns = TABLE_COLUMNS[kind]
    rows = [{title: row.get(key) for key, title, _ in columns} for row in flat_rows(records, kind)]
    return pd.DataFrame(rows, columns=[title for _, title, _ in columns])


def markdown_tables(records: list[dict]) -> str:
    """Markdown: the devices and library versions, then one table per kind of record."""
    lines = []
    envs = {json.dumps({k: r["env"].get(k) for k in ("device_name", "driver", "cuda", "torch", "torchvision",
                                                      "python", "cpu_model")}, sort_keys=True)
            for r in records if "env" in r}
    for env in sorted(envs):
        facts = json.loads(env)
        lines.append("- " + ", ".join(f"{k}: {v}" for k, v in facts.items() if v is not None))
    for kind, columns in TABLE_COLUMNS.items():
        rows = flat_rows(records, kind)
        if not rows:
            continue
        lines += ["", f"### {kind}", "", "| " + " | ".join(t for _, t, _ in columns) + " |",
                  "|" + "---|" * len(columns)]
        for row in rows:
            lines.append("| " + " | ".join(_fmt(row.get(key), digits).replace("|", "/") for key, _, digits in columns)
                         + " |")
    return "\n".join(lines) + "\n"


def setting_label(record: dict) -> str:
    """Short label of a train record's settings: ``bf16``, ``bf16 +CL``, ``fp16 +CL compile=default``."""
    label = record["precision"] + (" +CL" if record.get("channels_last") else "")
    if record.get("compile", "none") != "none":
        label += f" {record['compile']}"
    return label


def memory_text(record: dict) -> str:
    """A train record's memory, each figure named for what it counts: on a CUDA device the allocator's peak
    (what training needed); on a CPU the whole process's peak RSS (torch itself included) and what training
    added to it (``training_memory_bytes``, the figure's bars); all in MiB, the figure's unit."""
    def mib(nbytes: float) -> str:  # one unit for every record, the unit of the memory panel
        return f"{nbytes / 2**20:,.1f} MiB"

    if str(record.get("peak_memory_source", "")).startswith("torch.cuda"):
        return f"peak {mib(record['peak_memory_bytes'])} allocated by training (CUDA)"
    return (f"peak {mib(record['peak_memory_bytes'])} RSS of the whole process, "
            f"{mib(record.get('training_memory_bytes', 0))} of it added by training")


def memory_title(records: list[dict]) -> str:
    """The title of a bar chart of ``training_memory_bytes``: what those bytes are on the records' device."""
    ok = [r for r in records if r.get("status") == "ok" and r.get("kind") == "train"]
    if ok and all(str(r.get("peak_memory_source", "")).startswith("torch.cuda") for r in ok):
        return "peak CUDA memory allocated by training"
    return "memory training added\n(peak RSS minus the process before the model)"  # two lines: half a figure wide


def bar_values(records: list[dict], key: str = "images_per_sec", scale: float = 1.0) -> tuple[list, list]:
    """(labels, values) of the successful train records, for :func:`tutorial_lib.figures.plots.plot_bars`."""
    ok = [r for r in records if r.get("status") == "ok" and r.get("kind") == "train"]
    return [setting_label(r) for r in ok], [r[key] * scale for r in ok]


def training_summary(records: list[dict]) -> dict:
    """Key numbers of a train sweep: fp32 and best throughput, the best setting, its speed-up and
    share of the matmul ceiling, and how many settings this device could not run."""
    ok = [r for r in records if r.get("status") == "ok" and r.get("kind") == "train"]
    if not ok:
        return {"settings measured": 0}
    best = max(ok, key=lambda r: r["images_per_sec"])
    fp32 = [r["images_per_sec"] for r in ok if r["precision"] == "fp32" and not r["channels_last"]]
    numbers = {"settings measured": len(ok), "settings skipped": len(records) - len(ok),
               "fp32 images/s": fp32[0] if fp32 else None, "best setting": setting_label(best),
               "best images/s": best["images_per_sec"],
               "best speed-up over fp32": best["images_per_sec"] / fp32[0] if fp32 else None,
               "best achieved TFLOP/s": best["achieved_tflops"], "matmul TFLOP/s": best["matmul_tflops"],
               "best share of matmul rate": best.get("fraction_of_matmul")}
    return numbers


