"""A notebook's closing numbers: shown as a table and recorded, with its claims and figures, for the course
run's ``SUMMARY.md`` (:func:`summarize`, :func:`write_summary`). What each notebook records is in
:mod:`tutorial_lib.course.closing`, one call per notebook.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tutorial_lib.bench.timing import significant_decimals

SUMMARY_ENV = "TUTORIAL_SUMMARY_DIR"


def _summary_dir() -> Path | None:
    target = os.environ.get(SUMMARY_ENV)
    return Path(target) if target else None


def save_figure(fig, name: str) -> Path | None:
    """Save ``fig`` as ``<name>.png`` into the course run's summary folder (if one is running)."""
    folder = _summary_dir()
    if folder is None:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    fig.savefig(path, bbox_inches="tight")
    return path


def summarize(notebook: str, numbers: dict, figures: dict | None = None, claims=()):
    """Show a notebook's closing numbers as a table and record them for the course summary.

    ``numbers`` maps a description to a value measured in this run (never typed in); a
    :class:`~tutorial_lib.bench.timing.Spread` is shown as ``median (low-high)``. ``claims`` are
    the notebook's :class:`~tutorial_lib.text.claims.Claim` objects (the sentences chosen from
    the numbers), written to SUMMARY.md as they are. ``figures`` maps a short name to a matplotlib
    figure to save beside the summary.
    """
    import pandas as pd

    table = pd.DataFrame({"value": [plain(v) for v in numbers.values()]}, index=list(numbers))
    folder = _summary_dir()
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
        saved = [str(save_figure(fig, f"{notebook}_{key}").name) for key, fig in (figures or {}).items()]
        record = {"notebook": notebook, "numbers": {k: plain(v) for k, v in numbers.items()}, "figures": saved,
                  "claims": [{"topic": c.topic, "verdict": c.verdict, "sentence": c.sentence} for c in claims]}
        (folder / f"{notebook}.json").write_text(json.dumps(record, indent=2))
    return table


def plain(value):
    """A value as SUMMARY.md shows it: numbers rounded to what a measurement can tell (3-4 digits)."""
    if hasattr(value, "median") and hasattr(value, "text"):  # a Spread
        return value.text()
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float):
        return round(value, significant_decimals(value))
    return value


def write_summary(out: Path, timings: dict[str, float]) -> Path:
    """Collect each notebook's recorded numbers and figures into ``out/SUMMARY.md``."""
    lines = ["# Course run summary", "", f"Executed notebooks are in `{out}`.", "",
             "| notebook | run time (s) |", "|---|---|"]
    lines += [f"| {name} | {seconds:.0f} |" for name, seconds in timings.items()]
    lines.append(f"| total | {sum(timings.values()):.0f} |")
    for record_path in sorted((out / "summary").glob("*.json")):
        record = json.loads(record_path.read_text())
        lines += ["", f"## {record['notebook']}", "", "| what | value |", "|---|---|"]
        lines += [f"| {key} | {plain(value)} |" for key, value in record["numbers"].items()]
        if record.get("claims"):
            lines += ["", "What the numbers say (chosen from them by `tutorial_lib.text.claims`):", ""]
            lines += [f"- {claim['topic']}: {claim['sentence']}" for claim in record["claims"]]
        lines += [f"\n![{name}](summary/{name})" for name in record.get("figures", [])]
    path = out / "SUMMARY.md"
    path.write_text("\n".join(lines) + "\n")
    return path
