"""What the nineteenth re-run of issue 43 (/work/wt/notes/r43z-report.md) found at 7cf3738, each failing on the code
before (checked by reverting the library change):

* A1: ``lr_milestones`` holding an increasing list whose last epoch is past Python's 4,300 digits was accepted by
  ``validate``; ``jobs.submit`` then raised str()'s ValueError while writing the job's command line, after the run
  folder was made.
* A2: two valid scale times whose ratio underflows to 0.0: ``math.log`` of it, a traceback.
* A3: 02's set was bounded by 0.3 B a pixel (its JPEGs take 0.57 or more) and not by its generation time: 640,000
  JPEGs, about 18 h here, were accepted.
* A4: 02 raises its images per class to fill ``loader_batches`` batches; the course counted ``per_class`` alone, and
  the notebook refused the set in its fourth cell (or made it for hours), blaming ``classes``.
* A5: a benchmark list naming a setting twice (``compile_modes '[default, default]'``) was timed twice, counted once.
* A6: ``compile_modes '[reduce-overhead]'`` on a CPU: every setting skipped, rc 0.
* A7: an ``--out`` reaching ``data_dir`` through a symbolic link was written into the data folder.
* A8: ``sweep(over='lr_milestones', values=[[1], [2]])`` was refused naming ``name`` (the sweep's own suffix
  ``[1]``).
"""

from __future__ import annotations

import re

import pytest

from tutorial_lib.engine.config import ConfigError, make_config, validate


@pytest.mark.parametrize("milestones", [[10**5000], [1, 10**5000], (10**5000,), [30, 2**31]])
def test_a_milestone_no_run_reaches_is_refused_by_validate(milestones):
    """A1: refused naming lr_milestones, in one line with its fix, before anything is written."""
    with pytest.raises(ConfigError, match=r"^lr_milestones: must be epochs of at most 2,147,483,647.*Fix: ") as refused:
        validate(make_config("smoke", lr_milestones=milestones), check_paths=False)
    assert "\n" not in str(refused.value) and len(str(refused.value)) < 300


def test_the_largest_milestone_a_run_can_count_is_taken():
    """The bound is the trainer's count limit: 2**31 - 1 epochs is still a milestone."""
    cfg = make_config("smoke", lr_milestones=[30, 2**31 - 1])
    validate(cfg, check_paths=False)
    assert cfg.lr_milestones == [30, 2**31 - 1]


def test_a_milestone_too_large_is_refused_before_submit_makes_the_run_folder(tmp_path):
    """A1: through ``jobs.submit`` the refusal comes before the run folder exists."""
    from tutorial_lib import jobs

    cfg = make_config("smoke", output_root=str(tmp_path / "runs"), name="r", lr_milestones=[10**5000])
    with pytest.raises(ConfigError, match=r"^lr_milestones: "):
        jobs.submit(cfg, backend="local")
    assert not (tmp_path / "runs").exists()


def _scale_record(files: int, seconds: float) -> dict:
    return dict(kind="scale", status="ok", step="prepare", form="kaggle", files=files, seconds=seconds,
                load_average_1m=1.0, timestamp=float(files))


@pytest.mark.parametrize("small, large", [(10_000, 1_331_167), (100_000, 1_331_167)])
@pytest.mark.parametrize("update", [False, True])
def test_two_valid_times_whose_ratio_underflows_give_a_growth(tmp_path, small, large, update):
    """A2: 5e-324 s after 1e18 s: their ratio is 0.0, and ``math.log`` of it was a ValueError traceback."""
    import json

    from tests.conftest import command_in_process
    from tutorial_lib.bench.scale_table import BEGIN, END, main

    results, doc = tmp_path / "r.jsonl", tmp_path / "doc.md"
    results.write_text("".join(json.dumps(_scale_record(files, seconds)) + "\n"
                               for files, seconds in ((small, 1e18), (large, 5e-324))))
    doc.write_text(f"{BEGIN}\n| my | rows |\n{END}\n")
    result = command_in_process(main, [str(results), *(["--update", str(doc)] if update else [])])
    assert result.returncode == 0, result
    table = doc.read_text() if update else result.stdout
    row = next(line for line in table.splitlines() if line.startswith("| prepare | kaggle |"))
    assert "linear or better" in row and "nan" not in row


