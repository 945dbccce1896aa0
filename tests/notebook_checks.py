"""Exact output checks for notebooks that are committed without outputs.

nbval compares a cell's fresh output with the output stored in the notebook, but the course is
committed stripped. So the expected text of the cells marked ``# NBVAL_CHECK_OUTPUT`` lives in
``tests/notebook_expected.json``; ``prepare`` writes copies of the notebooks with exactly those
outputs put back, and nbval (``--nbval-lax``) runs the copies, checking the marked cells exactly and
the rest for errors only.

The copies run on test parameters (``tests/nbval_params.yaml``): the same cells and code paths as the
course, on less work (fewer steps and epochs, smaller images, fewer sweep points), written into each
copy's parameters cell; the notebooks themselves keep their teaching defaults for `make tutorial`.

    python tests/notebook_checks.py record executed/      # after a headless run (make tutorial)
    python tests/notebook_checks.py prepare build/nbval   # what `make test` does before nbval
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import sys
from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO_ROOT / "notebooks"
EXPECTED = Path(__file__).with_name("notebook_expected.json")
TEST_PARAMS = Path(__file__).with_name("nbval_params.yaml")
MARK = "# NBVAL_CHECK_OUTPUT"
# The notebooks' runs under `make test` go here, never to the course's runs/course (whose run directories the
# executed notebooks of `make tutorial` point to); conftest.py deletes the checkpoints they leave.
TEST_OUTPUT_ROOT = "build/test-runs"
SITE_ENV = "TUTORIAL_SITE"  # tutorial_lib.jobs.site.SITE_ENV (this script runs without the package imported)
# The notebook that tests/test_browser.py runs whole, in JupyterLab, on the same test parameters: where the browser
# test runs, nbval does not run it again (its three Slurm jobs, twice), and the browser test checks its marked cells
# with check_marked_outputs. Where no browser is, nbval runs it.
BROWSER_NOTEBOOK = "05_multi_node_slurm"
CHROMIUM = os.environ.get("TUTORIAL_CHROMIUM", "/usr/bin/chromium")
REQUIRE_BROWSER_ENV = "TUTORIAL_REQUIRE_BROWSER"  # CI: the browser test fails, not skips, without a browser
SANITIZE = Path(__file__).with_name("nbval_sanitize.cfg")  # nbval's --nbval-sanitize-with file (make test)


def site_parameter() -> dict | None:
    """The ``site:`` block of ``$TUTORIAL_SITE``'s file, or None without one. Under it (CI's strict cluster) each
    copy gets the block as its ``site`` parameter, as a user's parameter file gives it at a site (make course
    PARAMS=notebooks/params/ci-site.yaml): the notebooks' Slurm jobs run the way a user runs them, and the
    variable itself stays what the tests' own jobs read."""
    path = os.environ.get(SITE_ENV)
    if not path:
        return None
    block = (yaml.safe_load(Path(path).read_text()) or {}).get("site")
    if not isinstance(block, dict):
        raise SystemExit(f"error: {SITE_ENV}={path} holds no site: block. Fix: point it at a parameter file with "
                         "one (notebooks/params/ci-site.yaml).")
    return block


