"""What the eighteenth re-run of issue 43 (/work/wt/notes/r43y-report.md) found at be938e4, each failing on the code
before (checked by reverting the library change):

* Z1: a table generator's record with a number of 400 digits: ``math.isfinite`` of it, or the float arithmetic of
  a whole number that passed, raised OverflowError (a traceback);
* Z2: a YAML whole number written in hex, octal or binary past 4,300 decimal digits (PyYAML reads those without
  Python's limit) reached a ``repr()`` in a message: a ValueError traceback.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import command_in_process
from tests.test_contract_rerun2 import _one_line
from tutorial_lib.exits import EXIT_REFUSED

HEX = "0x" + "f" * 4000  # 16,000 bits, about 4,817 decimal digits


@pytest.mark.parametrize("module, record, field", [
    ("shards_table", dict(kind="shards", status="ok", step="pack", set="s", files=10, shards=1, bytes=10**400,
                          seconds=1.0, load_average_1m=1.0, timestamp=1.0), "bytes"),
    ("extract_table", dict(kind="extract", status="ok", side="gnu_tar", round=0, disk_wait_s=5.0,
                           train_images=10**400, val_images=1, archive_bytes=1e8, seconds_to_disk=2.0,
                           load_average_1m=1.0, timestamp=1.0), "train_images"),
])
def test_a_table_record_of_a_number_past_float_is_named(tmp_path, module, record, field):
    import importlib

    generator = importlib.import_module(f"tutorial_lib.bench.{module}")
    results = tmp_path / "r.jsonl"
    paired = [record, {**record, "side": "prepare", "timestamp": 2.0}] if module == "extract_table" else [record]
    results.write_text("".join(json.dumps(r) + "\n" for r in paired))
    result = command_in_process(generator.main, [str(results)])
    assert result.returncode == EXIT_REFUSED, result
    line = _one_line(result.stderr, "results: ")
    assert f"{field} is " in line and "Fix: " in line and len(line) < 400


def test_a_course_parameter_in_hex_past_pythons_limit_is_refused_in_one_line(tmp_path, monkeypatch):
    from tutorial_lib.course.runner import main

    monkeypatch.chdir(tmp_path)
    result = command_in_process(main, ["--only", "02", "-p", "classes", HEX, "--out", "out"])
    assert result.returncode == EXIT_REFUSED, result
    assert "too large to use" in _one_line(result.stderr, "-p classes: ")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("written", [HEX, "0" + "7" * 5400, "0b" + "1" * 16000])
def test_yaml_refuses_a_whole_number_no_message_could_show(written):
    from tutorial_lib.yamlfile import YamlFileError, parse_yaml

    with pytest.raises(YamlFileError, match=r"^epochs: .*too large to use.*Fix: "):
        parse_yaml(f"epochs: {written}\n", "epochs")
    assert parse_yaml("epochs: 0x10\n", "epochs") == {"epochs": 16}


def test_a_notebook_parameter_past_pythons_limit_is_shown_by_its_size():
    from tutorial_lib.course.notebook import parameter_problem

    assert "16,001 bits" in parameter_problem(3, 16**4000)


def test_scale_records_at_no_size_of_the_table_make_no_table(tmp_path):
    """Z3: records at 5 files (no column of the table) printed rows of "-" alone, rc 0; --update wrote them."""
    from tutorial_lib.bench.scale_table import BEGIN, END, main

    results, doc = tmp_path / "r.jsonl", tmp_path / "doc.md"
    results.write_text("".join(json.dumps(dict(kind="scale", status="ok", step=step, form=form, files=5, seconds=1.0,
                                               load_average_1m=1.0, timestamp=1.0)) + "\n"
                               for step, form in (("build", "base"), ("prepare", "kaggle"))))
    doc.write_text(f"{BEGIN}\n| my | rows |\n{END}\n")
    for args in ([str(results)], [str(results), "--update", str(doc)]):
        result = command_in_process(main, args)
        assert result.returncode == EXIT_REFUSED, result
        assert "an empty table" in _one_line(result.stderr, "results: ")
    assert "| my | rows |" in doc.read_text()


@pytest.mark.parametrize("only, params, named", [
    # Z4: 1.6 million JPEGs (at least 90 GB) generated for days on a disk with less free
    ("02", ["classes", "100000", "device", "cpu"], "classes: a generated set of 1,800,000 JPEGs"),
    # Z5: the compiled settings a CPU runs were not counted
    ("01", ["compile_modes", "[default]", "bench_min_time", "1200"], "of 4 setting(s)"),
    ("01", ["compile_modes", "[none, default]", "bench_min_time", "300"], "of 8 setting(s)"),
    # Z6: no precision this device runs: every setting skipped, rc 0
    ("01", ["precisions", "[fp16, tf32]"], "precisions: ['fp16', 'tf32'] holds no precision this machine's cpu"),
])
def test_the_course_refuses_what_01_and_02_would_spend_days_or_nothing_on(tmp_path, monkeypatch, only, params, named):
    from tutorial_lib.course.runner import main

    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    monkeypatch.setattr("shutil.disk_usage", lambda path: type("usage", (), {"free": 50 * 10**9})())
    monkeypatch.chdir(tmp_path)
    pairs = [part for name, value in zip(params[::2], params[1::2], strict=True) for part in ("-p", name, value)]
    where = [] if only == "02" else ["-p", "backend", "local", "-p", "output_root", str(tmp_path / "runs")]
    result = command_in_process(main, ["--only", only, *pairs, *where, "-p", "data_dir", str(tmp_path / "d"),
                                       "--out", "out"])
    assert result.returncode == EXIT_REFUSED, result
    line = _one_line(result.stderr, "parameters: ")
    assert named in line and "Fix: " in line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("site", [{"partition": 10**5000}, {"python": 10**5000}])
def test_a_site_name_past_pythons_text_limit_is_refused_naming_it(tmp_path, site):
    """Z7: ``str()`` of the value, to match it, was Python's ValueError."""
    from tutorial_lib.engine.config import ConfigError, make_config
    from tutorial_lib.jobs.spec import make_spec

    cfg = make_config("smoke", output_root=str(tmp_path / "runs"), name="r", device="cpu")
    with pytest.raises(ConfigError, match=rf"^site.{next(iter(site))}: .*16,610 bits.*Fix: "):
        make_spec(cfg, site=site, on_cluster=True)


