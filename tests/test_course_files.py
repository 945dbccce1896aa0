"""The course material is committed clean: stripped notebooks, one parameters cell each, lint-free code."""

from __future__ import annotations

import ast
import inspect
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tutorial_lib import REPO_ROOT, course
from tutorial_lib.course import closing

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
    # closes with numbers read from its own runs: one call of its function in course/closing.py
    called = re.search(r"closing\.(\w+)\(", "".join(code[-1]["source"]))
    assert called and f'summarize("{path.stem}"' in inspect.getsource(getattr(closing, called[1])), \
        "closes with one call of its course.closing function"


def test_code_passes_ruff():
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    result = subprocess.run([ruff, "check", "tutorial_lib", "tests"], cwd=REPO_ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_make_test_sends_the_notebooks_runs_away_from_the_course(tmp_path):
    """`make test` runs the notebooks' copies: their jobs must not replace runs/course, which the executed
    notebooks of `make tutorial` point to."""
    sys.path.insert(0, str(REPO_ROOT / "tests"))
    import notebook_checks

    copies = notebook_checks.prepare(tmp_path, browser=False)
    assert len(copies) == len(NOTEBOOKS)
    redirected = []
    for copy in copies:
        cell = next(c for c in json.loads(copy.read_text())["cells"]
                    if "parameters" in c.get("metadata", {}).get("tags", []))
        values = {t.id: stmt.value for stmt in ast.parse("".join(cell["source"])).body if isinstance(stmt, ast.Assign)
                  for t in stmt.targets if isinstance(t, ast.Name)}
        assert "runs/course" not in ast.unparse(ast.parse("".join(cell["source"]))), copy.name  # code, not comments
        if "output_root" not in values:  # a notebook that starts no job (test_every_parameter_is_read_...)
            assert "backend" not in values and "profile" not in values, copy.name
            continue
        redirected.append(copy.name)
        assert ast.literal_eval(values["output_root"]) == notebook_checks.TEST_OUTPUT_ROOT, copy.name
    assert len(redirected) >= 5, redirected  # 01, 03-07 start jobs


def test_the_readme_and_notebooks_stand_alone():
    """A clone has no ../shared: the README and docs/ link only to files in the repository (tests/test_docs.py
    checks every link), docs/references.md names every reference the course numbers, and the notebooks cite
    works by name, not by number alone."""
    import re

    one_gpu = (REPO_ROOT / "docs" / "one-gpu.md").read_text()
    for quoted in ("results/h100-2026-11-22.md", "cluster_scripts/plain_pytorch_resnet50.py"):  # copied in
        assert f"`{quoted}`" in one_gpu and (REPO_ROOT / quoted).is_file(), quoted
    bench_script = (REPO_ROOT / "cluster_scripts" / "gpu_bench.sh").read_text()
    assert "PEER_SCRIPT:-cluster_scripts/plain_pytorch_resnet50.py" in bench_script
    references = (REPO_ROOT / "docs" / "references.md").read_text()
    for number, name in (("000", "HAL"), ("001", "You"), ("002", "Jia"), ("003", "PMLS-Caffe"), ("004", "Goyal")):
        assert re.search(rf"\| {number} \|[^\n]*{name}", references), number
    for path in NOTEBOOKS:
        for cell in json.loads(path.read_text())["cells"]:
            text = "".join(cell["source"])
            assert not re.search(r"[Rr]eferences? 00\d", text) or "NBVAL_CHECK_OUTPUT" in text, \
                (path.name, re.findall(r".{0,30}[Rr]eferences? 00\d.{0,30}", text))


def test_make_test_runs_the_notebooks_on_their_test_parameters(tmp_path):
    """Each copy's parameters cell holds tests/nbval_params.yaml's values; the notebooks keep their teaching
    defaults (make tutorial runs those), and a name a notebook does not declare is refused, naming it."""
    sys.path.insert(0, str(REPO_ROOT / "tests"))
    import notebook_checks

    params = notebook_checks.load_test_parameters()
    assert {"01_mixed_precision", "03_ddp_one_node", "04_large_batches", "05_multi_node_slurm"} <= set(params)
    for copy in notebook_checks.prepare(tmp_path, browser=False):
        copied = _parameter_values(copy)
        original = _parameter_values(REPO_ROOT / "notebooks" / copy.name)
        assert copied.keys() == original.keys(), copy.name
        for name, value in params.get(copy.stem, {}).items():
            assert copied[name] == value != original[name], (copy.name, name)
    notebook = json.loads(NOTEBOOKS[3].read_text())
    with pytest.raises(SystemExit, match="'epoch'.*Fix: use a name"):
        notebook_checks.set_parameters(notebook, {"epoch": 1}, "test", "nbval_params.yaml, 03")


def test_where_the_browser_test_runs_05_nbval_does_not_and_its_checked_cells_are_compared_there(tmp_path):
    """tests/test_browser.py runs 05 whole on the same parameters: nbval gets no copy of it (a stale one is
    removed), and check_marked_outputs compares its marked cells as nbval would (streams joined, sanitized)."""
    sys.path.insert(0, str(REPO_ROOT / "tests"))
    import notebook_checks

    name = f"{notebook_checks.BROWSER_NOTEBOOK}.ipynb"
    notebook_checks.prepare(tmp_path, browser=False)
    assert (tmp_path / name).exists()
    copies = notebook_checks.prepare(tmp_path, browser=True)
    assert len(copies) == len(NOTEBOOKS) - 1 and not (tmp_path / name).exists()
    notebook = json.loads((REPO_ROOT / "notebooks" / name).read_text())
    expected = json.loads(notebook_checks.EXPECTED.read_text())[name]
    ports = notebook_checks.marked_cells(notebook)[-1]
    for cell in notebook_checks.marked_cells(notebook):
        cell["outputs"] = expected[notebook_checks._key(cell)]
    assert notebook_checks.check_marked_outputs(notebook, name) == []
    text = "".join(ports["outputs"][0]["text"])
    ports["outputs"] = [dict(ports["outputs"][0], text=text[:30]), dict(ports["outputs"][0], text=text[30:])]
    assert notebook_checks.check_marked_outputs(notebook, name) == []  # one stream, saved in two parts
    ports["outputs"] = [dict(ports["outputs"][0], text=text.replace("24711", "24712"))]
    assert len(notebook_checks.check_marked_outputs(notebook, name)) == 1
    ports["outputs"] = []
    assert len(notebook_checks.check_marked_outputs(notebook, name)) == 1


def _parameter_values(path: Path) -> dict:
    cell = next(c for c in json.loads(path.read_text())["cells"]
                if "parameters" in c.get("metadata", {}).get("tags", []))
    return {t.id: ast.literal_eval(stmt.value) for stmt in ast.parse("".join(cell["source"])).body
            if isinstance(stmt, ast.Assign) for t in stmt.targets if isinstance(t, ast.Name)}


def test_under_tutorial_site_the_copies_get_its_site_block_as_a_parameter(tmp_path, monkeypatch):
    """CI's strict cluster: the notebooks' copies run their Slurm jobs with the site block given as a notebook
    parameter, as a user's parameter file gives it (make course PARAMS=notebooks/params/ci-site.yaml); without
    TUTORIAL_SITE they keep the default (None); a file with no site: block is refused in one line."""
    sys.path.insert(0, str(REPO_ROOT / "tests"))
    import notebook_checks

    ci_site = REPO_ROOT / "notebooks" / "params" / "ci-site.yaml"
    block = yaml.safe_load(ci_site.read_text())["site"]
    monkeypatch.setenv("TUTORIAL_SITE", str(ci_site))
    given = {copy.stem for copy in notebook_checks.prepare(tmp_path / "site", browser=False)
             if _parameter_values(copy).get("site") == block}
    declaring = {path.stem for path in NOTEBOOKS if "site" in _parameter_values(path)}
    assert given == declaring and {"05_multi_node_slurm", "06_scaling_study"} <= given
    monkeypatch.delenv("TUTORIAL_SITE")
    unset = notebook_checks.prepare(tmp_path / "none", browser=False)
    assert all(_parameter_values(copy).get("site") is None for copy in unset)
    (tmp_path / "nosite.yaml").write_text("epochs: 1\n")
    monkeypatch.setenv("TUTORIAL_SITE", str(tmp_path / "nosite.yaml"))
    with pytest.raises(SystemExit, match="TUTORIAL_SITE=.*holds no site: block. Fix"):
        notebook_checks.prepare(tmp_path / "bad")
