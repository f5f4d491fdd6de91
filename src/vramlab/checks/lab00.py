"""Checks for notebook 00 (start here)."""

from __future__ import annotations

from vramlab.checks._core import CheckResult, check_close

__all__ = ["check_fp16_weight_bytes"]


def check_fp16_weight_bytes(got, model) -> CheckResult:
    """The model's parameter bytes if stored in float16: 2 bytes x unique parameters.

    ``model`` is the loaded SmolLM2; tied embeddings count once (``model.parameters()``
    already yields a shared tensor once).
    """
    expected = 2 * sum(p.numel() for p in model.parameters())
    return check_close("fp16 weight bytes", got, float(expected), rel=0, abs_tol=0.5, unit="bytes",
                       hint="count every parameter once (lm_head shares the embedding matrix) "
                            "and multiply by 2 bytes per float16")
