"""The torch/torchvision pairs tested besides the pinned one, and the part of the suite each runs: one place.

``make test-compat PAIR=2.11`` (or ``TORCH=2.5.1 TORCHVISION=0.20.1``) makes ``.venv-torch<torch>`` from the
package registry with the pair's pins (:func:`constraints`) and runs :data:`SUBSET` in it, appending one line
to ``results/compat.jsonl`` (``tests/compat_record.py``). CI (``.ci/run``) runs every pair of :data:`PAIRS`.

    python tests/compat_plan.py constraints --pair 2.3        # the pins a pair's venv is installed with
    python tests/compat_plan.py tests                          # the compat subset, as pytest arguments
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Pair:
    """A torch/torchvision pair and what else its venv must pin, with the reason for each extra pin."""

    torch: str
    torchvision: str
    extra: dict[str, str] = field(default_factory=dict)  # pip requirement -> why


# The GPU machine's pair, and the lowest pair pyproject.toml admits (its floor follows this pair).
PAIRS = {
    "2.11": Pair("2.11.0", "0.26.0"),
    "2.3": Pair("2.3.1", "0.18.1"),
}

# The compat subset: every module of tutorial_lib imported, each version-dependent path run (tests/test_compat.py),
# and the paths the issue names: the unit tests, one 2-rank DDP run, the GPU pipeline's CPU form, evaluate on a
# saved model, one notebook under nbval. Each entry: pytest argument -> what it covers.
SUBSET = {
    "tests/test_compat.py": "every module imports; each decision of engine/compat.py on this pair",
}


NOTEBOOK = "00_setup.ipynb"  # the notebook run under nbval (its copy in --nbval-dir, on tests/nbval_params.yaml)


def subset_args(nbval_dir: str = "build/nbval") -> list[str]:
    """The subset as pytest arguments: :data:`SUBSET`, then the prepared copy of :data:`NOTEBOOK`."""
    return [*SUBSET, f"{nbval_dir}/{NOTEBOOK}"]


def constraints(pair: str = "", torch: str = "", torchvision: str = "") -> str:
    """The pip constraints of a pair: by name (:data:`PAIRS`) or given versions (both)."""
    if torch or torchvision:
        if not (torch and torchvision):
            raise SystemExit("error: TORCH and TORCHVISION go together (e.g. TORCH=2.5.1 TORCHVISION=0.20.1)")
        chosen = Pair(torch, torchvision)
    elif pair in PAIRS:
        chosen = PAIRS[pair]
    else:
        raise SystemExit(f"error: PAIR={pair!r} is not one of {', '.join(PAIRS)}; name another with "
                         "TORCH=<version> TORCHVISION=<version>")
    lines = [f"torch=={chosen.torch}", f"torchvision=={chosen.torchvision}"]
    lines += [f"{requirement}  # {why}" for requirement, why in chosen.extra.items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """``constraints`` or ``tests`` (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    pins = sub.add_parser("constraints", help="print a pair's pip constraints")
    pins.add_argument("--pair", default="")
    pins.add_argument("--torch", default="")
    pins.add_argument("--torchvision", default="")
    pins.add_argument("--out", type=Path, help="write them here (its folder made) instead of printing them")
    tests = sub.add_parser("tests", help="print the compat subset as pytest arguments")
    tests.add_argument("--nbval-dir", default="build/nbval", help="where notebook_checks.py prepared the notebooks")
    args = parser.parse_args(argv)
    if args.command == "constraints":
        text = constraints(args.pair, args.torch, args.torchvision)
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(text)
        else:
            sys.stdout.write(text)
    else:
        print(" ".join(subset_args(args.nbval_dir)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
