"""A custom attention function with post-RoPE hooks, registered with transformers.

transformers (5.x) looks up every attention module's kernel by name in ``AttentionInterface``:
``LlamaAttention.forward`` projects q/k/v, applies RoPE, updates the KV cache, then calls
``ALL_ATTENTION_FUNCTIONS.get_interface(config._attn_implementation, ...)``. We register one more
name, ``"vramlab"``, whose function runs optional per-module hooks on the post-RoPE tensors and then
calls transformers' own ``sdpa_attention_forward`` — so with no hooks set it *is* sdpa, bit for bit.

Hooks (plain attributes on each attention module, e.g. ``model.model.layers[3].self_attn``):

``module.vramlab_qk_transform(q, k) -> (q, k)``
    ``q`` is ``[batch, heads, seq, head_dim]``, ``k`` is ``[batch, kv_heads, seq, head_dim]``.
    Used by :mod:`vramlab.quarot.rotate` for QuaRot's head-wise Hadamard on Q and K after RoPE. Any
    transform with ``q Hᵀ (k H)ᵀ = q kᵀ`` (orthogonal ``H`` on ``head_dim``) leaves the scores
    unchanged while the keys that get quantized are the rotated ones.
``module.vramlab_k_quantizer(k) -> k`` and ``module.vramlab_v_quantizer(v) -> v``
    ``[batch, kv_heads, seq, head_dim]`` each; set by :mod:`vramlab.quarot.quant` for the (fake) KV-cache
    quantizer. They run after ``vramlab_qk_transform``.
``module.vramlab_kv_observer(k, v) -> None``
    Called after ``vramlab_qk_transform`` and before the quantizers (sees the K/V a cache quantizer
    would quantize); :mod:`vramlab.quarot.outliers` uses it to collect statistics. Its return is ignored.

Note on the cache: transformers writes K/V into the cache *before* calling the attention function,
so the cache itself holds the un-hooked K/V and the hooks run on the whole (cached + new) K/V at
every step. For prefill/perplexity that is the same computation; for a fake per-token (or per
token-group) quantizer it is also the same, because each token is quantized independently and
deterministically. A real packed 4-bit cache would need a custom ``Cache`` class.

Usage::

    from vramlab.quarot import attention
    attention.enable(model)                      # config._attn_implementation = "vramlab"
    model.model.layers[0].self_attn.vramlab_k_quantizer = my_fake_quant
    ...
    attention.clear_hooks(model); attention.disable(model)   # back to "sdpa"
"""

from __future__ import annotations

NAME = "vramlab"
HOOK_ATTRS = ("vramlab_qk_transform", "vramlab_kv_observer", "vramlab_k_quantizer", "vramlab_v_quantizer")

_registered = False


def vramlab_attention_forward(module, query, key, value, attention_mask, **kwargs):
    """Apply the module's post-RoPE hooks (if any), then transformers' sdpa attention."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    qk = getattr(module, "vramlab_qk_transform", None)
    if qk is not None:
        query, key = qk(query, key)
    obs = getattr(module, "vramlab_kv_observer", None)
    if obs is not None:
        obs(key, value)
    kq = getattr(module, "vramlab_k_quantizer", None)
    if kq is not None:
        key = kq(key)
    vq = getattr(module, "vramlab_v_quantizer", None)
    if vq is not None:
        value = vq(value)
    return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)


def register() -> str:
    """Register ``"vramlab"`` with transformers' attention and mask interfaces (idempotent)."""
    global _registered
    if not _registered:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

        AttentionInterface.register(NAME, vramlab_attention_forward)
        # Without a mask function of the same name transformers builds no mask at all (it assumes a
        # backend that needs none); sdpa's mask keeps padding and causal masking identical to sdpa.
        AttentionMaskInterface.register(NAME, sdpa_mask)
        _registered = True
    return NAME


def attention_modules(model) -> list:
    """The attention modules of a decoder-only HF model (every module with ``q_proj`` and ``o_proj``)."""
    return [m for m in model.modules() if hasattr(m, "q_proj") and hasattr(m, "o_proj")]


def enable(model):
    """Switch ``model`` to the ``"vramlab"`` attention function (in place); returns the model.

    Uses ``model.set_attn_implementation`` (transformers >= 4.56/5.x) and falls back to setting
    ``config._attn_implementation`` directly.
    """
    if not hasattr(model, "config"):
        raise TypeError(f"model must be a transformers model with a config (got {type(model).__name__}).")
    register()
    if getattr(model.config, "_attn_implementation", None) == NAME:
        return model
    setter = getattr(model, "set_attn_implementation", None)
    if setter is not None:
        setter(NAME)
    if getattr(model.config, "_attn_implementation", None) != NAME:
        model.config._attn_implementation = NAME
    return model


def disable(model, implementation: str = "sdpa"):
    """Switch back to a stock implementation (default ``"sdpa"``); the hooks stay but are unused."""
    setter = getattr(model, "set_attn_implementation", None)
    if setter is not None:
        setter(implementation)
    else:
        model.config._attn_implementation = implementation
    return model


def is_enabled(model) -> bool:
    return getattr(model.config, "_attn_implementation", None) == NAME


def clear_hooks(model, names=HOOK_ATTRS) -> None:
    """Remove the given hook attributes from every attention module."""
    for module in attention_modules(model):
        for name in names:
            if hasattr(module, name):
                delattr(module, name)
