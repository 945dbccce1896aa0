"""What the twenty-first re-run of issue 43 (/work/wt/notes/r43ab-report.md) found at 735432c, each failing on the code
before:

* C1: the generated JPEG's memory estimate, 16 B a pixel, was its coordinate grid alone; the generator peaks near 100
  B a pixel, so ``size=(12000, 12000)`` passed the check and ended in numpy's MemoryError (``--jpeg-size`` in one
  line not naming the flag, after the generation began). Several workers generate at once.
* C2: ``bench shards --jpeg-images 400000`` was refused naming the flag, but after its empty ``--work-dir`` was made.
* C3: ``make_fake_imagenet(root, 2, 1, None)``: "TypeError: 'NoneType' object is not iterable".
* C4: ``prepare_fake_imagenet`` with ``batch_size=10**400``: "OverflowError: integer division result too large for a
  float".
"""

from __future__ import annotations

import tracemalloc

import pytest

from tutorial_lib.engine.config import ConfigError


def test_the_pixel_estimate_covers_the_generators_peak(tmp_path):
    """C1: the numpy arrays of one JPEG's generation, plus PIL's 4 B a pixel image, within FAKE_PIXEL_BYTES."""
    from tutorial_lib.bench.fake_imagenet import FAKE_PIXEL_BYTES, _fake_image

    width, height = 1200, 900
    tracemalloc.start()
    try:
        _fake_image(3, (width, height), 90, tmp_path / "a.JPEG")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (tmp_path / "a.JPEG").stat().st_size > 0
    assert peak / (width * height) + 4 <= FAKE_PIXEL_BYTES


def _memory(monkeypatch, available: int) -> None:
    monkeypatch.setattr("tutorial_lib.engine.memory.available_bytes", lambda device="cpu": available)


def test_an_image_the_old_estimate_let_through_is_refused_before_anything_is_made(tmp_path, monkeypatch):
    """C1: 12000x12000 px with 2.9 GiB available (r43ab's repro): the old 2.3 GB estimate passed."""
    from tutorial_lib.bench.fake_imagenet import make_fake_imagenet

    _memory(monkeypatch, int(2.89 * 2**30))
    with pytest.raises(ConfigError, match=r"^size: generating one 12000x12000 image needs at least 18.4 GB of memory"
                                          r".*Fix: e\.g\. size=\(500, 375\)"):
        make_fake_imagenet(tmp_path / "f", 1, 1, (12000, 12000), val_per_class=0, workers=1)
    assert list(tmp_path.iterdir()) == []


def test_images_are_generated_as_many_at_once_as_memory_holds(tmp_path, monkeypatch):
    """C1, D1: four workers hold four images; with memory for three, three work (r43ac: a set refused for its
    workers, naming the API's ``size``, after bench had checked its one image); a set of two images, two."""
    from tutorial_lib.bench import fake_imagenet

    size = (2000, 1500)
    _memory(monkeypatch, 3 * size[0] * size[1] * fake_imagenet.FAKE_PIXEL_BYTES)
    workers = []
    monkeypatch.setattr(fake_imagenet, "_write_images", lambda *args: workers.append(args[7]))
    fake_imagenet.make_fake_imagenet(tmp_path / "f", 2, 8, size, workers=4)
    fake_imagenet.make_fake_imagenet(tmp_path / "g", 1, 1, size, val_per_class=1, workers=4)
    _memory(monkeypatch, size[0] * size[1] * fake_imagenet.FAKE_PIXEL_BYTES)
    fake_imagenet.make_fake_imagenet(tmp_path / "h", 2, 8, size, workers=4)
    assert workers == [3, 2, 1]


def test_the_bench_and_course_refuse_the_size_with_their_own_names(monkeypatch):
    """C1: the one check (check_image_fits) names each entry point's field."""
    from tutorial_lib.bench.fake_imagenet import check_image_fits

    _memory(monkeypatch, 2 * 10**9)
    with pytest.raises(ConfigError, match=r"^--jpeg-size: generating one 12000x12000 image .*Fix: e\.g\. --jpeg-size "):
        check_image_fits((12000, 12000), ("--jpeg-size", "--jpeg-size"), "--jpeg-size 500x375")
    with pytest.raises(ConfigError, match=r"^jpeg_height: 500x70000 px has a side longer than the 65,500 px"):
        check_image_fits((500, 70000), ("jpeg_width", "jpeg_height"), "-p jpeg_height 375")
    with pytest.raises(ConfigError, match=r"^jpeg_height: generating one 12000x12000 image"):
        check_image_fits((12000, 12000), ("jpeg_width", "jpeg_height"), "-p jpeg_height 375", blamed="jpeg_height")
    check_image_fits((500, 375), ("size", "size"), "size=(500, 375)")


