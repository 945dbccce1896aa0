"""The hierarchical / hybrid hook's logic (engine.comm_hooks) in one process: ranks are threads, collectives a stand-in.

tests/test_comm_hooks.py checks the real thing (4 spawned gloo processes); this file checks the arithmetic fast
and where the mutation run (``make mutants``) can see it: which ranks share a node, what goes through which
level, the padding, the division by the world size, the fallback without reduce-scatter, what the hook returns.
"""

from __future__ import annotations

import threading
import time
import types
from collections import defaultdict

import pytest
import torch

from tutorial_lib import compat
from tutorial_lib.engine import comm_hooks
from tutorial_lib.engine.comm_hooks import HookState, TwoLevelGroups, node_layout, two_level_all_reduce, uses_hierarchy
from tutorial_lib.engine.config import ConfigError


class FakeGroup:
    """A process group: its ranks, in order."""

    def __init__(self, ranks):
        self.ranks = tuple(ranks)


class FakeDist:
    """torch.distributed for ranks run as threads of this process: a collective waits for every rank of its
    group (a barrier), then each rank computes its result from what all of them brought."""

    def __init__(self, world_size: int, tensor_forms: str = "single"):
        self.world = FakeGroup(range(world_size))
        self.broken = False  # a rank failed: every collective after it fails at once instead of waiting
        self.bound = threading.local()
        self.lock = threading.Lock()
        self.barriers: dict = {}
        self.deposits: dict = defaultdict(dict)  # (group ranks, call number) -> {rank: tensor}
        self.count: dict = defaultdict(int)  # (rank, group ranks) -> calls made
        self.calls: list = []  # (rank, collective, group ranks)
        self.subgroups: list = []  # (rank, lists given to new_subgroups_by_enumeration)
        for name, names in compat.SINGLE_TENSOR_NAMES.items():  # torch 2.14's names, or the older ones
            setattr(self, names[0] if tensor_forms == "single" else names[1], getattr(self, f"_{name}"))

    def fail(self) -> None:
        """A rank failed: the others' collectives fail now (as a real job's would, when a peer goes)."""
        with self.lock:
            self.broken = True
            for barrier in self.barriers.values():
                barrier.abort()

    def bind(self, rank: int) -> None:
        """This thread acts for ``rank``."""
        self.bound.rank = rank

    def get_rank(self, group=None) -> int:
        return (group or self.world).ranks.index(self.bound.rank)

    def get_world_size(self, group=None) -> int:
        return len((group or self.world).ranks)

    def new_subgroups_by_enumeration(self, lists):
        self.subgroups.append((self.bound.rank, lists))
        groups = [FakeGroup(ranks) for ranks in lists]
        return next(g for g in groups if self.bound.rank in g.ranks), groups

    def _meet(self, name: str, tensor: torch.Tensor, group) -> list[torch.Tensor]:
        """Every rank's ``tensor`` for this call of the group's, in the group's rank order."""
        ranks = (group or self.world).ranks
        rank = self.bound.rank
        assert rank in ranks, (rank, ranks)
        with self.lock:
            if self.broken:
                raise RuntimeError(f"{name}: a peer failed")
            barrier = self.barriers.setdefault(ranks, threading.Barrier(len(ranks), timeout=20))
            number = self.count[rank, ranks]
            self.count[rank, ranks] += 1
            self.deposits[ranks, number][rank] = tensor.detach().clone()
            self.calls.append((rank, name, ranks))
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            self.fail()
            raise
        brought = self.deposits[ranks, number]
        assert len({t.shape for t in brought.values()}) == 1, f"{name}: ranks brought different sizes"
        return [brought[r] for r in ranks]

    def all_reduce(self, tensor, group=None):
        tensor.copy_(torch.stack(self._meet("all_reduce", tensor, group)).sum(0))

    def _reduce_scatter(self, output, input, group=None):
        total = torch.stack(self._meet("reduce_scatter", input, group)).sum(0)
        output.copy_(total.chunk(self.get_world_size(group))[self.get_rank(group)])

    def _all_gather(self, output, input, group=None):
        output.copy_(torch.cat(self._meet("all_gather", input, group)))


