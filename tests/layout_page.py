"""docs/layout.md's layer table, drawn from the import-linter contracts in pyproject.toml.

``python tests/layout_page.py write`` rewrites the block between the two markers of docs/layout.md;
``tests/test_layers.py`` checks that the page holds exactly what this renders.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

REPO_ROOT = Path(__file__).resolve().parent.parent
PAGE = REPO_ROOT / "docs" / "layout.md"
BEGIN = "<!-- layers: drawn from pyproject.toml's [tool.importlinter] by `python tests/layout_page.py write` -->"
END = "<!-- layers: end -->"


def contracts() -> list[dict]:
    """The import-linter contracts of pyproject.toml, in their order."""
    config = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    return config["tool"]["importlinter"]["contracts"]


def purpose(module: str) -> str:
    """The first sentence of a package's or module's docstring, with Sphinx roles made plain code."""
    path = REPO_ROOT / Path(*module.split("."))
    path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    first = " ".join(doc.split("\n\n")[0].split())
    first = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", first).replace("``", "`")
    return re.split(r"(?<=\.)\s", first, maxsplit=1)[0]


def render() -> str:
    """The layer table (top layer first) and the rules, as markdown."""
    layers = next(c for c in contracts() if c["type"] == "layers")["layers"]
    lines = ["| layer | package | what it is |", "|---|---|---|"]
    for number, layer in enumerate(layers, 1):
        for module in (m.strip() for m in layer.split("|")):
            lines.append(f"| {number} | `{module}` | {purpose(module)} |")
    lines += ["", "The rules `make test` checks (`tests/test_layers.py` runs `lint-imports`):", ""]
    lines += [f"- {c['name']} (`{c['id']}`)" for c in contracts()]
    return "\n".join(lines)


def page_block(text: str) -> str:
    """What docs/layout.md holds between the markers."""
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n")


def write() -> None:
    """Rewrite the block between the markers of docs/layout.md."""
    text = PAGE.read_text()
    head, rest = text.split(BEGIN, 1)
    PAGE.write_text(f"{head}{BEGIN}\n{render()}\n{END}{rest.split(END, 1)[1]}")


if __name__ == "__main__":
    if sys.argv[1:] != ["write"]:
        sys.exit("usage: python tests/layout_page.py write")
    write()
