"""Workshop progress: one JSON line per check outcome, and the board that reads them back.

Off by default. When ``VRAMLAB_PROGRESS_DIR`` is set (the workshop hub sets it for every learner),
each check appends ONE line to ``<dir>/<user>.jsonl``::

    {"user": "ana", "lab": "lab03", "exercise": "check_kv_bytes_by_hand", "passed": true,
     "attempt": 2, "revealed": false, "time": "2026-12-01T17:20:03.512000+00:00"}

Only outcomes are recorded, never the learner's code or values. ``VRAMLAB_PROGRESS=off`` opts a
learner out. The user is ``JUPYTERHUB_USER`` (set by JupyterHub in every single-user server), else
``getpass.getuser()``.

Concurrency: a line is written with ONE ``os.write`` on a file opened with ``O_APPEND`` while
holding an exclusive ``fcntl.flock`` (where available), so lines from many kernels never interleave
and the attempt number (counted from the lines already there) is read and written under the same lock.
Recording never raises into a learner's notebook: any OSError is swallowed (the check's verdict
matters more than the board).
"""

from __future__ import annotations

import getpass
import json
import os
import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

DIR_ENV = "VRAMLAB_PROGRESS_DIR"
OPT_OUT_ENV = "VRAMLAB_PROGRESS"
# A line stays well under PIPE_BUF (4096 bytes on Linux): names are clipped to this many characters.
_MAX_FIELD = 200
# A user name becomes a file name: keep letters, digits and ._- (JupyterHub names may hold @ or +).
_SAFE_NAME_RE = re.compile(r"[^A-Za-z0-9._-]")
_LAB_MODULE_RE = re.compile(r"^vramlab\.checks\.(lab[0-9]{1,3})$")


def enabled() -> bool:
    """True when ``VRAMLAB_PROGRESS_DIR`` is set and ``VRAMLAB_PROGRESS`` is not ``off``/``0``/``no``/``false``."""
    if os.environ.get(OPT_OUT_ENV, "").strip().lower() in {"off", "0", "no", "false"}:
        return False
    return bool(os.environ.get(DIR_ENV, "").strip())


def current_user() -> str:
    """``JUPYTERHUB_USER``, else the login name (``getpass.getuser()``), else ``"unknown"``."""
    user = os.environ.get("JUPYTERHUB_USER", "").strip()
    if user:
        return user
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no login name in some containers
        return "unknown"


def user_file(directory: str | os.PathLike, user: str) -> Path:
    """``<directory>/<user>.jsonl`` with the user name made safe for a file name."""
    safe = _SAFE_NAME_RE.sub("_", user)[:_MAX_FIELD] or "unknown"
    return Path(directory) / f"{safe}.jsonl"


def caller_lab() -> str:
    """The lab whose check module is on the call stack (``"lab03"``), or ``""``."""
    import sys

    frame = sys._getframe(1)
    while frame is not None:
        match = _LAB_MODULE_RE.match(frame.f_globals.get("__name__", ""))
        if match:
            return match.group(1)
        frame = frame.f_back
    return ""


def _count_attempts(fd: int, exercise: str) -> int:
    """Lines already in the open file ``fd`` (one user's file) for ``exercise``.

    A byte count of the exact ``"exercise": "<name>",`` field this module writes (C speed, so 1,500
    appends stay linear enough); a line written by anything else is not counted.
    """
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            break
        chunks.append(chunk)
    needle = ('"exercise": ' + json.dumps(exercise, ensure_ascii=False) + ",").encode()
    return b"".join(chunks).count(needle)


def append(directory: str | os.PathLike, *, user: str, lab: str, exercise: str, passed: bool,
           revealed: bool = False, now: datetime | None = None) -> dict:
    """Append one outcome line to ``<directory>/<user>.jsonl`` atomically; return the row written.

    ``attempt`` counts from 1 per (user, exercise), from the lines already in the file.
    """
    path = user_file(directory, user)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        try:
            import fcntl
            fcntl.flock(fd, fcntl.LOCK_EX)
        except ImportError:  # Windows: O_APPEND alone; the attempt count may then race
            pass
        row = {
            "user": user[:_MAX_FIELD],
            "lab": lab[:_MAX_FIELD],
            "exercise": exercise[:_MAX_FIELD],
            "passed": bool(passed),
            "attempt": _count_attempts(fd, exercise[:_MAX_FIELD]) + 1,
            "revealed": bool(revealed),
            "time": (now or datetime.now(timezone.utc)).isoformat(),
        }
        os.write(fd, (json.dumps(row, ensure_ascii=False) + "\n").encode())
    finally:
        os.close(fd)  # closing releases the flock
    return row