def test_the_bench_cli_refuses_the_size_before_generating(tmp_path, monkeypatch, capsys):
    """C1's CLI twin: one line naming --jpeg-size, rc 2, no data folder."""
    from tutorial_lib.bench.cli import main

    _memory(monkeypatch, int(2.89 * 2**30))
    assert main(["data", "--device", "cpu", "--data-dir", str(tmp_path / "fk"), "--classes", "1", "--per-class", "1",
              "--jpeg-size", "12000x12000"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: --jpeg-size: generating one 12000x12000 image needs at least"), err
    assert list(tmp_path.iterdir()) == []


def test_shards_refuses_the_set_before_making_its_work_folder(tmp_path):
    """C2: nothing is made for a set that is refused."""
    from tutorial_lib.bench.shards import measure_shards

    with pytest.raises(ConfigError, match=r"^--jpeg-images: a generated set of .*Fix: fewer --jpeg-images"):
        measure_shards(sets=("jpeg",), work_dir=tmp_path / "sh", jpeg_images=10**8, emit=lambda record: None)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("size", [None, 500, (500,)])
def test_make_refuses_a_size_that_is_not_a_pair(tmp_path, size):
    """C3: a one-line refusal naming size, not a TypeError."""
    from tutorial_lib.bench.fake_imagenet import make_fake_imagenet

    with pytest.raises(ConfigError, match=r"^size: expected \(width, height\) in whole pixels"):
        make_fake_imagenet(tmp_path / "f", 2, 1, size)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["batch_size", "loader_batches"])
@pytest.mark.parametrize("value", [10**400, 10**5000], ids=["1e400", "1e5000"])
def test_prepare_refuses_batches_past_a_floats_range_naming_them(tmp_path, name, value):
    """C4: the set those batches need is refused naming the batch setting, in one line."""
    from tutorial_lib.bench.fake_imagenet import prepare_fake_imagenet

    arguments = dict(classes=2, per_class=16, size=(500, 375), batch_size=8, loader_batches=4, device="cpu")
    with pytest.raises(ConfigError) as refused:
        prepare_fake_imagenet(tmp_path / "f", **{**arguments, name: value})
    line = str(refused.value)
    assert line.startswith(f"{name}: a generated set of ") and "Fix: " in line and "\n" not in line and len(line) < 400
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("make", ["fifo", "folder-as-log", "user-text", "none"])
def test_metrics_readers_refuse_what_is_not_a_run(tmp_path, make):
    """C5: a named pipe, a folder where the log should be, a user's text file and None read as an empty log."""
    import os

    from tutorial_lib.jobs import metrics_table

    if make == "fifo":
        given = tmp_path / "fifo"
        os.mkfifo(given)
        kind, named = ValueError, "is not a regular file"
    elif make == "folder-as-log":
        given = tmp_path / "run"
        (given / "metrics.jsonl").mkdir(parents=True)
        kind, named = ValueError, "is not a regular file"
    elif make == "user-text":
        given = tmp_path / "notes.txt"
        given.write_text("my notes\nline two\n")
        kind, named = ValueError, "holds no event of a run"
    else:
        given, kind, named = None, TypeError, "expected a run folder or its metrics.jsonl, got NoneType"
    for reader in (metrics_table,):  # read_metrics is the live reader watchers poll: lenient
        with pytest.raises(kind, match=rf"^run_dir_or_file: .*{named}.*Fix: "):
            reader(given)
    if make == "user-text":
        assert given.read_text() == "my notes\nline two\n"


def test_metrics_table_refuses_a_path_that_does_not_exist_and_the_live_reader_polls_on(tmp_path):
    """C5: ``metrics_table`` refuses a typo; ``read_metrics``, which watchers poll while a job starts, reads a run
    folder not made yet, or not logged in yet, as no events (r43ac's CI: a strict live reader failed a watcher)."""
    from tutorial_lib.jobs import metrics_table, read_metrics
    from tutorial_lib.rundir.metrics import MetricsWriter

    with pytest.raises(FileNotFoundError, match=r"^run_dir_or_file: .*nope' does not exist\. Fix: "):
        metrics_table(tmp_path / "nope")
    assert read_metrics(tmp_path / "nope") == []
    run = tmp_path / "run"
    run.mkdir()
    assert read_metrics(run) == []
    (run / "job.json").write_text('{"backend": "local", "id": "local-1", "name": "run", "spec": {}}')  # as submit
    assert metrics_table(run).empty
    MetricsWriter(run).write("start", epochs=1)
    assert [e["event"] for e in read_metrics(run)] == ["start"]
    assert list(metrics_table(run / "metrics.jsonl")["event"]) == ["start"]


def _trainer_run(folder):
    import json

    from tutorial_lib.rundir.metrics import MetricsWriter

    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"name": folder.name}))
    MetricsWriter(folder).write("start", epochs=1)
    return folder


