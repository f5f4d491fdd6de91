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
import re

from vramlab.vram.oom_message import VERDICTS, parse_oom_message
from vramlab.serving.vllm_memory import (check_kv_cache_dtype, estimate_max_model_len, kv_cache_capacity, needed_bytes,
                                        plan)

__all__ = ["check_kv_bytes_by_hand", "check_mla_bytes_by_hand", "check_prediction", "check_needed_gib",
           "check_max_len_that_fits", "check_fix_plan", "check_oom_reading", "check_deployment_size"]

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
                          f"{fmt_number(got)}, {direction(value, want, name=name)}", _ratio_hint(value, want, hints, default_hint))
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
    return report(name, False, "a number of GiB", f"{fmt_number(value)} GiB, {direction(value, want, name=name)}",
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
                got_s = f"{fmt_number(got)}, {direction(value, want, name=name)}"
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


# ----------------------------------------------------------------------------- exercise 6: read three OOM messages
# A and B are real (quoted in vramlab's instructor notes): pytorch/pytorch issue #16417 (a comment of 2024-03-13)
# and murong-xu/CADS issue #4. C is written in the same PyTorch 2.x format for a process capped with
# torch.cuda.set_per_process_memory_fraction (the device still has memory free).
_ADVICE = ("If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
           "to avoid fragmentation.  See documentation for Memory Management  "
           "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")
READING_MESSAGES = {
    "A": ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 22.00 MiB. GPU 0 has a total capacity "
          "of 23.65 GiB of which 11.06 MiB is free. Including non-PyTorch memory, this process has 23.60 GiB memory "
          "in use. Of the allocated memory 22.90 GiB is allocated by PyTorch, and 194.87 MiB is reserved by PyTorch "
          "but unallocated. " + _ADVICE),
    "B": ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 22.78 GiB. GPU 0 has a total capacity of "
          "31.47 GiB of which 12.73 GiB is free. Including non-PyTorch memory, this process has 18.73 GiB memory in "
          "use. Of the allocated memory 9.08 GiB is allocated by PyTorch, and 9.35 GiB is reserved by PyTorch but "
          "unallocated. " + _ADVICE),
    "C": ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
          "79.15 GiB of which 30.12 GiB is free. Including non-PyTorch memory, this process has 48.02 GiB memory in "
          "use. Of the allocated memory 47.50 GiB is allocated by PyTorch, and 10.00 MiB is reserved by PyTorch but "
          "unallocated. " + _ADVICE),
}
# What a wrong label most likely misread, per message: (message, wrong label) -> the number to read again.
_MISREAD = {
    ("A", "cap"): "message A: the device had 11.06 MiB free, less than the 22.00 MiB asked, so the device itself "
                  "could not serve it and no limit was needed to refuse it",
    ("A", "shortage"): "message A: you compared the request with the free figure only; read the 'reserved by PyTorch "
                       "but unallocated' figure too (mind the units: MiB against MiB) and compare it with the request",
    ("B", "cap"): "message B: 12.73 GiB free is less than the 22.78 GiB asked: the device could not have served it",
    ("B", "fragmentation"): "message B: compare 'reserved by PyTorch but unallocated' with the request again (9.35 "
                            "GiB, not the 9.08 GiB 'allocated'); free and unallocated memory cannot be pieced "
                            "together into one block, and even their sum falls short here",
    ("C", "shortage"): "message C: read the free figure again and compare it with the request: could the device "
                       "itself have served it? If it could, something else refused it",
    ("C", "fragmentation"): "message C: 10.00 MiB reserved-but-unallocated cannot serve 2.00 GiB; look at what the "
                            "device had free instead",
}
_NUM_RE = re.compile(r"\d{1,6}(?:\.\d{1,4})?")


def _message_numbers(text: str) -> set[str]:
    return {n.rstrip("0").rstrip(".") or "0" for n in _NUM_RE.findall(text)}


def _size(n: int) -> str:
    return f"{n / GiB:.2f} GiB" if n >= GiB else f"{n / 2**20:.2f} MiB"


