"""Fake (simulated) integer quantization for W/A/KV experiments, QuaRot style.

Everything here is *fake quantization*: a tensor is quantized to integers on a uniform grid and
immediately de-quantized back to floating point (quantize-dequantize, "QDQ"). The numbers the
model computes with are exactly the values a b-bit integer kernel would represent, but the matmuls
still run in float, so this measures **accuracy**, never speed or memory. All functions are
device-agnostic (the grid is computed on the tensor's own device, in float32 - in float64 for a float64
tensor, the reproducible path of ``vramlab.numerics`` - and cast back).

Quantizers (settings from QuaRot, arXiv 2404.00456, and ../shared/REFERENCE.md):

* activations - :func:`quantize_per_token_sym`: one symmetric scale per token (per row of the last
  dimension), integers in ``[-2^(b-1), 2^(b-1)-1]``, scale ``clip * max|x| / (2^(b-1)-1)``;
  QuaRot clips at 0.9.
* weights - :func:`quantize_weight_sym`: one symmetric scale per output channel (row of
  ``W [out, in]``) or per group of ``group_size`` input columns, the clip ratio of each scale
  chosen by a grid search minimising ``sum |W - Q(W)|^2.4`` (QuaRot's "MSE" clip search).
  Methods: RTN (round to nearest) and GPTQ (:func:`gptq_quantize_matrix`, error feedback through
  the inverse Hessian of the layer inputs).
* KV cache - :func:`quantize_groupwise_asym`: asymmetric (scale + zero point), one group per
  ``group_size`` consecutive elements of the last dimension (group = head_dim = 64 here), clip 0.95.

:func:`quantize_model` puts it together: a deep copy of a Llama-style model whose decoder linears
have QDQ weights and quantize their input per token, whose attention quantizes K (post-RoPE) and V
through the ``vramlab.quarot.attention`` hooks, and whose ``lm_head`` (and its input) stays 16-bit.

Note for SmolLM2 in this lab: the weights were de-quantized from a Q4_1 GGUF, so "W4" here
re-quantizes weights that already sit on a (different, group-32 asymmetric) 4-bit grid.
"""

from __future__ import annotations

import copy
import math
import torch
from torch import nn

__all__ = [
    "is_quantized_bits",
    "quantize_per_token_sym",
    "quantize_groupwise_asym",
    "quantize_weight_sym",
    "weight_scales_mse",
    "ActQuantizer",
    "KVQuantizer",
    "QuantLinear",
    "gptq_quantize_matrix",
    "quantize_weights",
    "quantize_model",
    "calibration_windows",
    "decoder_linears",
    "capture_inputs",
    "hessian_from_inputs",
    "outlier_stats",
    "per_token_relative_error",
    "load_quarot_table",
    "table_ppl",
    "format_table",
    "code_fingerprint",
    "table_fingerprint_problems",
    "FINGERPRINT_FILES",
    "EVAL_WINDOWS",
    "WINDOW_LENGTH",
]

EVAL_WINDOWS = 8  # the evaluation windows are token_windows(tok, 8, 512): tokens [0, 4096)
WINDOW_LENGTH = 512


def _tensor(x, name: str, dims: int | None = None, what: str = "") -> torch.Tensor:
    """``x`` if it is a tensor (with ``dims`` dimensions when given); one clear sentence otherwise."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor{what} (got {type(x).__name__}); "
                        f"wrap it with torch.as_tensor(...).")
    if dims is not None and x.dim() != dims:
        raise ValueError(f"{name} must be {dims}-D{what} (got shape {tuple(x.shape)}).")
    return x


def _clip(value, name: str) -> float:
    """A clip ratio in (0, 1]; one clear sentence otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise ValueError(f"{name} must be a number in (0, 1] (1 = no clipping, QuaRot uses 0.9 for "
                         f"activations and 0.95 for the KV cache), not {value!r}.")
    return value


def _group(value, name: str = "group_size", allow_none: bool = True):
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be " + ("None or " if allow_none else "")
                         + f"a positive integer such as 64 or 128 (got {value!r}).")
    return value


def is_quantized_bits(bits) -> bool:
    """True when ``bits`` asks for quantization: ``None`` or >= 16 mean "keep in float"."""
    if bits is None:
        return False
    if isinstance(bits, bool) or not isinstance(bits, (int, float)) or bits != int(bits):
        raise TypeError(f"bits must be an integer bit width such as 4 or 8 (16 or None: not quantized), "
                        f"not {bits!r}.")
    bits = int(bits)
    if bits < 1:
        raise ValueError(f"bits={bits} is not a bit width; pass an integer >= 1, or 16/None for no quantization.")
    return bits < 16


# --------------------------------------------------------------------------------------------
# Elementary quantize-dequantize functions
# --------------------------------------------------------------------------------------------

