"""One way every command ends (tutorial_lib.exits): one line and a documented status for what is not a bug."""

from __future__ import annotations

import errno
import json
import types

import pytest

from tests.conftest import write_image_tree
from tutorial_lib import exits, jobs
from tutorial_lib.jobs.spec import JobError


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err  # warnings may come before (one per unreadable image), the error is one line
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and err.endswith(errors[0] + "\n") and "Traceback" not in err, err
    return errors[0]


@pytest.mark.parametrize("error, status, words", [
    (OSError(errno.ENOSPC, "No space left on device", "/scratch/out/x.json"), exits.EXIT_ERROR,
     ["'/scratch/out/x.json'", "errno 28", "Fix: free space"]),
    (OSError(errno.EROFS, "Read-only file system", "/ro/x"), exits.EXIT_ERROR, ["'/ro/x'", "writable"]),
    (PermissionError(errno.EACCES, "Permission denied", "/data/train"), exits.EXIT_REFUSED,
     ["'/data/train'", "Permission denied", "chmod"]),
    (FileNotFoundError(errno.ENOENT, "No such file or directory", "~/data"), exits.EXIT_REFUSED, ["'~/data'"]),
    (KeyboardInterrupt(), exits.EXIT_INTERRUPTED, ["Ctrl-C", "run the same command again"]),
    (SystemExit("error: out: x already holds files.\nFix: y"), exits.EXIT_REFUSED, ["out: x already holds"]),
])
def test_a_fault_of_the_environment_or_an_interrupt_is_one_line_with_its_status(error, status, words, capsys):
    def body():
        raise error

    assert exits.run_main(body) == status
    line = _one_error_line(capsys)
    for word in words:
        assert word in line


def test_a_commands_own_error_is_one_line_even_with_newlines_and_control_characters(capsys):
    class Refused(ValueError):
        pass

    def body():
        raise Refused("name: 'run\nerror: forged\x1b[31m' is refused. Fix: a plain name.")

    assert exits.run_main(body, refused=(Refused,)) == exits.EXIT_REFUSED
    line = _one_error_line(capsys)
    assert "\\x1b" in line and "\x1b" not in line  # escaped: a hostile value cannot colour or forge lines


def test_a_bug_of_the_project_keeps_its_traceback():
    def body():
        return {}["missing"]

    with pytest.raises(KeyError):
        exits.run_main(body, refused=(ValueError,))


def test_the_statuses_of_argparse_and_of_the_body_pass_through(capsys):
    assert exits.run_main(lambda: None) == exits.EXIT_OK
    assert exits.run_main(lambda: exits.EXIT_STOPPED) == exits.EXIT_STOPPED

    def usage():
        raise SystemExit(2)

    assert exits.run_main(usage) == exits.EXIT_REFUSED
    assert set(exits.EXIT_STATUSES) == {0, 1, 2, 3, 75, 130}


def test_a_torn_or_empty_job_file_is_one_line_in_attach(tmp_path):
    for text in ("", '{"id": "local-1", "backend": "lo', "[1, 2]"):
        (tmp_path / "job.json").write_text(text)
        with pytest.raises(JobError) as caught:
            jobs.attach(tmp_path)
        assert "\n" not in str(caught.value) and "job.json" in str(caught.value) and "Fix:" in str(caught.value)


def _model_run(tmp_path, classes):
    from tutorial_lib.engine.model_file import save_model
    from tutorial_lib.engine.models import build_model

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    cfg = types.SimpleNamespace(arch="resnet18", norm="batch", image_size=16)
    save_model(run_dir / "model.pt", build_model("resnet18", len(classes)), cfg, len(classes), classes)
    return run_dir


def test_evaluate_refuses_an_empty_model_file_in_one_line(tmp_path, capsys):
    from tutorial_lib.engine.model_file import main

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "model.pt").write_bytes(b"")
    write_image_tree(tmp_path / "data", {"val": {"a": 1}}, 8)
    assert main([str(run_dir), "--data-dir", str(tmp_path / "data"), "--workers", "0", "--device", "cpu"]) == 2
    assert "model.pt (0 bytes) is not a complete torch file" in _one_error_line(capsys)


def test_evaluate_of_a_folder_whose_linked_source_was_moved_is_an_error_not_zero_percent(tmp_path, capsys):
    from tutorial_lib.engine.model_file import main

    write_image_tree(tmp_path / "source", {"val": {"a": 2, "b": 2}}, 16)
    for image in (tmp_path / "source" / "val").glob("*/*.png"):  # a prepared DEST: links to SOURCE
        link = tmp_path / "dest" / "val" / image.parent.name / image.name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(image)
    run_dir = _model_run(tmp_path, ["a", "b"])
    (tmp_path / "source").rename(tmp_path / "moved")
    assert main([str(run_dir), "--data-dir", str(tmp_path / "dest"), "--workers", "0", "--device", "cpu"]) == 2
    assert "no image of" in _one_error_line(capsys)


def test_a_job_record_that_lacks_the_jobs_fields_is_refused(tmp_path):
    (tmp_path / "job.json").write_text(json.dumps({"name": "x"}))
    with pytest.raises(JobError, match="lacks the job's id, backend"):
        jobs.attach(tmp_path)
