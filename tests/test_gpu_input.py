"""The GPU input pipeline (``input_pipeline: gpu``) checked on CPU tensors against the CPU path.

torchvision decodes JPEGs on the CPU too, so the same code that runs on CUDA (batched decode, crops and
resizes by batched matmuls, flips, normalisation) runs here; nvJPEG's own decoding differs from libjpeg's
by a few levels at most, which only a GPU run can show.
"""

from __future__ import annotations

import json
import math
import os
import shutil

import numpy as np
import pytest
import torch
from PIL import Image
from scipy.stats import ks_2samp
from torchvision.transforms import RandomResizedCrop
from torchvision.transforms import functional as F

from tutorial_lib.bench.fake_imagenet import make_fake_imagenet
from tutorial_lib.engine.config import make_config
from tutorial_lib.engine.input import draws as D
from tutorial_lib.engine.input import gpu as G
from tutorial_lib.engine.input import resample as R
from tutorial_lib.engine.input.cpu import train_transform, val_transform
from tutorial_lib.engine.input.files import IMAGENET_MEAN, IMAGENET_STD, Normalizer, resize_size
from tutorial_lib.engine.input.folders import DataError
from tutorial_lib.engine.input.loaders import build_gpu_loaders
from tutorial_lib.engine.trainer import Trainer
from tutorial_lib.rundir.layout import STOP_FILE

CPU = torch.device("cpu")
NORMALIZE = Normalizer(CPU)
LEVEL = 1 / (255 * min(IMAGENET_STD))  # one 8-bit level, in normalised units (the largest channel's)
# Measured: the pipeline's pixels differ from PIL's by at most 1.0 level (PIL rounds to 8 bits after each pass).
PIXEL_TOLERANCE = 1.5 * LEVEL
BAD_TRAIN = ["train/n00000000/dangling.JPEG", "train/n00000001/truncated.JPEG", "train/n00000001/error_page.JPEG",
             "train/n00000000/bad_inside.JPEG"]
BAD_VAL = ["val/n00000001/truncated.JPEG"]


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """A small ImageNet-layout JPEG set (2 classes, 120x90 and 90x120 images: both orientations)."""
    root = make_fake_imagenet(tmp_path_factory.mktemp("gpu_input") / "fake", classes=2, per_class=12,
                              size=(120, 90), val_per_class=4, workers=2)
    for path in sorted((root / "train" / "n00000000").glob("*.JPEG"))[:4]:
        Image.open(path).transpose(Image.Transpose.ROTATE_90).save(path, "JPEG", quality=90)  # portrait ones
    return root


