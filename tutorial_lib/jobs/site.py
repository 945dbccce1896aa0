"""A site's settings for every Slurm job (the ``site:`` block of a parameter file): partition, account, time,
CPUs and memory, GPU request form, setup lines, python, environment, container and extra sbatch options, each
checked on load with a one-line error naming ``site.<key>`` and the fix."""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from tutorial_lib.engine.config import ConfigError, shorten
from tutorial_lib.engine.validate import check_path_text
from tutorial_lib.jobs.slurm_values import check_sbatch_option, check_time, check_time_against_warning, check_word
from tutorial_lib.numbers import shown

SITE_ENV = "TUTORIAL_SITE"  # a YAML file whose `site:` block every Slurm job gets when none is passed
GPU_REQUESTS = ("gpus-per-node", "gres")
CONTAINER_RUNTIMES = ("apptainer", "pyxis")
_MEM = re.compile(r"[0-9]{1,9}[KMGT]?")  # ASCII digits: \d would take other scripts' digits, which Slurm refuses
_COMMAND_WORD = re.compile(r"[A-Za-z0-9_./+][A-Za-z0-9_./+-]{0,254}")  # a path or a command name, never an option
_IMAGE = re.compile(r"[A-Za-z0-9_./:@#+][A-Za-z0-9_./:@#+-]{0,254}")  # never an option ('-x')
_BIND = re.compile(r"/[A-Za-z0-9_./+-]{0,255}(:/[A-Za-z0-9_./+-]{0,255}(:(ro|rw))?)?")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
# Variables the library and train.sbatch set for every job: a site may not replace them.
_ENV_SET_HERE = ("PYTHONPATH", "RANKS_PER_NODE", "HEAD", "PORT", "SRUN_CPUS_PER_TASK")


@dataclass(frozen=True)
class Container:
    """A container every node runs the training program in: Apptainer (``apptainer exec``) or pyxis
    (``srun --container-image``); ``binds`` are ``host_path[:container_path[:ro]]``."""

    image: str
    runtime: str = "apptainer"
    binds: tuple[str, ...] = ()


@dataclass(frozen=True)
class Site:
    """What every Slurm job at a site needs (the ``site:`` block of a parameter file).

    ``cpus_per_rank``: CPUs per rank (per GPU on a GPU job); the job asks for ``--cpus-per-task``
    = cpus_per_rank x ranks per node. ``mem``: memory per node (``64G``; ``0``: all of it).
    ``gpu_request``: ``gpus-per-node`` (``--gpus-per-node=N``) or ``gres`` (``--gres=gpu:N``).
    ``setup``: shell lines each job runs before training (``module load ...``, ``source venv/bin/activate``),
    written into the job's batch script as given. ``python``: the Python command on the compute nodes
    (default: this kernel's interpreter, which exists there only on a shared file system).
    ``env``: environment variables (``NCCL_SOCKET_IFNAME``...). Explicit ``submit`` arguments win.
    """

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time: str | None = None
    cpus_per_rank: int | None = None
    mem: str | None = None
    gpu_request: str = "gpus-per-node"
    setup: tuple[str, ...] = ()
    python: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    container: Container | None = None
    sbatch_options: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, data) -> Site:
        """A checked Site from a mapping (a parameter file's ``site:`` block); errors name ``site.<key>``."""
        if data is None:
            return cls()
        if isinstance(data, Site):  # built directly: its values are checked like a block's
            data = data.to_dict()
        if not isinstance(data, dict):
            raise ConfigError(f"site: expected a mapping of settings, got {shorten(data)}. Fix: e.g. "
                              "site: {partition: gpu, python: python3}.")
        known = [f.name for f in fields(cls)]
        unknown = [key for key in data if key not in known]
        if unknown:
            name = unknown[0] if isinstance(unknown[0], str) and unknown[0].isidentifier() else shorten(unknown[0])
            raise ConfigError(f"site.{name}: not a site setting. Fix: use one of {', '.join(known)}.")
        site = cls(**{key: _SITE_CHECKS[key](value) for key, value in data.items() if value not in (None, "")})
        if site.time:  # the longest a job may ask for: its warning must leave it time to train
            _prefixed(lambda time: check_time_against_warning(time, site.sbatch_options), "time", site.time)
        return site

    def resolve(self, partition=None, account=None) -> tuple:
        """``(partition, account)`` of a job: the ``submit`` arguments where given, else the site's (the time
        limit has its own rule: :func:`job_time`)."""
        return (self.partition if partition is None else partition,  # [] or 0 is checked as given, never dropped
                self.account if account is None else account)

    def to_dict(self) -> dict:
        """The settings that are set, as the ``site:`` block would hold them."""
        data = {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) not in (None, ())}
        if "env" in data:
            data["env"] = dict(self.env)
        if self.container is not None:
            data["container"] = asdict(self.container)
        return data


