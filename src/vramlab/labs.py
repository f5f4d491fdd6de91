"""Learner labs from the complete notebooks, and the one setup cell every notebook starts with.

``python -m vramlab.labs build`` writes ``labs/NN_name.ipynb`` from ``notebooks/NN_name.ipynb``:
the code between ``# BEGIN SOLUTION`` and ``# END SOLUTION`` becomes the ``# STUB: ...`` lines of
the block (un-commented) or ``raise NotImplementedError("Exercise N (title): not done yet ...")``; outputs and execution counts are
cleared (saved widget state too); ``# NBVAL_CHECK_OUTPUT`` markers are dropped (a lab has no stored outputs to compare).
``--check`` writes nothing and fails when a lab or a notebook's setup cell is stale.
``python -m vramlab.labs execute NOTEBOOK...`` runs notebooks in place and saves their outputs.
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import sys
from pathlib import Path

# The repository learners install from in Colab. Kept here, in one place: every notebook's setup
# cell is generated from SETUP_CELL (``build`` rewrites it; tests/test_labs.py checks it).
# Until the package has a public home, VRAMLAB_SOURCE (a wheel path or a git URL) or a vramlab
# wheel uploaded to /content (``make wheel`` builds it) replaces this placeholder.
REPO_URL = "https://github.com/vramlab/vramlab"
SOURCE_ENV = "VRAMLAB_SOURCE"

SETUP_CELL = f'''# Setup, the same in every notebook. Colab: installs vramlab and the model (about 1 minute).
# Locally (JupyterLab started by `make lab`) there is nothing to do.
import sys
if "google.colab" in sys.modules:
    import glob, os, subprocess
    # The source: {SOURCE_ENV} (a wheel path or a git URL; `%env {SOURCE_ENV}=...` in a cell above),
    # else a vramlab wheel uploaded to /content (Files pane), else the project's repository.
    wheels = sorted(glob.glob("/content/vramlab-*.whl"))
    source = os.environ.get("{SOURCE_ENV}") or (wheels[-1] if wheels else "git+{REPO_URL}")
    if source.startswith(("http://", "https://")) and not source.endswith(".whl"):
        source = "git+" + source
    if not source.startswith(("git+", "http://", "https://")) and not os.path.exists(source):
        raise FileNotFoundError(f"{SOURCE_ENV}={{source}} does not exist: upload the vramlab wheel to /content "
                                "(Files pane) or fix the path, then run this cell again.")
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", source], capture_output=True,
                         text=True, env={{**os.environ, "GIT_TERMINAL_PROMPT": "0"}})
    if pip.returncode != 0:
        why = (pip.stderr.strip().splitlines() or ["pip failed"])[-1]
        raise RuntimeError(f"vramlab could not be installed from {{source}} ({{why}}): ask your instructor for "
                           "the vramlab wheel, upload it to /content, and run this cell again.") from None
    fetch = subprocess.run(["vramlab", "fetch-model"], capture_output=True, text=True)
    print(fetch.stdout.strip() or fetch.stderr.strip())
    if fetch.returncode != 0:
        raise RuntimeError("vramlab fetch-model failed (its message is above): check the runtime's internet "
                           "access and run this cell again.")'''

SETUP_MARKER = "# Setup, the same in every notebook."
BEGIN = "# BEGIN SOLUTION"
END = "# END SOLUTION"
STUB_PREFIX = "# STUB:"
# A block without STUB lines (inside a function) becomes ``raise NotImplementedError("Exercise N: ...")``,
# so an untouched exercise reports "not done yet" rather than a puzzling ``None``.
DEFAULT_STUB = 'raise NotImplementedError({message})'
EXERCISE_HEADER = re.compile(r"^#+\s*Exercise\s+([\w.]+)\s*(?:[-—:]+\s*(.+?))?\s*$", re.M)
CHECK_OUTPUT_MARKER = "# NBVAL_CHECK_OUTPUT"


class LabBuildError(ValueError):
    """A notebook's solution markers are malformed."""


def repo_root() -> Path:
    """The checkout this package was installed from (editable install), else the working dir."""
    here = Path(__file__).resolve().parents[2]
    if (here / "notebooks").is_dir():
        return here
    return Path.cwd()


