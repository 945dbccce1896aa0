"""Running the course: notebook setup, closing summaries and the headless papermill run (here), its kernel, the
notebooks' job plans and what this machine offers (``kernel``, ``plans``, ``environment``).

``python -m tutorial_lib.course [--params FILE] [--only 03 ...] [--out executed]`` executes the
notebook sequence with papermill into a git-ignored folder and writes ``SUMMARY.md`` there: each
notebook's key numbers (as measured in that run) and its saved figures.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from tutorial_lib import REPO_ROOT

NOTEBOOK_DIR = REPO_ROOT / "notebooks"
SUMMARY_ENV = "TUTORIAL_SUMMARY_DIR"
DEFAULT_OUT = REPO_ROOT / "executed"


def setup_notebook(quiet: bool = False) -> None:
    """Call first in every notebook: refuse a parameter papermill injected that the notebook does not
    declare (:func:`check_injected_parameters`); work from the repository root so relative paths (data/,
    runs/) mean the same under JupyterLab, papermill and nbval; set readable plot defaults.

    Returns nothing, so that a cell ending with this call shows no stray value."""
    import matplotlib

    check_injected_parameters()
    if (REPO_ROOT / "notebooks").is_dir():
        os.chdir(REPO_ROOT)
    matplotlib.rcParams.update({"figure.dpi": 80, "figure.figsize": (9, 4), "axes.grid": True,
                                "grid.alpha": 0.3})
    if not quiet:
        print(f"working directory: {Path.cwd()}")


def _assigned(source: str) -> list[str]:
    import ast

    try:
        body = ast.parse(source).body
    except SyntaxError:
        return []
    return [target.id for statement in body if isinstance(statement, ast.Assign) for target in statement.targets
            if isinstance(target, ast.Name)]


def _only_assignments(source: str) -> bool:
    import ast

    try:
        body = ast.parse(source).body
    except SyntaxError:
        return False
    return bool(body) and all(isinstance(statement, ast.Assign) for statement in body)


def check_injected_parameters(history: list[str] | None = None) -> None:
    """Under papermill (``-p name value``): refuse a name the notebook's parameters cell does not declare,
    which papermill only warns about (the notebook would run with its default). ``history``: the sources of
    the cells run so far (IPython's ``In``); papermill's injected cell starts with ``# Parameters`` and runs
    right after the parameters cell."""
    if history is None:
        from IPython import get_ipython

        shell = get_ipython()
        history = list(shell.user_ns.get("In", [])) if shell is not None else []
    for position, source in enumerate(history[1:], 1):
        declared = _assigned(history[position - 1])
        # a cell re-run by hand out of order is not checked: the cell before must be a parameters cell
        if source.startswith("# Parameters\n") and _only_assignments(history[position - 1]):
            unknown = [name for name in _assigned(source) if name not in declared]
            if unknown:
                raise ValueError(f"parameters: this notebook has no parameter {unknown[0]!r} (given with papermill "
                                 "-p or -f). Fix: use a name from its parameters cell.")
            defaults, given = _literals(history[position - 1]), _literals(source)
            for name in _assigned(source):
                problem = parameter_problem(defaults.get(name), given.get(name, _NOT_A_VALUE))
                if problem:
                    raise ValueError(f"parameters: {name} {problem} (given with papermill -p or -f). Fix: e.g. "
                                     f"-p {name} {defaults.get(name)!r}.")


_NOT_A_VALUE = object()  # an injected expression that is no plain value (papermill writes nan as float('nan'))


def _literals(source: str) -> dict:
    """The plain value (a literal) each assignment of a cell gives; :data:`_NOT_A_VALUE` for any other."""
    import ast

    values = {}
    for statement in ast.parse(source).body:
        if isinstance(statement, ast.Assign):
            try:
                value = ast.literal_eval(statement.value)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                value = _NOT_A_VALUE
            values.update({t.id: value for t in statement.targets if isinstance(t, ast.Name)})
    return values


def parameter_problem(default, value) -> str | None:
    """Why ``value`` cannot stand for a parameter whose default is ``default``, or None: it must be of the default's
    kind (on/off, a whole number, a number, one line of text, a list of such, not empty when the default is not),
    finite, and not negative where the default is not (a parameter whose default is None takes any value)."""
    import math

    if default is None:
        return None
    shown = repr(value)[:60]
    if value is _NOT_A_VALUE:
        return "is not a plain value (nan, inf or an expression)"
    if isinstance(default, bool) or isinstance(value, bool):
        return None if isinstance(default, bool) and isinstance(value, bool) else f"must be true or false, got {shown}"
    if isinstance(default, (int, float)):
        whole = isinstance(default, int)
        if not isinstance(value, int if whole else (int, float)) or not math.isfinite(value):
            return f"must be {'a whole number' if whole else 'a finite number'} like its default, got {shown}"
        return f"must not be negative, got {shown}" if value < 0 <= default else None
    if isinstance(default, str):
        return None if isinstance(value, str) and value.isprintable() else f"must be one line of text, got {shown}"
    if isinstance(default, (list, tuple)):
        if not isinstance(value, (list, tuple)) or (default and not value):
            return f"must be a non-empty list like its default, got {shown}"
        return next(filter(None, (parameter_problem(default[0], item) for item in value)), None) if default else None
    return None if isinstance(value, type(default)) else f"must be a {type(default).__name__}, got {shown}"


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

    table = pd.DataFrame({"value": [_plain(v) for v in numbers.values()]}, index=list(numbers))
    folder = _summary_dir()
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
        saved = [str(save_figure(fig, f"{notebook}_{key}").name) for key, fig in (figures or {}).items()]
        record = {"notebook": notebook, "numbers": {k: _plain(v) for k, v in numbers.items()}, "figures": saved,
                  "claims": [{"topic": c.topic, "verdict": c.verdict, "sentence": c.sentence} for c in claims]}
        (folder / f"{notebook}.json").write_text(json.dumps(record, indent=2))
    return table


def _plain(value):
    """A value as SUMMARY.md shows it: numbers rounded to what a measurement can tell (3-4 digits)."""
    if hasattr(value, "median") and hasattr(value, "text"):  # a Spread
        return value.text(_digits(value.median))
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float):
        return round(value, _digits(value))
    return value


def _digits(value: float) -> int:
    """Decimals that keep about three significant digits (at least one place below 100)."""
    import math

    if not math.isfinite(value) or value == 0:
        return 1
    return max(1, 2 - int(math.floor(math.log10(abs(value)))))


def notebooks(only: list[str] | None = None) -> list[Path]:
    """The course notebooks in order (optionally only those whose names start with ``only``)."""
    found = sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb"))
    if only:
        found = [p for p in found if any(p.name.startswith(prefix) for prefix in only)]
    return found


def declared_parameters(notebook: Path) -> list[str]:
    """The names a notebook's ``parameters`` cell assigns, in order (what papermill may set)."""
    cells = json.loads(Path(notebook).read_text())["cells"]
    return _assigned(next(("".join(c["source"]) for c in cells
                           if "parameters" in c.get("metadata", {}).get("tags", [])), ""))


def check_parameter_names(params: dict, where: str = "parameters") -> None:
    """Refuse a parameter that no notebook declares (papermill would only warn, and the course would run
    with the notebook's default instead), naming it and the closest declared names."""
    import difflib

    declared = sorted({name for notebook in notebooks() for name in declared_parameters(notebook)})
    unknown = [name for name in params if name not in declared]
    if unknown:
        close = difflib.get_close_matches(unknown[0], declared, n=3) if isinstance(unknown[0], str) else []
        raise SystemExit(f"error: {where}: no notebook has a parameter {unknown[0]!r}"
                         + (f" (did you mean {', '.join(close)}?)" if close else "")
                         + ". Fix: use a name from a notebook's parameters cell (nothing was run).")


def run_course(out: str | os.PathLike = DEFAULT_OUT, params: dict | None = None, only: list[str] | None = None,
               kernel: str | None = None, progress: bool = True) -> Path:
    """Execute the notebooks headless with papermill into ``out``; write and return SUMMARY.md.

    ``params`` are passed to every notebook that declares them; a name no notebook declares is
    refused before anything runs (:func:`check_parameter_names`). A failing notebook stops the run
    with papermill's error, after the summary of the notebooks before it has been written.
    ``progress`` shows papermill's bar of executed cells.
    Course runs are never resumed, so once a notebook is done the checkpoints of the runs it
    finished are deleted (:func:`drop_finished_checkpoints`).
    """
    import papermill

    check_parameter_names(params or {})
    if only is not None and not notebooks(only):
        raise SystemExit(f"error: --only: no notebook's name starts with {', '.join(map(repr, only)) or 'nothing'} "
                         "(nothing was run). Fix: give number prefixes such as 00 03.")
    out = check_output_folder(out)
    os.environ[SUMMARY_ENV] = str(out / "summary")
    timings: dict[str, float] = {}
    started_at = time.time()
    try:
        for notebook in notebooks(only):
            print(f"== {notebook.name}", flush=True)
            started = time.perf_counter()
            declared = declared_parameters(notebook)
            given = {name: value for name, value in (params or {}).items() if name in declared}
            try:
                papermill.execute_notebook(str(notebook), str(out / notebook.name), parameters=given,
                                           cwd=str(REPO_ROOT), kernel_name=kernel, progress_bar=progress,
                                           log_output=False)
            except papermill.PapermillExecutionError as exc:
                exc.notebook = out / notebook.name  # for the command line's one-line message
                raise
            timings[notebook.stem] = time.perf_counter() - started
            freed = drop_finished_checkpoints((params or {}).get("output_root", "runs/course"), started_at)
            if freed:
                print(f"   deleted {freed / 2**20:.0f} MiB of checkpoints of finished course runs", flush=True)
            print(f"   done in {timings[notebook.stem]:.0f} s", flush=True)
    finally:
        summary = write_summary(out, timings)
    print(f"executed notebooks and summary: {summary}")
    return summary


OUTPUT_MARKER = ".tutorial_course_output"


def check_output_folder(out: str | os.PathLike) -> Path:
    """Make ``out`` the course's output folder, unless it holds files that an earlier course run did not
    write (executed notebooks would overwrite them): then stop with a message naming the fix."""
    from tutorial_lib.paths import user_path

    out = Path(user_path(out)).resolve()
    summary = out / "SUMMARY.md"
    ours = _marker_is_ours(out / OUTPUT_MARKER) or (summary.is_file() and summary.read_text(errors="replace")
                                                      .startswith("# Course run summary"))
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not ours)):
        raise SystemExit(f"error: out: {out} already holds files that the course did not write; executed "
                         "notebooks would overwrite them. Fix: pass --out a new or empty folder (default executed/).")
    out.mkdir(parents=True, exist_ok=True)
    (out / OUTPUT_MARKER).write_text(json.dumps(_MARKER_CONTENT))
    return out