def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype the quantizers compute in for a tensor of ``dtype``: float64 stays float64 (the reproducible
    path, ``vramlab.numerics.reproducible``: its sums then agree to the last bits on every CPU kernel path),
    anything else computes in float32 (whose sums follow the kernel path's lanes: issue 26)."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def _compute(t: torch.Tensor) -> torch.Tensor:
    """``t`` in :func:`_compute_dtype` (no copy when it already is)."""
    return t.to(_compute_dtype(t.dtype))


def quantize_per_token_sym(x: torch.Tensor, bits: int, clip_ratio: float = 1.0) -> torch.Tensor:
    """Symmetric per-token fake quantization of activations.

    ``x``: any shape ``[..., n]``; each row along the last dimension (one token's n features) gets
    its own scale ``s = clip_ratio * max|row| / (2^(b-1) - 1)`` and is rounded to integers
    ``q = clamp(round(x / s), -2^(b-1), 2^(b-1) - 1)``; returns ``q * s`` (same shape and dtype as
    ``x``). With ``clip_ratio = 1`` no element is clipped and ``|x - Q(x)| <= s / 2`` everywhere.
    At most ``2^b`` distinct values per row. All-zero rows stay zero.
    """
    _tensor(x, "x", what=" of activations [..., features]")
    _clip(clip_ratio, "clip_ratio")
    if not is_quantized_bits(bits):
        return x
    qmax = 2 ** (int(bits) - 1) - 1
    if qmax < 1:
        raise ValueError("bits=1 leaves a symmetric quantizer no level but zero; pass bits >= 2.")
    xf = _compute(x)
    scale = (xf.abs().amax(dim=-1, keepdim=True) * clip_ratio / qmax).clamp_min(1e-12)
    q = torch.clamp(torch.round(xf / scale), -qmax - 1, qmax)
    return (q * scale).to(x.dtype)


def quantize_groupwise_asym(x: torch.Tensor, bits: int, group_size: int = 64,
                            clip_ratio: float = 1.0) -> torch.Tensor:
    """Asymmetric group-wise fake quantization (used for the KV cache).

    ``x``: shape ``[..., d]`` with ``d`` a multiple of ``group_size``; the last dimension is cut into
    groups of ``group_size`` consecutive elements (for K/V of shape ``[batch, kv_heads, seq,
    head_dim]`` with ``group_size = head_dim`` that is one group per head per token). Per group:
    ``lo = clip * min(min(g), 0)``, ``hi = clip * max(max(g), 0)``, ``s = (hi - lo) / (2^b - 1)``,
    zero point ``z = round(-lo / s)``, ``q = clamp(round(g / s) + z, 0, 2^b - 1)``; returns
    ``(q - z) * s``. The range always contains 0 (as in QuaRot), so 0 is exact. Without clipping
    ``|x - Q(x)| <= s / 2``. At most ``2^b`` distinct values per group.
    """
    _tensor(x, "x")
    _group(group_size, allow_none=False)
    _clip(clip_ratio, "clip_ratio")
    if not is_quantized_bits(bits):
        return x
    d = x.shape[-1]
    if d % group_size:
        raise ValueError(f"The last dimension ({d}) is not a multiple of group_size={group_size}; pass a group_size that divides {d}.")
    maxq = 2 ** int(bits) - 1
    xf = _compute(x).reshape(*x.shape[:-1], d // group_size, group_size)
    lo = xf.amin(dim=-1, keepdim=True).clamp_max(0) * clip_ratio
    hi = xf.amax(dim=-1, keepdim=True).clamp_min(0) * clip_ratio
    scale = ((hi - lo) / maxq).clamp_min(1e-12)
    zero = torch.round(-lo / scale)
    q = torch.clamp(torch.round(xf / scale) + zero, 0, maxq)
    return ((q - zero) * scale).reshape(x.shape).to(x.dtype)


def _sym_qdq(w: torch.Tensor, scale: torch.Tensor, qmax: int) -> torch.Tensor:
    return torch.clamp(torch.round(w / scale), -qmax - 1, qmax) * scale


def weight_scales_mse(w: torch.Tensor, bits: int, mse: bool = True, grid: int = 100,
                      max_shrink: float = 0.8, norm: float = 2.4) -> torch.Tensor:
    """Per-row symmetric scales ``[rows, 1]`` for ``w [rows, cols]`` (float32; float64 for a float64 ``w``).

    Without ``mse``: ``s = max|row| / (2^(b-1) - 1)``. With ``mse`` (QuaRot's weight clip search):
    try clip ratios ``p = 1, 0.99, ..., 1 - max_shrink`` and keep, per row, the one minimising
    ``sum |w - Q_p(w)|^norm``.
    """
    _tensor(w, "w", 2, " [rows, cols]")
    if not is_quantized_bits(bits):
        raise ValueError(f"weight_scales_mse needs a bit width below 16 (got {bits!r}).")
    qmax = 2 ** (int(bits) - 1) - 1
    wf = _compute(w)
    amax = wf.abs().amax(dim=1, keepdim=True).clamp_min(1e-12)
    best_scale = amax / qmax
    if not mse:
        return best_scale
    best_err = torch.full_like(amax, float("inf"))
    for i in range(int(max_shrink * grid)):
        p = 1 - i / grid
        scale = amax * p / qmax
        err = torch.div(wf, scale).round_().clamp_(-qmax - 1, qmax).mul_(scale).sub_(wf)
        err = err.abs_().pow_(norm).sum(dim=1, keepdim=True)
        better = err < best_err
        best_err = torch.where(better, err, best_err)
        best_scale = torch.where(better, scale, best_scale)
    return best_scale


def _group_scales(w: torch.Tensor, bits: int, group_size: int, mse: bool) -> torch.Tensor:
    """Per-(row, column group) scales expanded to ``w``'s shape ``[rows, cols]``; ragged last group."""
    parts = []
    for start in range(0, w.shape[1], group_size):
        block = w[:, start:start + group_size]
        parts.append(weight_scales_mse(block, bits, mse=mse).expand(-1, block.shape[1]))
    return torch.cat(parts, dim=1)


def quantize_weight_sym(w: torch.Tensor, bits: int, group_size: int | None = None,
                        mse: bool = True) -> torch.Tensor:
    """RTN fake quantization of a weight matrix ``w [out, in]``, symmetric.

    One scale per output channel (row), or per ``group_size`` consecutive input columns of each row
    when ``group_size`` is given (when ``in`` is not a multiple of it the last group is shorter: for
    SmolLM2's 576 inputs, group 128 means 4 x 128 + 64). ``mse`` turns on the clip search
    of :func:`weight_scales_mse`. Returns a tensor of ``w``'s shape and dtype.
    """
    _tensor(w, "w", 2, " [out, in]")
    _group(group_size)
    if not is_quantized_bits(bits):
        return w
    qmax = 2 ** (int(bits) - 1) - 1
    rows, cols = w.shape
    wf = _compute(w)
    if group_size:
        out = _sym_qdq(wf, _group_scales(wf, bits, group_size, mse), qmax)
    else:
        out = _sym_qdq(wf, weight_scales_mse(wf, bits, mse=mse), qmax)
    return out.to(w.dtype)


# --------------------------------------------------------------------------------------------
# Modules
# --------------------------------------------------------------------------------------------

class ActQuantizer(nn.Module):
    """Per-token symmetric activation fake quantizer (a module so it shows in ``print(model)``)."""

    def __init__(self, bits: int | None, clip_ratio: float = 0.9):
        super().__init__()
        self.bits = bits
        self.clip_ratio = clip_ratio

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return quantize_per_token_sym(x, self.bits, self.clip_ratio)

    def extra_repr(self) -> str:
        return f"bits={self.bits}, clip_ratio={self.clip_ratio}, per-token symmetric"


class KVQuantizer(nn.Module):
    """Asymmetric group-wise K or V fake quantizer: callable on ``[b, kv_heads, s, head_dim]``."""

    def __init__(self, bits: int | None, group_size: int = 64, clip_ratio: float = 0.95):
        super().__init__()
        self.bits = bits
        self.group_size = group_size
        self.clip_ratio = clip_ratio

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return quantize_groupwise_asym(x, self.bits, self.group_size, self.clip_ratio)

    def extra_repr(self) -> str:
        return f"bits={self.bits}, group_size={self.group_size}, clip_ratio={self.clip_ratio}, asymmetric"


class QuantLinear(nn.Module):
    """A linear layer with fake-quantized weights that fake-quantizes its input per token.

    ``weight`` holds the de-quantized weight (float, shape ``[out, in]``); ``act_quantizer`` runs on
    the input ``x [..., in]`` before ``F.linear``. Drop-in for ``nn.Linear``.
    """

    def __init__(self, linear: nn.Linear, weight: torch.Tensor, act_quantizer: nn.Module | None,
                 w_bits: int | None, w_desc: str = ""):
        super().__init__()
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        self.weight = nn.Parameter(weight.to(linear.weight.dtype).to(linear.weight.device), requires_grad=False)
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().clone(), requires_grad=False)
        self.act_quantizer = act_quantizer if act_quantizer is not None else nn.Identity()
        self.w_bits = w_bits
        self.w_desc = w_desc

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(self.act_quantizer(x), self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, w_bits={self.w_bits} {self.w_desc}".rstrip()


# --------------------------------------------------------------------------------------------
# Finding the linears
# --------------------------------------------------------------------------------------------

def _layers(model) -> nn.ModuleList:
    inner = getattr(model, "model", model)
    layers = getattr(inner, "layers", None)
    if layers is None:
        raise TypeError(f"{type(model).__name__} has no model.model.layers; pass a Llama-style causal LM such as load_smollm2()'s model.")
    return layers


def decoder_linears(module: nn.Module, prefix: str = "") -> dict[str, nn.Linear]:
    """All ``nn.Linear`` (or :class:`QuantLinear`) inside ``module``, by qualified name.

    A ``down_proj`` that rotation turned into ``Sequential(OnlineHadamard, Linear)`` yields its inner
    Linear (``...down_proj.1``), which sees the post-Hadamard activation.
    """
    out = {}
    for name, sub in module.named_modules(prefix=prefix):
        if isinstance(sub, (nn.Linear, QuantLinear)):
            out[name] = sub
    return out


def _set_submodule(root: nn.Module, name: str, new: nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    parent = root.get_submodule(parent_name) if parent_name else root
    setattr(parent, child, new)


# --------------------------------------------------------------------------------------------
# GPTQ
# --------------------------------------------------------------------------------------------

def gptq_quantize_matrix(w: torch.Tensor, hessian: torch.Tensor, bits: int, group_size: int | None = None,
                         mse: bool = True, percdamp: float = 0.01, blocksize: int = 128,
                         act_order: bool = True) -> torch.Tensor:
    """GPTQ (Frantar et al., 2022) for one weight matrix; returns the de-quantized weight.

    ``w [out, in]``; ``hessian [in, in]`` = ``2/N sum_t x_t x_t^T`` over the layer's N calibration
    input tokens. Columns are quantized one at a time (largest Hessian diagonal first when
    ``act_order``); the rounding error of each column is spread over the not-yet-quantized columns
    through the upper Cholesky factor of ``H^-1`` (with ``percdamp * mean(diag H)`` added to the
    diagonal). Scales are symmetric per output row (computed once, with the MSE clip search) or,
    with ``group_size``, per group of consecutive input columns of the original order, computed from
    the weights before error feedback ("static groups", what a g_idx-free kernel can run).
    Computed in float32 on ``w``'s device (in float64 for a float64 ``w``: the reproducible path).
    """
    _tensor(w, "w", 2, " [out, in]")
    _tensor(hessian, "hessian", 2, " [in, in]")
    if tuple(hessian.shape) != (w.shape[1], w.shape[1]):
        raise ValueError(f"hessian must be [in, in] = [{w.shape[1]}, {w.shape[1]}] for w of shape "
                         f"{tuple(w.shape)} (got {tuple(hessian.shape)}); build it from this layer's inputs "
                         f"with hessian_from_inputs.")
    _group(group_size)
    if not is_quantized_bits(bits):
        raise ValueError(f"gptq_quantize_matrix needs a bit width below 16 (got {bits!r}).")
    qmax = 2 ** (int(bits) - 1) - 1
    W = _compute(w.detach()).clone()
    rows, cols = W.shape
    H = hessian.detach().to(device=W.device, dtype=W.dtype).clone()
    dead = torch.diag(H) == 0
    H[dead, dead] = 1
    W[:, dead] = 0

    if group_size:
        col_scale = _group_scales(W, bits, group_size, mse)  # [rows, cols]; ragged last group allowed
    else:
        col_scale = weight_scales_mse(W, bits, mse=mse).expand(rows, cols)

    if act_order:
        perm = torch.argsort(torch.diag(H), descending=True)
        W = W[:, perm]
        H = H[perm][:, perm]
        col_scale = col_scale[:, perm]
        invperm = torch.argsort(perm)

    damp = percdamp * torch.mean(torch.diag(H))
    idx = torch.arange(cols, device=W.device)
    H[idx, idx] += damp
    L = torch.linalg.cholesky(H)
    Hinv = torch.cholesky_inverse(L)
    Hinv = torch.linalg.cholesky(Hinv, upper=True)

    Q = torch.zeros_like(W)
    for i1 in range(0, cols, blocksize):
        i2 = min(i1 + blocksize, cols)
        W1 = W[:, i1:i2].clone()
        Q1 = torch.zeros_like(W1)
        Err1 = torch.zeros_like(W1)
        Hinv1 = Hinv[i1:i2, i1:i2]
        S1 = col_scale[:, i1:i2]
        for i in range(i2 - i1):
            wcol = W1[:, i]
            d = Hinv1[i, i]
            q = _sym_qdq(wcol, S1[:, i], qmax)
            Q1[:, i] = q
            err = (wcol - q) / d
            W1[:, i:] -= err.unsqueeze(1) @ Hinv1[i, i:].unsqueeze(0)
            Err1[:, i] = err
        Q[:, i1:i2] = Q1
        W[:, i2:] -= Err1 @ Hinv[i1:i2, i2:]

    if act_order:
        Q = Q[:, invperm]
    return Q.to(w.dtype)


class _StopForward(Exception):
    pass


def _first_layer_inputs(model, calibration: torch.Tensor, batch_size: int):
    """Run the embedding part of the model and capture what enters decoder layer 0."""
    layers = _layers(model)
    device = next(model.parameters()).device
    captured: list[tuple[torch.Tensor, dict]] = []

    def hook(_module, args, kwargs):
        hidden = args[0] if args else kwargs.pop("hidden_states")
        kw = {k: v for k, v in kwargs.items() if k != "hidden_states"}
        captured.append((hidden.detach(), kw))
        raise _StopForward

    handle = layers[0].register_forward_pre_hook(hook, with_kwargs=True)
    try:
        with torch.inference_mode():
            for start in range(0, calibration.shape[0], batch_size):
                ids = calibration[start:start + batch_size].to(device)
                try:
                    model(input_ids=ids, use_cache=False)
                except _StopForward:
                    pass
    finally:
        handle.remove()
    return captured


def _run_layer(layer, hidden, kwargs):
    out = layer(hidden, **kwargs)
    return out[0] if isinstance(out, tuple) else out


def quantize_weights(model, bits: int, method: str = "rtn", calibration: torch.Tensor | None = None,
                     group_size: int | None = None, mse: bool = True, percdamp: float = 0.01,
                     act_order: bool = True, batch_size: int = 4, progress: bool = True) -> dict[str, torch.Tensor]:
    """De-quantized weights of every decoder linear: ``{qualified name: tensor [out, in]}``.

    ``method="rtn"``: round to nearest with the per-channel (or per-group) MSE clip search.
    ``method="gptq"``: sequential GPTQ, layer by layer as in QuaRot: the calibration windows
    (``LongTensor [n, length]``; use :func:`calibration_windows`, which does not overlap the
    evaluation windows) are run through the model up to layer 0; for each layer the Hessian of every
    linear's input is accumulated from the (already quantized) previous layers' outputs with
    full-precision activations, all its linears are GPTQ-quantized, and the quantized layer's outputs
    feed the next layer. Simplification against QuaRot's ``gptq_fwrd``: the Hessians of all seven
    linears of a layer come from one pass of the unquantized layer (QuaRot re-runs the layer after
    each of its groups qkv / o / gate-up / down, so e.g. o_proj sees quantized q/k/v), which costs
    1 layer pass instead of 4. About 2 minutes on one CPU thread for SmolLM2 with 16 x 512 calibration
    tokens (most of it in the per-column loop and the MSE clip search; a GPU makes it seconds).
    ``lm_head`` is never included. The model is not modified.
    """
    if not is_quantized_bits(bits):
        raise ValueError("quantize_weights needs bits < 16 (16 means no weight quantization); pass e.g. bits=4.")
    method = method.lower()
    layers = _layers(model)
    if method == "rtn":
        out = {}
        for i, layer in enumerate(layers):
            for name, lin in decoder_linears(layer, f"model.layers.{i}").items():
                out[name] = quantize_weight_sym(lin.weight.detach(), bits, group_size, mse=mse)
        return out
    if method != "gptq":
        raise ValueError(f"weight_method={method!r} is unknown; pass 'rtn' or 'gptq'.")
    if calibration is None:
        raise ValueError("GPTQ needs calibration windows (LongTensor [n, length]); e.g. "
                         "vramlab.quarot.quant.calibration_windows(tokenizer) - they must not overlap the "
                         "evaluation windows")
    from tqdm.auto import tqdm

    work = copy.deepcopy(model)  # quantized layer by layer; the caller's model is untouched
    work_layers = _layers(work)
    captured = _first_layer_inputs(work, calibration, batch_size)
    hidden = [h for h, _ in captured]
    kwargs = [kw for _, kw in captured]
    out: dict[str, torch.Tensor] = {}
    bar = tqdm(total=len(work_layers), desc=f"GPTQ W{bits}" + (f" g{group_size}" if group_size else ""),
               disable=not progress)
    with torch.inference_mode():
        for i, layer in enumerate(work_layers):
            lins = decoder_linears(layer, f"model.layers.{i}")
            hess = {n: torch.zeros(l.in_features, l.in_features, device=l.weight.device,
                                 dtype=_compute_dtype(l.weight.dtype))
                    for n, l in lins.items()}
            counts = dict.fromkeys(lins, 0)
            handles = []
            for n, lin in lins.items():
                def hook(_mod, args, _out, n=n):
                    x = _compute(args[0].detach()).reshape(-1, args[0].shape[-1])
                    t = x.shape[0]
                    total = counts[n] + t
                    hess[n].mul_(counts[n] / total)
                    x = x * math.sqrt(2 / total)
                    hess[n].addmm_(x.t(), x)
                    counts[n] = total
                handles.append(lin.register_forward_hook(hook))
            for h, kw in zip(hidden, kwargs):
                _run_layer(layer, h, kw)
            for handle in handles:
                handle.remove()
            for n, lin in lins.items():
                q = gptq_quantize_matrix(lin.weight.detach(), hess[n], bits, group_size=group_size, mse=mse,
                                         percdamp=percdamp, act_order=act_order)
                lin.weight.data.copy_(q)
                out[n] = q.detach().clone()
            del hess
            hidden = [_run_layer(layer, h, kw) for h, kw in zip(hidden, kwargs)]
            bar.update(1)
    bar.close()
    del work
    return out


def calibration_windows(tokenizer, n_windows: int = 16, length: int = WINDOW_LENGTH):
    """GPTQ calibration windows from the pydoc text that start after the 8 evaluation windows.

    ``token_windows(tokenizer, n_windows, length, offset=8 * 512)``: LongTensor ``[n_windows, length]``.
    """
    from vramlab.data import token_windows

    return token_windows(tokenizer, n_windows, length, offset=EVAL_WINDOWS * WINDOW_LENGTH)


# --------------------------------------------------------------------------------------------
# The whole model
# --------------------------------------------------------------------------------------------

def _enable_kv_hooks(model) -> None:
    """Switch ``model`` to the vramlab attention function that calls the K/V quantizer hooks."""
    from vramlab.quarot import attention

    attention.enable(model)


def quantize_model(model, w_bits: int | None = 16, a_bits: int | None = 16, kv_bits: int | None = 16,
                   weight_method: str = "rtn", calibration: torch.Tensor | None = None,
                   group_size: int | None = None, act_clip: float = 0.9, w_clip: bool = True,
                   kv_group_size: int | None = None, kv_clip: float = 0.95,
                   weights: dict[str, torch.Tensor] | None = None, progress: bool = True):
    """A fake-quantized deep copy of a Llama-style model (``model`` itself is not modified).

    * ``w_bits``: weights of every decoder linear (q/k/v/o, gate/up/down; for a rotated model the
      Linear inside ``down_proj``), symmetric, per output channel or per ``group_size`` input columns,
      MSE clip search when ``w_clip``; ``weight_method`` ``"rtn"`` or ``"gptq"`` (needs
      ``calibration``, LongTensor ``[n, length]``, see :func:`calibration_windows`). ``weights`` may
      pass precomputed de-quantized weights (from :func:`quantize_weights`) to reuse a GPTQ run.
    * ``a_bits``: the input of each of those linears, per token symmetric with clip ``act_clip``.
    * ``kv_bits``: K (after RoPE and any online Q/K transform) and V, asymmetric, groups of
      ``kv_group_size`` (default head_dim) with clip ``kv_clip``, through ``vramlab.quarot.attention``.
    * ``lm_head`` and its input, the embeddings and the norms stay in float.

    Bits of ``16`` or ``None`` mean "not quantized". Runs on whatever device the model is on.
    """
    _clip(act_clip, "act_clip")
    _clip(kv_clip, "kv_clip")
    _group(group_size)
    _group(kv_group_size, "kv_group_size")
    layers = _layers(model)  # one clear sentence for something that is not a Llama-style model
    new = copy.deepcopy(model)
    layers = _layers(new)
    qw = is_quantized_bits(w_bits)
    if qw and weights is None:
        weights = quantize_weights(model, w_bits, weight_method, calibration=calibration, group_size=group_size,
                                   mse=w_clip, progress=progress)
    desc = ""
    if qw:
        desc = f"{weight_method}, " + (f"group {group_size}" if group_size else "per-channel")
    for i, layer in enumerate(layers):
        for name, lin in decoder_linears(layer, f"model.layers.{i}").items():
            w = weights[name] if qw else lin.weight.detach()
            actq = ActQuantizer(a_bits, act_clip) if is_quantized_bits(a_bits) else None
            _set_submodule(new, name, QuantLinear(lin, w, actq, w_bits if qw else None, desc))
    if is_quantized_bits(kv_bits):
        head_dim = getattr(new.config, "head_dim", None) or new.config.hidden_size // new.config.num_attention_heads
        g = kv_group_size or head_dim
        for layer in layers:
            attn = layer.self_attn
            attn.vramlab_k_quantizer = KVQuantizer(kv_bits, g, kv_clip)
            attn.vramlab_v_quantizer = KVQuantizer(kv_bits, g, kv_clip)
        _enable_kv_hooks(new)
    new.vramlab_quant = {"w_bits": w_bits if qw else 16, "a_bits": a_bits if is_quantized_bits(a_bits) else 16,
                         "kv_bits": kv_bits if is_quantized_bits(kv_bits) else 16,
                         "weight_method": weight_method if qw else None, "group_size": group_size if qw else None,
                         "act_clip": act_clip, "w_clip": w_clip, "kv_clip": kv_clip}
    return new


# --------------------------------------------------------------------------------------------
# Looking at real activations (used by notebook 02)
# --------------------------------------------------------------------------------------------

def capture_inputs(model, input_ids: torch.Tensor, names: list[str]) -> dict[str, torch.Tensor]:
    """The input of each named submodule for one forward pass, as float32 ``[tokens, features]`` on CPU.

    ``input_ids``: LongTensor ``[batch, seq]`` (or ``[seq]``). ``names`` are qualified module names,
    e.g. ``"model.layers.29.mlp.down_proj"`` (for a rotated model use ``"...down_proj.1"`` to get the
    post-Hadamard input of the inner Linear).
    """
    _tensor(input_ids, "input_ids", what=" of token ids [batch, seq]")
    if input_ids.dim() == 1:
        input_ids = input_ids.unsqueeze(0)
    if isinstance(names, str):
        names = [names]
    got: dict[str, torch.Tensor] = {}
    handles = []
    for name in names:
        try:
            module = model.get_submodule(name)
        except AttributeError:
            raise ValueError(f"{type(model).__name__} has no submodule {name!r}; use a qualified name such as "
                             f"'model.layers.0.mlp.down_proj' (see [n for n, _ in model.named_modules()]).") from None

        def hook(_m, args, name=name):
            got[name] = args[0].detach().float().reshape(-1, args[0].shape[-1]).cpu()

        handles.append(module.register_forward_pre_hook(hook))
    try:
        with torch.inference_mode():
            model(input_ids=input_ids.to(next(model.parameters()).device), use_cache=False)
    finally:
        for h in handles:
            h.remove()
    return got


def hessian_from_inputs(x: torch.Tensor) -> torch.Tensor:
    """GPTQ's proxy Hessian ``2/N X^T X`` for inputs ``x [N, in]`` (float32; float64 for a float64 ``x``)."""
    _tensor(x, "x", what=" of layer inputs [N, in]")
    if x.dim() < 2 or x.numel() == 0:
        raise ValueError(f"x must be [N, in] with at least one token (got shape {tuple(x.shape)}).")
    x = _compute(x).reshape(-1, x.shape[-1])
    return 2 * x.T @ x / x.shape[0]


def outlier_stats(x: torch.Tensor) -> dict[str, float]:
    """How outlier-heavy an activation ``x [tokens, features]`` is.

    ``kurtosis``: mean over tokens of each token's kurtosis ``E[(x-m)^4] / Var^2`` over its features
    (a Gaussian gives 3); ``max_over_rms``: median over tokens of ``max|x| / RMS(x)`` (at most
    ``sqrt(features)``; a Gaussian gives about 3.6 at 576 features); ``max_over_rms_max``: its largest
    value over tokens.
    """
    _tensor(x, "x", what=" of activations [tokens, features]")
    if x.dim() < 1 or x.numel() == 0 or x.shape[-1] < 2:
        raise ValueError(f"x must be [tokens, features] with at least 2 features (got shape {tuple(x.shape)}).")
    x = x.double().reshape(-1, x.shape[-1])
    centred = x - x.mean(-1, keepdim=True)
    var = centred.pow(2).mean(-1)
    kurt = centred.pow(4).mean(-1) / var.pow(2).clamp_min(1e-30)
    ratio = x.abs().amax(-1) / x.pow(2).mean(-1).sqrt().clamp_min(1e-30)
    return {"kurtosis": kurt.mean().item(), "max_over_rms": ratio.median().item(),
            "max_over_rms_max": ratio.max().item()}


def per_token_relative_error(x: torch.Tensor, bits: int, clip_ratio: float = 1.0) -> torch.Tensor:
    """``||x_t - Q(x_t)|| / ||x_t||`` for each token of ``x [tokens, features]`` (per-token symmetric Q)."""
    xf = x.float()
    err = (quantize_per_token_sym(xf, bits, clip_ratio) - xf).norm(dim=-1)
    return err / xf.norm(dim=-1).clamp_min(1e-12)


# --------------------------------------------------------------------------------------------
# The cached benchmark table (benchmarks/rotation.py -> vramlab/results/quarot_table.json)
# --------------------------------------------------------------------------------------------

# The files whose code produces the table's numbers: a change to any of them means the table must be
# regenerated (tests/test_quarot_results.py and `python benchmarks/rotation.py --check` compare).
# The benchmark's own settings (clip ratios, windows, seeds) are recorded in the table and used by the
# live test, so benchmarks/rotation.py (not part of the installed package) is not hashed.
FINGERPRINT_FILES = ("quarot/quant.py", "quarot/rotate.py", "quarot/hadamard.py", "quarot/attention.py", "eval.py", "data.py",
                     "models.py", "texts/pydoc_topics_3.11.7.txt.gz")
TABLE_SETTINGS = ("FP32", "W8A8", "W4A16", "W16A4", "W4A4", "W4A4KV4")
TABLE_ROTATIONS = ("none", "random", "hadamard")
TABLE_WEIGHTS = ("rtn", "gptq")
_TABLE_STATS = ("ppl_median", "ppl_min", "ppl_max")


def code_fingerprint() -> dict:
    """SHA-256 of the source files that produce the QuaRot table (:data:`FINGERPRINT_FILES`).

    Returns ``{"sha256": <combined hex digest>, "files": {relative path: hex digest}}``. Line endings
    of ``.py`` files are normalised to ``\\n`` (a Windows checkout hashes the same).
    """
    import hashlib
    from importlib import resources

    root = resources.files("vramlab")
    files = {}
    for rel in FINGERPRINT_FILES:
        node = root
        for part in rel.split("/"):
            node = node / part
        data = node.read_bytes()
        if rel.endswith(".py"):
            data = data.replace(b"\r\n", b"\n")
        files[rel] = hashlib.sha256(data).hexdigest()
    combined = hashlib.sha256("".join(f"{k}:{v}\n" for k, v in files.items()).encode()).hexdigest()
    return {"sha256": combined, "files": files}


def table_fingerprint_problems(table: dict) -> list[str]:
    """What makes ``table`` not the output of the current code (empty list: it is).

    Compares the table's ``code_fingerprint`` with :func:`code_fingerprint` file by file, and reports
    a table that is marked incomplete or was written from a tree with uncommitted changes.
    """
    problems = []
    stored = table.get("code_fingerprint")
    if not isinstance(stored, dict) or "files" not in stored:
        return ["the table has no code fingerprint: it predates fingerprinting; regenerate it with "
                "python benchmarks/rotation.py"]
    now = code_fingerprint()
    for rel, digest in now["files"].items():
        if stored["files"].get(rel) != digest:
            problems.append(f"{rel} changed since the table was computed; regenerate it with "
                            f"python benchmarks/rotation.py")
    if not table.get("complete"):
        problems.append("the table is partial (complete: false): the run did not finish")
    if table.get("dirty"):
        problems.append(f"the table was written from a tree with uncommitted changes ({table['dirty']})")
    return problems


def load_quarot_table(path=None) -> dict:
    """The perplexity table written by ``benchmarks/rotation.py`` (a dict; see its ``command``,
    ``date``, ``versions``, ``settings``, ``code_fingerprint``, ``rows`` and per-setting ``summary``
    medians). Raises FileNotFoundError / ValueError (one sentence naming the file) when the file is
    missing, is not JSON or is not such a table."""
    import json
    from importlib import resources
    from pathlib import Path

    if path is None:
        resource = resources.files("vramlab") / "results" / "quarot_table.json"
        name = "vramlab/results/quarot_table.json"
    else:
        if not isinstance(path, (str, Path)):
            raise TypeError(f"path must be a file path (str or pathlib.Path), not {type(path).__name__}.")
        resource = Path(path)
        name = str(path)
    try:
        text = resource.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FileNotFoundError(f"No QuaRot table at {name}; write one with python benchmarks/rotation.py "
                                f"or pass the path of an existing quarot_table.json.") from None
    except (IsADirectoryError, UnicodeDecodeError) as exc:
        raise ValueError(f"{name} is not a readable JSON text file ({type(exc).__name__}).") from None
    try:
        table = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{name} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); "
                         f"regenerate it with python benchmarks/rotation.py or restore it from git.") from None
    if not isinstance(table, dict) or not isinstance(table.get("summary"), list) \
            or not isinstance(table.get("rows"), list):
        raise ValueError(f"{name} is JSON but not a QuaRot table (it needs 'rows' and 'summary' lists, as "
                         f"benchmarks/rotation.py writes).")
    return table


def table_ppl(table: dict, setting: str, rotation: str = "none", weights: str = "rtn",
              group_size: int | None = None, stat: str = "ppl_median") -> float | None:
    """Median (or ``ppl_min`` / ``ppl_max``) perplexity of one table entry.

    Rows without quantized weights (FP32, W16A4) are stored with ``weights="-"`` and are returned for
    any ``weights``. An unknown setting, rotation, weights method or stat raises ValueError naming the
    valid ones; a valid combination that this table did not measure returns None (e.g. group 128 with
    the random rotation, or a partial table).
    """
    if not isinstance(table, dict) or not isinstance(table.get("summary"), list):
        raise TypeError("table must be the dict from vramlab.quarot.quant.load_quarot_table().")
    for name, value, valid in (("setting", setting, TABLE_SETTINGS), ("rotation", rotation, TABLE_ROTATIONS),
                               ("weights", weights, TABLE_WEIGHTS + ("-",)), ("stat", stat, _TABLE_STATS)):
        if value not in valid:
            raise ValueError(f"{name}={value!r} is not in the QuaRot table; use one of "
                             f"{', '.join(map(repr, valid))}.")
    if group_size is not None and (isinstance(group_size, bool) or not isinstance(group_size, int)
                                   or group_size < 1):
        raise ValueError(f"group_size must be None (per output channel) or a positive integer such as 128 "
                         f"(got {group_size!r}).")
    for row in table["summary"]:
        if row["setting"] != setting or row["rotation"] != rotation or row.get("group_size") != group_size:
            continue
        if row["weights"] in (weights, "-"):
            return row[stat]
    return None


def format_table(table: dict, settings=TABLE_SETTINGS, rotations=TABLE_ROTATIONS) -> str:
    """The table's summary as aligned text: one line per (setting, weights), one column per rotation.

    Each cell is the median perplexity and, in brackets, the number of seeds measured; ``-`` where the
    combination was not measured. Group-wise weight rows (e.g. group 128) follow, one line each.
    """
    lines = [f"{'setting':9s} {'weights':7s} " + " ".join(f"{r:>17s}" for r in rotations)]
    for setting in settings:
        for weights in TABLE_WEIGHTS:
            if setting in ("FP32", "W16A4") and weights == "gptq":
                continue  # no quantized weights: one row
            cells = []
            for rot in rotations:
                row = next((r for r in table["summary"] if r["setting"] == setting and r["rotation"] == rot
                            and r["weights"] in (weights, "-") and r.get("group_size") is None), None)
                cells.append(f"{row['ppl_median']:9.2f} (n={row['n']})" if row else "-")
            label = "-" if setting in ("FP32", "W16A4") else weights
            lines.append(f"{setting:9s} {label:7s} " + " ".join(f"{c:>17s}" for c in cells))
    for r in table["summary"]:
        if r.get("group_size"):
            lines.append(f"{r['setting']:9s} {r['weights']:7s} group {r['group_size']}, {r['rotation']}: "
                         f"{r['ppl_median']:.2f} (n={r['n']})")
    return "\n".join(lines)
