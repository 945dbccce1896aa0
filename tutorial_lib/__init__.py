"""tutorial_lib: the helper library behind the fast distributed ImageNet training course.

Subpackages: ``engine`` (the training program), ``rundir`` (the run-directory contract), ``data`` (ImageNet as
users have it), ``jobs`` (submit and follow jobs), ``bench`` (speed measurements), ``scaling`` (the step-time model),
``param_server`` (the stale-synchronous trainer), ``text`` (sentences from numbers), ``figures`` (plots, the live
monitor), ``analyses`` (what the notebooks analyse), ``course`` (running the course). docs/layout.md has the layers.
"""

from pathlib import Path

__version__ = "0.1.0"

REPO_ROOT = Path(__file__).resolve().parent.parent  # the checkout (notebooks/, cluster_scripts/ live here)


def free_port() -> int:
    """A TCP port that was free a moment ago on this machine (for a rendezvous or a test server)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
