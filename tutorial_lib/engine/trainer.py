"""The training program: the large-minibatch ImageNet recipe, from one CPU process to many nodes.

Run it the same way everywhere (distributed settings come from torchrun's environment)::

    python -m tutorial_lib.train --profile smoke --name demo              # one process
    torchrun --nproc-per-node 2 -m tutorial_lib.train --profile smoke --name ddp2
    torchrun --nnodes 2 --nproc-per-node 4 --rdzv-backend c10d --rdzv-endpoint HEAD:29500 \\
        -m tutorial_lib.train --profile hal --data-dir /path/to/imagenet --name hal-8gpu

Everything a watcher needs lands in the run directory (``output_root/name``): ``config.json``,
``metrics.jsonl``, ``checkpoint.pt`` and, once training is finished, ``model.pt`` (the weights to take
away) and ``DONE``. Started again on the same run directory it resumes from the checkpoint. A ``STOP``
file in the run directory, or SIGUSR1/SIGTERM, makes it finish the current step, checkpoint and exit
(used before time limits).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field, replace

import torch

from tutorial_lib.data import file_index, staging
from tutorial_lib.engine import distributed as dist_utils
from tutorial_lib.engine.cli import config_from_args
from tutorial_lib.engine.config import ConfigError, TrainConfig, scaled_batch_and_lr, validate
from tutorial_lib.engine.device import environment_facts, loader_workers, usable_cpus
from tutorial_lib.engine.evaluate import evaluate
from tutorial_lib.engine.input.files import Batch, without_a_lone_image
from tutorial_lib.engine.input.folders import DataError, prepare_dataset
from tutorial_lib.engine.input.loaders import loaders_for
from tutorial_lib.engine.memory import StepOutOfMemory, check_training_memory, step_out_of_memory
from tutorial_lib.engine.model_file import class_names, save_model
from tutorial_lib.engine.models import count_parameters, state_is_finite
from tutorial_lib.engine.recipe import check_resume
from tutorial_lib.engine.rng import rng_state, seed_epoch, set_rng_state
from tutorial_lib.engine.step import TrainStep
from tutorial_lib.engine.stop import (
    EXIT_DIVERGED,
    EXIT_ERROR,
    EXIT_STOPPED,
    StopRequest,
    launcher_owns_stop_file,
)
from tutorial_lib.engine.tally import EpochTally
from tutorial_lib.exits import run_main
from tutorial_lib.rundir.checkpoint import (
    SaveError,
    check_checkpoint,
    load_checkpoint,
    remove_stale_temp_files,
    save_atomic,
    write_text_atomic,
)
from tutorial_lib.rundir.layout import CHECKPOINT_FILE, CONFIG_FILE, DONE_FILE, MODEL_FILE, STOP_FILE
from tutorial_lib.rundir.lock import RunLock, prepare_run_dir
from tutorial_lib.rundir.metrics import MetricsWriter, ThroughputMeter
from tutorial_lib.rundir.owned import is_index_file


class TrainingDiverged(RuntimeError):
    """The training loss became NaN or infinite: the run stops without a new checkpoint."""


@dataclass
class Progress:
    """Where training is: the next epoch and how many of its batches are already done."""

    epoch: int = 0
    step_in_epoch: int = 0
    global_step: int = 0
    best_top1: float = 0.0
    history: list = field(default_factory=list)
    epoch_tally: dict | None = None  # the unfinished epoch's sums (EpochTally.as_dict), None between epochs


class Trainer:
    """One rank's share of a training run. Build it, then call :meth:`fit`."""

    def __init__(self, cfg: TrainConfig):
        rank, _, local_rank, local_world = dist_utils.env_rank_info()
        self.workers_setting = cfg.workers  # "auto" stays visible in config.json beside the number it became
        self.cfg = cfg = replace(cfg, workers=loader_workers(cfg.workers, local_world))
        self.device = dist_utils.pick_device(cfg.device, local_rank)
        self.info = dist_utils.init_distributed(self.device)
        self.run_dir = cfg.run_dir
        self.is_main = self.info.is_main
        self.lock = RunLock(self.run_dir)
        self.stop = StopRequest(self.run_dir, on_give_up=self.lock.release if self.is_main else None)
        self.scaled = scaled_batch_and_lr(cfg, self.info.world_size)
        self.data_cfg = dataclasses.replace(cfg, data_dir=staging.read_location(cfg.data_dir))  # a staged copy?
        self.read_from = self.data_cfg.data_dir

    # ----------------------------------------------------------------- setup
    def setup(self) -> None:
        """Prepare the run directory, data, model, optimiser, schedule and (if any) the checkpoint."""
        cfg, info = self.cfg, self.info
        check_training_memory(cfg, self.device, info)  # before the run directory is touched
        if self.is_main:
            prepare_run_dir(self.run_dir)
            self.lock.acquire()
            if not launcher_owns_stop_file(self.run_dir):  # a STOP left by an earlier run of ours
                (self.run_dir / STOP_FILE).unlink(missing_ok=True)
            if remove_stale_temp_files(self.run_dir / CHECKPOINT_FILE):  # safe: we hold the lock
                print("removed the temporary file of a checkpoint save that was interrupted", flush=True)
            for name in (CONFIG_FILE, DONE_FILE):  # written atomically too
                remove_stale_temp_files(self.run_dir / name)
        if cfg.stage_to and self.read_from == cfg.data_dir:
            self._say(f"stage_to is done by a job's node launchers (jobs.submit, train.sbatch): reading {cfg.data_dir}")
        if info.local_rank == 0:
            prepare_dataset(self.data_cfg)
        dist_utils.barrier(info)
        kept = None
        if cfg.dataset != "synthetic" and cfg.data_format == "files":  # one scan per job (shards: their index)
            index = file_index.location(self.run_dir, cfg.index_dir, cfg.name)
            if self.is_main and (self.run_dir / CHECKPOINT_FILE).is_file() and is_index_file(index):
                kept = index.read_text()  # put back if the resume is refused (r43ab: it was rewritten)
            if self.is_main:
                file_index.build(self.read_from, self.run_dir, path=index)
            dist_utils.barrier(info)
            file_index.use(None, self.read_from if self.read_from != cfg.data_dir else None, index)
        try:
            self._setup_training()
        except BaseException:  # a refused resume (a recipe, a damaged checkpoint) leaves the run as it was
            if kept is not None:
                write_text_atomic(kept, index)
            raise

    def _setup_training(self) -> None:
        cfg, info = self.cfg, self.info
        self.stop.install()
        self.metrics = MetricsWriter(self.run_dir, enabled=self.is_main)
        self.loaders = loaders_for(self.data_cfg, info.rank, info.world_size, self.device)  # cfg.input_pipeline
        self.steps_per_epoch = len(self.loaders.train)
        if cfg.max_steps_per_epoch:
            self.steps_per_epoch = min(self.steps_per_epoch, cfg.max_steps_per_epoch)
        torch.manual_seed(cfg.seed)  # identical initial weights on every rank
        self.step = TrainStep(cfg, self.loaders.num_classes, self.device, self.steps_per_epoch,
                              info.world_size, distributed=info.distributed)
        self.model, self.eval_model = self.step.model, self.step.eval_model
        self.optimizer = self.step.optimizer
        self.progress = Progress()
        self.resume_rng = None
        self._resume()

    def _resume(self) -> None:
        path = self.run_dir / CHECKPOINT_FILE
        state = load_checkpoint(path, map_location=self.device)
        if state is not None:  # its parts of the types the trainer writes, before any is used
            state = check_checkpoint(state, path, [f.name for f in dataclasses.fields(Progress)])
        per_rank = dist_utils.all_gather_objects(
            (dist_utils.node_name(), usable_cpus(), self.cfg.workers, os.path.abspath(self.read_from)), self.info)
        hosts, cpus, counts, read_from = (list(column) for column in zip(*per_rank, strict=True))
        workers = {"workers_setting": self.workers_setting, "rank_cpus": cpus, "rank_workers": counts}
        facts = {**environment_facts(self.device), **workers, "hosts": hosts,
                 "parameters": count_parameters(self.model), "data_read_from": dict(zip(hosts, read_from, strict=True)),
                 "slurm_job_id": os.environ.get("SLURM_JOB_ID"), "steps_per_epoch": self.steps_per_epoch,
                 "train_images": self.loaders.train_images, "val_images": self.loaders.val_images,
                 "num_classes": self.loaders.num_classes}
        changes = {}
        if state is not None:  # before anything is written: a checkpoint of another recipe is refused
            changes = check_resume(state, self.cfg, {"world_size": self.info.world_size,
                                                     "num_classes": self.loaders.num_classes}, self.run_dir)
            done = Progress(**state["progress"])
            try:  # the schedule of this run's plan, at the step's place in it (the plan may have grown)
                self.step.load_state_dict(state, done.epoch * self.steps_per_epoch + done.step_in_epoch)
            except (RuntimeError, KeyError, ValueError, TypeError, AttributeError, IndexError) as exc:
                raise ConfigError(
                    f"resume: the checkpoint in {self.run_dir} does not fit this model "
                    f"({str(exc).strip().splitlines()[0][:200]}). Fix: pass another --name for a new run, or start "
                    f"this one over (python -m tutorial_lib.rundir fresh {self.run_dir})") from None
        if self.is_main:
            resolved = {**self.cfg.to_dict(), **self.scaled, **facts}
            write_text_atomic(json.dumps(resolved, indent=2, default=str), self.run_dir / CONFIG_FILE)
        if state is None:
            self.metrics.write("start", **self.scaled, hosts=hosts, steps_per_epoch=self.steps_per_epoch,
                               epochs=self.cfg.epochs, arch=self.cfg.arch, precision=self.cfg.precision, **workers)
            return
        self.progress = done
        if self.is_main and self.progress.epoch < self.cfg.epochs:  # trains on (more epochs): not finished now
            (self.run_dir / DONE_FILE).unlink(missing_ok=True)
        rng = state.get("rng") or []
        if self.progress.step_in_epoch > 0 and self.info.rank < len(rng):  # mid-epoch: continue its RNG
            self.resume_rng = rng[self.info.rank]
        self.metrics.write("resume", epoch=self.progress.epoch, step_in_epoch=self.progress.step_in_epoch,
                           global_step=self.progress.global_step, lr=self.optimizer.param_groups[0]["lr"],
                           **self.scaled, hosts=hosts, changes=changes)
        if changes:
            self._say("resuming with changed settings: "
                      + ", ".join(f"{key} {old} -> {new}" for key, (old, new) in changes.items()))
        self._say(f"resumed from {self.run_dir / CHECKPOINT_FILE} at epoch {self.progress.epoch + 1}, "
                  f"step {self.progress.step_in_epoch}")

    def _say(self, message: str) -> None:
        if self.is_main:
            print(message, flush=True)

    # --------------------------------------------------------------- training
    def save_checkpoint(self) -> None:
        """Write checkpoint.pt atomically (rank 0), with every rank's RNG state."""
        if not self.cfg.checkpoint:
            return
        self.stop.progress()
        rngs = dist_utils.all_gather_objects(rng_state(), self.info)
        if self.is_main:
            save_atomic({**self.step.state_dict(), "progress": vars(self.progress), "rng": rngs,
                         "world_size": self.info.world_size, "num_classes": self.loaders.num_classes,
                         "config": self.cfg.to_dict()},
                        self.run_dir / CHECKPOINT_FILE)

    def train_step(self, batch: Batch) -> torch.Tensor:
        """One step of :class:`tutorial_lib.engine.step.TrainStep` (forward, backward, optimiser, LR)."""
        return self.step(batch)

    def _mean_loss_and_stop(self, loss_sum: torch.Tensor, steps: int) -> tuple[float | None, bool]:
        """All-reduce the recent loss and the stop flags: the mean loss over ranks of the ``steps`` trained
        (None if none was), and whether any rank was asked to stop (so every rank stops at the same step)."""
        loss_total, step_total, stops = dist_utils.all_reduce_sum(
            [float(loss_sum), float(steps), float(self.stop.local())], self.info, self.device)
        return (loss_total / step_total if step_total else None), stops > 0

    def train_epoch(self, epoch: int) -> dict | None:
        """Run (the rest of) one epoch. Returns its summary, or None if a stop was requested."""
        cfg, progress = self.cfg, self.progress
        seed_epoch(cfg.seed, epoch, self.info.rank)
        loader = self.loaders.train_epoch(epoch, skip_batches=progress.step_in_epoch)
        batches = iter(loader)
        if self.resume_rng is not None:  # after the iterator drew its seed, as the first run did
            set_rng_state(self.resume_rng)
            self.resume_rng = None
        todo = self.steps_per_epoch - progress.step_in_epoch
        tally = EpochTally.for_epoch(progress.step_in_epoch, progress.epoch_tally)  # a stopped epoch's sums
        bar = self._progress_bar(todo, epoch)
        meter, part_start = ThroughputMeter(), time.perf_counter()
        loss_sum, since_log, trained, skipped, read = torch.zeros((), device=self.device), 0, 0, 0, 0
        for _ in range(todo):
            batch = next(batches)
            if self.step.needs_two_images:
                batch = without_a_lone_image(batch)
            self.stop.progress()
            loss = self.train_step(batch)
            if loss is None:  # skipped by every rank (one had no usable image): this rank's images were not used
                skipped += len(batch.targets)
                tally.skipped_steps += 1
            else:
                loss_sum += loss
                trained += 1
                read += len(batch.targets)
            since_log += 1
            skipped += batch.skipped
            meter.update(len(batch.targets) * self.info.world_size if loss is not None else 0)
            progress.step_in_epoch += 1
            progress.global_step += 1
            if bar is not None:
                bar.update(1)
            if since_log == cfg.log_every or progress.step_in_epoch == self.steps_per_epoch:
                mean_loss, stop = self._mean_loss_and_stop(loss_sum, trained)
                # before any checkpoint of these weights: the last one is kept
                if mean_loss is not None and not math.isfinite(mean_loss):
                    self._fail(TrainingDiverged(
                        f"training loss is {mean_loss} at epoch {epoch + 1}, step {progress.global_step}; stopped "
                        f"without saving, the last checkpoint is kept. Fix: lower base_lr (now {cfg.base_lr:g}) "
                        "or lengthen warmup_epochs, then start again with another name or fresh"), bar)
                tally.add_loss(mean_loss or 0.0, trained)
                self.metrics.write("step", epoch=epoch + 1, step=progress.global_step, loss=mean_loss,
                                   lr=self.optimizer.param_groups[0]["lr"], images_per_sec=meter.rate())
                if bar is not None and mean_loss is not None:
                    bar.set_postfix(loss=f"{mean_loss:.3f}", img_s=f"{meter.rate():.0f}")
                loss_sum.zero_()
                since_log = trained = 0
                meter.reset()
                if stop and progress.step_in_epoch < self.steps_per_epoch:
                    if bar is not None:
                        bar.close()
                    self._add_part(tally, read, skipped, part_start)
                    progress.epoch_tally = tally.as_dict()  # saved with the checkpoint: the resume adds to it
                    return None
        if bar is not None:
            bar.close()
        read_total = self._add_part(tally, read, skipped, part_start)
        if read_total == 0:
            self._fail(DataError(
                f"data_dir: no training image of epoch {epoch + 1} could be read and trained on ({tally.skipped} "
                "skipped: unreadable, or on a step another rank had no readable image for; see the log). Fix: "
                f"check the files under {cfg.data_dir}/train"))
        return tally.figures(self.steps_per_epoch)

    def _add_part(self, tally: EpochTally, read: int, skipped: int, part_start: float) -> float:
        """Add this part of the epoch (since the start or the resume) to ``tally``: images and skipped images
        of all ranks, and this part's time. Returns the images read in this part (all ranks)."""
        seconds = time.perf_counter() - part_start
        read_total, skipped_total = dist_utils.all_reduce_sum([float(read), float(skipped)], self.info, self.device)
        tally.add_part(read_total, skipped_total, seconds)
        return read_total

    def _fail(self, error: Exception, bar=None):
        """Record ``error`` as an ``error`` event (its one line) and raise it on every rank."""
        if bar is not None:
            bar.close()
        self.metrics.write("error", epoch=self.progress.epoch, step_in_epoch=self.progress.step_in_epoch,
                           global_step=self.progress.global_step, reason=str(error), kind=type(error).__name__)
        raise error

    def _progress_bar(self, total: int, epoch: int):
        if not (self.is_main and self.cfg.progress):
            return None
        from tqdm.auto import tqdm

        return tqdm(total=total, desc=f"epoch {epoch + 1}/{self.cfg.epochs}", leave=False,
                    mininterval=0.5 if sys.stderr.isatty() else 10, file=sys.stderr)

    def fit(self) -> dict:
        """Train to ``epochs`` (or until a stop request / ``stop_after_epochs``); return a summary."""
        cfg, progress = self.cfg, self.progress
        started, epochs_now = time.perf_counter(), 0
        self.step.train_model.train()
        while progress.epoch < cfg.epochs:
            summary = self.train_epoch(progress.epoch)
            if summary is None:
                return self._stopped(started)
            summary.update(evaluate(self.eval_model, self.loaders.val, self.device, self.info,
                                    cfg.channels_last, self.step.autocast, self.stop.progress))
            if not math.isfinite(summary["val_loss"]):  # diverged in the epoch's last steps
                # which it is, read from the model: r43k saw finite weights whose eval outputs overflowed
                what = ("the weights are no longer finite" if not state_is_finite(self.eval_model) else
                        "the weights are finite but the model's outputs on the validation images are not (they "
                        "overflow)")
                self._fail(TrainingDiverged(
                    f"validation loss is {summary['val_loss']} after epoch {progress.epoch + 1} (step "
                    f"{progress.global_step}): {what}; stopped without saving them, the last checkpoint is kept. "
                    f"Fix: lower base_lr (now {cfg.base_lr:g}) or lengthen warmup_epochs, then start again with "
                    "another name or fresh"))
            self.stop.progress()
            progress.epoch += 1
            progress.step_in_epoch, progress.epoch_tally = 0, None
            progress.best_top1 = max(progress.best_top1, summary["top1"])
            record = {"epoch": progress.epoch, "lr": self.optimizer.param_groups[0]["lr"], **summary}
            progress.history.append({k: record[k] for k in ("epoch", "top1", "top5", "train_loss")})
            # Checkpoint first, then log: a crash while saving repeats this epoch after the resume,
            # and its `epoch` event is still written exactly once.
            self.save_checkpoint()
            self.metrics.write("epoch", **record)
            self._say(f"epoch {progress.epoch}/{cfg.epochs}: train loss {summary['train_loss']:.3f}  "
                      f"val loss {summary['val_loss']:.3f}  top-1 {summary['top1']:.1f}%  "
                      f"top-5 {summary['top5']:.1f}%  {summary['images_per_sec']:.0f} img/s"
                      + (f"  (train loss, time and img/s of the last {summary['train_steps']} steps only: resumed "
                         "from a checkpoint without the epoch's sums)" if summary["partial"] else ""))
            epochs_now += 1
            stop_now = self._mean_loss_and_stop(torch.zeros(()), 0)[1]
            if progress.epoch < cfg.epochs and (stop_now or epochs_now == cfg.stop_after_epochs):
                return self._stopped(started, saved=True)
        total = time.perf_counter() - started
        if self.is_main:  # before `end`: whoever sees the run end finds its model
            save_model(self.run_dir / MODEL_FILE, self.model, cfg, self.loaders.num_classes,
                       class_names(cfg, self.loaders.num_classes))
        self.metrics.write("end", total_time=total, best_top1=progress.best_top1, epochs=progress.epoch,
                           global_step=progress.global_step)
        if self.is_main:
            write_text_atomic(json.dumps({"best_top1": progress.best_top1}), self.run_dir / DONE_FILE)
        self._say(f"finished: best top-1 {progress.best_top1:.1f}%  run directory {self.run_dir.resolve()}")
        return {"status": "completed", "best_top1": progress.best_top1, "run_dir": str(self.run_dir),
                "total_time": total}

    def _stopped(self, started: float, saved: bool = False) -> dict:
        if not saved:
            self.save_checkpoint()
        reason = self.stop.reason or f"stop_after_epochs={self.cfg.stop_after_epochs}"
        self.metrics.write("stop", epoch=self.progress.epoch, step_in_epoch=self.progress.step_in_epoch,
                           global_step=self.progress.global_step, reason=reason)
        # No rank exits (non-zero: stopped) before rank 0 has saved: a launcher may then end the others.
        dist_utils.barrier(self.info)
        self._say(f"stopped ({reason}) at epoch {self.progress.epoch + 1} step {self.progress.step_in_epoch}; "
                  f"checkpoint saved, run again on {self.run_dir} to resume")
        return {"status": "stopped", "best_top1": self.progress.best_top1, "run_dir": str(self.run_dir),
                "total_time": time.perf_counter() - started}

    def close(self) -> None:
        """Release the run lock, restore signal handlers and leave the process group."""
        self.stop.uninstall()
        file_index.use(None)
        if self.is_main:
            self.lock.release()
        dist_utils.shutdown(self.info)