def run_ranks(fake: FakeDist, work) -> list:
    """``work(rank)`` on one thread per rank; their results in rank order (an exception in any is raised)."""
    results, errors = [None] * fake.get_world_size(), []

    def body(rank):
        fake.bind(rank)
        try:
            results[rank] = work(rank)
        except BaseException as exc:  # noqa: BLE001 - raised below, in the test's thread
            errors.append(exc)
            fake.fail()

    threads = [threading.Thread(target=body, args=(rank,)) for rank in range(fake.get_world_size())]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
        assert not thread.is_alive(), "a rank hung"
    if errors:
        raise errors[0]
    return results


@pytest.fixture
def fake(monkeypatch):
    """Four ranks, two nodes of two; comm_hooks talks to the stand-in."""
    stand_in = FakeDist(4)
    monkeypatch.setattr(comm_hooks, "dist", stand_in)
    return stand_in


def _groups(fake: FakeDist, mode: str, local: int = 2, threshold: int = comm_hooks.HYBRID_THRESHOLD_BYTES):
    return comm_hooks.build_groups(mode, local, threshold_bytes=threshold)


def _data(rank: int, numel: int, dtype=torch.float32) -> torch.Tensor:
    return (torch.arange(numel, dtype=torch.float64) * (rank + 1) + 10 ** rank).to(dtype)


def _sum(world: int, numel: int) -> torch.Tensor:
    return sum(_data(rank, numel) for rank in range(world))


def test_node_layout_rejects_uneven_and_empty_nodes():
    assert node_layout(4, 1) == ([[0], [1], [2], [3]], [[0, 1, 2, 3]])
    assert node_layout(4, 4) == ([[0, 1, 2, 3]], [[0], [1], [2], [3]])
    message = ("allreduce: 4 ranks do not split into nodes of 0 ranks. "
               "Fix: run the same number of ranks on every node, or use --allreduce flat")
    with pytest.raises(ConfigError) as caught:
        node_layout(4, 0)
    assert str(caught.value) == message
    with pytest.raises(ConfigError, match="nodes of -2 ranks"):
        node_layout(4, -2)


def test_groups_count_nodes():
    assert TwoLevelGroups("hierarchical", 8, 2).nodes == 4
    assert TwoLevelGroups("hierarchical", 6, 3).nodes == 2
    groups = TwoLevelGroups("hybrid", 4, 2)
    assert groups.threshold_bytes == 1 << 20 and groups.fallbacks == set() and groups.created == []
    assert groups.intra is None and groups.inter is None


def test_build_groups_creates_node_then_peers_on_every_rank(fake):
    every = run_ranks(fake, lambda rank: _groups(fake, "hybrid", threshold=123))
    for rank, groups in enumerate(every):
        settings = (groups.mode, groups.world_size, groups.local_world_size, groups.threshold_bytes)
        assert settings == ("hybrid", 4, 2, 123)
        assert groups.created == [("intra", [[0, 1], [2, 3]]), ("inter", [[0, 2], [1, 3]])]
        assert groups.intra.ranks == ((0, 1) if rank < 2 else (2, 3))
        assert groups.inter.ranks == ((0, 2) if rank % 2 == 0 else (1, 3))
    expected = [(r, [[0, 1], [2, 3]]) for r in range(4)] + [(r, [[0, 2], [1, 3]]) for r in range(4)]
    assert sorted(fake.subgroups) == sorted(expected)
    default = run_ranks(fake, lambda rank: comm_hooks.build_groups(local_world_size=2))
    assert {g.mode for g in default} == {"hierarchical"} and {g.threshold_bytes for g in default} == {1 << 20}


def test_build_groups_takes_the_node_size_from_the_launcher(fake, monkeypatch):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    every = run_ranks(fake, lambda rank: comm_hooks.build_groups("hierarchical"))
    assert {g.local_world_size for g in every} == {4}
    assert every[0].created == [("intra", [[0, 1, 2, 3]]), ("inter", [[0], [1], [2], [3]])]


