"""The benchmarks' arguments, checked before anything runs, is generated or is written.

argparse checks the form of each flag (an int, a float); this module checks what argparse cannot: counts at or
above their minimum, finite times, names out of closed sets (devices, models, precisions, forms, steps, dtypes),
a node-local folder outside the data, and the memory a size asks for (:mod:`tutorial_lib.engine.memory`: an image
size, batch or JPEG size whose tensors cannot fit is refused with the estimate and the memory there is). Every
refusal is a :class:`ConfigError` of one line that names the flag and the fix (exit status 2).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import torch

from tutorial_lib.bench.durations import E2E_MAX_SECONDS, duration_problem, rounds_duration_problem
from tutorial_lib.bench.fake_imagenet import check_image_fits
from tutorial_lib.bench.set_flags import MAX_FILES, check_set_size, check_source_fits
from tutorial_lib.bench.set_flags import refuse as _refuse
from tutorial_lib.data.staging import climbs_out
from tutorial_lib.engine.config import COMPILE_MODES, PRECISIONS, ConfigError, shorten
from tutorial_lib.engine.device import MIN_LOCAL_RANKS, most_local_ranks
from tutorial_lib.engine.memory import AMP_BYTES, available_bytes, check_fits, check_step_fits, human_bytes
from tutorial_lib.engine.validate import check_not_system_folder, check_path_text
from tutorial_lib.exits import check_path_arguments
from tutorial_lib.paths import STAGING_RAM_DISK, not_a_file, system_folder, user_path

DEVICES = ("auto", "cpu", "cuda")
COUNT_LIMIT = 2**31 - 1  # the trainer's largest count (engine/validate.py), images per epoch included
MAX_REPEATS = 1000  # rounds of one measurement: a median of more says nothing new, and 10**10 never ends
MAX_STEPS = 1_000_000  # batches, steps or all-reduces of one measurement: a benchmark, not a training run
# the largest value of every count flag a benchmark loops over (r43s, r43t: 10**10 of any of them ran on, silent)
COUNT_MOST = {"repeats": MAX_REPEATS, "rounds": MAX_REPEATS, "windows": MAX_REPEATS, "batches": MAX_STEPS,
              "iters": MAX_STEPS, "steps": MAX_STEPS, "warmup": MAX_STEPS, "ddp_steps": MAX_STEPS,
              "decode_images": MAX_FILES,
              # sizes the memory estimate multiplies: the trainer's largest (r43v: 10**300 px overflowed a float)
              "image_size": COUNT_LIMIT, "num_classes": COUNT_LIMIT, "batch_size": COUNT_LIMIT}
MAX_WORKERS = 1024  # loader processes or threads: the trainer's own limit (engine/validate.py INT_LIMITS)
# the minimum of each count flag: (flag, minimum); a flag left at None (its device default) is not checked
_COUNTS = {"rounds": 1, "classes": 1, "per_class": 1, "val_per_class": 1, "repeats": 1, "ranks": 1,
           "train_per_class": 1, "steps": 1, "warmup": 0, "windows": 1, "num_classes": 1, "batches": 1,
           "read_workers": 0, "iters": 1, "ddp_steps": 0, "decode_images": 0, "skip_steps": 0, "batch_size": 1,
           "image_size": 1, "jpeg_images": 40}  # shards' jpeg set: 40 JPEGs at least
_SECONDS = ("min_time", "matmul_tflops")


def check_arguments(args) -> None:
    """Check the parsed arguments of any ``python -m tutorial_lib.bench`` subcommand (ConfigError, one line)."""
    values = vars(args)
    if "device" in values and values["device"] not in DEVICES:
        _refuse("device", values["device"], f"pass one of {', '.join(DEVICES)}")
    if values.get("device") == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device: cuda was asked for but no CUDA GPU is visible. Fix: run on a GPU node, or use "
                          "--device cpu.")
    named = _command_choices(values.get("command"))  # checked against their names below (scale's --steps)
    for name, low in _COUNTS.items():
        value = values.get(name)
        if name in named:
            continue
        if isinstance(value, list):  # train's --batch-size is a comma list (scale's --steps are names)
            if not value or (all(isinstance(v, int) for v in value) and min(value) < low):
                _refuse(name, ",".join(map(str, value)), f"a comma list of whole numbers of at least {low}")
        elif isinstance(value, int) and not isinstance(value, bool) and value < low:
            _refuse(name, value, f"a whole number of at least {low}")
    for name in _SECONDS:
        value = values.get(name)
        if value is not None and not (math.isfinite(value) and value >= 0):
            _refuse(name, value, "a finite number of seconds (or TFLOP/s) of at least 0")
    if (values.get("min_time") or 0) > E2E_MAX_SECONDS:  # r43t: 1e9 s measured on, printing nothing
        _refuse("min_time", values["min_time"], f"at most {E2E_MAX_SECONDS:,} seconds (a benchmark, not a run)")
    if values.get("command") == "loader" and values.get("min_time") == 0:  # its rate is images over that time
        _refuse("min_time", 0, "a number of seconds above 0, e.g. 3")
    workers = values.get("workers")
    if workers is not None and (not workers or min(workers) < 0 or max(workers) > MAX_WORKERS):
        _refuse("workers", ",".join(map(str, workers)), f"a comma list of worker counts from 0 to {MAX_WORKERS}, "
                "e.g. 0,1,2")
    if (values.get("read_workers") or 0) > MAX_WORKERS:
        _refuse("read_workers", values["read_workers"], f"a whole number from 0 to {MAX_WORKERS}")
    _check_names(values)
    check_set_size(values)
    _check_path_flags(values)  # the paths' text first: a name too long is named before any file is looked at
    _check_places(values)
    _check_files(values)
    _check_launch(values)
    for problem in (duration_problem(values), rounds_duration_problem(values)):
        if problem:
            _refuse(*problem)
    _check_memory(args, values)
    check_source_fits(values)  # last: its disk is --work-dir's, checked above


def _check_names(values: dict) -> None:
    from tutorial_lib.engine.models import available_archs

    closed = {"precision": PRECISIONS, "compile": COMPILE_MODES}
    for name, allowed in closed.items():
        given = values.get(name)
        for value in ([given] if isinstance(given, str) else given or []):
            if value not in allowed:
                _refuse(name, value, f"pass {'a comma list of ' if isinstance(given, list) else ''}"
                                     f"{', '.join(allowed)}")
    archs = values.get("arch")
    for arch in ([archs] if isinstance(archs, str) else archs or []):
        if arch not in available_archs():
            _refuse("arch", arch, "a torchvision classification model name, e.g. resnet18 or resnet50")
    for dtype in ([values["dtype"]] if isinstance(values.get("dtype"), str) else values.get("dtype") or []):
        kind = getattr(torch, str(dtype), None)
        if not isinstance(kind, torch.dtype) or not (kind.is_floating_point or kind in (torch.int32, torch.int64)):
            _refuse("dtype", dtype, "a torch number type such as float32, bfloat16 or float16")
    for name, allowed in _command_choices(values.get("command")).items():
        given = values.get(name)
        if isinstance(given, str) and given not in allowed:
            _refuse(name, given, f"pass one of {', '.join(allowed)}")
        if isinstance(given, list) and (not given or any(v not in allowed for v in given)):
            _refuse(name, ",".join([v for v in given if v not in allowed] or given),
                    f"a comma list of {', '.join(allowed)}")
    for name, value in values.items():  # one rule for every comma list (r43n: `--dtype ,` measured the default)
        if isinstance(value, list) and not value:
            _refuse(name, "", _LIST_FIXES.get(name, "a comma list of at least one item"))
    most = {**COUNT_MOST, **_command_limits(values.get("command"))}
    if values.get("command") == "e2e":  # its steps and warm-up get the time estimate instead (_check_duration)
        most = {name: limit for name, limit in most.items() if name not in ("steps", "warmup")}
    for name, limit in most.items():
        if isinstance(values.get(name), int) and values[name] > limit:
            _refuse(name, values[name], f"a whole number of at most {limit}")


# the fix for an empty comma list (``--dtype ,``, ``--dtype ''``) of the flags whose values no closed set above names
_LIST_FIXES = {"arch": "a comma list of torchvision model names, e.g. resnet18,resnet50",
               "dtype": "a comma list of torch number types, e.g. bfloat16,float32",
               "precision": f"a comma list of {', '.join(PRECISIONS)}",
               "compile": f"a comma list of {', '.join(COMPILE_MODES)}",
               "channels_last": "a comma list of on,off", "sizes": "a comma list of message sizes, e.g. 4K,1M,256M"}


def _command_choices(command: str | None) -> dict[str, tuple[str, ...]]:
    """The closed sets of one subcommand's flags (each module's own list of what it runs)."""
    if command == "scale":
        from tutorial_lib.bench.fake_forms import FORMS
        from tutorial_lib.bench.scale import SIZES, STEPS

        return {"files": tuple(SIZES), "forms": FORMS, "steps": STEPS}
    if command == "shards":
        from tutorial_lib.bench.shards import SETS, STEPS

        return {"sets": SETS, "steps": STEPS}
    if command == "e2e":
        from tutorial_lib.engine.config import INPUT_PIPELINES

        return {"input_pipeline": INPUT_PIPELINES}
    return {}


def _command_limits(command: str | None) -> dict[str, int]:
    """The largest value of one subcommand's own counts (the generated ImageNet has the classes of REAL_CLASSES);
    every subcommand's loop counts have theirs in :data:`COUNT_MOST`."""
    if command == "runs":  # a step number: the trainer's largest count
        return {"skip_steps": COUNT_LIMIT}
    if command in ("prepare", "extract"):
        from tutorial_lib.bench.fake_forms import IMAGE_NUMBERS, REAL_CLASSES

        return {"classes": len(REAL_CLASSES), "per_class": IMAGE_NUMBERS - 1, "val_per_class": IMAGE_NUMBERS - 1}
    return {}


