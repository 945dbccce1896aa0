"""Whole numbers read from text that other programs or people wrote (Slurm's output, a labels file, environment
variables): ``str.isdigit()`` is true for ``'²'`` and for 5,000 digits, and ``int()`` of either raises (r43s), so
every such reader asks here instead; :func:`finite` is the check of a number's value for the same reason.
"""

from __future__ import annotations


def finite(value: int | float) -> bool:
    """True for any int and for a finite float: ``math.isfinite`` of an int over 1.8e308 raises OverflowError
    (r43v: a 400-digit notebook parameter was a traceback)."""
    import math

    return isinstance(value, int) or math.isfinite(value)


def whole_number(text: str, below: int = 2**31) -> int | None:
    """``text`` as a whole number in ``0 .. below - 1`` when it is plain ASCII decimal digits, else None."""
    if not (text.isascii() and text.isdigit()) or len(text) > len(str(below)):
        return None
    value = int(text)
    return value if value < below else None


def shown(value) -> str:
    """``repr(value)``, or for a whole number past Python's int-to-text limit (4,300 digits, where ``repr`` raises
    ValueError) its size in bits: messages that show a refused value must not fail on it (r43x)."""
    try:
        return repr(value)
    except ValueError:
        if isinstance(value, int):
            return f"a whole number of {value.bit_length():,} bits"
        return f"a {type(value).__name__} holding a whole number too large to show"


def magnitude(value: int) -> str:
    """A whole number too long for a message, by its power of ten (``about 10^400``), or past Python's 4,300-digit
    int-to-text limit by its power of two (r43aa: ``len(str(...))`` of a 5,000-digit count raised ValueError)."""
    try:
        return f"about 10^{len(str(abs(value))) - 1}"
    except ValueError:
        return f"about 2^{abs(value).bit_length() - 1}"
