"""`python -m tutorial_lib.data prepare`: every form of ImageNet from the fake generator, prepared and trained from."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import Runs, subprocess_env
from tutorial_lib import REPO_ROOT
from tutorial_lib.bench.fake_forms import FORMS, make_fake_source
from tutorial_lib.data import PREPARE_COMMAND
from tutorial_lib.data.devkit import devkit_meta
from tutorial_lib.data.layouts import FULL_SET, PrepareError, Source, detect
from tutorial_lib.data.prepare import MARK, check_counts, prepare

SETTINGS = dict(classes=3, per_class=4, val_per_class=2)


def _snapshot(root: Path) -> dict:
    """Every path under ``root`` with its kind, size, mtime and content hash: any change shows."""
    state = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            info = path.lstat()
            digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
            state[str(path.relative_to(root))] = (info.st_mode, info.st_size, info.st_mtime_ns, digest)
    return state


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """Each form generated and prepared once (the kaggle form through the command line)."""
    base = tmp_path_factory.mktemp("forms")
    out = {}
    for form in FORMS:
        source, dest = base / f"source-{form}", base / f"dest-{form}"
        truth = make_fake_source(source, form, **SETTINGS)
        before = _snapshot(source)
        if form == "kaggle":
            result = subprocess.run([sys.executable, "-m", "tutorial_lib.data", "prepare", str(source), str(dest)],
                                    env=subprocess_env(), cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
            assert result.returncode == 0, result.stderr
            assert "12 training and 6 validation images of 3 classes linked" in result.stdout
            summary = None
        else:
            summary = prepare(source, dest, progress=False)
        out[form] = dict(source=source, dest=dest, truth=truth, summary=summary, before=before)
    return out


@pytest.mark.parametrize("form", FORMS)
def test_each_form_becomes_class_folders_with_the_right_images(prepared, form):
    case, reference = prepared[form], prepared["folders"]
    dest, truth = case["dest"], case["truth"]
    assert detect(case["source"]).form == form
    assert sorted(os.listdir(dest / "train")) == sorted(os.listdir(dest / "val")) == sorted(truth["train"])
    for wnid, names in truth["train"].items():
        assert sorted(os.listdir(dest / "train" / wnid)) == sorted(names)
    val = {name: wnid for wnid in os.listdir(dest / "val") for name in os.listdir(dest / "val" / wnid)}
    assert val == truth["val"]
    for name, wnid in truth["val"].items():  # the bytes too: each image landed in its own class
        assert (dest / "val" / wnid / name).read_bytes() == (reference["source"] / "val" / wnid / name).read_bytes()
    mark = json.loads((dest / MARK).read_text())
    assert mark["complete"] and mark["form"] == form and mark["totals"] == {"train": 12, "val": 6, "classes": 3}


@pytest.mark.parametrize("form", FORMS)
def test_prepare_never_changes_the_source(prepared, form):
    case = prepared[form]
    assert _snapshot(case["source"]) == case["before"]
    made = "extracted" if form == "archives" else "links"
    if case["summary"] is not None:
        assert case["summary"]["made"] == made
    links = [p for p in case["dest"].rglob("*") if p.is_symlink()]
    assert bool(links) == (made == "links")
    assert all(case["source"] in p.resolve().parents and not os.path.isabs(os.readlink(p)) for p in links)


@pytest.mark.parametrize("form", FORMS)
def test_training_runs_from_each_prepared_form(prepared, form, tmp_path):
    runs = Runs(tmp_path / "runs", prepared[form]["dest"])
    result = runs.in_process(runs.config(f"from-{form}", image_size=16, batch_size=4, epochs=1))
    assert result["status"] == "completed"
    config = json.loads((runs.run_dir(f"from-{form}") / "config.json").read_text())
    assert (config["train_images"], config["val_images"], config["num_classes"]) == (12, 6, 3)


def test_torchvision_reads_the_fake_devkit_as_we_do(prepared, tmp_path, monkeypatch):
    """torchvision's own devkit parser (its MD5 check of the real archive switched off) gets the same labels."""
    import torch
    from torchvision.datasets import imagenet

    devkit = prepared["archives"]["source"] / "ILSVRC2012_devkit_t12.tar.gz"
    (tmp_path / devkit.name).symlink_to(devkit)
    monkeypatch.setattr(imagenet, "_verify_archive", lambda *args: None)
    imagenet.parse_devkit_archive(str(tmp_path))
    wnid_to_classes, val_wnids = torch.load(tmp_path / imagenet.META_FILE, weights_only=True)
    ids, truth = devkit_meta(devkit)
    assert val_wnids == [ids[i] for i in truth]
    assert val_wnids == [w for _, w in sorted(prepared["archives"]["truth"]["val"].items())]
    assert wnid_to_classes["n01440764"] == ("tench", "Tinca tinca")
    assert [ids[i] for i in sorted(ids)] != sorted(ids.values())  # IDs not in wnid order, as in ImageNet


