"""What only the teaching size shows: the DDP job that notebooks 03, 05 and 06 present as learning learns.

Under nbval the notebooks run on tests/nbval_params.yaml (a few steps: every cell and code path, no learning);
`make tutorial` runs them on their parameters cells' defaults. Those three notebooks train one and the same DDP
recipe (3 whole epochs of the digits at 16 px, 2 ranks, global batch 64, base LR 0.8 with a 1-epoch warmup), so
it is trained here once, from the defaults read out of the notebooks themselves, and must learn as their text
says (README: 92.8-96.4% top-1 in six runs on the 2-core development machine).
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json

import pytest

from tutorial_lib import course
from tutorial_lib.analyses import analysis
from tutorial_lib.course import plans

# The DDP job of each notebook at teaching size: (notebook stem, planned job name)
DDP_JOBS = [("03_ddp_one_node", "03-ddp-2w"), ("05_multi_node_slurm", "05-multinode"),
            ("06_scaling_study", "06-scale-ranks_per_node2")]
TOP1_FLOOR = 90.0  # % top-1: the DDP job the notebooks present as learning (their parameters cells point here)


def teaching_defaults(stem: str) -> dict:
    """The notebook's parameters cell as values: what `make tutorial` runs (papermill's defaults)."""
    notebook = next(p for p in course.notebooks() if p.stem == stem)
    cell = next(c for c in json.loads(notebook.read_text())["cells"]
                if "parameters" in c.get("metadata", {}).get("tags", []))
    return {target.id: ast.literal_eval(statement.value) for statement in ast.parse("".join(cell["source"])).body
            if isinstance(statement, ast.Assign) for target in statement.targets}


def teaching_job(stem: str, name: str, output_root, data_dir) -> plans.Planned:
    """The notebook's job ``name`` as its plan builds it from the teaching defaults, on CPU ranks of this machine."""
    build = plans.for_notebook(stem)
    params = {**teaching_defaults(stem), "output_root": str(output_root), "data_dir": str(data_dir), "gpus": 0,
              "backend": "local"}
    accepted = inspect.signature(build).parameters
    plan = build(**{key: value for key, value in params.items() if key in accepted})
    return plan[name]


def _recipe(job: plans.Planned) -> dict:
    fields = dataclasses.asdict(job.config)
    fields.pop("name")
    return {**fields, "world_size": job.nodes * job.ranks_per_node}


def test_the_ddp_jobs_of_03_05_06_train_one_recipe(tmp_path):
    """One run stands for the three notebooks only while their DDP jobs are the same training recipe."""
    recipes = {stem: _recipe(teaching_job(stem, name, tmp_path, tmp_path / "digits16")) for stem, name in DDP_JOBS}
    reference = recipes["03_ddp_one_node"]
    assert reference["world_size"] == 2 and reference["epochs"] == 3 and reference["max_steps_per_epoch"] == 0
    for stem, fields in recipes.items():
        differ = {key: (reference[key], value) for key, value in fields.items() if reference[key] != value}
        assert not differ, f"{stem}'s DDP job is no longer 03's recipe ({differ}): train it here too"


@pytest.mark.notebooks
def test_the_teaching_size_ddp_job_learns(tmp_path):
    planned = teaching_job(*DDP_JOBS[0], tmp_path / "runs", tmp_path / "digits16")
    job = plans.Plan([planned], "local").submit()[planned.name]
    assert job.wait(timeout=1800) == "COMPLETED", job.logs(tail=40)
    outcome = analysis.outcome(job)
    top1 = job.metrics("epoch")["top1"].iloc[-1]
    assert outcome.verdict == "learns", outcome.sentence
    assert top1 >= TOP1_FLOOR, outcome.sentence
