"""How every command of the project ends: the documented exit statuses, and one line for what is not a bug.

Every entry point (``python -m tutorial_lib.train``, ``.data``, ``.evaluate``, ``.rundir``, ``.course``,
``.jobs.netlab``, ``.bench``) runs its work through :func:`run_main`: a user's mistake or a fault of the
environment (a refused value, a missing, unreadable or torn file, a full disk, Ctrl-C, a second run at the
same time) ends in one line on stderr naming the field or the path and the fix, with its exit status below;
only a bug of the project shows a traceback (Python's status 1). No torch import here: the data tool
starts without torch.
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import re
import sys
import traceback
from collections.abc import Callable

from tutorial_lib.paths import path_problem

EXIT_OK = 0  # done
EXIT_ERROR = 1  # the environment failed while working (disk full, quota, read-only, I/O error), or a bug
EXIT_REFUSED = 2  # bad input: a value, a path, a file, a folder in use; nothing was done (or nothing more)
EXIT_DIVERGED = 3  # the trainer only: the loss became NaN/inf, stopped without saving
EXIT_STOPPED = 75  # the trainer only: stopped on request with a checkpoint saved; run again to resume
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT, as shells report it); run the command again

EXIT_STATUSES = {
    EXIT_OK: "done",
    EXIT_ERROR: "the environment failed while working (disk full, read-only, I/O error; one line), or a bug "
                "of the project (a traceback)",
    EXIT_REFUSED: "refused: a bad value, a missing, unreadable, torn or foreign file or folder, a folder in use "
                  "by another run (one line naming the field or path and the fix)",
    EXIT_DIVERGED: "the trainer's loss became NaN or infinite: stopped without saving (one line)",
    EXIT_STOPPED: "the trainer stopped on request, checkpoint saved: run again to resume",
    EXIT_INTERRUPTED: "interrupted by Ctrl-C (one line): run the command again",
}

# errno of a fault of the machine rather than of the path the user gave
_ENVIRONMENT_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.ENOMEM, errno.EMFILE, errno.ENFILE}
_FIXES = {
    errno.ENOSPC: "free space there (or write elsewhere) and run again",
    errno.EDQUOT: "free space within your quota (or write elsewhere) and run again",
    errno.EROFS: "choose a folder on a writable file system",
    errno.EACCES: "give yourself the permission on that path (chmod), or choose another path",
    errno.EPERM: "give yourself the permission on that path (chmod), or choose another path",
    errno.ENOENT: "check the path (it must exist; `~` and variables are expanded only where documented)",
    errno.ENOTDIR: "check the path: a part of it is a file, not a folder",
    errno.EISDIR: "pass a file there, not a folder",
    errno.ELOOP: "the path is a loop of symbolic links: pass the real path",
    errno.ENAMETOOLONG: "use a shorter path",
    errno.ENXIO: "pass a regular file or folder, not a FIFO or device",
}
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def one_line(text: str, limit: int = 2000) -> str:
    """``text`` as one line: line breaks and tabs become spaces, other control characters are escaped
    (a hostile path cannot forge further lines), cut to about ``limit`` characters in the middle, where a long
    value sits: the start (the field) and the end (the fix) are kept."""
    text = str(text)
    if "Original Traceback" in text:  # re-raised from a DataLoader worker: keep the worker's own message
        text = text.rstrip().splitlines()[-1].split(": ", 1)[-1]
    text = " ".join(text.replace("\r", " ").replace("\t", " ").split("\n"))
    text = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
    return cut_middle(re.sub(r" {2,}", " ", text).strip(), limit)


def cut_middle(text: str, limit: int = 2000) -> str:
    """``text`` cut to about ``limit`` characters in its middle, where a long value sits in a message: the start
    (the field) and the end (the fix) are kept, and the line says how much was cut."""
    if len(text) <= limit:
        return text
    head, tail = limit * 2 // 3, limit // 3 - 40
    return f"{text[:head]} ... ({len(text) - head - tail:,} characters cut) ... {text[-tail:]}"


def _short_repr(path: str, limit: int = 200) -> str:
    """``repr(path)``, its middle cut when longer than ``limit`` (a path of 1 MB stays one readable line)."""
    text = repr(path)
    return text if len(text) <= limit else f"{text[:limit // 2]}...{text[-limit // 4:]} ({len(path):,} characters)"


def describe_os_error(exc: OSError) -> tuple[int, str]:
    """The exit status and the one-line message for an OSError: the path, the cause and the fix."""
    paths = [_short_repr(os.fsdecode(p)) for p in (exc.filename, exc.filename2) if p is not None]
    where = f"{' -> '.join(paths)}: " if paths else ""
    cause = exc.strerror or str(exc) or type(exc).__name__
    code = f" (errno {exc.errno})" if exc.errno else ""
    fix = _FIXES.get(exc.errno, "check that path and the machine, then run again")
    status = EXIT_ERROR if exc.errno in _ENVIRONMENT_ERRNOS else EXIT_REFUSED
    return status, f"{where}{cause}{code}. Fix: {fix}."


def check_path_arguments(read: dict[str, object] | None = None, written: dict[str, object] | None = None) -> None:
    """Refuse a command's path argument that no file system call can take (:func:`tutorial_lib.paths.
    path_problem`: its text, a symbolic link loop; a control character only in the ``written`` ones), naming its
    flag or metavar: the
    OSError the file system would give names the path but not which argument (r43n: ``prepare SOURCE DEST``).
    Raises ``SystemExit("FLAG: ...")``, one line and :data:`EXIT_REFUSED` under :func:`run_main`."""
    for paths, is_written in ((read or {}, False), (written or {}, True)):
        for flag, value in paths.items():
            if not isinstance(value, str):  # an optional argument left out
                continue
            problem = path_problem(value, written=is_written)
            if problem is not None:
                raise SystemExit(f"error: {flag}: {_short_repr(value)} {problem[0]}. Fix: {problem[1]}.")


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser, its error line cut in the middle where a value is long: argparse echoes a value as given
    (r43s: a 1 MB ``--device`` printed a 1 MB line), and the flag and the choices must survive."""

    def error(self, message: str):
        """Usage, then one line (at most 500 characters) naming the flag; exit :data:`EXIT_REFUSED`."""
        self.print_usage(sys.stderr)
        self.exit(EXIT_REFUSED, f"{self.prog}: error: {one_line(message, 500)}\n")


def _print(message: str) -> None:
    line = one_line(message)
    if line.startswith("error: "):
        line = line[len("error: "):]
    try:
        print(f"error: {line}", file=sys.stderr, flush=True)
    except (OSError, ValueError):  # stderr closed or a broken pipe: the status still says it
        pass


_skip_finalizing = False


def skip_finalizing() -> None:
    """Make this process end with ``os._exit`` once its command's status is known (:func:`finish`): no
    interpreter finalization, whose garbage collection can deadlock in a gloo process group's destructor
    (:func:`tutorial_lib.compat.leave_process_group`)."""
    global _skip_finalizing
    _skip_finalizing = True


def finish(status: int) -> int:
    """``status``; where :func:`skip_finalizing` was asked, stdout, stderr and logging flushed and the process
    ended here with ``status`` instead (what a command writes is on disk before: each file is closed after its
    write)."""
    if _skip_finalizing:
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError, AttributeError):  # closed, or a broken pipe: nothing more to say
                pass
        os._exit(status)
    return status


def run_main(body: Callable[[], int | None], *, refused: tuple[type[BaseException], ...] = (),
             statuses: dict[type[BaseException], int] | None = None) -> int:
    """Run a command's ``body`` and return its exit status (``None`` counts as :data:`EXIT_OK`); the process
    ends here instead where the body asked to skip finalizing (:func:`finish`).

    ``refused``: the command's own error classes for bad input (one line, :data:`EXIT_REFUSED`);
    ``statuses``: other error classes with their own status (the trainer's divergence, a failed save).
    An OSError names its path and cause (:data:`EXIT_ERROR` for a full disk, a read-only or failing
    file system, :data:`EXIT_REFUSED` for a path that is missing, unreadable, not a folder...); Ctrl-C is
    :data:`EXIT_INTERRUPTED`; argparse's own exit and ``SystemExit("message")`` keep one line and a status.
    Anything else is a bug of the project: it propagates with its traceback."""
    try:
        status = _status_of(body, refused, dict(statuses or {}))
    except BaseException:
        if _skip_finalizing:  # the traceback, then the status Python gives an uncaught exception
            traceback.print_exc()
            finish(EXIT_ERROR)
        raise
    return finish(status)


def _status_of(body: Callable[[], int | None], refused: tuple[type[BaseException], ...],
               statuses: dict[type[BaseException], int]) -> int:
    try:
        status = body()
    except KeyboardInterrupt:
        _print("interrupted (Ctrl-C); what was completed is kept. Fix: run the same command again (a training run "
               "resumes from its checkpoint, prepare from the images it finished).")
        return EXIT_INTERRUPTED
    except SystemExit as exc:  # argparse (usage already printed) or a command's SystemExit("error: ...")
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or EXIT_OK
        _print(str(exc.code))
        return EXIT_REFUSED
    except BaseException as exc:  # noqa: BLE001 - sorted below; anything unknown is re-raised
        for kind, code in statuses.items():
            if isinstance(exc, kind):
                _print(str(exc))
                return code
        if isinstance(exc, refused):
            _print(str(exc))
            return EXIT_REFUSED
        if isinstance(exc, BrokenPipeError):  # `... | head`: the reader left, nothing to say
            return EXIT_ERROR
        if isinstance(exc, MemoryError):  # the machine's memory, not the program: one line
            _print(f"out of memory ({exc or 'MemoryError'}). Fix: ask for less (a smaller batch, image or data "
                   "size), or run where there is more memory.")
            return EXIT_ERROR
        if isinstance(exc, OSError):
            code, message = describe_os_error(exc)
            _print(message)
            return code
        raise
    return EXIT_OK if status is None else int(status)
