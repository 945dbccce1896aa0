"""The Slurm backend: submit with sbatch (cluster_scripts/train.sbatch), cancel with scancel; the state comes from
the watcher (:mod:`tutorial_lib.jobs.watch`)."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import time

from tutorial_lib.jobs.commands import batch_script, job_env, sbatch_command
from tutorial_lib.jobs.record import launch_settings, replace_file, write_job_file
from tutorial_lib.jobs.slurm_values import is_job_id
from tutorial_lib.jobs.spec import JobError, JobSpec
from tutorial_lib.jobs.watch import slurm_env
from tutorial_lib.numbers import whole_number
from tutorial_lib.rundir.layout import JOB_FILE, JOB_SCRIPT

PENDING_ID = "slurm-pending"  # the record's id until sbatch has answered

# What to do about sbatch's most common refusals at a new site (its message, then the fix).
_WHERE_THE_SITE_GOES = ("`site:` in the course's parameter file (make course PARAMS=notebooks/params/<site>.yaml; "
                        "ci-site.yaml is the emulated cluster's), TUTORIAL_SITE=<that file> for every job (make "
                        "tutorial, make test, JupyterLab) or jobs.submit(..., site=...)")
SBATCH_FIXES = (
    ("No partition specified", "this cluster has no default partition: give the jobs a site block with a partition "
                               f"(`sinfo` lists them): {_WHERE_THE_SITE_GOES}; or run the jobs on this machine "
                               "(backend: local)."),
    ("Invalid partition name", f"set the site block's partition to one that `sinfo` lists ({_WHERE_THE_SITE_GOES})."),
    ("Invalid account", "set the site block's account to one `sacctmgr show assoc user=$USER` lists."),
    ("Requested node configuration is not available", "ask for no more CPUs, memory or GPUs per node than "
                                                       "the partition's nodes have (`sinfo -N -l`)."),
)


SINFO_FORMAT = "%N|%P|%T|%c|%m|%G"  # node | partition | state | CPUs | memory (MB) | generic resources


def _number_or_text(text: str) -> int | str:
    number = whole_number(text)
    return text if number is None else number


def parse_sinfo(text: str) -> list[dict]:
    """Nodes from ``sinfo -N -h -o '%N|%P|%T|%c|%m|%G'`` output: one dict per node and partition.

    CPUs and memory become integers where Slurm printed one (``4``, ``64000``; ``4+`` stays text).
    Lines that do not have the six fields are skipped.
    """
    nodes = []
    for line in text.splitlines():
        fields = [f.strip() for f in line.split("|")]
        if len(fields) != 6 or not fields[0]:
            continue
        node, partition, state, cpus, memory, gres = fields
        nodes.append({"node": node, "partition": partition.rstrip("*"), "default": partition.endswith("*"),
                      "state": state, "cpus": _number_or_text(cpus), "memory_mb": _number_or_text(memory),
                      "gres": "" if gres in ("(null)", "") else gres})
    return nodes


def cluster_nodes(timeout: float = 10) -> tuple[list[dict], str | None]:
    """The cluster's nodes (:func:`parse_sinfo` of one ``sinfo`` call), and why there are none when sinfo is
    missing or fails (else None)."""
    if shutil.which("sinfo") is None:
        return [], "sinfo is not on the PATH"
    try:
        result = subprocess.run(["sinfo", "-N", "-h", "-o", SINFO_FORMAT], capture_output=True, text=True,
                                timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [], f"sinfo failed: {exc}"
    if result.returncode != 0:
        return [], f"sinfo failed: {(result.stderr or result.stdout).strip()}"
    return parse_sinfo(result.stdout), None


def slurm_available() -> tuple[bool, str]:
    """Whether a Slurm controller answers here, and why (not)."""
    if shutil.which("sbatch") is None:
        return False, "sbatch is not on the PATH"
    try:
        ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"`scontrol ping` failed: {exc}"
    if ping.returncode != 0 or "UP" not in ping.stdout:
        answer = ping.stdout.strip() or ping.stderr.strip()
        return False, f"the Slurm controller does not answer (`scontrol ping`: {answer})"
    return True, "sbatch is on the PATH and the Slurm controller answers"


def run_command(command: list[str], what: str, env: dict | None = None) -> str:
    """Run a Slurm command; its stdout, or JobError with what it answered."""
    try:
        result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise JobError(f"{what} could not run: {exc}") from None
    if result.returncode != 0:
        answer = " ".join(line.strip() for line in (result.stderr or result.stdout).splitlines() if line.strip())
        raise JobError(f"{what} refused the request (exit {result.returncode}): {answer}")  # one line
    return result.stdout


def submit_slurm(spec: JobSpec, after_slurm_id: str | None = None) -> str:
    """Write ``spec``'s record and batch script into its run directory and sbatch it; return the job id.

    The record (with every setting the job's nodes read, :mod:`tutorial_lib.jobs.record`) is written before
    sbatch, as the job may start at once; sbatch's id is added when it answers. A refusal leaves the run
    directory as it was. ``submit`` has checked the nodes' CPUs (:func:`check_node_cpus`) first."""
    command = sbatch_command(spec, after_slurm_id)
    script, record_path = spec.run_dir / JOB_SCRIPT, spec.run_dir / JOB_FILE
    earlier = record_path.read_bytes() if record_path.is_file() else None
    record = {"backend": "slurm", "name": spec.config.name, "spec": spec.to_dict(),
              "launch": dataclasses.asdict(launch_settings(spec)), "command": command,
              "slurm_conf": os.environ.get("SLURM_CONF"), "submitted": time.time()}
    replace_file(script, batch_script(spec))  # a link there is replaced, never written through
    write_job_file(spec.run_dir, {**record, "id": PENDING_ID})
    try:
        output = run_command(command, "sbatch", env={**os.environ, **job_env(spec)})
        job_id = output.strip().split(";")[0]
        if not is_job_id(job_id):
            raise JobError(f"sbatch answered {output.strip()!r}, not a job id")
    except JobError as exc:
        script.unlink()  # the run directory stays as it was: nothing was submitted
        if earlier is None:
            record_path.unlink()
        else:
            record_path.write_bytes(earlier)
        hint = next((fix for words, fix in SBATCH_FIXES if words in str(exc)), None)
        raise JobError(f"{str(exc).rstrip('.')}. Fix: {hint}" if hint else str(exc)) from None
    write_job_file(spec.run_dir, {**record, "id": job_id})
    return job_id


def partition_cpus(partition: str | None) -> int | None:
    """The most CPUs any node of ``partition`` (None: the default one) has, as ``sinfo`` reports; None if unknown."""
    command = ["sinfo", "-h", "-N", "-o", "%c"] + ([f"--partition={partition}"] if partition else [])
    try:
        shown = subprocess.run(command, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    counts = [whole_number(word) for word in shown.stdout.split()] if shown.returncode == 0 else []
    counts = [count for count in counts if count is not None]
    return max(counts) if counts else None


def check_node_cpus(spec: JobSpec) -> None:
    """Refuse, before sbatch, a job asking more CPUs per node than any node of its partition has: sbatch would
    accept it and it would pend forever (Reason=PartitionConfig) while a pre-flight waits out its timeout."""
    per_rank = spec.site.cpus_per_rank
    if not per_rank:
        return
    need, most = per_rank * spec.ranks_per_node, partition_cpus(spec.partition)
    if most is not None and need > most:
        fit = most // spec.ranks_per_node
        raise JobError(f"cpus_per_rank: {per_rank} CPUs x {spec.ranks_per_node} rank(s) per node = {need} CPUs per "
                       f"node, but the nodes of partition {spec.partition or '(default)'} have at most {most} "
                       f"(sinfo); the job would pend forever. Fix: set the site block's cpus_per_rank to at most "
                       f"{fit}" + (" or use fewer ranks_per_node" if fit else ", and use fewer ranks_per_node") + ".")


def cancel_slurm(job_id: str, run_dir, conf: str | None, seen) -> None:
    """scancel the job, once Slurm's own fields prove it is this run directory's job (its batch script is the
    run directory's ``job.sbatch``); another job under that id is refused in one line, nothing cancelled."""
    ours = str(run_dir / JOB_SCRIPT)
    command = seen.fields.get("Command") if seen.slurm_state else None
    if command is not None and command != ours and not command.startswith(ours + " "):  # the script, its arguments
        raise JobError(f"cancel refused: Slurm job {job_id} runs {command}, not {ours}: it is not this run "
                       f"directory's job ({run_dir / JOB_FILE} may have been copied or edited); nothing was "
                       "cancelled. Fix: cancel the job you mean with scancel yourself.")
    run_command(["scancel", job_id], "scancel", env=slurm_env(conf))
