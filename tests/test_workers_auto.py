"""``workers: auto``: each rank starts as many loader workers as the CPUs it is given allow (its affinity, not
the node's count), records the number, and a bad value is refused in one line naming the field.

The strict emulated Slurm cluster (``TUTORIAL_SLURM_STRICT=1``) pins every task to the CPUs it asked for, so
there a rank given 1 CPU must start 0 workers and a rank given 2 CPUs 1 worker.
"""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

from tutorial_lib import REPO_ROOT, jobs
from tutorial_lib.engine import device
from tutorial_lib.engine.config import PROFILES, ConfigError, TrainConfig, make_config, to_cli_args, validate
from tutorial_lib.engine.trainer import Trainer
from tutorial_lib.jobs.spec import load_site


@pytest.mark.parametrize(("cpus", "workers"), [(1, 0), (2, 1), (5, 4), (64, 8)])
def test_auto_follows_the_cpus_this_process_may_use(monkeypatch, cpus, workers):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cpus)))
    assert device.loader_workers("auto") == workers
    assert device.loader_workers(3) == 3  # a number is taken as given


def test_auto_is_accepted_everywhere_a_number_is_and_the_gpu_profiles_use_it():
    assert PROFILES["gpu"]["workers"] == PROFILES["hal"]["workers"] == "auto"
    for value in ("auto", "AUTO", " auto "):
        assert make_config("smoke", workers=value).workers == "auto"
    cfg = validate(make_config("smoke", workers="auto"), check_paths=False, cuda_available=False)
    assert to_cli_args(cfg)[to_cli_args(cfg).index("--workers") + 1] == "auto"
    assert make_config("smoke", workers="3").workers == 3


@pytest.mark.parametrize("value", [-1, "-2", "many", 2.5, True, "auto8"])
def test_a_bad_workers_value_is_refused_in_one_line_naming_the_field(value):
    with pytest.raises(ConfigError) as caught:
        validate(make_config("smoke", workers=value), check_paths=False, cuda_available=False)
    message = str(caught.value)
    assert message.startswith("workers:") and "\n" not in message and "auto" in message


def test_a_config_built_directly_with_another_string_is_refused():
    with pytest.raises(ConfigError, match="^workers: expected int or auto"):
        validate(dataclasses.replace(TrainConfig(), workers="8"), check_paths=False, cuda_available=False)


def test_the_trainer_resolves_auto_from_its_affinity_and_records_it(monkeypatch, tmp_path, digits_dir):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2})
    cfg = make_config("smoke", name="auto", output_root=str(tmp_path), dataset="imagefolder",
                      data_dir=str(digits_dir), workers="auto", progress=False)
    trainer = Trainer(cfg)
    try:
        trainer.setup()
        assert trainer.loaders.train.num_workers == 2  # 3 CPUs: 2 workers, one CPU for training
    finally:
        trainer.close()
    recorded = json.loads((tmp_path / "auto" / "config.json").read_text())
    assert recorded["workers"] == 2 and recorded["workers_setting"] == "auto"
    assert recorded["rank_cpus"] == [3] and recorded["rank_workers"] == [2]
    start = json.loads((tmp_path / "auto" / "metrics.jsonl").read_text().splitlines()[0])
    assert start["event"] == "start" and start["rank_workers"] == [2]


def _strict(slurm) -> None:
    import subprocess

    partitions = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True, timeout=30).stdout
    if "*" in partitions:
        pytest.skip("the strict emulated cluster is not running (TUTORIAL_SLURM_STRICT=1 make slurm-up)")


def test_on_the_strict_cluster_auto_follows_the_cpus_each_rank_is_given(tmp_path, slurm, digits_dir):
    """1 CPU per task: 0 workers; 2 CPUs per task: 1 worker, read back from each run's config.json."""
    _strict(slurm)
    site = load_site(REPO_ROOT / "notebooks" / "params" / "ci-site.yaml")
    submitted = {}
    for cpus in (1, 2):
        cfg = make_config("smoke", name=f"auto{cpus}", output_root=str(tmp_path), dataset="imagefolder",
                          data_dir=str(digits_dir), epochs=1, max_steps_per_epoch=1, workers="auto", progress=False)
        submitted[cpus] = jobs.submit(cfg, backend="slurm", site=dataclasses.replace(site, cpus_per_rank=cpus),
                                      verbose=False)
    for cpus, job in submitted.items():
        assert job.wait(timeout=300, check=False) == "COMPLETED", job.explain()
        recorded = json.loads((tmp_path / f"auto{cpus}" / "config.json").read_text())
        assert (recorded["rank_cpus"], recorded["rank_workers"]) == ([cpus], [cpus - 1])
        assert recorded["workers"] == cpus - 1 and recorded["workers_setting"] == "auto"
