"""Lab 01's capstone tool: the INT4 error a per-token quantizer leaves of a window.

The online Hadamard before ``down_proj`` may mix all 1,536 channels (the full order 1536 = 12 x 128) or only
within blocks of ``b`` channels (``b`` a power of two). Which design is the cheapest that meets a target is the
learner's question: the learner applies each design with their own butterfly and counts its cost from the lab's
prose; :func:`int4_window_error` only measures what per-token INT4 leaves of a window. The transforms and costs
the check uses are private to ``vramlab.checks.lab01`` (review #16: with them public the capstone was one dict
comprehension).
"""

from __future__ import annotations

import torch


def int4_window_error(Y: torch.Tensor) -> float:
    """``||Y - q(Y)|| / ||Y||`` over the whole window ``Y`` ([tokens, channels]), ``q`` symmetric per-token INT4,
    computed in float64 (a plain number, 0 for a lossless ``q``)."""
    from vramlab.quarot.quant import quantize_per_token_sym

    Y = Y.double()
    return float((Y - quantize_per_token_sym(Y, bits=4)).norm() / Y.norm())


__all__ = ["int4_window_error"]
