"""Tests for vramlab.quarot.quant: quantizer error bounds, GPTQ vs RTN, quantize_model on tiny and real models."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from vramlab.quarot import quant


# ------------------------------------------------------------------ elementary quantizers
@pytest.mark.parametrize("bits", [2, 3, 4, 8])
def test_per_token_sym_error_bound_and_levels(bits):
    g = torch.Generator().manual_seed(bits)
    x = torch.randn(64, 96, generator=g) * torch.rand(64, 1, generator=g) * 10
    x[3, 5] = 300.0  # an outlier only widens its own token's scale
    q = quant.quantize_per_token_sym(x, bits, clip_ratio=1.0)
    qmax = 2 ** (bits - 1) - 1
    scale = x.abs().amax(-1, keepdim=True) / qmax
    assert q.shape == x.shape and q.dtype == x.dtype
    assert torch.all((q - x).abs() <= scale / 2 + 1e-5 * scale)
    codes = q / scale
    assert torch.allclose(codes, codes.round(), atol=1e-3)
    assert codes.round().min() >= -qmax - 1 and codes.round().max() <= qmax
    for row in q:
        assert row.unique().numel() <= 2 ** bits
    # each token's largest |x| is represented exactly (no clipping at clip_ratio 1)
    idx = x.abs().argmax(-1, keepdim=True)
    assert torch.allclose(q.gather(-1, idx), x.gather(-1, idx), rtol=1e-5)
    # rows are independent: the outlier row does not change the others
    assert torch.equal(q[4:], quant.quantize_per_token_sym(x[4:], bits))


def test_per_token_sym_clip_and_idempotence():
    x = torch.randn(16, 64, generator=torch.Generator().manual_seed(5))
    q = quant.quantize_per_token_sym(x, 4, clip_ratio=1.0)  # each max|x| lands on +-7 s: same scale again
    assert torch.allclose(quant.quantize_per_token_sym(q, 4, clip_ratio=1.0), q, atol=1e-6)
    q9 = quant.quantize_per_token_sym(x, 4, clip_ratio=0.9)
    amax = x.abs().amax(-1)
    assert torch.all(q9.amax(-1) <= 0.9 * amax + 1e-6)  # positive side clamps at +7 s = 0.9 max|x|
    assert torch.all(q9.amin(-1) >= -0.9 * amax * 8 / 7 - 1e-6)  # negative side at -8 s
    big = x > 0.97 * amax.unsqueeze(-1)  # clipped to 0.9 max: error > 0.07 max > s / 2 = 0.064 max
    assert big.any() and torch.all((x - q9)[big] > 0.9 * amax.unsqueeze(-1).expand_as(x)[big] / 7 / 2)
    assert quant.quantize_per_token_sym(x, 16) is x and quant.quantize_per_token_sym(x, None) is x
    assert torch.equal(quant.quantize_per_token_sym(torch.zeros(2, 8), 4), torch.zeros(2, 8))


@pytest.mark.parametrize("bits", [2, 4, 8])
def test_groupwise_asym_error_bound(bits):
    g = torch.Generator().manual_seed(0)
    k = torch.randn(2, 3, 17, 64, generator=g) * 3 + 1.5  # [b, kv_heads, s, head_dim], off-centre
    q = quant.quantize_groupwise_asym(k, bits, group_size=64, clip_ratio=1.0)
    assert q.shape == k.shape
    lo = k.amin(-1, keepdim=True).clamp_max(0)
    hi = k.amax(-1, keepdim=True).clamp_min(0)
    scale = (hi - lo) / (2 ** bits - 1)
    assert torch.all((q - k).abs() <= scale / 2 + 1e-5)
    assert all(grp.unique().numel() <= 2 ** bits for grp in q.reshape(-1, 64))
    assert torch.allclose(quant.quantize_groupwise_asym(q, bits, 64), q, atol=1e-5)  # idempotent
    # groups are independent: quantizing per head/token == quantizing each 64-slice alone
    one = quant.quantize_groupwise_asym(k[1, 2, 5:6], bits, 64)
    assert torch.allclose(one, q[1, 2, 5:6])
    # asymmetric beats symmetric on an all-positive group
    pos = torch.rand(8, 64, generator=g) + 2.0
    err_a = (quant.quantize_groupwise_asym(pos, 4, 64) - pos).abs().mean()
    err_s = (quant.quantize_per_token_sym(pos, 4) - pos).abs().mean()
    assert err_a < err_s


def test_groupwise_asym_groups_split_the_last_dim():
    x = torch.cat([torch.randn(4, 32) * 0.01, torch.randn(4, 32) * 100], dim=-1)
    small = quant.quantize_groupwise_asym(x, 4, group_size=32)[:, :32]
    whole = quant.quantize_groupwise_asym(x, 4, group_size=64)[:, :32]
    assert (small - x[:, :32]).abs().max() < (whole - x[:, :32]).abs().max()
    with pytest.raises(ValueError):
        quant.quantize_groupwise_asym(torch.randn(3, 10), 4, group_size=64)


def test_weight_rtn_per_channel_and_groups():
    g = torch.Generator().manual_seed(1)
    w = torch.randn(32, 256, generator=g)
    w[0] *= 50  # one big row: per-channel scales keep the other rows fine
    plain = quant.quantize_weight_sym(w, 4, mse=False)
    scale = w.abs().amax(1, keepdim=True) / 7
    assert torch.all((plain - w).abs() <= scale / 2 + 1e-5)
    mse = quant.quantize_weight_sym(w, 4, mse=True)
    err = lambda q: (q - w).abs().pow(2.4).sum(1)  # noqa: E731
    assert torch.all(err(mse) <= err(plain) + 1e-4)  # the search includes clip ratio 1
    assert err(mse).sum() < 0.95 * err(plain).sum()  # and it does find better clips on Gaussians
    grouped = quant.quantize_weight_sym(w, 4, group_size=128, mse=True)
    assert ((grouped - w) ** 2).sum() < ((mse - w) ** 2).sum()
    for row in grouped[:, :128]:
        assert row.unique().numel() <= 16
    # a ragged last group (576 = 4 x 128 + 64, SmolLM2's hidden size) is quantized on its own
    w576 = torch.randn(8, 576, generator=g)
    w576[:, 540] = 40.0  # an outlier in the last (64-wide) group only
    r = quant.quantize_weight_sym(w576, 4, group_size=128, mse=False)
    assert torch.allclose(r[:, :512], quant.quantize_weight_sym(w576[:, :512], 4, group_size=128, mse=False))
    assert torch.allclose(r[:, 512:], quant.quantize_weight_sym(w576[:, 512:], 4, mse=False))


# ------------------------------------------------------------------ GPTQ
def test_gptq_beats_rtn_on_correlated_inputs():
    g = torch.Generator().manual_seed(0)
    n_in, n_out, n_tok = 64, 48, 2048
    mix = torch.randn(n_in, n_in, generator=g) / math.sqrt(n_in)
    mix += torch.eye(n_in) * 0.1
    x = torch.randn(n_tok, 16, generator=g) @ torch.randn(16, n_in, generator=g) + 0.1 * torch.randn(n_tok, n_in, generator=g) @ mix
    w = torch.randn(n_out, n_in, generator=g)
    hessian = 2 * x.T @ x / n_tok
    rtn = quant.quantize_weight_sym(w, 3)
    gptq = quant.gptq_quantize_matrix(w, hessian, 3)
    err_rtn = ((x @ (rtn - w).T) ** 2).mean()
    err_gptq = ((x @ (gptq - w).T) ** 2).mean()
    assert err_gptq < 0.7 * err_rtn, (err_gptq, err_rtn)
    # GPTQ output is still on each row's 3-bit grid
    for row in gptq:
        assert row.unique().numel() <= 8
    grouped = quant.gptq_quantize_matrix(w, hessian, 3, group_size=32, act_order=False)
    assert ((x @ (grouped - w).T) ** 2).mean() < err_rtn


def test_outlier_stats_and_relative_error():
    g = torch.Generator().manual_seed(0)
    gauss = torch.randn(256, 576, generator=g, dtype=torch.float64)
    st = quant.outlier_stats(gauss)
    assert 2.8 < st["kurtosis"] < 3.2 and 3.0 < st["max_over_rms"] < 4.5
    spiky = gauss.clone()
    spiky[:, 7] = 100.0
    sp = quant.outlier_stats(spiky)
    assert sp["kurtosis"] > 100 and sp["max_over_rms"] > 15
    # an orthogonal (Hadamard-like) mixing spreads the spike: per-token 4-bit error drops a lot
    q, _ = torch.linalg.qr(torch.randn(576, 576, generator=g, dtype=torch.float64))
    before = quant.per_token_relative_error(spiky, 4).median()
    after = quant.per_token_relative_error(spiky @ q, 4).median()
    assert after < 0.6 * before
    e8 = quant.per_token_relative_error(gauss, 8).median()
    assert e8 < quant.per_token_relative_error(gauss, 4).median() / 8
    h = quant.hessian_from_inputs(gauss.float())
    assert h.shape == (576, 576) and torch.allclose(h, h.T)


# ------------------------------------------------------------------ whole models
def _tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=64,
                      tie_word_embeddings=True, attn_implementation="sdpa")
    return LlamaForCausalLM(cfg).eval()


def test_quantize_model_tiny_llama_keeps_lm_head_and_original():
    model = _tiny_llama()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    ids = torch.randint(0, 128, (2, 24), generator=torch.Generator().manual_seed(0))
    calib = torch.randint(0, 128, (4, 24), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = model(input_ids=ids).logits
    for method in ("rtn", "gptq"):
        q = quant.quantize_model(model, 4, 4, 4, weight_method=method, calibration=calib, progress=False)
        with torch.no_grad():
            out = q(input_ids=ids).logits
        assert out.shape == ref.shape and torch.isfinite(out).all()
        assert not torch.allclose(out, ref)
        assert isinstance(q.lm_head, nn.Linear) and not isinstance(q.lm_head, quant.QuantLinear)
        assert torch.equal(q.lm_head.weight, model.lm_head.weight)
        lins = [m for m in q.modules() if isinstance(m, quant.QuantLinear)]
        assert len(lins) == 2 * 7
        w = q.model.layers[0].self_attn.q_proj.weight
        for row in w:
            assert row.unique().numel() <= 16
        attn = q.model.layers[1].self_attn
        assert attn.vramlab_k_quantizer.bits == 4 and attn.vramlab_k_quantizer.group_size == 16
        assert q.config._attn_implementation == "vramlab"
    for k, v in model.state_dict().items():  # the original is untouched
        assert torch.equal(v, before[k]), k
    assert model.config._attn_implementation == "sdpa"


def test_quantize_model_16_bits_is_identity_and_gptq_needs_calibration():
    model = _tiny_llama()
    ids = torch.randint(0, 128, (1, 16))
    q = quant.quantize_model(model, 16, None, 16)
    with torch.no_grad():
        assert torch.allclose(q(input_ids=ids).logits, model(input_ids=ids).logits, atol=1e-5)
    with pytest.raises(ValueError, match="calibration"):
        quant.quantize_model(model, 4, 16, 16, weight_method="gptq")
    with pytest.raises(ValueError):
        quant.quantize_model(model, 4, 16, 16, weight_method="awq")


def test_kv_quantizer_only_changes_attention_through_hooks():
    model = _tiny_llama()
    ids = torch.randint(0, 128, (1, 20))
    q8 = quant.quantize_model(model, 16, 16, 8)
    q2 = quant.quantize_model(model, 16, 16, 2)
    with torch.no_grad():
        ref = model(input_ids=ids).logits
        e8 = (q8(input_ids=ids).logits - ref).abs().max()
        e2 = (q2(input_ids=ids).logits - ref).abs().max()
    assert 0 < e8 < e2


@pytest.mark.gpu
def test_quantize_model_runs_on_cuda():
    model = _tiny_llama().cuda()
    calib = torch.randint(0, 128, (2, 16), device="cuda")
    q = quant.quantize_model(model, 4, 4, 4, weight_method="gptq", calibration=calib, progress=False)
    with torch.no_grad():
        out = q(input_ids=torch.randint(0, 128, (1, 16), device="cuda")).logits
    assert out.device.type == "cuda" and torch.isfinite(out).all()
    assert all(p.device.type == "cuda" for p in q.parameters())


@pytest.mark.slow
def test_real_model_w8a8_close_to_fp32_and_w16a4_breaks(smollm2, windows):
    from vramlab.eval import perplexity

    model, _ = smollm2
    two = windows[:2]
    fp32 = perplexity(model, two)
    # act clip 1.0 (QuaRot default for 8 bits; 0.9 clips the outlier channels). Absmax weight scales
    # (w_clip=False): the MSE clip search costs ~45 s on one thread for every 8-bit weight and is tested on
    # Gaussian weights above and on the real model by the QuaRot table's live row (test_quarot_results.py).
    # This runs on the float32 path, whose 8-bit activation codes follow the CPU kernel's rounding (issue 26).
    # Measured W8A8/FP32 on these 2 windows, one AVX-512 EPYC, 1 thread: avx512 1.0521, avx2 1.0493, and with
    # MKL_CBWR=COMPATIBLE 1.0327 (avx512), 1.0312 (avx2), 1.0405 (default): a spread of 2.1 points; another
    # machine's run gave 1.033. Bound: the largest measured + 3x that spread, rounded up. The exact number is
    # held to 1e-6 on the reproducible float64 path (test_quarot_results.py).
    w8a8 = perplexity(quant.quantize_model(model, 8, 8, 16, act_clip=1.0, w_clip=False), two)
    assert abs(w8a8 / fp32 - 1) < 0.12, (w8a8, fp32)
    a4 = perplexity(quant.quantize_model(model, 16, 4, 16), windows[:1])
    assert a4 > 10 * fp32  # unrotated 4-bit activations break on SmolLM2's outlier channels
    x = quant.capture_inputs(model, windows[0, :128], ["model.layers.29.mlp.down_proj"])
    x = x["model.layers.29.mlp.down_proj"]
    assert x.shape == (128, 1536) and quant.outlier_stats(x)["max_over_rms_max"] > 10  # Gaussian: ~4


# --- bad input: one sentence naming the problem -------------------------------------------------

def test_load_quarot_table_names_the_broken_file(tmp_path):
    bad = tmp_path / "quarot_table.json"
    bad.write_text('{"rows": [1,')
    with pytest.raises(ValueError, match=r"quarot_table.json is not valid JSON \(line 1"):
        quant.load_quarot_table(bad)
    with pytest.raises(FileNotFoundError, match="No QuaRot table at .*missing.json"):
        quant.load_quarot_table(tmp_path / "missing.json")
    other = tmp_path / "other.json"
    other.write_text('{"a": 1}')
    with pytest.raises(ValueError, match="other.json is JSON but not a QuaRot table"):
        quant.load_quarot_table(other)


def test_table_ppl_rejects_unknown_names_and_returns_none_only_for_unmeasured():
    table = quant.load_quarot_table()
    with pytest.raises(ValueError, match="setting='W3A3' is not in the QuaRot table; use one of 'FP32'"):
        quant.table_ppl(table, "W3A3")
    with pytest.raises(ValueError, match="rotation='hadamrd'"):
        quant.table_ppl(table, "W4A4", "hadamrd")
    with pytest.raises(ValueError, match="weights='awq'"):
        quant.table_ppl(table, "W4A4", "hadamard", "awq")
    with pytest.raises(ValueError, match="stat='mean'"):
        quant.table_ppl(table, "W4A4", stat="mean")
    with pytest.raises(ValueError, match="group_size must be None"):
        quant.table_ppl(table, "W4A4", group_size=0)
    with pytest.raises(TypeError, match="load_quarot_table"):
        quant.table_ppl([], "W4A4")
    assert quant.table_ppl(table, "W4A4KV4", "random", "gptq", group_size=128) is None


def test_format_table_lists_every_setting_and_rotation():
    table = quant.load_quarot_table()
    text = quant.format_table(table)
    lines = text.splitlines()
    assert lines[0].split()[:2] == ["setting", "weights"] and lines[0].split()[2:] == ["none", "random", "hadamard"]
    for setting in quant.TABLE_SETTINGS:
        assert any(line.startswith(setting + " ") for line in lines), setting
    fp32 = f"{quant.table_ppl(table, 'FP32'):9.2f}".strip()
    assert fp32 in lines[1]
    assert "group 128" in text


@pytest.mark.parametrize("call, error, match", [
    (lambda: quant.quantize_per_token_sym([1.0, 2.0], 4), TypeError, "x must be a torch.Tensor"),
    (lambda: quant.quantize_per_token_sym(torch.ones(2, 4), "four"), TypeError, "bits must be an integer"),
    (lambda: quant.quantize_per_token_sym(torch.ones(2, 4), 4, 0), ValueError, r"clip_ratio must be a number in \(0, 1\]"),
    (lambda: quant.quantize_per_token_sym(torch.ones(2, 4), 4, 1.5), ValueError, "clip_ratio must be"),
    (lambda: quant.quantize_groupwise_asym(torch.ones(2, 4), 4, 0), ValueError, "group_size must be a positive"),
    (lambda: quant.quantize_weight_sym(torch.ones(8), 4), ValueError, r"w must be 2-D \[out, in\]"),
    (lambda: quant.quantize_weight_sym(torch.ones(8, 8), 4, group_size=-1), ValueError, "group_size must be None"),
    (lambda: quant.gptq_quantize_matrix(torch.ones(4, 8), torch.eye(5), 4), ValueError, r"hessian must be \[in, in\] = \[8, 8\]"),
    (lambda: quant.hessian_from_inputs(torch.ones(5)), ValueError, r"x must be \[N, in\]"),
    (lambda: quant.outlier_stats([1, 2]), TypeError, "x must be a torch.Tensor"),
])
def test_elementary_functions_reject_bad_input_in_one_sentence(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_quantize_model_and_capture_reject_bad_input(smollm2):
    model, _ = smollm2
    with pytest.raises(ValueError, match="act_clip must be a number"):
        quant.quantize_model(model, 16, 4, 16, act_clip=9)
    with pytest.raises(TypeError, match="pass a Llama-style causal LM"):
        quant.quantize_model("model", 4)
    with pytest.raises(ValueError, match="has no submodule 'bogus'"):
        quant.capture_inputs(model, torch.zeros(1, 4, dtype=torch.long), ["bogus"])
