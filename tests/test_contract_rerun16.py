"""What the fifteenth re-run of issue 43 (/work/wt/notes/r43v-report.md) found at 8d79f77, each failing on the code
before (checked by reverting the library change):

* W1: a course parameter of 309 digits or more (over float's range): ``math.isfinite`` of the int raised
  OverflowError, a traceback;
* W2: ``bench e2e --steps`` or ``--warmup`` of 309 digits: ``images / rate`` raised OverflowError; at 30 digits the
  refusal printed a 300-character number of hours;
* W3: ``bench data`` without ``--workers`` counted one setting where it measures the device's default list (and
  the GPU input pipeline), so three hours of rounds were accepted and ran, printing nothing;
* W4 (``python -m tutorial_lib.param_server``): in tests/test_param_server.py;
* W5: ``bench train|loader|data --image-size`` of 300 digits overflowed the memory estimate, ``--num-classes 2**63``
  reached torchvision (tracebacks);
* W6: course benchmark parameters each within bench's limit, their rounds hours long, accepted and run;
* W7: ``course -p workers_list 3`` (no list) ran 02 up to its sixth cell;
* W8: ``data pack --shard-mb 1e308``: an OverflowError traceback;
* W9: ``jobs.netlab.Lab(rate_mbit=10**400)``: an OverflowError traceback;
* W11: ``bench data|e2e --classes`` huge without ``--per-class`` was never bounded: class folders made on;
* W13: a launcher's world of 0, a rank past the world, or a world of 2 without MASTER_ADDR/MASTER_PORT reached
  torch's rendezvous (a ValueError traceback);
* W12: course values with no largest value or no check (classes, JPEG sides, 03's equivalence check,
  watch_timeout, 04's imagenet_epochs, 05's time limit, 06's preset, 07's rates, nodes and diagram) ran the
  notebook first, up to a cell;
* W10: ``python -m tutorial_lib.bench.extract_table`` of a user's text file printed an empty table, rc 0; W5 too:
  ``evaluate --batch-size`` of 400 digits.
"""

from __future__ import annotations

import re

import pytest

from tests.conftest import command_in_process
from tests.test_contract_rerun2 import _one_line
from tutorial_lib.exits import EXIT_REFUSED
from tutorial_lib.numbers import finite

HUGE = "9" * 400  # past float's range: 1.8e308


@pytest.mark.parametrize("only, name, value", [
    ("01", "bench_warmup", HUGE), ("01", "bench_min_time", HUGE), ("02", "workers_list", f"[{HUGE}]"),
    ("02", "classes", HUGE), ("03", "exact_steps", HUGE), ("00", "n_samples", HUGE), ("03", "image_size", HUGE),
    ("02", "classes", str(2**63)),
    # the parameter-server experiment's settings, checked as it checks them (before: 07 ran up to its cell)
    ("07", "ps_workers", "100"), ("07", "ps_batch", "1000"), ("07", "straggler_prob", "2.0"),
])
def test_course_numbers_past_what_a_count_can_be_are_refused_naming_the_parameter(tmp_path, monkeypatch, only, name,
                                                                                  value):
    from tutorial_lib.course.runner import main

    monkeypatch.chdir(tmp_path)
    result = command_in_process(main, ["--only", only, "-p", name, value, *_local(only), "--out", "out"])
    assert result.returncode == EXIT_REFUSED, result
    line = _one_line(result.stderr, f"parameters: {name}")
    assert len(line) < 400 and "Fix: " in line
    assert list(tmp_path.iterdir()) == []


def test_finite_takes_any_whole_number():
    assert finite(int(HUGE)) and finite(-int(HUGE)) and finite(1.5)
    assert not finite(float("inf")) and not finite(float("nan"))


