"""Every exported check is proven by a test to reject the lab stub and accept the solution."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

import vramlab.checks as checks
from vramlab.checks import CheckResult, check_fp16_weight_bytes
from vramlab.checks._core import call_learner, check_close, report

TESTS = Path(__file__).resolve().parent


def test_fp16_weight_bytes_rejects_stub_and_accepts_solution(smollm2, capsys):
    model, _ = smollm2
    assert not check_fp16_weight_bytes(None, model)
    out = capsys.readouterr().out
    assert out.startswith("FAIL fp16 weight bytes: expected your answer in place of the stub; got None.")
    assert "269,030,016" not in out  # not revealed before a real attempt
    wrong = 2 * (sum(p.numel() for p in model.parameters()) + 49152 * 576)  # tied matrix counted twice
    assert not check_fp16_weight_bytes(wrong, model)
    assert "expected 269,030,016 bytes; got 325,653,120 bytes" in capsys.readouterr().out
    assert check_fp16_weight_bytes(2 * sum(p.numel() for p in model.parameters()), model)
    assert capsys.readouterr().out == "PASS fp16 weight bytes: 269,030,016 bytes, as expected.\n"


def test_report_and_call_learner(capsys):
    result = report("demo", False, "1", "2", hint="try 1")
    assert isinstance(result, CheckResult) and not result
    assert capsys.readouterr().out.strip() == "FAIL demo: expected 1; got 2. Hint: try 1."
    assert report("demo", True, "1", "1")
    assert capsys.readouterr().out.strip() == "PASS demo: 1, as expected."
    assert report("demo", True, "", "all 4 cases match the reference.")
    assert capsys.readouterr().out.strip() == "PASS demo: all 4 cases match the reference."

    def not_done():
        raise NotImplementedError("Exercise 1: not done yet.")

    value, failure = call_learner("demo", not_done, expected="42")
    assert value is None and not failure and failure.untouched and "NotImplementedError" in failure.got
    assert "42" not in capsys.readouterr().out
    value, failure = call_learner("demo", lambda: 3)
    assert value == 3 and failure is None
    assert not check_close("num", "abc", 1.0) and check_close("num", 1.0 + 1e-9, 1.0)
    assert "(not a number)" in capsys.readouterr().out


def test_an_exception_shows_the_learners_line(capsys):
    import linecache

    src = "def f(x):\n    y = x + 1\n    return y[0]\n"
    filename = "/tmp/ipykernel_1/123456.py"  # how ipykernel names a cell's code
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    namespace: dict = {}
    exec(compile(src, filename, "exec"), namespace)
    value, failure = call_learner("demo", namespace["f"], 1, expected="2")
    out = capsys.readouterr().out
    assert value is None and not failure.untouched
    assert out.startswith("FAIL demo: expected 2; got TypeError: 'int' object is not subscriptable, "
                          "raised at line 3 of your cell: return y[0]."), out


def _raises(*args, **kwargs):
    raise NotImplementedError("Exercise 1: not done yet.")


def _returns_none(*args, **kwargs):
    return None


# What an untouched exercise hands a check: the value stub (None / ...), or for a check of a function
# (its first parameter is named ``fn``, the convention in every labNN.py) also the function stubs.
VALUE_STUBS = [None, Ellipsis]
FUNCTION_STUBS = [None, _raises, _returns_none]
# Arguments after the learner's answer for checks that need them (callables get the model fixture).
EXTRA_ARGS = {
    "check_fp16_weight_bytes": lambda model: (model,),
    "check_prediction": lambda model: (1234.0, "bytes per token"),
    "check_zero_fraction_prediction": lambda model: (0.956,),
    "check_no_online_hadamard_prediction": lambda model: (20.4, 4.7),
    "check_w16a4_prediction": lambda model: (2379.0, 14.7),
}


def _exported_checks():
    return sorted(n for n, obj in inspect.getmembers(checks, inspect.isfunction) if n.startswith("check_"))


@pytest.mark.parametrize("name", _exported_checks())
def test_an_untouched_stub_never_reveals_the_answer(name, smollm2, capsys):
    """Every exported check: an untouched stub fails, says "not done", and does not print its expected value."""
    fn = getattr(checks, name)
    first, *params = list(inspect.signature(fn).parameters.values())
    required = [p for p in params if p.default is inspect.Parameter.empty and p.kind in
                (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if name in EXTRA_ARGS:
        extra = EXTRA_ARGS[name](smollm2[0])
    else:
        assert not required, f"{name} needs {[p.name for p in required]}: add it to EXTRA_ARGS in tests/test_checks.py"
        extra = ()
    for stub in (FUNCTION_STUBS if first.name == "fn" else VALUE_STUBS):
        result = fn(stub, *extra)
        out = capsys.readouterr().out
        assert isinstance(result, CheckResult) and not result, (name, stub, out)
        assert result.untouched, f"{name}({stub!r}) is not recognised as not done yet: {out}"
        assert out.startswith("FAIL ") and "expected your answer in place of the stub; got" in out, out
        if re.search(r"\d", result.expected):  # a value, not a description such as "a number"
            assert result.expected not in out, f"{name}({stub!r}) reveals {result.expected!r}: {out}"
        expected_part = out.split("; got ")[0].split(": expected ", 1)[1]
        assert not re.search(r"\d", expected_part), f"{name}({stub!r}) shows a number before an attempt: {out}"


def test_every_exported_check_has_a_stub_and_solution_test():
    """Each public check_* must be exercised by some tests/test_checks*.py file."""
    names = [n for n, obj in inspect.getmembers(checks, inspect.isfunction) if n.startswith("check_")]
    assert names
    text = "\n".join(p.read_text() for p in TESTS.glob("test_checks*.py"))
    # called directly, or named as a key of a stub/solution table that the test calls by name
    missing = [n for n in names if f"{n}(" not in text and f'"{n}"' not in text]
    assert not missing, f"checks without a stub/solution test: {missing}"


def test_check_prediction_accepts_any_honest_number_and_says_how_far_off(capsys):
    from vramlab.checks.lab00 import check_prediction

    assert check_prediction(260, 256.6, "weights in MiB", "MiB")
    assert capsys.readouterr().out == "PASS weights in MiB: you predicted 260 MiB; it is 256.6 MiB (within 5%: well predicted).\n"
    assert check_prediction(1000, 256.6, "weights in MiB", "MiB")
    assert "(3.9x too high)" in capsys.readouterr().out
    assert check_prediction(200, 256.6, "weights in MiB", "MiB")
    assert "(22% too low)" in capsys.readouterr().out
    assert not check_prediction("lots", 256.6, "weights in MiB", "MiB")
    assert "not a finite number" in capsys.readouterr().out
    assert not check_prediction(float("nan"), 256.6)
    assert check_prediction(250, what="weights in MiB", unit="MiB")  # recorded now, revealed later
    assert "250 MiB stored; the real value comes later" in capsys.readouterr().out


@pytest.mark.parametrize("wrong,hint", [
    ("tied", "counted twice"), ("fp32", "float32"), ("count", "number of parameters"),
    ("mib", "that is MiB"), ("gib", "that is GiB"), ("gb", "that is GB"),
])
def test_fp16_hint_follows_the_learners_number(wrong, hint, smollm2, capsys):
    model, _ = smollm2
    params = sum(p.numel() for p in model.parameters())
    value = {"tied": 2 * (params + 49152 * 576), "fp32": 4 * params, "count": params,
             "mib": 2 * params / 2**20, "gib": 2 * params / 2**30, "gb": 2 * params / 1e9}[wrong]
    assert not check_fp16_weight_bytes(value, model)
    assert hint in capsys.readouterr().out


def test_check_arguments_that_are_not_the_answer_are_refused_in_one_sentence():
    from vramlab.checks.lab00 import check_prediction

    with pytest.raises(TypeError, match="model must be the loaded SmolLM2"):
        check_fp16_weight_bytes(269030016, "SmolLM2")
    with pytest.raises(TypeError, match="actual must be the measured number"):
        check_prediction(3.0, "lots")


def test_check_prediction_names_a_wrong_sign(capsys):
    from vramlab.checks.lab00 import check_prediction

    assert check_prediction(-12, 256.6, "weights in MiB", "MiB")  # still accepted: it teaches, it does not grade
    out = capsys.readouterr().out
    assert "(the wrong sign)" in out and "too low" not in out
