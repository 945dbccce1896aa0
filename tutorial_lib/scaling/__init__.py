"""The scaling model of data-parallel training (:mod:`~tutorial_lib.scaling.model`) and the published runs it is
compared with (:mod:`~tutorial_lib.scaling.presets`; ``python -m tutorial_lib.scaling --preset list``).

The model's names are importable from here (``scaling.Cluster``, ``scaling.calibrate``...).
"""

from tutorial_lib.scaling.model import (
    ALGORITHMS,
    DEFAULT_OVERLAP_FRACTION,
    FLAT_ALLREDUCE,
    IMAGENET_TRAIN_IMAGES,
    IMAGENET_VAL_IMAGES,
    RESNET50_PARAMETERS,
    Cluster,
    DataPipeline,
    Link,
    Projection,
    ScalingModel,
    Workload,
    allreduce_s,
    bandwidth_to_hide_allreduce_gbit_s,
    bus_bandwidth_bytes_s,
    calibrate,
    exposed_communication_s,
    fit_link,
    fit_point_to_point,
    flat_allreduce_s,
    format_duration,
    halving_doubling_allreduce_s,
    hierarchical_allreduce_s,
    load_allreduce_samples,
    ring_allreduce_s,
    ring_traffic_factor,
)

__all__ = ["ALGORITHMS", "DEFAULT_OVERLAP_FRACTION", "FLAT_ALLREDUCE", "IMAGENET_TRAIN_IMAGES", "IMAGENET_VAL_IMAGES",
           "RESNET50_PARAMETERS", "Cluster", "DataPipeline", "Link", "Projection", "ScalingModel", "Workload",
           "allreduce_s", "bandwidth_to_hide_allreduce_gbit_s", "bus_bandwidth_bytes_s", "calibrate",
           "exposed_communication_s", "fit_link",
           "fit_point_to_point", "flat_allreduce_s", "format_duration", "halving_doubling_allreduce_s",
           "hierarchical_allreduce_s", "load_allreduce_samples", "ring_allreduce_s", "ring_traffic_factor"]
