"""What the fifth re-run of issue 43 (/work/wt/notes/r43g-report.md) found still open after the metrics.jsonl/LOCK
hard links and the regnet size check: a local job's log or a Slurm job's batch script linked to a user's file,
models with auxiliary heads, validate() of what is not a config, long values printed whole, a prepared set under a
linked folder, a local job's stage_to checked only inside the job, ``--time-min`` unchecked, and the optimiser's
memory left out of the estimate. Each ends as one line naming the field (or file) and the fix, before anything is
written where possible, and no user file changes; each test failed on the code before (checked by reverting the
library change). Unit level: nothing is submitted to a real scheduler, no job process is started.
"""

from __future__ import annotations

import os
import re

import pytest
import torch

from tests.test_contract_rerun2 import _main, _one_line
from tutorial_lib.engine.config import ConfigError, make_config, validate
from tutorial_lib.exits import EXIT_ERROR
from tutorial_lib.rundir.layout import CONFIG_FILE, JOB_LOG, JOB_SCRIPT, SUPERVISOR_LOG

LINE_LIMIT = 2100  # docs/reliability.md: a message is one line of about 2,100 characters at most


def _victim(tmp_path):
    victim = tmp_path / "home" / "notes.txt"
    victim.parent.mkdir(exist_ok=True)
    victim.write_text("mine\n")
    return victim


def _link(kind: str, victim, path) -> None:
    (os.link if kind == "hard" else os.symlink)(victim, path)


def _local_config(tmp_path, **values):
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    return make_config("smoke", name="run", output_root=str(tmp_path / "runs"), dataset="imagefolder",
                       data_dir=str(data), image_size=16, batch_size=4, num_classes=3, workers=0, progress=False,
                       **values)


# ------------------------------------------------------------------ 1. job.log / supervisor.log linked to a user file
@pytest.mark.parametrize("kind", ["hard", "symbolic"])
@pytest.mark.parametrize("name", [JOB_LOG, SUPERVISOR_LOG])
def test_a_local_job_log_linked_to_a_users_file_is_refused_at_submit_and_the_file_untouched(tmp_path, monkeypatch,
                                                                                             kind, name):
    """r43g: submit(backend='local') resuming a run directory whose job.log was a link to a user's file appended the
    job's whole log to that file (the supervisor opens job.log and supervisor.log for appending)."""
    from tutorial_lib import jobs

    cfg, victim = _local_config(tmp_path), _victim(tmp_path)
    run_dir = tmp_path / "runs" / "run"
    run_dir.mkdir(parents=True)
    (run_dir / CONFIG_FILE).write_text('{"name": "run"}')
    _link(kind, victim, run_dir / name)

    def started(*args, **kwargs):
        raise AssertionError("the job was started")

    monkeypatch.setattr(jobs, "submit_local", started)
    with pytest.raises(ConfigError) as refused:
        jobs.submit(cfg, backend="local", check_data=False, verbose=False)
    message = str(refused.value)
    assert "\n" not in message and message.startswith("output_root: ") and f"{run_dir / name}" in message
    assert ("hard link" if kind == "hard" else "symbolic link") in message and "Fix: move it away" in message
    assert victim.read_text() == "mine\n"


# ------------------------------------------------------------------ 2. job.sbatch linked to a user file
@pytest.mark.parametrize("kind", ["hard", "symbolic"])
def test_a_slurm_job_script_linked_to_a_users_file_is_replaced_and_the_file_untouched(tmp_path, monkeypatch, kind):
    """r43g: submit(backend='slurm') resuming a run directory whose job.sbatch was a link to a user's file wrote the
    batch script into that file. It is replaced by a rename now, as job.json and config.json are."""
    from tutorial_lib.jobs import slurm
    from tutorial_lib.jobs.spec import make_spec

    spec = make_spec(_local_config(tmp_path), on_cluster=True, check_data=False,
                     site={"partition": "compute", "time": "1:00:00"})
    spec.run_dir.mkdir(parents=True)
    victim = _victim(tmp_path)
    _link(kind, victim, spec.run_dir / JOB_SCRIPT)
    monkeypatch.setattr(slurm, "run_command", lambda command, what, env=None: "4242\n")  # sbatch's answer
    assert slurm.submit_slurm(spec) == "4242"
    script = spec.run_dir / JOB_SCRIPT
    assert victim.read_text() == "mine\n" and victim.stat().st_nlink == 1
    assert not script.is_symlink() and script.read_text().startswith("#!/bin/bash")
    assert sorted(p.name for p in spec.run_dir.iterdir()) == ["job.json", JOB_SCRIPT]  # no temporary file left