def strip_solutions(source: str, where: str = "cell", exercise: str | None = None) -> str:
    """Replace every ``# BEGIN SOLUTION`` ... ``# END SOLUTION`` block with its stub.

    The stub keeps the indentation of the BEGIN marker: the block's ``# STUB: code`` lines become
    ``code``; with none, the block (which must be inside a function) becomes
    ``raise NotImplementedError("<exercise>: not done yet ...")``. ``exercise`` names it
    (e.g. ``"Exercise 2 (the butterfly)"``; default ``"This exercise"``).
    """
    if not isinstance(source, str):
        raise TypeError(f"source must be a cell's source text (str), got {type(source).__name__}.")
    label = exercise or "This exercise"
    out: list[str] = []
    lines = source.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.strip() == BEGIN:
            indent = line[: len(line) - len(line.lstrip())]
            stubs: list[str] = []
            i += 1
            while i < len(lines) and lines[i].strip() != END:
                stripped = lines[i].strip()
                if stripped == BEGIN:
                    raise LabBuildError(f"{where}: nested {BEGIN} (line {i + 1}); close the first block with {END}.")
                if stripped.startswith(STUB_PREFIX):
                    stubs.append(indent + stripped[len(STUB_PREFIX):].strip())
                i += 1
            if i == len(lines):
                raise LabBuildError(f"{where}: {BEGIN} without a matching {END}; add the {END} line.")
            if not stubs and not indent:
                raise LabBuildError(f"{where}: a top-level solution block needs a '# STUB: name = None' line "
                                    f"(line {i + 1}), so the name exists in the lab.")
            message = json.dumps(f"{label}: not done yet. Replace this line with your code.", ensure_ascii=False)
            out.extend(stubs or [indent + DEFAULT_STUB.format(message=message)])
            i += 1
            continue
        if line.strip() == END:
            raise LabBuildError(f"{where}: {END} (line {i + 1}) without a {BEGIN} before it.")
        out.append(line)
        i += 1
    return "\n".join(out)


def _drop_check_marker(source: str) -> str:
    lines = [ln for ln in source.splitlines() if ln.strip() != CHECK_OUTPUT_MARKER]
    return "\n".join(lines)


def first_code_cell(nb):
    for cell in nb.cells:
        if cell.cell_type == "code":
            return cell
    return None


def sync_setup_cell(nb) -> bool:
    """Make the notebook's first code cell the setup cell; return True if it changed."""
    import nbformat

    cell = first_code_cell(nb)
    if cell is not None and cell.source.startswith(SETUP_MARKER):
        if cell.source == SETUP_CELL:
            return False
        cell.source = SETUP_CELL
        return True
    new = nbformat.v4.new_code_cell(SETUP_CELL)
    index = nb.cells.index(cell) if cell is not None else len(nb.cells)
    nb.cells.insert(index, new)
    return True


def exercise_label(header: str | None, number: int) -> str:
    """``"Exercise 2 (the butterfly)"`` from a markdown header, else ``"Exercise <number>"``."""
    matches = list(EXERCISE_HEADER.finditer(header or ""))
    m = matches[-1] if matches else None
    if not m:
        return f"Exercise {number}"
    return f"Exercise {m.group(1)}" + (f" ({m.group(2)})" if m.group(2) else "")


def make_lab(nb, where: str = "notebook"):
    """The learner version of a (complete) notebook node: solutions stubbed, outputs cleared.

    A solution block without STUB lines is named after the "Exercise N — title" markdown header of its
    section, else numbered in order of appearance in the notebook.
    """
    if not hasattr(nb, "cells") or not hasattr(nb, "metadata"):
        raise TypeError(f"nb must be a notebook node (nbformat.read(path, as_version=4)), got {type(nb).__name__}.")
    lab = copy.deepcopy(nb)
    header, blocks = None, 0
    for index, cell in enumerate(lab.cells):
        if cell.cell_type == "markdown":
            if EXERCISE_HEADER.search(cell.source):
                header = cell.source
            elif re.search(r"^#+\s", cell.source, re.M):
                header = None  # a new section: its exercise is numbered, not named after an older one
            continue
        if cell.cell_type != "code":
            continue
        if BEGIN in cell.source:
            blocks += 1
        cell.source = _drop_check_marker(strip_solutions(cell.source, f"{where}, cell {index}",
                                                         exercise_label(header, blocks)))
        cell.outputs = []
        cell.execution_count = None
        cell.metadata.pop("execution", None)
    lab.metadata.pop("widgets", None)  # saved widget state belongs to the executed notebook
    lab.metadata.setdefault("vramlab", {})["generated_from"] = where
    return lab


def _dumps(nb) -> str:
    import nbformat

    return nbformat.writes(nb) + "\n"


