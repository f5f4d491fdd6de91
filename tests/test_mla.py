"""MLA layer against transformers' DeepseekV3Attention, naive vs absorbed, the latent cache, the
SmolLM2 latent-KV conversion, and the cached conversion curve."""

from __future__ import annotations

import math

import pytest
import torch

from vramlab.serving import kvcache
from vramlab import mla
from vramlab.mla import LatentCache, MultiHeadLatentAttention, decode

YARN = {"rope_type": "yarn", "factor": 4.0, "mscale": 1.0, "mscale_all_dim": 1.0, "rope_theta": 10000.0,
        "original_max_position_embeddings": 64, "beta_fast": 32, "beta_slow": 1}
GEOMETRIES = [
    dict(hidden_size=48, num_attention_heads=4, kv_lora_rank=12, qk_nope_head_dim=8, qk_rope_head_dim=6,
         v_head_dim=10, q_lora_rank=None),
    dict(hidden_size=64, num_attention_heads=2, kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8,
         v_head_dim=16, q_lora_rank=24, rope_interleave=False),
    dict(hidden_size=40, num_attention_heads=3, kv_lora_rank=8, qk_nope_head_dim=4, qk_rope_head_dim=4,
         v_head_dim=6, q_lora_rank=16, rope_parameters=YARN, max_position_embeddings=256),
    dict(hidden_size=32, num_attention_heads=8, kv_lora_rank=20, qk_nope_head_dim=6, qk_rope_head_dim=2,
         v_head_dim=4, q_lora_rank=12, attention_bias=True),
]


def _hf_attention(geometry, seed=0):
    from transformers import DeepseekV3Config
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Attention, DeepseekV3RotaryEmbedding

    cfg = DeepseekV3Config(num_key_value_heads=geometry["num_attention_heads"], **geometry)
    cfg._attn_implementation = "sdpa"   # eager casts softmax to float32; sdpa stays in float64
    torch.manual_seed(seed)
    attn = DeepseekV3Attention(cfg, layer_idx=0).double()
    with torch.no_grad():
        for p in attn.parameters():
            p.normal_(0, 0.3)
    return cfg, attn, DeepseekV3RotaryEmbedding(cfg)


@pytest.mark.parametrize("geometry", range(len(GEOMETRIES)))
def test_from_transformers_matches_prefill_and_decode_and_cache(geometry):
    from transformers import DynamicCache

    cfg, attn, rotary = _hf_attention(GEOMETRIES[geometry], seed=geometry)
    mine = MultiHeadLatentAttention.from_transformers(attn)
    assert mine.scaling == pytest.approx(attn.scaling, rel=1e-15)
    x = torch.randn(2, 11, cfg.hidden_size, dtype=torch.float64)
    prefill = 6
    hf_cache, outs = DynamicCache(config=cfg), []
    with torch.no_grad():
        for lo, hi in [(0, prefill)] + [(i, i + 1) for i in range(prefill, 11)]:
            pos = torch.arange(lo, hi)[None].expand(2, hi - lo)
            outs.append(attn(x[:, lo:hi], rotary(x, pos), None, cache=hf_cache)[0])
        want = torch.cat(outs, dim=1)
        for absorbed in (False, True):
            for paged in (False, True):
                cache = LatentCache(1, cfg.kv_lora_rank, cfg.qk_rope_head_dim, paged=paged, block_size=4,
                                    dtype=torch.float64)
                got = decode(mine, x, prefill, cache, absorbed=absorbed)
                assert (got - want).abs().max() < 1e-9, (absorbed, paged)
                # transformers 5.x caches the normed latent as "keys" and the rotated k_rope as "values"
                layer = hf_cache.layers[0]
                assert torch.equal(cache.latent(), layer.keys[:, 0])
                assert torch.equal(cache.rope_key(), layer.values[:, 0])


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-9), (torch.float32, 1e-4)])
def test_naive_and_absorbed_agree(dtype, tol):
    torch.manual_seed(1)
    layer = MultiHeadLatentAttention(dict(GEOMETRIES[1], hidden_size=64)).to(dtype)
    x = torch.randn(3, 40, 64, dtype=dtype)
    with torch.no_grad():
        naive, absorbed = layer(x), layer(x, absorbed=True)
        c1, c2 = LatentCache(1, 16, 8, dtype=dtype), LatentCache(1, 16, 8, dtype=dtype, paged=True)
        step_naive = decode(layer, x, 30, c1)
        step_absorbed = decode(layer, x, 30, c2, absorbed=True)
    assert (naive - absorbed).abs().max() < tol
    assert (step_naive - step_absorbed).abs().max() < tol
    assert (step_naive - naive).abs().max() < tol   # prefill + decode == one causal forward


