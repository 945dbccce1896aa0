"""The benchmarks' command line: ``python -m tutorial_lib.bench train|data|e2e|runs|allreduce|matmul|table``."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from tutorial_lib.bench.comm import measure_allreduce, parse_size
from tutorial_lib.bench.compute import defaults, matmul_peak, measure_training, resolve_device, sweep_training
from tutorial_lib.bench.data import (
    DEFAULT_FAKE_DIR,
    make_fake_imagenet,
    measure_e2e,
    measure_gpu_pipeline,
    measure_loader,
    prepare_fake_imagenet,
    real_data_set,
)
from tutorial_lib.bench.records import (
    TABLE_COLUMNS,
    append_records,
    describe,
    flat_rows,
    markdown_tables,
    read_records,
)
from tutorial_lib.engine.config import parse_bool
from tutorial_lib.engine.device import environment_facts
from tutorial_lib.exits import ArgumentParser

USAGE = """examples:
    python -m tutorial_lib.bench train --precision fp32,bf16 --channels-last off,on --out results/train.jsonl
    python -m tutorial_lib.bench data --workers 0,1,2 --out results/data.jsonl
    python -m tutorial_lib.bench data --device cpu --gpu-pipeline yes   # the GPU pipeline's code, on the CPU
    python -m tutorial_lib.bench loader --workers 1,2 --out results/loader.jsonl   # CPU pipeline vs torchvision's
    python -m tutorial_lib.bench e2e --workers 2 --input-pipeline cpu,gpu --out results/e2e.jsonl
    python -m tutorial_lib.bench runs runs/my_run --out results/trainer.jsonl   # a trainer run's own speed
    torchrun --nproc-per-node 2 -m tutorial_lib.bench allreduce --out results/allreduce.jsonl
    python -m tutorial_lib.jobs.netlab up --rate-mbit 200   # as root; then in node namespace tlab-n<i>:
    ip netns exec tlab-n0 env GLOO_SOCKET_IFNAME=eth0 torchrun --nnodes 2 --node-rank 0 --nproc-per-node 2 \\
        --master-addr 10.77.0.1 -m tutorial_lib.bench allreduce --algorithm flat,hierarchical --links
    python -m tutorial_lib.bench prepare --out results/prepare.jsonl   # the data-prepare command on each form
    python -m tutorial_lib.bench scan --ranks 4 --out results/scan.jsonl   # one file list per job vs per rank
    python -m tutorial_lib.bench extract --out results/extract.jsonl   # prepare vs GNU tar on the archives, to disk
    python -m tutorial_lib.bench scale --files 10k --out results/scale.jsonl   # the data path at 10k/100k/full
    python -m tutorial_lib.bench staging --out results/staging.jsonl   # copy to node-local disk, read from each
    python -m tutorial_lib.bench shards --out results/shards.jsonl   # packed shards against class folders
    python -m tutorial_lib.bench matmul                      # dense matrix-product rate of this device
    python -m tutorial_lib.bench table results/train.jsonl   # markdown tables of result files

