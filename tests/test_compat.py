"""The decisions of engine/compat.py, checked on whichever torch/torchvision pair runs the suite.

``make test`` runs them on the pinned pair; ``make test-compat PAIR=...`` on the GPU machine's pair and on the
lowest pair pyproject.toml admits (tests/compat_plan.py lists both; CI runs all three).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest
import torch
import torch.distributed as dist
from torchvision.io import ImageReadMode, decode_jpeg

import tutorial_lib
from tutorial_lib import compat
from tutorial_lib.engine import comm_hooks
from tutorial_lib.engine.config import COMPILE_MODES
from tutorial_lib.engine.input import files
from tutorial_lib.engine.input import gpu as G

CPU = torch.device("cpu")


def test_every_module_of_the_package_imports():
    """Nothing the package imports at module level is missing from this pair (a renamed function, a moved
    module): the compat subset touches every module at least this far."""
    names = [info.name for info in pkgutil.walk_packages(tutorial_lib.__path__, "tutorial_lib.")
             if not info.name.endswith("__main__")]
    assert len(names) > 50
    for name in names:
        importlib.import_module(name)


def test_version_tuple_reads_local_and_development_versions():
    assert compat.version_tuple("2.11.0+cu130") == (2, 11, 0)
    assert compat.version_tuple("0.18.1") == (0, 18, 1)
    assert compat.version_tuple("2.15.0.dev20261101+cpu") == (2, 15, 0)
    assert compat.version_tuple("2.3.0a0+git1234") == (2, 3, 0)


def test_the_hooks_collectives_exist_and_run_under_this_torchs_names(world_of_one):
    """The hierarchical hook's reduce-scatter (or its all-reduce stand-in where gloo lacks it) and all-gather,
    called as the hook calls them (torch 2.14 renamed them *_single; earlier versions have only the old names)."""
    groups = comm_hooks.TwoLevelGroups("hierarchical", world_size=1, local_world_size=1, intra=world_of_one)
    padded = torch.arange(6, dtype=torch.float32)
    shard = torch.empty(6)
    comm_hooks._reduce_scatter(shard, padded, groups)
    assert torch.equal(shard, padded)  # the sum over one rank of its only shard
    gathered = torch.zeros(6)
    compat.single_tensor_collective("all_gather")(gathered, shard, group=world_of_one)
    assert torch.equal(gathered, padded)


def _jpeg_batch(jpeg_tree) -> tuple[G.DeviceTransform, G.EncodedBatch]:
    dataset = G.EncodedImageFolder(jpeg_tree / "train")
    transform = G.DeviceTransform(dataset, CPU, 16, train=False, resize_to=16)
    batch = G.collate_encoded([dataset[i] for i in range(0, len(dataset), 4)])
    assert [span[0] for span in batch.spans] == ["jpeg"] * len(batch.spans)  # left to the device decoder
    return transform, batch


def test_the_gpu_pipeline_decodes_good_jpegs_on_the_device_path(jpeg_tree, monkeypatch):
    """Good JPEGs are decoded by the device call, never by the CPU fallback that is kept for damaged files
    (torchvision 0.18 refuses a list of JPEGs: called with one, every file looked damaged and went to the CPU)."""
    transform, batch = _jpeg_batch(jpeg_tree)
    fallbacks = []
    monkeypatch.setattr(G, "decode_image", lambda data: fallbacks.append(len(data)) or files.decode_image(data))
    images, keep = transform.decode(batch)
    assert fallbacks == [] and all(keep)
    for image, (_, offset, length) in zip(images, batch.spans, strict=True):
        encoded = batch.flat[offset:offset + length]
        assert torch.equal(image, decode_jpeg(encoded, mode=ImageReadMode.RGB))


def test_decode_jpegs_gives_one_image_per_file_in_order(jpeg_tree):
    transform, batch = _jpeg_batch(jpeg_tree)
    data = [batch.flat[offset:offset + length] for _, offset, length in batch.spans]
    decoded = compat.decode_jpegs(data, CPU)
    assert len(decoded) == len(data) >= 2
    assert [tuple(image.shape) for image in decoded] == [(3, *size) for size in batch.sizes.tolist()]
    assert torch.equal(decoded[-1], decode_jpeg(data[-1], mode=ImageReadMode.RGB))


def test_the_bf16_check_calls_is_bf16_supported_as_this_torch_accepts(monkeypatch):
    """On a GPU, precision_support asks whether bf16 is native; torch 2.3 has no ``including_emulation``."""
    real, calls = torch.cuda.is_bf16_supported, []
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: calls.append((args, kwargs)) or True)
    assert compat.native_bf16() is True
    [(args, kwargs)] = calls
    inspect.signature(real).bind(*args, **kwargs)  # raises TypeError where this torch would
    assert kwargs.get("including_emulation", False) is False  # emulated bf16 never counts where torch can tell


def test_every_compile_mode_the_config_offers_is_one_this_torch_knows():
    from torch._inductor import list_mode_options

    assert set(COMPILE_MODES) - {"none"} <= set(list_mode_options())


def test_a_refused_global_is_named_from_this_torchs_message(tmp_path):
    """A pickle that would call ``os.mkdir`` is refused by the weights-only load, and its message names it (torch
    2.3 words it "Unsupported class posix.mkdir", later versions "GLOBAL posix.mkdir")."""
    import os
    import pickle

    class Planted:
        def __reduce__(self):
            return os.mkdir, (str(tmp_path / "code-ran"),)

    path = tmp_path / "crafted.pt"
    path.write_bytes(pickle.dumps({"model": Planted()}, protocol=2))
    with pytest.raises(pickle.UnpicklingError) as refused:
        torch.load(path, weights_only=True)
    assert compat.refused_global(str(refused.value)) == f"{os.mkdir.__module__}.mkdir"
    assert not (tmp_path / "code-ran").exists()


def test_leaving_a_gloo_group_leaves_it(world_of_one):
    compat.leave_process_group()
    assert not dist.is_initialized()


def test_the_features_are_recorded_with_a_callable_for_each_collective():
    from tutorial_lib.engine.device import environment_facts

    facts = environment_facts("cpu")["compat"]
    assert facts == compat.features()
    assert all(facts["single_tensor_collectives"].values()) and facts["batched_jpeg_decode"] in (True, False)
