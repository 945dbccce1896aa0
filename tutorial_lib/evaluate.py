"""``python -m tutorial_lib.evaluate RUN_DIR --data-dir DIR``: top-1/top-5 of a finished run's model.pt
(:mod:`tutorial_lib.engine.model_file`); under torchrun every rank takes a share of the images."""

import sys

from tutorial_lib.engine.model_file import main

if __name__ == "__main__":
    sys.exit(main())