Defaults depend on the device: tiny on a CPU, ResNet-50 / 224 px / batch 256 on a GPU."""


def _parse_list(text: str, kind=str) -> list:
    """A comma list; an empty or repeated item is refused, compared as ``kind`` reads it (``resnet18,,resnet18``
    measured one model twice, r43aa: ``on,true`` one layout twice). An empty text is an empty list, which
    :func:`tutorial_lib.bench.arguments.check_arguments` refuses naming the choices."""
    items = str(text).replace(" ", "").split(",")
    values = [kind(v) for v in items if v]
    if (values and not all(items)) or len(set(values)) < len(values):
        raise argparse.ArgumentTypeError(f"{text[:60]!r} has an empty or repeated item. Fix: give each item "
                                         "once, separated by single commas (e.g. resnet18,resnet50)")
    return values


def _width_height(text: str) -> tuple[int, int]:
    try:
        width, height = (int(v) for v in text.lower().split("x"))
    except ValueError:
        width = height = 0
    if width < 1 or height < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not WIDTHxHEIGHT in pixels; pass e.g. 500x375")
    return width, height


def _algorithms(text: str) -> list[str]:
    from tutorial_lib.engine.config import ALLREDUCE_MODES

    names = _parse_list(text)
    unknown = [name for name in names if name not in ALLREDUCE_MODES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown all-reduce algorithm {', '.join(unknown) or '(none)'}; "
                                         f"use a comma list of {', '.join(ALLREDUCE_MODES)}")
    return names


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m tutorial_lib.bench`` parser."""
    parser = ArgumentParser(
        prog="python -m tutorial_lib.bench", epilog=USAGE, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Benchmarks that write JSON lines naming the device: training speed, input-pipeline speed, "
                    "all-reduce bandwidth.")
    sub = parser.add_subparsers(dest="command", required=True)
    common = ArgumentParser(add_help=False)
    common.add_argument("--device", default="auto", help="auto | cpu | cuda")
    common.add_argument("--out", help="append JSON lines here (default: print them)")
    common.add_argument("--quiet", action="store_true", help="no human-readable lines")
    common.add_argument("--label", help="stored in every record as `label` (e.g. which run of a pair this is)")

    train = sub.add_parser("train", parents=[common], help="training throughput on synthetic batches")
    train.add_argument("--arch", type=_parse_list, help="comma list of torchvision models")
    train.add_argument("--precision", type=_parse_list, help="comma list of fp32,tf32,fp16,bf16")
    train.add_argument("--channels-last", type=lambda t: _parse_list(t, parse_bool),
                       help="comma list of on/off")
    train.add_argument("--compile", type=_parse_list, help="comma list of torch.compile modes (none, default, ...)")
    train.add_argument("--batch-size", type=lambda t: _parse_list(t, int), help="comma list of per-GPU batches")
    for name in ("image-size", "steps", "warmup", "windows"):
        train.add_argument("--" + name, type=int)
    train.add_argument("--num-classes", type=int, default=1000)
    train.add_argument("--isolate", default="auto", choices=("auto", "yes", "no"),
                       help="each configuration in a fresh process (auto: on the CPU, for a per-run max RSS)")
    train.add_argument("--matmul-tflops", type=float, help=argparse.SUPPRESS)

    matmul = sub.add_parser("matmul", parents=[common], help="dense matrix-product rate (the compute ceiling)")
    matmul.add_argument("--dtype", type=_parse_list, help="comma list, e.g. bfloat16,float32 (default: bf16 on a "
                        "GPU, fp32 on the CPU; float32 means true fp32, TF32 off)")
    prep = sub.add_parser("prepare", parents=[common], help="time `python -m tutorial_lib.data prepare` on each "
                          "form of a generated ImageNet")
    prep.add_argument("--classes", type=int, default=20)
    prep.add_argument("--per-class", type=int, default=100)
    prep.add_argument("--val-per-class", type=int, default=10)
    ext = sub.add_parser("extract", parents=[common], help="`prepare` on the original archives against GNU tar "
                         "doing the same work, timed until on disk (sync), in interleaved rounds")
    ext.add_argument("--classes", type=int, default=20)
    ext.add_argument("--per-class", type=int, default=250)
    ext.add_argument("--val-per-class", type=int, default=25)
    ext.add_argument("--rounds", type=int, default=3)
    ext.add_argument("--jpeg-size", default=(500, 375), type=_width_height,
                     help="generated image size WxH (the default gives ImageNet's mean file size, about 110 KB)")
    ext.add_argument("--cold-cache", action="store_true", help="drop the page cache before each timed run (root), so "
                     "the archives are read from the disk as the real 145 GB must be")
    ext.add_argument("--work-dir", help="where the archives and both extractions go (default: the temporary folder)")
    scale = sub.add_parser("scale", parents=[common], help="the data path at 10k, 100k or ImageNet's 1,331,167 "
                           "files: prepare of each form and the job's one scan (empty files, real wnids)")
    scale.add_argument("--files", default="10k", help="10k, 100k or full (1,281,167 train + 50,000 val)")
    scale.add_argument("--work-dir", default="data/scale", help="where the trees are made (kept between runs)")
    scale.add_argument("--forms", default="kaggle,flat_val,folders,archives", type=_parse_list)
    scale.add_argument("--steps", default="prepare,scan", type=_parse_list,
                       help="of prepare, tar (GNU tar on the same archives, beside prepare), scan, job (4-rank "
                       "launch to first step), stage (copy to a local folder)")
    scale.add_argument("--rounds", default=1, type=int, help="pairs of tar and prepare, in alternating order")
    scale.add_argument("--cold-cache", action="store_true", help="drop the caches before each of the paired runs "
                       "(root): both sides start with the same memory")
    packed = sub.add_parser("shards", parents=[common], help="packed shards against class folders: pack, staging "
                            "(against cp), the CPU loader, a 4-rank job's first step; interleaved, timed to disk")
    packed.add_argument("--sets", default="jpeg,full", type=_parse_list, help="jpeg (real JPEG size) and/or 10k, "
                        "100k, full (tiny files at that count; full: ImageNet's 1,331,167)")
    packed.add_argument("--steps", default="pack,stage,load,first_step", type=_parse_list,
                        help="of pack (always), stage, load (jpeg set), first_step")
    packed.add_argument("--rounds", type=int, default=2, help="interleaved rounds of each comparison")
    packed.add_argument("--jpeg-images", type=int, default=3000, help="500x375 JPEGs in the jpeg set")
    packed.add_argument("--workers", type=lambda t: _parse_list(t, int), default=[1, 2])
    packed.add_argument("--work-dir", default="data/shards", help="where the sets are made (kept) and what is "
                        "timed goes (deleted once timed)")
    stage = sub.add_parser("staging", parents=[common], help="copy the fake ImageNet to a node-local folder "
                           "(stage_to), then read every image from where it is and from the copy, in rounds")
    stage.add_argument("--data-dir", default="data/fake_imagenet", help="generated here unless it is a real set")
    stage.add_argument("--stage-to", help="the node-local folder (default: the system's temporary folder)")
    stage.add_argument("--classes", type=int, default=10)
    stage.add_argument("--per-class", type=int, default=100)
    stage.add_argument("--repeats", type=int, default=3)
    scan = sub.add_parser("scan", parents=[common], help="start-up time and directory reads of N ranks listing "
                          "an ImageFolder tree: every rank walking it (before) or one file index per job (after)")
    scan.add_argument("--tree", default="data/scan_tree", help="where the tree of empty files is made (or reused)")
    scan.add_argument("--ranks", type=int, default=4)
    scan.add_argument("--classes", type=int, default=1000)
    scan.add_argument("--train-per-class", type=int, default=190)
    scan.add_argument("--val-per-class", type=int, default=10)
    scan.add_argument("--repeats", type=int, default=3)
    reduce = sub.add_parser("allreduce", parents=[common], help="all-reduce bandwidth (run under torchrun)")
    reduce.add_argument("--sizes", type=lambda t: _parse_list(t, parse_size),
                        help="comma list of message sizes, e.g. 4K,1M,256M")
    reduce.add_argument("--iters", type=int, help="all-reduces per size per round, at least")
    reduce.add_argument("--repeats", type=int, default=3, help="rounds; the sizes take turns in every round")
    reduce.add_argument("--min-time", type=float, default=0.05, help="seconds per size per round, at least")
    reduce.add_argument("--warmup", type=int)
    reduce.add_argument("--dtype", default="float32")
    reduce.add_argument("--algorithm", type=_algorithms, default=["flat"],
                        help="comma list of flat,hierarchical,hybrid (nodes = torchrun's local world), interleaved")
    reduce.add_argument("--links", action="store_true",
                        help="also point-to-point times inside a node and across nodes (to fit the scaling model)")
    reduce.add_argument("--phases", action="store_true",
                        help="also time each phase of a hierarchical all-reduce of the largest size")
    reduce.add_argument("--ddp-steps", type=int, default=0,
                        help="also time this many DDP training steps per round with each algorithm (0: off)")
    add_data_arguments(sub, common)
    loader = sub.add_parser("loader", help="the CPU pipeline vs the plain torchvision recipe (interleaved), and "
                            "PIL's JPEG decoder vs torchvision's")
    loader.add_argument("--data-dir", default="data/fake_imagenet_loader", help="ImageNet-layout folder (generated "
                        "if missing)")
    loader.add_argument("--classes", type=int, default=8)
    loader.add_argument("--per-class", type=int, default=160)
    loader.add_argument("--workers", type=lambda t: _parse_list(t, int), default=[1, 2])
    loader.add_argument("--batch-size", type=int, default=32)
    loader.add_argument("--image-size", type=int, default=224)
    loader.add_argument("--min-time", type=float, default=3.0, help="seconds per recipe and round")
    loader.add_argument("--repeats", type=int, default=3)
    loader.add_argument("--decode-images", type=int, default=64, help="files in the decoder comparison (0: skip)")
    loader.add_argument("--out", help="append JSON lines here (default: print them)")
    loader.add_argument("--quiet", action="store_true", help="no human-readable lines")
    loader.add_argument("--label", help="stored in every record as `label`")
    runs = sub.add_parser("runs", help="a training run's own steady-state speed, from its run directory")
    runs.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    runs.add_argument("--skip-steps", type=int, default=0, help="also leave out windows ending at or before this "
                      "step (the first window of every epoch always is)")
    runs.add_argument("--reference", help="a run directory (e.g. the same settings on synthetic data): each record "
                      "gets its images/s as a fraction of this run's")
    runs.add_argument("--out", help="append JSON lines here (default: print them)")
    runs.add_argument("--quiet", action="store_true", help="no human-readable lines")
    table = sub.add_parser("table", help="markdown tables of result files")
    table.add_argument("files", nargs="+")
    table.add_argument("--out", help="also write the markdown here")
    return parser


