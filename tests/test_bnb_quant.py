"""Real bitsandbytes loads of SmolLM2 on CPU: layers, bytes, LLM.int8() outlier columns, the cached table."""

from __future__ import annotations

import math

import pytest

from vramlab.bnb import quantized
from vramlab.quarot import outliers, quant


def test_config_errors_are_one_sentence():
    with pytest.raises(ValueError, match="kind must be one of int8, fp4, nf4, nf4\\+dq; got 'int3'"):
        quantized.bnb_config("int3")
    with pytest.raises(ValueError, match="threshold applies to kind='int8'"):
        quantized.bnb_config("nf4", threshold=5.0)
    cfg = quantized.bnb_config("int8", threshold=20)
    assert cfg.load_in_8bit and cfg.llm_int8_threshold == 20.0
    cfg = quantized.bnb_config("nf4+dq")
    assert cfg.load_in_4bit and cfg.bnb_4bit_quant_type == "nf4" and cfg.bnb_4bit_use_double_quant


def test_cached_table_is_current_and_consistent(smollm2):
    table = quantized.load_table()  # raises when the code changed since benchmarks/bnb.py ran
    assert table["windows"]["n"] == 8 and [r["kind"] for r in table["rows"]] == ["fp32", "bf16", *quantized.KINDS]
    row = {r["kind"]: r for r in table["rows"]}
    model, _ = smollm2
    assert row["fp32"]["footprint_bytes"] == model.get_memory_footprint()
    # the same windows and evaluation as notebook 02's table; that table is made on the float64 path (issue 26),
    # whose FP32 row differs from a float32 model's in the fifth digit (14.70462 against 14.70449): 1e-4; the
    # float32 evaluation of lab 09's fp8 record is the same computation, to 1e-9
    from vramlab.serving import fp8_quality

    assert math.isclose(row["fp32"]["ppl"], quant.table_ppl(quant.load_quarot_table(), "FP32"), rel_tol=1e-4)
    assert math.isclose(row["fp32"]["ppl"], fp8_quality.load()["ppl_16bit"], rel_tol=1e-9)
    assert abs(2 * row["bf16"]["footprint_bytes"] - row["fp32"]["footprint_bytes"]) < 1024  # a few float32 buffers
    assert row["nf4"]["footprint_bytes"] < row["int8"]["footprint_bytes"] < row["bf16"]["footprint_bytes"]
    assert row["nf4+dq"]["quant_state_bytes"] < row["nf4"]["quant_state_bytes"]  # double quant shrinks the scales
    assert row["int8"]["ppl"] < quant.table_ppl(quant.load_quarot_table(), "W8A8", "none", "rtn")
    assert row["nf4"]["ppl"] < row["fp4"]["ppl"]
    for r in table["rows"]:
        assert len(r["window_nll"]) == 8 and "Paris" in r["generation"]


def test_fingerprint_refuses_a_stale_table(tmp_path):
    stale = tmp_path / "t.json"
    stale.write_text('{"fingerprint": "0000", "rows": []}')
    with pytest.raises(ValueError, match="run python benchmarks/bnb.py"):
        quantized.load_table(stale)
    assert quantized.load_table(stale, check=False)["rows"] == []


@pytest.fixture(scope="module")
def int8_model():
    return quantized.load_quantized("int8")


@pytest.mark.slow
def test_int8_load_replaces_the_decoder_linears(int8_model):
    import bitsandbytes as bnb

    model, tok = int8_model
    lins = quantized.quantized_linears(model)
    assert len(lins) == 30 * 7 and all(isinstance(m, bnb.nn.Linear8bitLt) for m in lins.values())
    assert not isinstance(model.lm_head, bnb.nn.Linear8bitLt)
    assert model.get_memory_footprint() == quantized.table_row(quantized.load_table(), "int8")["footprint_bytes"]
    assert quantized.quant_state_bytes(model) == 30 * (576 * 3 + 192 * 2 + 1536 * 2) * 4  # one SCB per row
    assert isinstance(quantized.generate(model, tok, max_new_tokens=3), str)


