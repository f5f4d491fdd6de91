import math

import pytest
import torch

from vramlab.data import pydoc_text, token_windows
from vramlab.eval import perplexity, window_nll


def test_pydoc_text_is_large_and_offline():
    text = pydoc_text()
    assert len(text) > 300_000


def test_windows_shape_and_contiguity(smollm2):
    _, tokenizer = smollm2
    w = token_windows(tokenizer, n_windows=3, length=100)
    assert w.shape == (3, 100) and w.dtype == torch.long
    flat = token_windows(tokenizer, n_windows=1, length=300)[0]
    assert torch.equal(w.reshape(-1), flat)
    shifted = token_windows(tokenizer, n_windows=1, length=100, offset=100)
    assert torch.equal(shifted[0], w[1])


def test_windows_reject_impossible_requests(smollm2):
    _, tokenizer = smollm2
    with pytest.raises(ValueError, match="fewer than"):
        token_windows(tokenizer, n_windows=10_000, length=512)
    with pytest.raises(ValueError, match="n_windows"):
        token_windows(tokenizer, n_windows=0)


def test_perplexity_of_the_first_8_windows_is_about_15(smollm2, windows):
    model, _ = smollm2
    ppl = perplexity(model, windows)
    assert math.isfinite(ppl) and 12.0 < ppl < 18.0, ppl  # REFERENCE.md measured ~14.7


def test_perplexity_matches_the_models_own_loss(smollm2, windows):
    model, _ = smollm2
    one = windows[:1]
    total, count = window_nll(model, one)
    with torch.inference_mode():
        loss = model(input_ids=one, labels=one).loss.item()
    assert count == one.shape[1] - 1
    assert math.isclose(total / count, loss, rel_tol=1e-5)
