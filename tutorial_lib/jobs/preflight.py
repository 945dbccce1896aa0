"""A pre-flight check: a short job on the nodes a long job will get, before it is submitted.

    from tutorial_lib.jobs import preflight
    report = preflight.run(config, nodes=2, ranks_per_node=4, site=site)   # blocks for a minute or so
    print(report)          # one line per check
    report.raise_if_failed()

It submits ``python -m tutorial_lib.jobs.preflight`` exactly as the training job would be submitted
(same batch script, site block, torchrun, resources), and checks, one line each: the scheduler accepted
the partition and account; the configured Python imports torch and tutorial_lib on every node; each
rank sees its GPU (or how many CPUs it was given); an all-reduce across all ranks completes and sums
correctly. Each rank writes what it found as one JSON line (``preflight.jsonl`` in the run directory).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import socket
import sys
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from tutorial_lib import compat, exits
from tutorial_lib.engine.errors import OneLineError
from tutorial_lib.exits import ArgumentParser
from tutorial_lib.rundir.layout import PREFLIGHT_FILE as RESULTS

PREFLIGHT_TIME = "00:05:00"  # the pre-flight job's time limit (the site's, where that is shorter)


# ------------------------------------------------------------------ on every rank
def rank_facts(out: Path, timeout_s: float, want_gpu: bool) -> dict:
    """What this rank finds (Python, versions, devices, CPUs) and the result of one all-reduce; appended to ``out``."""
    import torch
    import torch.distributed as dist

    import tutorial_lib

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    facts = {"rank": int(os.environ.get("RANK", "0")), "world": int(os.environ.get("WORLD_SIZE", "1")),
             "node": os.environ.get("SLURMD_NODENAME") or os.environ.get("TUTORIAL_NODE_NAME") or socket.gethostname(),
             "python": sys.executable, "torch": torch.__version__,
             "tutorial_lib": str(Path(tutorial_lib.__file__).parent),
             "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
             "gpus_visible": torch.cuda.device_count()}
    if want_gpu and facts["gpus_visible"] > local_rank:
        torch.cuda.set_device(local_rank)
        backend, device = "nccl", torch.device("cuda", local_rank)
    else:
        backend, device = "gloo", torch.device("cpu")
    facts["allreduce_backend"] = backend
    _append(out, facts)  # what the rank found, before the all-reduce that may hang or fail
    started = time.perf_counter()
    dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s))
    value = torch.ones(1, device=device)
    dist.all_reduce(value)
    facts.update(allreduce_sum=value.item(), allreduce_s=time.perf_counter() - started)
    compat.leave_process_group()
    _append(out, facts)
    return facts


def _append(out: Path, facts: dict) -> None:
    with open(out, "a") as handle:  # one short line per write: appends do not interleave
        handle.write(json.dumps(facts) + "\n")


class RankProgramError(OneLineError):
    """The pre-flight's rank program was started other than by the pre-flight job."""


def _seconds(text: str) -> float:
    """A positive, finite number of seconds (argparse names ``--timeout`` when this raises)."""
    value = float(text)
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds, e.g. 120")
    return value


