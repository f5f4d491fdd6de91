"""Checks for notebook 06 (accelerate / transformers dispatch errors).

The judge is always the real planner: :func:`vramlab.dispatch.plan_device_map` (accelerate's
``infer_auto_device_map`` with transformers' budget adjustments) on a meta model, so a check and
``from_pretrained(..., device_map="auto")`` cannot disagree.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any, Mapping

from vramlab.checks._core import CheckResult, as_float, exercise, fmt_number, report

__all__ = ["check_predicted_gpu_layers", "check_offload_device_map", "check_budget_gib", "check_capstone_layers"]

# Exercise 1: Llama-3.1-8B in bf16, one GPU with a 10 GiB budget, 30 GiB of cpu.
PREDICT_CONFIG = "llama-3.1-8b"
PREDICT_BUDGET = {0: "10GiB", "cpu": "30GiB"}
# Exercise 2: SmolLM2 in 8-bit on a GPU with 150 MB (the budget that raised the error).
OFFLOAD_BUDGET = {0: "150MB", "cpu": "1GB"}
# Exercise 3: Llama-3.1-8B in 4-bit, wholly on GPU 0.
BUDGET_CONFIG = "llama-3.1-8b"


@functools.lru_cache(maxsize=None)
def _meta(config: str, quantization: str | None):
    from vramlab.dispatch import empty_model

    return empty_model(config, quantization=quantization)


def gpu_layers(device_map: Mapping[str, Any], device: Any = 0, total: int | None = None) -> int:
    """How many decoder layers (``model.layers.N``) a map puts wholly on ``device``. A layer placed through
    a parent entry counts too (``{"": 0}``, the planner's answer when everything fits, puts all of them
    there); ``total`` defaults to the highest layer index named in the map, plus one."""
    if total is None:
        idx = [int(k.split(".")[2]) for k in device_map if k.startswith("model.layers.") and k.count(".") >= 2
               and k.split(".")[2].isdigit()]
        total = max(idx) + 1 if idx else 0
    count = 0
    for i in range(total):
        name = f"model.layers.{i}"
        for key in (name, "model.layers", "model", ""):
            if key in device_map:
                count += device_map[key] == device and not isinstance(device_map[key], bool)
                break
    return count


def predicted_layers_answer() -> tuple[int, int]:
    """(decoder layers on GPU 0, total decoder layers) for exercise 1, from the real planner."""
    from vramlab.dispatch import plan_device_map

    model = _meta(PREDICT_CONFIG, None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        plan = plan_device_map(model, PREDICT_BUDGET)
    return gpu_layers(plan, total=model.config.num_hidden_layers), model.config.num_hidden_layers


def _layers_answer(**_) -> str:
    actual, total = predicted_layers_answer()
    return f"the planner puts {actual} of the {total} decoder layers on GPU 0"


@exercise("lab06", 1, _layers_answer, prediction=True)
def check_predicted_gpu_layers(prediction: Any) -> CheckResult:
    """Any honest number of layers passes; the check says how far off the prediction was."""
    name = "prediction: Llama-3.1-8B layers on GPU 0"
    value = as_float(prediction)
    if prediction is None or value is None:
        return report(name, False, "a number of layers (your guess, before running the planner)",
                      f"{prediction!r}", "store a number in `predicted_gpu_layers`, then run this cell")
    actual, total = predicted_layers_answer()
    if not 0 <= value <= total:
        return report(name, False, f"a count between 0 and {total} (the model has {total} decoder layers)",
                      fmt_number(prediction), "count decoder layers, not GiB")
    off = value - actual
    if off == 0:
        note = "exactly right"
    elif off > 0:
        note = (f"{fmt_number(off)} too many: the 1 GiB embedding goes to GPU 0 first, and accelerate keeps "
                "room on GPU 0 for the largest layer it may still have to place (here lm_head, 1 GiB)")
    else:
        note = f"{fmt_number(-off)} too few: a bf16 decoder layer of Llama-3.1-8B is only ~0.41 GiB"
    return report(name, True, "", f"{fmt_number(prediction)}; the planner puts {actual} of {total} on GPU 0 "
                                  f"({note})")


def _offload_sizes():
    from vramlab.dispatch import module_sizes

    return module_sizes(_meta("smollm2-135m", "8bit"), quantization="8bit")


def _offload_answer(**_) -> str:
    from vramlab.dispatch import plan_device_map

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        plan = plan_device_map("smollm2-135m", OFFLOAD_BUDGET, quantization="8bit")
    return (f"what device_map='auto' plans: {gpu_layers(plan)} decoder layers (with the embedding) on GPU 0, the "
            f"rest on 'cpu': vramlab.dispatch.plan_device_map('smollm2-135m', {OFFLOAD_BUDGET}, quantization='8bit')")


@exercise("lab06", 2, _offload_answer)
def check_offload_device_map(device_map: Any) -> CheckResult:
    """A custom ``device_map`` for SmolLM2 in 8-bit with a 150 MB GPU: covers every weight, uses GPU 0,
    keeps GPU 0 within the 150 MB budget, sends the rest to "cpu". A hand-written map is used as given:
    transformers 5.24 (``integrations/accelerate.py`` ``_get_device_map``) applies ``get_balanced_memory`` and
    bitsandbytes' ``adjust_max_memory`` (x 0.90) only when ``device_map`` is a string, so the 10% headroom is
    the planner's, and the check only remarks on it."""
    from accelerate.utils import check_device_map

    from vramlab.dispatch import BNB_MAX_MEMORY_FACTOR, parse_max_memory

    name = "offload device_map"
    limit = int(parse_max_memory(OFFLOAD_BUDGET)[0])
    planner_limit = int(limit * BNB_MAX_MEMORY_FACTOR)   # what device_map="auto" would plan with
    expected = f"a dict covering every module, GPU 0 <= {limit / 1e6:.0f} MB at 8-bit sizes, the rest on 'cpu'"
    if not isinstance(device_map, Mapping) or not device_map:
        return report(name, False, expected, f"{device_map!r}",
                      "write a dict {module name: 0 or 'cpu'}, e.g. {'model.embed_tokens': 0, ...}")
    bad_keys = [k for k in device_map if not isinstance(k, str)]
    if bad_keys:
        return report(name, False, expected, f"key {bad_keys[0]!r}",
                      "keys are module names (strings) such as 'model.embed_tokens' or 'model.layers.0'")
    # `False == 0` and `0.0 == 0` in Python: compare types too, so False is not read as GPU 0
    bad = [v for v in device_map.values()
           if isinstance(v, bool) or not (v in ("cpu", "disk", "cuda:0") or (type(v) is int and v == 0))]
    if bad:
        return report(name, False, expected, f"device {bad[0]!r}", "use 0 for the GPU and 'cpu' for main memory")
    dmap = {k: (0 if v == "cuda:0" else v) for k, v in device_map.items()}
    model = _meta("smollm2-135m", "8bit")
    sizes = _offload_sizes()
    # a mistyped name first: it also leaves its weights without a device, but the typo is the cause
    unknown = [k for k in dmap if k and k not in sizes and k != "lm_head"]
    if unknown:
        return report(name, False, expected, f"unknown module {unknown[0]!r}",
                      "use names from plan_device_map(...) or model.named_modules()")
    try:
        check_device_map(model, dmap)
    except ValueError as exc:
        missing = [m.strip() for m in str(exc).split(":", 1)[-1].split(",") if m.strip()]
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        return report(name, False, expected, "a map that leaves weights without a device",
                      f"accelerate says: no device for {shown}. Every module with weights needs a "
                      "device (a parent name like 'model.layers' covers all its children)")
    on_gpu = sum(sizes.get(k, 0) for k, v in dmap.items() if v == 0)
    if on_gpu == 0:
        return report(name, False, expected, "nothing on GPU 0",
                      "an all-cpu model loads, but then the GPU does nothing; put the embedding and the first "
                      "layers on 0")
    if not any(v in ("cpu", "disk") for v in dmap.values()):
        return report(name, False, expected, f"everything on GPU 0 ({on_gpu / 1e6:.0f} MB)",
                      "that is the map that does not fit: the model needs ~163 MB at 8-bit")
    if on_gpu > limit:
        bf16 = sum(_bf16_sizes().get(k, 0) for k, v in dmap.items() if v == 0)
        hint = (f"GPU 0 holds {on_gpu / 1e6:.1f} MB at 8-bit sizes, more than the {limit / 1e6:.0f} MB budget "
                "- move a few more layers to 'cpu'")
        if bf16 <= parse_max_memory(OFFLOAD_BUDGET)[0] < on_gpu * 2:
            hint += " (the 1-byte 8-bit Linear weights are already counted; the embedding stays bf16)"
        return report(name, False, expected, f"{on_gpu / 1e6:.1f} MB on GPU 0", hint)
    layers = gpu_layers(dmap)
    note = ""
    if on_gpu > planner_limit:
        note = (f"; no headroom left: device_map='auto' would plan with {planner_limit / 1e6:.0f} MB "
                "(bitsandbytes' adjust_max_memory keeps 10% back for quantization buffers), and activations "
                "need room too")
    return report(name, True, "", f"{on_gpu / 1e6:.1f} MB on GPU 0 ({layers} decoder layers), the rest on cpu"
                  + note)


