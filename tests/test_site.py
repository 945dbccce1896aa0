"""The site block: checked like every other sbatch input, written into each job's batch script, given to
every Slurm job of every notebook; the course refuses parameter names no notebook declares.

Nothing here needs a cluster except the last tests, which need the strict emulated one
(``TUTORIAL_SLURM_STRICT=1 cluster_scripts/start_local_slurm.sh``, what CI runs).
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
import subprocess
import sys

import pytest
import yaml

from tutorial_lib import REPO_ROOT, course, jobs
from tutorial_lib.course import plans
from tutorial_lib.engine.config import ConfigError, make_config
from tutorial_lib.jobs.commands import batch_script, sbatch_command, site_section
from tutorial_lib.jobs.site import Site, load_site
from tutorial_lib.jobs.spec import absolute_config, make_spec

CI_SITE = REPO_ROOT / "notebooks" / "params" / "ci-site.yaml"
GPU_SITE = {"partition": "gpu", "account": "proj1", "qos": "high", "time": "02:00:00", "cpus_per_rank": 8,
            "mem": "200G", "gpu_request": "gres", "setup": ["module load cuda/12.4", "source $HOME/venv/bin/activate"],
            "python": "python3", "env": {"NCCL_SOCKET_IFNAME": "ib0", "NCCL_IB_HCA": "mlx5_0"},
            "sbatch_options": ["--constraint=a100"]}
HOSTILE = ["x; touch {canary}", "$(touch {canary})", "`touch {canary}`", "a\ntouch {canary}",
           "'; touch {canary}; '", "\" && touch {canary}", "a b", "16\n"]  # the last: a value that ends in a newline


def spec_for(site, tmp_path, ranks=4, profile="gpu", **kwargs):
    cfg = absolute_config(make_config(profile, name="site", output_root=str(tmp_path)))
    return make_spec(cfg, 2, ranks, check_data=False, on_cluster=True, site=site, **kwargs)


def test_the_site_reaches_sbatch_and_the_batch_script(tmp_path):
    spec = spec_for(GPU_SITE, tmp_path)
    command = sbatch_command(spec)
    for option in ("--partition=gpu", "--account=proj1", "--qos=high", "--time=02:00:00", "--cpus-per-task=32",
                   "--mem=200G", "--gres=gpu:4", "--constraint=a100"):
        assert option in command
    assert not any(word.startswith("--gpus-per-node") for word in command)
    assert command[command.index("--constraint=a100") + 1] == str(spec.run_dir / "job.sbatch")
    script = batch_script(spec)
    lines = script.splitlines()
    for line in GPU_SITE["setup"]:  # the user's own shell, exactly as given, in order
        assert line in lines
    first, second = (lines.index(line) for line in GPU_SITE["setup"])
    assert first < second < lines.index("# 1. Inputs, with defaults.")
    assert "export NCCL_SOCKET_IFNAME=ib0" in lines and "export TUTORIAL_PYTHON=python3" in lines
    assert spec.python == "python3"  # what every node's torchrun runs
    # explicit submit arguments win over the site's
    spec = spec_for(GPU_SITE, tmp_path, partition="debug", time="10")
    assert "--partition=debug" in sbatch_command(spec) and "--time=10" in sbatch_command(spec)


def test_the_site_time_is_the_default_and_the_longest_a_job_may_ask_for(tmp_path):
    """One rule for the two sources of a job's time limit, said in one line: the site's time unless the job
    names its own, which may not be longer (Slurm would leave the job pending: Reason=PartitionTimeLimit)."""
    site = {"partition": "gpu", "time": "04:00:00"}
    spec = spec_for(site, tmp_path)
    assert "--time=04:00:00" in sbatch_command(spec)
    assert spec.time_note == "time 04:00:00: the site block's time (the job sets none)"
    spec = spec_for(site, tmp_path, time="00:15:00")
    assert "--time=00:15:00" in sbatch_command(spec) and spec.to_dict()["time_note"] == (
        "time 00:15:00: the job's own, within the site block's time 04:00:00 (the longest a job may run)")
    assert spec_for(site, tmp_path, time="04:00:00").time_note == "time 04:00:00: the job's own, the same as the " \
                                                                  "site block's"
    with pytest.raises(ConfigError) as refused:
        spec_for(site, tmp_path, time="1-00:00:00")
    assert str(refused.value) == ("time: 1-00:00:00 is longer than the site block's time 04:00:00, the longest a job "
                                  "of this site may run. Fix: ask for at most 04:00:00 (a notebook's time_limit, "
                                  "submit's time=), or leave it out to get the site's; or raise site.time where the "
                                  "site allows it.")
    assert (spec_for({}, tmp_path).time, spec_for({}, tmp_path, time="90").time) == ("00:30:00", "90")
    assert "neither the job nor the site block" in spec_for({}, tmp_path).time_note


@pytest.mark.parametrize("site_time, asked", [(None, "00:05:00"), ("04:00:00", "00:05:00"), ("00:04:00", "00:04:00")])
def test_the_preflight_asks_for_five_minutes_within_the_site_time(site_time, asked, tmp_path, monkeypatch):
    from tutorial_lib.jobs import preflight

    submitted = {}

    def refuse(config, **kwargs):  # what submit was given; then refused as sbatch would, so nothing runs
        submitted.update(kwargs)
        raise jobs.JobError("refused here")

    monkeypatch.setattr(jobs, "choose_backend", lambda backend, verbose=True: "slurm")
    monkeypatch.setattr(jobs, "submit", refuse)
    site = {"partition": "compute", **({"time": site_time} if site_time else {})}
    report = preflight.run(make_config("smoke", name="pf", output_root=str(tmp_path)), backend="slurm", site=site)
    assert submitted["time"] == asked and str(report) == "FAIL  scheduler accepts the job: refused here"


def test_gpu_request_style_and_containers(tmp_path):
    assert "--gpus-per-node=4" in sbatch_command(spec_for({"partition": "gpu"}, tmp_path))
    apptainer = spec_for({"container": {"image": "/images/torch.sif", "binds": ["/data", "/scratch:/s:ro"]}}, tmp_path)
    assert ("SITE_LAUNCH=(apptainer exec --nv --bind /data --bind /scratch:/s:ro /images/torch.sif)"
            in batch_script(apptainer).splitlines())
    pyxis = spec_for({"container": {"image": "nvcr.io#nvidia/pytorch:24.01-py3", "runtime": "pyxis",
                                    "binds": ["/data"]}}, tmp_path)
    assert "SITE_SRUN=('--container-image=nvcr.io#nvidia/pytorch:24.01-py3'" in batch_script(pyxis)
    # a CPU job asks for no GPUs, whatever the style
    cpu = spec_for({"gpu_request": "gres", "cpus_per_rank": 1}, tmp_path, ranks=2, profile="smoke")
    assert not [w for w in sbatch_command(cpu) if w.startswith(("--gres", "--gpus"))]
    assert "--cpus-per-task=2" in sbatch_command(cpu)


def test_the_site_section_runs_in_bash_and_its_values_stay_inert(tmp_path):
    """The values a site may set are quoted: bash runs the section and sets them, executing nothing."""
    canary = tmp_path / "canary"
    hostile = f"$(touch {canary}) `touch {canary}`; touch {canary}"
    spec = spec_for({"env": {"NCCL_DEBUG": hostile}, "setup": [f"echo setup ran > {tmp_path / 'setup'}"]}, tmp_path)
    shell = f"set -euo pipefail\n{site_section(spec)}\nprintf %s \"$NCCL_DEBUG\""
    result = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert result.stdout == hostile and not canary.exists()
    assert (tmp_path / "setup").read_text() == "setup ran\n"  # setup lines are shell, run as written
    assert subprocess.run(["bash", "-n"], input=batch_script(spec), text=True).returncode == 0


@pytest.mark.parametrize("key", ["partition", "account", "qos", "time", "mem", "python", "gpu_request",
                                 "cpus_per_rank", "container", "sbatch_options", "env", "setup"])
@pytest.mark.parametrize("template", HOSTILE)
def test_hostile_site_values_are_refused(tmp_path, key, template):
    value = template.format(canary=tmp_path / "canary")
    if key == "setup" and "\n" not in value:  # the user's own shell: any one line, kept as it is
        assert Site.from_dict({"setup": [value]}).setup == (value,)
        return
    site = {"env": {"NCCL_X": value} if "\n" in value else {value: "1"}, "sbatch_options": [f"--comment={value}"],
            "container": {"image": value}, "setup": [value]}.get(key, value)
    with pytest.raises(ConfigError) as error:
        Site.from_dict({key: site})
    assert f"site.{key}" in str(error.value) and "Fix" in str(error.value)
    assert "\n" not in str(error.value)
    assert not (tmp_path / "canary").exists()


@pytest.mark.parametrize("option", ["--outp=/tmp/x", "--part=x", "--acc=x", "--export-f=x", "--job-nam=x",
                                    "--gpus-per-n=8", "--wrap=x", "--output=/tmp/x"])
def test_site_sbatch_options_cannot_reach_what_the_library_sets(option):
    with pytest.raises(ConfigError, match="site.sbatch_options"):
        Site.from_dict({"sbatch_options": [option]})


def test_unknown_site_keys_and_reserved_variables_are_refused():
    with pytest.raises(ConfigError, match="site.partitions: not a site setting"):
        Site.from_dict({"partitions": "gpu"})
    for name in ("PYTHONPATH", "SLURM_NNODES", "TUTORIAL_RUN_DIR", "SRUN_CPUS_PER_TASK"):
        with pytest.raises(ConfigError, match=f"site.env: {name} is set by tutorial_lib.jobs"):
            Site.from_dict({"env": {name: "1"}})
    with pytest.raises(ConfigError, match="site.container.binds"):
        Site.from_dict({"container": {"image": "/x.sif", "binds": ["/a,/etc"]}})


def test_the_site_comes_from_tutorial_site_when_none_is_given(tmp_path, monkeypatch):
    monkeypatch.setenv("TUTORIAL_SITE", str(CI_SITE))
    assert load_site().partition == yaml.safe_load(CI_SITE.read_text())["site"]["partition"]
    spec = spec_for(None, tmp_path)
    assert spec.site == load_site(CI_SITE) and spec.python == "/opt/tutorial-site/venv/bin/python"
    local = make_spec(absolute_config(make_config("smoke", name="l", output_root=str(tmp_path))), check_data=False)
    assert local.site == Site() and local.python == sys.executable  # the local backend needs no site
    monkeypatch.setenv("TUTORIAL_SITE", str(tmp_path / "missing.yaml"))
    with pytest.raises(ConfigError, match="TUTORIAL_SITE=.*names no file"):
        load_site()


# ------------------------------------------------------------- the notebooks
def _code_calls(notebook):
    cells = json.loads(notebook.read_text())["cells"]
    for cell in cells:
        if cell["cell_type"] == "code":
            tree = ast.parse("".join(cell["source"]))
            yield from (node for node in ast.walk(tree) if isinstance(node, ast.Call))


def _name(call) -> str:
    return ast.unparse(call.func)


@pytest.mark.parametrize("notebook", course.notebooks(), ids=lambda p: p.stem)
def test_every_slurm_job_of_every_notebook_gets_the_site(notebook, tmp_path, monkeypatch):
    """Each call that submits jobs passes the notebook's site, and each plan gives it to every job."""
    submitting = [c for c in _code_calls(notebook) if _name(c) in ("jobs.submit", "jobs.sweep")
                  or _name(c).startswith("plans.")]
    for call in submitting:
        site = [k for k in call.keywords if k.arg == "site"]
        assert site and ast.unparse(site[0].value) == "site", f"{notebook.stem}: {_name(call)} gets no site=site"
    if notebook.stem in plans.PLANS:
        from test_params import defaults, plan_for

        monkeypatch.chdir(tmp_path)
        values = {**defaults(notebook), "backend": "slurm", "site": GPU_SITE, "output_root": str(tmp_path)}
        plan = plan_for(notebook, values, gpus=0)
        for spec in plan.check(check_data=False):
            command = sbatch_command(spec)
            assert "--partition=gpu" in command and "--qos=high" in command, (notebook.stem, spec.config.name)
            assert "module load cuda/12.4" in batch_script(spec).splitlines()
            # the notebooks' time_limit is left unset: the site's time is every job's (05 once set 00:15:00)
            assert "--time=02:00:00" in command and "the site block's time" in spec.time_note, spec.time_note


