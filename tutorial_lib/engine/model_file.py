"""The model a finished run leaves to take away (``model.pt``), and ``python -m tutorial_lib.evaluate``.

``model.pt`` is a dict of plain values and tensors (loads with ``torch.load(path, weights_only=True)``)::

    saved = torch.load("runs/r50/model.pt", weights_only=True)
    model = torchvision.models.get_model(saved["arch"], num_classes=len(saved["classes"]))
    model.load_state_dict(saved["state_dict"])   # saved["classes"][i] is the wnid of output i

(``norm: group`` runs need ``norm_layer`` as in :func:`tutorial_lib.engine.models.build_model`.)
"""

from __future__ import annotations

import os
from contextlib import nullcontext
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from tutorial_lib.data import PREPARE_COMMAND
from tutorial_lib.data.file_index import class_folders
from tutorial_lib.data.links import moved_source
from tutorial_lib.data.shard_index import is_pack
from tutorial_lib.engine import distributed as dist_utils
from tutorial_lib.engine.errors import ConfigError, shorten
from tutorial_lib.engine.evaluate import evaluate
from tutorial_lib.engine.input.cpu import CountingImageFolder, NormalizedBatches, collate_skipping, val_transform
from tutorial_lib.engine.input.files import Normalizer
from tutorial_lib.engine.input.folders import DataError
from tutorial_lib.engine.input.samplers import ShardSampler
from tutorial_lib.engine.input.shards import CountingShards, read_pack
from tutorial_lib.engine.memory import available_bytes, check_fits
from tutorial_lib.engine.models import build_model
from tutorial_lib.engine.validate import INT_LIMITS
from tutorial_lib.exits import ArgumentParser, check_path_arguments, run_main
from tutorial_lib.paths import path_problem, user_path
from tutorial_lib.rundir.checkpoint import CheckpointError, load_weights_only, save_atomic
from tutorial_lib.rundir.layout import MODEL_FILE


def class_names(cfg, num_classes: int) -> list[str]:
    """The class of each output in label order: ImageFolder's sorted class folders of ``data_dir/train`` (a pack
    of shards: its index's), or ``"0".."N-1"`` for synthetic data."""
    if cfg.dataset == "synthetic":
        return [str(i) for i in range(num_classes)]
    if cfg.data_format == "shards":
        return read_pack(cfg.data_dir)["splits"]["train"]["classes"]
    return class_folders(Path(cfg.data_dir) / "train", warn=False)[0]


def save_model(path: str | os.PathLike, model: torch.nn.Module, cfg, num_classes: int, classes: list[str]) -> Path:
    """Write ``model.pt`` atomically: the torchvision ``state_dict`` (on the CPU), arch, the number of outputs,
    the class names in label order, the image size."""
    state = {name: value.detach().cpu() for name, value in model.state_dict().items()}
    return save_atomic({"format": 1, "arch": cfg.arch, "norm": cfg.norm, "image_size": cfg.image_size,
                        "num_classes": num_classes, "classes": list(classes), "state_dict": state}, path)


def load_model(path: str | os.PathLike, device: torch.device | str = "cpu") -> tuple[torch.nn.Module, dict]:
    """The model in ``path`` (built by :func:`build_model`, weights loaded, eval mode) and the file's other
    entries; CheckpointError (one line) for a file that holds anything but tensors and plain values."""
    saved = load_weights_only(path)
    if not isinstance(saved, dict) or saved.get("format") != 1:
        raise CheckpointError(f"model: {path} is not a model.pt written by tutorial_lib. Fix: pass the run "
                              "directory of a finished run.")
    _check_entries(saved, path)
    odd = next((name for name, value in saved["state_dict"].items() if isinstance(value, torch.Tensor)
                and value.is_floating_point() and not torch.isfinite(value).all()), None)
    if odd is not None:  # NaN weights evaluated to a chance-level top-1 as if it were a measurement
        raise CheckpointError(f"model: {path} holds non-finite weights (nan or inf in {shorten(odd)}): the run "
                              "diverged or the file was changed, and no accuracy can be measured with them. Fix: "
                              "pass the run directory of a run that finished (train again with a smaller "
                              "--base-lr if it diverged).")
    try:
        model = build_model(saved["arch"], saved["num_classes"], norm=saved["norm"])
        model.load_state_dict(saved["state_dict"])
    except (RuntimeError, KeyError, ValueError, TypeError) as exc:  # weights of another shape or model
        raise CheckpointError(f"model: the weights in {path} do not fit a {saved['arch']} with "
                              f"{saved['num_classes']} outputs ({str(exc).strip().splitlines()[0][:200]}). Fix: pass "
                              "the run directory of a finished run; do not edit its model.pt.") from None
    return model.to(device).eval(), {k: v for k, v in saved.items() if k != "state_dict"}


