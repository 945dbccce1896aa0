"""What a training job pays at start on a prepared ImageNet-sized DEST: a 4-rank job's time from launch to its
first training step, and staging (the copy to a node-local folder, :func:`tutorial_lib.data.staging.stage`).

The job is the local backend's (torchrun, gloo, CPU ranks), with a tiny model and tiny batches, so that what
grows with the data (the job's one scan, the file index each rank reads, the sampler) is what the time shows.
Its phases come from the run's own events (``start``: every rank has built its datasets and model; ``step``:
the first training step is done), against the wall clock taken just before :func:`tutorial_lib.jobs.submit`.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from tutorial_lib.rundir.layout import CONFIG_FILE

FIRST_STEP_GOAL_S = 60.0  # issue 35: the first step within a minute of launch at ImageNet's size


def measure_first_step(data_dir: str | os.PathLike, run_root: str | os.PathLike, ranks: int = 4,
                       timeout: float = 900) -> dict:
    """Launch a ``ranks``-rank local job on ``data_dir`` and return the seconds from launch to its ``start``
    event and to its first ``step`` event (the job is cancelled then; its run directory stays under ``run_root``)."""
    from tutorial_lib import jobs
    from tutorial_lib.analyses.batch_jobs import wait_for_event
    from tutorial_lib.engine.config import make_config

    config = make_config("smoke", dataset="imagefolder", data_dir=str(Path(data_dir).absolute()),
                         output_root=str(Path(run_root).absolute()), name="scale-first-step", arch="resnet18",
                         image_size=16, batch_size=2, epochs=1, max_steps_per_epoch=2, log_every=1,
                         checkpoint=False, progress=False, workers=0)
    launched = time.time()
    job = jobs.submit(config, nodes=1, ranks_per_node=ranks, backend="local", fresh=True, verbose=False)
    submitted = time.time()
    try:
        step = wait_for_event(job, "step", timeout=timeout, poll=0.2)
        start = next(e for e in job.events() if e.get("event") == "start")
        resolved = json.loads((job.run_dir / CONFIG_FILE).read_text())  # what the job saw: its image counts
    finally:
        if not job.done():
            job.cancel()  # the run directory stays (the next launch's fresh=True replaces it): ranks that are
            # still stopping write their stop there; one removed under them kept 4 ranks busy after the cancel
    return {"ranks": ranks, "backend": "local", "dist_backend": "gloo", "arch": config.arch,
            "submit_s": submitted - launched, "to_start_s": start["time"] - launched,
            "seconds": step["time"] - launched, "goal_s": FIRST_STEP_GOAL_S,
            "job_train_images": resolved["train_images"], "job_val_images": resolved["val_images"]}


def measure_stage(data_dir: str | os.PathLike, stage_to: str | os.PathLike) -> dict:
    """Stage ``data_dir`` into ``stage_to`` (made if missing) and remove the copy; return the seconds until the
    copy is on disk (``sync``), the files and bytes copied."""
    from tutorial_lib.data import staging

    Path(stage_to).mkdir(parents=True, exist_ok=True)
    os.sync()
    began = time.perf_counter()
    staged = staging.stage(data_dir, str(Path(stage_to).absolute()), run="scale", node="local")
    os.sync()
    seconds = time.perf_counter() - began
    staging.remove(staged.path)
    return {"seconds": seconds, "staged_files": staged.files, "staged_bytes": staged.bytes}
