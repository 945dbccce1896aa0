"""``python -m tutorial_lib.bench ...``: the benchmarks' command line (see :mod:`tutorial_lib.bench`)."""

import sys

from tutorial_lib.bench import main

sys.exit(main())