def _site_word(what: str):
    return lambda value: _prefixed(check_word, what, value)


def _prefixed(check, what: str, value):
    try:
        return check(what, value) if check is check_word else check(value)
    except ConfigError as exc:
        raise ConfigError(f"site.{exc}") from None


def _site_int(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1024:
        raise ConfigError(f"site.cpus_per_rank: must be an integer from 1 to 1024, got {shorten(value)}. "
                          "Fix: e.g. cpus_per_rank: 8 (CPUs per GPU).")
    return value


def _site_match(what: str, pattern: re.Pattern, example: str):
    def check(value):
        if not isinstance(value, (str, int)) or isinstance(value, bool) or not pattern.fullmatch(
                shown(value) if isinstance(value, int) else value):  # r43y: str() of 5,000 digits raised
            raise ConfigError(f"site.{what}: {shorten(value)} is refused. Fix: e.g. {what}: {example}.")
        return str(value)
    return check


def _site_choice(what: str, choices: tuple):
    def check(value):
        if value not in choices:
            raise ConfigError(f"site.{what}: {shorten(value)} is not one of {', '.join(choices)}. "
                              f"Fix: {what}: {choices[0]}.")
        return value
    return check


def _site_lines(value) -> tuple[str, ...]:
    lines = [value] if isinstance(value, str) else value
    if not isinstance(lines, (list, tuple)) or not all(
            isinstance(line, str) and line.isprintable() for line in lines):
        raise ConfigError("site.setup: expected a list of single-line shell commands (no line breaks or control "
                          "characters). Fix: e.g. setup: ['module load cuda/12.4', 'source ~/venv/bin/activate'].")
    return tuple(lines)


def _site_env(value) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, dict):
        raise ConfigError(f"site.env: expected a mapping NAME: value, got {shorten(value)}. "
                          "Fix: e.g. env: {NCCL_SOCKET_IFNAME: ib0}.")
    for name, text in value.items():
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
            raise ConfigError(f"site.env: {shorten(name)} is not a variable name. Fix: ASCII letters, digits and '_', "
                              "not starting with a digit.")
        if name in _ENV_SET_HERE or name.startswith(("TUTORIAL_", "SLURM_")):
            raise ConfigError(f"site.env: {name} is set by tutorial_lib.jobs itself. Fix: leave it out.")
        if isinstance(text, bool) or not isinstance(text, (str, int)):  # YAML true would be exported as True
            raise ConfigError(f"site.env.{name}: {shorten(text)} is YAML's {type(text).__name__}, not text, and "
                              f"would be exported as {shorten(str(text))}. Fix: quote the value, e.g. {name}: "
                              f"'{str(text).lower() if isinstance(text, bool) else text}'.")
        if isinstance(text, int) and abs(text) > 2**63 - 1:  # r43x: 10**5000 was str()'s ValueError traceback
            raise ConfigError(f"site.env.{name}: a whole number of {text.bit_length():,} bits, past what a program "
                              f"reads from its environment. Fix: quote the value, e.g. {name}: '42'.")
        if not str(text).isprintable():
            raise ConfigError(f"site.env.{name}: {shorten(text)} must be a single-line value. Fix: e.g. {name}: ib0.")
    return tuple((name, str(text)) for name, text in value.items())


