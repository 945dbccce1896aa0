"""Hierarchical and hybrid gradient all-reduce, as DDP communication hooks (reference 002).

On a two-level network (fast links inside a node, a slow port per node) a flat all-reduce over all
ranks sends about 2(p-1)/p of the gradient through every node's port. The hierarchical one keeps
most traffic inside the nodes: reduce-scatter inside each node (each local rank then holds 1/g of
the node's sum), all-reduce of each shard across the nodes (the g local ranks do this at the same
time, each for its own shard), all-gather inside the node. ``hybrid`` sends the small buckets
through the flat all-reduce, whose fewer steps win where latency dominates.

The node size is the launcher's local world size (torchrun's ``LOCAL_WORLD_SIZE``); nodes must hold
the same number of ranks, numbered node by node (torchrun and Slurm do both).
"""

import concurrent.futures
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from tutorial_lib import compat
from tutorial_lib.engine.config import ConfigError

HYBRID_THRESHOLD_BYTES = 1 << 20  # hybrid: buckets below 1 MiB take the flat all-reduce
HOOKED_MODES = ("hierarchical", "hybrid")  # "flat" keeps DDP's own all-reduce


def node_layout(world_size: int, local_world_size: int) -> tuple[list[list[int]], list[list[int]]]:
    """The ranks of each node (``intra``) and the ranks with the same local rank (``inter``, one per node).

    Ranks are numbered node by node: node ``n`` holds ``n*g .. n*g+g-1`` for ``g = local_world_size``.
    """
    if local_world_size < 1 or world_size % local_world_size:
        raise ConfigError(f"allreduce: {world_size} ranks do not split into nodes of {local_world_size} ranks. "
                         "Fix: run the same number of ranks on every node, or use --allreduce flat")
    g = local_world_size
    intra = [list(range(start, start + g)) for start in range(0, world_size, g)]
    inter = [list(range(local, world_size, g)) for local in range(g)]
    return intra, inter


@dataclass
class TwoLevelGroups:
    """The process groups of one rank, and every group list in the order it was created on all ranks."""

    mode: str
    world_size: int
    local_world_size: int
    intra: object = None  # this rank's node (a ProcessGroup)
    inter: object = None  # this rank's peers with the same local rank on the other nodes
    created: list = field(default_factory=list)  # [("intra", [[0, 1], [2, 3]]), ("inter", ...)]
    threshold_bytes: int = HYBRID_THRESHOLD_BYTES
    fallbacks: set = field(default_factory=set)  # collectives this backend lacked (replaced, see _reduce_scatter)

    @property
    def nodes(self) -> int:
        """Nodes of the job."""
        return self.world_size // self.local_world_size


def build_groups(mode: str = "hierarchical", local_world_size: int | None = None,
                 threshold_bytes: int = HYBRID_THRESHOLD_BYTES) -> TwoLevelGroups:
    """Create the intra-node and inter-node process groups (call on every rank, same arguments).

    ``torch.distributed.new_group`` must be called for every group in the same order on every rank,
    also for the groups a rank is not in; ``new_subgroups_by_enumeration`` does exactly that from
    lists that are the same on every rank (:func:`node_layout`).
    """
    if local_world_size is None:
        from tutorial_lib.engine.distributed import env_rank_info

        local_world_size = env_rank_info()[3]
    world = dist.get_world_size()
    intra_lists, inter_lists = node_layout(world, local_world_size)
    groups = TwoLevelGroups(mode, world, local_world_size, threshold_bytes=threshold_bytes)
    groups.intra, _ = dist.new_subgroups_by_enumeration(intra_lists)
    groups.created.append(("intra", intra_lists))
    groups.inter, _ = dist.new_subgroups_by_enumeration(inter_lists)
    groups.created.append(("inter", inter_lists))
    return groups


