"""Multi-head Latent Attention (MLA): a layer, its latent cache, and a GQA -> latent-KV conversion.

MLA (DeepSeek-V2, arXiv 2405.04434, section 2.1) caches per token and layer one compressed
latent ``c_KV`` (``kv_lora_rank`` = d_c elements) plus one RoPE key shared by all heads
(``qk_rope_head_dim`` = d_h^R elements) instead of per-head keys and values. Per-head keys and
values are re-created from the latent with ``kv_b_proj`` (= [W_UK; W_UV] per head).

Two ways to attend (both here, both exact):

* naive - expand per-head K/V from the cached latent every step, then ordinary attention; what
  transformers 5.x does (``DeepseekV3Attention.expand_kv`` in
  ``transformers/models/deepseek_v3/modeling_deepseek_v3.py``, release 5.24);
* absorbed - fold W_UK into the query (``q_nope @ W_UK`` per head) and score against the latent
  directly; apply W_UV after attention. Nothing per-head is materialised for the context. This
  follows DeepSeek-V3 ``inference/model.py`` (``MLA.forward``, ``attn_impl == "absorb"``:
  ``q_nope = einsum("bshd,hdc->bshc", q_nope, wkv_b[:, :qk_nope_head_dim])`` ...
  ``x = einsum("bshc,hdc->bshd", x, wkv_b[:, -v_head_dim:])``) and vLLM's MLA decode.

Shapes: ``B`` batch, ``T`` new tokens, ``S`` cached + new tokens, ``H`` query heads,
``d_c`` kv_lora_rank, ``d_r`` qk_rope_head_dim, ``d_n`` qk_nope_head_dim, ``d_v`` v_head_dim.

Numerics follow transformers 5.24 on purpose (so :meth:`MultiHeadLatentAttention.from_transformers`
agrees with it to 1e-9 in float64): the RMSNorms and the RoPE angles are computed in float32, as
``DeepseekV3RMSNorm`` and ``DeepseekV3RotaryEmbedding`` do, whatever the input dtype.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn


from vramlab.mla.cache import LatentCache
from vramlab.mla.config import MLAConfig, _fail


# --------------------------------------------------------------------------------------------
# The layer
# --------------------------------------------------------------------------------------------

class RMSNorm(nn.Module):
    """RMSNorm computed in float32 then cast back, as transformers' ``DeepseekV3RMSNorm``."""

    def __init__(self, width: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.variance_epsilon = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * x.to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleave: bool) -> torch.Tensor:
    """Rotate ``x [..., T, d_r]`` by per-position angles; ``cos``/``sin`` are ``[T, d_r / 2]``.

    ``interleave=True``: pairs are (x0, x1), (x2, x3), ... (DeepSeek's checkpoints) and the result
    is laid out [rotated evens ; rotated odds], exactly as transformers'
    ``apply_rotary_pos_emb_interleave`` (dot products are the same as DeepSeek's complex
    layout: q and k are permuted alike). ``False``: pairs are (x_i, x_{i + d_r/2}) (``rotate_half``).
    """
    if interleave:
        x1, x2 = x[..., 0::2], x[..., 1::2]
    else:
        half = x.shape[-1] // 2
        x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class MultiHeadLatentAttention(nn.Module):
    """One MLA layer with DeepSeek-V3 parameter names (so state dicts load from transformers).

    ``q_proj`` (or ``q_a_proj`` -> ``q_a_layernorm`` -> ``q_b_proj``): hidden -> H x (d_n + d_r);
    ``kv_a_proj_with_mqa``: hidden -> d_c + d_r; ``kv_a_layernorm`` on the latent; ``kv_b_proj``:
    d_c -> H x (d_n + d_v) (per head: rows [W_UK ; W_UV]); ``o_proj``: H x d_v -> hidden.
    """

    def __init__(self, config: Any, layer_idx: int = 0) -> None:
        super().__init__()
        cfg = self.config = MLAConfig.from_config(config)
        self.layer_idx = layer_idx
        h, bias = cfg.num_attention_heads, cfg.attention_bias
        if cfg.q_lora_rank is None:
            self.q_proj = nn.Linear(cfg.hidden_size, h * cfg.qk_head_dim, bias=False)
        else:
            self.q_a_proj = nn.Linear(cfg.hidden_size, cfg.q_lora_rank, bias=bias)
            self.q_a_layernorm = RMSNorm(cfg.q_lora_rank, cfg.rms_norm_eps)
            self.q_b_proj = nn.Linear(cfg.q_lora_rank, h * cfg.qk_head_dim, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(cfg.hidden_size, cfg.kv_lora_rank + cfg.qk_rope_head_dim, bias=bias)
        self.kv_a_layernorm = RMSNorm(cfg.kv_lora_rank, cfg.rms_norm_eps)
        self.kv_b_proj = nn.Linear(cfg.kv_lora_rank, h * (cfg.qk_nope_head_dim + cfg.v_head_dim), bias=False)
        self.o_proj = nn.Linear(h * cfg.v_head_dim, cfg.hidden_size, bias=bias)
        inv_freq, self.rope_attention_scaling = cfg.rope_inv_freq()
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.scaling = cfg.softmax_scale()

    # ---- pieces (public: the notebook's exercises use them) ----
    def rope_cos_sin(self, position_ids: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin ``[..., T, d_r / 2]`` for positions, computed in float32 as transformers does."""
        freqs = position_ids[..., None].float() * self.inv_freq.float()
        s = self.rope_attention_scaling
        return (freqs.cos() * s).to(dtype), (freqs.sin() * s).to(dtype)

    def queries(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Un-rotated ``(q_nope [B, H, T, d_n], q_rope [B, H, T, d_r])``."""
        cfg = self.config
        q = self.q_proj(x) if cfg.q_lora_rank is None else self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        q = q.view(*x.shape[:-1], cfg.num_attention_heads, cfg.qk_head_dim).transpose(1, 2)
        return q.split([cfg.qk_nope_head_dim, cfg.qk_rope_head_dim], dim=-1)

    def latent_and_rope_key(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """What gets cached, before RoPE: ``(normed c_KV [B, T, d_c], un-rotated k_rope [B, T, d_r])``."""
        c, k_rope = self.kv_a_proj_with_mqa(x).split([self.config.kv_lora_rank, self.config.qk_rope_head_dim], -1)
        return self.kv_a_layernorm(c), k_rope

    def w_uk_uv(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-head up-projections from ``kv_b_proj``: ``W_UK [H, d_n, d_c]`` and ``W_UV [H, d_v, d_c]``."""
        cfg = self.config
        w = self.kv_b_proj.weight.view(cfg.num_attention_heads, cfg.qk_nope_head_dim + cfg.v_head_dim,
                                       cfg.kv_lora_rank)
        return w[:, :cfg.qk_nope_head_dim], w[:, cfg.qk_nope_head_dim:]

    def expand_kv(self, c_kv: torch.Tensor, k_rope: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Naive path: per-head ``keys [B, H, S, d_n + d_r]`` and ``values [B, H, S, d_v]`` from the latent."""
        cfg = self.config
        b, s, _ = c_kv.shape
        kv = self.kv_b_proj(c_kv).view(b, s, cfg.num_attention_heads, -1).transpose(1, 2)
        k_nope, v = kv.split([cfg.qk_nope_head_dim, cfg.v_head_dim], dim=-1)
        k_r = k_rope[:, None].expand(b, cfg.num_attention_heads, s, cfg.qk_rope_head_dim)
        return torch.cat([k_nope, k_r], dim=-1), v

    def forward(self, hidden_states: torch.Tensor, position_ids: torch.Tensor | None = None,
                absorbed: bool = False, cache: LatentCache | None = None):
        """``hidden_states [B, T, hidden]`` -> output ``[B, T, hidden]`` (and the cache, when given).

        Positions default to ``past, past + 1, ...`` where ``past`` is the cache length. The new
        tokens attend causally to the cache and to each other.
        """
        cfg = self.config
        if not isinstance(hidden_states, torch.Tensor):
            raise TypeError(f"`hidden_states` must be a float tensor [batch, tokens, {cfg.hidden_size}] "
                            f"(got {type(hidden_states).__name__}).")
        if hidden_states.dim() != 3 or hidden_states.shape[-1] != cfg.hidden_size:
            raise _fail("hidden_states", f"must be [batch, tokens, {cfg.hidden_size}] (got {tuple(hidden_states.shape)})")
        if not hidden_states.is_floating_point():
            raise TypeError(f"`hidden_states` must be a floating-point tensor (got {hidden_states.dtype}); "
                            "embed token ids first, or call .float().")
        b, t, _ = hidden_states.shape
        if b == 0 or t == 0:
            raise _fail("hidden_states", f"holds no tokens (shape {tuple(hidden_states.shape)}); pass at least one")
        if cache is not None and not isinstance(cache, LatentCache):
            raise TypeError(f"`cache` must be a vramlab LatentCache or None (got {type(cache).__name__}).")
        if position_ids is not None and not isinstance(position_ids, torch.Tensor):
            raise TypeError(f"`position_ids` must be an integer tensor or None (got {type(position_ids).__name__}).")
        past = cache.get_seq_length(self.layer_idx) if cache is not None else 0
        if position_ids is None:
            position_ids = torch.arange(past, past + t, device=hidden_states.device)[None].expand(b, t)
        elif position_ids.dim() == 1 and position_ids.shape[0] == t:                # [T]: the same for every row
            position_ids = position_ids[None].expand(b, t)
        elif tuple(position_ids.shape) != (b, t):
            raise _fail("position_ids", f"must be [batch, tokens] = [{b}, {t}] or [{t}] "
                                        f"(got {tuple(position_ids.shape)})")
        cos, sin = self.rope_cos_sin(position_ids, hidden_states.dtype)          # [B, T, d_r/2]
        q_nope, q_rope = self.queries(hidden_states)                             # [B, H, T, *]
        q_rope = apply_rope(q_rope, cos[:, None], sin[:, None], cfg.rope_interleave)
        c_kv, k_rope = self.latent_and_rope_key(hidden_states)                   # [B, T, d_c], [B, T, d_r]
        k_rope = apply_rope(k_rope, cos, sin, cfg.rope_interleave)
        if cache is not None:
            c_kv, k_rope = cache.update(self.layer_idx, c_kv, k_rope)            # whole context [B, S, *]
            # a cache kept in another dtype (bf16 beside a float32 layer) is read back in the layer's dtype
            c_kv, k_rope = c_kv.to(hidden_states.dtype), k_rope.to(hidden_states.dtype)
        s = c_kv.shape[1]
        # query i (absolute index past + i) sees keys 0 .. past + i
        mask = torch.ones(t, s, dtype=torch.bool, device=hidden_states.device).tril(diagonal=s - t)
        if absorbed:
            out = self._absorbed(q_nope, q_rope, c_kv, k_rope, mask)
        else:
            out = self._naive(q_nope, q_rope, c_kv, k_rope, mask)
        out = self.o_proj(out.transpose(1, 2).reshape(b, t, -1))
        return (out, cache) if cache is not None else out

    def _naive(self, q_nope, q_rope, c_kv, k_rope, mask):
        keys, values = self.expand_kv(c_kv, k_rope)                              # [B, H, S, *]
        scores = torch.cat([q_nope, q_rope], dim=-1) @ keys.transpose(-1, -2) * self.scaling
        probs = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        return probs @ values                                                    # [B, H, T, d_v]

    def _absorbed(self, q_nope, q_rope, c_kv, k_rope, mask):
        # DeepSeek-V3 inference/model.py, attn_impl == "absorb": fold W_UK into the query ...
        w_uk, w_uv = self.w_uk_uv()
        q_latent = torch.einsum("bhtd,hdc->bhtc", q_nope, w_uk)                 # [B, H, T, d_c]
        scores = (torch.einsum("bhtc,bsc->bhts", q_latent, c_kv)
                  + torch.einsum("bhtr,bsr->bhts", q_rope, k_rope)) * self.scaling
        probs = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        # ... attend over the latent itself, then apply W_UV per head after attention.
        o_latent = torch.einsum("bhts,bsc->bhtc", probs, c_kv)                  # [B, H, T, d_c]
        return torch.einsum("bhtc,hvc->bhtv", o_latent, w_uv)                   # [B, H, T, d_v]

    @classmethod
    def from_transformers(cls, module: nn.Module) -> "MultiHeadLatentAttention":
        """The same layer, same weights and dtype, from a transformers ``DeepseekV3Attention``
        (or ``DeepseekV2``-style module with the same parameter names)."""
        if not hasattr(module, "kv_a_proj_with_mqa") or not hasattr(module, "config"):
            raise TypeError(f"`module` must be a transformers DeepseekV3Attention (got {type(module).__name__}).")
        mine = cls(module.config, layer_idx=getattr(module, "layer_idx", 0) or 0)
        ref = next(module.parameters())
        mine = mine.to(dtype=ref.dtype, device=ref.device)
        missing, unexpected = mine.load_state_dict(module.state_dict(), strict=False)
        if missing or unexpected:
            raise ValueError(f"`module` has parameters {unexpected} / lacks {missing}; not an MLA layer vramlab can copy.")
        if hasattr(module, "scaling") and not math.isclose(module.scaling, mine.scaling, rel_tol=1e-12):
            raise ValueError(f"`rope_parameters` give softmax scale {mine.scaling} here but {module.scaling} in transformers.")
        return mine


def decode(mla: MultiHeadLatentAttention, hidden_states: torch.Tensor, prefill: int, cache: LatentCache,
           absorbed: bool = False) -> torch.Tensor:
    """Prefill ``hidden_states[:, :prefill]`` in one call, then decode the rest one token at a time
    through ``cache``; returns the outputs concatenated ``[B, T, hidden]``."""
    outs = [mla(hidden_states[:, :prefill], absorbed=absorbed, cache=cache)[0]]
    for i in range(prefill, hidden_states.shape[1]):
        outs.append(mla(hidden_states[:, i:i + 1], absorbed=absorbed, cache=cache)[0])
    return torch.cat(outs, dim=1)


__all__ = ["RMSNorm", "apply_rope", "MultiHeadLatentAttention", "decode"]