def _reading_answer(**_) -> str:
    parts = []
    for key, text in READING_MESSAGES.items():
        r = parse_oom_message(text)
        parts.append(f"{key}: {r.verdict!r} (asked {_size(r.tried_bytes)}; device free {_size(r.free_bytes)}; "
                     f"reserved-but-unallocated {_size(r.reserved_unallocated_bytes)})")
    return "; ".join(parts)


@exercise("lab03", 6, _reading_answer)
def check_oom_reading(got: Any) -> CheckResult:
    """``{"A": (verdict, why), "B": ..., "C": ...}`` for :data:`READING_MESSAGES`: the verdict is "shortage",
    "fragmentation" or "cap" (the rule of :func:`vramlab.vram.oom_message.oom_verdict`), ``why`` a sentence
    naming at least one number of that message."""
    name = "reading three OOM messages"
    kind = "a dict {message: (verdict, why)} for A, B and C"
    if got is None or got is Ellipsis:
        return report(name, False, kind, f"None ({NOT_DONE})", value=got)
    if not isinstance(got, dict):
        return report(name, False, kind, f"{type(got).__name__} {fmt_number(got)}",
                      'write a dict such as {"A": ("...", "because ..."), ...}')
    missing = [k for k in READING_MESSAGES if k not in got]
    if missing:
        return report(name, False, kind, f"no entry for {', '.join(missing)}", "give a verdict for every message")
    labels = ", ".join(map(repr, VERDICTS))
    for key, text in READING_MESSAGES.items():
        entry = got[key]
        if isinstance(entry, str):
            return report(name, False, f"(verdict, why) for message {key}", f"only {entry!r}",
                          "add one sentence naming the numbers you compared, e.g. (\"...\", \"... is less than ...\")")
        if not isinstance(entry, (tuple, list)) or len(entry) != 2:
            return report(name, False, f"(verdict, why) for message {key}", fmt_number(entry),
                          "a pair: the verdict and one sentence why")
        verdict, why = entry
        if verdict not in VERDICTS:
            return report(name, False, f"one of {labels} for message {key}", repr(verdict), f"use one of {labels}")
        want = parse_oom_message(text).verdict
        if verdict != want:
            return report(name, False, f"the verdict the three numbers of message {key} support", repr(verdict),
                          _MISREAD.get((key, verdict), f"message {key}: compare the request with each of the two "
                                                        "other numbers"))
        said = _message_numbers(str(why))
        if not isinstance(why, str) or not (said & _message_numbers(text)):
            return report(name, False, f"a reason that names numbers of message {key}", repr(why),
                          "name the numbers you compared, as printed in the message (e.g. '... MiB asked, ... free')")
    return report(name, True, "", "all three verdicts follow from the numbers you named")


# ----------------------------------------------------------------------------- exercise 7 (capstone): size it
QWEN3_8B = {"num_hidden_layers": 36, "num_key_value_heads": 8, "head_dim": 128}
_SIZE_CASES = [  # (config, available GiB as vLLM printed it, max_model_len, dtype bytes, block size)
    (QWEN3_8B, 4.89, 8192, 2, 16),     # the log of vLLM issue #38516, served at 8,192 tokens
    (QWEN3_8B, 4.89, 8192, 1, 16),     # the same with --kv-cache-dtype fp8
    ({"num_hidden_layers": 32, "num_key_value_heads": 8, "head_dim": 128}, 4.44, 10001, 2, 16),
    ({"num_hidden_layers": 30, "num_key_value_heads": 3, "head_dim": 64}, 0.5, 4096, 2, 32),
]


def _size_reference(config, available_gib, max_model_len, dtype_bytes, block_size) -> dict:
    cfg = {**config, "num_attention_heads": 4 * config["num_key_value_heads"]}
    dtype = {1: "fp8", 2: "bfloat16", 4: "float32"}[dtype_bytes]
    cap = kv_cache_capacity(cfg, int(available_gib * GiB), max_model_len, block_size, kv_cache_dtype=dtype)
    return {"kv_cache_tokens": cap["kv_cache_tokens"], "max_concurrency": cap["max_concurrency"]}


