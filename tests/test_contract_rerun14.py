"""What the eleventh re-run of issue 43 (/work/wt/notes/r43r-report.md) found at e884753, each failing on the code
before (checked by reverting the library change):

* S1: an ``output_root`` that is a dangling symbolic link: ``jobs.submit`` resolved it, made the link's target and
  ran the job there (the trainer refused it: "cannot be created (File exists)");
* S2: an ``index_dir`` that is a dangling link: the trainer refused it only after making the run directory, with
  "'…/idx': File exists (errno 17). Fix: check that path", naming no setting; ``jobs.submit`` accepted it;
* S5: a ``site`` of another kind (5, [1]) accepted for a local job and ignored;
* S3: ``module_args`` of exactly 131,072 bytes (Linux's MAX_ARG_STRLEN counts the NUL) or 120,000 short ones (a
  pointer each) passed the check of R7 (their test: ``test_contract_rerun13.py``).
"""

from __future__ import annotations

import pytest

from tests.conftest import command_in_process
from tests.test_contract_rerun2 import _one_line
from tutorial_lib import jobs
from tutorial_lib.engine.config import ConfigError, make_config
from tutorial_lib.exits import EXIT_REFUSED


@pytest.fixture
def no_backend(monkeypatch):
    for place, name in ((jobs, "submit_local"), (jobs.slurm, "submit_slurm")):
        monkeypatch.setattr(place, name, lambda *a, **k: pytest.fail("a job was handed to a backend"))


def _cfg(tmp_path, jpeg_tree, **overrides):
    values = dict(dataset="imagefolder", data_dir=str(jpeg_tree), output_root=str(tmp_path / "runs"), name="r",
                  image_size=16, epochs=1, batch_size=4, progress=False, device="cpu")
    return make_config("smoke", **{**values, **overrides})


@pytest.mark.parametrize("where", ["output_root", "a folder above it"])
def test_an_output_root_through_a_dangling_link_is_refused_and_its_target_not_made(tmp_path, jpeg_tree, no_backend,
                                                                                 where):
    (tmp_path / "runs").symlink_to(tmp_path / "elsewhere" / "made")
    root = tmp_path / "runs" if where == "output_root" else tmp_path / "runs" / "sub"
    with pytest.raises(ConfigError, match=r"^output_root: .* leads through the symbolic link .*/runs to "
                                          r"'.*/elsewhere/made', which does not exist\. Fix: create that folder, "
                                          r"remove the link, or pass another path"):
        jobs.submit(_cfg(tmp_path, jpeg_tree, output_root=str(root)), backend="local")
    assert not (tmp_path / "elsewhere").exists()


def test_a_sweeps_output_root_through_a_dangling_link_is_refused(tmp_path, jpeg_tree, no_backend):
    (tmp_path / "runs").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ConfigError, match=r"^output_root: .* which does not exist\. Fix: "):
        jobs.sweep(_cfg(tmp_path, jpeg_tree), over="seed", values=[1, 2], backend="local")
    assert not (tmp_path / "elsewhere").exists()


def test_an_index_dir_that_is_a_dangling_link_is_refused_naming_it_before_the_run_directory(tmp_path, jpeg_tree,
                                                                                           no_backend):
    from tutorial_lib.train import main

    (tmp_path / "idx").symlink_to(tmp_path / "gone" / "x")
    result = command_in_process(main, ["--dataset", "imagefolder", "--data-dir", str(jpeg_tree), "--output-root",
                                       str(tmp_path / "runs"), "--name", "r", "--index-dir", str(tmp_path / "idx"),
                                       "--image-size", "16", "--epochs", "1", "--batch-size", "4", "--progress",
                                       "false", "--device", "cpu"])
    assert result.returncode == EXIT_REFUSED
    line = _one_line(result.stderr, "index_dir: ")
    assert "which does not exist" in line and "Fix: create that folder" in line
    assert not (tmp_path / "runs").exists() and not (tmp_path / "gone").exists()
    with pytest.raises(ConfigError, match=r"^index_dir: .* which does not exist"):
        jobs.submit(_cfg(tmp_path, jpeg_tree, index_dir=str(tmp_path / "idx")), backend="local")


def test_a_link_to_an_existing_output_root_is_still_followed(tmp_path, jpeg_tree, monkeypatch):
    """A cluster's usual runs -> /scratch/me/runs: the job writes into the link's target."""
    launched = []
    monkeypatch.setattr(jobs, "_launch", lambda spec, *args: launched.append(spec.run_dir))
    (tmp_path / "scratch").mkdir()
    (tmp_path / "runs").symlink_to(tmp_path / "scratch")
    jobs.submit(_cfg(tmp_path, jpeg_tree), backend="local")
    assert launched == [tmp_path / "scratch" / "r"]


@pytest.mark.parametrize("site", [5, [1], True])
def test_a_site_of_another_kind_is_refused_for_a_local_job_too(tmp_path, jpeg_tree, no_backend, site):
    """S5: ``make_spec(cfg, site=5)`` and ``sweep(..., backend='local', site=5)`` were accepted (the site ignored);
    only a Slurm job refused it."""
    with pytest.raises(ConfigError, match=r"^site: expected a Site, a site: mapping or the path of a YAML file"):
        jobs.make_spec(_cfg(tmp_path, jpeg_tree), site=site)
    with pytest.raises(ConfigError, match=r"^site: expected a Site"):
        jobs.sweep(_cfg(tmp_path, jpeg_tree), over="seed", values=[1, 2], backend="local", site=site)
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("command, flag", [
    (["data", "prepare", "{data}", "{dang}"], "DEST"), (["data", "pack", "{data}", "{dang}/x"], "SHARDS"),
    (["course", "--only", "00", "--out", "{dang}"], "--out"), (["bench", "matmul", "--out", "{dang}/x"], "--out"),
    (["bench", "scale", "--work-dir", "{dang}"], "--work-dir"),
    (["bench", "data", "--data-dir", "{dang}/x"], "--data-dir")])
def test_a_written_path_argument_through_a_dangling_link_is_refused_naming_its_flag(tmp_path, jpeg_tree, command,
                                                                                  flag):
    """S1, S2: ``data prepare SOURCE dang`` and ``course --out dang`` made the link's target and wrote there; the
    others said "File exists (errno 17). Fix: check that path and the machine", naming no flag (``data pack``:
    PREPARED, with "make it readable")."""
    from tutorial_lib.bench.cli import main as bench_main
    from tutorial_lib.course.runner import main as course_main
    from tutorial_lib.data.__main__ import main as data_main

    (tmp_path / "dang").symlink_to(tmp_path / "gone" / "x")
    main = {"data": data_main, "course": course_main, "bench": bench_main}[command[0]]
    argv = [part.format(data=jpeg_tree, dang=tmp_path / "dang") for part in command[1:]]
    result = command_in_process(main, argv)
    assert result.returncode == EXIT_REFUSED
    line = _one_line(result.stderr, f"{flag}: ")
    assert "which does not exist" in line and "Fix: create that folder, remove the link" in line
    assert not (tmp_path / "gone").exists()
