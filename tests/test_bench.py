"""The benchmark commands (``python -m tutorial_lib.bench ...``) on the CPU at tiny sizes.

Only the shape of the JSON lines is checked (keys, statuses, units that must hold on any machine),
never a speed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import REPO_ROOT, subprocess_env
from tutorial_lib import bench
from tutorial_lib.bench import data as bench_data
from tutorial_lib.bench.fake_imagenet import FAKE_MARKER

ENV_KEYS = {"device", "device_name", "cpu_model", "cpus", "hostname", "python", "torch", "torchvision", "cuda",
            "driver"}
TRAIN_SETTINGS = {"arch", "precision", "channels_last", "compile", "batch_size", "image_size", "steps", "warmup",
                  "windows", "num_classes", "device"}
TRAIN_RESULTS = {"images_per_sec", "step_time_ms", "window_images_per_sec", "peak_memory_bytes",
                 "training_memory_bytes", "peak_memory_source", "flops_per_image", "flops_method",
                 "achieved_tflops", "matmul_tflops", "matmul_dtype", "fraction_of_matmul", "timer", "final_loss"}
TINY = ["--device", "cpu", "--quiet"]


def lines(path: Path) -> list[dict]:
    """Every line of a JSON-lines file, parsed (fails on a malformed line)."""
    return [json.loads(line) for line in path.read_text().splitlines()]


def check_common(record: dict, kind: str) -> None:
    assert record["kind"] == kind
    assert record["status"] in ("ok", "skipped", "error")
    assert ENV_KEYS <= set(record["env"]), sorted(ENV_KEYS - set(record["env"]))
    assert isinstance(record["timestamp"], float)
    if record["status"] != "ok":
        assert record["reason"]


@pytest.fixture(scope="module")
def fake_set(tmp_path_factory) -> Path:
    """A small generated ImageNet-layout set: 2 classes x 6 training images of 96x72 pixels."""
    return bench_data.make_fake_imagenet(tmp_path_factory.mktemp("fake") / "imagenet", classes=2, per_class=6,
                                         size=(96, 72))


def test_train_measures_and_skips_with_reasons(tmp_path):
    out = tmp_path / "train.jsonl"
    # fp32 runs in a fresh child process (--isolate yes: the notebook's path); fp16 is skipped on the CPU
    assert bench.main(["train", *TINY, "--arch", "resnet18", "--precision", "fp32,fp16", "--channels-last", "on",
                       "--image-size", "32", "--batch-size", "4", "--steps", "2", "--warmup", "1", "--windows", "2",
                       "--isolate", "yes", "--out", str(out)]) == 0
    fp32, fp16 = lines(out)
    for record in (fp32, fp16):
        check_common(record, "train")
        assert TRAIN_SETTINGS <= set(record)
    assert fp32["status"] == "ok", fp32.get("reason")
    assert TRAIN_RESULTS <= set(fp32), sorted(TRAIN_RESULTS - set(fp32))
    assert fp32["isolated"] is True and fp32["channels_last"] is True and fp32["timer"] == "time.perf_counter"
    assert fp32["images_per_sec"] > 0 and fp32["peak_memory_bytes"] > 0 and len(fp32["window_images_per_sec"]) == 2
    assert fp32["achieved_tflops"] == pytest.approx(fp32["flops_per_image"] * fp32["images_per_sec"] / 1e12)
    assert fp16["status"] == "skipped" and "GPU" in fp16["reason"]


def test_flop_count_matches_the_published_resnet50_figure():
    # ResNet-50 at 224 px: about 4.1 G multiply-adds forward, so about 24.5 GFLOP per trained image
    assert bench.train_flops_per_image("resnet50", 224) == pytest.approx(24.5e9, rel=0.03)


def test_unsupported_settings_are_reported_not_raised():
    assert bench.precision_support("bf16", "cpu") is None
    assert "GPU" in bench.precision_support("tf32", "cpu")
    assert "CUDA graphs" in bench.compile_support("reduce-overhead", "cpu")
    record = bench.measure_training("resnet18", "fp16", False, 2, 32, 1, 0, "none", "cpu")
    assert record["status"] == "skipped" and record["precision"] == "fp16"


def test_fake_imagenet_is_realistic_and_idempotent(tmp_path):
    root = bench_data.make_fake_imagenet(tmp_path / "fake", classes=1, per_class=2)
    files = sorted((root / "train" / "n00000000").glob("*.JPEG"))
    assert len(files) == 2 and len(list((root / "val").rglob("*.JPEG"))) == 1
    from PIL import Image

    assert Image.open(files[0]).size == (500, 375)
    assert all(60e3 < f.stat().st_size < 200e3 for f in files)  # ImageNet's JPEGs average about 110 KB
    before = [f.stat().st_mtime_ns for f in files]
    assert bench_data.make_fake_imagenet(tmp_path / "fake", classes=1, per_class=2) == root
    assert [f.stat().st_mtime_ns for f in files] == before
    bench_data.make_fake_imagenet(tmp_path / "fake", classes=1, per_class=3)
    assert len(list((root / "train").rglob("*.JPEG"))) == 3


def test_a_real_data_set_is_never_replaced(tmp_path, fake_set):
    from tutorial_lib.engine.input.folders import DataError

    real = tmp_path / "imagenet"
    (real / "train" / "n01").mkdir(parents=True)
    (real / "val" / "n01").mkdir(parents=True)
    keep = real / "train" / "n01" / "a.JPEG"
    keep.write_bytes((fake_set / "train" / "n00000000" / "n00000000_0.JPEG").read_bytes())
    (real / "val" / "n01" / "b.JPEG").write_bytes(keep.read_bytes())
    with pytest.raises(DataError, match="refusing"):
        bench_data.make_fake_imagenet(real, classes=1, per_class=1, size=(32, 32))
    assert bench_data.prepare_fake_imagenet(real, classes=1, per_class=1, size=(32, 32)) == real
    assert keep.is_file() and not (real / bench_data.FAKE_MARKER).exists()


def test_data_command_cpu_workers_and_skipped_gpu_pipeline(tmp_path, fake_set):
    out = tmp_path / "data.jsonl"
    assert bench.main(["data", *TINY, "--data-dir", str(fake_set), "--workers", "0,1", "--batch-size", "2",
                       "--image-size", "32", "--batches", "2", "--gpu-pipeline", "auto", "--out", str(out)]) == 0
    records = lines(out)
    assert [r["pipeline"] for r in records] == ["cpu-dataloader", "cpu-dataloader", "gpu-pipeline"]
    for record in records:
        check_common(record, "data")
    for record, workers in zip(records[:2], (0, 1), strict=True):
        assert record["status"] == "ok" and record["workers"] == workers
        for key in ("images_per_sec", "mb_per_sec", "decode_ms_per_image", "read_ms_per_image",
                    "augment_ms_per_image", "startup_s"):
            assert record[key] > 0, key
    if not torch.cuda.is_available():  # auto on a CPU: the GPU pipeline is named and skipped, not run
        assert records[2]["status"] == "skipped" and "--device cpu" in records[2]["reason"]


def test_data_command_times_the_trainers_gpu_pipeline_on_the_cpu(tmp_path, fake_set):
    out = tmp_path / "data.jsonl"
    assert bench.main(["data", *TINY, "--data-dir", str(fake_set), "--workers", "0", "--batch-size", "3",
                       "--image-size", "24", "--batches", "2", "--repeats", "2", "--gpu-pipeline", "yes",
                       "--read-workers", "0", "--out", str(out)]) == 0
    loader, pipeline = lines(out)
    check_common(pipeline, "data")
    assert loader["pipeline"] == "cpu-dataloader" and pipeline["pipeline"] == "gpu-pipeline"
    assert pipeline["status"] == "ok" and pipeline["decode_device"] == "cpu" and pipeline["env"]["device"] == "cpu"
    assert pipeline["output_shape"] == [3, 3, 24, 24] and pipeline["output_dtype"] == "float32"
    assert pipeline["repeats"] == 2 and len(pipeline["images_per_sec_samples"]) == 2
    assert pipeline["images_per_sec_low"] <= pipeline["images_per_sec"] <= pipeline["images_per_sec_high"]
    assert pipeline["timed_batches"] >= 2 and pipeline["dataset_images"] == loader["dataset_images"]


def test_gpu_pipeline_measurement_is_the_trainers_loader(fake_set, monkeypatch):
    from tutorial_lib.engine.input import loaders as input_loaders

    built = []
    original = input_loaders.build_gpu_loaders
    monkeypatch.setattr(input_loaders, "build_gpu_loaders", lambda *a, **k: built.append(a[0]) or original(*a, **k))
    record = bench_data.measure_gpu_pipeline(fake_set, batch_size=2, image_size=24, batches=1, device="cpu",
                                             min_time=0.2)
    (cfg,) = built
    assert cfg.input_pipeline == "gpu" and cfg.dataset == "imagefolder" and cfg.batch_size == 2
    assert record["status"] == "ok" and record["timed_batches"] * 2 / record["images_per_sec"] >= 0.2
    too_big = bench_data.measure_gpu_pipeline(fake_set, batch_size=64, image_size=24, batches=1, device="cpu")
    assert too_big["status"] == "error" and "batch_size" in too_big["reason"]


def test_e2e_command_trains_from_jpeg_files_with_both_pipelines(tmp_path, fake_set):
    out = tmp_path / "e2e.jsonl"
    assert bench.main(["e2e", *TINY, "--data-dir", str(fake_set), "--arch", "resnet18", "--workers", "0",
                       "--batch-size", "2", "--image-size", "32", "--steps", "2", "--warmup", "1",
                       "--input-pipeline", "cpu,gpu", "--out", str(out)]) == 0
    records = lines(out)
    assert [r["input_pipeline"] for r in records] == ["cpu", "gpu"]
    for record in records:
        check_common(record, "e2e")
        assert record["status"] == "ok", record.get("reason")
        assert record["num_classes"] == 2 and record["workers"] == 0 and record["precision"] == "fp32"
        assert record["images_per_sec"] > 0 and record["synthetic_images_per_sec"] > 0
        assert 0 <= record["data_wait_fraction"] <= 1
    assert bench.main(["e2e", *TINY, "--data-dir", str(fake_set), "--input-pipeline", "cpu,dali"]) == 2


def test_loader_is_timed_for_at_least_min_time(fake_set):
    record = bench_data.measure_loader(fake_set, 0, 4, 32, batches=1, min_time=0.3)
    assert record["status"] == "ok" and record["batches"] >= 1
    assert record["batches"] * 4 / record["images_per_sec"] >= 0.3  # the timed span, from the record


def test_retime_training_interleaves_rounds_and_keeps_memory(monkeypatch):
    import torch

    from tutorial_lib.bench import rounds

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    threads = torch.get_num_threads()

    first = bench.measure_training("resnet18", "fp32", False, 4, 16, 1, 0, "none", "cpu", num_classes=10)
    skipped = bench.measure_training("resnet18", "fp16", False, 4, 16, 1, 0, "none", "cpu", num_classes=10)
    lines = []
    retimed, still_skipped = rounds.retime_training([first, skipped], min_time=0.05, repeats=2, warmup=1,
                                                    progress=lines.append)
    assert still_skipped == skipped
    assert lines[0].startswith("ready 1/1 fp32: built and warmed up in ") and len(lines) == 2  # the skipped one waits
    assert lines[1] == "timing 1 settings in 2 rounds of at least 0.05 s each (at least 0 s)"
    assert len(retimed["images_per_sec_samples"]) == 2 and retimed["repeats"] == 2
    assert retimed["images_per_sec_low"] <= retimed["images_per_sec"] <= retimed["images_per_sec_high"]
    assert retimed["training_memory_bytes"] == first["training_memory_bytes"]
    assert retimed["achieved_tflops"] == pytest.approx(first["flops_per_image"] * retimed["images_per_sec"] / 1e12)
    assert retimed["torch_threads"] == 1 and torch.get_num_threads() == threads  # a CPU job's threads, then restored


def test_sweep_reports_each_setting_as_it_ends(capsys):
    lines = []
    records = bench.sweep_training(["resnet18"], ["fp32", "fp16"], [False], ["none"], [4], 16, steps=1, warmup=0,
                                   device="cpu", isolate=False, num_classes=10, on_record=lambda record: None,
                                   progress=lines.append)
    assert [r["status"] for r in records] == ["ok", "skipped"]
    assert [line.split(":")[0] for line in lines] == ["1/2 fp32", "2/2 fp16"]
    assert lines[0].split(": ")[1].startswith("ok, ") and lines[1].split(": ")[1].startswith("skipped, ")
    assert capsys.readouterr().out == ""  # on_record replaced the default print


def test_allreduce_under_torchrun_feeds_the_scaling_model(tmp_path):
    out = tmp_path / "allreduce.jsonl"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               "-m", "tutorial_lib.bench", "allreduce", "--quiet", "--sizes", "4K,256K", "--iters", "3",
               "--warmup", "1", "--out", str(out)]
    result = subprocess.run(command, env=subprocess_env(), cwd=REPO_ROOT, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    (record,) = lines(out)  # only rank 0 writes
    check_common(record, "allreduce")
    assert record["backend"] == "gloo" and record["world_size"] == 2 and record["nodes"] == 1
    assert [r["bytes"] for r in record["results"]] == [4096, 262144]
    assert record["repeats"] == 3
    for row in record["results"]:
        assert 0 < row["seconds_low"] <= row["seconds"] <= row["seconds_high"]
        assert len(row["seconds_samples"]) == 3 and row["iters"] >= 3  # sizes interleaved over 3 rounds
        assert row["busbw_GBps"] == pytest.approx(row["algbw_GBps"] * 2 * (2 - 1) / 2)
        assert row["busbw_GBps_low"] <= row["busbw_GBps"] <= row["busbw_GBps_high"]
    from tutorial_lib.scaling import load_allreduce_samples

    gpus, samples = load_allreduce_samples(record)
    assert gpus == 2 and len(samples) == 2


def test_loader_command_compares_the_cpu_pipeline_with_the_plain_recipe(tmp_path, fake_set):
    out = tmp_path / "loader.jsonl"
    # the set as a user's own (no generator's mark): used as it is. With the mark, `bench loader` made its own
    # default set over it (8 classes x 160 images of 500x375: 90% of this test's time)
    data = shutil.copytree(fake_set, tmp_path / "set", ignore=shutil.ignore_patterns(FAKE_MARKER))
    assert bench.main(["loader", "--quiet", "--data-dir", str(data), "--workers", "1", "--batch-size", "2",
                       "--image-size", "32", "--min-time", "0.2", "--repeats", "2", "--decode-images", "2",
                       "--out", str(out)]) == 0
    records = lines(out)
    decode, *loaders = records
    assert decode["kind"] == "decode" and decode["images"] == 2 and len(decode["pil_ms_per_image_samples"]) == 7
    assert decode["pil_ms_per_image"] > 0 and decode["torchvision_ms_per_image"] > 0 and "decision" in decode
    assert len(decode["pil_over_torchvision_samples"]) == 7
    timed = {(r["recipe"], r["workers"]): r for r in loaders if r["kind"] == "loader"}
    assert set(timed) == {("plain", 1), ("tutorial", 1)}
    assert timed[("plain", 1)]["output_dtype"] == "float32" and timed[("tutorial", 1)]["output_dtype"] == "float32"
    for record in timed.values():
        assert record["repeats"] == 2 and record["timed_images"] >= 2 and record["peak_pss_mb"] > 50
        assert record["images_per_sec_low"] <= record["images_per_sec"] <= record["images_per_sec_high"]
    ratio, = (r for r in loaders if r["kind"] == "loader_ratio")
    plain, ours = timed[("plain", 1)], timed[("tutorial", 1)]
    expected = [a / b for a, b in zip(ours["images_per_sec_samples"], plain["images_per_sec_samples"], strict=True)]
    assert sorted(ratio["ratio_samples"]) == pytest.approx(sorted(expected), rel=1e-4)
    assert ratio["workers"] == 1 and len(ratio["env"]["load_average_before"]) == 3


def test_table_renders_every_kind(tmp_path, capsys):
    path = tmp_path / "results.jsonl"
    env = bench.environment_facts("cpu")
    bench.append_records(path, [
        {"kind": "train", "status": "skipped", "reason": "fp16 needs a GPU", "arch": "resnet50", "precision": "fp16",
         "channels_last": True, "compile": "none", "batch_size": 256, "image_size": 224, "env": env},
        {"kind": "allreduce", "status": "ok", "backend": "gloo", "world_size": 2, "nodes": 1, "env": env,
         "results": [{"bytes": 4096, "seconds": 1e-4, "algbw_GBps": 0.04, "busbw_GBps": 0.04}]}])
    assert bench.main(["matmul", *TINY, "--dtype", "float32", "--out", str(path)]) == 0
    (matmul,) = bench.read_records(path, "matmul")
    check_common(matmul, "matmul")
    assert matmul["matmul_dtype"] == "float32" and matmul["matmul_tflops"] > 0
    assert bench.main(["table", str(path), "--out", str(tmp_path / "table.md")]) == 0
    text = (tmp_path / "table.md").read_text()
    assert "### train" in text and "### allreduce" in text and "### matmul" in text
    assert "skipped: fp16 needs a GPU" in text
    assert "| gloo | 2 | 1 | 4 KiB |" in text
    assert text in capsys.readouterr().out


def test_number_formats_and_loss_scaling_demo():
    from tutorial_lib.analyses import precision

    formats = precision.number_formats()
    assert formats.loc["fp16", "largest"] == "6.55e+04" and formats.loc["bf16", "largest"] == "3.39e+38"
    demo = precision.underflow_demo(1e-8, 65536)
    assert demo.loc["fp16", "stored"] == "0" and demo.loc["bf16", "stored"] != "0"
    assert demo.loc["fp16"].iloc[-1] != "0"  # scaled up, the gradient survives fp16


def test_parse_size():
    assert [bench.parse_size(v) for v in ("4K", "1M", "2G", "512", "1.5KB")] == [4096, 1 << 20, 2 << 30, 512, 1536]


def test_a_training_job_is_compared_with_the_benchmark_of_its_own_setting():
    """On the H200 01's jobs ran bf16 with channels_last (the gpu profile) while the table compared them with
    the default layout's benchmark speed: the job's precision, layout and compile mode pick the record."""
    from tutorial_lib.analyses import precision

    def record(p, cl, mode, rate):
        return {"kind": "train", "status": "ok", "precision": p, "channels_last": cl, "compile": mode,
                "images_per_sec": rate}

    records = [record("bf16", False, "none", 2499.1), record("bf16", True, "none", 3001.9),
               record("bf16", True, "default", 3080.5), {"kind": "train", "status": "error", "precision": "fp32"}]
    gpu_job = {"precision": "bf16", "channels_last": True, "compile": "none"}
    assert precision.benchmark_record(records, "bf16", gpu_job)["images_per_sec"] == 3001.9
    assert precision.benchmark_record(records, "bf16", {**gpu_job, "compile": "default"})["images_per_sec"] == 3080.5
    assert precision.benchmark_record(records, "bf16", {})["images_per_sec"] == 2499.1  # not started: plain
    assert precision.benchmark_record(records, "fp32", {}) is None


def test_a_half_precision_step_on_a_cpu_says_whether_it_was_emulated(monkeypatch):
    """02 trained its bf16 model on a CPU without bf16 instructions and printed its speed without saying so."""
    from tutorial_lib.bench import records

    record = {"kind": "train", "status": "ok", "arch": "resnet18", "precision": "bf16", "channels_last": False,
              "compile": "none", "batch_size": 32, "image_size": 32, "device": "cpu", "images_per_sec": 100.0,
              "achieved_tflops": 0.1, "matmul_tflops": 0.5, "fraction_of_matmul": 0.2,
              "training_memory_bytes": 2**20, "peak_memory_bytes": 2**21}
    monkeypatch.setattr(records, "_cpu_has_bf16", lambda: False)
    assert "bf16 on this CPU is emulated" in records.describe(record), records.describe(record)
    monkeypatch.setattr(records, "_cpu_has_bf16", lambda: True)
    assert "it has bf16 instructions" in records.describe(record)
    assert "emulated" not in records.describe({**record, "precision": "fp32"})
    assert "emulated" not in records.describe({**record, "device": "cuda:0"})
