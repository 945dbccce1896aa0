"""The emulated two-level network (jobs.netlab): capped between nodes, fast inside, removed whatever happens.

Needs root (network namespaces); skipped with the how-to otherwise. CI runs as root.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from tutorial_lib.jobs import netlab

pytestmark = pytest.mark.skipif(netlab.unavailable() is not None, reason=str(netlab.unavailable()))

# Receive n bytes on port 5001 of ADDR, print the rate in Mbit/s (from the first byte to the last).
RECEIVER = """
import socket, sys, time
server = socket.socket(); server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind((sys.argv[1], 5001)); server.listen(1); print("ready", flush=True)
conn, _ = server.accept(); got, start = 0, None
while got < int(sys.argv[2]):
    data = conn.recv(1 << 20)
    if not data: break
    start = start or time.perf_counter(); got += len(data)
print(got * 8 / (time.perf_counter() - start) / 1e6)
"""
SENDER = "import socket, sys; s = socket.create_connection((sys.argv[1], 5001)); s.sendall(b'x' * int(sys.argv[2]))"


def _rate_mbit(lab: netlab.Lab, src: int, dst: int, nbytes: int) -> float:
    receiver = subprocess.Popen(lab.command(dst, [sys.executable, "-c", RECEIVER, lab.address(dst), str(nbytes)]),
                                stdout=subprocess.PIPE, text=True)
    assert receiver.stdout.readline().strip() == "ready"
    subprocess.run(lab.command(src, [sys.executable, "-c", SENDER, lab.address(dst), str(nbytes)]), check=True,
                   timeout=60)
    return float(receiver.communicate(timeout=60)[0])


def _ours(tag: str) -> set[str]:
    return {ns for ns in netlab._namespaces() if ns.startswith(tag)}


def test_the_port_between_nodes_is_capped_inside_a_node_not_and_everything_is_removed():
    with netlab.Lab(nodes=2, rate_mbit=50) as lab:
        assert _ours(lab.tag) == {f"{lab.tag}-sw", f"{lab.tag}-n0", f"{lab.tag}-n1"}
        across = [_rate_mbit(lab, 0, 1, 1_500_000), _rate_mbit(lab, 1, 0, 1_500_000)]  # ~0.25 s each
        inside = _rate_mbit(lab, 0, 0, 20_000_000)
        lab.set_rate(100)
        faster = _rate_mbit(lab, 0, 1, 3_000_000)
    print(f"50 Mbit/s cap: {across} Mbit/s across; inside {inside:.0f}; 100 Mbit/s cap: {faster:.0f}")
    assert all(30 < rate < 55 for rate in across), across  # the cap holds both ways (measured 47-48)
    assert 60 < faster < 110, faster
    assert inside > 10 * 50, inside  # loopback inside a node is not capped
    assert _ours(lab.tag) == set() and not lab.state_file.exists()


def test_a_failure_inside_or_while_building_leaves_nothing(monkeypatch):
    with pytest.raises(KeyError):
        with netlab.Lab(nodes=2, rate_mbit=100) as lab:
            assert len(_ours(lab.tag)) == 3
            raise KeyError("a failure while the lab is up")
    assert _ours(lab.tag) == set() and not lab.state_file.exists()

    monkeypatch.setattr(netlab, "tbf_args", lambda rate: ["tbf", "rate", "nonsense"])  # tc refuses it, last step
    broken = netlab.Lab(nodes=3, rate_mbit=100)
    with pytest.raises(RuntimeError, match="netlab: `tc -n"):
        broken.up()
    assert _ours(broken.tag) == set() and not broken.state_file.exists()


def test_orphans_are_removed_and_what_we_did_not_create_is_left_alone():
    foreign = "tlabforeign-n0"  # our prefix, but not recorded by a lab: never ours to delete
    subprocess.run(["ip", "netns", "add", foreign], check=True)
    try:
        orphan = netlab.Lab(nodes=1, rate_mbit=None).up()
        record = json.loads(orphan.state_file.read_text())
        dead = subprocess.Popen([sys.executable, "-c", "pass"])
        dead.wait()
        orphan.state_file.write_text(json.dumps({**record, "owner_pid": dead.pid}))  # its owner died
        assert orphan.tag in netlab.remove_orphans()
        assert _ours(orphan.tag) == set()
        assert foreign in netlab._namespaces()
        assert netlab.remove("tlabforeign") is False and foreign in netlab._namespaces()
        assert netlab.main(["down", "--tag", "tlabforeign"]) == 0 and foreign in netlab._namespaces()
    finally:
        subprocess.run(["ip", "netns", "del", foreign], check=True)


def test_bench_allreduce_runs_per_namespace_and_names_the_network(tmp_path):
    """2 nodes x 2 ranks, one torchrun per namespace: ranks of a node share it, the record names the network."""
    out = tmp_path / "allreduce.jsonl"
    started = time.monotonic()
    with netlab.Lab(nodes=2, rate_mbit=400) as lab:
        lab.torchrun(["-m", "tutorial_lib.bench", "allreduce", "--algorithm", "flat,hierarchical", "--links",
                      "--sizes", "1M", "--repeats", "1", "--iters", "2", "--warmup", "1", "--device", "cpu",
                      "--quiet", "--out", str(out)], nproc_per_node=2, timeout=300)
    record = json.loads(out.read_text().splitlines()[-1])
    print(f"{time.monotonic() - started:.0f} s", json.dumps(record["links"]))
    assert record["network"]["rate_mbit"] == 400 and record["network"]["namespaces"] == lab.namespaces
    assert record["hosts"] == [lab.namespaces[0]] * 2 + [lab.namespaces[1]] * 2
    assert record["nodes"] == 2 and record["local_world_size"] == 2 and record["world_size"] == 4
    assert sorted(r["algorithm"] for r in record["results"]) == ["flat", "hierarchical"]
    assert record["device"] == "cpu"
    # across the capped port 1 MB takes (1 MB - the 50 KB bucket) / 50 MB/s = 19 ms; inside a node (loopback) less
    inter, intra = record["links"]["inter"]["results"][0], record["links"]["intra"]["results"][0]
    assert inter["seconds"] > 0.015 and intra["seconds"] < inter["seconds"], record["links"]