_WORK_FOLDERS = {"staging": "stage_to", "extract": "work_dir"}  # an existing folder that the command writes in
_PATH_FLAGS = ("out", "work_dir", "stage_to", "data_dir", "tree")  # the folders and files a command writes


def _check_path_flags(values: dict) -> None:
    """Each path flag a command writes to: checked as the trainer checks its paths (no control character, no
    longer than a path can be: :func:`check_path_text`), ``~`` expanded in place (a shell leaves ``'~'`` quoted),
    and never the file system's root or under /proc, /sys or /dev (``--work-dir /dev`` filled RAM, ``/sys`` said
    "Operation not permitted. Fix: chmod"). A --work-dir that is made must have a writable folder above it."""
    for name in _PATH_FLAGS:
        given = values.get(name)
        if not isinstance(given, str):
            continue
        check_path_text(f"--{name.replace('_', '-')}", given)
        values[name] = user_path(given)  # the parsed arguments themselves (values is vars(args))
        check_not_system_folder(f"--{name.replace('_', '-')}", values[name], "pass a folder (or file) of your own, "
                                "e.g. under /tmp or your home", allowed=(STAGING_RAM_DISK,) if name == "stage_to"
                                else ())
    for metavar, name in (("RUN_DIR", "run_dirs"), ("FILE", "files")):  # the files `runs` and `table` read
        for given in values.get(name) or ():
            check_path_arguments({metavar: given})
    check_path_arguments({"--reference": values.get("reference")})  # runs' reference run (r43s: 5,000 characters)
    if values.get("command") == "runs":
        _check_run_dirs(values)
        _check_out_outside_runs(values)  # (a job's own bench records go to its run directory: 07's all-reduce job)
    work = values.get("work_dir")
    if values.get("command") in ("scale", "shards") and isinstance(work, str) and work:
        path = Path(work).absolute()
        there = next((place for place in (path, *path.parents) if place.exists()), Path("/"))
        if not there.is_dir() or not os.access(there, os.W_OK | os.X_OK):
            _refuse("work_dir", work, f"a folder you can write, or one that can be made there ({shorten(str(there))} "
                    "is not a folder you can write)")


