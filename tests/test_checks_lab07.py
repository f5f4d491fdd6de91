"""Every lab-07 check rejects the lab's stubs and a typical wrong answer, and accepts the solution."""

from __future__ import annotations

import re

import pytest

from vramlab import checks
from vramlab.checks import lab07

ACTUAL, FP32 = 166_471_168, 538_060_288  # get_memory_footprint() of nf4 and fp32 SmolLM2 (benchmarks/bnb.py)


def _raises(*args):
    raise NotImplementedError


RANKING = {"bytes": ["nf4+dq", "nf4", "fp4", "int8"], "perplexity": ["int8", "nf4+dq", "nf4", "fp4"]}
SOLUTIONS = {
    "check_log_label": "binary_missing_for_cuda_version",
    "check_log_fix": "c",
    "check_quant_ranking": RANKING,
}
WRONG = {
    "check_log_label": "compute_capability_low",                       # a symptom (7.0 only warns)
    "check_log_fix": "a",                                              # bitsandbytes' own advice: the symptom
    "check_quant_ranking": dict(RANKING, perplexity=["int8", "fp4", "nf4", "nf4+dq"]),  # FP4 before NF4
}
STUBS = [None, lambda *a: None, _raises]


def test_every_check_is_exported_and_covered():
    assert set(lab07.__all__) == set(SOLUTIONS) | {"check_4bit_prediction"}
    assert not hasattr(lab07, "check_missing_symbol")   # the regex drill is gone (issue 19)
    for name in lab07.__all__:
        assert getattr(checks, name) is getattr(lab07, name)


@pytest.mark.parametrize("name", sorted(SOLUTIONS))
def test_solution_passes(name, capsys):
    assert getattr(lab07, name)(SOLUTIONS[name]).passed
    assert capsys.readouterr().out.startswith("PASS")


@pytest.mark.parametrize("name", sorted(SOLUTIONS))
def test_wrong_answer_fails_with_a_hint(name, capsys):
    result = getattr(lab07, name)(WRONG[name])
    out = capsys.readouterr().out
    assert not result.passed and out.startswith("FAIL") and "Hint:" in out


@pytest.mark.parametrize("name", sorted(SOLUTIONS))
@pytest.mark.parametrize("stub", range(len(STUBS)))
def test_stubs_fail_without_raising_or_revealing(name, stub, capsys):
    result = getattr(lab07, name)(STUBS[stub])
    out = capsys.readouterr().out
    assert not result.passed and out.startswith("FAIL")
    if name == "check_log_label":
        assert "expected binary_missing" not in out  # the stub does not reveal the answer


def test_log_label_hints_name_the_symptom(capsys):
    lab07.check_log_label("native_library_unavailable")
    assert "symptom" in capsys.readouterr().out
    lab07.check_log_label("not a label")
    assert "one of:" in capsys.readouterr().out


def test_log_fix_teaches_each_wrong_letter(capsys):
    from vramlab.bnb import logs

    text = logs.corpus_entry(lab07.FIX_EXERCISE_LOG)["text"]
    # the log is real-format and says what the exercise claims: the override, then the missing CUDA 12 runtime
    assert "BNB_CUDA_VERSION=128 environment variable detected" in text and "Missing dependency: libcudart.so.12" in text
    assert logs.explain_log(text).label == "bnb_cuda_version_override"
    hints = {"a": "bitsandbytes' own advice", "b": "does not", "d": "cuda130", "e": "digits"}
    for letter, words in hints.items():
        result = lab07.check_log_fix(letter)
        out = capsys.readouterr().out
        assert not result.passed and words in out and "unset BNB_CUDA_VERSION" not in out.split("Hint:")[1], out
    assert lab07.check_log_fix(" C ")
    assert not lab07.check_log_fix("f") and "one of the letters" in capsys.readouterr().out


def test_ranking_ties_pass_in_either_order_and_hints_name_the_misconception(capsys):
    from vramlab.bnb import quantized

    table = quantized.load_table()
    rows = {k: quantized.table_row(table, k) for k in lab07.RANK_KINDS}
    # the ties the check allows are real measured ties: fp4 and nf4 hold the same bytes, nf4 / nf4+dq within 1%
    assert lab07.device_bytes(rows["fp4"]) == lab07.device_bytes(rows["nf4"])
    assert abs(rows["nf4"]["ppl"] - rows["nf4+dq"]["ppl"]) < 0.01 * rows["nf4"]["ppl"]
    swapped = {"bytes": ["nf4+dq", "fp4", "nf4", "int8"], "perplexity": ["int8", "nf4", "nf4+dq", "fp4"]}
    assert lab07.check_quant_ranking(swapped)
    capsys.readouterr()
    cases = {  # a wrong ranking -> words its hint must contain
        "footprint only": (dict(RANKING, bytes=["nf4", "fp4", "nf4+dq", "int8"]), "per-block scales"),
        "int8 smallest": (dict(RANKING, bytes=["int8", "nf4+dq", "nf4", "fp4"]), "twice"),
        "fp4 best": (dict(RANKING, perplexity=["fp4", "int8", "nf4", "nf4+dq"]), "quantiles"),
        "int8 worst": (dict(RANKING, perplexity=["nf4", "nf4+dq", "fp4", "int8"]), "256 levels"),
    }
    for name, (ranking, words) in cases.items():
        result = lab07.check_quant_ranking(ranking)
        out = capsys.readouterr().out
        assert not result.passed and words in out, (name, out)
        assert "tied" not in out, out   # the measured order is not printed on a wrong attempt
    for bad, words in (({"bytes": RANKING["bytes"]}, "keys"), (dict(RANKING, bytes=["int8", "nf4"]), "exactly once"),
                       ("int8 < nf4", "keys")):
        assert not lab07.check_quant_ranking(bad) and words in capsys.readouterr().out
    untouched = lab07.check_quant_ranking({"bytes": None, "perplexity": None})
    assert untouched.untouched and "not done" in capsys.readouterr().out


def test_4bit_prediction_accepts_any_honest_number_and_says_how_far(capsys):
    for stub in (None, "", float("nan"), -1):
        assert not lab07.check_4bit_prediction(stub, ACTUAL, FP32)
        assert capsys.readouterr().out.startswith("FAIL")
    assert lab07.check_4bit_prediction(FP32 / 8, ACTUAL, FP32)
    out = capsys.readouterr().out
    assert out.startswith("PASS") and "0.40x" in out and "embedding" in out
    assert lab07.check_4bit_prediction(160, ACTUAL, FP32)
    assert "bytes" in capsys.readouterr().out
    assert lab07.check_4bit_prediction(1.7e8, ACTUAL)
    assert "1.02x" in capsys.readouterr().out
    # before the reveal: stored, nothing revealed
    assert lab07.check_4bit_prediction(1.7e8)
    out = capsys.readouterr().out
    assert out.startswith("PASS") and "stored" in out and f"{ACTUAL:,}" not in out
    assert not lab07.check_4bit_prediction(None)
