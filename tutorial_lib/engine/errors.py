"""The configuration error and the one way values are cut for messages (no torch, no other module).

Kept apart from :mod:`tutorial_lib.engine.config` so that :mod:`tutorial_lib.engine.validate` can raise it
without an import cycle; ``config`` re-exports both names.
"""

from __future__ import annotations

from tutorial_lib.numbers import shown


class OneLineError(ValueError):
    """Bad input, said in one line that names the field and the fix (:func:`tutorial_lib.exits.one_line`): line
    breaks and control characters of a value in it are escaped, and a long value is cut in the middle, never the
    message's start or its fix."""

    def __init__(self, message: object = "", *args):
        from tutorial_lib.exits import one_line

        super().__init__(one_line(str(message)), *args)


class ConfigError(OneLineError):
    """A configuration value is wrong; the message names the field and how to fix it."""


def shorten(value, limit: int = 60) -> str:
    """``repr(value)`` cut to about ``limit`` characters for messages (a 4 KB name stays readable)."""
    text = shown(value)
    if text.startswith("a whole number of "):  # past Python's int-to-text limit (r43x: a site's env value)
        return text
    if len(text) <= limit:
        return text
    size = (f" ({len(value):,} characters)" if isinstance(value, (str, bytes)) else
            f" ({len(value):,} items)" if isinstance(value, (list, tuple)) else "")  # r43ab: items were "characters"
    return f"{text[:limit // 2]}...{text[-(limit // 4):]}{size}"


def fail(name: str, problem: str, fix: str) -> None:
    """Raise ConfigError ``"<name>: <problem>. Fix: <fix>."``."""
    raise ConfigError(f"{name}: {problem}. Fix: {fix}.")