def add_data_arguments(sub, common) -> None:
    """The ``data`` and ``e2e`` subcommands of ``python -m tutorial_lib.bench``."""
    for name, text in (("data", "JPEG loader speed: CPU workers vs the GPU input pipeline"),
                       ("e2e", "training throughput fed from JPEG files by the trainer's loader")):
        parser = sub.add_parser(name, parents=[common], help=text)
        parser.add_argument("--data-dir", default=DEFAULT_FAKE_DIR, help="ImageNet-layout folder (generated if "
                            "missing; pass a real ImageNet to measure it)")
        parser.add_argument("--classes", type=int, help="classes of the generated set")
        parser.add_argument("--per-class", type=int, help="training images per class of the generated set")
        parser.add_argument("--jpeg-size", default=(500, 375), type=_width_height, help="generated image size WxH")
        parser.add_argument("--workers", type=lambda t: _parse_list(t, int), help="comma list of worker counts")
        parser.add_argument("--batch-size", type=int)
        parser.add_argument("--image-size", type=int)
        if name == "data":
            parser.add_argument("--batches", type=int, help="timed batches per measurement and round, at least")
            parser.add_argument("--min-time", type=float, default=0.0, help="seconds per measurement and round, "
                                "at least")
            parser.add_argument("--repeats", type=int, default=1, help="rounds; the settings take turns in every "
                                "round (median and range are reported)")
            parser.add_argument("--gpu-pipeline", default="auto", choices=("auto", "yes", "no"),
                                help="the trainer's GPU input pipeline too (auto: on a GPU; yes on the CPU runs "
                                "its CPU form)")
            parser.add_argument("--read-workers", type=int, help="workers reading file bytes for the GPU pipeline "
                                "(default: the largest --workers)")
        else:
            parser.add_argument("--arch")
            parser.add_argument("--precision", default=None, help="default: bf16 on a GPU, fp32 on the CPU")
            parser.add_argument("--channels-last", type=parse_bool, default=None)
            parser.add_argument("--compile", default=None, help="torch.compile mode (default: the profile's, as the "
                                "trainer: default on a GPU, none on the CPU)")
            parser.add_argument("--steps", type=int)
            parser.add_argument("--warmup", type=int)
            parser.add_argument("--no-reference", action="store_true", help="skip the synthetic-data comparison")
            parser.add_argument("--input-pipeline", type=_parse_list, help="comma list of cpu,gpu (default: the "
                                "profile's: gpu on a GPU, cpu on the CPU)")