def _check_run_dirs(values: dict) -> None:
    """``runs``: each RUN_DIR once (r43aa: the same run twice, or through a link, gave two records)."""
    real = [os.path.realpath(run) for run in values["run_dirs"]]
    for index, place in enumerate(real):
        if place in real[:index]:
            raise ConfigError(f"RUN_DIR: {shorten(values['run_dirs'][index])} is {shorten(place)} again, and each run "
                              "gives one record. Fix: give each run directory once.")


def _check_out_outside_runs(values: dict) -> None:
    """``runs``: an --out outside every run directory, by path, link or hard link (r43aa: ``bench runs R --out
    R/metrics.jsonl`` appended a record to the run's own log; r43ab: the --reference run's, or another run's)."""
    from tutorial_lib.rundir.owned import is_run_dir

    out = values.get("out")
    if isinstance(out, str) and out:
        read = [*(values.get("run_dirs") or []), *([values["reference"]] if values.get("reference") else [])]
        target = Path(os.path.realpath(out))
        inside = next((run for run in read if target == Path(os.path.realpath(run))
                       or Path(os.path.realpath(run)) in target.parents or _same_file_in(out, run)), None)
        inside = inside or next((str(p) for p in target.parents if is_run_dir(p)), None)  # r43ab: another run's
        if inside is None and os.path.isfile(out) and os.stat(out).st_nlink > 1:  # r43ac: another run's, hard-linked
            _refuse("out", out, f"a file of one name (this one has {os.stat(out).st_nlink} hard links, and a record "
                    "appended to it changes each; e.g. --out results/runs.jsonl)")
        if inside is not None:
            _refuse("out", out, f"a file outside every run directory ({shorten(inside)} is the trainer's; "
                    "e.g. --out results/runs.jsonl)")


