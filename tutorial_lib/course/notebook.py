"""A notebook's parameters: the names and defaults of its ``parameters`` cell, and the check (run by
:func:`tutorial_lib.course.setup.setup_notebook`) that refuses a parameter papermill injected that the notebook does
not declare (papermill itself only warns, and the notebook would run with its default) or of another kind.

The refusal is one line wherever the notebook runs: JupyterLab, the course's own runner, plain
``papermill nb.ipynb out.ipynb -p epoch 3`` (whose last line is then that message, not the cell's traceback),
naming the nearest declared parameter or, where none is near, listing them all.
"""

from __future__ import annotations

import ast
import difflib
import json
from pathlib import Path


class NotebookParameterError(ValueError):
    """A parameter given to a notebook (papermill ``-p``/``-f``) that its parameters cell does not declare.

    IPython shows an exception with ``_render_traceback_`` by those lines alone: the kernel's error output, and so
    papermill's error message, is the one line, not a traceback through the library's frames."""

    def _render_traceback_(self) -> list[str]:
        return [f"{type(self).__name__}: {self}"]


def assigned_names(source: str) -> list[str]:
    """The names a cell's top-level assignments bind, in order (what a parameters cell declares)."""
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return []
    return [target.id for statement in body if isinstance(statement, ast.Assign) for target in statement.targets
            if isinstance(target, ast.Name)]


def _only_assignments(source: str) -> bool:
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return False
    return bool(body) and all(isinstance(statement, ast.Assign) for statement in body)


def unknown_parameter_message(name: str, declared: list[str], where: str, given: str) -> str:
    """``<where>: <what> has no parameter 'x' (<given>); did you mean 'y'?`` or, with no declared name near it,
    the declared names listed; then the fix. One sentence for every place that refuses a parameter name."""
    close = difflib.get_close_matches(name, declared, n=3) if isinstance(name, str) else []
    hint = (f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else
            f"; its parameters are {', '.join(declared)}." if declared else ".")
    return f"{where} has no parameter {name!r} ({given}){hint} Fix: use a name from its parameters cell."


def check_injected_parameters(history: list[str] | None = None) -> None:
    """Under papermill (``-p name value``): refuse a name the notebook's parameters cell does not declare,
    which papermill only warns about (the notebook would run with its default). ``history``: the sources of
    the cells run so far (IPython's ``In``); papermill's injected cell starts with ``# Parameters`` and runs
    right after the parameters cell. Raises :class:`NotebookParameterError` (one line)."""
    for cell, source in injected_cells(history):
        declared = assigned_names(cell)
        unknown = [name for name in assigned_names(source) if name not in declared]
        if unknown:
            raise NotebookParameterError(unknown_parameter_message(
                unknown[0], declared, "parameters: this notebook", "given with papermill -p or -f"))
        defaults, given = _literals(cell), _literals(source)
        for name in assigned_names(source):
            problem = parameter_problem(defaults.get(name), given.get(name, _NOT_A_VALUE))
            if problem:
                raise NotebookParameterError(f"parameters: {name} {problem} (given with papermill -p or -f). "
                                             f"Fix: e.g. -p {name} {example_value(defaults.get(name))}.")


def injected_cells(history: list[str] | None = None) -> list[tuple[str, str]]:
    """``(parameters cell, papermill's injected cell)`` of each injection among the cells run so far (``history``:
    IPython's ``In`` by default). A cell re-run by hand out of order is not one: the cell before papermill's
    ``# Parameters`` cell must be a parameters cell."""
    if history is None:
        from IPython import get_ipython

        shell = get_ipython()
        history = list(shell.user_ns.get("In", [])) if shell is not None else []
    return [(history[position - 1], source) for position, source in enumerate(history[1:], 1)
            if source.startswith("# Parameters\n") and _only_assignments(history[position - 1])]


def injected_values(source: str) -> dict:
    """The plain values an injected cell gives (an expression that is no plain value left out)."""
    return {name: value for name, value in _literals(source).items() if value is not _NOT_A_VALUE}


_NOT_A_VALUE = object()  # an injected expression that is no plain value (papermill writes nan as float('nan'))


