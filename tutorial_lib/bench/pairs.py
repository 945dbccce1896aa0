"""Side-by-side comparisons kept as JSON lines: the sets of paired rounds in a result file, each pair's ratio,
and the generated blocks of a document (between two HTML comment markers) that show them.

Used by :mod:`tutorial_lib.bench.scale_table` (``prepare`` against GNU tar at ImageNet's file count) and
:mod:`tutorial_lib.bench.extract_table` (the same at ImageNet's file size, and the full set's time).

The records are read back checked, each field as it is read (:class:`CheckedRecord`): a result file is the user's to
pass, and a record torn by a killed benchmark, edited by hand or of another version may lack a field or hold one of
another type (r43x: ``{"kind": "scale", "status": "ok"}`` was a KeyError traceback). Checking each field where it is
read, against one table of what each field holds, keeps the generators' code as it is and names the record and the
field in one line.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable
from pathlib import Path

from tutorial_lib.numbers import finite


class BlockError(ValueError):
    """Bad input to the generated blocks: a document without their markers, a result file that is not there; the
    message names it and the fix."""


def _text(value) -> bool:
    return isinstance(value, str)


LARGEST = 2**63 - 1  # a count, a size or seconds past it is no measurement, and overflows a float's arithmetic (r43y)


def _whole(least: int):
    return lambda value: isinstance(value, int) and not isinstance(value, bool) and least <= value <= LARGEST


def _number(above_zero: bool):
    return lambda value: (isinstance(value, (int, float)) and not isinstance(value, bool) and finite(value)
                          and (0 < value if above_zero else 0 <= value) and value <= LARGEST)


# what each field the tables read holds, and how it is said in the message
FIELDS = {
    **{name: (_text, "a text") for name in ("kind", "status", "step", "form", "side", "set", "format")},
    **{name: (_whole(0), "a whole number from 0 to 2**63-1") for name in ("round", "val_images", "workers")},
    **{name: (_whole(1), "a whole number from 1 to 2**63-1") for name in ("files", "train_images", "shards")},
    **{name: (_number(True), "a number above 0 and at most 2**63-1") for name in (
        "seconds", "seconds_to_disk", "images_per_sec", "goal_s", "archive_bytes", "bytes")},
    **{name: (_number(False), "a number from 0 to 2**63-1") for name in ("load_average_1m", "disk_wait_s",
                                                                        "timestamp")},
    "cold_cache": (lambda value: isinstance(value, bool), "true or false"),
}


class CheckedRecord(dict):
    """A record whose fields are checked against :data:`FIELDS` as they are read (``record[name]`` and
    ``record.get(name)``): a missing or ill-typed field raises :class:`BlockError` naming ``where`` and the field."""

    def __init__(self, record: dict, where: str):
        super().__init__(record)
        self.where = where

    def __getitem__(self, name):
        if name not in self:
            raise BlockError(f"results: {self.where} lacks the field {name!r:.60}. Fix: pass the benchmark's own "
                             "JSON lines, or remove that record.")
        value = super().__getitem__(name)
        holds, said = FIELDS.get(name, (lambda _: True, ""))
        if not holds(value):
            raise BlockError(f"results: {self.where}: {name} is {value!r:.60}, not {said}. Fix: pass the "
                             "benchmark's own JSON lines, or remove that record.")
        return value

    def get(self, name, default=None):
        """The field checked as ``record[name]`` reads it, or ``default`` where the record lacks it."""
        return self[name] if name in self else default


def checked_records(records: list[dict], path: str) -> list[CheckedRecord]:
    """``records`` read from ``path``, each checked as its fields are read."""
    return [CheckedRecord(record, f"{path!r:.200} record {number}") for number, record in enumerate(records, 1)]


def paired_sets(records: list[dict], side_of: Callable[[dict], str | None],
                size_of: Callable[[dict], int]) -> list[list[dict]]:
    """The sets of paired rounds among ``records`` (those ``side_of`` names a side of; each has ``round``), each
    in the order run, sets ordered by size (``size_of``) then time. A set ends where round 0 comes again at its
    size or a side repeats in round 0."""
    sets: dict[int, list[list[dict]]] = {}
    for record in sorted(records, key=lambda r: r.get("timestamp", 0)):
        if side_of(record) is None or "round" not in record or record.get("status") != "ok":
            continue
        runs = sets.setdefault(size_of(record), [[]])
        if record["round"] == 0 and any(r["round"] > 0 or side_of(r) == side_of(record) for r in runs[-1]):
            runs.append([])
        runs[-1].append(record)
    return [run for size in sorted(sets) for run in sets[size]]


def pairs(chosen: list[dict], side_of: Callable[[dict], str | None], seconds_of: Callable[[dict], float],
          baseline: str, measured: str) -> list[tuple[float, float]]:
    """``(baseline seconds, measured seconds)`` of each round of a set in which both sides ran."""
    side = {(side_of(r), r["round"]): seconds_of(r) for r in chosen}
    rounds = sorted({r["round"] for r in chosen})
    return [(side[(baseline, n)], side[(measured, n)]) for n in rounds
            if (baseline, n) in side and (measured, n) in side]


def median_ratio(timed: list[tuple[float, float]]) -> float:
    """The median of the rounds' ``measured / baseline`` (each pair ran side by side, under the same load)."""
    return statistics.median(measured / baseline for baseline, measured in timed)


