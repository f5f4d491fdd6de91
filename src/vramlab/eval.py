"""Perplexity of a causal LM on token windows."""

from __future__ import annotations

import math


def window_nll(model, windows, progress: bool = False):
    """Summed next-token negative log-likelihood per window.

    ``windows``: LongTensor ``[n, length]``. Returns ``(total_nll, n_predicted_tokens)`` where
    each window predicts ``length - 1`` tokens (no context carried across windows).
    """
    import torch
    import torch.nn.functional as F
    from tqdm.auto import tqdm

    device = next(model.parameters()).device
    total, count = 0.0, 0
    rows = tqdm(windows, desc="perplexity", leave=False, disable=not progress)
    with torch.inference_mode():
        for row in rows:
            ids = row.unsqueeze(0).to(device)
            logits = model(input_ids=ids, use_cache=False).logits.float()
            loss = F.cross_entropy(logits[0, :-1], ids[0, 1:], reduction="sum")
            total += float(loss)
            count += ids.shape[1] - 1
    return total, count


def perplexity(model, windows, progress: bool = False) -> float:
    """exp(mean next-token NLL) over all windows (``[n, length]`` LongTensor)."""
    total, count = window_nll(model, windows, progress=progress)
    return math.exp(total / count)
