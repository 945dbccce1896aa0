"""Shared fixtures for the test suite.

* ``digits_dir``: the digits data set exported once per session (32 px ImageFolder tree).
* ``child_env``: environment for child Python processes (this checkout importable, one thread).
* ``runs``: a :class:`Runs` helper bound to a fresh output root, that builds flags / configs for
  small, fast training runs and launches them in-process, as a subprocess or under torchrun
  (``make_runs`` makes more of them, for module-scoped fixtures).
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import durations_record
import pytest
import torch

from tutorial_lib import REPO_ROOT, free_port

_CONFIG: list = []  # the session's pytest config, for the report hook (which is not given it)


def pytest_sessionstart(session):
    """Remember when the session started: only runs made after it have their checkpoints removed. With
    TUTORIAL_DURATIONS=FILE, start a durations record (``tests/durations_record.py``)."""
    session.config.started_at = time.time()
    durations_record.start(session.config, REPO_ROOT)


def pytest_runtest_logreport(report):
    """Count each test phase's seconds in the durations record, if one is kept."""
    if _CONFIG:
        durations_record.add(_CONFIG[0], report)


def pytest_collection_modifyitems(config, items):
    """Heaviest test files first (``tests/durations_record.py``, :func:`~durations_record.heaviest_first`)."""
    items[:] = durations_record.heaviest_first(
        items, durations_record.recorded_file_seconds(REPO_ROOT / "results" / "test_durations.jsonl"))


def pytest_configure(config):
    """Keep the config for :func:`pytest_runtest_logreport`."""
    _CONFIG[:] = [config]


def pytest_sessionfinish(session):
    """Delete the checkpoints of the finished runs that the notebooks wrote under nbval in this session
    (``tests/notebook_checks.py`` sends them to build/test-runs): 86 MB each, never resumed. Append the
    durations record, if one is kept."""
    if hasattr(session.config, "workerinput"):
        return  # a pytest-xdist worker: the controller cleans up once every worker has finished
    from notebook_checks import TEST_OUTPUT_ROOT

    from tutorial_lib.course import drop_finished_checkpoints

    drop_finished_checkpoints(REPO_ROOT / TEST_OUTPUT_ROOT, getattr(session.config, "started_at", 0.0))
    durations_record.finish(session.config)


# Settings every quick test run shares (tiny, CPU, no progress bar, no worker processes).
FAST_SETTINGS = dict(arch="resnet18", device="cpu", precision="fp32", workers=0, progress=False)


def as_flags(settings: dict) -> list[str]:
    """``{"batch_size": 8, "progress": False}`` -> ``["--batch-size", "8", "--progress", "false"]``."""
    flags = []
    for key, value in settings.items():
        if isinstance(value, bool):
            value = str(value).lower()
        elif isinstance(value, (list, tuple)):
            value = ",".join(str(v) for v in value)
        flags += ["--" + key.replace("_", "-"), str(value)]
    return flags


