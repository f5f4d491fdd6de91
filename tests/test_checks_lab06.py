"""Every lab-06 check rejects the lab's stubs and a typical wrong answer, and accepts the solution."""

from __future__ import annotations

import re

import pytest

from vramlab import checks
from vramlab.checks import lab06

ACTUAL, FP32 = 166_471_168, 538_060_288  # get_memory_footprint() of nf4 and fp32 SmolLM2 (benchmarks/bnb.py)


def _raises(*args):
    raise NotImplementedError


def _symbol(text):
    m = re.search(r"version `([^']+)' not found", text)
    return m.group(1) if m else None


SOLUTIONS = {
    "check_log_label": "binary_missing_for_cuda_version",
    "check_missing_symbol": _symbol,
}
WRONG = {
    "check_log_label": "compute_capability_low",                       # a symptom (7.0 only warns)
    "check_missing_symbol": lambda t: (re.search(r"version (`[^ ]+)", t) or [None, None])[1],  # keeps the quotes
}
STUBS = [None, lambda *a: None, _raises]


def test_every_check_is_exported_and_covered():
    assert set(lab06.__all__) == set(SOLUTIONS) | {"check_4bit_prediction"}
    for name in lab06.__all__:
        assert getattr(checks, name) is getattr(lab06, name)


@pytest.mark.parametrize("name", sorted(SOLUTIONS))
def test_solution_passes(name, capsys):
    assert getattr(lab06, name)(SOLUTIONS[name]).passed
    assert capsys.readouterr().out.startswith("PASS")


@pytest.mark.parametrize("name", sorted(SOLUTIONS))
def test_wrong_answer_fails_with_a_hint(name, capsys):
    result = getattr(lab06, name)(WRONG[name])
    out = capsys.readouterr().out
    assert not result.passed and out.startswith("FAIL") and "Hint:" in out


@pytest.mark.parametrize("name", sorted(SOLUTIONS))
@pytest.mark.parametrize("stub", range(len(STUBS)))
def test_stubs_fail_without_raising_or_revealing(name, stub, capsys):
    result = getattr(lab06, name)(STUBS[stub])
    out = capsys.readouterr().out
    assert not result.passed and out.startswith("FAIL")
    if name == "check_log_label":
        assert "expected binary_missing" not in out  # the stub does not reveal the answer


def test_log_label_hints_name_the_symptom(capsys):
    lab06.check_log_label("native_library_unavailable")
    assert "symptom" in capsys.readouterr().out
    lab06.check_log_label("not a label")
    assert "one of:" in capsys.readouterr().out


def test_missing_symbol_wants_none_without_a_version_line(capsys):
    assert not lab06.check_missing_symbol(lambda t: _symbol(t) or "CXXABI_1.3.9")
    out = capsys.readouterr().out
    assert "line at all? What should you return then?" in out and "expected None" not in out, out


def test_4bit_prediction_accepts_any_honest_number_and_says_how_far(capsys):
    for stub in (None, "", float("nan"), -1):
        assert not lab06.check_4bit_prediction(stub, ACTUAL, FP32)
        assert capsys.readouterr().out.startswith("FAIL")
    assert lab06.check_4bit_prediction(FP32 / 8, ACTUAL, FP32)
    out = capsys.readouterr().out
    assert out.startswith("PASS") and "0.40x" in out and "embedding" in out
    assert lab06.check_4bit_prediction(160, ACTUAL, FP32)
    assert "bytes" in capsys.readouterr().out
    assert lab06.check_4bit_prediction(1.7e8, ACTUAL)
    assert "1.02x" in capsys.readouterr().out
    # before the reveal: stored, nothing revealed
    assert lab06.check_4bit_prediction(1.7e8)
    out = capsys.readouterr().out
    assert out.startswith("PASS") and "stored" in out and f"{ACTUAL:,}" not in out
    assert not lab06.check_4bit_prediction(None)


def test_missing_symbol_judges_a_real_none_answer(capsys):
    # the third log has no version line: a function returning None there is right, not "untouched"
    result = lab06.check_missing_symbol(_symbol)
    assert result.passed and not result.untouched
    capsys.readouterr()
    # always None: the first log needs a symbol, so it reads as an untouched stub and reveals nothing
    result = lab06.check_missing_symbol(lambda t: None)
    out = capsys.readouterr().out
    assert not result.passed and "CXXABI" not in out
