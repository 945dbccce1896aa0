"""Step-time model of data-parallel training: compute, all-reduce, overlap, I/O, time to train.

One synchronous step on ``p`` GPUs takes

    step = compute + exposed_communication
    compute = per_gpu_batch / images_per_sec_per_gpu
    exposed_communication = max(0, allreduce(p) - overlap_fraction * backward_time)

because DDP starts all-reducing gradient buckets while backward is still running: only the
part of the all-reduce that outlasts (the overlappable share of) backward delays the step.
All-reduce times use the alpha-beta model (``latency`` per message step, ``bytes/bandwidth``
per byte) for ring, recursive halving-doubling and hierarchical (intra-node, then inter-node)
algorithms. Outside the GPU, a shared file system or the CPUs' JPEG decoding can cap the
global throughput, and every epoch may carry fixed work (validation, loader start-up).

Run ``python -m tutorial_lib.scaling --preset list`` for the published runs this model is
compared against (:mod:`tutorial_lib.scaling.presets`).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

IMAGENET_TRAIN_IMAGES = 1_281_167
IMAGENET_VAL_IMAGES = 50_000
RESNET50_PARAMETERS = 25_557_032  # torchvision resnet50
ALGORITHMS = ("ring", "halving_doubling", "hierarchical")
# Bucketed DDP cannot hide everything: the buckets holding the first layers' gradients are only
# ready when backward ends. 0.8 of backward usable for communication is our round assumption.
DEFAULT_OVERLAP_FRACTION = 0.8


@dataclass(frozen=True)
class Link:
    """One level of the network: bandwidth per direction and latency per message step."""

    bandwidth_gbit_s: float
    latency_us: float = 0.0

    @property
    def bytes_per_s(self) -> float:
        """Bandwidth in bytes per second."""
        return self.bandwidth_gbit_s * 1e9 / 8

    @property
    def latency_s(self) -> float:
        """Latency in seconds."""
        return self.latency_us * 1e-6


@dataclass(frozen=True)
class Cluster:
    """GPUs per node, the link between GPUs of a node, and each node's network port."""

    gpus_per_node: int
    intra: Link
    inter: Link

    def nodes(self, gpus: int) -> int:
        """Nodes a job of ``gpus`` GPUs occupies (nodes are filled one after another)."""
        return max(1, math.ceil(gpus / self.gpus_per_node))


@dataclass(frozen=True)
class Workload:
    """What one GPU does per step, and the gradient it must all-reduce.

    ``images_per_sec_per_gpu`` is the single-GPU training throughput (no communication).
    Backward takes ``backward_time_s`` if given, else ``backward_fraction`` of the compute time
    (2/3: backward costs about twice the forward FLOPs). ``buckets`` is how many separate
    all-reduces the gradient is split into; each pays the latency terms again.
    """

    per_gpu_batch: int
    images_per_sec_per_gpu: float
    gradient_bytes: float
    backward_fraction: float = 2 / 3
    backward_time_s: float | None = None
    buckets: int = 1
    overlap_fraction: float = DEFAULT_OVERLAP_FRACTION

    @property
    def compute_s(self) -> float:
        """Forward + backward + optimizer time of one step on one GPU."""
        return self.per_gpu_batch / self.images_per_sec_per_gpu

    @property
    def backward_s(self) -> float:
        """Backward time of one step, behind which communication can hide."""
        if self.backward_time_s is not None:
            return self.backward_time_s
        return self.backward_fraction * self.compute_s


@dataclass(frozen=True)
class DataPipeline:
    """Limits outside the GPUs. ``None`` means no limit; the defaults model none at all.

    ``storage_gbyte_s`` caps the whole job (a shared file system every image is read from);
    ``node_decode_images_per_s`` caps each node (CPU JPEG decoding and augmentation).
    Each epoch also costs ``epoch_overhead_s`` plus a validation pass over ``eval_images``.
    """

    bytes_per_image: float = 115e3  # mean ImageNet train JPEG: ~138 GiB / 1,281,167 files
    storage_gbyte_s: float | None = None
    node_decode_images_per_s: float | None = None
    epoch_overhead_s: float = 0.0
    eval_images: int = 0
    eval_images_per_sec_per_gpu: float = math.inf

    def ceilings(self, gpus: int, cluster: Cluster) -> dict[str, float]:
        """Global images/s each non-GPU resource can sustain, by name."""
        limits = {}
        if self.storage_gbyte_s is not None:
            limits["storage"] = self.storage_gbyte_s * 1e9 / self.bytes_per_image
        if self.node_decode_images_per_s is not None:
            limits["cpu decode"] = cluster.nodes(gpus) * self.node_decode_images_per_s
        return limits

    def epoch_extra_s(self, gpus: int) -> float:
        """Seconds per epoch spent outside training steps (validation, start-up)."""
        return self.epoch_overhead_s + self.eval_images / (gpus * self.eval_images_per_sec_per_gpu)


