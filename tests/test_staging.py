"""Node-local staging (stage_to): the copy, its checks and its removal; one job per backend in test_jobs.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tutorial_lib.data import staging
from tutorial_lib.engine.config import ConfigError, make_config, validate


@pytest.fixture
def source(tmp_path) -> Path:
    """A small class-folder tree, with one class folder a link (as `prepare` makes them)."""
    root = tmp_path / "data"
    for split, label in (("train", "a"), ("val", "a")):
        (root / split / label).mkdir(parents=True)
        (root / split / label / "1.JPEG").write_bytes(os.urandom(1000))
    elsewhere = tmp_path / "linked" / "b"
    elsewhere.mkdir(parents=True)
    (elsewhere / "2.JPEG").write_bytes(os.urandom(500))
    (root / "train" / "b").symlink_to(elsewhere)
    return root


def test_copies_once_then_removes_only_what_it_copied(source, tmp_path):
    local = tmp_path / "local"
    local.mkdir()
    (local / "someone_elses.txt").write_text("keep me")
    copy = staging.stage(source, str(local), "run1", "node1")
    assert copy.path == local / "tutorial-stage-run1-node1" and copy.files == 3 and copy.bytes == 2500
    staged = copy.path / "train" / "b" / "2.JPEG"
    assert staged.read_bytes() == (source / "train" / "b" / "2.JPEG").read_bytes() and not staged.is_symlink()
    (copy.path / "train" / "a" / "notes.txt").write_text("written by the user meanwhile")
    left = staging.remove(copy.path)
    assert left == [copy.path / "train" / "a" / "notes.txt"]
    assert sorted(p.name for p in local.rglob("*") if p.is_file()) == ["notes.txt", "someone_elses.txt"]
    assert (source / "train" / "a" / "1.JPEG").is_file() and (tmp_path / "linked" / "b" / "2.JPEG").is_file()


def test_interrupted_copy_resumes_and_complete_copy_is_reused(source, tmp_path, monkeypatch):
    copy = staging.stage(source, str(tmp_path), "r", "n")
    partial = copy.path.with_name(copy.path.name + ".partial")
    os.rename(copy.path, partial)  # as if killed before the rename
    (partial / "val" / "a" / "1.JPEG").write_bytes(b"half")  # a file cut short
    kept = partial / "train" / "a" / "1.JPEG"
    kept_inode = kept.stat().st_ino
    again = staging.stage(source, str(tmp_path), "r", "n")
    assert not again.reused and (again.path / "train" / "a" / "1.JPEG").stat().st_ino == kept_inode
    assert (again.path / "val" / "a" / "1.JPEG").read_bytes() == (source / "val" / "a" / "1.JPEG").read_bytes()
    assert staging.stage(source, str(tmp_path), "r", "n").reused  # a killed job's complete copy


def test_a_copy_whose_source_changed_is_brought_up_to_date_not_reused(source, tmp_path):
    """Issue 47: stage, add a file to the source, stage again: the copy was reused and still held the old files,
    so the job trained on a stale set without a word."""
    first = staging.stage(source, str(tmp_path), "r", "n")
    (source / "train" / "a" / "3.JPEG").write_bytes(os.urandom(700))  # added
    rewritten = source / "val" / "a" / "1.JPEG"
    rewritten.write_bytes(os.urandom(1000))  # the same size, new content and time
    os.utime(rewritten, ns=(rewritten.stat().st_atime_ns, rewritten.stat().st_mtime_ns + 10**9))
    (source / "train" / "a" / "1.JPEG").unlink()  # removed
    again = staging.stage(source, str(tmp_path), "r", "n")
    assert again.path == first.path and not again.reused and again.refreshed
    copied = sorted(str(p.relative_to(again.path)) for p in again.path.rglob("*.JPEG"))
    assert copied == ["train/a/3.JPEG", "train/b/2.JPEG", "val/a/1.JPEG"]  # the source's files, no stale one
    assert (again.path / "val" / "a" / "1.JPEG").read_bytes() == rewritten.read_bytes()
    assert not first.path.with_name(first.path.name + ".partial").exists()
    third = staging.stage(source, str(tmp_path), "r", "n")  # unchanged since: reused as it is
    assert third.reused and not third.refreshed
    assert staging.remove(third.path) == [] and not third.path.exists()


def test_the_trainers_loaders_open_the_nodes_copy_not_data_dir(tmp_path, monkeypatch, jpeg_tree, runs):
    """What the loaders open, not what config.json records: with a staged copy, every image is read from the
    copy (staging planted away, loaders built from data_dir, was caught by no test: issue 47)."""
    from tutorial_lib.engine.input import files

    copy = staging.stage(jpeg_tree, str(tmp_path), "opened", "node").path
    # before the run starts, validate decodes an image of each split of data_dir (files.check_readable): what is
    # checked here is what the loaders open
    monkeypatch.setattr(files, "check_readable", lambda root, split, **kwargs: root)
    monkeypatch.setenv(staging.STAGED_DATA_ENV, str(copy))
    monkeypatch.setenv(staging.STAGED_FROM_ENV, str(jpeg_tree))
    opened, real_open = [], files.open_regular_file
    monkeypatch.setattr(files, "open_regular_file", lambda path: opened.append(Path(path)) or real_open(path))
    summary = runs.in_process(runs.config("opened", data_dir=str(jpeg_tree), image_size=16, batch_size=8,
                                          epochs=1, max_steps_per_epoch=2, bad_data="error"))
    assert summary["status"] == "completed"
    assert len(opened) >= 2 * 8 + 6  # two training batches and the validation split
    assert all(path.is_relative_to(copy) for path in opened), [p for p in opened if not p.is_relative_to(copy)][:3]


def test_foreign_folder_of_the_same_name_is_refused(source, tmp_path):
    theirs = tmp_path / staging.copy_name("r", "n")
    theirs.mkdir()
    (theirs / "thesis.tex").write_text("x")
    with pytest.raises(staging.StagingError, match=r"^stage_to: .* was not staged .* Fix: "):
        staging.stage(source, str(tmp_path), "r", "n")
    assert (theirs / "thesis.tex").read_text() == "x" and staging.remove(theirs) == []
    assert (theirs / "thesis.tex").exists()


@pytest.mark.parametrize("problem, setup, message", [
    ("variable", lambda t: "$NO_SUCH_VARIABLE_HERE", "not set on this node"),
    ("missing", lambda t: str(t / "absent"), "is not a folder"),
    ("inside", lambda t: str(t / "data" / "train"), "inside the data folder"),
])
def test_unusable_targets_are_refused_in_one_line(source, tmp_path, problem, setup, message):
    with pytest.raises(staging.StagingError, match=message) as caught:
        staging.stage(source, setup(tmp_path), "r", "n")
    assert "\n" not in str(caught.value) and "Fix: " in str(caught.value)


def test_not_writable_and_too_little_space_are_refused_before_copying(source, tmp_path, monkeypatch):
    target = tmp_path / "local"
    target.mkdir()
    monkeypatch.setattr(os, "access", lambda *_: False)
    with pytest.raises(staging.StagingError, match="not writable"):
        staging.stage(source, str(target), "r", "n")
    monkeypatch.undo()
    monkeypatch.setattr(staging.shutil, "disk_usage", lambda _: type("U", (), {"free": 2600})())
    with pytest.raises(staging.StagingError, match=r"needs 0.00 GB but .* free"):
        staging.stage(source, str(target), "r", "n")
    assert list(target.iterdir()) == []


def test_variable_is_expanded_in_the_nodes_environment(source, tmp_path):
    (tmp_path / "x").mkdir()
    copy = staging.stage(source, "${NODE_TMP}/x", "r", "n", environ={"NODE_TMP": str(tmp_path)})
    assert copy.path.parent == tmp_path / "x" and copy.files == 3


@pytest.mark.parametrize("value, message", [
    ("scratch", "neither an absolute path nor a variable"),
    ("$TMPDIR; rm -rf /", "neither an absolute path nor a variable"),
])
def test_config_refuses_bad_stage_to(value, message, tmp_path):
    with pytest.raises(ConfigError, match=rf"^stage_to: .*{message}.*Fix: "):
        validate(make_config("smoke", dataset="imagefolder", data_dir=str(tmp_path), stage_to=value), check_paths=False)


def test_config_refuses_stage_to_inside_data_dir_and_for_synthetic(tmp_path):
    with pytest.raises(ConfigError, match="^stage_to: .* inside data_dir"):
        validate(make_config("smoke", data_dir=str(tmp_path), stage_to=str(tmp_path / "copy")), check_paths=False)
    with pytest.raises(ConfigError, match="^stage_to: the synthetic dataset"):
        validate(make_config("smoke", dataset="synthetic", stage_to="$TMPDIR"), check_paths=False)


def test_launcher_removes_the_copy_when_cancelled(source, tmp_path, child_env):
    """SIGTERM to a node's launcher (a cancel) reaches its command, and the copy is removed all the same."""
    env = {**child_env, "TUTORIAL_STAGE_TO": str(tmp_path), "TUTORIAL_STAGE_FROM": str(source),
           "TUTORIAL_RUN_DIR": str(tmp_path / "runs" / "r"), "TUTORIAL_NODE_NAME": "n1"}
    probe = ("import os, sys, time; open(sys.argv[1], 'w').write(os.environ['TUTORIAL_STAGED_DATA']); "
             "time.sleep(60)")
    seen = tmp_path / "seen.txt"
    launcher = subprocess.Popen([sys.executable, "-m", "tutorial_lib.jobs.staged", sys.executable, "-c", probe,
                                 str(seen)], env=env, stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not seen.exists() or not seen.read_text():
        assert time.monotonic() < deadline and launcher.poll() is None
        time.sleep(0.1)
    copy = Path(seen.read_text())
    assert copy == tmp_path / staging.copy_name("r", "n1") and (copy / "train" / "a" / "1.JPEG").is_file()
    launcher.send_signal(signal.SIGTERM)
    out, _ = launcher.communicate(timeout=60)
    assert launcher.returncode != 0 and not copy.exists(), out
    assert "staged 3 files" in out and "removed the staged copy" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "linked", "seen.txt"]


