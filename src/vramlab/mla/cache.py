"""The MLA latent KV cache (``LatentCache``): contiguous or paged at FlashMLA's block size.
"""

from __future__ import annotations

from typing import Any

import torch

from vramlab.serving import kvcache

from vramlab.mla.config import MLA_BLOCK_SIZE, MLAConfig, _fail


def _as_dtype(dtype: Any) -> torch.dtype:
    """A ``torch.dtype`` from a dtype or its name (``"float32"``, ``"torch.bfloat16"``)."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if isinstance(dtype, str):
        found = getattr(torch, dtype.replace("torch.", ""), None)
        if isinstance(found, torch.dtype):
            return found
    raise _fail("dtype", f"must be a torch dtype or its name such as 'float32' or 'bfloat16' (got {dtype!r})")


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
                 block_size: int = MLA_BLOCK_SIZE, dtype: torch.dtype | str = torch.float32) -> None:
        for name, value in (("num_layers", num_layers), ("kv_lora_rank", kv_lora_rank),
                            ("qk_rope_head_dim", qk_rope_head_dim), ("block_size", block_size)):
            # qk_rope_head_dim may be 0: a converted GQA model (SmolLM2) caches only its rank-r latent
            low = 0 if name == "qk_rope_head_dim" else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise _fail(name, f"must be a {'non-negative' if low == 0 else 'positive'} integer (got {value!r})")
        dtype = _as_dtype(dtype)
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
        for name, t in (("c_kv", c_kv), ("k_rope", k_rope)):
            if not isinstance(t, torch.Tensor) or t.dim() != 3:
                got = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
                raise _fail(name, f"must be a 3-D tensor [batch, tokens, width] (got {got})")
        if c_kv.shape[:2] != k_rope.shape[:2]:
            raise _fail("k_rope", f"must have the same [batch, tokens] as c_kv (got {tuple(k_rope.shape[:2])} "
                        f"and {tuple(c_kv.shape[:2])})")
        batch = self._batch()
        if batch is not None and c_kv.shape[0] != batch:
            # without this check a batch of 1 would silently broadcast its history to every new row
            raise _fail("c_kv", f"has batch {c_kv.shape[0]} but this cache holds {batch} sequences; "
                        "use a new LatentCache (or crop(0)) for a different batch")
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

    def _batch(self) -> int | None:
        """Sequences held (the batch of the first non-empty layer), or None when nothing is cached."""
        for layer in range(self.num_layers):
            if self._lengths[layer]:
                store = self._rows[layer] if not self.paged else self._pool[layer][0]
                return store.shape[0]
        return None

    def crop(self, max_length: int) -> None:
        """Keep the first ``max_length`` tokens in every layer (as transformers' ``DynamicCache.crop``);
        freed paged blocks are returned."""
        if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 0:
            raise _fail("max_length", f"must be a non-negative integer (got {max_length!r})")
        for layer in range(self.num_layers):
            self._lengths[layer] = min(self._lengths[layer], max_length)
            if not self._lengths[layer]:
                self._rows[layer] = None     # empty again: a new batch size may follow
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


def plan_latent_cache(points: list[dict], budget_mib: float, context: int, batch: int, layers: int = 30,
                      block_size: int = MLA_BLOCK_SIZE) -> tuple[int, float] | None:
    """The measured point with the lowest perplexity whose paged bf16 latent cache fits a budget.

    ``points``: ``[{"rank": r, "ppl": p}, ...]`` (a converted model: ``rank`` values per token and layer,
    no RoPE key). The cache holds ``batch`` sequences of ``context`` tokens in whole blocks of
    ``block_size`` tokens, in ``layers`` layers. Returns ``(rank, cache MiB)``, or None when no rank fits.
    """
    for name, value in (("context", context), ("batch", batch), ("layers", layers), ("block_size", block_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise _fail(name, f"must be a positive integer (got {value!r})")
    if isinstance(budget_mib, bool) or not isinstance(budget_mib, (int, float)) or not budget_mib == budget_mib \
            or budget_mib < 0:
        raise _fail("budget_mib", f"must be a non-negative number of MiB (got {budget_mib!r})")
    tokens = batch * kvcache.cdiv(context, block_size) * block_size
    best = None
    for point in points:
        mib = tokens * kvcache.latent_kv_bytes_per_token(layers, point["rank"], 0, "bfloat16") / kvcache.MiB
        if mib <= budget_mib and (best is None or point["ppl"] < best[2]):
            best = (point["rank"], mib, point["ppl"])
    return None if best is None else (best[0], best[1])


__all__ = ["LatentCache", "plan_latent_cache"]