@pytest.mark.parametrize("notebook", course.notebooks(), ids=lambda p: p.stem)
def test_every_parameter_is_read_by_the_notebooks_code(notebook):
    """A parameter no code cell reads only misleads (02 declared profile, backend and output_root)."""
    cells = [c for c in json.loads(notebook.read_text())["cells"] if c["cell_type"] == "code"
             and "parameters" not in c["metadata"].get("tags", [])]
    read = {node.id for cell in cells for node in ast.walk(ast.parse("".join(cell["source"])))
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}
    unread = [name for name in course.declared_parameters(notebook) if name not in read]
    assert not unread, f"{notebook.stem} declares parameters no code reads: {unread}"


def test_the_course_refuses_a_parameter_no_notebook_declares(tmp_path, capsys):
    params = tmp_path / "typo.yaml"
    params.write_text("profile: smoke\nepoch: 3\n")
    out = tmp_path / "out"
    assert course.main(["--params", str(params), "--out", str(out)]) == 2  # one line, exit status 2
    assert "no notebook has a parameter 'epoch' (did you mean epochs?)" in capsys.readouterr().err
    assert course.main(["-p", "nodez", "2", "--out", str(out)]) == 2
    assert "error: -p: no notebook has a parameter 'nodez'" in capsys.readouterr().err
    assert not out.exists()  # refused before anything ran or was written
    course.check_parameter_names(yaml.safe_load(CI_SITE.read_text()))  # the CI file's keys are all declared


