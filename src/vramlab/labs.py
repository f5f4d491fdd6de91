"""Learner labs from the complete notebooks, and the one setup cell every notebook starts with.

``python -m vramlab.labs build`` writes ``labs/NN_name.ipynb`` from ``notebooks/NN_name.ipynb``:
the code between ``# BEGIN SOLUTION`` and ``# END SOLUTION`` becomes the ``# STUB: ...`` lines of
the block (un-commented) or ``raise NotImplementedError("Exercise N (title): not done yet ...")``; outputs and execution counts are
cleared (saved widget state too); ``# NBVAL_CHECK_OUTPUT`` markers are dropped (a lab has no stored outputs to compare).

The complete lessons in ``notebooks/`` are for reading too, so ``build`` also cleans them: the marker comment
lines move into the cell's metadata (``metadata.vramlab.markers``: ``[line, text]`` pairs, put back exactly by
:func:`marked_source`; ``sha1``: the cleaned cell's checksum, so an edit of it is refused rather than
mis-marked), ``# NBVAL_CHECK_OUTPUT`` becomes nbval's own cell tag ``nbval-check-output``, and a
difficulty line ``🔴🔴⚪ difficulty · 🔵🔵⚪ importance`` gets a text fallback (``difficulty 2/3``) for screens
without an emoji font. A notebook may still use marker comments (an author editing an exercise: ``python -m
vramlab.labs unmark NOTEBOOK`` puts them back); ``build`` converts them again. Labs come out the same either way.
``--check`` writes nothing and fails when a lab or a notebook (setup cell, markers, fallbacks) is stale.
``python -m vramlab.labs execute NOTEBOOK...`` runs notebooks in place and saves their outputs.
``python -m vramlab.labs words [NOTEBOOK...]`` counts each notebook's main-path words.
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
CHECK_OUTPUT_TAG = "nbval-check-output"   # nbval 0.11's cell tag for the same (nbval/plugin.py, metadata_tags)
# nbval's tag for a cell make test does not run (lab 02's kernel-path demonstration: two fresh Pythons); a lab drops
# it with the check tag, so `make test-labs` runs every lab cell and a learner's notebook carries no tool's tags
SKIP_TAG = "nbval-skip"
META_KEY = "vramlab"                      # cell metadata: {"markers": [[line, text], ...], "sha1": <clean source>}


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
        source = marked_source(cell, f"{where}, cell {index}")
        _drop_build_metadata(cell)
        if BEGIN in source:
            blocks += 1
        cell.source = _drop_check_marker(strip_solutions(source, f"{where}, cell {index}",
                                                         exercise_label(header, blocks)))
        cell.outputs = []
        cell.execution_count = None
        cell.metadata.pop("execution", None)
    lab.metadata.pop("widgets", None)  # saved widget state belongs to the executed notebook
    lab.metadata.setdefault("vramlab", {})["generated_from"] = where
    return lab


# --------------------------------------------------------------------------- clean complete lessons
def _is_marker(line: str, inside: bool) -> bool:
    text = line.strip()
    return (text in (BEGIN, END, CHECK_OUTPUT_MARKER)
            or (inside and text.startswith(STUB_PREFIX)))


def _sha1(text: str) -> str:
    import hashlib

    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:12]


def split_markers(source: str, where: str = "cell") -> tuple[str, list[list]]:
    """``(clean source, markers)``: the source without its marker comment lines (``# BEGIN SOLUTION``,
    ``# END SOLUTION``, ``# STUB: ...`` inside a block, ``# NBVAL_CHECK_OUTPUT``), and those lines as
    ``[line index in the marked source, text]`` pairs. Malformed markers raise :class:`LabBuildError`."""
    strip_solutions(source, where)   # the same errors as the lab build, before anything moves
    kept, markers, inside = [], [], False
    for number, line in enumerate(source.split("\n")):
        if _is_marker(line, inside):
            markers.append([number, line])
            if line.strip() in (BEGIN, END):
                inside = line.strip() == BEGIN
        else:
            kept.append(line)
    return "\n".join(kept), markers


def join_markers(clean: str, markers: list) -> str:
    """The inverse of :func:`split_markers`: put each ``[line, text]`` back at its line."""
    lines = clean.split("\n")
    for number, text in sorted(markers, key=lambda m: m[0]):
        if not isinstance(number, int) or not isinstance(text, str) or not 0 <= number <= len(lines):
            raise LabBuildError(f"stored marker {[number, text]!r} does not fit this cell's {len(lines)} lines.")
        lines.insert(number, text)
    return "\n".join(lines)


def _has_source_markers(source: str) -> bool:
    """True when the source itself holds a solution block (``# BEGIN SOLUTION`` / ``# END SOLUTION``)."""
    return any(line.strip() in (BEGIN, END) for line in source.split("\n"))


def _without_check_marker(source: str) -> tuple[str, bool]:
    lines = source.split("\n")
    kept = [ln for ln in lines if ln.strip() != CHECK_OUTPUT_MARKER]
    return "\n".join(kept), len(kept) != len(lines)


def marked_source(cell, where: str = "cell") -> str:
    """A code cell's source with its solution markers, from the source (an author's markers win) or the
    markers ``build`` stored in ``metadata.vramlab`` (a cell edited since then is refused in one sentence).
    The ``nbval-check-output`` tag stays a tag (a lab drops both the tag and the comment)."""
    stored = (cell.get("metadata") or {}).get(META_KEY) or {}
    markers = stored.get("markers") if isinstance(stored, dict) else None
    source = cell.source if isinstance(cell.source, str) else "".join(cell.source)
    if not markers or _has_source_markers(source):
        return source
    if stored.get("sha1") not in (None, _sha1(_without_check_marker(source)[0])):
        raise LabBuildError(
            f"{where} was edited after build moved its solution markers into the cell's metadata: undo the edit, "
            f"run `python -m vramlab.labs unmark NOTEBOOK` to show the markers, edit, then build again.")
    return join_markers(source, markers)


def _drop_build_metadata(cell, dropped_tags: tuple[str, ...] = (CHECK_OUTPUT_TAG, SKIP_TAG)) -> None:
    cell.metadata.pop(META_KEY, None)
    tags = cell.metadata.get("tags")
    if isinstance(tags, list) and any(t in dropped_tags for t in tags):
        tags = [t for t in tags if t not in dropped_tags]
        if tags:
            cell.metadata["tags"] = tags
        else:
            cell.metadata.pop("tags")


def clean_cell(cell, where: str = "cell") -> None:
    """Move a code cell's solution markers into its metadata and ``# NBVAL_CHECK_OUTPUT`` into the nbval tag.
    Idempotent; a cell without markers keeps its source; a tag the author set stays."""
    marked, had_check = _without_check_marker(marked_source(cell, where))
    clean, markers = split_markers(marked, where)
    _drop_build_metadata(cell, dropped_tags=())
    if had_check:
        tags = cell.metadata.get("tags") or []
        cell.metadata["tags"] = [*tags, CHECK_OUTPUT_TAG] if CHECK_OUTPUT_TAG not in tags else tags
    if markers:
        cell.metadata[META_KEY] = {"markers": markers, "sha1": _sha1(clean)}
    cell.source = clean


def unmark_cell(cell, where: str = "cell") -> None:
    """Put a cleaned cell's markers back into its source (for editing an exercise); ``build`` cleans it again.
    The ``nbval-check-output`` tag becomes the ``# NBVAL_CHECK_OUTPUT`` first line again."""
    stored = (cell.metadata.get(META_KEY) or {})
    if stored.get("markers") and stored.get("sha1") not in (None, _sha1(_without_check_marker(cell.source)[0])) \
            and not _has_source_markers(cell.source):
        print(f"warning: {where} was edited after build: check where its markers landed", file=sys.stderr)
        cell.metadata[META_KEY] = dict(stored, sha1=None)
    source = marked_source(cell, where)
    tagged = CHECK_OUTPUT_TAG in (cell.metadata.get("tags") or [])
    if tagged and CHECK_OUTPUT_MARKER not in (ln.strip() for ln in source.split("\n")):
        source = CHECK_OUTPUT_MARKER + "\n" + source
    cell.source = source
    _drop_build_metadata(cell, dropped_tags=(CHECK_OUTPUT_TAG,) if tagged else ())


_LEVEL = re.compile(r"((?:🔴|⚪){1,5}) difficulty(?! \d/\d)|((?:🔵|⚪){1,5}) importance(?! \d/\d)")


def text_fallback(markdown: str) -> str:
    """``🔴🔴⚪ difficulty · 🔵🔵⚪ importance`` -> ``🔴🔴⚪ difficulty 2/3 · 🔵🔵⚪ importance 2/3`` (idempotent),
    so the line still reads where no emoji font draws the circles."""
    if "difficulty" not in markdown and "importance" not in markdown:
        return markdown

    def add(m: re.Match) -> str:
        circles = m.group(1) or m.group(2)
        filled = circles.count("🔴") + circles.count("🔵")
        word = "difficulty" if m.group(1) else "importance"
        return f"{circles} {word} {filled}/{len(circles)}"

    return _LEVEL.sub(add, markdown)


def clean_notebook(nb, where: str = "notebook") -> bool:
    """Clean a complete lesson in place (markers into metadata, text fallbacks); True when it changed."""
    before = _dumps(nb)
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            clean_cell(cell, f"{where}, cell {index}")
            rewrap_check_outputs(cell)
        elif cell.cell_type == "markdown":
            cell.source = text_fallback(cell.source)
    return _dumps(nb) != before


def rewrap_check_outputs(cell) -> None:
    """Stored check lines (``PASS``/``FAIL``/``ANSWER``) wrapped as a kernel prints them now
    (:func:`vramlab.checks._core.wrap_check_line`), so nbval's comparison holds without re-executing."""
    from vramlab.checks._core import ANSWER_MARK, FAIL_MARK, PASS_MARK, wrap_check_line

    marks = tuple(f"{m} " for m in (PASS_MARK, FAIL_MARK, ANSWER_MARK))
    for output in cell.get("outputs", []):
        if output.get("output_type") != "stream" or output.get("name") != "stdout":
            continue
        text = output.get("text", "")
        text = text if isinstance(text, str) else "".join(text)
        if not any(m in text for m in marks):
            continue
        lines = [wrap_check_line(ln) if ln.startswith(marks) else ln for ln in text.split("\n")]
        output["text"] = "\n".join(lines)


def unmark(path: str | Path) -> int:
    """Put the markers back into every code cell of a notebook file (in place); return how many cells changed."""
    import nbformat

    path = Path(path)
    if path.suffix != ".ipynb" or not path.is_file():
        raise FileNotFoundError(f"{path} is not a notebook file: pass one such as notebooks/03_vllm_startup.ipynb.")
    nb = nbformat.read(path, as_version=4)
    changed = 0
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            before = (cell.source, dict(cell.metadata))
            unmark_cell(cell, f"{path.name}, cell {index}")
            changed += (cell.source, dict(cell.metadata)) != before
    path.write_text(_dumps(nb))
    print(f"{path}: markers shown in {changed} cells; edit, then `python -m vramlab.labs build` hides them again")
    return changed


def _dumps(nb) -> str:
    import nbformat

    return nbformat.writes(nb) + "\n"


def build(root: Path | None = None, check: bool = False, verbose: bool = True) -> list[str]:
    """Write (or with ``check`` only compare) every lab; return the list of stale paths.

    Also syncs each notebook's setup cell and cleans it (:func:`clean_notebook`); in check mode a notebook
    that would change is stale.
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
        setup = sync_setup_cell(nb)
        cleaned = clean_notebook(nb, f"notebooks/{path.name}")
        if setup or cleaned:
            stale.append(str(path.relative_to(root)) + (" (setup cell)" if setup else " (markers, fallbacks)"))
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


SLOW_CELL_S = 20          # a cell that took longer than this says how long it takes (issue 29)
TIMING_KEY = "vramlab_timing"
_DURATION = re.compile(r"\b\d{1,4}(?:[.,]\d{1,2})?\s?(?:-\s?\d{1,4}\s?)?(?:s|sec|seconds?|min|minutes?)\b")


def record_slow_cell(cell) -> None:
    """Store ``{"seconds": N}`` (rounded to 5 s) in a code cell's metadata when its execution took more than
    :data:`SLOW_CELL_S`, from nbclient's execution timestamps; drop it from faster cells."""
    from datetime import datetime

    cell.metadata.pop(TIMING_KEY, None)
    stamps = cell.metadata.get("execution", {})
    begin, end = stamps.get("iopub.execute_input"), stamps.get("shell.execute_reply")
    if cell.cell_type != "code" or not begin or not end:
        return
    seconds = (datetime.fromisoformat(end.replace("Z", "+00:00")) -
               datetime.fromisoformat(begin.replace("Z", "+00:00"))).total_seconds()
    if seconds > SLOW_CELL_S:
        cell.metadata[TIMING_KEY] = {"seconds": int(5 * round(seconds / 5))}


def states_a_duration(text: str) -> bool:
    """Whether ``text`` names how long something takes ("about 30 s", "~2 minutes", "20-40 s")."""
    return bool(_DURATION.search(text))


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
            record_slow_cell(cell)
            cell.metadata.pop("execution", None)
        path.write_text(_dumps(nb))
        print(f"executed {path} in {time.perf_counter() - start:.1f} s")


MAIN_PATH_WORD_LIMIT = 1800   # issues 19 and 29: at most about 1,800 words a lab, boxes included, before "Going deeper"
_HTML_TAG = re.compile(r"<[^>]{0,500}>")
_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'’_.,%/+-]{0,200}")


_GOING_DEEPER = re.compile(r"^##\s+Going deeper\b", re.M)


def main_path_words(notebook: str | Path) -> int:
    """Words a learner reads in a notebook: its markdown cells, collapsed ``<details>`` boxes (hints, answers,
    asides) included, up to an optional final ``## Going deeper`` section, which does not count.

    HTML tags, table pipes and punctuation-only tokens do not count; a token that starts with a letter or a
    digit does (``6,480``, ``GiB``, ``max_model_len``). Code cells and outputs do not count.
    """
    nb = json.loads(Path(notebook).read_text(encoding="utf-8"))
    sources = []
    for cell in nb["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        source = "".join(cell["source"])
        deeper = _GOING_DEEPER.search(source)
        if deeper:
            sources.append(source[:deeper.start()])
            break
        sources.append(source)
    text = _HTML_TAG.sub(" ", "\n".join(sources))
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
    u = sub.add_parser("unmark", help="put the solution markers back into notebooks for editing (build hides them)")
    u.add_argument("notebooks", nargs="+")
    w = sub.add_parser("words", help="markdown words per notebook, collapsed boxes included, up to a final \"## Going deeper\"")
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
    if args.command == "unmark":
        try:
            for path in args.notebooks:
                unmark(path)
        except (FileNotFoundError, ValueError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        return 0
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