def test_the_growth_of_ordinary_times_is_unchanged():
    """The difference of logs is the log of the ratio: seconds ~ files**2 still gives k = 2."""
    from tutorial_lib.bench.scale_table import growth

    assert growth({10_000: 1.0, 1_000_000: 10_000.0}) == pytest.approx(2.0)
    assert growth({10_000: 2.0, 1_000_000: 2.0}) == pytest.approx(0.0)


@pytest.mark.parametrize("classes, free, named", [
    # A3: 640,000 JPEGs of 500x375 px and 80,000 for validation: ~80 GB (0.3 B a pixel said 36 GB) and ~18 h here;
    # 2 cores, 70.7 GB free
    ("40000", 70_700_000_000, "takes at least 3.8 h to make on 2 core(s)"),
    ("40000", 50_000_000_000, "takes at least 67.5 GB on disk"),
])
def test_the_course_refuses_a_set_02_cannot_generate_within_its_disk_and_hour(tmp_path, monkeypatch, classes, free,
                                                                             named):
    from tests.conftest import command_in_process
    from tests.test_contract_rerun2 import _one_line
    from tutorial_lib.course.runner import main
    from tutorial_lib.exits import EXIT_REFUSED

    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    monkeypatch.setattr("shutil.disk_usage", lambda path: type("usage", (), {"free": free})())
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    monkeypatch.chdir(tmp_path)
    result = command_in_process(main, ["--only", "02", "-p", "classes", classes, "-p", "device", "cpu",
                                       "-p", "data_dir", str(tmp_path / "d"), "--out", "out"])
    assert result.returncode == EXIT_REFUSED, result
    line = _one_line(result.stderr, "parameters: ")
    assert "classes: a generated set of 720,000 JPEGs of 500x375 px " + named in line and "Fix: " in line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("images, cores, fits", [(80_000, 2, True), (150_000, 2, True), (300_000, 2, False),
                                                 (640_000, 16, True)])
def test_a_set_is_refused_where_even_the_fastest_generator_takes_over_the_hour(tmp_path, monkeypatch, images, cores,
                                                                               fits):
    """The bound is a lower one (5 million pixels a second a core, ~2x what this machine's made): sets that may
    finish within the hour pass."""
    from tutorial_lib.bench.fake_imagenet import check_set_fits

    monkeypatch.setattr("shutil.disk_usage", lambda path: type("usage", (), {"free": 10**15})())
    monkeypatch.setattr("os.cpu_count", lambda: cores)
    if fits:
        check_set_fits(tmp_path, images, (500, 375))
    else:
        with pytest.raises(ConfigError, match=r"^classes: .* h to make on 2 core\(s\).*Fix: "):
            check_set_fits(tmp_path, images, (500, 375))


def _course(tmp_path, monkeypatch, only: str, params: list[str], free: int = 50 * 10**9):
    """The course's command in process on a CPU with ``free`` bytes of disk; returns its result."""
    from tests.conftest import command_in_process
    from tutorial_lib.course.runner import main

    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    monkeypatch.setattr("shutil.disk_usage", lambda path: type("usage", (), {"free": free})())
    monkeypatch.chdir(tmp_path)
    pairs = [part for name, value in zip(params[::2], params[1::2], strict=True) for part in ("-p", name, value)]
    where = [] if only == "02" else ["-p", "backend", "local", "-p", "output_root", str(tmp_path / "runs")]
    return command_in_process(main, ["--only", only, *pairs, *where, "-p", "data_dir", str(tmp_path / "d"),
                                     "--out", "out"])