def _check_entries(saved: dict, path) -> None:
    """CheckpointError naming the first entry of a model.pt that is missing or not what :func:`save_model` writes
    (an arch that is no torchvision model, such as ``os.system``, is never looked up)."""
    from tutorial_lib.engine.config import NORMS
    from tutorial_lib.engine.models import available_archs

    def whole(value, low: int, high: int) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high

    classes = saved.get("classes")
    problems = [
        ("arch", saved.get("arch") in available_archs(), "a torchvision model name"),
        ("num_classes", whole(saved.get("num_classes"), 1, 1_000_000), "a whole number of outputs"),
        ("norm", saved.get("norm") in NORMS, f"one of {', '.join(NORMS)}"),
        ("image_size", whole(saved.get("image_size"), 1, 65_535), "a size in pixels"),
        ("classes", isinstance(classes, list) and len(classes) == saved.get("num_classes")
         and all(isinstance(c, str) for c in classes), "a list of num_classes class names"),
        ("state_dict", isinstance(saved.get("state_dict"), dict), "the weights"),
    ]
    bad = next(((key, want) for key, ok, want in problems if not ok), None)
    if bad is not None:
        raise CheckpointError(f"model: {path} holds {bad[0]} {shorten(saved.get(bad[0]))}, not {bad[1]}: it was not "
                              "written by tutorial_lib or was changed since. Fix: pass the run directory of a "
                              "finished run.")


