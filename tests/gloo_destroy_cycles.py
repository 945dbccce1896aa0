"""Whether this torch can leave a gloo process group without hanging: two ranks, many join-reduce-leave cycles.

Before torch 2.8 (pytorch PR 154976) ``destroy_process_group`` ran gloo's destructor holding the GIL while it
joined its worker threads; a worker still dropping the last all-reduce's tensor (whose Python object was already
gone, so the drop needs the GIL) waited for it, and both waited for good. On torch 2.3 a 2-rank script of three
all-reduces and a destroy hung in 2 of 5 runs. Here two processes each run ``cycles`` cycles of joining a fresh
group (on one shared TCP store, a prefix per cycle), three all-reduces of a tensor dropped as soon as the call
returns, and ``destroy_process_group``, reporting each cycle; a cycle that does not report within ``ceiling_s``
(a hang lasts for ever; a cycle takes milliseconds) is a hang. Imported by tests/test_compat.py; by hand::

    python tests/gloo_destroy_cycles.py --cycles 40
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import selectors
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import timedelta

START_CEILING_S = 300.0  # importing torch on a loaded 2-core machine, before the first cycle


def run_rank(rank: int, port: int, cycles: int, ceiling_s: float) -> None:
    """One rank's cycles; prints the number of each cycle it has left (the group destroyed)."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    faulthandler.register(signal.SIGUSR1)  # hung_cycle asks for the stacks of a rank that hangs
    wait = timedelta(seconds=2 * ceiling_s)  # longer than hung_cycle waits: a hang is reported, not a timeout
    store = dist.TCPStore("127.0.0.1", port, 2, is_master=rank == 0, timeout=wait)
    print("ready", flush=True)
    for cycle in range(cycles):
        dist.init_process_group("gloo", store=dist.PrefixStore(f"cycle{cycle}", store), rank=rank, world_size=2,
                                timeout=wait)
        for _ in range(3):
            dist.all_reduce(torch.ones(1024))  # no name keeps it: gloo's worker may hold the last reference
        print(f"{cycle} leaving", flush=True)
        dist.destroy_process_group()
        print(cycle, flush=True)


@dataclass
class Hang:
    """A cycle that did not end: its number, and each rank's last lines (its Python stacks, dumped on request)."""

    cycle: int
    cycles: int
    tails: list[str]

    def __str__(self) -> str:
        return f"cycle {self.cycle} of {self.cycles} did not end:\n" + "\n".join(
            f"--- rank {rank}:\n{tail}" for rank, tail in enumerate(self.tails))


def hung_cycle(cycles: int, ceiling_s: float = 60.0) -> Hang | None:
    """Run the two ranks: the first cycle that did not end within ``ceiling_s`` (:class:`Hang`), or None when
    all ``cycles`` ended. A rank that fails otherwise raises RuntimeError with its output."""
    from tutorial_lib import free_port

    port = free_port()
    ranks = [subprocess.Popen([sys.executable, __file__, "rank", str(rank), str(port), str(cycles), str(ceiling_s)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              env={**os.environ, "OMP_NUM_THREADS": "1"}) for rank in range(2)]
    done = [-1, -1]  # per rank: the last cycle it reported (-1: none yet)
    output = [b"", b""]
    selector = selectors.DefaultSelector()
    for rank, process in enumerate(ranks):
        selector.register(process.stdout, selectors.EVENT_READ, rank)

    def tail(rank: int) -> str:
        return "\n".join(output[rank].decode(errors="replace").splitlines()[-30:])

    def read(deadline: float, exit_is_failure: bool = True) -> bool:
        """Take what the ranks write before ``deadline`` (unbuffered: select sees all that is left to read);
        False when nothing came."""
        events = selector.select(timeout=max(0.0, deadline - time.monotonic()))
        for key, _ in events:
            rank, chunk = key.data, os.read(key.fileobj.fileno(), 1 << 16)
            if not chunk:  # the rank closed its output: it has exited, or is about to
                selector.unregister(key.fileobj)
                if exit_is_failure and done[rank] < cycles - 1:
                    raise RuntimeError(f"rank {rank} exited with {ranks[rank].wait()} after cycle {done[rank]}:\n"
                                       + tail(rank))
                continue
            output[rank] += chunk
            reported = [int(line) for line in output[rank].splitlines() if line.strip().isdigit()]
            done[rank] = max(reported, default=-1)
        return bool(events)

    try:
        deadline = time.monotonic() + START_CEILING_S
        while min(done) < cycles - 1:
            if read(deadline):
                if all(b"ready\n" in text for text in output):
                    deadline = time.monotonic() + ceiling_s  # both ranks are in their cycles
                continue
            for process in ranks:
                if process.poll() is None:
                    process.send_signal(signal.SIGUSR1)
            stacks_by = time.monotonic() + 10
            while time.monotonic() < stacks_by and read(stacks_by, exit_is_failure=False):
                pass
            return Hang(min(done) + 1, cycles, [tail(rank) for rank in range(2)])
        for rank, process in enumerate(ranks):
            if process.wait(timeout=ceiling_s) != 0:
                raise RuntimeError(f"rank {rank} exited with {process.returncode}:\n" + tail(rank))
        return None
    finally:
        selector.close()
        for process in ranks:
            if process.poll() is None:
                process.kill()
                process.wait()
            process.stdout.close()


def main(argv: list[str] | None = None) -> int:
    """``rank ...`` (one rank, as hung_cycle starts it) or ``--cycles N`` (both ranks: exit 1 on a hang)."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["rank"]:
        rank, port, cycles, ceiling_s = argv[1:]
        run_rank(int(rank), int(port), int(cycles), float(ceiling_s))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=20)
    parser.add_argument("--ceiling-s", type=float, default=60.0, help="a cycle still running after this is a hang")
    args = parser.parse_args(argv)
    import torch

    started = time.monotonic()
    hung = hung_cycle(args.cycles, args.ceiling_s)
    verdict = f"hung: {hung}" if hung is not None else "no hang"
    print(f"torch {torch.__version__}: {verdict} ({args.cycles} cycles, {time.monotonic() - started:.1f} s)")
    return 1 if hung is not None else 0


if __name__ == "__main__":
    raise SystemExit(main())