@pytest.mark.parametrize("params, free, named", [
    # A4: 20,000 batches of 64 make 02 generate 1,440,288 JPEGs (81 GB): refused in its fourth cell, naming classes
    (["loader_batches", "20000", "batch_size", "64", "workers_list", "[0]"], 55 * 10**9,
     "loader_batches: a generated set of 1,440,288 JPEGs of 500x375 px takes at least"),
    # ...and 5,000 batches: 360,000 JPEGs, ~40 GB, generated for hours on a disk that holds them
    (["loader_batches", "5000", "batch_size", "64", "workers_list", "[0]"], 10**15,
     "loader_batches: a generated set of 360,288 JPEGs of 500x375 px takes at least 3.8 h to make on 1 core(s)"),
])
def test_the_course_counts_the_set_02_makes_for_its_batches(tmp_path, monkeypatch, params, free, named):
    from tests.test_contract_rerun2 import _one_line
    from tutorial_lib.exits import EXIT_REFUSED

    monkeypatch.setattr("os.cpu_count", lambda: 1)
    result = _course(tmp_path, monkeypatch, "02", [*params, "device", "cpu"], free)
    assert result.returncode == EXIT_REFUSED, result
    line = _one_line(result.stderr, "parameters: ")
    assert named in line and "Fix: fewer images, e.g. -p loader_batches 4 -p batch_size 8" in line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("only, params, named", [
    # A5: each entry is timed
    ("01", ["compile_modes", "[default, default]"], "compile_modes: 'default' is listed twice"),
    ("01", ["precisions", "[fp32, fp32]"], "precisions: 'fp32' is listed twice"),
    ("01", ["channels_last_options", "[false, false]"], "channels_last_options: False is listed twice"),
    ("02", ["workers_list", "[0, 1, 0]", "device", "cpu"], "workers_list: 0 is listed twice"),
    # A6: no compile mode this device runs
    ("01", ["compile_modes", "[reduce-overhead]"], "compile_modes: ['reduce-overhead'] holds no compile mode this "
                                                   "machine's cpu runs (reduce-overhead uses CUDA graphs"),
])
def test_the_course_refuses_benchmark_lists_it_would_time_twice_or_not_at_all(tmp_path, monkeypatch, only, params,
                                                                            named):
    from tests.test_contract_rerun2 import _one_line
    from tutorial_lib.exits import EXIT_REFUSED

    result = _course(tmp_path, monkeypatch, only, params)
    assert result.returncode == EXIT_REFUSED, result
    line = _one_line(result.stderr, "parameters: ")
    assert named in line and "Fix: " in line
    assert list(tmp_path.iterdir()) == []


def test_a_list_with_one_runnable_compile_mode_is_counted_by_what_runs():
    """[none, reduce-overhead] on a CPU: the eager mode runs, so it is taken, and counted as one mode."""
    from tutorial_lib.course.values import _settings_at_least

    values = {"compile_modes": ["none", "reduce-overhead"], "channels_last_options": [False, True],
              "precisions": ["fp32"], "device": "cpu"}
    assert _settings_at_least(values) == 2


@pytest.mark.parametrize("link_at", ["out", "inside"])
def test_an_out_reaching_the_data_dir_through_a_link_is_refused_before_anything_is_written(tmp_path, monkeypatch,
                                                                                           link_at):
    """A7: compared by their real paths."""
    from tests.conftest import command_in_process
    from tests.test_contract_rerun2 import _one_line
    from tutorial_lib.course.runner import main
    from tutorial_lib.exits import EXIT_REFUSED

    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "lnk").symlink_to(real)
    out = tmp_path / "lnk" if link_at == "out" else tmp_path / "lnk" / "o"
    monkeypatch.chdir(tmp_path)
    result = command_in_process(main, ["--only", "00", "--out", str(out), "-p", "data_dir", str(real),
                                       "-p", "output_root", str(tmp_path / "runs")])
    assert result.returncode == EXIT_REFUSED, result
    assert "Fix: an --out outside the data_dir" in _one_line(result.stderr, "--out: ")
    assert list(real.iterdir()) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["lnk", "real"]


@pytest.mark.parametrize("values, names", [
    ([[1], [2]], ["r-lr_milestones1", "r-lr_milestones2"]),
    ([[30, 60], []], ["r-lr_milestones30_60", "r-lr_milestonesnone"]),
])
def test_a_sweep_over_milestones_names_its_jobs_with_safe_suffixes(values, names):
    """A8: the sweep's suffix was the list's text ('[1]'), refused as the user's ``name``."""
    from tutorial_lib.jobs.sweep_plan import sweep_plan

    planned = sweep_plan(make_config("smoke", name="r"), "lr_milestones", values)
    assert [cfg.name for cfg, _ in planned] == names
    assert [cfg.lr_milestones for cfg, _ in planned] == [list(v) for v in values]


