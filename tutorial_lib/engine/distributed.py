"""Distributed setup from the environment torchrun (or Slurm's srun) provides.

Under plain ``python`` the run is a world of one and no process group is created, so the same
training file runs unchanged on a laptop, under ``torchrun --nproc-per-node N`` and across nodes.
"""

from __future__ import annotations

import datetime
import os
import socket
from dataclasses import dataclass

import torch
import torch.distributed as dist

from tutorial_lib import compat
from tutorial_lib.engine.errors import ConfigError, shorten
from tutorial_lib.numbers import whole_number


@dataclass(frozen=True)
class DistInfo:
    """Where this process sits in the job."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    backend: str | None = None

    @property
    def is_main(self) -> bool:
        """True on the one process that writes files and prints (rank 0)."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        """True when a process group is in use."""
        return self.world_size > 1


def env_rank_info(environ=os.environ) -> tuple[int, int, int, int]:
    """(rank, world_size, local_rank, local_world_size) from torchrun's or Slurm's variables."""
    def get(key: str, default: int) -> int:
        """A launcher's count, as plain ASCII digits (r43t: ``RANK=²`` was a ValueError traceback, ``WORLD_SIZE=٢``
        read as 2)."""
        text = environ.get(key, str(default))
        if key == "SLURM_NTASKS_PER_NODE":  # Slurm writes '4(x2)' (4 on each of 2 nodes), or '4,2' for uneven nodes
            text = text.split(",")[0].split("(")[0]
        number = whole_number(text)
        if number is None:
            raise ConfigError(f"{key}: {shorten(text)} is not a whole number from 0 to {2**31 - 1:,}; the launcher "
                              "(torchrun, srun) sets it. Fix: start the trainer through torchrun or srun, or unset "
                              f"{key} for a single process.")
        return number

    if "RANK" in environ and "WORLD_SIZE" in environ:
        names = ("RANK", "WORLD_SIZE")
        info = get("RANK", 0), get("WORLD_SIZE", 1), get("LOCAL_RANK", 0), get("LOCAL_WORLD_SIZE", 1)
    elif "SLURM_PROCID" in environ and "SLURM_NTASKS" in environ and "MASTER_ADDR" in environ:
        names = ("SLURM_PROCID", "SLURM_NTASKS")
        info = (get("SLURM_PROCID", 0), get("SLURM_NTASKS", 1), get("SLURM_LOCALID", 0),
                get("SLURM_NTASKS_PER_NODE", 1))
    else:
        return 0, 1, 0, 1
    if info[1] < 1 or info[0] >= info[1]:  # r43v: a world of 0 reached torch's rendezvous (a ValueError traceback)
        raise ConfigError(f"{names[0] if info[1] >= 1 else names[1]}: rank {info[0]} of a world of {info[1]} "
                          "process(es): a rank is below the world size, which is 1 or more. Fix: start the trainer "
                          f"through torchrun or srun, which set both, or unset {names[0]} and {names[1]} for a single "
                          "process.")
    return info


def check_rendezvous(environ=os.environ) -> None:
    """The address and port the processes of a job meet at (torch's ``env://``), before they try: each set, the port
    a whole number from 1 to 65,535, the address one the resolver knows (r43v: a world of 2 without MASTER_PORT was
    torch's ValueError traceback)."""
    for key in ("MASTER_ADDR", "MASTER_PORT"):
        if not environ.get(key, "").strip():
            raise ConfigError(f"{key}: not set, and the processes of a job meet at MASTER_ADDR:MASTER_PORT. Fix: "
                              "start the trainer through torchrun (it sets both), or export MASTER_ADDR=<first node> "
                              "MASTER_PORT=29500 before srun.")
    port = whole_number(environ["MASTER_PORT"].strip(), 65536)
    if not port:
        raise ConfigError(f"MASTER_PORT: {shorten(environ['MASTER_PORT'])} is not a port from 1 to 65,535. Fix: e.g. "
                          "MASTER_PORT=29500, or start the trainer through torchrun.")
    address = environ["MASTER_ADDR"]  # as torch reads it (r43x: ' 127.0.0.1' resolved here once stripped)
    if not (address.isascii() and address.isprintable()) or " " in address:  # Python's resolver maps '１２７' (IDNA),
        raise ConfigError(f"MASTER_ADDR: {shorten(address)} holds a blank or a character no host name has. Fix: "
                          "export MASTER_ADDR=<the first node's host name or IP> without blanks or quotes, or start "
                          "the trainer through torchrun.")  # torch's does not: it retried for its 600 s
    try:  # r43w: an address that does not resolve had torch's rendezvous retry for its whole timeout, silent
        socket.getaddrinfo(address, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(f"MASTER_ADDR: {shorten(address)} does not resolve to an address ({reason[:80]}). "
                          "Fix: export MASTER_ADDR=<the first node's host name or IP> (e.g. $(scontrol show hostnames "
                          "$SLURM_JOB_NODELIST | head -n 1)), or start the trainer through torchrun.") from None


def pick_device(requested: str, local_rank: int) -> torch.device:
    """The device for this rank: ``cuda:<local_rank>`` on GPU nodes, else the CPU."""
    if requested == "cuda" or (requested == "auto" and torch.cuda.is_available()):
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def init_distributed(device: torch.device, timeout_s: float = 600) -> DistInfo:
    """Join the process group if launched as part of a job (nccl on GPU, gloo on CPU)."""
    rank, world, local_rank, local_world = env_rank_info()
    if world == 1:
        return DistInfo()
    check_rendezvous()
    os.environ.setdefault("RANK", str(rank))
    os.environ.setdefault("WORLD_SIZE", str(world))
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s),
                            device_id=device if device.type == "cuda" else None)
    return DistInfo(rank, world, local_rank, local_world, backend)


def node_name() -> str:
    """The node this process runs on: the emulated node's or Slurm's node name if set (emulated
    nodes share one host name), else the host name."""
    return os.environ.get("TUTORIAL_NODE_NAME") or os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def all_gather_objects(value, info: DistInfo) -> list:
    """Every rank's ``value``, in rank order (a one-element list without a process group)."""
    if not info.distributed:
        return [value]
    gathered = [None] * info.world_size
    dist.all_gather_object(gathered, value)
    return gathered


def all_reduce_sum(values: list[float], info: DistInfo, device: torch.device) -> list[float]:
    """Sum a few numbers over all ranks (float64, so counts stay exact)."""
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    if info.distributed:
        dist.all_reduce(tensor)
    return tensor.tolist()


def broadcast_buffers(module: torch.nn.Module, info: DistInfo) -> None:
    """Give every rank rank 0's buffers (BatchNorm's running statistics): each rank's last training forward
    updated its own copy from its own batch (DDP copies rank 0's only at the next forward)."""
    if info.distributed:
        for buffer in module.buffers():
            dist.broadcast(buffer, src=0)


def barrier(info: DistInfo) -> None:
    """Wait for all ranks (no-op in a world of one)."""
    if info.distributed:
        dist.barrier()


def shutdown(info: DistInfo) -> None:
    """Leave the process group cleanly (:func:`tutorial_lib.compat.leave_process_group`: bounded)."""
    if info.distributed and dist.is_initialized():
        compat.leave_process_group()
