"""The course kernel's sockets are encrypted whichever client starts it: no "running over TCP without
encryption" warning under papermill, nbclient or nbval (JupyterLab starts kernels through the same
jupyter_client manager and kernelspec).

The kernelspec and the provisioner's entry point are what ``make setup`` installs (``python -m
tutorial_lib.course.kernel``, ``pip install -e .``); here they go into a prefix and a path entry of the
test's own, so the shared virtualenv is left as it is.
"""

from __future__ import annotations

import os
import subprocess
import sys

import nbformat
import pytest

from tutorial_lib import REPO_ROOT
from tutorial_lib.course import kernel

WARNING = "without encryption"


def _tiny_notebook(path):
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(6 * 7)")])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(notebook, path)
    return path


@pytest.fixture
def kernelspec_as_installed(tmp_path, monkeypatch):
    """JUPYTER_PATH leading to the kernelspec :func:`kernel.install` writes; the provisioner's entry point, read
    from pyproject.toml, registered as pip registers it (a dist-info folder on sys.path)."""
    import zmq
    from jupyter_client.provisioning.factory import KernelProvisionerFactory

    tomllib = pytest.importorskip("tomllib")
    if not zmq.has("curve"):
        pytest.skip("this libzmq has no CurveZMQ: the kernel cannot be encrypted here")
    points = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    target = points["jupyter_client.kernel_provisioners"][kernel.PROVISIONER_NAME]
    site = tmp_path / "site"
    dist = site / "tutorial_kernel_entry-0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: tutorial-kernel-entry\nVersion: 0\n")
    (dist / "entry_points.txt").write_text(f"[jupyter_client.kernel_provisioners]\n"
                                           f"{kernel.PROVISIONER_NAME} = {target}\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]))
    prefix = tmp_path / "prefix"
    kernel.install(prefix=str(prefix))
    monkeypatch.setenv("JUPYTER_PATH", str(prefix / "share" / "jupyter"))
    KernelProvisionerFactory.clear_instance()  # it read the entry points once; read them again now
    yield prefix
    KernelProvisionerFactory.clear_instance()


def test_papermill_and_nbclient_run_the_course_kernel_without_the_plain_tcp_warning(tmp_path, capfd,
                                                                                     kernelspec_as_installed):
    import nbclient
    import papermill

    source = _tiny_notebook(tmp_path / "tiny.ipynb")
    papermill.execute_notebook(str(source), str(tmp_path / "out.ipynb"), progress_bar=False)
    executed = nbformat.read(tmp_path / "out.ipynb", as_version=4)
    assert executed.cells[0].outputs[0]["text"] == "42\n"
    assert WARNING not in str(executed)
    captured = capfd.readouterr()
    assert WARNING not in captured.out + captured.err
    executed = nbclient.NotebookClient(nbformat.read(source, as_version=4)).execute()
    assert executed.cells[0].outputs[0]["text"] == "42\n"
    captured = capfd.readouterr()
    assert WARNING not in captured.out + captured.err + str(executed)
    # the check can fail: the kernelspec as plain `ipykernel install` writes it brings the warning back
    from ipykernel.kernelspec import install

    install(kernel_name="python3", prefix=str(tmp_path / "plain"))
    os.environ["JUPYTER_PATH"] = str(tmp_path / "plain" / "share" / "jupyter")  # monkeypatch restores it
    papermill.execute_notebook(str(source), str(tmp_path / "plain.ipynb"), progress_bar=False)
    captured = capfd.readouterr()
    assert WARNING in captured.out + captured.err


def test_nbval_runs_the_course_kernel_without_the_plain_tcp_warning(tmp_path, kernelspec_as_installed):
    source = _tiny_notebook(tmp_path / "tiny.ipynb")
    result = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--nbval-lax", "-q",
                             str(source)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout and WARNING not in result.stdout + result.stderr
