"""Checks for notebook 04 (Multi-head Latent Attention caches).

References are vramlab's own functions (``vramlab.serving.kvcache`` for bytes, ``vramlab.mla`` for the
layer), so a check and the lesson cannot disagree. A check never reveals the expected value while
the exercise is untouched (``None`` or ``NotImplementedError``).
"""

from __future__ import annotations

import math
from typing import Any

from vramlab.checks._core import CheckResult, as_float, call_learner, direction, exercise, fmt_number, report
from vramlab.serving.kvcache import kv_bytes_per_token, mla_expanded_kv_bytes_per_token

__all__ = ["check_v3_latent_elements", "check_v3_latent_bytes", "check_v3_per_head_elements",
           "check_keys_by_hand", "check_absorbed_scores", "check_prediction_recorded", "check_conversion_prediction"]

V3 = "deepseek-v3"


def _untouched(name: str, got: Any, what: str) -> CheckResult | None:
    if got is None or got is Ellipsis:
        return report(name, False, what, "None (the exercise is not done yet)", "replace None with your number")
    return None


def _value(name: str, got: Any, want: float, what: str, mistakes: dict[float, str], hint: str) -> CheckResult:
    untouched = _untouched(name, got, what)
    if untouched is not None:
        return untouched
    value = as_float(got)
    if value is None or not math.isfinite(value):
        return report(name, False, what, f"{fmt_number(got)} (not a finite number)", hint)
    if abs(value - want) <= 0.5:
        return report(name, True, "", fmt_number(int(round(value))))
    got = f"{fmt_number(value)}, {direction(value, want)}"
    for wrong, why in mistakes.items():
        if abs(value - wrong) <= 0.5:
            return report(name, False, what, got, why)
    return report(name, False, what, got, hint)


def _v3_latent_answer(**_) -> str:
    return f"61 layers x (kv_lora_rank 512 + qk_rope_head_dim 64) = {fmt_number(kv_bytes_per_token(V3, kv_bits=8))} elements"


def _v3_bytes_answer(**_) -> str:
    return f"{fmt_number(kv_bytes_per_token(V3, 'bfloat16'))} bytes (the latent elements x 2 bytes in bf16)"


def _v3_per_head_answer(**_) -> str:
    return (f"61 layers x 128 heads x (key 128 + 64 = 192, value 128) = "
            f"{fmt_number(mla_expanded_kv_bytes_per_token(V3, kv_bits=8))} elements")


@exercise("lab04", 1, _v3_latent_answer)
def check_v3_latent_elements(got: Any) -> CheckResult:
    """Elements DeepSeek-V3 caches per token, all 61 layers (latent + shared RoPE key)."""
    want = kv_bytes_per_token(V3, kv_bits=8)            # one byte per element = the element count
    return _value("DeepSeek-V3 latent elements per token", got, want, "a count of elements (all layers)", {
        61 * 512: "the shared RoPE key (qk_rope_head_dim) is cached too, beside the latent",
        512 + 64: "that is one layer; every one of the 61 layers has its own latent cache",
        2 * want: "count elements, not bf16 bytes - and MLA has no separate K and V to double",
        61 * (512 + 128): "qk_nope_head_dim (128) is the per-head content width, re-created from the latent; "
                          "the cached RoPE key is qk_rope_head_dim wide",
    }, "what does one layer cache for one token? Read the widths from the config, then count the layers")


@exercise("lab04", 1, _v3_bytes_answer)
def check_v3_latent_bytes(got: Any) -> CheckResult:
    """DeepSeek-V3 latent-cache bytes per token in bf16 (all layers)."""
    want = kv_bytes_per_token(V3, "bfloat16")
    return _value("DeepSeek-V3 bytes per token (bf16)", got, want, "bytes per token", {
        want / 2: "that is the element count: bf16 takes 2 bytes per element",
        2 * want: "no factor 2 for K and V: MLA caches a single latent row",
        61 * 512 * 2: "the 64-wide RoPE key is cached too",
    }, "start from the elements per token: how many bytes does one bf16 element take?")


@exercise("lab04", 1, _v3_per_head_answer)
def check_v3_per_head_elements(got: Any) -> CheckResult:
    """Elements per token a per-head K/V cache of DeepSeek-V3 would need (all heads, all layers)."""
    want = mla_expanded_kv_bytes_per_token(V3, kv_bits=8)
    return _value("DeepSeek-V3 per-head K/V elements per token", got, want, "a count of elements", {
        61 * 128 * 2 * 128: "each key also carries the 64 RoPE dimensions: key width = qk_nope + qk_rope = 192",
        61 * 128 * 2 * 192: "values are v_head_dim = 128 wide, keys 192",
        128 * (192 + 128): "that is one layer; multiply by 61",
        61 * 2 * 128 * 64: "64 is qk_rope_head_dim (transformers' config.head_dim), not the head width - "
                           "the classic trap",
        2 * want: "count elements, not bf16 bytes",
    }, "per layer and head, how wide is a key and how wide is a value? Read the widths from the config")


