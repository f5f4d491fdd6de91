"""Checks for notebook 03 (KV budget and OOM triage).

Each check prints one PASS/FAIL line with what was expected and what it got, and returns a
``CheckResult``; the references are vramlab's own functions (``vramlab.serving.kvcache``,
``vramlab.serving.vllm_memory``, ``vramlab.serving.triage``), so a check and the lesson cannot disagree. An untouched
stub (None, or a function raising NotImplementedError) is told "not done yet" without the answer;
a recognisable wrong value (K or V forgotten, GB for GiB, bits for bytes ...) gets a hint aimed at it.
"""

from __future__ import annotations

import math
from typing import Any

from vramlab.checks._core import CheckResult, as_float, call_learner, direction, exercise, fmt_number, report
from vramlab.checks.lab00 import check_prediction  # one predict-then-reveal check for every lab
from vramlab.serving.kvcache import GiB, kv_bytes_per_token
from vramlab.vram.oom_message import VERDICTS, oom_verdict
from vramlab.serving.vllm_memory import check_kv_cache_dtype, estimate_max_model_len, needed_bytes, plan

__all__ = ["check_kv_bytes_by_hand", "check_mla_bytes_by_hand", "check_prediction", "check_needed_gib",
           "check_max_len_that_fits", "check_fix_plan", "check_oom_verdict"]

NOT_DONE = "not done yet"

# (layers, kv_heads, head_dim, dtype_bytes): Llama-3.1-8B bf16, Llama-3.1-70B fp8, SmolLM2 fp32, an MQA model.
_GQA_CASES = [(32, 8, 128, 2), (80, 8, 128, 1), (30, 3, 64, 4), (24, 1, 128, 2)]
# (layers, kv_lora_rank, qk_rope_head_dim, dtype_bytes): DeepSeek-V2 bf16, DeepSeek-V3 fp8.
# A made-up small MLA (28 layers, rank 256, rope 48) so a hard-coded 576 does not pass.
_MLA_CASES = [(60, 512, 64, 2), (61, 512, 64, 1), (28, 256, 48, 2)]


def _ratio_hint(got: float, want: float, hints: dict[float, str], default: str) -> str:
    for ratio, hint in hints.items():
        if want and math.isclose(got / want, ratio, rel_tol=1e-3):
            return hint
    return default


def _check_function_cases(name: str, fn, cases, reference, hints: dict[float, str], default_hint: str) -> CheckResult:
    for args in cases:
        want = reference(*args)
        got, failed = call_learner(name, fn, *args, expected="a number of bytes per token")
        if failed is not None:
            return failed
        value = as_float(got)
        if got is None:
            return report(name, False, "a number of bytes per token", f"None ({NOT_DONE})",
                          "return the number, e.g. `return ...` at the end of the function")
        if value is None:
            return report(name, False, "a number of bytes per token", f"{fmt_number(got)} (not a number)")
        if not abs(value - want) <= 0.5:  # NaN fails too
            return report(name, False, f"a number of bytes per token for {args}",
                          f"{fmt_number(got)}, {direction(value, want)}", _ratio_hint(value, want, hints, default_hint))
    return report(name, True, "", f"all {len(cases)} cases match (e.g. {cases[0]} -> "
                                  f"{fmt_number(reference(*cases[0]))} bytes per token)")


def _gqa_answer(**_) -> str:
    return "2 (K and V) x layers x kv_heads x head_dim x dtype_bytes, e.g. (32, 8, 128, 2) -> 131,072 bytes"


def _mla_answer(**_) -> str:
    return ("layers x (kv_lora_rank + qk_rope_head_dim) x dtype_bytes (no factor 2), e.g. (60, 512, 64, 2) -> "
            "69,120 bytes")


@exercise("lab03", 1, _gqa_answer)
def check_kv_bytes_by_hand(fn) -> CheckResult:
    """``fn(layers, kv_heads, head_dim, dtype_bytes)`` -> KV bytes per token (K and V, all layers)."""
    return _check_function_cases(
        "KV bytes per token (GQA)", fn, _GQA_CASES,
        lambda l, h, d, b: kv_bytes_per_token({"num_hidden_layers": l, "num_attention_heads": h * 4,
                                               "num_key_value_heads": h, "head_dim": d}, kv_bits=8 * b),
        {0.5: "exactly half: each layer caches a key AND a value for every KV head",
         8.0: "8x too big: dtype_bytes is already in bytes, do not multiply by 8 bits",
         4.0: "4x too big: use the KV heads, not the query heads (GQA shares each KV head)"},
        "count what one token leaves behind in one layer, then multiply by the layers")