def _literals(source: str) -> dict:
    """The plain value (a literal) each assignment of a cell gives; :data:`_NOT_A_VALUE` for any other."""
    import ast

    values = {}
    try:
        body = ast.parse(source).body
    except SyntaxError:  # a cell that does not parse holds no plain value (papermill's own cells always parse)
        return values
    for statement in body:
        if isinstance(statement, ast.Assign):
            try:
                value = ast.literal_eval(statement.value)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                value = _NOT_A_VALUE
            values.update({t.id: value for t in statement.targets if isinstance(t, ast.Name)})
    return values


LARGEST_WHOLE = 2**63 - 1  # what torch, numpy and the C libraries below the notebooks can hold


def example_value(value) -> str:
    """``value`` as a fix's ``-p NAME VALUE`` gives it, ready to paste into a shell: a list as ``'[a, b]'`` in one
    pair of quotes (r43ac: ``-p whatif_batches [4, 8]`` was split into three words), anything else as its repr."""
    if isinstance(value, (list, tuple)):
        return f"'[{', '.join(str(item) for item in value)}]'"
    return repr(value)


def parameter_problem(default, value) -> str | None:
    """Why ``value`` cannot stand for a parameter whose default is ``default``, or None: it must be of the default's
    kind (on/off, a whole number, a number, one line of text, a list of such, not empty when the default is not; a
    default of "auto" also takes on/off),
    finite and within 64 bits, and not negative where the default is not (a parameter whose default is None takes
    any value)."""
    from tutorial_lib.numbers import finite
    from tutorial_lib.numbers import shown as text_of

    if default is None:
        return None
    shown = text_of(value)[:60]
    if value is _NOT_A_VALUE:
        return "is not a plain value (nan, inf or an expression)"
    if isinstance(value, bool) and default == "auto":  # on, off, or as the machine suits (02's channels_last)
        return None
    if isinstance(default, bool):
        return None if isinstance(value, bool) else f"must be true or false, got {shown}"
    if isinstance(value, bool):  # r43ac: netlab_ranks_per_node true was told "must be true or false"
        return f"must be like its default {text_of(default)[:40]}, not true or false, got {shown}"
    if isinstance(default, (int, float)):
        whole = isinstance(default, int)
        if not isinstance(value, int if whole else (int, float)) or not finite(value):
            return f"must be {'a whole number' if whole else 'a finite number'} like its default, got {shown}"
        if isinstance(value, int) and abs(value) > LARGEST_WHOLE:  # no count or size of the course comes near it
            return f"must be at most {LARGEST_WHOLE:,} (a 64-bit whole number), got {shown}"
        return f"must not be negative, got {shown}" if value < 0 <= default else None
    if isinstance(default, str):
        return None if isinstance(value, str) and value.isprintable() else f"must be one line of text, got {shown}"
    if isinstance(default, (list, tuple)):
        if not isinstance(value, (list, tuple)) or (default and not value):
            return f"must be a non-empty list like its default, got {shown}"
        # r43ac: "must be true or false, got True" was said of example_gpus [1, true]
        odd = next((item for item in value if parameter_problem(default[0], item)), None) if default else None
        return None if odd is None else (f"must be a list of entries like {text_of(default[0])}, and "
                                         f"{text_of(odd)[:40]} is not one, got {shown}")
    return None if isinstance(value, type(default)) else f"must be a {type(default).__name__}, got {shown}"


def _parameters_cell(notebook: Path) -> str:
    cells = json.loads(Path(notebook).read_text())["cells"]
    return next(("".join(c["source"]) for c in cells if "parameters" in c.get("metadata", {}).get("tags", [])), "")


def declared_parameters(notebook: Path) -> list[str]:
    """The names a notebook's ``parameters`` cell assigns, in order (what papermill may set)."""
    return assigned_names(_parameters_cell(notebook))


def parameter_defaults(notebook: Path) -> dict:
    """Each parameter's default in a notebook's ``parameters`` cell (what :func:`parameter_problem` compares with)."""
    return _literals(_parameters_cell(notebook))