def build(root: Path | None = None, check: bool = False, verbose: bool = True) -> list[str]:
    """Write (or with ``check`` only compare) every lab; return the list of stale paths.

    Also syncs each notebook's setup cell (in check mode a differing setup cell is stale).
    """
    import nbformat

    root = Path(root) if root else repo_root()
    if not (root / "notebooks").is_dir():
        raise LabBuildError(f"{root} has no notebooks/ folder: pass the repository root (--root PATH).")
    notebooks = sorted((root / "notebooks").glob("*.ipynb"))
    labs_dir = root / "labs"
    stale: list[str] = []
    expected_labs = set()
    for path in notebooks:
        nb = nbformat.read(path, as_version=4)
        if sync_setup_cell(nb):
            stale.append(str(path.relative_to(root)) + " (setup cell)")
            if not check:
                path.write_text(_dumps(nb))
        lab_path = labs_dir / path.name
        expected_labs.add(lab_path.name)
        text = _dumps(make_lab(nb, f"notebooks/{path.name}"))
        if not lab_path.exists() or lab_path.read_text() != text:
            stale.append(str(lab_path.relative_to(root)))
            if not check:
                labs_dir.mkdir(exist_ok=True)
                lab_path.write_text(text)
    if labs_dir.is_dir():
        for orphan in sorted(labs_dir.glob("*.ipynb")):
            if orphan.name not in expected_labs:
                stale.append(str(orphan.relative_to(root)) + " (no notebook)")
                if not check:
                    orphan.unlink()
    if verbose:
        verb = "stale" if check else "updated"
        if stale:
            for item in stale:
                print(f"{verb}: {item}")
        else:
            print(f"labs up to date ({len(notebooks)} notebooks)")
    return stale


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def strip_widget_views(nb) -> None:
    """Drop widget outputs and saved widget state from an executed notebook.

    JupyterLab does not restore saved widget state by default, so a stored widget output shows as
    its text repr (``VBox(children=...``) or a frozen progress bar. Widgets appear when the learner
    runs the cell.
    """
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.get("outputs", []) if WIDGET_VIEW not in o.get("data", {})]


def execute(paths: list[str | Path], timeout: int = 600, kernel_name: str = "python3") -> None:
    """Run each notebook top to bottom in a fresh kernel (its folder as cwd) and save outputs."""
    import time

    import nbformat
    from nbclient import NotebookClient

    paths = [Path(p) for p in ([paths] if isinstance(paths, (str, Path)) else paths)]
    for path in paths:
        if path.suffix != ".ipynb":
            raise ValueError(f"{path} is not a notebook: pass .ipynb files, e.g. notebooks/00_start_here.ipynb.")
        if not path.is_file():
            raise FileNotFoundError(f"{path} does not exist: pass a notebook path such as notebooks/00_start_here.ipynb.")
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        sync_setup_cell(nb)
        start = time.perf_counter()
        NotebookClient(nb, timeout=timeout, kernel_name=kernel_name,
                       resources={"metadata": {"path": str(path.parent.resolve())}}).execute()
        strip_widget_views(nb)
        for cell in nb.cells:
            cell.metadata.pop("execution", None)
        path.write_text(_dumps(nb))
        print(f"executed {path} in {time.perf_counter() - start:.1f} s")


MAIN_PATH_WORD_LIMIT = 1800   # issue #19: each lab's main path is at most about 1,800 words
_DETAILS = re.compile(r"<details\b.*?</details>", re.S | re.I)
_HTML_TAG = re.compile(r"<[^>]{0,500}>")
_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'’_.,%/+-]{0,200}")


def main_path_words(notebook: str | Path) -> int:
    """Words a learner reads on a notebook's main path: its markdown cells, outside ``<details>`` blocks.

    HTML tags, table pipes and punctuation-only tokens do not count; a token that starts with a letter or a
    digit does (``6,480``, ``GiB``, ``max_model_len``). Code cells and outputs do not count.
    """
    nb = json.loads(Path(notebook).read_text(encoding="utf-8"))
    text = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    text = _HTML_TAG.sub(" ", _DETAILS.sub(" ", text))
    return len(_WORD.findall(text))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vramlab.labs", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="write labs/*.ipynb from notebooks/*.ipynb")
    b.add_argument("--check", action="store_true", help="write nothing; exit 1 when a lab is stale")
    b.add_argument("--root", type=Path, default=None, help="repository root (default: this checkout)")
    e = sub.add_parser("execute", help="run notebooks in place and save their outputs")
    e.add_argument("notebooks", nargs="+")
    e.add_argument("--timeout", type=int, default=600, help="seconds per cell")
    w = sub.add_parser("words", help="main-path markdown words per notebook (outside <details>)")
    w.add_argument("notebooks", nargs="*")
    args = parser.parse_args(argv)
    if args.command == "words":
        paths = args.notebooks or sorted((repo_root() / "notebooks").glob("*.ipynb"))
        over = 0
        for path in paths:
            n = main_path_words(path)
            over += n > MAIN_PATH_WORD_LIMIT
            print(f"{n:6d} {'over' if n > MAIN_PATH_WORD_LIMIT else 'ok  '} {path}")
        return 1 if over else 0
    if args.command == "build":
        try:
            stale = build(args.root, check=args.check)
        except LabBuildError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        if args.check and stale:
            print("labs are stale: run `python -m vramlab.labs build` and commit the result", file=sys.stderr)
            return 1
        return 0
    try:
        execute(args.notebooks, timeout=args.timeout)
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
