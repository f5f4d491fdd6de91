"""vramlab.outliers: measures, streaming statistics, and the real model's outliers."""

from __future__ import annotations

import math

import pytest
import torch

from vramlab import outliers as O


def test_single_tensor_measures():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(200, 1000, generator=g, dtype=torch.float64)
    assert abs(O.kurtosis(x) - 3.0) < 0.05
    assert abs(float(O.token_kurtosis(x).median()) - 3.0) < 0.3
    r = O.max_over_rms(x)
    assert r.shape == (200,) and 2.5 < float(r.median()) < 4.5
    spike = torch.zeros(4, 64, dtype=torch.float64)
    spike[:, 7] = 5.0
    assert torch.allclose(O.max_over_rms(spike), torch.full((4,), 8.0, dtype=torch.float64))  # sqrt(64)
    assert O.kurtosis(spike) > 50
    assert math.isclose(O.incoherence(torch.ones(6, 10)), 1.0, rel_tol=1e-12)
    one_hot = torch.zeros(6, 10)
    one_hot[2, 3] = -4.0
    assert math.isclose(O.incoherence(one_hot), math.sqrt(60), rel_tol=1e-12)


def test_running_stats_match_direct_computation():
    g = torch.Generator().manual_seed(1)
    parts = [torch.randn(50, 32, generator=g) * (1 + i) + 0.3 for i in range(3)]
    parts[1][:, 5] *= 20  # an outlier channel
    run = O._Running()
    for p in parts:
        run.update(p)
    res = run.result()
    full = torch.cat(parts)
    assert math.isclose(res["kurtosis"], O.kurtosis(full), rel_tol=1e-6)
    assert torch.equal(res["channel_absmax"], full.abs().amax(0))
    assert int(res["channel_absmax"].argmax()) == 5
    assert math.isclose(res["max_over_rms_max"], float(O.max_over_rms(full).max()), rel_tol=1e-5)
    assert res["tokens"] == 150 and res["channels"] == 32


def tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=101, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=12, max_position_embeddings=64,
                      attn_implementation="sdpa")
    return LlamaForCausalLM(cfg).eval()


def test_activation_stats_on_tiny_model_and_cleanup():
    from vramlab import attention

    m = tiny_llama()
    ids = torch.randint(0, 101, (2, 16), generator=torch.Generator().manual_seed(0))
    rows = O.activation_stats(m, ids, layers=[1])
    assert [r["site"] for r in rows] == list(O.SITES)
    by = {r["site"]: r for r in rows}
    assert by["qkv_in"]["channels"] == 48 and by["down_in"]["channels"] == 96
    assert by["k"]["channels"] == 24 and by["v"]["channels"] == 24  # 2 KV heads x 12
    assert all(r["tokens"] == 32 for r in rows)
    assert by["k"]["weight_mu"] is None and by["down_in"]["weight_mu"] >= 1.0
    # hooks and attention implementation restored
    assert m.config._attn_implementation == "sdpa"
    assert not any(hasattr(a, "vramlab_kv_observer") for a in attention.attention_modules(m))
    assert all(len(mod._forward_pre_hooks) == 0 for mod in m.modules())
    # capture returns the same tensor the statistics saw
    x = O.capture(m, ids[0], 1, "down_in")
    assert x.shape == (16, 96)
    table = O.stats_table(rows)
    assert "down_in" in table and "kurtosis" in table.splitlines()[0]
    for fig in (O.channel_figure(by["down_in"]["channel_absmax"], after=by["down_in"]["channel_absmax"]),
                O.histogram_figure(x, x * 2), O.kurtosis_figure(rows, after=rows)):
        assert len(fig.data) >= 2


@pytest.mark.slow
def test_layer29_down_proj_outliers_and_rotation(smollm2, windows):
    from vramlab.rotate import rotate_model

    model, _ = smollm2
    w = windows[:1]
    before = O.find(O.activation_stats(model, w, layers=[29], sites=("down_in", "qkv_in")), 29, "down_in")
    rotated = rotate_model(model, "hadamard", seed=0)
    rows_after = O.activation_stats(rotated, w, layers=[29], sites=("down_in", "qkv_in"))
    after = O.find(rows_after, 29, "down_in")
    print({k: (before[k], after[k]) for k in ("kurtosis", "token_kurtosis", "max_over_rms_max", "absmax_over_rms")})
    # REFERENCE.md: max|x|/RMS ~ 128 and a huge kurtosis at this site; a Gaussian has 3 and ~3.6
    assert before["kurtosis"] > 100
    assert before["token_kurtosis"] > 20
    assert before["absmax_over_rms"] > 60
    assert before["max_over_rms_max"] > 15
    # after rotation every token looks Gaussian (the pooled kurtosis keeps the token-scale spread)
    assert 2.0 < after["token_kurtosis"] < 4.0
    assert after["max_over_rms_max"] < 6
    assert after["kurtosis"] < before["kurtosis"] / 10
    qkv = O.find(rows_after, 29, "qkv_in")
    assert qkv["kurtosis"] < 4 and qkv["max_over_rms_max"] < 6
    assert after["weight_mu"] < before["weight_mu"]
