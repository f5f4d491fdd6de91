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


def test_strip_solutions_default_stub_raises_not_implemented_with_the_exercise_name():
    src = "def f(x):\n    # BEGIN SOLUTION\n    return x\n    # END SOLUTION"
    assert labs.strip_solutions(src, exercise="Exercise 2 (the butterfly)") == (
        'def f(x):\n    raise NotImplementedError("Exercise 2 (the butterfly): not done yet. '
        'Replace this line with your code.")')
    with pytest.raises(labs.LabBuildError, match="STUB: name = None"):
        labs.strip_solutions("# BEGIN SOLUTION\nx = 1\n# END SOLUTION")


def test_exercise_label_comes_from_the_header_above_or_the_count():
    assert labs.exercise_label("### Exercise 1 — Sylvester's Hadamard matrix\n🔴⚪⚪", 3) == \
        "Exercise 1 (Sylvester's Hadamard matrix)"
    assert labs.exercise_label("### Exercise 0.1\ntext", 1) == "Exercise 0.1"
    assert labs.exercise_label(None, 4) == "Exercise 4"
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("### Exercise 7 — fold it"),
        nbformat.v4.new_code_cell("def f():\n    # BEGIN SOLUTION\n    return 1\n    # END SOLUTION"),
    ])
    assert 'NotImplementedError("Exercise 7 (fold it): not done yet.' in labs.make_lab(nb).cells[1].source
    nb.cells += [nbformat.v4.new_markdown_cell("## 2. Another section"), nbformat.v4.new_code_cell(nb.cells[1].source)]
    assert 'NotImplementedError("Exercise 2: not done yet.' in labs.make_lab(nb).cells[3].source


def _run_setup_cell(tmp_path, source: str):
    """Run SETUP_CELL as Colab would (google.colab imported) with VRAMLAB_SOURCE=source."""
    import subprocess
    import sys

    script = ("import sys, types\nsys.modules['google.colab'] = types.ModuleType('google.colab')\n"
              + labs.SETUP_CELL)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), labs.SOURCE_ENV: source, "PIP_NO_INDEX": "1"}
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)


def test_setup_cell_fails_in_one_sentence_when_the_source_is_missing(tmp_path):
    proc = _run_setup_cell(tmp_path, str(tmp_path / "vramlab-0.1.0-py3-none-any.whl"))
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("FileNotFoundError: VRAMLAB_SOURCE=") and "does not exist: upload the vramlab wheel" in last


def test_setup_cell_fails_in_one_sentence_when_pip_cannot_install_it(tmp_path):
    bogus = tmp_path / "vramlab-0.1.0-py3-none-any.whl"
    bogus.write_text("not a wheel")
    proc = _run_setup_cell(tmp_path, str(bogus))
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode != 0 and last.startswith("RuntimeError: vramlab could not be installed from ")
    assert "ask your instructor for the vramlab wheel" in last


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
    assert labs.REPO_URL in labs.SETUP_CELL and labs.SOURCE_ENV in labs.SETUP_CELL


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


def test_bad_input_is_one_sentence(tmp_path, capsys):
    with pytest.raises(TypeError, match="source must be a cell's source text"):
        labs.strip_solutions(None)
    with pytest.raises(TypeError, match="nb must be a notebook node"):
        labs.make_lab({"cells": []})
    with pytest.raises(labs.LabBuildError, match="has no notebooks/ folder: pass the repository root"):
        labs.build(tmp_path)
    assert labs.main(["build", "--root", str(tmp_path)]) == 2
    assert "has no notebooks/ folder" in capsys.readouterr().err
    with pytest.raises(FileNotFoundError, match="does not exist: pass a notebook path"):
        labs.execute([tmp_path / "missing.ipynb"])
    with pytest.raises(ValueError, match="is not a notebook: pass .ipynb files"):
        labs.execute(["README.md"])
    assert labs.main(["execute", str(tmp_path / "missing.ipynb")]) == 2