@pytest.mark.slow
def test_outlier_columns_are_bitsandbytes_threshold_rule(int8_model, smollm2, windows):
    model, _ = int8_model
    ids = windows[0, :128]
    cols = quantized.outlier_columns(model, ids, layer=29)
    x = outliers.capture(model, ids, 29, "down_in")
    assert cols == quantized.columns_above(x) and len(cols) > 0
    every = quantized.outlier_columns(model, ids)
    assert every[29] == cols and set(every) == set(range(30))
    # notebook 01's largest channel of layer 29 (float32 model) is among them
    x32 = outliers.capture(smollm2[0], ids, 29, "down_in")
    assert int(x32.abs().amax(0).argmax()) in cols
    with pytest.raises(TypeError, match="not a Linear8bitLt"):
        quantized.outlier_columns(smollm2[0], ids, layer=0)


@pytest.mark.slow
def test_nf4_double_quant_live_matches_the_table(windows):
    model, tok = quantized.load_quantized("nf4+dq")
    row = quantized.table_row(quantized.load_table(), "nf4+dq")
    assert model.get_memory_footprint() == row["footprint_bytes"]
    assert quantized.quant_state_bytes(model) == row["quant_state_bytes"]
    nll = quantized.window_nlls(model, windows[:1])[0]
    # float32 kernel-path spread (issue 26), measured on one AVX-512 EPYC, 1 thread: avx2 3.156458 against the
    # table's 3.157833 (1.37e-3: the old 1e-3 bound failed), default and avx512 within 1e-3. Bound: ~3.5x that.
    assert abs(nll - row["window_nll"][0]) < 5e-3
    assert "Paris" in quantized.generate(model, tok)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0, "6", True])
def test_threshold_must_be_finite_and_not_negative(bad):
    with pytest.raises(ValueError, match="^`threshold` must be a finite number >= 0"):
        quantized.bnb_config("int8", threshold=bad)
    assert quantized.bnb_config("int8", threshold=0).llm_int8_threshold == 0.0


@pytest.mark.slow
def test_threshold_sweep_is_bitsandbytes_own_rule_and_restores_the_model(int8_model, windows):
    from vramlab.bnb import threshold

    model, _ = int8_model
    ids = windows[0, :128]
    rows = threshold.threshold_sweep(model, ids, (0, 6.0, 20.0))
    by_t = {r["threshold"]: r for r in rows}
    # threshold 0 turns the split off: nothing kept in 16-bit
    assert sum(by_t[0.0]["columns"].values()) == 0 and by_t[0.0]["kept_16bit"] == 0.0
    # at 6.0 the columns kept are exactly quantized.outlier_columns' (bitsandbytes' own state.idx at the default)
    assert by_t[6.0]["columns"][29] == len(quantized.outlier_columns(model, ids, layer=29))
    # a higher threshold keeps fewer columns, in every layer
    assert all(by_t[20.0]["columns"][i] <= by_t[6.0]["columns"][i] for i in range(30))
    assert by_t[20.0]["kept_16bit"] < by_t[6.0]["kept_16bit"] < 1
    # the 6.0 loss is the model's own (mean NLL over the predicted tokens)
    live = quantized.window_nlls(model, ids.unsqueeze(0))[0]
    assert abs(by_t[6.0]["nll"] - live) < 1e-4 and by_t[0.0]["nll"] != by_t[6.0]["nll"]
    lin = model.model.layers[0].mlp.down_proj
    assert lin.state.threshold == quantized.LLM_INT8_THRESHOLD   # restored
    fig = threshold.threshold_figure(by_t[6.0], 1536, 100, reference_nll=2.9)
    assert "threshold 6" in fig.layout.title.text and fig.layout.yaxis.range[1] > 100


@pytest.mark.parametrize("bad", [[], [float("nan")], [-1], ["6"], [True]])
def test_threshold_sweep_refuses_bad_thresholds_in_one_sentence(bad):
    from vramlab.bnb import threshold

    with pytest.raises(ValueError, match="thresholds"):
        threshold._check_thresholds(bad)