def evaluate_run(run_dir: str | os.PathLike, data_dir: str | os.PathLike, batch_size: int = 64,
                 workers: int = 2, device: str = "auto") -> dict:
    """Top-1/top-5 of ``run_dir/model.pt`` on ``data_dir/val`` (one process, or every rank under torchrun,
    each image counted once). DataError if val/'s class folders are not the model's classes."""
    run_dir, data_dir = user_path(run_dir), user_path(data_dir)
    problem = path_problem(str(data_dir), written=False)  # r43q: a loop or a long name blamed on prepare's mark
    if problem is not None:
        raise DataError(f"--data-dir: {shorten(str(data_dir))} {problem[0]}. Fix: {problem[1]}.")
    largest = INT_LIMITS.get("batch_size", 2**31 - 1)  # the trainer's: 400 digits overflowed the estimate (r43v)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or not 1 <= batch_size <= largest:
        raise DataError(f"--batch-size: must be a whole number from 1 to {largest:,}, got {shorten(batch_size)}. "
                        "Fix: --batch-size 64")
    most = INT_LIMITS["workers"]  # the trainer's cap: more processes than any machine can use
    if isinstance(workers, bool) or not isinstance(workers, int) or not 0 <= workers <= most:
        raise DataError(f"--workers: must be a whole number from 0 to {most}, got {shorten(workers)}. "
                        "Fix: --workers 2")
    path = Path(run_dir) / MODEL_FILE
    if not path.is_file():
        raise CheckpointError(f"RUN_DIR: {run_dir} has no {MODEL_FILE} (the run did not finish, or it was "
                              f"trained before runs wrote one). Fix: pass the run directory of a finished run.")
    val_dir = Path(data_dir) / "val"
    moved = moved_source(data_dir)
    if moved is not None:
        raise DataError(moved)
    if is_pack(data_dir):  # a pack of shards (python -m tutorial_lib.data pack): its validation shards
        val_dir = Path(data_dir)
    elif not val_dir.is_dir() or not class_folders(val_dir, warn=False)[0]:
        raise DataError(f"--data-dir: {data_dir} has no val/ folder with class folders in it (a flat val/ needs "
                        f"its ground truth). Fix: pass a folder with val/<class>/ (`{PREPARE_COMMAND}` makes one).")
    if device not in ("auto", "cpu", "cuda"):
        raise DataError(f"--device: {shorten(device)} is not a device. Fix: pass auto, cpu or cuda.")
    if device == "cuda" and not torch.cuda.is_available():
        raise DataError("--device: cuda was asked for but no GPU is visible here. Fix: pass --device cpu (or auto), "
                        "or run on a GPU node.")
    _, _, local_rank, _ = dist_utils.env_rank_info()
    target = dist_utils.pick_device(device, local_rank)
    info = dist_utils.init_distributed(target)
    try:
        model, meta = load_model(path, target)
        size = meta["image_size"]
        check_fits(batch_size * 3 * size * size * 4, available_bytes(target),
                   f"--batch-size: evaluating batches of {batch_size} images of {size}x{size} px (the model's "
                   "image_size)", "pass a smaller --batch-size", None)
        dataset = (CountingShards(data_dir, "val", val_transform(size)) if is_pack(data_dir)
                   else CountingImageFolder(val_dir, val_transform(size)))
        if dataset.classes != meta["classes"]:
            raise DataError(f"--data-dir: the class folders of {val_dir} ({len(dataset.classes)}, first "
                            f"{dataset.classes[:3]}) are not the {len(meta['classes'])} classes the model was "
                            f"trained on (first {meta['classes'][:3]}), so labels would not match. Fix: pass the "
                            "data set it was trained on.")
        loader = NormalizedBatches(DataLoader(dataset, batch_size=batch_size, num_workers=workers,
                                              collate_fn=collate_skipping,
                                              sampler=ShardSampler(len(dataset), info.rank, info.world_size)),
                                   Normalizer(target))
        result = evaluate(model, loader, target, info, False, nullcontext)
    finally:
        dist_utils.shutdown(info)
    if not result.get("val_images"):  # e.g. a prepared DEST of links whose SOURCE was moved: every read failed
        raise DataError(f"--data-dir: no image of {val_dir} could be read ({len(dataset):,} file(s) listed), so "
                        "there is no accuracy to report. Fix: check that the images are there and readable (a "
                        "folder made by `python -m tutorial_lib.data prepare` links to its SOURCE: put SOURCE back, "
                        "or prepare again).")
    return {"run_dir": str(run_dir), "data_dir": str(data_dir), "arch": meta["arch"], "ranks": info.world_size,
            **result}


def main(argv: list[str] | None = None) -> int:
    """``python -m tutorial_lib.evaluate RUN_DIR --data-dir DIR``: print top-1/top-5 of the run's model.pt.
    Exit status (:mod:`tutorial_lib.exits`): 0 done, 2 refused (one line), 1 a fault of the machine, 130 Ctrl-C."""
    parser = ArgumentParser(prog="python -m tutorial_lib.evaluate",
                            description="top-1/top-5 of a finished run's model.pt on DIR/val "
                                        "(one process, or torchrun -m tutorial_lib.evaluate ...)")
    parser.add_argument("run_dir", metavar="RUN_DIR")
    parser.add_argument("--data-dir", required=True, metavar="DIR", help="a folder with val/<class>/ images")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2, help="DataLoader worker processes per rank")
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"), help="auto, cpu or cuda")
    return run_main(lambda: _evaluate_and_print(parser.parse_args(argv)),
                    refused=(CheckpointError, DataError, ConfigError))


def _evaluate_and_print(args) -> int:
    check_path_arguments({"RUN_DIR": args.run_dir})  # --data-dir: named by evaluate_run
    result = evaluate_run(args.run_dir, args.data_dir, args.batch_size, args.workers, args.device)
    if int(os.environ.get("RANK", "0")) == 0:
        print(f"{result['arch']} from {result['run_dir']}: top-1 {result['top1']:.2f}%  top-5 {result['top5']:.2f}%  "
              f"on {result['val_images']:,} images of {result['data_dir']}/val ({result['ranks']} rank(s))", flush=True)
    return 0