def _same_file_in(path: str, folder: str) -> bool:
    """Whether ``path`` is, by a hard link, one of the files directly in ``folder`` (r43ab: realpath does not see
    hard links; ``--out`` hard-linked to a run's metrics.jsonl appended to it)."""
    try:
        seen = os.stat(path)
        return any(os.path.samestat(seen, entry.stat()) for entry in os.scandir(folder) if entry.is_file())
    except OSError:
        return False


def _check_places(values: dict) -> None:
    """Folders that the command writes: an existing, writable one where it makes its temporary folder in it;
    never the data's own folder (staging copies the data out of it)."""
    name = _WORK_FOLDERS.get(values.get("command"))
    given = values.get(name) if name else None
    if given is not None:
        folder = Path(given).expanduser()
        if (not given or not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK)
                or system_folder(folder) is not None):  # root may "write" /proc, but nothing can be made there
            _refuse(name, given, "an existing folder you can write (its temporary folder is made in it), e.g. /tmp")
    if values.get("command") == "scan":
        tree = Path(values["tree"])
        if tree.exists() and not tree.is_dir():
            _refuse("tree", values["tree"], "a folder (the tree of empty files is made in it, or reused), not a file")
        most = most_local_ranks()
        if values["ranks"] > most:
            _refuse("ranks", values["ranks"], f"a whole number from 1 to {most}: each rank is a process started on "
                    f"this machine (at most 2 per CPU, or {MIN_LOCAL_RANKS})")
    if values.get("command") == "staging" and values.get("stage_to"):
        left = climbs_out(values["stage_to"])
        if left is not None:  # the stage itself refuses it, but only after the data set is generated
            _refuse("stage_to", values["stage_to"], f"a folder inside {shorten(left)}, without '..' (e.g. "
                    f"{shorten(left.rstrip('/') + '/stage')})")
        target, data = Path(values["stage_to"]).absolute().resolve(), Path(values["data_dir"]).absolute().resolve()
        if target == data or data in target.parents or target in data.parents:
            _refuse("stage_to", values["stage_to"], f"a folder outside --data-dir {shorten(values['data_dir'])} and "
                    "not holding it (the node's local disk, e.g. /tmp)")