@pytest.mark.parametrize("args, flag", [
    (["--steps", HUGE], "--steps"), (["--steps", "2", "--warmup", "9" * 320], "--warmup"),
    (["--steps", "2", "--warmup", "9" * 30], "--warmup"),
])
def test_bench_e2e_counts_past_float_are_refused_in_a_short_line(tmp_path, args, flag):
    from tutorial_lib.bench.cli import main

    result = command_in_process(main, ["e2e", "--device", "cpu", "--data-dir", str(tmp_path / "d"), "--workers", "0",
                                       "--batch-size", "2", "--image-size", "16", *args])
    assert result.returncode == EXIT_REFUSED, result
    line = _one_line(result.stderr, f"{flag}: ")
    assert len(line) < 400 and "fewer" in line and "over the 1 h a benchmark may take" in line
    assert not re.search(r"[\d,.]{32,}", line.split("Fix: ")[1])  # no estimate printed digit by digit
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args, settings", [
    ([], 3),  # the CPU's default worker list: 0, 1, 2
    (["--workers", "0", "--gpu-pipeline", "yes"], 2),  # one worker count and the GPU input pipeline
])
def test_bench_data_counts_the_settings_it_measures_by_default(tmp_path, args, settings):
    from tutorial_lib.bench.cli import main

    result = command_in_process(main, ["data", "--device", "cpu", "--data-dir", str(tmp_path / "d"), "--batch-size",
                                       "2", "--image-size", "16", "--min-time", "2000", *args])
    assert result.returncode == EXIT_REFUSED, result
    assert f"all 1 rounds of {settings} setting(s) fit in 1 h" in _one_line(result.stderr, "--min-time: ")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args, flag", [
    (["train", "--image-size", str(10**300)], "--image-size"),
    (["train", "--num-classes", str(2**63)], "--num-classes"),
    (["loader", "--image-size", HUGE], "--image-size"),
    (["data", "--image-size", HUGE, "--workers", "0"], "--image-size"),
    (["data", "--classes", HUGE, "--workers", "0"], "--classes"),
    (["e2e", "--classes", HUGE, "--workers", "0"], "--classes"),
    (["data", "--classes", "1000000000", "--workers", "0"], "--classes"),
])
def test_bench_sizes_past_what_can_be_made_are_refused_before_anything_is(tmp_path, args, flag):
    from tutorial_lib.bench.cli import main

    extra = {"train": ["--device", "cpu", "--steps", "2"], "loader": ["--data-dir", str(tmp_path / "d")],
             "data": ["--device", "cpu", "--data-dir", str(tmp_path / "d")],
             "e2e": ["--device", "cpu", "--data-dir", str(tmp_path / "d"), "--steps", "2"]}[args[0]]
    result = command_in_process(main, [*args, *extra, "--batch-size", "2"])
    assert result.returncode == EXIT_REFUSED, result
    line = _one_line(result.stderr, f"{flag}: ")
    assert len(line) < 600 and "Fix: " in line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("only, params, named", [
    ("01", ["bench_repeats", "1000", "bench_min_time", "3600"], "bench_min_time"),
    ("01", ["bench_min_time", "3600"], "bench_min_time"),  # the default 3 rounds
    ("01", ["bench_repeats", "1000", "bench_min_time", "10"], "bench_min_time"),
    ("02", ["loader_batches", "1000000", "bench_repeats", "1000"], "loader_batches"),
    ("02", ["workers_list", "3"], "workers_list"), ("02", ["classes", "1000000000"], "classes"),
    ("02", ["jpeg_width", "100000", "jpeg_height", "100000"], "jpeg_width"),
    ("02", ["jpeg_width", "60000", "jpeg_height", "60000"], "jpeg_width"),
    ("03", ["exact_workers", "1025"], "exact_workers 1025"), ("03", ["exact_batch", "2147483648"], "exact_batch"),
    ("03", ["watch_timeout", "1000000001"], "watch_timeout"),
    ("04", ["imagenet_epochs", "0"], "imagenet_epochs"), ("04", ["lars_base_lr", "0"], "lars_base_lr 0"),
    ("05", ["time_limit", "'1:00'"], "time_limit '1:00'"), ("05", ["extra_sbatch", "'--outp=x'"], "--outp"),
    ("05", ["nodes", "0"], "nodes"), ("06", ["scale_over", "x"], "scale_over"),
    ("06", ["reference_preset", "x"], "reference_preset"), ("07", ["intra_gbit_s", "0"], "intra_gbit_s"),
    ("07", ["nodes", "0"], "nodes"), ("07", ["diagram_ranks", "100000"], "diagram_ranks"),
    ("07", ["max_gpus", "0"], "max_gpus"), ("07", ["netlab_sizes", "x;y"], "netlab_sizes"),
    ("07", ["whatif_preset", "x"], "whatif_preset"),
    # r43w (the sixteenth re-run): X2, X3
    ("05", ["watch_timeout", "0"], "watch_timeout"), ("02", ["batch_size", "1000000000"], "batch_size: "),
    # X4-X6
    ("07", ["whatif_bandwidths", "[0]"], "whatif_bandwidths"),
    ("02", ["bench_min_time", "1200"], "WORKER_COUNTS setting(s)"),
    ("01", ["bench_min_time", "1200"], "bench_min_time: 1200"), ("01", ["precisions", "[fp64]"], "precisions: 'fp64'"),
    ("01", ["compile_modes", "[turbo]"], "compile_modes: 'turbo'"),
])
def test_course_values_a_notebook_would_meet_in_a_cell_are_refused_before_it_runs(tmp_path, monkeypatch, only, params,
                                                                                 named):
    from tutorial_lib.course.runner import main

    monkeypatch.setattr("tutorial_lib.engine.memory.available_bytes", lambda device="cpu": 32 << 30)
    monkeypatch.chdir(tmp_path)
    pairs = [part for name, value in zip(params[::2], params[1::2], strict=True) for part in ("-p", name, value)]
    result = command_in_process(main, ["--only", only, *pairs, *_local(only), "--out", "out"])
    assert result.returncode == EXIT_REFUSED, result
    line = _one_line(result.stderr, "parameters: ")
    from tutorial_lib.bench.data import worker_counts

    assert named.replace("WORKER_COUNTS", str(len(worker_counts()))) in line and "Fix: " in line
    assert list(tmp_path.iterdir()) == []


