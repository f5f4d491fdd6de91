"""Checks for notebook 06 (accelerate / transformers dispatch errors).

The judge is always the real planner: :func:`vramlab.dispatch.plan_device_map` (accelerate's
``infer_auto_device_map`` with transformers' budget adjustments) on a meta model, so a check and
``from_pretrained(..., device_map="auto")`` cannot disagree.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any, Mapping

from vramlab import ran
from vramlab.checks._core import (opened_by, CheckResult, as_float, call_learner, direction, exercise, fmt_number,
                                  report, tries)

# also public, not star-exported: replay_predicted_map (the replay after Exercise 4's recorded prediction).
__all__ = ["check_predicted_gpu_layers", "check_offload_device_map", "check_budget_gib", "check_map_covers",
           "check_peak_prediction", "check_serving_map"]

# Exercise 1: Llama-3.1-8B in bf16, one GPU with a 10 GiB budget, 30 GiB of cpu.
PREDICT_CONFIG = "llama-3.1-8b"
PREDICT_BUDGET = {0: "10GiB", "cpu": "30GiB"}
# Exercise 2: SmolLM2 in 8-bit on a GPU with 150 MB (the budget that raised the error).
OFFLOAD_BUDGET = {0: "150MB", "cpu": "1GB"}
# Exercise 3: a function of a config; checked on these models in 4-bit (untied, untied with a small vocabulary, tied).
BUDGET_CONFIGS = ("llama-3.1-8b", "mistral-7b", "smollm2-135m")
BUDGET_LABELS = {"llama-3.1-8b": "Llama-3.1-8B", "mistral-7b": "Mistral-7B-v0.3", "smollm2-135m": "SmolLM2-135M"}


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


def _predicted_layers_answer() -> tuple[int, int]:
    """(decoder layers on GPU 0, total decoder layers) for exercise 1, from the real planner."""
    from vramlab.dispatch import plan_device_map

    model = _meta(PREDICT_CONFIG, None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        plan = plan_device_map(model, PREDICT_BUDGET)
    return gpu_layers(plan, total=model.config.num_hidden_layers), model.config.num_hidden_layers


def _layers_answer(**_) -> str:
    actual, total = _predicted_layers_answer()
    return f"the planner puts {actual} of the {total} decoder layers on GPU 0"


@exercise("lab06", 1, _layers_answer, prediction=True)
def check_predicted_gpu_layers(prediction: Any) -> CheckResult:
    """Any honest number of layers passes; the check says how far off the prediction was."""
    name = "prediction: Llama-3.1-8B layers on GPU 0"
    value = as_float(prediction)
    if prediction is None or value is None:
        return report(name, False, "a number of layers (your guess, before running the planner)",
                      f"{prediction!r}", "store a number in `predicted_gpu_layers`, then run this cell")
    actual, total = _predicted_layers_answer()
    if not 0 <= value <= total:
        return report(name, False, f"a count between 0 and {total} (the model has {total} decoder layers)",
                      fmt_number(prediction), "count decoder layers, not GiB")
    off = value - actual
    if off == 0:
        note = "exactly right"
    elif off > 0:
        note = (f"{fmt_number(off)} too many: the 1 GiB embedding goes to GPU 0 first, and the planner keeps "
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
    its bitsandbytes quantizer's ``adjust_max_memory`` (x 0.90) only when ``device_map`` is a string, so the 10% headroom is
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
                "(transformers' bitsandbytes quantizer keeps 10% back: adjust_max_memory), and activations "
                "need room too")
    return report(name, True, "", f"{on_gpu / 1e6:.1f} MB on GPU 0 ({layers} decoder layers), the rest on cpu"
                  + note)


@functools.lru_cache(maxsize=None)
def _bf16_sizes():
    from vramlab.dispatch import module_sizes

    return module_sizes("smollm2-135m", dtype="bfloat16")



# --------------------------------------------------------------------------------------------
# Exercise 3: the smallest GPU budget that keeps a 4-bit model wholly on GPU 0, from its config
# --------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _smallest_budget_bytes(config: str, quantization: str = "4bit") -> float:
    """The smallest ``max_memory[0]`` (bytes) at which ``device_map="auto"`` keeps the whole model on GPU 0.

    When everything fits, transformers' ``infer_auto_device_map`` (5.24, ``integrations/accelerate.py``) needs
    the planned model size within the budget that the bitsandbytes quantizer leaves it: ``adjust_max_memory``
    (``quantizers/quantizer_bnb_4bit.py``) multiplies every budget by 0.90, so the answer is the planned size /
    0.90 (``tests/test_checks_lab06.py`` holds it against the planner a byte above and 1 MiB below)."""
    from vramlab.dispatch import BNB_MAX_MEMORY_FACTOR, module_sizes

    return module_sizes(_meta(config, quantization), quantization=quantization)[""] / BNB_MAX_MEMORY_FACTOR


def _budget_configs() -> list[dict]:
    from vramlab.configs import load_config

    return [{k: v for k, v in load_config(name).items() if not k.startswith("_")} for name in BUDGET_CONFIGS]


def _budget_answer(**_) -> str:
    from vramlab.dispatch import GiB

    needs = ", ".join(f"{name} {_smallest_budget_bytes(name) / GiB:.4f}" for name in BUDGET_CONFIGS)
    return ("(Linear weights x 0.5 byte + embedding, lm_head unless tied, and norms x 2 bytes) / 0.90 / 2**30: "
            f"{needs} GiB; 4-bit shrinks only the decoder's Linear layers, and device_map='auto' plans with 90% "
            "of each budget (transformers' bitsandbytes quantizer, adjust_max_memory)")


@exercise("lab06", 3, _budget_answer)
def check_budget_gib(fn) -> CheckResult:
    """``fn(config)`` -> the smallest ``max_memory[0]`` in GiB at which ``device_map="auto"`` keeps the whole 4-bit
    model on GPU 0 (config: a dict of the model's ``config.json`` fields). Checked on Llama-3.1-8B, Mistral-7B and
    SmolLM2-135M (tied embeddings): each answer must be enough for the real planner (to 0.1 MiB) and at most 2%
    above the smallest."""
    from vramlab.dispatch import BNB_MAX_MEMORY_FACTOR, GiB, MiB

    import math

    name = "smallest GPU budget for a 4-bit model"
    what = "a function of the config returning GiB"
    for model_name, config in zip(BUDGET_CONFIGS, _budget_configs()):
        label = BUDGET_LABELS[model_name]
        value, failed = call_learner(name, fn, dict(config), expected=what)
        if failed is not None:
            return failed
        got = as_float(value)
        if got is None or not math.isfinite(got):
            return report(name, False, what, f"{fmt_number(value)} for {label} (not a finite number)",
                          "return a number of GiB")
        need = _smallest_budget_bytes(model_name)
        value_bytes = got * GiB
        if need - 0.1 * MiB <= value_bytes <= 1.02 * need:
            continue
        shown = f"{got:.4g} GiB for {label}"
        tied = bool(config.get("tie_word_embeddings"))
        e = config["vocab_size"] * config["hidden_size"]           # elements of one vocabulary matrix
        planned = need * BNB_MAX_MEMORY_FACTOR
        n_linear = (planned - 2 * e * (1 if tied else 2)) / 0.5      # ~ Linear weights
        f = BNB_MAX_MEMORY_FACTOR
        hint = ""
        candidates = {
            planned: "that is the model's planned size: device_map='auto' plans with only part of each budget "
                     "(section 2, step 3)",
            planned * f: "the budget is larger than what the planner may use, not smaller: check which way the "
                         "factor of step 3 goes",
            need * GiB / 1e9: "GB vs GiB: return GiB (bytes / 2**30), not GB (bytes / 10**9)",
            need * 1e9 / GiB: "GB vs GiB: return GiB (2**30 bytes), a larger unit than GB (10**9 bytes)",
            need + n_linear * 1.5 / f: "the Linear weights are 4-bit (half a byte each), not bf16",
        }
        if tied:
            candidates[need + 2 * e / f] = "this model ties lm_head to the embedding: one matrix, counted once"
            candidates[need - 1.5 * e / f] = "the embedding stays bf16: bitsandbytes replaces only nn.Linear layers"
        else:
            candidates[need - 2 * e / f] = ("lm_head is its own vocab x hidden matrix here (tie_word_embeddings is "
                                            "false), in bf16")
            candidates[need - 1.5 * e / f] = ("one vocabulary matrix counted at 4 bits: lm_head is an nn.Linear, but "
                                              "transformers keeps it out of quantization, so it stays bf16 like "
                                              "the embedding")
            candidates[need - 3 * e / f] = ("4-bit shrinks only the decoder's Linear layers: embed_tokens and lm_head "
                                            "stay bf16")
        for candidate, why in candidates.items():
            if why and candidate > 0 and abs(value_bytes - candidate) <= 0.002 * candidate:
                hint = why
                break
        if not hint and 0 < need - value_bytes <= 0.01 * need:
            hint = ("just short: part of the model would spill to cpu, and transformers' bitsandbytes quantizer refuses that; look for "
                    "small modules left out")
        elif not hint and 1.02 * need < value_bytes <= 1.2 * need:
            hint = "that is enough, but more than 2% above the smallest budget: something is counted too large"
        if not hint:
            hint = "count what the planner sees: every parameter at its planned size"
        return report(name, False, what, f"{shown}, {direction(value_bytes, need, name=name)}", hint)
    return report(name, True, "", "enough for the real planner and within 2% of the smallest budget, for "
                                  "Llama-3.1-8B, Mistral-7B and the tied SmolLM2")


# --------------------------------------------------------------------------------------------
# Exercise 4 (capstone): a device map for a stated workload, KV cache included, against the dry run
# --------------------------------------------------------------------------------------------

# Llama-3.1-8B in bf16, one forward over 8 prompts x 2,048 tokens keeping the KV cache, on one GPU that leaves
# 15 GiB for PyTorch's tensors (a 16 GB card less the CUDA context and a margin for the allocator), cpu for
# the rest. sm_89 (an Ada card): the dry run picks the flash SDPA kernel there.
SERVE_CONFIG = "llama-3.1-8b"
SERVE_BATCH = 8
SERVE_SEQ = 2048
SERVE_GPU = "sm_89"
SERVE_GPU_GIB = 15
# A map passes when it fits and copies at most this much more weight per forward than the best map that fits.
SERVE_STREAM_SLACK_GIB = 0.25


@functools.lru_cache(maxsize=None)
def serving_trace():
    """The dry run of the capstone's workload (``vramlab.vram.dry_run``, a bf16 prefill on the meta device)."""
    from vramlab.vram import dry_run

    return dry_run(SERVE_CONFIG, SERVE_BATCH, SERVE_SEQ, gpu=SERVE_GPU)


def _serving_replay(device_map: Mapping[str, Any]):
    """:func:`vramlab.dispatch.replay` of the capstone's dry run on ``device_map``: the checks' own replay, not
    remembered as the learner's (:func:`vramlab.ran._unrecorded`). Private: its peak is what Exercise 4 predicts."""
    from vramlab.dispatch import replay

    with ran._unrecorded():
        return replay(serving_trace(), _meta(SERVE_CONFIG, None), device_map)


def layered_map(gpu_layers: int, embed: Any = 0, head: Any = 0, total: int = 32) -> dict:
    """A map with the first ``gpu_layers`` decoder layers on GPU 0 and the rest on "cpu"; the embedding on
    ``embed``, ``lm_head`` on ``head``, the final norm with the last layer, RoPE's buffers on GPU 0."""
    dmap = {"model.embed_tokens": embed, "model.rotary_emb": 0}
    dmap.update({f"model.layers.{i}": 0 if i < gpu_layers else "cpu" for i in range(total)})
    dmap.update({"model.norm": 0 if gpu_layers == total else "cpu", "lm_head": head})
    return dmap


@functools.lru_cache(maxsize=None)
def _best_serving_map() -> tuple[tuple, float, float]:
    """The map that fits the capstone's GPU and copies the fewest weight bytes per forward, among maps with a
    prefix of the decoder layers on GPU 0 and the embedding and lm_head each on GPU 0 or the cpu (every decoder
    layer has the same size, so which layers does not matter, only how many). Returns (map items, GPU 0 peak,
    bytes streamed per forward)."""
    from vramlab.dispatch import GiB

    limit = SERVE_GPU_GIB * GiB
    best = None
    for embed in (0, "cpu"):
        for head in (0, "cpu"):
            lo, hi = 0, 32                         # the peak grows with the layers kept: bisect the largest that fits
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if _serving_replay(layered_map(mid, embed, head)).peak_bytes <= limit:
                    lo = mid
                else:
                    hi = mid - 1
            r = _serving_replay(layered_map(lo, embed, head))
            if r.peak_bytes <= limit and (best is None or r.streamed_bytes < best[2]):
                best = (tuple(layered_map(lo, embed, head).items()), r.peak_bytes, r.streamed_bytes)
    return best


def _serving_answer(**_) -> str:
    from vramlab.dispatch import GiB

    items, peak, streamed = _best_serving_map()
    dmap = dict(items)
    on_gpu = gpu_layers(dmap, total=32)
    return (f"embed_tokens {dmap['model.embed_tokens']!r}, lm_head {dmap['lm_head']!r}, decoder layers 0-{on_gpu - 1} "
            f"on 0 and the other {32 - on_gpu} on 'cpu': GPU 0 peaks at {peak / GiB:.2f} GiB in lm_head (weights on "
            f"GPU 0 + the whole 2 GiB KV cache, since offloaded layers run on GPU 0 + the 3.9 GiB logits), and "
            f"{streamed / GiB:.2f} GiB of weights are copied in per forward; keeping lm_head on GPU 0 costs nothing "
            "at the peak, where its weights are on the GPU anyway")


def _module_names() -> set[str]:
    return {n for n, _ in _meta(SERVE_CONFIG, None).named_modules()}


def _serving_map_or_fail(name: str, what: str, device_map: Any):
    """(the map with 'cuda:0' read as 0, None) when it places every weight of the capstone's model on 0 or the cpu,
    else (None, the FAIL result to return)."""
    from accelerate.utils import check_device_map

    if not isinstance(device_map, Mapping) or not device_map:
        return None, report(name, False, what, f"{fmt_number(device_map)}", "write a dict {module name: 0 or "
                            "'cpu'}, as in Exercise 2 (vramlab.dispatch.plan_device_map returns one too)",
                            value=device_map)
    bad_key = next((k for k in device_map if not isinstance(k, str)), None)
    if bad_key is not None:
        return None, report(name, False, what, f"key {bad_key!r}", "keys are module names such as 'model.layers.0'")
    bad = next((v for v in device_map.values() if isinstance(v, bool) or not (
        v in ("cpu", "disk", "cuda:0") or (type(v) is int and v == 0))), None)
    if bad is not None:
        hint = "this workload has one GPU: use 0 for it and 'cpu' for the rest" if type(bad) is int else \
            "use 0 for the GPU and 'cpu' for main memory"
        return None, report(name, False, what, f"device {bad!r}", hint)
    dmap = {k: (0 if v == "cuda:0" else v) for k, v in device_map.items()}
    unknown = next((k for k in dmap if k and k not in _module_names()), None)
    if unknown is not None:
        return None, report(name, False, what, f"unknown module {unknown!r}",
                            "use names from plan_device_map(...) or model.named_modules(): 'model.embed_tokens', "
                            "'model.layers.0', ..., 'model.norm', 'model.rotary_emb', 'lm_head'")
    try:
        check_device_map(_meta(SERVE_CONFIG, None), dmap)
    except ValueError as exc:
        missing = [m.strip() for m in str(exc).split(":", 1)[-1].split(",") if m.strip()]
        return None, report(name, False, what, "a map that leaves weights without a device",
                            f"accelerate says: no device for {', '.join(missing[:3])}" +
                            (f" and {len(missing) - 3} more" if len(missing) > 3 else ""))
    return dmap, None


@exercise("lab06", 4, _serving_answer)
def check_map_covers(device_map: Any) -> CheckResult:
    """Capstone, step 1: ``device_map`` gives every module of Llama-3.1-8B a device, 0 or "cpu" (one GPU).
    Nothing is dry-run here: the peak comes after the prediction."""
    name = "capstone map: every module placed"
    what = "a dict {module: 0 or 'cpu'} covering every module"
    dmap, failed = _serving_map_or_fail(name, what, device_map)
    if failed is not None:
        return failed
    from vramlab.dispatch.replay import _device_of

    where = {key: _device_of(key, dmap) for key in ("model.embed_tokens", "lm_head")}
    return report(name, True, "", f"{gpu_layers(dmap, total=32)} decoder layers on GPU 0, embed_tokens on "
                                  f"{where['model.embed_tokens']!r}, lm_head on {where['lm_head']!r}; its peak is "
                                  "dry-run after your prediction")


# ----------------------------------------------------------------------- Exercise 4's prediction, recorded first
# GPU 0's peak for the learner's map is predicted in its own cell and recorded here (vramlab.ran, this kind, as
# (map key, GiB)) before any cell shows it: replay_predicted_map shows the replay's peak only for a recorded
# prediction of that very map, check_serving_map names the peak only then, and a prediction stored after the
# learner ran dispatch.replay on that very map is refused as a reading (as lab 04 and lab 08 refuse a design stored
# after its burst or shape ran).
_PREDICTED_KIND = "predicted gpu0 peak"


def _peak_prediction_answer(**_) -> str:
    return "a prediction has no answer to reveal: the next cell replays your map and compares"


def _recorded(dmap: Mapping[str, Any], value: float | None = None) -> bool:
    """Whether a prediction (``value`` GiB, or any) was recorded for the map ``dmap`` in this kernel."""
    from vramlab.dispatch.replay import map_key

    key = map_key(dmap)
    return any(k == key and (value is None or v == value) for k, v in ran.ran(_PREDICTED_KIND))


@exercise("lab06", None, _peak_prediction_answer, prediction=True)
def check_peak_prediction(predicted: Any, device_map: Any) -> CheckResult:
    """Exercise 4's prediction, in its own cell before the replay: ``predicted`` is GPU 0's peak in GiB for
    ``device_map`` (the learner's ``serving_map``). Any honest positive number passes and is recorded for that map;
    the replay in the next cell (:func:`replay_predicted_map`) compares. A prediction stored after
    ``dispatch.replay`` ran this very map in this kernel is a reading, not a prediction: it is refused (one that was
    recorded before that still passes on Run All). Reveals nothing."""
    from vramlab.dispatch.replay import map_key, map_was_replayed

    name = "predicted GPU 0 peak"
    what = "GPU 0's peak for your map, a number of GiB you predict before the replay"
    if predicted is None or predicted is Ellipsis:
        return report(name, False, what, fmt_number(predicted), value=predicted,
                      untouched_hint="not done yet: write your guess (GiB) in place of None, then run this cell again")
    value = as_float(predicted)
    if value is None or value != value or value in (float("inf"), float("-inf")) or value <= 0:
        return report(name, False, "a positive number of GiB", f"{fmt_number(predicted)} (not a positive number)",
                      hint="store a plain number of GiB, e.g. 12.5", counts=False)
    dmap, failed = _serving_map_or_fail(name, "serving_map: a dict {module: 0 or 'cpu'} covering every module",
                                        device_map)
    if failed is not None:
        return failed
    if map_was_replayed(dmap) and not _recorded(dmap, value):
        return report(name, False, "a peak predicted before your map is replayed",
                      "a prediction stored after dispatch.replay ran this very map in this kernel",
                      "that is a reading, not a prediction: predict by hand (the hints above) for a map you have not "
                      "replayed, or restart the kernel", counts=False)
    ran.note(_PREDICTED_KIND, (map_key(dmap), value))
    return report(name, True, "", f"{fmt_number(value, 4)} GiB stored for your map; the next cell replays it and "
                                  "compares")


def replay_predicted_map(predicted: Any, device_map: Any, trace=None, model=None, print_line=print):
    """The measurement after Exercise 4's prediction: once :func:`check_peak_prediction` recorded ``predicted`` for
    ``device_map``, replay the capstone's dry run (``trace``: the notebook's, default the capstone's; ``model``: a
    meta Llama-3.1-8B, default built here) on the map, print GPU 0's peak and what is live there, compare the
    prediction (:func:`vramlab.checks.check_prediction`) and return the :class:`vramlab.dispatch.MapReplay`.
    Before that (no prediction recorded for this map, or another number), print one line saying so and return
    None: the peak is not shown before the prediction is recorded."""
    from vramlab.checks.lab00 import check_prediction
    from vramlab.dispatch import GiB, replay

    value = as_float(predicted)
    try:
        dmap = {k: (0 if v == "cuda:0" else v) for k, v in dict(device_map).items()}
    except (TypeError, ValueError):
        dmap = None
    if dmap is None or value is None or not _recorded(dmap, value):
        print_line("GPU 0's peak for your map shows here once your prediction for this map is recorded: run the "
                   "prediction cell above with your number (after any change to serving_map), then this cell.")
        return None
    r = replay(serving_trace() if trace is None else trace, _meta(SERVE_CONFIG, None) if model is None else model, dmap)
    print_line(f"GPU 0 peaks at {r.peak_bytes / GiB:.2f} GiB in {r.peak_module}: "
               + str({k: f"{v / GiB:.2f}" for k, v in r.at_peak.items()}) + " GiB")
    check_prediction(value, round(r.peak_bytes / GiB, 2), "GPU 0's peak for your map", "GiB")
    return r


_SERVE_DIRECTED_TRIES = 2   # wrong maps told "over" or "copies more"; then "not this map" and the next hint


@exercise("lab06", 4, _serving_answer)
def check_serving_map(device_map: Any) -> CheckResult:
    """Capstone: a ``device_map`` for Llama-3.1-8B in bf16 serving 8 x 2,048 tokens on one GPU with 15 GiB for
    PyTorch, the rest on "cpu". The dry run is replayed on the map (:func:`vramlab.dispatch.replay`): GPU 0's peak
    must fit in 15 GiB, and the map must copy no more than 0.25 GiB more weight per forward than the best map
    that fits (:func:`_best_serving_map`). A map is judged only once a prediction of its GPU 0 peak was recorded
    (:func:`check_peak_prediction`; without one, one sentence and no try counted); two wrong maps are told "over" or
    "copies more", later ones only "not this map"."""
    from vramlab.dispatch import GiB

    name = "capstone: a device map for the workload"
    what = f"a map whose GPU 0 peak fits {SERVE_GPU_GIB} GiB, copying few weights"
    dmap, failed = _serving_map_or_fail(name, what, device_map)
    if failed is not None:
        return failed
    layers = gpu_layers(dmap, total=32)
    if not _recorded(dmap):   # review #3 bisected the layer count in 5 tries with no prediction: predict, then check
        return report(name, False, "a map whose GPU 0 peak you predicted first",
                      f"no prediction recorded for this map ({layers} decoder layers on GPU 0)",
                      "record your predicted GPU 0 peak for this very map first: "
                      "check_peak_prediction(predicted_gpu0_peak_gib, serving_map), then check it", counts=False)
    r = _serving_replay(dmap)
    _, _, best_streamed = _best_serving_map()
    limit = SERVE_GPU_GIB * GiB
    where = f"GPU 0 peaks at {r.peak_bytes / GiB:.2f} GiB in {r.peak_module}"
    directed = tries(name) < _SERVE_DIRECTED_TRIES   # "over" or "copies more" on two wrong maps, then only "not it"
    if r.peak_bytes > limit or r.streamed_bytes - best_streamed > SERVE_STREAM_SLACK_GIB * GiB:
        if not directed:
            return report(name, False, what, f"not this map ({layers} decoder layers on GPU 0)",
                          "compare your prediction with the replay (replay_predicted_map), then open the next hint")
        if r.peak_bytes > limit:
            hint = ("every module is on GPU 0: the weights alone leave too little room for the forward"
                    if not r.offloaded else
                    "list what is on GPU 0 at that moment, category by category, and compare with your plan")
            return report(name, False, what, f"{where}: over the {SERVE_GPU_GIB} GiB ({layers} decoder layers on GPU 0)",
                          hint)
        return report(name, False, what, f"{where} (fits), with {r.streamed_bytes / GiB:.2f} GiB of weights copied to "
                      "GPU 0 per forward", "it fits, but a map that fits this GPU copies less at every forward")
    copied = f"{r.streamed_bytes / GiB:.2f} GiB of weights copied to GPU 0 per forward"
    return report(name, True, "", f"{where} of {SERVE_GPU_GIB}, {copied} ({layers} decoder layers on GPU 0)")


# The lesson after the capstone: shown only once its check passed or its answer was revealed, so no cell below
# the check holds the decision while the learner works (JupyterLab shows the cells below a check as they are).
AFTER_CAPSTONE_WAITS = ("The planner's maps and the best map appear here once Exercise 4 passes "
                        "(or after check_serving_map(serving_map, reveal=True)).")


def after_capstone(result: Any, print_line=print):
    """After Exercise 4: when ``result`` (what :func:`check_serving_map` returned) passed or was revealed, print
    GPU 0's peak and the weight bytes copied per forward for three maps (the planner with the whole 15 GiB, the
    planner with the forward's activations and logits taken off but not its KV cache, and
    :func:`_best_serving_map`), say what makes the best map, and return a :func:`vramlab.dispatch.replay_figure` of
    the three (the caller shows it). Otherwise print one line saying when it appears and return None."""
    from vramlab.dispatch import GiB, plan_device_map, replay_figure

    if not opened_by(result, "check_serving_map"):
        print_line(AFTER_CAPSTONE_WAITS)
        return None
    trace = serving_trace()
    model = _meta(SERVE_CONFIG, None)
    at_peak = trace.breakdown("peak")
    limit = SERVE_GPU_GIB * GiB
    kv_blind = limit - (trace.peak_bytes - at_peak["weights"] - at_peak["kv_cache"])
    maps = {f"planner, {SERVE_GPU_GIB} GiB": plan_device_map(model, {0: limit, "cpu": "64GiB"}),
            "planner, KV cache left out": plan_device_map(model, {0: int(kv_blind), "cpu": "64GiB"}),
            "best map": dict(_best_serving_map()[0])}
    replays = {label: _serving_replay(m) for label, m in maps.items()}
    for label, r in replays.items():
        print_line(f"{label:<28} peak {r.peak_bytes / GiB:5.2f} GiB, {r.streamed_bytes / GiB:4.2f} GiB copied "
                   "per forward")
    import textwrap

    print_line(textwrap.fill(
        f"The planner counts weights only: given all {SERVE_GPU_GIB} GiB it leaves no room for the forward; with "
        "the activations and logits taken off but not the KV cache it still runs out, because offloaded layers run "
        "on GPU 0 and keep their KV cache there. The best map keeps lm_head resident: its weights are on GPU 0 at "
        "the peak either way, so keeping it costs no room and saves its copy.", 100))
    return replay_figure(replays, limit)
