"""The machinery every exercise check uses: run the learner's code, compare, say what happened.

A check never raises on a wrong answer: it prints one line starting with a pass/fail mark, what
was expected and what it got, and returns a :class:`CheckResult` (truthy when passed). This is
what keeps a half-done lab executable top to bottom. An untouched exercise (the stub's None,
``...`` or NotImplementedError) is told "not done yet" and never shown the expected value.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from vramlab import progress as _progress

PASS_MARK = "PASS"
FAIL_MARK = "FAIL"
# What an untouched exercise says instead of the expected value: the answer is revealed only after a
# real attempt (a value that is not the stub's None / ... / NotImplementedError).
NOT_DONE_EXPECTED = "your answer in place of the stub"
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

    def __bool__(self) -> bool:
        return self.passed

    @property
    def message(self) -> str:
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


def report(name: str, passed: bool, expected: str, got: str, hint: str = "", *, value: Any = _MISSING,
           untouched_hint: str = "", **details) -> CheckResult:
    """Print the one-line verdict and return it as a :class:`CheckResult`.

    Format: ``PASS <name>: <got>[, as expected].`` or ``FAIL <name>: expected <expected>; got <got>. Hint: ...``.
    A failure on an untouched stub (``value`` is None / ``...`` / NotImplementedError, or, when ``value``
    is not given, ``got`` reads ``None``) never shows ``expected``: the answer is revealed only after a
    real attempt.
    """
    untouched = not passed and (is_untouched(value) if value is not _MISSING else _untouched_text(got))
    if untouched:
        hint = untouched_hint  # the exercise's own hint can wait for a real attempt too
    result = CheckResult(name, bool(passed), expected, got, hint if not passed else "", details, untouched)
    print(result.message)
    _progress.record(result)  # one JSON line when VRAMLAB_PROGRESS_DIR is set (off by default)
    return result


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
                 **kwargs) -> tuple[Any, CheckResult | None]:
    """Call the learner's function; on an exception return ``(None, failing CheckResult)``.

    An untouched stub (``fn`` is None, it raises NotImplementedError, or, with ``none_is_untouched``,
    it returns None / ``...``) fails without revealing ``expected``. Any other exception fails with
    the line of the learner's cell that raised it.
    """
    if fn is None or fn is Ellipsis:
        return None, report(name, False, expected or "a function", repr(fn), value=fn)
    if not callable(fn):
        return None, report(name, False, expected or "a function", f"{fmt_number(fn)} (not a function)",
                            hint="define the function in the exercise cell, then run this cell again")
    try:
        value = fn(*args, **kwargs)
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


def check_close(name: str, got: Any, expected: float, rel: float = 1e-6, abs_tol: float = 0.0,
                unit: str = "", hint: str = "") -> CheckResult:
    """Pass when ``got`` is a number within ``rel`` (relative) or ``abs_tol`` of ``expected``."""
    value = as_float(got)
    unit_s = f" {unit}" if unit else ""
    want = f"{fmt_number(expected)}{unit_s}"
    if value is None:
        return report(name, False, want, f"{fmt_number(got)}" + ("" if is_untouched(got) else " (not a number)"),
                      hint, value=got)
    ok = math.isclose(value, expected, rel_tol=rel, abs_tol=abs_tol)
    return report(name, ok, want, f"{fmt_number(value)}{unit_s}", hint, value=got)
