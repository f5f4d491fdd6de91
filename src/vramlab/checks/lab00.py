"""Checks for notebook 00 (start here)."""

from __future__ import annotations

import math
from typing import Any

from vramlab.checks._core import CheckResult, as_float, check_close, exercise, fmt_number, is_untouched, report

__all__ = ["check_fp16_weight_bytes", "check_prediction"]


def _fp16_hint(value: float | None, params: int, tied: int) -> str:
    """The hint that matches the learner's number: the common wrong answers of exercise 0.1."""
    if value is None:
        return "compute a number of bytes from `model` (an int), e.g. with sum(...) over model.parameters()"
    recognised = {
        2 * (params + tied): "the tied embedding is counted twice: lm_head and embed_tokens share one matrix, "
                             "and model.parameters() already yields it once",
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
    return "which parameters does model.parameters() yield (is anything shared?), and how many bytes is one float16 value?"


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
    already yields a shared tensor once). The hint follows the learner's number (tied matrix counted
    twice, float32's 4 bytes, a parameter count, MiB/GiB/MB/GB instead of bytes).
    """
    if not hasattr(model, "parameters") or not hasattr(model, "get_input_embeddings"):
        raise TypeError(f"model must be the loaded SmolLM2 (load_smollm2()[0]), got {type(model).__name__}.")
    params = sum(p.numel() for p in model.parameters())
    embedding = model.get_input_embeddings().weight
    tied = embedding.numel() if model.get_output_embeddings() is not None and \
        model.get_output_embeddings().weight is embedding else 0
    expected = 2 * params
    return check_close("fp16 weight bytes", got, float(expected), rel=0, abs_tol=0.5, unit="bytes",
                       hint=_fp16_hint(as_float(got), params, tied), what="a number of bytes (an int)")


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
