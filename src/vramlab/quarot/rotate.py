"""QuaRot's rotations for a LLaMA-style HF model (computational invariance).

:func:`rotate_model` returns a **rotated copy** by default (``inplace=False``: the original model is
deep-copied first and left untouched, so a notebook can compare both). It computes exactly the same
function as the original (FP32 logits to ~1e-4) but its activations have no outlier channels, which
is what makes 4-bit per-token activation quantization work. Steps (QuaRot ``rotation_utils.py``):

1. **Untie** ``lm_head`` from ``embed_tokens`` (clone the weight): the embedding is rotated on its
   output side, ``lm_head`` on its input side, and a shared tensor would be rotated twice.
2. **Fold every RMSNorm scale** into the linears that read the normed activation
   (``input_layernorm`` → q,k,v; ``post_attention_layernorm`` → gate,up; ``model.norm`` → lm_head),
   ``W ← W diag(γ)``, and set the norm weights to 1. RMSNorm without a scale commutes with any
   orthogonal ``Q``: ``rms(xQ) = rms(x)``. (No mean subtraction: this is RMSNorm, not LayerNorm.)
3. **Rotate the residual stream** with an orthogonal ``Q`` (hidden x hidden): ``E ← E Q``;
   readers ``W ← W Q`` (q,k,v,gate,up,lm_head); writers ``W ← Qᵀ W`` (o_proj, down_proj).
4. **Online Hadamard before down_proj**: ``W_down ← W_down H`` (exact, normalised Hadamard of the
   intermediate size, 1536 = 12·128) and ``mlp.down_proj`` becomes
   ``nn.Sequential(OnlineHadamard(1536), nn.Linear)``. The inner ``nn.Linear`` (``down_proj[1]``)
   therefore sees the *post-Hadamard* activation — that is the tensor an activation quantizer must
   quantize; replace ``down_proj[1]`` (not ``down_proj``) with a quantized linear.
5. **Head-wise Hadamard on V/O** (offline, 64x64 per head): ``v_proj`` outputs ``v H`` per head and
   ``o_proj`` reads ``z blockdiag(H)``. 9 heads have no Hadamard order, so QuaRot's cross-head online
   Hadamard before ``o_proj`` is not possible here (SpinQuant's head-wise choice instead).
6. **Head-wise Hadamard on Q/K after RoPE** (online): ``self_attn.vramlab_qk_transform`` is set to a
   :class:`HeadwiseHadamard` and the model is switched to :mod:`vramlab.quarot.attention` (``"vramlab"``), so
   the keys (KV cache) a quantizer sees are rotated; ``q Hᵀ (k H)ᵀ`` is unchanged.

All fusing is done in float64, then cast back to each weight's dtype/device.

``rotation="none"`` still does steps 1-2 (untie + fold) and gives ``down_proj`` the same
``nn.Sequential(nn.Identity(), nn.Linear)`` structure, so a quantizer comparison "rotated vs not"
differs only by the rotations. ``"hadamard"`` uses a randomized Hadamard residual rotation
(``diag(s) H / sqrt(n)``, seeded), ``"random"`` a Haar-random orthogonal matrix.
"""

from __future__ import annotations

import copy
import math

import torch
from torch import nn

from vramlab.quarot import hadamard as _had

ROTATIONS = ("hadamard", "random", "none")


def _fwht_keep_dtype(x):
    """fwht in float32 for half-precision inputs (as QuaRot does), result in the input dtype."""
    dtype = x.dtype
    y = _had.fwht(x.float() if dtype in (torch.float16, torch.bfloat16) else x)
    return y.to(dtype)


class OnlineHadamard(nn.Module):
    """``x -> x @ hadamard_matrix(n) / sqrt(n)`` over the last dim via :func:`vramlab.quarot.hadamard.fwht`.

    Computed in float32 at least (as QuaRot does), returned in the input dtype.
    """

    def __init__(self, n: int):
        super().__init__()
        _had.decompose(n)  # raises early for unsupported orders
        self.n = n

    def forward(self, x):
        return _fwht_keep_dtype(x)

    def extra_repr(self) -> str:
        return f"n={self.n}"


class HeadwiseHadamard(nn.Module):
    """Post-RoPE Q/K hook: ``(q, k) -> (q H, k H)`` with the normalised Hadamard of ``head_dim``.

    Set as ``attention_module.vramlab_qk_transform`` (see :mod:`vramlab.quarot.attention`).
    """

    def __init__(self, head_dim: int):
        super().__init__()
        _had.decompose(head_dim)
        self.head_dim = head_dim

    def forward(self, q, k):
        return _fwht_keep_dtype(q), _fwht_keep_dtype(k)

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}"


# --------------------------------------------------------------------------- small helpers
def fold_rmsnorm_into_linear(norm_weight, linear_weight):
    """``W diag(γ)``: the linear weight ``[out, in]`` that absorbs an RMSNorm scale ``γ`` ``[in]``.

    ``linear(rmsnorm(x) * γ) == linear'(rmsnorm(x))`` with ``linear'.weight = W * γ[None, :]``.
    Computed in float64, returned in ``linear_weight``'s dtype.
    """
    return _fold_rmsnorm_f64(norm_weight, linear_weight).to(linear_weight.dtype)