@exercise("lab03", 2, _mla_answer)


def check_mla_bytes_by_hand(fn) -> CheckResult:
    """``fn(layers, kv_lora_rank, qk_rope_head_dim, dtype_bytes)`` -> MLA KV bytes per token."""
    return _check_function_cases(
        "KV bytes per token (MLA)", fn, _MLA_CASES,
        lambda l, r, p, b: kv_bytes_per_token({"num_hidden_layers": l, "num_attention_heads": 128,
                                               "kv_lora_rank": r, "qk_rope_head_dim": p}, kv_bits=8 * b),
        {2.0: "twice too big: MLA caches one latent and one RoPE key, there is no separate value to double"},
        "MLA caches one latent vector plus one shared RoPE key per layer, however many heads there are")


def _needed_gib_answer(**_) -> str:
    want = needed_bytes("qwen3-8b", 40960, kv_cache_dtype="bfloat16") / GiB
    return f"{want:.4g} GiB (bytes per token x 40,960 tokens / 2**30)"


@exercise("lab03", 3, _needed_gib_answer)
def check_needed_gib(got: Any) -> CheckResult:
    """GiB of KV cache vLLM needs for one Qwen3-8B request of 40,960 tokens in bf16 (the article's case)."""
    name = "Qwen3-8B needed GiB at 40960"
    if got is None:
        return report(name, False, "a number of GiB", f"None ({NOT_DONE})")
    want = needed_bytes("qwen3-8b", 40960, kv_cache_dtype="bfloat16") / GiB
    value = as_float(got)
    if value is None:
        return report(name, False, "a number of GiB", f"{fmt_number(got)} (not a number)",
                      "a float such as 1.5, not a string with a unit")
    if math.isclose(value, want, abs_tol=0.006):
        return report(name, True, "", f"{value:.4g} GiB")
    hints = {0.5: "half of it: every layer stores a key AND a value",
             GiB / 1e9: "that is GB (10**9 bytes); vLLM's GiB is 2**30 bytes",
             2.0: "twice too much: bf16 is 2 bytes per element",
             GiB: "that is bytes; divide by 2**30 for GiB",
             4.5: "too big: Qwen3-8B has 8 KV heads (GQA), not 36 query heads' worth"}
    return report(name, False, "a number of GiB", f"{fmt_number(value)} GiB, {direction(value, want)}",
                  _ratio_hint(value, want, hints, "work out the bytes of one token first, then scale up and convert"))


def _max_len_answer(**_) -> str:
    return ("(available_bytes // (bytes_per_token * block_size)) * block_size: whole blocks only; e.g. "
            "4.89 GiB for Qwen3-8B -> " + f"{estimate_max_model_len(_MAX_LEN_CFG, int(4.89 * GiB), 1 << 22):,} tokens")


