"""The converted SmolLM2's attention computed from its cached latent, with ``W_UV`` absorbed by a given function.

In a model converted by :func:`vramlab.mla.conversion.convert_to_latent_kv` (or inside
:func:`vramlab.mla.ranks.latent_ranks`) each layer caches ``c = A h`` (``r`` values per token) and re-creates
``k = RoPE(B_K c)`` and ``v = B_V c``. RoPE rotates every dimension of SmolLM2's keys, so ``B_K`` cannot fold
into the query (lab 05, section 2): the keys are re-created here. The values carry no rotation, so ``B_V``
folds through the attention weights: for each KV head ``g`` and its query heads, ``P · (C B_V,gᵀ) =
(P · C) · B_V,gᵀ``, with ``P [heads, T, S]`` the attention weights and ``C [S, r]`` the cached latents. That is
the regrouping of :func:`absorbed_scores` (``(q W) cᵀ`` instead of ``q (W c)ᵀ``) with ``P`` as the query,
``C`` as ``W`` and ``B_V,g`` as the rows it meets, so ``absorb(P, B_V,g, C)`` computes it without building
any per-head value of the context (the ``[S, d_v]`` tensor ``C B_V,gᵀ``).

:func:`latent_logits` runs a whole forward this way with ``absorb`` = the learner's function or
:func:`absorbed_scores`; :func:`vramlab.checks.check_absorbed_in_smollm2` compares its logits with the model's
own forward. Numerics follow transformers 5.24's ``eager_attention_forward`` (``models/llama/modeling_llama.py``):
scores scaled by ``head_dim ** -0.5``, softmax in float32, cast back. One causal window, no padding.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator

import torch
from torch import nn

from vramlab.mla.config import _fail


def absorbed_scores(q_nope: torch.Tensor, c_kv: torch.Tensor, w_uk: torch.Tensor) -> torch.Tensor:
    """Content scores ``q_nope · (W_UK c)`` for every head without a per-head key: ``(q_nope W_UK) c_kvᵀ``.

    ``q_nope [H, T, d_n]``, ``c_kv [S, d_c]``, ``w_uk [H, d_n, d_c]`` -> ``[H, T, S]`` (DeepSeek-V3
    ``inference/model.py``, ``attn_impl == "absorb"``: ``einsum("bshd,hdc->bshc", q_nope, wkv_b[:, :qk_nope])``)."""
    q_latent = torch.einsum("htd,hdc->htc", q_nope, w_uk)      # [H, T, d_c]: the query in latent space
    return q_latent @ c_kv.transpose(-1, -2)                     # [H, T, S]


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class LatentValueAttention(nn.Module):
    """A converted ``LlamaAttention`` computed from the latent ``c``; values through ``absorb`` (module docstring).

    Same forward signature and result as transformers' ``LlamaAttention`` (a window without cache or padding)."""

    def __init__(self, attn: nn.Module, absorb: Callable) -> None:
        super().__init__()
        latent = getattr(attn.k_proj, "latent", None)
        if latent is None:
            raise _fail("model", "is not converted to a latent cache; use vramlab.mla.latent_ranks(...) or "
                                 "convert_to_latent_kv(...) first")
        self.attn, self.latent, self.absorb = attn, latent, absorb

    def forward(self, hidden_states: torch.Tensor, position_embeddings=None, attention_mask=None, cache=None,
                **kwargs):
        if cache is not None and getattr(cache, "get_seq_length", lambda: 0)() > 0:
            raise _fail("cache", "must be empty: this attention runs one window from scratch (use_cache=False)")
        attn, lat = self.attn, self.latent
        b, t, _ = hidden_states.shape
        d = attn.head_dim
        n_kv = lat.up_k.out_features // d
        heads = attn.q_proj.out_features // d
        group = heads // n_kv
        cos, sin = position_embeddings                                   # [B, T, d]
        cos, sin = cos[:, None], sin[:, None]
        q = attn.q_proj(hidden_states).view(b, t, heads, d).transpose(1, 2)
        c = lat.down(hidden_states)                                      # [B, T, r]: the cached latent
        k = lat.up_k(c).view(b, t, n_kv, d).transpose(1, 2)              # keys re-created: RoPE blocks absorbing
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        k = k.repeat_interleave(group, dim=1)                            # [B, H, T, d]
        scores = (q @ k.transpose(-1, -2)) * attn.scaling
        causal = torch.ones(t, t, dtype=torch.bool, device=scores.device).tril()
        scores = scores.masked_fill(~causal, torch.finfo(scores.dtype).min)
        p = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)   # [B, H, T, S]
        w_v = lat.up_v.weight.view(n_kv, d, -1)                          # B_V per KV head: [n_kv, d_v, r]
        out = torch.empty(b, heads, t, d, dtype=q.dtype, device=q.device)
        for i in range(b):
            for g in range(n_kv):
                rows = slice(g * group, (g + 1) * group)
                weights = p[i, rows]                                     # [group, T, S]
                latents = c[i][None].expand(group, -1, -1)               # [group, S, r]: no copy
                out[i, rows] = self.absorb(weights, w_v[g], latents)     # (P C) B_V,gᵀ: [group, T, d_v]
        out = out.transpose(1, 2).reshape(b, t, heads * d)
        return attn.o_proj(out), p


@contextlib.contextmanager
def absorbed_values(model, absorb: Callable) -> Iterator[nn.Module]:
    """Inside the block, every layer of the converted ``model`` attends through :class:`LatentValueAttention` with
    ``absorb``; afterwards the original attention modules are back, also when the block raises."""
    layers = model.model.layers
    saved = []
    try:
        for layer in layers:
            saved.append((layer, layer.self_attn))
            layer.self_attn = LatentValueAttention(layer.self_attn, absorb)
        yield model
    finally:
        for layer, attn in saved:
            layer.self_attn = attn


def latent_logits(model, input_ids: torch.Tensor, absorb: Callable = absorbed_scores) -> torch.Tensor:
    """Logits ``[B, T, vocab]`` of the converted ``model`` on ``input_ids [B, T]`` computed from the cached
    latents, with ``W_UV`` absorbed by ``absorb(weights [g, T, S], w_v [d_v, r], latents [g, S, r])``."""
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2:
        raise _fail("input_ids", "must be a LongTensor [batch, tokens], e.g. one window: windows[:1]")
    with torch.inference_mode(), absorbed_values(model, absorb):
        return model(input_ids=input_ids, use_cache=False).logits


__all__ = ["absorbed_scores", "LatentValueAttention", "absorbed_values", "latent_logits"]
