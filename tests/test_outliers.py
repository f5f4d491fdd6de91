"""vramlab.quarot.outliers: measures, streaming statistics, and the real model's outliers."""

from __future__ import annotations

import math

import pytest
import torch

from vramlab.quarot import outliers as O


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
    from vramlab.quarot import attention

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
    from vramlab.quarot.rotate import rotate_model

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


def _one_sentence(exc) -> str:
    text = str(exc.value)
    assert "\n" not in text and text.endswith(".") and len(text) < 300, text
    return text


@pytest.mark.parametrize("kwargs,error,match", [
    ({"layers": [99]}, ValueError, "layers contains 99, but the model has 2 layers: pass indices from 0 to 1"),
    ({"layers": [-1]}, ValueError, "layers contains -1"),
    ({"layers": []}, ValueError, "layers is empty"),
    ({"layers": ["a"]}, TypeError, "layers must be layer indices"),
    ({"sites": ["bogus"]}, ValueError, "unknown site 'bogus': choose from qkv_in, o_in, mlp_in, down_in, k, v"),
    ({"sites": []}, ValueError, "sites is empty"),
])
def test_activation_stats_bad_input_is_one_sentence(kwargs, error, match):
    m = tiny_llama()
    ids = torch.randint(0, 101, (1, 8), generator=torch.Generator().manual_seed(0))
    with pytest.raises(error, match=match) as exc:
        O.activation_stats(m, ids, **kwargs)
    _one_sentence(exc)
    assert all(len(mod._forward_pre_hooks) == 0 for mod in m.modules())  # nothing left behind


@pytest.mark.parametrize("call,error,match", [
    (lambda m, ids: O.capture(m, ids, 1, site="bogus"), ValueError, "unknown site 'bogus'"),
    (lambda m, ids: O.capture(m, ids, 7), ValueError, "layer is 7, but the model has 2 layers: pass indices from 0 to 1"),
    (lambda m, ids: O.capture(m, ids, [1]), TypeError, "layer must be one layer index"),
    (lambda m, ids: O.capture(m, ids.float(), 1), TypeError, "input_ids must be a LongTensor"),
    (lambda m, ids: O.capture(m, ids[:, :0], 1), ValueError, "at least one token"),
    (lambda m, ids: O.activation_stats(m, [[1, 2, 3]]), TypeError, "windows must be a LongTensor"),
    (lambda m, ids: O.activation_stats(torch.nn.Linear(2, 2), ids), TypeError, "LLaMA-style causal LM"),
    (lambda m, ids: O.kurtosis([]), ValueError, "x is empty"),
    (lambda m, ids: O.kurtosis("abc"), TypeError, "x must be a tensor"),
    (lambda m, ids: O.max_over_rms(torch.tensor(3.0)), ValueError, "at least 1 dimension"),
    (lambda m, ids: O.token_kurtosis(torch.zeros(2, 0)), ValueError, "x is empty"),
    (lambda m, ids: O.incoherence(torch.ones(3)), ValueError, "at least 2 dimension"),
    (lambda m, ids: O.incoherence(torch.zeros(3, 3)), ValueError, "all zeros"),
    (lambda m, ids: O.channel_figure(torch.tensor([])), ValueError, "channel_absmax is empty"),
    (lambda m, ids: O.histogram_figure(torch.zeros(4, 4)), ValueError, "all zero"),
    (lambda m, ids: O.histogram_figure(torch.ones(4, 4), bins=1), ValueError, "bins must be an integer >= 2"),
    (lambda m, ids: O.kurtosis_figure([]), ValueError, "rows is empty"),
    (lambda m, ids: O.kurtosis_figure([{"layer": 0, "site": "k", "kurtosis": 3.0}], value="max_rms"), ValueError,
     "value='max_rms' is not a measure of these rows: choose from kurtosis"),
    (lambda m, ids: O.find([], 3, "k"), KeyError, "No statistics for layer 3"),
    (lambda m, ids: O.log_ticks(0, 10), ValueError, "positive finite limits"),
    (lambda m, ids: O.site_weights(m), TypeError, "layer must be one decoder layer"),
])
def test_public_functions_refuse_bad_input_in_one_sentence(call, error, match):
    m = tiny_llama()
    ids = torch.randint(0, 101, (1, 8), generator=torch.Generator().manual_seed(0))
    with pytest.raises(error, match=match) as exc:
        call(m, ids)
    if error is not KeyError:
        _one_sentence(exc)


def test_log_ticks_label_in_full():
    assert O.log_ticks(3, 40) == [3, 4, 5, 7, 10, 20, 30, 40]
    assert O.log_ticks(14, 633) == [20, 30, 50, 100, 200, 300, 500]
    assert O.log_ticks(1, 1e5) == [1, 10, 100, 1000, 10000, 100000]
    assert O.log_ticks(3.2, 4.7) == [3.5, 4, 4.5]


def _fake_rows():
    rows, after = [], []
    for layer in range(3):
        for i, site in enumerate(("qkv_in", "down_in")):
            rows.append({"layer": layer, "site": site, "max_over_rms_max": 20.0 + 10 * layer + i, "kurtosis": 5.0})
            after.append({"layer": layer, "site": site, "max_over_rms_max": 4.0 + layer, "kurtosis": 3.0})
    return rows, after


def test_per_layer_figure_titles_full_tick_labels_and_twin_colours():
    rows, after = _fake_rows()
    fig = O.kurtosis_figure(rows, after=after, value="max_over_rms_max", title="largest per-token max/RMS")
    layout = fig.layout
    assert layout.title.text == "largest per-token max/RMS"
    assert layout.yaxis.title.text == "largest per-token max|x| / RMS(x) (ratio)"  # not the raw key
    assert layout.xaxis.title.text == "layer index" and layout.yaxis.type == "log"
    assert list(layout.yaxis.ticktext) == ["4", "5", "7", "10", "20", "30", "40"]
    assert "2" not in layout.yaxis.ticktext and "3" not in layout.yaxis.ticktext  # 20, 30 in full
    colour = {t.name: t.line.color for t in fig.data}
    assert colour["q/k/v input"] == colour["q/k/v input (rotated)"] != colour["down_proj input"]
    assert colour["down_proj input"] == colour["down_proj input (rotated)"]
    assert {t.line.dash for t in fig.data if t.name.endswith("(rotated)")} == {"dash"}


def test_every_figure_has_a_title_and_axis_titles_with_units():
    rows, after = _fake_rows()
    x = torch.randn(16, 32, generator=torch.Generator().manual_seed(0))
    figs = [O.kurtosis_figure(rows), O.channel_figure(x.abs().amax(0), after=x.abs().amax(0)),
            O.histogram_figure(x, x * 2)]
    for fig in figs:
        assert fig.layout.title.text and fig.layout.xaxis.title.text and fig.layout.yaxis.title.text
    assert "(activation value)" in figs[1].layout.yaxis.title.text
    assert "(unitless)" in figs[2].layout.xaxis.title.text and figs[2].layout.yaxis.type == "log"
    assert figs[1].data[0].marker.color != figs[1].data[1].marker.color
