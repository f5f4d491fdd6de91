"""KV bytes per token for MHA, GQA, MQA and MLA, from the bundled configs and other inputs."""

from __future__ import annotations

import json

import pytest

from vramlab.serving.kvcache import (
    GiB, KiB, attention_shape, available_configs, estimate_num_parameters, format_kv_table, kv_bytes_per_token,
    kv_cache_bytes, kv_table, load_config, mla_vs_mha, num_parameters,
)
from vramlab.serving.vllm_memory import page_size_bytes

BUNDLED = ["llama-3.1-8b", "llama-3.1-70b", "qwen3-8b", "mistral-7b", "mixtral-8x7b", "deepseek-v2",
           "deepseek-v3", "deepseek-llm-67b", "smollm2-135m"]


def test_every_required_model_is_bundled_with_a_source():
    names = available_configs()
    for key in BUNDLED:
        assert key in names
        cfg = load_config(key)
        assert cfg["_source"].startswith("https://huggingface.co/") and cfg["_source"].endswith("config.json")
        assert cfg["_num_parameters"] > 0 and cfg["_num_parameters_source"]


def test_llama_31_8b_needs_128_kib_per_token_and_16_gib_at_131072():
    per_token = kv_bytes_per_token("llama-3.1-8b", "bfloat16")
    assert per_token == 128 * KiB == 2 * 32 * 8 * 128 * 2
    assert kv_cache_bytes("llama-3.1-8b", 131072) / GiB == 16.0


@pytest.mark.parametrize("name,layers", [("deepseek-v2", 60), ("deepseek-v3", 61)])
def test_mla_bytes_are_latent_plus_rope_per_layer(name, layers):
    assert kv_bytes_per_token(name, "bfloat16") == (512 + 64) * layers * 2
    # vLLM's MLAAttentionSpec: one "head" of kv_lora_rank + qk_rope_head_dim, no separate V
    assert page_size_bytes(name, block_size=16, kv_cache_dtype="bfloat16") == 16 * 1 * 576 * 2
    assert page_size_bytes(name, 16, "bfloat16") // 16 * layers == kv_bytes_per_token(name, "bfloat16")
    assert attention_shape(name).kind == "MLA"


def test_mla_ignores_the_transformers_head_dim_trap():
    cfg = load_config("deepseek-v3")
    trapped = {**cfg, "head_dim": cfg["qk_rope_head_dim"]}   # what transformers 5.x puts in head_dim
    assert kv_bytes_per_token(trapped) == kv_bytes_per_token(cfg) == 576 * 61 * 2


def test_pretrainedconfig_input_matches_the_dict():
    transformers = pytest.importorskip("transformers")
    cfg = {k: v for k, v in load_config("deepseek-v3").items() if not k.startswith("_")}
    pc = transformers.DeepseekV3Config(**cfg)
    assert kv_bytes_per_token(pc) == 576 * 61 * 2
    llama = transformers.LlamaConfig(num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                                     hidden_size=4096)
    assert kv_bytes_per_token(llama, "bfloat16") == 128 * KiB


def test_json_path_and_hf_repo_name_and_dict_inputs(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps(load_config("qwen3-8b")))
    want = 2 * 36 * 8 * 128 * 2
    assert kv_bytes_per_token(str(path)) == kv_bytes_per_token("Qwen/Qwen3-8B") == kv_bytes_per_token("Qwen3-8B") == want
    assert kv_bytes_per_token({"num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8,
                               "head_dim": 128}) == want


def test_mha_gqa_mqa_kinds_and_bytes():
    base = {"num_hidden_layers": 10, "num_attention_heads": 16, "hidden_size": 2048}
    assert attention_shape(base).kind == "MHA" and kv_bytes_per_token(base) == 2 * 10 * 16 * 128 * 2
    assert attention_shape({**base, "num_key_value_heads": 4}).kind == "GQA"
    mqa = {**base, "num_key_value_heads": 1}
    assert attention_shape(mqa).kind == "MQA" and kv_bytes_per_token(mqa) == 2 * 10 * 1 * 128 * 2


@pytest.mark.parametrize("bits,factor", [(8, 0.5), (6, 0.375), (4, 0.25), (16, 1.0)])
def test_kv_bits_scale_any_width(bits, factor):
    assert kv_bytes_per_token("llama-3.1-8b", kv_bits=bits) == 128 * KiB * factor


def test_fp8_and_auto_dtypes():
    assert kv_bytes_per_token("llama-3.1-8b", "fp8") == 64 * KiB
    assert kv_bytes_per_token("llama-3.1-8b", "auto") == 128 * KiB   # torch_dtype bfloat16
    assert kv_bytes_per_token("smollm2-135m", "float32") == 2 * 30 * 3 * 64 * 4


def test_deepseek_v2_claim_is_reproduced_at_6_bits_against_16_bit_67b():
    cmp = mla_vs_mha()
    assert cmp["mla_bytes_per_token"] == 576 * 60 * 6 / 8
    assert cmp["baseline_bytes_per_token"] == 2 * 95 * 8 * 128 * 2
    assert round(cmp["reduction"] * 100, 1) == 93.3
    same_precision = mla_vs_mha(mla_bits=16)
    assert round(same_precision["reduction"] * 100, 1) == 82.2   # not the headline number