def record(result: Any) -> None:
    """Record a :class:`~vramlab.checks._core.CheckResult` when progress recording is on; never raises."""
    if not enabled():
        return
    try:
        details = getattr(result, "details", None) or {}
        append(os.environ[DIR_ENV], user=current_user(), lab=caller_lab(), exercise=str(result.name),
               passed=bool(result.passed), revealed=bool(details.get("revealed", False)))
    except Exception:  # noqa: BLE001 - the board must never break a learner's check
        pass


# --------------------------------------------------------------------------------------- the board


@dataclass
class Cell:
    """One learner × exercise: attempts so far, passed yet, first and last time (UTC)."""

    attempts: int = 0
    passed: bool = False
    first: datetime | None = None
    last: datetime | None = None
    passed_at: datetime | None = None


@dataclass
class Board:
    """Learners × exercises, read from a progress folder. ``exercises`` keeps lab order then first seen."""

    learners: list[str] = field(default_factory=list)
    exercises: list[str] = field(default_factory=list)
    cells: dict[tuple[str, str], Cell] = field(default_factory=dict)
    labs: dict[str, str] = field(default_factory=dict)  # exercise -> lab ("lab03")
    skipped_lines: int = 0

    def status(self, learner: str, exercise: str, now: datetime, stuck_min: float) -> str:
        """``"pass"``, ``"stuck"`` (tried, not passed, first try > ``stuck_min`` minutes ago), ``"trying"`` or ``""``."""
        cell = self.cells.get((learner, exercise))
        if cell is None or cell.attempts == 0:
            return ""
        if cell.passed:
            return "pass"
        if cell.first is not None and (now - cell.first).total_seconds() > stuck_min * 60:
            return "stuck"
        return "trying"


def _parse_time(text: Any) -> datetime | None:
    try:
        t = datetime.fromisoformat(str(text))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def read_board(directory: str | os.PathLike) -> Board:
    """Read every ``*.jsonl`` in ``directory`` into a :class:`Board` (broken lines are counted, not fatal)."""
    board = Board()
    labs_of: dict[str, str] = {}
    learners: set[str] = set()
    for path in sorted(Path(directory).glob("*.jsonl")):
        with open(path, "rb") as fh:
            for line in fh:
                try:
                    row = json.loads(line)
                    user, exercise = str(row["user"]), str(row["exercise"])
                    passed = bool(row["passed"])
                except (ValueError, KeyError, TypeError):
                    board.skipped_lines += 1
                    continue
                learners.add(user)
                labs_of.setdefault(exercise, str(row.get("lab", "")))
                cell = board.cells.setdefault((user, exercise), Cell())
                cell.attempts += 1
                t = _parse_time(row.get("time"))
                if t is not None:
                    cell.first = t if cell.first is None else min(cell.first, t)
                    cell.last = t if cell.last is None else max(cell.last, t)
                if passed:
                    if not cell.passed or (t is not None and (cell.passed_at is None or t < cell.passed_at)):
                        cell.passed_at = t
                    cell.passed = True
    order = {name: i for i, name in enumerate(labs_of)}
    board.exercises = sorted(labs_of, key=lambda e: (labs_of[e], order[e]))
    board.learners = sorted(learners)
    board.labs = labs_of
    return board


_MARKS = {"pass": "✓", "stuck": "!", "trying": "", "": "·"}


def render_text(board: Board, now: datetime | None = None, stuck_min: float = 10.0) -> str:
    """A learners × exercises table: ``✓`` passed, ``N`` attempts without a pass, ``N!`` stuck > ``stuck_min`` min, ``·`` not tried."""
    now = now or datetime.now(timezone.utc)
    if not board.learners:
        return "no progress recorded yet"
    ids = [f"e{i + 1}" for i in range(len(board.exercises))]
    width = max(len(u) for u in board.learners)
    lines = [" ".join([f"{'learner':<{width}}"] + [f"{i:>4}" for i in ids] + ["  done  stuck"])]
    stuck_total = 0
    for user in board.learners:
        row, done, stuck = [], 0, 0
        for exercise in board.exercises:
            state = board.status(user, exercise, now, stuck_min)
            cell = board.cells.get((user, exercise))
            if state == "pass":
                mark, done = "✓", done + 1
            elif state == "stuck":
                mark, stuck = f"{cell.attempts}!", stuck + 1
            elif state == "trying":
                mark = str(cell.attempts)
            else:
                mark = "·"
            row.append(f"{mark:>4}")
        stuck_total += stuck
        lines.append(" ".join([f"{user:<{width}}"] + row + [f"  {done:>4}  {stuck:>5}"]))
    lines.append("")
    lines += [f"{i:>4} = {name} ({board.labs.get(name, '') or '?'})"
              for i, name in zip(ids, board.exercises)]
    lines.append(f"✓ passed; N attempts so far; N! stuck (tried, not passed, first try > {stuck_min:g} min ago); · not tried. "
                 f"{len(board.learners)} learners, {stuck_total} stuck cells"
                 + (f", {board.skipped_lines} unreadable lines skipped" if board.skipped_lines else "") + ".")
    return "\n".join(lines)


