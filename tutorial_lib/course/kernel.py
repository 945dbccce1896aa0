"""The course's Jupyter kernel: its sockets encrypted (CurveZMQ) whichever client starts it, and the memory it may use.

ipykernel logs "Kernel is running over TCP without encryption" at every start unless the kernel manager gives it
CurveZMQ keys, and jupyter_client's manager does so only when told (``KernelManager.transport_encryption``,
off by default), which papermill, nbclient and nbval never do. The kernelspec, though, is read by every client
(papermill, nbclient, nbval, JupyterLab), and it may name the provisioner that launches the kernel:
``make setup`` installs the virtualenv's ``python3`` kernelspec (:func:`install`) naming
:class:`CurveProvisioner` (the ``jupyter_client.kernel_provisioners`` entry point ``tutorial-curve`` in
pyproject.toml), which asks for the keys wherever libzmq has CurveZMQ and jupyter_client can provision them.

    python -m tutorial_lib.course.kernel        # (re)install the kernelspec into this Python's prefix
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from jupyter_client.provisioning import LocalProvisioner

PROVISIONER_NAME = "tutorial-curve"  # the entry point's name in pyproject.toml
DISPLAY_NAME = "Python 3 (tutorial)"


class CurveProvisioner(LocalProvisioner):
    """The local provisioner, asking jupyter_client for CurveZMQ keys where it can provision them (a manager
    configured otherwise, e.g. ``transport_encryption = "required"``, keeps its own policy)."""

    async def pre_launch(self, **kwargs):
        """Launch as :class:`LocalProvisioner` does, with ``transport_encryption="auto"`` when the manager
        left it disabled and libzmq has CurveZMQ (``auto``: keys only if the kernelspec declares support)."""
        import zmq

        manager = self.parent
        knows_encryption = hasattr(manager, "_transport_encryption_policy")  # jupyter_client >= 8.7
        if knows_encryption and zmq.has("curve") and manager.transport_encryption == "disabled":
            kwargs.setdefault("transport_encryption", "auto")
        return await super().pre_launch(**kwargs)


def install(prefix: str | None = None) -> Path:
    """Install the ``python3`` kernelspec of this Python into ``prefix`` (default: ``sys.prefix``, the
    virtualenv), launched by :class:`CurveProvisioner`; return its kernel.json."""
    from ipykernel.kernelspec import install as install_ipykernel

    folder = Path(install_ipykernel(kernel_name="python3", display_name=DISPLAY_NAME, prefix=prefix or sys.prefix))
    spec_file = folder / "kernel.json"
    spec = json.loads(spec_file.read_text())
    spec.setdefault("metadata", {})["kernel_provisioner"] = {"provisioner_name": PROVISIONER_NAME, "config": {}}
    spec_file.write_text(json.dumps(spec, indent=1))
    return spec_file


# what a notebook's kernel maps beyond this process (threads' stacks and allocator arenas, ipykernel, matplotlib):
# under a 6 GiB address-space limit 02's kernel had 1.92 GB left at its fourth cell, the course process 3.10 GB (r43ac)
KERNEL_EXTRA_MAPPED = 1_500_000_000


def kernel_available_bytes() -> int:
    """The memory a notebook's kernel can allocate: the host's available memory, less under an address-space limit
    (``ulimit -v``), which the kernel inherits and of which it maps more than this process
    (:data:`KERNEL_EXTRA_MAPPED`; r43ac: 02 was refused in a cell, naming the API's ``size``)."""
    import psutil

    from tutorial_lib.engine.memory import address_space_left

    left = address_space_left()
    limited = left < 2**63 - 1
    return min(int(psutil.virtual_memory().available), max(0, left - KERNEL_EXTRA_MAPPED) if limited else left)


if __name__ == "__main__":
    print(f"kernelspec: {install()}")
