"""The geometry of one MLA layer (``MLAConfig``) read from a DeepSeek-V2/V3 config, with its RoPE.

See :mod:`vramlab.mla` for the attention itself; shapes and names as there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from vramlab.serving import kvcache


# FlashMLA's paged KV cache has a block size of 64 (deepseek-ai/FlashMLA README, first release:
# "Paged kvcache with block size of 64"), so vLLM forces it for MLA models on that backend:
# vllm/platforms/cuda.py ``check_and_update_config`` sets ``cache_config.block_size = 64`` and logs
# "Forcing kv cache block size to 64 for FlashMLA backend." (seen as ``[cuda.py:160]`` in v0.8.3
# start-up logs; current source does it when ``block_size % 64 != 0``). vLLM's CUTLASS MLA backend
# (Blackwell) forces 128 instead: the same function logs "Forcing kv cache block size to 128 for
# CUTLASS_MLA backend." (vllm/platforms/cuda.py, in releases since August 2025; vLLM PR #22738's log
# shows it as ``[cuda.py:184]``).
MLA_BLOCK_SIZE = 64
CUTLASS_MLA_BLOCK_SIZE = 128


def _fail(field: str, problem: str) -> ValueError:
    return ValueError(f"`{field}` {problem}.")


def _finite(field: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _fail(field, f"must be a finite number (got {value!r})")
    return float(value)


# --------------------------------------------------------------------------------------------
# Config
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class MLAConfig:
    """The geometry of one MLA layer (the fields of a DeepSeek-V2/V3 ``config.json``)."""

    hidden_size: int
    num_attention_heads: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    q_lora_rank: int | None = None
    rope_theta: float = 10000.0
    rope_interleave: bool = True
    rope_scaling: dict | None = None          # transformers' rope_parameters when not "default"
    rms_norm_eps: float = 1e-6
    attention_bias: bool = False
    max_position_embeddings: int = 4096

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def latent_width(self) -> int:
        """Elements cached per token and layer: d_c + d_r (576 for DeepSeek-V2/V3)."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    @classmethod
    def from_config(cls, config: Any) -> "MLAConfig":
        """Read and validate a DeepSeek-style config (dict, JSON path, bundled name or PretrainedConfig).

        Raises one ``ValueError`` naming the field for a bad geometry: a missing or non-positive
        size, an odd ``qk_rope_head_dim`` or one larger than ``head_dim``, or a LoRA rank larger
        than the projection it factorises.
        """
        if isinstance(config, MLAConfig):
            return config
        cfg = kvcache.load_config(config)

        def pos(key: str, value: Any = None) -> int:
            value = cfg.get(key) if value is None else value
            if value is None:
                raise _fail(key, "is missing from the config (an MLA layer needs it)")
            if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
                    or value != int(value) or value <= 0):
                raise _fail(key, f"must be a positive integer (got {value!r})")
            return int(value)

        def positive_float(key: str, value: Any, default: float) -> float:
            if value is None:
                return default
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise _fail(key, f"must be a finite positive number (got {value!r})")
            return float(value)

        hidden, heads = pos("hidden_size"), pos("num_attention_heads")
        rope = pos("qk_rope_head_dim")
        if rope % 2:
            raise _fail("qk_rope_head_dim", f"({rope}) must be even: RoPE rotates pairs of dimensions")
        if cfg.get("qk_nope_head_dim") is None and cfg.get("head_dim") is not None:
            head_dim = pos("head_dim")   # a plain config giving the full per-head query/key width
            if rope >= head_dim:
                raise _fail("qk_rope_head_dim", f"({rope}) must be smaller than head_dim ({head_dim}): "
                            "the rest of each head is its content (no-RoPE) part")
            nope = head_dim - rope
        else:
            nope = pos("qk_nope_head_dim")
        v_dim = pos("v_head_dim", cfg.get("v_head_dim") or nope)
        rank = pos("kv_lora_rank")
        kv_out = heads * (nope + v_dim)
        if rank > min(hidden, kv_out):
            raise _fail("kv_lora_rank", f"({rank}) is larger than the projection it compresses "
                        f"(hidden_size {hidden} -> num_attention_heads x (qk_nope_head_dim + v_head_dim) = "
                        f"{kv_out}); use at most {min(hidden, kv_out)}")
        q_rank = cfg.get("q_lora_rank")
        if q_rank is not None:
            q_rank = pos("q_lora_rank")
            q_out = heads * (nope + rope)
            if q_rank > min(hidden, q_out):
                raise _fail("q_lora_rank", f"({q_rank}) is larger than the projection it compresses "
                            f"(hidden_size {hidden} -> {q_out}); use at most {min(hidden, q_out)} or None")
        params = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
        if not isinstance(params, dict):
            raise _fail("rope_parameters", f"must be a dict such as {{'rope_type': 'yarn', 'factor': 40}} "
                        f"(got {type(params).__name__})")
        theta = params.get("rope_theta") if params.get("rope_theta") is not None else cfg.get("rope_theta")
        theta = positive_float("rope_theta", theta, 10000.0)
        rope_type = params.get("rope_type", params.get("type", "default"))
        if rope_type != "default":
            # the rope types transformers can compute: keys of ROPE_INIT_FUNCTIONS
            # (transformers/modeling_rope_utils.py); anything else would fail later with a KeyError
            from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
            if not isinstance(rope_type, str) or rope_type not in ROPE_INIT_FUNCTIONS:
                raise _fail("rope_type", f"{rope_type!r} is unknown; use default or one of "
                            f"{', '.join(sorted(ROPE_INIT_FUNCTIONS))}")
        scaling = {k: v for k, v in params.items()} if rope_type != "default" else None
        if scaling is not None:
            for key in ("factor", "mscale", "mscale_all_dim"):
                if key in scaling and scaling[key] is not None:
                    positive_float(key, scaling[key], 1.0) if key == "factor" else _finite(key, scaling[key])
            if scaling.get("mscale_all_dim") and scaling.get("factor") is None:
                raise _fail("factor", "is missing from rope_parameters; YaRN with mscale_all_dim needs it "
                            "(DeepSeek-V3 uses 40)")
        max_pos = pos("max_position_embeddings") if cfg.get("max_position_embeddings") is not None else 4096
        return cls(hidden, heads, rank, nope, rope, v_dim, q_rank, theta,
                   bool(cfg.get("rope_interleave", True)), scaling,
                   positive_float("rms_norm_eps", cfg.get("rms_norm_eps"), 1e-6),
                   bool(cfg.get("attention_bias", False)), max_pos)

    def softmax_scale(self) -> float:
        """1/sqrt(d_n + d_r), times mscale^2 under YaRN, where mscale = 0.1 * mscale_all_dim * ln(factor) + 1.

        As transformers 5.24 ``transformers/models/deepseek_v3/modeling_deepseek_v3.py``
        (``DeepseekV3Attention.__init__``: ``self.scaling = yarn_apply_mscale(config.rope_parameters,
        self.qk_head_dim ** (-0.5))``, with ``yarn_get_mscale``) and DeepSeek-V3 ``inference/model.py``
        (``MLA.__init__``: ``self.softmax_scale = self.softmax_scale * mscale * mscale``). DeepSeek-V3's
        config (YaRN, factor 40, mscale_all_dim 1.0) gives 192 ** -0.5 x 1.369 ** 2 = 0.1352, not 0.0722.
        """
        scale = self.qk_head_dim ** -0.5
        params = self.rope_scaling or {}
        mscale_all_dim = params.get("mscale_all_dim", 0)
        if mscale_all_dim:       # only when the rope type is not "default" (rope_scaling is None then)
            mscale = 0.1 * float(mscale_all_dim) * math.log(float(params["factor"])) + 1.0
            scale = scale * mscale * mscale
        return scale

    def rope_inv_freq(self) -> tuple[torch.Tensor, float]:
        """(inverse frequencies [d_r / 2] in float32, cos/sin scale). Default RoPE is computed here;
        other types (YaRN) use transformers' own ``ROPE_INIT_FUNCTIONS``."""
        if not self.rope_scaling:
            dim = self.qk_rope_head_dim
            return 1.0 / (self.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.float) / dim)), 1.0
        from transformers import DeepseekV3Config
        from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

        params = {**self.rope_scaling, "rope_theta": self.rope_theta}
        hf = DeepseekV3Config(hidden_size=self.hidden_size, num_attention_heads=self.num_attention_heads,
                              qk_rope_head_dim=self.qk_rope_head_dim, qk_nope_head_dim=self.qk_nope_head_dim,
                              max_position_embeddings=self.max_position_embeddings, rope_parameters=params)
        inv_freq, attention_scaling = ROPE_INIT_FUNCTIONS[params.get("rope_type", params.get("type"))](hf)
        return inv_freq.float(), float(attention_scaling)


