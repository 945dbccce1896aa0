"""The port where a Slurm job's torchrun agents meet: one rule, derived from the job id so that two jobs that
share a node do not collide, in one place (``cluster_scripts/train.sbatch`` computes the same in bash;
``tests/test_rendezvous.py`` checks that the two agree).

    python -m tutorial_lib.jobs.rendezvous 4711      # prints 24711
"""

from __future__ import annotations

import sys
from collections.abc import Iterable

PORT_BASE = 20000  # above the well-known and registered ports most daemons use
PORT_SPAN = 20000  # ports PORT_BASE .. PORT_BASE + PORT_SPAN - 1, below Linux's ephemeral range (32768+)


def rendezvous_port(job_id: int) -> int:
    """The rendezvous port of Slurm job ``job_id``: ``PORT_BASE + job_id % PORT_SPAN``."""
    job_id = int(job_id)
    if job_id < 0:
        raise ValueError(f"job_id: a Slurm job id is not negative, got {job_id}")
    return PORT_BASE + job_id % PORT_SPAN


def port_lines(job_ids: Iterable[int]) -> str:
    """``job     26: rendezvous port 20026``, one line per job id (notebook 05 shows a few)."""
    return "\n".join(f"job {job_id:>6}: rendezvous port {rendezvous_port(job_id)}" for job_id in job_ids)


def main(argv: list[str] | None = None) -> int:
    """``python -m tutorial_lib.jobs.rendezvous JOB_ID``: print the job's rendezvous port."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not args[0].isdigit():
        print("usage: python -m tutorial_lib.jobs.rendezvous JOB_ID (a Slurm job id, e.g. 4711)", file=sys.stderr)
        return 2
    print(rendezvous_port(int(args[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