# ------------------------------------------------------- the strict cluster
def _strict(slurm) -> None:
    partitions = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True, timeout=30).stdout
    if "*" in partitions:
        pytest.skip("this cluster has a default partition: the strict emulated cluster is not running "
                    "(TUTORIAL_SLURM_STRICT=1 cluster_scripts/start_local_slurm.sh)")


def test_the_course_without_a_site_on_a_cluster_without_a_default_partition_is_refused_before_it_runs(
        tmp_path, monkeypatch, capsys):
    """r44h: a plain `make tutorial` beside a cluster with no default partition (the strict emulated one) ran 00
    and 13 minutes of 01 before its first job was refused. Now the course refuses first, in one line naming the
    site block, the cluster's partitions and both ways out; a site with a partition, a cluster with a default
    partition and backend local all pass."""
    from tutorial_lib.course import runner
    from tutorial_lib.jobs import slurm as slurm_module

    def nodes(default: bool):
        return lambda: ([{"node": "node1", "partition": "compute", "default": default, "state": "idle"}], None)

    monkeypatch.delenv("TUTORIAL_SITE", raising=False)
    monkeypatch.setattr(slurm_module, "slurm_available", lambda: (True, "sbatch answers"))
    monkeypatch.setattr(slurm_module, "cluster_nodes", nodes(False))
    with pytest.raises(SystemExit, match=r"^error: site: this Slurm cluster has no default partition .* \(compute\)"):
        runner.check_cluster_site({}, runner.notebooks())
    out = tmp_path / "course"
    assert course.main(["--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "-p backend local" in err and "ci-site.yaml" in err, err
    assert not out.exists()  # refused before anything ran or was written
    every = runner.notebooks()
    runner.check_cluster_site({"site": {"partition": "compute"}}, every)
    runner.check_cluster_site({"backend": "local"}, every)
    runner.check_cluster_site({}, runner.notebooks(["00"]))  # 00 submits no job
    monkeypatch.setattr(slurm_module, "cluster_nodes", nodes(True))
    runner.check_cluster_site({}, every)


def test_on_the_strict_cluster_the_course_without_a_site_is_refused_and_ci_site_passes(slurm, monkeypatch):
    _strict(slurm)
    from tutorial_lib.course import runner

    monkeypatch.delenv("TUTORIAL_SITE", raising=False)
    with pytest.raises(SystemExit, match="no default partition"):
        runner.check_cluster_site({}, runner.notebooks())
    runner.check_cluster_site({"site": str(CI_SITE)}, runner.notebooks())


def test_on_the_strict_cluster_a_job_without_the_site_fails_in_one_line(tmp_path, slurm, digits_dir):
    _strict(slurm)
    cfg = make_config("smoke", name="nosite", output_root=str(tmp_path), dataset="imagefolder",
                      data_dir=str(digits_dir), epochs=1, max_steps_per_epoch=1, progress=False)
    with pytest.raises(jobs.JobError, match="no default partition: give the jobs a site block with a partition"):
        jobs.submit(cfg, backend="slurm", site=Site(), verbose=False)
    assert not (tmp_path / "nosite" / "job.sbatch").exists()  # a refused job leaves its run directory as it was
    site = dataclasses.replace(load_site(CI_SITE), python=None, setup=())
    job = jobs.submit(cfg, backend="slurm", site=site, verbose=False)
    assert job.wait(timeout=300, check=False) == "FAILED"
    explanation = job.explain()
    assert "\n" not in explanation and f"The compute nodes have no {sys.executable}" in explanation
    assert "Fix: give the site block a python" in explanation


def test_on_the_strict_cluster_a_refused_partition_says_in_one_line_where_the_site_goes(tmp_path, slurm, digits_dir,
                                                                                         monkeypatch):
    """make tutorial on the strict cluster without a site: notebook 05's pre-flight (the first job it submits)
    is refused by sbatch, and the one line the user sees names the ways to fix it."""
    from tutorial_lib.jobs import preflight

    _strict(slurm)
    monkeypatch.delenv("TUTORIAL_SITE", raising=False)
    cfg = make_config("smoke", name="nopart", output_root=str(tmp_path), dataset="imagefolder",
                      data_dir=str(digits_dir), epochs=1, max_steps_per_epoch=1, progress=False)
    with pytest.raises(jobs.JobError) as refused:
        jobs.submit(cfg, backend="slurm", verbose=False)
    message = str(refused.value)
    assert "\n" not in message and "No partition specified" in message
    for fix in ("PARAMS=notebooks/params/<site>.yaml", "TUTORIAL_SITE=", "backend: local"):
        assert fix in message
    report = preflight.run(cfg, nodes=1, backend="slurm", timeout=60)
    assert not report.ok and "TUTORIAL_SITE=" in str(report) and len(str(report).splitlines()) == 1
    with pytest.raises(jobs.JobError) as refused:
        jobs.submit(cfg, backend="slurm", partition="nosuch", verbose=False)
    message = str(refused.value)  # sbatch answers this one in two lines
    assert "\n" not in message and "Invalid partition name" in message and "TUTORIAL_SITE=" in message


# ------------------------------------------------------------ the pre-flight
def test_preflight_reports_each_check_in_one_line(tmp_path, backend, digits_dir):
    from tutorial_lib.jobs import preflight

    cfg = make_config("smoke", name="pf", output_root=str(tmp_path), dataset="imagefolder", data_dir=str(digits_dir))
    report = preflight.run(cfg, nodes=2, ranks_per_node=1, backend=backend, timeout=240)
    lines = str(report).splitlines()
    assert report.ok, str(report)
    assert [line.split(":")[0] for line in lines] == [
        "ok    scheduler accepts the job", "ok    python on every node imports torch and tutorial_lib",
        "ok    CPUs per rank", "ok    all-reduce across 2 ranks"]
    assert "2 of 2 ranks on 2 node(s)" in lines[1] and "sum 2 on every rank" in lines[3]
    report.raise_if_failed()


def test_on_the_strict_cluster_the_preflight_says_what_is_wrong(tmp_path, slurm, digits_dir):
    from tutorial_lib.jobs import preflight

    _strict(slurm)
    cfg = make_config("smoke", name="pf", output_root=str(tmp_path), dataset="imagefolder", data_dir=str(digits_dir))
    report = preflight.run(cfg, nodes=2, backend="slurm", site=Site(), timeout=240)
    assert str(report).startswith("FAIL  scheduler accepts the job: sbatch refused") and len(report.checks) == 1
    with pytest.raises(jobs.JobError, match="pre-flight check failed:\nFAIL  scheduler"):
        report.raise_if_failed()
    report = preflight.run(cfg, nodes=2, backend="slurm", site=Site(partition="compute"), timeout=240)
    assert [check.ok for check in report.checks] == [True, False], str(report)
    assert "The compute nodes have no" in str(report.checks[1]) and len(str(report).splitlines()) == 2


def test_a_notebook_refuses_a_parameter_it_does_not_declare(tmp_path):
    """papermill -p with a misspelt name: the notebook's setup call stops, naming it (papermill only warns)."""
    import nbformat
    import papermill

    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("epochs = 2\nnodes = 1", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell("from tutorial_lib import course\ncourse.setup_notebook(quiet=True)")])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    source = tmp_path / "nb.ipynb"
    nbformat.write(notebook, source)
    papermill.execute_notebook(str(source), str(tmp_path / "ok.ipynb"), parameters={"epochs": 3}, progress_bar=False)
    # plain papermill's last line names the parameter meant (issue 44: a 55-line traceback that named none)
    result = subprocess.run([sys.executable, "-m", "papermill", str(source), str(tmp_path / "bad.ipynb"),
                             "-p", "epoch", "3", "--no-progress-bar"], capture_output=True, text=True, timeout=300)
    last = [line for line in result.stderr.splitlines() if line.strip()][-1]
    assert result.returncode != 0 and last == (
        "NotebookParameterError: parameters: this notebook has no parameter 'epoch' (given with papermill -p or "
        "-f); did you mean 'epochs'? Fix: use a name from its parameters cell."), result.stderr[-2000:]


def test_on_the_strict_cluster_the_training_step_gets_the_cpus_the_job_asked_for(tmp_path, slurm, digits_dir):
    """--cpus-per-task reaches srun's step (SRUN_CPUS_PER_TASK): without it the step, and so every rank, is
    pinned to one CPU whatever the job asked for."""
    from tutorial_lib.jobs import preflight

    _strict(slurm)
    cfg = make_config("smoke", name="cpus", output_root=str(tmp_path), dataset="imagefolder", data_dir=str(digits_dir))
    report = preflight.run(cfg, nodes=1, ranks_per_node=2, backend="slurm", site=load_site(CI_SITE), timeout=240)
    assert report.ok, str(report)
    assert "each rank may use 2 CPU(s)" in str(report.checks[2])  # cpus_per_rank 1 x 2 ranks, shared by both


FAKE_SRUN = """#!/bin/bash
# srun as Slurm 22.05-23.02 treat a step: it inherits neither the job's --cpus-per-task nor SLURM_CPUS_PER_TASK
cpus=1
if [[ -n ${SRUN_CPUS_PER_TASK:-} ]]; then cpus=$SRUN_CPUS_PER_TASK; fi
for arg in "$@"; do case $arg in --cpus-per-task=*) cpus=${arg#*=} ;; esac; done
echo "step cpus: $cpus"
"""


@pytest.mark.parametrize("removed", ["nothing", "export", "flag", "both"])
def test_the_batch_script_passes_the_cpus_per_task_to_the_step_on_every_slurm(tmp_path, removed):
    """train.sbatch both exports SRUN_CPUS_PER_TASK and passes srun --cpus-per-task, so the training step gets
    the job's CPUs on a Slurm whose srun inherits neither (the fake srun here); either alone suffices, and
    the check sees it when both are gone (Debian's 22.05 inherits them itself, so a real job cannot show it)."""
    script = (REPO_ROOT / "cluster_scripts" / "train.sbatch").read_text()
    export = "    export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK\n"
    flag = '"${STEP_CPUS[@]}" '
    assert export in script and flag in script
    if removed in ("export", "both"):
        script = script.replace(export, "")
    if removed in ("flag", "both"):
        script = script.replace(flag, "")
    (tmp_path / "train.sbatch").write_text(script)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("srun", FAKE_SRUN), ("scontrol", "#!/bin/bash\necho node1\n")):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_JOB_ID": "7", "SLURM_NNODES": "1", "SLURM_CPUS_PER_TASK": "4",
           "SLURM_JOB_NODELIST": "node1", "TUTORIAL_WORKDIR": str(tmp_path), "HOME": str(tmp_path),
           "TUTORIAL_PYTHON": sys.executable}  # the head node's port helper runs it
    result = subprocess.run(["bash", str(tmp_path / "train.sbatch")], capture_output=True, text=True, env=env,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert ("step cpus: 4" in result.stdout) == (removed != "both"), result.stdout


@pytest.mark.parametrize("setup, line, status", [(["true", "false", "echo never"], "2 (false)", 1),
                                                 (["module_that_is_missing load nosuch/1.0"],
                                                  "1 (module_that_is_missing load nosuch/1.0)", 127)])
def test_a_failing_setup_line_is_named_with_its_status(setup, line, status, tmp_path):
    spec = spec_for({"setup": setup}, tmp_path)
    shell = f"set -euo pipefail\n{site_section(spec)}\necho after the site"
    result = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=30)
    assert result.returncode == status and "never" not in result.stdout and "after" not in result.stdout
    named = [text for text in result.stderr.splitlines() if text.startswith("error: site setup line")]
    assert named == [f"error: site setup line {line} failed with exit status {status} (its output is just "
                     "above). Fix: correct that line of the site block (setup:), e.g. a module name that module "
                     "avail lists."], result.stderr


