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
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import command_in_process
from tests.test_contract_rerun2 import _one_line
from tutorial_lib.exits import EXIT_REFUSED

LAUNCHER_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS",
                      "MASTER_ADDR", "MASTER_PORT")


@pytest.mark.parametrize("address", ["no.such.host.invalid", "-x", "$(touch hacked)", "a" * 300,
                                     # r43x Y8: torch takes the blank as set, and the IDNA-mapped digits as written
                                     " 127.0.0.1", "127.0.0.1\t", "\uff11\uff12\uff17.0.0.1", "127.0.0.1\xa0"])
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
    assert ("does not resolve" in line or "holds a blank" in line) and "Fix: " in line and len(line) < 400
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("address", ["127.0.0.1", "localhost", "::1"])
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


# ----------------------------------------------------------------------------------- r43x: the table generators
TABLE_RECORDS = [  # Y1 (tracebacks) and Y2 (an empty table, rc 0)
    ("scale_table", '{"kind": "scale", "status": "ok"}', "lacks the field 'step'"),
    ("scale_table", '{"kind": "scale", "status": "ok", "step": "build", "form": "base"}', "lacks the field 'files'"),
    ("scale_table", '{"kind": "scale", "status": "ok", "step": ["build"], "form": "base", "files": 1}',
     "step is ['build'], not a text"),
    ("extract_table", '{"kind": "extract", "status": "ok"}', "an empty table"),
    ("extract_table", '{"kind": "extract", "status": "ok", "side": "gnu_tar", "round": 0, "disk_wait_s": 5}',
     "lacks the field 'train_images'"),
    ("extract_table", '{"kind": "extract", "status": "ok", "side": "gnu_tar", "round": 0, "disk_wait_s": 5, '
     '"train_images": 900, "val_images": 100, "seconds_to_disk": 2.0}', "an empty table"),  # one side of a pair
    ("shards_table", '{"kind": "shards", "status": "ok", "step": "pack"}', "lacks the field"),
]


@pytest.mark.parametrize("module, line, said", TABLE_RECORDS)
def test_a_table_generator_names_the_record_it_cannot_read_and_leaves_the_document(tmp_path, module, line, said):
    import importlib

    generator = importlib.import_module(f"tutorial_lib.bench.{module}")
    results, doc = tmp_path / "r.jsonl", tmp_path / "doc.md"
    results.write_text(line + "\n")
    begin, end = next(iter(generator._BLOCKS.values()))[:2]
    doc.write_text(f"# mine\n{begin}\n| my | rows |\n{end}\n")
    before = doc.read_text()
    for args in ([str(results)], [str(results), "--update", str(doc)]):
        result = command_in_process(generator.main, args)
        assert result.returncode == EXIT_REFUSED, result
        message = _one_line(result.stderr, "results: ")
        assert said in message and "Fix: " in message
    assert doc.read_text() == before


def test_an_update_that_fails_on_a_later_document_writes_none(tmp_path):
    from tutorial_lib.bench.extract_table import TABLE_BEGIN, TABLE_END, TIME_BEGIN, TIME_END, main

    results = tmp_path / "r.jsonl"
    results.write_text('{"kind": "extract", "status": "ok", "side": "gnu_tar", "round": 0, "disk_wait_s": 5}\n')
    time_only, table = tmp_path / "a.md", tmp_path / "b.md"
    time_only.write_text(f"{TIME_BEGIN}\nold time\n{TIME_END}\n")
    table.write_text(f"{TABLE_BEGIN}\n| old |\n{TABLE_END}\n")
    result = command_in_process(main, [str(results), "--update", str(time_only), str(table)])
    assert result.returncode == EXIT_REFUSED, result
    assert "old time" in time_only.read_text() and "| old |" in table.read_text()


FIELD_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.floats(allow_nan=True),
                         st.text(max_size=6), st.lists(st.integers(0, 2), max_size=2), st.sampled_from(
                             ["gnu_tar", "prepare", "copy", "files", "shards", "pack", "stage", "load", "first_step",
                              "tar", "scan", "archives", "jpeg", "10k"]))
FIELD_NAMES = ["step", "form", "side", "set", "format", "round", "files", "train_images", "val_images", "workers",
               "archive_bytes", "bytes", "shards", "seconds", "seconds_to_disk", "images_per_sec", "goal_s",
               "load_average_1m", "disk_wait_s", "timestamp", "cold_cache"]