def test_collective_picks_the_tensor_form_this_torch_has():
    single = types.SimpleNamespace(all_gather_single="new", all_gather_into_tensor="old")
    older = types.SimpleNamespace(all_gather_into_tensor="old", reduce_scatter_tensor="old rs")
    assert compat.single_tensor_collective("all_gather", single) == "new"
    assert compat.single_tensor_collective("all_gather", older) == "old"
    assert compat.single_tensor_collective("reduce_scatter", older) == "old rs"


@pytest.mark.parametrize("mode,local,world,nbytes,expected", [
    ("flat", 2, 4, 1 << 30, False),
    ("hierarchical", 1, 4, 1 << 30, False),  # one rank per node: the inter level is the flat all-reduce
    ("hierarchical", 4, 4, 1 << 30, False),  # one node
    ("hierarchical", 2, 4, 4, True),  # hierarchical: every size
    ("hybrid", 2, 4, 1000, True),  # at the threshold: both levels
    ("hybrid", 2, 4, 999, False),  # below it: flat
    ("hybrid", 2, 4, 1001, True),
])
def test_uses_hierarchy_by_mode_layout_and_size(mode, local, world, nbytes, expected):
    assert uses_hierarchy(nbytes, TwoLevelGroups(mode, world, local, threshold_bytes=1000)) is expected


@pytest.mark.parametrize("numel", [1000, 1001, 1003, 3])  # divisible by the node size, and padded
@pytest.mark.parametrize("tensor_forms", ["single", "tensor"])
def test_hierarchical_all_reduce_sums_over_every_rank(numel, tensor_forms, monkeypatch):
    fake = FakeDist(4, tensor_forms)
    monkeypatch.setattr(comm_hooks, "dist", fake)

    def work(rank):
        groups = _groups(fake, "hierarchical")
        tensor = _data(rank, numel).view(-1, 1) if numel % 2 else _data(rank, numel).view(2, -1)
        returned = two_level_all_reduce(tensor, groups)
        assert returned is tensor and tensor.is_contiguous()
        return tensor.flatten(), groups.fallbacks

    for total, fallbacks in run_ranks(fake, work):
        assert torch.equal(total, _sum(4, numel).float())
        assert fallbacks == set()
    names = {(name, ranks) for _, name, ranks in fake.calls}
    assert names == {("reduce_scatter", (0, 1)), ("reduce_scatter", (2, 3)), ("all_reduce", (0, 2)),
                     ("all_reduce", (1, 3)), ("all_gather", (0, 1)), ("all_gather", (2, 3))}  # nothing flat


def test_hierarchical_all_reduce_of_three_per_node(monkeypatch):
    fake = FakeDist(6)
    monkeypatch.setattr(comm_hooks, "dist", fake)
    results = run_ranks(fake, lambda rank: two_level_all_reduce(_data(rank, 7), _groups(fake, "hierarchical", 3)))
    for total in results:
        assert torch.equal(total, _sum(6, 7).float())
    shard_sizes = {fake.deposits[key][r].numel() for key in fake.deposits if key[0] == (0, 3) for r in (0, 3)}
    assert shard_sizes == {3}  # 7 padded to 9, one third each


def test_hybrid_sends_small_buckets_flat_and_large_ones_through_both_levels(fake):
    def work(rank):
        groups = _groups(fake, "hybrid", threshold=40)
        small, large = _data(rank, 9), _data(rank, 10)  # 36 and 40 bytes
        two_level_all_reduce(small, groups)
        two_level_all_reduce(large, groups)
        return small, large

    for small, large in run_ranks(fake, work):
        assert torch.equal(small, _sum(4, 9).float()) and torch.equal(large, _sum(4, 10).float())
    per_rank0 = [(name, ranks) for rank, name, ranks in fake.calls if rank == 0]
    assert per_rank0 == [("all_reduce", (0, 1, 2, 3)), ("reduce_scatter", (0, 1)), ("all_reduce", (0, 2)),
                         ("all_gather", (0, 1))]


def _refusing(message: str, exception=RuntimeError):
    def refuse(*args, **kwargs):
        raise exception(message)
    return refuse


