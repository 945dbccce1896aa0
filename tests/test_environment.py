"""The hardware/software report and the first look at a data set (tutorial_lib.course.environment)."""

from __future__ import annotations

import os
import platform
import stat

import pytest
import torch

from tests.conftest import write_image_tree
from tutorial_lib.course import environment
from tutorial_lib.engine.input.folders import DataError
from tutorial_lib.jobs import slurm

X86_CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz
processor\t: 1
model name\t: Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz
"""
ARM_CPUINFO = "processor\t: 0\nBogoMIPS\t: 50.00\nModel\t\t: Raspberry Pi 4 Model B Rev 1.4\n"
SINFO = """node1|debug*|idle|4|64000|(null)
node2|debug*|alloc|4|64000|gpu:a100:4
gpu[01-02]|gpu|mix|64+|512000|gpu:h100:8(S:0-1)
not a sinfo line
"""


def test_parse_cpu_model_x86_arm_and_missing():
    assert environment.parse_cpu_model(X86_CPUINFO) == "Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz"
    assert environment.parse_cpu_model(ARM_CPUINFO) == "Raspberry Pi 4 Model B Rev 1.4"
    assert environment.parse_cpu_model("") is None


def test_parse_meminfo_total_in_bytes():
    text = "MemTotal:       24576000 kB\nMemFree:         1000 kB\n"
    assert environment.parse_meminfo_total(text) == 24576000 * 1024
    assert environment.parse_meminfo_total("MemFree: 5 kB\n") is None


def test_parse_sinfo_nodes_partitions_and_gres():
    nodes = slurm.parse_sinfo(SINFO)
    assert [n["node"] for n in nodes] == ["node1", "node2", "gpu[01-02]"]
    first, second, third = nodes
    assert first == {"node": "node1", "partition": "debug", "default": True, "state": "idle", "cpus": 4,
                     "memory_mb": 64000, "gres": ""}
    assert second["gres"] == "gpu:a100:4" and second["state"] == "alloc"
    assert third["partition"] == "gpu" and third["default"] is False
    assert third["cpus"] == "64+"  # not a plain number: kept as Slurm printed it


def test_format_cudnn_version_both_encodings():
    assert environment.format_cudnn_version(90100) == "9.1.0"
    assert environment.format_cudnn_version(92400) == "9.24.0"
    assert environment.format_cudnn_version(8902) == "8.9.2"
    assert environment.format_cudnn_version(None) is None


def test_report_describes_this_machine():
    info = environment.report(check_slurm=False)
    software = info["software"]
    assert software["python"] == platform.python_version()
    assert software["torch"] == torch.__version__
    assert software["cuda_available"] == torch.cuda.is_available()
    assert "gloo" in software["distributed_backends"]
    assert info["cpu"]["logical_cores"] == os.cpu_count()
    assert 1 <= info["cpu"]["usable_cores"] <= os.cpu_count()
    assert info["cpu"]["model"]
    assert info["ram_gib"] > 0.1
    assert len(info["gpus"]) == torch.cuda.device_count()
    assert info["slurm"] == {"available": False, "why": "not checked", "nodes": []}

    table = environment.report_table(info)
    assert table.loc["torch", "value"] == torch.__version__
    assert table.loc["GPUs", "value"] == torch.cuda.device_count()
    assert table.loc["Slurm", "value"] == "not available"


def test_report_table_lists_each_gpu():
    info = environment.report(check_slurm=False)
    info["gpus"] = [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "memory_gib": 79.1, "capability": "9.0",
                     "multiprocessors": 132}]
    table = environment.report_table(info)
    assert table.loc["GPU 0", "value"] == "NVIDIA H100 80GB HBM3, 79.1 GiB, compute 9.0"


def test_slurm_info_without_a_cluster(monkeypatch):
    monkeypatch.setattr("tutorial_lib.jobs.slurm.slurm_available", lambda: (False, "sbatch is not on the PATH"))
    info = environment.slurm_info()
    assert info == {"available": False, "why": "sbatch is not on the PATH", "nodes": []}
    assert environment.slurm_nodes_table({"slurm": info}).empty


def test_slurm_info_reads_nodes_from_sinfo(monkeypatch, tmp_path):
    fake = tmp_path / "sinfo"
    fake.write_text("#!/bin/sh\ncat <<'END'\n" + SINFO + "END\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr("tutorial_lib.jobs.slurm.slurm_available", lambda: (True, "the controller answers"))
    info = environment.slurm_info()
    assert info["available"] is True
    assert [n["node"] for n in info["nodes"]] == ["node1", "node2", "gpu[01-02]"]
    table = environment.slurm_nodes_table({"slurm": info})
    assert list(table["state"]) == ["idle", "alloc", "mix"]


def test_slurm_info_reports_a_failing_sinfo(monkeypatch, tmp_path):
    fake = tmp_path / "sinfo"
    fake.write_text("#!/bin/sh\necho 'slurm_load_partitions: Unable to contact slurm controller' >&2\nexit 1\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr("tutorial_lib.jobs.slurm.slurm_available", lambda: (True, "ok"))
    info = environment.slurm_info()
    assert info["nodes"] == [] and "Unable to contact" in info["why"]


def _tree(root, counts):
    write_image_tree(root, counts)
    (root / "train" / "cat" / "notes.txt").write_text("not an image")


def test_dataset_summary_counts_classes_and_images(tmp_path):
    _tree(tmp_path, {"train": {"cat": 3, "dog": 5, "empty": 0}, "val": {"cat": 1, "dog": 2, "empty": 0}})
    table = environment.dataset_summary(tmp_path)
    assert table.loc["train"].to_dict() == {"classes": 3, "images": 8, "min_per_class": 0, "max_per_class": 5,
                                            "empty_classes": 1}
    assert table.loc["val", "images"] == 3


def test_dataset_summary_of_the_digits_export(digits_dir):
    table = environment.dataset_summary(digits_dir)
    assert list(table["classes"]) == [10, 10]
    assert table["images"].sum() == 1797  # scikit-learn's digits: every image exported exactly once


def test_dataset_summary_rejects_a_wrong_layout(tmp_path):
    with pytest.raises(DataError, match="no train/ folder"):
        environment.dataset_summary(tmp_path)


def test_sample_grid_titles_images_with_their_class(tmp_path):
    _tree(tmp_path, {"train": {"cat": 3, "dog": 5}, "val": {"cat": 1}})
    fig = environment.sample_grid(tmp_path, n=6, cols=4)
    titled = [ax for ax in fig.axes if ax.get_title()]
    assert len(titled) == 6 and len(fig.axes) == 8  # 2 rows of 4, two cells left blank
    assert {ax.get_title() for ax in titled} <= {"cat", "dog"}
    assert all(len(ax.images) == 1 for ax in titled)
    # reproducible: the same seed draws the same images; n is capped by the images there are
    assert environment.sample_images(tmp_path, 6, seed=1) == environment.sample_images(tmp_path, 6, seed=1)
    assert len(environment.sample_images(tmp_path, 50)) == 8
    with pytest.raises(ValueError, match="from 1 to 64"):
        environment.sample_images(tmp_path, 0)