_MAX_LEN_CFG = {"num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128}


@exercise("lab03", 4, _max_len_answer)
def check_max_len_that_fits(fn) -> CheckResult:
    """``fn(bytes_per_token, available_bytes, block_size)`` -> the largest length vLLM would accept
    (whole blocks must fit). Compared with vLLM's binary search on several budgets."""
    name = "largest max_model_len that fits"
    cfg = {"num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128}
    per_token = int(kv_bytes_per_token(cfg, "bfloat16"))
    cases = [(int(4.89 * GiB), 16), (int(2.5 * GiB), 16), (int(4.89 * GiB), 32), (per_token * 16 - 1, 16)]
    for avail, bs in cases:
        want = estimate_max_model_len(cfg, avail, 1 << 22, block_size=bs, kv_cache_dtype="bfloat16")
        got, failed = call_learner(name, fn, per_token, avail, bs, expected="a number of tokens")
        if failed is not None:
            return failed
        if got is None:
            return report(name, False, "a number of tokens", f"None ({NOT_DONE})",
                          "return the length, e.g. `return ...` at the end of the function")
        value = as_float(got)
        if value != want:
            hint = "count whole blocks: a partial block still takes a whole block of memory"
            if value is not None and value == avail // per_token:
                hint = "that counts single tokens; vLLM allocates whole blocks of block_size tokens"
            elif value is not None and not float(value).is_integer():
                hint = "a length is a whole number of tokens (use //)"
            if value is not None and value == value:
                got_s = f"{fmt_number(got)}, {direction(value, want)}"
            else:
                got_s = fmt_number(got)
            return report(name, False, f"a number of tokens (budget {avail:,} bytes, block_size {bs})", got_s, hint)
    return report(name, True, "", f"all {len(cases)} budgets match vLLM's estimate (4.89 GiB, Qwen3-8B -> "
                                  f"{estimate_max_model_len(cfg, cases[0][0], 1 << 22):,} tokens)")


# Exercise "fix it without giving up the context": the lesson's deployment and constraints.
FIX_MODEL, FIX_GPU, FIX_MAX_MODEL_LEN = "llama-3.1-8b", "L4", 65536
# Real engine arguments (vLLM flags, with underscores) the learner may change; weight_bits stands for
# serving a quantized checkpoint (FP8/INT8 = 8, AWQ/GPTQ = 4).
FIX_KNOBS = ("max_model_len", "gpu_memory_utilization", "kv_cache_dtype", "weight_bits", "enforce_eager",
             "max_num_seqs", "max_num_batched_tokens", "block_size", "attention_backend", "tensor_parallel_size")
MAX_SAFE_UTILIZATION = 0.95   # the troubleshooting articles: 0.9-0.95 on a dedicated GPU, never 1.0


def _fix_answer(model: str = FIX_MODEL, gpu: str = FIX_GPU, max_model_len: int = FIX_MAX_MODEL_LEN, **_) -> str:
    return ("{'kv_cache_dtype': 'fp8'} (half the bytes per token, same context); "
            "{'weight_bits': 8} (an FP8/INT8 checkpoint) works too")


@exercise("lab03", 5, _fix_answer)
def check_fix_plan(kwargs: Any, model: str = FIX_MODEL, gpu: str = FIX_GPU,
                   max_model_len: int = FIX_MAX_MODEL_LEN) -> CheckResult:
    """``kwargs`` for :func:`vramlab.serving.vllm_memory.plan` with which ``model`` starts on one ``gpu`` and still
    serves requests of ``max_model_len`` tokens (the lesson's context)."""
    name = f"a start-up config for {model} on one {gpu} at {max_model_len:,} tokens"
    if kwargs is None:
        return report(name, False, "a dict of engine arguments", f"None ({NOT_DONE})")
    if not isinstance(kwargs, dict):
        return report(name, False, "a dict of engine arguments, {argument name: value}",
                      f"{type(kwargs).__name__}", "set my_fix to a dict")
    dashed = [k for k in kwargs if isinstance(k, str) and "-" in k]
    if dashed:
        return report(name, False, "Python keyword names", ", ".join(map(str, dashed)),
                      "write engine arguments with underscores: --kv-cache-dtype is kv_cache_dtype")
    unknown = sorted(str(k) for k in set(kwargs) - set(FIX_KNOBS))
    if unknown:
        return report(name, False, f"engine arguments only ({', '.join(FIX_KNOBS)})", f"also {', '.join(unknown)}",
                      "weights, overheads and the GPU are facts of the deployment, not arguments you can set")
    if kwargs.get("tensor_parallel_size", 1) != 1:
        return report(name, False, "tensor_parallel_size 1 (the deployment has one GPU)",
                      f"tensor_parallel_size {kwargs['tensor_parallel_size']!r}",
                      "a second GPU is not on the table; fit it on one")
    length = kwargs.get("max_model_len", max_model_len)
    if isinstance(length, int) and not isinstance(length, bool) and length < max_model_len:
        return report(name, False, f"max_model_len >= {max_model_len:,} (the context your users need)",
                      f"{length:,}", "shrinking the context is the fix you were asked not to use")
    util = kwargs.get("gpu_memory_utilization", None)
    if isinstance(util, (int, float)) and not isinstance(util, bool) and util > MAX_SAFE_UTILIZATION:
        return report(name, False, f"gpu_memory_utilization <= {MAX_SAFE_UTILIZATION}", f"{util}",
                      "above ~0.95 the CUDA context, CUDA graphs and fragmentation have no room left: "
                      "vLLM would start and OOM later")
    if "kv_cache_dtype" in kwargs:
        try:
            check_kv_cache_dtype(kwargs["kv_cache_dtype"])
        except ValueError as exc:
            return report(name, False, "a kv_cache_dtype vLLM accepts", repr(kwargs["kv_cache_dtype"]), str(exc))
        if kwargs["kv_cache_dtype"] == "fp8_inc":
            # vllm/config/cache.py (CacheConfig.cache_dtype doc): "Intel Gaudi (HPU) supports fp8 (using fp8_inc)"
            return report(name, False, "a kv_cache_dtype an NVIDIA L4 can use", "'fp8_inc'",
                          "fp8_inc is for Intel Gaudi (HPU) only (Intel Neural Compressor); on NVIDIA GPUs "
                          "use fp8 (= fp8_e4m3) or fp8_e5m2")
    try:
        p = plan(model, gpu, **{"max_model_len": max_model_len, **kwargs})
    except (TypeError, ValueError) as exc:
        return report(name, False, "arguments vLLM accepts", f"{type(exc).__name__}: {exc}")
    if not p.ok:
        got = (f"it does not start: {p.check.needed_gib:.2f} GiB of KV cache needed, "
               f"{max(p.available_kv_bytes, 0) / GiB:.2f} GiB available")
        hint = "which argument shrinks the bytes per token without touching the context?"
        if kwargs.get("enforce_eager"):
            hint = ("enforce_eager alone does not help here: it frees only the CUDA-graph memory the profile run "
                    "counted (about half a GiB), and the request needs several GiB more")
        return report(name, False, "vLLM starts", got, hint)
    return report(name, True, "", f"starts: {p.kv_cache_tokens:,} tokens of KV cache, "
                                  f"{p.max_concurrency:.2f}x concurrency at {p.max_model_len:,} tokens")


_VERDICT_CASES = [  # (tried, free on the device, reserved-but-unallocated)
    (2 << 30, int(1.1 * GiB), 3 << 30), (2 << 30, 512 << 20, 1 << 30), (20 << 20, 0, 20 << 20),
    (256 << 20, 0, 0), (2 << 30, 30 << 30, 0), (1 << 30, 1 << 30, 2 << 30),
]


def _verdict_answer(**_) -> str:
    return ("'cap' when free_bytes >= tried_bytes (the device had it: a per-process limit refused it), else "
            "'fragmentation' when reserved_unallocated_bytes >= tried_bytes (PyTorch's cache held it, not in one "
            "piece), else 'shortage'")


@exercise("lab03", 6, _verdict_answer)
def check_oom_verdict(fn) -> CheckResult:
    """``fn(tried_bytes, free_bytes, reserved_unallocated_bytes)`` -> ``"cap"``, ``"fragmentation"`` or
    ``"shortage"`` (the reference is :func:`vramlab.vram.oom_message.oom_verdict`)."""
    name = "OOM verdict"
    for tried, free, unalloc in _VERDICT_CASES:
        want = oom_verdict(tried, free, unalloc)
        got, failed = call_learner(name, fn, tried, free, unalloc, expected="one of " + ", ".join(map(repr, VERDICTS)))
        if failed is not None:
            return failed
        if got is None:
            return report(name, False, "one of " + ", ".join(map(repr, VERDICTS)), f"None ({NOT_DONE})",
                          "return a string, e.g. `return ...` at the end of the function")
        if got != want:
            if got not in VERDICTS:
                hint = f"return one of {', '.join(map(repr, VERDICTS))}"
            elif want == "cap":
                hint = "compare the request with the device's free memory first: was the device itself short?"
            elif want == "fragmentation":
                hint = "compare the request with PyTorch's reserved-but-unallocated memory too, not only the device's"
            else:
                hint = "compare the request with each of the two numbers: could either have served it?"
            return report(name, False, f"a verdict for tried={tried:,}, free={free:,}, reserved-unallocated={unalloc:,}",
                          repr(got), hint)
    return report(name, True, "", f"all {len(_VERDICT_CASES)} cases right")
