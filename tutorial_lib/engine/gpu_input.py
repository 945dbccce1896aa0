"""The GPU input pipeline (``input_pipeline: gpu``): CPU workers only read file bytes; the training
device decodes the JPEGs in batches (nvJPEG on CUDA) and crops, resizes, flips and normalises them
in batched form. On the CPU the same code runs with torchvision's CPU decoder (tests, CI).

What it keeps from the CPU path (``engine.data``): the same samplers (DistributedSampler with
set_epoch for training, ShardSampler for validation), the same ``Batch`` and ``Loaders`` interface,
unreadable files named and skipped (or a DataError under ``bad_data: error``), and the same
transforms in distribution (training: RandomResizedCrop's scale/ratio draws, flips) and in pixels
(validation: resize to size*256/224 and center crop).

How a batch is resized: every output image is ``Wy @ crop @ Wx^T``, where ``Wy`` and ``Wx`` hold
PIL's antialiased bilinear weights (a triangle filter widened by the downscale factor, the filter
torchvision's RandomResizedCrop and Resize use on PIL images). The crops are copied into one padded
batch, so one batched matmul per axis resizes them all, to a different box each; a flip is ``Wx``
with its rows reversed. Why not ``roi_align`` or ``grid_sample``: both sample bilinearly without
PIL's antialias filter, so downscaled crops would alias and differ from the CPU path's pixels.

Crop and flip draws come from a counter-based hash of (seed, epoch, dataset index): no RNG state to
save, and a run resumed in the middle of an epoch gets exactly the crops it would have had.
"""

from __future__ import annotations

import io
import math
import warnings
from dataclasses import dataclass, fields

import numpy as np
import torch
from PIL import Image

from tutorial_lib.engine.data import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    Batch,
    CountingImageFolder,
    Loaders,
    build_loaders,
    check_imagefolder,
    folder_loaders,
    open_regular_file,
)

RATIO = (3 / 4, 4 / 3)  # RandomResizedCrop's default aspect-ratio range
ATTEMPTS = 10  # RandomResizedCrop's tries before it falls back to a center crop
PAD_BUDGET = 2**28  # most elements of one padded crop batch; larger batches are resized in chunks


class EncodedImageFolder(CountingImageFolder):
    """ImageFolder whose samples are ``(index, payload, target)``: the file's bytes if it is a complete
    JPEG (decoded later on the device), else the image decoded here with PIL as the CPU path does
    (a PNG named .JPEG, a truncated JPEG: PIL refuses it as the CPU path would). Unreadable: None."""

    def __getitem__(self, index: int):
        path, target = self.samples[index]
        try:
            with open_regular_file(path) as handle:
                data = handle.read()
            if is_complete_jpeg(data):
                return index, data, target
            image = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
        except (OSError, ValueError, Image.DecompressionBombError) as exc:
            return self.unreadable(path, exc)
        return index, image, target


def is_complete_jpeg(data: bytes) -> bool:
    """True for bytes that start with a JPEG marker and end with its end-of-image marker."""
    return data[:3] == b"\xff\xd8\xff" and data.rstrip(b"\x00\r\n ")[-2:] == b"\xff\xd9"


@dataclass
class EncodedBatch:
    """A batch as the workers deliver it: JPEG bytes in one flat tensor, other images decoded."""

    indices: list[int]
    flat: torch.Tensor  # all JPEG files of the batch, back to back (one pinned buffer)
    spans: list  # per sample: (offset, length) into ``flat``, or None where ``decoded`` holds the image
    decoded: list  # per sample: a uint8 CHW tensor decoded on the CPU, or None
    targets: torch.Tensor
    skipped: int

    def pin_memory(self) -> EncodedBatch:
        """Page-locked copies, so the host-to-device copies can be asynchronous (DataLoader calls this)."""
        pin = lambda t: None if t is None else t.pin_memory()  # noqa: E731
        return EncodedBatch(self.indices, pin(self.flat), self.spans, [pin(t) for t in self.decoded],
                            pin(self.targets), self.skipped)