def _check(nbytes: float, gpus: int, buckets: int) -> None:
    if nbytes < 0 or gpus < 1 or buckets < 1:
        raise ValueError(f"need nbytes >= 0, gpus >= 1, buckets >= 1 (got {nbytes}, {gpus}, "
                         f"{buckets})")


def ring_allreduce_s(nbytes: float, gpus: int, link: Link, buckets: int = 1) -> float:
    """Ring all-reduce: 2(p-1) steps, each GPU sends 2(p-1)/p of the buffer over ``link``."""
    _check(nbytes, gpus, buckets)
    if gpus == 1:
        return 0.0
    steps = 2 * (gpus - 1)
    return steps * link.latency_s * buckets + steps / gpus * nbytes / link.bytes_per_s


def halving_doubling_allreduce_s(nbytes: float, gpus: int, link: Link, buckets: int = 1) -> float:
    """Recursive halving (reduce-scatter) then doubling (all-gather): 2 log2(p) latency terms,
    the same 2(p-1)/p bytes as a ring. Non-powers of two are rounded up (an approximation)."""
    _check(nbytes, gpus, buckets)
    if gpus == 1:
        return 0.0
    steps = 2 * math.ceil(math.log2(gpus))
    return steps * link.latency_s * buckets + 2 * (gpus - 1) / gpus * nbytes / link.bytes_per_s


FLAT_ALLREDUCE = {"ring": ring_allreduce_s, "halving_doubling": halving_doubling_allreduce_s}


def flat_allreduce_s(nbytes: float, gpus: int, cluster: Cluster, algorithm: str = "ring",
                     buckets: int = 1) -> float:
    """A topology-unaware algorithm over all GPUs: once the job spans nodes, every step waits
    for its slowest hop, the inter-node link (the ring is ordered node by node, so each node's
    port carries one stream)."""
    link = cluster.intra if gpus <= cluster.gpus_per_node else cluster.inter
    return FLAT_ALLREDUCE[algorithm](nbytes, gpus, link, buckets)


def hierarchical_allreduce_s(nbytes: float, gpus: int, cluster: Cluster,
                             inter_algorithm: str = "ring", buckets: int = 1) -> float:
    """Reduce-scatter inside each node, all-reduce across nodes, all-gather inside each node.

    The g GPUs of a node each all-reduce their 1/g shard across the n nodes at the same time,
    sharing the node's port: bytes/g over bandwidth/g, i.e. the cost of one all-reduce of the
    whole buffer among node leaders. The two intra-node halves together cost one intra ring.
    """
    _check(nbytes, gpus, buckets)
    local = min(gpus, cluster.gpus_per_node)
    inside = ring_allreduce_s(nbytes, local, cluster.intra, buckets)
    across = FLAT_ALLREDUCE[inter_algorithm](nbytes, cluster.nodes(gpus), cluster.inter, buckets)
    return inside + across


def allreduce_s(nbytes: float, gpus: int, cluster: Cluster, algorithm: str = "hierarchical",
                inter_algorithm: str = "ring", buckets: int = 1) -> float:
    """All-reduce time of ``nbytes`` over ``gpus`` GPUs with one of ``ALGORITHMS``."""
    if algorithm == "hierarchical":
        return hierarchical_allreduce_s(nbytes, gpus, cluster, inter_algorithm, buckets)
    if algorithm not in FLAT_ALLREDUCE:
        raise ValueError(f"unknown all-reduce algorithm {algorithm!r}; use one of {ALGORITHMS}")
    return flat_allreduce_s(nbytes, gpus, cluster, algorithm, buckets)


