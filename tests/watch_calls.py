"""How often the job layer asks the Slurm controller while jobs are watched: controller calls per minute.

    PYTHONPATH=$PWD .venv/bin/python tests/watch_calls.py --jobs 20 --seconds 60 --label after

What a notebook or a test does while its jobs run: every job has a ``Job.wait`` of its own (a thread each) and the
live monitor watches them all (``monitor.watch``, refresh 2 s). The jobs are real, held in the queue (``sbatch
--hold``, so they use nothing) and cancelled at the end; ``scontrol``, ``squeue`` and ``sacct`` are counting
stand-ins ahead on PATH that forward to the real commands. Only APIs that every version has are used, so the same
script measures an older checkout (``PYTHONPATH=/path/to/that/checkout``). Appends one JSON line to ``--out``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

COUNTING = """#!/bin/bash
echo "$(basename "$0")" >> "$WATCH_CALLS_LOG"
PATH=$WATCH_CALLS_REAL_PATH exec "$(basename "$0")" "$@"
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--label", required=True, help="which code: e.g. before, after")
    parser.add_argument("--partition", default="compute")
    parser.add_argument("--out", default="results/watch_calls.jsonl")
    args = parser.parse_args()

    from tutorial_lib import REPO_ROOT, jobs
    from tutorial_lib.figures import monitor

    work = Path(tempfile.mkdtemp(prefix="watch-calls-"))
    ids = []
    try:
        for n in range(args.jobs):
            answer = subprocess.run(["sbatch", "--parsable", "--hold", f"--partition={args.partition}", "--time=5",
                                     f"--output={work}/slurm-%j.out", "--job-name=watch-calls", "--wrap", "true"],
                                    capture_output=True, text=True, check=True)
            ids.append(answer.stdout.strip().split(";")[0])
            run_dir = work / f"run{n}"
            run_dir.mkdir()
            (run_dir / "job.json").write_text(json.dumps({"backend": "slurm", "id": ids[-1], "name": f"held{n}",
                                                          "spec": {"nodes": 1}}))
        stubs, log = work / "bin", work / "calls.log"
        stubs.mkdir()
        for name in ("scontrol", "squeue", "sacct"):
            (stubs / name).write_text(COUNTING)
            (stubs / name).chmod(0o755)
        os.environ.update({"WATCH_CALLS_REAL_PATH": os.environ["PATH"], "WATCH_CALLS_LOG": str(log),
                           "PATH": f"{stubs}{os.pathsep}{os.environ['PATH']}"})
        handles = [jobs.attach(work / f"run{n}") for n in range(args.jobs)]
        waiters = [threading.Thread(target=job.wait, kwargs={"timeout": args.seconds, "check": False}, daemon=True)
                   for job in handles]
        load_before = os.getloadavg()
        started = time.monotonic()
        for waiter in waiters:
            waiter.start()
        with contextlib.redirect_stdout(io.StringIO()):
            monitor.watch(handles, timeout=args.seconds, refresh=2.0)
        for waiter in waiters:
            waiter.join(timeout=args.seconds)
        elapsed = time.monotonic() - started
        calls = log.read_text().split() if log.is_file() else []
    finally:
        if ids:
            subprocess.run(["scancel", *ids], check=False)
        shutil.rmtree(work, ignore_errors=True)
    record = {"kind": "watch_calls", "code": args.label, "jobs": args.jobs, "seconds": round(elapsed, 1),
              "calls": len(calls), "per_minute": round(len(calls) * 60 / elapsed, 1),
              "by_command": {name: calls.count(name) for name in sorted(set(calls))},
              "scenario": "a Job.wait per job + monitor.watch of all (refresh 2 s)", "checkout": str(REPO_ROOT),
              "host": platform.node(), "cpus": os.cpu_count(), "load_before": [round(x, 1) for x in load_before],
              "load_after": [round(x, 1) for x in os.getloadavg()], "time": time.time()}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "a") as handle:
        handle.write(json.dumps(record) + "\n")
    print(json.dumps(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