def _reduce_scatter(shard: torch.Tensor, padded: torch.Tensor, groups: TwoLevelGroups) -> None:
    """Reduce-scatter inside the node. Some gloo versions lack it (torch 2.14's has it); there an
    all-reduce inside the node, then keeping this rank's slice, gives the same shard with twice the
    intra-node traffic and the same inter-node traffic, which is what the hierarchy is for."""
    if "reduce_scatter" not in groups.fallbacks:
        try:
            compat.single_tensor_collective("reduce_scatter", dist)(shard, padded, group=groups.intra)
            return
        except (RuntimeError, NotImplementedError) as exc:  # raised at the call, on every rank alike
            if not any(words in str(exc).lower() for words in ("not support", "not implemented")):
                raise
            groups.fallbacks.add("reduce_scatter")
    dist.all_reduce(padded, group=groups.intra)
    shard.copy_(padded.view(groups.local_world_size, -1)[dist.get_rank(groups.intra)])


def uses_hierarchy(nbytes: int, groups: TwoLevelGroups) -> bool:
    """Whether a message of ``nbytes`` goes through both levels (else: one flat all-reduce)."""
    if groups.mode == "flat" or groups.local_world_size == 1 or groups.nodes == 1:
        return False  # one level only: the hierarchy would be the same all-reduce
    return groups.mode == "hierarchical" or nbytes >= groups.threshold_bytes


def two_level_all_reduce(tensor: torch.Tensor, groups: TwoLevelGroups) -> torch.Tensor:
    """Sum ``tensor`` (contiguous) over all ranks in place: flat, hierarchical or hybrid by ``groups.mode``.

    Synchronous; every rank must call it with tensors of the same size in the same order.
    """
    flat = tensor.view(-1)
    if not uses_hierarchy(flat.numel() * flat.element_size(), groups):
        dist.all_reduce(flat)
        return tensor
    g = groups.local_world_size
    pad = (-flat.numel()) % g
    padded = torch.cat([flat, flat.new_zeros(pad)]) if pad else flat
    shard = padded.new_empty(padded.numel() // g)
    _reduce_scatter(shard, padded, groups)
    dist.all_reduce(shard, group=groups.inter)
    compat.single_tensor_collective("all_gather", dist)(padded, shard, group=groups.intra)
    if pad:
        flat.copy_(padded[:flat.numel()])
    return tensor


class HookState:
    """The hook's state: the groups and one worker thread that runs the buckets' collectives in bucket order.

    DDP hands buckets to the hook in the same order on every rank; running their collectives one bucket
    after another on a single thread keeps that order on every group (two buckets' collectives
    interleaved differently on two ranks would pair the wrong messages), while backward goes on.
    """

    def __init__(self, groups: TwoLevelGroups):
        self.groups = groups
        self.buckets = 0  # buckets reduced (tests check the hook really ran) ...
        self.two_level_buckets = 0  # ... and how many of them went through both levels
        self.worker = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="allreduce")


# No ``from __future__ import annotations`` here: DDP checks this signature's annotations as objects.
def two_level_hook(state: HookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook: the mean of the bucket's gradients over all ranks, by ``state.groups.mode``.

    Works for any gradient dtype the backend reduces (fp32, fp16, bf16): gradients are divided by the
    world size first, as DDP's own all-reduce does, so fp16 sums do not overflow.
    """
    buffer = bucket.buffer()
    future = torch.futures.Future(devices=[buffer.device] if buffer.is_cuda else None)
    device = buffer.device

    def run():
        try:
            if device.type == "cuda":
                torch.cuda.set_device(device)
            buffer.div_(state.groups.world_size)
            state.two_level_buckets += uses_hierarchy(buffer.numel() * buffer.element_size(), state.groups)
            state.buckets += 1
            future.set_result(two_level_all_reduce(buffer, state.groups))
        except Exception as exc:  # noqa: BLE001 - handed to DDP, which raises it in backward
            future.set_exception(exc)

    state.worker.submit(run)
    return future


def register_allreduce(ddp_model, mode: str, local_world_size: int | None = None) -> HookState | None:
    """Register the hook of ``mode`` on a DistributedDataParallel model (``flat``: DDP's own; returns None)."""
    if mode == "flat":
        return None
    if mode not in HOOKED_MODES:
        raise ValueError(f"allreduce: unknown mode {mode!r}; use flat, {', '.join(HOOKED_MODES)}")
    state = HookState(build_groups(mode, local_world_size))
    ddp_model.register_comm_hook(state, two_level_hook)
    return state
