"""Labs are generated from the notebooks, stay in sync, and keep every check call."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from vramlab import labs

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def test_strip_solutions_uses_stub_lines_and_keeps_indentation():
    src = "def f(x):\n    # BEGIN SOLUTION\n    # STUB: return None\n    y = x * 2\n    return y\n    # END SOLUTION\n\ncheck(f)"
    assert labs.strip_solutions(src) == "def f(x):\n    return None\n\ncheck(f)"


def test_strip_solutions_default_stub():
    src = "def f(x):\n    # BEGIN SOLUTION\n    return x\n    # END SOLUTION"
    assert labs.strip_solutions(src) == "def f(x):\n    pass  # TODO: your code here"


@pytest.mark.parametrize("src,match", [
    ("# BEGIN SOLUTION\nx = 1", "without a matching"),
    ("x = 1\n# END SOLUTION", "without a # BEGIN SOLUTION"),
    ("# BEGIN SOLUTION\n# BEGIN SOLUTION\n# END SOLUTION", "nested"),
])
def test_malformed_markers_are_reported(src, match):
    with pytest.raises(labs.LabBuildError, match=match):
        labs.strip_solutions(src)


def test_labs_are_in_sync_with_notebooks():
    assert NOTEBOOKS, "no notebooks found"
    stale = labs.build(ROOT, check=True, verbose=False)
    assert stale == [], f"stale labs: {stale}; run `python -m vramlab.labs build`"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_notebook_starts_with_the_setup_cell(path):
    nb = nbformat.read(path, as_version=4)
    assert labs.first_code_cell(nb).source == labs.SETUP_CELL
    assert labs.REPO_URL in labs.SETUP_CELL


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_lab_hides_solutions_keeps_checks_and_has_no_outputs(path):
    nb = nbformat.read(path, as_version=4)
    lab = nbformat.read(ROOT / "labs" / path.name, as_version=4)
    nb_code = [c.source for c in nb.cells if c.cell_type == "code"]
    lab_code = [c.source for c in lab.cells if c.cell_type == "code"]
    assert len(nb_code) == len(lab_code)
    exercises = 0
    for full, learner in zip(nb_code, lab_code):
        if labs.BEGIN in full:
            exercises += 1
            assert labs.BEGIN not in learner and labs.END not in learner
            checks = re.findall(r"^\s*(check_\w+)\(", full, flags=re.M)
            assert checks, f"exercise cell without a check call in {path.name}:\n{full}"
            for name in checks:
                assert f"{name}(" in learner
            assert learner != full
    assert all(not c.get("outputs") for c in lab.cells if c.cell_type == "code")
    assert all("NBVAL_CHECK_OUTPUT" not in c.source for c in lab.cells if c.cell_type == "code")
    assert exercises >= 1, f"{path.name} has no exercise"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebooks_are_committed_executed(path):
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code[1:]), f"execute it: python -m vramlab.labs execute {path}"
    marked = [c for c in code if c.source.startswith("# NBVAL_CHECK_OUTPUT")]
    assert marked, f"{path.name}: mark at least one deterministic cell # NBVAL_CHECK_OUTPUT"


def test_build_writes_a_lab_and_check_detects_staleness(tmp_path):
    (tmp_path / "notebooks").mkdir()
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# t"),
        nbformat.v4.new_code_cell("# BEGIN SOLUTION\n# STUB: x = None\nx = 42\n# END SOLUTION\ncheck_x(x)"),
    ])
    nbformat.write(nb, tmp_path / "notebooks" / "99_t.ipynb")
    assert labs.build(tmp_path, check=True, verbose=False)  # no lab yet, no setup cell
    labs.build(tmp_path, verbose=False)
    assert labs.build(tmp_path, check=True, verbose=False) == []
    lab = nbformat.read(tmp_path / "labs" / "99_t.ipynb", as_version=4)
    sources = [c.source for c in lab.cells if c.cell_type == "code"]
    assert sources == [labs.SETUP_CELL, "x = None\ncheck_x(x)"]
    (tmp_path / "labs" / "00_orphan.ipynb").write_text("{}")
    assert any("no notebook" in s for s in labs.build(tmp_path, check=True, verbose=False))


def test_build_check_cli_passes_on_this_checkout():
    assert labs.main(["build", "--check", "--root", str(ROOT)]) == 0
