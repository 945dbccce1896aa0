"""What a training job pays at start on a prepared ImageNet-sized DEST: a 4-rank job's time from launch to its
first training step, and staging (the copy to a node-local folder, :func:`tutorial_lib.data.staging.stage`).

The job is what the local backend starts (torchrun, gloo, CPU ranks; started here directly: a benchmark does not
import :mod:`tutorial_lib.jobs`), with a tiny model and tiny batches, so that what grows with the data (the job's
one scan, the file index each rank reads, the sampler) is what the time shows.
Its phases come from the run's own events (``start``: every rank has built its datasets and model; ``step``:
the first training step is done), against the wall clock taken just before torchrun starts.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tutorial_lib.rundir.layout import CONFIG_FILE, METRICS_FILE
from tutorial_lib.rundir.metrics import read_metrics

FIRST_STEP_GOAL_S = 60.0  # issue 35: the first step within a minute of launch at ImageNet's size


def measure_first_step(data_dir: str | os.PathLike, run_root: str | os.PathLike, ranks: int = 4,
                       timeout: float = 900, data_format: str = "files") -> dict:
    """Launch ``ranks`` CPU ranks of the trainer on ``data_dir`` (class folders, or ``data_format`` shards) with
    torchrun (gloo), as the local backend does, and return the seconds from launch to their ``start`` event and to
    their first ``step`` event; the ranks are stopped then (their process group), and the run directory stays
    under ``run_root``."""
    from tutorial_lib.engine.config import make_config, to_cli_args
    from tutorial_lib.rundir.owned import clear_run_dir

    config = make_config("smoke", dataset="imagefolder", data_format=data_format,
                         data_dir=str(Path(data_dir).absolute()),
                         output_root=str(Path(run_root).absolute()), name="scale-first-step", arch="resnet18",
                         image_size=16, batch_size=2, epochs=1, max_steps_per_epoch=2, log_every=1,
                         checkpoint=False, progress=False, workers=0)
    run_dir = Path(config.output_root) / config.name
    clear_run_dir(run_dir)  # only what an earlier launch of this benchmark wrote there
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks),
               "-m", "tutorial_lib.train", *to_cli_args(config)]
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}  # as jobs gives CPU ranks
    log_path = Path(config.output_root) / f"{config.name}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as log:
        launched = time.time()
        agent = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        step = _first_event(run_dir, "step", agent, launched + timeout, log_path)
        start = next(e for e in read_metrics(run_dir) if e.get("event") == "start")
        resolved = json.loads((run_dir / CONFIG_FILE).read_text())  # what the job saw: its image counts
    finally:
        _stop(agent)
    return {"ranks": ranks, "backend": "torchrun", "dist_backend": "gloo", "arch": config.arch,
            "to_start_s": start["time"] - launched, "seconds": step["time"] - launched, "goal_s": FIRST_STEP_GOAL_S,
            "job_train_images": resolved["train_images"], "job_val_images": resolved["val_images"]}


def _first_event(run_dir: Path, event: str, agent: subprocess.Popen, deadline: float, log_path: Path) -> dict:
    while True:
        found = next((e for e in read_metrics(run_dir) if e.get("event") == event), None) \
            if (run_dir / METRICS_FILE).is_file() else None
        if found:
            return found
        if agent.poll() is not None:
            raise RuntimeError(f"the ranks ended (exit {agent.returncode}) before a {event!r} event; the end of "
                               f"{log_path}:\n{log_path.read_text(errors='replace')[-2000:]}")
        if time.time() > deadline:
            raise TimeoutError(f"no {event!r} event in {run_dir} before the timeout")
        time.sleep(0.2)


def _stop(agent: subprocess.Popen) -> None:
    """torchrun stops its ranks on SIGTERM (they run in sessions of their own); SIGKILL after a grace period."""
    if agent.poll() is None:
        os.killpg(agent.pid, signal.SIGTERM)
        try:
            agent.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(agent.pid, signal.SIGKILL)
            agent.wait()


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