def _tiny_layers():
    import torch

    from vramlab.mla import MultiHeadLatentAttention

    out = []
    for seed, interleave in ((0, True), (1, False)):
        torch.manual_seed(seed)
        layer = MultiHeadLatentAttention(dict(hidden_size=32, num_attention_heads=3, kv_lora_rank=10,
                                              qk_nope_head_dim=6, qk_rope_head_dim=4, v_head_dim=5,
                                              q_lora_rank=None, rope_interleave=interleave)).double()
        with torch.no_grad():
            for p in layer.parameters():
                p.normal_(0, 0.5)
        out.append((layer, torch.randn(1, 7, 32, dtype=torch.float64)))
    return out


def _keys_answer(**_) -> str:
    return ("c, k_rope = layer.latent_and_rope_key(x); cos, sin = layer.rope_cos_sin(torch.arange(T)[None], x.dtype); "
            "keys = layer.expand_kv(c, apply_rope(k_rope, cos, sin, layer.config.rope_interleave))[0]: per head "
            "[W_UK c ; RoPE(k_rope)]")


@exercise("lab04", 2, _keys_answer)
def check_keys_by_hand(fn) -> CheckResult:
    """``fn(layer, x)`` -> per-head keys ``[B, H, T, d_n + d_r]`` for positions 0..T-1, built from
    the layer's pieces; compared with the layer's own naive expansion."""
    import torch

    from vramlab.mla import apply_rope

    name = "per-head keys from the latent and the shared RoPE key"
    for layer, x in _tiny_layers():
        cfg = layer.config
        with torch.no_grad():
            c, k_rope = layer.latent_and_rope_key(x)
            pos = torch.arange(x.shape[1])[None]
            cos, sin = layer.rope_cos_sin(pos, x.dtype)
            want = layer.expand_kv(c, apply_rope(k_rope, cos, sin, cfg.rope_interleave))[0]
            got, failed = call_learner(name, fn, layer, x, expected="a tensor [B, H, T, d_n + d_r]")
        if failed is not None:
            return failed
        if got is None:
            return report(name, False, "a tensor [B, H, T, d_n + d_r]", "None (the exercise is not done yet)")
        if not isinstance(got, torch.Tensor) or tuple(got.shape) != tuple(want.shape):
            shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
            return report(name, False, f"shape {tuple(want.shape)}", f"{shape}",
                          "[batch, heads, tokens, qk_nope_head_dim + qk_rope_head_dim]; content part first")
        if torch.allclose(got.double(), want, atol=1e-9, rtol=0):
            continue
        d_n = cfg.qk_nope_head_dim
        hint = "each head's key has a content part (from the latent) and a position part (the shared RoPE key)"
        with torch.no_grad():
            raw_c = layer.kv_a_proj_with_mqa(x)[..., :cfg.kv_lora_rank]
            unrotated = layer.expand_kv(c, k_rope)[0]
            if torch.allclose(got[..., :d_n].double(), want[..., :d_n], atol=1e-9) and \
                    torch.allclose(got[..., d_n:].double(), unrotated[..., d_n:], atol=1e-9):
                hint = "the shared key must be rotated (RoPE at positions 0..T-1) before it joins the heads"
            elif torch.allclose(got[..., :d_n].double(), layer.expand_kv(raw_c, k_rope)[0][..., :d_n], atol=1e-9):
                hint = "normalise the latent with kv_a_layernorm before the up-projection (that is what is cached)"
            elif torch.allclose(got[..., d_n:].double(), want[..., d_n:], atol=1e-9):
                hint = "the RoPE part is right; the content part comes from the normed latent through kv_b_proj: " \
                       "which of each head's rows there belong to the key?"
            elif torch.allclose(got[..., :d_n].double(), want[..., :d_n], atol=1e-9):
                hint = "the content part is right; the RoPE key is the LAST qk_rope_head_dim values of " \
                       "kv_a_proj_with_mqa's output, rotated with apply_rope(..., layer.config.rope_interleave)"
        err = (got.double() - want).abs().max().item()
        return report(name, False, "keys equal to the layer's own (max |diff| < 1e-9)", f"max |diff| {err:.3g}", hint)
    return report(name, True, "", "keys equal the layer's expansion (interleaved and half-split RoPE)")


