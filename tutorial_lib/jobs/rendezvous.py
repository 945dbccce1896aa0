"""Where a multi-node job's torchrun agents meet: one rule for the port, and a port the head node can really
listen on.

A Slurm job's port is derived from its job id (``20000 + job id % 20000``), so that two jobs sharing a node do not
collide; the local backend takes a port that was free at submit time. Another program may hold that port by the
time the agents start (a service, another user's job on a shared node); the head agent then cannot open its store
and fails with a 40-line traceback, and the other nodes wait to join until torchrun's rendezvous timeout. So the
port is checked on the head node right before the agents start, and when it is taken the next free one is used,
and the job's log says so in one line. ``cluster_scripts/train.sbatch`` runs, on the head node::

    python -m tutorial_lib.jobs.rendezvous 4711      # prints 24711 (or the next free port, saying so on stderr)
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterable

from tutorial_lib.numbers import whole_number

PORT_BASE = 20000  # above the well-known and registered ports most daemons use
PORT_SPAN = 20000  # ports PORT_BASE .. PORT_BASE + PORT_SPAN - 1, below Linux's ephemeral range (32768+)

TRIES = 64  # ports tried from the preferred one up


def rendezvous_port(job_id: int) -> int:
    """The rendezvous port of Slurm job ``job_id``: ``PORT_BASE + job_id % PORT_SPAN``."""
    job_id = int(job_id)
    if job_id < 0:
        raise ValueError(f"job_id: a Slurm job id is not negative, got {job_id}")
    return PORT_BASE + job_id % PORT_SPAN


def port_lines(job_ids: Iterable[int]) -> str:
    """``job     26: rendezvous port 20026``, one line per job id (notebook 05 shows a few)."""
    return "\n".join(f"job {job_id:>6}: rendezvous port {rendezvous_port(job_id)}" for job_id in job_ids)


class RendezvousError(RuntimeError):
    """No port near the preferred one is free on this host (one line, with the fix)."""


def can_listen(port: int) -> bool:
    """Whether this host can listen on ``port`` on every interface (what torchrun's c10d store does)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("", port))
        except OSError:
            return False
    return True


def free_port_from(preferred: int, tries: int = TRIES) -> int:
    """``preferred`` if this host can listen on it, else the next port up that it can."""
    for port in range(preferred, min(preferred + tries, 65536)):
        if can_listen(port):
            return port
    raise RendezvousError(f"rendezvous: ports {preferred} to {preferred + tries - 1} are all in use on "
                          f"{socket.gethostname()}. Fix: end the programs that hold them, or run the job again "
                          "(it derives another port from its job id)")


def with_free_endpoint(commands: list[list[str]]) -> tuple[list[list[str]], str | None]:
    """The agents' ``commands`` meeting at a port this host can listen on (the local backend's emulated nodes all
    run here), and a line for the job's log when their ``--rdzv-endpoint`` port had to be moved (else None)."""
    endpoints = {command[command.index("--rdzv-endpoint") + 1] for command in commands
                 if "--rdzv-endpoint" in command}
    if len(endpoints) != 1:
        return commands, None
    endpoint, = endpoints
    host, _, port = endpoint.rpartition(":")
    free = free_port_from(int(port))
    if free == int(port):
        return commands, None
    moved = f"{host}:{free}"
    return ([[moved if word == endpoint else word for word in command] for command in commands],
            f"rendezvous port {port} is in use by another program: the agents meet at {moved} instead")


def main(argv: list[str] | None = None) -> int:
    """Print the port Slurm job ``JOB_ID`` (the only argument) uses on this host: its derived port, or the next
    free one, saying so on stderr."""
    from tutorial_lib.exits import run_main

    def run() -> int:
        args = sys.argv[1:] if argv is None else argv
        if len(args) != 1 or whole_number(args[0], below=2**32) is None:  # Slurm's job ids are 32-bit
            raise ValueError(f"JOB_ID: a Slurm job id, got {' '.join(args)!r}. Fix: python -m "
                             "tutorial_lib.jobs.rendezvous \"$SLURM_JOB_ID\"")
        preferred = rendezvous_port(whole_number(args[0], below=2**32))
        port = free_port_from(preferred)
        if port != preferred:
            print(f"rendezvous port {preferred} is in use by another program on {socket.gethostname()}: the agents "
                  f"meet at port {port} instead", file=sys.stderr, flush=True)
        print(port)
        return 0

    return run_main(run, refused=(ValueError,), statuses={RendezvousError: 1})


if __name__ == "__main__":
    sys.exit(main())
