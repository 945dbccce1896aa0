"""The training program's command line, built from the TrainConfig fields.

One ``--key value`` flag per field: its help text and allowed values come from the field's metadata
(the same ``choices`` :func:`tutorial_lib.engine.config.validate` checks), and the value shown is the one
the chosen ``--profile`` (and ``--config`` file) really uses. Resolution order: profile, YAML file, flags.
"""

from __future__ import annotations

import argparse
import dataclasses
import typing

from tutorial_lib.engine import config as _config
from tutorial_lib.engine.config import RENAMED_KEYS, ConfigError, TrainConfig, field_choices, make_config
from tutorial_lib.exits import ArgumentParser


def _shown(value) -> str:
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value).lower() if isinstance(value, bool) else str(value)


def build_arg_parser(profile: str | None = None, yaml_path: str | None = None) -> argparse.ArgumentParser:
    """An argparse parser with one ``--key value`` flag per TrainConfig field, plus ``--config``.

    Each flag's help is the field's help text, its allowed values and the value this run would use:
    the ``profile`` (and ``--config`` file) resolved, so ``--profile smoke --help`` shows what smoke runs.
    """
    parser = ArgumentParser(
        prog="python -m tutorial_lib.train",
        description="Train an image classifier with the large-minibatch recipe (one process or torchrun). "
                    "Settings: the profile, then --config FILE, then --key value flags (later wins).",
    )
    parser.add_argument("--config", help="YAML file of field: value pairs")
    try:
        resolved = make_config(profile, yaml_path)
        source = f"profile {resolved.profile}" + (f" + {yaml_path}" if yaml_path else "")
    except ConfigError:  # a bad profile or file: --help still works, the real run reports the error
        resolved, source = TrainConfig(), "the defaults"
    choices = field_choices()
    for f in dataclasses.fields(TrainConfig):
        text = f.metadata["help"]
        if f.name in choices:
            text += f" {{{', '.join(choices[f.name])}}}"
        text += f" (with {source}: {_shown(getattr(resolved, f.name))})".replace("%", "%%")
        if f.name in choices:
            metavar = "|".join(choices[f.name])
        elif f.name in _config.AUTO_INT_FIELDS:
            metavar = f"INT|{_config.AUTO}"
        else:
            metavar = typing.get_type_hints(TrainConfig)[f.name].__name__.upper()
        parser.add_argument("--" + f.name.replace("_", "-"), dest=f.name, default=None, metavar=metavar, help=text)
    for old in RENAMED_KEYS:  # accepted by the parser so that make_config can name the new key
        parser.add_argument("--" + old.replace("_", "-"), dest=old, default=None, help=argparse.SUPPRESS)
    return parser


def config_from_args(argv: list[str] | None = None) -> TrainConfig:
    """Parse command-line flags into a TrainConfig (profile, then --config file, then flags)."""
    early = ArgumentParser(add_help=False)
    early.add_argument("--profile")
    early.add_argument("--config")
    known, _ = early.parse_known_args(argv)
    args = vars(build_arg_parser(known.profile, known.config).parse_args(argv))
    yaml_path = args.pop("config")
    overrides = {k: v for k, v in args.items() if v is not None}
    return make_config(overrides.pop("profile", None), yaml_path, **overrides)
