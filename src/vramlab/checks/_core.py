"""The machinery every exercise check uses: run the learner's code, compare, say what happened.

A check never raises on a wrong answer: it prints one line starting with a pass/fail mark, what
was expected and what it got, and returns a :class:`CheckResult` (truthy when passed). This is
what keeps a half-done lab executable top to bottom.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

PASS_MARK = "PASS"
FAIL_MARK = "FAIL"


@dataclass
class CheckResult:
    """The outcome of one check. ``bool(result)`` is ``result.passed``."""

    name: str
    passed: bool
    expected: str
    got: str
    hint: str = ""
    details: dict = field(default_factory=dict)

    def __bool__(self) -> bool:
        return self.passed

    @property
    def message(self) -> str:
        if self.passed:
            return f"{PASS_MARK} {self.name}: got {self.got}, as expected"
        text = f"{FAIL_MARK} {self.name}: expected {self.expected}; got {self.got}."
        if self.hint:
            text += f" Hint: {self.hint}"
        return text

    def _ipython_display_(self) -> None:  # the check already printed its line
        return None


def report(name: str, passed: bool, expected: str, got: str, hint: str = "", **details) -> CheckResult:
    """Print the one-line verdict and return it as a :class:`CheckResult`."""
    result = CheckResult(name, bool(passed), expected, got, hint if not passed else "", details)
    print(result.message)
    return result


def describe_error(exc: BaseException) -> str:
    if isinstance(exc, NotImplementedError):
        return "NotImplementedError (the exercise is not done yet)"
    return f"{type(exc).__name__}: {exc}"


def call_learner(name: str, fn: Callable, *args, expected: str = "", **kwargs) -> tuple[Any, CheckResult | None]:
    """Call the learner's function; on an exception return ``(None, failing CheckResult)``."""
    if fn is None or not callable(fn):
        return None, report(name, False, expected or "a function", f"{fn!r} (not a function)",
                            hint="define the function in the exercise cell, then run this cell again")
    try:
        return fn(*args, **kwargs), None
    except Exception as exc:  # noqa: BLE001 - anything the learner raises is reported
        return None, report(name, False, expected or "no exception", f"it raised {describe_error(exc)}")


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
        return report(name, False, want, f"{fmt_number(got)} (not a number)", hint)
    ok = math.isclose(value, expected, rel_tol=rel, abs_tol=abs_tol)
    return report(name, ok, want, f"{fmt_number(value)}{unit_s}", hint)
