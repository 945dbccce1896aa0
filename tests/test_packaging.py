"""The three dependency lists agree: pyproject.toml, environment.yml (conda) and constraints.txt."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli", reason="Python 3.10 needs tomli to read pyproject.toml: pip install tomli")

ROOT = Path(__file__).resolve().parents[1]
CONDA_NAMES = {"torch": "pytorch"}  # PyPI name -> conda-forge name where they differ
CONDA_ONLY = {"python", "pip"}  # the interpreter and installer, not runtime packages
_CONDA_SPEC = re.compile(r"^\s*([A-Za-z0-9_.\-]+)\s*(.*?)\s*$")


def _lower_bound(specifiers) -> Version | None:
    """The version of a ``>=`` specifier, if there is one."""
    bounds = [Version(s.version) for s in specifiers if s.operator == ">="]
    return max(bounds) if bounds else None


def _pyproject_dependencies() -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = [Requirement(text) for text in project["dependencies"]]
    return {CONDA_NAMES.get(canonicalize_name(r.name), canonicalize_name(r.name)): r for r in requirements}


def _conda_dependencies() -> dict[str, str]:
    """conda name -> version spec ("" if none) of environment.yml's conda packages."""
    environment = yaml.safe_load((ROOT / "environment.yml").read_text())
    specs = {}
    for entry in environment["dependencies"]:
        if isinstance(entry, dict):  # a nested "pip:" list: not conda packages
            continue
        name, spec = _CONDA_SPEC.match(entry).groups()
        specs[canonicalize_name(name)] = spec
    return specs


def test_environment_yml_lists_the_runtime_packages_of_pyproject():
    pyproject, conda = _pyproject_dependencies(), _conda_dependencies()
    assert pyproject, "no [project] dependencies found"
    assert set(conda) - CONDA_ONLY == set(pyproject)


def test_lower_bounds_agree():
    pyproject, conda = _pyproject_dependencies(), _conda_dependencies()
    compared = 0
    for name, requirement in pyproject.items():
        spec = conda.get(name, "")
        conda_bound = re.match(r">=\s*([0-9][0-9.]*)", spec)
        pyproject_bound = _lower_bound(requirement.specifier)
        if conda_bound and pyproject_bound:
            assert Version(conda_bound.group(1)) == pyproject_bound, name
            compared += 1
    assert compared > 0


def test_environment_python_matches_requires_python():
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    python = _conda_dependencies()["python"]
    assert Version(python.removeprefix(">=")) == Version(requires.removeprefix(">="))


def _constraints() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            requirement = Requirement(line)
            (specifier,) = requirement.specifier
            assert specifier.operator == "==", line
            pins[canonicalize_name(requirement.name)] = specifier.version
    return pins


def test_constraints_pin_the_matched_torch_and_torchvision():
    pins = _constraints()
    assert pins["torch"] == "2.14.1"
    assert pins["torchvision"] == "0.29.1"


@pytest.mark.parametrize("name", ["torch", "torchvision"])
def test_pins_satisfy_the_loose_ranges(name):
    requirement = _pyproject_dependencies()[CONDA_NAMES.get(name, name)]
    assert requirement.specifier.contains(_constraints()[name])


def test_the_floor_is_the_lowest_pair_ci_tests():
    """pyproject.toml (and so environment.yml) admits nothing older than the lowest pair ``make test-compat`` runs."""
    from compat_plan import PAIRS

    pyproject = _pyproject_dependencies()
    lowest = min(PAIRS.values(), key=lambda pair: Version(pair.torch))
    assert _lower_bound(pyproject["pytorch"].specifier) == Version(lowest.torch)
    assert _lower_bound(pyproject["torchvision"].specifier) == Version(lowest.torchvision)
