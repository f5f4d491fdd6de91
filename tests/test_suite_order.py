"""The suite's own scheduling: the files tests/conftest.py starts first exist (a renamed file would silently fall
back to name order and leave a long file for the end)."""

from __future__ import annotations

from pathlib import Path

from conftest import LONGEST_FIRST, _longest_first

ROOT = Path(__file__).resolve().parents[1]


def test_every_longest_first_file_exists_once():
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)
    assert [name for name in LONGEST_FIRST if not (ROOT / name).is_file()] == []


def test_longest_first_keeps_each_files_order():
    class Item:
        def __init__(self, nodeid):
            self.nodeid = nodeid

    items = [Item(n) for n in ("tests/test_a.py::x", "tests/test_a.py::y", f"{LONGEST_FIRST[1]}::Cell 0",
                               f"{LONGEST_FIRST[0]}::t", f"{LONGEST_FIRST[1]}::Cell 1")]
    _longest_first(items)
    assert [i.nodeid for i in items] == [f"{LONGEST_FIRST[0]}::t", f"{LONGEST_FIRST[1]}::Cell 0",
                                         f"{LONGEST_FIRST[1]}::Cell 1", "tests/test_a.py::x", "tests/test_a.py::y"]


def test_the_engine_runs_are_made_first_and_read_later():
    """tests/_engine_runs.py's runs (about 100 s of one worker in CI, with the grid) are made by whichever file asks
    first: the grid, first of all; the other engine files start a dozen files later, once the other worker has had
    time to pass them by (otherwise a worker waits on the lock, idle)."""
    assert LONGEST_FIRST[0] == "tests/test_engine_grid.py"
    assert LONGEST_FIRST.index("tests/test_engine.py") >= 12
    assert "tests/test_engine_triage.py" not in LONGEST_FIRST[:12]