def test_a_node_reads_rank0s_index_for_its_own_copy(source, tmp_path):
    """Rank 0 indexes its node's copy; a rank on another node gets the same lists under its own copy."""
    from tutorial_lib.data import file_index

    node1 = staging.stage(source, str(tmp_path), "r", "node1").path
    node2 = staging.stage(source, str(tmp_path), "r", "node2").path
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    file_index.build(node1, run_dir)
    try:
        file_index.use(run_dir, copy_root=node2)
        listed = file_index.samples(node2 / "train", {"a": 0, "b": 1})
        assert listed == [(str(node2 / "train" / "a" / "1.JPEG"), 0), (str(node2 / "train" / "b" / "2.JPEG"), 1)]
        file_index.use(run_dir)  # without copy_root an index serves only the root it was made for
        assert file_index.samples(node2 / "train", {"a": 0, "b": 1}) is None
    finally:
        file_index.use(None)


def test_benchmark_times_the_copy_and_both_reads(jpeg_tree, tmp_path):
    from tutorial_lib.bench.staging import measure_staging, spreads

    records = measure_staging(jpeg_tree, tmp_path, repeats=2)
    assert [r["mode"] for r in records] == ["copy", "shared", "staged", "copy", "staged", "shared"]
    assert {r["images"] for r in records if r["mode"] != "copy"} == {38} and records[0]["same_file_system"]
    assert set(spreads(records)) == {"copy", "shared", "staged"} and list(tmp_path.iterdir()) == []
    from tutorial_lib.bench.records import describe, markdown_tables

    assert "| 1 | staged | 38 |" in markdown_tables(records) and "files/s" in describe(records[-1])


