"""The GPU input pipeline (``input_pipeline: gpu``): CPU workers read file bytes and JPEG headers; the
training device decodes the JPEGs in batches (nvJPEG on CUDA) and crops, resizes, flips and
normalises them in batched form (:mod:`.resample`). On the CPU the same code runs with torchvision's
CPU decoder (tests, CI).

Per file, from its header, in the worker (:mod:`.jpeg`): over PIL's pixel limit: skipped and named
as the CPU pipeline does; a form nvJPEG cannot decode (CMYK/YCCK, lossless, 12-bit), not a JPEG (a
PNG named .JPEG), a damaged one (no end-of-image marker, or a marker structure
:func:`.jpeg.marker_problem` objects to: a stray marker inside the compressed data, no tables), or
larger decoded than the device decode budget on its own: decoded here exactly as the CPU pipeline
decodes it (:func:`.files.decode_image`); the rest: decoded on the device, in chunks whose decoded
bytes stay within ``decode_budget``.

A device call that still fails: torchvision's batched ``decode_jpeg`` raises for the whole call and
returns no image, so which file failed is unknown and the good files of that call must be decoded
again: "only the failed images are decoded again" holds only for the failures seen in the worker
above (they never reach the device). The rest, damage inside the compressed data that leaves the markers
intact, is rare; for it the chunk is halved until the failing files stand alone: with k failing files
among n, at most 2k*ceil(log2 n) more calls, and a good file is decoded at most ceil(log2 n) more times
(one failing file in 8: 6 more calls, 11 more decodes of good files; decoding each file alone after a
failure would take n more calls, each with its own synchronisation). The failing files go to the CPU
decoder (skipped and named if it refuses them too).

Per batch on the host: the plans (crop boxes, flips) are written into the front of the batch's one
pinned buffer, behind them the pixels the workers decoded, and the two go to the device in one copy.

What it shares with the CPU pipeline (:mod:`.files`): the file list, the unreadable-file rules, the
validation resize, the normalisation, the samplers and the ``Batch`` interface; the transforms are
the same in distribution (training: RandomResizedCrop's draws, flips) and in pixels (validation).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np
import torch
from torchvision.io import ImageReadMode, decode_jpeg

from tutorial_lib.engine.input import resample as R
from tutorial_lib.engine.input.files import (
    UNREADABLE,
    Batch,
    ImageFiles,
    Normalizer,
    check_pixel_limit,
    decode_image,
)
from tutorial_lib.engine.input.jpeg import is_complete_jpeg, marker_problem, read_header

DECODE_BUDGET = 2**29  # bytes of decoded images per device decode call (>= any image under PIL's pixel limit)
_COLUMNS = R.PLAN_COLUMNS + 2  # plan, then the target and the position of the image after sorting


class EncodedImageFolder(ImageFiles):
    """ImageFolder whose samples are ``(index, payload, (height, width), target)``: the file's bytes if
    the device will decode it, else the uint8 CHW image decoded here as the CPU pipeline does. Unreadable: None."""

    def __init__(self, root, transform=None, bad_data: str = "skip", decode_budget: int = DECODE_BUDGET):
        super().__init__(root, transform, bad_data)
        self.decode_budget = decode_budget

    def __getitem__(self, index: int):
        path, target = self.samples[index]
        try:
            data = self.read(index)
            header = read_header(data) if is_complete_jpeg(data) else None
            if header is not None:
                check_pixel_limit(header.width, header.height)
                if (header.device_decodable and header.rgb_bytes <= self.decode_budget
                        and marker_problem(data) is None):
                    return index, data, (header.height, header.width), target
            image = decode_image(data)
        except UNREADABLE as exc:
            return self.unreadable(path, exc)
        return index, image, tuple(image.shape[1:]), target


@dataclass
class EncodedBatch:
    """A batch as the workers deliver it, in one flat uint8 buffer: room for the plans (``table_bytes``),
    the CHW pixels of the images decoded in the workers, then the JPEG files' bytes."""

    indices: list[int]
    flat: torch.Tensor
    sizes: np.ndarray  # (N, 2) heights, widths
    spans: list  # per image: ("jpeg" or "pixels", offset, length) into ``flat``
    targets: np.ndarray
    table_bytes: int
    copy_bytes: int  # the table and the decoded pixels: what goes to the device
    skipped: int

    def pin_memory(self) -> EncodedBatch:
        """Page-locked, so the copy to the device is asynchronous (DataLoader's pinning thread calls this)."""
        self.flat = self.flat.pin_memory()
        return self


