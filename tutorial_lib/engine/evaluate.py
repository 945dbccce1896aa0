"""Validation: loss, top-1 and top-5 over all ranks, every image counted exactly once."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tutorial_lib.engine import distributed as dist_utils
from tutorial_lib.engine.step import to_device


def evaluate(model, loader, device, info, channels_last: bool, amp_context, on_batch=None) -> dict:
    """Validation loss, top-1 and top-5 over all ranks; every image counted exactly once.
    ``on_batch`` is called after each batch is loaded (the trainer's progress signal). Every rank scores
    with rank 0's BatchNorm statistics, so the figures are those of the model that rank 0 saves."""
    dist_utils.broadcast_buffers(model, info)
    model.eval()
    # loss sum, top-1 hits, top-5 hits, images, skipped images; kept on the device (no sync per batch)
    sums = torch.zeros(5, dtype=torch.float64, device=device)
    with torch.no_grad():
        for batch in loader:
            if on_batch is not None:
                on_batch()
            sums[4] += batch.skipped
            if batch.images.numel() == 0:
                continue
            images, targets = to_device(batch, device, channels_last)
            with amp_context():
                logits = model(images).float()
            hits = logits.topk(min(5, logits.shape[1]), dim=1).indices.eq(targets[:, None])
            sums[0] += F.cross_entropy(logits, targets, reduction="sum")
            sums[1] += hits[:, :1].sum()
            sums[2] += hits.sum()
            sums[3] += len(targets)
    loss, top1, top5, count, skipped = dist_utils.all_reduce_sum(sums.tolist(), info, device)
    model.train()
    images = int(count)
    count = max(count, 1)
    return {"val_loss": loss / count, "top1": 100 * top1 / count, "top5": 100 * top5 / count,
            "val_images": images, "val_skipped_images": int(skipped)}