@pytest.mark.parametrize("message,exception", [
    ("ProcessGroupGloo does not support reduce_scatter", RuntimeError),
    ("reduce_scatter NOT SUPPORTED here", RuntimeError),
    ("Not implemented for this backend", NotImplementedError),
])
def test_without_reduce_scatter_the_node_all_reduce_gives_the_same_sum(fake, message, exception):
    fake.reduce_scatter_single = _refusing(message, exception)

    def work(rank):
        groups = _groups(fake, "hierarchical")
        first, second = _data(rank, 11), _data(rank, 12)
        two_level_all_reduce(first, groups)
        fake.reduce_scatter_single = None  # remembered: not tried again
        two_level_all_reduce(second, groups)
        return first, second, groups.fallbacks

    for first, second, fallbacks in run_ranks(fake, work):
        assert torch.equal(first, _sum(4, 11).float()) and torch.equal(second, _sum(4, 12).float())
        assert fallbacks == {"reduce_scatter"}


@pytest.mark.parametrize("exception", [RuntimeError, NotImplementedError])
def test_other_reduce_scatter_errors_are_raised(monkeypatch, exception):
    fake = FakeDist(1)  # one rank: a fallback taken by mistake returns at once, with no peers to wait for
    monkeypatch.setattr(comm_hooks, "dist", fake)
    fake.reduce_scatter_single = _refusing("connection reset by peer", exception)
    groups = TwoLevelGroups("hierarchical", 1, 1, intra=fake.world)
    fake.bind(0)
    with pytest.raises(exception, match="connection reset"):
        comm_hooks._reduce_scatter(torch.empty(4), torch.zeros(4), groups)
    assert groups.fallbacks == set()


def _wait(future):
    """The hook's future's value, waited for with a ceiling (a future never completed fails, not hangs)."""
    deadline = time.monotonic() + 20
    while not future.done():
        assert time.monotonic() < deadline, "the hook's future was never completed"
        time.sleep(0.001)
    return future.wait()


class FakeBucket:
    """DDP's GradBucket, as far as the hook reads it."""

    def __init__(self, tensor):
        self.tensor = tensor

    def buffer(self):
        return self.tensor


@pytest.mark.parametrize("mode,two_level", [("hierarchical", 2), ("hybrid", 1)])
def test_hook_returns_the_mean_over_ranks_and_counts_buckets(fake, mode, two_level):
    def work(rank):
        state = HookState(_groups(fake, mode, threshold=40))
        state.worker.submit(fake.bind, rank).result()  # the hook's worker thread acts for this rank
        assert (state.buckets, state.two_level_buckets) == (0, 0)
        results = []
        for numel in (9, 10):  # 36 bytes (hybrid: flat), 40 bytes (both levels)
            bucket = FakeBucket(_data(rank, numel))
            results.append(_wait(comm_hooks.two_level_hook(state, bucket)))
            assert results[-1] is bucket.tensor
        return results, state.buckets, state.two_level_buckets, state.worker._thread_name_prefix

    for (small, large), buckets, two, prefix in run_ranks(fake, work):
        assert torch.allclose(small, _sum(4, 9).float() / 4) and torch.allclose(large, _sum(4, 10).float() / 4)
        assert (buckets, two) == (2, two_level)
        assert prefix == "allreduce"


def test_hook_divides_before_summing_so_fp16_does_not_overflow(fake):
    def work(rank):
        state = HookState(_groups(fake, "hierarchical"))
        state.worker.submit(fake.bind, rank).result()
        return _wait(comm_hooks.two_level_hook(state, FakeBucket(torch.full((4,), 30000.0, dtype=torch.float16))))

    for mean in run_ranks(fake, work):
        assert mean.dtype == torch.float16 and torch.equal(mean, torch.full((4,), 30000.0, dtype=torch.float16))


def test_hook_hands_an_error_to_the_future(fake):
    fake.all_reduce = _refusing("peer gone")
    state = HookState(TwoLevelGroups("hybrid", 4, 2))
    future = comm_hooks.two_level_hook(state, FakeBucket(torch.ones(3)))
    with pytest.raises(RuntimeError, match="peer gone"):
        _wait(future)


