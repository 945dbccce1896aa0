"""The first cell of every notebook: :func:`setup_notebook`."""

from __future__ import annotations

import os
from pathlib import Path

from tutorial_lib import REPO_ROOT
from tutorial_lib.course.notebook import check_injected_parameters


def setup_notebook(quiet: bool = False) -> None:
    """Call first in every notebook: refuse a parameter papermill injected that the notebook does not
    declare, or of another kind than its default (:func:`check_injected_parameters`), or of a value the notebook
    would fail on in a later cell (:func:`~tutorial_lib.course.values.check_injected_values`, the course runner's
    own check); work from the repository root so relative paths (data/, runs/) mean the same under JupyterLab,
    papermill and nbval; set readable plot defaults.

    Returns nothing, so that a cell ending with this call shows no stray value."""
    import matplotlib

    from tutorial_lib.course.values import check_injected_values

    check_injected_parameters()
    if (REPO_ROOT / "notebooks").is_dir():
        os.chdir(REPO_ROOT)
    check_injected_values()  # after the move: the notebook reads relative paths from the repository's root
    matplotlib.rcParams.update({"figure.dpi": 80, "figure.figsize": (9, 4), "axes.grid": True,
                                "grid.alpha": 0.3})
    if not quiet:
        print(f"working directory: {Path.cwd()}")