# ------------------------------------------------------------------ 3-4. googlenet, inception_v3
@pytest.mark.parametrize("arch, size", [("googlenet", 16), ("inception_v3", 75)])
def test_models_with_auxiliary_heads_train_on_plain_logits(arch, size):
    """r43g: `train --arch googlenet` failed at its first step (cross_entropy got a GoogLeNetOutputs tuple) after
    the run directory was written; inception_v3 at 75-128 px passed the size check, then its aux head failed with
    'Output size is too small'."""
    from tutorial_lib.engine.models import build_model, runs_at

    assert runs_at(arch, size)
    model = build_model(arch, num_classes=3).train()
    logits = model(torch.randn(2, 3, size, size))
    assert isinstance(logits, torch.Tensor) and logits.shape == (2, 3)
    torch.nn.functional.cross_entropy(logits, torch.tensor([0, 2])).backward()


# ------------------------------------------------------------------ 5. validate() of what is not a config
@pytest.mark.parametrize("value", [{"epochs": 1}, None, 5, "smoke", [1, 2], object()])
def test_validate_of_something_that_is_not_a_config_names_it_in_one_line(value):
    """r43g: validate(x) for a dict, None, 5, 'smoke', a list or object() ended in an AttributeError traceback."""
    with pytest.raises(ConfigError, match=rf"^config: expected a TrainConfig, got .* \({type(value).__name__}\)\. "
                                          r"Fix: build one with tutorial_lib\.engine\.config\.make_config\(\)"):
        validate(value)


# ------------------------------------------------------------------ 6. long values cut
@pytest.mark.parametrize("value", ["a" * 100_000, "/tmp/" + "b" * 100_000, "/tmp/" + "/".join(["d" * 200] * 400),
                                   "c" * 3000])
def test_attach_of_a_long_path_says_one_short_line(value):
    """r43g: jobs.attach('a' * 100000) printed one 100,218-character line (an 80 KB deep path too)."""
    from tutorial_lib import jobs

    with pytest.raises(jobs.JobError) as refused:
        jobs.attach(value)
    message = str(refused.value)
    assert len(message) < LINE_LIMIT and "\n" not in message and message.startswith("run_dir: ") and "Fix: " in message


def test_submit_with_a_long_backend_says_one_short_line(tmp_path):
    """r43g: submit(cfg, backend='b' * 100000) printed the whole value (100,073 characters)."""
    from tutorial_lib import jobs

    with pytest.raises(jobs.JobError) as refused:
        jobs.submit(_local_config(tmp_path), backend="b" * 100_000, verbose=False)
    message = str(refused.value)
    assert len(message) < LINE_LIMIT and message.startswith("backend: ") and "Fix: use 'auto', 'local'" in message


# ------------------------------------------------------------------ 7. data prepare under a linked folder
def test_prepare_into_a_destination_under_a_linked_folder_makes_links_that_lead_to_the_source(tmp_path):
    """r43g: `data prepare tiny ~/scratch/x` with ~/scratch a link to a deeper folder made relative links from the
    unresolved path: they led nowhere, the run failed naming DEST/train, and left a torn DEST."""
    from tests.conftest import write_image_tree
    from tutorial_lib.data.prepare import prepare

    source, deep = tmp_path / "tiny", tmp_path / "deep" / "a" / "b" / "c"
    classes = {"n01440764": 2, "n01443537": 2}
    write_image_tree(source, {"train": classes, "val": classes}, suffix=".JPEG")
    deep.mkdir(parents=True)
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "scratch").symlink_to(deep)
    summary = prepare(source, tmp_path / "home" / "scratch" / "x", progress=False)
    assert (summary["train"], summary["val"], summary["classes"]) == (4, 4, 2)
    for split in ("train", "val"):
        assert (deep / "x" / split).resolve() == (source / split).resolve()
        assert sorted(os.listdir(deep / "x" / split)) == sorted(classes)


