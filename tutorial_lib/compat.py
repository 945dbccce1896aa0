"""Where the torch/torchvision a user has changes what the code must call: the one place that decides.

pyproject.toml admits a range of versions; CI tests the pinned pair, the GPU machine's pair and the lowest
admitted pair (``make test-compat``, tests/compat_plan.py). Each decision here is named after the feature it
depends on and made from what the installed library offers: the function itself where it can be looked up, the
version where only the behaviour changed. The modules that need one call the function here instead of deciding
themselves; :func:`features` lists the decisions taken (the trainer writes them into ``config.json``, under
``env.compat``, and every benchmark record carries them).

What needs no decision over the admitted range (tests/test_compat.py checks it on every pair):
``torch.autocast`` and ``torch.amp.GradScaler(device_type)``, ``torch.load(weights_only=True)`` (always passed
explicitly, so the default that changed in torch 2.6 does not matter), ``init_process_group(device_id=...)``,
DDP's comm hook API, the torch.compile modes the configuration offers, and numpy 2 (torch 2.3.1 works with it).

Below every layer (like :mod:`tutorial_lib.paths`), so that the run directory's checkpoint reader can use it
too; torchvision is imported only where a decision needs it.
"""

from __future__ import annotations

import functools
import inspect
import re

import torch
import torch.distributed as dist


def version_tuple(version: str) -> tuple[int, ...]:
    """``"2.11.0+cu130"`` -> ``(2, 11, 0)``; ``"2.15.0.dev20261101"`` -> ``(2, 15, 0)``."""
    return tuple(int(part) for part in re.findall(r"\d+", version.split("+")[0])[:3])


# torch 2.14 names the single-tensor collectives *_single (the old names warn); before, only the second names exist.
SINGLE_TENSOR_NAMES = {"reduce_scatter": ("reduce_scatter_single", "reduce_scatter_tensor"),
                       "all_gather": ("all_gather_single", "all_gather_into_tensor")}

# Before torch 2.8 (pytorch PR 154976) a gloo process group is destroyed holding the GIL while it joins its
# worker threads; a worker still dropping the last collective's tensors needs the GIL to do so, and both wait
# forever. Seen with torch 2.3: both ranks of a 2-rank evaluate hung in destroy_process_group.
GLOO_DESTROY_HOLDS_GIL = version_tuple(torch.__version__) < (2, 8)

# torch 2.4 added ``including_emulation`` to is_bf16_supported (and counts emulated bf16 unless told not to).
BF16_EMULATION_ARGUMENT = "including_emulation" in inspect.signature(torch.cuda.is_bf16_supported).parameters

# How torch's weights-only unpickler names a global it refuses: "GLOBAL posix.mkdir" (2.4 on), "Unsupported
# class posix.mkdir" (2.3).
_REFUSED_GLOBAL = re.compile(r"(?:GLOBAL|Unsupported class) ([\w.]+)")


def single_tensor_collective(name: str, distributed=dist):
    """``reduce_scatter`` or ``all_gather`` between one flat tensor per rank and its shards under this torch's
    name for it (:data:`SINGLE_TENSOR_NAMES`), called as ``fn(output, input, group=...)``. ``distributed``: the
    module to look in (``torch.distributed``; the comm hooks pass the one they use, which tests replace)."""
    newer, older = SINGLE_TENSOR_NAMES[name]
    return getattr(distributed, newer, None) or getattr(distributed, older)


def leave_process_group() -> None:
    """``dist.destroy_process_group()``; where that can deadlock (:data:`GLOO_DESTROY_HOLDS_GIL`, gloo), a
    barrier first: while it waits, the GIL is free and gloo's workers finish with the earlier collectives'
    tensors before the destructor joins them. A barrier that fails (a rank already gone) is no reason to stay."""
    if GLOO_DESTROY_HOLDS_GIL and dist.get_backend() == "gloo":
        try:
            dist.barrier()
        except RuntimeError:
            pass
    dist.destroy_process_group()


@functools.cache
def batched_jpeg_decode() -> bool:
    """Whether torchvision decodes a list of JPEGs in one call (0.19 on: one nvJPEG batch on a GPU). 0.18 takes
    one tensor per call and refuses a list with a RuntimeError, which the GPU pipeline would take for a
    damaged file and send every image to the CPU decoder."""
    import torchvision

    return version_tuple(torchvision.__version__) >= (0, 19)


def decode_jpegs(data: list[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
    """Decode encoded JPEGs (1-d uint8 tensors) to RGB CHW uint8 images on ``device``: one batched call where
    torchvision has it (:func:`batched_jpeg_decode`), else one call per image. Either way a file that fails
    raises for the whole call (the GPU pipeline then halves the chunk to find it)."""
    from torchvision.io import ImageReadMode, decode_jpeg

    if batched_jpeg_decode():
        return decode_jpeg(data, mode=ImageReadMode.RGB, device=device)
    return [decode_jpeg(item, mode=ImageReadMode.RGB, device=device) for item in data]


def native_bf16() -> bool:
    """Whether the current CUDA device computes bf16 natively (emulated bf16 does not count where torch can
    tell them apart: :data:`BF16_EMULATION_ARGUMENT`)."""
    if BF16_EMULATION_ARGUMENT:
        return torch.cuda.is_bf16_supported(including_emulation=False)
    return torch.cuda.is_bf16_supported()


def refused_global(message: str) -> str | None:
    """The module-qualified name of the object a weights-only ``torch.load`` refused, from its error message."""
    named = _REFUSED_GLOBAL.search(message)
    return named.group(1) if named else None


def features() -> dict:
    """The decisions taken on this torch/torchvision, by feature name."""
    return {
        "batched_jpeg_decode": batched_jpeg_decode(),
        "single_tensor_collectives": {name: getattr(single_tensor_collective(name), "__name__", None)
                                      for name in SINGLE_TENSOR_NAMES},
        "bf16_emulation_argument": BF16_EMULATION_ARGUMENT,
        "gloo_destroy_holds_gil": GLOO_DESTROY_HOLDS_GIL,
    }
