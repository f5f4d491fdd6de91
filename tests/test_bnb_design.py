"""A learner's bitsandbytes design: checked in one sentence, mapped to the real BitsAndBytesConfig."""

from __future__ import annotations

import pytest
import torch

from vramlab.bnb import design


def test_a_design_maps_to_transformers_config():
    cfg = design.design_config({"bits": 4, "quant_type": "nf4", "double_quant": True, "compute_dtype": "float32",
                                "skip": ["v_proj", "lm_head", "v_proj"]})
    assert cfg.load_in_4bit and cfg.bnb_4bit_quant_type == "nf4" and cfg.bnb_4bit_use_double_quant
    assert cfg.bnb_4bit_compute_dtype == torch.float32 and cfg.llm_int8_skip_modules == ["lm_head", "v_proj"]
    cfg = design.design_config({"bits": 8})
    assert cfg.load_in_8bit and not cfg.load_in_4bit and cfg.llm_int8_skip_modules is None
    # 4-bit keys mean nothing for 8 bits: dropped, so equal designs have equal keys
    assert design.design_key({"bits": 8, "double_quant": True}) == design.design_key({"bits": 8})
    assert design.design_key({"bits": 4}) == design.design_key(
        {"bits": 4, "quant_type": "nf4", "double_quant": False, "compute_dtype": "bfloat16", "skip": None})


@pytest.mark.parametrize("bad, words", [
    (None, "a design is a dict"),
    ({"bits": True}, "'bits' must be 8"),
    ({"bits": 4, "quant_type": "int4"}, "'quant_type' must be 'nf4' or 'fp4'"),
    ({"bits": 4, "double_quant": "yes"}, "'double_quant' must be True or False"),
    ({"bits": 4, "compute_dtype": "float8"}, "'compute_dtype' must be one of"),
    ({"bits": 4, "skip": "lm_head"}, "'skip' must be None or a list"),
    ({"bits": 4, "skip": ["x" * 201]}, "'skip' must be None or a list"),
    ({"bits": 4, "skip": ["a"] * 65}, "'skip' must be None or a list"),
    ({"bits": 4, "layers": 3}, "unknown key(s) 'layers'"),
])
def test_bad_designs_are_one_sentence(bad, words):
    with pytest.raises(ValueError) as info:
        design.normalize_design(bad)
    assert words in str(info.value) and "\n" not in str(info.value)


def test_skip_patterns_match_as_transformers_matches_them():
    """transformers 5.25 should_convert_module: a prefix up to a '.', a regex with that boundary, or a suffix."""
    from transformers.quantizers.quantizers_utils import should_convert_module

    name = "model.layers.29.self_attn.v_proj"
    assert not should_convert_module(name, ["v_proj"]) and not should_convert_module(name, ["model.layers.29"])
    assert should_convert_module(name, ["self_attn"]) and should_convert_module(name, ["model.layers.2"])
    assert not should_convert_module(name, [r"model.layers.2[0-9].self_attn.v_proj"])
