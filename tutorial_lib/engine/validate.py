"""The settings' ranges: every float checked for finiteness and its range, every count for its sign, the
node-local and index folders checked for form and place, a pack of shards checked before training.

The model and the training data are checked against the config here too (:func:`check_model`,
:func:`check_data`). Called by :func:`tutorial_lib.engine.config.validate`. ``nan`` passes every ``<``/``>``
comparison as False, so each float is first checked with :func:`math.isfinite`: ``--base-lr nan``, ``inf`` and
``--momentum nan`` are refused here instead of reaching the optimiser.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

from tutorial_lib.engine.errors import ConfigError, fail, shorten
from tutorial_lib.numbers import finite, magnitude
from tutorial_lib.paths import LOOP_FIX, LOOP_REASON, STAGING_RAM_DISK, in_system_folder, path_problem

MAX_BASE_LR = 1e6
# float fields: (low, low included, high, high included, an example for the fix). None: no bound.
FLOAT_RANGES = {
    # base_lr: at most 1e6 (a run that diverges, as the divergence tests need); far above, torch's float32
    # learning rate overflows ("value cannot be converted to type float without overflow")
    "base_lr": (0.0, False, MAX_BASE_LR, True, "--base-lr 0.1 (per lr_reference_batch images)"),
    "min_crop_scale": (0.0, False, 1.0, True, "--min-crop-scale 0.08"),
    "warmup_epochs": (0.0, True, None, False, "--warmup-epochs 5 (Goyal et al.) or 0 to turn warmup off"),
    "warmup_start_factor": (0.0, False, 1.0, True, "--warmup-start-factor 0.1"),
    "lr_decay": (0.0, False, 1.0, True, "--lr-decay 0.1"),
    "momentum": (0.0, True, 1.0, False, "--momentum 0.9"),
    "weight_decay": (0.0, True, 1.0, False, "--weight-decay 1e-4"),
    "lars_trust_coefficient": (0.0, False, 1.0, True, "--lars-trust-coefficient 0.001"),
    "label_smoothing": (0.0, True, 1.0, False, "--label-smoothing 0.1"),
}
POSITIVE_INTS = ("epochs", "batch_size", "image_size", "lr_reference_batch", "log_every", "bucket_cap_mb",
                 "synthetic_images", "prefetch")
NON_NEGATIVE_INTS = ("workers", "max_steps_per_epoch", "stop_after_epochs", "num_classes", "seed")


def _interval(low, low_in, high, high_in) -> str:
    left = "[" if low_in else "("
    right = "]" if high_in else ")"
    return f"{left}{low:g}, {'inf' if high is None else f'{high:g}'}{right}"


def check_float(name: str, value: float, low, low_in: bool, high, high_in: bool, example: str) -> None:
    """Raise ConfigError unless ``value`` is a finite number in the interval ``low..high``."""
    interval = _interval(low, low_in, high, high_in)
    if not finite(value):
        fail(name, f"must be a finite number in {interval}, got {value}", f"pass e.g. {example}")
    too_low = low is not None and (value < low or (value == low and not low_in))
    too_high = high is not None and (value > high or (value == high and not high_in))
    if too_low or too_high:  # an int past float's range has no :g form (r43v)
        shown = f"{value:g}" if abs(value) < 1e300 else magnitude(int(value))
        fail(name, f"must be in {interval}, got {shown}", f"pass e.g. {example}")


INT_LIMITS = {"workers": 1024, "prefetch": 1024, "seed": 2**63 - 1}  # per rank; every other count: 2**31 - 1


def check_numbers(cfg) -> None:
    """Check every numeric field of ``cfg`` (a TrainConfig whose types are already checked)."""
    for name, (low, low_in, high, high_in, example) in FLOAT_RANGES.items():
        check_float(name, getattr(cfg, name), low, low_in, high, high_in, example)
    for name in POSITIVE_INTS + NON_NEGATIVE_INTS:
        value, most = getattr(cfg, name), INT_LIMITS.get(name, 2**31 - 1)
        if not isinstance(value, str) and value > most:  # beyond what any run can use (or an estimate can hold)
            fail(name, f"must be at most {most:,}, got {shorten(value)}",
                 f"pass --{name.replace('_', '-')} with a smaller value")
    for name in POSITIVE_INTS:
        if getattr(cfg, name) <= 0:
            fail(name, f"must be a positive integer, got {getattr(cfg, name)}",
                 f"pass --{name.replace('_', '-')} with a value > 0")
    for name in NON_NEGATIVE_INTS:
        value = getattr(cfg, name)
        if not isinstance(value, str) and value < 0:  # the one str a checked int field holds is "auto"
            fail(name, f"must be >= 0, got {value}",
                 "pass 0, a positive integer or auto" if name == "workers" else "pass 0 or a positive integer")
    if cfg.warmup_epochs > cfg.epochs:
        fail("warmup_epochs", f"must be between 0 and epochs ({cfg.epochs}), got {cfg.warmup_epochs:g}",
             "pass e.g. --warmup-epochs 5 (Goyal et al.) or 0 to turn warmup off")
    milestones = cfg.lr_milestones  # strictly increasing: a repeated epoch would decay twice there
    if any(b <= a for a, b in zip(milestones, milestones[1:], strict=False)) or min(milestones, default=1) <= 0:
        fail("lr_milestones", f"must be increasing positive epochs, got {shorten(cfg.lr_milestones)}",
             "pass e.g. --lr-milestones 30,60,80")
    if max(milestones, default=0) > 2**31 - 1:  # an epoch no run reaches; past 4,300 digits str() raises (r43z)
        fail("lr_milestones", f"must be epochs of at most {2**31 - 1:,}, got {shorten(cfg.lr_milestones)}",
             "pass e.g. --lr-milestones 30,60,80")


_STAGE_VARIABLE = re.compile(r"\$(\w+|\{\w+\})(/.*)?")


def check_stage_to(cfg) -> None:
    """stage_to: an absolute path or ``$VARIABLE[/more]``, outside data_dir, for a dataset read from files."""
    if cfg.dataset == "synthetic":
        fail("stage_to", "the synthetic dataset reads no files, so there is nothing to stage",
              "leave stage_to empty, or use --dataset imagefolder")
    if "\n" in cfg.stage_to or not (os.path.isabs(cfg.stage_to) or _STAGE_VARIABLE.fullmatch(cfg.stage_to)):
        fail("stage_to", f"{shorten(cfg.stage_to)} is neither an absolute path nor a variable such as $TMPDIR",
              "give the node-local folder as an absolute path (/local/scratch) or as $TMPDIR")
    from tutorial_lib.data.staging import climbs_out

    left = climbs_out(cfg.stage_to)
    if left is not None:
        fail("stage_to", f"{shorten(cfg.stage_to)} leaves {left[:60]}, the node-local folder it names ('..' "
             "climbs out of it)", f"name a folder inside it, without '..' (e.g. {left[:60]}/stage), or $TMPDIR")
    if os.path.isabs(cfg.stage_to):
        check_not_system_folder("stage_to", cfg.stage_to, "name a folder on the node's local disk, e.g. "
                                "/local/scratch/stage, or $TMPDIR", allowed=(STAGING_RAM_DISK,))
        target, data = Path(cfg.stage_to).resolve(), Path(cfg.data_dir).resolve()
        if target == data or data in target.parents:
            fail("stage_to", f"{cfg.stage_to} is inside data_dir {cfg.data_dir}",
                  "stage to a folder outside the data, on the node's local disk ($TMPDIR)")


def check_not_system_folder(name: str, path, fix: str, allowed: tuple[str, ...] = (),
                            where: str = "where the project writes nothing") -> None:
    """Refuse (ConfigError naming ``name``, the setting or flag) a ``path`` that is the file system's root or lies
    under /proc, /sys or /dev (:func:`system_folder`): one check for every folder the project writes into."""
    system = in_system_folder(path, allowed)
    if system is not None:
        fail(name, f"{shorten(os.fspath(path))} {system}, {where}", fix)


def check_index_dir(cfg) -> None:
    """index_dir: an absolute folder outside data_dir (nothing is ever written into the data folders)."""
    if "\n" in cfg.index_dir or not os.path.isabs(cfg.index_dir):
        fail("index_dir", f"{shorten(cfg.index_dir)} is not an absolute path",
              "give a cache folder that every node of the job sees as an absolute path, or leave it empty")
    target, data = Path(cfg.index_dir).resolve(), Path(cfg.data_dir).resolve()
    there = next(place for place in (target, *target.parents) if place.exists())  # '/' always exists
    if not there.is_dir():  # /dev/null, a file: the index's folder could never be made ("File exists")
        fail("index_dir", f"{shorten(cfg.index_dir)} cannot be a folder: {shorten(str(there))} exists and is not one",
             "give a folder (or a path where one can be made), or leave index_dir empty")
    check_not_system_folder("index_dir", target, "give a cache folder of your own, e.g. ~/.cache/tutorial, or "
                            "leave it empty", where="where no cache belongs")
    if target == data or data in target.parents:
        fail("index_dir", f"{cfg.index_dir} is inside data_dir {cfg.data_dir}",
              "choose a folder outside the data (the index never goes into the data folders)")


def check_shards(cfg, check_paths: bool = True) -> int | None:
    """data_format shards: read for ``--dataset imagefolder``; with ``check_paths``, the pack in data_dir checked
    before training (:func:`tutorial_lib.data.shard_index.check`: its index, every shard there, whole and of this
    pack, both splits of one class list). Returns its class count (None: paths not checked)."""
    from tutorial_lib.data.shard_index import ShardError, check

    if cfg.dataset != "imagefolder":
        fail("data_format", f"shards are read for --dataset imagefolder, not {cfg.dataset}",
             "pass --dataset imagefolder with the packed folder as --data-dir, or --data-format files")
    if not check_paths:
        return None
    try:
        return len(check(cfg.data_dir)["splits"]["train"]["classes"])
    except ShardError as exc:
        raise ConfigError(str(exc)) from None


@contextlib.contextmanager
def path_setting(name: str):
    """An OSError of the file system while the path setting ``name`` is checked (a name too long, a loop of links,
    no permission) as the ConfigError that names the setting, the path and the fix."""
    try:
        yield
    except OSError as exc:
        from tutorial_lib.exits import describe_os_error

        raise ConfigError(f"{name}: {describe_os_error(exc)[1]}") from None
    except RuntimeError as exc:  # Path.resolve() on a loop of links (an OSError from Python 3.13 on)
        if "loop" not in str(exc).lower():
            raise
        raise ConfigError(f"{name}: {shorten(str(exc), 200)}: {LOOP_REASON}. Fix: {LOOP_FIX}.") from None


def check_path_text(name: str, value: str) -> None:
    """Refuse a path setting longer than any path can be, with a name over NAME_MAX bytes or a control character
    (:func:`tutorial_lib.paths.path_text_problem`), a symbolic link loop on the way, or an empty output_root (the run
    would land in the working directory), naming the setting."""
    problem = path_problem(value)
    if problem is not None:  # r43m: the file system's "File name too long" named the path, not the setting
        fail(name, f"{shorten(value)} {problem[0]}", problem[1])
    if name == "output_root" and not value.strip():
        fail(name, "is empty, which would put the run into the working directory", "pass e.g. --output-root runs")


def check_data(cfg, check_paths: bool = True) -> None:
    """The training data against the config: a pack of shards, or (``check_paths``) an ImageNet-layout folder
    whose train/ and val/ hold the same readable classes, or a digits export target that is only ever ours; and
    ``num_classes`` against the classes found."""
    if cfg.data_format == "shards":
        classes = check_shards(cfg, check_paths)
        if classes is not None:
            check_class_count(cfg, classes, f"the shards of {cfg.data_dir}")
    elif check_paths and cfg.dataset == "imagefolder":
        from tutorial_lib.data.file_index import class_folders
        from tutorial_lib.engine.input.files import check_readable
        from tutorial_lib.engine.input.folders import DataError, check_imagefolder, check_same_classes

        with path_setting("data_dir"):
            try:
                root = check_imagefolder(cfg.data_dir)
                classes = class_folders(root / "train", warn=False)[0]
                # r43p: both were refused only once the run directory was written (file_index.json; epoch 1)
                check_same_classes(root, classes, class_folders(root / "val", warn=False)[0])
                for split in ("train", "val"):
                    check_readable(root, split)
            except DataError as exc:
                raise ConfigError(str(exc)) from None
        check_class_count(cfg, len(classes), f"{root}/train")
    if check_paths and cfg.dataset == "digits":  # the export replaces data_dir: only ever a folder of ours
        from tutorial_lib.engine.input.folders import DataError, check_digits_target

        check_not_system_folder("data_dir", cfg.data_dir, "pass a folder of your own for the digits export, e.g. "
                                "--data-dir data/digits")  # r43s: /proc/x failed inside the export
        with path_setting("data_dir"):
            try:
                check_digits_target(cfg.data_dir)
            except DataError as exc:
                raise ConfigError(str(exc)) from None
    if cfg.dataset == "digits":
        check_class_count(cfg, DIGITS_CLASSES, "the digits data set")


DIGITS_CLASSES = 10


def check_class_count(cfg, found: int, where: str) -> None:
    """Refuse a ``num_classes`` other than the data's class count (0 takes it from the data): more outputs
    than classes leave model.pt unloadable with its class names, fewer end in an IndexError mid-training."""
    if cfg.num_classes and cfg.num_classes != found:
        fail("num_classes", f"{cfg.num_classes} was given but {where} has {found} class folders",
             f"leave --num-classes 0 (taken from the data), or give {found}")


def check_model(cfg) -> None:
    """The model against the config: a torchvision model name, a norm it is wired for, an image size it takes
    and does not shrink below one pixel, and two images per rank where BatchNorm needs statistics."""
    from tutorial_lib.engine.models import available_archs  # local: torchvision import is slow

    if cfg.arch not in available_archs():
        close = [a for a in available_archs() if a.startswith(cfg.arch[:3])][:5]
        fail("arch", f"unknown torchvision model {shorten(cfg.arch)}",
             f"use a torchvision classification model name such as {', '.join(close or ['resnet50'])}")
    if cfg.norm == "group" and not cfg.arch.startswith(("resnet", "resnext", "wide_resnet")):
        fail("norm", "group norm is only wired for ResNet-family models", "use --norm batch")
    from tutorial_lib.engine.models import fixed_image_size, has_batch_norm, runs_at, smallest_image_size

    if fixed_image_size(cfg.arch) not in (None, cfg.image_size):  # an AssertionError at the first step otherwise
        fail("image_size", f"{cfg.image_size} px, and {cfg.arch} takes only {fixed_image_size(cfg.arch)} px images",
             f"pass --image-size {fixed_image_size(cfg.arch)}, or another --arch (e.g. resnet18)")
    # "Output size is too small" at the first step otherwise; a size above the usual ones that does not run on the
    # meta device overflows its shapes (r43m: 10^9 px was called too small) and gets the memory estimate below
    if cfg.image_size <= 299 and not runs_at(cfg.arch, cfg.image_size):
        fail("image_size", f"{cfg.image_size} px is too small for {cfg.arch}: its layers shrink it below one pixel",
             f"pass --image-size {smallest_image_size(cfg.arch)} or more, or another --arch (e.g. resnet18 takes "
             "16 px)")

    if cfg.batch_size == 1 and has_batch_norm(cfg.arch, cfg.norm):  # ValueError at the first step otherwise
        fail("batch_size", f"1 image per rank cannot train {cfg.arch}: BatchNorm's statistics need two",
             "pass --batch-size 2 or more, or --norm group (ResNets)")
