"""Checks for notebook 00 (start here)."""

from __future__ import annotations

import functools
import math
from typing import Any

from vramlab.checks._core import CheckResult, as_float, check_close, exercise, fmt_number, is_untouched, read_number, report

__all__ = ["check_fp16_weight_bytes", "check_forward_peak_mib", "check_prediction"]


def _config_mistakes(model) -> dict[int, str]:
    """Element counts a by-hand count from the config lands on when one thing is missed or doubled."""
    cfg = model.config
    layers, hidden = cfg.num_hidden_layers, cfg.hidden_size
    head_dim = getattr(cfg, "head_dim", None) or hidden // cfg.num_attention_heads
    kv_width = cfg.num_key_value_heads * head_dim
    norms = sum(p.numel() for n, p in model.named_parameters() if "norm" in n)
    params = sum(p.numel() for p in model.parameters())
    return {
        params + 2 * layers * hidden * (hidden - kv_width):
            "k_proj and v_proj are counted as wide as q_proj: with grouped-query attention they have "
            "num_key_value_heads x head_dim outputs, not hidden_size",
        params - norms: "the RMSNorm scales are missing (two per layer and a final one; small, but weights too)",
        params - hidden: "one RMSNorm scale vector is missing: the final norm before lm_head",
    }


def _fp16_hint(value: float | None, params: int, tied: int, model=None) -> str:
    """The hint that matches the learner's number: the common wrong answers of exercise 0.1."""
    if value is None:
        return "compute a number of bytes (an int) from the config's numbers"
    exact = {2 * n: why for n, why in (_config_mistakes(model).items() if model is not None else ())}
    for wrong, hint in exact.items():
        if abs(value - wrong) < 0.5:
            return hint
    recognised = {
        2 * (params + tied): "the tied embedding is counted twice: lm_head and embed_tokens share one matrix, "
                             "stored once",
        4 * params: "that is float32 (4 bytes per parameter); float16 takes 2",
        params: "that is the number of parameters; each takes 2 bytes in float16",
        2 * params / 2**20: "that is MiB; the check wants bytes",
        2 * params / 2**30: "that is GiB; the check wants bytes",
        2 * params / 1e6: "that is MB; the check wants bytes",
        2 * params / 1e9: "that is GB; the check wants bytes",
    }
    for wrong, hint in recognised.items():
        if math.isclose(value, wrong, rel_tol=1e-3):
            return hint
    if tied and math.isclose(value, 2 * (params - tied), rel_tol=1e-3):
        return "the embedding is missing: lm_head shares it, but it is still stored once"
    side = "too high" if value > 2 * params else "too low"
    return (f"{side}: go through one decoder layer's weights (print(model.model.layers[0]) shows their shapes), "
            "then what sits outside the layers, and how many bytes one float16 value takes")


def _fp16_answer(model=None, **_) -> str:
    if model is None:  # reveal("lab00", 1) without the model: the same parameters on the meta device
        from vramlab.dispatch import empty_model

        model = empty_model("smollm2-135m")
    params = sum(p.numel() for p in model.parameters())
    return f"{2 * params:,} bytes (2 bytes x {params:,} parameters; the tied embedding counts once)"


def _prediction_answer(actual=None, unit: str = "", **_) -> str:
    if actual is None:
        return "a prediction has no answer to reveal: the measurement comes in a later cell"
    return f"the measured value is {fmt_number(as_float(actual), 4)}{' ' + unit if unit else ''}"


@exercise("lab00", 1, _fp16_answer)
def check_fp16_weight_bytes(got: Any, model) -> CheckResult:
    """The model's parameter bytes if stored in float16: 2 bytes x unique parameters.

    ``model`` is the loaded SmolLM2; tied embeddings count once (``model.parameters()``
    already yields a shared tensor once). The learner counts from the config; the hint follows the
    number (k/v as wide as q, the norms left out, tied matrix counted twice or left out, float32's
    4 bytes, a parameter count, MiB/GiB/MB/GB instead of bytes).
    """
    if not hasattr(model, "parameters") or not hasattr(model, "get_input_embeddings"):
        raise TypeError(f"model must be the loaded SmolLM2 (load_smollm2()[0]), got {type(model).__name__}.")
    params = sum(p.numel() for p in model.parameters())
    embedding = model.get_input_embeddings().weight
    tied = embedding.numel() if model.get_output_embeddings() is not None and \
        model.get_output_embeddings().weight is embedding else 0
    expected = 2 * params
    return check_close("fp16 weight bytes", got, float(expected), rel=0, abs_tol=0.5, unit="bytes",
                       hint=_fp16_hint(as_float(got), params, tied, model), what="a number of bytes (an int)")