def figure(board: Board, now: datetime | None = None, stuck_min: float = 10.0):
    """A plotly heatmap: learners (rows) × exercises (columns); 0 not tried, 1 trying, 2 stuck, 3 passed."""
    import plotly.graph_objects as go

    now = now or datetime.now(timezone.utc)
    code = {"": 0, "trying": 1, "stuck": 2, "pass": 3}
    z, text = [], []
    for user in board.learners:
        zr, tr = [], []
        for exercise in board.exercises:
            state = board.status(user, exercise, now, stuck_min)
            cell = board.cells.get((user, exercise))
            zr.append(code[state])
            tr.append(f"{state or 'not tried'}, {cell.attempts if cell else 0} attempts")
        z.append(zr)
        text.append(tr)
    colorscale = [[0.0, "#eeeeee"], [0.25, "#eeeeee"], [0.25, "#fdd835"], [0.5, "#fdd835"],
                  [0.5, "#e53935"], [0.75, "#e53935"], [0.75, "#43a047"], [1.0, "#43a047"]]
    fig = go.Figure(go.Heatmap(z=z, x=board.exercises, y=board.learners, text=text, zmin=0, zmax=3,
                               colorscale=colorscale, hovertemplate="%{y} · %{x}: %{text}<extra></extra>",
                               colorbar=dict(tickvals=[0.375, 1.125, 1.875, 2.625],
                                             ticktext=["not tried", "trying", f"stuck > {stuck_min:g} min", "passed"])))
    fig.update_layout(title=f"vramlab progress ({len(board.learners)} learners, {now:%H:%M} UTC)",
                      height=max(300, 22 * len(board.learners) + 160), yaxis=dict(autorange="reversed"),
                      margin=dict(l=120, r=20, t=50, b=160))
    return fig


def write_html(board: Board, path: str | os.PathLike, now: datetime | None = None, stuck_min: float = 10.0,
               refresh_s: int | None = None) -> Path:
    """Write the heatmap as one offline HTML file (plotly.js inlined, no CDN); optional auto-refresh."""
    html = board_html(board, now=now, stuck_min=stuck_min, refresh_s=refresh_s)
    out = Path(path)
    out.write_text(html, encoding="utf-8")
    return out


def board_html(board: Board, now: datetime | None = None, stuck_min: float = 10.0,
               refresh_s: int | None = None) -> str:
    """The board as a self-contained HTML page (plotly.js inlined); ``refresh_s`` adds a meta refresh."""
    import html as html_mod

    fig = figure(board, now=now, stuck_min=stuck_min)
    body = fig.to_html(include_plotlyjs=True, full_html=False)
    table = html_mod.escape(render_text(board, now=now, stuck_min=stuck_min))
    meta = f'<meta http-equiv="refresh" content="{int(refresh_s)}">' if refresh_s else ""
    return (f"<!doctype html><html><head><meta charset='utf-8'>{meta}<title>vramlab progress</title></head>"
            f"<body>{body}<pre>{table}</pre></body></html>")


def progress_main(directory: str, stuck_min: float = 10.0, html: str | None = None) -> int:
    """``vramlab progress DIR``: print the board; with ``html`` also write the heatmap. Exit 1 on a bad folder."""
    import sys

    if not Path(directory).is_dir():
        print(f"error: progress folder {directory} does not exist; pass the folder set as {DIR_ENV} "
              f"for the learners (the workshop hub's is printed by `vramlab workshop serve`).", file=sys.stderr)
        return 1
    if stuck_min < 0:
        print("error: --stuck-min must be 0 or more minutes; pass e.g. --stuck-min 10.", file=sys.stderr)
        return 1
    t0 = time.perf_counter()
    board = read_board(directory)
    now = datetime.now(timezone.utc)
    print(render_text(board, now=now, stuck_min=stuck_min))
    if html:
        out = write_html(board, html, now=now, stuck_min=stuck_min)
        print(f"heatmap written: {out} ({time.perf_counter() - t0:.2f} s)")
    return 0


def iter_rows(directory: str | os.PathLike) -> Iterable[dict]:
    """Every well-formed row in the folder (for tests and ad-hoc analysis)."""
    for path in sorted(Path(directory).glob("*.jsonl")):
        with open(path, "rb") as fh:
            for line in fh:
                try:
                    yield json.loads(line)
                except ValueError:
                    continue
