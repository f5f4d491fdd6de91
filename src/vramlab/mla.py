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

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from vramlab import kvcache

# FlashMLA's paged KV cache has a block size of 64 (deepseek-ai/FlashMLA README, first release:
# "Paged kvcache with block size of 64"), so vLLM forces it for MLA models on that backend:
# vllm/platforms/cuda.py ``check_and_update_config`` sets ``cache_config.block_size = 64`` and logs
# "Forcing kv cache block size to 64 for FlashMLA backend." (seen as ``[cuda.py:160]`` in v0.8.3
# start-up logs; current source does it when ``block_size % 64 != 0``).
MLA_BLOCK_SIZE = 64

RESULTS_DIR = Path(__file__).resolve().parent / "results"
CONVERSION_RESULTS = RESULTS_DIR / "mla_conversion.json"


def _fail(field: str, problem: str) -> ValueError:
    return ValueError(f"`{field}` {problem}.")


# --------------------------------------------------------------------------------------------
# Config
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class MLAConfig:
    """The geometry of one MLA layer (the fields of a DeepSeek-V2/V3 ``config.json``)."""

    hidden_size: int
    num_attention_heads: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    q_lora_rank: int | None = None
    rope_theta: float = 10000.0
    rope_interleave: bool = True
    rope_scaling: dict | None = None          # transformers' rope_parameters when not "default"
    rms_norm_eps: float = 1e-6
    attention_bias: bool = False
    max_position_embeddings: int = 4096

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def latent_width(self) -> int:
        """Elements cached per token and layer: d_c + d_r (576 for DeepSeek-V2/V3)."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    @classmethod
    def from_config(cls, config: Any) -> "MLAConfig":
        """Read and validate a DeepSeek-style config (dict, JSON path, bundled name or PretrainedConfig).

        Raises one ``ValueError`` naming the field for a bad geometry: a missing or non-positive
        size, an odd ``qk_rope_head_dim`` or one larger than ``head_dim``, or a LoRA rank larger
        than the projection it factorises.
        """
        if isinstance(config, MLAConfig):
            return config
        cfg = kvcache.load_config(config)

        def pos(key: str, value: Any = None) -> int:
            value = cfg.get(key) if value is None else value
            if value is None:
                raise _fail(key, "is missing from the config (an MLA layer needs it)")
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value) or value <= 0:
                raise _fail(key, f"must be a positive integer (got {value!r})")
            return int(value)

        hidden, heads = pos("hidden_size"), pos("num_attention_heads")
        rope = pos("qk_rope_head_dim")
        if rope % 2:
            raise _fail("qk_rope_head_dim", f"({rope}) must be even: RoPE rotates pairs of dimensions")
        if cfg.get("qk_nope_head_dim") is None and cfg.get("head_dim") is not None:
            head_dim = pos("head_dim")   # a plain config giving the full per-head query/key width
            if rope >= head_dim:
                raise _fail("qk_rope_head_dim", f"({rope}) must be smaller than head_dim ({head_dim}): "
                            "the rest of each head is its content (no-RoPE) part")
            nope = head_dim - rope
        else:
            nope = pos("qk_nope_head_dim")
        v_dim = pos("v_head_dim", cfg.get("v_head_dim") or nope)
        rank = pos("kv_lora_rank")
        kv_out = heads * (nope + v_dim)
        if rank > min(hidden, kv_out):
            raise _fail("kv_lora_rank", f"({rank}) is larger than the projection it compresses "
                        f"(hidden_size {hidden} -> num_attention_heads x (qk_nope_head_dim + v_head_dim) = "
                        f"{kv_out}); use at most {min(hidden, kv_out)}")
        q_rank = cfg.get("q_lora_rank")
        if q_rank is not None:
            q_rank = pos("q_lora_rank")
            q_out = heads * (nope + rope)
            if q_rank > min(hidden, q_out):
                raise _fail("q_lora_rank", f"({q_rank}) is larger than the projection it compresses "
                            f"(hidden_size {hidden} -> {q_out}); use at most {min(hidden, q_out)} or None")
        params = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
        theta = float(params.get("rope_theta") or cfg.get("rope_theta") or 10000.0)
        rope_type = params.get("rope_type", params.get("type", "default"))
        scaling = {k: v for k, v in params.items()} if rope_type != "default" else None
        return cls(hidden, heads, rank, nope, rope, v_dim, q_rank, theta,
                   bool(cfg.get("rope_interleave", True)), scaling, float(cfg.get("rms_norm_eps") or 1e-6),
                   bool(cfg.get("attention_bias", False)), int(cfg.get("max_position_embeddings") or 4096))

    def softmax_scale(self) -> float:
        """1/sqrt(d_n + d_r), times mscale^2 under YaRN with ``mscale_all_dim`` (as transformers'
        ``yarn_apply_mscale`` and DeepSeek-V3 ``inference/model.py`` ``MLA.__init__``)."""
        scale = self.qk_head_dim ** -0.5
        if self.rope_scaling and self.rope_scaling.get("mscale_all_dim"):
            factor = float(self.rope_scaling["factor"])
            if factor > 1:
                mscale = 0.1 * float(self.rope_scaling["mscale_all_dim"]) * math.log(factor) + 1.0
                scale = scale * mscale * mscale
        return scale

    def rope_inv_freq(self) -> tuple[torch.Tensor, float]:
        """(inverse frequencies [d_r / 2] in float32, cos/sin scale). Default RoPE is computed here;
        other types (YaRN) use transformers' own ``ROPE_INIT_FUNCTIONS``."""
        if not self.rope_scaling:
            dim = self.qk_rope_head_dim
            return 1.0 / (self.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.float) / dim)), 1.0
        from transformers import DeepseekV3Config
        from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

        params = {**self.rope_scaling, "rope_theta": self.rope_theta}
        hf = DeepseekV3Config(hidden_size=self.hidden_size, num_attention_heads=self.num_attention_heads,
                              qk_rope_head_dim=self.qk_rope_head_dim, qk_nope_head_dim=self.qk_nope_head_dim,
                              max_position_embeddings=self.max_position_embeddings, rope_parameters=params)
        inv_freq, attention_scaling = ROPE_INIT_FUNCTIONS[params.get("rope_type", params.get("type"))](hf)
        return inv_freq.float(), float(attention_scaling)