# ------------------------------------------------------------------ 8. a local job's stage_to
@pytest.mark.parametrize("where", ["absent", "a file"])
def test_a_local_job_s_stage_to_that_is_no_folder_here_is_refused_before_the_run_directory(tmp_path, where):
    """r43g: submit(backend='local') with a stage_to that does not exist on this machine (or is a file) started the
    job, which wrote its run directory and only then failed 'stage_to: ... is not a folder on node ...'. The local
    backend's node is this machine: the same words come from make_spec now, and nothing is written."""
    from tutorial_lib.jobs.spec import make_spec

    stage_to = tmp_path / "stage"
    if where == "a file":
        stage_to.write_text("mine\n")
    cfg = _local_config(tmp_path, stage_to=str(stage_to))
    with pytest.raises(ConfigError, match=rf"^stage_to: {re.escape(str(stage_to))} is not a folder on node \S+\. "
                                          "Fix: create it first"):
        make_spec(cfg, check_data=False)
    assert not (tmp_path / "runs").exists()
    assert make_spec(cfg, on_cluster=True, check_data=False, site={"partition": "compute"})  # its nodes check theirs


# ------------------------------------------------------------------ 9. --time-min
@pytest.mark.parametrize("option, read_as", [("--time-min=99:99:99", "4-04:41:00"), ("--time-min=1-24:00", None),
                                             ("--time-min=soon", None)])
def test_sbatch_options_time_min_is_read_as_slurm_reads_a_time(option, read_as):
    """r43g: site sbatch_options ['--time-min=99:99:99'] passed unchecked to sbatch while time: 99:99:99 was
    refused (Slurm adds the fields up: 4-04:41:00)."""
    from tutorial_lib.jobs.site import Site
    from tutorial_lib.jobs.slurm_values import check_sbatch_option

    with pytest.raises(ConfigError, match=r"^site\.sbatch_options: --time-min: .* Fix: .*"
                                          + (re.escape(f"e.g. {read_as}") if read_as else "")):
        Site.from_dict({"partition": "compute", "time": "1:00:00", "sbatch_options": [option]})
    assert check_sbatch_option("--time-min=0:30:00") == "--time-min=0:30:00"


# ------------------------------------------------------------------ 10. the optimiser's memory
def test_the_memory_estimate_counts_the_momentum_buffers(tmp_path, monkeypatch):
    """r43g: convnext_large at 32 px under a 6 GiB address-space limit passed the estimate (weights, gradients,
    activations) and failed with an allocator traceback in the SGD step, which adds a momentum buffer per weight."""
    from tutorial_lib.engine import memory

    cfg = make_config("smoke", arch="resnet18", image_size=16, batch_size=2, num_classes=10)
    parts = memory.training_bytes("resnet18", 10, 16, 2)
    weights = parts["weights and gradients"] // 8
    assert parts["optimizer state"] == 4 * weights
    assert memory.training_bytes("resnet18", 10, 16, 2, momentum=False)["optimizer state"] == 0
    without = parts["total"] - parts["optimizer state"]
    monkeypatch.setattr(memory, "available_bytes", lambda device="cpu": without + weights)  # fits without momentum
    with pytest.raises(ConfigError, match=r"^image_size/batch_size: .* \(weights and gradients [\d.]+ MB; optimizer "
                                          r"state [\d.]+ MB; .* nothing was allocated\. Fix: "):
        memory.check_training_fits(cfg, 10, torch.device("cpu"))
    plain = make_config("smoke", arch="resnet18", image_size=16, batch_size=2, num_classes=10, momentum=0.0)
    memory.check_training_fits(plain, 10, torch.device("cpu"))  # plain SGD keeps no buffer: it fits


def test_the_cpu_allocator_failing_beyond_the_estimate_is_one_line(tmp_path, monkeypatch):
    """The estimate is a lower bound: a run near the limit may pass it and fail in the step. torch's CPU allocator
    then raised a RuntimeError traceback (CUDA's out-of-memory already had its one line); now it is one line with
    the estimate, exit status 1."""
    from tutorial_lib.engine import trainer as trainer_module

    def fail(self):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate "
                           "memory: you tried to allocate 9437184 bytes. Error code 12 (Cannot allocate memory)")

    monkeypatch.setattr(trainer_module.Trainer, "setup", lambda self: None)
    monkeypatch.setattr(trainer_module.Trainer, "fit", fail)
    status, err = _main(trainer_module.main, ["--profile", "smoke", "--dataset", "synthetic", "--output-root",
                                              str(tmp_path / "runs"), "--name", "oom", "--image-size", "16"])
    line = _one_line(err, "image_size/batch_size: a training step of ")
    assert status == EXIT_ERROR and "9.44 MB more could not be allocated" in line and "optimizer state" in line
    assert len(line) < LINE_LIMIT
