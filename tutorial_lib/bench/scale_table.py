"""The tables of docs/imagenet.md made from ``results/scale.jsonl``: how each step of the data path grows from
10k files to ImageNet's 1,331,167 (the latest record of each step, form and size), and ``prepare`` against GNU
tar on the same archives (every set of paired rounds, with its verdict).

    python -m tutorial_lib.bench.scale_table results/scale.jsonl         # prints the growth table
    python -m tutorial_lib.bench.scale_table --tar results/scale.jsonl   # prints the tar comparison
    python -m tutorial_lib.bench.scale_table --update README.md docs/imagenet.md   # rewrites the tables they have

Growth is the exponent ``k`` of ``seconds ~ files**k`` from the smallest (10k) and from the middle size (100k)
to the largest measured: 1 is linear, below 1 better (a fixed cost such as a process start dominates), above 1
worse; the second says how a step grows where the data no longer fits in caches.
"""

from __future__ import annotations

import math
import os

from tutorial_lib.bench.pairs import blocks_main, median_ratio, paired_sets, pairs, update_blocks
from tutorial_lib.bench.scale import SIZES

BEGIN = "<!-- scale-table: python -m tutorial_lib.bench.scale_table results/scale.jsonl -->"
END = "<!-- /scale-table -->"
TAR_BEGIN = "<!-- tar-table: python -m tutorial_lib.bench.scale_table --tar results/scale.jsonl -->"
TAR_END = "<!-- /tar-table -->"
WITHIN = 1.1  # the goal: extraction within 1.1x of GNU tar's time
_ORDER = ("prepare", "tar", "scan", "job", "stage")  # the data path (the benchmark's own tree building is not in it)


def latest(records: list[dict]) -> dict[tuple[str, str, int], dict]:
    """The latest ok record of each (step, form, files)."""
    found: dict[tuple[str, str, int], dict] = {}
    for record in sorted(records, key=lambda r: r.get("timestamp", 0)):
        if record.get("kind") == "scale" and record.get("status") == "ok":
            found[(record["step"], record["form"], record["files"])] = record
    return found


def growth(points: dict[int, float]) -> float | None:
    """``k`` of ``seconds ~ files**k`` between the smallest and largest of ``points`` ({files: seconds})."""
    if len(points) < 2:
        return None
    small, large = min(points), max(points)
    if points[small] <= 0 or points[large] <= 0:
        return None
    # a difference of logs: the ratio of two valid times can underflow to 0 (5e-324 / 1e18) or overflow (r43z)
    return (math.log(points[large]) - math.log(points[small])) / math.log(large / small)


def _seconds(value: float) -> str:
    return f"{value:.2f}" if value < 10 else f"{value:.0f}" if value >= 100 else f"{value:.1f}"


def _verdict(k: float | None) -> str:
    return "-" if k is None else f"{k:.2f} ({'linear or better' if k <= 1.05 else 'worse than linear'})"


