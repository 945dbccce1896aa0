"""Bad data and bad configuration: unreadable images are skipped and counted (or stop the run, naming the file),
and a bad setting is refused before anything runs.

The bad-data tree is a tiny ImageNet-layout folder made from the digits export, with one of each problem a
real data set has: a truncated JPEG (an interrupted copy), a text file named ``.JPEG`` (an HTML error page
saved by a downloader), a dangling symlink (an image on a storage that is gone: ``open`` fails with ENOENT;
chmod would not do, root reads anything), a PNG named ``.JPEG`` (readable: it must train normally), and a
class folder that is empty in train/.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess

import pytest
from PIL import Image

from tutorial_lib import jobs
from tutorial_lib.engine.config import ConfigError, make_config
from tutorial_lib.engine.input.cpu import CountingImageFolder
from tutorial_lib.rundir.layout import CONFIG_FILE, DONE_FILE, LOCK_FILE

TINY = dict(image_size=16, batch_size=8)
BAD_TRAIN = ["train/0/dangling.JPEG", "train/1/truncated.JPEG", "train/2/error_page.JPEG"]
BAD_VAL = ["val/1/truncated.JPEG", "val/2/error_page.JPEG"]


@pytest.fixture(scope="module")
def bad_tree(tmp_path_factory, digits_dir):
    """train/: 12 good JPEGs, a PNG named .JPEG, 3 unreadable files (16 files, 2 batches of 8), class 3 empty;
    val/: 8 good JPEGs and 2 unreadable ones."""
    root = tmp_path_factory.mktemp("bad") / "tree"
    for split, per_class in (("train", 4), ("val", 2)):
        for label in "0123":
            folder = root / split / label
            folder.mkdir(parents=True)
            if split == "train" and label == "3":
                continue  # an empty class folder: keeps its label, contributes no images
            for i, source in enumerate(sorted((digits_dir / split / label).glob("*.jpg"))[:per_class]):
                shutil.copy(source, folder / f"img{i}.JPEG")
    jpeg = (root / "train" / "0" / "img0.JPEG").read_bytes()
    for name in ("train/1/truncated.JPEG", "val/1/truncated.JPEG"):
        (root / name).write_bytes(jpeg[: len(jpeg) // 2])
    for name in ("train/2/error_page.JPEG", "val/2/error_page.JPEG"):
        (root / name).write_text("<html><body>404 Not Found</body></html>\n")
    os.symlink(root / "storage-that-is-gone" / "x.JPEG", root / "train" / "0" / "dangling.JPEG")
    Image.open(root / "train" / "0" / "img1.JPEG").save(root / "train" / "0" / "png_inside.JPEG", format="PNG")
    return root


def test_the_tree_really_holds_unreadable_files(bad_tree):
    dataset = CountingImageFolder(bad_tree / "train", bad_data="skip")
    assert len(dataset) == 16 and dataset.classes == ["0", "1", "2", "3"]
    unreadable = sorted(os.path.relpath(path, bad_tree) for i, (path, _) in enumerate(dataset.samples)
                        if dataset[i] is None)
    assert unreadable == sorted(BAD_TRAIN)  # the PNG named .JPEG is read by its content


def test_bad_images_are_skipped_counted_and_named(runs, bad_tree):
    """The default bad_data="skip": the run trains on the good images and reports exactly what it skipped."""
    result = runs.module(runs.flags("skip", data_dir=str(bad_tree), epochs=2, **TINY))
    assert result.returncode == 0, result.stderr
    run_dir = runs.run_dir("skip")
    epochs = runs.events(run_dir, "epoch")
    assert [e["epoch"] for e in epochs] == [1, 2]
    for epoch in epochs:  # every training image is seen once per epoch (16 = 2 full batches)
        assert epoch["skipped_images"] == len(BAD_TRAIN) and epoch["train_images"] == 16  # consumed: all of them
        assert epoch["val_skipped_images"] == len(BAD_VAL) and epoch["val_images"] == 8
        assert epoch["train_loss"] == epoch["train_loss"] and epoch["train_loss"] > 0  # finite: it trained
    start, = runs.events(run_dir, "start")
    assert start["steps_per_epoch"] == 2
    config = json.loads((run_dir / CONFIG_FILE).read_text())
    assert config["bad_data"] == "skip" and config["train_images"] == 16 and config["num_classes"] == 4
    for name in BAD_TRAIN + BAD_VAL:  # each unreadable file is named in the log
        assert f"skipping unreadable image {bad_tree / name}" in result.stderr
    assert "png_inside.JPEG" not in result.stderr
    assert (run_dir / DONE_FILE).is_file()


@pytest.mark.parametrize("workers", [0, 1])
def test_bad_data_error_stops_naming_the_file(runs, bad_tree, workers):
    name = f"strict-{workers}"
    result = runs.module(runs.flags(name, data_dir=str(bad_tree), epochs=1, bad_data="error", workers=workers,
                                    **TINY))
    assert result.returncode == 2, result.stderr
    error = result.stderr.strip().splitlines()[-1]
    assert error.startswith("error: cannot read image ") and "Fix" in error
    assert any(str(bad_tree / bad) in error for bad in BAD_TRAIN), error  # the file, by its full path
    assert "Traceback" not in result.stderr  # also when a DataLoader worker process raised it
    assert not runs.events(runs.run_dir(name), "epoch")
    assert not (runs.run_dir(name) / LOCK_FILE).exists()


def test_train_and_val_with_different_class_folders_are_refused(runs, bad_tree, tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(bad_tree, tree, symlinks=True)
    shutil.rmtree(tree / "val" / "1")  # labels of val/2 and val/3 would shift by one
    result = runs.main(runs.flags("mismatch", data_dir=str(tree), epochs=1, **TINY))
    assert result.returncode == 2
    assert "different class folders" in result.stderr and "only in train: ['1']" in result.stderr
    assert "Fix" in result.stderr and "Traceback" not in result.stderr


# ------------------------------------------------------------------------------------ bad configuration
BAD_SETTINGS = {  # what a notebook might do to a valid config -> the field the error must name
    "epochs=2.5": ({"epochs": 2.5}, "epochs"),  # would reach the job as "--epochs 2.5" and fail there
    "batch_size='64'": ({"batch_size": "64"}, "batch_size"),  # a str from a widget
    "hflip='no'": ({"hflip": "no"}, "hflip"),  # truthy in Python, false on the command line
    "batch_size=0": ({"batch_size": 0}, "batch_size"),
    "base_lr=-0.1": ({"base_lr": -0.1}, "base_lr"),
    "bad_data='ignore'": ({"bad_data": "ignore"}, "bad_data"),
    "name='../escape'": ({"name": "../escape"}, "name"),
    "name='a/b'": ({"name": "a/b"}, "name"),
}


@pytest.mark.parametrize("case", list(BAD_SETTINGS))
def test_bad_configuration_is_refused_before_anything_runs(tmp_path, digits_dir, backend, case):
    changes, field = BAD_SETTINGS[case]
    output_root = tmp_path / "runs"
    cfg = make_config("smoke", name=f"refused-{backend}", output_root=str(output_root), dataset="imagefolder",
                      data_dir=str(digits_dir), epochs=1)
    with pytest.raises(ConfigError) as error:
        jobs.submit(dataclasses.replace(cfg, **changes), backend=backend, verbose=False)
    message = str(error.value)
    assert message.startswith(f"{field}:") and "Fix" in message
    assert not output_root.exists() and not (tmp_path / "escape").exists()  # no run directory, nothing escaped
    if backend == "slurm":
        queued = subprocess.run(["squeue", "-h", "-o", "%j"], capture_output=True, text=True).stdout.split()
        assert f"refused-{backend}" not in queued and not any("escape" in name for name in queued)