def _source(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def _key(cell: dict) -> str:
    return hashlib.sha256(_source(cell).encode()).hexdigest()[:16]


def marked_cells(notebook: dict) -> list[dict]:
    """The code cells whose output is checked exactly."""
    return [c for c in notebook["cells"] if c["cell_type"] == "code" and _source(c).lstrip().startswith(MARK)]


def _text_only(outputs: list[dict]) -> list[dict]:
    """Keep what is deterministic and comparable: streams and text results (no images)."""
    kept = []
    for output in outputs:
        if output["output_type"] == "stream":
            kept.append({"output_type": "stream", "name": output["name"], "text": output["text"]})
        elif output["output_type"] in ("execute_result", "display_data") and "text/plain" in output["data"]:
            data = {k: v for k, v in output["data"].items() if k in ("text/plain", "text/html", "text/markdown")}
            entry = {"output_type": output["output_type"], "metadata": {}, "data": data}
            if output["output_type"] == "execute_result":
                entry["execution_count"] = None
            kept.append(entry)
    return kept


def record(executed_dir: Path) -> dict:
    """Read the marked cells' outputs from executed notebooks into notebook_expected.json."""
    expected = {}
    for path in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        executed = json.loads((executed_dir / path.name).read_text())
        by_key = {_key(c): c for c in marked_cells(executed) if _key(c) in {_key(m) for m in marked_cells(
            json.loads(path.read_text()))}}
        expected[path.name] = {key: _text_only(cell.get("outputs", [])) for key, cell in by_key.items()}
    EXPECTED.write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")
    return expected


def browser_missing() -> str | None:
    """What tests/test_browser.py lacks to run here (Chromium, Playwright), or None."""
    if not Path(CHROMIUM).exists():
        return f"{CHROMIUM} is missing (Debian/Ubuntu: apt-get install chromium; or set TUTORIAL_CHROMIUM)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is missing (pip install -e '.[test]')"
    return None


def browser_runs_notebook() -> bool:
    """True where tests/test_browser.py runs :data:`BROWSER_NOTEBOOK` (or must, and fails without a browser)."""
    return os.environ.get(REQUIRE_BROWSER_ENV) == "1" or browser_missing() is None


def _sanitized(outputs: list[dict]) -> list[dict]:
    """``outputs`` as nbval compares them under :data:`SANITIZE`: text only, consecutive streams of one name
    joined (a browser's saved notebook and nbclient split them differently), each text with the patterns
    replaced."""
    import configparser
    import re

    parser = configparser.ConfigParser()
    parser.read(SANITIZE)
    patterns = [(re.compile(parser[name]["regex"]), parser[name]["replace"]) for name in parser.sections()]

    def clean(text) -> str:
        text = "".join(text) if isinstance(text, list) else text
        for pattern, replace in patterns:
            text = pattern.sub(replace, text)
        return text

    joined: list[dict] = []
    for output in _text_only(outputs):
        if joined and output["output_type"] == "stream" and joined[-1].get("name") == output["name"]:
            joined[-1]["text"] += "".join(output["text"])
        else:
            joined.append({**output, "text": "".join(output["text"])} if "text" in output else output)
    return [{"output_type": o["output_type"], "name": o.get("name"), "text": clean(o["text"])} if "text" in o else
            {"output_type": o["output_type"], "data": {k: clean(v) for k, v in o["data"].items()}} for o in joined]


def check_marked_outputs(notebook: dict, name: str) -> list[str]:
    """The marked cells of an executed ``notebook`` (file name ``name``) whose outputs differ from
    notebook_expected.json's, as nbval's ``--nbval-lax`` with :data:`SANITIZE` would find them: one line each."""
    expected = json.loads(EXPECTED.read_text()).get(name, {})
    return [f"{name}: {_source(cell).splitlines()[1:2]}: got {_sanitized(cell.get('outputs', []))!r:.600}, "
            f"expected {_sanitized(expected.get(_key(cell), []))!r:.600}"
            for cell in marked_cells(notebook)
            if _sanitized(cell.get("outputs", [])) != _sanitized(expected.get(_key(cell), []))]


def _assignments(notebook: dict) -> tuple[dict, dict]:
    """The parameters cell and its ``{name: ast.Assign}``."""
    cell = next(c for c in notebook["cells"] if "parameters" in c.get("metadata", {}).get("tags", []))
    return cell, {target.id: statement for statement in ast.parse(_source(cell)).body
                  if isinstance(statement, ast.Assign) for target in statement.targets if isinstance(target, ast.Name)}


def set_parameters(notebook: dict, values: dict, why: str, where: str) -> None:
    """Rewrite the assignments of ``values``' names in the notebook's parameters cell to those values, each
    line saying ``why`` and the default it replaced. A name the cell does not assign is refused (``where``
    names the notebook and the file that gave it): the copy would silently run on the default instead."""
    cell, assigned = _assignments(notebook)
    source = _source(cell)
    lines: list[str | None] = source.split("\n")
    for name, value in values.items():
        if name not in assigned:
            raise SystemExit(f"error: {where}: the notebook has no parameter {name!r}. Fix: use a name from its "
                             f"parameters cell ({', '.join(assigned)}).")
        statement = assigned[name]
        default = ast.get_source_segment(source, statement.value)
        lines[statement.lineno - 1] = f"{name} = {value!r}  # {why} (teaching default: {default})"
        for extra in range(statement.lineno, statement.end_lineno):  # a default written over several lines
            lines[extra] = None
    cell["source"] = "\n".join(line for line in lines if line is not None)


def load_test_parameters(path: Path = TEST_PARAMS) -> dict[str, dict]:
    """``{notebook stem: {name: value}}`` from the test parameter file; an unknown notebook is refused."""
    data = yaml.safe_load(path.read_text()) or {}
    stems = {p.stem for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")}
    for stem, values in data.items():
        if stem not in stems or not isinstance(values, dict):
            raise SystemExit(f"error: {path.name}: {stem!r} must be a notebook's file stem ({', '.join(sorted(stems))})"
                             " mapping its parameter names to values.")
    return data


def prepare(out_dir: Path, browser: bool | None = None) -> list[Path]:
    """Write copies of the notebooks with the expected outputs of marked cells put back, their runs sent
    to :data:`TEST_OUTPUT_ROOT` and their parameters set from :data:`TEST_PARAMS`; all but
    :data:`BROWSER_NOTEBOOK` where ``browser`` (None: :func:`browser_runs_notebook`)."""
    expected = json.loads(EXPECTED.read_text())
    params = load_test_parameters()
    site = site_parameter()
    out_dir.mkdir(parents=True, exist_ok=True)
    written, missing = [], []
    skip = {BROWSER_NOTEBOOK} if (browser_runs_notebook() if browser is None else browser) else set()
    for stale in (out_dir / f"{stem}.ipynb" for stem in skip):
        stale.unlink(missing_ok=True)  # a copy from a run without a browser: nbval would run it
    for path in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        if path.stem in skip:
            continue
        notebook = json.loads(path.read_text())
        if "output_root" in _assignments(notebook)[1]:  # a notebook that starts no job declares none
            set_parameters(notebook, {"output_root": TEST_OUTPUT_ROOT}, "make test: its own runs, not the course's",
                           path.name)
        set_parameters(notebook, params.get(path.stem, {}), f"make test: {TEST_PARAMS.name}",
                       f"{TEST_PARAMS.name}, {path.stem}")
        if site is not None and "site" in _assignments(notebook)[1]:
            set_parameters(notebook, {"site": site}, f"make test: ${SITE_ENV}'s site block", path.name)
        outputs = expected.get(path.name, {})
        for cell in marked_cells(notebook):
            if _key(cell) not in outputs:
                missing.append(f"{path.name}: {_source(cell).splitlines()[1:2]}")
                continue
            cell["outputs"] = outputs[_key(cell)]
            cell["execution_count"] = 1  # nbval treats a cell without a count as never run
        target = out_dir / path.name
        target.write_text(json.dumps(notebook, indent=1))
        written.append(target)
    if missing:
        raise SystemExit("error: no expected output recorded for these checked cells (they changed?):\n  "
                         + "\n  ".join(missing) + "\nFix: run `make tutorial`, then "
                         "`python tests/notebook_checks.py record executed`, and review the diff.")
    return written


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("record", "prepare"):
        raise SystemExit(__doc__)
    action, folder = sys.argv[1], Path(sys.argv[2])
    if action == "record":
        print(f"recorded {sum(len(v) for v in record(folder).values())} checked cells into {EXPECTED}")
    else:
        print(f"prepared {len(prepare(folder))} notebooks in {folder}"
              + (f" ({BROWSER_NOTEBOOK} is run by tests/test_browser.py)" if browser_runs_notebook() else ""))