def collate_encoded(samples: list) -> EncodedBatch:
    """Gather ``EncodedImageFolder`` samples into one buffer, dropping and counting the ``None`` of unreadable files."""
    good = [s for s in samples if s is not None]
    table = len(good) * _COLUMNS * 4
    pixels = [(i, p.numpy()) for i, (_, p, _, _) in enumerate(good) if not isinstance(p, bytes)]
    pixel_bytes = sum(p.size for _, p in pixels)
    total = table + pixel_bytes + sum(len(p) for _, p, _, _ in good if isinstance(p, bytes))
    flat = torch.empty(total, dtype=torch.uint8)
    view, spans, offset = flat.numpy(), [None] * len(good), table
    for i, payload in pixels:
        view[offset:offset + payload.size].reshape(payload.shape)[:] = payload
        spans[i], offset = ("pixels", offset, payload.size), offset + payload.size
    for i, (_, payload, _, _) in enumerate(good):
        if isinstance(payload, bytes):
            view[offset:offset + len(payload)] = np.frombuffer(payload, dtype=np.uint8)
            spans[i], offset = ("jpeg", offset, len(payload)), offset + len(payload)
    return EncodedBatch([s[0] for s in good], flat, np.array([s[2] for s in good], dtype=np.int64).reshape(-1, 2),
                        spans, np.array([s[3] for s in good], dtype=np.int64), table, table + pixel_bytes,
                        len(samples) - len(good))


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

    def __post_init__(self):
        self.normalize = Normalizer(self.device, self.channels_last)

    def __call__(self, batch: EncodedBatch, epoch: int) -> Batch:
        """The normalised float32 images and the targets, on the device; unreadable files skipped."""
        n = len(batch.indices)
        if n == 0:
            return Batch(torch.empty(0, device=self.device), torch.empty(0, dtype=torch.long, device=self.device),
                         batch.skipped)
        heights, widths = batch.sizes[:, 0].astype(np.float64), batch.sizes[:, 1].astype(np.float64)
        plans = R.batch_plans(heights, widths, self.image_size, train=self.train, resize_to=self.resize_to,
                              indices=batch.indices, seed=self.seed, epoch=epoch, min_scale=self.min_crop_scale,
                              hflip=self.hflip)
        window = R.windows(plans)
        order = np.lexsort((window[:, 3], window[:, 1]))  # similar sizes together: less padding
        table = batch.flat[:batch.table_bytes].numpy().view(np.float32).reshape(_COLUMNS, n)
        table[:R.PLAN_COLUMNS] = plans[order].T
        table[R.PLAN_COLUMNS] = batch.targets  # exact in float32 below 2**24 classes
        table[R.PLAN_COLUMNS + 1, order] = np.arange(n)
        staged = batch.flat[:batch.copy_bytes].to(self.device, non_blocking=True)  # the batch's one copy
        columns = staged[:batch.table_bytes].view(torch.float32).view(_COLUMNS, n)
        images, keep = self.decode(batch, staged)
        pixels = R.resample([images[i] for i in order], columns[:R.PLAN_COLUMNS].T, window[order], self.image_size)
        position, targets = columns[R.PLAN_COLUMNS + 1].long(), columns[R.PLAN_COLUMNS].long()
        if not all(keep):  # rare: a file neither the device nor the CPU could decode
            kept = torch.from_numpy(np.flatnonzero(keep)).to(self.device)
            position, targets = position[kept], targets[kept]
        return Batch(self.normalize(pixels[position]), targets, batch.skipped + keep.count(False))

    def decode(self, batch: EncodedBatch, staged: torch.Tensor | None = None) -> tuple[list[torch.Tensor], list[bool]]:
        """Every image of the batch as uint8 CHW on the device, and whether it could be read (an unreadable
        one is a zero image of its size, to be dropped). ``staged``: the batch's buffer already on the device."""
        if staged is None:
            staged = batch.flat[:batch.copy_bytes].to(self.device, non_blocking=True)
        images, keep = [None] * len(batch.indices), [True] * len(batch.indices)
        jpegs = []
        for i, (kind, offset, length) in enumerate(batch.spans):
            if kind == "pixels":
                images[i] = staged[offset:offset + length].view(3, *batch.sizes[i])
            else:
                jpegs.append(i)
        start, used = 0, 0
        budget = self.dataset.decode_budget  # the workers sent no file larger decoded than this alone
        for k, i in enumerate(jpegs):  # chunks of at most the budget's decoded bytes
            size = 3 * int(batch.sizes[i].prod())
            if k > start and used + size > budget:
                self._decode_chunk(batch, jpegs[start:k], images, keep)
                start, used = k, 0
            used += size
        if jpegs:
            self._decode_chunk(batch, jpegs[start:], images, keep)
        return images, keep

    def _decode_chunk(self, batch: EncodedBatch, chunk: list[int], images: list, keep: list) -> None:
        """Decode ``chunk`` in one device call; if the device refuses it, halve it until the failing files
        stand alone, and give those to the CPU decoder."""
        data = [batch.flat[offset:offset + length] for _, offset, length in (batch.spans[i] for i in chunk)]
        try:
            for i, image in zip(chunk, decode_jpeg(data, mode=ImageReadMode.RGB, device=self.device), strict=True):
                images[i] = image
            return
        except RuntimeError:
            pass
        if len(chunk) > 1:
            half = len(chunk) // 2
            self._decode_chunk(batch, chunk[:half], images, keep)
            self._decode_chunk(batch, chunk[half:], images, keep)
            return
        i = chunk[0]
        path = self.dataset.samples[batch.indices[i]][0]
        try:
            pixels = decode_image(data[0].numpy().tobytes())
        except UNREADABLE as exc:
            self.dataset.unreadable(path, exc)
            images[i], keep[i] = torch.zeros(3, *batch.sizes[i], dtype=torch.uint8, device=self.device), False
            return
        images[i] = pixels.to(self.device)


