"""``workers: auto``: each rank starts as many loader workers as the CPUs it is given allow (its affinity, not
the node's count, shared by the ranks of its node), records the number, and a bad value is refused in one
line naming the field.

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
from tutorial_lib.jobs.site import load_site


@pytest.mark.parametrize(("cpus", "ranks", "workers"), [(1, 1, 0), (2, 1, 1), (5, 1, 4), (64, 1, 8), (8, 4, 1),
                                                       (32, 4, 7), (2, 4, 0)])
def test_auto_follows_the_cpus_this_process_may_use(monkeypatch, cpus, ranks, workers):
    """The affinity, shared by the node's ranks (one torchrun per node starts them in one task)."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cpus)))
    assert device.loader_workers("auto", ranks_sharing=ranks) == workers
    assert device.loader_workers(3, ranks_sharing=ranks) == 3  # a number is taken as given


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
    """A task of 2 CPUs: its one rank starts 1 worker; shared by 2 ranks (1 CPU each), they start 0. Read back
    from each run's config.json: every rank's affinity and the workers it started."""
    _strict(slurm)
    site = load_site(REPO_ROOT / "notebooks" / "params" / "ci-site.yaml")
    expected = {(1, 2): ([2], [1]), (2, 1): ([2, 2], [0, 0])}  # (ranks, cpus per rank): (rank_cpus, rank_workers)
    submitted = {}
    for ranks, cpus in expected:
        cfg = make_config("smoke", name=f"auto{ranks}x{cpus}", output_root=str(tmp_path), dataset="imagefolder",
                          data_dir=str(digits_dir), epochs=1, max_steps_per_epoch=1, workers="auto", progress=False)
        submitted[ranks, cpus] = jobs.submit(cfg, ranks_per_node=ranks, backend="slurm", verbose=False,
                                             site=dataclasses.replace(site, cpus_per_rank=cpus))
    for (ranks, cpus), job in submitted.items():
        assert job.wait(timeout=300, check=False) == "COMPLETED", job.explain()
        recorded = json.loads((tmp_path / f"auto{ranks}x{cpus}" / "config.json").read_text())
        assert (recorded["rank_cpus"], recorded["rank_workers"]) == expected[ranks, cpus]
        assert recorded["workers"] == expected[ranks, cpus][1][0] and recorded["workers_setting"] == "auto"