@functools.lru_cache(maxsize=None)
def _bf16_sizes():
    from vramlab.dispatch import module_sizes

    return module_sizes("smollm2-135m", dtype="bfloat16")


@functools.lru_cache(maxsize=None)
def smallest_budget_gib(config: str = BUDGET_CONFIG, quantization: str = "4bit") -> float:
    """The smallest GPU-0 budget (GiB, to 1 MiB) at which ``device_map="auto"`` keeps the whole model
    on GPU 0 (cpu also offered), found by bisection with the real planner."""
    from vramlab.dispatch import GiB, MiB, plan_device_map, spills

    model = _meta(config, quantization)
    lo, hi = 0, 256 * GiB
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        while hi - lo > MiB:
            mid = (lo + hi) // 2
            plan = plan_device_map(model, {0: mid, "cpu": 256 * GiB}, quantization=quantization)
            if spills(plan) or set(plan.values()) == {"cpu"}:
                lo = mid
            else:
                hi = mid
    return hi / GiB


def _fits_on_gpu0(budget_gib: float) -> bool:
    """The real planner keeps the whole 4-bit model on GPU 0 under ``budget_gib`` (cpu offered too)."""
    import math

    from vramlab.dispatch import GiB, plan_device_map

    if not math.isfinite(budget_gib) or budget_gib > 1e4:
        return False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        plan = plan_device_map(_meta(BUDGET_CONFIG, "4bit"), {0: int(budget_gib * GiB), "cpu": 256 * GiB},
                               quantization="4bit")
    return set(plan.values()) == {0}


