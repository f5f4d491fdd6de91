"""environment.yml and pyproject.toml must name the same packages (conda spells torch 'pytorch')."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[1]
CONDA_TO_PYPI = {"pytorch": "torch"}


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~ \[;]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _pyproject_packages(extras=("lab", "dev")) -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {_name(r) for r in project["dependencies"]}
    for extra in extras:
        names |= {_name(r) for r in project["optional-dependencies"][extra]}
    return names


def _environment_packages() -> tuple[set[str], list[str]]:
    conda, pip = set(), []
    in_pip = in_deps = False
    for line in (ROOT / "environment.yml").read_text().splitlines():
        stripped = line.split("#", 1)[0].rstrip()
        if stripped and not stripped.startswith(" "):
            in_deps = stripped == "dependencies:"
            continue
        if not in_deps or not stripped.strip().startswith("- "):
            continue
        item = stripped.strip()[2:].strip()
        if item == "pip:":
            in_pip = True
            continue
        if in_pip and line.startswith("      - "):
            pip.append(item)
        elif not item.startswith("pip"):
            in_pip = False
            conda.add(CONDA_TO_PYPI.get(_name(item), _name(item)))
    conda -= {"python", "pip"}
    return conda, pip


def test_environment_yml_matches_pyproject():
    conda, pip = _environment_packages()
    expected = _pyproject_packages()
    assert conda == expected, (f"only in environment.yml: {sorted(conda - expected)}; "
                               f"only in pyproject.toml: {sorted(expected - conda)}")
    assert pip == ["-e .[lab,dev]"], pip


def test_environment_pins_python_311_and_conda_forge():
    text = (ROOT / "environment.yml").read_text()
    assert "- python=3.11" in text and "- conda-forge" in text


def test_torch_has_no_upper_pin():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    torch = [r for r in project["dependencies"] if _name(r) == "torch"]
    assert torch == ["torch>=2.4"] or (len(torch) == 1 and "<" not in torch[0] and ">=2.4" in torch[0])
    assert _name("nvidia-ml-py>=12") in {_name(r) for r in project["optional-dependencies"]["gpu"]}
