"""The data tool (`python -m tutorial_lib.data`): starts without torch, names agree with torchvision's."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import subprocess_env
from tutorial_lib import REPO_ROOT
from tutorial_lib.data import names


def test_the_data_tool_imports_no_torch():
    code = ("import json, sys; import tutorial_lib.data.__main__, tutorial_lib.data.prepare, tutorial_lib.data.layouts;"
            " print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'torchvision', "
            "'scipy', 'sklearn', 'pandas', 'matplotlib'))))")
    result = subprocess.run([sys.executable, "-c", code], env=subprocess_env(), cwd=REPO_ROOT, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []


def test_the_copied_constants_are_torchvisions():
    from torchvision.datasets.folder import IMG_EXTENSIONS
    from torchvision.datasets.imagenet import ARCHIVE_META

    assert names.IMG_EXTENSIONS == IMG_EXTENSIONS
    assert (names.TRAIN_TAR, names.VAL_TAR, names.DEVKIT_TAR) == tuple(ARCHIVE_META[k][0]
                                                                         for k in ("train", "val", "devkit"))


def test_the_packages_the_data_tool_imports_lazily_are_declared():
    import tomllib
    from packaging.requirements import Requirement

    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    declared = {Requirement(text).name for text in project["dependencies"]}
    assert {"scipy", "tqdm"} <= declared  # scipy reads the devkit's meta.mat, tqdm draws the progress bars