def test_absorbed_never_expands_per_head_kv(monkeypatch):
    layer = MultiHeadLatentAttention(GEOMETRIES[0])
    monkeypatch.setattr(layer, "expand_kv", lambda *a: pytest.fail("absorbed path expanded K/V"))
    layer(torch.randn(1, 5, 48), absorbed=True)


def test_paged_cache_blocks_and_bytes():
    torch.manual_seed(0)
    layer = MultiHeadLatentAttention(GEOMETRIES[0])
    cache = LatentCache(1, 12, 6, paged=True, dtype=torch.float32)
    assert cache.block_size == mla.MLA_BLOCK_SIZE == 64
    with torch.no_grad():
        decode(layer, torch.randn(1, 70, 48), 65, cache)
    assert cache.get_seq_length() == 70 and cache.blocks_used == 2
    assert cache.nbytes() == 2 * 64 * 18 * 4
    contiguous = LatentCache(1, 12, 6)
    with torch.no_grad():
        layer(torch.randn(1, 70, 48), cache=contiguous)
    assert contiguous.nbytes() == 70 * 18 * 4 == 70 * contiguous.bytes_per_token()
    summary = cache.summary(num_heads=4, qk_nope_head_dim=8, v_head_dim=10)
    assert summary["per_head_bytes"] == 70 * 4 * (8 + 6 + 10) * 4
    assert summary["blocks_per_layer"] == 2


def test_deepseek_v3_latent_cache_bytes():
    assert kvcache.kv_bytes_per_token("deepseek-v3", "bfloat16") == 70_272 == 61 * 576 * 2
    cache = LatentCache.for_config("deepseek-v3", dtype=torch.bfloat16)
    assert cache.num_layers == 61 and cache.bytes_per_token() == 70_272
    assert kvcache.mla_expanded_kv_bytes_per_token("deepseek-v3") == 61 * 128 * (192 + 128) * 2
    assert kvcache.paged_kv_cache_bytes("deepseek-v3", 100, 64) == 128 * 70_272
    assert kvcache.latent_kv_bytes_per_token(30, 384, 0, "bfloat16") == kvcache.kv_bytes_per_token("smollm2-135m")


@pytest.mark.parametrize("change,field", [
    (dict(kv_lora_rank=500), "kv_lora_rank"),
    (dict(q_lora_rank=4096), "q_lora_rank"),
    (dict(qk_rope_head_dim=7), "qk_rope_head_dim"),
    (dict(qk_nope_head_dim=None, head_dim=8, qk_rope_head_dim=16), "qk_rope_head_dim"),
    (dict(num_attention_heads=0), "num_attention_heads"),
    (dict(v_head_dim=-1), "v_head_dim"),
])
def test_bad_geometry_names_the_field(change, field):
    cfg = {**GEOMETRIES[0], **change}
    cfg = {k: v for k, v in cfg.items() if v is not None}
    with pytest.raises(ValueError, match=f"^`{field}`") as err:
        MultiHeadLatentAttention(cfg)
    assert err.value.__cause__ is None and str(err.value).count(".") >= 1


def test_latent_factors_exact_at_full_rank_and_bad_rank():
    torch.manual_seed(0)
    wk, wv = torch.randn(12, 20, dtype=torch.float64), torch.randn(12, 20, dtype=torch.float64)
    down, up_k, up_v = mla.latent_kv_factors(wk, wv, 20)
    assert torch.allclose(up_k @ down, wk) and torch.allclose(up_v @ down, wv)
    with pytest.raises(ValueError, match="^`rank`"):
        mla.latent_kv_factors(wk, wv, 21)
    # lower rank: the error is the tail of the singular values (Eckart-Young)
    down, up_k, up_v = mla.latent_kv_factors(wk, wv, 5)
    s = torch.linalg.svdvals(torch.cat([wk, wv]))
    err = torch.linalg.matrix_norm(torch.cat([up_k, up_v]) @ down - torch.cat([wk, wv]))
    assert err.item() == pytest.approx(s[5:].square().sum().sqrt().item(), rel=1e-9)


