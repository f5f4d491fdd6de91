"""Every function that shows what a capstone or exercise settles once its check passed or was revealed (the public
functions defined in ``vramlab.checks.labNN`` whose first parameter is ``result``) opens only for a result that check issued
(``_core.opened_by``). Review #16 printed lab 00's whole answer with ``explain_plan(True)`` and read lab 04's with
``capstone_seqs(SimpleNamespace(revealed=True), None)``: a bare truthy value, or a hand-made object that says it passed
or was revealed, must do exactly what a failed result does."""

from __future__ import annotations

import contextlib
import importlib
import inspect
import io
import types

import pytest

from vramlab.checks._core import CheckResult

LABS = [f"lab{n:02d}" for n in range(10)]


def _after_functions():
    for lab in LABS:
        module = importlib.import_module(f"vramlab.checks.{lab}")
        for name, func in sorted(vars(module).items()):
            if name.startswith(("_", "check_")) or not inspect.isfunction(func) or func.__module__ != module.__name__:
                continue
            params = list(inspect.signature(func).parameters.values())
            if params and params[0].name == "result":
                required = [p for p in params[1:] if p.default is inspect.Parameter.empty]
                yield pytest.param(func, len(required), id=f"{lab}.{name}")


def _outcome(func, result, n_args):
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            value = func(result, *([None] * n_args))
        return out.getvalue(), repr(value), None
    except Exception as exc:           # a gate that is missing shows as the tool running on the None arguments
        return out.getvalue(), None, type(exc).__name__


def test_the_after_functions_are_found():
    names = {p.id for p in _after_functions()}
    assert {"lab00.explain_plan", "lab03.design_to_run", "lab04.capstone_seqs", "lab05.after_capstone",
            "lab09.reduced_run"} <= names, names


@pytest.mark.parametrize("func, n_args", list(_after_functions()))
def test_a_bare_true_or_a_hand_made_result_opens_nothing(func, n_args):
    closed = _outcome(func, CheckResult(name="x", passed=False, expected="", got=""), n_args)
    for fake in (True, 1, types.SimpleNamespace(revealed=True, passed=True, name="x"),
                 CheckResult(name=func.__name__, passed=True, expected="", got="", revealed=True)):
        assert _outcome(func, fake, n_args) == closed, (func.__qualname__, fake)