@exercise("lab00", None, _prediction_answer, prediction=True)
def check_prediction(predicted: Any, actual: float | None = None, what: str = "your prediction", unit: str = "",
                     ) -> CheckResult:
    """Predict, then reveal: any honest number passes; the line says how far off it was.

    ``predicted``: the learner's number (stored before the reveal); ``actual``: the measured value, or
    None to only record the prediction before the lesson reveals it; ``unit``: printed after both
    (``"MiB"``). None / ``...`` (not predicted yet) fails without revealing ``actual``; a non-number
    fails with a sentence saying so.
    """
    name = what
    if actual is not None and (as_float(actual) is None or not math.isfinite(as_float(actual))):
        raise TypeError(f"actual must be the measured number to compare with (or None), got {actual!r}.")
    unit_s = f" {unit}" if unit else ""
    if is_untouched(predicted):
        return report(name, False, "a number you predict before running the next cell", fmt_number(predicted),
                      value=predicted, untouched_hint="not done yet: write your guess (a number) in place of None, then run "
                                                      "this cell again; any honest guess passes")
    value = as_float(predicted)
    if value is None or not math.isfinite(value):
        return report(name, False, "a number", f"{fmt_number(predicted)} (not a finite number)",
                      hint="store a plain number, e.g. 250 (in " + (unit or "the unit asked for") + ")")
    if actual is None:
        return report(name, True, "", f"{fmt_number(value, 4)}{unit_s} stored; the real value comes later")
    actual = as_float(actual)
    if actual == 0:
        off = "exactly right" if value == 0 else f"off by {fmt_number(value)}{unit_s}"
    else:
        ratio = value / actual
        if ratio < 0:
            off = "the wrong sign" if value < 0 else "the wrong sign: the real value is negative"
        elif math.isclose(ratio, 1.0, rel_tol=0.05):
            off = "within 5%: well predicted"
        elif ratio > 1:
            off = f"{ratio:.2g}x too high" if ratio >= 2 else f"{100 * (ratio - 1):.0f}% too high"
        else:
            off = f"{1 / ratio:.2g}x too low" if 0 < ratio <= 0.5 else f"{100 * (1 - ratio):.0f}% too low"
    return report(name, True, "", f"you predicted {fmt_number(value, 4)}{unit_s}; it is "
                                  f"{fmt_number(actual, 4)}{unit_s} ({off})")


# --------------------------------------------------------------------------- Exercise 0.2 (capstone)
#: The forward the capstone asks about: SmolLM2-135M, bfloat16, 8 prompts x 1,024 tokens, one forward.
PEAK_CASE = {"batch_size": 8, "seq_len": 1024, "dtype": "bfloat16"}


@functools.lru_cache(maxsize=1)
def _peak_run():
    """The dry run of :data:`PEAK_CASE` (meta device, no GPU): peak bytes and the categories at the peak."""
    from vramlab.vram.dryrun import dry_run

    trace = dry_run("smollm2-135m", **PEAK_CASE)
    return trace.peak_bytes, dict(trace.breakdown("peak"))


def _peak_answer(**_) -> str:
    peak, parts = _peak_run()
    return (f"{peak / 2**20:,.1f} MiB at the peak of the dry run: "
            + " + ".join(f"{k} {v / 2**20:,.1f}" for k, v in parts.items()))


def _peak_hint(value: float, peak: float, parts: dict) -> str:
    mib = 2**20
    weights, logits, kv = parts.get("weights", 0), parts.get("logits", 0), parts.get("kv_cache", 0)
    recognised = [
        (peak * mib, "that is bytes; the check wants MiB (2**20 bytes)"),
        (peak / 2**30 * mib, "that is GiB; the check wants MiB"),
        (peak / 1e6 * mib, "that looks like MB (10**6 bytes); a MiB is 2**20 bytes, about 5% more"),
        (peak + weights, "the weights look counted twice, or in float32: bfloat16 takes 2 bytes per parameter"),
        (peak + logits, "the logits look counted twice, or in float32: transformers' LlamaForCausalLM returns "
                        "them in the model's dtype"),
        (peak + parts.get("weights", 0) * 28_311_552 / 134_515_008,
         "the tied embedding looks counted twice: it is stored once"),
        (peak - kv, "something that grows with batch x tokens besides the logits is missing (look at the "
                    "categories of the 1 x 512 breakdown above)"),
        (peak - logits, "the logits are missing: one score per vocabulary entry for every token"),
    ]
    for wrong, hint in recognised:
        if math.isclose(value * mib, wrong, rel_tol=0.015):
            return hint
    ratio = value * mib / peak
    if ratio <= 0:
        return "memory is a positive number of MiB"
    if math.isclose(value * mib, peak + 15 * weights, rel_tol=0.05):
        return ("everything looks scaled by 16, the weights too: the weights do not grow with the batch or the "
                "prompt length; only what holds values per token does")
    if ratio >= 1.5:
        return (f"about {ratio:.0f}x too high: which categories of the breakdown above grow with batch x tokens, "
                "and which stay as they are?")
    if ratio <= 1 / 1.5:
        return (f"about {1 / ratio:.0f}x too low: scale each category of the 1 x 512 breakdown above by what "
                "changes (batch, tokens, bytes per value)")
    return ("too high: which part did you make too big, or count twice?" if ratio > 1 else
            "too low: which category of the breakdown did you leave out or not scale?")


@exercise("lab00", 2, _peak_answer)
def check_forward_peak_mib(got: Any) -> CheckResult:
    """Capstone: the peak memory (MiB) of one bfloat16 forward of SmolLM2 over 8 x 1,024 tokens, as the
    dry run computes it (weights + KV cache + logits + activations + cuBLAS workspace; no CUDA context).

    Passes within 3%; a wrong number is told its direction and the misconception it matches (bytes,
    GiB or MB for MiB, float32 weights or logits, the tied embedding twice, the KV cache or the logits
    left out, the weights scaled with the batch)."""
    name = "peak of one forward"
    what = "the peak in MiB (a number)"
    value = read_number(name, what, got, example="500 (MiB)")
    if isinstance(value, CheckResult):
        return value
    peak, parts = _peak_run()
    passed = math.isclose(value * 2**20, peak, rel_tol=0.03)
    return report(name, passed, what, f"{fmt_number(value, 5)} MiB",
                  hint="" if passed else _peak_hint(value, peak, parts))
