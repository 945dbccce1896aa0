"""``python -m tutorial_lib.scaling --preset NAME [--json]``: the model beside a published run."""

import sys

from tutorial_lib.scaling.presets import cli

if __name__ == "__main__":
    sys.exit(cli())
