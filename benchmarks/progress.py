"""The workshop board on 1,500 recorded outcomes: appends, reading, text table and offline heatmap.

Writes 30 learners x 50 outcomes (the size of a full workshop room after a lab) through
``vramlab.progress.append`` into a temporary folder, then times, ``--rounds`` times each:

* ``read``  — ``read_board`` (every line parsed),
* ``text``  — ``render_text`` (the terminal table),
* ``html``  — ``write_html`` (plotly heatmap, plotly.js inlined),
* ``total`` — what ``vramlab progress DIR --html FILE`` does end to end (read + text + html).

Prints one JSON line with the medians in seconds. Acceptance: ``total < 2.0`` s. The CPU may be
shared: rerun before trusting a miss.

    python benchmarks/progress.py
    python benchmarks/progress.py --learners 60 --per-learner 100 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from vramlab import progress


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--learners", type=int, default=30)
    parser.add_argument("--per-learner", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        start = datetime.now(timezone.utc) - timedelta(minutes=90)
        t0 = time.perf_counter()
        for u in range(args.learners):
            for i in range(args.per_learner):
                progress.append(folder, user=f"learner{u:02d}", lab=f"lab0{i % 8}", exercise=f"check_{i % 25:02d}",
                                passed=(i + u) % 3 == 0, now=start + timedelta(minutes=i))
        append_s = time.perf_counter() - t0
        lines = sum(1 for _ in progress.iter_rows(folder))
        times: dict[str, list[float]] = {"read": [], "text": [], "html": [], "total": []}
        for _ in range(args.rounds):
            t = time.perf_counter()
            board = progress.read_board(folder)
            t_read = time.perf_counter()
            progress.render_text(board, stuck_min=10)
            t_text = time.perf_counter()
            progress.write_html(board, folder / "board.html", stuck_min=10)
            t_html = time.perf_counter()
            times["read"].append(t_read - t)
            times["text"].append(t_text - t_read)
            times["html"].append(t_html - t_text)
            times["total"].append(t_html - t)
        med = {k: round(statistics.median(v), 4) for k, v in times.items()}
        print(json.dumps({"lines": lines, "learners": args.learners, "append_total_s": round(append_s, 3),
                          "append_per_line_ms": round(1000 * append_s / max(lines, 1), 3), **{f"{k}_s": v for k, v in med.items()},
                          "html_bytes": (folder / "board.html").stat().st_size,
                          "acceptance_total_under_2s": med["total"] < 2.0}))


if __name__ == "__main__":
    main()