def collate_encoded(samples: list) -> EncodedBatch:
    """Gather ``EncodedImageFolder`` samples, dropping and counting the ``None`` of unreadable files."""
    good = [s for s in samples if s is not None]
    total = sum(len(p) for _, p, _ in good if isinstance(p, bytes))
    flat = torch.empty(total, dtype=torch.uint8)
    view, offset, spans, decoded = flat.numpy(), 0, [], []
    for _, payload, _ in good:
        if isinstance(payload, bytes):
            view[offset:offset + len(payload)] = np.frombuffer(payload, dtype=np.uint8)
            spans.append((offset, len(payload)))
            decoded.append(None)
            offset += len(payload)
        else:
            spans.append(None)
            decoded.append(torch.from_numpy(np.ascontiguousarray(payload.transpose(2, 0, 1))))
    return EncodedBatch([s[0] for s in good], flat, spans, decoded,
                        torch.tensor([s[2] for s in good], dtype=torch.long), len(samples) - len(good))


# --------------------------------------------------------------------------- random draws
def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser on uint64 arrays (wrapping arithmetic): a strong integer hash."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def uniforms(seed: int, epoch: int, indices, count: int) -> np.ndarray:
    """``count`` uniform [0, 1) numbers per dataset index, a pure function of (seed, epoch, index)."""
    key = _mix(_mix(np.array([seed], dtype=np.uint64)) ^ np.uint64(epoch))
    per_image = _mix(key ^ np.asarray(indices, dtype=np.uint64))
    draws = _mix(per_image[:, None] ^ _mix(np.arange(1, count + 1, dtype=np.uint64))[None, :])
    return (draws >> np.uint64(11)).astype(np.float64) * 2.0**-53