def _check_memory(args, values: dict) -> None:
    """The sizes the command asks for, against the memory there is (lower bounds, :mod:`tutorial_lib.engine.memory`)."""
    size = values.get("jpeg_size")
    if size is not None and values.get("command") in ("extract", "data", "e2e"):
        check_image_fits(size, ("--jpeg-size", "--jpeg-size"), "--jpeg-size 500x375")
    command = values.get("command")
    if command == "allreduce" and values.get("sizes"):
        _check_allreduce_memory(values["sizes"], values.get("device") or "auto")
    if command not in ("train", "e2e", "data", "loader"):
        return
    from tutorial_lib.bench.compute import defaults, resolve_device

    d = defaults(values.get("device") or "auto")  # the sizes in effect where a flag is left out
    image_size = values.get("image_size") or d["image_size"]
    batches = values.get("batch_size") or d["batch_size"]
    for batch in batches if isinstance(batches, list) else [batches]:
        if batch > COUNT_LIMIT:  # named itself, not as "--steps: 1 is refused. Fix: at most 0 steps"
            _refuse("batch_size", batch, f"a whole number of at most {COUNT_LIMIT:,} (the trainer's largest count), "
                    "e.g. 32")
        steps = (values.get("steps") or 0) + (values.get("warmup") or 0)
        if command in ("train", "e2e") and steps * batch > COUNT_LIMIT:  # the trainer's images per epoch
            _refuse("steps", values["steps"], f"at most {COUNT_LIMIT // batch - (values.get('warmup') or 0):,} "
                    f"steps with --warmup included (at batch {batch}, {COUNT_LIMIT:,} images, the trainer's "
                    "largest epoch), e.g. 50")
        if command in ("train", "e2e"):
            archs = values.get("arch") or d["arch"]
            precisions = values.get("precision") or d["precisions"]
            cheapest = min([precisions] if isinstance(precisions, str) else precisions,
                           key=lambda p: AMP_BYTES.get(p, 4))  # a lower bound over the precisions asked for
            for arch in [archs] if isinstance(archs, str) else archs:
                check_step_fits(arch, values.get("num_classes") or 1000, image_size, batch,
                                resolve_device(values.get("device") or "auto"), cheapest, flags=True)
        else:  # a loader: the batch as float32, made by the workers and the training process
            check_fits(batch * 3 * image_size * image_size * 4, available_bytes("cpu"),
                       f"--image-size/--batch-size: a batch of {batch} images of {image_size}x{image_size} px",
                       "pass a smaller --image-size (ImageNet: 224) or --batch-size", None)


def _first_line(path: Path) -> bytes:
    """The first non-blank line of a regular file (at most 1 MiB of it)."""
    with path.open("rb") as handle:
        for line in iter(lambda: handle.readline(1 << 20), b""):
            if line.strip():
                return line.strip()
    return b""


def _records_problem(path: Path) -> str | None:
    """Why ``path`` is no JSON-lines file of records (None: it is one, or it is empty)."""
    if not_a_file(path) is not None:
        return f"is not a regular file ({not_a_file(path)})"
    try:
        first = json.loads(_first_line(path))
    except (UnicodeDecodeError, ValueError, RecursionError):
        first = None
    return None if isinstance(first, dict) or not _first_line(path) else "is not a JSON-lines file of records"