class DeviceBatches:
    """Iterate a loader of :class:`EncodedBatch` as device :class:`Batch` es.

    On CUDA up to ``prefetch`` batches are decoded and augmented ahead on a side stream while the
    caller trains on this one (the decoder and the copies overlap the training step); on the CPU it
    runs in line.
    """

    def __init__(self, loader, transform: DeviceTransform, epoch: int = 0, prefetch: int = 2):
        self.loader, self.transform, self.epoch, self.prefetch = loader, transform, epoch, max(1, prefetch)
        self.batch_size = loader.batch_size

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self):
        return self._batches(iter(self.loader))  # the DataLoader's iterator now (see cpu.NormalizedBatches)

    def _batches(self, encoded_batches):
        device = self.transform.device
        if device.type != "cuda":
            for encoded in encoded_batches:
                yield self.transform(encoded, self.epoch)
            return
        side, main = torch.cuda.Stream(device), torch.cuda.current_stream(device)
        ahead: deque = deque()
        for encoded in encoded_batches:
            torch.cuda.set_stream(side)
            try:
                batch = self.transform(encoded, self.epoch)
                ready = side.record_event()
            finally:
                torch.cuda.set_stream(main)
            ahead.append((batch, ready))
            if len(ahead) > self.prefetch:
                yield self._hand_over(*ahead.popleft(), main)
        while ahead:
            yield self._hand_over(*ahead.popleft(), main)

    @staticmethod
    def _hand_over(batch: Batch, ready, stream) -> Batch:
        stream.wait_event(ready)
        for tensor in (batch.images, batch.targets):
            tensor.record_stream(stream)  # made on the side stream, used on this one
        return batch