def test_an_interrupted_extraction_resumes_and_redoes_only_what_is_missing(prepared, tmp_path):
    source = prepared["archives"]["source"]
    dest = tmp_path / "dest"
    prepare(source, dest, progress=False)
    kept = dest / "train" / "n01443537"
    kept_mtime = {p.name: p.stat().st_mtime_ns for p in kept.iterdir()}
    gone = dest / "train" / "n01440764"
    for path in gone.iterdir():
        path.unlink()
    gone.rmdir()
    (dest / "train" / ".part-n01440764").mkdir()  # what a kill mid-class leaves
    lost_val = next((dest / "val" / "n01484850").iterdir())
    lost_val.unlink()
    state = json.loads((dest / MARK).read_text())
    (dest / MARK).write_text(json.dumps({**state, "complete": False}))
    summary = prepare(source, dest, progress=False)
    assert summary["train"] == 12 and summary["val"] == 6
    assert sorted(os.listdir(gone)) == sorted(prepared["archives"]["truth"]["train"]["n01440764"])
    assert lost_val.is_file() and not (dest / "train" / ".part-n01440764").exists()
    assert {p.name: p.stat().st_mtime_ns for p in kept.iterdir()} == kept_mtime


def _cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tutorial_lib.data", *map(str, args)], env=subprocess_env(),
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)


def test_a_destination_with_user_files_is_refused_and_left_alone(prepared, tmp_path):
    dest = tmp_path / "mine"
    dest.mkdir()
    (dest / "thesis.tex").write_text("precious")
    before = _snapshot(dest)
    result = _cli("prepare", prepared["kaggle"]["source"], dest)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: DEST:") and "Fix:" in result.stderr
    assert "Traceback" not in result.stderr and _snapshot(dest) == before
    with pytest.raises(PrepareError, match="prepared from"):  # started from another SOURCE
        prepare(prepared["flat_val"]["source"], prepared["kaggle"]["dest"], progress=False)
    with pytest.raises(PrepareError, match="overlaps SOURCE"):
        prepare(prepared["flat_val"]["source"], prepared["flat_val"]["source"] / "out", progress=False)


def test_sources_it_cannot_read_are_refused_naming_the_command(prepared, tmp_path):
    flat = prepared["flat_val"]["source"]
    lonely = tmp_path / "archives"
    lonely.mkdir()
    (lonely / "ILSVRC2012_img_train.tar").symlink_to(prepared["archives"]["source"] / "ILSVRC2012_img_train.tar")
    for bad, expected in ((lonely, "ILSVRC2012_img_val.tar, ILSVRC2012_devkit_t12.tar.gz"),
                          (tmp_path / "nothing", "not a folder"), (flat / "train", "holds no form")):
        with pytest.raises(PrepareError, match=expected) as error:
            detect(bad)
        assert PREPARE_COMMAND in str(error.value)
    no_labels = tmp_path / "flat"
    (no_labels / "train" / "n01440764").mkdir(parents=True)
    (no_labels / "val").mkdir()
    (no_labels / "val" / "ILSVRC2012_val_00000001.JPEG").write_bytes(b"x")
    with pytest.raises(PrepareError, match="--val-labels FILE"):
        detect(no_labels)
    (no_labels / "val.txt").write_text("ILSVRC2012_val_00000002.JPEG n01440764\n")
    with pytest.raises(PrepareError, match="no label: \\['ILSVRC2012_val_00000001'\\]"):
        prepare(no_labels, tmp_path / "out", progress=False)


def test_the_trainer_refusal_of_a_flat_val_names_the_prepare_command(prepared):
    from tutorial_lib.engine.input.folders import DataError, check_imagefolder

    with pytest.raises(DataError, match="has no class folders") as error:
        check_imagefolder(prepared["flat_val"]["source"])
    assert PREPARE_COMMAND in str(error.value)


def test_a_source_claiming_the_full_set_is_checked_against_imagenet_counts():
    source = Source("kaggle", Path("/data/imagenet"), Path("t"), Path("v"))
    per_class = {f"n{i:08d}": 1281 for i in range(1000)}
    full = {"train": {**per_class, "n00000000": 1281 + 167}, "val": {w: 50 for w in per_class}}
    assert check_counts(full, source) == FULL_SET
    short = {"train": per_class, "val": full["val"]}
    with pytest.raises(PrepareError, match="1,281,000 training and 50,000 validation images, not 1,281,167"):
        check_counts(short, source)
    assert check_counts(short, source, subset=True)["train"] == 1_281_000
    assert check_counts({"train": {"a": 3}, "val": {"a": 1}}, source) == {"train": 3, "val": 1, "classes": 1}