def _budget_answer(**_) -> str:
    need = smallest_budget_gib()
    return (f"at least {need:.3f} GiB (the smallest budget the planner accepts, to 1 MiB) and at most "
            f"{1.10 * need:.3f} GiB: 0.90 x budget must hold the 4-bit model, whose embed_tokens and lm_head "
            "stay bf16")


@exercise("lab06", 3, _budget_answer)
def check_budget_gib(budget_gib: Any) -> CheckResult:
    """The GPU budget (GiB) for Llama-3.1-8B in 4-bit to load wholly on GPU 0 with device_map="auto":
    enough (the planner keeps everything on GPU 0) and no more than 10% above the smallest that works."""
    from vramlab.dispatch import BNB_MAX_MEMORY_FACTOR, GiB, module_sizes

    name = "GPU budget for Llama-3.1-8B in 4-bit"
    value = as_float(budget_gib)
    if budget_gib is None or value is None:
        return report(name, False, "a budget in GiB", f"{budget_gib!r}", "store a number of GiB in `budget_gib`")
    need = smallest_budget_gib()
    # the range test comes first: a right answer in GiB (e.g. 6.2) may also sit near the GB figure
    if 0 < value <= 1.10 * need and _fits_on_gpu0(value):
        return report(name, True, "", f"{value:.3f} GiB (the planner needs at least {need:.3f} GiB)")
    wanted = "a budget in GiB: enough for the whole model on GPU 0, and no more than 10% above the smallest"
    total = module_sizes(_meta(BUDGET_CONFIG, "4bit"), quantization="4bit")[""] / GiB
    naive = total  # as loaded, without the 10 % bitsandbytes keeps back
    all_int4 = 8.030261248e9 * 0.5 / GiB  # every parameter at 4 bits, embeddings included
    side = "too high" if value > 1.10 * need else "too low"
    if value > 1.10 * need:
        hint = "that fits, but it is more than 10% above what is needed: size it from the 4-bit model size"
    elif abs(value - naive) / naive < 0.03:
        hint = (f"{naive:.2f} GiB is the model; bitsandbytes plans with only {BNB_MAX_MEMORY_FACTOR:.0%} "
                "of each budget (adjust_max_memory)")
    elif abs(value - all_int4) / all_int4 < 0.05 or abs(value - all_int4 / BNB_MAX_MEMORY_FACTOR) < 0.2:
        hint = ("4-bit shrinks only the Linear layers: embed_tokens and lm_head (1 GiB each for a 128k "
                "vocabulary) stay bf16")
    elif abs(value - need * 1e9 / GiB) / need < 0.03:   # GiB figure divided by 1.074: converted the wrong way
        hint = "GB vs GiB: the check wants GiB (2**30 bytes), a larger unit than GB (10**9 bytes)"
    elif 0 <= need - value < 0.01:
        hint = "just short: 0.90 x budget must hold the whole model; round the budget up, not to the nearest"
    else:
        hint = "too small: part of the model spills to cpu, and bitsandbytes refuses that"
    return report(name, False, wanted, f"{value:.3f} GiB, {side}", hint)


