"""Checks for notebook 02 (W4A4KV4: outliers, rotations and 4-bit quantizers).

The references are :mod:`vramlab.quarot.quant`'s own quantizers, so a check and the lesson cannot disagree.
Each check prints one PASS/FAIL line with what was expected and what it got, and returns a
``CheckResult``; it never raises on a wrong answer.
"""

from __future__ import annotations

import functools
import time
from typing import Any

from vramlab import ran
from vramlab.checks import tampering
from vramlab.checks._core import (CAPSTONE_MAX_WRONG, opened_by, CheckResult, as_float, call_learner, direction, exercise, fmt_number, report,
                                  is_untouched as is_untouched_value)
from vramlab.checks.lab01 import prediction_report

__all__ = ["check_per_token_quantizer", "check_kv_quantizer", "check_kv4_bytes_per_token",
           "check_w16a4_prediction", "check_mixed_plan", "check_layers_prediction"]


def _cases_per_token():
    import torch

    g = torch.Generator().manual_seed(2)
    x = torch.randn(6, 40, 576, generator=g)
    x[:, :, 17] *= 60  # an outlier channel, as in SmolLM2's activations
    x[0, 0] = 0.0  # an all-zero token must stay zero
    return [(x, 4, 1.0), (x, 4, 0.9), (x[:2], 8, 1.0), (x[:2, :3], 3, 0.9)]


def _cases_kv():
    import torch

    g = torch.Generator().manual_seed(3)
    k = torch.randn(2, 3, 33, 64, generator=g) * torch.rand(2, 3, 33, 1, generator=g) * 4 + 0.7
    k[0, 1, 4] = torch.rand(64, generator=g) + 1.0  # an all-positive group: the zero point matters
    return [(k, 4, 64, 0.95), (k, 4, 64, 1.0), (k, 2, 32, 1.0), (k[:1], 8, 64, 0.95)]


def _diagnose(got, case, variants, hint: str) -> str:
    """The hint of the first common mistake whose output equals ``got`` on ``case``, else ``hint``."""
    import torch

    for wrong, wrong_hint in variants:
        try:
            want = wrong(*case)
        except Exception:  # noqa: BLE001 - a variant that does not apply to this case
            continue
        if tuple(want.shape) == tuple(got.shape) and torch.allclose(got.detach().double().cpu(), want.double(),
                                                                     atol=1e-5, rtol=1e-4):
            return wrong_hint
    return hint


def _compare(name: str, fn, cases, reference, step, describe, hint: str, variants=(), forbidden=None) -> CheckResult:
    """Compare fn(*case) with reference(*case) for every case.

    Floating-point noise can move a value that sits exactly between two levels to the other level,
    so up to 0.01% of the elements may differ by at most one quantization step; anything else fails.
    """
    import torch

    for case in cases:
        want = reference(*case)
        # a fresh copy per call: an in-place solution must not change the next case or the summary
        case_copy = (case[0].clone(), *case[1:])
        got, failed = call_learner(name, fn, *case_copy, expected=f"a tensor of shape {tuple(want.shape)}",
                                   forbidden=forbidden)
        if failed is not None:
            return failed
        label = describe(case)
        if not isinstance(got, torch.Tensor):
            return report(name, False, f"a tensor of shape {tuple(want.shape)} for {label}",
                          f"{type(got).__name__} {fmt_number(got)}", hint)
        if tuple(got.shape) != tuple(want.shape):
            return report(name, False, f"shape {tuple(want.shape)} for {label}", f"shape {tuple(got.shape)}", hint)
        if not torch.isfinite(got.detach()).all():
            bad = int((~torch.isfinite(got.detach())).sum())
            return report(name, False, f"finite values for {label}", f"{bad} NaN/inf values", hint=(
                "an all-zero token (or group) gives a zero scale and 0/0: clamp the scale away from zero"))
        diff = (got.detach().double().cpu() - want.double()).abs()
        s = step(*case).double()
        off = ~(diff <= 1e-4 * s + 1e-7)  # NaN counts as off
        frac = off.double().mean().item()
        worst = (diff / s).max().item()
        if not (frac <= 1e-4 and worst <= 1.001):
            return report(name, False, f"values within one quantization step for {label}",
                          f"{100 * frac:.2f}% of the elements differ, worst by {worst:.2f} quantization steps",
                          _diagnose(got, case, variants, hint))
    x0 = cases[0]
    return report(name, True, "", f"all {len(cases)} cases match the reference (e.g. {describe(x0)}: "
                                  f"mean |error| {(reference(*x0) - x0[0]).abs().mean().item():.4f})")


