"""Every causal-LM config transformers builds reaches the dry run, as a config object or a dict, by its own
attribute names (vramlab.configs.load_config adds the LLaMA-named sizes; it changes no existing key)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")

from vramlab.configs import load_config  # noqa: E402
from vramlab.vram.dryrun import dry_run  # noqa: E402

SMALL = dict(vocab_size=512)


def _configs():
    return {
        "gpt2": T.GPT2Config(n_embd=64, n_layer=2, n_head=4, **SMALL),
        "opt": T.OPTConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, ffn_dim=128,
                           word_embed_proj_dim=64, **SMALL),
        "gpt_neox": T.GPTNeoXConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                                    **SMALL),
        "gemma": T.GemmaConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1,
                               head_dim=16, intermediate_size=128, **SMALL),
        "gemma2": T.Gemma2Config(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                 head_dim=16, intermediate_size=128, **SMALL),
        "phi": T.PhiConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, **SMALL),
        "qwen2": T.Qwen2Config(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                               intermediate_size=128, **SMALL),
        "mistral": T.MistralConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                   intermediate_size=128, **SMALL),
        "falcon": T.FalconConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, **SMALL),
        "gptj": T.GPTJConfig(n_embd=64, n_layer=2, n_head=4, rotary_dim=8, **SMALL),
        "bloom": T.BloomConfig(hidden_size=64, n_layer=2, n_head=4, **SMALL),
        "gpt_bigcode": T.GPTBigCodeConfig(n_embd=64, n_layer=2, n_head=4, **SMALL),
        "mpt": T.MptConfig(d_model=64, n_layers=2, n_heads=4, **SMALL),
        "gpt_neo": T.GPTNeoConfig(hidden_size=64, num_layers=2, num_heads=4, attention_types=[[["global", "local"], 1]],
                                  **SMALL),
    }


# (kv heads, MLP width) each architecture really has, from its config class's own rule
EXPECTED = {"gpt2": (4, 256), "opt": (4, 128), "gpt_neox": (4, 128), "gemma": (1, 128), "gemma2": (2, 128),
            "phi": (4, 128), "qwen2": (2, 128), "mistral": (2, 128), "falcon": (1, 256), "gptj": (4, 256),
            "bloom": (4, 256), "gpt_bigcode": (1, 256), "mpt": (4, 256), "gpt_neo": (4, 256)}


@pytest.mark.parametrize("arch", sorted(EXPECTED))
def test_a_config_object_and_its_dict_both_run(arch):
    obj = _configs()[arch]
    own = obj.to_dict()
    cfg = load_config(own)
    for key, value in own.items():              # nothing the config said is changed (a None may be filled in)
        assert cfg[key] == value or value is None
    kv, mlp = EXPECTED[arch]
    assert (cfg.shape.num_kv_heads, cfg["intermediate_size"], cfg["hidden_size"], cfg["num_hidden_layers"]) == \
        (kv, mlp, 64, 2)
    a = dry_run(obj, 2, 16, new_tokens=1)
    b = dry_run(own, 2, 16, new_tokens=1)
    assert a.peak_bytes == b.peak_bytes and a.breakdown("end") == b.breakdown("end")
    # the weights are those of transformers' own model of the original config: the added keys change nothing
    with torch.device("meta"):
        ref = T.AutoModelForCausalLM.from_config(obj, dtype=torch.bfloat16, attn_implementation="eager")
    weights = {id(p.untyped_storage()): p.untyped_storage().nbytes() for p in ref.parameters()}
    assert a.breakdown("load")["weights"] >= sum(weights.values())


def test_no_sdpa_path_falls_back_to_eager():
    tr = dry_run(_configs()["gemma2"], 1, 32)
    assert tr.attn_implementation == "eager" and tr.sdpa_kernel is None
    tr = dry_run(_configs()["qwen2"], 1, 32)
    assert tr.attn_implementation == "sdpa" and tr.sdpa_kernel


def test_gpt2_kv_cache_uses_its_own_sizes():
    from vramlab.serving.kvcache import kv_cache_bytes

    cfg = load_config(T.GPT2Config(n_embd=64, n_layer=2, n_head=4, **SMALL))
    assert int(kv_cache_bytes(cfg, 10, "bfloat16")) == 2 * 2 * 10 * 64 * 2
