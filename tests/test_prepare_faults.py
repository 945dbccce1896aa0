"""`prepare` on careless and hostile input: refused in one line naming what to fix, before writing, never
writing into SOURCE, never replacing a file it did not write; an interrupted run resumes."""

from __future__ import annotations

import fcntl
import io
import json
import os
import shutil
import tarfile
from pathlib import Path

import pytest

from tests.test_prepare_data import _snapshot
from tutorial_lib.data import __main__ as data_main
from tutorial_lib.data import extract
from tutorial_lib.data.layouts import PrepareError
from tutorial_lib.data.prepare import LOCK, MARK, prepare


@pytest.fixture
def sources(fake_sources):
    """The session's fake downloads (conftest.py)."""
    return fake_sources


def _copy(source: Path, tmp_path: Path) -> Path:
    copy = tmp_path / f"copy-{source.name}"
    shutil.copytree(source, copy, symlinks=True)
    return copy


def _one_line(error) -> str:
    text = str(error.value)
    assert "\n" not in text and "Fix:" in text
    return text


def test_overlap_is_decided_on_resolved_paths(sources, tmp_path):
    source = sources["flat_val"]
    before = _snapshot(source)
    into = tmp_path / "link"
    into.symlink_to(source)  # `link` points into SOURCE: link/out is inside SOURCE
    with pytest.raises(PrepareError, match="overlaps SOURCE") as error:
        prepare(source, into / "out", progress=False)
    _one_line(error)
    with pytest.raises(PrepareError, match="overlaps SOURCE"):  # SOURCE given as a link to it
        prepare(into, source / "out", progress=False)
    assert _snapshot(source) == before


def test_a_label_file_naming_one_image_twice_is_refused_naming_both_lines(sources, tmp_path):
    source = _copy(sources["flat_val"], tmp_path)
    lines = (source / "val.txt").read_text().splitlines()
    first = lines[0].split()[0]
    (source / "val.txt").write_text("\n".join(lines + [f"{first} 2"]) + "\n")
    with pytest.raises(PrepareError, match=f"names image {Path(first).stem} twice, on lines 1 .* and 7") as error:
        prepare(source, tmp_path / "dest", progress=False)
    _one_line(error)
    assert not (tmp_path / "dest").exists()
    kaggle = _copy(sources["kaggle"], tmp_path)
    csv = kaggle / "LOC_val_solution.csv"
    rows = csv.read_text().splitlines()
    csv.write_text("\n".join(rows + [rows[1].replace(rows[1].split(",")[1].split()[0], "n01443537")]) + "\n")
    with pytest.raises(PrepareError, match="twice, on lines 2 "):
        prepare(kaggle, tmp_path / "dest2", progress=False)