_MARKER_CONTENT = {"written_by": "tutorial_lib.course", "what": "executed notebooks of the course"}


def _marker_is_ours(path: Path) -> bool:
    """The marker proves the folder is ours by its content (a file of that name alone does not)."""
    try:
        return json.loads(path.read_text()) == _MARKER_CONTENT
    except (OSError, ValueError):
        return False


def drop_finished_checkpoints(output_root: str | os.PathLike, since: float) -> int:
    """Delete ``checkpoint.pt`` of the finished runs (``DONE`` written) under ``output_root`` that
    this course run started (``config.json`` written after ``since``); return the bytes freed.

    Only files the trainer wrote are touched: a run directory the course did not create in this
    run, or one that did not finish, keeps its checkpoint (it may be resumed).
    """
    from tutorial_lib.paths import user_path
    from tutorial_lib.rundir.layout import CHECKPOINT_FILE, CONFIG_FILE, DONE_FILE
    from tutorial_lib.rundir.owned import classify, is_run_dir

    root = Path(user_path(output_root))
    root = root if root.is_absolute() else REPO_ROOT / root
    freed = 0
    for done in root.glob(f"*/{DONE_FILE}"):
        run_dir = done.parent
        config, checkpoint = run_dir / CONFIG_FILE, run_dir / CHECKPOINT_FILE
        if not (is_run_dir(run_dir) and checkpoint in classify(run_dir)[0]):  # checked by content, not name
            continue
        if config.is_file() and config.stat().st_mtime >= since:
            freed += checkpoint.stat().st_size
            checkpoint.unlink()
    return freed