def exposed_communication_s(comm_s: float, backward_s: float, overlap_fraction: float) -> float:
    """The part of the all-reduce not hidden behind backward."""
    return max(0.0, comm_s - overlap_fraction * backward_s)


def bandwidth_to_hide_allreduce_gbit_s(gradient_bytes: float, backward_time_s: float,
                                       traffic_factor: float = 2.0) -> float:
    """Network bandwidth at which the all-reduce takes no longer than backward.

    Goyal et al. (reference 004): an all-reduce moves about twice the buffer's bytes, so 100 MB
    of gradients in 0.125 s need 200 MB / 0.125 s = 1600 MB/s = 12.8 Gbit/s. The exact ring
    factor is 2(p-1)/p (see ``ring_traffic_factor``).
    """
    return traffic_factor * gradient_bytes * 8 / backward_time_s / 1e9


def ring_traffic_factor(participants: int) -> float:
    """Bytes a ring all-reduce sends per participant, as a multiple of the buffer: 2(p-1)/p."""
    return 2 * (participants - 1) / participants


@dataclass(frozen=True)
class Projection:
    """The model's prediction for one GPU count."""

    gpus: int
    nodes: int
    global_batch: int
    compute_s: float
    allreduce_s: float
    exposed_comm_s: float
    step_s: float
    images_per_s: float  # training steps only
    limited_by: str
    epoch_s: float
    time_to_train_s: float
    efficiency: float  # vs gpus x the single-GPU model, time to train included


@dataclass(frozen=True)
class ScalingModel:
    """Cluster + workload + data pipeline + all-reduce algorithm: predicts steps and runs."""

    cluster: Cluster
    workload: Workload
    pipeline: DataPipeline = field(default_factory=DataPipeline)
    algorithm: str = "hierarchical"
    inter_algorithm: str = "ring"

    def allreduce_s(self, gpus: int) -> float:
        """All-reduce time of one step's gradients on ``gpus`` GPUs."""
        w = self.workload
        return allreduce_s(w.gradient_bytes, gpus, self.cluster, self.algorithm,
                           self.inter_algorithm, w.buckets)

    def _point(self, gpus: int, epochs: float, dataset_images: int) -> Projection:
        w = self.workload
        comm = self.allreduce_s(gpus)
        exposed = exposed_communication_s(comm, w.backward_s, w.overlap_fraction)
        step = w.compute_s + exposed
        throughput = gpus * w.per_gpu_batch / step
        limited_by = "communication" if exposed > 0 else "compute"
        for name, ceiling in self.pipeline.ceilings(gpus, self.cluster).items():
            if ceiling < throughput:
                throughput, limited_by = ceiling, name
        epoch = dataset_images / throughput + self.pipeline.epoch_extra_s(gpus)
        return Projection(gpus, self.cluster.nodes(gpus), gpus * w.per_gpu_batch, w.compute_s,
                          comm, exposed, step, throughput, limited_by, epoch, epochs * epoch,
                          efficiency=math.nan)

    def project(self, gpus_list: Iterable[int], epochs: float = 90,
                dataset_images: int = IMAGENET_TRAIN_IMAGES) -> list[Projection]:
        """Throughput, efficiency and time to train ``epochs`` epochs for each GPU count."""
        single = self._point(1, epochs, dataset_images).time_to_train_s
        points = []
        for gpus in gpus_list:
            point = self._point(int(gpus), epochs, dataset_images)
            points.append(replace(point, efficiency=single / (gpus * point.time_to_train_s)))
        return points


def bus_bandwidth_bytes_s(nbytes: float, seconds: float, gpus: int) -> float:
    """nccl-tests' bus bandwidth: (bytes / time) x 2(p-1)/p, comparable to a link's speed."""
    return nbytes / seconds * ring_traffic_factor(gpus)