def _site_container(value) -> Container:
    if isinstance(value, str):
        value = {"image": value}
    if not isinstance(value, dict) or "image" not in value or set(value) - {"image", "runtime", "binds"}:
        raise ConfigError(f"site.container: expected {{image: ..., runtime: apptainer|pyxis, binds: [...]}}, got "
                          f"{shorten(value)}. Fix: e.g. container: {{image: /images/torch.sif, binds: [/data]}}.")
    binds = value.get("binds") or []
    if not isinstance(binds, list) or not all(isinstance(b, str) and _BIND.fullmatch(b) and ".." not in b
                                              for b in binds):
        raise ConfigError(f"site.container.binds: {shorten(binds)} is refused. Fix: a list of absolute paths, "
                          "host[:container[:ro]], e.g. [/data, /scratch:/scratch:ro].")
    return Container(image=_site_match("container.image", _IMAGE, "/images/torch.sif")(value["image"]),
                     runtime=_site_choice("container.runtime", CONTAINER_RUNTIMES)(value.get("runtime", "apptainer")),
                     binds=tuple(binds))


def _site_options(value) -> tuple[str, ...]:
    options = [value] if isinstance(value, str) else value
    if not isinstance(options, (list, tuple)):
        raise ConfigError("site.sbatch_options: expected a list. Fix: e.g. sbatch_options: ['--constraint=a100'].")
    try:
        return tuple(check_sbatch_option(option) for option in options)
    except ConfigError as exc:
        raise ConfigError(f"site.{exc}") from None


_SITE_CHECKS = {
    "partition": _site_word("partition"), "account": _site_word("account"), "qos": _site_word("qos"),
    "time": lambda value: _prefixed(check_time, "time", value), "cpus_per_rank": _site_int,
    "mem": _site_match("mem", _MEM, "64G"), "gpu_request": _site_choice("gpu_request", GPU_REQUESTS),
    "setup": _site_lines, "python": _site_match("python", _COMMAND_WORD, "/opt/venv/bin/python (a path) or python3 "
                                                "(a command name; an option such as -c is refused)"), "env": _site_env,
    "container": _site_container, "sbatch_options": _site_options,
}


def load_site(source=None) -> Site:
    """The Site of a ``site:`` mapping, of a YAML file holding one (a parameter file), or (``None``)
    of the file named by the ``TUTORIAL_SITE`` environment variable; an empty Site when there is none."""
    if isinstance(source, (Site, dict)):
        return Site.from_dict(source)
    _check_kind(source)
    path = source if source is not None else os.environ.get(SITE_ENV)
    if not path:
        return Site()
    from tutorial_lib.yamlfile import YamlFileError, read_yaml

    where = f"{SITE_ENV}={shorten(str(path))}" if source is None else shorten(str(path))
    if isinstance(os.fspath(path), str):  # r43n: is_file() raised "File name too long" for a long name
        check_path_text(SITE_ENV if source is None else "site", os.fspath(path))
    if not Path(path).is_file():
        raise ConfigError(f"site: {where} names no file. Fix: point it at a YAML file with a site: block.")
    try:
        data = read_yaml(path, f"site: {where}") or {}
    except YamlFileError as exc:
        raise ConfigError(str(exc)) from None
    if not isinstance(data, dict) or not isinstance(data.get("site"), dict):
        raise ConfigError(f"site: {where} holds no site: block. Fix: add one (see README, Bringing the course "
                          "to your cluster).")
    return Site.from_dict(data["site"])


def _check_kind(source) -> None:
    if source is not None and (isinstance(source, bool) or not isinstance(source, (str, os.PathLike))):
        raise ConfigError(f"site: expected a Site, a site: mapping or the path of a YAML file, got {shorten(source)} "
                          f"({type(source).__name__}). Fix: e.g. site={{'partition': 'gpu', 'python': 'python3'}} or "
                          "site='notebooks/params/cluster.yaml'.")


def local_site(source) -> Site:
    """The empty Site of a job on this machine, once ``source`` is of a kind :func:`load_site` takes, a mapping's
    values checked too (r43r: ``site=5`` was accepted for a local job and ignored); a file is not read."""
    if isinstance(source, (Site, dict)):
        Site.from_dict(source)
    else:
        _check_kind(source)
    return Site()
