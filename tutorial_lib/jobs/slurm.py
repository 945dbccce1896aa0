"""The Slurm backend: submit with sbatch (cluster_scripts/train.sbatch), ask scontrol and sacct for the state."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

from tutorial_lib.jobs.commands import batch_script, job_env, sbatch_command
from tutorial_lib.jobs.spec import JobError, JobSpec, write_job_file
from tutorial_lib.jobs.states import FINAL_STATES, from_slurm
from tutorial_lib.rundir.layout import DONE_FILE, JOB_SCRIPT

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
    """Write ``spec``'s batch script into its run directory and sbatch it; record the job there; return its id."""
    check_node_cpus(spec)
    command = sbatch_command(spec, after_slurm_id)
    script = spec.run_dir / JOB_SCRIPT
    script.write_text(batch_script(spec))
    try:
        output = run_command(command, "sbatch", env={**os.environ, **job_env(spec)})
    except JobError as exc:
        script.unlink()  # the run directory stays as it was: nothing was submitted
        hint = next((fix for words, fix in SBATCH_FIXES if words in str(exc)), None)
        raise JobError(f"{str(exc).rstrip('.')}. Fix: {hint}" if hint else str(exc)) from None
    job_id = output.strip().split(";")[0]
    if not job_id.isdigit():
        raise JobError(f"sbatch answered {output.strip()!r}, not a job id")
    write_job_file(spec.run_dir, {"backend": "slurm", "id": job_id, "name": spec.config.name,
                                  "spec": spec.to_dict(), "command": command, "submitted": time.time()})
    return job_id


def partition_cpus(partition: str | None) -> int | None:
    """The most CPUs any node of ``partition`` (None: the default one) has, as ``sinfo`` reports; None if unknown."""
    command = ["sinfo", "-h", "-N", "-o", "%c"] + ([f"--partition={partition}"] if partition else [])
    try:
        shown = subprocess.run(command, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    counts = [int(word) for word in shown.stdout.split() if word.isdigit()] if shown.returncode == 0 else []
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


def cancel_slurm(job_id: str) -> None:
    """scancel the job."""
    run_command(["scancel", job_id], "scancel")


def slurm_status(job_id: str, run_dir: Path) -> dict:
    """State and exit code from scontrol, else sacct, else (Slurm forgot the job) from the run directory."""
    try:
        shown = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True, timeout=30)
        if shown.returncode == 0 and "JobState=" in shown.stdout:
            fields = dict(part.split("=", 1) for part in shown.stdout.split() if "=" in part)
            raw = fields["JobState"]
            exit_code = int(fields.get("ExitCode", "0:0").split(":")[0])
            return {"state": from_slurm(raw), "exit_code": exit_code if raw in FINAL_STATES else None,
                    "slurm_state": raw, "nodes": fields.get("NodeList")}
        acct = subprocess.run(["sacct", "-n", "-X", "-P", "-o", "State,ExitCode", "-j", job_id],
                              capture_output=True, text=True, timeout=30)
        if acct.returncode == 0 and acct.stdout.strip():
            raw, code = acct.stdout.strip().splitlines()[0].split("|")
            raw = raw.split()[0]
            return {"state": from_slurm(raw), "exit_code": int(code.split(":")[0]), "slurm_state": raw}
    except (OSError, subprocess.TimeoutExpired):
        pass
    finished = (run_dir / DONE_FILE).exists()
    return {"state": "COMPLETED" if finished else "FAILED", "exit_code": 0 if finished else None,
            "reason": "Slurm no longer knows this job; state taken from the run directory"}
