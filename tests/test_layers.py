"""The layering contracts of pyproject.toml ([tool.importlinter]) hold, catch a violation, and are the page's."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tutorial_lib import REPO_ROOT

sys.path.insert(0, str(Path(__file__).resolve().parent))
import layout_page  # noqa: E402

LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(package_parent: Path, cache: Path) -> subprocess.CompletedProcess:
    """`lint-imports` with pyproject.toml's contracts on the tutorial_lib found under package_parent."""
    if not LINT_IMPORTS.exists():
        pytest.fail(f"{LINT_IMPORTS} is missing: pip install -e '.[test]' (import-linter is a test dependency)")
    env = {**os.environ, "PYTHONPATH": str(package_parent)}
    return subprocess.run([str(LINT_IMPORTS), "--config", str(REPO_ROOT / "pyproject.toml"), "--no-logo",
                           "--cache-dir", str(cache)], cwd=package_parent, env=env,
                          capture_output=True, text=True, timeout=600)


def test_the_import_contracts_are_kept(tmp_path):
    result = lint_imports(REPO_ROOT, tmp_path / "cache")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert f"{len(layout_page.contracts())} kept, 0 broken" in result.stdout


def test_an_upward_import_breaks_the_contracts(tmp_path):
    """The check can fail: the engine importing jobs breaks the layers and the engine's own rule."""
    shutil.copytree(REPO_ROOT / "tutorial_lib", tmp_path / "tutorial_lib",
                    ignore=shutil.ignore_patterns("__pycache__"))
    errors = tmp_path / "tutorial_lib" / "engine" / "errors.py"
    errors.write_text(errors.read_text() + "\nfrom tutorial_lib.jobs import states  # noqa\n")
    result = lint_imports(tmp_path, tmp_path / "cache")
    assert result.returncode != 0
    assert "tutorial_lib.engine.errors -> tutorial_lib.jobs.states" in result.stdout
    assert "0 kept" not in result.stdout and "2 broken" in result.stdout, result.stdout[-3000:]


def test_the_layout_page_shows_the_contracts():
    page = layout_page.PAGE.read_text()
    assert layout_page.page_block(page) == layout_page.render(), \
        "docs/layout.md's layer table differs from pyproject.toml: run `python tests/layout_page.py write`"
    layers = next(c for c in layout_page.contracts() if c["type"] == "layers")["layers"]
    packages = {m.strip() for layer in layers for m in layer.split("|")}
    subpackages = {f"tutorial_lib.{p.name}" for p in (REPO_ROOT / "tutorial_lib").iterdir()
                   if (p / "__init__.py").is_file()}
    assert subpackages <= packages, f"packages in no layer of pyproject.toml: {sorted(subpackages - packages)}"
