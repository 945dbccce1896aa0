"""An emulated two-level network on one machine: network namespaces as nodes, a capped port per node (root only).

    from tutorial_lib.jobs.netlab import Lab
    with Lab(nodes=2, rate_mbit=200) as lab:               # creates everything, removes it on exit or error
        lab.torchrun(["-m", "tutorial_lib.bench", "allreduce", "--algorithm", "flat,hierarchical"], 2)

or from a shell: ``make netlab-up NODES=2 RATE_MBIT=200`` / ``make netlab-down``
(``python -m tutorial_lib.jobs.netlab up|down|status``).

What it builds, all inside namespaces it creates (nothing is added to the machine's own network):

* ``<tag>-sw``: a "switch", the bridge ``br0`` with one port ``p<i>`` per node;
* ``<tag>-n<i>``: node ``i``, with ``lo`` and ``eth0`` (10.77.0.<i+1>/24) cabled to the switch by a veth pair.

A ``tbf`` qdisc caps each node's port in both directions (``eth0``'s egress in the node, ``p<i>``'s egress
in the switch): traffic between nodes crosses the cap; ranks of one node reach each other's addresses
over loopback, uncapped. ``netem`` (delay) is not available on the kernels this was built on; ``tbf`` is.

Before creating anything, a lab writes what it will create to ``/run/tutorial_lib-netlab/<tag>.json``;
removal deletes only the namespaces listed there (names start with ``tlab``), also after a crash
(``python -m tutorial_lib.jobs.netlab down`` removes labs whose owner process is gone).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from tutorial_lib.numbers import finite, shown

PREFIX = "tlab"
STATE_DIR = Path("/run/tutorial_lib-netlab")
SUBNET = "10.77.0"
MASTER_PORT = 29500  # free in a namespace we just created
HOWTO = ("the emulated network needs root and iproute2 (ip, tc): network namespaces and qdiscs are root's. "
         "Fix: run as root (sudo make netlab-up, or sudo .venv/bin/python -m pytest tests/test_netlab.py)")


MAX_NODES = 254  # one address per node in SUBNET.0/24 (.1 to .254)
MAX_TAG = 40  # a lab's name, kept well below what a namespace or file name may be


class NetlabError(RuntimeError):
    """A lab cannot be built or removed (one line: the setting or the command that failed, and the fix)."""


class LabSettingError(NetlabError, ValueError):
    """A setting of the lab (nodes, rate_mbit, tag) is refused before anything is created."""


def check_tag(tag: str) -> None:
    """Refuse a lab name that is not ``tlab`` plus at most :data:`MAX_TAG` ASCII letters, digits and '-' in all
    (it names namespaces and the lab's record file), naming ``tag``."""
    plain = tag.replace("-", "")
    if not tag.startswith(PREFIX) or not plain.isascii() or not plain.isalnum() or len(tag) > MAX_TAG:
        raise LabSettingError(f"tag: must start with {PREFIX!r} and hold at most {MAX_TAG} ASCII letters, digits "
                              f"and '-', got {tag[:60]!r}. Fix: e.g. --tag {PREFIX}-a")


def unavailable() -> str | None:
    """Why no lab can be built here (a sentence with the fix), or None when it can."""
    if os.geteuid() != 0:
        return "not root: " + HOWTO
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if missing:
        return f"{', '.join(missing)} not found: " + HOWTO
    return None


def _run(*command: str) -> str:
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise NetlabError(f"netlab: `{' '.join(command)}` failed: {result.stderr.strip() or result.stdout.strip()}")
    return result.stdout


def _namespaces() -> set[str]:
    return {line.split()[0] for line in _run("ip", "netns", "list").splitlines() if line.strip()}


def tbf_args(rate_mbit: float) -> list[str]:
    """``tc`` arguments of a tbf capping at ``rate_mbit``: a bucket of 1 ms of traffic, at least 32 KB (a message
    that fits in the bucket passes at loopback speed; larger buckets let more through uncapped, smaller ones
    fell short of 1000 Mbit/s on a busy 2-core machine); a queue of 100 ms, so TCP is not starved."""
    burst = max(32 * 1024, int(rate_mbit * 1e6 / 8 * 0.001))
    return ["tbf", "rate", f"{rate_mbit}mbit", "burst", str(burst), "latency", "100ms"]


class Lab:
    """``nodes`` namespaces joined by a switch, each node's port capped at ``rate_mbit`` (None: uncapped).

    Use it as a context manager (or call :meth:`up` / :meth:`down`). ``tag`` names the lab (default: a fresh
    ``tlab<hex>``, so labs of several users or tests never collide).
    """

    def __init__(self, nodes: int = 2, rate_mbit: float | None = 200, tag: str | None = None):
        if isinstance(nodes, bool) or not isinstance(nodes, int) or not 1 <= nodes <= MAX_NODES:
            raise LabSettingError(f"nodes: must be a whole number from 1 to {MAX_NODES} (one address each in "
                                  f"{SUBNET}.0/24), got {shown(nodes):.60}. Fix: --nodes 2")
        if rate_mbit is not None and not (isinstance(rate_mbit, (int, float)) and finite(rate_mbit)
                                          and 0 < rate_mbit <= 1e6):
            raise LabSettingError(f"rate_mbit: must be a number of Mbit/s above 0 and at most 1e6 (or 0/None for "
                                  f"no cap), got {shown(rate_mbit):.60}. Fix: --rate-mbit 200")
        self.nodes, self.rate_mbit = nodes, rate_mbit
        self.tag = tag or f"{PREFIX}{secrets.token_hex(3)}"
        check_tag(self.tag)
        self.switch = f"{self.tag}-sw"
        self.namespaces = [f"{self.tag}-n{i}" for i in range(nodes)]
        self.state_file = STATE_DIR / f"{self.tag}.json"

    def address(self, node: int) -> str:
        """The address of node ``node`` (its ``eth0``)."""
        return f"{SUBNET}.{node + 1}"

    def describe(self) -> dict:
        """The network as benchmark records name it."""
        return {"kind": "netlab", "nodes": self.nodes, "rate_mbit": self.rate_mbit, "qdisc": "tbf",
                "namespaces": self.namespaces, "switch": self.switch,
                "tbf": tbf_args(self.rate_mbit) if self.rate_mbit else None}

    # ------------------------------------------------------------------ build and remove
    def up(self, persistent: bool = False) -> Lab:
        """Create the namespaces, cables and caps; on any failure remove what was created and raise.

        This process is recorded as the owner: ``down`` removes labs whose owner is gone. A ``persistent``
        lab (``make netlab-up``) has no owner and stays until removed by its tag.
        """
        reason = unavailable()
        if reason:
            raise NetlabError(reason)
        if self.state_file.exists() or {self.switch, *self.namespaces} & _namespaces():
            raise NetlabError(f"netlab: a lab named {self.tag} exists already. Fix: python -m "
                               f"tutorial_lib.jobs.netlab down --tag {self.tag}, or use another tag")
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        record = {**self.describe(), "tag": self.tag, "owner_pid": None if persistent else os.getpid()}
        self.state_file.write_text(json.dumps(record))  # first: a crash from here on leaves a record to clean
        try:
            self._build()
        except BaseException:
            self.down()
            raise
        return self

    def _build(self) -> None:
        _run("ip", "netns", "add", self.switch)
        _run("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
        _run("ip", "-n", self.switch, "link", "set", "br0", "up")
        for i, ns in enumerate(self.namespaces):
            _run("ip", "netns", "add", ns)
            _run("ip", "-n", ns, "link", "set", "lo", "up")
            _run("ip", "-n", self.switch, "link", "add", f"p{i}", "type", "veth", "peer", "name", "eth0", "netns", ns)
            _run("ip", "-n", self.switch, "link", "set", f"p{i}", "master", "br0", "up")
            _run("ip", "-n", ns, "addr", "add", f"{self.address(i)}/24", "dev", "eth0")
            _run("ip", "-n", ns, "link", "set", "eth0", "up")
        self.set_rate(self.rate_mbit)

    def set_rate(self, rate_mbit: float | None) -> None:
        """Cap every node's port at ``rate_mbit`` in both directions (None: remove the caps)."""
        for i, ns in enumerate(self.namespaces):
            for where, device in ((ns, "eth0"), (self.switch, f"p{i}")):
                if rate_mbit is None:
                    subprocess.run(["tc", "-n", where, "qdisc", "del", "dev", device, "root"], capture_output=True)
                else:
                    _run("tc", "-n", where, "qdisc", "replace", "dev", device, "root", *tbf_args(rate_mbit))
        self.rate_mbit = rate_mbit

    def down(self) -> None:
        """Stop every process inside the lab's namespaces and delete the namespaces (veths, bridge, qdiscs go
        with them). Touches only the namespaces this lab's record lists."""
        remove(self.tag)

    def __enter__(self) -> Lab:
        return self.up()

    def __exit__(self, *exc) -> None:
        self.down()

    # ------------------------------------------------------------------ run things inside
    def command(self, node: int, argv: list[str]) -> list[str]:
        """``argv`` run inside node ``node``'s namespace."""
        return ["ip", "netns", "exec", self.namespaces[node], *argv]

    def torchrun(self, module_args: list[str], nproc_per_node: int, env: dict | None = None,
                 timeout: float = 600) -> list[str]:
        """One torchrun agent per node (static rendezvous at node 0), ``nproc_per_node`` ranks each, running
        ``python <module_args>``; returns each node's output. Gloo binds to ``eth0``: ranks of one node reach
        each other's address over loopback, the other nodes' over the capped port. Raises on failure."""
        from tutorial_lib import REPO_ROOT

        base = {k: v for k, v in (env or os.environ).items()
                if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
        base["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), base.get("PYTHONPATH")]))
        base.setdefault("OMP_NUM_THREADS", "1")
        base.update(GLOO_SOCKET_IFNAME="eth0", NCCL_SOCKET_IFNAME="eth0", TUTORIAL_NETLAB=json.dumps(self.describe()))
        processes = []
        try:
            for node in range(self.nodes):
                argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(self.nodes), "--node-rank",
                        str(node), "--nproc-per-node", str(nproc_per_node), "--master-addr", self.address(0),
                        "--master-port", str(MASTER_PORT), *module_args]
                processes.append(subprocess.Popen(
                    self.command(node, argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                    env={**base, "TUTORIAL_NODE_NAME": self.namespaces[node]}, start_new_session=True))
            deadline = time.monotonic() + timeout
            outputs = [p.communicate(timeout=max(1.0, deadline - time.monotonic()))[0] for p in processes]
        finally:
            for process in processes:  # only ours: their own sessions
                if process.poll() is None:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
        failed = [(i, p.returncode) for i, p in enumerate(processes) if p.returncode != 0]
        if failed:
            node, code = failed[0]
            raise RuntimeError(f"netlab: torchrun on node {node} exited {code}:\n{outputs[node][-3000:]}")
        return outputs


def remove(tag: str) -> bool:
    """Remove the lab recorded as ``tag``: kill the processes inside its namespaces, delete them, drop the
    record. Returns False when no such lab was recorded (nothing is touched then)."""
    state_file = STATE_DIR / f"{tag}.json"
    if not tag.startswith(PREFIX) or not state_file.exists():
        return False
    record = json.loads(state_file.read_text())
    ours = [ns for ns in [*record.get("namespaces", []), record.get("switch")]
            if ns and ns.startswith(f"{tag}-")]
    present = _namespaces()
    for ns in ours:
        if ns not in present:
            continue
        pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
        for pid in pids:  # processes inside a namespace of ours: started by us
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
        _run("ip", "netns", "del", ns)
    state_file.unlink(missing_ok=True)
    return True


def recorded() -> list[dict]:
    """The labs recorded on this machine (their state files)."""
    if not STATE_DIR.is_dir():
        return []
    return [json.loads(path.read_text()) for path in sorted(STATE_DIR.glob(f"{PREFIX}*.json"))]


def remove_orphans() -> list[str]:
    """Remove the labs whose owner process is gone (left by a crash or a kill); return their tags."""
    from tutorial_lib.rundir.lock import pid_alive

    # a lab without owner was started from the command line: it stays until removed by its tag
    tags = [r["tag"] for r in recorded() if r.get("owner_pid") is not None and not pid_alive(r["owner_pid"])]
    for tag in tags:
        remove(tag)
    return tags


def main(argv: list[str] | None = None) -> int:
    """``up`` / ``down`` / ``status`` of a lab from the shell; exit statuses of :mod:`tutorial_lib.exits`."""
    from tutorial_lib.exits import ArgumentParser, run_main

    parser = ArgumentParser(prog="python -m tutorial_lib.jobs.netlab", description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=("up", "down", "status"))
    parser.add_argument("--nodes", type=_ascii_whole_number, default=2)
    parser.add_argument("--rate-mbit", type=float, default=200, help="cap of each node's port; 0 = none")
    parser.add_argument("--tag", default=PREFIX, help=f"lab name, starting with {PREFIX!r}")
    return run_main(lambda: _act(parser.parse_args(argv)), refused=(NetlabError,))


def _ascii_whole_number(text: str) -> int:
    """argparse's int, but of ASCII digits only (int() reads '٢' as 2)."""
    if not (text.isascii() and text.strip().lstrip("-").isdigit()):
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of ASCII digits")
    return int(text)


def _act(args) -> int:
    check_tag(args.tag)
    if args.action == "up":
        lab = Lab(args.nodes, args.rate_mbit or None, args.tag).up(persistent=True)
        addresses = ", ".join(map(lab.address, range(lab.nodes)))
        print(f"netlab {lab.tag}: nodes {', '.join(lab.namespaces)} at {addresses}, port cap "
              f"{lab.rate_mbit or 'none'} Mbit/s. Run inside: ip netns exec {lab.namespaces[0]} ...; "
              f"remove: make netlab-down")
    elif args.action == "down":
        removed = [args.tag] if remove(args.tag) else []
        removed += remove_orphans()
        print(f"removed: {', '.join(removed) or 'nothing (no lab recorded under that name)'}")
    else:
        for record in recorded():
            print(json.dumps(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
