"""Every lab-03 check rejects the lab's stubs without revealing the answer, recognises the common wrong
answers with a hint aimed at them, and accepts the solution."""

from __future__ import annotations

import re

import pytest

from vramlab import checks
from vramlab.checks import lab03


def _raises(*args):
    raise NotImplementedError("Exercise: not done")


def _prediction(value):
    return lab03.check_prediction(value, 16.0, "one 131,072-token Llama-3.1-8B request", "GiB")


CALL = {name: getattr(lab03, name) for name in lab03.__all__}
CALL["check_prediction"] = _prediction

SOLUTIONS = {
    "check_kv_bytes_by_hand": lambda l, h, d, b: 2 * l * h * d * b,
    "check_mla_bytes_by_hand": lambda l, r, p, b: l * (r + p) * b,
    "check_prediction": 12,                                                # any honest number
    "check_needed_gib": 2 * 36 * 8 * 128 * 2 * 40960 / 2**30,
    "check_max_len_that_fits": lambda pt, avail, bs: avail // (pt * bs) * bs,
    "check_fix_plan": {"kv_cache_dtype": "fp8"},
    "check_oom_verdict": lambda tried, free, unalloc: ("cap" if free >= tried else
                                                       "fragmentation" if unalloc >= tried else "shortage"),
}
# (wrong answer, a phrase the hint must contain): the common mistakes, each with its own hint
WRONG = {
    "check_kv_bytes_by_hand": [(lambda l, h, d, b: l * h * d * b, "AND a value"),
                               (lambda l, h, d, b: 2 * l * h * d * b * 8, "already in bytes")],
    "check_mla_bytes_by_hand": [(lambda l, r, p, b: 2 * l * (r + p) * b, "no separate value"),
                                (lambda l, r, p, b: l * 576 * b, "one latent vector")],
    "check_prediction": [("a lot", "a number")],
    "check_needed_gib": [(2 * 36 * 8 * 128 * 2 * 40960 / 1e9, "GB (10**9 bytes)"),
                         (36 * 8 * 128 * 2 * 40960 / 2**30, "key AND a value"),
                         (2 * 36 * 8 * 128 * 2 * 40960, "that is bytes"),
                         ("5.62 GiB", "not a string")],
    "check_max_len_that_fits": [(lambda pt, avail, bs: avail // pt, "whole blocks"),
                                (lambda pt, avail, bs: avail / (pt * bs) * bs, "whole number")],
    "check_fix_plan": [({"max_model_len": 8192}, "not to use"),
                       ({"kv_cache_dtype": "int4"}, "valid: auto, float16, bfloat16, fp8"),
                       ({"enforce_eager": True}, "enforce_eager alone does not help"),
                       ({"tensor_parallel_size": 2}, "one GPU"),
                       ({"kv_cache_dtype": "fp8_inc"}, "HPU) only"),
                       ({"gpu_memory_utilization": 1.0}, "no room left"),
                       ({"gpu_memory_utilization": 0.95}, "bytes per token"),
                       ({"--kv-cache-dtype": "fp8"}, "underscores"),
                       ({"weights_bytes": 0}, "facts of the deployment"),
                       ({"non_torch_bytes": 0, "activation_bytes": 0}, "facts of the deployment")],
    "check_oom_verdict": [(lambda tried, free, unalloc: "fragmentation" if unalloc >= tried else "shortage",
                           "was the device itself short"),
                          (lambda tried, free, unalloc: "fragmentation" if unalloc > tried else "shortage",
                           "reserved-but-unallocated memory too"),
                          (lambda tried, free, unalloc: "OOM", "return one of")],
}
STUBS = [None, lambda *a: None, _raises]
VALUE_CHECKS = {"check_prediction", "check_needed_gib", "check_fix_plan"}


def test_every_check_is_exported_and_covered():
    assert set(lab03.__all__) == set(SOLUTIONS) == set(WRONG)
    for name in lab03.__all__:
        assert getattr(checks, name) is getattr(lab03, name)


@pytest.mark.parametrize("name", sorted(SOLUTIONS))
def test_solution_passes(name, capsys):
    result = CALL[name](SOLUTIONS[name])
    assert result.passed and capsys.readouterr().out.startswith("PASS")


@pytest.mark.parametrize("name", sorted(SOLUTIONS))
@pytest.mark.parametrize("stub", range(len(STUBS)))
def test_stubs_fail_without_raising_or_revealing_the_answer(name, stub, capsys):
    if name in VALUE_CHECKS and stub:
        pytest.skip("a value exercise's stub is None, not a function")
    result = CALL[name](STUBS[stub])
    out = capsys.readouterr().out
    assert not result.passed and out.startswith("FAIL")
    expected_part = out.split("; got ")[0]
    assert not re.search(r"\d", expected_part.split("expected", 1)[1]), out       # no number revealed
    assert "not done yet" in out or "not a function" in out


@pytest.mark.parametrize("name,wrong,phrase", [(n, w, p) for n, ws in WRONG.items() for w, p in ws])
def test_common_wrong_answers_fail_with_their_own_hint(name, wrong, phrase, capsys):
    result = CALL[name](wrong)
    out = capsys.readouterr().out
    assert not result.passed and "expected" in out and phrase in out, out


def test_prediction_reports_how_far_off_without_grading(capsys):
    assert _prediction(16) and "within 5%" in capsys.readouterr().out
    assert _prediction(4) and "4x too low" in capsys.readouterr().out
    assert not _prediction(float("nan"))
    assert lab03.check_prediction(12, unit="GiB") and "12 GiB stored" in capsys.readouterr().out
    assert not lab03.check_prediction(None) and "not done yet" in capsys.readouterr().out


def test_byte_checks_reject_nan_and_a_hard_coded_576():
    assert not lab03.check_kv_bytes_by_hand(lambda *a: float("nan"))
    assert not lab03.check_mla_bytes_by_hand(lambda l, r, p, b: l * 576 * b)


def test_fix_plan_uses_the_lessons_context_and_accepts_real_engine_arguments(capsys):
    assert lab03.FIX_MAX_MODEL_LEN == 65536
    assert lab03.check_fix_plan({"kv_cache_dtype": "fp8"})                       # fp8 alone really fits
    assert lab03.check_fix_plan({"kv_cache_dtype": "fp8_e4m3", "enforce_eager": True, "max_num_seqs": 64})
    assert lab03.check_fix_plan({"weight_bits": 8})
    assert lab03.check_fix_plan({"max_model_len": 131072, "kv_cache_dtype": "fp8", "weight_bits": 4})
    assert not lab03.check_fix_plan({"kv_cache_dtype": "fp8", "max_model_len": 32768})
    out = capsys.readouterr().out
    assert "..." not in out                                                    # messages are not cut off
