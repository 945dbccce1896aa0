"""The torch/torchvision pairs tested besides the pinned one, and the part of the suite each runs: one place.

``make test-compat PAIR=2.11`` (or ``TORCH=2.12.0 TORCHVISION=0.27.0``) makes ``.venv-torch<torch>`` from the
package registry with the pair's pins (:func:`constraints`) and runs :data:`SUBSET` in it, appending one line
to ``results/compat.jsonl`` (``tests/compat_record.py``). CI (``.ci/run``) runs every pair of :data:`PAIRS`.

    python tests/compat_plan.py constraints --pair 2.11       # the pins a pair's venv is installed with
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


# The lowest pair pyproject.toml and environment.yml admit (tests/test_packaging.py keeps the floor here), which is
# the GPU machine's. torch 2.3.1 / torchvision 0.18.1 was the floor before: docs/tests.md says why it no longer is.
PAIRS = {
    "2.11": Pair("2.11.0", "0.26.0"),
}

# The compat subset, the part of the suite each extra pair runs (a few minutes of the 2-core CI machine, where the
# whole suite takes 15): every module of tutorial_lib imported and each decision of tutorial_lib/compat.py run, the
# unit tests of what the version-dependent modules build, one 2-rank DDP run, the GPU input pipeline's CPU form,
# evaluate on a saved model, and one notebook under nbval (:data:`NOTEBOOK`). Each entry: pytest argument -> what
# it covers.
SUBSET = {
    "tests/test_compat.py": "every module imports; each decision of tutorial_lib/compat.py on this pair",
    "tests/test_loss_scaling.py": "torch.amp's GradScaler and autocast in the training step (fp16 on CPU tensors)",
    "tests/test_recipe_fields.py": "every recipe field reaches what the trainer builds: optimiser, LR schedule, "
                                   "GradScaler, DDP bucket cap, torch.compile mode, transforms, model",
    "tests/test_comm_hooks_logic.py": "the hierarchical and hybrid comm hooks' logic and bucket order",
    "tests/test_input_forms.py": "both input pipelines on every image form; the batched device decode's chunks",
    "tests/test_ddp.py::test_two_workers_equal_one_worker_with_double_batch": "one 2-rank DDP run (torchrun, gloo)",
    "tests/test_gpu_input.py": "the GPU input pipeline's CPU form, to a trainer run that resumes mid-epoch",
    "tests/test_model_file.py::test_a_finished_run_leaves_a_weights_only_torchvision_model": "model.pt written",
    "tests/test_model_file.py::test_evaluate_reports_the_runs_own_top1_in_one_process_and_under_torchrun":
        "evaluate on a saved model, in one process and on 2 ranks",
}
NOTEBOOK = "00_setup.ipynb"  # the notebook run under nbval (its copy in --nbval-dir, on tests/nbval_params.yaml)


def subset_args(nbval_dir: str = "build/nbval") -> list[str]:
    """The subset as pytest arguments: :data:`SUBSET`, then the prepared copy of :data:`NOTEBOOK`."""
    return [*SUBSET, f"{nbval_dir}/{NOTEBOOK}"]


def constraints(pair: str = "", torch: str = "", torchvision: str = "") -> str:
    """The pip constraints of a pair: by name (:data:`PAIRS`) or given versions (both)."""
    if torch or torchvision:
        if not (torch and torchvision):
            raise SystemExit("error: TORCH and TORCHVISION go together (e.g. TORCH=2.12.0 TORCHVISION=0.27.0)")
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
        if args.out:  # only when it changed: make rebuilds the venv when this file is newer
            args.out.parent.mkdir(parents=True, exist_ok=True)
            if not args.out.is_file() or args.out.read_text() != text:
                args.out.write_text(text)
        else:
            sys.stdout.write(text)
    else:
        print(" ".join(subset_args(args.nbval_dir)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
