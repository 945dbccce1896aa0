"""Whole numbers read from text that other programs or people wrote (Slurm's output, a labels file, environment
variables): ``str.isdigit()`` is true for ``'²'`` and for 5,000 digits, and ``int()`` of either raises (r43s), so
every such reader asks here instead."""

from __future__ import annotations


def whole_number(text: str, below: int = 2**31) -> int | None:
    """``text`` as a whole number in ``0 .. below - 1`` when it is plain ASCII decimal digits, else None."""
    if not (text.isascii() and text.isdigit()) or len(text) > len(str(below)):
        return None
    value = int(text)
    return value if value < below else None
