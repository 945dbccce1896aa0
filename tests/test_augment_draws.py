"""The training crops and flips are a pure function of (seed, epoch, image index), in both pipelines.

Before, the CPU pipeline drew them from each DataLoader worker's RNG: persistent workers carried their
stream from one epoch into the next, so a run resumed at an epoch boundary with ``workers > 0`` (fresh
workers, freshly seeded) cropped its images differently from an uninterrupted run, and ``workers=0`` and
``workers=2`` cropped differently for the same seed.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from torchvision.transforms.v2 import functional as F

from tutorial_lib.engine.config import make_config
from tutorial_lib.engine.input import draws as D
from tutorial_lib.engine.input.files import decode_image
from tutorial_lib.engine.input.loaders import build_cpu_loaders

CPU = torch.device("cpu")
pytestmark = pytest.mark.usefixtures("single_thread")
BATCHES = 3  # of the jpeg_tree's 8 training batches per epoch: an epoch cut short, as max_steps_per_epoch does


def _cfg(tree, **fields):
    values = dict(dataset="imagefolder", data_dir=str(tree), image_size=8, batch_size=4, device="cpu", seed=3,
                  min_crop_scale=0.08, hflip=True, progress=False)
    return make_config("smoke", **{**values, **fields})


def _epoch(loaders, epoch: int) -> torch.Tensor:
    """The first :data:`BATCHES` training batches of ``epoch``, images concatenated."""
    return torch.cat([batch.images for batch in itertools.islice(loaders.train_epoch(epoch), BATCHES)])


def test_the_crops_do_not_depend_on_the_workers_nor_on_a_restart(jpeg_tree):
    alone = build_cpu_loaders(_cfg(jpeg_tree, workers=0), 0, 1, CPU)
    expected = [_epoch(alone, epoch) for epoch in range(3)]
    assert not torch.equal(expected[1], _epoch(build_cpu_loaders(_cfg(jpeg_tree, workers=0, seed=4), 0, 1, CPU), 1))
    persistent = build_cpu_loaders(_cfg(jpeg_tree, workers=2), 0, 1, CPU)  # the same workers for three epochs
    for epoch in range(3):
        torch.testing.assert_close(_epoch(persistent, epoch), expected[epoch], rtol=0, atol=0,
                                   msg=f"epoch {epoch}: workers=2 cropped otherwise than workers=0")
    restarted = build_cpu_loaders(_cfg(jpeg_tree, workers=2), 0, 1, CPU)  # a run resumed at epoch 3
    torch.testing.assert_close(_epoch(restarted, 2), expected[2], rtol=0, atol=0)


def test_an_images_crop_is_the_box_drawn_for_its_seed_epoch_and_index(jpeg_tree):
    dataset = build_cpu_loaders(_cfg(jpeg_tree), 0, 1, CPU).train.dataset
    image = decode_image(dataset.read(5))
    crops, flips = [], []
    for epoch in range(6):
        box, flip = D.crops_and_flips([16], [16], seed=3, epoch=epoch, indices=[5], min_scale=0.08)
        expected = F.resized_crop(image, *(int(v) for v in box[0]), [8, 8], antialias=True)
        crops.append(dataset.transform(image, epoch, 5))
        torch.testing.assert_close(crops[-1], F.horizontal_flip(expected) if flip[0] else expected, rtol=0, atol=0)
        flips.append(bool(flip[0]))
    assert len({crop.numpy().tobytes() for crop in crops}) == 6, "the crop did not change with the epoch"
    assert True in flips and False in flips
    dataset.set_epoch(2)
    torch.testing.assert_close(dataset[5][0], crops[2], rtol=0, atol=0)