def replace_between(text: str, begin: str, end: str, body: str, where: str) -> str:
    """``text`` with the lines between the markers ``begin`` and ``end`` replaced by ``body``; BlockError naming
    the marker ``where`` lacks."""
    if begin not in text or end not in text:
        raise BlockError(f"--update: {where} lacks the marker {begin if begin not in text else end}. Fix: put the "
                         "two markers where the generated text goes.")
    head, rest = text.split(begin, 1)
    return head + begin + "\n" + body + end + rest.split(end, 1)[1]


def shown_between(path: str | Path, begin: str, end: str) -> str | None:
    """What a document shows between two markers (stripped), None where a marker is missing."""
    text = Path(path).read_text()
    if begin not in text or end not in text:
        return None
    return text.split(begin, 1)[1].split(end, 1)[0].strip()


def update_blocks(docs: Iterable[str | Path], blocks: list[tuple[str, str, Callable[[], str]]], what: str) -> None:
    """Rewrite, in each of ``docs``, the generated blocks it has (``(begin, end, make)``: ``make()`` gives the
    text); BlockError for a document with none of them or with half a block."""
    from tutorial_lib.paths import not_a_file

    for doc in docs:  # stat() only: opening a named pipe waits for a writer (r43aa: --update FIFO hung)
        kind = not_a_file(doc) or (None if Path(doc).exists() else "absent")
        if kind is not None:
            raise BlockError(f"--update: {str(doc)[:200]!r} is {kind}, not a document. Fix: pass the markdown files "
                             "whose blocks to rewrite (e.g. README.md).")
    rewritten = {}
    for doc in docs:  # every document's new text first: a block that cannot be made leaves all of them as they are
        path = Path(doc)
        text = original = path.read_text()
        present = [block for block in blocks if block[0] in text or block[1] in text]
        if not present:
            raise BlockError(f"--update: {path} has no block of {what} ({blocks[0][0]}). Fix: put the two markers "
                             "where the generated text goes.")
        for begin, end, make in present:
            text = replace_between(text, begin, end, make(), str(path))
        if text != original:
            rewritten[path] = text
    for path, text in rewritten.items():
        path.write_text(text)


def _table_rows(text: str) -> int | None:
    """The body rows of a generated markdown table, None for text that is no table."""
    lines = text.strip().splitlines()
    return len(lines) - 2 if lines and lines[0].startswith("|") else None


def blocks_main(argv: list[str] | None, module: str, default_results: str,
                blocks: dict[str, tuple[str, str, Callable[[list[dict]], str]]], what: str) -> int:
    """The command line of a module that generates ``blocks`` (``{name: (begin, end, make(records))}``) from a
    result file: print the first block (``--<name>``: another), or ``--update DOC...`` to rewrite the blocks each
    document has. Exit statuses of :mod:`tutorial_lib.exits`."""
    from tutorial_lib.bench.records import read_records
    from tutorial_lib.exits import ArgumentParser, run_main

    first, *others = blocks
    parser = ArgumentParser(prog=f"python -m {module}", description=f"prints {what} from a result file")
    parser.add_argument("results", nargs="?", default=default_results, help="the benchmark's JSON lines")
    for name in others:
        parser.add_argument(f"--{name}", action="store_true", help=f"print the {name} block instead of the {first}")
    parser.add_argument("--update", metavar="DOC", nargs="+", help="rewrite the blocks these documents have")

    def body() -> int:
        args = parser.parse_args(argv)
        if not Path(args.results).is_file():
            raise BlockError(f"results: {args.results} is not a file. Fix: pass the benchmark's JSON lines (default "
                             f"{default_results}, run from the project's root).")
        kind = Path(default_results).stem  # the benchmark's records: kind "extract" in results/extract.jsonl
        records = checked_records(read_records(args.results), args.results)
        if not any(record.get("kind") == kind for record in records):  # r43v, r43w: a user's file printed an empty
            raise BlockError(f"results: {args.results!r:.200} holds no {kind!r} record. Fix: pass the benchmark's "
                             f"JSON lines (default {default_results}).")  # table, rc 0 (--update wrote one)

        def made(name: str) -> str:  # r43x: records of the kind that make no row printed (or wrote) an empty table
            text = blocks[name][2](records)
            if _table_rows(text) == 0:
                raise BlockError(f"results: {args.results!r:.200} holds no complete set of {kind!r} records for the "
                                 f"{name} block (an empty table). Fix: run the benchmark to its end (python -m "
                                 f"tutorial_lib.bench {kind} --out {default_results}), or pass its JSON lines.")
            return text

        if args.update:
            update_blocks(args.update, [(begin, end, lambda name=name: made(name))
                                        for name, (begin, end, _) in blocks.items()], what)
            return 0
        print(made(next((name for name in others if getattr(args, name)), first)), end="")
        return 0

    return run_main(body, refused=(BlockError,))