def test_a_job_started_by_sbatch_directly_stages_from_its_flags(tmp_path):
    from tutorial_lib.jobs.launch import stage_env

    flags = ["--profile", "smoke", "--data-dir", str(tmp_path), "--name", "x"]
    assert stage_env(flags) == {}
    assert stage_env(flags + ["--stage-to", "$TMPDIR"]) == {"TUTORIAL_STAGE_TO": "$TMPDIR",
                                                            "TUTORIAL_STAGE_FROM": str(tmp_path)}


def _plant_forged_copy(folder: Path, source: Path, third: Path) -> None:
    """What another user can leave in a shared stage_to: a forged marker, a file list naming a/thesis.tex,
    and ``a`` a link to a folder of a third user."""
    import json

    folder.mkdir()
    (folder / staging.MARKER).write_text(json.dumps({"source": str(source.absolute()), "node": "n", "run": "r",
                                                     "version": 1}))
    (folder / staging.MANIFEST).write_text("a/thesis.tex\n")
    (folder / "a").symlink_to(third)


@pytest.fixture
def third_users_thesis(tmp_path) -> Path:
    third = tmp_path / "third-user"
    third.mkdir()
    (third / "thesis.tex").write_text("four years of work")
    return third


def _as_another_user(path: Path, monkeypatch) -> None:
    """Make ``path`` (not following links) another user's: chown as root, else this process pretends to be
    someone else."""
    if os.geteuid() == 0:
        for folder, dirs, names in os.walk(path):
            for name in dirs + names:
                os.lchown(os.path.join(folder, name), 65534, 65534)
        os.lchown(path, 65534, 65534)
    else:
        monkeypatch.setattr(staging.os, "geteuid", lambda: os.getuid() + 1)


