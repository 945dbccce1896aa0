"""The stop protocol: a STOP file or SIGUSR1/SIGTERM asks a trainer to finish its step, checkpoint and exit.

:class:`StopRequest` turns the signals into a flag every rank agrees on at the next check, and a watchdog
ends a trainer that cannot reach a safe point; :func:`launcher_owns_stop_file` says whether a launcher
(train.sbatch, the local supervisor) manages the ``STOP`` file, so the trainer must not delete it.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

# The trainer's exit statuses (python -m tutorial_lib.train; through torchrun every non-zero one becomes 1), from the
# one table of every command's statuses (tutorial_lib.exits): 0 trained to `epochs` (DONE written); 1 a crash, a
# failed save, or a stop request that could not reach a safe point (the watchdog below); 2 bad input, nothing trained;
# 3 the loss became NaN/inf (stopped without saving, the last checkpoint kept); 75 stopped on request, checkpoint
# saved: run again to resume (75 = EX_TEMPFAIL, "try again later")
from tutorial_lib.engine.errors import ConfigError, shorten
from tutorial_lib.exits import EXIT_DIVERGED, EXIT_ERROR, EXIT_REFUSED, EXIT_STOPPED  # noqa: F401 (re-exported)
from tutorial_lib.exits import EXIT_OK as EXIT_COMPLETED  # noqa: F401
from tutorial_lib.rundir.layout import STOP_FILE

STOP_GRACE_ENV = "TUTORIAL_STOP_GRACE_S"
DEFAULT_STOP_GRACE_S = 20.0  # below Slurm's default KillWait (30 s): the message and LOCK release come before SIGKILL


MOST_STOP_GRACE_S = 3600.0  # Slurm's KillWait is seconds to minutes: an hour is a wait no stop means


def stop_grace_s(environ=os.environ) -> float:
    """:data:`STOP_GRACE_ENV` in seconds (default :data:`DEFAULT_STOP_GRACE_S`); ConfigError naming it where it is no
    number of seconds from 0 to an hour (r43t: ``abc`` killed the watchdog thread and the run went on without it)."""
    text = environ.get(STOP_GRACE_ENV) or ""
    if not text:
        return DEFAULT_STOP_GRACE_S
    try:
        grace = float(text)
    except ValueError:
        grace = math.nan
    if not 0 <= grace <= MOST_STOP_GRACE_S:  # NaN fails too
        raise ConfigError(f"{STOP_GRACE_ENV}: {shorten(text)} is not a number of seconds from 0 to "
                          f"{MOST_STOP_GRACE_S:g}. Fix: e.g. {STOP_GRACE_ENV}=20, or unset it for the default.")
    return grace


@dataclass
class StopRequest:
    """Set by SIGUSR1/SIGTERM or a STOP file; all ranks agree on it at the next check.

    A watchdog thread also sees the request: if the trainer then makes no progress (no batch, no
    checkpoint) for ``TUTORIAL_STOP_GRACE_S`` seconds (default 20), e.g. because a read never returns,
    it says so, calls ``on_give_up`` (release the lock) and ends the process with :data:`EXIT_ERROR`. A signal
    alone cannot: Python runs its handler and goes back into the blocked system call.
    """

    run_dir: Path
    signalled: bool = False
    reason: str = ""
    previous: dict = field(default_factory=dict)
    on_give_up: object = None
    last_progress: float = field(default_factory=time.monotonic)
    grace: float = field(default_factory=lambda: stop_grace_s())  # read here, in the main thread, not by the watchdog
    _ended: threading.Event = field(default_factory=threading.Event)

    def install(self) -> None:
        """Turn SIGUSR1 and SIGTERM into a graceful stop request (until :meth:`uninstall`)."""
        for sig in (signal.SIGUSR1, signal.SIGTERM):
            self.previous[sig] = signal.signal(sig, self._on_signal)
        self._ended.clear()
        self.progress()
        threading.Thread(target=self._watch, name="stop-watchdog", daemon=True).start()

    def uninstall(self) -> None:
        """Give the signals back to whoever handled them before (a notebook kernel, pytest)."""
        self._ended.set()
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        self.previous.clear()

    def progress(self) -> None:
        """Note that the trainer is still working (a batch done): the watchdog measures from here."""
        self.last_progress = time.monotonic()

    def _on_signal(self, signum, _frame) -> None:
        self.signalled, self.reason = True, signal.Signals(signum).name

    def local(self) -> bool:
        """True if this process was asked to stop."""
        if not self.signalled and (self.run_dir / STOP_FILE).exists():
            self.reason = "STOP file"
            return True
        return self.signalled

    def _watch(self) -> None:
        grace = self.grace
        asked = None
        while not self._ended.wait(0.25 if asked else 1.0):
            if asked is None:
                if self.signalled or (self.run_dir / STOP_FILE).exists():
                    asked = time.monotonic()
                continue
            if time.monotonic() - max(asked, self.last_progress) > grace:
                self._give_up(grace)

    def _give_up(self, grace: float) -> None:
        print(f"error: a stop was requested ({self.reason or 'STOP file'}) but the trainer did not reach a safe "
              f"point within {grace:g} s (a read or collective that never returns?); exiting without a new "
              f"checkpoint, the last one is kept. Fix: look for a file or mount that blocks; {STOP_GRACE_ENV} "
              "sets this wait.", file=sys.stderr, flush=True)
        try:
            if callable(self.on_give_up):
                self.on_give_up()
            for child in multiprocessing.active_children():  # DataLoader workers may be the ones blocked
                child.kill()
        finally:
            os._exit(EXIT_ERROR)


def launcher_owns_stop_file(run_dir: Path) -> bool:
    """True when a launcher (train.sbatch, the local supervisor) manages ``run_dir/STOP``.

    It clears a stale file before starting the ranks, so a STOP present now is this run's request
    (e.g. Slurm's warning signal arrived while the ranks were still starting): honour it, never delete it.
    """
    owned = os.environ.get("TUTORIAL_STOP_FILE")
    return bool(owned) and Path(owned).resolve() == (Path(run_dir) / STOP_FILE).resolve()