def test_smollm2_full_rank_conversion_reproduces_perplexity(smollm2, windows):
    from vramlab.eval import perplexity

    model, _ = smollm2
    with pytest.raises(ValueError, match="^`rank`"):
        mla.convert_to_latent_kv(model, 385)
    full = mla.convert_to_latent_kv(model, 384)
    assert full.model.layers[0].self_attn.latent_kv.rank == 384
    # one window: full rank is exact window by window (the cached curve's 8-window point is checked below)
    original, converted = perplexity(model, windows[:1]), perplexity(full, windows[:1])
    assert abs(converted / original - 1) < 1e-3, (original, converted)


def test_cached_conversion_curve_is_current_and_complete():
    results = mla.load_conversion_results()
    assert results["fingerprint"] == mla.code_fingerprint(), \
        "mla/eval/data code changed: rerun `python benchmarks/mla.py --conversion` to refresh the cached curve"
    assert results["windows"] == {"n": 8, "length": 512}
    points = results["points"]
    for method in ("weights", "activations"):
        ranks = sorted(p["rank"] for p in points if p["method"] == method)
        assert len(ranks) >= 5 and ranks[-1] == 384
        full = [p for p in points if p["method"] == method and p["rank"] == 384][0]
        assert abs(full["ppl"] / results["gqa"]["ppl"] - 1) < 1e-3
    for p in points:
        assert p["bytes_per_token"] == kvcache.latent_kv_bytes_per_token(30, p["rank"], 0, "bfloat16")
        assert math.isfinite(p["ppl"]) and p["measured"] is True


def test_crop_frees_blocks_and_rewinds():
    cache = LatentCache(2, 4, 2, paged=True, block_size=4)
    for layer in range(2):
        cache.update(layer, torch.randn(1, 9, 4), torch.randn(1, 9, 2))
    assert cache.blocks_used == 3
    cache.crop(4)
    assert cache.get_seq_length(1) == 4 and cache.blocks_used == 1 and cache.nbytes() == 2 * 4 * 6 * 4
    with pytest.raises(ValueError, match="^`max_length`"):
        cache.crop(-1)


def test_cached_points_keep_each_window_and_add_up():
    results = mla.load_conversion_results()
    for p in results["points"] + [results["gqa"]]:
        assert len(p["window_nll"]) == 8
        assert math.exp(sum(p["window_nll"]) / (8 * 511)) == pytest.approx(p["ppl"], rel=1e-12)


def test_live_point_reproduces_the_cached_windows(smollm2, windows):
    """Re-measure one cached point (PCA, rank 128) on the first window: the same NLL, within the float32
    kernel-path spread (issue 26). Measured on one AVX-512 EPYC, 1 thread, against the cached 1663.96374:
    avx512 -1.5e-7, avx2 and default -2.93e-6 relative (the old 1e-6 bound failed on avx2 and default). The
    bound is 10x the largest measured difference; 2 threads were not measured for this point."""
    from vramlab.data import token_windows

    model, tok = smollm2
    results = mla.load_conversion_results()
    c = results["calibration"]
    calib = token_windows(tok, n_windows=c["n"], length=c["length"], offset=c["offset"])
    covs = mla.collect_input_covariance(model, calib)
    live = mla.conversion_point(model, windows[:1], 128, "activations", covs)
    cached = [p for p in results["points"] if p["method"] == "activations" and p["rank"] == 128][0]
    assert live["window_nll"][0] == pytest.approx(cached["window_nll"][0], rel=3e-5)


def test_position_ids_one_row_for_all_and_bad_shape_named():
    torch.manual_seed(2)
    layer = MultiHeadLatentAttention(dict(GEOMETRIES[1], hidden_size=64)).to(torch.float64)
    heads = layer.config.num_attention_heads
    x = torch.randn(2, heads, 64, dtype=torch.float64)       # T == heads: a broadcast bug would hide here
    with torch.no_grad():
        assert torch.allclose(layer(x, position_ids=torch.arange(heads)), layer(x), atol=1e-12)
        with pytest.raises(ValueError, match="position_ids"):
            layer(x, position_ids=torch.arange(heads + 1))


def test_a_bf16_cache_beside_a_float32_layer_is_read_in_the_layers_dtype():
    torch.manual_seed(3)
    layer = MultiHeadLatentAttention(dict(GEOMETRIES[1], hidden_size=64))
    x = torch.randn(1, 12, 64)
    with torch.no_grad():
        want = layer(x)
        got = decode(layer, x, 8, LatentCache(1, 16, 8, dtype=torch.bfloat16))
    assert got.dtype == torch.float32 and (got - want).abs().max() < 0.05   # bf16 rounding of the cache only