# --------------------------------------------------------------------------------------------
# Exercise 4 (capstone): GPU 0's budget after the activation headroom from the dry run
# --------------------------------------------------------------------------------------------

# Llama-3.1-8B in bf16 on a 16 GiB GPU serving a batch of 8 prompts of 2,048 tokens, cpu for the rest.
CAPSTONE_CONFIG = "llama-3.1-8b"
CAPSTONE_GPU_GIB = 16
CAPSTONE_BATCH = 8
CAPSTONE_SEQ = 2048
CAPSTONE_CPU = "30GiB"


@functools.lru_cache(maxsize=None)
def activation_headroom(config: str = CAPSTONE_CONFIG, batch_size: int = CAPSTONE_BATCH,
                        seq_len: int = CAPSTONE_SEQ) -> int:
    """Bytes GPU 0 needs beyond the weights and the KV cache during a forward pass: the dry run's peak
    (``vramlab.vram.dry_run``, a bf16 prefill on the meta device) minus the weights and KV cache live at
    that peak, i.e. activations + logits + cuBLAS workspace. accelerate's ``infer_auto_device_map``
    reserves room only for the largest layer it may still have to bring in (accelerate 1.15
    ``utils/modeling.py``: ``main_devices = [gpus[0], "cpu"]`` and ``current_max_size - max_layer_size``),
    nothing for activations, so this headroom must come off ``max_memory[0]`` by hand."""
    from vramlab.vram import dry_run

    trace = dry_run(config, batch_size, seq_len)
    at_peak = trace.breakdown("peak")
    return int(trace.peak_bytes - at_peak["weights"] - at_peak["kv_cache"])


def capstone_plan(headroom: int | None = None) -> dict:
    """The real planner's map for GPU 0 = 16 GiB minus ``headroom`` bytes (default: the dry run's)."""
    from vramlab.dispatch import GiB, plan_device_map

    room = activation_headroom() if headroom is None else headroom
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return plan_device_map(_meta(CAPSTONE_CONFIG, None),
                               {0: int(CAPSTONE_GPU_GIB * GiB) - int(room), "cpu": CAPSTONE_CPU})


def capstone_answer() -> tuple[int, int, int]:
    """(decoder layers on GPU 0 with the headroom, without it, total decoder layers)."""
    total = _meta(CAPSTONE_CONFIG, None).config.num_hidden_layers
    return gpu_layers(capstone_plan(), total=total), gpu_layers(capstone_plan(0), total=total), total


def _capstone_text(**_) -> str:
    from vramlab.dispatch import GiB

    with_room, without, total = capstone_answer()
    return (f"{with_room} of the {total} decoder layers on GPU 0: max_memory[0] = {CAPSTONE_GPU_GIB} GiB - "
            f"{activation_headroom() / GiB:.2f} GiB of headroom (dry-run peak minus weights and KV cache); the "
            f"planner then puts the embedding first and keeps room for lm_head, the largest layer "
            f"(without the headroom it would plan {without})")


@exercise("lab06", 4, _capstone_text)
def check_capstone_layers(predicted_layers: Any) -> CheckResult:
    """How many decoder layers the real planner puts on GPU 0 once the activation headroom is taken off
    the 16 GiB: exact (an integer count from the module sizes)."""
    name = "capstone: layers on GPU 0 after the headroom"
    value = as_float(predicted_layers)
    if predicted_layers is None or value is None:
        return report(name, False, "a number of decoder layers", f"{predicted_layers!r}",
                      "store a whole number in `predicted_layers`")
    with_room, without, total = capstone_answer()
    got = fmt_number(predicted_layers)
    if not value.is_integer() or not 0 <= value <= total:
        return report(name, False, f"a whole number of decoder layers, 0 to {total}", got,
                      "count whole decoder layers: a layer is never split between devices")
    if value == with_room:
        return report(name, True, "", f"{got} decoder layers on GPU 0, as the real planner places them")
    if value == without or value == total:
        hint = ("that is the plan for the whole GPU: take the activation headroom (dry-run peak minus weights and "
                "KV cache) off max_memory[0] first; accelerate keeps no room for activations")
    elif value > with_room:
        hint = ("after the headroom, the embedding goes to GPU 0 first, and accelerate keeps room on "
                "GPU 0 for the largest layer it may still have to bring in (lm_head)")
    elif value == 0:
        hint = ("none left: the headroom is the peak minus the weights and the KV cache, not the whole peak")
    else:
        hint = ("the headroom counts only what the forward adds (activations, logits, workspace); "
                "did you also take off the weights or the KV cache, or reserve lm_head twice?")
    return report(name, False, "a number of decoder layers", f"{got}, {'too many' if value > with_room else 'too few'}",
                  hint)