def test_hook_runs_buckets_one_after_another_in_order(fake):
    """The worker runs one bucket's collectives at a time, in the order DDP handed the buckets over."""
    started, release, second_ran, order = threading.Event(), threading.Event(), threading.Event(), []

    def all_reduce(tensor, group=None):
        order.append(tensor.numel())
        if tensor.numel() == 2:
            second_ran.set()
        if len(order) == 1:
            started.set()
            assert release.wait(20)

    fake.all_reduce = all_reduce
    state = HookState(TwoLevelGroups("flat", 1, 1))
    first = comm_hooks.two_level_hook(state, FakeBucket(torch.ones(1)))
    assert started.wait(20)
    second = comm_hooks.two_level_hook(state, FakeBucket(torch.ones(2)))
    # the second waits for the first (a second worker thread would start it at once: give it a second to)
    assert not second_ran.wait(1) and not second.done() and order == [1]
    release.set()
    _wait(first), _wait(second)
    assert order == [1, 2]


class CudaBuffer:
    """A bucket's buffer as on GPU 1, its arithmetic done by a CPU tensor."""

    is_cuda = True
    device = torch.device("cuda", 1)

    def __init__(self, tensor):
        self.tensor = tensor

    def __getattr__(self, name):  # div_, numel, element_size, view
        return getattr(self.tensor, name)


class RecordingFuture:
    """torch.futures.Future as far as the hook uses it, recording the devices it was made for."""

    made: list = []

    def __init__(self, devices=None):
        RecordingFuture.made.append(devices)
        self.value, self.error, self.event = None, None, threading.Event()

    def set_result(self, value):
        self.value = value
        self.event.set()

    def set_exception(self, error):
        self.error = error
        self.event.set()


def test_hook_on_gpu_sets_the_buckets_device_in_its_worker_and_makes_a_device_future(fake, monkeypatch):
    """On GPU the collectives run on the bucket's device (the worker thread would use cuda:0), and the future
    is made for that device (DDP then waits for its stream); torch.cuda itself is recorded, not called."""
    devices, world = [], FakeDist(1)
    monkeypatch.setattr(comm_hooks, "dist", world)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: devices.append((device, threading.current_thread())))
    monkeypatch.setattr(torch.futures, "Future", RecordingFuture)
    RecordingFuture.made = []
    state = HookState(TwoLevelGroups("hierarchical", 1, 1))
    state.worker.submit(world.bind, 0).result()
    buffer = CudaBuffer(torch.full((3,), 2.0))
    future = comm_hooks.two_level_hook(state, FakeBucket(buffer))
    assert future.event.wait(20) and future.error is None, future.error
    assert future.value is buffer and torch.equal(buffer.tensor, torch.full((3,), 2.0))
    assert RecordingFuture.made == [[torch.device("cuda", 1)]]
    assert [device for device, _ in devices] == [torch.device("cuda", 1)]
    assert devices[0][1].name.startswith("allreduce")


class FakeDDP:
    def __init__(self):
        self.hooks = []

    def register_comm_hook(self, state, hook):
        self.hooks.append((state, hook))


def test_register_allreduce_by_mode(fake):
    ddp = FakeDDP()
    assert comm_hooks.register_allreduce(ddp, "flat", 2) is None and ddp.hooks == []
    with pytest.raises(ValueError) as caught:
        comm_hooks.register_allreduce(ddp, "ring", 2)
    assert str(caught.value) == "allreduce: unknown mode 'ring'; use flat, hierarchical, hybrid"
    states = run_ranks(fake, lambda rank: comm_hooks.register_allreduce(ddp, "hybrid", 2))
    assert [hook for _, hook in ddp.hooks] == [comm_hooks.two_level_hook] * 4
    assert sorted(id(state) for state, _ in ddp.hooks) == sorted(map(id, states))  # ranks register in any order
    assert {(s.groups.mode, s.groups.local_world_size) for s in states} == {("hybrid", 2)}
