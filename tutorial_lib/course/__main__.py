"""``python -m tutorial_lib.course``: the course run headless (:mod:`tutorial_lib.course`)."""

import sys

from tutorial_lib.course.runner import main

if __name__ == "__main__":
    sys.exit(main())
