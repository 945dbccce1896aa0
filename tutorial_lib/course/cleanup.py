"""What a course run deletes once a notebook is done: the checkpoints of the runs it finished (course runs are
never resumed), and nothing the project did not write."""

from __future__ import annotations

import os
from pathlib import Path

from tutorial_lib import REPO_ROOT


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
