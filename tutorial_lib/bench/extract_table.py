"""``prepare`` against GNU tar at ImageNet's file size, and the full archives' time projected from it, made from
``results/extract.jsonl`` (``python -m tutorial_lib.bench extract``) into docs/imagenet.md and the README.

    python -m tutorial_lib.bench.extract_table results/extract.jsonl          # prints the comparison table
    python -m tutorial_lib.bench.extract_table --time results/extract.jsonl   # prints the full set's time
    python -m tutorial_lib.bench.extract_table --update README.md docs/imagenet.md   # rewrites their blocks

The projection scales the latest set's median seconds by ImageNet's archive bytes and, as a check, by its file
count; with the benchmark's default image size (ImageNet's mean file size) the two agree, and the sentence gives
both ends. Only sets timed on a quiet disk (records with ``disk_wait_s``) count.
"""

from __future__ import annotations

import os
import statistics

from tutorial_lib.bench.pairs import blocks_main, median_ratio, paired_sets, pairs, update_blocks
from tutorial_lib.bench.scale_table import WITHIN

TABLE_BEGIN = "<!-- extract-table: python -m tutorial_lib.bench.extract_table results/extract.jsonl -->"
TABLE_END = "<!-- /extract-table -->"
TIME_BEGIN = "<!-- extract-time: python -m tutorial_lib.bench.extract_table --time results/extract.jsonl -->"
TIME_END = "<!-- /extract-time -->"
# ILSVRC2012_img_train.tar and ILSVRC2012_img_val.tar, in bytes, and the images they hold.
IMAGENET_ARCHIVE_BYTES = 147_897_477_120 + 6_744_924_160
IMAGENET_FILES = 1_281_167 + 50_000
SIDES = ("gnu_tar", "prepare", "copy")  # copy: the archives' bytes copied as they are, the disk's floor
BOUND_BY_FILES = 1.5  # prepare over this many times the copy's time: the work per file, not the disk, sets it


def _side(record: dict) -> str | None:
    if record.get("kind") == "extract" and "disk_wait_s" in record and record.get("side") in SIDES:
        return record["side"]
    return None


def _images(record: dict) -> int:
    return record["train_images"] + record["val_images"]


def _seconds(record: dict) -> float:
    return record["seconds_to_disk"]


def summaries(records: list[dict]) -> list[dict]:
    """One summary per set of paired rounds: images, archive bytes, the pairs' seconds, their ratios and median,
    each side's median seconds and projected hours for ImageNet's archives (by bytes and by file count)."""
    found = []
    for chosen in paired_sets(records, _side, _images):
        timed = pairs(chosen, _side, _seconds, "gnu_tar", "prepare")
        if not timed:
            continue
        images, archive = _images(chosen[0]), chosen[0]["archive_bytes"]
        medians = {"gnu_tar": statistics.median(t for t, _ in timed), "prepare": statistics.median(p for _, p in timed)}
        hours = {side: sorted((seconds * IMAGENET_ARCHIVE_BYTES / archive / 3600,
                               seconds * IMAGENET_FILES / images / 3600))
                 for side, seconds in medians.items()}
        copies = [_seconds(r) for r in chosen if r.get("side") == "copy"]
        if copies:
            medians["copy"] = statistics.median(copies)
        loads = [r["load_average_1m"] for r in chosen]
        found.append({"images": images, "archive_bytes": archive, "pairs": timed, "median_ratio": median_ratio(timed),
                      "medians": medians, "hours": hours, "load": (min(loads), max(loads)),
                      "cold_cache": all(r.get("cold_cache") for r in chosen)})
    return found


def duration(span: list[float]) -> str:
    """A span of hours as the reader wants it: minutes below 1.5 h, else hours to a tenth; one value where both
    ends round alike."""
    minutes = span[-1] < 1.5
    low, high = (f"{h * 60:.0f}" if minutes else f"{h:.1f}" for h in span)
    unit = "min" if minutes else "h"
    return f"{low} {unit}" if low == high else f"{low}-{high} {unit}"