def test_setup_lines_that_pass_leave_no_trap_behind(tmp_path):
    spec = spec_for({"setup": ["export A=1"]}, tmp_path)
    shell = f"set -euo pipefail\n{site_section(spec)}\necho \"$A\"; false"
    result = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=30)
    assert result.returncode == 1 and result.stdout == "1\n" and "setup line" not in result.stderr


def test_on_the_strict_cluster_the_preflight_names_the_failing_setup_line(tmp_path, slurm, digits_dir):
    from tutorial_lib.jobs import preflight

    _strict(slurm)
    cfg = make_config("smoke", name="pfsetup", output_root=str(tmp_path), dataset="imagefolder",
                      data_dir=str(digits_dir))
    site = dataclasses.replace(load_site(CI_SITE), setup=(*load_site(CI_SITE).setup, "module_missing load nosuch"))
    report = preflight.run(cfg, nodes=1, backend="slurm", site=site, timeout=240)
    assert [check.ok for check in report.checks] == [True, False], str(report)
    assert ("error: site setup line" in str(report.checks[1]) and "(module_missing load nosuch) failed with exit "
            "status 127" in str(report.checks[1])), str(report)
    assert len(str(report).splitlines()) == 2 and str(report).count("First error") == 1, str(report)


def test_on_the_strict_cluster_more_cpus_than_a_node_has_is_refused_before_submitting(tmp_path, slurm, digits_dir):
    from tutorial_lib.jobs.slurm import partition_cpus

    _strict(slurm)
    site = load_site(CI_SITE)
    most = partition_cpus(site.partition)
    assert most is not None and most >= 1
    cfg = make_config("smoke", name="cpus", output_root=str(tmp_path), dataset="imagefolder",
                      data_dir=str(digits_dir), epochs=1, max_steps_per_epoch=1, progress=False)
    with pytest.raises(jobs.JobError, match=rf"^cpus_per_rank: {most + 1} CPUs x 1 rank\(s\) per node = {most + 1} "
                                            rf"CPUs per node, but the nodes of partition {site.partition} have at "
                                            rf"most {most} \(sinfo\).*Fix: set the site block's cpus_per_rank to at "
                                            rf"most {most}") as refused:
        jobs.submit(cfg, backend="slurm", site=dataclasses.replace(site, cpus_per_rank=most + 1), verbose=False)
    assert "\n" not in str(refused.value)
    assert not (tmp_path / "cpus").exists()  # nothing submitted, no run directory made (r43m: an empty one was)


