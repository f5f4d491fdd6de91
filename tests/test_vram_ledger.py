"""The memory ledger: computed rows reuse footprint/kvcache; labelled computed on CPU."""

from __future__ import annotations

import pytest
import torch

from vramlab.device import has_cuda
from vramlab.vram.ledger import memory_ledger


@pytest.fixture
def tiny():  # a fresh CPU model per test: on a GPU the ledger moves it
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=256, max_position_embeddings=128)
    return LlamaForCausalLM(cfg).eval()


def test_computed_rows_are_footprint_and_kvcache(tiny):
    from vramlab.footprint import total_bytes
    from vramlab.serving.kvcache import kv_cache_bytes

    ledger = memory_ledger(tiny, torch.zeros(2, 16, dtype=torch.long))
    rows = {r.item: r for r in ledger.rows}
    assert rows["weights"].computed == total_bytes(tiny)
    assert rows["KV cache"].computed == kv_cache_bytes(tiny.config, 32, kv_dtype="float32") == 2 * 2 * 2 * 16 * 4 * 32
    # the logits in the output layer's real dtype, and the activations as their own row (the lm_head's input)
    assert rows["logits"].computed == 2 * 16 * 256 * 4
    assert rows["activations (transient)"].computed == 2 * 16 * 64 * 4
    assert list(rows) == ["weights", "cuBLAS workspace", "KV cache", "logits", "activations (transient)",
                          "reserved but unallocated", "non-PyTorch"]
    if not has_cuda():
        assert ledger.mode.startswith("CPU mode (computed") and all(r.measured is None for r in ledger.rows)
        assert "CPU mode" in ledger.table() and "computed" in ledger.table()
    fig = ledger.figure()
    assert fig.layout.xaxis.title.text and fig.layout.title.text


def test_ledger_kv_matches_the_real_cache(tiny):
    """The KV arithmetic equals the bytes of the cache transformers really returns (measured on CPU too)."""
    from vramlab.vram.ledger import _cache_tensor_bytes

    with torch.no_grad():
        out = tiny(torch.zeros(2, 16, dtype=torch.long), use_cache=True)
    ledger = memory_ledger(tiny, torch.zeros(2, 16, dtype=torch.long))
    rows = {r.item: r for r in ledger.rows}
    assert _cache_tensor_bytes(out.past_key_values) == rows["KV cache"].computed
    assert out.logits.numel() * out.logits.element_size() == rows["logits"].computed


def test_logits_row_uses_the_output_layers_dtype(tiny):
    """A bfloat16 model's logits are bfloat16 (transformers' Llama does not upcast them): 2 bytes, not 4."""
    model = tiny.to(torch.bfloat16)
    ids = torch.zeros(2, 16, dtype=torch.long)
    with torch.no_grad():
        out = model(ids)
    rows = {r.item: r for r in memory_ledger(model, ids).rows}
    assert out.logits.dtype == torch.bfloat16
    assert rows["logits"].computed == out.logits.numel() * 2 == 2 * 16 * 256 * 2
    assert rows["activations (transient)"].computed == 2 * 16 * 64 * 2 and "bfloat16" in rows["logits"].how


def test_bad_input(tiny):
    with pytest.raises(ValueError, match="input_ids"):
        memory_ledger(tiny, torch.zeros(16, dtype=torch.long))
    with pytest.raises(TypeError, match="model"):
        memory_ledger(object(), torch.zeros(1, 4, dtype=torch.long))


@pytest.mark.gpu
def test_gpu_ledger_is_measured(tiny):
    ledger = memory_ledger(tiny, torch.zeros(2, 16, dtype=torch.long))
    rows = {r.item: r for r in ledger.rows}
    assert ledger.mode.startswith("GPU") and rows["weights"].measured >= rows["weights"].computed
    # measured by torch.cuda.memory_allocated around the cache (not numel x element size): at least the tensor
    # bytes, at most the allocator's 512-byte rounding per cache tensor above them
    kv, computed = rows["KV cache"].measured, rows["KV cache"].computed
    n_tensors = 2 * tiny.config.num_hidden_layers
    assert computed <= kv <= computed + 512 * n_tensors
    # the cuBLAS workspace was taken by the warm-up, so it is its own row and not in the KV cache
    assert rows["cuBLAS workspace"].measured is not None and rows["cuBLAS workspace"].measured >= 0
    logits = rows["logits"]
    assert logits.computed <= logits.measured <= logits.computed + 512
    assert rows["reserved but unallocated"].measured >= 0
