"""Which process the project started: a pid proven by its start time and command line, as recorded at start.

A pid alone names whatever program has it now (pids are reused), so the local backend records three things when
it starts a process (:func:`identity`): the pid, its start time (clock ticks since boot,
:func:`tutorial_lib.rundir.lock.process_start`) and its command line. A signal goes only to a process whose
record has all three and that still matches them (:func:`signal_proven`); a record without that proof is refused
(:func:`proof_problem` says what is missing), and nothing is signalled. Matching its record is not enough: a
record can be forged to name a stranger's process, so a signal also needs the process to be the project's for that
run directory (:func:`started_for`).
"""

from __future__ import annotations

import os
import signal

import psutil

from tutorial_lib.jobs.record import RUN_DIR_ENV
from tutorial_lib.rundir.lock import is_pid, process_start

SUPERVISOR_MODULE = "tutorial_lib.jobs.supervisor"  # run as ``python -m tutorial_lib.jobs.supervisor RUN_DIR``


def identity(pid: int) -> dict | None:
    """``{"pid", "start", "cmdline"}`` of the running process ``pid`` now; None if it is gone or unreadable."""
    try:
        process = psutil.Process(int(pid))
        cmdline = process.cmdline()
    except (psutil.Error, ValueError):
        return None
    start = process_start(pid)
    return None if start is None else {"pid": int(pid), "start": start, "cmdline": cmdline}


def proof_problem(recorded) -> str | None:
    """What a record lacks to prove which process it names (None: pid, start time and command line are there)."""
    if not isinstance(recorded, dict) or not is_pid(recorded.get("pid")):
        return "no process id"
    missing = [what for key, what in (("start", "start time"), ("cmdline", "command line"))
               if not recorded.get(key)]
    return f"pid {recorded['pid']} without its {' and '.join(missing)}" if missing else None


def started_for(recorded, run_dir) -> bool:
    """Whether the live process that ``recorded`` names was started by the project for ``run_dir``: a supervisor
    by its command line (``-m tutorial_lib.jobs.supervisor RUN_DIR``), an agent by the run directory in its
    environment (``TUTORIAL_RUN_DIR``, which the supervisor gives every agent)."""
    if not isinstance(recorded, dict) or not is_pid(recorded.get("pid")):
        return False
    try:
        process = psutil.Process(recorded["pid"])
        cmdline = process.cmdline()
        if cmdline[1:3] == ["-m", SUPERVISOR_MODULE]:
            named = cmdline[3] if len(cmdline) == 4 else ""
        else:
            named = process.environ().get(RUN_DIR_ENV, "")
        return bool(named) and os.path.realpath(named) == os.path.realpath(run_dir)
    except (psutil.Error, KeyError, TypeError, ValueError, OverflowError):
        return False


def runs(recorded, run_dir=None) -> bool:
    """Whether the recorded process still runs: its pid with the recorded start time (and command line, where
    recorded), and, given ``run_dir``, started for it (:func:`started_for`). A pid without a start time proves
    nothing: False."""
    if not isinstance(recorded, dict) or not is_pid(recorded.get("pid")) or recorded.get("start") is None:
        return False
    if run_dir is not None and not started_for(recorded, run_dir):
        return False
    now = identity(recorded["pid"])
    if now is None or now["start"] != recorded["start"]:
        return False
    try:
        if psutil.Process(now["pid"]).status() == psutil.STATUS_ZOMBIE:  # ended, not yet reaped
            return False
    except psutil.Error:
        return False
    return not recorded.get("cmdline") or now["cmdline"] == list(recorded["cmdline"])


def signal_proven(recorded, sig: int, run_dir, group: bool = False) -> bool:
    """Send ``sig`` to the recorded process (``group``: to its process group, which it leads) if its record
    proves it is the one the project started for ``run_dir`` and it still runs; True if sent. Anything else is
    left alone."""
    if proof_problem(recorded) is not None or not runs(recorded, run_dir):
        return False
    try:
        if group:
            os.killpg(recorded["pid"], sig)
        else:
            os.kill(recorded["pid"], sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def kill_tree(recorded, run_dir) -> bool:
    """SIGKILL the recorded process's group and every process under it (torchrun starts its ranks in sessions of
    their own), if the record proves the process is the one the project started for ``run_dir``; True if it was."""
    if proof_problem(recorded) is not None or not runs(recorded, run_dir):
        return False
    try:
        below = psutil.Process(recorded["pid"]).children(recursive=True)  # each with its own start time
    except psutil.Error:
        below = []
    signal_proven(recorded, signal.SIGKILL, run_dir, group=True)
    for process in below:
        try:
            process.kill()  # psutil checks that the pid is still that very process
        except psutil.Error:
            pass
    return True
