"""The course runs unattended with non-default parameters (papermill), as an instructor would rerun it."""

from __future__ import annotations

import json

import papermill
import pytest
from notebook_checks import load_test_parameters

from tutorial_lib import course

pytestmark = pytest.mark.notebooks


def test_ddp_notebook_with_other_model_batch_and_epochs(tmp_path):
    # The scaling study's one DDP job (2 ranks) on nbval's small 06 (tests/nbval_params.yaml: batch 16, a few
    # steps), with another model and epoch count: one job where 03 starts five (nbval runs 03 and 06 as they are)
    notebook = next(p for p in course.notebooks(["06"]))
    params = {**load_test_parameters()["06_scaling_study"], "arch": "resnet34", "epochs": 1, "max_steps_per_epoch": 2,
              "scale_values": [2], "backend": "local", "output_root": str(tmp_path / "runs")}
    executed = tmp_path / notebook.name
    papermill.execute_notebook(str(notebook), str(executed), parameters=params, cwd=str(course.REPO_ROOT),
                               progress_bar=False)
    runs = sorted((tmp_path / "runs").glob("*/config.json"))
    assert runs, "the notebook started no job under the given output_root"
    configs = [json.loads(p.read_text()) for p in runs]
    assert all(c["arch"] == "resnet34" for c in configs)
    ddp = [c for c in configs if c["batch_size"] == params["batch_size"] != 32 and c["epochs"] == 1
           and c["world_size"] == 2]
    assert ddp, [(c["name"], c["batch_size"], c["epochs"]) for c in configs]
    cells = json.loads(executed.read_text())["cells"]
    injected = [c for c in cells if "injected-parameters" in c["metadata"].get("tags", [])]
    assert len(injected) == 1 and 'arch = "resnet34"' in "".join(injected[0]["source"])
