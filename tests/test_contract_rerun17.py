"""What the sixteenth re-run of issue 43 (/work/wt/notes/r43w-report.md) left open at 634fac5, each failing on the
code before (checked by reverting the library change):

* X8: a world of 2 whose MASTER_ADDR does not resolve (``no.such.host.invalid``, ``-x``, a shell expression) had
  torch's rendezvous retry for its whole 600 s timeout, printing only c10d warnings;
* X6 (02's ``channels_last``): the course refused the notebook's own default ``auto`` and every on/off value
  (``no``, ``false``, ``true`` were the trainer's on/off against the notebook's text, each refused the other way),
  while a text given to the notebook with papermill (``'no'``) was ``bool('no')``: channels-last on.
"""

from __future__ import annotations

import pytest

from tests.conftest import command_in_process
from tests.test_contract_rerun2 import _one_line
from tutorial_lib.exits import EXIT_REFUSED

LAUNCHER_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS",
                      "MASTER_ADDR", "MASTER_PORT")


@pytest.mark.parametrize("address", ["no.such.host.invalid", "-x", "$(touch hacked)", "a" * 300])
def test_a_world_whose_master_address_does_not_resolve_is_refused_before_the_rendezvous(tmp_path, monkeypatch,
                                                                                        jpeg_tree, address):
    from tutorial_lib.train import main

    for key in LAUNCHER_VARIABLES:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("MASTER_ADDR", address)
    monkeypatch.setenv("MASTER_PORT", "29613")
    monkeypatch.chdir(tmp_path)
    result = command_in_process(main, ["--dataset", "imagefolder", "--data-dir", str(jpeg_tree), "--output-root",
                                       "runs", "--name", "r", "--image-size", "16", "--epochs", "1", "--batch-size",
                                       "4", "--progress", "false", "--device", "cpu", "--max-steps-per-epoch", "1"])
    assert result.returncode == EXIT_REFUSED, result
    line = _one_line(result.stderr, "MASTER_ADDR: ")
    assert "does not resolve" in line and "Fix: " in line and len(line) < 400
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("address", ["127.0.0.1", "localhost", " 127.0.0.1 "])
def test_an_address_that_resolves_passes_the_rendezvous_check(address):
    from tutorial_lib.engine.distributed import check_rendezvous

    check_rendezvous({"MASTER_ADDR": address, "MASTER_PORT": "29500"})


@pytest.mark.parametrize("value", ["auto", "no", "false", "true", "on"])
def test_the_course_takes_each_value_of_02s_channels_last_it_documents(value):
    from tutorial_lib.course.runner import notebooks
    from tutorial_lib.course.values import check_parameter_values
    from tutorial_lib.yamlfile import parse_yaml

    check_parameter_values({"channels_last": parse_yaml(value, "-p channels_last")}, notebooks(["02"]))


@pytest.mark.parametrize("value", ["maybe", "1", "[true]"])
def test_the_course_refuses_a_channels_last_that_is_neither_auto_nor_on_off(tmp_path, monkeypatch, value):
    from tutorial_lib.course.runner import main

    monkeypatch.chdir(tmp_path)
    result = command_in_process(main, ["--only", "02", "-p", "channels_last", value, "--out", "out"])
    assert result.returncode == EXIT_REFUSED, result
    assert "Fix: " in _one_line(result.stderr, "parameters: channels_last")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("value", ["no", "off", "", 1, None])
def test_measuring_training_refuses_a_channels_last_that_is_neither_auto_nor_on_off(value):
    """The papermill path (a text ``-p channels_last no`` given to the notebook itself) reaches the library."""
    from tutorial_lib.bench.compute import measure_training
    from tutorial_lib.engine.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^channels_last: .*Fix: "):
        measure_training("resnet18", "fp32", value, 2, 16, 1, 0, "none", "cpu", 1, num_classes=2)


def test_the_notebook_parameter_check_takes_on_off_for_an_auto_default_only():
    from tutorial_lib.course.notebook import parameter_problem

    assert parameter_problem("auto", False) is None and parameter_problem("auto", True) is None
    assert parameter_problem("local", True) is not None and parameter_problem(3, True) is not None