@pytest.mark.parametrize("out", ["reference-log", "reference-folder", "hard-link"])
def test_bench_runs_refuses_an_out_in_any_run_it_reads(tmp_path, monkeypatch, capsys, out):
    """C6: --out inside the --reference run, or hard-linked to a run's log, appended to that run's own log."""
    import os

    from tutorial_lib.bench.cli import main

    monkeypatch.chdir(tmp_path)
    run, reference = _trainer_run(tmp_path / "run1"), _trainer_run(tmp_path / "run2")
    if out == "hard-link":
        os.link(run / "metrics.jsonl", tmp_path / "hl.jsonl")
    target = {"reference-log": "run2/metrics.jsonl", "reference-folder": "run2/x.jsonl", "hard-link": "hl.jsonl"}[out]
    before = {p: p.read_bytes() for p in (run / "metrics.jsonl", reference / "metrics.jsonl")}
    assert main(["runs", "run1", "--reference", "run2", "--out", target]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith(f"error: --out: {target!r}")
    assert {p: p.read_bytes() for p in before} == before
    assert not (reference / "x.jsonl").exists()


@pytest.mark.parametrize("name, listed, twice", [
    ("whatif_overlaps", [1, 1.0], "1.0"), ("whatif_overlaps", [0, 0.0], "0.0"),
    ("whatif_overlaps", [0.5, 1, 1.0], "1.0"), ("workers_list", [0, 1, 0.0], "0.0"),
])
def test_numbers_listed_twice_are_one_entry_whatever_their_type(name, listed, twice):
    """C8: [1, 1.0] drew overlap 1 twice; True is still not 1 (a layout is not a worker count)."""
    from tutorial_lib.course.values import _check_listed_once

    with pytest.raises(ConfigError, match=rf"^{name}: {twice} is listed twice"):
        _check_listed_once({name: listed})
    _check_listed_once({"channels_last_options": [True, 1]})


@pytest.mark.parametrize("name, listed", [
    ("precisions", ["fp32", "bf16", "fp32"]), ("whatif_overlaps", [0.0, 0.4, 0.8, 0.0]),
    ("example_gpus", [8, 8]), ("channels_last_options", [False, False]),
    ("workers_list", list(range(40)) + [0]),
])
def test_the_fix_for_a_repeated_entry_can_be_pasted(name, listed):
    """C9: the fix quoted a repr inside quotes (``-p precisions ''[fp32, bf16]''``): pasted, the shell split it. Now
    its words are one -p, and the list they give is taken."""
    import shlex

    import yaml

    from tutorial_lib.course.values import _check_listed_once

    with pytest.raises(ConfigError) as refused:
        _check_listed_once({name: listed})
    words = shlex.split(str(refused.value).split("e.g. ", 1)[1].rstrip("."))
    assert words[:2] == ["-p", name] and len(words) == 3, words
    example = yaml.safe_load(words[2])
    assert isinstance(example, list) and example and all(entry in listed for entry in example)
    _check_listed_once({name: example})


@pytest.mark.parametrize("check, value, rule", [
    ("run", "café", "1 to 100 ASCII letters (a-z, A-Z), digits"),
    ("slurm", "pärtition", "(ASCII letters, digits, '_', '.', '-'"),
    ("env", "FÖÖ", "Fix: ASCII letters, digits and '_', not starting with a digit."),
])
def test_a_name_of_non_ascii_letters_is_refused_by_the_rule_it_breaks(check, value, rule):
    """C7: 'café' is four letters, and "a run name is 1 to 100 letters" refused it: the rule is ASCII letters."""
    from tutorial_lib.engine.config import validate_name
    from tutorial_lib.jobs.site import load_site
    from tutorial_lib.jobs.slurm_values import check_word

    calls = {"run": lambda: validate_name(value), "slurm": lambda: check_word("partition", value),
             "env": lambda: load_site({"env": {value: "1"}})}
    with pytest.raises(ConfigError) as refused:
        calls[check]()
    assert rule in str(refused.value)


def test_a_cut_list_is_counted_in_items():
    """Noted by r43ab: a sweep's list value was said to be "(39 characters)" long, counting its items."""
    from tutorial_lib.engine.errors import shorten

    assert shorten(list(range(39))).endswith("(39 items)")
    assert shorten("x" * 1200).endswith("(1,200 characters)")


def test_an_overlap_above_the_backward_pass_is_refused():
    """C10: 07's whatif_overlaps '[1.5]' was drawn, hiding more communication than backward has time for."""
    from tutorial_lib.course.values import check_notebook_values
    from tutorial_lib.figures.comm_figures import what_if_model
    from tutorial_lib.scaling.presets import PRESETS

    with pytest.raises(ConfigError, match=r"^whatif_overlaps: \[0\.5, 1\.5\] is over 1\. Fix: at most 1\."):
        check_notebook_values({"whatif_overlaps": [0.5, 1.5]})
    check_notebook_values({"whatif_overlaps": [0.0, 1.0]})
    preset = next(iter(PRESETS.values()))
    with pytest.raises(ValueError, match=r"^overlap: 1\.5 is not a fraction of the backward pass from 0 to 1"):
        what_if_model(preset, overlap=1.5)
    assert what_if_model(preset, overlap=1).workload.overlap_fraction == 1.0


def test_choose_backend_refuses_a_verbose_that_is_not_a_flag(capsys):
    """C12: verbose='no' was taken as true, and the choice was printed."""
    from tutorial_lib.jobs import choose_backend

    with pytest.raises(ConfigError, match=r"^verbose: must be True or False, got 'no'"):
        choose_backend("local", verbose="no")
    assert choose_backend("local", verbose=False) == "local" and capsys.readouterr().out == ""


def test_read_state_takes_a_run_folder_as_text(tmp_path):
    """C13: ``read_state(str)`` was "unsupported operand type(s) for /: 'str' and 'str'"."""
    import json

    from tutorial_lib.jobs import read_state
    from tutorial_lib.jobs.states import STATE_FILE

    run = tmp_path / "run"
    run.mkdir()
    assert read_state(str(run)) is None
    (run / STATE_FILE).write_text(json.dumps({"state": "RUNNING"}))
    assert read_state(str(run)) == read_state(run)
    with pytest.raises(TypeError, match=r"^run_dir: expected a run folder, got NoneType"):
        read_state(None)


@pytest.mark.parametrize("ranks", [100_000, 10**5000], ids=["1e5", "1e5000"])
def test_a_lab_of_more_ranks_than_the_machine_runs_is_refused_before_it_is_built(monkeypatch, ranks):
    """C14: netlab_ranks_per_node had no bound; 07 would start 2 x 100,000 rank processes."""
    from tutorial_lib.analyses import twolevel
    from tutorial_lib.course.values import check_notebook_values
    from tutorial_lib.engine.device import most_local_ranks

    built = []
    monkeypatch.setattr(twolevel.netlab, "unavailable", lambda: built.append("asked") or None)
    with pytest.raises(ConfigError, match=r"^netlab_ranks_per_node: .* ranks on each of 2 emulated nodes is more than"):
        check_notebook_values({"netlab_ranks_per_node": ranks})
    with pytest.raises(ConfigError, match=r"^ranks_per_node: .*Fix: at most \d+ ranks per node"):
        twolevel.measure([200], ranks_per_node=ranks)
    assert built == []
    check_notebook_values({"netlab_ranks_per_node": most_local_ranks() // 2})


@pytest.mark.parametrize("variable, value, named", [
    ("RANKS_PER_NODE", "x", "RANKS_PER_NODE: 'x' is not a whole number"),
    ("RANKS_PER_NODE", "-1", "RANKS_PER_NODE: '-1' is not a whole number"),
    ("TUTORIAL_MAX_RESTARTS", "x", "TUTORIAL_MAX_RESTARTS: 'x' is not a whole number"),
    ("TUTORIAL_MODULE", "os; touch pwned", "TUTORIAL_MODULE: 'os; touch pwned' cannot be run as a job"),
    ("TUTORIAL_PYTHON", "-c", "TUTORIAL_PYTHON: '-c' would be read as an option"),
])
def test_a_by_hand_launch_input_is_one_line_and_status_2(tmp_path, monkeypatch, variable, value, named):
    """C15: train.sbatch's by-hand inputs ended in a traceback (launch.main was not wrapped as every command is), and
    TUTORIAL_MODULE was handed to torchrun unchecked. Nothing is started."""
    from tests.conftest import command_in_process
    from tutorial_lib.exits import EXIT_REFUSED
    from tutorial_lib.jobs import launch

    started = []
    monkeypatch.setattr(launch.os, "execvp", lambda *args: started.append(args))
    for name, setting in {"HEAD": "127.0.0.1", "PORT": "29671", "SLURM_JOB_ID": "12345", "SLURM_NODEID": "1",
                          "TUTORIAL_RUN_DIR": str(tmp_path / "r"), variable: value}.items():
        monkeypatch.setenv(name, setting)
    result = command_in_process(launch.main, ["--profile", "smoke"])
    assert result.returncode == EXIT_REFUSED, result
    assert result.stderr.strip().startswith(f"error: {named}") and "Fix: " in result.stderr
    assert "Traceback" not in result.stderr
    assert started == [] and list(tmp_path.iterdir()) == []


def test_a_by_hand_launch_of_good_inputs_starts_torchrun(tmp_path, monkeypatch):
    """The inputs train.sbatch documents still build and start this node's torchrun."""
    from tests.conftest import command_in_process
    from tutorial_lib.jobs import launch

    started = []
    monkeypatch.setattr(launch.os, "execvp", lambda *args: started.append(args))
    for name, setting in {"HEAD": "127.0.0.1", "PORT": "29671", "SLURM_JOB_ID": "12345", "SLURM_NODEID": "1",
                          "RANKS_PER_NODE": "2", "TUTORIAL_MODULE": "tutorial_lib.bench"}.items():
        monkeypatch.setenv(name, setting)
    monkeypatch.delenv("TUTORIAL_RUN_DIR", raising=False)
    assert command_in_process(launch.main, ["allreduce"]).returncode == 0
    command = started[0][1]
    assert "--nproc-per-node" in " ".join(command) and "tutorial_lib.bench" in command and command[-1] == "allreduce"


@pytest.mark.parametrize("sizes", ["4k,4K", "1M,1024K", "4096,4K"])
def test_bench_allreduce_refuses_a_size_listed_twice_by_its_bytes(sizes, capsys):
    """C16: ``--sizes 4k,4K`` measured 4 KiB twice (compared as text); the course compares bytes already."""
    from tutorial_lib.bench.cli import main

    assert main(["allreduce", "--device", "cpu", "--sizes", sizes]) == 2
    assert "has an empty or repeated item" in capsys.readouterr().err


@pytest.mark.parametrize("arguments, named", [
    (dict(classes=2, per_class=1, val_per_class=10**5000), "val_per_class"),
    (dict(classes=2, per_class=1, val_per_class=200_000_000), "val_per_class"),
    (dict(classes=200_000_000, per_class=1, val_per_class=0), "classes"),
    (dict(classes=2, per_class=200_000_000, val_per_class=1), "per_class"),
], ids=["val-1e5000", "val-2e8", "classes", "per_class"])
def test_a_set_too_large_names_the_count_that_sized_it(tmp_path, arguments, named):
    """C17: a set sized by ``val_per_class`` was refused naming classes, already 2."""
    from tutorial_lib.bench.fake_imagenet import make_fake_imagenet

    with pytest.raises(ConfigError) as refused:
        make_fake_imagenet(tmp_path / "f", size=(500, 375), **arguments)
    line = str(refused.value)
    assert line.startswith(f"{named}: a generated set of ") and "\n" not in line
    assert ("val_per_class 2" in line) == (named == "val_per_class")
    assert list(tmp_path.iterdir()) == []


def test_metrics_table_refuses_an_event_no_trainer_writes(tmp_path):
    """C5: ``event='epochs'`` (a typo of 'epoch') was an empty table."""
    from tutorial_lib.jobs import metrics_table
    from tutorial_lib.rundir.metrics import MetricsWriter

    run = tmp_path / "run"
    run.mkdir()
    MetricsWriter(run).write("epoch", epoch=0, top1=50.0)
    with pytest.raises(ValueError, match=r"^event: 'epochs' is no event the trainer writes\. Fix: one of start, "):
        metrics_table(run, "epochs")
    assert list(metrics_table(run, "epoch")["top1"]) == [50.0]


def test_bench_runs_refuses_an_out_inside_another_run(tmp_path, monkeypatch, capsys):
    """C6: ``--out runs/run2/metrics.jsonl`` of a run not read appended to that run's log."""
    from tutorial_lib.bench.cli import main

    monkeypatch.chdir(tmp_path)
    _trainer_run(tmp_path / "run1")
    other = _trainer_run(tmp_path / "run2")
    before = (other / "metrics.jsonl").read_bytes()
    assert main(["runs", "run1", "--out", "run2/metrics.jsonl"]) == 2
    assert "error: --out: 'run2/metrics.jsonl' is refused. Fix: a file outside every run directory" in \
        capsys.readouterr().err
    assert (other / "metrics.jsonl").read_bytes() == before


@pytest.mark.parametrize("name, value, most", [("netlab_ddp_steps", 10**9, "1,000,000"),
                                               ("netlab_rates_mbit", [200, 2_000_000], "1,000,000")])
def test_07s_lab_settings_are_bounded_before_anything_runs(name, value, most):
    """C18: 07 took them and its netlab cell's tools refused them, after the job and the lab."""
    from tutorial_lib.course.values import check_notebook_values

    with pytest.raises(ConfigError, match=rf"^{name}: .* is over {most}\. Fix: at most {most}\."):
        check_notebook_values({name: value})
    check_notebook_values({name: 1_000_000 if name == "netlab_ddp_steps" else [200, 1_000_000]})


@pytest.mark.parametrize("command, flags, named", [
    ("extract", ["--classes", "2", "--per-class", "16", "--val-per-class", "400000"],
     "--val-per-class: 400000 is refused. Fix: a whole number of at most 15999"),
    ("prepare", ["--classes", "2", "--per-class", "16", "--val-per-class", "400000"],
     "--val-per-class: 400000 is refused"),
    ("extract", ["--classes", "20", "--per-class", "15999", "--val-per-class", "15999"],
     "--per-class: a generated set of 639,960 JPEGs of 500x375 px takes at least "),  # the disk or 1.7 h
])
def test_bench_bounds_the_sources_extract_and_prepare_generate(tmp_path, monkeypatch, capsys, command, flags,
                                                               named):
    """C20: ``--val-per-class 400000`` began 800,000 JPEGs; a set within each count's limit may still take hours."""
    import os

    from tutorial_lib.bench.cli import main

    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    work = ["--work-dir", str(tmp_path)] if command == "extract" else []
    assert main([command, *flags, *work, "--out", str(tmp_path / "r.jsonl")]) == 2
    assert named in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_refused_resume_leaves_the_runs_file_index_as_it_was(tmp_path, digits_dir):
    """C19: "nothing was written", but the run's file_index.json had been rebuilt from the other data folder."""
    import dataclasses
    import shutil

    from tutorial_lib.engine.config import make_config
    from tutorial_lib.engine.trainer import train

    cfg = make_config("smoke", name="run1", output_root=str(tmp_path / "runs"), data_dir=str(digits_dir), epochs=1,
                      max_steps_per_epoch=1, progress=False, device="cpu")
    train(cfg)
    index = tmp_path / "runs" / "run1" / "file_index.json"
    before = index.read_bytes()
    other = tmp_path / "other"
    shutil.copytree(digits_dir, other)
    next(next((other / "train").iterdir()).iterdir()).unlink()  # another listing: one image fewer

    with pytest.raises(ConfigError, match=r"^resume: the checkpoint in .* was trained with another recipe"):
        train(dataclasses.replace(cfg, data_dir=str(other), max_steps_per_epoch=2))
    assert index.read_bytes() == before


def test_an_index_of_imagenets_size_is_still_the_projects(tmp_path):
    """Found beside C19: the index was read 4 MB at most, so ImageNet's (some 45 MB) was "not a file index of
    this project", and its run's next job was refused."""
    import json

    from tutorial_lib.data import file_index

    data = tmp_path / "data"
    (data / "train" / "n0").mkdir(parents=True)
    (data / "train" / "n0" / "a.JPEG").write_bytes(b"")
    run = tmp_path / "run"
    run.mkdir()
    big = {str(data / "train"): {"classes": [f"n{i}" for i in range(1000)],
                                 "files": [[f"n{i}/n{i}_{j}.JPEG" for j in range(300)] for i in range(1000)]}}
    (run / "file_index.json").write_text(json.dumps(big, separators=(",", ":")))
    assert (run / "file_index.json").stat().st_size > 1 << 22
    file_index.build(data, run)
    assert json.loads((run / "file_index.json").read_text())[str(data / "train")]["classes"] == ["n0"]


def test_the_file_index_is_read_under_an_address_space_limit(tmp_path):
    """D5: ``read(4 GiB)`` allocated its buffer first: under ``ulimit -v`` every resume was "out of memory"."""
    import json
    import subprocess
    import sys

    (tmp_path / "file_index.json").write_text(json.dumps({"/d/train": {"classes": ["a"], "files": [["a/1.JPEG"]]}}))
    probe = ("import resource, psutil; vms = psutil.Process().memory_info().vms; "
             "resource.setrlimit(resource.RLIMIT_AS, (vms + 2**30, resource.RLIM_INFINITY)); "
             "from tutorial_lib.rundir.owned import is_index_file; import sys; print(is_index_file(sys.argv[1]))")
    done = subprocess.run([sys.executable, "-c", probe, str(tmp_path / "file_index.json")], capture_output=True,
                          text=True, timeout=120)
    assert done.stdout.strip() == "True", done.stderr[-500:]


def test_a_named_pipe_in_the_index_place_is_not_opened(tmp_path):
    """Beside D5: is_index_file opened a named pipe in the index's place, and blocked."""
    import os

    from tutorial_lib.rundir.owned import is_index_file

    os.mkfifo(tmp_path / "file_index.json")
    assert is_index_file(tmp_path / "file_index.json") is False


def test_the_course_checks_an_image_against_what_its_kernel_can_allocate(monkeypatch):
    """D2: the course process had 3.10 GB of a 6 GiB address space left, 02's kernel 1.92 GB: 4000x4000 px passed
    the up-front check and was refused in 02's fourth cell, naming the API's ``size``."""
    import psutil

    from tutorial_lib.course import kernel
    from tutorial_lib.course.values import check_notebook_sizes
    from tutorial_lib.engine import memory

    monkeypatch.setattr(psutil, "virtual_memory", lambda: type("Memory", (), {"available": 64 * 10**9})())
    monkeypatch.setattr(memory, "address_space_left", lambda: 3_100_000_000)
    assert kernel.kernel_available_bytes() == 3_100_000_000 - kernel.KERNEL_EXTRA_MAPPED
    with pytest.raises(ConfigError, match=r"^jpeg_width: generating one 4000x4000 image needs at least 2.05 GB"):
        check_notebook_sizes({"jpeg_width": 4000, "jpeg_height": 4000}, {"jpeg_width": 4000})
    monkeypatch.setattr(memory, "address_space_left", lambda: 2**63 - 1)  # no limit: the host's memory
    assert kernel.kernel_available_bytes() == 64 * 10**9
    check_notebook_sizes({"jpeg_width": 4000, "jpeg_height": 4000}, {"jpeg_width": 4000})


@pytest.mark.parametrize("images, size", [(384_001, (500, 375)), (4 * 639_960, (120, 90))], ids=["shards", "prepare"])
def test_a_set_of_hours_here_is_refused_by_the_hour_bound(tmp_path, monkeypatch, images, size):
    """D3: at 10 million pixels a second a core, sets this machine makes in 3-8 h were accepted: the bound is now
    about twice its measured pixel and image rates."""
    import os

    from tutorial_lib.bench.fake_imagenet import check_set_fits

    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr("shutil.disk_usage", lambda path: type("Usage", (), {"free": 10**15})())
    with pytest.raises(ConfigError, match=r"^n: a generated set of .* h to make on 2 core\(s\)"):
        check_set_fits(tmp_path, images, size, "n", "fewer")
    check_set_fits(tmp_path, 3000, (500, 375), "n", "fewer")  # shards' default set


@pytest.mark.parametrize("make", ["output-root", "plain-folder", "long-name"])
def test_metrics_readers_refuse_a_folder_that_is_no_run_and_a_name_too_long(tmp_path, make):
    """D6, D7: a folder of the user's read as a run that had not logged; a 5,000-character name was a raw OSError."""
    from tutorial_lib.jobs import metrics_table, read_metrics

    if make == "output-root":
        given = tmp_path / "runs"
        _trainer_run_in(given / "run1")
        kind, said = ValueError, "is not a run folder"
    elif make == "plain-folder":
        given = tmp_path / "mine"
        given.mkdir()
        (given / "notes.txt").write_text("x")
        kind, said = ValueError, "is not a run folder"
    else:
        given, kind, said = tmp_path / ("x" * 5000), FileNotFoundError, "does not exist"
    for reader in (metrics_table,):  # read_metrics is the live reader watchers poll: lenient
        with pytest.raises(kind, match=rf"^run_dir_or_file: .*{said}.*Fix: "):
            reader(given)
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "job.json").write_text('{"backend": "local", "id": "local-1", "name": "fresh", "spec": {}}')
    assert read_metrics(fresh) == []  # a run whose job has not logged yet


def _trainer_run_in(folder):
    folder.parent.mkdir(parents=True, exist_ok=True)
    return _trainer_run(folder)


@pytest.mark.parametrize("overlap", ["0.5", True, [0.5]])
def test_what_if_refuses_an_overlap_that_is_not_a_number(overlap):
    """D8: '0.5' was a TypeError of '<=', True was taken as 1.0."""
    from tutorial_lib.figures.comm_figures import what_if_model
    from tutorial_lib.scaling.presets import PRESETS

    with pytest.raises(ValueError, match=r"^overlap: .* is not a fraction of the backward pass from 0 to 1"):
        what_if_model(next(iter(PRESETS.values())), overlap=overlap)


def test_a_resume_refused_for_a_damaged_checkpoint_leaves_the_file_index(tmp_path, digits_dir):
    """D9: the index was put back for a recipe's refusal only; a truncated checkpoint's left another data's index."""
    import shutil

    from tutorial_lib.engine.config import make_config
    from tutorial_lib.engine.trainer import train
    from tutorial_lib.rundir.checkpoint import CheckpointError

    cfg = make_config("smoke", name="run1", output_root=str(tmp_path / "runs"), data_dir=str(digits_dir), epochs=1,
                      max_steps_per_epoch=1, progress=False, device="cpu")
    train(cfg)
    run = tmp_path / "runs" / "run1"
    before = (run / "file_index.json").read_bytes()
    other = tmp_path / "other"
    shutil.copytree(digits_dir, other)
    next(next((other / "train").iterdir()).iterdir()).unlink()
    with open(run / "checkpoint.pt", "r+b") as handle:
        handle.truncate(100)
    import dataclasses

    with pytest.raises(CheckpointError):
        train(dataclasses.replace(cfg, data_dir=str(other), epochs=2))
    assert (run / "file_index.json").read_bytes() == before


@pytest.mark.parametrize("params, fix", [
    (["whatif_batches", "[4, 4.0]"], "-p whatif_batches '[4, 8, 16, 32, 64]'"),
    (["example_gpus", "[1, true]"], "-p example_gpus '[8, 64, 512]'"),
])
def test_a_list_parameters_fix_can_be_pasted_and_names_its_entries(tmp_path, monkeypatch, params, fix):
    """D10, D12: the fix printed a list unquoted (the shell split it), and ``[1, true]`` was "must be true or false"."""
    import shlex

    from tests.conftest import command_in_process
    from tests.test_contract_rerun2 import _one_line
    from tutorial_lib.course.runner import main
    from tutorial_lib.exits import EXIT_REFUSED

    monkeypatch.chdir(tmp_path)
    result = command_in_process(main, ["--only", "07", "-p", *params, "-p", "backend", "local", "-p", "output_root",
                                       str(tmp_path / "runs"), "--out", "out"])
    assert result.returncode == EXIT_REFUSED, result
    line = _one_line(result.stderr, "parameters: ")
    assert f"{params[0]} must be a list of entries like" in line and f"Fix: e.g. {fix} " in line
    assert len(shlex.split(fix)) == 3


def test_bench_runs_refuses_an_out_hard_linked_anywhere(tmp_path, monkeypatch, capsys):
    """D11: --out hard-linked to a run that is not read appended to that run's log."""
    import os

    from tutorial_lib.bench.cli import main

    monkeypatch.chdir(tmp_path)
    _trainer_run(tmp_path / "run1")
    (tmp_path / "runs").mkdir()
    third = _trainer_run(tmp_path / "runs" / "run3")
    os.link(third / "metrics.jsonl", tmp_path / "hl3.jsonl")
    before = (third / "metrics.jsonl").read_bytes()
    assert main(["runs", "run1", "--out", "hl3.jsonl"]) == 2
    assert "error: --out: 'hl3.jsonl' is refused. Fix: a file of one name (this one has 2 hard links" in \
        capsys.readouterr().err
    assert (third / "metrics.jsonl").read_bytes() == before


@pytest.mark.parametrize("variable, value", [("RANKS_PER_NODE", "4097"), ("RANKS_PER_NODE", "100000"),
                                             ("TUTORIAL_MAX_RESTARTS", "1001")])
def test_a_by_hand_launch_is_bounded_as_submit_bounds_it(tmp_path, monkeypatch, variable, value):
    """D4: RANKS_PER_NODE=100000 by hand was handed to torchrun (submit refuses more than 4,096 ranks, 1,000
    restarts)."""
    from tests.conftest import command_in_process
    from tutorial_lib.exits import EXIT_REFUSED
    from tutorial_lib.jobs import launch

    started = []
    monkeypatch.setattr(launch.os, "execvp", lambda *args: started.append(args))
    for name, setting in {"HEAD": "127.0.0.1", "PORT": "29671", "SLURM_JOB_ID": "12345", "SLURM_NODEID": "1",
                          variable: value}.items():
        monkeypatch.setenv(name, setting)
    monkeypatch.delenv("TUTORIAL_RUN_DIR", raising=False)
    result = command_in_process(launch.main, ["--profile", "smoke"])
    assert result.returncode == EXIT_REFUSED, result
    assert result.stderr.startswith(f"error: {variable}: {int(value):,} is over the ") and started == []


@pytest.mark.parametrize("argv", [["runs", "run1"]])
@pytest.mark.parametrize("out", ["runs/run3/metrics.jsonl", "runs/run3/bench.jsonl"])
def test_bench_runs_out_stays_out_of_run_directories(tmp_path, monkeypatch, capsys, argv, out):
    """r43ab's C6 on a run not read. (D13, the other commands' --out, is left open: a job's own bench records go to
    its run directory, as 07's all-reduce job writes them.)"""
    from tutorial_lib.bench.cli import main

    monkeypatch.chdir(tmp_path)
    _trainer_run(tmp_path / "run1")
    (tmp_path / "runs").mkdir()
    third = _trainer_run(tmp_path / "runs" / "run3")
    before = sorted((p.name, p.read_bytes()) for p in third.iterdir())
    assert main([*argv, "--out", out]) == 2
    assert f"error: --out: '{out}' is refused. Fix: a file outside every run directory" in capsys.readouterr().err
    assert sorted((p.name, p.read_bytes()) for p in third.iterdir()) == before


def test_make_refuses_a_processes_flag_that_is_not_one(tmp_path):
    """D14: processes='no' was true."""
    from tutorial_lib.bench.fake_imagenet import make_fake_imagenet

    with pytest.raises(ConfigError, match=r"^processes: must be True, False or None"):
        make_fake_imagenet(tmp_path / "f", 1, 2, (8, 8), val_per_class=0, processes="no")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("arguments, named", [
    (dict(bandwidth_gbit_s=0), "bandwidth_gbit_s"), (dict(bandwidth_gbit_s=float("nan")), "bandwidth_gbit_s"),
    (dict(bandwidth_gbit_s="10"), "bandwidth_gbit_s"), (dict(per_gpu_batch=-32), "per_gpu_batch"),
    (dict(per_gpu_batch=2.5), "per_gpu_batch"), (dict(io_limits="no"), "io_limits"),
])
def test_what_if_refuses_every_knob_no_model_takes(arguments, named):
    """D8's addendum: a bandwidth of 0, a batch of -32 or 2.5 and io_limits='no' were modelled."""
    from tutorial_lib.figures.comm_figures import what_if_model
    from tutorial_lib.scaling.presets import PRESETS

    with pytest.raises(ValueError, match=rf"^{named}: .*Fix: "):
        what_if_model(next(iter(PRESETS.values())), **arguments)


def test_a_flag_given_for_a_number_is_not_called_a_flag():
    """D12: ``-p netlab_ranks_per_node true`` was told "must be true or false, got True"."""
    from tutorial_lib.course.notebook import parameter_problem

    assert parameter_problem(2, True) == "must be like its default 2, not true or false, got True"
    assert parameter_problem(True, 2) == "must be true or false, got 2"
    assert parameter_problem(True, False) is None