def _fold_rmsnorm_f64(norm_weight, linear_weight):
    """``W diag(γ)`` in float64 (what :func:`rotate_model` fuses further before casting back)."""
    for name, t in (("norm_weight", norm_weight), ("linear_weight", linear_weight)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor (got {type(t).__name__}).")
    if linear_weight.dim() != 2 or norm_weight.dim() != 1 or norm_weight.shape[0] != linear_weight.shape[1]:
        raise ValueError(f"norm_weight [in] must match linear_weight [out, in] (got {tuple(norm_weight.shape)} "
                         f"and {tuple(linear_weight.shape)}).")
    W = linear_weight.detach().double()
    return W * norm_weight.detach().double().to(W.device)[None, :]


def rotation_matrix(n: int, rotation: str = "hadamard", seed: int = 0):
    """The float64 orthogonal ``n x n`` matrix for ``rotation`` ("hadamard" | "random" | "none")."""
    if rotation == "hadamard":
        return _had.random_hadamard(n, seed)
    if rotation == "random":
        return _had.random_orthogonal(n, seed)
    if rotation == "none":
        return torch.eye(n, dtype=torch.float64)
    raise ValueError(f"rotation must be one of {ROTATIONS}, not {rotation!r}.")


def _set_weight(linear: nn.Linear, W64) -> None:
    w = linear.weight
    linear.weight = nn.Parameter(W64.to(dtype=w.dtype, device=w.device), requires_grad=w.requires_grad)


def _layers(model):
    return model.model.layers


def down_linear(mlp) -> nn.Linear:
    """The ``nn.Linear`` of ``mlp.down_proj``: itself, or the last module of the
    ``Sequential(OnlineHadamard | Identity, Linear)`` that :func:`rotate_model` builds."""
    d = mlp.down_proj
    return d[-1] if isinstance(d, nn.Sequential) else d


def untie_lm_head(model) -> None:
    """Give ``lm_head`` its own copy of the weight (no-op when already untied)."""
    emb = model.get_input_embeddings().weight
    head = model.lm_head
    if head.weight is emb or head.weight.data_ptr() == emb.data_ptr():
        head.weight = nn.Parameter(emb.detach().clone(), requires_grad=emb.requires_grad)
    model.config.tie_word_embeddings = False
    text_config = getattr(model.config, "get_text_config", lambda: None)()
    if text_config is not None:
        text_config.tie_word_embeddings = False


class _Rotation:
    """An orthogonal map R applied to weights in float64: ``right(W) = W @ R``, ``left_t(W) = Rᵀ W``.

    A dense matrix, or a (signed, optionally block-diagonal) normalised Hadamard applied with
    :func:`vramlab.quarot.hadamard.fwht` (``O(n log n)``, the same numbers as the dense product).
    """

    def __init__(self, dense=None, hadamard_n: int | None = None, signs=None, blocks: int = 1):
        self.dense, self.n, self.signs, self.blocks = dense, hadamard_n, signs, blocks

    def right(self, W):
        if self.dense is not None:
            return W @ self.dense.to(W.device)
        if self.signs is not None:
            W = W * self.signs.to(W.device)
        shape = W.shape
        return _had.fwht(W.reshape(*shape[:-1], self.blocks, self.n)).reshape(shape)

    def left_t(self, W):
        return self.right(W.T).T.contiguous()


def rotate_model(model, rotation: str = "hadamard", seed: int = 0, inplace: bool = False,
                 online_hadamard: bool = True, qk_hadamard: bool = True, vo_hadamard: bool = True):
    """QuaRot-rotate a LLaMA-style causal LM; returns the rotated model (a copy unless ``inplace``).

    ``rotation``: ``"hadamard"`` (randomized Hadamard, seeded), ``"random"`` (random orthogonal,
    seeded) or ``"none"`` (only untie + fold norms; no rotation, no online transforms — down_proj
    still becomes ``Sequential(Identity, Linear)``). ``online_hadamard`` / ``qk_hadamard`` /
    ``vo_hadamard`` switch off single steps (for teaching and ablations); with ``rotation="none"``
    they are ignored. See the module docstring for every step. Each weight goes through fold and
    rotations in float64 and is cast back to its dtype once.

    After the call ``model.vramlab_rotation`` records what was done (a dict).
    """
    if rotation not in ROTATIONS:
        raise ValueError(f"rotation must be one of {ROTATIONS}, not {rotation!r}.")
    if not isinstance(model, nn.Module) or not hasattr(getattr(model, "config", None), "hidden_size"):
        raise TypeError(f"model must be a Llama-style causal LM such as load_smollm2()'s model "
                        f"(got {type(model).__name__}).")
    if not inplace:
        model = copy.deepcopy(model)
    cfg = model.config
    hidden = cfg.hidden_size
    heads = cfg.num_attention_heads
    kv_heads = getattr(cfg, "num_key_value_heads", None) or heads
    head_dim = getattr(cfg, "head_dim", None) or hidden // heads
    inter = cfg.intermediate_size
    rotated = rotation != "none"

    Q = None
    if rotation == "hadamard":
        Q = _Rotation(hadamard_n=hidden, signs=_had.random_signs(hidden, seed))
    elif rotation == "random":
        Q = _Rotation(dense=_had.random_orthogonal(hidden, seed))
    Hd = _Rotation(hadamard_n=inter) if (rotated and online_hadamard) else None
    Hv = _Rotation(hadamard_n=head_dim, blocks=kv_heads) if (rotated and vo_hadamard) else None
    Ho = _Rotation(hadamard_n=head_dim, blocks=heads) if (rotated and vo_hadamard) else None

    def reader(lin, gamma):  # a linear reading the (normed) residual stream: W diag(γ) Q
        W = _fold_rmsnorm_f64(gamma, lin.weight)
        return Q.right(W) if Q is not None else W

    with torch.no_grad():
        untie_lm_head(model)
        emb = model.get_input_embeddings()
        if Q is not None:
            emb.weight.data = Q.right(emb.weight.detach().double()).to(emb.weight.dtype)
        final_norm = model.model.norm
        _set_weight(model.lm_head, reader(model.lm_head, final_norm.weight))
        final_norm.weight.fill_(1.0)

        for layer in _layers(model):
            attn, mlp = layer.self_attn, layer.mlp
            down = down_linear(mlp)
            for norm, linears in ((layer.input_layernorm, (attn.q_proj, attn.k_proj, attn.v_proj)),
                                  (layer.post_attention_layernorm, (mlp.gate_proj, mlp.up_proj))):
                for lin in linears:
                    W = reader(lin, norm.weight)
                    if lin is attn.v_proj and Hv is not None:  # v per head -> v H (output side)
                        W = Hv.left_t(W)
                        if lin.bias is not None:
                            lin.bias.data = Hv.right(lin.bias.detach().double()).to(lin.bias.dtype)
                    _set_weight(lin, W)
                norm.weight.fill_(1.0)
            # writers of the residual stream: Qᵀ W on the output side, Hadamards on the input side
            Wo = attn.o_proj.weight.detach().double()
            if Ho is not None:
                Wo = Ho.right(Wo)
            Wd = down.weight.detach().double()
            if Hd is not None:
                Wd = Hd.right(Wd)
            for lin, W in ((attn.o_proj, Wo), (down, Wd)):
                if Q is not None:
                    W = Q.left_t(W)
                    if lin.bias is not None:
                        lin.bias.data = Q.right(lin.bias.detach().double()).to(lin.bias.dtype)
                _set_weight(lin, W)
            if not isinstance(mlp.down_proj, nn.Sequential):
                first = OnlineHadamard(inter) if Hd is not None else nn.Identity()
                mlp.down_proj = nn.Sequential(first, down)
            if rotated and qk_hadamard:
                attn.vramlab_qk_transform = HeadwiseHadamard(head_dim)

    if rotated and qk_hadamard:
        from vramlab.quarot import attention

        attention.enable(model)
    model.vramlab_rotation = {"rotation": rotation, "seed": seed, "online_hadamard": Hd is not None,
                              "qk_hadamard": bool(rotated and qk_hadamard), "vo_hadamard": Hv is not None}
    return model


# --------------------------------------------------------------------------- invariance check
def check_invariance(a, b, windows) -> dict:
    """Run both models on the same windows; compare logits and perplexity.

    Returns ``dict(max_abs_logit_diff, ppl_a, ppl_b, rel_ppl_diff)`` where ``rel_ppl_diff =
    |ppl_b - ppl_a| / ppl_a``. One window at a time, no cache.
    """
    import torch.nn.functional as F

    from vramlab.eval import _check_windows

    _check_windows(windows)
    dev_a = next(a.parameters()).device
    dev_b = next(b.parameters()).device
    max_diff, nll_a, nll_b, count = 0.0, 0.0, 0.0, 0
    with torch.inference_mode():
        for row in windows:
            ids = row.unsqueeze(0)
            la = a(input_ids=ids.to(dev_a), use_cache=False).logits[0].float()
            lb = b(input_ids=ids.to(dev_b), use_cache=False).logits[0].float().to(la.device)
            max_diff = max(max_diff, (la - lb).abs().max().item())
            target = ids[0, 1:].to(la.device)
            nll_a += F.cross_entropy(la[:-1], target, reduction="sum").item()
            nll_b += F.cross_entropy(lb[:-1], target, reduction="sum").item()
            count += ids.shape[1] - 1
    ppl_a, ppl_b = math.exp(nll_a / count), math.exp(nll_b / count)
    return {"max_abs_logit_diff": max_diff, "ppl_a": ppl_a, "ppl_b": ppl_b,
            "rel_ppl_diff": abs(ppl_b - ppl_a) / ppl_a}


__all__ = ["ROTATIONS", "OnlineHadamard", "HeadwiseHadamard", "fold_rmsnorm_into_linear", "rotation_matrix",
           "down_linear", "untie_lm_head", "rotate_model", "check_invariance"]
