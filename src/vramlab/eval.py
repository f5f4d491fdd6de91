"""Perplexity of a causal LM on token windows."""

from __future__ import annotations

import math


def _check_windows(windows):
    """``windows`` must be a 2-D integer tensor ``[n >= 1, length >= 2]``; one clear sentence otherwise."""
    import torch

    if not isinstance(windows, torch.Tensor):
        raise TypeError(f"windows must be a LongTensor [n_windows, length] of token ids, e.g. "
                        f"vramlab.data.token_windows(tokenizer) (got {type(windows).__name__}).")
    if windows.dtype.is_floating_point or windows.dtype.is_complex or windows.dtype == torch.bool:
        raise TypeError(f"windows must hold integer token ids (got dtype {windows.dtype}).")
    if windows.dim() != 2:
        hint = " (one window: windows.unsqueeze(0))" if windows.dim() == 1 else ""
        raise ValueError(f"windows must be 2-D [n_windows, length] (got shape {tuple(windows.shape)}){hint}.")
    if windows.shape[0] < 1:
        raise ValueError(f"windows is empty (shape {tuple(windows.shape)}): pass at least one window.")
    if windows.shape[1] < 2:
        raise ValueError(f"each window needs at least 2 tokens to predict one (got length {windows.shape[1]}).")


def window_nll(model, windows, progress: bool = False):
    """Summed next-token negative log-likelihood per window.

    ``windows``: LongTensor ``[n, length]``. Returns ``(total_nll, n_predicted_tokens)`` where
    each window predicts ``length - 1`` tokens (no context carried across windows).

    The loss is computed in float32, or in float64 for a float64 model (``vramlab.numerics.reproducible``):
    a float32 log-softmax over 49,152 logits sums in 8 or 16 lanes by CPU kernel path, which moved the FP32
    perplexity by about 1e-5 between paths (benchmarks/kernel_spread.py); in float64 it does not (issue 26).
    """
    import torch
    import torch.nn.functional as F
    from tqdm.auto import tqdm

    _check_windows(windows)
    try:
        device = next(model.parameters()).device
    except (AttributeError, StopIteration, TypeError):
        raise TypeError(f"model must be a causal language model with parameters, e.g. the first value of "
                        f"vramlab.models.load_smollm2() (got {type(model).__name__}).") from None
    total, count = 0.0, 0
    rows = tqdm(windows, desc="perplexity", leave=False, disable=not progress)
    with torch.inference_mode():
        for row in rows:
            ids = row.unsqueeze(0).to(device)
            logits = model(input_ids=ids, use_cache=False).logits
            logits = logits.double() if logits.dtype == torch.float64 else logits.float()
            loss = F.cross_entropy(logits[0, :-1], ids[0, 1:], reduction="sum")
            total += float(loss)
            count += ids.shape[1] - 1
    return total, count


def perplexity(model, windows, progress: bool = False) -> float:
    """exp(mean next-token NLL) over all windows (``[n, length]`` LongTensor, n >= 1, length >= 2)."""
    total, count = window_nll(model, windows, progress=progress)
    return math.exp(total / count)