def train(cfg: TrainConfig) -> dict:
    """Validate ``cfg``, then train this rank's share; returns a summary dict."""
    validate(cfg)
    trainer = Trainer(cfg)
    try:
        trainer.setup()
        return trainer.fit()
    except RuntimeError as exc:  # torch's CPU allocator beyond the estimate: one line (CUDA's has its own class)
        problem = step_out_of_memory(cfg, exc)
        if problem is None:
            raise
        raise problem from None
    finally:
        trainer.close()


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point. Exit status (:mod:`tutorial_lib.exits`): 0 finished, 75 stopped on request
    with a checkpoint (run again to resume), 2 refused (bad input, a run directory in use: one line), 3 the loss
    became non-finite, 130 Ctrl-C, 1 anything else (a failed save, or memory beyond the estimate: one line naming
    the file or the fields and the cause)."""
    from tutorial_lib.rundir.lock import RunDirError, RunLockedError

    def run() -> int:
        summary = train(config_from_args(argv))
        return EXIT_STOPPED if summary["status"] == "stopped" else 0

    return run_main(run, refused=(ConfigError, DataError, RunLockedError, RunDirError, file_index.IndexPlaceError,
                                  staging.StagingError),
                    statuses={TrainingDiverged: EXIT_DIVERGED, SaveError: EXIT_ERROR, StepOutOfMemory: EXIT_ERROR,
                              torch.cuda.OutOfMemoryError: EXIT_ERROR})  # beyond the estimate: one line


if __name__ == "__main__":
    sys.exit(main())
