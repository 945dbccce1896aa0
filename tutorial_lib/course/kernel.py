"""The course's Jupyter kernel: its sockets encrypted (CurveZMQ) whichever client starts it.

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


if __name__ == "__main__":
    print(f"kernelspec: {install()}")