def _per_token_answer(**_) -> str:
    return ("per token (row of the last dim): s = (clip * x.abs().amax(-1, keepdim=True) / (2**(bits-1) - 1))"
            ".clamp_min(1e-12); q = torch.clamp(torch.round(x / s), -2**(bits-1), 2**(bits-1) - 1); return q * s")


def _kv_answer(**_) -> str:
    return ("g = x.reshape(..., d // group_size, group_size); lo = clip * min(g.amin(-1), 0), hi = clip * "
            "max(g.amax(-1), 0) (keepdim); s = ((hi - lo) / (2**bits - 1)).clamp_min(1e-12); z = round(-lo / s); "
            "q = clamp(round(g / s) + z, 0, 2**bits - 1); return ((q - z) * s).reshape(x.shape)")


def _quant_functions() -> dict:
    """vramlab's own quantizers, which the exercise functions must not simply call."""
    from vramlab.quarot import quant

    return {f"quarot.quant.{f}": getattr(quant, f) for f in ("quantize_per_token_sym", "quantize_groupwise_asym")}


@exercise("lab02", 1, _per_token_answer)
def check_per_token_quantizer(fn) -> CheckResult:
    """``fn(x, bits, clip_ratio)`` -> symmetric per-token quantize-dequantize of ``x [..., n]``.

    Per token (row of the last dim): ``s = clip_ratio * max|x| / (2^(b-1) - 1)``,
    ``q = clamp(round(x / s), -2^(b-1), 2^(b-1) - 1)``, return ``q * s``.
    """
    from vramlab.quarot.quant import quantize_per_token_sym

    def step(x, bits, clip):
        return (x.abs().amax(-1, keepdim=True) * clip / (2 ** (bits - 1) - 1)).clamp_min(1e-12)

    import torch

    def whole_tensor(x, bits, clip):
        qmax = 2 ** (bits - 1) - 1
        s = (x.abs().max() * clip / qmax).clamp_min(1e-12)
        return torch.clamp(torch.round(x / s), -qmax - 1, qmax) * s

    def per_feature(x, bits, clip):
        qmax = 2 ** (bits - 1) - 1
        s = (x.abs().amax(dim=tuple(range(x.dim() - 1)), keepdim=True) * clip / qmax).clamp_min(1e-12)
        return torch.clamp(torch.round(x / s), -qmax - 1, qmax) * s

    def unsigned_range(x, bits, clip):  # 2**bits - 1 levels on each side: the asymmetric grid's count
        qmax = 2 ** bits - 1
        s = (x.abs().amax(-1, keepdim=True) * clip / qmax).clamp_min(1e-12)
        return torch.clamp(torch.round(x / s), -qmax - 1, qmax) * s

    def negative_end(x, bits, clip):  # the step set by the grid's negative end, 2**(bits-1) (8 at 4 bits)
        qmax = 2 ** (bits - 1) - 1
        s = (x.abs().amax(-1, keepdim=True) * clip / (qmax + 1)).clamp_min(1e-12)
        return torch.clamp(torch.round(x / s), -qmax - 1, qmax) * s

    def no_clamp(x, bits, clip):
        qmax = 2 ** (bits - 1) - 1
        s = (x.abs().amax(-1, keepdim=True) * clip / qmax).clamp_min(1e-12)
        return torch.round(x / s) * s

    def no_dequant(x, bits, clip):
        qmax = 2 ** (bits - 1) - 1
        s = (x.abs().amax(-1, keepdim=True) * clip / qmax).clamp_min(1e-12)
        return torch.clamp(torch.round(x / s), -qmax - 1, qmax)

    variants = [
        (whole_tensor, "one scale for the whole tensor lets the outlier token set everyone's step: take the "
                       "max over the last dimension only (one scale per token, keepdim=True)"),
        (per_feature, "that is one scale per feature (channel); here each token (row of the last dimension) "
                      "gets its own scale"),
        (unsigned_range, "a signed b-bit integer reaches only 2**(bits-1) - 1 on the positive side (7 at 4 bits)"),
        (negative_end, "with that step a token whose largest magnitude is positive lands one level past the top "
                       "of the signed grid and is clamped: both signs of the clipped range must fit"),
        (no_dequant, "you returned the integers q; multiply them back by the scale (quantize-dequantize)"),
        (no_clamp, "with clip < 1 the largest values land outside the grid: clamp the integers to the signed "
                   "b-bit range before scaling back"),
    ]
    return _compare(
        "per-token symmetric quantizer", fn, _cases_per_token(), quantize_per_token_sym, step,
        lambda c: f"x {tuple(c[0].shape)}, bits={c[1]}, clip={c[2]}",
        "try a small tensor by hand: how many scales do you compute, from what, and which integer range do "
        "the rounded values have to fit in?", variants, _quant_functions())


