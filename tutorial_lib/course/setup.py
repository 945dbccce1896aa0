"""The first cell of every notebook: :func:`setup_notebook`."""

from __future__ import annotations

import os
from pathlib import Path

from tutorial_lib import REPO_ROOT
from tutorial_lib.course.notebook import check_injected_parameters


def setup_notebook(quiet: bool = False) -> None:
    """Call first in every notebook: refuse a parameter papermill injected that the notebook does not
    declare, or of another kind than its default (:func:`check_injected_parameters`), or of a value the notebook
    would fail on in a later cell (:func:`check_injected_values`, the course runner's own check); work from the
    repository root so relative paths (data/, runs/) mean the same under JupyterLab, papermill and nbval; set
    readable plot defaults.

    Returns nothing, so that a cell ending with this call shows no stray value."""
    import matplotlib

    check_injected_parameters()
    if (REPO_ROOT / "notebooks").is_dir():
        os.chdir(REPO_ROOT)
    check_injected_values()  # after the move: the notebook reads relative paths from the repository's root
    matplotlib.rcParams.update({"figure.dpi": 80, "figure.figsize": (9, 4), "axes.grid": True,
                                "grid.alpha": 0.3})
    if not quiet:
        print(f"working directory: {Path.cwd()}")


def check_injected_values(history: list[str] | None = None) -> None:
    """Under papermill: the values injected into a notebook of the course, checked as the course's runner checks
    them before it starts (:func:`~tutorial_lib.course.values.check_parameter_values`; r43x: ``papermill 02...
    -p classes 0`` was a ZeroDivisionError in the fourth cell). The notebook is known by its parameters cell's
    names (a copy of it, as nbval's, too). Raises NotebookParameterError (one line)."""
    from tutorial_lib.course.notebook import (
        NotebookParameterError,
        assigned_names,
        declared_parameters,
        injected_cells,
        injected_values,
    )
    from tutorial_lib.course.runner import notebooks
    from tutorial_lib.course.values import check_parameter_values

    for cell, source in injected_cells(history):
        notebook = next((nb for nb in notebooks() if declared_parameters(nb) == assigned_names(cell)), None)
        if notebook is None:
            continue
        try:
            check_parameter_values(injected_values(source), [notebook])
        except SystemExit as exc:
            message = str(exc.code).removeprefix("error: ").replace("(nothing was run)", "(given with papermill -p "
                                                                                            "or -f)")
            raise NotebookParameterError(message) from None