def fit_link(samples: Iterable[tuple[float, float]], gpus: int, algorithm: str = "ring") -> Link:
    """Fit latency (alpha) and bandwidth (1/beta) to measured (message bytes, seconds) pairs.

    Least squares on t = latency_steps * alpha + 2(p-1)/p * bytes * beta. A negative alpha
    (noise on tiny messages) is clipped to zero and beta refitted alone.
    """
    pairs = np.asarray(list(samples), dtype=float)
    if gpus < 2 or pairs.ndim != 2 or len(pairs) < 2:
        raise ValueError("need at least two (bytes, seconds) samples measured on >= 2 GPUs")
    sizes, times = pairs[:, 0], pairs[:, 1]
    steps = 2 * (gpus - 1) if algorithm == "ring" else 2 * math.ceil(math.log2(gpus))
    byte_terms = ring_traffic_factor(gpus) * sizes
    design = np.column_stack([np.full_like(sizes, steps), byte_terms])
    (alpha, beta), *_ = np.linalg.lstsq(design, times, rcond=None)
    if alpha < 0:
        alpha, beta = 0.0, float(byte_terms @ times / (byte_terms @ byte_terms))
    if beta <= 0:
        raise ValueError("the samples do not grow with message size; cannot fit a bandwidth")
    return Link(bandwidth_gbit_s=float(8 / beta / 1e9), latency_us=float(alpha * 1e6))


def fit_point_to_point(samples: Iterable[tuple[float, float]]) -> Link:
    """Latency and bandwidth of one link from one-way message times: least squares on t = alpha + bytes * beta.

    Where noise makes the line fall (a fast link's small message timed slower than its large one, as a loaded
    machine does) or cross below zero, there is no latency to fit: the bandwidth then comes from the bytes
    alone (least squares through the origin), which every positive sample gives.
    """
    pairs = np.asarray(list(samples), dtype=float)
    if pairs.ndim != 2 or len(pairs) < 2:
        raise ValueError("need at least two (bytes, seconds) samples")
    if (pairs <= 0).any():
        raise ValueError("message sizes and times must be positive")
    beta, alpha = np.polyfit(pairs[:, 0], pairs[:, 1], 1)
    if alpha < 0 or beta <= 0:  # noise: no latency, the bandwidth from the bytes alone
        alpha, beta = 0.0, float(pairs[:, 0] @ pairs[:, 1] / (pairs[:, 0] @ pairs[:, 0]))
    return Link(bandwidth_gbit_s=float(8 / beta / 1e9), latency_us=float(alpha * 1e6))


def load_allreduce_samples(source: str | os.PathLike | dict,
                           ) -> tuple[int, list[tuple[float, float]]]:
    """(gpus, [(bytes, seconds), ...]) from an all-reduce benchmark's record (dict, JSON file,
    or JSON-lines file such as ``tutorial_lib.bench allreduce`` writes: its last record is used).

    Accepted shapes: ``{"gpus": p, "results": [{"bytes": b, "seconds": t}, ...]}`` (also
    ``world_size``, ``size_bytes``, ``time_s``) or ``{"gpus": p, "times_s": {"<bytes>": t}}``.
    """
    if isinstance(source, dict):
        data = source
    else:
        records = [json.loads(line) for line in Path(source).read_text().splitlines()
                   if line.strip()]
        usable = [r for r in records if "results" in r or "times_s" in r]
        if not usable:
            raise ValueError(f"{source}: no all-reduce record with 'results' or 'times_s'")
        data = usable[-1]
    gpus = int(data.get("gpus", data.get("world_size", 0)))
    if "times_s" in data:
        samples = [(float(size), float(t)) for size, t in data["times_s"].items()]
    else:
        samples = [(float(r.get("bytes", r.get("size_bytes"))),
                    float(r.get("seconds", r.get("time_s")))) for r in data["results"]
                   if r.get("algorithm", "flat") == "flat"]  # the other algorithms are not a ring
    return gpus, samples


def calibrate(model: ScalingModel, allreduce_samples: Iterable[tuple[float, float]], gpus: int,
              single_gpu_images_per_s: float, level: str = "inter",
              algorithm: str = "ring") -> ScalingModel:
    """A copy of ``model`` with the measured 1-GPU throughput and a link fitted to all-reduce
    timings taken at ``level`` ("intra": GPUs of one node, "inter": one GPU per node)."""
    if level not in ("intra", "inter"):
        raise ValueError("level must be 'intra' or 'inter'")
    link = fit_link(allreduce_samples, gpus, algorithm)
    cluster = replace(model.cluster, **{level: link})
    workload = replace(model.workload, images_per_sec_per_gpu=single_gpu_images_per_s)
    return replace(model, cluster=cluster, workload=workload)


def format_duration(seconds: float) -> str:
    """Hours, minutes and seconds as ``20h36m51s``, ``6m36s`` or ``26.4s``."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"