# The twentieth re-run (r43aa, /work/wt/notes/r43aa-report.md) at 07eb6e3: the generated set's API.
# * B1: prepare_fake_imagenet blamed ``classes`` for a set its batches sized, with a fix the caller had followed;
# * B2: a count past 4,300 digits: str()'s ValueError in the message that refused it;
# * B3: prepare_fake_imagenet took ``batch_size=-64`` (used nowhere); ``classes=0`` was a ZeroDivisionError and
#   ``size=(0, 375)`` a numpy ValueError.

@pytest.mark.parametrize("batch_size, loader_batches, named", [(64, 20000, "loader_batches"),
                                                               (400000, 4, "batch_size")])
def test_prepare_blames_the_batches_that_size_its_set(tmp_path, batch_size, loader_batches, named):
    from tutorial_lib.bench.fake_imagenet import prepare_fake_imagenet

    with pytest.raises(ConfigError, match=rf"^{named}: a generated set of .* Fix: a smaller batch_size or fewer "
                                          r"loader_batches"):
        prepare_fake_imagenet(tmp_path / "f", 2, 16, (500, 375), batch_size, loader_batches, "cpu")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("maker", ["make_fake_imagenet", "prepare_fake_imagenet"])
def test_a_count_past_pythons_text_limit_is_refused_by_its_size(tmp_path, maker):
    import tutorial_lib.bench.fake_imagenet as fake

    with pytest.raises(ConfigError, match=r"^per_class: a generated set of about 2\^16610 JPEGs .* Fix: ") as refused:
        getattr(fake, maker)(tmp_path / "f", 2, 10**5000)
    assert len(str(refused.value)) < 400
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("arguments, named", [
    (dict(classes=0), "classes: expected a whole number of at least 1, got 0"),
    (dict(per_class=-1), "per_class: expected a whole number of at least 1, got -1"),
    (dict(batch_size=-64), "batch_size: expected a whole number of at least 1, got -64"),
    (dict(loader_batches=0), "loader_batches: expected a whole number of at least 1, got 0"),
    (dict(classes=2.5), "classes: expected a whole number of at least 1, got 2.5"),
    (dict(classes="2"), "classes: expected a whole number of at least 1, got '2'"),
    (dict(size=(0, 375)), "size: expected (width, height) in whole pixels from 1 to 65,500, got (0, 375)"),
    (dict(size="500x375"), "size: expected (width, height)"),
    (dict(size=(60000, 60000)), "size: generating one 60000x60000 image needs at least 461 GB of memory"),
])
def test_prepare_refuses_counts_and_sizes_it_cannot_use(tmp_path, monkeypatch, arguments, named):
    from tutorial_lib.bench.fake_imagenet import prepare_fake_imagenet

    monkeypatch.setattr("tutorial_lib.engine.memory.available_bytes", lambda device="cpu": 16 * 10**9)
    taken = dict(classes=2, per_class=16, size=(500, 375), batch_size=8, loader_batches=4, device="cpu")
    with pytest.raises(ConfigError) as refused:
        prepare_fake_imagenet(tmp_path / "f", **{**taken, **arguments})
    assert str(refused.value).startswith(named) and "Fix: " in str(refused.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("arguments, named", [(dict(quality=101), "quality: expected a whole number from 1 to 100"),
                                              (dict(val_per_class=-1), "val_per_class: expected a whole number of "
                                                                       "at least 0"),
                                              (dict(workers=0), "workers: expected a whole number of at least 1")])
def test_make_refuses_counts_it_cannot_use(tmp_path, arguments, named):
    from tutorial_lib.bench.fake_imagenet import make_fake_imagenet

    with pytest.raises(ConfigError, match="^" + re.escape(named)):
        make_fake_imagenet(tmp_path / "f", 2, 4, (32, 24), **arguments)
    assert list(tmp_path.iterdir()) == []


def test_the_least_set_is_still_made(tmp_path):
    """The smallest values each argument takes: one class, one image, a 1x1 JPEG, no validation images."""
    from tutorial_lib.bench.fake_imagenet import make_fake_imagenet

    root = make_fake_imagenet(tmp_path / "f", 1, 1, (1, 1), val_per_class=0, quality=1, workers=1)
    assert [p.name for p in (root / "train").rglob("*.JPEG")] == ["n00000000_0.JPEG"]


# * B4: a sweep given one list twice: the refusal's own example hashed the lists (TypeError);
# * B5: 1 and 1.0, 0.0 and -0.0 swept as two jobs of one setting;
# * B6: a value making a run name over 100 characters was refused as the user's ``name``.

@pytest.mark.parametrize("over, values, twice", [("lr_milestones", [[30, 60], [30, 60]], "[30, 60]"),
                                                 ("base_lr", [1, 1.0], "1.0"),
                                                 ("weight_decay", [0.0, -0.0], "-0.0")])
def test_a_sweep_refuses_one_setting_given_twice(over, values, twice):
    from tutorial_lib.jobs.sweep_plan import sweep_plan

    with pytest.raises(ConfigError, match=rf"^values: {re.escape(twice)} is given twice.*Fix: give each value once, "
                                          rf"e\.g\. values=\[{re.escape(str(values[0]))}\]"):
        sweep_plan(make_config("smoke", name="r"), over, values)


def test_a_sweep_value_making_a_name_too_long_is_refused_naming_values():
    from tutorial_lib.jobs.sweep_plan import sweep_plan

    with pytest.raises(ConfigError, match=r"^values: \[1, 2, .* \(199 items\) makes the run name .* "
                                          r"\(702 characters\), over the 100 characters a run name may have.*Fix: "):
        sweep_plan(make_config("smoke", name="r"), "lr_milestones", [list(range(1, 200))])


def test_a_sweep_of_distinct_values_is_planned():
    from tutorial_lib.jobs.sweep_plan import sweep_plan

    planned = sweep_plan(make_config("smoke", name="r"), "base_lr", [0.1, 0.2, 1])
    assert [cfg.name for cfg, _ in planned] == ["r-base_lr0.1", "r-base_lr0.2", "r-base_lr1"]


def test_bench_shards_names_jpeg_images_for_a_set_it_cannot_make_within_the_hour(tmp_path, monkeypatch):
    """B7: the set of ``--jpeg-images`` was refused naming ``classes``, a flag shards does not have."""
    from tests.conftest import command_in_process
    from tutorial_lib.bench.cli import main
    from tutorial_lib.exits import EXIT_REFUSED

    monkeypatch.setattr("os.cpu_count", lambda: 2)
    result = command_in_process(main, ["shards", "--work-dir", str(tmp_path / "sh"), "--sets", "jpeg",
                                       "--jpeg-images", "400000"])
    assert result.returncode == EXIT_REFUSED, result
    assert "--jpeg-images: a generated set of 400,100 JPEGs" in result.stderr and "Fix: fewer --jpeg-images" in \
        result.stderr
    assert not (tmp_path / "sh" / "jpeg-400000").exists()


@pytest.mark.parametrize("layouts", ["on,true", "off,0", "yes,1"])
def test_bench_train_refuses_a_layout_given_twice_in_two_spellings(layouts):
    """B8: the items were compared as text before ``parse_bool``: one layout was timed twice."""
    from tests.conftest import command_in_process
    from tutorial_lib.bench.cli import main
    from tutorial_lib.exits import EXIT_REFUSED

    result = command_in_process(main, ["train", "--device", "cpu", "--image-size", "16", "--batch-size", "2",
                                       "--steps", "2", "--channels-last", layouts])
    assert result.returncode == EXIT_REFUSED, result
    assert "--channels-last" in result.stderr and "repeated item" in result.stderr


@pytest.mark.parametrize("params, named", [
    # B9: 2**31 epochs drawn at 20 points an epoch for each batch: cell 5 never ended
    (["imagenet_epochs", "2147483648"], "imagenet_epochs: 2147483648 is over 1,000"),
    # B10: a warmup longer than the schedule was drawn
    (["imagenet_warmup_epochs", "2147483648"], "imagenet_warmup_epochs: a warmup of 2147483648 epochs in a schedule "
                                               "of 90 epochs"),
    (["imagenet_epochs", "4"], "imagenet_epochs: a warmup of 5 epochs in a schedule of 4 epochs"),
])
def test_the_course_refuses_an_imagenet_schedule_04_cannot_draw(tmp_path, monkeypatch, params, named):
    from tests.test_contract_rerun2 import _one_line
    from tutorial_lib.exits import EXIT_REFUSED

    result = _course(tmp_path, monkeypatch, "04", params)
    assert result.returncode == EXIT_REFUSED, result
    line = _one_line(result.stderr, "parameters: ")
    assert named in line and "Fix: " in line
    assert list(tmp_path.iterdir()) == []


# * B11: 07's allreduce_sizes '4K,4K' reached the job's bench, which refused it after the submit; '4K,4096' measured
#   4 KiB twice;
# * B12: make_fake_imagenet(size=(15000, 15000)) allocated first: a MemoryError, its half-made folder left behind.

@pytest.mark.parametrize("params, named", [
    (["allreduce_sizes", "4K,4K"], "allreduce_sizes: '4K' is 4,096 bytes again"),
    (["allreduce_sizes", "4K,4096"], "allreduce_sizes: '4096' is 4,096 bytes again"),
    (["netlab_sizes", "1M,64K,1M"], "netlab_sizes: '1M' is 1,048,576 bytes again"),
    (["staleness", "[0, 1, 0]"], "staleness: 0 is listed twice"),
    (["netlab_rates_mbit", "[200, 200]"], "netlab_rates_mbit: 200 is listed twice"),
])
def test_the_course_refuses_07s_lists_with_a_repeated_entry(tmp_path, monkeypatch, params, named):
    from tests.test_contract_rerun2 import _one_line
    from tutorial_lib.exits import EXIT_REFUSED

    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    monkeypatch.chdir(tmp_path)
    from tests.conftest import command_in_process
    from tutorial_lib.course.runner import main

    result = command_in_process(main, ["--only", "07", "-p", params[0], params[1], "-p", "backend", "local",
                                       "-p", "output_root", str(tmp_path / "runs"), "--out", "out"])
    assert result.returncode == EXIT_REFUSED, result
    line = _one_line(result.stderr, "parameters: ")
    assert named in line and "Fix: list each" in line
    assert list(tmp_path.iterdir()) == []


def test_make_estimates_one_images_memory_before_making_anything(tmp_path, monkeypatch):
    """B12: refused with the estimate, and no folder is made."""
    from tutorial_lib.bench.fake_imagenet import make_fake_imagenet

    monkeypatch.setattr("tutorial_lib.engine.memory.available_bytes", lambda device="cpu": 2 * 10**9)
    with pytest.raises(ConfigError, match=r"^size: generating one 15000x15000 image needs at least 28.8 GB"):
        make_fake_imagenet(tmp_path / "f", 2, 100, (15000, 15000))
    assert list(tmp_path.iterdir()) == []


def test_a_set_that_fails_midway_leaves_no_folder_behind(tmp_path, monkeypatch):
    """B12: the staging folder of a generation that raised was left beside the user's folders."""
    import tutorial_lib.bench.fake_imagenet as fake

    def fails(*args):
        raise MemoryError("Unable to allocate")

    monkeypatch.setattr(fake, "_fake_image", fails)
    with pytest.raises(MemoryError):
        fake.make_fake_imagenet(tmp_path / "f", 2, 4, (32, 24), workers=1, processes=False)
    assert list(tmp_path.iterdir()) == []


# * B6: the safe-name refusal did not say a name's length (100) nor that it starts with a letter or digit;
# * B13: jobs.metrics_table of a path that does not exist: an empty table;
# * B14: ``bench runs RUN --out RUN/metrics.jsonl`` appended a record to the run's own log;
# * B15: ``bench runs RUN RUN`` (or a link to it): two records of one run;
# * B16: ``course -p seed 1 -p seed 2``: the first value used nowhere;
# * B17: a table generator's ``--update`` naming a FIFO waited for a writer.

@pytest.mark.parametrize("name", ["-x", ".", "n" * 101])
def test_the_name_refusal_says_each_rule_a_name_breaks(name):
    from tutorial_lib.engine.config import validate_name

    with pytest.raises(ConfigError, match=r"1 to 100 ASCII letters \(a-z, A-Z\), digits.*starting with a letter or "
                                          r"digit.*Fix: "):
        validate_name(name)


def test_metrics_table_refuses_a_run_that_does_not_exist(tmp_path):
    from tutorial_lib import jobs

    with pytest.raises(FileNotFoundError, match=r"^run_dir_or_file: .*nope' does not exist\. Fix: "):
        jobs.metrics_table(tmp_path / "nope")
    (tmp_path / "pending").mkdir()
    (tmp_path / "pending" / "job.json").write_text("{}")
    assert jobs.metrics_table(tmp_path / "pending").empty  # a run that has not logged yet


def _a_run(tmp_path):
    from tutorial_lib.rundir.layout import METRICS_FILE

    run = tmp_path / "run1"
    run.mkdir()
    (run / METRICS_FILE).write_text('{"event": "start", "time": 1.0}\n')
    return run


@pytest.mark.parametrize("out", ["run1/metrics.jsonl", "run1/more.jsonl", "link/metrics.jsonl"])
def test_bench_runs_refuses_an_out_inside_a_run_it_reads(tmp_path, monkeypatch, out):
    from tests.conftest import command_in_process
    from tutorial_lib.bench.cli import main
    from tutorial_lib.exits import EXIT_REFUSED

    run = _a_run(tmp_path)
    (tmp_path / "link").symlink_to(run)
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    monkeypatch.chdir(tmp_path)
    result = command_in_process(main, ["runs", "run1", "--out", out])
    assert result.returncode == EXIT_REFUSED, result
    assert "--out: " in result.stderr and "Fix: a file outside every run directory" in result.stderr
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before


@pytest.mark.parametrize("second", ["run1", "link", "./run1/"])
def test_bench_runs_refuses_one_run_given_twice(tmp_path, monkeypatch, second):
    from tests.conftest import command_in_process
    from tutorial_lib.bench.cli import main
    from tutorial_lib.exits import EXIT_REFUSED

    run = _a_run(tmp_path)
    (tmp_path / "link").symlink_to(run)
    monkeypatch.chdir(tmp_path)
    result = command_in_process(main, ["runs", "run1", second])
    assert result.returncode == EXIT_REFUSED, result
    assert "RUN_DIR: " in result.stderr and "Fix: give each run directory once" in result.stderr


def test_the_course_refuses_one_parameter_given_twice(tmp_path, monkeypatch):
    from tests.conftest import command_in_process
    from tests.test_contract_rerun2 import _one_line
    from tutorial_lib.course.runner import main
    from tutorial_lib.exits import EXIT_REFUSED

    monkeypatch.chdir(tmp_path)
    result = command_in_process(main, ["--only", "00", "-p", "seed", "1", "-p", "seed", "2", "-p", "data_dir", "d",
                                       "-p", "output_root", "runs", "--out", "out"])
    assert result.returncode == EXIT_REFUSED, result
    assert "'seed' is given twice" in _one_line(result.stderr, "-p: ")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("module", ["extract_table", "scale_table", "shards_table"])
@pytest.mark.parametrize("kind", ["fifo", "folder", "absent"])
def test_a_table_update_of_something_not_a_document_is_refused_without_opening_it(tmp_path, module, kind):
    import importlib
    import os

    from tests.conftest import command_in_process
    from tutorial_lib.exits import EXIT_REFUSED

    generator = importlib.import_module(f"tutorial_lib.bench.{module}")
    doc = tmp_path / "doc"
    if kind == "fifo":
        os.mkfifo(doc)
    elif kind == "folder":
        doc.mkdir()
    default = {"extract_table": "results/extract.jsonl", "scale_table": "results/scale.jsonl",
               "shards_table": "results/shards.jsonl"}[module]
    from tutorial_lib import REPO_ROOT

    result = command_in_process(generator.main, [str(REPO_ROOT / default), "--update", str(doc)])
    assert result.returncode == EXIT_REFUSED, result
    assert "--update: " in result.stderr and "not a document" in result.stderr
