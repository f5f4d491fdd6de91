"""Every lab-03 check rejects the lab's stubs without revealing the answer, recognises the common wrong
answers with a hint aimed at them, and accepts the solution."""

from __future__ import annotations

import math
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
    "check_oom_reading": {"A": ("fragmentation", "194.87 MiB unallocated covers the 22.00 MiB asked"),
                          "B": ("shortage", "22.78 GiB asked; 12.73 GiB free, 9.35 GiB unallocated"),
                          "C": ("cap", "30.12 GiB free covers the 2.00 GiB asked")},
    "check_deployment_size": lambda c, g, n, b, bs: _size(c, g, n, b, bs),
}


def _per_token(c, b):
    return 2 * c["num_hidden_layers"] * c["num_key_value_heads"] * c["head_dim"] * b


def _size(c, gib, n, b, bs, giga=2**30):
    blocks = int(gib * giga) // (_per_token(c, b) * bs)
    return {"kv_cache_tokens": blocks * bs, "max_concurrency": blocks / math.ceil(n / bs)}


def _reading(**changes):
    return {**SOLUTIONS["check_oom_reading"], **changes}
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
    # a wrong label is told which number it misread, never the label
    "check_oom_reading": [(_reading(A=("shortage", "22.00 MiB asked, 11.06 MiB free")), "'reserved by PyTorch but unallocated'"),
                          (_reading(A=("cap", "11.06 MiB free")), "could not serve it"),
                          (_reading(B=("fragmentation", "9.35 GiB unallocated")), "not the 9.08 GiB"),
                          (_reading(B=("cap", "12.73 GiB free")), "could not have served it"),
                          (_reading(C=("shortage", "2.00 GiB asked")), "read the free figure again"),
                          (_reading(C=("fragmentation", "10.00 MiB")), "what the device had free"),
                          (_reading(C=("OOM", "2.00 GiB")), "use one of"),
                          (_reading(B="shortage"), "one sentence naming the numbers"),
                          (_reading(B=("shortage", "it was short")), "name the numbers you compared"),
                          ({"A": ("fragmentation", "194.87")}, "every message"),
                          ("fragmentation", "write a dict")],
    "check_deployment_size": [(lambda c, g, n, b, bs: {**_size(c, g, n, b, bs),
                                                       "kv_cache_tokens": int(g * 2**30) // _per_token(c, b)},
                               "whole blocks"),
                              (lambda c, g, n, b, bs: _size(c, g, n, b, bs, giga=10**9), "not 10**9"),
                              (lambda c, g, n, b, bs: _size(c, g, n, 2 * b, bs), "half"),
                              (lambda c, g, n, b, bs: {**_size(c, g, n, b, bs),
                                                       "max_concurrency": _size(c, g, n, b, bs)["kv_cache_tokens"] / n},
                               "rounds up"),
                              (lambda c, g, n, b, bs: {**_size(c, g, n, b, bs), "max_concurrency":
                                                       math.floor(_size(c, g, n, b, bs)["max_concurrency"])},
                               "two decimals"),
                              (lambda c, g, n, b, bs: [1, 2], "keys kv_cache_tokens and max_concurrency")],
}
STUBS = [None, lambda *a: None, _raises]
VALUE_CHECKS = {"check_prediction", "check_needed_gib", "check_fix_plan", "check_oom_reading"}


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


def test_reading_messages_are_parsed_to_the_verdicts_the_lesson_teaches():
    """A and B are the real messages of the instructor's log bank; each message has a different verdict."""
    from vramlab.checks.lab03 import READING_MESSAGES
    from vramlab.vram import parse_oom_message

    verdicts = {k: parse_oom_message(t).verdict for k, t in READING_MESSAGES.items()}
    assert verdicts == {"A": "fragmentation", "B": "shortage", "C": "cap"}
    assert "194.87 MiB is reserved by PyTorch but unallocated" in READING_MESSAGES["A"]
    assert "Tried to allocate 22.78 GiB" in READING_MESSAGES["B"]


def test_deployment_size_reproduces_the_logged_35600_and_its_pass_line_says_so(capsys):
    assert lab03.check_deployment_size(SOLUTIONS["check_deployment_size"])
    out = capsys.readouterr().out
    assert "35,600 tokens = the 35,600 vLLM printed in issue #38516" in out and "4.35x" in out


def test_reason_number_reader_is_linear():
    import time

    from vramlab.checks.lab03 import _message_numbers

    start = time.perf_counter()
    assert len(_message_numbers("9" * 100_000)) <= 2    # runs of at most 6 digits
    _message_numbers("x" * 50_000_000)
    _message_numbers("1." * 100_000)
    assert time.perf_counter() - start < 20
    assert _message_numbers("asked 22.00 MiB, 194.87 free") == {"22", "194.87"}
