"""`prepare` checks everything it can before writing; every devkit form; one meaning of numeric labels; system
files (``._*``, ``.DS_Store``) ignored alike by prepare, the file index and training, and counted."""

from __future__ import annotations

import os
import shutil
import tarfile
from pathlib import Path

import pytest

from tutorial_lib.data import file_index
from tutorial_lib.data.layouts import PrepareError, detect
from tutorial_lib.data.prepare import prepare

DEVKIT = "ILSVRC2012_devkit_t12.tar.gz"
EXT4_INODE_TARGET = 59  # the longest symlink target ext4 stores in the inode itself (a "fast symlink")


@pytest.fixture
def sources(fake_sources):
    """The session's fake downloads (conftest.py)."""
    return fake_sources


def _copy(source: Path, tmp_path: Path, name: str = "copy") -> Path:
    copy = tmp_path / name
    shutil.copytree(source, copy, symlinks=True)
    return copy


def _val_by_class(dest: Path) -> dict[str, str]:
    return {name: wnid for wnid in os.listdir(dest / "val") for name in os.listdir(dest / "val" / wnid)}


def _extract_devkit(archive: Path, into: Path) -> Path:
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return into / "ILSVRC2012_devkit_t12"


def test_a_validation_set_that_does_not_match_its_labels_is_refused_before_any_extraction(sources, tmp_path):
    source = _copy(sources["archives"], tmp_path)
    devkit = _extract_devkit(source / DEVKIT, tmp_path / "kit")
    truth = devkit / "data" / "ILSVRC2012_validation_ground_truth.txt"
    truth.write_text("\n".join(truth.read_text().split()[:-1]) + "\n")  # one label short
    with pytest.raises(PrepareError, match="6 validation images and 5 labels .* do not match"):
        prepare(source, tmp_path / "dest", val_labels_file=devkit, progress=False)
    assert not (tmp_path / "dest").exists()


def test_too_little_free_space_is_refused_before_writing(sources, tmp_path, monkeypatch):
    monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10**6, 10**6 - 100, 100))
    with pytest.raises(PrepareError, match="extracting needs .* GB more") as error:
        prepare(sources["archives"], tmp_path / "dest", progress=False)
    assert "\n" not in str(error.value)
    assert not (tmp_path / "dest").exists()


def test_labels_naming_a_class_train_does_not_have_are_refused_before_writing(sources, tmp_path):
    source = _copy(sources["flat_val"], tmp_path)
    lines = (source / "val.txt").read_text().splitlines()
    (source / "val.txt").write_text("\n".join([lines[0].split()[0] + " n09999999", *lines[1:]]) + "\n")
    with pytest.raises(PrepareError, match="names classes that the training set does not have: \\['n09999999'\\]"):
        prepare(source, tmp_path / "dest", progress=False)
    assert not (tmp_path / "dest").exists()


@pytest.mark.parametrize("devkit_form", ["folder in SOURCE", "folder", "ground truth beside meta.mat"])
def test_every_devkit_form_gives_the_same_labels(sources, tmp_path, devkit_form):
    source = _copy(sources["archives"], tmp_path)
    archive = source / DEVKIT
    kit = _extract_devkit(archive, source if devkit_form == "folder in SOURCE" else tmp_path / "kit")
    archive.unlink()
    labels = {"folder in SOURCE": None, "folder": kit,
              "ground truth beside meta.mat": kit / "data" / "ILSVRC2012_validation_ground_truth.txt"}[devkit_form]
    assert detect(source, labels).form == "archives"
    prepare(source, tmp_path / "dest", val_labels_file=labels, progress=False)
    assert _val_by_class(tmp_path / "dest") == sources["archives-truth"]["val"]


def test_the_ground_truth_without_meta_mat_is_refused_naming_meta_mat(sources, tmp_path):
    kit = _extract_devkit(sources["archives"] / DEVKIT, tmp_path / "kit")
    (kit / "data" / "meta.mat").unlink()
    with pytest.raises(PrepareError, match="holds no meta.mat: the ground truth's numbers are ILSVRC2012_IDs"):
        prepare(sources["flat_val"], tmp_path / "dest", progress=False,
                val_labels_file=kit / "data" / "ILSVRC2012_validation_ground_truth.txt")


def test_numeric_labels_mean_the_0_based_sorted_class_index_and_impossible_numbers_are_refused(sources, tmp_path):
    source = _copy(sources["flat_val"], tmp_path)
    prepare(source, tmp_path / "ok", progress=False)  # val.txt holds 0-based indices into the sorted wnids
    assert _val_by_class(tmp_path / "ok") == sources["flat_val-truth"]["val"]
    lines = [line.split() for line in (source / "val.txt").read_text().splitlines()]
    for numbers, expected in ((lambda n: n + 1, "run 1..3: the devkit's 1-based ILSVRC2012_IDs are not class"),
                              (lambda n: -1 if n == 0 else n, "has '-1'; a number is the 0-based index")):
        (source / "val.txt").write_text("".join(f"{name} {numbers(int(label))}\n" for name, label in lines))
        with pytest.raises(PrepareError, match=expected):
            prepare(source, tmp_path / "dest", progress=False)
        assert not (tmp_path / "dest").exists()


