"""The records a table generator (:mod:`~tutorial_lib.bench.scale_table`, :mod:`~tutorial_lib.bench.extract_table`,
:mod:`~tutorial_lib.bench.shards_table`) reads back from a result file, each field checked as it is read.

A result file is the user's to pass: a record torn by a killed benchmark, edited by hand or of another version may
lack a field or hold one of another type (r43x: ``{"kind": "scale", "status": "ok"}`` was a KeyError traceback, a
list where a step name goes a TypeError). The generators read fields by name in many places; checking each field
where it is read, against one table of what each field holds, keeps those places as they are and names the record
and the field in one line.
"""

from __future__ import annotations

from tutorial_lib.bench.pairs import BlockError
from tutorial_lib.numbers import finite


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
