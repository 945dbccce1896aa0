"""The job layer against real processes: the local torchrun backend and the emulated Slurm cluster."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from tutorial_lib import jobs
from tutorial_lib.engine.config import ConfigError, make_config
from tutorial_lib.engine.schedule import SchedulePlan
from tutorial_lib.jobs.commands import spec_torchrun_command
from tutorial_lib.jobs.spec import JobError, make_spec
from tutorial_lib.rundir.layout import CONFIG_FILE, DONE_FILE

SMALL = dict(dataset="digits", image_size=32, arch="resnet18", epochs=1, max_steps_per_epoch=4, batch_size=16,
             progress=False, workers=0, device="cpu")


@pytest.fixture
def shared_data(digits_dir) -> str:
    """The session's digits export (conftest's ``digits_dir``), shared by every job of the session."""
    return str(digits_dir)


def small_config(tmp_path, shared_data, name, **overrides):
    """A tiny CPU training config writing under ``tmp_path``."""
    settings = {**SMALL, "data_dir": shared_data, **overrides}
    return make_config("smoke", name=name, output_root=str(tmp_path / "runs"), **settings)


def _wait_for_event(job, event, timeout=180):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(r["event"] == event for r in job.events()):
            return
        if job.done():
            pytest.fail(f"job ended {job.state} before a {event} event:\n{job.logs(tail=30)}")
        time.sleep(0.5)
    pytest.fail(f"no {event} event within {timeout} s:\n{job.logs(tail=30)}")


def _processes_of(run_name: str) -> list[str]:
    listing = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [line for line in listing.splitlines() if f"--name {run_name} " in line + " " and "ps -eo" not in line]


def test_one_node_two_ranks_completes(tmp_path, shared_data, backend):
    job = jobs.submit(small_config(tmp_path, shared_data, f"one-{backend}"), nodes=1, ranks_per_node=2,
                      backend=backend, verbose=False)
    assert job.backend == backend
    assert job.wait(timeout=300) == "COMPLETED", job.explain()
    start = job.metrics("start").iloc[0]
    assert start["world_size"] == 2 and start["global_batch"] == 32
    assert job.exit_code == 0
    again = jobs.attach(job.run_dir)  # e.g. after a kernel restart
    assert (again.id, again.backend, again.state) == (job.id, backend, "COMPLETED")
    assert len(again.metrics("epoch")) == 1


def test_two_node_job_runs_on_two_nodes(tmp_path, shared_data, backend):
    """Each node stages the data to its local disk (stage_to), trains from that copy and removes it. The LR is
    scaled by the global batch of both nodes (issue 47: scaled by one node's batch, planted, no test noticed)."""
    local = tmp_path / "node-local"
    local.mkdir()
    (local / "foreign.txt").write_text("not the project's")
    cfg = small_config(tmp_path, shared_data, f"two-{backend}", dataset="imagefolder", stage_to=str(local),
                       log_every=1)
    job = jobs.submit(cfg, nodes=2, ranks_per_node=1, backend=backend, verbose=False)
    assert job.wait(timeout=300) == "COMPLETED", job.explain()
    assert job.metrics("start").iloc[0]["world_size"] == 2
    scaled = cfg.base_lr * cfg.batch_size * 2 / cfg.lr_reference_batch  # two nodes' batches
    assert job.metrics("start").iloc[0]["scaled_lr"] == pytest.approx(scaled)
    plan = SchedulePlan.of(cfg, cfg.max_steps_per_epoch)
    used = [(e["step"], e["lr"]) for e in job.events() if e["event"] == "step"]  # the optimiser's LR after each step
    assert used == [(step, pytest.approx(scaled * plan.factor(step))) for step in range(1, 5)]
    config = json.loads((job.run_dir / CONFIG_FILE).read_text())
    hosts = config["hosts"]
    assert len(hosts) == 2 and len(set(hosts)) == 2, hosts  # each rank ran on its own (Slurm or emulated) node
    read_from = config["data_read_from"]
    assert sorted(read_from) == sorted(hosts) and config["data_dir"] == shared_data
    assert {Path(p).parent for p in read_from.values()} == {local} and len(set(read_from.values())) == 2, read_from
    assert sorted(p.name for p in local.iterdir()) == ["foreign.txt"]  # the copies are gone, the rest stays
    assert "staged" in job.logs() and "removed the staged copy" in job.logs()


def test_unusable_stage_to_is_refused_in_one_line_before_the_local_job_starts(tmp_path, shared_data):
    """A local job's nodes are this machine: its stage_to is checked at submit, in the job's own words (r43g: the
    job started, wrote its run directory, and only then failed)."""
    cfg = small_config(tmp_path, shared_data, "stage-absent", dataset="imagefolder", stage_to=str(tmp_path / "no"))
    with pytest.raises(ConfigError, match=rf"^stage_to: {re.escape(str(tmp_path / 'no'))} is not a folder on node "
                                          r"\S+\. Fix: create it first"):
        jobs.submit(cfg, nodes=1, ranks_per_node=1, backend="local", verbose=False)
    assert not (tmp_path / "runs").exists() and not (tmp_path / "no").exists()


def test_cancel_running_job(tmp_path, shared_data, backend):
    name = f"cancel-{backend}"
    job = jobs.submit(small_config(tmp_path, shared_data, name, epochs=50, max_steps_per_epoch=0, log_every=1),
                      nodes=1, ranks_per_node=1, backend=backend, verbose=False)
    _wait_for_event(job, "step")
    assert job.state == "RUNNING"
    assert job.cancel() == "CANCELLED"
    deadline = time.monotonic() + 30
    while _processes_of(name) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _processes_of(name) == []
    with pytest.raises(JobError, match="CANCELLED"):
        job.wait(timeout=5)


def test_failed_job_is_explained(tmp_path, shared_data, backend):
    cfg = small_config(tmp_path, shared_data, f"fail-{backend}", dataset="imagefolder",
                       data_dir=str(tmp_path / "no-such-data"))
    job = jobs.submit(cfg, backend=backend, check_data=False, verbose=False)  # checked on the cluster only
    with pytest.raises(JobError) as failure:
        job.wait(timeout=300)
    message = str(failure.value)
    assert "FAILED" in message and "exit code" in message
    assert "no-such-data" in message and "does not exist" in message  # the log tail names the problem


def test_refuses_second_job_on_live_run_directory(tmp_path, shared_data):
    cfg = small_config(tmp_path, shared_data, "busy", epochs=50, max_steps_per_epoch=0)
    job = jobs.submit(cfg, backend="local", verbose=False)
    try:
        with pytest.raises((JobError, RuntimeError), match="in use|live job"):
            jobs.submit(cfg, backend="local", verbose=False)
    finally:
        job.cancel()


def test_slurm_requested_without_slurm_is_explained(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(JobError, match="Slurm is not usable: sbatch is not on the PATH"):
        jobs.choose_backend("slurm")
    assert jobs.choose_backend("auto", verbose=False) == "local"


def test_sbatch_rejection_shows_its_message(tmp_path, shared_data, slurm):
    cfg = small_config(tmp_path, shared_data, "nopart")
    with pytest.raises(JobError, match="sbatch refused.*(partition|Partition)"):
        jobs.submit(cfg, backend="slurm", partition="no_such_partition", verbose=False)


def test_sweep_runs_one_job_per_value_in_order(tmp_path, shared_data):
    sweep = jobs.sweep(small_config(tmp_path, shared_data, "sw"), over="ranks_per_node", values=[1, 2],
                       backend="local", verbose=False)
    assert [j.name for j in sweep] == ["sw-ranks_per_node1", "sw-ranks_per_node2"]
    for job in sweep:
        assert job.wait(timeout=300) == "COMPLETED", job.explain()
    first_end = sweep[0].events()[-1]["time"]
    second_start = sweep[1].events()[0]["time"]
    assert second_start >= first_end  # sequential: the second waited for the first
    assert [j.metrics("start").iloc[0]["world_size"] for j in sweep] == [1, 2]


HOSTILE = ["x; touch {canary}", "$(touch {canary})", "`touch {canary}`", "a\ntouch {canary}",
           "'; touch {canary}; '", "\" && touch {canary}", "../../etc", "a b", ".."]


@pytest.mark.parametrize("field", ["name", "partition", "account", "time", "sbatch_options"])
@pytest.mark.parametrize("template", HOSTILE)
def test_hostile_job_fields_are_refused(tmp_path, shared_data, field, template):
    value = template.format(canary=tmp_path / "canary")
    cfg = small_config(tmp_path, shared_data, "hostile")
    kwargs = {"partition": None, "account": None, "time": "10", "sbatch_options": []}
    with pytest.raises(ConfigError) as error:
        if field == "name":
            make_spec(dataclasses.replace(cfg, name=value))
        else:
            kwargs[field] = [value] if field == "sbatch_options" else value
            make_spec(cfg, **kwargs)
    assert field in str(error.value) and "Fix" in str(error.value)
    assert not (tmp_path / "canary").exists()


@pytest.mark.parametrize("field", ["data_dir", "output_root", "arch"])
@pytest.mark.parametrize("template", HOSTILE[:6])
def test_hostile_paths_are_refused_or_inert(tmp_path, shared_data, field, template):
    """Paths may legally hold odd characters: they must then reach commands as one inert argument."""
    value = template.format(canary=tmp_path / "canary")
    cfg = dataclasses.replace(small_config(tmp_path, shared_data, "hostile"), **{field: value})
    try:
        spec = make_spec(cfg, check_data=False)
    except ConfigError as error:
        assert field in str(error)
        return
    flag = "--" + field.replace("_", "-")
    whole = str(Path(value).resolve()) if field in ("data_dir", "output_root") else value  # made absolute, once
    for command in (spec_torchrun_command(spec), jobs.sbatch_command(spec)):
        assert command[command.index(flag) + 1] == whole, f"{field} must reach the command as one whole argument"
        assert all(isinstance(arg, str) for arg in command)  # an argv list: no shell ever parses it


def test_hostile_output_root_runs_inert(tmp_path, shared_data):
    """A run directory whose path holds shell syntax trains normally and executes nothing."""
    odd_root = tmp_path / "runs $(touch CANARY) `touch CANARY`; touch CANARY"
    cfg = dataclasses.replace(small_config(tmp_path, shared_data, "inert"), output_root=str(odd_root))
    job = jobs.submit(cfg, backend="local", verbose=False)
    assert job.wait(timeout=300) == "COMPLETED", job.explain()
    assert (odd_root / "inert" / DONE_FILE).exists()
    assert not list(tmp_path.rglob("CANARY")) and not os.path.exists("CANARY")


def test_bad_resources_are_refused(tmp_path, shared_data):
    cfg = small_config(tmp_path, shared_data, "res")
    for kwargs, field in [({"nodes": 0}, "nodes"), ({"ranks_per_node": -1}, "ranks_per_node"),
                          ({"nodes": "2"}, "nodes"), ({"time": "soon"}, "time")]:
        with pytest.raises(ConfigError, match=field):
            make_spec(cfg, **kwargs)
    with pytest.raises(ConfigError, match="--output"):
        make_spec(cfg, sbatch_options=["--output=/etc/passwd"])


def test_make_spec_builds_the_spec_that_submit_hands_on(tmp_path, shared_data, monkeypatch):
    """One function validates a job and makes its paths absolute, so a notebook's plan check, notebook 05's
    printed spec and submit see the same spec; data is checked for the trainer only, as submit does."""
    monkeypatch.chdir(tmp_path)
    cfg = dataclasses.replace(small_config(tmp_path, shared_data, "once"), output_root="runs")
    spec = make_spec(cfg, check_data=True)
    assert spec.config.output_root == str(tmp_path / "runs") and spec.run_dir == tmp_path / "runs" / "once"
    assert Path(spec.config.data_dir).is_absolute()
    assert make_spec(spec.config).to_dict() == spec.to_dict()  # building it again changes nothing
    no_data = dataclasses.replace(cfg, dataset="imagefolder", data_dir=str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="missing"):
        make_spec(no_data)
    bench = make_spec(no_data, module="tutorial_lib.bench", module_args=["allreduce"])
    assert bench.program_args() == ["allreduce"]


def test_renamed_submit_argument_names_the_new_one(tmp_path, shared_data):
    cfg = small_config(tmp_path, shared_data, "renamed")
    with pytest.raises(ConfigError, match="gpus_per_node.*renamed ranks_per_node"):
        jobs.submit(cfg, backend="local", gpus_per_node=2, verbose=False)
    with pytest.raises(ConfigError, match="ranks_per_node"):
        jobs.sweep(cfg, over="gpus_per_node", values=[1], backend="local", verbose=False)
    with pytest.raises(TypeError, match="nodez"):
        jobs.submit(cfg, backend="local", nodez=2, verbose=False)
    assert not cfg.run_dir.exists()  # refused before anything was written


def test_slurm_nodes_run_the_local_backends_torchrun_command(tmp_path, shared_data):
    """train.sbatch's per-node task (jobs.launch) and the local backend build torchrun's argv in one place, the
    launcher from the job's record (its one reader), the batch script's environment naming only where it is."""
    from dataclasses import asdict

    from tutorial_lib.jobs.commands import Rendezvous, job_env
    from tutorial_lib.jobs.launch import node_command
    from tutorial_lib.jobs.record import launch_settings, read_launch, write_job_file

    spec = make_spec(small_config(tmp_path, shared_data, "same"), nodes=2, ranks_per_node=3, max_restarts=2,
                     check_data=False)
    write_job_file(spec.run_dir, {"backend": "slurm", "id": "77", "name": "same",
                                  "launch": asdict(launch_settings(spec))})
    slurm_env = {**job_env(spec), "SLURM_NNODES": "2", "SLURM_NODEID": "1", "SLURM_JOB_ID": "77", "HEAD": "n1",
                 "PORT": "20077", "RANKS_PER_NODE": "5"}  # a stray by-hand input: the record wins
    assert set(job_env(spec)) == {"TUTORIAL_RUN_DIR", "PYTHONPATH", "TUTORIAL_PYTHON"}
    command = node_command(spec.program_args(), slurm_env)
    assert command == spec_torchrun_command(spec, Rendezvous("n1:20077", "77", is_host=False))
    assert command[command.index("--max-restarts") + 1] == "2" and command[command.index("--nproc-per-node") + 1] == "3"
    environment = read_launch(slurm_env).environment()
    assert environment["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"  # restarted ranks get a fresh rendezvous store
    assert environment["TUTORIAL_STOP_FILE"] == str(spec.run_dir / "STOP")


def test_a_batch_script_started_by_hand_takes_its_inputs_and_the_readers_defaults(tmp_path):
    """No record (sbatch cluster_scripts/train.sbatch --key value): the documented inputs, else record.py's
    defaults; a bad count is one line naming the variable."""
    import sys

    from tutorial_lib.jobs.record import read_launch

    plain = read_launch({"SLURM_JOB_ID": "5"})
    assert (plain.ranks({}), plain.max_restarts, plain.module, plain.run_dir) == (1, 0, "tutorial_lib.train", "")
    assert plain.ranks({"SLURM_GPUS_ON_NODE": "4"}) == 4 and plain.environment() == {}
    given = read_launch({"RANKS_PER_NODE": "2", "TUTORIAL_MAX_RESTARTS": "1", "TUTORIAL_MODULE": "tutorial_lib.bench",
                         "TUTORIAL_RUN_DIR": str(tmp_path), "TUTORIAL_PYTHON": sys.executable})
    assert (given.ranks({}), given.max_restarts, given.module, given.python) == (2, 1, "tutorial_lib.bench",
                                                                                 sys.executable)
    assert given.environment()["TUTORIAL_STOP_FILE"] == str(tmp_path / "STOP")
    with pytest.raises(JobError, match="RANKS_PER_NODE: 'two' is not a whole number"):
        read_launch({"RANKS_PER_NODE": "two"})
