"""Every form of image file a real ImageNet holds, through both input pipelines (the GPU pipeline in its CPU
form): the same labels, the same skips named the same way, and pixels within a level of each other.

The forms: CMYK and YCCK JPEGs (ImageNet's training set holds about 22 CMYK ones; nvJPEG cannot decode them,
so the GPU pipeline's workers decode them with PIL), grayscale, progressive, EXIF-oriented (the orientation
tag is ignored by both: pixels as stored), a PNG named .JPEG, a zero-byte file, a truncated JPEG, and one
over PIL's pixel limit (refused from its header, before decoding).

How the YCCK file is made: PIL writes CMYK JPEGs with an Adobe APP14 marker whose colour transform is 0 (no
transform) and stores the channels inverted (Adobe's convention). A YCCK JPEG is the same container with
transform 2: the decoder converts the first three stored channels from YCbCr to RGB and then to inverted
CMY. So the test stores (Y, Cb, Cr) of (c, m, y) and the inverted K through PIL's CMYK writer and patches
the transform byte to 2; decoding it gives back the CMYK image (checked below).
"""

from __future__ import annotations

import io
import os
import shutil

import numpy as np
import pytest
import torch
from PIL import Image

from tutorial_lib.bench.fake_imagenet import make_fake_imagenet
from tutorial_lib.engine.config import make_config
from tutorial_lib.engine.input import gpu as G
from tutorial_lib.engine.input.cpu import CountingImageFolder
from tutorial_lib.engine.input.files import IMAGENET_STD
from tutorial_lib.engine.input.jpeg import marker_problem, read_header
from tutorial_lib.engine.input.loaders import build_cpu_loaders, build_gpu_loaders

CPU = torch.device("cpu")
# The GPU pipeline's device: the CPU here and in CI; on a GPU machine, TUTORIAL_TEST_DEVICE=cuda makes these
# tests compare nvJPEG's decodes with the CPU pipeline's (cluster_scripts/gpu_bench.sh forms)
DEVICE = torch.device(os.environ.get("TUTORIAL_TEST_DEVICE", "cpu"))
LEVEL = 1 / (255 * min(IMAGENET_STD))
PIXEL_LIMIT = 50_000  # Image.MAX_IMAGE_PIXELS in these tests: the 300x200 file is over it, 120x90 ones are not
NVJPEG_FORMS = {"exif_rotated.JPEG", "progressive.JPEG", "same_without_exif.JPEG"}  # with the plain ones
UNREADABLE = {"zero_byte.JPEG", "truncated.JPEG", "too_many_pixels.JPEG"}


def ycck_jpeg(cmyk: Image.Image) -> bytes:
    """A YCCK JPEG (Adobe transform 2) that decodes to ``cmyk``."""
    c, m, y, k = (np.asarray(band, dtype=np.uint8) for band in cmyk.split())
    ycc = np.asarray(Image.fromarray(np.stack([c, m, y], -1)).convert("YCbCr"))
    stored = np.concatenate([ycc, (255 - k)[..., None]], -1)
    buffer = io.BytesIO()
    Image.fromarray(255 - stored, "CMYK").save(buffer, "JPEG", quality=95)  # PIL stores CMYK inverted
    data = bytearray(buffer.getvalue())
    adobe = data.index(b"Adobe")
    assert data[adobe + 11] == 0  # PIL's transform: none
    data[adobe + 11] = 2
    return bytes(data)