def test_an_only_that_matches_no_notebook_is_named_before_a_parameter(tmp_path, monkeypatch):
    """Z8: ``--only 00,02 -p data_dir d`` blamed -p data_dir, with the fix "add 00 to --only"."""
    from tutorial_lib.course.runner import main

    monkeypatch.chdir(tmp_path)
    result = command_in_process(main, ["--only", "00,02", "-p", "data_dir", "d", "--out", "out"])
    assert result.returncode == EXIT_REFUSED, result
    assert "Fix: give number prefixes" in _one_line(result.stderr, "--only: ")


@pytest.mark.parametrize("out", ["d", "d/o"])
def test_an_out_in_the_data_folder_is_refused_before_anything_is_written(tmp_path, monkeypatch, out):
    """Z9: --out was written into data_dir, then 00's third cell refused data_dir as a folder of other files."""
    from tutorial_lib.course.runner import main

    monkeypatch.chdir(tmp_path)
    result = command_in_process(main, ["--only", "00", "--out", out, "-p", "data_dir", "d"])
    assert result.returncode == EXIT_REFUSED, result
    assert "Fix: an --out outside the data_dir" in _one_line(result.stderr, "--out: ")
    assert list(tmp_path.iterdir()) == []


def test_milestones_past_pythons_text_limit_are_refused_in_one_line():
    """Z7: the message meant to refuse ``lr_milestones=[10**5000, 1]`` was str()'s ValueError."""
    from tutorial_lib.engine.config import ConfigError, make_config, validate

    with pytest.raises(ConfigError, match=r"^lr_milestones: .*too large to show.*Fix: "):
        validate(make_config("smoke", lr_milestones=[10**5000, 1]), check_paths=False)
