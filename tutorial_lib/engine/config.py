"""One validated training configuration: from profiles, YAML files and ``--key value`` flags.

Resolution order (later wins): dataclass defaults, the named ``profile``, a YAML file,
explicit overrides (keyword arguments or command-line flags). ``validate`` then checks
every field and raises :class:`ConfigError` naming the field and the fix.
"""

from __future__ import annotations

import dataclasses
import os
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path

from tutorial_lib.engine.errors import ConfigError, shorten
from tutorial_lib.engine.errors import fail as _fail
from tutorial_lib.engine.validate import (
    check_data,
    check_index_dir,
    check_model,
    check_not_system_folder,
    check_numbers,
    check_path_text,
    check_stage_to,
    path_setting,
)
from tutorial_lib.paths import user_path
from tutorial_lib.yamlfile import YamlFileError, read_yaml

PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
DATASETS = ("digits", "imagefolder", "synthetic")
OPTIMIZERS = ("sgd", "lars")
SCHEDULES = ("step", "cosine")
NORMS = ("batch", "group")
BAD_DATA_POLICIES = ("skip", "error")
DEVICES = ("auto", "cpu", "cuda")
INPUT_PIPELINES = ("cpu", "gpu")
DATA_FORMATS = ("files", "shards")
ALLREDUCE_MODES = ("flat", "hierarchical", "hybrid")  # engine.comm_hooks
COMPILE_MODES = ("none", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
PROFILE_NAMES = ("smoke", "gpu", "hal")  # the keys of PROFILES
# Config keys that were renamed: loading the old name is refused with a message naming the new one.
RENAMED_KEYS = {"no_bn_weight_decay": "no_weight_decay_1d"}
AUTO = "auto"
AUTO_INT_FIELDS = ("workers",)  # an int, or "auto": each rank resolves it at start (engine.device.loader_workers)
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")  # matched whole (re.fullmatch)


def _field(help: str, choices: tuple | None = None, **kwargs):
    """A dataclass field with its ``--help`` text and, for a closed set of values, the allowed ``choices``."""
    return field(metadata={"help": help, "choices": choices}, **kwargs)


@dataclass
class TrainConfig:
    """Everything one training run needs. Each field's ``help`` and ``choices`` are the ``--help`` text and
    what :func:`validate` accepts."""

    # --- run identity and outputs
    name: str = _field("run name: ASCII letters, digits, '.', '_', '-'; the run directory is output_root/name",
                       default="run")
    output_root: str = _field("folder that holds run directories", default="runs")
    profile: str = _field("named preset the other values start from", PROFILE_NAMES, default="smoke")
    # --- data
    dataset: str = _field("where images come from: the digits set, an ImageNet-layout folder, or random tensors",
                          DATASETS, default="digits")
    data_dir: str = _field("ImageFolder root with train/ and val/ (digits: exported here)", default="data/digits")
    data_format: str = _field("files: class folders data_dir/{train,val}/<class>/; shards: the tar shards "
                              "`python -m tutorial_lib.data pack` wrote to data_dir (a few hundred files, not one "
                              "per image)", DATA_FORMATS, default="files")
    stage_to: str = _field("node-local folder (absolute, or a variable such as $TMPDIR expanded on each node) that a "
                           "job copies data_dir to once per node before its ranks start, reads from, and removes "
                           "at the end; empty = read data_dir where it is", default="")
    index_dir: str = _field("absolute folder (shared by the job's nodes, outside data_dir) for the job's file list, "
                            "<name>.file_index.json; empty = file_index.json in the run directory", default="")
    image_size: int = _field("training crop size in pixels (validation: resize to size*256/224, center crop)",
                             default=32)
    train_augment: bool = _field("random resized crop (+ flip) on training images; false: resize only", default=True)
    min_crop_scale: float = _field("smallest crop area fraction of RandomResizedCrop (ImageNet: 0.08)", default=0.08)
    hflip: bool = _field("random horizontal flips (off for digits: a mirrored 3 is not a 3)", default=True)
    workers: int | str = _field("DataLoader worker processes per rank; auto: min(8, this rank's share of the CPUs "
                                "its node's ranks may use - 1), resolved in each rank at start and recorded in "
                                "config.json", default=0)
    prefetch: int = _field("batches made ahead: by each DataLoader worker (workers > 0), and decoded ahead on the "
                           "device by the GPU pipeline (CUDA)", default=2)
    input_pipeline: str = _field("cpu: workers decode and augment; gpu: workers read file bytes, the device decodes "
                                 "(nvJPEG on CUDA) and crops in batches", INPUT_PIPELINES, default="cpu")
    bad_data: str = _field("an unreadable image: skip it (named in the log, counted) or stop with an error naming it",
                           BAD_DATA_POLICIES, default="skip")
    synthetic_images: int = _field("images per epoch for the synthetic dataset", default=2048)
    num_classes: int = _field("0 = from the dataset (folder count; 1000 for synthetic)", default=0)
    # --- model
    arch: str = _field("any torchvision classification model name, e.g. resnet50", default="resnet18")
    norm: str = _field("batch: BatchNorm, statistics per worker; group: GroupNorm (ResNets only)", NORMS,
                       default="batch")
    zero_init_residual: bool = _field("last BN gamma of each residual block starts at 0 (Goyal et al.)", default=True)
    channels_last: bool = _field("NHWC memory format (faster convolutions on tensor-core GPUs)", default=False)
    compile: str = _field("torch.compile mode (none: eager)", COMPILE_MODES, default="none")
    # --- schedule and optimiser
    epochs: int = _field("epochs to train", default=3)
    batch_size: int = _field("per worker (per GPU); global batch = batch_size * world size", default=32)
    base_lr: float = _field("learning rate per lr_reference_batch images (linear scaling rule)", default=0.1)
    lr_reference_batch: int = _field("the batch size base_lr is given for (Goyal et al.: 256)", default=256)
    warmup_epochs: float = _field("gradual warmup, per iteration, to the scaled LR", default=1.0)
    warmup_start_factor: float = _field("warmup starts at this fraction of the scaled LR", default=0.1)
    lr_schedule: str = _field("LR decay after warmup: step (at lr_milestones) or cosine", SCHEDULES, default="step")
    lr_milestones: list[int] = _field("step decay epochs", default_factory=lambda: [30, 60, 80])
    lr_decay: float = _field("factor applied at each milestone", default=0.1)
    optimizer: str = _field("sgd, or lars (layer-wise adaptive rate scaling for very large batches)", OPTIMIZERS,
                            default="sgd")
    momentum: float = _field("SGD/LARS momentum", default=0.9)
    nesterov: bool = _field("Nesterov momentum (SGD only; refused with LARS)", default=False)
    weight_decay: float = _field("L2 weight decay", default=1e-4)
    no_weight_decay_1d: bool = _field("no weight decay on 1-D parameters: normalisation weights and every bias",
                                      default=True)
    lars_trust_coefficient: float = _field("LARS trust coefficient: how far each layer's LR follows |w|/|grad w|",
                                           default=0.001)
    label_smoothing: float = _field("label smoothing of the cross-entropy loss (0 = off)", default=0.0)
    # --- speed and numerics
    precision: str = _field("fp32 (true fp32), tf32 (TF32 matmuls), fp16 (autocast + GradScaler), bf16 (autocast)",
                            PRECISIONS, default="fp32")
    device: str = _field("auto: a GPU if one is visible, else the CPU", DEVICES, default="auto")
    bucket_cap_mb: int = _field("DDP gradient bucket size: all-reduce of a full bucket overlaps backward", default=25)
    allreduce: str = _field("gradients: flat all-reduce, hierarchical (node = torchrun's local world), hybrid "
                            "(flat below 1 MiB)", ALLREDUCE_MODES, default="flat")
    seed: int = _field("seed of weights, shuffling and augmentation", default=0)
    # --- logging, checkpointing, limits
    log_every: int = _field("write a `step` event every this many steps", default=10)
    max_steps_per_epoch: int = _field("0 = the whole epoch; >0 truncates epochs (benchmarks, tests)", default=0)
    stop_after_epochs: int = _field("0 = run to `epochs`; >0 = checkpoint and stop after this many now", default=0)
    checkpoint: bool = _field("write checkpoint.pt after every epoch and on a stop request", default=True)
    progress: bool = _field("tqdm progress bar on rank 0", default=True)

    @property
    def run_dir(self) -> Path:
        """The run directory: ``output_root/name``."""
        return Path(self.output_root) / self.name

    def to_dict(self) -> dict:
        """Plain-dict copy (JSON/YAML friendly)."""
        return dataclasses.asdict(self)


# Profiles: named overrides of the defaults. `hal` is reference 000's recipe.
PROFILES: dict[str, dict] = {
    "smoke": dict(
        dataset="digits", arch="resnet18", image_size=32, epochs=3, batch_size=32,
        min_crop_scale=0.5, hflip=False,
        base_lr=0.4, warmup_epochs=1.0, lr_schedule="cosine", precision="fp32", device="cpu",
        workers=0, log_every=5,
    ),
    "gpu": dict(
        dataset="imagefolder", arch="resnet50", image_size=224, epochs=90, batch_size=256,
        base_lr=0.1, warmup_epochs=5.0, lr_schedule="cosine", precision="bf16", device="cuda",
        channels_last=True, compile="default", workers=AUTO, input_pipeline="gpu", label_smoothing=0.1,
        log_every=50,
    ),
    "hal": dict(
        dataset="imagefolder", arch="resnet50", image_size=224, epochs=90, batch_size=208,
        base_lr=0.1, warmup_epochs=5.0, lr_schedule="step", lr_milestones=[30, 60, 80],
        precision="fp16", device="cuda", channels_last=True, workers=AUTO, input_pipeline="gpu", log_every=50,
    ),
}

_FIELDS = {f.name: f for f in dataclasses.fields(TrainConfig)}
assert tuple(PROFILES) == PROFILE_NAMES, "PROFILE_NAMES must list the PROFILES"


def _field_type(name: str):
    """The field's type; ``int`` for the fields that also take ``"auto"`` (:data:`AUTO_INT_FIELDS`)."""
    return int if name in AUTO_INT_FIELDS else typing.get_type_hints(TrainConfig)[name]


def _type_name(name: str) -> str:
    kind = _field_type(name)
    return getattr(kind, "__name__", str(kind)) + (f" or {AUTO}" if name in AUTO_INT_FIELDS else "")


def parse_bool(value) -> bool:
    """``true/false``, ``yes/no``, ``on/off``, ``1/0`` (any case) or a bool; ValueError for anything else."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected on/off (true/false, yes/no, 1/0), got {value!r}")


def _coerce(name: str, value):
    """Convert ``value`` (from YAML or a command line) to the field's type, or raise ConfigError."""
    kind = _field_type(name)
    flag = "--" + name.replace("_", "-")
    if name in AUTO_INT_FIELDS and isinstance(value, str) and value.strip().lower() == AUTO:
        return AUTO
    try:
        if kind is bool:
            return parse_bool(value)
        if kind is int:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(str(value).strip()) if not isinstance(value, (int, float)) else int(value)
        if kind is float:
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if kind == list[int]:
            if isinstance(value, str):  # "30,60,80" or "30 60 80"; "" is no milestone; "1,,2" is refused
                items = re.split(r"\s*,\s*|\s+", value.strip()) if value.strip() else []
                if "" in items:
                    raise ConfigError(f"{name}: {shorten(value)} has an empty item. Fix: pass whole epochs between "
                                      f"the commas, e.g. {flag} {_example(name)}")
                value = items
            if not isinstance(value, (list, tuple)) or any(isinstance(v, bool) or (isinstance(v, float) and not
                                                               v.is_integer()) for v in value):  # 1.5: never 1
                raise ValueError
            return [int(v) for v in value]
        if kind is str:
            if not isinstance(value, (str, int, float)) or isinstance(value, bool):
                raise ValueError
            return str(value)
    except ConfigError:  # its own message (an empty milestone): a ValueError too
        raise
    except (TypeError, ValueError, OverflowError):  # OverflowError: an int beyond a float (base_lr=10**400)
        pretty = _type_name(name)
        raise ConfigError(
            f"{name}: expected {pretty}, got {shorten(value)}. Fix: pass a {pretty}, e.g. {flag} "
            f"{_example(name)}"
        ) from None
    raise ConfigError(f"{name}: unsupported field type {kind}")  # pragma: no cover


def _example(name: str) -> str:
    default = getattr(TrainConfig(), name)
    if isinstance(default, list):
        return ",".join(str(v) for v in default)
    return str(default).lower() if isinstance(default, bool) else str(default)


def _check_keys(values: dict, source: str) -> None:
    odd = [key for key in values if not isinstance(key, str)]
    if odd:  # YAML makes keys of numbers, null, lists...: `{0}` is {0: None}
        raise ConfigError(f"{shorten(odd[0])} in {shorten(source)} is not a setting name ({type(odd[0]).__name__}). "
                          "Fix: write field: value pairs such as epochs: 3 (python -m tutorial_lib.train --help).")
    for old, new in RENAMED_KEYS.items():
        if old in values:
            raise ConfigError(f"{old}: this setting was renamed {new} (in {source}). Fix: write {new} instead "
                              f"(--{new.replace('_', '-')} on the command line).")
    unknown = sorted(key for key in values if key not in _FIELDS)
    if unknown:
        hints = []
        for key in unknown:
            close = [k for k in _FIELDS if k.startswith(key[:4])][:3]
            hints.append(shorten(key) + (f" (did you mean {', '.join(close)}?)" if close else ""))
        raise ConfigError(
            f"unknown setting(s) in {shorten(source)}: {', '.join(hints[:5])}. "
            f"Fix: use one of the TrainConfig fields (python -m tutorial_lib.train --help)."
        )


def load_yaml(path: str | os.PathLike) -> dict:
    """Read a YAML mapping of config fields; errors name the file."""
    if not os.fspath(path):  # Path('') is the working directory: an empty --config is no file
        raise ConfigError("config: an empty path was given. Fix: pass the path of a YAML file, or leave --config out.")
    if isinstance(os.fspath(path), str):  # r43n: is_file() raised "File name too long" for a long name
        check_path_text("config", os.fspath(path))
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config: file {shorten(str(path))} does not exist. Fix: pass the path of a YAML file.")
    try:
        data = read_yaml(path, "--config")
    except YamlFileError as exc:
        raise ConfigError(str(exc)) from None
    if data is None:  # an empty file (or only comments): no settings
        data = {}
    if not isinstance(data, dict):  # [] or 0 too: no falsy value stands for "no settings"
        raise ConfigError(f"config: file {shorten(str(path))} must hold a mapping of field: value pairs, not "
                          f"{type(data).__name__} {shorten(data)}. Fix: write one setting a line, such as epochs: 3 "
                          "(python -m tutorial_lib.train --help lists them).")
    _check_keys(data, str(path))
    return data


PATH_FIELDS = ("output_root", "data_dir", "index_dir")  # stage_to is expanded on each node ($TMPDIR)


def make_config(profile: str | None = None, yaml_path: str | None = None, **overrides) -> TrainConfig:
    """Build a TrainConfig from a profile, an optional YAML file and keyword overrides.

    The result is not yet validated against the machine; call :func:`validate`.
    """
    _check_keys(overrides, "overrides")
    if yaml_path is not None and not isinstance(yaml_path, (str, os.PathLike)):
        raise ConfigError(f"yaml_path: expected the path of a YAML config file, got {shorten(yaml_path)} "
                          f"({type(yaml_path).__name__}). Fix: pass a path such as 'my_run.yaml', or None.")
    file_values = load_yaml(yaml_path) if yaml_path is not None else {}
    given = [p for p in (profile, file_values.get("profile"), overrides.get("profile")) if p is not None]
    profile = given[0] if given else "smoke"  # '' is no profile: refused below, never read as "the default"
    if not isinstance(profile, str) or profile not in PROFILES:
        raise ConfigError(
            f"profile: unknown profile {shorten(profile)}. Fix: use one of {', '.join(PROFILES)}."
        )
    values = {**PROFILES[profile], **file_values, **overrides, "profile": profile}
    coerced = {key: _coerce(key, value) for key, value in values.items()}
    for key in PATH_FIELDS:  # "~/runs" from a flag, a YAML file or a notebook means the home folder
        if isinstance(coerced.get(key), str):
            coerced[key] = user_path(coerced[key])
            _check_no_variable(key, coerced[key])
    return TrainConfig(**coerced)


_SHELL_VARIABLE = re.compile(r"\$(\w+|\{[^}]*\})")


def _check_no_variable(key: str, path: str) -> None:
    """Refuse a path that names a shell variable (``$HOME/runs`` from a YAML file or a notebook): nothing expands
    it here, and a folder named ``$HOME`` would appear in the working directory (r43k)."""
    found = _SHELL_VARIABLE.search(path)
    if found:
        _fail(key, f"{shorten(path)} names the shell variable {found[0]}, which is not expanded in a config "
                   f"file, a notebook parameter or a quoted flag", f"write the folder out, e.g. "
                   f"{shorten(os.path.expandvars(path))}, or start it with ~ for the home folder")


def validate_name(value: str, what: str = "name") -> str:
    """Check a run or job name is a safe single path component; return it."""
    if not isinstance(value, str) or not _SAFE_NAME.fullmatch(value) or ".." in value:
        _fail(  # r43aa: the length and the first character's rule were not said
            what, f"{shorten(value)} is not a safe name (a run name is 1 to 100 ASCII letters (a-z, A-Z), digits, '.', "
            "'_' and '-', starting with a letter or digit, without '..')", "give such a name, e.g. resnet50-8gpu",
        )
    return value


def check_type(name: str, value) -> None:
    """Refuse a value of the wrong type (a TrainConfig built directly or with dataclasses.replace)."""
    kind = _field_type(name)
    if name in AUTO_INT_FIELDS and value == AUTO:
        return
    if kind is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif kind == list[int]:
        ok = isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    else:
        ok = isinstance(value, kind) and (kind is bool or not isinstance(value, bool))
    if not ok:
        pretty = _type_name(name)
        _fail(name, f"expected {pretty}, got {shorten(value)} ({type(value).__name__})",
              f"pass a {pretty}, e.g. {name}={getattr(TrainConfig(), name)!r} (make_config() and the command "
              "line convert text for you)")


def check_is_config(value) -> None:
    """Refuse (ConfigError naming what was passed) a ``config`` that is not a TrainConfig: a dict, a profile's
    name or None would otherwise fail at its first field with an AttributeError traceback (r43g)."""
    if not isinstance(value, TrainConfig):
        _fail("config", f"expected a TrainConfig, got {shorten(value)} ({type(value).__name__})",
              "build one with tutorial_lib.engine.config.make_config(), e.g. make_config('smoke', name='run1')")


def validate(cfg: TrainConfig, check_paths: bool = True, cuda_available: bool | None = None) -> TrainConfig:
    """Check every field; raise ConfigError naming the first bad one and its fix.

    ``check_paths`` looks at the data directory (skip it when submitting a job whose data lives
    only on the cluster). ``cuda_available`` defaults to asking torch.
    """
    check_is_config(cfg)
    for f in dataclasses.fields(TrainConfig):
        check_type(f.name, getattr(cfg, f.name))
    validate_name(cfg.name)
    check_numbers(cfg)
    for key, allowed in field_choices().items():
        if getattr(cfg, key) not in allowed:
            _fail(key, f"unknown value {shorten(getattr(cfg, key))}", f"use one of {', '.join(allowed)}")
    if cfg.nesterov and cfg.optimizer == "lars":
        _fail("nesterov", "LARS has no Nesterov variant here (it would be ignored)",
              "use --nesterov false with --optimizer lars, or --optimizer sgd")
    check_model(cfg)
    if cuda_available is None:
        import torch

        cuda_available = torch.cuda.is_available()
    on_gpu = cfg.device == "cuda" or (cfg.device == "auto" and cuda_available)
    if cfg.device == "cuda" and not cuda_available:
        _fail("device", "cuda was asked for but no GPU is visible",
              "use --device cpu (or --profile smoke), or run on a GPU node")
    if cfg.precision in ("fp16", "tf32") and not on_gpu:
        _fail("precision", f"{cfg.precision} needs a CUDA GPU but this run is on the CPU",
              "use --precision fp32 or bf16 on a CPU")
    if cfg.compile != "none" and cfg.compile == "reduce-overhead" and not on_gpu:
        _fail("compile", "reduce-overhead uses CUDA graphs and needs a GPU", "use --compile default or none")
    for name in PATH_FIELDS + ("stage_to",):  # no path is longer than PATH_MAX: refused naming its setting
        check_path_text(name, getattr(cfg, name))
    check_not_system_folder("output_root", cfg.output_root, "pass a folder of your own for the runs, e.g. "
                            "--output-root runs")
    if os.path.lexists(os.path.expanduser(cfg.output_root)) and not os.path.isdir(os.path.expanduser(cfg.output_root)):
        _fail("output_root", f"{shorten(cfg.output_root)} is a file (or a link to none), not a folder",
              "pass a folder for the runs, e.g. --output-root runs")  # r43s: the course ran on, the job could not
    with path_setting("stage_to"):
        if cfg.stage_to:
            check_stage_to(cfg)
    with path_setting("index_dir"):
        if cfg.index_dir:
            check_index_dir(cfg)
    check_data(cfg, check_paths)
    return cfg


def field_choices() -> dict[str, tuple]:
    """The allowed values of each closed-set field (``precision``: PRECISIONS...), as validate() checks them."""
    return {f.name: f.metadata["choices"] for f in dataclasses.fields(TrainConfig) if f.metadata.get("choices")}


def to_cli_args(cfg: TrainConfig) -> list[str]:
    """The ``--key value`` list that reproduces ``cfg`` on a command line (for job scripts)."""
    args = []
    for key, value in cfg.to_dict().items():
        if isinstance(value, list):
            value = ",".join(str(v) for v in value)
        elif isinstance(value, bool):
            value = str(value).lower()
        args += ["--" + key.replace("_", "-"), str(value)]
    return args


def scaled_batch_and_lr(cfg: TrainConfig, world_size: int) -> dict:
    """The global batch and the linearly scaled LR of ``cfg`` on ``world_size`` ranks (with the world size)."""
    global_batch = cfg.batch_size * world_size
    return {
        "world_size": world_size,
        "global_batch": global_batch,
        "scaled_lr": cfg.base_lr * global_batch / cfg.lr_reference_batch,
    }