def _inner_tar(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return out.getvalue()


def _file(name: str, data: bytes) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def _replace_class_tar(source: Path, wnid: str, data: bytes) -> None:
    """Rewrite SOURCE's training archive with ``<wnid>.tar`` replaced by ``data``."""
    train = source / "ILSVRC2012_img_train.tar"
    with tarfile.open(train) as old:
        members = [(m, old.extractfile(m).read()) for m in old.getmembers()]
    train.unlink()
    with tarfile.open(train, "w") as new:
        for member, content in members:
            content = data if member.name == f"{wnid}.tar" else content
            member.size = len(content)
            new.addfile(member, io.BytesIO(content))


@pytest.mark.parametrize("kind", ["symlink", "hardlink", "duplicate", "corrupt"])
def test_a_bad_class_tar_is_refused_in_one_line_and_leaves_no_part_folder(sources, tmp_path, kind):
    source = _copy(sources["archives"], tmp_path)
    wnid = "n01443537"
    image = _file(f"{wnid}_1.JPEG", b"\xff\xd8 an image")
    if kind == "symlink" or kind == "hardlink":
        link = tarfile.TarInfo(f"{wnid}_2.JPEG")
        link.type, link.linkname = (tarfile.SYMTYPE, "/etc/passwd") if kind == "symlink" else (tarfile.LNKTYPE,
                                                                                               image[0].name)
        data = _inner_tar([image, (link, None)])
        expected = f"{wnid}_2.JPEG'.*which is a {'symlink' if kind == 'symlink' else 'hard link'}"
    elif kind == "duplicate":
        data = _inner_tar([image, _file(image[0].name, b"\xff\xd8 trunc")])
        expected = f"{wnid}.tar holds two members named '{wnid}_1.JPEG' \\(members 1 and 2\\)"
    else:
        data = _inner_tar([_file(f"{wnid}_1.JPEG", b"x" * 5000)])[:1500]
        expected = f"{wnid}.tar is corrupt or truncated"
    _replace_class_tar(source, wnid, data)
    dest = tmp_path / "dest"
    with pytest.raises(PrepareError, match=expected) as error:
        prepare(source, dest, progress=False)
    _one_line(error)
    assert not [p for p in (dest / "train").iterdir() if p.name.startswith(".part-")]
    assert not (dest / "train" / wnid).exists()


def test_a_validation_archive_with_two_members_of_one_name_is_refused_before_writing(sources, tmp_path):
    source = _copy(sources["archives"], tmp_path)
    val = source / "ILSVRC2012_img_val.tar"
    with tarfile.open(val) as old:
        members = [(m, old.extractfile(m).read()) for m in old.getmembers()]
    with tarfile.open(val, "w") as new:
        for member, content in members + members[:1]:
            new.addfile(member, io.BytesIO(content))
    with pytest.raises(PrepareError, match=f"two members named '{members[0][0].name}' \\(members 1 and 7\\)"):
        prepare(source, tmp_path / "dest", progress=False)
    assert not (tmp_path / "dest").exists()  # refused before the training archive was touched


def test_a_second_run_into_one_dest_is_refused_while_the_first_runs(sources, tmp_path):
    dest = tmp_path / "dest"
    dest.mkdir()
    fd = os.open(dest / LOCK, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # what a running prepare holds
        with pytest.raises(PrepareError, match="another .* is writing into") as error:
            prepare(sources["kaggle"], dest, progress=False)
        _one_line(error)
        assert sorted(os.listdir(dest)) == [LOCK]
    finally:
        os.close(fd)
    assert prepare(sources["kaggle"], dest, progress=False)["val"] == 6


def test_a_rerun_never_replaces_a_users_file_and_counts_what_is_there(sources, tmp_path):
    dest = tmp_path / "dest"
    prepare(sources["kaggle"], dest, progress=False)
    folder = next(p for p in (dest / "val").iterdir() if any(p.iterdir()))
    mine = next(folder.iterdir())
    mine.unlink()
    mine.write_bytes(b"the user's own image")
    (folder / "extra.JPEG").write_bytes(b"another of the user's")
    summary = prepare(sources["kaggle"], dest, progress=False)
    assert not mine.is_symlink() and mine.read_bytes() == b"the user's own image"
    assert summary["val"] == 7 and json.loads((dest / MARK).read_text())["totals"]["val"] == 7


def test_unreadable_source_parts_are_named_in_one_line(sources, tmp_path, monkeypatch):
    """Root reads everything, so the PermissionError a user gets is raised by a stand-in for the folder read."""
    wnid = "n01443537"
    scandir = os.scandir

    def refusing(path="."):
        if str(path).endswith(wnid):
            raise PermissionError(13, "Permission denied", str(path))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", refusing)
    with pytest.raises(PrepareError, match=f"cannot read or write .*{wnid}: Permission denied") as error:
        prepare(sources["kaggle"], tmp_path / "dest", progress=False)
    _one_line(error)
    monkeypatch.undo()
    opener = tarfile.open

    def refusing_tar(name=None, *args, **kwargs):
        if name is not None and str(name).endswith("ILSVRC2012_img_val.tar"):
            raise PermissionError(13, "Permission denied", str(name))
        return opener(name, *args, **kwargs)

    monkeypatch.setattr(tarfile, "open", refusing_tar)
    with pytest.raises(PrepareError, match="SOURCE: cannot read or write .*ILSVRC2012_img_val.tar: Permission"):
        prepare(sources["archives"], tmp_path / "dest2", progress=False)
    assert not (tmp_path / "dest2").exists()


def test_ctrl_c_ends_in_one_line_and_the_rerun_resumes(sources, tmp_path, monkeypatch, capsys):
    dest = tmp_path / "dest"
    calls = []
    original = extract.extract_class

    def interrupted(*args):
        calls.append(args)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return original(*args)

    monkeypatch.setattr("tutorial_lib.data.prepare.extract_class", interrupted)
    status = data_main.main(["prepare", str(sources["archives"]), str(dest), "--no-progress"])
    err = capsys.readouterr().err
    assert status == 130 and err.count("\n") == 1 and "run the same command again" in err, err
    assert not [p for p in (dest / "train").iterdir() if p.name.startswith(".part-")]
    monkeypatch.undo()
    assert data_main.main(["prepare", str(sources["archives"]), str(dest), "--no-progress"]) == 0
    assert sum(len(os.listdir(p)) for p in (dest / "train").iterdir()) == 12


def test_a_torn_mark_and_a_binary_label_file_are_refused_in_one_line(sources, tmp_path):
    dest = tmp_path / "dest"
    prepare(sources["kaggle"], dest, progress=False)
    text = (dest / MARK).read_text()
    (dest / MARK).write_text(text[: len(text) // 2])
    with pytest.raises(PrepareError, match=f"{MARK} is torn") as error:
        prepare(sources["kaggle"], dest, progress=False)
    _one_line(error)
    binary = tmp_path / "labels.bin"
    binary.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(PrepareError, match="--val-labels: .*labels.bin is not a text file"):
        prepare(sources["flat_val"], tmp_path / "dest2", val_labels_file=binary, progress=False)


def test_evaluate_on_an_unprepared_flat_val_says_so_in_one_line(sources, tmp_path, capsys):
    from types import SimpleNamespace

    from tutorial_lib.engine.model_file import main, save_model
    from tutorial_lib.engine.models import build_model

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    cfg = SimpleNamespace(arch="resnet18", norm="batch", image_size=16)
    classes = sorted(os.listdir(sources["flat_val"] / "train"))
    save_model(run_dir / "model.pt", build_model("resnet18", len(classes)), cfg, len(classes), classes)
    assert main([str(run_dir), "--data-dir", str(sources["flat_val"]), "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "val/ folder with class folders" in err and "prepare SOURCE DEST" in err, err


def test_a_moved_source_is_named_and_preparing_again_points_the_links_there(sources, tmp_path):
    from tutorial_lib.engine.input.folders import DataError, check_imagefolder

    source = _copy(sources["kaggle"], tmp_path)
    dest = tmp_path / "dest"
    prepare(source, dest, progress=False)
    before = {p: p.lstat().st_ino for p in dest.rglob("*") if p.is_symlink()}
    moved = tmp_path / "elsewhere" / "imagenet"
    moved.parent.mkdir()
    source.rename(moved)
    with pytest.raises(DataError, match=f"was prepared from {source}, which is gone.*prepare NEW_SOURCE {dest}"):
        check_imagefolder(dest)
    summary = prepare(moved, dest, progress=False)
    assert (summary["train"], summary["val"]) == (12, 6) and check_imagefolder(dest) == dest
    links = [p for p in dest.rglob("*") if p.is_symlink()]
    assert links and all(moved in p.resolve().parents for p in links)
    rewritten = sorted(p.name for p in links if p.lstat().st_ino != before[p])
    assert rewritten == [".source_train", ".source_val"]  # the two split links; the class and image links stay
    together = tmp_path / "moved-together"  # SOURCE and DEST moved as one: the relative links still hold
    together.mkdir()
    moved.parent.rename(together / "elsewhere")
    dest.rename(together / "dest")
    assert all(p.exists() for p in (together / "dest").rglob("*"))
    check_imagefolder(together / "dest")


def test_a_truncated_validation_archive_is_named_before_writing(sources, tmp_path):
    source = _copy(sources["archives"], tmp_path)
    val = source / "ILSVRC2012_img_val.tar"
    val.write_bytes(val.read_bytes()[:1200])
    with pytest.raises(PrepareError, match="ILSVRC2012_img_val.tar is corrupt or truncated") as error:
        prepare(source, tmp_path / "dest", progress=False)
    _one_line(error)
    assert not (tmp_path / "dest").exists()
