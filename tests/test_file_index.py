"""One scan per job: the file index is ImageFolder's own list, rank 0 alone reads the folders, one open per image."""

from __future__ import annotations

import json
import os

import pytest
from torchvision.datasets import ImageFolder

from tutorial_lib.bench.scan import make_tree, measure_scan
from tutorial_lib.data import file_index
from tutorial_lib.engine.input.cpu import CountingImageFolder
from tutorial_lib.engine.input.files import open_regular_file


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "data"
    for split in ("train", "val"):
        for wnid in ("n01440764", "n01443537", "n01484850"):
            (root / split / wnid).mkdir(parents=True)
        (root / split / "n01440764" / "b.JPEG").write_bytes(b"1")
        (root / split / "n01440764" / "a.jpeg").write_bytes(b"2")
        (root / split / "n01440764" / "notes.txt").write_text("not an image")
        (root / split / "n01443537" / "deeper").mkdir()
        (root / split / "n01443537" / "deeper" / "c.png").write_bytes(b"3")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "d.JPEG").write_bytes(b"4")
    (root / "train" / "n01484850" / "linked").symlink_to(tmp_path / "elsewhere")  # followed, as ImageFolder does
    yield root
    file_index.use(None)


def test_the_index_gives_every_rank_imagefolders_own_list_without_reading_folders(tree, tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    file_index.build(tree, run_dir)
    file_index.use(run_dir)
    reads = []
    for name in ("scandir", "listdir", "walk"):
        original = getattr(os, name)
        monkeypatch.setattr(os, name, lambda *a, _o=original, _n=name, **k: reads.append(_n) or _o(*a, **k))
    indexed = {split: CountingImageFolder(tree / split) for split in ("train", "val")}
    assert reads == []
    monkeypatch.undo()
    for split, dataset in indexed.items():
        plain = ImageFolder(str(tree / split), allow_empty=True)
        assert dataset.samples == plain.samples and dataset.classes == plain.classes
    assert any(path.endswith("linked/d.JPEG") for path, _ in indexed["train"].samples)
    assert json.loads((run_dir / file_index.INDEX_FILE).read_text())  # in the run directory, not the data
    assert sorted(os.listdir(tree)) == ["train", "val"]
    file_index.use(None)
    assert file_index.samples(tree / "train", indexed["train"].class_to_idx) is None


def test_an_index_of_other_classes_is_not_used(tree, tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    file_index.build(tree, run_dir)
    file_index.use(run_dir)
    assert file_index.samples(tree / "train", {"n01440764": 0}) is None


def test_one_scan_per_job_not_per_rank(tmp_path):
    root = make_tree(tmp_path / "tree", classes=6, train_per_class=4, val_per_class=2)
    before, after = measure_scan(root, ranks=4, repeats=1)
    assert before["files"] == after["files"] == 36
    assert before["images_per_rank"] == after["images_per_rank"] == 36
    one_walk = after["dir_reads_per_rank"][0]
    assert one_walk >= 2 * (6 + 1) and after["dir_reads_per_rank"][1:] == [0, 0, 0]
    assert before["dir_reads_per_rank"] == [one_walk] * 4 and before["dir_reads_per_job"] == 4 * one_walk


def test_reading_an_image_opens_it_once_and_never_stats_the_path(tmp_path, monkeypatch):
    image = tmp_path / "a.JPEG"
    image.write_bytes(b"jpeg bytes")
    calls = []
    for name in ("stat", "lstat"):
        original = getattr(os, name)
        monkeypatch.setattr(os, name, lambda *a, _o=original, _n=name, **k: calls.append(_n) or _o(*a, **k))
    with open_regular_file(image) as handle:
        assert handle.read() == b"jpeg bytes"
    assert calls == []
    fifo = tmp_path / "pipe.JPEG"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="not a regular file"):
        open_regular_file(fifo)  # still refused, without waiting for a writer


def test_the_index_goes_where_the_user_placed_it(runs, jpeg_tree, tmp_path, capsys, single_thread):
    """index_dir: the job's index is written there (not in the run directory) and read from there; a foreign
    file of that name is refused, not overwritten; a folder inside the data is refused before anything runs."""
    from tutorial_lib.engine.config import ConfigError, validate
    from tutorial_lib.engine.trainer import main

    cache = tmp_path / "cache"
    settings = dict(data_dir=str(jpeg_tree), image_size=16, epochs=1, batch_size=8, max_steps_per_epoch=2,
                    index_dir=str(cache))
    runs.in_process(runs.config("placed", **settings))
    index = cache / "placed.file_index.json"
    assert json.loads(index.read_text())[str(jpeg_tree / "train")]["classes"] == ["a", "b", "c"]
    assert not (runs.run_dir("placed") / "file_index.json").exists()
    (cache / "other.file_index.json").write_text("my notes")
    assert main(runs.flags("other", **settings)) == 2
    assert "index_dir: " in capsys.readouterr().err and (cache / "other.file_index.json").read_text() == "my notes"
    with pytest.raises(ConfigError, match="^index_dir: .* inside data_dir"):
        validate(runs.config("inside", **{**settings, "index_dir": str(jpeg_tree / "cache")}), check_paths=False)


def test_links_back_up_the_tree_are_no_classes_and_the_scan_ends(tmp_path):
    """A link in train/ to the data folder (``up -> ..``), to train/ itself, a link to itself, and inside a class a
    link to a folder above it: before, ``up`` became a class holding every image again and the walk never ended."""
    split = tmp_path / "data" / "train"
    for name in ("a", "b"):
        (split / name).mkdir(parents=True)
        (split / name / f"{name}.jpg").write_bytes(b"x")
    (split / "up").symlink_to("..")
    (split / "self").symlink_to(".")
    (split / "loop").symlink_to("loop")
    (split / "a" / "back").symlink_to("../..")
    classes, skipped = file_index.class_folders(split, warn=False)
    assert classes == ["a", "b"] and sorted(skipped) == ["self", "up"]
    listed = file_index.scan(split, warn=False)
    assert listed["classes"] == ["a", "b"] and listed["files"][1] == ["b/b.jpg"]
    assert "a/a.jpg" in listed["files"][0] and len(listed["files"][0]) == len(set(listed["files"][0]))