# --- hardening: one sentence for bad input, never a raw error or a silent broadcast ------------------

@pytest.mark.parametrize("change,field", [
    (dict(kv_lora_rank=float("nan")), "kv_lora_rank"),
    (dict(hidden_size=float("inf")), "hidden_size"),
    (dict(qk_rope_head_dim="6"), "qk_rope_head_dim"),
    (dict(rms_norm_eps=float("nan")), "rms_norm_eps"),
    (dict(rope_theta="big"), "rope_theta"),
    (dict(max_position_embeddings=float("nan")), "max_position_embeddings"),
    (dict(rope_parameters={"rope_type": "spiral", "factor": 2.0}), "rope_type"),
])
def test_nan_inf_str_fields_and_unknown_rope_type_name_the_field(change, field):
    with pytest.raises(ValueError, match=f"^`{field}`"):
        mla.MLAConfig.from_config({**GEOMETRIES[0], **change})


def test_latent_cache_refuses_a_new_batch_size():
    cache = LatentCache(1, 4, 2)
    cache.update(0, torch.ones(1, 3, 4), torch.ones(1, 3, 2))
    with pytest.raises(ValueError, match="has batch 2 but this cache holds 1 sequences"):
        cache.update(0, torch.zeros(2, 1, 4), torch.zeros(2, 1, 2))
    assert cache.rows(0).shape == (1, 3, 6)          # nothing was stored or broadcast
    cache.crop(0)                                    # emptied: a new batch may start
    cache.update(0, torch.zeros(2, 1, 4), torch.zeros(2, 1, 2))
    assert cache.rows(0).shape == (2, 1, 6)
    paged = LatentCache(1, 4, 2, paged=True, block_size=4)
    paged.update(0, torch.ones(2, 5, 4), torch.ones(2, 5, 2))
    with pytest.raises(ValueError, match="has batch 1"):
        paged.update(0, torch.zeros(1, 1, 4), torch.zeros(1, 1, 2))


@pytest.mark.parametrize("paged", [False, True])
def test_latent_cache_holds_a_converted_latent_with_no_rope_key(paged):
    """A SmolLM2 converted at rank r caches r values per token and layer, no RoPE key (qk_rope_head_dim = 0)."""
    rank = 384
    cache = LatentCache(30, rank, 0, paged=paged, dtype=torch.bfloat16)
    c = torch.randn(1, 7, rank)
    latent, rope = cache.update(0, c, torch.empty(1, 7, 0))
    assert torch.equal(latent, c.to(torch.bfloat16)) and rope.shape == (1, 7, 0)
    assert cache.bytes_per_token() == kvcache.latent_kv_bytes_per_token(30, rank, 0, "bfloat16") \
        == kvcache.kv_bytes_per_token("smollm2-135m") == 30 * 384 * 2
    with pytest.raises(ValueError, match="qk_rope_head_dim"):
        LatentCache(30, rank, -1)


def test_latent_cache_dtype_by_name_or_one_sentence():
    assert LatentCache(1, 4, 2, dtype="float32").dtype is torch.float32
    assert LatentCache(1, 4, 2, dtype="torch.bfloat16").dtype is torch.bfloat16
    for bad in ("float33", "Tensor", 16):
        with pytest.raises(ValueError, match="^`dtype` must be a torch dtype or its name"):
            LatentCache(1, 4, 2, dtype=bad)


def test_latent_cache_update_checks_its_tensors():
    cache = LatentCache(1, 4, 2)
    with pytest.raises(ValueError, match="^`c_kv` must be a 3-D tensor"):
        cache.update(0, "latent", torch.ones(1, 1, 2))
    with pytest.raises(ValueError, match="^`k_rope` must have the same"):
        cache.update(0, torch.ones(1, 2, 4), torch.ones(1, 3, 2))


def test_mla_layer_inputs_get_one_sentence():
    layer = MultiHeadLatentAttention(GEOMETRIES[0])
    with pytest.raises(TypeError, match="^`hidden_states` must be a float tensor"):
        layer(None)
    with pytest.raises(TypeError, match="^`hidden_states` must be a floating-point tensor"):
        layer(torch.ones(1, 2, 48, dtype=torch.long))
    with pytest.raises(ValueError, match="^`hidden_states` holds no tokens"):
        layer(torch.ones(1, 0, 48))
    with pytest.raises(TypeError, match="^`cache` must be a vramlab LatentCache"):
        layer(torch.ones(1, 2, 48), cache="cache")
    with pytest.raises(TypeError, match="^`position_ids` must be an integer tensor"):
        layer(torch.ones(1, 2, 48), position_ids=[0, 1])


