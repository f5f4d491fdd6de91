"""Checks for notebook 03 (KV budget and OOM triage).

Each check prints one PASS/FAIL line with what was expected and what it got, and returns a
``CheckResult``; the references are vramlab's own functions (``vramlab.kvcache``,
``vramlab.vllm_memory``, ``vramlab.vram``), so a check and the lesson cannot disagree.
"""

from __future__ import annotations

from typing import Any

from vramlab.checks._core import CheckResult, as_float, call_learner, check_close, fmt_number, report
from vramlab.kvcache import GiB, kv_bytes_per_token
from vramlab.vllm_memory import estimate_max_model_len, needed_bytes, plan

__all__ = ["check_kv_bytes_by_hand", "check_mla_bytes_by_hand", "check_needed_gib", "check_max_len_that_fits",
           "check_fix_plan", "check_oom_verdict"]

# (layers, kv_heads, head_dim, dtype_bytes): Llama-3.1-8B bf16, Llama-3.1-70B fp8, SmolLM2 fp32, an MQA model.
_GQA_CASES = [(32, 8, 128, 2), (80, 8, 128, 1), (30, 3, 64, 4), (24, 1, 128, 2)]
# (layers, kv_lora_rank, qk_rope_head_dim, dtype_bytes): DeepSeek-V2 bf16, DeepSeek-V3 fp8.
# A made-up small MLA (28 layers, rank 256, rope 32) so a hard-coded 576 does not pass.
_MLA_CASES = [(60, 512, 64, 2), (61, 512, 64, 1), (28, 256, 32, 2)]


def _check_function_cases(name: str, fn, cases, reference, hint: str) -> CheckResult:
    for args in cases:
        want = reference(*args)
        got, failed = call_learner(name, fn, *args, expected=fmt_number(want))
        if failed is not None:
            return failed
        value = as_float(got)
        if value is None or not abs(value - want) <= 0.5:  # NaN fails too
            return report(name, False, f"{fmt_number(want)} bytes for {args}",
                          f"{fmt_number(got)}" + ("" if value is not None else " (not a number)"), hint)
    return report(name, True, "", f"all {len(cases)} cases match (e.g. {cases[0]} -> "
                                  f"{fmt_number(reference(*cases[0]))} bytes per token)")


def check_kv_bytes_by_hand(fn) -> CheckResult:
    """``fn(layers, kv_heads, head_dim, dtype_bytes)`` -> KV bytes per token (K and V, all layers)."""
    return _check_function_cases(
        "KV bytes per token (GQA)", fn, _GQA_CASES,
        lambda l, h, d, b: kv_bytes_per_token({"num_hidden_layers": l, "num_attention_heads": h * 4,
                                               "num_key_value_heads": h, "head_dim": d}, kv_bits=8 * b),
        "each layer stores a key AND a value per KV head: 2 x layers x kv_heads x head_dim x bytes")


def check_mla_bytes_by_hand(fn) -> CheckResult:
    """``fn(layers, kv_lora_rank, qk_rope_head_dim, dtype_bytes)`` -> MLA KV bytes per token."""
    return _check_function_cases(
        "KV bytes per token (MLA)", fn, _MLA_CASES,
        lambda l, r, p, b: kv_bytes_per_token({"num_hidden_layers": l, "num_attention_heads": 128,
                                               "kv_lora_rank": r, "qk_rope_head_dim": p}, kv_bits=8 * b),
        "MLA caches one latent (kv_lora_rank) plus one shared RoPE key (qk_rope_head_dim) per layer - "
        "no factor 2, no heads")


def check_needed_gib(got: Any) -> CheckResult:
    """GiB of KV cache vLLM needs for one Qwen3-8B request of 40,960 tokens in bf16 (the seed's case)."""
    want = needed_bytes("qwen3-8b", 40960, kv_cache_dtype="bfloat16") / GiB
    return check_close("Qwen3-8B needed GiB at 40960", got, want, rel=0, abs_tol=0.006, unit="GiB",
                       hint="2 x 36 layers x 8 KV heads x 128 x 2 bytes per token, times 40960 tokens, / 2**30")


