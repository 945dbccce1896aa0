"""The headless course run: ``python -m tutorial_lib.course [--params FILE] [--only 03 ...] [--out executed]``
executes the notebook sequence with papermill into a git-ignored folder and writes ``SUMMARY.md`` there: each
notebook's key numbers (as measured in that run) and its saved figures.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from tutorial_lib import REPO_ROOT
from tutorial_lib.course.cleanup import drop_finished_checkpoints
from tutorial_lib.course.notebook import declared_parameters
from tutorial_lib.course.summary import SUMMARY_ENV, write_summary
from tutorial_lib.course.values import check_parameter_values

NOTEBOOK_DIR = REPO_ROOT / "notebooks"
DEFAULT_OUT = REPO_ROOT / "executed"


def notebooks(only: list[str] | None = None) -> list[Path]:
    """The course notebooks in order (optionally only those whose names start with ``only``)."""
    found = sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb"))
    if only:
        found = [p for p in found if any(p.name.startswith(prefix) for prefix in only)]
    return found


def check_parameter_names(params: dict, where: str = "parameters", only: list[str] | None = None) -> None:
    """Refuse a parameter that no notebook declares (papermill would only warn, and the course would run
    with the notebook's default instead), naming it and the closest declared names; with ``only``, one that none
    of those notebooks declares (r43x: ``--only 00 -p channels_last no`` ran 00, rc 0, the value unused)."""
    import difflib

    declared = sorted({name for notebook in notebooks() for name in declared_parameters(notebook)})
    chosen = {name for notebook in notebooks(only) for name in declared_parameters(notebook)} if only else None
    elsewhere = [name for name in params if name in declared and chosen is not None and name not in chosen]
    if elsewhere:
        owners = [nb.name[:2] for nb in notebooks() if elsewhere[0] in declared_parameters(nb)]
        raise SystemExit(f"error: {where}: {elsewhere[0]!r} is a parameter of notebook {', '.join(owners)}, not of "
                         f"--only {' '.join(only)}. Fix: add {owners[0]} to --only, or leave -p {elsewhere[0]} out "
                         "(nothing was run).")
    unknown = [name for name in params if name not in declared]
    if unknown:
        close = difflib.get_close_matches(unknown[0], declared, n=3) if isinstance(unknown[0], str) else []
        raise SystemExit(f"error: {where}: no notebook has a parameter {unknown[0]!r}"
                         + (f" (did you mean {', '.join(close)}?)" if close else "")
                         + ". Fix: use a name from a notebook's parameters cell (nothing was run).")


NO_JOBS = ("00_setup.ipynb",)  # the notebooks that submit no job (00 only reports where the later ones would run)


def check_cluster_site(params: dict, to_run: list[Path]) -> None:
    """Refuse, before anything runs, a course whose Slurm jobs every one would be refused for want of a partition:
    a notebook to run that submits jobs, their backend ``auto`` or ``slurm``, a Slurm controller that answers, a
    cluster with no default partition, and a site block (the ``site`` parameter, else ``$TUTORIAL_SITE``'s file)
    that names none (r44h: a plain ``make tutorial`` beside the strict emulated cluster failed in 01 after 13
    minutes of benchmarks). One line naming the site block, the cluster's partitions and both ways out."""
    from tutorial_lib.engine.config import ConfigError
    from tutorial_lib.jobs import slurm
    from tutorial_lib.jobs.site import load_site

    if all(notebook.name in NO_JOBS for notebook in to_run) or params.get("backend", "auto") == "local" \
            or not slurm.slurm_available()[0]:
        return
    try:
        site = load_site(params.get("site"))
    except ConfigError as exc:
        raise SystemExit(f"error: parameters: {exc} (nothing was run)") from None
    if site.partition:
        return
    nodes, why = slurm.cluster_nodes()
    if why or not nodes or any(node["default"] for node in nodes):
        return
    partitions = ", ".join(sorted({node["partition"] for node in nodes}))
    raise SystemExit(f"error: site: this Slurm cluster has no default partition and the course's site block names "
                     f"none, so every job would be refused (nothing was run). Fix: give a site block with a partition "
                     f"({partitions}): make course PARAMS=notebooks/params/<site>.yaml or TUTORIAL_SITE=<that file> "
                     f"(the emulated cluster's: notebooks/params/ci-site.yaml), or run the jobs on this machine: "
                     f"python -m tutorial_lib.course -p backend local.")


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
    if only is not None and (not only or not all(only) or not notebooks(only)):  # '' starts every name
        raise SystemExit(f"error: --only: no notebook's name starts with {', '.join(map(repr, only)) or 'nothing'} "
                         "alone (nothing was run). Fix: give number prefixes such as 00 03, or leave --only out to "
                         "run them all.")
    check_parameter_values(params or {}, notebooks(only))
    check_cluster_site(params or {}, notebooks(only))
    _check_out_apart(out, params or {})
    out = check_output_folder(out)
    before = os.environ.get(SUMMARY_ENV)
    os.environ[SUMMARY_ENV] = str(out / "summary")  # the kernels papermill starts write their summaries there
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
        if before is None:  # a kernel started later in this process (JupyterLab's) writes where it did before
            os.environ.pop(SUMMARY_ENV, None)
        else:
            os.environ[SUMMARY_ENV] = before
    print(f"executed notebooks and summary: {summary}")
    return summary


OUTPUT_MARKER = ".tutorial_course_output"


def _check_out_apart(out: str | os.PathLike, params: dict) -> None:
    """Refuse an ``out`` that is, or is inside, a given ``data_dir``: the course would write its notebooks into it,
    and then find it holding files it did not write there (r43y: 00 refused data_dir in its third cell, after
    --out was written into it)."""
    from tutorial_lib.paths import user_path

    where = Path(os.path.realpath(user_path(str(out))))  # r43z: a link to the data folder was not followed
    for name in ("data_dir",):
        value = params.get(name)
        if isinstance(value, str) and value:
            folder = Path(os.path.realpath(os.path.join(REPO_ROOT, user_path(value))))
            if where == folder or folder in where.parents:
                raise SystemExit(f"error: --out: {str(out)!r:.200} is {'' if where == folder else 'inside '}the "
                                 f"{name} {value!r:.200}, and the course would write its notebooks there. Fix: an "
                                 f"--out outside the {name} (nothing was run).")


def check_output_folder(out: str | os.PathLike) -> Path:
    """Make ``out`` the course's output folder, unless it holds files that an earlier course run did not
    write (executed notebooks would overwrite them): then stop with a message naming the fix."""
    from tutorial_lib.paths import in_system_folder, user_path

    system = in_system_folder(out)
    if system is not None:  # /sys/x: "Operation not permitted. Fix: chmod", the flag never named
        raise SystemExit(f"error: out: {out} {system}, where the course writes nothing. Fix: pass --out a new or "
                         "empty folder of your own (default executed/).")
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


def load_params(path: str | os.PathLike) -> dict:
    """Notebook parameters from a YAML file (the same file works with ``papermill -f``); a key given twice,
    a Python tag or a torn file is refused in one line naming the file."""
    from tutorial_lib.paths import user_path
    from tutorial_lib.yamlfile import YamlFileError, read_yaml

    path = Path(user_path(path))
    if not path.is_file():
        raise SystemExit(f"error: --params: parameter file {path} does not exist. Fix: pass a YAML file, e.g. "
                         "notebooks/params/gpu.yaml")
    try:
        data = read_yaml(path, "--params") or {}
    except YamlFileError as exc:
        raise SystemExit(f"error: {exc}") from None
    if not isinstance(data, dict):
        raise SystemExit(f"error: --params: parameter file {path} must hold a mapping of name: value. Fix: write one "
                         "parameter a line, such as epochs: 1")
    return data


def main(argv: list[str] | None = None) -> int:
    """Command line: run the course headless. Exit status (:mod:`tutorial_lib.exits`): 0 done, 2 refused
    (a bad parameter or file: one line), 1 a fault of the machine or a notebook that failed, 130 Ctrl-C."""
    from tutorial_lib.exits import EXIT_ERROR, run_main

    return run_main(lambda: _main(argv), statuses={NotebookFailed: EXIT_ERROR})


class NotebookFailed(RuntimeError):
    """A notebook of the course raised an error (one line: the notebook, the cell, the error, where to look)."""


def from_here(params: dict) -> dict:
    """``params`` with each relative path setting (output_root, data_dir, index_dir) made absolute from this working
    directory: the notebooks run in the repository's root, and the checks before them run here (r43s: a path given
    from another folder was checked as one file and used as another)."""
    from tutorial_lib.engine.config import PATH_FIELDS
    from tutorial_lib.paths import user_path

    # joined, not normalised: abspath would drop ``link/..`` before the kernel follows the link
    return {name: os.path.join(os.getcwd(), user_path(value)) if name in PATH_FIELDS and isinstance(value, str)
            and value else value for name, value in params.items()}


def _main(argv: list[str] | None) -> int:
    from tutorial_lib.exits import ArgumentParser

    parser = ArgumentParser(prog="python -m tutorial_lib.course", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--params", help="YAML file of notebook parameters (e.g. notebooks/params/gpu.yaml)")
    parser.add_argument("-p", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                        help="one parameter (YAML value), like papermill -p")
    parser.add_argument("--only", nargs="*", help="notebook number prefixes to run, e.g. 00 03")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="folder for executed notebooks")
    args = parser.parse_args(argv)
    from tutorial_lib.exits import check_path_arguments
    from tutorial_lib.yamlfile import YamlFileError, parse_yaml

    check_path_arguments({"--params": args.params}, {"--out": args.out})

    params = load_params(args.params) if args.params else {}
    check_parameter_names(params, args.params or "parameters")
    names = [name for name, _ in args.p]
    twice = next((name for index, name in enumerate(names) if name in names[:index]), None)
    if twice is not None:  # r43aa: the first value was used nowhere; --params refuses a key twice too
        raise SystemExit(f"error: -p: {twice[:60]!r} is given twice, and a parameter takes one value. Fix: give "
                         f"-p {twice[:60]} once (nothing was run).")
    try:
        params.update({name: parse_yaml(value, f"-p {name}") for name, value in args.p})
    except YamlFileError as exc:
        raise SystemExit(f"error: {exc}") from None
    only = args.only if args.only and all(args.only) and notebooks(args.only) else None  # r43y: else --only's own
    check_parameter_names(dict(args.p), "-p", only)  # message comes first (run_course), not a -p blamed
    params = from_here(params)
    import papermill

    try:
        run_course(args.out, params, args.only)
    except papermill.PapermillExecutionError as exc:
        where = getattr(exc, "notebook", "the executed notebook")
        raise NotebookFailed(f"{Path(str(where)).name} failed at cell In [{exc.exec_count}]: {exc.ename}: "
                             f"{exc.evalue}. Fix: see that cell's output in {where}, then run again.") from None
    return 0

