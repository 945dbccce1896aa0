"""What the eighth re-run of issue 43 (/work/wt/notes/r43n-report.md) found outside the bench commands: a YAML path
with a name over 255 bytes a raw OSError in the API (``make_config(yaml_path=)``, ``site=``, ``$TUTORIAL_SITE``); a
sweep that ran its first job before a later value failed the memory estimate; a Slurm record whose id of 5,000 digits
broke ``int()`` in the watcher; path arguments of the command lines named by their path but not their flag;
``data prepare`` making a DEST with a newline in its name; and ``data prepare`` counting a class folder linked to the
home folder as a class, without a word. Each ends as the contract says; each test failed on the code before
(checked by reverting the library change). No job is started, except the sweep's refusal, which starts none.
"""

from __future__ import annotations

import os
import shutil

import pytest

from tests.test_contract_rerun2 import _main, _one_line
from tutorial_lib.engine.config import ConfigError, make_config
from tutorial_lib.exits import EXIT_REFUSED

LONG_NAME = "x" * 300  # one name of 300 bytes: no file system holds it (NAME_MAX 255)


@pytest.mark.parametrize("length", [300, 5000])
def test_a_config_file_with_a_name_no_file_system_holds_is_one_line_naming_config(length):
    """Before: ``OSError: [Errno 36] File name too long`` from ``Path.is_file()``, 5,033 characters long."""
    with pytest.raises(ConfigError) as refused:
        make_config("smoke", yaml_path="x" * length)
    message = str(refused.value)
    assert message.startswith("config: ") and "Fix: pass a" in message and len(message) < 400


def test_a_site_file_with_a_name_no_file_system_holds_is_one_line_naming_site(tmp_path, monkeypatch):
    from tutorial_lib.jobs import make_spec
    from tutorial_lib.jobs.site import load_site

    with pytest.raises(ConfigError, match=r"^site: .* has a name of 300 bytes.* Fix: pass a path with shorter"):
        load_site(str(tmp_path / LONG_NAME))
    monkeypatch.setenv("TUTORIAL_SITE", str(tmp_path / LONG_NAME))
    with pytest.raises(ConfigError, match=r"^TUTORIAL_SITE: .* Fix: pass a path with shorter names"):
        load_site(None)
    monkeypatch.delenv("TUTORIAL_SITE")
    cfg = make_config("smoke", name="r", output_root=str(tmp_path / "runs"))
    with pytest.raises(ConfigError, match=r"^site: .* Fix: pass a path with shorter names"):
        make_spec(cfg, on_cluster=True, site=str(tmp_path / LONG_NAME))
    assert not (tmp_path / "runs").exists()


def test_a_sweep_checks_every_jobs_memory_before_the_first_job(tmp_path, monkeypatch, digits_dir):
    """Before: ``values=[16, 100000]`` submitted and ran ``r-image_size16``, then refused 100000."""
    from tutorial_lib import jobs

    monkeypatch.chdir(tmp_path)
    cfg = make_config("smoke", dataset="imagefolder", data_dir=str(digits_dir), output_root="runs", name="r",
                      image_size=16, epochs=1, batch_size=6, progress=False, device="cpu")
    with pytest.raises(ConfigError, match=r"^image_size/batch_size: .* needs at least .* Fix: "):
        jobs.sweep(cfg, over="image_size", values=[16, 100000], backend="local", verbose=False)
    assert not (tmp_path / "runs").exists()  # no job submitted, no run directory made


def test_a_slurm_job_id_is_what_sbatch_prints():
    """An id of 5,000 digits reached ``int()`` in the watcher (``tests/test_contract_rerun8.py`` runs that record)."""
    from tutorial_lib.jobs.slurm_values import is_job_id

    assert is_job_id("4294967295") and is_job_id(12)
    assert not any(is_job_id(v) for v in ("5" * 11, "slurm-pending", "\u0661\u0662", "", "12;cluster", True))


def _train_main():
    from tutorial_lib.engine.trainer import main

    return main


def _data_main():
    from tutorial_lib.data.__main__ import main

    return main


def _bench_main():
    from tutorial_lib.bench.cli import main

    return main


def _evaluate_main():
    from tutorial_lib.engine.model_file import main

    return main


def _course_main():
    from tutorial_lib.course.runner import main

    return main


# (command, argv with LONG where the long path goes, the flag or metavar the line must name)
LONG_PATH_ARGUMENTS = [
    (_train_main, ["--config", "LONG"], "config"),
    (_data_main, ["prepare", "LONG", "DIR/out"], "SOURCE"),
    (_data_main, ["prepare", "DIR/src", "DIR/out", "--val-labels", "LONG"], "--val-labels"),
    (_data_main, ["detect", "LONG"], "SOURCE"),
    (_data_main, ["pack", "DIR/src", "LONG"], "SHARDS"),
    (_bench_main, ["runs", "LONG"], "RUN_DIR"),
    (_bench_main, ["table", "LONG"], "FILE"),
    (_evaluate_main, ["LONG", "--data-dir", "DIR/src"], "RUN_DIR"),
    (_course_main, ["--params", "LONG", "--out", "DIR/out"], "--params"),
]


@pytest.mark.parametrize("command, argv, named", LONG_PATH_ARGUMENTS,
                         ids=[f"{c.__name__[1:-5]}-{n}" for c, _, n in LONG_PATH_ARGUMENTS])
def test_a_path_argument_with_a_name_no_file_system_holds_names_its_flag(tmp_path, command, argv, named):
    """Before: ``error: 'xxx...' (300 characters): File name too long (errno 36). Fix: use a shorter path.``, which
    names the path but not which argument (``prepare SOURCE DEST``, ``evaluate RUN_DIR --data-dir``)."""
    (tmp_path / "src").mkdir()
    argv = [str(tmp_path / LONG_NAME) if a == "LONG" else a.replace("DIR", str(tmp_path)) for a in argv]
    status, err = _main(command(), argv)
    assert status == EXIT_REFUSED
    assert "has a name of" in _one_line(err, f"{named}: "), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]  # nothing made


def test_data_prepare_refuses_a_dest_with_a_newline_naming_dest(tmp_path, digits_dir):
    """Before: exit 0, a folder ``out\\nx`` made, and the "Train with --data-dir" line split in two."""
    from tutorial_lib.data.__main__ import main

    status, err = _main(main, ["prepare", str(digits_dir), str(tmp_path / "out\nx")])
    assert status == EXIT_REFUSED and "control character" in _one_line(err, "DEST: ")
    assert list(tmp_path.iterdir()) == []


def test_data_prepare_skips_and_names_a_class_folder_linked_to_the_home_folder(tmp_path, digits_dir, monkeypatch,
                                                                              capsys):
    """Before: DEST/train/homecls (a link to $HOME) counted as an 11th class, exit 0, no warning; the readers
    skipped it as docs/reliability.md says."""
    from tutorial_lib.data.__main__ import main

    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text("mine\n")
    monkeypatch.setenv("HOME", str(home))
    source = tmp_path / "src"
    shutil.copytree(digits_dir, source)
    for split in ("train", "val"):
        os.symlink(home, source / split / "homecls")
    assert main(["prepare", str(source), str(tmp_path / "out")]) == 0
    out, err = capsys.readouterr()
    assert "of 10 classes" in out, out
    warnings = [line for line in err.splitlines() if "homecls" in line]
    assert len(warnings) == 2 and all("the home folder or above it" in line for line in warnings), err
    assert (home / "notes.txt").read_text() == "mine\n" and sorted(p.name for p in home.iterdir()) == ["notes.txt"]