def check_max_len_that_fits(fn) -> CheckResult:
    """``fn(bytes_per_token, available_bytes, block_size)`` -> the largest length vLLM would accept
    (whole blocks must fit). Compared with vLLM's binary search on several budgets."""
    name = "largest max_model_len that fits"
    cfg = {"num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128}
    per_token = int(kv_bytes_per_token(cfg, "bfloat16"))
    cases = [(int(4.89 * GiB), 16), (int(2.5 * GiB), 16), (int(4.89 * GiB), 32), (per_token * 16 - 1, 16)]
    for avail, bs in cases:
        want = estimate_max_model_len(cfg, avail, 1 << 22, block_size=bs, kv_cache_dtype="bfloat16")
        got, failed = call_learner(name, fn, per_token, avail, bs, expected=str(want))
        if failed is not None:
            return failed
        if as_float(got) != want:
            return report(name, False, f"{want:,} tokens (budget {avail:,} bytes, block_size {bs})",
                          fmt_number(got), "count whole blocks: (available // (bytes_per_token * block_size)) "
                                           "* block_size")
    return report(name, True, "", f"all {len(cases)} budgets match vLLM's estimate (4.89 GiB, Qwen3-8B -> "
                                  f"{estimate_max_model_len(cfg, cases[0][0], 1 << 22):,} tokens)")


# The engine arguments exercise 4 lets the learner change (vLLM flags), and the highest utilization
# we accept: the seeds advise staying at or below ~0.95 (0.9-0.95) and never 1.0.
FIX_KNOBS = ("max_model_len", "gpu_memory_utilization", "kv_cache_dtype", "tensor_parallel_size", "weight_bits")
MAX_SAFE_UTILIZATION = 0.95


def check_fix_plan(kwargs: Any, model: str = "llama-3.1-8b", gpu: str = "L4", min_len: int = 16384) -> CheckResult:
    """``kwargs`` for :func:`vramlab.vllm_memory.plan` that make ``model`` start on ``gpu`` while
    still serving requests of at least ``min_len`` tokens."""
    name = f"a start-up config for {model} on {gpu}"
    if not isinstance(kwargs, dict):
        return report(name, False, "a dict of plan() arguments, e.g. {'max_model_len': ...}",
                      f"{kwargs!r}"[:80], "set my_fix to a dict")
    unknown = sorted(set(kwargs) - set(FIX_KNOBS))
    if unknown:
        return report(name, False, f"only the engine arguments {', '.join(FIX_KNOBS)}",
                      f"also {', '.join(map(str, unknown))}",
                      "the weights, overheads and GPU are facts of the deployment, not knobs you can set")
    util = kwargs.get("gpu_memory_utilization", 0.92)
    if isinstance(util, (int, float)) and util > MAX_SAFE_UTILIZATION:
        return report(name, False, f"gpu_memory_utilization <= {MAX_SAFE_UTILIZATION}", f"{util}",
                      "above ~0.95 the CUDA context, NCCL and fragmentation have no room left: vLLM would OOM later")
    try:
        p = plan(model, gpu, **kwargs)
    except (TypeError, ValueError) as exc:
        return report(name, False, "arguments plan() accepts", f"{type(exc).__name__}: {exc}")
    if p.max_model_len < min_len:
        return report(name, False, f"max_model_len >= {min_len:,}", f"{p.max_model_len:,}",
                      "shrinking the context below what the workload needs is not a fix")
    if not p.ok:
        return report(name, False, "vLLM starts", p.check.message[:120] + "...",
                      "try kv_cache_dtype='fp8', a higher gpu_memory_utilization or weight_bits=8")
    return report(name, True, "", f"starts: {p.kv_cache_tokens:,} tokens of KV cache, "
                                  f"{p.max_concurrency:.2f}x concurrency at {p.max_model_len:,} tokens")


def check_oom_verdict(fn) -> CheckResult:
    """``fn(tried_bytes, reserved_unallocated_bytes)`` -> ``"fragmentation"`` or ``"shortage"``."""
    name = "OOM verdict"
    cases = [(2 << 30, 3 << 30, "fragmentation"), (2 << 30, 1 << 30, "shortage"),
             (20 << 20, 20 << 20, "fragmentation"), (256 << 20, 0, "shortage")]
    for tried, unalloc, want in cases:
        got, failed = call_learner(name, fn, tried, unalloc, expected=repr(want))
        if failed is not None:
            return failed
        if got != want:
            return report(name, False, f"{want!r} for tried={tried:,}, reserved-unallocated={unalloc:,}",
                          repr(got), "fragmentation when the cache already holds at least the request, unused")
    return report(name, True, "", f"all {len(cases)} cases right")