def test_data_pack_refuses_a_shard_size_no_tar_holds(tmp_path, jpeg_tree):
    from tutorial_lib.data.__main__ import main

    for size in ("1e308", "1e-300"):
        result = command_in_process(main, ["pack", str(jpeg_tree), str(tmp_path / "shards"), "--no-progress",
                                           "--shard-mb", size])
        assert result.returncode == EXIT_REFUSED, result
        assert "MB" in _one_line(result.stderr, "--shard-mb: ")
    assert not (tmp_path / "shards").exists()


def test_a_network_lab_refuses_a_rate_past_float_naming_it():
    from tutorial_lib.jobs.netlab import Lab, LabSettingError

    with pytest.raises(LabSettingError, match=r"^rate_mbit: .*Fix: ") as caught:
        Lab(rate_mbit=10**400)
    assert len(str(caught.value)) < 300


@pytest.mark.parametrize("variables, named", [
    ({"WORLD_SIZE": "0", "RANK": "0"}, "WORLD_SIZE"), ({"WORLD_SIZE": "2", "RANK": "3"}, "RANK"),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "0", "MASTER_ADDR": "127.0.0.1"}, "SLURM_NTASKS"),
    ({"WORLD_SIZE": "2", "RANK": "0"}, "MASTER_ADDR"), ({"WORLD_SIZE": "2", "RANK": "1", "MASTER_ADDR": "h"},
                                                       "MASTER_PORT"),
    ({"WORLD_SIZE": "2", "RANK": "1", "MASTER_ADDR": "h", "MASTER_PORT": "99999"}, "MASTER_PORT"),
])
def test_a_launcher_world_no_process_group_can_form_is_refused_before_training(tmp_path, monkeypatch, jpeg_tree,
                                                                                variables, named):
    from tutorial_lib.train import main

    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "MASTER_ADDR",
                "MASTER_PORT"):
        monkeypatch.delenv(key, raising=False)
    for key, value in variables.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(tmp_path)
    result = command_in_process(main, ["--dataset", "imagefolder", "--data-dir", str(jpeg_tree), "--output-root",
                                       "runs", "--name", "r", "--image-size", "16", "--epochs", "1", "--batch-size",
                                       "4", "--progress", "false", "--device", "cpu", "--max-steps-per-epoch", "1"])
    assert result.returncode == EXIT_REFUSED, result
    assert "Fix: " in _one_line(result.stderr, f"{named}: ")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("content", ["my notes\n", '{"kind": "epoch", "step": 1}\n{"run": "ps_s0"}\n'])
@pytest.mark.parametrize("module", ["extract_table", "scale_table", "shards_table"])
def test_a_table_generator_refuses_a_file_of_no_record_of_its_benchmark(tmp_path, module, content):
    """r43v W10: a user's text file printed an empty table, rc 0; r43w X1: so did records of another kind, and
    ``--update`` replaced a document's block with an empty table."""
    import importlib

    main = importlib.import_module(f"tutorial_lib.bench.{module}").main
    (tmp_path / "notes.txt").write_text(content)
    doc = tmp_path / "doc.md"
    doc.write_text("# my doc\n")
    for extra in ([], ["--update", str(doc)]):
        result = command_in_process(main, [str(tmp_path / "notes.txt"), *extra])
        assert result.returncode == EXIT_REFUSED and result.stdout == ""
        assert "holds no " in _one_line(result.stderr, "results: ")
    assert doc.read_text() == "# my doc\n"


def test_evaluate_refuses_a_batch_past_any_count(tmp_path):
    from tutorial_lib.evaluate import main

    result = command_in_process(main, [str(tmp_path), "--data-dir", str(tmp_path), "--batch-size", HUGE])
    assert result.returncode == EXIT_REFUSED, result
    assert len(_one_line(result.stderr, "--batch-size: ")) < 300


def _local(only: str) -> list[str]:
    """``-p backend local`` for a notebook that runs jobs (02 has no backend: the course refuses it there)."""
    return [] if only == "02" else ["-p", "backend", "local"]