def subprocess_env() -> dict:
    """Environment for child Python processes: this checkout importable, one thread each."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                        "SLURM_PROCID", "SLURM_NTASKS", "SLURM_JOB_ID")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    env["OMP_NUM_THREADS"] = "1"
    return env


def command_in_process(main, args: list[str]) -> subprocess.CompletedProcess:
    """A command's ``main(ARGS)`` in this process: its exit status, stdout and stderr as ``subprocess.run`` gives
    them for ``python -m <command> ARGS``, without the child's ~6 s of CPU to import torch and torchvision. The
    signal handlers a command installs are restored; an exception that escapes is a traceback, and fails the test."""
    out, err = io.StringIO(), io.StringIO()
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGUSR1, signal.SIGTERM)}
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = main(list(args))
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
    return subprocess.CompletedProcess(args, status, out.getvalue(), err.getvalue())


class Runs:
    """Build and launch small training runs whose run directories live under ``output_root``."""

    def __init__(self, output_root: Path, data_dir: Path):
        self.output_root = output_root
        self.data_dir = data_dir

    def settings(self, name: str, fast: bool = True, **overrides) -> dict:
        """Config fields for a run named ``name`` on the digits tree, without a progress bar.

        ``fast`` adds :data:`FAST_SETTINGS` and reads the session's digits export as a plain
        ImageFolder, so tests may train at another image size without re-exporting the shared
        tree; ``fast=False`` leaves everything else to the profile. ``overrides`` win.
        """
        base = {"data_dir": str(self.data_dir), "output_root": str(self.output_root), "name": name,
                "progress": False}
        if fast:
            base = {"profile": "smoke", "dataset": "imagefolder", **base, **FAST_SETTINGS}
        return {**base, **overrides}

    def flags(self, name: str, fast: bool = True, **overrides) -> list[str]:
        """Command-line flags of :meth:`settings`."""
        return as_flags(self.settings(name, fast, **overrides))

    def config(self, name: str, fast: bool = True, **overrides):
        """A TrainConfig of :meth:`settings`, built through the command-line parser."""
        from tutorial_lib.engine.cli import config_from_args

        return config_from_args(self.flags(name, fast, **overrides))

    def run_dir(self, name: str) -> Path:
        return self.output_root / name

    @staticmethod
    def in_process(cfg) -> dict:
        """``tutorial_lib.engine.trainer.train(cfg)`` in this process, restoring the signal handlers it installs."""
        from tutorial_lib.engine.trainer import train

        saved = {sig: signal.getsignal(sig) for sig in (signal.SIGUSR1, signal.SIGTERM)}
        try:
            return train(cfg)
        finally:
            for sig, handler in saved.items():
                signal.signal(sig, handler)

    @staticmethod
    def main(args: list[str]) -> subprocess.CompletedProcess:
        """The trainer's command line ``ARGS`` in this process (:func:`command_in_process`), for refusals and other
        short ends: what :meth:`module` gives, without a child that imports torch again."""
        from tutorial_lib.engine.trainer import main

        return command_in_process(main, args)

    @staticmethod
    def module(args: list[str], timeout: float = 300) -> subprocess.CompletedProcess:
        """``python -m tutorial_lib.train ARGS`` in a child process (output captured, not checked)."""
        return subprocess.run([sys.executable, "-m", "tutorial_lib.train", *args], env=subprocess_env(),
                              cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout)

    @staticmethod
    def torchrun(nproc: int, args: list[str], timeout: float = 300) -> subprocess.CompletedProcess:
        """``torchrun --nproc-per-node N -m tutorial_lib.train ARGS`` on this machine; fails the test on error."""
        command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
                   "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
                   "-m", "tutorial_lib.train", *args]
        result = subprocess.run(command, env=subprocess_env(), cwd=REPO_ROOT, capture_output=True, text=True,
                                timeout=timeout)
        assert result.returncode == 0, f"torchrun failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
        return result

    @staticmethod
    def events(run_dir: Path, kind: str | None = None) -> list[dict]:
        """The run's metrics.jsonl events (only those of ``kind`` if given)."""
        from tutorial_lib.rundir.metrics import read_metrics

        return [r for r in read_metrics(run_dir) if kind is None or r["event"] == kind]

    @staticmethod
    def weights(run_dir: Path) -> dict[str, torch.Tensor]:
        """The model state_dict stored in the run's checkpoint.pt."""
        from tutorial_lib.rundir.checkpoint import load_checkpoint
        from tutorial_lib.rundir.layout import CHECKPOINT_FILE

        state = load_checkpoint(Path(run_dir) / CHECKPOINT_FILE)
        assert state is not None, f"no checkpoint in {run_dir}"
        return state["model"]

    @staticmethod
    def max_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
        """Largest absolute difference over all floating-point tensors of two state dicts (same keys)."""
        assert a.keys() == b.keys()
        return max((a[k].double() - b[k].double()).abs().max().item() for k in a if a[k].is_floating_point())

    @staticmethod
    def assert_same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], atol: float) -> None:
        """Every tensor of two state dicts equal within ``atol`` (integer buffers exactly)."""
        assert a.keys() == b.keys()
        for key in a:
            torch.testing.assert_close(a[key], b[key], atol=atol, rtol=0, msg=lambda m, key=key: f"{key}: {m}")