@pytest.fixture(scope="module")
def forms_tree(tmp_path_factory):
    """train/ and val/ alike: per class three plain 120x90 JPEGs, then the forms (and one re-encoded plain)."""
    plain = make_fake_imagenet(tmp_path_factory.mktemp("forms") / "plain", classes=2, per_class=3, size=(120, 90),
                               val_per_class=3, workers=1)
    root = tmp_path_factory.mktemp("forms") / "tree"
    shutil.copytree(plain / "val", root / "val")
    source = Image.open(root / "val/n00000000/n00000000_0.JPEG").convert("RGB")
    a, b = root / "val/n00000000", root / "val/n00000001"
    source.convert("CMYK").save(a / "cmyk.JPEG", quality=95)
    (b / "ycck.JPEG").write_bytes(ycck_jpeg(source.convert("CMYK")))
    source.convert("L").save(a / "gray.JPEG", quality=95)
    source.save(b / "progressive.JPEG", quality=95, progressive=True)
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90 degrees clockwise to display"
    source.save(a / "exif_rotated.JPEG", quality=95, exif=exif)
    source.save(b / "same_without_exif.JPEG", quality=95)
    source.save(b / "png_inside.JPEG", "PNG")
    (a / "zero_byte.JPEG").write_bytes(b"")
    jpeg = (b / "progressive.JPEG").read_bytes()
    (b / "truncated.JPEG").write_bytes(jpeg[: len(jpeg) // 2])
    source.resize((300, 200)).save(a / "too_many_pixels.JPEG", quality=90)
    shutil.copytree(root / "val", root / "train")
    return root


@pytest.fixture
def pixel_limit(monkeypatch):
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", PIXEL_LIMIT)


def _cfg(root, pipeline, **overrides):
    values = dict(dataset="imagefolder", data_dir=str(root), image_size=32, batch_size=4, device="cpu",
                  input_pipeline=pipeline, workers=0)
    return make_config("smoke", **{**values, **overrides})


def _val_batch(root, pipeline, capfd):
    """The whole val/ split as one batch (in file order) and the lines naming skipped files."""
    build, device = (build_gpu_loaders, DEVICE) if pipeline == "gpu" else (build_cpu_loaders, CPU)
    loaders = build(_cfg(root, pipeline, batch_size=16, device=device.type), 0, 1, device)
    batch, = list(loaders.val)
    skipped = [line for line in capfd.readouterr().err.splitlines() if "skipping unreadable image" in line]
    return loaders.val.loader.dataset, batch, skipped


def test_the_forms_are_what_they_claim(forms_tree):
    header = lambda name: read_header((forms_tree / "val" / name).read_bytes())  # noqa: E731
    assert (header("n00000000/cmyk.JPEG").components, header("n00000000/cmyk.JPEG").adobe_transform) == (4, 0)
    assert (header("n00000001/ycck.JPEG").components, header("n00000001/ycck.JPEG").adobe_transform) == (4, 2)
    assert header("n00000000/gray.JPEG").components == 1 and header("n00000001/progressive.JPEG").sof == 0xC2
    assert header("n00000001/png_inside.JPEG") is None
    ycck = Image.open(forms_tree / "val/n00000001/ycck.JPEG")
    assert ycck.mode == "CMYK"  # decodes back to the CMYK image it was made from (up to JPEG's loss)
    cmyk = np.asarray(Image.open(forms_tree / "val/n00000000/cmyk.JPEG"), dtype=float)
    assert np.abs(np.asarray(ycck, dtype=float) - cmyk).mean() < 3
    rotated = Image.open(forms_tree / "val/n00000000/exif_rotated.JPEG")
    assert rotated.getexif()[0x0112] == 6 and rotated.size == (120, 90)


def test_both_pipelines_agree_on_every_form(forms_tree, pixel_limit, capfd):
    files, cpu_batch, cpu_skips = _val_batch(forms_tree, "cpu", capfd)
    _, gpu_batch, gpu_skips = _val_batch(forms_tree, "gpu", capfd)
    names = [path.rsplit("/", 1)[-1] for path, _ in files.samples]
    assert len(names) == 6 + 10 and cpu_batch.skipped == gpu_batch.skipped == len(UNREADABLE)
    kept = [i for i, name in enumerate(names) if name not in UNREADABLE]
    expected_targets = [files.samples[i][1] for i in kept]
    assert cpu_batch.targets.tolist() == gpu_batch.targets.tolist() == expected_targets
    assert sorted(cpu_skips) == sorted(gpu_skips) and len(cpu_skips) == len(UNREADABLE)  # word for word
    assert sorted(line.split(": ")[1].rsplit("/", 1)[-1] for line in cpu_skips) == sorted(UNREADABLE)
    bomb = f"Image size (60000 pixels) exceeds limit of {PIXEL_LIMIT} pixels"
    assert sum(bomb in line for line in cpu_skips) == 1
    difference = (cpu_batch.images - gpu_batch.images.cpu()).abs().amax(dim=(1, 2, 3))
    mean = (cpu_batch.images - gpu_batch.images.cpu()).abs().mean(dim=(1, 2, 3))
    print("difference in levels per file, largest and mean:",  # the edge-case table of a GPU run (pytest -s)
          {names[i]: (round(float(d) / LEVEL, 2), round(float(m) / LEVEL, 2)) for i, d, m in
           zip(kept, difference, mean, strict=True)})
    assert cpu_batch.images.shape == gpu_batch.images.shape == (len(kept), 3, 32, 32)
    # Decoded by the same libjpeg (the CPU here; on CUDA the files the device cannot take) they agree to a
    # level; nvJPEG upsamples chroma its own way: on an H200 (2026-11-26) up to 14.1 levels at a colour edge,
    # 2.2 on average (docs/one-gpu.md)
    by_nvjpeg = [DEVICE.type == "cuda" and (names[i].startswith("n0") or names[i] in NVJPEG_FORMS) for i in kept]
    for d, m, nvjpeg in zip(difference.tolist(), mean.tolist(), by_nvjpeg, strict=True):
        largest, average = (16, 3) if nvjpeg else (1.5, 1.5)
        assert d <= largest * LEVEL and m <= average * LEVEL, (difference, mean)


def test_the_exif_orientation_is_ignored_by_both(forms_tree, pixel_limit, capfd):
    for pipeline in ("cpu", "gpu"):
        files, batch, _ = _val_batch(forms_tree, pipeline, capfd)
        names = [path.rsplit("/", 1)[-1] for path, _ in files.samples if not path.endswith(tuple(UNREADABLE))]
        images = dict(zip(names, batch.images, strict=True))
        assert torch.equal(images["exif_rotated.JPEG"], images["same_without_exif.JPEG"]), pipeline  # as stored


def test_the_gpu_pipelines_workers_route_each_form(forms_tree, pixel_limit):
    dataset = G.EncodedImageFolder(forms_tree / "val")
    payloads = {path.rsplit("/", 1)[-1]: dataset[i] for i, (path, _) in enumerate(dataset.samples)}
    for name in ("cmyk.JPEG", "ycck.JPEG", "png_inside.JPEG"):  # the CPU decoder (PIL), in the worker
        assert isinstance(payloads[name][1], torch.Tensor) and payloads[name][2] == (90, 120), name
    for name in ("gray.JPEG", "progressive.JPEG", "exif_rotated.JPEG", "n00000000_1.JPEG"):  # the device
        assert isinstance(payloads[name][1], bytes) and payloads[name][2] == (90, 120), name
    assert all(payloads[name] is None for name in UNREADABLE)
    small = G.EncodedImageFolder(forms_tree / "val", decode_budget=3 * 120 * 90 - 1)
    index = next(i for i, (path, _) in enumerate(small.samples) if path.endswith("gray.JPEG"))
    assert isinstance(small[index][1], torch.Tensor)  # larger decoded than the budget on its own: the worker


def _recording_decoder(monkeypatch, refuse: bytes = b""):
    """Wrap the device decoder: record each call's decoded bytes and files; refuse any call holding ``refuse``."""
    calls, real = [], G.decode_jpeg

    def decode(data, **kwargs):
        blobs = [bytes(d.numpy()) for d in data]
        calls.append((sum(read_header(b).rgb_bytes for b in blobs), blobs))
        if refuse in blobs:
            raise RuntimeError("Failed to decode jpeg stream")  # what nvJPEG says of a file it cannot take
        return real(data, **kwargs)

    monkeypatch.setattr(G, "decode_jpeg", decode)
    return calls


def test_device_decodes_stay_within_the_budget(forms_tree, monkeypatch):
    calls = _recording_decoder(monkeypatch)
    budget = 3 * 120 * 90 * 3  # 3 images a call: 3+3+3+1 (the 300x200 one is over: the worker decodes it)
    dataset = G.EncodedImageFolder(forms_tree / "train", decode_budget=budget)
    jpegs = [i for i in range(len(dataset)) if isinstance((dataset[i] or (0, 0))[1], bytes)]
    transform = G.DeviceTransform(dataset, CPU, 32, train=False, resize_to=37)
    batch = transform(G.collate_encoded([dataset[i] for i in jpegs]), 0)
    assert len(batch.targets) == len(jpegs) == 10 and len(calls) == 4
    assert all(decoded <= budget for decoded, _ in calls)
    dataset.decode_budget = G.DECODE_BUDGET
    whole = transform(G.collate_encoded([dataset[i] for i in jpegs]), 0)
    assert torch.equal(batch.images, whole.images) and len(calls) == 5  # the default budget: one call


def test_a_file_the_device_refuses_is_decoded_again_alone(forms_tree, monkeypatch):
    dataset = G.EncodedImageFolder(forms_tree / "train")
    jpegs = [i for i in range(len(dataset)) if isinstance((dataset[i] or (0, 0))[1], bytes)][:8]
    refused = dataset[jpegs[5]][1]
    calls = _recording_decoder(monkeypatch, refuse=refused)
    transform = G.DeviceTransform(dataset, CPU, 32, train=False, resize_to=37)
    batch = transform(G.collate_encoded([dataset[i] for i in jpegs]), 0)
    assert batch.skipped == 0 and len(batch.targets) == 8  # PIL decoded the refused file
    # halved until it stands alone: 8 (refused), 4 + 4 (refused), 2 (refused) + 2, 1 + 1 (refused: PIL)
    assert [len(blobs) for _, blobs in calls] == [8, 4, 4, 2, 1, 1, 2]
    assert [refused in blobs for _, blobs in calls] == [True, False, True, True, False, True, False]
    monkeypatch.undo()
    plain = transform(G.collate_encoded([dataset[i] for i in jpegs]), 0)
    assert (plain.images - batch.images).abs().max() <= 1.5 * LEVEL


def test_a_damaged_jpeg_is_caught_in_the_worker_and_never_fails_a_device_call(forms_tree, tmp_path, monkeypatch):
    """A stray marker inside the compressed data (intact start and end markers) reached the device, failed the
    whole batched call, and the chunk was halved: 7 calls and 11 extra decodes of good files for one bad file.
    The worker's marker check sends it to the CPU decoder: one device call, each good file decoded once."""
    folder = tmp_path / "train" / "n00000000"
    folder.mkdir(parents=True)
    plain = sorted((forms_tree / "train" / "n00000000").glob("n0*.JPEG"))
    for k in range(7):
        shutil.copy(plain[k % len(plain)], folder / f"good_{k}.JPEG")
    data = bytearray(plain[0].read_bytes())
    middle = (data.index(b"\xff\xda") + len(data)) // 2
    data[middle:middle + 2] = b"\xff\x02"  # a reserved marker code where compressed data belongs
    damaged = bytes(data)
    (folder / "stray_marker.JPEG").write_bytes(damaged)
    restarts = io.BytesIO()
    Image.open(plain[0]).save(restarts, "JPEG", quality=90, restart_marker_blocks=2)
    assert marker_problem(restarts.getvalue()) is None  # restart markers inside the compressed data are fine
    assert marker_problem(damaged) == "unexpected marker 0x02 inside the compressed data"

    calls = _recording_decoder(monkeypatch, refuse=damaged)
    dataset = G.EncodedImageFolder(tmp_path / "train")
    transform = G.DeviceTransform(dataset, CPU, 32, train=False, resize_to=37)
    batch = transform(G.collate_encoded([dataset[i] for i in range(len(dataset))]), 0)
    assert [len(blobs) for _, blobs in calls] == [7] and damaged not in calls[0][1]
    cpu_set = CountingImageFolder(tmp_path / "train")  # the CPU pipeline's verdict on the damaged file
    damaged_read = cpu_set[[p for p, _ in cpu_set.samples].index(str(folder / "stray_marker.JPEG"))] is not None
    assert len(batch.targets) == 7 + damaged_read and batch.skipped == 1 - damaged_read