@settings(max_examples=60, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(module=st.sampled_from(["scale_table", "extract_table", "shards_table"]),
       records=st.lists(st.dictionaries(st.sampled_from(FIELD_NAMES), FIELD_VALUES, max_size=12), min_size=1,
                        max_size=4), block=st.integers(0, 1))
def test_records_of_any_shape_end_in_a_table_or_one_line(tmp_path, module, records, block):
    """Records of the benchmark's kind with fields missing, of other types, NaN: a table, or one line rc 2."""
    import importlib
    import json

    generator = importlib.import_module(f"tutorial_lib.bench.{module}")
    kind = {"scale_table": "scale", "extract_table": "extract", "shards_table": "shards"}[module]
    results = tmp_path / "r.jsonl"
    results.write_text("".join(json.dumps({"kind": kind, "status": "ok", **record}) + "\n" for record in records))
    names = list(generator._BLOCKS)
    flag = [f"--{names[block]}"] if block < len(names) and block else []
    result = command_in_process(generator.main, [str(results), *flag])  # a traceback fails here
    assert result.returncode in (0, EXIT_REFUSED), result
    if result.returncode:
        assert "Fix: " in _one_line(result.stderr, "results: ")
    else:
        assert result.stdout.strip() and "nan" not in result.stdout.lower()


# ----------------------------------------------------------------------------------- r43x: the course's device
@pytest.mark.parametrize("params, named", [
    (["loader_batches", "1000000", "bench_repeats", "3", "device", "cpu"], "loader_batches: "),  # Y3: 2 h on a CPU
    (["device", "cuda"], "device: cuda"),  # a RuntimeError in 02's tenth cell, on a machine without a GPU
    # Y5: a loader_batches of 1 was named, the fix's example left 2.5 h
    (["batch_size", "100000000", "loader_batches", "1", "device", "cpu"], "batch_size: 100000000"),
])
def test_the_course_judges_02_by_the_device_it_runs_on(tmp_path, monkeypatch, params, named):
    from tutorial_lib.course.runner import main

    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    monkeypatch.setattr("tutorial_lib.engine.memory.available_bytes", lambda device="cpu": 1 << 60)  # the rounds
    monkeypatch.chdir(tmp_path)  # are judged here, not the memory
    pairs = [part for name, value in zip(params[::2], params[1::2], strict=True) for part in ("-p", name, value)]
    result = command_in_process(main, ["--only", "02", *pairs, "--out", "out"])
    assert result.returncode == EXIT_REFUSED, result
    line = _one_line(result.stderr, f"parameters: {named}")
    assert "Fix: " in line and "bench_min_time 2" not in line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("params, settings", [  # Y6: fp32's layouts alone were counted; a CPU times bf16 too
    (["bench_min_time", "600"], 4), (["precisions", "[fp32, bf16]", "bench_min_time", "600"], 4),
    (["channels_last_options", "[false]", "bench_min_time", "1200"], 2),
])
def test_the_course_counts_each_precision_01s_device_runs(tmp_path, monkeypatch, params, settings):
    from tutorial_lib.course.runner import main

    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    monkeypatch.chdir(tmp_path)
    pairs = [part for name, value in zip(params[::2], params[1::2], strict=True) for part in ("-p", name, value)]
    result = command_in_process(main, ["--only", "01", *pairs, "-p", "backend", "local", "--out", "out"])
    assert result.returncode == EXIT_REFUSED, result
    assert f"of {settings} setting(s)" in _one_line(result.stderr, "parameters: bench_min_time: ")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("only, params, named", [
    ("04", ["global_batches", "[16, 16]"], "job 04-warmup0-batch_size16: planned twice"),  # Y4: the second at sbatch
    ("06", ["scale_values", "[2, 2]"], "job 06-scale-ranks_per_node2: planned twice"),
])
def test_a_list_that_plans_one_job_twice_is_refused_before_any_job(tmp_path, monkeypatch, only, params, named):
    from tutorial_lib.course.runner import main

    monkeypatch.chdir(tmp_path)
    result = command_in_process(main, ["--only", only, "-p", *params, *_local(only), "--out", "out"])
    assert result.returncode == EXIT_REFUSED, result
    line = _one_line(result.stderr, "parameters: ")
    assert named in line and params[0] in line and "Fix: " in line
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------------- r43x: Y9-Y13
@pytest.mark.parametrize("only, params, named", [
    ("02", ["batch_size", "100000", "device", "cpu"], "image_size/batch_size: "),  # Y9: no estimate, set made first
    ("07", ["seed", "4294967296"], "seed: "),  # Y10: refused by the experiment's cell, after the all-reduce job
])
def test_the_course_refuses_what_a_later_cell_would(tmp_path, monkeypatch, only, params, named):
    from tutorial_lib.course.runner import main

    monkeypatch.setattr("tutorial_lib.engine.memory.available_bytes", lambda device="cpu": 8 << 30)
    monkeypatch.chdir(tmp_path)
    pairs = [part for name, value in zip(params[::2], params[1::2], strict=True) for part in ("-p", name, value)]
    result = command_in_process(main, ["--only", only, *pairs, *_local(only), "--out", "out"])
    assert result.returncode == EXIT_REFUSED, result
    assert "Fix: " in _one_line(result.stderr, f"parameters: {named}")
    assert list(tmp_path.iterdir()) == []


def test_submit_names_an_output_root_holding_a_nul(tmp_path):
    """Y11: a TrainConfig changed with dataclasses.replace skips make_config's check; submit's was a ValueError."""
    import dataclasses

    from tutorial_lib import jobs
    from tutorial_lib.engine.config import make_config
    from tutorial_lib.engine.errors import ConfigError

    cfg = make_config("smoke", output_root=str(tmp_path / "runs"), name="r", device="cpu")
    with pytest.raises(ConfigError, match=r"^output_root: .*NUL.*Fix: "):
        jobs.submit(dataclasses.replace(cfg, output_root="a\x00b"), backend="local")
    assert list(tmp_path.iterdir()) == []


def test_a_whole_number_past_pythons_text_limit_is_named_where_it_is(tmp_path):
    """Y12: 5,000 digits in a YAML file, or as a site's env value through the API: Python's own ValueError."""
    from tutorial_lib.engine.config import make_config
    from tutorial_lib.engine.errors import ConfigError, shorten
    from tutorial_lib.jobs.spec import make_spec
    from tutorial_lib.yamlfile import YamlFileError, read_yaml

    site = tmp_path / "site.yaml"
    site.write_text("env:\n  A: " + "9" * 5000 + "\n")
    with pytest.raises(YamlFileError, match=r"^site '.*site.yaml'.*line 2.*5,000 characters.*Fix: "):
        read_yaml(site, "site")
    cfg = make_config("smoke", output_root=str(tmp_path / "runs"), name="r", device="cpu")
    with pytest.raises(ConfigError, match=r"^site.env.A: .*Fix: quote"):
        make_spec(cfg, site={"env": {"A": 10**5000}}, on_cluster=True)
    assert "bits" in shorten(10**5000)


@pytest.mark.parametrize("params, named", [
    ({"classes": 0}, "classes: 0"), ({"channels_last": "no"}, "channels_last: 'no'"),
])
def test_a_notebook_papermill_runs_alone_refuses_in_its_first_cell_what_the_course_refuses(params, named):
    """Y13: ``papermill 02... -p classes 0`` was a ZeroDivisionError in the fourth cell, ``channels_last no`` a
    ConfigError in the tenth, after the set was generated and the loader timed."""
    from tutorial_lib.course.notebook import NotebookParameterError, _parameters_cell
    from tutorial_lib.course.runner import notebooks
    from tutorial_lib.course.setup import check_injected_values

    cell = _parameters_cell(notebooks(["02"])[0])
    injected = "# Parameters\n" + "".join(f"{name} = {value!r}\n" for name, value in params.items())
    with pytest.raises(NotebookParameterError, match=rf"^parameters: {named}.*Fix: .*given with papermill"):
        check_injected_values(["", cell, injected])
    check_injected_values(["", cell, "# Parameters\nclasses = 3\nchannels_last = False\n"])  # values it takes


HUGE_INT = 10**5000  # past Python's int-to-text limit: repr(), str() and f"{x:,}" raise ValueError


@pytest.mark.parametrize("case", ["site time", "experiment steps", "lab rate", "lab nodes", "sweep value",
                                  "sweep nodes"])
def test_the_api_names_a_whole_number_past_pythons_text_limit(tmp_path, case):
    """Y12 widened: each a bare ValueError from the message meant to refuse it."""
    import dataclasses

    from tutorial_lib import jobs
    from tutorial_lib import param_server as ps
    from tutorial_lib.engine.config import make_config
    from tutorial_lib.jobs.netlab import Lab
    from tutorial_lib.jobs.spec import make_spec

    cfg = make_config("smoke", output_root=str(tmp_path / "runs"), name="r", device="cpu")
    calls = {
        "site time": lambda: make_spec(cfg, site={"time": HUGE_INT}, on_cluster=True),
        "experiment steps": lambda: ps.check_experiment(dataclasses.replace(ps.ExperimentConfig(), steps=HUGE_INT)),
        "lab rate": lambda: Lab(rate_mbit=HUGE_INT), "lab nodes": lambda: Lab(nodes=HUGE_INT),
        "sweep value": lambda: jobs.sweep(cfg, over="batch_size", values=[2, HUGE_INT], backend="local"),
        "sweep nodes": lambda: jobs.sweep(cfg, over="nodes", values=[HUGE_INT], backend="local"),
    }
    with pytest.raises(ValueError, match=r"a whole number of 16,610 bits.*Fix: ") as caught:
        calls[case]()
    assert type(caught.value).__name__ != "ValueError" and len(str(caught.value)) < 400
    assert list(tmp_path.iterdir()) == []


def _local(only: str) -> list[str]:
    """``-p backend local`` for a notebook that runs jobs (02 has no backend: the course refuses it there)."""
    return [] if only == "02" else ["-p", "backend", "local"]


@pytest.mark.parametrize("only, name, value", [("00", "channels_last", "no"), ("01", "classes", "3")])
def test_a_parameter_of_a_notebook_not_run_is_refused_naming_its_notebook(tmp_path, monkeypatch, only, name, value):
    """Y7: ``--only 00 -p channels_last no`` ran 00 (rc 0), the value used by nothing."""
    from tutorial_lib.course.runner import main

    monkeypatch.chdir(tmp_path)
    result = command_in_process(main, ["--only", only, "-p", name, value, "--out", "out"])
    assert result.returncode == EXIT_REFUSED, result
    line = _one_line(result.stderr, "-p: ")
    assert f"{name!r} is a parameter of notebook 02" in line and "Fix: add 02 to --only" in line
    assert list(tmp_path.iterdir()) == []