# --- the bundled DeepSeek configs keep their public YaRN rope_scaling -------------------------------

def test_deepseek_v3_softmax_scale_applies_yarn_mscale():
    """DeepSeek-V3's config.json has YaRN (factor 40, mscale_all_dim 1): 192**-0.5 x 1.369**2, not 192**-0.5."""
    cfg = mla.MLAConfig.from_config("deepseek-v3")
    assert cfg.rope_scaling["factor"] == 40 and cfg.rope_scaling["mscale_all_dim"] == 1.0
    assert round(cfg.softmax_scale(), 4) == 0.1352
    assert round(192 ** -0.5, 4) == 0.0722 != round(cfg.softmax_scale(), 4)


@pytest.mark.parametrize("name", ["deepseek-v3", "deepseek-v2"])
def test_bundled_softmax_scale_equals_transformers(name):
    """Same number as transformers 5.24's own DeepseekV3Attention.scaling (yarn_apply_mscale on the config)."""
    from transformers import DeepseekV3Config
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import yarn_apply_mscale

    raw = {k: v for k, v in kvcache.load_config(name).items() if not k.startswith("_")}
    raw.pop("model_type")
    hf = DeepseekV3Config(**raw)
    cfg = mla.MLAConfig.from_config(name)
    assert cfg.softmax_scale() == pytest.approx(yarn_apply_mscale(hf.rope_parameters, 192 ** -0.5), rel=1e-15)


def test_deepseek_v2_lite_real_numbers():
    lite = mla.DEEPSEEK_V2_LITE
    assert (lite["num_hidden_layers"], lite["kv_lora_rank"], lite["qk_rope_head_dim"], lite["q_lora_rank"]) == (27, 512, 64, None)
    assert kvcache.kv_bytes_per_token(lite, "bfloat16") == 27 * 576 * 2 == 31_104
    assert kvcache.mla_expanded_kv_bytes_per_token(lite) == 27 * 16 * (192 + 128) * 2
    cfg = mla.MLAConfig.from_config(lite)
    assert cfg.q_lora_rank is None and cfg.latent_width == 576
    assert cfg.softmax_scale() == pytest.approx(192 ** -0.5 * (0.1 * 0.707 * math.log(40) + 1) ** 2, rel=1e-12)


@pytest.mark.parametrize("change,field", [
    (dict(factor=float("nan")), "factor"),
    (dict(mscale_all_dim="1"), "mscale_all_dim"),
    (dict(factor=None), "factor"),
])
def test_bad_yarn_fields_name_the_field(change, field):
    rope = {**YARN, **change}
    with pytest.raises(ValueError, match=f"^`{field}`"):
        mla.MLAConfig.from_config({**GEOMETRIES[2], "rope_parameters": rope})


@pytest.mark.parametrize("bad", [None, 3, "no-such-model"])
def test_a_layer_from_no_config_gets_one_sentence(bad):
    with pytest.raises(ValueError, match="^`config`"):
        MultiHeadLatentAttention(bad)


def test_plan_latent_cache_rounds_to_blocks_and_names_bad_input():
    points = [{"rank": 64, "ppl": 44.0}, {"rank": 128, "ppl": 22.0}, {"rank": 256, "ppl": 15.0}]
    assert mla.plan_latent_cache(points, 512, 4000, 16) == (128, 16 * 4032 * 30 * 128 * 2 / 2**20)
    exact = 4000 * 30 * 128 * 2 / 2**20                  # fits without paging, not with whole blocks
    assert mla.plan_latent_cache(points, exact, 4000, 1)[0] == 64
    assert mla.plan_latent_cache(points, 0.1, 4000, 1) is None
    with pytest.raises(ValueError, match="^`context`"):
        mla.plan_latent_cache(points, 512, 0, 1)
    with pytest.raises(ValueError, match="^`budget_mib`"):
        mla.plan_latent_cache(points, float("nan"), 10, 1)


# --------------------------------------------------------------------------------------------
# per-layer ranks (mla.ranks) and the latent path with absorbed values (mla.latent_attention)
# --------------------------------------------------------------------------------------------