# --------------------------------------------------------------------------------------------
# Latent cache
# --------------------------------------------------------------------------------------------

class LatentCache:
    """The MLA KV cache: per token and layer one row of ``d_c + d_r`` values ([latent ; rope key]).

    ``paged=False`` keeps one growing tensor ``[B, S, d_c + d_r]`` per layer. ``paged=True`` keeps
    a pool of blocks ``[block_size, d_c + d_r]`` per layer and a block table per sequence (one
    table shared by all layers, as vLLM does), allocating a block when the last one is full.
    ``update`` stores new rows and returns the whole (gathered) context. Byte counts are of the
    storage actually held (a paged cache counts whole blocks).
    """

    def __init__(self, num_layers: int, kv_lora_rank: int, qk_rope_head_dim: int, *, paged: bool = False,
                 block_size: int = MLA_BLOCK_SIZE, dtype: torch.dtype = torch.float32) -> None:
        for name, value in (("num_layers", num_layers), ("kv_lora_rank", kv_lora_rank),
                            ("qk_rope_head_dim", qk_rope_head_dim), ("block_size", block_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise _fail(name, f"must be a positive integer (got {value!r})")
        self.num_layers, self.kv_lora_rank, self.qk_rope_head_dim = num_layers, kv_lora_rank, qk_rope_head_dim
        self.paged, self.block_size, self.dtype = paged, block_size, dtype
        self.width = kv_lora_rank + qk_rope_head_dim
        self._rows: list[torch.Tensor | None] = [None] * num_layers           # contiguous [B, S, width]
        self._pool: list[list[torch.Tensor]] = [[] for _ in range(num_layers)]  # paged: blocks [B, bs, width]
        self._lengths = [0] * num_layers

    @classmethod
    def for_config(cls, config: Any, num_layers: int | None = None, **kwargs) -> "LatentCache":
        """A cache sized for an MLA config (``num_hidden_layers`` layers unless given)."""
        mla = MLAConfig.from_config(config)
        if num_layers is None:
            num_layers = 1 if isinstance(config, MLAConfig) else \
                int(kvcache.load_config(config).get("num_hidden_layers") or 1)
        return cls(num_layers, mla.kv_lora_rank, mla.qk_rope_head_dim, **kwargs)

    def _layer(self, layer_idx: int) -> int:
        if not 0 <= layer_idx < self.num_layers:
            raise _fail("layer_idx", f"({layer_idx}) must be in 0..{self.num_layers - 1} for this cache")
        return layer_idx

    def get_seq_length(self, layer_idx: int = 0) -> int:
        """Tokens cached in a layer."""
        return self._lengths[self._layer(layer_idx)]

    def update(self, layer_idx: int, c_kv: torch.Tensor, k_rope: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append ``c_kv [B, T, d_c]`` (normed latent) and ``k_rope [B, T, d_r]`` (rotated shared key);
        return the whole context ``([B, S, d_c], [B, S, d_r])``."""
        layer = self._layer(layer_idx)
        if c_kv.shape[-1] != self.kv_lora_rank or k_rope.shape[-1] != self.qk_rope_head_dim:
            raise _fail("c_kv", f"has width {c_kv.shape[-1]} / k_rope {k_rope.shape[-1]}, but this cache holds "
                        f"kv_lora_rank {self.kv_lora_rank} + qk_rope_head_dim {self.qk_rope_head_dim}")
        new = torch.cat([c_kv, k_rope], dim=-1).to(self.dtype)
        if not self.paged:
            # one buffer per layer, grown by doubling, so a decode step copies one row, not the context
            old, length = self._rows[layer], self._lengths[layer]
            need = length + new.shape[1]
            if old is None or old.shape[1] < need:
                grown = new.new_zeros(new.shape[0], max(need, 2 * (0 if old is None else old.shape[1])), self.width)
                if old is not None:
                    grown[:, :length] = old[:, :length]
                self._rows[layer] = old = grown
            old[:, length:need] = new
        else:
            pool, pos = self._pool[layer], self._lengths[layer]
            b, t = new.shape[0], new.shape[1]
            done = 0
            while done < t:
                if pos % self.block_size == 0:
                    pool.append(new.new_zeros(b, self.block_size, self.width))
                offset = pos % self.block_size
                n = min(self.block_size - offset, t - done)
                pool[-1][:, offset:offset + n] = new[:, done:done + n]
                pos, done = pos + n, done + n
        self._lengths[layer] += new.shape[1]
        rows = self.rows(layer)
        return rows[..., :self.kv_lora_rank], rows[..., self.kv_lora_rank:]

    def crop(self, max_length: int) -> None:
        """Keep the first ``max_length`` tokens in every layer (as transformers' ``DynamicCache.crop``);
        freed paged blocks are returned."""
        if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 0:
            raise _fail("max_length", f"must be a non-negative integer (got {max_length!r})")
        for layer in range(self.num_layers):
            self._lengths[layer] = min(self._lengths[layer], max_length)
            if self.paged:
                del self._pool[layer][kvcache.cdiv(self._lengths[layer], self.block_size):]

    def rows(self, layer_idx: int = 0) -> torch.Tensor | None:
        """The cached rows of a layer, ``[B, S, d_c + d_r]`` (gathered from the blocks when paged); None when empty."""
        layer = self._layer(layer_idx)
        if not self.paged:
            rows = self._rows[layer]
            return None if rows is None else rows[:, :self._lengths[layer]]
        if not self._pool[layer]:
            return None
        return torch.cat(self._pool[layer], dim=1)[:, :self._lengths[layer]]

    def latent(self, layer_idx: int = 0) -> torch.Tensor:
        """The cached normed latents ``[B, S, d_c]``."""
        return self.rows(layer_idx)[..., :self.kv_lora_rank]

    def rope_key(self, layer_idx: int = 0) -> torch.Tensor:
        """The cached rotated shared keys ``[B, S, d_r]``."""
        return self.rows(layer_idx)[..., self.kv_lora_rank:]

    @property
    def blocks_used(self) -> int:
        """Blocks per layer per sequence in use (paged), or the blocks the same tokens would need."""
        return kvcache.cdiv(self.get_seq_length(0), self.block_size)

    @property
    def element_size(self) -> int:
        return torch.empty((), dtype=self.dtype).element_size()

    def nbytes(self) -> int:
        """Bytes of cache storage held, all layers and sequences (whole blocks when paged)."""
        total = 0
        for layer in range(self.num_layers):
            if self.paged:
                total += sum(block.numel() for block in self._pool[layer]) * self.element_size
            elif self._rows[layer] is not None:   # the tokens held (spare capacity not counted)
                rows = self._rows[layer]
                total += rows.shape[0] * self._lengths[layer] * self.width * self.element_size
        return total

    def bytes_per_token(self) -> int:
        """Latent-cache bytes per token (all layers): layers x (d_c + d_r) x element size."""
        return int(kvcache.kv_bytes_per_token(self._kv_config(1), kv_bits=8 * self.element_size))

    def per_head_cache_bytes(self, num_heads: int, qk_nope_head_dim: int, v_head_dim: int,
                             batch_size: int = 1) -> int:
        """Bytes a per-head K/V cache (what MHA would store) needs for the same tokens and dtype."""
        per_token = kvcache.mla_expanded_kv_bytes_per_token(
            self._kv_config(num_heads, qk_nope_head_dim, v_head_dim), kv_bits=8 * self.element_size)
        return int(per_token * self.get_seq_length(0) * batch_size)

    def _kv_config(self, heads: int, nope: int | None = None, v: int | None = None) -> dict:
        cfg = {"num_hidden_layers": self.num_layers, "num_attention_heads": heads,
               "kv_lora_rank": self.kv_lora_rank, "qk_rope_head_dim": self.qk_rope_head_dim}
        if nope is not None:
            cfg.update(qk_nope_head_dim=nope, v_head_dim=v)
        return cfg

    def summary(self, num_heads: int, qk_nope_head_dim: int, v_head_dim: int) -> dict:
        """Tokens, blocks and bytes held next to the per-head cache the same model would need."""
        batch = 0 if self.rows(0) is None else self.rows(0).shape[0]
        return {"tokens": self.get_seq_length(0), "layers": self.num_layers, "paged": self.paged,
                "block_size": self.block_size if self.paged else None,
                "blocks_per_layer": self.blocks_used * batch if self.paged else None,
                "latent_bytes": self.nbytes(),
                "per_head_bytes": self.per_head_cache_bytes(num_heads, qk_nope_head_dim, v_head_dim, batch)}


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
        if hidden_states.dim() != 3 or hidden_states.shape[-1] != cfg.hidden_size:
            raise _fail("hidden_states", f"must be [batch, tokens, {cfg.hidden_size}] (got {tuple(hidden_states.shape)})")
        b, t, _ = hidden_states.shape
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


# --------------------------------------------------------------------------------------------
# Converting a GQA model (SmolLM2) to a latent KV cache
# --------------------------------------------------------------------------------------------

class LatentKV(nn.Module):
    """One layer's K and V projections through a shared rank-r latent: ``c = A x`` (cached),
    ``k = B_K c``, ``v = B_V c``. RoPE is applied by the model to the re-expanded keys."""

    def __init__(self, down: torch.Tensor, up_k: torch.Tensor, up_v: torch.Tensor) -> None:
        super().__init__()
        self.down = nn.Linear(down.shape[1], down.shape[0], bias=False)
        self.down.weight.data.copy_(down)
        self.up_k = nn.Linear(up_k.shape[1], up_k.shape[0], bias=False)
        self.up_k.weight.data.copy_(up_k)
        self.up_v = nn.Linear(up_v.shape[1], up_v.shape[0], bias=False)
        self.up_v.weight.data.copy_(up_v)

    @property
    def rank(self) -> int:
        return self.down.out_features


class _Up(nn.Module):
    """``k_proj`` / ``v_proj`` replacement: the shared down-projection, then this head group's up."""

    def __init__(self, latent: LatentKV, which: str) -> None:
        super().__init__()
        self.latent, self.which = latent, which   # ``latent`` is shared by k_proj and v_proj

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        up = self.latent.up_k if self.which == "k" else self.latent.up_v
        return up(self.latent.down(x))


def latent_kv_factors(w_k: torch.Tensor, w_v: torch.Tensor, rank: int,
                      input_cov: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rank-``rank`` factors of the stacked ``W = [W_K; W_V]`` (``[2 n_kv d_h, hidden]``).

    Returns ``(A [r, hidden], B_K [n_kv d_h, r], B_V [n_kv d_h, r])`` with ``[B_K; B_V] A = U_r U_r^T W``,
    where ``U_r`` are the top-r left singular vectors of ``W`` (``input_cov=None``: plain SVD of
    the weights) or of ``W Sigma^(1/2)`` (``input_cov`` = Sigma = E[x x^T] of the layer's input:
    the best rank-r approximation of the K/V activations, a PCA). At full rank it is exact.
    """
    w = torch.cat([w_k, w_v], dim=0).double()
    out_dim, hidden = w.shape
    if isinstance(rank, bool) or not isinstance(rank, int) or rank <= 0:
        raise _fail("rank", f"must be a positive integer (got {rank!r})")
    if rank > min(out_dim, hidden):
        raise _fail("rank", f"({rank}) is larger than the K and V projections it compresses "
                    f"(hidden {hidden} -> K and V {out_dim}); use at most {min(out_dim, hidden)}")
    gram = w @ w.T if input_cov is None else w @ input_cov.double() @ w.T
    eigvals, eigvecs = torch.linalg.eigh(gram)
    u = eigvecs[:, eigvals.argsort(descending=True)[:rank]]                   # [out, r]
    down = u.T @ w
    up = u
    n_k = w_k.shape[0]
    dtype = w_k.dtype
    return down.to(dtype), up[:n_k].contiguous().to(dtype), up[n_k:].contiguous().to(dtype)


def collect_input_covariance(model, windows) -> list[torch.Tensor]:
    """Per layer, E[x x^T] (float64 ``[hidden, hidden]``) of the input to the K/V projections
    (after ``input_layernorm``) over ``windows [n, length]``."""
    layers = model.model.layers
    sums = [None] * len(layers)
    counts = [0] * len(layers)
    hooks = []
    for i, layer in enumerate(layers):
        def hook(_module, args, i=i):
            x = args[0].reshape(-1, args[0].shape[-1]).double()
            sums[i] = x.T @ x if sums[i] is None else sums[i] + x.T @ x
            counts[i] += x.shape[0]
        hooks.append(layer.self_attn.k_proj.register_forward_pre_hook(hook))
    try:
        with torch.inference_mode():
            for row in windows:
                model(input_ids=row[None], use_cache=False)
    finally:
        for h in hooks:
            h.remove()
    return [s / n for s, n in zip(sums, counts)]


def convert_to_latent_kv(model, rank: int, input_covs: list[torch.Tensor] | None = None):
    """A copy of a Llama-style GQA model whose every layer computes K and V from a shared rank-``rank``
    latent (see :func:`latent_kv_factors`); ``rank = 2 x num_kv_heads x head_dim`` is exact.

    The latent cache of the converted model holds ``rank`` values per token and layer. RoPE stays
    on the full re-expanded keys (SmolLM2 rotates all 64 dims), so W_UK cannot be absorbed into
    the query here - the reason DeepSeek decouples RoPE and MHA2MLA switches to partial RoPE.
    """
    import copy

    cfg = model.config
    kv_width = cfg.num_key_value_heads * (getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 < rank <= 2 * kv_width:
        raise _fail("rank", f"must be an integer in 1..{2 * kv_width} (2 x num_key_value_heads x head_dim; "
                    f"larger than that is more than the K and V projections hold) (got {rank!r})")
    new = copy.deepcopy(model)
    for i, layer in enumerate(new.model.layers):
        attn = layer.self_attn
        cov = None if input_covs is None else input_covs[i]
        latent = LatentKV(*latent_kv_factors(attn.k_proj.weight.data, attn.v_proj.weight.data, rank, cov))
        attn.k_proj, attn.v_proj = _Up(latent, "k"), _Up(latent, "v")
        attn.latent_kv = latent
    return new


def windows_nll_and_ppl(model, windows) -> tuple[list[float], float]:
    """Summed next-token NLL of each window (nats) and the perplexity over all of them; the same sums
    in the same order as :func:`vramlab.eval.perplexity`, so the perplexity is identical."""
    from vramlab.eval import window_nll

    nll = [window_nll(model, windows[i:i + 1])[0] for i in range(len(windows))]
    return nll, math.exp(sum(nll) / (len(windows) * (windows.shape[1] - 1)))


def conversion_point(model, windows, rank: int, method: str = "weights",
                     input_covs: list[torch.Tensor] | None = None) -> dict:
    """Convert ``model`` at ``rank`` and measure it: ``{"method", "rank", "ppl", "window_nll",
    "bytes_per_token", "measured": True, "seconds"}``. ``method`` "weights" (SVD of [W_K; W_V]) or
    "activations" (PCA with ``input_covs`` from :func:`collect_input_covariance`). ``window_nll`` is
    the summed NLL of each window, so a few windows can be re-measured and compared exactly."""
    import time

    if method not in ("weights", "activations"):
        raise _fail("method", f"must be 'weights' or 'activations' (got {method!r})")
    if method == "activations" and input_covs is None:
        raise _fail("input_covs", "is needed for method='activations' (use collect_input_covariance)")
    start = time.perf_counter()
    converted = convert_to_latent_kv(model, rank, input_covs if method == "activations" else None)
    nll, ppl = windows_nll_and_ppl(converted, windows)
    return {"method": method, "rank": rank, "ppl": ppl, "window_nll": nll,
            "bytes_per_token": latent_bytes_per_token(model.config.to_dict(), rank),
            "measured": True, "seconds": round(time.perf_counter() - start, 1)}


def latent_bytes_per_token(model_config: Any, rank: int, kv_dtype: str = "bfloat16") -> float:
    """Cache bytes per token (all layers) of a model converted to a rank-``rank`` latent: a latent of
    ``rank`` elements and no separate RoPE key (kv_lora_rank = rank, qk_rope_head_dim = 0)."""
    cfg = kvcache.load_config(model_config)
    return kvcache.latent_kv_bytes_per_token(cfg["num_hidden_layers"], rank, 0, kv_dtype)


# --------------------------------------------------------------------------------------------
# The cached conversion curve
# --------------------------------------------------------------------------------------------

# The files whose code produces the curve: the perplexities (mla, eval, data, models) and the bytes (kvcache).
FINGERPRINT_FILES = ("mla.py", "eval.py", "data.py", "models.py", "kvcache.py")


def code_fingerprint() -> str:
    """sha256 (first 16 hex) of the source files that produce the conversion curve."""
    h = hashlib.sha256()
    here = Path(__file__).resolve().parent
    for name in FINGERPRINT_FILES:
        h.update(name.encode())
        h.update((here / name).read_bytes())
    return h.hexdigest()[:16]


def load_conversion_results(path: str | Path | None = None) -> dict:
    """The curve ``benchmarks/mla.py`` cached: ``{"fingerprint", "gqa", "points": [...]}``."""
    path = Path(path) if path is not None else CONVERSION_RESULTS
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; run `python benchmarks/mla.py --conversion` to create it.")
    return json.loads(path.read_text())


__all__ = ["MLA_BLOCK_SIZE", "MLAConfig", "LatentCache", "RMSNorm", "apply_rope", "MultiHeadLatentAttention",
           "decode", "LatentKV", "latent_kv_factors", "collect_input_covariance", "convert_to_latent_kv",
           "latent_bytes_per_token", "windows_nll_and_ppl", "conversion_point", "code_fingerprint", "load_conversion_results", "CONVERSION_RESULTS"]
