"""Lab 01's capstone tools: a block-diagonal online Hadamard, its cost, and the INT4 error it leaves.

The online Hadamard before ``down_proj`` may mix all 1,536 channels (the full order 1536 = 12 x 128) or only
within blocks of ``b`` channels (``b`` a power of two). :func:`block_cost` counts its operations per token,
:func:`block_transform` applies it, :func:`int4_window_error` measures what per-token INT4 leaves of a window.
Which design is the cheapest that meets a target is the learner's question (``vramlab.checks.lab01`` judges it).
"""

from __future__ import annotations

import math

import torch


def block_cost(label: str, n: int = 1536) -> int:
    """Operations per token of the online transform ``label`` (``"none"``, ``"2"`` ... ``"512"``, ``"full"``) on
    ``n`` channels: ``n log2(b)`` additions for blocks of ``b`` (radix-2 butterfly passes), ``n (log2(m) + K)`` for
    the full order ``n = K x m`` (``log2(m)`` passes and a dense K x K product, K multiply-adds per value; 1536 =
    12 x 128), 0 for none."""
    if label == "none":
        return 0
    if label == "full":
        from vramlab.quarot.hadamard import decompose

        K, m, _ = decompose(n)
        return n * (int(math.log2(m)) + (K if K > 1 else 0))
    return n * int(math.log2(int(label)))


def block_transform(X: torch.Tensor, label: str, butterfly=None, seed: int = 0) -> torch.Tensor:
    """``X`` ([tokens, n]) after the online transform ``label`` with the randomized signs of ``seed``:
    ``butterfly`` (default vramlab's ``fwht``; it takes ``[..., b]`` and returns the same shape) on each block of
    ``b`` channels, or the full order-``n`` transform. Returns a tensor of ``X``'s shape and dtype."""
    from vramlab.quarot.butterfly import fwht_with
    from vramlab.quarot.hadamard import fwht, random_signs

    if label == "none":
        return X
    n = X.shape[-1]
    Y = X * random_signs(n, seed).to(X.dtype)
    if label == "full":
        return fwht(Y) if butterfly is None else fwht_with(butterfly, Y)
    b = int(label)
    blocks = Y.reshape(-1, n // b, b)
    out = (fwht if butterfly is None else butterfly)(blocks)
    return out.reshape(X.shape)


def int4_window_error(Y: torch.Tensor) -> float:
    """``||Y - q(Y)|| / ||Y||`` over the whole window ``Y`` ([tokens, channels]), ``q`` symmetric per-token INT4,
    computed in float64 (a plain number, 0 for a lossless ``q``)."""
    from vramlab.quarot.quant import quantize_per_token_sym

    Y = Y.double()
    return float((Y - quantize_per_token_sym(Y, bits=4)).norm() / Y.norm())


__all__ = ["block_cost", "block_transform", "int4_window_error"]
