"""The headless course runner's housekeeping: no stray cell values, checkpoints of finished runs freed."""

import json
import os
import time

import torch

from tutorial_lib import course


def test_setup_notebook_leaves_no_value_to_display(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # setup_notebook moves to the repository root; monkeypatch moves back
    assert course.setup_notebook(quiet=True) is None  # a cell ending with it shows no PosixPath(...)


def make_run(root, name, done: bool, config_age_s: float = 0.0):
    run = root / name
    run.mkdir(parents=True)
    # the files as the trainer writes them: the project's files are recognised by their content
    config = {"name": name, "output_root": str(root), "arch": "resnet18", "global_batch": 32, "scaled_lr": 0.1,
              "world_size": 1}
    (run / "config.json").write_text(json.dumps(config))
    torch.save({"model": torch.zeros(200)}, run / "checkpoint.pt")
    (run / "metrics.jsonl").write_text(json.dumps({"event": "start", "time": time.time()}) + "\n")
    if done:
        (run / "DONE").write_text(json.dumps({"best_top1": 50.0}))
    if config_age_s:
        old = time.time() - config_age_s
        os.utime(run / "config.json", (old, old))
    return run


def test_finished_course_runs_lose_only_their_checkpoints(tmp_path):
    since = time.time() - 60
    finished = make_run(tmp_path, "01-amp-fp32", done=True)
    running = make_run(tmp_path, "03-ddp", done=False)
    older = make_run(tmp_path, "mine", done=True, config_age_s=3600)  # not started by this course run
    (finished / "notes.pt").write_bytes(b"keep")
    user = make_run(tmp_path, "user", done=True)
    (user / "checkpoint.pt").write_bytes(b"x" * 1000)  # a file of that name that torch.save did not write
    size = (finished / "checkpoint.pt").stat().st_size
    assert course.drop_finished_checkpoints(tmp_path, since) == size
    assert (user / "checkpoint.pt").read_bytes() == b"x" * 1000
    assert not (finished / "checkpoint.pt").exists()
    assert (finished / "metrics.jsonl").exists() and (finished / "notes.pt").exists()
    assert (running / "checkpoint.pt").exists() and (older / "checkpoint.pt").exists()
    assert course.drop_finished_checkpoints(tmp_path / "missing", since) == 0


def test_a_run_outside_the_course_says_which_run_it_replaced(tmp_path, capsys):
    """A notebook run with papermill and the default output_root starts its jobs fresh=True: the earlier run of
    the same name is removed, and the line says so (issue 44: it used to go without a word)."""
    from tutorial_lib import jobs

    make_run(tmp_path, "04-lars", done=True)
    jobs._take_run_dir(tmp_path / "04-lars", True)
    said = capsys.readouterr().out
    assert f"replaced the earlier run in {tmp_path / '04-lars'}: removed its 4 file(s)" in said, said
    jobs._take_run_dir(tmp_path / "04-lars", True)  # nothing left to replace: nothing said
    assert capsys.readouterr().out == ""


def test_a_parameter_near_no_declared_one_gets_the_list():
    import pytest

    with pytest.raises(course.NotebookParameterError) as error:
        course.check_injected_parameters(["", "epochs = 2\nnodes = 1", "# Parameters\nzzz = 3\n"])
    assert str(error.value).endswith("its parameters are epochs, nodes. Fix: use a name from its parameters cell.")
    assert error.value._render_traceback_() == [f"NotebookParameterError: {error.value}"]  # IPython shows one line
