"""``python -m tutorial_lib.param_server``: run the experiment, print a summary, optionally write JSON lines."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

from tutorial_lib.exits import ArgumentParser, run_main
from tutorial_lib.param_server import ExperimentConfig, run_experiment, summary_lines
from tutorial_lib.param_server import __doc__ as DESCRIPTION
from tutorial_lib.param_server.checks import ExperimentError, check_experiment
from tutorial_lib.paths import path_problem, system_folder

FLAGS = {"workers": "--workers", "steps": "--steps", "per_worker_batch": "--batch", "lr": "--lr", "seed": "--seed",
         "staleness": "--staleness", "straggler_delay_s": "--straggler-delay", "straggler_prob": "--straggler-prob"}


def _check_json_path(value: str) -> Path:
    """``--json``: a new file in a folder this user may write, or a file this command wrote before (replaced);
    anything else, a user's own file included, is refused before the experiment runs."""
    problem = path_problem(value)
    if problem is None and system_folder(value) is not None:
        problem = (f"lies in {system_folder(value)}, which holds no files of yours", "a file of your own")
    path = Path(value).expanduser()
    if problem is None and (path.exists() or path.is_symlink()):
        first = b""
        if path.is_file():
            with path.open("rb") as handle:
                first = handle.readline(1 << 16)
        try:
            ours = {"run", "mode", "staleness_bound"} <= set(json.loads(first))
        except (ValueError, TypeError, RecursionError):
            ours = False
        if not ours:
            problem = ("exists and is not a file of this command's records; it is left as it is",
                       "give a new file, e.g. runs/ps.jsonl")
    if problem is None:
        existing = next(parent for parent in path.absolute().parents if parent.exists())
        if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
            problem = (f"cannot be written: {existing} is not a folder this user may write", "another path")
    if problem:
        raise ExperimentError(f"--json: {value!r:.100} {problem[0]}. Fix: {problem[1]}.")
    return path


def main(argv: list[str] | None = None) -> int:
    """Command line: run the experiment, print a summary, optionally write JSONL records."""
    parser = ArgumentParser(prog="python -m tutorial_lib.param_server",
                            description=DESCRIPTION.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--staleness", type=int, nargs="+", default=[0, 1, 4])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch", type=int, default=32, help="per-worker batch")
    parser.add_argument("--lr", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--straggler-delay", type=float, default=0.0, help="seconds")
    parser.add_argument("--straggler-prob", type=float, default=0.0)
    parser.add_argument("--no-allreduce", action="store_true")
    parser.add_argument("--json", metavar="PATH", help="write one JSON record per line")
    return run_main(lambda: _run(parser.parse_args(argv)), refused=(ExperimentError,))


def _run(args) -> int:
    cfg = replace(ExperimentConfig(), workers=args.workers, steps=args.steps,
                  per_worker_batch=args.batch, lr=args.lr, seed=args.seed,
                  straggler_delay_s=args.straggler_delay, straggler_prob=args.straggler_prob)
    check_experiment(cfg, tuple(args.staleness), FLAGS)
    path = _check_json_path(args.json) if args.json else None
    results = run_experiment(cfg, tuple(args.staleness), allreduce=not args.no_allreduce)
    print("\n".join(summary_lines(results)))
    if "ps_s0" in results and "allreduce" in results:
        gap = (results["ps_s0"].final_weights - results["allreduce"].final_weights).abs().max()
        print(f"max |weights(ps_s0) - weights(allreduce)| = {gap.item():.3g}")
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w") as out:
            for run in results.values():
                for record in run.records:
                    out.write(json.dumps({"run": run.name, "mode": run.mode,
                                          "staleness_bound": run.staleness_bound,
                                          "workers": cfg.workers, **record}) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
