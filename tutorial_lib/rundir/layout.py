"""Every file name of a run directory (``output_root/name``), in one place.

Written by the trainer: :data:`CONFIG_FILE`, :data:`METRICS_FILE`, :data:`CHECKPOINT_FILE`, :data:`DONE_FILE`,
:data:`LOCK_FILE`. Written by a launcher or a user: :data:`STOP_FILE`. Written by :mod:`tutorial_lib.jobs`:
:data:`JOB_FILE`, :data:`LAUNCH_FILE`, :data:`JOB_LOG`, :data:`STATE_FILE`, :data:`SUPERVISOR_LOG`,
``slurm-<id>.out`` (:func:`slurm_log`). Written by a Slurm job's batch script or launcher: :data:`EXIT_FILE`.
"""

from __future__ import annotations

from pathlib import Path

CONFIG_FILE = "config.json"  # resolved settings, world size, global batch, scaled LR, versions, devices, hosts
METRICS_FILE = "metrics.jsonl"  # events: start, resume, step, epoch, stop, end
CHECKPOINT_FILE = "checkpoint.pt"  # written atomically (temporary file + rename)
DONE_FILE = "DONE"  # training finished (holds the best top-1)
MODEL_FILE = "model.pt"  # the trained weights to take away: torchvision state_dict + class names (weights-only)
INDEX_FILE = "file_index.json"  # the (file, label) lists of the data splits, made once per job (data.file_index)
LOCK_FILE = "LOCK"  # the live trainer holding this run directory
STOP_FILE = "STOP"  # asks the ranks to finish the step, checkpoint and exit
JOB_FILE = "job.json"  # the job record: backend, id, spec (read by jobs.attach)
JOB_SCRIPT = "job.sbatch"  # a Slurm job's own copy of train.sbatch, with the site's section filled in
JOB_SCRIPT_HEADER = "# train.sbatch - distributed training with torchrun under Slurm"  # its third line
LAUNCH_FILE = "launch.json"  # the per-node torchrun command, read by cluster_scripts/train.sbatch
PREFLIGHT_FILE = "preflight.jsonl"  # a pre-flight job's findings, one JSON line per rank (jobs.preflight)
JOB_LOG = "job.log"  # a local job's combined output
STATE_FILE = "job_state.json"  # a local job's state, written by its supervisor
SUPERVISOR_LOG = "supervisor.log"  # the local supervisor's own errors
EXIT_FILE = "job_exits.jsonl"  # how each run of a Slurm job ended, one JSON line each (rundir.job_exits)
SLURM_LOG_PATTERN = "slurm-%j.out"  # sbatch --output, in the run directory


def slurm_log(run_dir: str | Path, job_id: str) -> Path:
    """The log of Slurm job ``job_id`` in ``run_dir`` (sbatch's ``%j`` filled in)."""
    return Path(run_dir) / SLURM_LOG_PATTERN.replace("%j", str(job_id))
