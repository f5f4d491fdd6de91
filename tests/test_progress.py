"""Workshop progress recording (vramlab.progress) and the `vramlab progress` board."""

from __future__ import annotations

import json
import multiprocessing as mp
from datetime import datetime, timedelta, timezone

import pytest

from vramlab import progress
from vramlab.checks._core import report


@pytest.fixture
def progress_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(progress.DIR_ENV, str(tmp_path))
    monkeypatch.delenv(progress.OPT_OUT_ENV, raising=False)
    monkeypatch.setenv("JUPYTERHUB_USER", "ana")
    return tmp_path


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_off_by_default(tmp_path, monkeypatch):
    monkeypatch.delenv(progress.DIR_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    report("check_x", True, "1", "1")
    assert not progress.enabled()
    assert list(tmp_path.iterdir()) == []


def test_report_appends_one_outcome_line(progress_dir):
    report("check_kv", False, "6,480 bytes", "6,000 bytes", value=6000)
    report("check_kv", True, "6,480 bytes", "6,480 bytes", value=6480)
    report("check_other", True, "1", "1")
    rows = _lines(progress_dir / "ana.jsonl")
    assert [(r["exercise"], r["passed"], r["attempt"]) for r in rows] == [
        ("check_kv", False, 1), ("check_kv", True, 2), ("check_other", True, 1)]
    assert set(rows[0]) == {"user", "lab", "exercise", "passed", "attempt", "revealed", "time"}
    assert rows[0]["user"] == "ana" and rows[0]["revealed"] is False
    assert datetime.fromisoformat(rows[0]["time"]).tzinfo is not None
    # outcomes only: neither the expected nor the learner's value is stored
    assert "6,000" not in (progress_dir / "ana.jsonl").read_text()
    assert "6,480" not in (progress_dir / "ana.jsonl").read_text()


def test_lab_is_taken_from_the_check_module(progress_dir):
    from vramlab.checks.lab00 import check_prediction

    check_prediction(None)  # the untouched stub: a failing check inside vramlab.checks.lab00
    rows = _lines(progress_dir / "ana.jsonl")
    assert rows[-1]["lab"] == "lab00" and rows[-1]["passed"] is False


def test_opt_out_and_getpass_fallback(progress_dir, monkeypatch):
    monkeypatch.setenv(progress.OPT_OUT_ENV, "off")
    report("check_x", True, "1", "1")
    assert not (progress_dir / "ana.jsonl").exists()
    monkeypatch.delenv(progress.OPT_OUT_ENV)
    monkeypatch.delenv("JUPYTERHUB_USER")
    monkeypatch.setattr(progress.getpass, "getuser", lambda: "bo b@x")
    report("check_x", True, "1", "1")
    assert _lines(progress_dir / "bo_b_x.jsonl")[0]["user"] == "bo b@x"


def test_revealed_flag_comes_from_details(progress_dir):
    report("check_r", False, "2", "3", revealed=True)
    assert _lines(progress_dir / "ana.jsonl")[0]["revealed"] is True


def test_unwritable_dir_never_breaks_a_check(tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv(progress.DIR_ENV, str(blocker / "sub"))
    assert report("check_x", True, "1", "1")
    assert "PASS check_x" in capsys.readouterr().out


def _writer(directory: str, worker: int, n: int) -> None:
    for i in range(n):
        progress.append(directory, user="crowd", lab="lab03", exercise=f"check_{i % 5}", passed=bool((worker + i) % 2))


def test_concurrent_appends_stay_whole(tmp_path):
    ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), w, 50)) for w in range(30)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    rows = _lines(tmp_path / "crowd.jsonl")  # json.loads raises on any torn line
    assert len(rows) == 1500
    for k in range(5):
        attempts = sorted(r["attempt"] for r in rows if r["exercise"] == f"check_{k}")
        assert attempts == list(range(1, 301))  # counted under the lock: no duplicates, no gaps


def _write_rows(directory, rows):
    for user, exercise, passed, minutes_ago in rows:
        progress.append(directory, user=user, lab="lab03", exercise=exercise, passed=passed,
                        now=NOW - timedelta(minutes=minutes_ago))


NOW = datetime(2026, 12, 1, 17, 0, tzinfo=timezone.utc)


def test_board_text_marks_pass_attempts_and_stuck(tmp_path):
    _write_rows(tmp_path, [
        ("ana", "check_a", False, 30), ("ana", "check_a", True, 25),
        ("bo", "check_a", False, 30), ("bo", "check_a", False, 20), ("bo", "check_a", False, 15),
        ("cy", "check_b", False, 2),
    ])
    (tmp_path / "junk.jsonl").write_text("not json\n")
    board = progress.read_board(tmp_path)
    assert board.learners == ["ana", "bo", "cy"] and board.exercises == ["check_a", "check_b"]
    assert board.skipped_lines == 1
    text = progress.render_text(board, now=NOW, stuck_min=10)
    rows = {line.split()[0]: line.split()[1:] for line in text.splitlines()[1:4]}
    assert rows["ana"][:2] == ["✓", "·"]
    assert rows["bo"][:2] == ["3!", "·"]  # 3 attempts, first 30 min ago: stuck
    assert rows["cy"][:2] == ["·", "1"]  # 1 attempt 2 min ago: still trying
    assert "1 unreadable lines skipped" in text
    # with a 60-minute threshold nobody is stuck
    assert "3!" not in progress.render_text(board, now=NOW, stuck_min=60)


def test_html_is_offline_and_lists_everyone(tmp_path):
    _write_rows(tmp_path, [("ana", "check_a", True, 1), ("bo", "check_b", False, 1)])
    out = progress.write_html(progress.read_board(tmp_path), tmp_path / "board.html", now=NOW)
    html = out.read_text()
    # offline: plotly.js is inlined (megabytes), no <script src=...> pointing at a CDN
    assert "<script src=" not in html.replace(" ", "") and "<script src=" not in html
    assert len(html) > 1_000_000 and "Plotly.newPlot" in html
    assert "ana" in html and "bo" in html and "check_b" in html


def test_cli_progress(tmp_path, capsys):
    from vramlab.cli import main

    _write_rows(tmp_path, [("ana", "check_a", True, 1)])
    assert main(["progress", str(tmp_path), "--stuck-min", "5", "--html", str(tmp_path / "b.html")]) == 0
    out = capsys.readouterr().out
    assert "ana" in out and "✓" in out and (tmp_path / "b.html").is_file()
    assert main(["progress", str(tmp_path / "missing")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "VRAMLAB_PROGRESS_DIR" in err