def test_rank_plans_count_bytes_and_whole_blocks_and_name_bad_input():
    ranks = [100] * 10 + [200] * 20
    assert mla.plan_bytes_per_token(ranks) == 2 * sum(ranks)
    assert mla.plan_bytes_per_token(ranks, "fp8") == sum(ranks)
    assert mla.plan_cache_mib(ranks, 4000, 16) == 16 * 63 * 64 * 2 * sum(ranks) / 2**20    # ceil(4000/64) = 63
    assert mla.plan_cache_mib(ranks, 4032, 16) == mla.plan_cache_mib(ranks, 4000, 16)
    assert mla.expand_groups([1, 2], 3) == [1, 1, 1, 2, 2, 2]
    assert mla.check_ranks(torch.tensor([3] * 4), 4, 8) == [3] * 4
    assert mla.check_ranks([3.0] * 4, 4, 8) == [3] * 4
    for bad, word in (([3] * 3, "4 values"), ([3, 3, 3, 9], "1..8"), ([3, 3, 3, 2.5], "whole number"),
                      ("3333", "list"), ([3, 3, 3, True], "whole number")):
        with pytest.raises(ValueError, match=word):
            mla.check_ranks(bad, 4, 8)
    with pytest.raises(ValueError, match="context"):
        mla.plan_cache_mib(ranks, 0, 1)


def test_variance_plan_keeps_the_largest_eigenvalues_wherever_they_are():
    spectra = [torch.tensor([9.0, 8.0, 1.0, 0.5]), torch.tensor([7.0, 6.0, 5.0, 4.0])]
    assert mla.variance_plan(spectra, 4, min_rank=1) == [2, 2]             # 9, 7 floors; then 8, 6
    assert mla.variance_plan(spectra, 6, min_rank=1) == [2, 4]             # then 5, 4 before 1
    assert mla.kept_fraction(spectra, [2, 4]) == pytest.approx([17 / 18.5, 1.0])
    with pytest.raises(ValueError, match="total_rank"):
        mla.variance_plan(spectra, 1, min_rank=1)


def test_latent_ranks_convert_in_place_and_restore_even_on_error(smollm2, windows):
    model, _ = smollm2
    before = [layer.self_attn.k_proj for layer in model.model.layers]
    with pytest.raises(RuntimeError, match="boom"):
        with mla.latent_ranks(model, [64] * 30):
            assert model.model.layers[3].self_attn.k_proj.latent.rank == 64
            raise RuntimeError("boom")
    assert [layer.self_attn.k_proj for layer in model.model.layers] == before
    with pytest.raises(ValueError, match="30 values"):
        with mla.latent_ranks(model, [64] * 29):
            pass
    assert [layer.self_attn.k_proj for layer in model.model.layers] == before


def test_measure_ranks_at_full_rank_is_the_original_model(smollm2, windows):
    from vramlab.eval import perplexity

    model, _ = smollm2
    full = mla.measure_ranks(model, [384] * 30, windows[:1])
    assert full["ppl"] == pytest.approx(perplexity(model, windows[:1]), rel=1e-4)
    assert full["bytes_per_token"] == 23040 and len(full["window_nll"]) == 1
    mixed = mla.measure_ranks(model, [384] * 15 + [32] * 15, windows[:1])
    assert mixed["ppl"] > full["ppl"] * 1.05


def test_latent_logits_with_absorbed_values_equal_the_converted_forward(smollm2, windows):
    model, _ = smollm2
    ids = windows[:1, :64]
    for rank in (384, 48):
        with mla.latent_ranks(model, [rank] * 30):
            with torch.inference_mode():
                want = model(input_ids=ids, use_cache=False).logits
            got = mla.latent_logits(model, ids)
        assert (got - want).abs().max().item() < 1e-3, rank
    with pytest.raises(ValueError, match="not converted"):
        mla.latent_logits(model, ids)
    assert type(model.model.layers[0].self_attn).__name__ == "LlamaAttention"
    with pytest.raises(ValueError, match="input_ids"):
        mla.latent_logits(model, ids[0])


def test_absorbed_scores_never_build_per_head_keys():
    g = torch.Generator().manual_seed(0)
    q, c, w = (torch.randn(*s, generator=g, dtype=torch.float64) for s in ((3, 2, 5), (7, 11), (3, 5, 11)))
    naive = q @ torch.einsum("hdc,sc->hsd", w, c).transpose(-1, -2)
    assert torch.allclose(mla.absorbed_scores(q, c, w), naive, atol=1e-12)
