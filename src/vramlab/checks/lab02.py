"""Checks for notebook 02 (W4A4KV4: outliers, rotations and 4-bit quantizers).

The references are :mod:`vramlab.quant`'s own quantizers, so a check and the lesson cannot disagree.
Each check prints one PASS/FAIL line with what was expected and what it got, and returns a
``CheckResult``; it never raises on a wrong answer.
"""

from __future__ import annotations

from vramlab.checks._core import CheckResult, call_learner, check_close, fmt_number, report

__all__ = ["check_per_token_quantizer", "check_kv_quantizer", "check_kv4_bytes_per_token"]


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


def _compare(name: str, fn, cases, reference, step, describe, hint: str) -> CheckResult:
    """Compare fn(*case) with reference(*case) for every case.

    Floating-point noise can move a value that sits exactly between two levels to the other level,
    so up to 0.01% of the elements may differ by at most one quantization step; anything else fails.
    """
    import torch

    for case in cases:
        want = reference(*case)
        # a fresh copy per call: an in-place solution must not change the next case or the summary
        case_copy = (case[0].clone(), *case[1:])
        got, failed = call_learner(name, fn, *case_copy, expected=f"a tensor of shape {tuple(want.shape)}")
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
            return report(name, False, f"the reference values for {label}",
                          f"{100 * frac:.2f}% of the elements differ, worst by {worst:.2f} quantization steps",
                          hint)
    x0 = cases[0]
    return report(name, True, "", f"all {len(cases)} cases match the reference (e.g. {describe(x0)}: "
                                  f"mean |error| {(reference(*x0) - x0[0]).abs().mean().item():.4f})")


def check_per_token_quantizer(fn) -> CheckResult:
    """``fn(x, bits, clip_ratio)`` -> symmetric per-token quantize-dequantize of ``x [..., n]``.

    Per token (row of the last dim): ``s = clip_ratio * max|x| / (2^(b-1) - 1)``,
    ``q = clamp(round(x / s), -2^(b-1), 2^(b-1) - 1)``, return ``q * s``.
    """
    from vramlab.quant import quantize_per_token_sym

    def step(x, bits, clip):
        return (x.abs().amax(-1, keepdim=True) * clip / (2 ** (bits - 1) - 1)).clamp_min(1e-12)

    return _compare(
        "per-token symmetric quantizer", fn, _cases_per_token(), quantize_per_token_sym, step,
        lambda c: f"x {tuple(c[0].shape)}, bits={c[1]}, clip={c[2]}",
        "one scale per token: s = clip * x.abs().amax(dim=-1, keepdim=True) / (2**(bits-1) - 1); "
        "round(x / s), clamp to [-2**(bits-1), 2**(bits-1) - 1], multiply back by s "
        "(and keep all-zero tokens at zero: clamp s away from 0)")


def check_kv_quantizer(fn) -> CheckResult:
    """``fn(x, bits, group_size, clip_ratio)`` -> asymmetric group-wise quantize-dequantize.

    ``x [b, kv_heads, s, head_dim]``; groups of ``group_size`` along the last dim; per group
    ``lo = clip * min(min, 0)``, ``hi = clip * max(max, 0)``, ``s = (hi - lo) / (2^b - 1)``,
    ``z = round(-lo / s)``, ``q = clamp(round(x / s) + z, 0, 2^b - 1)``, return ``(q - z) * s``.
    """
    from vramlab.quant import quantize_groupwise_asym

    def step(x, bits, gs, clip):
        g = x.reshape(*x.shape[:-1], x.shape[-1] // gs, gs)
        lo = g.amin(-1, keepdim=True).clamp_max(0) * clip
        hi = g.amax(-1, keepdim=True).clamp_min(0) * clip
        s = ((hi - lo) / (2 ** bits - 1)).clamp_min(1e-12)
        return s.expand_as(g).reshape(x.shape)

    return _compare(
        "grouped asymmetric KV quantizer", fn, _cases_kv(), quantize_groupwise_asym, step,
        lambda c: f"x {tuple(c[0].shape)}, bits={c[1]}, group={c[2]}, clip={c[3]}",
        "reshape the last dim into (d // group_size, group_size); per group lo = clip * min(g.min, 0), "
        "hi = clip * max(g.max, 0), s = (hi - lo) / (2**bits - 1), zero = round(-lo / s), "
        "q = clamp(round(x / s) + zero, 0, 2**bits - 1), return (q - zero) * s reshaped back")


def check_kv4_bytes_per_token(got) -> CheckResult:
    """SmolLM2's KV cache bytes per token at 4 bits with one fp16 scale and one fp16 zero per group of 64.

    2 (K and V) x 30 layers x 3 KV heads x (64 x 4 bits / 8 + 2 x 2 bytes) = 6,480 bytes
    (float16: 23,040 bytes).
    """
    layers, kv_heads, head_dim, group = 30, 3, 64, 64
    expected = 2 * layers * kv_heads * (head_dim * 4 / 8 + (head_dim // group) * 2 * 2)
    return check_close("KV4 bytes per token", got, float(expected), rel=0, abs_tol=0.5, unit="bytes",
                       hint="K and V, 30 layers, 3 KV heads, 64 values of half a byte each per head, plus "
                            "a 2-byte scale and a 2-byte zero point per group of 64")