@exercise("lab02", 2, _kv_answer)
def check_kv_quantizer(fn) -> CheckResult:
    """``fn(x, bits, group_size, clip_ratio)`` -> asymmetric group-wise quantize-dequantize.

    ``x [b, kv_heads, s, head_dim]``; groups of ``group_size`` along the last dim; per group
    ``lo = clip * min(min, 0)``, ``hi = clip * max(max, 0)``, ``s = (hi - lo) / (2^b - 1)``,
    ``z = round(-lo / s)``, ``q = clamp(round(x / s) + z, 0, 2^b - 1)``, return ``(q - z) * s``.
    """
    from vramlab.quarot.quant import quantize_groupwise_asym

    def step(x, bits, gs, clip):
        g = x.reshape(*x.shape[:-1], x.shape[-1] // gs, gs)
        lo = g.amin(-1, keepdim=True).clamp_max(0) * clip
        hi = g.amax(-1, keepdim=True).clamp_min(0) * clip
        s = ((hi - lo) / (2 ** bits - 1)).clamp_min(1e-12)
        return s.expand_as(g).reshape(x.shape)

    import torch

    def symmetric(x, bits, gs, clip):
        g = x.reshape(*x.shape[:-1], x.shape[-1] // gs, gs)
        qmax = 2 ** (bits - 1) - 1
        s = (g.abs().amax(-1, keepdim=True) * clip / qmax).clamp_min(1e-12)
        return (torch.clamp(torch.round(g / s), -qmax - 1, qmax) * s).reshape(x.shape)

    def range_without_zero(x, bits, gs, clip):  # lo = min, hi = max (0 not forced into the range)
        g = x.reshape(*x.shape[:-1], x.shape[-1] // gs, gs)
        lo, hi = g.amin(-1, keepdim=True) * clip, g.amax(-1, keepdim=True) * clip
        s = ((hi - lo) / (2 ** bits - 1)).clamp_min(1e-12)
        z = torch.round(-lo / s)
        return ((torch.clamp(torch.round(g / s) + z, 0, 2 ** bits - 1) - z) * s).reshape(x.shape)

    def not_grouped(x, bits, gs, clip):
        return quantize_groupwise_asym(x, bits, x.shape[-1], clip)

    variants = [
        (symmetric, "that is the symmetric quantizer; the KV cache uses a zero point: the grid spans "
                    "[lo, hi] of each group with 2**bits levels (0 .. 2**bits - 1)"),
        (range_without_zero, "the range must contain 0 (as in QuaRot): lo = min(group min, 0) and "
                             "hi = max(group max, 0), then the clip ratio"),
        (not_grouped, "one range per group of group_size values, not per token: reshape the last "
                      "dimension into (d // group_size, group_size) first"),
    ]
    return _compare(
        "grouped asymmetric KV quantizer", fn, _cases_kv(), quantize_groupwise_asym, step,
        lambda c: f"x {tuple(c[0].shape)}, bits={c[1]}, group={c[2]}, clip={c[3]}",
        "try one group by hand: its range (does it contain 0?), the step between the 2**bits levels, the "
        "integer zero point, then scale back", variants, _quant_functions())


def _kv4_answer(**_) -> str:
    return ("6,480 bytes: 2 (K and V) x 30 layers x 3 KV heads x (64 x 4 bits / 8 + 2 x 2 bytes for the group's "
            "scale and zero point)")


@exercise("lab02", 3, _kv4_answer)
def check_kv4_bytes_per_token(got) -> CheckResult:
    """SmolLM2's KV cache bytes per token at 4 bits with one fp16 scale and one fp16 zero per group of 64.

    2 (K and V) x 30 layers x 3 KV heads x (64 x 4 bits / 8 + 2 x 2 bytes) = 6,480 bytes
    (float16: 23,040 bytes).
    """
    name = "KV4 bytes per token"
    layers, kv_heads, heads, head_dim, group = 30, 3, 9, 64, 64
    per_head = head_dim * 4 / 8 + (head_dim // group) * 2 * 2
    expected = 2 * layers * kv_heads * per_head
    if got is None or got is Ellipsis:
        return report(name, False, "a number of bytes", "None (not done yet)",
                      hint="store your answer in kv4_bytes and run the cell again")
    value = as_float(got)
    if value is None:
        return report(name, False, "a number of bytes", f"{fmt_number(got)} (not a number)")
    if abs(value - expected) <= 0.5:
        return report(name, True, "a number of bytes", f"{fmt_number(value)} bytes")
    mistakes = {
        2 * layers * kv_heads * head_dim * 4 / 8: "the 4-bit values alone: each group of 64 also stores a "
                                                  "float16 scale and a float16 zero point",
        layers * kv_heads * per_head: "one tensor only: the cache holds K and V",
        2 * layers * heads * per_head: "9 is the number of query heads; K and V have 3 heads (grouped-query "
                                       "attention)",
        2 * layers * kv_heads * head_dim * 2: "that is float16 (2 bytes per value); at 4 bits a value is half a byte",
        2 * layers * kv_heads * (head_dim * 4 + 4): "4 bits is half a byte, not 4 bytes",
        2 * layers * kv_heads * (head_dim * 4 / 8 + 2): "a group stores two float16 numbers (scale and zero "
                                                       "point): 4 bytes",
    }
    hint = next((h for v, h in mistakes.items() if abs(value - v) <= 0.5),
                "count what one token leaves behind for one KV head in one layer (values and the group's "
                "extras), then multiply out")
    return report(name, False, "the bytes of K and V at 4 bits with their scales and zero points",
                  f"{fmt_number(value)} bytes, {direction(value, expected, name=name)}", hint=hint)


def _w16a4_answer(measured=None, **_) -> str:
    if measured is None:
        return "a prediction has no answer to reveal: the measurement comes in the next cell"
    return f"the measured perplexity is {fmt_number(as_float(measured), 4)}"


@exercise("lab02", None, _w16a4_answer, prediction=True)
def check_w16a4_prediction(predicted, measured: float, fp32: float) -> CheckResult:
    """Prediction: the perplexity of SmolLM2 with 4-bit per-token activations and no rotation (W16A4).

    Always passes for a positive number and says how far off it was (ratio: perplexities span orders of
    magnitude); fails without revealing anything when no prediction was stored.
    """
    lesson = (f"FP32 is {fp32:.1f}; per-token INT4 turns most of an outlier token's values into zeros at "
              f"the inputs of every linear layer (4 distinct inputs in each of 30 layers), and the errors "
              f"compound from layer to layer")
    return prediction_report("prediction: W16A4 without rotation", predicted, measured, "the perplexity",
                             log=True, lesson=lesson)


# ----------------------------------------------------------------------------- the capstone (exercise 4)
# Per-layer bit widths under a byte budget (vramlab.quarot.mixed_bits), scored live on one window in float64.
# A plan passes within PLAN_TOLERANCE of the best plan the reference search found (benchmarks/mixed_bits.py: greedy
# forward selection by whole-plan score, then one-for-one swaps to a local optimum, the KV8 branch, the rules of
# thumb and 10 random plans; results/mixed_bits.json). The measured margins (docs/instructor/lab02.md: the greedy
# search, over all 30 layers or the 15 best alone, is 12.1% over the best, which one-for-one swaps found; the best rule
# of thumb fails by 23%, the best random plan by 34%) set 15%: it passes a learner who searches by whole-plan scores,
# and no rule of thumb or random plan. The scores are float64, the same on every CPU to 1e-6 (issue 26).
PLAN_TOLERANCE = 0.15
_MIB = 2 ** 20


def _reference() -> dict:
    """The best plan the reference search measured (results/mixed_bits.json) and its perplexity."""
    from vramlab.quarot import mixed_bits

    ref = mixed_bits._load_reference()
    if not ref.get("complete"):      # review #22 read a record that benchmarks/mixed_bits.py was still writing
        raise ValueError("results/mixed_bits.json is not a finished search (no \"complete\": true): rerun "
                         "benchmarks/mixed_bits.py to its end.")
    best = ref.get("best") or min(ref["designs"].values(), key=lambda p: p["ppl"])
    plan = {k: best[k] for k in ("eight_bit_layers", "kv_bits")}
    if mixed_bits.plan_bytes(plan)["total"] > mixed_bits.BUDGET_BYTES:
        raise ValueError("results/mixed_bits.json's best plan is over the budget: rerun benchmarks/mixed_bits.py.")
    return {"plan": {"eight_bit_layers": best["eight_bit_layers"], "kv_bits": best["kv_bits"]}, "ppl": best["ppl"],
            "all4": ref["all4_kv4"], "target": best["ppl"] * (1 + PLAN_TOLERANCE), "ranking": ref["ranking"]}


def _mixed_plan_answer(**_) -> str:
    ran.stamp(_PLAN_CHECKED_KIND)      # review #23: a layers prediction stored after a reveal is a reading too
    ref = _reference()
    plan = ref["plan"]
    return (f"{{'eight_bit_layers': {plan['eight_bit_layers']}, 'kv_bits': {plan['kv_bits']}}}: the reference "
            f"search's best plan within 66 MiB, perplexity {ref['ppl']:.2f} on the window (pass: at most "
            f"{ref['target']:.2f}); found by greedy forward selection by whole-plan score, then one-for-one swaps (the "
            "rules of thumb, the largest single gains or the first or last layers, and an 8-bit cache with one layer, "
            "all fail)")


def _new_scorer():
    """A :class:`vramlab.quarot.mixed_bits.MixedBits` of the capstone: the Hadamard-rotated SmolLM2 (seed 0) on the
    first ``mixed_bits.SCORE_TOKENS`` tokens of the first evaluation window (about 30 s on 2 cores)."""
    from vramlab.data import token_windows
    from vramlab.models import load_smollm2
    from vramlab.quarot import mixed_bits
    from vramlab.quarot.rotate import rotate_model

    model, tok = load_smollm2()
    window = token_windows(tok, 1, 512)[:, :mixed_bits.SCORE_TOKENS]
    return mixed_bits.MixedBits(rotate_model(model, "hadamard", seed=0), window)


@functools.lru_cache(maxsize=1)
def capstone_scorer():
    """The capstone's scorer (:func:`_new_scorer`), built once per kernel."""
    return _new_scorer()


@functools.lru_cache(maxsize=1)
def _own_scorer():
    """The check's own scorer, built like :func:`capstone_scorer` but never handed out: a passing plan is scored again
    on it, so a learner's scorer whose methods, window or weights were changed cannot pass (about 40 s to build)."""
    with ran._unrecorded():
        return _new_scorer()


def _calibration_off(scorer, all4: float) -> str | None:
    """None when ``scorer`` measures the calibration plan (every layer W4A4, KV4) at ``all4`` (the reference's
    number) to 1e-6, else what it measured, in words. The scores are float64, the same on every CPU (issue 26)."""
    got = scorer.score({}, 4, 4)
    if abs(got / all4 - 1) <= 1e-6:
        return None
    return f"the check's calibration plan (every layer at 4 bits) measures {got:.4f}, not {all4:.4f}"


_CAPSTONE = "capstone: 8-bit layers under 66 MiB"
# what the capstone's scoring runs on; checked against their source files before each judgement (checks.tampering)
_SCORING_MODULES = ("vramlab.quarot.mixed_bits", "vramlab.eval", "vramlab.quarot.quant", "vramlab.quarot.attention",
                    "vramlab.quarot.rotate", "vramlab.quarot.hadamard", "vramlab.numerics", "vramlab.data",
                    "vramlab.models", "vramlab.ran", "vramlab.checks._core", "vramlab.checks.lab02")


def _plan_key(plan, scorer=None) -> tuple:
    """One attempt per plan, whatever the order of its layers (review #23: a reordered plan was counted again)."""
    from vramlab.quarot import mixed_bits

    return tuple(mixed_bits.normalize_plan(plan))


@exercise("lab02", 4, _mixed_plan_answer, max_wrong=CAPSTONE_MAX_WRONG, attempt_key=_plan_key)
def check_mixed_plan(plan, scorer=None) -> CheckResult:
    """Capstone: ``{"eight_bit_layers": [layer indices], "kv_bits": 4 | 8}`` for the Hadamard-rotated SmolLM2
    (the other layers W4A4, RTN per channel), whose decoder weights plus a 1,024-token KV cache fit 66 MiB and
    whose float64 perplexity on the capstone's window, measured live by ``scorer`` (a
    :class:`vramlab.quarot.mixed_bits.MixedBits`; default: built here), is within :data:`PLAN_TOLERANCE` (15%) of
    the reference search's best (or lower). A plan that passes on ``scorer`` is scored again on the check's own
    scorer, and that number decides."""
    from vramlab.quarot import mixed_bits

    name = _CAPSTONE
    what = 'a plan {"eight_bit_layers": [...], "kv_bits": 4 or 8} within the budget, near the best perplexity'
    if is_untouched_value(plan):
        return report(name, False, what, "None (not done yet)", value=plan)
    replaced = tampering.replaced_names(_SCORING_MODULES)
    if replaced:        # review #22: MixedBits.score_plan replaced on the class, BUDGET_BYTES raised
        return report(name, False, what, f"{', '.join(replaced[:3])} replaced in this kernel",
                      "the check judges with vramlab's own tools: restart the kernel and run the notebook again "
                      "without replacing them", counts=False)
    ran.stamp(_PLAN_CHECKED_KIND)          # a layers prediction after this is a reading
    try:
        p = mixed_bits.normalize_plan(plan)
    except ValueError as exc:      # a slip of form costs no try (review #22)
        return report(name, False, what, f"{type(plan).__name__} {str(plan)[:60]}", str(exc), counts=False)
    size = mixed_bits.plan_bytes(p)
    budget = mixed_bits.BUDGET_BYTES
    layers = f"{len(p.eight_bit_layers)} layer(s) at 8 bits, KV{p.kv_bits}"
    if size["total"] > budget:
        over = size["total"] - budget
        return report(name, False, what, f"{size['total'] / _MIB:.2f} MiB ({layers})",
                      f"over the 66 MiB budget by {over:,} bytes ({over / _MIB:.2f} MiB): decoder weights "
                      f"{size['weights'] / _MIB:.2f} MiB plus the cache {size['kv'] / _MIB:.2f} MiB; drop something")
    if scorer is None:
        scorer = capstone_scorer()
    if not isinstance(scorer, mixed_bits.MixedBits):
        return report(name, False, what, f"scorer {type(scorer).__name__}",
                      "pass the notebook's scorer (a mixed_bits.MixedBits), or leave it out", counts=False)
    rotation = getattr(scorer.model, "vramlab_rotation", {}) or {}
    if tuple(scorer.window.shape) != (1, mixed_bits.SCORE_TOKENS) or rotation.get("rotation") != "hadamard" \
            or rotation.get("seed") != 0:
        return report(name, False, what, "a scorer of another model or window",
                      "build the scorer as the notebook does: MixedBits(rotated, windows[:1, :mixed_bits.SCORE_TOKENS]) "
                      "with the Hadamard-rotated model of seed 0, so your number compares with the reference",
                      counts=False)
    ppl = scorer.score_plan(p)
    ref = _reference()
    if ppl <= ref["target"]:
        # a pass is confirmed on the check's own scorer, which no public function returns: review #20 replaced the
        # notebook scorer's score_plan (a public method) and passed with "perplexity 1.00" (about a minute, once).
        # Its calibration plan (every layer at 4 bits) must read the reference's number first: a change below
        # vramlab (in PyTorch) that tampering.replaced_names cannot see moves it.
        own = _own_scorer()
        with ran._unrecorded():
            off = _calibration_off(own, ref["all4"])
            if off:
                return report(name, False, what, off, "something vramlab's scoring runs on was changed in this kernel, "
                              "or this install differs: restart the kernel and run the notebook again", counts=False)
            ppl = own.score_plan(p)
    shown = f"{size['total'] / _MIB:.2f} MiB of 66 ({layers}), perplexity {ppl:.2f} on the window"
    if ppl <= ref["target"]:
        return report(name, True, "", f"{shown}; every layer at 4 bits measures {ref['all4']:.2f}, the reference "
                                      f"search's best {ref['ppl']:.2f}", ppl=ppl, bytes=size["total"])
    if mixed_bits.layers_within_budget(p.kv_bits) > len(p.eight_bit_layers):
        hint = ("it leaves part of the budget unused: a layer kept at 4 bits where the bytes allowed 8 is "
                "perplexity given away")
    else:
        # the same words for a full KV4 or KV8 plan: naming the cache settled 4 against 8, and asking what the
        # measurement judged gave the capstone's insight on the first miss (review #19); Hint 2 asks it
        hint = "it meets the budget, but its perplexity is above the target"
    return report(name, False, what, shown, hint)


def _layers_prediction_answer(**_) -> str:
    return "a prediction has no answer to reveal: the measured ranking is shown after the capstone's check"


@exercise("lab02", None, _layers_prediction_answer, prediction=True)
def check_layers_prediction(predicted, ranking=None) -> CheckResult:
    """The capstone's prediction: the (up to 5) layers expected to gain most from 8 bits, stored before measuring.

    Without ``ranking`` it stores the list (lasting, per notebook); a different list after the capstone's scorer was
    built (``mixed_bits.MixedBits(...)``) or after the capstone's check ran or its answer was revealed is refused as a
    reading. With ``ranking`` (every layer, largest measured gain first) it says where each layer of the LAST list
    stored before those ranks, whatever ``predicted`` now holds. Fails, revealing nothing, when no valid list was
    given.
    """
    from vramlab.checks.lab01 import PredictionResult

    name = "prediction: the layers that gain most from 8 bits"
    what = "a list of up to 5 layer indices (0 to 29)"
    if is_untouched_value(predicted):
        return report(name, False, what, "None (no prediction yet)", value=predicted,
                      untouched_hint="write your guess in the prediction cell, run it, then go on")
    items = list(predicted) if isinstance(predicted, (list, tuple, set)) else None
    if items is None or not 1 <= len(items) <= 5 or len(set(items)) != len(items) or any(
            isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < 30 for i in items):
        return report(name, False, what, f"{str(predicted)[:60]}",
                      "store a list such as [4, 17]: distinct whole numbers from 0 to 29, at most five")
    items = sorted(items)
    counted = _counted_layers_prediction()
    if ranking is None:
        closed = _prediction_closed()
        if closed is not None and (counted is None or items != counted):
            said = (f"the prediction that counts is the last one stored before it, {counted}" if counted is not None else
                    "no prediction was stored before it, so the capstone goes on without one")
            return report(name, False, "a prediction stored before measuring", f"{items}, written after {closed} in "
                          "this notebook", f"that is a reading: {said}", counts=False, result_class=PredictionResult)
        ran.note(_LAYERS_PREDICTED_KIND, (time.time_ns(), tuple(items)), lasting=True)
        return report(name, True, "", f"{items} stored; now measure.", result_class=PredictionResult)
    if counted is None:      # review #18a: the list handed over after the search is not a prediction
        return report(name, True, "", "no prediction was stored before the capstone's scorer was built (or its check "
                                      "ran), so there is none to compare with the measured ranking",
                      result_class=PredictionResult)
    ranks = [list(ranking).index(i) + 1 for i in counted]
    got = ", ".join(f"layer {i} ranks #{r}" for i, r in zip(counted, ranks))
    changed = f" (the list stored before measuring; the cell now holds {items})" if items != counted else ""
    return report(name, True, "", f"{got} of {len(ranking)} by measured gain (#1 gains most){changed}",
                  result_class=PredictionResult)


# vramlab.ran kinds (lasting, per notebook): the layers predicted, as (time in ns, sorted layers), and when the
# capstone's check first ran (or its answer was revealed). The prediction compared after the capstone is the last one
# stored before that and before the capstone's scorer was first built (mixed_bits.SCORER_BUILT_KIND): review #18a stored a "prediction"
# after the search and read a perfect ranking; reviews #21-#24 did so after measuring layers with the scorer.
_LAYERS_PREDICTED_KIND = "layers predicted (lab 02)"
_PLAN_CHECKED_KIND = "mixed plan checked (lab 02)"


def _prediction_closers() -> dict[str, str]:
    """The vramlab.ran kinds whose first stamp ends the time for the layers prediction, with their words: the
    capstone's scorer built (``mixed_bits.SCORER_BUILT_KIND``, reviews #21-#24), and its check run or its answer
    revealed."""
    from vramlab.quarot import mixed_bits

    return {mixed_bits.SCORER_BUILT_KIND: "the capstone's scorer was built",
            _PLAN_CHECKED_KIND: "the capstone's check ran (or its answer was revealed)"}


def _counted_layers_prediction() -> list[int] | None:
    """The layers prediction that counts: the last one stored before measuring, that is before the first of
    :func:`_prediction_closers` (None if there is none). A revision before any measurement is the learner's to make
    (review #23 saw one reported as stored, then ignored)."""
    counted = ran.last_before(_LAYERS_PREDICTED_KIND, *_prediction_closers())
    return None if counted is None else list(counted[0])


def _prediction_closed() -> str | None:
    """What ended the time for the layers prediction, in words (None while it is open): the first of
    :func:`_prediction_closers` that happened."""
    times = {words: ran.first_time(kind) for kind, words in _prediction_closers().items()}
    times = {k: t for k, t in times.items() if t is not None}
    return min(times, key=times.get) if times else None


AFTER_CAPSTONE_WAITS = ("The reference search (every layer alone, the greedy steps, the swaps, the rules of thumb) "
                        "appears here once Exercise 4 passes (or after check_mixed_plan(my_plan, scorer, reveal=True)).")


def after_capstone(result: Any, predicted_layers: Any = None, print_line=print) -> None:
    """After Exercise 4: when ``result`` (what :func:`check_mixed_plan` returned) passed or was revealed, compare
    ``predicted_layers`` (the stored prediction) with the measured single-layer ranking and print the reference
    search (:func:`vramlab.quarot.mixed_bits.format_reference`, with which rule-of-thumb and random plans pass the
    mark). Otherwise (anything but check_mixed_plan's own result) print one line saying when it appears: the search's
    best plan is the capstone's answer."""
    from vramlab.quarot import mixed_bits

    if not opened_by(result, "check_mixed_plan"):
        print_line(AFTER_CAPSTONE_WAITS)
        return
    reference = mixed_bits._load_reference()
    if predicted_layers is not None:
        check_layers_prediction(predicted_layers, reference["ranking"])
    print_line(mixed_bits.format_reference(reference, margin=1 + PLAN_TOLERANCE))
