"""Converting a GQA model (SmolLM2) to a latent KV cache, and the cached perplexity curve.

The conversion factors each layer's stacked ``[W_K; W_V]`` through a rank-r latent (weight SVD, or the
PCA of the layer's inputs); ``benchmarks/mla.py --conversion`` caches the curve with a fingerprint of
the code that made it (:data:`FINGERPRINT_FILES`).
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import torch
from torch import nn

from vramlab.configs import _fail
from vramlab.serving import kvcache

CONVERSION_RESULTS = Path(__file__).resolve().parents[1] / "results" / "mla_conversion.json"


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
FINGERPRINT_FILES = ("mla/conversion.py", "eval.py", "data.py", "models.py", "serving/kvcache.py", "configs/__init__.py")


def code_fingerprint() -> str:
    """sha256 (first 16 hex) of the source files that produce the conversion curve."""
    h = hashlib.sha256()
    here = Path(__file__).resolve().parents[1]   # the package root: names are relative to it
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


__all__ = ["LatentKV", "latent_kv_factors", "collect_input_covariance", "convert_to_latent_kv",
           "latent_bytes_per_token", "windows_nll_and_ppl", "conversion_point", "FINGERPRINT_FILES",
           "code_fingerprint", "load_conversion_results", "CONVERSION_RESULTS"]
