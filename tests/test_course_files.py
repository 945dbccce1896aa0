"""The course material is committed clean: stripped notebooks, one parameters cell each, lint-free code."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tutorial_lib import REPO_ROOT
from tutorial_lib.lessons import course

NOTEBOOKS = course.notebooks()


def test_the_course_has_its_notebooks():
    names = [p.name[:2] for p in NOTEBOOKS]
    assert names == [f"{i:02d}" for i in range(8)], names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_stripped_and_parameterised(path):
    notebook = json.loads(path.read_text())
    cells = notebook["cells"]
    code = [c for c in cells if c["cell_type"] == "code"]
    assert all(not c.get("outputs") and c.get("execution_count") is None for c in code), "strip outputs"
    tagged = [c for c in code if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(tagged) == 1, "exactly one cell tagged 'parameters'"
    names = {t.id for stmt in ast.parse("".join(tagged[0]["source"])).body if isinstance(stmt, ast.Assign)
             for t in stmt.targets if isinstance(t, ast.Name)}
    source = "".join("".join(c["source"]) for c in code)
    if "jobs" in source:  # a notebook that starts jobs (02 starts none, and declares nothing it does not read)
        assert {"profile", "backend", "output_root"} <= names, names
    assert cells[0]["cell_type"] == "markdown", "opens with what the reader will learn"
    assert notebook["metadata"]["kernelspec"]["name"] == "python3"
    assert "course.setup_notebook()" in source
    assert f'course.summarize("{path.stem}"' in source, "closes with numbers read from its own runs"


def test_code_passes_ruff():
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    result = subprocess.run([ruff, "check", "tutorial_lib", "tests"], cwd=REPO_ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
