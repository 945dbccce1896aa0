"""``python -m tutorial_lib.rundir fresh RUN_DIR``: start a run over by removing the files this project wrote.

The same step as ``jobs.submit(..., fresh=True)``: anything else in the folder is listed and nothing is removed.
"""

from __future__ import annotations

import os
import sys

from tutorial_lib.exits import ArgumentParser, run_main
from tutorial_lib.rundir.lock import RunLock, RunLockedError
from tutorial_lib.rundir.owned import RunDirError, clear_run_dir


def main(argv: list[str] | None = None) -> int:
    """Entry point; exit 2 with a one-line message when the folder is refused or in use (:mod:`tutorial_lib.exits`)."""
    parser = ArgumentParser(prog="python -m tutorial_lib.rundir", description=__doc__)
    parser.add_argument("command", choices=["fresh"], help="fresh: remove the run's own files (a new start)")
    parser.add_argument("run_dir", help="the run directory (output_root/name)")

    def fresh() -> int:
        args = parser.parse_args(argv)
        if not os.path.isdir(args.run_dir):  # '~', '$(...)' or a typo: nothing there is a run to start over
            raise RunDirError(f"RUN_DIR: {args.run_dir!r} is no folder (the shell expands neither '~' in quotes nor "
                              "anything here), so no run was started over. Fix: pass the run directory "
                              "(output_root/name) as an existing path, e.g. runs/resnet18.")
        RunLock(args.run_dir).check()
        removed = clear_run_dir(args.run_dir)
        print(f"removed {len(removed)} file(s) of the run in {args.run_dir}")
        return 0

    return run_main(fresh, refused=(RunDirError, RunLockedError))


if __name__ == "__main__":
    sys.exit(main())