def test_parameter_counts_from_configs_match_published():
    for name in ["llama-3.1-8b", "llama-3.1-70b", "qwen3-8b", "qwen3-0.6b", "mistral-7b", "mixtral-8x7b",
                 "smollm2-135m"]:
        assert estimate_num_parameters(name) == num_parameters(name), name
    for name in ["deepseek-v2", "deepseek-v3", "deepseek-llm-67b"]:
        assert estimate_num_parameters(name) == pytest.approx(num_parameters(name), rel=0.01), name
    assert num_parameters({**load_config("qwen3-8b"), "_num_parameters": None}) == 8_190_735_360


def test_table_rows_and_text():
    rows = kv_table(["llama-3.1-8b", "deepseek-v2"], context=131072)
    assert rows[0]["bytes_per_token"] == 131072 and rows[0]["GiB_at_131072"] == 16.0
    assert rows[1]["attention"] == "MLA" and "latent 512 + rope 64" in rows[1]["dims"]
    text = format_kv_table(rows)
    assert "Llama-3.1-8B" in text and "16.00" in text and "69,120" in text


@pytest.mark.parametrize("cfg,field", [
    ({"num_hidden_layers": 32, "hidden_size": 4096}, "num_attention_heads"),
    ({"num_attention_heads": 32, "hidden_size": 4096}, "num_hidden_layers"),
    ({"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 0, "hidden_size": 4096},
     "num_key_value_heads"),
    ({"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 5, "hidden_size": 4096},
     "num_key_value_heads"),
    ({"num_hidden_layers": 60, "num_attention_heads": 128, "kv_lora_rank": 512}, "qk_rope_head_dim"),
])
def test_bad_configs_name_the_field(cfg, field):
    with pytest.raises(ValueError, match=field):
        kv_bytes_per_token(cfg)


def test_bad_widths_and_names():
    with pytest.raises(ValueError, match="kv_bits"):
        kv_bytes_per_token("llama-3.1-8b", kv_bits=-4)
    with pytest.raises(ValueError, match="kv_dtype"):
        kv_bytes_per_token("llama-3.1-8b", "fp7")
    with pytest.raises(ValueError, match="config"):
        load_config("no-such-model")
    with pytest.raises(ValueError, match="context"):
        kv_table(context=0)


def test_auto_dtype_of_a_float32_pretrained_config_is_16_bit():
    """vLLM serves float32 checkpoints in 16 bits, so 'auto' must not double the cache."""
    from transformers import LlamaConfig

    cfg = LlamaConfig(num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3, hidden_size=576,
                      head_dim=64, dtype="float32")
    assert kv_bytes_per_token(cfg, "auto") == 2 * 30 * 3 * 64 * 2
    assert kv_bytes_per_token(cfg, "float32") == 2 * 30 * 3 * 64 * 4


def test_load_config_on_broken_json_names_the_file(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text('{"num_hidden_layers": 32,,}')
    with pytest.raises(ValueError, match=r"`config` file .*config\.json is not valid JSON \(.* line 1, column \d+\)"):
        load_config(bad)
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]")
    with pytest.raises(ValueError, match="holds a JSON list"):
        load_config(str(listed))


# --- hardening: bad numbers get one sentence naming the field ---------------------------------------

@pytest.mark.parametrize("bits", [float("inf"), float("nan"), -4, 0, "8", True])
def test_kv_bits_must_be_finite_and_positive(bits):
    from vramlab.serving.kvcache import latent_kv_bytes_per_token

    with pytest.raises(ValueError, match="`kv_bits` must be a finite positive number of bits"):
        kv_bytes_per_token("llama-3.1-8b", kv_bits=bits)
    with pytest.raises(ValueError, match="`kv_bits`"):
        latent_kv_bytes_per_token(2, 64, 0, kv_bits=bits)


def test_a_derived_head_dim_of_zero_is_refused():
    cfg = {"num_hidden_layers": 2, "num_attention_heads": 8, "hidden_size": 4}
    with pytest.raises(ValueError, match="`hidden_size` \\(4\\) is smaller than num_attention_heads \\(8\\)"):
        kv_bytes_per_token(cfg)
    assert kv_bytes_per_token({**cfg, "head_dim": 16}) == 2 * 8 * 2 * 16 * 2   # an explicit head_dim is fine


@pytest.mark.parametrize("value", [float("nan"), float("inf"), "32", 2.5, -1, True])
def test_nan_inf_and_str_config_fields_name_the_field(value):
    from vramlab.serving.kvcache import estimate_num_parameters

    base = {"num_hidden_layers": 2, "num_attention_heads": 8, "hidden_size": 64,
            "intermediate_size": 128, "vocab_size": 100}
    for key in ("num_hidden_layers", "num_attention_heads", "hidden_size"):
        with pytest.raises(ValueError, match=f"`{key}` must be a positive integer"):
            kv_bytes_per_token({**base, key: value})
    for key in ("intermediate_size", "vocab_size"):
        with pytest.raises(ValueError, match=f"`{key}` must be a positive integer"):
            estimate_num_parameters({**base, key: value})
    moe = {**base, "n_routed_experts": value, "moe_intermediate_size": 32}
    with pytest.raises(ValueError, match="`n_routed_experts` must be a positive integer"):
        estimate_num_parameters(moe)