# DeepSeek-V2-Lite's public config.json (https://huggingface.co/deepseek-ai/DeepSeek-V2-Lite/blob/main/config.json),
# the fields that size it, verbatim: 27 layers, 16 heads, kv_lora_rank 512, qk_rope_head_dim 64, no query LoRA
# (q_lora_rank null), YaRN factor 40 with mscale = mscale_all_dim = 0.707. Kept here rather than in
# ``vramlab/configs/`` so the tables that list every bundled config (notebooks 03 and 06) do not change.
DEEPSEEK_V2_LITE = {
    "_name": "DeepSeek-V2-Lite", "_hf_repo": "deepseek-ai/DeepSeek-V2-Lite",
    "_source": "https://huggingface.co/deepseek-ai/DeepSeek-V2-Lite/blob/main/config.json",
    "architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2", "attention_bias": False,
    "first_k_dense_replace": 1, "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 10944,
    "kv_lora_rank": 512, "max_position_embeddings": 163840, "moe_intermediate_size": 1408, "moe_layer_freq": 1,
    "n_group": 1, "n_routed_experts": 64, "n_shared_experts": 2, "norm_topk_prob": False, "num_attention_heads": 16,
    "num_experts_per_tok": 6, "num_hidden_layers": 27, "num_key_value_heads": 16, "q_lora_rank": None,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "rms_norm_eps": 1e-06,
    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 0.707, "mscale_all_dim": 0.707,
                     "original_max_position_embeddings": 4096, "type": "yarn"},
    "rope_theta": 10000, "routed_scaling_factor": 1.0, "scoring_func": "softmax", "tie_word_embeddings": False,
    "topk_group": 1, "topk_method": "greedy", "torch_dtype": "bfloat16", "v_head_dim": 128, "vocab_size": 102400,
}


__all__ = ["MLA_BLOCK_SIZE", "CUTLASS_MLA_BLOCK_SIZE", "MLAConfig", "DEEPSEEK_V2_LITE"]