def scale_table(records: list[dict]) -> str:
    """Markdown: one row per step and form, seconds at each size (load in brackets), and the growth from the
    smallest size and from the middle one to the largest measured."""
    chosen = latest(records)
    sizes = sorted(SIZES.values())
    head = ["step", "form", *[f"{n:,} files" for n in sizes], "k, 10k to full", "k, 100k to full"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    rows = sorted({(step, form) for step, form, files in chosen if step in _ORDER and files in sizes},  # r43y: a
                  key=lambda row: (_ORDER.index(row[0]), row[1]))  # row of "-" alone was a table
    for step, form in rows:
        cells, points = [], {}
        for files in sizes:
            record = chosen.get((step, form, files))
            if record is None:
                cells.append("-")
                continue
            points[files] = record["seconds"]
            cells.append(f"{_seconds(record['seconds'])} s (load {record['load_average_1m']:.0f})")
        verdicts = [_verdict(growth(points)), _verdict(growth({n: t for n, t in points.items() if n >= sizes[1]}))]
        lines.append(f"| {step} | {form} | " + " | ".join(cells + verdicts) + " |")
    return "\n".join(lines) + "\n"


def _tar_side(record: dict) -> str | None:
    """``tar`` or ``prepare`` for a record of a pair timed on a quiet disk (see bench/disk.py), else None."""
    if record.get("step") in ("tar", "prepare") and "disk_wait_s" in record:
        return record["step"]
    return None


def tar_table(records: list[dict]) -> str:
    """Markdown: one row per set of paired rounds: each round's GNU tar and ``prepare`` seconds, the ratio of each
    pair, their median and the verdict against :data:`WITHIN`, with the load and whether the caches were dropped
    before each run; below it, for a size measured in
    several sets, how they scatter."""
    head = ["files", "rounds", "GNU tar, s", "prepare, s", "prepare / tar, each round", "median", "load", "caches",
            "verdict"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    groups: dict[tuple[int, bool], list[list[tuple[float, float]]]] = {}
    for chosen in paired_sets(records, _tar_side, lambda r: r["files"]):
        timed = pairs(chosen, _tar_side, lambda r: r["seconds"], "tar", "prepare")
        if not timed:
            continue
        ratios, median = [prep / tar for tar, prep in timed], median_ratio(timed)
        cold = all(r.get("cold_cache") for r in chosen)
        groups.setdefault((chosen[0]["files"], cold), []).append(timed)
        loads = [r["load_average_1m"] for r in chosen]
        verdict = f"within {WITHIN}x of tar" if median <= WITHIN else f"{median:.2f}x tar's time: over {WITHIN}x"
        lines.append(f"| {chosen[0]['files']:,} | {len(timed)} | {', '.join(_seconds(t) for t, _ in timed)} | "
                     f"{', '.join(_seconds(p) for _, p in timed)} | {', '.join(f'{x:.2f}' for x in ratios)} | "
                     f"{median:.2f} | {min(loads):.1f}-{max(loads):.1f} | "
                     f"{'dropped' if cold else 'kept'} | {verdict} |")
    notes = [_sets_note(files, cold, found) for (files, cold), found in sorted(groups.items()) if len(found) > 1]
    return "\n".join(lines) + "\n" + "".join(f"\n{note}\n" for note in notes)


def _sets_note(files: int, cold: bool, found: list[list[tuple[float, float]]]) -> str:
    """What the sets of one size and cache state say together: how far single runs and pairs scatter, how many
    sets' medians meet the goal."""
    runs = [pair for timed in found for pair in timed]
    ratios, medians = [prep / tar for tar, prep in runs], [median_ratio(timed) for timed in found]
    within = sum(median <= WITHIN for median in medians)
    return (f"At {files:,} files with the caches {'dropped' if cold else 'kept'}, {len(found)} sets: GNU tar took "
            f"{_seconds(min(t for t, _ in runs))}-{_seconds(max(t for t, _ in runs))} s, `prepare` "
            f"{_seconds(min(p for _, p in runs))}-{_seconds(max(p for _, p in runs))} s; single pairs "
            f"{min(ratios):.2f}-{max(ratios):.2f}x tar's time, the sets' medians {min(medians):.2f}-{max(medians):.2f};"
            f" {within} of {len(found)} within {WITHIN}x.")


def update(docs: list[str | os.PathLike], records: list[dict]) -> None:
    """Rewrite the tables each of ``docs`` has between their markers; BlockError for a document with neither or
    with half a block."""
    update_blocks(docs, [(begin, end, lambda make=make: make(records)) for begin, end, make in _BLOCKS.values()],
                  "the scale tables")


def main(argv: list[str] | None = None) -> int:
    """Print the growth table (``--tar``: the tar comparison) of the result file, or ``--update`` documents."""
    return blocks_main(argv, "tutorial_lib.bench.scale_table", "results/scale.jsonl", _BLOCKS, "the scale tables")


_BLOCKS = {"growth": (BEGIN, END, scale_table), "tar": (TAR_BEGIN, TAR_END, tar_table)}

if __name__ == "__main__":
    raise SystemExit(main())