def test_system_files_are_ignored_by_prepare_the_index_and_training_and_counted(sources, tmp_path):
    from tutorial_lib.engine.input.cpu import CountingImageFolder

    source = _copy(sources["kaggle"], tmp_path)
    base = source / "ILSVRC" / "Data" / "CLS-LOC"
    (base / "val" / "._ILSVRC2012_val_00000001.JPEG").write_bytes(b"\x00\x05\x16\x07 AppleDouble")
    (base / "val" / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1")
    (base / "train" / "n01440764" / "._n01440764_1.JPEG").write_bytes(b"\x00\x05\x16\x07 AppleDouble")
    (base / "train" / "n01440764" / "Thumbs.db").write_bytes(b"thumbs")
    (base / "train" / "__MACOSX").mkdir()
    summary = prepare(source, tmp_path / "dest", progress=False)
    assert (summary["train"], summary["val"], summary["classes"], summary["skipped"]) == (12, 6, 3, 5)
    train = tmp_path / "dest" / "train"
    walked = CountingImageFolder(train)
    assert len(walked) == 12 and "__MACOSX" not in walked.classes
    assert not any(Path(p).name.startswith("._") for p, _ in walked.samples)
    listed = file_index.scan(train)
    assert listed["classes"] == walked.classes and sum(map(len, listed["files"])) == 12


def test_the_extraction_benchmark_gets_the_same_files_from_prepare_and_gnu_tar(tmp_path):
    from tutorial_lib.bench.extract import measure_extract
    from tutorial_lib.bench.scale import SIZES, split_counts

    records = measure_extract(classes=2, per_class=3, val_per_class=1, rounds=2, size=(20, 15), work_dir=tmp_path,
                              quiet_s=0)
    assert [(r["side"], r["round"]) for r in records] == [("gnu_tar", 0), ("prepare", 0), ("copy", 0),
                                                          ("copy", 1), ("prepare", 1), ("gnu_tar", 1)]
    by_side = {r["side"]: r for r in records}
    # prepare writes its mark and its lock file beside the same images
    assert by_side["prepare"]["files"] == by_side["gnu_tar"]["files"] + 2 == 2 * 3 + 2 * 1 + 2
    assert by_side["copy"]["bytes"] == by_side["copy"]["archive_bytes"] > by_side["gnu_tar"]["bytes"]
    assert all(r["disk_wait_s"] >= 0 and r["image_size"] == [20, 15] for r in records)
    assert all(r["seconds_to_disk"] > 0 and "GNU tar" in r["tar"] for r in records)
    assert split_counts(SIZES["full"]) == (1_281_167, 50_000)


def test_the_scale_tree_and_its_archives_hold_imagenet_names_and_prepare_takes_them(tmp_path):
    from PIL import Image

    from tutorial_lib.bench.scale import build_base, make_form, split_counts, wnids
    from tutorial_lib.data.prepare import prepare

    base = tmp_path / "base"
    state = build_base(base, 2_600)
    train, val = split_counts(2_600)
    files = sorted(p.relative_to(base).as_posix() for p in base.rglob("*.JPEG"))
    assert len(files) == train + val == 2_600 and len(state["val"]) == val == 1_000
    assert f"train/{wnids()[0]}/{wnids()[0]}_1.JPEG" in files and "val/ILSVRC2012_val_00001000.JPEG" in files
    assert Image.open(base / files[0]).size == (2, 2)  # a real JPEG, not an empty file
    summary = prepare(make_form(base, state, "archives", tmp_path / "archives"), tmp_path / "dest", progress=False,
                      subset=True)
    assert (summary["made"], summary["train"], summary["val"]) == ("extracted", train, val)
    name, wnid = next(iter(state["val"].items()))
    assert (tmp_path / "dest" / "val" / wnid / name).read_bytes() == (base / "val" / name).read_bytes()


def test_the_scale_benchmark_names_an_unknown_step_and_the_fix(tmp_path):
    from tutorial_lib.bench.scale import measure_scale

    with pytest.raises(ValueError, match=r"steps: first_step not known\. Fix: pick from prepare, tar, scan, job, "
                                         r"stage"):
        measure_scale("10k", tmp_path, steps=("prepare", "first_step"))
    assert not any(tmp_path.iterdir())  # refused before any tree is built


def test_the_scale_benchmark_times_gnu_tar_on_the_same_archives_beside_prepare(tmp_path, monkeypatch):
    """The ``tar`` step: GNU tar extracts the archives prepare extracts, in pairs of alternating order, each into
    a folder of its own (nothing deleted between timed runs), and leaves nothing behind. Its smallest size holds
    2,000 files here, not 10,000: the same 1,000 classes, a fifth of the work (100-270 s of make test before)."""
    from tutorial_lib.bench import scale

    monkeypatch.setitem(scale.SIZES, "10k", 2_000)
    records = scale.measure_scale("10k", tmp_path, forms=("archives",), steps=("tar", "prepare"), rounds=2,
                                  quiet_s=0)
    timed = [(r["step"], r["round"]) for r in records if r["step"] in ("tar", "prepare")]
    assert timed == [("tar", 0), ("prepare", 0), ("prepare", 1), ("tar", 1)]
    for record in records:
        if record["step"] in ("tar", "prepare"):
            assert record["files"] == 2_000 and record["seconds"] > 0 and record["disk_wait_s"] >= 0
    assert all(r["train_images"] + r["val_images"] == 2_000 for r in records if r["step"] == "prepare")
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(("tar-", "dest-"))]


