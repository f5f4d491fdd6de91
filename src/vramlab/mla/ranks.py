"""Per-layer latent ranks for a converted GQA model (SmolLM2): what a plan costs in cache, and in perplexity.

A *rank plan* gives every layer its own latent rank ``r_l`` (``ranks[l]``, one int per layer). The cache then
holds ``sum(r_l)`` values per token (no RoPE key: the converted model keeps RoPE on its re-expanded keys),
2 bytes each in bf16, in whole blocks of :data:`vramlab.mla.config.MLA_BLOCK_SIZE` tokens per sequence.

:func:`measure_ranks` converts the model's K/V projections **in place** to the plan (each layer through
:func:`vramlab.mla.conversion.latent_kv_factors`, the PCA subspace when ``input_covs`` are given), measures
the perplexity on a few windows, and puts the original projections back on every path, so a learner can
try many plans on one model in memory (about 2 s a plan for one 512-token window on 2 CPU cores).
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Iterator, Sequence

import torch

from vramlab.mla import heldout
from vramlab.mla.config import MLA_BLOCK_SIZE, _fail
from vramlab.serving import kvcache


def check_ranks(ranks: Any, num_layers: int, max_rank: int) -> list[int]:
    """``ranks`` as a list of ``num_layers`` ints in ``1..max_rank``, or ValueError naming what is wrong."""
    if isinstance(ranks, (str, bytes)) or not isinstance(ranks, Sequence) and not isinstance(ranks, torch.Tensor):
        raise _fail("ranks", f"must be a list of {num_layers} integers, one latent rank per layer (got "
                    f"{type(ranks).__name__})")
    values = ranks.tolist() if isinstance(ranks, torch.Tensor) else list(ranks)
    if len(values) != num_layers:
        raise _fail("ranks", f"must hold one rank per layer: {num_layers} values (got {len(values)})")
    out = []
    for i, r in enumerate(values):
        if isinstance(r, bool) or not isinstance(r, int) and not (isinstance(r, float) and r.is_integer()):
            raise _fail("ranks", f"[{i}] must be a whole number (got {r!r})")
        if not 1 <= int(r) <= max_rank:
            raise _fail("ranks", f"[{i}] must be in 1..{max_rank} (2 x KV heads x head_dim; got {int(r)})")
        out.append(int(r))
    return out


def plan_bytes_per_token(ranks: Sequence[int], kv_dtype: str = "bfloat16") -> float:
    """Cache bytes per token of a rank plan: ``sum(ranks)`` latent values (no RoPE key) in ``kv_dtype``."""
    return float(sum(kvcache.latent_kv_bytes_per_token(1, int(r), 0, kv_dtype) for r in ranks))


def plan_cache_mib(ranks: Sequence[int], context: int, batch: int, block_size: int = MLA_BLOCK_SIZE,
                   kv_dtype: str = "bfloat16") -> float:
    """MiB of a paged latent cache under a rank plan: ``batch`` sequences of ``context`` tokens, each in whole
    blocks of ``block_size`` tokens (a sequence's last block is allocated whole, as vLLM does)."""
    for name, value in (("context", context), ("batch", batch), ("block_size", block_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise _fail(name, f"must be a positive integer (got {value!r})")
    tokens = batch * kvcache.cdiv(context, block_size) * block_size
    return tokens * plan_bytes_per_token(ranks, kv_dtype) / kvcache.MiB


def _kv_width(model) -> int:
    cfg = model.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    return 2 * cfg.num_key_value_heads * head_dim


@contextlib.contextmanager
def latent_ranks(model, ranks: Sequence[int], input_covs: list[torch.Tensor] | None = None) -> Iterator[Any]:
    """Inside the block, every layer ``l`` of ``model`` (a Llama-style GQA model) computes K and V from its own
    rank-``ranks[l]`` latent (:class:`vramlab.mla.conversion.LatentKV`); afterwards the original ``k_proj`` and
    ``v_proj`` are back, also when the block raises. ``input_covs``: per-layer input covariances
    (:func:`vramlab.mla.conversion.collect_input_covariance`) for the PCA subspace; None for the weight SVD.
    A forward on lab 05's held-out windows inside the block is noted as the capstone prediction's measurement
    (:mod:`vramlab.mla.heldout`; not inside ``ran._unrecorded()``)."""
    from vramlab.mla.conversion import LatentKV, _Up, latent_kv_factors

    layers = model.model.layers
    ranks = check_ranks(ranks, len(layers), _kv_width(model))
    if input_covs is not None and len(input_covs) != len(layers):
        raise _fail("input_covs", f"must hold one covariance per layer ({len(layers)}; got {len(input_covs)})")
    saved = []
    # a run on lab 05's held-out windows is the measurement of the capstone's prediction (vramlab.mla.heldout)
    hook = model.register_forward_pre_hook(_note_heldout, with_kwargs=True) if heldout.recording() else None
    try:
        for i, layer in enumerate(layers):
            attn = layer.self_attn
            saved.append((attn, attn.k_proj, attn.v_proj))
            latent = LatentKV(*latent_kv_factors(attn.k_proj.weight.data, attn.v_proj.weight.data, ranks[i],
                                                 None if input_covs is None else input_covs[i]))
            attn.k_proj, attn.v_proj = _Up(latent, "k"), _Up(latent, "v")
        yield model
    finally:
        for attn, k_proj, v_proj in saved:
            attn.k_proj, attn.v_proj = k_proj, v_proj
        if hook is not None:
            hook.remove()


def _note_heldout(module, args, kwargs) -> None:
    """Forward pre-hook inside :func:`latent_ranks`: note a run on lab 05's held-out windows (returns None: the
    inputs are left as they are)."""
    heldout.note_if_heldout(args[0] if args else kwargs.get("input_ids"))


def measure_ranks(model, ranks: Sequence[int], windows: torch.Tensor,
                  input_covs: list[torch.Tensor] | None = None) -> dict:
    """Perplexity of ``model`` with the per-layer latent ranks ``ranks``, on ``windows [n, length]``.

    Returns ``{"ranks", "ppl", "window_nll" (summed NLL per window, nats), "bytes_per_token" (bf16),
    "seconds"}``. The model is converted in place for the measurement and restored afterwards. A measurement on
    lab 05's held-out windows (6-8) is noted as the capstone prediction's (:mod:`vramlab.mla.heldout`)."""
    from vramlab.mla.conversion import windows_nll_and_ppl

    start = time.perf_counter()
    with latent_ranks(model, ranks, input_covs):
        nll, ppl = windows_nll_and_ppl(model, windows)
    ranks = [int(r) for r in ranks]
    return {"ranks": ranks, "ppl": ppl, "window_nll": nll, "bytes_per_token": plan_bytes_per_token(ranks),
            "seconds": round(time.perf_counter() - start, 1)}


def kv_spectra(model, input_covs: list[torch.Tensor]) -> list[torch.Tensor]:
    """Per layer, the eigenvalues (descending, float64 ``[2 n_kv d_h]``) of ``W Sigma W^T``, ``W = [W_K; W_V]``:
    the variance of the layer's K/V activations along each PCA direction. The first ``r`` of them are what a
    rank-``r`` latent keeps."""
    out = []
    for layer, cov in zip(model.model.layers, input_covs):
        attn = layer.self_attn
        k_proj = getattr(attn.k_proj, "latent", None)
        if k_proj is not None:
            raise _fail("model", "is already converted to a latent cache; pass the original model")
        w = torch.cat([attn.k_proj.weight.data, attn.v_proj.weight.data], dim=0).double()
        out.append(torch.linalg.eigvalsh(w @ cov.double() @ w.T).flip(0).clamp(min=0))
    return out


def kept_fraction(spectra: list[torch.Tensor], ranks: Sequence[int]) -> list[float]:
    """Per layer, the fraction of its K/V activation variance that rank ``ranks[l]`` keeps (0..1)."""
    return [float(s[:int(r)].sum() / s.sum()) if float(s.sum()) > 0 else 1.0 for s, r in zip(spectra, ranks)]


def variance_plan(spectra: list[torch.Tensor], total_rank: int, min_rank: int = 16) -> list[int]:
    """Ranks that keep the most K/V activation variance in total for a sum of ``total_rank``: every layer gets
    ``min_rank``, then the remaining ranks go to the largest eigenvalues of all layers together (the PCA
    directions with the most variance, wherever they are). A plan by the spectrum alone, never measured."""
    n = len(spectra)
    if isinstance(total_rank, bool) or not isinstance(total_rank, int) or not n * min_rank <= total_rank <= \
            sum(len(s) for s in spectra):
        raise _fail("total_rank", f"must be an integer from {n * min_rank} ({n} layers x min_rank) to the "
                    f"K/V width summed over the layers (got {total_rank!r})")
    ranks = [min_rank] * n
    rest = sorted(((float(v), i) for i, s in enumerate(spectra) for v in s[min_rank:]), reverse=True)
    for _, i in rest[:total_rank - n * min_rank]:
        ranks[i] += 1
    return ranks


def expand_groups(group_ranks: Sequence[int], group_size: int) -> list[int]:
    """``[r0, r1, ...]`` for consecutive groups of ``group_size`` layers -> one rank per layer."""
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise _fail("group_size", f"must be a positive integer (got {group_size!r})")
    return [int(r) for r in group_ranks for _ in range(group_size)]


__all__ = ["check_ranks", "plan_bytes_per_token", "plan_cache_mib", "latent_ranks", "measure_ranks",
           "kv_spectra", "kept_fraction", "variance_plan", "expand_groups"]