def _size_answer(**_) -> str:
    ref = _size_reference(*_SIZE_CASES[0])
    return ("bytes_per_token = 2 x layers x kv_heads x head_dim x dtype_bytes; blocks = int(available_gib x 2**30) // "
            "(bytes_per_token x block_size); kv_cache_tokens = blocks x block_size; max_concurrency = blocks / "
            f"ceil(max_model_len / block_size). Qwen3-8B, 4.89 GiB, 8,192 tokens: {ref['kv_cache_tokens']:,} tokens, "
            f"{ref['max_concurrency']:.2f}x")


@exercise("lab03", 7, _size_answer)
def check_deployment_size(fn) -> CheckResult:
    """Capstone: ``fn(config, available_gib, max_model_len, dtype_bytes, block_size)`` -> ``{"kv_cache_tokens":
    int, "max_concurrency": float}``, what vLLM logs as "GPU KV cache size" and "Maximum concurrency"."""
    name = "sizing a deployment"
    kind = 'a dict {"kv_cache_tokens": ..., "max_concurrency": ...}'
    for case in _SIZE_CASES:
        config, gib, length, nbytes, bs = case
        want = _size_reference(*case)
        got, failed = call_learner(name, fn, dict(config), gib, length, nbytes, bs, expected=kind)
        if failed is not None:
            return failed
        label = f"{gib} GiB, max_model_len {length:,}, {nbytes}-byte cache, block {bs}"
        if not isinstance(got, dict) or not {"kv_cache_tokens", "max_concurrency"} <= set(got):
            return report(name, False, kind, f"{type(got).__name__} {fmt_number(got)}",
                          "return a dict with the keys kv_cache_tokens and max_concurrency")
        tokens, conc = as_float(got["kv_cache_tokens"]), as_float(got["max_concurrency"])
        if tokens is None or conc is None:
            return report(name, False, "two numbers", f"{fmt_number(got['kv_cache_tokens'])}, "
                                                      f"{fmt_number(got['max_concurrency'])}", "return numbers")
        per_token = 2 * config["num_hidden_layers"] * config["num_key_value_heads"] * config["head_dim"] * nbytes
        avail = int(gib * GiB)
        if tokens != want["kv_cache_tokens"]:
            t = want["kv_cache_tokens"]
            if tokens == avail // per_token:
                hint = "that counts single tokens; the pool is whole blocks of block_size tokens"
            elif math.isclose(tokens, int(gib * 1e9) // (per_token * bs) * bs, rel_tol=1e-9):
                hint = "vLLM's GiB is 2**30 bytes, not 10**9"
            else:
                hint = _ratio_hint(tokens, t, {2.0: "twice too many: each layer stores a key AND a value per KV head",
                                               0.5: "half: bytes per token counts K and V once each, not twice"},
                                   "bytes per token from the config first (Exercise 1), then whole blocks of the budget")
            return report(name, False, f"a number of tokens ({label})", f"{fmt_number(tokens)}, {direction(tokens, t, name=name)}",
                          hint)
        if not abs(conc - want["max_concurrency"]) <= 0.005:
            c = want["max_concurrency"]
            blocks = want["kv_cache_tokens"] // bs
            if math.isclose(conc, want["kv_cache_tokens"] / length, rel_tol=1e-9):
                hint = "one request holds whole blocks too: a length that is not a multiple of block_size rounds up"
            elif conc == math.floor(c):
                hint = "vLLM prints a ratio with two decimals (e.g. 1.05x), not a whole number of requests"
            elif math.isclose(conc, blocks / (length / bs) , rel_tol=1e-9):
                hint = "round the request's blocks up (ceil), not to a fraction"
            else:
                hint = "how many blocks does one full-length request hold? divide the pool's blocks by that"
            return report(name, False, f"a concurrency ratio ({label})", f"{fmt_number(conc, 4)}, {direction(conc, c, name=name)}",
                          hint)
    first = _size_reference(*_SIZE_CASES[0])
    logged = estimate_max_model_len(_MAX_LEN_CFG, int(4.89 * GiB), 1 << 22)
    return report(name, True, "", f"all {len(_SIZE_CASES)} deployments match vLLM's formulas (Qwen3-8B, 4.89 GiB: "
                                  f"{first['kv_cache_tokens']:,} tokens = the {logged:,} vLLM printed in issue #38516; "
                                  f"{first['max_concurrency']:.2f}x at 8,192 tokens)")
