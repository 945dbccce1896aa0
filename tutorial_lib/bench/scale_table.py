"""The table of docs/imagenet.md that says how each step of the data path grows from 10k files to ImageNet's
1,331,167, made from ``results/scale.jsonl`` (the latest record of each step, form and size).

    python -m tutorial_lib.bench.scale_table results/scale.jsonl    # prints the markdown table

Growth is the exponent ``k`` of ``seconds ~ files**k`` from the smallest (10k) and from the middle size (100k)
to the largest measured: 1 is linear, below 1 better (a fixed cost such as a process start dominates), above 1
worse; the second says how a step grows where the data no longer fits in caches.
"""

from __future__ import annotations

import argparse
import math

from tutorial_lib.bench.records import read_records
from tutorial_lib.bench.scale import SIZES

BEGIN = "<!-- scale-table: python -m tutorial_lib.bench.scale_table results/scale.jsonl -->"
END = "<!-- /scale-table -->"
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
    return math.log(points[large] / points[small]) / math.log(large / small)


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
    rows = sorted({(step, form) for step, form, _ in chosen if step in _ORDER},
                  key=lambda row: (_ORDER.index(row[0]), row[1]))
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


def main(argv: list[str] | None = None) -> int:
    """Print the table of the result file named on the command line."""
    parser = argparse.ArgumentParser(prog="python -m tutorial_lib.bench.scale_table",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("results", nargs="?", default="results/scale.jsonl", help="the scale benchmark's JSON lines")
    print(scale_table(read_records(parser.parse_args(argv).results)), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
