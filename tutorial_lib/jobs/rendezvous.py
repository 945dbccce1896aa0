"""Where a multi-node job's torchrun agents meet: a port the head node can really listen on.

A job picks its rendezvous port before it starts (Slurm: ``train.sbatch`` derives it from the job id; the local
backend: a port that was free at submit time). Another program may hold that port by the time the agents start
(a service, another user's job on a shared node); the head agent then cannot open its store and fails with a
40-line traceback, and the other nodes wait to join until torchrun's rendezvous timeout. So the port is checked
on the head node right before the agents start, and when it is taken the next free one is used, and the job's
log says so in one line.

``python -m tutorial_lib.jobs.rendezvous PREFERRED`` prints the port to use (train.sbatch, on the head node).
"""

from __future__ import annotations

import socket
import sys

TRIES = 64  # ports tried from the preferred one up


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
    """Print the port to use from ``PREFERRED`` (the only argument); say on stderr when it had to move."""
    from tutorial_lib.exits import run_main

    def run() -> int:
        args = sys.argv[1:] if argv is None else argv
        if len(args) != 1 or not args[0].isdigit() or not 0 < int(args[0]) < 65536:
            raise ValueError(f"PREFERRED: a port number from 1 to 65535, got {' '.join(args)!r}. Fix: python -m "
                             "tutorial_lib.jobs.rendezvous 29500")
        preferred = int(args[0])
        port = free_port_from(preferred)
        if port != preferred:
            print(f"rendezvous port {preferred} is in use by another program on {socket.gethostname()}: the agents "
                  f"meet at port {port} instead", file=sys.stderr, flush=True)
        print(port)
        return 0

    return run_main(run, refused=(ValueError,), statuses={RendezvousError: 1})


if __name__ == "__main__":
    sys.exit(main())
