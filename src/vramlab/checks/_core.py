"""The machinery every exercise check uses: run the learner's code, compare, say what happened.

A check never raises on a wrong answer: it prints one line starting with a pass/fail mark, what
kind of answer was wanted and what it got, and returns a :class:`CheckResult` (truthy when passed).
This is what keeps a half-done lab executable top to bottom.

Checks teach without telling: a wrong attempt is told what is wrong (the direction, a recognisable
factor, the likely misconception), never the expected value, label, range or formula. The answer comes
only when the learner asks for it: ``check_x(answer, reveal=True)`` or ``vramlab.checks.reveal("lab03", 2)``
(lab id, exercise number). Every check registers how to compute its answer with :func:`exercise`; the
result then says so (``CheckResult.revealed``). Predictions (predict, then measure) keep showing the
measured value once a number is stored: that is their point.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import math
import re
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator

if TYPE_CHECKING:
    from pathlib import Path

from vramlab import progress as _progress
# The one registry of what the learner already ran in this kernel (a capstone's burst, a dry-run shape) and which
# designs passed before that: vramlab.ran, a module without vramlab imports so the simulator and the dry run can
# note their runs without importing checks. forget_runs() is its one reset (tests/conftest.py, around every test).
from vramlab.ran import _forget as forget_runs, _unrecorded as unrecorded, note as note_run, ran as runs_noted  # noqa: F401
from vramlab.ran import locked, notebook_key, state_file

PASS_MARK = "PASS"
FAIL_MARK = "FAIL"
ANSWER_MARK = "ANSWER"
# What an untouched exercise says instead of the expected value: the answer is revealed only after a
# real attempt (a value that is not the stub's None / ... / NotImplementedError).
NOT_DONE_EXPECTED = "your answer in place of the stub"
NOT_DONE = "not done yet"   # the short form a check's "got" part shows for an untouched stub
NOT_DONE_HINT = "this exercise is not done yet: replace the stub with your code, then run this cell again"
# How checks spell an untouched value in their "got" text: None, "None (not done yet)", "ellipsis",
# "Ellipsis (not a number)", "NoneType None", "NotImplementedError from the stub", "...".
_UNTOUCHED_RE = re.compile(r"^(None|NoneType|Ellipsis|ellipsis|NotImplementedError)\b|^\.\.\.$")


def is_untouched(value: Any) -> bool:
    """True for what an untouched stub leaves behind: None, ``...``, NotImplementedError (class or instance)."""
    return (value is None or value is Ellipsis or value is NotImplementedError
            or isinstance(value, NotImplementedError))


def _untouched_text(got: str) -> bool:
    text = str(got).strip()
    return bool(_UNTOUCHED_RE.match(text))


def _value_like(text: str) -> bool:
    """A short value (``6,480 bytes``, ``'shortage'``) rather than a sentence."""
    return len(text.split()) <= 2


@dataclass
class CheckResult:
    """The outcome of one check. ``bool(result)`` is ``result.passed``.

    ``untouched``: the learner has not tried yet (the stub's None / ``...`` / NotImplementedError); the
    message then does not reveal the expected value.
    """

    name: str
    passed: bool
    expected: str
    got: str
    hint: str = ""
    details: dict = field(default_factory=dict)
    untouched: bool = False
    revealed: bool = False   # the learner asked for the answer (reveal=True or checks.reveal(...))
    answer: str = ""         # the revealed answer; "" unless revealed

    def __bool__(self) -> bool:
        return self.passed

    @property
    def message(self) -> str:
        """The verdict line, and when the answer was asked for, an ``ANSWER <name>: ...`` line after it."""
        line = self.verdict
        if self.revealed:
            line += f"\n{ANSWER_MARK} {self.name}: {str(self.answer).rstrip('.')}."
        return line

    @property
    def verdict(self) -> str:
        got = str(self.got).rstrip(".")
        if self.passed:
            if self.expected and _value_like(got):
                return f"{PASS_MARK} {self.name}: {got}, as expected."
            return f"{PASS_MARK} {self.name}: {got}."
        if self.untouched:
            return f"{FAIL_MARK} {self.name}: expected {NOT_DONE_EXPECTED}; got {got}. Hint: {self.hint or NOT_DONE_HINT}."
        text = f"{FAIL_MARK} {self.name}: expected {str(self.expected).rstrip('.')}; got {got}."
        if self.hint:
            hint = str(self.hint).strip()
            text += f" Hint: {hint}" + ("" if hint.endswith((".", "!", "?", ")")) else ".")
        return text

    def _ipython_display_(self) -> None:  # the check already printed its line
        return None


_MISSING = object()

# Printed check lines break at spaces in a notebook: JupyterLab's output area wraps long lines anywhere,
# mid-word. ``CheckResult.message`` / ``verdict`` stay one line each; only what a kernel prints wraps.
WRAP_WIDTH = 100
WRAP_INDENT = "    "
WRAP_ENV = "VRAMLAB_CHECK_WIDTH"   # columns for printed check lines; 0 = never wrap (default: 100 in a kernel)


def wrap_check_line(line: str, width: int = WRAP_WIDTH) -> str:
    """One printed line broken at spaces into lines of at most ``width`` characters (a word longer than
    that stays whole), the continuation lines indented by four spaces. A ``FAIL`` line keeps its
    "expected ...; got" on the first line, however long (tests/browser/smoke_jupyterlab.mjs reads it there)."""
    import textwrap

    if width <= 0 or len(line) <= width:
        return line
    first_width = width
    if line.startswith(FAIL_MARK + " ") and "; got " in line:
        start = line.index("; got ") + len("; got ")
        end = line.find(" ", start)                     # and the first word of what it got
        first_width = max(width, end if end > 0 else len(line))
    options = dict(break_long_words=False, break_on_hyphens=False, replace_whitespace=False, expand_tabs=False)
    first = (textwrap.wrap(line, width=first_width, **options) or [line])[0]
    if not line.startswith(first):
        return line
    rest = line[len(first):].strip()
    if not rest:
        return first
    return "\n".join([first, *textwrap.wrap(rest, width=width, initial_indent=WRAP_INDENT,
                                             subsequent_indent=WRAP_INDENT, **options)])


def _in_kernel() -> bool:
    shell = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)()
    return getattr(shell, "kernel", None) is not None


def print_width() -> int:
    """Columns at which printed check lines wrap: ``VRAMLAB_CHECK_WIDTH`` if set, else 100 in a Jupyter
    kernel (JupyterLab, Colab, nbval) and 0 (one line, the terminal wraps) elsewhere."""
    import os

    raw = os.environ.get(WRAP_ENV, "").strip()
    if raw:
        try:
            return max(0, int(raw))
        except ValueError:
            return WRAP_WIDTH
    return WRAP_WIDTH if _in_kernel() else 0


def printed(message: str, width: int | None = None) -> str:
    """``message`` as a check prints it: each line wrapped by :func:`wrap_check_line`."""
    width = print_width() if width is None else width
    return "\n".join(wrap_check_line(line, width) for line in message.split("\n"))


# --------------------------------------------------------------------------- answers, revealed on request
@dataclass(frozen=True)
class Exercise:
    """One check's place in a lab and how to compute its answer.

    ``lab``: ``"lab03"``; ``number``: the notebook's ``### Exercise N`` (None for a prediction outside an
    exercise); ``answer``: called with the check's own arguments after the learner's answer (by name,
    all optional) and returns the answer as text; ``prediction``: a predict-then-measure check, whose
    PASS line shows the measured value anyway.
    """

    lab: str
    number: int | None
    check: str
    answer: Callable[..., str]
    prediction: bool = False
    choices: tuple[str, ...] = ()   # a multiple-choice check's labels (tests try every wrong one)
    max_wrong: int | None = None   # the capstones judge at most this many wrong attempts


#: check name -> its Exercise, filled by :func:`exercise` when a labNN module is imported.
EXERCISES: dict[str, Exercise] = {}
_REVEALING: contextvars.ContextVar = contextvars.ContextVar("vramlab_checks_revealing", default=None)
# True inside a capstone's check run again on an attempt it already counted: the verdict is printed again, and no try
# is added (review #23: re-running one over-budget plan moved its hints from try 2 to try 4)
_REPEATED: contextvars.ContextVar = contextvars.ContextVar("vramlab_checks_repeated", default=False)


#: A capstone judges at most this many wrong attempts (counted across kernel restarts with the tries), then only a
#: reveal: unseen review #12 reached PASS in four capstones with a loop over every design (59 to 651 calls).
CAPSTONE_MAX_WRONG = 12


def exercise(lab: str, number: int | None, answer: Callable[..., str], *, prediction: bool = False,
             choices: tuple[str, ...] | list[str] = (), max_wrong: int | None = None,
             attempt_key: Callable[..., Any] | None = None):
    """Decorator: register a check as ``lab``'s exercise ``number`` and give it a ``reveal=False`` keyword.

    ``choices``: the labels of a multiple-choice check (``tests/test_checks.py`` tries each wrong one and holds
    that its message names no other label). ``max_wrong``: after that many counted wrong attempts the check judges
    no more (a FAIL that counts no try, offering ``reveal=True``) until a pass or a reveal (the capstones:
    :data:`CAPSTONE_MAX_WRONG`). Such a check counts each distinct attempt once, toward ``max_wrong`` and toward the
    hint tiers alike; ``attempt_key(*args, **kwargs)`` says when two attempts are the same (default: their ``repr``;
    lab 02's plans compare as sets of layers).

    With ``reveal=True`` the check runs as usual (the learner's answer is still judged), and its result
    also carries the answer (``answer(**the check's other arguments)``), printed on an ``ANSWER`` line
    after the verdict, with ``revealed=True``.
    """

    def decorate(check: Callable[..., CheckResult]) -> Callable[..., CheckResult]:
        sig = inspect.signature(check)
        entry = Exercise(lab, number, check.__name__, answer, prediction, tuple(choices), max_wrong)
        known = EXERCISES.get(check.__name__)
        if known is not None and (known.lab, known.number) != (lab, number):
            # review #10b decorated its own function named check_l4_plan with `exercise` and opened lab 09's cells
            raise ValueError(f"a check named {check.__name__!r} is already registered for {known.lab} exercise "
                             f"{known.number}: give the new check another name.")
        EXERCISES[check.__name__] = entry

        wrong_key = f"{check.__name__} (wrong attempts)"

        @functools.wraps(check)
        def wrapper(*args, reveal: bool = False, **kwargs) -> CheckResult:
            if not reveal:
                if max_wrong is not None and tries(wrong_key) >= max_wrong:
                    return report(check.__name__, False, "an attempt the check still judges",
                                  f"{max_wrong} wrong attempts judged already",
                                  f"the check judges no more: read the hints once more, then ask for the answer with "
                                  f"{check.__name__}(..., reveal=True)", counts=False)
                digest = _attempt_digest(args, kwargs, attempt_key)
                token = _REPEATED.set(max_wrong is not None and digest in _SEEN_WRONG.get(wrong_key, ()))
                try:
                    return _counted(_stamped(check(*args, **kwargs)), digest)
                finally:
                    _REPEATED.reset(token)
            try:
                bound = sig.bind(*args, **kwargs)
                context = {k: v for k, v in list(bound.arguments.items())[1:]}
            except TypeError:
                context = {}
            token = _REVEALING.set((entry, context))
            try:
                return _counted(_stamped(check(*args, **kwargs)), _attempt_digest(args, kwargs, attempt_key))
            finally:
                _REVEALING.reset(token)

        def _counted(result, digest: str):
            """Count a wrong attempt the check counted (not a stub, not a malformed one) toward ``max_wrong``, once
            per distinct attempt in this kernel (review #13: re-running one wrong cell used the attempts up)."""
            if max_wrong is not None and isinstance(result, CheckResult):
                seen = _SEEN_WRONG.setdefault(wrong_key, set())
                if result.passed or result.revealed:
                    reset_tries(wrong_key)
                    seen.clear()
                elif result.details.get("counted") and digest not in seen:
                    seen.add(digest)
                    add_try(wrong_key)
            return result

        def _stamped(result):
            """The result, marked with the check that returned it, and, when it passed or was revealed, as opening
            that check's later cells (read by :func:`opened_by`)."""
            if isinstance(result, CheckResult):
                result.details.setdefault("check", check.__name__)
                if (result.passed or result.revealed) and check.__module__.startswith("vramlab.checks."):
                    _mark_opened(result, check.__name__)
                    note_run(OPENED_KIND, check.__name__, lasting=True)
            return result

        wrapper.__signature__ = sig.replace(parameters=[
            *sig.parameters.values(),
            inspect.Parameter("reveal", inspect.Parameter.KEYWORD_ONLY, default=False, annotation=bool)])
        wrapper._exercise = entry     # private: its answer() is the answer (review #9b called check.exercise.answer())
        return wrapper

    return decorate


def answer_text(check: str, **context) -> str:
    """The answer of the registered check named ``check`` (text), computed from ``context`` (its other arguments)."""
    entry = EXERCISES[check]
    try:
        return str(entry.answer(**context))
    except Exception as exc:  # noqa: BLE001 - a reveal must not crash the lab
        return f"(could not be computed here: {type(exc).__name__}: {exc})"


def _exercise_number(lab: str, number: Any) -> str:
    """``"2"`` for ``2``, ``"2"`` and for lab00 also ``"0.1"`` -> ``"1"`` (the notebook's "Exercise 0.1")."""
    text = str(number).strip()
    prefix = f"{int(lab[3:])}." if lab[3:].isdigit() else ""
    if prefix and text.startswith(prefix) and "." in text:
        text = text[len(prefix):]
    return text


class RevealedAnswer(CheckResult):
    """What :func:`reveal` returns for one check: only the ``ANSWER`` line (there was no attempt to judge)."""

    @property
    def message(self) -> str:
        return f"{ANSWER_MARK} {self.name}: {str(self.answer).rstrip('.')}."


class Revealed(list):
    """The results of :func:`reveal` (one per check of the exercise); each already printed its line."""

    def _ipython_display_(self) -> None:
        return None


def reveal(lab: str, number: int | str) -> Revealed:
    """Show the answer of ``lab``'s exercise ``number`` (``reveal("lab03", 2)``), and record that it was revealed.

    Prints one ``ANSWER <check> (<lab> exercise <n>): ...`` line per check of the exercise; returns their
    results (:class:`RevealedAnswer`: not passed, ``revealed=True``).
    """
    lab_id = str(lab).strip().lower()
    if lab_id.isdigit():
        lab_id = f"lab{int(lab_id):02d}"
    want = _exercise_number(lab_id, number)
    entries = [e for e in EXERCISES.values() if e.lab == lab_id and str(e.number) == want]
    if not entries:
        known = sorted({f"{e.lab} {e.number}" for e in EXERCISES.values() if e.number is not None})
        raise ValueError(f"no exercise {number!r} in {lab!r}: use a lab id and an exercise number, one of "
                         f"{', '.join(known)}.")
    results = Revealed()
    for entry in entries:
        token = _REVEALING.set((entry, {}))
        try:
            results.append(report(f"{entry.check} ({entry.lab} exercise {entry.number})", False, "",
                                  "the answer, revealed on request", result_class=RevealedAnswer))
        finally:
            _REVEALING.reset(token)
    return results


def report(name: str, passed: bool, expected: str, got: str, hint: str = "", *, value: Any = _MISSING,
           untouched_hint: str = "", result_class: type | None = None, counts: bool = True,
           **details) -> CheckResult:
    """Print the one-line verdict and return it as a :class:`CheckResult`.

    Format: ``PASS <name>: <got>[, as expected].`` or ``FAIL <name>: expected <expected>; got <got>. Hint: ...``.
    ``expected`` describes the kind of answer wanted ("a number of bytes", "a tensor of shape (3, 8)"),
    never the answer itself. A failure on an untouched stub (``value`` is None / ``...`` /
    NotImplementedError, or, when ``value`` is not given, ``got`` reads ``None``) says "not done yet".
    Inside a check called with ``reveal=True`` (or :func:`reveal`) the result carries the answer,
    printed on an ``ANSWER`` line, and ``revealed=True``. ``counts=False``: a failure of form (a malformed "why",
    :func:`malformed_reason`) that is not counted as a wrong try (tries open the hints and stop the directions).
    """
    untouched = not passed and (is_untouched(value) if value is not _MISSING else _untouched_text(got))
    if untouched:
        hint = untouched_hint  # the exercise's own hint can wait for a real attempt too
    revealing = _REVEALING.get()
    if passed or revealing is not None:
        reset_tries(name)
    elif not untouched and result_class is None and counts:
        details["counted"] = True
        offer = hint_offer(tries(name) if _REPEATED.get() else add_try(name))
        if offer:
            text = str(hint).strip()
            hint = (f"{text} {offer}" if text.endswith(("?", "!")) else f"{text.rstrip('.')}. {offer}") if text else offer
    result = (result_class or CheckResult)(name, bool(passed), expected, got, hint if not passed else "",
                                           details, untouched)
    if revealing is not None:
        entry, context = revealing
        result.revealed = True
        result.details["revealed"] = True   # what the workshop's progress record reads
        result.answer = answer_text(entry.check, **context)
        _REVEALING.set(None)   # one verdict per check call reveals
    print(printed(result.message))
    _progress.record(result)  # one JSON line when VRAMLAB_PROGRESS_DIR is set (off by default)
    return result


# --------------------------------------------------------------------------- the package's own answers
class UsedPackageAnswer(Exception):
    """Raised by a stand-in for one of vramlab's reference functions while the learner's function runs."""

    def __init__(self, label: str):
        super().__init__(f"your function calls vramlab's own {label}")
        self.label = label


@contextlib.contextmanager
def guarded(fn: Callable, forbidden: dict[str, Callable]) -> Iterator[None]:
    """While the block runs, each function in ``forbidden`` (label -> vramlab's reference function) is
    replaced by a stand-in that raises :class:`UsedPackageAnswer`: in its own module, in the learner's
    globals (``from vramlab.quarot.hadamard import fwht``) and in any module the learner's globals name
    (``quant.quantize_per_token_sym``), and in the learner's closure cells. Everything is put back
    afterwards. ``fn`` being one of them itself is caught by :func:`call_learner` before the call."""
    targets = {id(f): label for label, f in forbidden.items()}
    originals = {id(f): f for f in forbidden.values()}
    spaces: list[Any] = []
    for f in forbidden.values():
        module = sys.modules.get(getattr(f, "__module__", ""), None)
        if module is not None:
            spaces.append(module)
    learner_globals = getattr(fn, "__globals__", None)
    if isinstance(learner_globals, dict):
        spaces.append(learner_globals)
        spaces.extend(v for v in list(learner_globals.values()) if isinstance(v, type(sys)))
    replaced: list[tuple[Any, str, Callable]] = []

    def stand_in(label: str) -> Callable:
        def used(*args, **kwargs):
            raise UsedPackageAnswer(label)
        return used

    try:
        for cell in getattr(fn, "__closure__", None) or ():
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            if callable(value) and id(value) in targets and value is originals[id(value)]:
                replaced.append((cell, "cell_contents", value))
                cell.cell_contents = stand_in(targets[id(value)])
        for space in spaces:
            items = list(space.items()) if isinstance(space, dict) else list(vars(space).items())
            for key, value in items:
                if callable(value) and id(value) in targets and value is originals[id(value)]:
                    replaced.append((space, key, value))
                    if isinstance(space, dict):
                        space[key] = stand_in(targets[id(value)])
                    else:
                        setattr(space, key, stand_in(targets[id(value)]))
        yield
    finally:
        for space, key, value in reversed(replaced):
            if isinstance(space, dict):
                space[key] = value
            else:
                setattr(space, key, value)


def describe_error(exc: BaseException) -> str:
    if isinstance(exc, NotImplementedError):
        return "NotImplementedError (the exercise is not done yet)"
    return f"{type(exc).__name__}: {exc}"


def learner_line(exc: BaseException, fn: Callable) -> str:
    """``"line 3 of your cell: y = x @ H"``: where in the learner's code ``exc`` was raised, or "".

    The deepest traceback frame in the file ``fn`` was defined in (a notebook cell), read back through
    ``linecache`` (IPython registers every cell there).
    """
    import linecache
    import traceback

    filename = getattr(getattr(fn, "__code__", None), "co_filename", None)
    if not filename:
        return ""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == filename]
    if not frames:
        return ""
    frame = frames[-1]
    text = (frame.line or linecache.getline(frame.filename, frame.lineno)).strip()
    where = "your cell" if ("ipykernel" in filename or filename.startswith("<")) else filename
    return f"line {frame.lineno} of {where}: {text}" if text else f"line {frame.lineno} of {where}"


def call_learner(name: str, fn: Callable, *args, expected: str = "", none_is_untouched: bool = True,
                 forbidden: dict[str, Callable] | None = None, **kwargs) -> tuple[Any, CheckResult | None]:
    """Call the learner's function; on an exception return ``(None, failing CheckResult)``.

    An untouched stub (``fn`` is None, it raises NotImplementedError, or, with ``none_is_untouched``,
    it returns None / ``...``) fails without revealing ``expected``. Any other exception fails with
    the line of the learner's cell that raised it. ``forbidden`` (label -> vramlab's reference function):
    a function that simply calls one of them fails ("write it yourself"), see :func:`guarded`.
    """
    if fn is None or fn is Ellipsis:
        return None, report(name, False, expected or "a function", repr(fn), value=fn)
    if not callable(fn):
        return None, report(name, False, expected or "a function", f"{fmt_number(fn)} (not a function)",
                            hint="define the function in the exercise cell, then run this cell again")
    used = next((label for label, f in (forbidden or {}).items() if fn is f), None)
    if used is not None:   # `butterfly = fwht`
        return None, report(name, False, expected or "your own code", f"vramlab's own {used} itself",
                            hint=f"your function is vramlab's own {used}; write it yourself")
    try:
        with guarded(fn, forbidden or {}):
            value = fn(*args, **kwargs)
    except UsedPackageAnswer as exc:
        return None, report(name, False, expected or "your own code", f"a call to vramlab's own {exc.label}",
                            hint=f"your function calls vramlab's own {exc.label}; write it yourself")
    except NotImplementedError as exc:
        return None, report(name, False, expected, "NotImplementedError from the stub", value=exc)
    except Exception as exc:  # noqa: BLE001 - anything the learner raises is reported
        where = learner_line(exc, fn)
        return None, report(name, False, expected or "no exception",
                            describe_error(exc) + (f", raised at {where}" if where else ""),
                            hint="fix that line, run the exercise cell, then this check again", value=exc)
    if none_is_untouched and (value is None or value is Ellipsis):
        return None, report(name, False, expected, f"{value!r} from your function", value=value,
                            untouched_hint="not done yet, or the `return` line is missing: write your code where "
                                           "the stub is, end it with `return <result>`, then run this cell again")
    return value, None


def fmt_number(x: Any, digits: int = 6) -> str:
    if x is None or x is Ellipsis:
        return repr(x)
    if isinstance(x, bool):
        return repr(x)
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        if math.isnan(x) or math.isinf(x):
            return repr(x)
        if x.is_integer() and abs(x) < 1e15:
            return f"{int(x):,}"
        return f"{x:.{digits}g}"
    return repr(x)[:200]


def as_float(x: Any) -> float | None:
    """A plain float from a Python/NumPy/torch scalar, or None when it is not a number."""
    try:
        if hasattr(x, "item") and getattr(x, "numel", lambda: 1)() == 1:
            x = x.item()
        if isinstance(x, bool):
            return None
        return float(x)
    except (TypeError, ValueError):
        return None


# --------------------------------------------------------------------------- tries, directions and hints
#: check name -> the learner's wrong attempts so far (an untouched stub does not count, a pass or a reveal starts
#: the count again). Checks read it through :func:`tries`; the tests reset it per test. In a notebook the counts
#: are also kept in a small JSON file (:func:`tries_file`), so restarting the kernel does not reset the hints
#: and the withheld directions.
_TRIES: dict[str, int] = {}
#: A wrong number is told its direction (too high / too low) on its first two tries only: after that a
#: learner could bisect an exact answer in a few more tries, so the check offers the next hint instead.
DIRECTION_TRIES = 2
#: The three collapsed hint tiers every exercise has, in the order a check offers them.
HINT_TIERS = ("Hint 1 (the idea)", "Hint 2 (where to look)", "Hint 3 (pseudocode)")
NO_DIRECTION = "not it"
#: Where the tries are kept: a path; ``off`` (or ``0``, ``no``, ``none``, empty) keeps them in the kernel only.
#: Unset: ``<learner's state folder>/vramlab/check_tries.json`` in a notebook whose name the kernel knows (JupyterLab and Jupyter
#: Notebook set ``JPY_SESSION_NAME``; Colab has one notebook per runtime), else the kernel only (scripts, nbclient).
#: The test suite sets it to ``off`` (tests/conftest.py), so it never reads or writes a learner's file.
TRIES_ENV = "VRAMLAB_TRIES_FILE"
TRIES_FILE_NAME = "check_tries.json"
_MAX_TRIES_KEYS = 2000   # a file never grows without bound: the oldest notebooks' entries go first


def _notebook_key() -> str | None:
    """The notebook the tries belong to (:func:`vramlab.ran.notebook_key`: ``JPY_SESSION_NAME``, ``"colab"``, or None)."""
    return notebook_key()


def tries_file() -> "Path | None":
    """The JSON file that keeps the tries across kernel restarts, or None when they live in the kernel only.

    ``VRAMLAB_TRIES_FILE``: a path, or ``off``; unset: ``vramlab/check_tries.json`` in the learner's state folder
    (``XDG_STATE_HOME``, default ``~/.local/state``) when the kernel runs a named notebook. Neither the notebook's
    folder (a workshop's notebooks may sit in a shared or read-only folder, and a file beside them would end up in
    a learner's git commits) nor the vramlab cache (``VRAMLAB_CACHE``: a workshop room shares one, read-only, among
    all its learners, whose tries would then mix; the room's hub test caught it)."""
    return state_file(TRIES_ENV, TRIES_FILE_NAME)


def _tries_key(name: str) -> str:
    return f"{_notebook_key() or 'notebook'} :: {name}"


def _read_tries(path) -> dict[str, int]:
    """The file's ``{"<notebook> :: <check>": count}``, or {} when it is missing or not such a dict."""
    import json

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): int(v) for k, v in data.items()
            if isinstance(v, int) and not isinstance(v, bool) and 0 < v < 10**6}


def _update_tries(change: Callable[[dict[str, int]], None]) -> None:
    """Apply ``change`` to the file's counts under an exclusive lock, written atomically (a temporary file, then
    ``os.replace``). Never raises: a check's verdict matters more than its counter."""
    import json
    import os
    import tempfile

    path = tries_file()
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with locked(path.with_name(path.name + ".lock"), "a+"):
            counts = _read_tries(path)
            change(counts)
            if len(counts) > _MAX_TRIES_KEYS:
                counts = dict(list(counts.items())[-_MAX_TRIES_KEYS:])
            fd, tmp = tempfile.mkstemp(prefix=".check_tries.", dir=str(path.parent))
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as out:
                    json.dump(counts, out, indent=0, sort_keys=True)
                os.replace(tmp, path)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
    except OSError:
        return


def tries(name: str) -> int:
    """How many wrong attempts the check ``name`` has seen (0 before the first), kept across kernel restarts in
    :func:`tries_file` when there is one."""
    path = tries_file()
    if path is None:
        return _TRIES.get(name, 0)
    return max(_TRIES.get(name, 0), _read_tries(path).get(_tries_key(name), 0))


def add_try(name: str) -> int:
    """Count one more wrong attempt of check ``name`` (in the kernel and in :func:`tries_file`); returns the count."""
    count = tries(name) + 1
    _TRIES[name] = count
    key = _tries_key(name)
    _update_tries(lambda counts: counts.__setitem__(key, count))
    return count


def reset_tries(name: str | None = None) -> None:
    """Forget the wrong attempts of check ``name`` (all checks of this notebook when None), in the kernel and in
    :func:`tries_file`; a pass or a reveal does it for its check, the test suite for all before each test."""
    if name is None:
        _TRIES.clear()
        _SEEN_WRONG.clear()
        prefix = f"{_notebook_key() or 'notebook'} :: "
        _update_tries(lambda counts: [counts.pop(k) for k in [k for k in counts if k.startswith(prefix)]])
    else:
        _TRIES.pop(name, None)
        key = _tries_key(name)
        if tries_file() is not None and key in _read_tries(tries_file()):
            _update_tries(lambda counts: counts.pop(key, None))


def hint_offer(wrong_tries: int) -> str:
    """What a check adds after the learner's ``wrong_tries``-th wrong attempt: nothing after the first, then
    the next hint tier (Hint 1 after the 2nd try, Hint 2 after the 3rd, Hint 3 after the 4th), then how to
    ask for the answer. It names the tier; the hint itself stays in its collapsed box above the exercise."""
    if wrong_tries < 2:
        return ""
    tier = wrong_tries - 2
    if tier < len(HINT_TIERS):
        return f"That is try {wrong_tries}: open {HINT_TIERS[tier]} above the exercise."
    return (f"That is try {wrong_tries} and all three hints are open: compare your steps with Hint 3, or call "
            "this check with reveal=True to see the answer.")


def _factor_text(ratio: float) -> str:
    """``"2x too high"``, ``"8x too low"``, ``"2.4% too high"`` for a ratio of got / wanted."""
    k = ratio if ratio >= 1 else 1 / ratio
    side = "too high" if ratio > 1 else "too low"
    if abs(k - round(k)) <= 1e-3 * k:
        return f"{int(round(k))}x {side}"
    return f"{(k - 1):.1%} {side}"


def direction(value: float, want: float, factors: dict[float, str] | None = None, name: str | None = None) -> str:
    """How a wrong number is off, without the answer.

    ``factors`` maps a ratio got/wanted that names a misconception to that misconception, e.g.
    ``{2: "K and V counted twice", 0.5: "K or V left out", 1 / 8: "bits, not bytes", 1024 / 1000: "GiB vs GB"}``:
    a value off by exactly such a factor (0.1%) is told ``"2x too high (K and V counted twice)"``. Only those
    factors are named: a bare "16x too high" names no mistake and is one division from the answer. Anything
    else is ``"too high"`` / ``"too low"`` / ``"the wrong sign"``. With ``name`` (the check's name), from the
    learner's third wrong try on the direction is withheld (:data:`DIRECTION_TRIES`): the result is
    ``"not it"`` and :func:`report` offers the next hint instead, so an exact answer cannot be bisected.
    """
    if name is not None and tries(name) >= DIRECTION_TRIES:
        return NO_DIRECTION
    if not (math.isfinite(value) and math.isfinite(want)) or want == 0:
        return "too high" if value > want else "too low"
    ratio = value / want
    if ratio <= 0:
        return "too low" if value == 0 else "the wrong sign"
    for factor, why in (factors or {}).items():
        if factor > 0 and math.isclose(ratio, factor, rel_tol=1e-3):
            return f"{_factor_text(factor)} ({why})"
    return "too high" if ratio > 1 else "too low"


def read_number(name: str, what: str, got: Any, example: str = "500") -> float | CheckResult:
    """The learner's number as a finite float, or the FAIL result to return: "not done yet" for an untouched
    stub, "(not a number)" with a hint to store a plain number (``example``) for anything else."""
    if is_untouched(got):
        return report(name, False, what, fmt_number(got), value=got)
    value = as_float(got)
    if value is None or not math.isfinite(value):
        return report(name, False, what, f"{fmt_number(got)} (not a number)",
                      hint=f"store a plain number, e.g. {example}")
    return value


def check_close(name: str, got: Any, expected: float, rel: float = 1e-6, abs_tol: float = 0.0,
                unit: str = "", hint: str = "", what: str = "",
                factors: dict[float, str] | None = None) -> CheckResult:
    """Pass when ``got`` is a number within ``rel`` (relative) or ``abs_tol`` of ``expected``.

    A wrong number is told its direction (:func:`direction`, naming only the ``factors`` given: ratio ->
    misconception), never ``expected``, and from the third wrong try on not even that; ``what`` describes
    the answer wanted (default ``"a number of <unit>"``).
    """
    value = as_float(got)
    unit_s = f" {unit}" if unit else ""
    want = what or (f"a number of {unit}" if unit else "a number")
    if value is None:
        return report(name, False, want, f"{fmt_number(got)}" + ("" if is_untouched(got) else " (not a number)"),
                      hint, value=got)
    ok = math.isclose(value, expected, rel_tol=rel, abs_tol=abs_tol)
    if ok:
        return report(name, True, want, f"{fmt_number(value)}{unit_s}", value=got)
    return report(name, False, want, f"{fmt_number(value)}{unit_s}, {direction(value, expected, factors, name)}", hint,
                  value=got)


# --------------------------------------------------------------------------- multiple choice
def check_choice(name: str, got: Any, options: dict[str, str], correct: str | set[str] | tuple[str, ...],
                 what: str = "") -> CheckResult:
    """A multiple-choice check: ``options`` maps each choice's label (``"a"``, ``"shortage"``) to a sentence.

    For a wrong choice the sentence says why THAT choice fails, from the evidence the learner has: it must not
    name another choice nor hint at the right one (``tests/test_checks.py`` tries every wrong label and holds
    that its message names no other label). For a right choice it is the reason, shown on the PASS line.
    Labels compare case-insensitively, stripped of spaces and quotes. ``what`` describes the answer wanted
    (default: "one of 'a', 'b', 'c'").
    """
    right = {correct} if isinstance(correct, str) else set(correct)
    unknown = right - set(options)
    if unknown:
        raise ValueError(f"check_choice {name!r}: the correct label(s) {sorted(unknown)} are not among the options")
    want = what or "one of " + ", ".join(repr(label) for label in options)
    if is_untouched(got):
        return report(name, False, want, fmt_number(got), value=got)
    label = str(got).strip().strip("'\"").strip()
    match = next((k for k in options if k.lower() == label.lower()), None)
    if match is None:
        return report(name, False, want, f"{str(got)[:60]!r} (not one of the choices)",
                      hint="store one of the labels above, as a string")
    if match in right:
        return report(name, True, want, f"{match}: {options[match]}")
    return report(name, False, want, repr(match), hint=options[match])


def keyed_dict_problem(name: str, value: Any, keys: tuple[str, ...] | list[str], *, expected: str,
                       untouched_hint: str, keys_hint: str = "use exactly these key names",
                       counts: bool = True) -> "CheckResult | None":
    """The FAIL for an exercise's dict of answers that is not yet one to judge, or None when it is: not a dict
    (``expected`` says what was wanted), a dict of None (not done yet, ``untouched_hint``), or other keys than ``keys``
    (missing and unknown ones named, ``keys_hint``; ``counts``: whether that counts as a wrong try)."""
    if not isinstance(value, dict):
        return report(name, False, expected, fmt_number(value), "fill in the dict in the exercise cell", value=value)
    if set(value) <= set(keys) and all(is_untouched(value.get(k)) for k in value):
        return report(name, False, "", "a dict of None", value=None, untouched_hint=untouched_hint)
    unknown = [str(k) for k in value if k not in keys]
    missing = [k for k in keys if k not in value]
    if unknown or missing:
        problem = "; ".join(x for x in (f"missing {', '.join(missing)}" if missing else "",
                                        f"unknown {', '.join(unknown)}" if unknown else "") if x)
        return report(name, False, f"keys {', '.join(keys)}", problem, keys_hint, counts=counts)
    return None


def malformed_reason(name: str, why: Any, field: str = "why", expected: str = "") -> CheckResult | None:
    """The FAIL result to return when ``why`` (the reason part of an answer, named ``field`` in the learner's cell)
    is not a sentence: not a string, empty, or only whitespace; else None. One sentence naming the field and the
    fix, and not a wrong try: a reason the learner has not written yet is a matter of form, so it opens no hint and
    withholds no direction (:func:`report` with ``counts=False``)."""
    if isinstance(why, str) and why.strip():
        return None
    shown = ("an empty string" if isinstance(why, str) and not why else
             "only whitespace" if isinstance(why, str) else f"{repr(why)[:40]} (not a string)")
    return report(name, False, expected or f"{field} as one sentence in quotes", shown,
                  f"write {field} as one sentence in quotes, e.g. \"because ...\", then run this cell again",
                  value=shown, counts=False)   # a None why beside a real choice is told this too, not "not done yet"


def check_choice_and_reason(name: str, got: Any, options: dict[str, str], correct: str, reason_words: tuple[str, ...],
                            reason: str, reason_hint: str) -> CheckResult:
    """A ``(choice, why)`` pair: ``choice`` is judged by :func:`check_choice`; once it is right, ``why`` must hold
    one of ``reason_words`` (the mechanism in the learner's words, never a number). ``reason`` names what the why
    must give ("the mechanism"), ``reason_hint`` says what to write about, without the answer. A ``why`` that is not
    a sentence (not a string, empty, whitespace) is told so first, and is not counted as a wrong try
    (:func:`malformed_reason`)."""
    if is_untouched(got):
        return report(name, False, "a pair (choice, why)", f"None ({NOT_DONE})", value=got)
    if isinstance(got, str):
        return report(name, False, "a pair (choice, why)", f"only {got[:40]!r}",
                      "add one sentence saying why, e.g. (\"x\", \"because ...\")")
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        return report(name, False, "a pair (choice, why)", fmt_number(got))
    choice, why = got
    if not is_untouched(choice):   # a malformed why is told first, and not counted as a wrong try of the choice
        malformed = malformed_reason(name, why, "the why (the pair's second item)")
        if malformed is not None:
            return malformed
    result = check_choice(name, choice, options, correct, what="a letter from the list above")
    if not result.passed:
        return result
    text = why.lower()
    if not any(w in text for w in reason_words):
        return report(name, False, f"a why that names {reason}", repr(why)[:80], reason_hint)
    return result


# --------------------------------------------------------------------------- learners' code at model scale
def learners_or_package(passed: Any, learner: Callable | None, package: Callable, what: str,
                        print_line: Callable[[str], None] = print) -> Callable:
    """The function the rest of the lab runs: the learner's own ``learner`` when its check passed (``passed``
    is that check's :class:`CheckResult`, or a bool), else vramlab's ``package`` function. Prints one line
    saying which, e.g. ``"Your butterfly passed its check: the rotated model below runs it inside the online
    Hadamard."`` or ``"Your butterfly has not passed its check yet, so the lab runs vramlab's
    vramlab.quarot.hadamard.fwht in its place."``."""
    if bool(passed) and callable(learner):
        print_line(f"Your {what} passed its check: the lab runs it from here on.")
        return learner
    qualified = f"{getattr(package, '__module__', 'vramlab')}.{getattr(package, '__qualname__', repr(package))}"
    print_line(f"Your {what} has not passed its check yet, so the lab runs vramlab's {qualified} in its place.")
    return package


_SEEN_WRONG: dict[str, set] = {}     # the capstones' wrong attempts already counted in this kernel, by digest


def _attempt_digest(args: tuple, kwargs: dict, attempt_key: Callable[..., Any] | None = None) -> str:
    """A short digest of a check's arguments (their repr, at most 100,000 characters, or the repr of
    ``attempt_key(*args, **kwargs)`` where that is given and does not raise): one attempt, one count."""
    import hashlib

    try:
        key = None
        if attempt_key is not None:
            try:
                key = ("key", attempt_key(*args, **kwargs))
            except Exception:  # noqa: BLE001 - a malformed attempt is told apart by its repr
                key = None
        text = repr((args, sorted(kwargs.items())) if key is None else key)[:100_000]
    except Exception:  # noqa: BLE001 - an argument whose repr fails still counts, once per call
        text = str(id(args))
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:16]


#: ``vramlab.ran``: the checks that passed or were revealed in this notebook (lab 09's Exercise 3 waits for Exercise 1)
OPENED_KIND = "check passed or revealed"
_OPENED_TOKEN = object()      # marks results a check issued as passed or revealed (a hand-built result has none)


def _mark_opened(result: CheckResult, check_name: str) -> None:
    """Mark ``result`` as issued by ``check_name`` as passed or revealed (the checks' wrapper; tests that stand in for
    a pass call it)."""
    result.__dict__["_opened_for"] = (check_name, _OPENED_TOKEN)


def opened_by(result: Any, check_name: str) -> bool:
    """True when ``result`` is the :class:`CheckResult` that the check ``check_name`` (``"check_rank_plan"``) returned
    as passed or revealed: what a cell after a capstone's check waits for before it shows the answer. Any other value
    (``True``, ``1``, another check's result, a result built by hand, or a failed result whose ``passed`` was set
    afterwards: unseen reviews #9 and #9b opened cells both ways) is not."""
    return isinstance(result, CheckResult) and result.__dict__.get("_opened_for") == (check_name, _OPENED_TOKEN)