@pytest.fixture
def child_env() -> dict:
    """Environment for a child ``python`` process that imports this checkout."""
    return subprocess_env()


@pytest.fixture(scope="session")
def digits_dir(tmp_path_factory) -> Path:
    """The digits data set exported once per session as a 32 px ImageFolder tree (train/ and val/)."""
    from tutorial_lib.engine.input.folders import export_digits

    return export_digits(tmp_path_factory.mktemp("data") / "digits", image_size=32)


@pytest.fixture(scope="session")
def make_runs(tmp_path_factory, digits_dir):
    """Factory of :class:`Runs` helpers, each with a fresh output root (for module-scoped fixtures)."""
    return lambda: Runs(tmp_path_factory.mktemp("runs"), digits_dir)


@pytest.fixture
def runs(make_runs) -> Runs:
    """A :class:`Runs` helper writing run directories under a fresh temporary folder."""
    return make_runs()


SLURM_HINT = "Start one with `make slurm-up` (as root; Debian/Ubuntu: apt-get install slurm-wlm munge first)."


@pytest.fixture(scope="session")
def slurm():
    """The emulated (or a real) Slurm cluster; in CI (TUTORIAL_REQUIRE_SLURM=1) its absence fails."""
    from tutorial_lib import jobs

    ok, why = jobs.slurm_available()
    if not ok:
        if os.environ.get("TUTORIAL_REQUIRE_SLURM"):
            pytest.fail(f"Slurm is required here (TUTORIAL_REQUIRE_SLURM is set) but not usable: {why}")
        pytest.skip(f"no Slurm cluster: {why}. {SLURM_HINT}")
    return "slurm"


@pytest.fixture(params=["local", "slurm"])
def backend(request):
    """Each test that takes it runs once per job backend."""
    return request.getfixturevalue("slurm") if request.param == "slurm" else "local"


@pytest.fixture
def world_of_one():
    """A one-process gloo group in this process (no ports), so DistributedDataParallel and collectives can be
    built and called here."""
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield dist.group.WORLD
    dist.destroy_process_group()


@pytest.fixture(autouse=True)
def _close_figures():
    """Close the matplotlib figures a test left open (figures are only made where pyplot was imported)."""
    yield
    if "matplotlib.pyplot" in sys.modules:
        sys.modules["matplotlib.pyplot"].close("all")


@contextlib.contextmanager
def tmpfs(mount: Path, size: str):
    """A tmpfs of ``size`` (``4m``) mounted at the new folder ``mount`` for the block and removed after it: a disk
    that fills up, or is made read-only, without touching the real one. Skips the test where mounting is refused."""
    mount.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], capture_output=True,
                             text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root, as CI runs): {mounted.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def write_image_tree(root: Path, counts: dict[str, dict[str, int]], size: int = 8, suffix: str = ".png") -> None:
    """An ImageFolder tree of small random RGB images: ``counts[split][class]`` images per class folder."""
    from PIL import Image

    generator = torch.Generator().manual_seed(0)
    for split, per_class in counts.items():
        for label, count in per_class.items():
            folder = root / split / label
            folder.mkdir(parents=True)
            for i in range(count):
                pixels = torch.randint(0, 256, (size, size, 3), dtype=torch.uint8, generator=generator)
                Image.fromarray(pixels.numpy()).save(folder / f"{i}{suffix}")


# A stand-in for a local job's supervisor: RUNNING until SIGTERM, then CANCELLED after argv[2] seconds
# (a real job takes a moment to end). Run as: python -c FAKE_SUPERVISOR RUN_DIR DELAY_S
FAKE_SUPERVISOR = """
import signal, sys, time
from pathlib import Path
from tutorial_lib.jobs.supervisor import write_state
run_dir, delay = Path(sys.argv[1]), float(sys.argv[2])
def cancelled(*_):
    time.sleep(delay)
    write_state(run_dir, "CANCELLED", exit_code=None)
    sys.exit(0)
signal.signal(signal.SIGTERM, cancelled)
write_state(run_dir, "RUNNING")
time.sleep(120)
"""


def start_fake_supervisor(run_dir: Path, delay_s: float) -> subprocess.Popen:
    """:data:`FAKE_SUPERVISOR` for ``run_dir``, with the run directory in its environment as the real supervisor
    gives its agents (``TUTORIAL_RUN_DIR``): the watcher and ``cancel`` trust only a process started for it."""
    return subprocess.Popen([sys.executable, "-c", FAKE_SUPERVISOR, str(run_dir), str(delay_s)],
                            env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "TUTORIAL_RUN_DIR": str(run_dir)})


