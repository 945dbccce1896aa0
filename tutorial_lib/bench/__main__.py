"""``python -m tutorial_lib.bench ...``: the benchmarks' command line (:mod:`tutorial_lib.bench.cli`)."""

import sys

from tutorial_lib.bench.cli import main

if __name__ == "__main__":
    sys.exit(main())