def crop_boxes(heights, widths, u: np.ndarray, min_scale: float) -> np.ndarray:
    """RandomResizedCrop.get_params for many images at once: rows of (top, left, height, width).

    Same algorithm and distribution as torchvision's: up to 10 draws of an area fraction uniform in
    [min_scale, 1] and a log-uniform aspect ratio in [3/4, 4/3]; the first that fits wins and its
    position is uniform; if none fits, a center crop clamped to the ratio range. ``u``: (N, 23).
    """
    height, width = np.asarray(heights, dtype=np.float64), np.asarray(widths, dtype=np.float64)
    area = (height * width)[:, None]
    target = area * (min_scale + (1 - min_scale) * u[:, :ATTEMPTS])
    log_lo, log_hi = math.log(RATIO[0]), math.log(RATIO[1])
    ratio = np.exp(log_lo + (log_hi - log_lo) * u[:, ATTEMPTS:2 * ATTEMPTS])
    w, h = np.round(np.sqrt(target * ratio)), np.round(np.sqrt(target / ratio))
    fits = (w > 0) & (w <= width[:, None]) & (h > 0) & (h <= height[:, None])
    first = fits.argmax(axis=1)
    rows = np.arange(len(height))
    h, w, found = h[rows, first], w[rows, first], fits.any(axis=1)
    top = np.floor(u[:, 2 * ATTEMPTS] * (height - h + 1))
    left = np.floor(u[:, 2 * ATTEMPTS + 1] * (width - w + 1))
    # the fallback of get_params: the whole image, cut to the nearest allowed ratio
    in_ratio = width / height
    fw = np.where(in_ratio > RATIO[1], np.round(height * RATIO[1]), width)
    fh = np.where(in_ratio < RATIO[0], np.round(width / RATIO[0]), height)
    h, w = np.where(found, h, fh), np.where(found, w, fw)
    top = np.where(found, top, (height - h) // 2)
    left = np.where(found, left, (width - w) // 2)
    return np.stack([top, left, h, w], axis=1).astype(np.int64)


# --------------------------------------------------------------------------- batched resampling
def _center_plan(length: np.ndarray, resized: np.ndarray, crop: int) -> np.ndarray:
    """Per image, one axis of "resize to ``resized``, take the center ``crop``" as a resampling plan."""
    scale = length / resized
    offset = np.round((resized - crop) / 2.0)  # CenterCrop's int(round(...)), half to even like Python
    first = (offset + 0.5) * scale
    last = (offset + crop - 0.5) * scale
    support = np.maximum(scale, 1.0)
    start = np.maximum(np.floor(first - support), 0)
    stop = np.minimum(np.ceil(last + support) + 1, length)
    return np.stack([start, stop - start, np.zeros_like(length), length, offset * scale, scale], axis=1)


def _crop_plan(start: np.ndarray, size: np.ndarray, crop: int) -> np.ndarray:
    """One axis of "crop [start, start+size), resize to ``crop``" (RandomResizedCrop) as a plan."""
    return np.stack([start, size, start, start + size, start, size / crop], axis=1)


def _axis_weights(plan: torch.Tensor, out: int, length: int, flip: torch.Tensor | None) -> torch.Tensor:
    """(N, out, length) resampling weights, PIL's antialiased bilinear filter, one row per output pixel.

    ``plan`` rows: window start and length (the pixels copied), the valid source range [lo, hi), the
    position of output pixel 0's left edge and the scale (source pixels per output pixel).
    """
    start, _, lo, hi, origin, scale = plan.unbind(1)
    centers = origin[:, None] + (torch.arange(out, device=plan.device) + 0.5) * scale[:, None]
    source = start[:, None] + torch.arange(length, device=plan.device) + 0.5  # pixel centers
    support = scale.clamp(min=1.0)[:, None, None]
    weights = (1 - (source[:, None, :] - centers[:, :, None]).abs() / support).clamp(min=0)
    inside = (source >= lo[:, None]) & (source < hi[:, None])
    weights = weights * inside[:, None, :]
    weights = weights / weights.sum(-1, keepdim=True)
    if flip is not None:
        weights = torch.where(flip[:, None, None], weights.flip(1), weights)
    return weights


def _on_device(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """A small host array on ``device``: from pinned memory, so the copy does not block the host."""
    tensor = torch.from_numpy(np.ascontiguousarray(array))
    return tensor.pin_memory().to(device, non_blocking=True) if device.type == "cuda" else tensor


def resample(images: list[torch.Tensor], plan_y: np.ndarray, plan_x: np.ndarray, out: int,
             flip: np.ndarray | None = None) -> torch.Tensor:
    """Crop and resize each uint8 CHW image by its plans, as float (N, 3, out, out) values 0-255.

    The windows are copied into padded batches (chunked to :data:`PAD_BUDGET` elements) and resized
    by two batched matmuls each: fp16 on CUDA (exact for uint8 input, fp32 accumulation), fp32 on CPU.
    """
    device = images[0].device
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    result = torch.empty(len(images), 3, out, out, device=device, dtype=dtype)
    windows = np.stack([plan_y[:, 0], plan_y[:, 1], plan_x[:, 0], plan_x[:, 1]], 1).astype(np.int64)
    order = np.lexsort((windows[:, 3], windows[:, 1]))  # similar sizes together: less padding
    chunks, chunk, rows, cols = [], [], 0, 0
    for i in order:
        rows, cols = max(rows, windows[i, 1]), max(cols, windows[i, 3])
        if chunk and (len(chunk) + 1) * 3 * rows * cols > PAD_BUDGET:
            chunks.append(chunk)
            chunk, rows, cols = [], windows[i, 1], windows[i, 3]
        chunk.append(i)
    chunks.append(chunk)
    for chunk in chunks:
        rows, cols = int(windows[chunk, 1].max()), int(windows[chunk, 3].max())
        padded = torch.zeros(len(chunk), 3, rows, cols, dtype=torch.uint8, device=device)
        for slot, i in enumerate(chunk):  # one copy per image: the decoder hands back separate tensors
            y0, ny, x0, nx = windows[i]
            padded[slot, :, :ny, :nx] = images[i][:, y0:y0 + ny, x0:x0 + nx]
        index = _on_device(np.asarray(chunk, dtype=np.int64), device)
        py = _on_device(plan_y[chunk].astype(np.float32), device)
        px = _on_device(plan_x[chunk].astype(np.float32), device)
        fl = None if flip is None else _on_device(flip[chunk], device)
        wy = _axis_weights(py, out, rows, None).to(dtype)
        wx = _axis_weights(px, out, cols, fl).to(dtype)
        columns = (padded.to(dtype).view(len(chunk), 3 * rows, cols) @ wx.transpose(1, 2)).view(
            len(chunk), 3, rows, out)
        result.index_copy_(0, index, wy[:, None] @ columns)
    return result


@dataclass
class DeviceTransform:
    """Decode an :class:`EncodedBatch` on ``device`` and make the training or validation batch."""

    dataset: EncodedImageFolder
    device: torch.device
    image_size: int
    train: bool  # random resized crops and flips; else resize + center crop
    resize_to: int  # short side before the center crop (validation, or training without augmentation)
    min_crop_scale: float = 0.08
    hflip: bool = True
    seed: int = 0
    channels_last: bool = False

    def __call__(self, batch: EncodedBatch, epoch: int) -> Batch:
        """The normalised float32 images and the targets, on the device; unreadable files skipped."""
        images, keep = self.decode(batch)
        targets = batch.targets.to(self.device, non_blocking=True)
        skipped = batch.skipped + len(keep) - sum(keep)
        if not images:
            return Batch(torch.empty(0, device=self.device), targets[:0], skipped)
        if not all(keep):
            targets = targets[_on_device(np.flatnonzero(keep), self.device)]
        indices = [i for i, k in zip(batch.indices, keep, strict=True) if k]
        heights = np.array([im.shape[1] for im in images], dtype=np.float64)
        widths = np.array([im.shape[2] for im in images], dtype=np.float64)
        flip = None
        if self.train:
            u = uniforms(self.seed, epoch, indices, 2 * ATTEMPTS + 3)
            boxes = crop_boxes(heights, widths, u, self.min_crop_scale).astype(np.float64)
            plan_y = _crop_plan(boxes[:, 0], boxes[:, 2], self.image_size)
            plan_x = _crop_plan(boxes[:, 1], boxes[:, 3], self.image_size)
            flip = u[:, -1] < 0.5 if self.hflip else None
        else:  # Resize(resize_to): short side to resize_to, long side int(resize_to * long / short)
            short = np.minimum(heights, widths)
            new_h = np.where(heights <= widths, self.resize_to, np.floor(self.resize_to * heights / short))
            new_w = np.where(widths < heights, self.resize_to, np.floor(self.resize_to * widths / short))
            plan_y = _center_plan(heights, new_h, self.image_size)
            plan_x = _center_plan(widths, new_w, self.image_size)
        pixels = resample(images, plan_y, plan_x, self.image_size, flip)
        mean, std = np.array(IMAGENET_MEAN, np.float32), np.array(IMAGENET_STD, np.float32)
        shift, scale = (_on_device(v.reshape(1, 3, 1, 1), self.device) for v in (-mean / std, 1 / (255 * std)))
        out = torch.addcmul(shift, pixels.float(), scale)  # (x/255 - mean) / std
        if self.channels_last:
            out = out.contiguous(memory_format=torch.channels_last)
        return Batch(out, targets, skipped)

    def decode(self, batch: EncodedBatch) -> tuple[list[torch.Tensor], list[bool]]:
        """The decoded uint8 CHW images on the device (JPEGs in one batched call) and which survived."""
        from torchvision.io import ImageReadMode, decode_jpeg

        jpegs = [batch.flat[o:o + n] for o, n in filter(None, batch.spans)]
        with warnings.catch_warnings():  # torchvision 0.29 deprecates its image I/O for TorchCodec
            warnings.simplefilter("ignore", DeprecationWarning)
            try:
                decoded = decode_jpeg(jpegs, mode=ImageReadMode.RGB, device=self.device) if jpegs else []
            except RuntimeError:  # one bad file fails the whole call: find it
                decoded = [self._decode_one(data, index) for data, index in
                           zip(jpegs, [i for i, s in zip(batch.indices, batch.spans, strict=True) if s], strict=True)]
        decoded = iter(decoded)
        images = [next(decoded) if span else image.to(self.device, non_blocking=True)
                  for span, image in zip(batch.spans, batch.decoded, strict=True)]
        keep = [image is not None for image in images]
        return [image for image in images if image is not None], keep

    def _decode_one(self, data: torch.Tensor, index: int) -> torch.Tensor | None:
        """One JPEG on the device; if the device decoder refuses it (CMYK, say) PIL decides, as on the CPU path."""
        from torchvision.io import ImageReadMode, decode_jpeg

        try:
            return decode_jpeg(data, mode=ImageReadMode.RGB, device=self.device)
        except RuntimeError:
            pass
        path = self.dataset.samples[index][0]
        try:
            image = np.asarray(Image.open(io.BytesIO(data.numpy().tobytes())).convert("RGB"))
        except (OSError, ValueError, Image.DecompressionBombError) as exc:
            return self.dataset.unreadable(path, exc)
        return torch.from_numpy(image.transpose(2, 0, 1).copy()).to(self.device)


class DeviceBatches:
    """Iterate a loader of :class:`EncodedBatch` as device :class:`Batch` es.

    On CUDA the next batch is decoded and augmented on a side stream while the caller trains on
    this one (the decoder and the copies overlap the training step); on the CPU it runs in line.
    """

    def __init__(self, loader, transform: DeviceTransform, epoch: int = 0):
        self.loader, self.transform, self.epoch = loader, transform, epoch
        self.batch_size = loader.batch_size

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self):
        device = self.transform.device
        stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        ahead = None
        for encoded in self.loader:
            if stream is None:
                yield self.transform(encoded, self.epoch)
                continue
            with torch.cuda.stream(stream):
                batch, ready = self.transform(encoded, self.epoch), torch.cuda.Event()
                ready.record(stream)
            if ahead is not None:
                yield self._hand_over(*ahead)
            ahead = batch, ready
        if ahead is not None:
            yield self._hand_over(*ahead)

    @staticmethod
    def _hand_over(batch: Batch, ready) -> Batch:
        current = torch.cuda.current_stream()
        current.wait_event(ready)
        for tensor in (batch.images, batch.targets):
            tensor.record_stream(current)  # made on the side stream, used on this one
        return batch


@dataclass
class GpuLoaders(Loaders):
    """:class:`Loaders` whose batches come out decoded and augmented on the device."""

    train_transform: DeviceTransform | None = None

    def train_epoch(self, epoch: int, skip_batches: int = 0):
        """The device batches of ``epoch`` (reshuffled), starting after ``skip_batches`` batches."""
        return DeviceBatches(super().train_epoch(epoch, skip_batches), self.train_transform, epoch)


def build_gpu_loaders(cfg, rank: int, world_size: int, device: torch.device) -> GpuLoaders:
    """The GPU input pipeline's loaders for an ImageFolder tree, sharded for this rank."""
    root = check_imagefolder(cfg.data_dir)
    train_set = EncodedImageFolder(root / "train", bad_data=cfg.bad_data)
    val_set = EncodedImageFolder(root / "val", bad_data=cfg.bad_data)
    base = folder_loaders(cfg, root, train_set, val_set, collate_encoded, rank, world_size, device)
    common = dict(device=device, image_size=cfg.image_size, channels_last=cfg.channels_last)
    train = DeviceTransform(train_set, train=cfg.train_augment, resize_to=cfg.image_size,
                            min_crop_scale=cfg.min_crop_scale, hflip=cfg.hflip, seed=cfg.seed, **common)
    val = DeviceTransform(val_set, train=False, resize_to=math.ceil(cfg.image_size * 256 / 224), **common)
    values = {f.name: getattr(base, f.name) for f in fields(Loaders)}
    return GpuLoaders(**{**values, "val": DeviceBatches(base.val, val)}, train_transform=train)


def loaders_for(cfg, rank: int, world_size: int, device: torch.device) -> Loaders:
    """The loaders ``cfg.input_pipeline`` asks for (the synthetic data set has no input pipeline)."""
    if cfg.input_pipeline == "gpu" and cfg.dataset != "synthetic":
        return build_gpu_loaders(cfg, rank, world_size, device)
    return build_loaders(cfg, rank, world_size, device)