_STAND_INS: list[subprocess.Popen] = []
# A stand-in lives while the test process that started it does (at most an hour): test files that import this module
# as tests.conftest hold another _STAND_INS than the session fixture below ends (seen: ten stand-ins left running).
STAND_IN = ("import os, time\nparent, ends = os.getppid(), time.monotonic() + 3600\n"
            "while os.getppid() == parent and time.monotonic() < ends:\n    time.sleep(1)")


def write_live_state(run_dir: Path, state: str, **fields) -> int:
    """Record ``state`` for a fake job as if its supervisor were alive: a sleeping stand-in process started for
    ``run_dir`` (``TUTORIAL_RUN_DIR`` in its environment) is named as the supervisor (the test process itself is
    not one: the watcher would take the job for lost). The stand-ins end with the session. Returns its pid."""
    from tutorial_lib.jobs import processes
    from tutorial_lib.jobs.states import write_state

    stand_in = subprocess.Popen([sys.executable, "-c", STAND_IN], env={**os.environ, "TUTORIAL_RUN_DIR": str(run_dir)})
    _STAND_INS.append(stand_in)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and "TUTORIAL_RUN_DIR" not in _environ(stand_in.pid):
        time.sleep(0.02)  # its environment is readable once it has exec'd
    write_state(run_dir, state, supervisor_pid=stand_in.pid, supervisor=processes.identity(stand_in.pid), **fields)
    return stand_in.pid


def _environ(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
    except OSError:
        return ""


@pytest.fixture(scope="session", autouse=True)
def _end_stand_ins():
    yield
    for stand_in in _STAND_INS:
        stand_in.kill()
        stand_in.wait(timeout=30)


@pytest.fixture(scope="session")
def fake_sources(tmp_path_factory) -> dict:
    """Small fake ImageNet downloads in three forms, made once per session and never changed by a test (the
    ``prepare`` tests check that SOURCE is unchanged): ``{form: path, form-truth: make_fake_source's truth}``."""
    from tutorial_lib.bench.fake_forms import make_fake_source

    base = tmp_path_factory.mktemp("fake-sources")
    out = {}
    for form in ("archives", "kaggle", "flat_val"):
        out[form] = base / form
        out[f"{form}-truth"] = make_fake_source(out[form], form, classes=3, per_class=4, val_per_class=2)
    return out


@pytest.fixture(scope="session")
def jpeg_tree(tmp_path_factory) -> Path:
    """A tiny ImageFolder tree of 16 px JPEGs: 32 training images (3 classes), 6 validation images."""
    root = tmp_path_factory.mktemp("jpeg_tree")
    write_image_tree(root, {"train": {"a": 12, "b": 12, "c": 8}, "val": {"a": 2, "b": 2, "c": 2}}, 16, ".jpg")
    return root


@pytest.fixture(scope="session", autouse=True)
def single_thread():
    """torch on one thread for the whole session: tiny in-process runs on a busy machine are several times faster
    without OpenMP threads waiting for each other (child processes get OMP_NUM_THREADS=1 already, and so do
    the CPU jobs that :mod:`tutorial_lib.jobs` starts). Session-wide, so that a module's reference run (set up
    before any function-scoped fixture) and the test's own run sum in the same order: exactness tests compare
    them to 1e-6."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
