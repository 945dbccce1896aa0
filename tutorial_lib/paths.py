"""How the project reads a path a user typed: ``~`` and ``~user`` expanded, the same way in every setting; and
what a path is before a record is opened there (:func:`not_a_file`: a named pipe would block the reader).

A shell expands ``~`` only at the start of an unquoted word, so ``--output-root "~"``, a YAML
``output_root: ~/runs`` or a notebook parameter arrive as a literal ``~``; without this, a folder named ``~``
would appear in the working directory. No torch here (the data tool uses it too).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"))


def user_path(value: str | os.PathLike) -> str:
    """``value`` with a leading ``~`` or ``~user`` expanded (everything else unchanged, '' stays '')."""
    text = os.fspath(value)
    return os.path.expanduser(text) if text.startswith("~") else text


SYSTEM_FOLDERS = ("/", "/proc", "/sys", "/dev")  # never a place for the project's files: the root, the kernel's trees
STAGING_RAM_DISK = "/dev/shm"  # the one folder under them a node may stage into (a RAM disk many clusters offer)


def system_folder(path: str | os.PathLike, allowed: tuple[str, ...] = ()) -> str | None:
    """Which of :data:`SYSTEM_FOLDERS` ``path`` (``~`` expanded, resolved) is or lies under ('/' only for the root
    itself), unless it is or lies under one of ``allowed``: the kernel's trees accept no files even from root,
    whose write permission ``os.access`` always grants, and /dev lives in memory."""
    target = Path(os.path.realpath(user_path(path)))  # no error on a link loop
    if any(target == Path(place) or Path(place) in target.parents for place in allowed):
        return None
    return next((root for root in SYSTEM_FOLDERS if target == Path(root) or Path(root) in target.parents
                 and root != "/"), None)


def in_system_folder(path: str | os.PathLike, allowed: tuple[str, ...] = ()) -> str | None:
    """``is the root folder`` or ``is under /dev`` (:func:`system_folder`) for a message; None if it is neither."""
    system = system_folder(path, allowed)
    return None if system is None else "is the root folder" if system == "/" else f"is under {system}"


def not_a_file(path: str | os.PathLike) -> str | None:
    """What ``path`` is where the project reads a record as a regular file (``a named pipe``, ``a folder``, ``a
    link to nothing``...); None if it is a regular file or absent. Only stat() is used: opening a named pipe
    would block until someone writes to it."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "a link to nothing" if os.path.islink(path) else None
    except OSError as exc:  # a link to itself, a name too long
        return f"unreadable ({exc.strerror or exc})"
    if stat.S_ISREG(mode):
        return None
    return next((what for test, what in _KINDS if test(mode)), "not a file")


PATH_MAX = 4096  # Linux's longest path (PATH_MAX); a longer value can never name a file or folder
NAME_MAX = 255  # bytes in one file or folder name (Linux's NAME_MAX, every common file system)


def path_text_problem(value: str, written: bool = True) -> tuple[str, str] | None:
    """What is wrong with ``value`` as a path, found in its text before any file system call: (the problem, the
    fix), or None. Longer than any path, or a name over NAME_MAX bytes (the file system would only say "File name
    too long", naming the path but not the setting or flag); where the project writes there (``written``), a
    control character too (a newline makes a folder no one can type, and splits the lines that name it)."""
    if len(value) > PATH_MAX:
        return f"is longer than any path can be ({PATH_MAX} characters)", "pass a shorter path"
    longest = max(len(part.encode(errors="surrogateescape")) for part in value.split("/"))
    if longest > NAME_MAX:
        return (f"has a name of {longest} bytes, and a file or folder name holds at most {NAME_MAX}",
                "pass a path with shorter names")
    odd = next((c for c in value if not c.isprintable()), None) if written else None
    if odd is not None:
        return f"contains the control character {odd!r}", "pass a path without one"
    return None


LOOP_REASON = "a symbolic link on the way leads back to itself"  # and its fix: one wording wherever a loop is met
LOOP_FIX = "remove the symbolic link loop, or pass another path"


def resolve_problem(value: str | os.PathLike) -> tuple[str, str] | None:
    """What stops ``value`` (``~`` expanded) from being resolved to a real path: (the problem, the fix), or None. A
    symbolic link loop on the way raises RuntimeError in ``Path.resolve`` before Python 3.13 and OSError (ELOOP)
    after: a traceback from ``jobs.submit`` and ``course --out``, "does not exist" or a mark file blamed (r43p,
    r43q)."""
    try:
        Path(os.path.expanduser(value)).resolve()
    except (OSError, RuntimeError) as exc:
        return f"cannot be followed ({getattr(exc, 'strerror', None) or LOOP_REASON})", LOOP_FIX
    except ValueError:  # r43x: a NUL in a TrainConfig built without make_config reached jobs.submit
        return "holds a NUL character, which no file name can", "use a path of printable characters"
    return None


def way_problem(value: str | os.PathLike) -> tuple[str, str] | None:
    """What stops a path the project writes (``~`` expanded) on its way there: a symbolic link that leads nowhere,
    or a file where a folder must be; (the problem, the fix), or None. Writing through a dangling link would make
    its target, wherever it points (r43r: ``jobs.submit`` ran a job in it); a file on the way gave "File exists"
    or "Not a directory", naming no setting (r43s: ``bench loader --data-dir link-to-a-file/x``)."""
    # component by component as the kernel walks it: abspath would drop ``link/..`` before the link is seen (r43s)
    path = Path(os.getcwd(), os.path.expanduser(value))
    part = Path(path.anchor)
    names = path.parts[1:]
    for index, name in enumerate(names):
        part = part / name
        try:
            dangling, blocking = part.is_symlink() and not part.exists(), part.exists() and not part.is_dir()
        except OSError:  # a folder on the way that this user may not search: what opens the path says so
            return None
        if dangling:
            try:
                target = os.readlink(part)
            except OSError:
                target = "?"
            return (f"leads through the symbolic link {part} to {target!r}, which does not exist",
                    "create that folder, remove the link, or pass another path")
        if blocking and index < len(names) - 1:
            return (f"leads through {part}, which is a file, not a folder", "pass a path whose folders are folders")
    return None


def path_problem(value: str, written: bool = True) -> tuple[str, str] | None:
    """:func:`path_text_problem`, then :func:`resolve_problem`, and where the project writes (``written``)
    :func:`way_problem`: what is wrong with ``value`` as a path before it is used, or None."""
    return (path_text_problem(value, written) or resolve_problem(value)
            or (way_problem(value) if written else None))