def _absorbed_answer(**_) -> str:
    return ("q_latent = torch.einsum('htd,hdc->htc', q_nope, w_uk) (q_nope @ W_UK per head, [H, T, d_c]); "
            "scores = q_latent @ c_kv.T ([H, T, S])")


@exercise("lab04", 3, _absorbed_answer)
def check_absorbed_scores(fn) -> CheckResult:
    """``fn(q_nope [H, T, d_n], c_kv [S, d_c], w_uk [H, d_n, d_c])`` -> content scores ``[H, T, S]``
    equal to ``q_nope . (W_UK c)`` per head, to 1e-9 in float64."""
    import torch

    name = "absorbed content scores"
    g = torch.Generator().manual_seed(4)
    for h, t, s, d_n, d_c in ((3, 2, 9, 5, 7), (4, 1, 33, 6, 12)):
        q = torch.randn(h, t, d_n, generator=g, dtype=torch.float64)
        c = torch.randn(s, d_c, generator=g, dtype=torch.float64)
        w = torch.randn(h, d_n, d_c, generator=g, dtype=torch.float64)
        keys = torch.einsum("hdc,sc->hsd", w, c)                       # the naive per-head keys
        want = q @ keys.transpose(-1, -2)
        got, failed = call_learner(name, fn, q, c, w, expected="a tensor [H, T, S]")
        if failed is not None:
            return failed
        if got is None:
            return report(name, False, "a tensor [H, T, S]", "None (the exercise is not done yet)")
        if not isinstance(got, torch.Tensor) or tuple(got.shape) != (h, t, s):
            shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
            hint = "one score per head, query and cached token: [H, T, S]"
            if isinstance(got, torch.Tensor) and tuple(got.shape) == (t, s):
                hint = "keep the heads apart: W_UK is different for every head (do not sum over h)"
            return report(name, False, f"shape {(h, t, s)}", f"{shape}", hint)
        err = (got.double() - want).abs().max().item()
        if not err < 1e-9:
            return report(name, False, "equal to the naive scores (max |diff| < 1e-9)", f"max |diff| {err:.3g}",
                          "q . (W_UK c) can be regrouped: what can you multiply the query by first, so that "
                          "it meets the latent directly?")
    return report(name, True, "", "absorbed scores equal q . (W_UK c) for every head (to 1e-9)")


def _prediction_value(name: str, prediction: Any) -> tuple[float | None, CheckResult | None]:
    untouched = _untouched(name, prediction, "your predicted perplexity (a number)")
    if untouched is not None:
        return None, untouched
    value = as_float(prediction)
    if value is None or not math.isfinite(value) or value < 1:
        return None, report(name, False, "a perplexity of at least 1", f"{fmt_number(prediction)}",
                            "perplexity is at least 1 (a perfect model); any honest guess above that is fine")
    return value, None


def _conversion_answer(rank: int = 96, method: str = "activations", **_) -> str:
    from vramlab.mla import load_conversion_results

    results = load_conversion_results()
    measured = [p["ppl"] for p in results["points"] if p["rank"] == rank and p["method"] == method]
    return (f"the measured perplexity at rank {rank} ({method}) is {measured[0]:.3g}" if measured
            else f"no measurement at rank {rank} ({method})")


@exercise("lab04", 4, _conversion_answer, prediction=True)
def check_prediction_recorded(prediction: Any, rank: int = 96) -> CheckResult:
    """Before the reveal: accepts any perplexity >= 1 and says nothing about the answer."""
    name = f"prediction at latent rank {rank}"
    value, failed = _prediction_value(name, prediction)
    if failed is not None:
        return failed
    return report(name, True, "", f"{value:.3g} (stored; the curve below will tell)")


@exercise("lab04", 4, _conversion_answer, prediction=True)
def check_conversion_prediction(prediction: Any, rank: int = 96, method: str = "activations") -> CheckResult:
    """Any honest number passes: says how far the predicted perplexity at ``rank`` was from the measurement."""
    from vramlab.mla import load_conversion_results

    name = f"your prediction of SmolLM2's perplexity at latent rank {rank}"
    value, failed = _prediction_value(name, prediction)
    if failed is not None:
        return failed
    results = load_conversion_results()
    measured = [p["ppl"] for p in results["points"] if p["rank"] == rank and p["method"] == method][0]
    factor = max(value, measured) / min(value, measured)
    side = "optimistic" if value < measured else "pessimistic"
    return report(name, True, "", f"{value:.3g}; measured {measured:.3g} (original {results['gqa']['ppl']:.3g}): "
                  f"{'spot on' if factor < 1.1 else f'{factor:.2f}x {side}'}")
