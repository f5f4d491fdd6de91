"""A learner's butterfly at model scale (lab 01): the online Hadamard of a rotated model computed with a given
function for its power-of-two part.

``hadamard.fwht`` computes ``x @ hadamard_matrix(n) / sqrt(n)`` for every order lab 01 uses. Lab 01's Exercise 2
asks the learner for the radix-2 butterfly of order ``m = 2^k``; :func:`fwht_with` runs that function inside the
full order ``n = K 2^k`` (``hadamard_matrix(n) = kron(sylvester(m), base(K))``), and :func:`use_butterfly` swaps
it into the online Hadamard before every ``down_proj`` of a model that :func:`vramlab.quarot.rotate.rotate_model`
rotated, so the learner can re-check computational invariance with their own code.

This lives apart from ``hadamard`` and ``rotate`` on purpose: those files are part of the cached QuaRot table's
fingerprint (``quant.FINGERPRINT_FILES``), and the table is not produced with a learner's function.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from vramlab.quarot import hadamard as _had
from vramlab.quarot.rotate import OnlineHadamard

__all__ = ["fwht_with", "ButterflyHadamard", "use_butterfly"]


def fwht_with(butterfly, x):
    """:func:`~vramlab.quarot.hadamard.fwht` of order ``n = K 2^k`` whose power-of-two part is computed by
    ``butterfly``.

    ``butterfly(y)`` must return ``y @ sylvester(m) / sqrt(m)`` over the last dimension of a ``[rows, m]``
    tensor, ``m = 2^k`` (lab 01's Exercise 2). ``hadamard_matrix(n) = kron(sylvester(m), base(K))``, so
    with ``x`` viewed as ``[..., m, K]``: ``x @ H_n / sqrt(n) = sylvester(m) X base(K) / sqrt(n)``: the
    base's dense ``K x K`` product on the last axis, then ``butterfly`` on the axis of size ``m``. The same
    numbers as ``fwht`` (to rounding). ``x``: any float tensor whose last dimension is a supported order.
    """
    if not callable(butterfly):
        raise TypeError(f"butterfly must be a function y -> y @ H_m / sqrt(m), got {type(butterfly).__name__}.")
    if not isinstance(x, torch.Tensor) or x.dim() == 0:
        raise TypeError("fwht_with needs a torch.Tensor with at least one dimension (the transform runs over the last).")
    n = x.shape[-1]
    K, m, _ = _had.decompose(n)
    shape = x.shape
    y = x.reshape(-1, m, K)
    if K > 1:
        y = y @ (_had._base_matrix(K).to(dtype=y.dtype, device=y.device) / math.sqrt(K))
    rows = y.shape[0]
    z = butterfly(y.transpose(1, 2).reshape(rows * K, m))
    z = torch.as_tensor(z).to(dtype=y.dtype).reshape(rows, K, m).transpose(1, 2)
    return z.reshape(shape)


class ButterflyHadamard(OnlineHadamard):
    """:class:`~vramlab.quarot.rotate.OnlineHadamard` whose power-of-two part is computed by ``butterfly``
    (:func:`fwht_with`); in float32 at least, as QuaRot does, returned in the input dtype."""

    def __init__(self, n: int, butterfly):
        super().__init__(n)
        if not callable(butterfly):
            raise TypeError(f"butterfly must be a function y -> y @ H_m / sqrt(m), got {type(butterfly).__name__}.")
        self.butterfly = butterfly

    def forward(self, x):
        dtype = x.dtype
        y = x.float() if dtype in (torch.float16, torch.bfloat16) else x
        return fwht_with(self.butterfly, y).to(dtype)

    def extra_repr(self) -> str:
        return f"n={self.n}, butterfly={getattr(self.butterfly, '__name__', 'yours')}"


def use_butterfly(model, butterfly):
    """Replace, in place, every online Hadamard before a ``down_proj`` of a rotated model with a
    :class:`ButterflyHadamard` running ``butterfly``; returns the model. Raises one ``ValueError`` when the model
    has no online Hadamard (it was not rotated, or ``online_hadamard=False``)."""
    swapped = 0
    for module in model.modules():
        down = getattr(module, "down_proj", None)
        if isinstance(down, nn.Sequential) and isinstance(down[0], OnlineHadamard):
            down[0] = ButterflyHadamard(down[0].n, butterfly)
            swapped += 1
    if not swapped:
        raise ValueError("the model has no online Hadamard before down_proj: rotate it first with "
                         "rotate.rotate_model(model, rotation='hadamard') (online_hadamard=True).")
    return model