# ------------------------------------------------- the site examples of docs/cluster.md
CLUSTER_PAGE = REPO_ROOT / "docs" / "cluster.md"
# The page's examples describe a real GPU site; the strict emulated cluster is two nodes of this machine (its CPU
# count each, 1 MB of memory declared), with one partition, no accounting, no environment modules and loopback for
# a network. What it needs in place of the examples' values, key by key (None: the key is left out):
STRICT_PLACEHOLDERS = {
    "partition": "compute",        # its only partition (gpu does not exist there)
    "account": None, "qos": None,  # no accounting: the example's account and QOS name nothing there
    "cpus_per_rank": 1,            # one CPU rank per node; the example's 8 is more than a node has
    "mem": None,                   # its nodes declare 1 MB: --mem=200G would never be granted
}
VENV_PLACEHOLDER = ("/home/me/tutorial/.venv", "/opt/tutorial-site/venv")  # where its nodes see the virtualenv
MODULE_STANDIN = "module() { echo \"module $* (no environment modules on the emulated nodes)\"; }"  # setup line 1
LOOPBACK = {"GLOO_SOCKET_IFNAME": "lo"}  # every emulated node is this machine: the all-reduce goes over loopback


def site_examples(page=CLUSTER_PAGE) -> list[dict]:
    """Every ``site:`` block of the page's YAML examples, as written."""
    loaded = [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", page.read_text(), re.S)]
    return [data["site"] for data in loaded if isinstance(data, dict) and "site" in data]


def for_the_strict_cluster(example: dict) -> dict:
    """The example with the strict cluster's values in place of the placeholders above; the rest as written."""
    site = yaml.safe_load(yaml.safe_dump(example).replace(*VENV_PLACEHOLDER))
    for key, value in STRICT_PLACEHOLDERS.items():
        site.pop(key, None)
        if value is not None:
            site[key] = value
    site["setup"] = [MODULE_STANDIN, *site.get("setup", [])]
    site["env"] = {**site.get("env", {}), **LOOPBACK}
    return site


def test_the_site_examples_of_the_docs_are_valid_and_name_a_venv_by_its_python():
    examples = site_examples()
    assert examples, f"{CLUSTER_PAGE} shows no site: example"
    for example in examples:
        site = load_site(example)  # as written: every key and value accepted
        strict = load_site(for_the_strict_cluster(example))
        assert strict.setup[1:] == site.setup and strict.partition == "compute"
        activated = [line for line in site.setup if "activate" in line]
        assert not (activated and site.python in (None, "python", "python3")), (
            "an activated venv with python: python runs the nodes' system python wherever the venv is seen at "
            f"another path than it was made at: {example}")


@pytest.mark.slurm
@pytest.mark.parametrize("index", range(len(site_examples())))
def test_every_site_example_of_the_docs_passes_the_preflight_on_the_strict_cluster(index, tmp_path, slurm):
    """docs/cluster.md's site blocks, their placeholders replaced (STRICT_PLACEHOLDERS...), run notebook 05's
    pre-flight job on the strict cluster, whose nodes do not see this checkout's .venv: every check passes,
    with the example's python."""
    from tutorial_lib.jobs import preflight

    _strict(slurm)
    site = load_site(for_the_strict_cluster(site_examples()[index]))
    cfg = make_config("smoke", name=f"docsite{index}", output_root=str(tmp_path))
    report = preflight.run(cfg, nodes=2, ranks_per_node=1, backend="slurm", site=site, timeout=240)
    assert report.ok, str(report)
    assert f"2 of 2 ranks on 2 node(s) (node1, node2): {site.python}," in str(report.checks[1]), str(report)
