"""Packed shards (issue 45): ``python -m tutorial_lib.data pack``, the trainer's shard reader, the checks before
training, staging of a pack, and a 2-rank run from shards that sees every image once per epoch."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
from conftest import write_image_tree

from tutorial_lib.data import PrepareError, shard_index
from tutorial_lib.data import pack as packing
from tutorial_lib.engine.config import ConfigError, make_config, validate
from tutorial_lib.engine.input import shards
from tutorial_lib.engine.input.folders import DataError
from tutorial_lib.engine.input.loaders import loaders_for

TRAIN = {"a": 7, "b": 6, "c": 7}  # 20 training images: 2 ranks x batch 2 x 5 steps
VAL = {"a": 2, "b": 1, "c": 2}


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("prepared") / "imagenet"
    write_image_tree(root, {"train": TRAIN, "val": VAL}, size=12, suffix=".JPEG")
    return root


@pytest.fixture(scope="module")
def packed(prepared, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("packed") / "shards"
    packing.pack(prepared, out, shard_mb=0.004, progress=False)  # ~4 KB: several shards of a few images
    return out


def _config(data_dir, **overrides):
    return make_config("smoke", dataset="imagefolder", data_format="shards", data_dir=str(data_dir), image_size=8,
                       batch_size=2, workers=0, **overrides)


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))}


def test_pack_writes_webdataset_shards_that_tar_and_webdataset_read(prepared, packed):
    import webdataset as wds

    index = json.loads((packed / "shards.json").read_text())
    train, val = index["splits"]["train"], index["splits"]["val"]
    assert len(train["shards"]) > 2 and train["images"] == sum(TRAIN.values()) and val["images"] == sum(VAL.values())
    assert train["classes"] == val["classes"] == sorted(TRAIN) and index["images_changed"] is None
    labels, keys = [], []
    for entry in train["shards"] + val["shards"]:
        path = packed / entry["name"]
        assert path.stat().st_size == entry["bytes"]
        assert hashlib.sha256(path.read_bytes()).hexdigest() == entry["sha256"]
        listed = subprocess.run(["tar", "-tf", str(path)], capture_output=True, text=True, check=True).stdout.split()
        assert [Path(n).suffix for n in listed] == [".cls", ".jpg"] * entry["samples"]  # GNU tar reads them
        found = list(wds.WebDataset(str(path), shardshuffle=False))  # and the webdataset library
        assert [int(s["cls"]) for s in found] == entry["labels"]
        labels += entry["labels"]
        keys += [s["__key__"] for s in found]
    n_train = sum(TRAIN.values())
    assert labels[n_train:] == [0, 0, 1, 2, 2]  # validation in the prepared order
    assert labels[:n_train] != sorted(labels[:n_train])  # training images shuffled at pack time
    assert sorted(labels[:n_train]) == [0] * 7 + [1] * 6 + [2] * 7
    assert len(set(keys)) == len(keys)
    assert shard_index.check(packed)["pack"] == index["pack"]


def test_pack_never_writes_into_prepared_and_refuses_in_one_line(prepared, tmp_path):
    before = _tree(prepared)
    with pytest.raises(PrepareError, match="^SHARDS: .* overlaps PREPARED"):
        packing.pack(prepared, prepared / "shards", progress=False)
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(PrepareError, match="^SHARDS: .* did not write"):
        packing.pack(prepared, foreign, progress=False)
    assert (foreign / "notes.txt").read_text() == "mine" and sorted(foreign.iterdir()) == [foreign / "notes.txt"]
    with pytest.raises(PrepareError, match="^--shard-mb: "):
        packing.pack(prepared, tmp_path / "s", shard_mb=0, progress=False)
    odd = tmp_path / "odd"
    write_image_tree(odd, {"train": {"a": 1, "b": 1}, "val": {"a": 1}}, size=4, suffix=".JPEG")
    with pytest.raises(PrepareError, match="^PREPARED: .*different class folders"):
        packing.pack(odd, tmp_path / "s", progress=False)
    assert _tree(prepared) == before and not (tmp_path / "s").exists()
    result = subprocess.run([sys.executable, "-m", "tutorial_lib.data", "pack", str(prepared), str(foreign)],
                            capture_output=True, text=True)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "SHARDS: " in result.stderr and "Traceback" not in result.stderr


def test_an_interrupted_pack_resumes_keeping_its_finished_shards(prepared, tmp_path, monkeypatch):
    out, real = tmp_path / "shards", packing._write_shard
    calls = []

    def fail_third(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(packing, "_write_shard", fail_third)
    with pytest.raises(KeyboardInterrupt):
        packing.pack(prepared, out, shard_mb=0.004, progress=False)
    first = {p.name: p.stat().st_mtime_ns for p in out.glob("*.tar")}
    assert len(first) == 2 and not (out / "shards.json").exists()
    monkeypatch.setattr(packing, "_write_shard", real)
    packing.pack(prepared, out, shard_mb=0.004, progress=False)
    assert all(out.joinpath(name).stat().st_mtime_ns == t for name, t in first.items())  # kept, not rewritten
    shard_index.check(out)
    assert shard_index.read_index(out)["splits"]["train"]["images"] == sum(TRAIN.values())


def test_max_side_re_encodes_and_the_index_says_so(tmp_path):
    from PIL import Image

    source = tmp_path / "big"
    write_image_tree(source, {"train": {"a": 3}, "val": {"a": 1}}, size=40, suffix=".JPEG")
    packing.pack(source, tmp_path / "shards", max_side=16, progress=False)
    index = shard_index.read_index(tmp_path / "shards")
    assert index["images_changed"]["reencoded"] == 4 and index["images_changed"]["max_side"] == 16
    data = shards.CountingShards(tmp_path / "shards", "train", index=index)
    assert max(Image.open(__import__("io").BytesIO(data.read(0))).size) == 16


def test_shard_order_gives_each_image_once_per_epoch_over_the_ranks():
    counts = [5, 3, 8, 4]  # 20 images
    for world in (1, 2, 4):
        orders = [shards.ShardOrder(counts, rank, world, seed=3, buffer=6) for rank in range(world)]
        seen = []
        for epoch in range(3):
            for order in orders:
                order.set_epoch(epoch)
            epoch_order = np.concatenate([order.order() for order in orders])
            assert sorted(epoch_order) == list(range(20)) and all(len(o) == 20 // world for o in orders)
            seen.append(epoch_order.tolist())
        assert seen[0] != seen[1] != seen[2]  # reshuffled every epoch
    odd = [shards.ShardOrder([7, 4], rank, 3, seed=0) for rank in range(3)]  # 11 over 3 ranks: 3 each, 2 left out
    taken = np.concatenate([o.order() for o in odd])
    assert [len(o) for o in odd] == [3, 3, 3] and len(set(taken.tolist())) == 9


def _read_positions(cfg, rank: int, world: int, epoch: int, monkeypatch, skip_batches: int = 0) -> list[int]:
    """The sample positions the trainer's loaders of ``rank`` read in ``epoch`` (what they open, not what is
    recorded)."""
    read = []
    original = shards.ShardFiles.read
    monkeypatch.setattr(shards.ShardFiles, "read", lambda self, i: read.append(i) or original(self, i))
    loaders = loaders_for(cfg, rank, world, __import__("torch").device("cpu"))
    if loaders.train.dataset.part.name == "train":
        batches = list(loaders.train_epoch(epoch, skip_batches))
        assert sum(len(b.targets) for b in batches) == len(read)
    monkeypatch.setattr(shards.ShardFiles, "read", original)
    return read


@pytest.mark.parametrize("pipeline", ["cpu", "gpu"])
def test_the_loaders_read_every_training_image_once_per_epoch_over_two_ranks(packed, pipeline, monkeypatch):
    cfg = _config(packed, input_pipeline=pipeline)
    epochs = []
    for epoch in range(2):
        ranks = [_read_positions(cfg, rank, 2, epoch, monkeypatch) for rank in range(2)]
        assert len(ranks[0]) == len(ranks[1]) == 10
        assert sorted(ranks[0] + ranks[1]) == list(range(sum(TRAIN.values())))
        epochs.append(ranks[0])
    assert epochs[0] != epochs[1]
    resumed = _read_positions(cfg, 1, 2, 1, monkeypatch, skip_batches=2)  # rank 1 resumed after 2 of 5 steps
    uninterrupted = _read_positions(cfg, 1, 2, 1, monkeypatch)
    assert resumed == uninterrupted[4:]


def test_validation_counts_each_image_once(packed):
    cfg = _config(packed)
    import torch

    per_rank = [sum(len(b.targets) for b in loaders_for(cfg, rank, 2, torch.device("cpu")).val) for rank in (0, 1)]
    assert sum(per_rank) == sum(VAL.values())


def _copy(packed: Path, to: Path) -> Path:
    import shutil

    return Path(shutil.copytree(packed, to))


def test_bad_packs_are_refused_before_training_in_one_line(packed, prepared, tmp_path):
    cases = {}
    truncated = _copy(packed, tmp_path / "truncated")
    with open(truncated / "train-000001.tar", "r+b") as handle:
        handle.truncate(1000)
    cases["truncated"] = (truncated, "train-000001.tar of 1,000 bytes where")
    missing = _copy(packed, tmp_path / "missing")
    (missing / "val-000000.tar").unlink()
    cases["missing"] = (missing, "lacks the shard val-000000.tar")
    other = tmp_path / "other"
    packing.pack(prepared, other, shard_mb=0.004, progress=False)  # the same images, another pack
    mixed = _copy(packed, tmp_path / "mixed")
    (mixed / "shards.json").write_bytes((other / "shards.json").read_bytes())
    cases["another pack"] = (mixed, "of another pack")
    classes = _copy(packed, tmp_path / "classes")
    index = json.loads((classes / "shards.json").read_text())
    index["splits"]["val"]["classes"] = ["a", "b", "x"]
    (classes / "shards.json").write_text(json.dumps(index))
    cases["classes"] = (classes, "different classes")
    cases["no index"] = (prepared, "has no shards.json")
    for name, (root, words) in cases.items():
        with pytest.raises(ConfigError) as caught:
            validate(_config(root))
        message = str(caught.value)
        assert message.startswith("data_dir: ") and words in message and "Fix: " in message, (name, message)
        assert "\n" not in message
    with pytest.raises(ConfigError, match="^data_format: "):
        validate(make_config("smoke", dataset="digits", data_format="shards"))


def test_damaged_samples_are_handled_like_unreadable_files(prepared, tmp_path, monkeypatch, capsys):
    import webdataset.writer

    real = webdataset.writer.TarWriter.write

    def damage(self, sample):
        position = int(sample["__key__"].split("_")[0])
        if position == 3:
            sample = {k: v for k, v in sample.items() if k != "cls"}  # a sample without its label
        if position == 5:
            sample = {**sample, "jpg": b"not a jpeg"}  # an image that cannot be decoded
        return real(self, sample)

    monkeypatch.setattr(webdataset.writer.TarWriter, "write", damage)
    packing.pack(prepared, tmp_path / "bad", progress=False)
    monkeypatch.setattr(webdataset.writer.TarWriter, "write", real)
    data = shards.CountingShards(tmp_path / "bad", "train")
    assert data[3] is None and data[5] is None and data[4] is not None
    err = capsys.readouterr().err
    assert "train-000000.tar[3]" in err and "has no label member" in err and "train-000000.tar[5]" in err
    strict = shards.CountingShards(tmp_path / "bad", "train", bad_data="error")
    with pytest.raises(DataError, match=r"cannot read image .*train-000000.tar\[3\].*--bad-data skip"):
        strict[3]


def test_staging_copies_a_pack_that_the_trainer_then_accepts(packed, tmp_path):
    from tutorial_lib.data import staging

    copy = staging.stage(packed, str(tmp_path), run="r", node="n")
    assert sorted(p.name for p in copy.path.glob("*.tar")) == sorted(p.name for p in packed.glob("*.tar"))
    assert shard_index.check(copy.path)["pack"] == shard_index.read_index(packed)["pack"]
    staging.remove(copy.path)
    assert not copy.path.exists()


def test_a_two_rank_run_from_shards_sees_every_image_once_per_epoch(packed, runs):
    """Two gloo ranks under torchrun, 2 epochs: each epoch's event counts the 20 training images once
    (``train_images``) and the 5 validation images once."""
    runs.torchrun(2, runs.flags("shards2", data_format="shards", data_dir=str(packed), image_size=8, batch_size=2,
                                epochs=2, log_every=5, checkpoint=False))
    epochs = runs.events(runs.run_dir("shards2"), "epoch")
    assert [e["train_images"] for e in epochs] == [20, 20]
    assert [e["val_images"] for e in epochs] == [5, 5] and [e["skipped_images"] for e in epochs] == [0, 0]
    assert [e["train_steps"] for e in epochs] == [5, 5]
    from tutorial_lib.engine.model_file import evaluate_run

    result = evaluate_run(runs.run_dir("shards2"), packed, batch_size=2, workers=0, device="cpu")
    assert result["val_images"] == 5  # `python -m tutorial_lib.evaluate` reads the pack's validation shards


def test_the_tar_members_hold_what_the_index_says(packed):
    index = shard_index.read_index(packed)
    entry = index["splits"]["train"]["shards"][0]
    raw = (packed / entry["name"]).read_bytes()
    for (offset, length), label in zip(entry["spans"], entry["labels"], strict=True):
        key, data, found = shard_index.sample_bytes(raw[offset:offset + length])
        assert found == label and data[:2] == b"\xff\xd8"
    with tarfile.open(packed / entry["name"]) as tar:
        assert tar.pax_headers[shard_index.PACK_HEADER] == index["pack"]