def _ensure_data(args, d: dict) -> None:
    if real_data_set(args.data_dir) is not None:  # used as it is: its layout and a readable image checked (r43m, r43n)
        return
    make_fake_imagenet(args.data_dir, args.classes or d["classes"], args.per_class or d["per_class"], args.jpeg_size)


def run_data_command(args, device: torch.device, emit) -> None:
    """Run ``data`` or ``e2e`` from parsed arguments, passing each record to ``emit``."""
    d = defaults(device)
    _ensure_data(args, d)
    gpu = device.type == "cuda"
    batch = args.batch_size or d["batch_size"]
    size = args.image_size or d["image_size"]
    if args.command == "data":
        from tutorial_lib.bench.timing import interleave_records

        batches, worker_list = args.batches or d["loader_batches"], args.workers or d["workers"]
        runs = {w: (lambda w=w: measure_loader(args.data_dir, w, batch, size, batches, min_time=args.min_time))
                for w in worker_list}
        if args.gpu_pipeline == "yes" or (args.gpu_pipeline == "auto" and gpu):
            read_workers = max(worker_list) if args.read_workers is None else args.read_workers
            runs["gpu"] = lambda: measure_gpu_pipeline(args.data_dir, batch, size, batches, device=device,
                                                       workers=read_workers, min_time=args.min_time)
        elif args.gpu_pipeline == "auto":
            runs["gpu"] = lambda: measure_gpu_pipeline(args.data_dir, batch, size, batches, device="cuda")
        for record in interleave_records(runs, args.repeats, keys=("images_per_sec", "mb_per_sec")).values():
            emit(record)
        return
    precision = args.precision or ("bf16" if gpu else "fp32")
    channels_last = gpu if args.channels_last is None else args.channels_last
    for pipeline in args.input_pipeline or [None]:
        for workers in args.workers or [max(d["workers"])]:
            emit(measure_e2e(args.data_dir, args.arch, precision, channels_last, batch, size, args.steps,
                             args.warmup, workers, args.compile, device, reference=not args.no_reference,
                             input_pipeline=pipeline))



