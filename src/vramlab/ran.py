"""What the learner already ran in this kernel: one registry, one reset.

A capstone's check refuses a design stored after the learner ran the very setup that answers it (lab 03: a
``cpu_plan`` of one of the design's engines; lab 04: the capstone's burst in the scheduler simulator or on the
engine; lab 06: a replay of the learner's device map; lab 08: a dry run of the T4 plan's shape), and still passes a
design that passed before that run (Run All again). The runs and the passes are noted here, by
kind, as hashable keys:

- ``"burst"``: ``(num_blocks, ((prompt blocks, prompt + new tokens' blocks), ...))`` noted by every
  ``vramlab.serving.paged.Scheduler`` that steps (``simulate`` included) and ``vramlab.serving.recorded.runs``
  (read by ``paged.burst_was_run``);
- ``"dry_run shape"``: ``(batch_size, seq_len, dtype name, compute capability, attn_implementation)`` noted by
  ``vramlab.vram.dryrun.dry_run`` (read by ``dryrun.shape_was_run`` and lab 08's check);
- ``"replayed map"``: ``vramlab.dispatch.replay.design_key(trace, model, device_map)`` (the trace's shape and the
  weights off GPU 0) noted by ``vramlab.dispatch.replay`` and by lab 06's check when it shows a replay (read by
  ``replay.design_was_replayed``);
- ``"cpu plan"``: ``vramlab.serving.vllm_memory.cpu_startup_key(...)`` (bytes per block, blocks per request, KV
  bytes, override) noted by ``vllm_memory.cpu_plan`` and lab 03's private ``_service_startup`` (read by
  ``vllm_memory.cpu_startup_was_planned`` and lab 03's capstone check);
- ``"passed <check>"``: the designs a capstone check passed before its setup ran; ``"predicted design"``: lab 06's
  recorded predictions, ``((prompts per call, placement), KV cache GiB, copy GiB, order)``;
- ``"explained log"`` / ``"explained log line"``: hashes of what ``vramlab.bnb.logs.explain_log`` read (read by
  ``logs.was_explained``); ``"predicted binary (lab 07)"``: ``(order, file name)`` of lab 07's binary predictions,
  and ``"binary log before a prediction (lab 07)"``: the capstone's log was shown before any prediction;
- ``"stored prediction"``: ``(what, time in ns, value)`` of ``checks.check_prediction`` without a measurement, and
  ``"prediction measured"``: each ``what`` whose measurement was compared (a prediction is the one stored before);
  the capstones' stored predictions (labs 00, 01, 02) are ``(time in ns, ...)`` keys read with :func:`first_before`
  (lab 02's layers prediction: :func:`last_before`) against the :func:`stamp` of their check's first run.

**Lasting records.** A kernel restart, or a subprocess started from the notebook (``!python -c ...``,
``subprocess.run([sys.executable, ...])``), used to start from an empty registry, so the answer could be run
where no guard saw it (review #8: a dry run in a child process). The evidence kinds (what ran) and the passes are
therefore noted with ``lasting=True``: they are also appended to :func:`records_file`, one JSON line each, and
:func:`ran` reads them back in any process of the same learner. The file is on where the tries file of
``vramlab.checks._core`` is (a kernel of a named notebook, in JupyterLab, Notebook or Colab, and every process
it starts, which inherits ``JPY_SESSION_NAME``), or wherever ``VRAMLAB_RAN_FILE`` points; ``off`` keeps
everything in the process (the test suite). Each line names its notebook, and a process reads only its own notebook's
lines: lab 05's exploratory dry run is not a reading of lab 08's capstone (unseen review #9). Predictions last too
(review #15 changed one after a restart); their order is the clock's (``time.time_ns()``), which holds across
processes.

:func:`_forget` is the one reset (a fresh kernel; ``tests/conftest.py`` calls it around every test); it empties
the lasting file too. A check's own
reference runs go inside :func:`_unrecorded`. Both are private:
a learner who calls them skips every guard (review #4 did, in labs 06, 07 and 08). This module imports nothing from vramlab, so the simulator, the dry
run and ``vramlab.checks._core`` (which re-exports it) can all use it without an import circle.
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Hashable, Iterator

_RAN: dict[str, set] = {}
_RECORDING = [True]

#: ``VRAMLAB_RAN_FILE``: a path, or ``off``; unset: ``vramlab/ran_records.jsonl`` in the learner's state folder
#: (``XDG_STATE_HOME``, default ``~/.local/state``) when a named notebook's kernel (or a process it started) runs.
RAN_ENV = "VRAMLAB_RAN_FILE"
RAN_FILE_NAME = "ran_records.jsonl"
_OFF = {"", "off", "0", "no", "none", "false"}
_MAX_BYTES = 4 * 2**20       # a file this long is cut to its newer half on the next note
_MAX_LINE_CHARS = 200_000    # a key whose text is longer stays in the process (a device map's placement: ~10 kB)


def notebook_key() -> str | None:
    """The notebook this process works for: ``JPY_SESSION_NAME`` (the notebook's path, which jupyter-server puts in
    each kernel's environment: ``SessionManager.get_kernel_env`` in ``jupyter_server/services/sessions/
    sessionmanager.py``, 2.21.1 as installed; the kernel's child processes inherit it), ``"colab"`` in Colab, else
    None (no notebook known: a script, nbclient)."""
    name = os.environ.get("JPY_SESSION_NAME", "").strip()
    if name:
        return name[-300:]
    return "colab" if "google.colab" in sys.modules else None


def state_file(env: str, file_name: str) -> Path | None:
    """A file of the learner's that outlives the kernel, or None (kept in the process): the path in environment
    variable ``env`` (``off`` and the like: None), else ``vramlab/<file_name>`` in the learner's state folder
    (``XDG_STATE_HOME``, default ``~/.local/state``) when a notebook is known (:func:`notebook_key`). The tries
    (``vramlab.checks._core.tries_file``) and these records follow this one rule."""
    raw = os.environ.get(env)
    if raw is not None:
        raw = raw.strip()
        return None if raw.lower() in _OFF else Path(raw).expanduser()
    if notebook_key() is None:
        return None
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(state).expanduser() / "vramlab" / file_name


@contextlib.contextmanager
def locked(path: Path, mode: str) -> Iterator:
    """``path`` opened in ``mode`` under an exclusive ``flock`` (none where fcntl is missing): the tries file and
    these records are written by several processes of one learner."""
    with open(path, mode, encoding="utf-8") as f:
        try:
            import fcntl

            fcntl.flock(f, fcntl.LOCK_EX)
        except (ImportError, OSError):
            pass
        yield f


def _notebook() -> str:
    """Whose records these are (:func:`notebook_key`, or ``"notebook"``). Records are kept per notebook, as the tries
    are: an exploratory dry run in lab 05 is not a reading of lab 08's capstone."""
    return notebook_key() or "notebook"


def records_file() -> Path | None:
    """The file that keeps the lasting records across kernel restarts and child processes, or None (in-process
    only): :func:`state_file` of ``VRAMLAB_RAN_FILE`` and ``ran_records.jsonl``."""
    return state_file(RAN_ENV, RAN_FILE_NAME)


def _key_text(key: Hashable) -> str | None:
    """``repr(key)`` when it reads back as the same key (tuples, numbers, strings, booleans), else None."""
    text = repr(key)
    if len(text) > _MAX_LINE_CHARS:
        return None
    try:
        return text if ast.literal_eval(text) == key else None
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None


_APPENDED: set = set()        # lines this process wrote already (a key is written once per process)


def _append(kind: str, keys) -> None:
    """Add one line ``{"kind": ..., "key": repr}`` per key to :func:`records_file`, in one locked write. Never
    raises: a guard's record matters less than the learner's run."""
    path = records_file()
    if path is None:
        return
    lines = []
    for key in keys:
        text = _key_text(key)
        line = json.dumps({"nb": _notebook(), "kind": kind, "key": text}) + "\n" if text is not None else None
        if line is not None and (str(path), line) not in _APPENDED:
            lines.append(line)
    if not lines:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with locked(path, "a+") as f:
            if os.fstat(f.fileno()).st_size > _MAX_BYTES:       # keep the newer half
                f.seek(0)
                old = f.readlines()
                f.seek(0)
                f.truncate()
                f.writelines(old[len(old) // 2:])
            f.writelines(lines)
        _APPENDED.update((str(path), line) for line in lines)
    except OSError:
        return


def _lasting(kind: str) -> set:
    """The keys of ``kind`` in :func:`records_file` (empty when there is none or it cannot be read)."""
    path = records_file()
    if path is None:
        return set()
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return set()
    out, notebook = set(), _notebook()
    for line in lines:
        if kind not in line:        # cheap test before parsing
            continue
        try:
            entry = json.loads(line)
            if entry.get("kind") == kind and entry.get("nb") == notebook and isinstance(entry.get("key"), str):
                out.add(ast.literal_eval(entry["key"]))
        except (ValueError, SyntaxError, TypeError, AttributeError, MemoryError, RecursionError):
            continue
    return out


def note(kind: str, key: Hashable, lasting: bool = False) -> None:
    """Remember that ``key`` of ``kind`` (``"burst"``, ``"dry_run shape"``, ...) ran here (not inside
    :func:`_unrecorded`). ``lasting``: also in :func:`records_file`, for a restarted kernel or another process of
    the same learner (what ran, what passed, what was predicted; an order in a key is the clock's, never a counter of
    this kernel)."""
    note_many(kind, (key,), lasting)


def note_many(kind: str, keys, lasting: bool = False) -> None:
    """:func:`note` for each of ``keys`` (an iterable of hashable keys), with one write to the lasting file."""
    if _RECORDING[-1]:
        keys = list(keys)
        _RAN.setdefault(kind, set()).update(keys)
        if lasting:
            _append(kind, keys)


def ran(kind: str) -> frozenset:
    """Every key of ``kind`` noted since the last :func:`_forget` (empty when none), in this process or, for a
    lasting kind, in any process that wrote :func:`records_file`."""
    return frozenset(_RAN.get(kind, set()) | _lasting(kind))


def stamp(kind: str) -> None:
    """Note, lasting, the time (ns since the epoch) of the first event of ``kind`` here; later events add nothing
    (only the first is read: :func:`first_time`)."""
    if not ran(kind):
        note(kind, time.time_ns(), lasting=True)


def first_time(kind: str) -> int | None:
    """The earliest time :func:`stamp` noted for ``kind`` (ns since the epoch), or None."""
    times = [key for key in ran(kind) if isinstance(key, int)]
    return min(times) if times else None


def _stored_before(kind: str, marks: tuple[str, ...]) -> list[tuple]:
    """The keys of ``kind`` (tuples ``(time in ns, *items)``) noted before the first :func:`stamp` of any of ``marks``,
    whichever came first (every key, when none has a stamp), oldest first."""
    stamps = [t for t in map(first_time, marks) if t is not None]
    until = min(stamps) if stamps else None
    return sorted(key for key in ran(kind) if isinstance(key, tuple) and len(key) >= 2 and isinstance(key[0], int)
                  and (until is None or key[0] <= until))


def first_before(kind: str, mark: str, *more_marks: str) -> tuple | None:
    """The earliest key of ``kind`` (a tuple ``(time in ns, *items)``) noted before the first :func:`stamp` of
    ``mark`` or of any of ``more_marks``, whichever came first (any key, when none has a stamp), as ``items``; None
    when there is none. The capstones' predictions: the one compared is the first stored before their check first
    ran."""
    stored = _stored_before(kind, (mark, *more_marks))
    return stored[0][1:] if stored else None


def last_before(kind: str, mark: str, *more_marks: str) -> tuple | None:
    """As :func:`first_before`, but the LAST key of ``kind`` noted before that first stamp. Lab 02's layers prediction:
    the one compared is the last stored before its scorer was first built, its check ran or its answer was revealed
    (review #23: a revision made before measuring counts)."""
    stored = _stored_before(kind, (mark, *more_marks))
    return stored[-1][1:] if stored else None


def _forget() -> None:
    """Forget everything noted so far, of every kind, this notebook's lasting records included (the tests call it)."""
    _RAN.clear()
    _APPENDED.clear()
    path = records_file()
    if path is None:
        return
    try:
        with locked(path, "r+") as f:
            notebook = _notebook()
            kept = []
            for line in f.readlines():
                try:
                    if json.loads(line).get("nb") != notebook:
                        kept.append(line)
                except (ValueError, AttributeError):
                    continue
            f.seek(0)
            f.truncate()
            f.writelines(kept)
        if not kept:
            path.unlink()
    except OSError:
        pass


@contextlib.contextmanager
def _unrecorded() -> Iterator[None]:
    """Nothing noted inside the block is remembered (a check's own reference runs are not the learner's)."""
    _RECORDING.append(False)
    try:
        yield
    finally:
        _RECORDING.pop()


__all__ = ["RAN_ENV", "first_before", "first_time", "last_before", "locked", "note", "note_many", "notebook_key", "ran",
           "records_file", "stamp", "state_file"]