def write_summary(out: Path, timings: dict[str, float]) -> Path:
    """Collect each notebook's recorded numbers and figures into ``out/SUMMARY.md``."""
    lines = ["# Course run summary", "", f"Executed notebooks are in `{out}`.", "",
             "| notebook | run time (s) |", "|---|---|"]
    lines += [f"| {name} | {seconds:.0f} |" for name, seconds in timings.items()]
    lines.append(f"| total | {sum(timings.values()):.0f} |")
    for record_path in sorted((out / "summary").glob("*.json")):
        record = json.loads(record_path.read_text())
        lines += ["", f"## {record['notebook']}", "", "| what | value |", "|---|---|"]
        lines += [f"| {key} | {_plain(value)} |" for key, value in record["numbers"].items()]
        if record.get("claims"):
            lines += ["", "What the numbers say (chosen from them by `tutorial_lib.text.claims`):", ""]
            lines += [f"- {claim['topic']}: {claim['sentence']}" for claim in record["claims"]]
        lines += [f"\n![{name}](summary/{name})" for name in record.get("figures", [])]
    path = out / "SUMMARY.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def load_params(path: str | os.PathLike) -> dict:
    """Notebook parameters from a YAML file (the same file works with ``papermill -f``); a key given twice,
    a Python tag or a torn file is refused in one line naming the file."""
    from tutorial_lib.paths import user_path
    from tutorial_lib.yamlfile import YamlFileError, read_yaml

    path = Path(user_path(path))
    if not path.is_file():
        raise SystemExit(f"error: parameter file {path} does not exist. Fix: pass a YAML file, e.g. "
                         "notebooks/params/gpu.yaml")
    try:
        data = read_yaml(path, "--params") or {}
    except YamlFileError as exc:
        raise SystemExit(f"error: {exc}") from None
    if not isinstance(data, dict):
        raise SystemExit(f"error: parameter file {path} must hold a mapping of name: value. Fix: write one "
                         "parameter a line, such as epochs: 1")
    return data