def _table_problem(path: Path) -> str | None:
    """Why ``path`` is no markdown table that ``bench table`` wrote (None: it is one, or it is empty)."""
    if not_a_file(path) is not None:
        return f"is not a regular file ({not_a_file(path)})"
    first = _first_line(path)
    return None if not first or first.startswith((b"- ", b"### ")) else "is not a table this command wrote"


def _check_files(values: dict) -> None:
    """The files a command reads or writes: an existing --out is appended to only where it holds records (and
    overwritten by ``table`` only where it holds a table it wrote): a user's own file is never changed."""
    command, out = values.get("command"), values.get("out")
    if command == "table":
        for name in values.get("files") or []:
            path = Path(name).expanduser()
            problem = "does not exist" if not path.exists() else _records_problem(path)
            if problem:
                raise ConfigError(f"files: {shorten(name)} {problem}. Fix: pass JSON-lines files the benchmarks "
                                  "wrote, e.g. results/gpu_train.jsonl.")
    if out:
        path = Path(out).expanduser()
        if system_folder(path) is not None:
            _refuse("out", out, "a file of your own for the records, e.g. results/bench.jsonl (not the kernel's)")
        if path.exists() or path.is_symlink():
            if not path.exists():
                problem = "is a broken link"
            else:
                problem = _table_problem(path) if command == "table" else _records_problem(path)
            if problem:
                _refuse("out", out, f"{shorten(out)} {problem} and is left as it is: give a new file, e.g. "
                                    f"results/bench.{'md' if command == 'table' else 'jsonl'}")
        elif any(parent.exists() and not parent.is_dir() for parent in path.parents):
            _refuse("out", out, "a file name whose folders are folders, not files")
    data_dir = values.get("data_dir")
    if data_dir and os.path.lexists(Path(data_dir).expanduser()) and not Path(data_dir).expanduser().is_dir():
        _refuse("data_dir", data_dir, "a folder: an ImageNet-layout one (train/<class>/, val/<class>/), or a new "
                                      "or empty one for the generated set")


def _check_launch(values: dict) -> None:
    """What a command needs from how it was started: several ranks for ``allreduce``; one setting each for
    ``train``'s hidden --matmul-tflops (the flag an isolated sweep passes its children)."""
    world = os.environ.get("WORLD_SIZE", "1").strip()
    if values.get("command") == "allreduce" and not (world.isascii() and world.isdigit() and int(world) >= 2):
        raise ConfigError("allreduce: needs several ranks, and this process runs alone. Fix: run it under torchrun, "
                          "e.g. torchrun --nproc-per-node 2 -m tutorial_lib.bench allreduce")
    if values.get("command") == "train" and values.get("matmul_tflops") is not None:
        lists = ("arch", "precision", "channels_last", "compile", "batch_size")
        if any(not isinstance(values.get(name), list) or len(values[name]) != 1 for name in lists):
            _refuse("matmul_tflops", values["matmul_tflops"], "leave it out (an isolated sweep passes it to a child "
                    "measuring one setting); or give one each of --arch, --precision, --channels-last, --compile and "
                    "--batch-size")


def _check_allreduce_memory(sizes: list[int], device: str) -> None:
    """The all-reduce's tensors (one per size, all made before the rounds) against the memory of this rank's
    device, shared on a host's CPU by torchrun's local ranks (r43m: ``--sizes 100G`` failed in each rank's
    allocator with a traceback)."""
    from tutorial_lib.bench.compute import resolve_device

    resolved = resolve_device(device)
    share = max(1, int(os.environ.get("LOCAL_WORLD_SIZE") or 1)) if resolved.type == "cpu" else 1
    check_fits(sum(sizes) * share, available_bytes(resolved),
               f"--sizes: the all-reduce's tensors ({human_bytes(sum(sizes))} on each of {share} rank(s) of this "
               f"{resolved.type})", "pass smaller --sizes, e.g. 4K,1M,64M")