def extract_table(records: list[dict]) -> str:
    """Markdown: one row per set: its size, each pair's seconds and ratio, the median ratio with its verdict
    against :data:`~tutorial_lib.bench.scale_table.WITHIN`, the copy's median seconds (the disk's floor), the load
    and whether the page cache was dropped."""
    head = ["images", "archives", "rounds", "GNU tar, s", "prepare, s", "prepare / tar, each round", "median",
            "copying the archives, s (median)", "load", "page cache", "verdict"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in summaries(records):
        ratio = s["median_ratio"]
        verdict = f"within {WITHIN}x of tar" if ratio <= WITHIN else f"{ratio:.2f}x tar's time: over {WITHIN}x"
        lines.append(
            f"| {s['images']:,} | {s['archive_bytes'] / 1e6:.0f} MB | {len(s['pairs'])} | "
            f"{', '.join(f'{t:.1f}' for t, _ in s['pairs'])} | {', '.join(f'{p:.1f}' for _, p in s['pairs'])} | "
            f"{', '.join(f'{p / t:.2f}' for t, p in s['pairs'])} | {ratio:.2f} | "
            f"{'-' if 'copy' not in s['medians'] else format(s['medians']['copy'], '.1f')} | "
            f"{s['load'][0]:.1f}-{s['load'][1]:.1f} | {'dropped' if s['cold_cache'] else 'kept'} | {verdict} |")
    return "\n".join(lines) + "\n"


def full_set_time(records: list[dict]) -> str:
    """The sentence on the full archives' time, from the latest set (the last of the largest size measured)."""
    found = summaries(records)
    if not found:
        return ("The time for ImageNet's full archives has not been measured yet: run `python -m tutorial_lib.bench "
                "extract --out results/extract.jsonl`.\n")
    largest = max(x["images"] for x in found)
    s = [x for x in found if x["images"] == largest][-1]  # sets come by size, then in the order run
    return (f"Preparing ImageNet's original archives ({IMAGENET_ARCHIVE_BYTES / 2**30:.0f} GiB, "
            f"{IMAGENET_FILES:,} images) takes about {duration(s['hours']['prepare'])} on the development machine's "
            f"disk, GNU tar doing the same work {duration(s['hours']['gnu_tar'])}: projected by bytes and by file "
            f"count from `python -m tutorial_lib.bench extract` ({s['images']:,} images, "
            f"{s['archive_bytes'] / s['images'] / 1e3:.0f} KB each on average as in ImageNet, "
            f"{len(s['pairs'])} interleaved pairs timed to disk, page cache "
            f"{'dropped' if s['cold_cache'] else 'kept'}, load {s['load'][0]:.1f}-{s['load'][1]:.1f}: "
            f"`prepare` {s['medians']['prepare']:.1f} s, GNU tar {s['medians']['gnu_tar']:.1f} s, median ratio "
            f"{s['median_ratio']:.2f}){_bound(s)}.\n")


def _bound(summary: dict) -> str:
    """What sets the time: the disk (``prepare`` close to copying the same bytes) or the work per file."""
    copy = summary["medians"].get("copy")
    if copy is None:
        return ""
    rate = summary["archive_bytes"] / copy / 1e6
    share = summary["medians"]["prepare"] / copy
    if share > BOUND_BY_FILES:
        return (f". `prepare` took {share:.1f}x as long as copying the archives' bytes ({copy:.1f} s, {rate:.0f} "
                "MB/s): the work per file, not this disk, sets the time here; on a disk that writes slower, the "
                "disk sets it")
    return (f". Copying the archives' bytes took about as long ({copy:.1f} s, {rate:.0f} MB/s): this disk's speed "
            "sets the time")


def update(docs: list[str | os.PathLike], records: list[dict]) -> None:
    """Rewrite the generated blocks each of ``docs`` has (the table, the time); BlockError for a document with
    neither."""
    update_blocks(docs, [(begin, end, lambda make=make: make(records)) for begin, end, make in _BLOCKS.values()],
                  "the extraction comparison")


def main(argv: list[str] | None = None) -> int:
    """Print the comparison table (``--time``: the full set's time) of a result file, or ``--update`` documents."""
    return blocks_main(argv, "tutorial_lib.bench.extract_table", "results/extract.jsonl", _BLOCKS,
                       "the extraction comparison")


_BLOCKS = {"table": (TABLE_BEGIN, TABLE_END, extract_table), "time": (TIME_BEGIN, TIME_END, full_set_time)}

if __name__ == "__main__":
    raise SystemExit(main())
