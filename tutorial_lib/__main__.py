"""``python -m tutorial_lib`` runs the training program (same as ``python -m tutorial_lib.train``)."""

import sys

from tutorial_lib.engine.trainer import main

sys.exit(main())
