"""The table of docs/imagenet.md made from ``results/shards.jsonl`` (``python -m tutorial_lib.bench shards``):
packing, staging the shards against staging the class folders and against ``cp`` of the shards, the CPU loader
from shards against files, and a 4-rank job's first step, each set of interleaved rounds with its ratios.

    python -m tutorial_lib.bench.shards_table results/shards.jsonl                 # prints the table
    python -m tutorial_lib.bench.shards_table --update docs/imagenet.md            # rewrites its block

Each row is one set of paired rounds of one comparison; a ratio is the median over its rounds (each round's
sides ran one after the other under the same load). Goals (issue 45): staging the shards within 1.25x of
``cp`` and at most 0.2x of staging the files at ImageNet's file count; the loader from shards at least as fast as
from files.
"""

from __future__ import annotations

import statistics

from tutorial_lib.bench.pairs import blocks_main, median_ratio, paired_sets, pairs

BEGIN = "<!-- shards-table: python -m tutorial_lib.bench.shards_table results/shards.jsonl -->"
END = "<!-- /shards-table -->"
OF_COPY, OF_FILES = 1.25, 0.2  # the staging goals
SET_NAMES = {"jpeg": "500x375 JPEGs", "10k": "tiny files", "100k": "tiny files", "full": "tiny files"}


def _ok(records: list[dict], step: str) -> list[dict]:
    return [r for r in records if r.get("kind") == "shards" and r.get("status") == "ok" and r.get("step") == step]


def _groups(records: list[dict], step: str) -> list[list[dict]]:
    """The sets of paired rounds of ``step``, per data set (and worker count), in the order run."""
    keyed: dict[tuple, list[dict]] = {}
    for record in _ok(records, step):
        keyed.setdefault((record["set"], record.get("workers")), []).append(record)
    found = []
    for group in keyed.values():
        found += paired_sets(group, lambda r: r["format"], lambda r: r["files"])
    return sorted(found, key=lambda chosen: (chosen[0]["files"], chosen[0]["timestamp"]))


def _seconds(value: float) -> str:
    return f"{value:.2f}" if value < 10 else f"{value:.0f}" if value >= 100 else f"{value:.1f}"


def _load(chosen: list[dict]) -> str:
    loads = [r["load_average_1m"] for r in chosen]
    return f"{min(loads):.1f}-{max(loads):.1f}"


def _median(chosen: list[dict], fmt: str, key: str = "seconds") -> float | None:
    values = [r[key] for r in chosen if r["format"] == fmt]
    return statistics.median(values) if values else None


def _row(chosen: list[dict], what: str, cells: list[str], verdict: str) -> str:
    first = chosen[0]
    return (f"| {first['files']:,} {SET_NAMES.get(first['set'], first['set'])} | {what} | {' | '.join(cells)} | "
            f"{len({r['round'] for r in chosen})} | {_load(chosen)} | {verdict} |")


def _stage_row(chosen: list[dict]) -> str:
    seconds = lambda r: r["seconds"]  # noqa: E731
    of_files = pairs(chosen, lambda r: r["format"], seconds, "files", "shards")
    of_copy = pairs(chosen, lambda r: r["format"], seconds, "copy", "shards")
    files, shards, copy = (_median(chosen, f) for f in ("files", "shards", "copy"))
    ratios = [median_ratio(of_files) if of_files else None, median_ratio(of_copy) if of_copy else None]
    verdicts = []
    if ratios[1] is not None:
        verdicts.append(f"within {OF_COPY}x of cp" if ratios[1] <= OF_COPY else f"over {OF_COPY}x of cp")
    if ratios[0] is not None:
        verdicts.append(f"at most {OF_FILES}x of the files" if ratios[0] <= OF_FILES
                        else f"over {OF_FILES}x of the files")
    cells = ["-" if v is None else f"{_seconds(v)} s" for v in (files, shards, copy)]
    cells.append(" / ".join("-" if r is None else f"{r:.2f}" for r in ratios))
    return _row(chosen, "stage", cells, "; ".join(verdicts))


def _load_row(chosen: list[dict]) -> str:
    speeds = pairs(chosen, lambda r: r["format"], lambda r: r["images_per_sec"], "files", "shards")
    ratio = median_ratio(speeds) if speeds else None  # shards' images/s over the files'
    files, shards = (_median(chosen, f, "images_per_sec") for f in ("files", "shards"))
    cells = ["-" if files is None else f"{files:.0f} img/s", "-" if shards is None else f"{shards:.0f} img/s", "-",
             "-" if ratio is None else f"speed {ratio:.2f}x"]
    verdict = "-" if ratio is None else ("shards at least as fast" if ratio >= 1 else "shards slower")
    return _row(chosen, f"load, {chosen[0]['workers']} worker{'s' if chosen[0]['workers'] != 1 else ''}", cells,
                verdict)


def _first_step_row(chosen: list[dict]) -> str:
    timed = pairs(chosen, lambda r: r["format"], lambda r: r["seconds"], "files", "shards")
    files, shards = _median(chosen, "files"), _median(chosen, "shards")
    cells = ["-" if files is None else f"{_seconds(files)} s", "-" if shards is None else f"{_seconds(shards)} s",
             "-", "-" if not timed else f"{median_ratio(timed):.2f} / -"]
    goal = chosen[0].get("goal_s", 60)
    verdict = "both within 60 s" if max(r["seconds"] for r in chosen) <= goal else f"over {goal:.0f} s"
    return _row(chosen, "4-rank job, first step", cells, verdict)


def shards_table(records: list[dict]) -> str:
    """Markdown: the packs' times, then one row per set of paired rounds of staging, loading and the first step."""
    head = ["set", "step", "files", "shards", "cp of the shards", "shards / files, shards / cp (median)", "rounds",
            "load", "verdict"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for record in sorted(_ok(records, "pack"), key=lambda r: (r["files"], r["timestamp"])):
        size = f"{record['bytes'] / 1e9:.2f} GB in {record['shards']:,} shards"
        lines.append(f"| {record['files']:,} {SET_NAMES.get(record['set'], record['set'])} | pack | - | "
                     f"{_seconds(record['seconds'])} s ({size}) | - | - | 1 | {record['load_average_1m']:.1f} | - |")
    for step, row in (("stage", _stage_row), ("load", _load_row), ("first_step", _first_step_row)):
        lines += [row(chosen) for chosen in _groups(records, step)]
    if len(lines) == 2:
        return ("No shards benchmark recorded yet: run `python -m tutorial_lib.bench shards --out "
                "results/shards.jsonl`.\n")
    return "\n".join(lines) + "\n"


_BLOCKS = {"table": (BEGIN, END, shards_table)}


def main(argv: list[str] | None = None) -> int:
    """Print the table of a result file, or ``--update`` documents."""
    return blocks_main(argv, "tutorial_lib.bench.shards_table", "results/shards.jsonl", _BLOCKS,
                       "the shards comparison")


if __name__ == "__main__":
    raise SystemExit(main())