def test_a_forged_copy_of_another_user_is_refused_unread_and_nothing_is_removed_through_its_link(
        source, tmp_path, third_users_thesis, monkeypatch):
    shared = tmp_path / "shared-tmp"
    shared.mkdir()
    shared.chmod(0o1777)  # sticky and writable by all, like /tmp
    planted = shared / staging.copy_name("r", "n")
    _plant_forged_copy(planted, source, third_users_thesis)
    _as_another_user(planted, monkeypatch)
    with pytest.raises(staging.StagingError, match=r"^stage_to: .* belongs to another user .*nothing was read") as c:
        staging.stage(source, str(shared), "r", "n")
    assert "\n" not in str(c.value)
    assert staging.remove(planted) == []
    assert (third_users_thesis / "thesis.tex").read_text() == "four years of work"
    assert (planted / "a").is_symlink()  # their folder is left as it was


def test_removal_never_follows_a_link_inside_the_users_own_copy(source, tmp_path, third_users_thesis):
    copy = staging.stage(source, str(tmp_path), "r", "n")
    (copy.path / "a").symlink_to(third_users_thesis)  # e.g. planted while the folder was writable
    with open(copy.path / staging.MANIFEST, "a") as manifest:
        manifest.write("a/thesis.tex\n")
    left = staging.remove(copy.path)
    assert (third_users_thesis / "thesis.tex").read_text() == "four years of work"
    assert left == [copy.path / "a"] and not (copy.path / "train").exists()


def test_a_copy_others_may_write_or_a_link_in_its_place_is_refused(source, tmp_path, third_users_thesis):
    copy = staging.stage(source, str(tmp_path), "r", "n")
    assert stat_mode(copy.path) == 0o700  # made with an exclusive mkdir, the user's alone
    copy.path.chmod(0o777)
    with pytest.raises(staging.StagingError, match=r"may be written by others \(mode 777\)"):
        staging.stage(source, str(tmp_path), "r", "n")
    staging.remove(copy.path)
    assert not copy.path.exists()
    copy.path.symlink_to(third_users_thesis)
    with pytest.raises(staging.StagingError, match="is a link; nothing was read"):
        staging.stage(source, str(tmp_path), "r", "n")
    assert staging.remove(copy.path) == [] and (third_users_thesis / "thesis.tex").is_file()


def stat_mode(path: Path) -> int:
    return path.stat().st_mode & 0o777
