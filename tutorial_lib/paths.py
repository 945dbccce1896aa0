"""How the project reads a path a user typed: ``~`` and ``~user`` expanded, the same way in every setting.

A shell expands ``~`` only at the start of an unquoted word, so ``--output-root "~"``, a YAML
``output_root: ~/runs`` or a notebook parameter arrive as a literal ``~``; without this, a folder named ``~``
would appear in the working directory. No torch here (the data tool uses it too).
"""

from __future__ import annotations

import os


def user_path(value: str | os.PathLike) -> str:
    """``value`` with a leading ``~`` or ``~user`` expanded (everything else unchanged, '' stays '')."""
    text = os.fspath(value)
    return os.path.expanduser(text) if text.startswith("~") else text