def _emit(records: list[dict], args) -> None:
    if getattr(args, "label", None):
        records = [{**record, "label": args.label} for record in records]
    if args.out:
        append_records(args.out, records)
    for record in records:
        if not args.quiet:
            print(describe(record), flush=True)
        if not args.out:
            print(json.dumps(record, default=str), flush=True)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; exit statuses of :mod:`tutorial_lib.exits` (2 with one line on bad input)."""
    from tutorial_lib.bench.runs import RunSummaryError
    from tutorial_lib.data.layouts import PrepareError
    from tutorial_lib.data.staging import StagingError
    from tutorial_lib.engine.errors import ConfigError
    from tutorial_lib.engine.input.folders import DataError
    from tutorial_lib.exits import run_main

    return run_main(lambda: _main(argv), refused=(RunSummaryError, ConfigError, DataError, PrepareError,
                                                  StagingError))


def _main(argv: list[str] | None) -> int:
    from tutorial_lib.bench.arguments import check_arguments

    args = build_parser().parse_args(argv)
    check_arguments(args)  # before anything runs, is generated or written
    return run_command(args)


def run_command(args) -> int:
    """Run a parsed and checked subcommand; its exit status."""
    if args.command == "table":
        records = [r for f in args.files for r in read_records(f)]
        if not any(flat_rows(records, kind) for kind in TABLE_COLUMNS):  # r43q: blank lines and exit 0
            from tutorial_lib.engine.errors import ConfigError

            raise ConfigError(f"FILE: {', '.join(map(repr, args.files))[:300]} holds no benchmark record to "
                              "tabulate (JSON lines that `python -m tutorial_lib.bench ... --out` writes). Fix: pass "
                              "such a file; for a run's metrics.jsonl, `python -m tutorial_lib.bench runs RUN_DIR`.")
        text = markdown_tables(records)
        if args.out:
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(text)
        print(text)
        return 0
    if args.command == "runs":
        from tutorial_lib.bench.runs import RunSummaryError, compare_to, trainer_record

        records = [trainer_record(run, args.skip_steps) for run in args.run_dirs]
        if args.reference:
            try:
                reference = trainer_record(args.reference, args.skip_steps)
            except RunSummaryError as error:  # r43m: the line named the path, not the flag
                raise RunSummaryError(f"--reference: {error}") from None
            records = compare_to(records, reference)
        _emit(records, args)
        return 0
    if args.command == "prepare":
        from tutorial_lib.bench.prepare import measure_prepare

        _emit(measure_prepare(classes=args.classes, per_class=args.per_class, val_per_class=args.val_per_class), args)
        return 0
    if args.command == "extract":
        from tutorial_lib.bench.extract import measure_extract

        _emit(measure_extract(args.classes, args.per_class, args.val_per_class, args.rounds, args.jpeg_size,
                              work_dir=args.work_dir, cold_cache=args.cold_cache), args)
        return 0
    if args.command == "scale":
        from tutorial_lib.bench.scale import measure_scale

        _emit(measure_scale(args.files, args.work_dir, tuple(args.forms), tuple(args.steps), args.rounds,
                            args.cold_cache), args)
        return 0
    if args.command == "shards":
        from tutorial_lib.bench.shards import measure_shards

        measure_shards(tuple(args.sets), tuple(args.steps), args.rounds, args.work_dir, args.jpeg_images,
                       tuple(args.workers), emit=lambda record: _emit([record], args))
        return 0
    if args.command == "staging":
        from tutorial_lib.bench.staging import measure_staging

        data = prepare_fake_imagenet(args.data_dir, args.classes, args.per_class, device="cpu")
        _emit(measure_staging(data, args.stage_to, args.repeats), args)
        return 0
    if args.command == "scan":
        from tutorial_lib.bench.scan import make_tree, measure_scan

        tree = make_tree(args.tree, args.classes, args.train_per_class, args.val_per_class)
        _emit(measure_scan(tree, args.ranks, repeats=args.repeats), args)
        return 0
    if args.command == "allreduce":
        record = measure_allreduce(args.sizes, args.iters, args.warmup, args.dtype, args.device, args.repeats,
                                   args.min_time, tuple(args.algorithm), args.links, args.ddp_steps,
                                   args.phases)
        if record is not None:
            _emit([record], args)
        return 0
    if args.command == "loader":
        from tutorial_lib.bench.loader import compare_decoders, compare_recipes

        prepare_fake_imagenet(args.data_dir, args.classes, args.per_class)  # a real data set is used as it is
        if args.decode_images:
            _emit([compare_decoders(args.data_dir, args.decode_images)], args)
        _emit(compare_recipes(args.data_dir, args.workers, args.batch_size, args.image_size, args.min_time,
                              args.repeats), args)
        return 0
    device = resolve_device(args.device)
    if args.command == "matmul":
        torch.backends.cuda.matmul.allow_tf32 = False
        for dtype in args.dtype or [None]:
            _emit([{"kind": "matmul", "status": "ok", **matmul_peak(device, dtype), "device": device.type,
                    "env": environment_facts(device), "timestamp": time.time()}], args)
        return 0
    if args.command == "train":
        several = len(args.arch or [1]) * len(args.precision or defaults(device)["precisions"]) * len(
            args.channels_last or [1]) * len(args.compile or [1]) * len(args.batch_size or [1]) > 1
        isolate = {"yes": True, "no": False}.get(args.isolate, device.type == "cpu" and several)
        if args.matmul_tflops is not None:  # a child of an isolated sweep: one configuration
            record = measure_training(args.arch[0], args.precision[0], args.channels_last[0], args.batch_size[0],
                                      args.image_size, args.steps, args.warmup, args.compile[0], device, args.windows,
                                      args.num_classes, isolate=False, matmul_tflops=args.matmul_tflops)
            _emit([record], args)
            return 0
        sweep_training(args.arch, args.precision, args.channels_last, args.compile, args.batch_size, args.image_size,
                       args.steps, args.warmup, args.windows, device, isolate, args.num_classes,
                       on_record=lambda record: _emit([record], args))
        return 0
    run_data_command(args, device, emit=lambda record: _emit([record], args))
    return 0