@pytest.fixture(scope="module")
def bad_tree(tree, tmp_path_factory):
    """``tree`` plus a truncated JPEG, an HTML page named .JPEG, a dangling link, a JPEG whose start and end
    markers are intact but whose inside is garbage (the batched decode fails), and a PNG named .JPEG."""
    root = tmp_path_factory.mktemp("gpu_input_bad") / "tree"
    shutil.copytree(tree, root)
    jpeg = (root / "train" / "n00000000" / "n00000000_0.JPEG").read_bytes()
    for name in ("train/n00000001/truncated.JPEG", "val/n00000001/truncated.JPEG"):
        (root / name).write_bytes(jpeg[: len(jpeg) // 2])
    (root / "train/n00000001/error_page.JPEG").write_text("<html><body>404 Not Found</body></html>\n")
    (root / "train/n00000000/bad_inside.JPEG").write_bytes(jpeg[:3] + b"\x00" * 200 + b"\xff\xd9")
    os.symlink(root / "gone" / "x.JPEG", root / "train/n00000000/dangling.JPEG")
    Image.open(root / "train/n00000000/n00000000_5.JPEG").save(root / "train/n00000000/png_inside.JPEG", "PNG")
    return root


def _cfg(data_dir, **overrides):
    values = dict(dataset="imagefolder", data_dir=str(data_dir), image_size=32, batch_size=8, device="cpu",
                  input_pipeline="gpu", workers=0, min_crop_scale=0.08, hflip=True)
    return make_config("smoke", **{**values, **overrides})


def _transform(folder, train=True, size=32, **kwargs) -> G.DeviceTransform:
    dataset = G.EncodedImageFolder(folder)
    resize_to = size if train else resize_size(size)
    return G.DeviceTransform(dataset, CPU, size, train=train, resize_to=resize_to, **kwargs)


def _batch(transform, indices, epoch=0):
    return transform(G.collate_encoded([transform.dataset[i] for i in indices]), epoch)


@pytest.mark.parametrize("channels_last", [False, True])
def test_train_batches_have_the_cpu_paths_shape_dtype_and_range(tree, channels_last):
    loaders = build_gpu_loaders(_cfg(tree, channels_last=channels_last), 0, 1, CPU)
    assert len(loaders.train) == 3 and loaders.train_images == 24 and loaders.num_classes == 2
    batches = list(loaders.train_epoch(0))
    assert len(batches) == 3
    for batch in batches:
        assert batch.images.shape == (8, 3, 32, 32) and batch.images.dtype == torch.float32
        assert batch.targets.dtype == torch.long and batch.skipped == 0
        assert batch.images.is_contiguous(memory_format=torch.channels_last) == channels_last
        for c in range(3):  # normalised 0..1 pixels: (x - mean) / std
            low, high = -IMAGENET_MEAN[c] / IMAGENET_STD[c], (1 - IMAGENET_MEAN[c]) / IMAGENET_STD[c]
            values = batch.images[:, c]
            assert values.min() >= low - 1e-4 and values.max() <= high + 1e-4
            assert values.max() - values.min() > 0.5 * (high - low)  # real image content, not a constant
    targets = torch.cat([b.targets for b in batches])
    assert sorted(targets.tolist()) != targets.tolist()  # shuffled
    assert not torch.equal(batches[0].images, list(loaders.train_epoch(1))[0].images)  # reshuffled per epoch


@pytest.mark.parametrize("min_scale", [0.08, 0.5])
def test_crop_scale_and_ratio_follow_random_resized_crops_distribution(min_scale):
    height, width, draws = 375, 500, 4000
    u = D.uniforms(seed=3, epoch=1, indices=np.arange(draws), count=D.DRAWS)
    ours = D.crop_boxes(np.full(draws, height), np.full(draws, width), u, min_scale).astype(float)
    torch.manual_seed(0)
    image = torch.empty(3, height, width)
    theirs = np.array([RandomResizedCrop.get_params(image, (min_scale, 1.0), D.RATIO) for _ in range(draws)], float)
    for boxes in (ours, theirs):
        top, left, h, w = boxes.T
        assert (top >= 0).all() and (left >= 0).all() and (top + h <= height).all() and (left + w <= width).all()
    area = lambda b: b[:, 2] * b[:, 3] / (height * width)  # noqa: E731
    log_ratio = lambda b: np.log(b[:, 3] / b[:, 2])  # noqa: E731
    assert area(ours).min() >= min_scale * 0.97 and area(ours).max() <= 1.0
    assert np.abs(log_ratio(ours)).max() <= math.log(4 / 3) + 0.02
    assert area(ours).min() < min_scale + 0.02 and area(ours).max() > 0.95  # the whole range is used
    place_y = lambda b: b[:, 0] / (height - b[:, 2] + 1)  # noqa: E731
    place_x = lambda b: b[:, 1] / (width - b[:, 3] + 1)  # noqa: E731
    for stat in (area, log_ratio, place_y, place_x):
        assert ks_2samp(stat(ours), stat(theirs)).pvalue > 1e-3


def test_flip_rate_is_one_half_and_hflip_false_never_flips(tree):
    u = D.uniforms(seed=0, epoch=0, indices=np.arange(20_000), count=D.DRAWS)
    assert abs((u[:, -1] < 0.5).mean() - 0.5) < 0.015
    assert 0 <= u.min() and u.max() < 1 and abs(u.mean() - 0.5) < 0.01
    flipping, plain = _transform(tree / "train"), _transform(tree / "train", hflip=False)
    indices = list(range(len(plain.dataset)))
    a, b = _batch(flipping, indices).images, _batch(plain, indices).images
    flipped = [bool(torch.allclose(x, y.flip(-1), atol=1e-4)) for x, y in zip(a, b, strict=True)]
    same = [bool(torch.allclose(x, y, atol=1e-4)) for x, y in zip(a, b, strict=True)]
    expected = D.uniforms(0, 0, indices, D.DRAWS)[:, -1] < 0.5
    assert flipped == expected.tolist() and same == (~expected).tolist() and 0 < expected.sum() < len(indices)


def test_crops_equal_pils_resized_crop_for_the_same_boxes(tree):
    transform = _transform(tree / "train")
    dataset = transform.dataset
    images, _ = transform.decode(G.collate_encoded([dataset[i] for i in range(len(dataset))]))
    heights = np.array([im.shape[1] for im in images], float)
    widths = np.array([im.shape[2] for im in images], float)
    u = D.uniforms(5, 0, range(len(images)), D.DRAWS)
    boxes = D.crop_boxes(heights, widths, u, 0.08)
    flips = u[:, -1] < 0.5
    plans = np.zeros((len(images), R.PLAN_COLUMNS), np.float32)
    plans[:, 0:6] = R._crop_plan(boxes[:, 0] * 1.0, boxes[:, 2] * 1.0, 32)
    plans[:, 6:12] = R._crop_plan(boxes[:, 1] * 1.0, boxes[:, 3] * 1.0, 32)
    plans[:, 12] = flips
    out = R.resample(images, torch.from_numpy(plans), R.windows(plans), 32)
    assert out.shape == (len(images), 3, 32, 32) and {im.shape[1] for im in images} == {90, 120}
    for k, (path, _) in enumerate(dataset.samples):
        top, left, h, w = (int(v) for v in boxes[k])
        reference = F.pil_to_tensor(F.resized_crop(Image.open(path).convert("RGB"), top, left, h, w, [32, 32],
                                                   antialias=True)).float()
        reference = reference.flip(-1) if flips[k] else reference
        assert (out[k] - reference).abs().max() <= 1.5, path  # 8-bit levels


@pytest.mark.parametrize("size", [32, 64])
def test_validation_pixels_equal_the_cpu_validation_transform(tree, size):
    transform = _transform(tree / "val", train=False, size=size)
    dataset = transform.dataset
    batch = _batch(transform, range(len(dataset)))
    reference = NORMALIZE(torch.stack([val_transform(size)(Image.open(p).convert("RGB")) for p, _ in dataset.samples]))
    assert batch.images.shape == reference.shape
    difference = (batch.images - reference).abs()
    assert difference.max() <= PIXEL_TOLERANCE and difference.mean() < 0.5 * LEVEL


def test_training_without_augmentation_equals_the_cpu_resize_and_center_crop(tree):
    cfg = _cfg(tree, train_augment=False)
    batch = next(iter(build_gpu_loaders(cfg, 0, 1, CPU).train_epoch(0)))
    dataset = G.EncodedImageFolder(tree / "train")
    order = list(torch.utils.data.DistributedSampler(dataset, 1, 0, shuffle=True, seed=cfg.seed, drop_last=True))
    plain = train_transform(32, augment=False)
    reference = NORMALIZE(torch.stack([plain(Image.open(dataset.samples[i][0]).convert("RGB")) for i in order[:8]]))
    assert (batch.images - reference).abs().max() <= PIXEL_TOLERANCE


def test_crops_depend_on_seed_epoch_and_index_only(tree):
    transform = _transform(tree / "train")
    together = _batch(transform, [0, 1, 2, 3]).images
    alone = _batch(transform, [2]).images  # another batch, another position: the same crop of image 2
    torch.testing.assert_close(alone[0], together[2])
    assert not torch.allclose(_batch(transform, [2], epoch=1).images[0], alone[0])
    other_seed = _transform(tree / "train", seed=1)
    assert not torch.allclose(_batch(other_seed, [2]).images[0], alone[0])


@pytest.mark.parametrize("workers", [0, 1])
def test_bad_files_are_skipped_counted_and_named(bad_tree, workers, capfd):
    loaders = build_gpu_loaders(_cfg(bad_tree, workers=workers, batch_size=29), 0, 1, CPU)
    assert loaders.train_images == 24 + len(BAD_TRAIN) + 1
    batch, = list(loaders.train_epoch(0))
    assert batch.skipped == len(BAD_TRAIN) and batch.images.shape[0] == 29 - len(BAD_TRAIN) == len(batch.targets)
    val = list(loaders.val)
    assert sum(b.skipped for b in val) == len(BAD_VAL) and sum(len(b.targets) for b in val) == 8
    err = capfd.readouterr().err
    for name in BAD_TRAIN + BAD_VAL:
        assert f"skipping unreadable image {bad_tree / name}" in err
    assert "png_inside" not in err


def test_a_png_named_jpeg_is_decoded_on_the_cpu_like_the_cpu_path(bad_tree):
    dataset = G.EncodedImageFolder(bad_tree / "train")
    index = next(i for i, (p, _) in enumerate(dataset.samples) if p.endswith("png_inside.JPEG"))
    _, payload, _, _ = dataset[index]
    assert isinstance(payload, torch.Tensor)  # decoded here by PIL, not sent to the JPEG decoder
    good = next(i for i, (p, _) in enumerate(dataset.samples) if p.endswith("_1.JPEG"))
    images, keep = _transform(bad_tree / "train").decode(G.collate_encoded([dataset[index], dataset[good]]))
    assert keep == [True, True]
    expected = torch.from_numpy(np.array(Image.open(dataset.samples[index][0]).convert("RGB"))).permute(2, 0, 1)
    assert torch.equal(images[0], expected)


def test_bad_data_error_names_the_file(bad_tree):
    loaders = build_gpu_loaders(_cfg(bad_tree, bad_data="error", batch_size=29), 0, 1, CPU)
    with pytest.raises(DataError, match="cannot read image .*(dangling|truncated|error_page|bad_inside).*Fix"):
        list(loaders.train_epoch(0))


def test_the_trainer_trains_and_resumes_exactly_in_the_middle_of_an_epoch(runs, monkeypatch):
    """A run stopped after step 4 of 6 and started again ends with the uninterrupted run's weights."""
    small = dict(input_pipeline="gpu", image_size=16, batch_size=16, epochs=2, max_steps_per_epoch=6, log_every=2,
                 hflip=True, min_crop_scale=0.08)
    straight = runs.in_process(runs.config("straight", **small))
    assert straight["status"] == "completed"
    epochs = runs.events(runs.run_dir("straight"), "epoch")
    val_images = json.loads((runs.run_dir("straight") / "config.json").read_text())["val_images"]
    assert [e["epoch"] for e in epochs] == [1, 2] and epochs[0]["val_images"] == val_images  # each image once
    assert epochs[1]["train_loss"] < epochs[0]["train_loss"] + 1.0 and math.isfinite(epochs[1]["train_loss"])

    run_dir, original_step, calls = runs.run_dir("midepoch"), Trainer.train_step, []

    def step_then_ask_to_stop(self, batch):
        calls.append(1)
        if len(calls) == 3:  # seen at the next agreement, after step 4 (log_every 2)
            (run_dir / STOP_FILE).write_text("")
        return original_step(self, batch)

    monkeypatch.setattr(Trainer, "train_step", step_then_ask_to_stop)
    assert runs.in_process(runs.config("midepoch", **small))["status"] == "stopped"
    monkeypatch.undo()
    stop, = runs.events(run_dir, "stop")
    assert (stop["epoch"], stop["step_in_epoch"]) == (0, 4)
    assert runs.in_process(runs.config("midepoch", **small))["status"] == "completed"
    resume, = runs.events(run_dir, "resume")
    assert (resume["epoch"], resume["step_in_epoch"]) == (0, 4)
    runs.assert_same_weights(runs.weights(runs.run_dir("straight")), runs.weights(run_dir), atol=1e-6)
