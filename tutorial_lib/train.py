"""``python -m tutorial_lib.train``: the training program (:mod:`tutorial_lib.engine.trainer`)."""

import sys

from tutorial_lib.engine.trainer import main

if __name__ == "__main__":
    sys.exit(main())