def _check_started_right(out: Path) -> None:
    """Refuse, before anything is written or started, a run outside torchrun (torch would say only "RANK
    expected") and an ``--out`` that is not the pre-flight's own results file in an existing folder: the rank
    program appends to it, and a user's file must never be appended to (r43m)."""
    if not all(os.environ.get(name) for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR")):
        raise RankProgramError("python -m tutorial_lib.jobs.preflight is the pre-flight job's program for "
                               "each rank, run by torchrun. Fix: run the pre-flight with preflight.run(config, ...) "
                               "(the notebooks' pre-flight cell), not this module by hand.")
    if out.name != RESULTS or not out.parent.is_dir() or out.is_symlink() or out.exists() and not out.is_file():
        raise RankProgramError(f"--out: {str(out)[:200]!r} is not a {RESULTS} file in an existing folder (the "
                               "pre-flight writes its results there, in the job's run directory). Fix: let "
                               "preflight.run() start this program.")


def main(argv: list[str] | None = None) -> int:
    """``python -m tutorial_lib.jobs.preflight --out RUN_DIR/preflight.jsonl``: run on every rank by the
    pre-flight job."""
    parser = ArgumentParser(prog="python -m tutorial_lib.jobs.preflight")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--timeout", type=_seconds, default=120.0)
    parser.add_argument("--gpu", action="store_true", help="all-reduce over NCCL on each rank's GPU")

    def body() -> int:
        args = parser.parse_args(argv)
        _check_started_right(args.out)
        rank_facts(args.out, args.timeout, args.gpu)
        return exits.finish(exits.EXIT_OK)  # the rank left its gloo group without tearing it down: no finalizing

    return exits.run_main(body, refused=(RankProgramError,))


# ------------------------------------------------------------------ the report
@dataclass
class Check:
    """One line of the report."""

    name: str
    ok: bool
    detail: str

    def __str__(self) -> str:
        return f"{'ok  ' if self.ok else 'FAIL'}  {self.name}: {self.detail}"


@dataclass
class Report:
    """The pre-flight checks in order; a check that could not run is not listed after a failure."""

    checks: list[Check] = field(default_factory=list)
    job: object = None

    @property
    def ok(self) -> bool:
        """True when every check passed."""
        return bool(self.checks) and all(check.ok for check in self.checks)

    def __str__(self) -> str:
        return "\n".join(str(check) for check in self.checks)

    def _repr_pretty_(self, printer, cycle) -> None:
        printer.text(str(self))

    def raise_if_failed(self) -> None:
        """Raise JobError with the report when a check failed (so a notebook stops before the long job)."""
        from tutorial_lib.jobs.spec import JobError

        if not self.ok:
            raise JobError(f"pre-flight check failed:\n{self}")


def run(config, nodes: int = 1, ranks_per_node: int = 1, backend: str = "auto", site=None,
        timeout: float = 300, verbose: bool = False) -> Report:
    """Submit the pre-flight job for ``config``'s resources (named ``<name>-preflight``), wait for it
    (at most ``timeout`` s) and return its :class:`Report`. Refused settings are checks that fail,
    not exceptions; a bad value of the arguments themselves still raises ConfigError."""
    from tutorial_lib import jobs
    from tutorial_lib.engine.config import check_is_config
    from tutorial_lib.jobs.site import load_site
    from tutorial_lib.jobs.slurm_values import format_time, time_limit_seconds, warning_lead_seconds
    from tutorial_lib.jobs.spec import absolute_config, check_seconds

    check_is_config(config)
    check_seconds("timeout", timeout, allow_none=False, positive=True)  # before anything is submitted
    config = dataclasses.replace(config, name=f"{config.name}-preflight")
    out = absolute_config(config).run_dir / RESULTS
    report = Report()
    gpu = config.device == "cuda" or config.profile in ("gpu", "hal")
    chosen = jobs.choose_backend(backend, verbose=False)
    checked = load_site(site) if chosen == "slurm" else None
    longest = checked.time if checked else None  # a short job, within the site's limit, that its warning allows
    lead = warning_lead_seconds(checked.sbatch_options) if checked else 0
    wanted = PREFLIGHT_TIME if time_limit_seconds(PREFLIGHT_TIME) >= 2 * lead else format_time(2 * lead)
    limit = longest if longest and time_limit_seconds(longest) < time_limit_seconds(wanted) else wanted
    try:
        job = jobs.submit(config, nodes=nodes, ranks_per_node=ranks_per_node, backend=chosen, site=site,
                          time=limit, fresh=True, verbose=verbose, module="tutorial_lib.jobs.preflight",
                          module_args=["--out", str(out), "--timeout", str(min(timeout, 120))] + ["--gpu"] * gpu)
    except jobs.JobError as exc:
        report.checks.append(Check("scheduler accepts the job", False, str(exc).replace("\n", " ")))
        return report
    report.job = job
    spec = job.record["spec"]
    where = (f"job {job.id}, partition {spec.get('partition') or 'default'}, account {spec.get('account') or 'default'}"
             if chosen == "slurm" else f"job {job.id} on this machine (local backend: no partition or account)")
    report.checks.append(Check("scheduler accepts the job", True, where))
    state = job.wait(timeout=timeout, check=False)
    if state not in jobs.FINAL_STATES:
        job.cancel()
        report.checks.append(Check("job ran", False, f"still {state} after {timeout:g} s (queue wait, or a rank "
                                                     "hanging at start). Fix: look at job.logs(); raise timeout."))
        return report
    lines = [json.loads(line) for line in out.read_text().splitlines()] if out.is_file() else []
    found = list({f["rank"]: f for f in lines}.values())  # each rank's last line
    world = nodes * ranks_per_node
    if state != "COMPLETED" and not found:
        explained = job.explain()
        if "\n" in explained:
            explained = explained.splitlines()[0].removesuffix(" First error lines:") + _first_error(job)
        report.checks.append(Check("python on every node imports torch and tutorial_lib", False, explained))
        return report
    names = sorted({f["node"] for f in found})
    report.checks.append(Check("python on every node imports torch and tutorial_lib", len(found) == world,
                               f"{len(found)} of {world} ranks on {len(names)} node(s) ({', '.join(names)}): "
                               f"{found[0]['python']}, torch {found[0]['torch']}" if found else "no rank reported"))
    if gpu:
        short = [f"rank {f['rank']} ({f['node']}): {f['gpus_visible']}" for f in found
                 if f["allreduce_backend"] != "nccl"]
        report.checks.append(Check("a GPU per rank", not short and bool(found),
                                   "every rank has its own GPU" if not short else "GPUs visible: " + "; ".join(short)))
    else:
        cpus = sorted({f["cpus"] for f in found})
        report.checks.append(Check("CPUs per rank", bool(found), f"each rank may use {'/'.join(map(str, cpus))} "
                                   "CPU(s) (its affinity: on Slurm, the CPUs the job's task got on that node)"))
    summed = [f for f in found if f.get("allreduce_sum") == world]
    ok = len(summed) == world
    slowest = max((f.get("allreduce_s", 0) for f in found), default=0)
    report.checks.append(Check(f"all-reduce across {world} ranks", ok,
                               f"completed ({found[0]['allreduce_backend']}, sum {world} on every rank, "
                               f"{1000 * slowest:.0f} ms with the connection)" if ok else
                               f"{len(summed)} of {world} ranks completed it; state {state}." + _first_error(job)))
    return report


def _first_error(job) -> str:
    from tutorial_lib.jobs.commands import SETUP_FAILED

    logs = job.logs().splitlines()
    setup = [line.strip() for line in logs if line.startswith(SETUP_FAILED)]  # the batch script names the line
    lines = setup or [line.strip() for line in logs if "Error" in line or "error:" in line]
    return f" First error: {lines[0]}" if lines else ""


if __name__ == "__main__":
    sys.exit(main())
