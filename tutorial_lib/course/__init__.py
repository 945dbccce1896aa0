"""Running the course: notebook setup (``setup``; ``notebook``: its parameters; ``values``: their checks), closing
summaries (``summary``, ``closing``), the headless papermill run (``runner``) and what it deletes afterwards
(``cleanup``), its kernel, the notebooks' job plans and what this machine offers (``kernel``, ``plans``,
``environment``).

The names a notebook calls are here: ``course.setup_notebook()`` first, ``course.summarize(...)`` (through
:mod:`tutorial_lib.course.closing`) last; ``python -m tutorial_lib.course`` runs :func:`runner.main`.
"""

from __future__ import annotations

from tutorial_lib import REPO_ROOT
from tutorial_lib.course.cleanup import drop_finished_checkpoints
from tutorial_lib.course.notebook import NotebookParameterError, check_injected_parameters, declared_parameters
from tutorial_lib.course.runner import (
    DEFAULT_OUT,
    NOTEBOOK_DIR,
    OUTPUT_MARKER,
    NotebookFailed,
    check_output_folder,
    check_parameter_names,
    load_params,
    main,
    notebooks,
    run_course,
)
from tutorial_lib.course.setup import setup_notebook
from tutorial_lib.course.summary import SUMMARY_ENV, save_figure, summarize, write_summary

__all__ = ["DEFAULT_OUT", "NOTEBOOK_DIR", "OUTPUT_MARKER", "REPO_ROOT", "SUMMARY_ENV", "NotebookFailed",
           "NotebookParameterError", "check_injected_parameters", "check_output_folder", "check_parameter_names",
           "declared_parameters", "drop_finished_checkpoints", "load_params", "main", "notebooks", "run_course",
           "save_figure", "setup_notebook", "summarize", "write_summary"]