def main(argv: list[str] | None = None) -> int:
    """Command line: run the course headless. Exit status (:mod:`tutorial_lib.exits`): 0 done, 2 refused
    (a bad parameter or file: one line), 1 a fault of the machine or a notebook that failed, 130 Ctrl-C."""
    from tutorial_lib.exits import EXIT_ERROR, run_main

    return run_main(lambda: _main(argv), statuses={NotebookFailed: EXIT_ERROR})


class NotebookFailed(RuntimeError):
    """A notebook of the course raised an error (one line: the notebook, the cell, the error, where to look)."""


def _main(argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tutorial_lib.course", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--params", help="YAML file of notebook parameters (e.g. notebooks/params/gpu.yaml)")
    parser.add_argument("-p", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                        help="one parameter (YAML value), like papermill -p")
    parser.add_argument("--only", nargs="*", help="notebook number prefixes to run, e.g. 00 03")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="folder for executed notebooks")
    args = parser.parse_args(argv)
    from tutorial_lib.yamlfile import YamlFileError, parse_yaml

    params = load_params(args.params) if args.params else {}
    check_parameter_names(params, args.params or "parameters")
    try:
        params.update({name: parse_yaml(value, f"-p {name}") for name, value in args.p})
    except YamlFileError as exc:
        raise SystemExit(f"error: {exc}") from None
    check_parameter_names(params, "-p")
    import papermill

    try:
        run_course(args.out, params, args.only)
    except papermill.PapermillExecutionError as exc:
        where = getattr(exc, "notebook", "the executed notebook")
        raise NotebookFailed(f"{Path(str(where)).name} failed at cell In [{exc.exec_count}]: {exc.ename}: "
                             f"{exc.evalue}. Fix: see that cell's output in {where}, then run again.") from None
    return 0


if __name__ == "__main__":
    sys.exit(main())