def test_extracting_archives_writes_dests_mark_a_few_times_not_once_per_class(tmp_path, monkeypatch):
    from tutorial_lib.bench.scale import build_base, make_form
    from tutorial_lib.data import prepare as prepare_module

    state = build_base(tmp_path / "base", 2_000)
    source = make_form(tmp_path / "base", state, "archives", tmp_path / "archives")
    writes = []
    real = prepare_module._write_state
    monkeypatch.setattr(prepare_module, "_write_state", lambda dest, state: writes.append(1) or real(dest, state))
    summary = prepare(source, tmp_path / "dest", progress=False, subset=True)
    assert summary["classes"] == 1_000 and summary["skipped"] == 0
    assert len(writes) <= 3  # at the start and the end (each rewrite of the mark cost ~7 ms on ext4, x 1,000)


@pytest.mark.parametrize("form", ["kaggle", "flat_val"])
def test_every_link_prepare_makes_is_short_enough_to_live_in_its_inode(sources, tmp_path, form):
    from tutorial_lib.data.links import HUBS, INLINE_TARGET

    source = _copy(sources[form], tmp_path / "downloads", "imagenet-2012-from-the-organisers-website")
    summary = prepare(source, tmp_path / "dest", progress=False)
    links = [p for p in (tmp_path / "dest").rglob("*") if p.is_symlink() and p.name not in HUBS.values()]
    assert len(links) == 3 + summary["val"]  # one per class folder and validation image (+ one per split)
    # ext4 keeps a target of up to 59 bytes in the inode (its 60-byte i_block); checked in bytes on every file
    # system, so that a longer link fails here also where tmp is a tmpfs (which stores every target alike)
    assert INLINE_TARGET == EXT4_INODE_TARGET
    assert max(len(os.fsencode(os.readlink(p))) for p in links) <= EXT4_INODE_TARGET
    fits, spills = tmp_path / "fits", tmp_path / "spills"
    fits.symlink_to("x" * EXT4_INODE_TARGET)
    spills.symlink_to("x" * (EXT4_INODE_TARGET + 1))
    if spills.lstat().st_blocks:  # this disk gives a longer target a block (ext4): the rule measured here too
        assert fits.lstat().st_blocks == 0 and sum(p.lstat().st_blocks for p in links) == 0
    assert all(p.exists() for p in links)


def test_staging_a_prepared_dest_copies_each_image_once(sources, tmp_path):
    from tutorial_lib.data import staging

    dest = tmp_path / "dest"
    summary = prepare(_copy(sources["kaggle"], tmp_path), dest, progress=False)
    images = [rel for rel, _ in staging.listing(dest) if rel.endswith(".JPEG")]
    assert len(images) == len(set(images)) == summary["train"] + summary["val"]
    assert all(rel.split("/")[0] in ("train", "val") for rel in images)


def test_the_scale_benchmark_times_a_multi_rank_job_to_its_first_step(tmp_path):
    """The ``job`` step: torchrun's ranks on a prepared DEST, launch to first step, every image seen, no rank
    left running after it."""
    import psutil

    from tutorial_lib.bench.scale import build_base, make_form
    from tutorial_lib.bench.scale_job import measure_first_step
    from tutorial_lib.data.prepare import prepare

    state = build_base(tmp_path / "base", 2_600)
    prepare(make_form(tmp_path / "base", state, "folders", tmp_path / "folders"), tmp_path / "dest", progress=False,
            subset=True)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    record = measure_first_step(tmp_path / "dest", tmp_path / "runs", ranks=2, timeout=600)
    assert 0 < record["to_start_s"] <= record["seconds"]
    assert (record["ranks"], record["job_train_images"], record["job_val_images"]) == (2, 1_600, 1_000)
    left = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
    assert not psutil.wait_procs(left, timeout=30)[1], "ranks still running after the measurement"
