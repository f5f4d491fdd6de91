"""Model configs: the bundled public ``config.json`` facts, and one normalised form for every entry point.

A config arrives as a bundled name (``"llama-3.1-8b"``, ``"Qwen/Qwen3-8B"``), a JSON path, a dict or a
``transformers.PretrainedConfig``. :func:`load_config` turns it into a :class:`ModelConfig` once, at the
entry point of a public function (``vllm_memory.plan``, ``dispatch.empty_model``, ``MLAConfig.from_config``,
...); helpers below the entry receive that object, and :func:`load_config` hands it back unchanged (no copy,
no re-read). Its attention geometry, :attr:`ModelConfig.shape`, is derived on first use and kept.

The JSON files beside this module each cite their source (``_source``) and, where known, the parameter
count (``_num_parameters``); keys starting with ``_`` are vramlab metadata.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

CONFIG_DIR = Path(__file__).resolve().parent


def _fail(field: str, problem: str) -> ValueError:
    return ValueError(f"`{field}` {problem}.")


# --------------------------------------------------------------------------------------------
# Loading configs
# --------------------------------------------------------------------------------------------

def available_configs() -> list[str]:
    """Names of the bundled configs (file stems in ``src/vramlab/configs``)."""
    return sorted(p.stem for p in CONFIG_DIR.glob("*.json"))


def _normalise_name(name: str) -> str:
    return name.lower().replace("_", "-").replace(" ", "-").split("/")[-1]


class ModelConfig(dict):
    """An HF-style config dict, normalised once (:func:`load_config`); ``shape`` is its attention geometry.

    It is a plain ``dict`` of the config's keys (``cfg["num_hidden_layers"]``, ``cfg.get("head_dim")``), so
    code that reads a config reads this too; treat it as read-only once made.
    """

    __slots__ = ("_shape",)

    @property
    def shape(self) -> "AttentionShape":
        """The attention geometry (:func:`attention_shape`), derived on first use and kept."""
        try:
            return self._shape
        except AttributeError:
            self._shape = _derive_shape(self)
            return self._shape


def load_config(source: Any) -> ModelConfig:
    """Return the :class:`ModelConfig` for a bundled name, a JSON path, a dict or a ``PretrainedConfig``.

    Bundled names are matched case-insensitively against the file stems and the ``_name`` /
    ``_hf_repo`` keys (``"Qwen3-8B"``, ``"qwen3-8b"`` and ``"Qwen/Qwen3-8B"`` all work). A dict is
    copied; keys starting with ``_`` are vramlab metadata (source, parameter count). A ``ModelConfig``
    is already normalised and comes back as it is.
    """
    if isinstance(source, ModelConfig):
        return source
    return _normalise(source)


def _normalise(source: Any) -> ModelConfig:
    """The one place a config is read and normalised (counted by a test: once per entry call)."""
    if source is None:
        raise ValueError("`config` is None; pass a model name, a JSON path, a dict or a PretrainedConfig.")
    if isinstance(source, Mapping):
        cfg = dict(source)
    elif hasattr(source, "to_dict") and callable(source.to_dict):  # transformers.PretrainedConfig
        cfg = dict(source.to_dict())
        text_cfg = cfg.get("text_config")
        if "num_hidden_layers" not in cfg and isinstance(text_cfg, Mapping):
            cfg = {**text_cfg, **{k: v for k, v in cfg.items() if k.startswith("_")}}
    elif isinstance(source, (str, Path)):
        path = Path(source)
        if path.suffix == ".json" and path.is_file():
            cfg = _read_json(path)
        else:
            cfg = _load_bundled(str(source))
    else:
        raise ValueError(f"`config` has an unsupported type {type(source).__name__}; "
                         "pass a model name, a JSON path, a dict or a PretrainedConfig.")
    cfg.setdefault("_name", cfg.get("_name_or_path") or cfg.get("model_type") or "custom")
    _add_canonical_keys(cfg, source)
    return ModelConfig(cfg)


# Each architecture's own names for the sizes vramlab reads by their LLaMA names. transformers' configs map
# some of them (``attribute_map``: GPT2Config maps hidden_size -> n_embd); a dict has no such map, and some
# sizes are mapped nowhere (OPT's ``ffn_dim``, GPT-2's ``n_inner``). Sources: the config classes of
# transformers 5.24 (models/<arch>/configuration_<arch>.py).
_ALIASES: dict[str, tuple[str, ...]] = {
    "hidden_size": ("n_embd", "d_model", "n_embed", "dim", "model_dim", "emb_size"),
    "num_hidden_layers": ("n_layer", "n_layers", "num_layers", "num_decoder_layers"),
    "num_attention_heads": ("n_head", "n_heads", "num_heads", "decoder_attention_heads"),
    "intermediate_size": ("n_inner", "ffn_dim", "ffn_hidden_size", "d_ff", "inner_hidden_size", "ff_dim",
                          "decoder_ffn_dim"),
    "max_position_embeddings": ("n_positions", "max_seq_len", "seq_length", "n_ctx", "max_sequence_length"),
    "num_key_value_heads": ("num_kv_heads", "n_head_kv"),
}
# Where the architecture's MLP is 4 x hidden when its own key is missing or None (GPT-2's n_inner=None,
# BLOOM, GPT-J, CodeGen, GPTBigCode, Falcon's ffn_hidden_size=None).
_FOUR_X_MLP = {"gpt2", "gptj", "bloom", "codegen", "gpt_bigcode", "falcon", "gpt_neo", "xglm", "biogpt",
               "imagegpt", "ctrl", "openai-gpt", "mpt", "persimmon", "git"}


def _add_canonical_keys(cfg: dict, source: Any) -> None:
    """Add the LLaMA-named sizes (``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``,
    ``intermediate_size``, ``max_position_embeddings``, ``num_key_value_heads``) from the architecture's own
    names, where the config lacks them. Existing keys are never changed; nothing is removed."""
    attribute_map = dict(getattr(type(source), "attribute_map", {}) or {}) if not isinstance(source, Mapping) else {}
    model_type = cfg.get("model_type")
    if not attribute_map and isinstance(model_type, str) and any(
            cfg.get(k) is None for k in ("hidden_size", "num_hidden_layers", "num_attention_heads")):
        try:   # a dict: its architecture's map, if transformers knows the model_type
            from transformers.models.auto.configuration_auto import CONFIG_MAPPING

            if model_type in CONFIG_MAPPING:
                attribute_map = dict(getattr(CONFIG_MAPPING[model_type], "attribute_map", {}) or {})
        except ImportError:
            pass
    for canonical, own in attribute_map.items():
        if cfg.get(canonical) is None and cfg.get(own) is not None and not isinstance(cfg.get(own), (dict, list)):
            cfg[canonical] = cfg[own]
    if model_type == "falcon" and cfg.get("num_key_value_heads") is None and cfg.get("num_attention_heads"):
        # FalconConfig: num_kv_heads counts only with new_decoder_architecture; else multi_query means one
        cfg["num_key_value_heads"] = (cfg.get("num_kv_heads") or cfg["num_attention_heads"]
                                      if cfg.get("new_decoder_architecture")
                                      else 1 if cfg.get("multi_query", True) else cfg["num_attention_heads"])
    for canonical, names in _ALIASES.items():
        if cfg.get(canonical) is None:
            for name in names:
                value = cfg.get(name)
                if value is not None and not isinstance(value, (bool, dict, list)):
                    cfg[canonical] = value
                    break
    hidden = cfg.get("hidden_size")
    if cfg.get("intermediate_size") is None and isinstance(hidden, int) and not isinstance(hidden, bool):
        if model_type in _FOUR_X_MLP:
            ratio = cfg.get("expansion_ratio") if model_type == "mpt" else 4
            cfg["intermediate_size"] = int(ratio or 4) * hidden
    heads = cfg.get("num_attention_heads")
    if cfg.get("num_key_value_heads") is None and isinstance(heads, int) and not isinstance(heads, bool):
        if model_type == "gpt_bigcode" and cfg.get("multi_query", True):
            cfg["num_key_value_heads"] = 1              # GPTBigCodeConfig: multi_query=True by default


def _read_json(path: Path) -> dict:
    """A JSON object from ``path``; a broken file gives one sentence naming it."""
    try:
        cfg = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"`config` file {path} is not valid JSON ({exc.msg} at line {exc.lineno}, column "
                         f"{exc.colno}); fix the file or download the model's config.json again.") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"`config` file {path} cannot be read ({exc}).") from None
    if not isinstance(cfg, dict):
        raise ValueError(f"`config` file {path} holds a JSON {type(cfg).__name__}, not an object of config keys.")
    return cfg


def _load_bundled(name: str) -> dict:
    want = _normalise_name(name)
    for path in CONFIG_DIR.glob("*.json"):
        cfg = _read_json(path)
        names = {path.stem, _normalise_name(cfg.get("_name", "")), _normalise_name(cfg.get("_hf_repo", ""))}
        if want in names:
            return cfg
    raise ValueError(f"`config` {name!r} is neither a JSON file nor a bundled model; "
                     f"bundled: {', '.join(available_configs())}.")


# --------------------------------------------------------------------------------------------
# Attention shape
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class AttentionShape:
    """What the KV cache of one model looks like (per token, per layer)."""

    name: str
    kind: str                 # "MHA", "GQA", "MQA" or "MLA"
    layers: int
    num_heads: int
    num_kv_heads: int         # KV heads cached per layer (1 latent "head" for MLA)
    head_dim: int             # K width per head (MLA: kv_lora_rank + qk_rope_head_dim, as vLLM caches it)
    v_head_dim: int           # V width per head (0 for MLA: no separate V is cached)
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    max_position_embeddings: int | None = None
    torch_dtype: str | None = None

    @property
    def elements_per_token_per_layer(self) -> int:
        """Cached elements per token in one layer."""
        if self.kind == "MLA":
            return int(self.kv_lora_rank) + int(self.qk_rope_head_dim)
        return self.num_kv_heads * (self.head_dim + self.v_head_dim)

    @property
    def elements_per_token(self) -> int:
        """Cached elements per token over all layers."""
        return self.elements_per_token_per_layer * self.layers

    def kv_heads_per_rank(self, tensor_parallel_size: int = 1) -> int:
        """KV heads each tensor-parallel rank caches (vLLM replicates heads when TP > KV heads;
        MLA's single latent is replicated on every rank)."""
        if self.kind == "MLA":
            return 1
        return max(1, self.num_kv_heads // tensor_parallel_size)


def _positive_int(cfg: Mapping, key: str) -> int:
    value = cfg.get(key)
    if value is None:
        raise _fail(key, "is missing from the config (needed to size the KV cache)")
    # NaN and inf are checked before int(): int(nan) would raise "cannot convert float NaN to integer".
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or value != int(value) or value <= 0):
        raise _fail(key, f"must be a positive integer (got {value!r})")
    return int(value)


def _non_negative_int(cfg: Mapping, key: str) -> int:
    value = cfg.get(key)
    if value == 0 and not isinstance(value, bool):
        return 0
    try:
        return _positive_int(cfg, key)
    except ValueError:
        if value is None:
            raise
        raise _fail(key, f"must be a non-negative integer (got {value!r})") from None


def attention_shape(config: Any) -> AttentionShape:
    """Read layers, heads and head widths from a config; detect MLA from ``kv_lora_rank``.

    For MLA the ``head_dim`` key is ignored on purpose: in transformers 5.x DeepSeek configs it
    equals ``qk_rope_head_dim`` (64), which is not what is cached. Computed once per :class:`ModelConfig`.
    """
    return load_config(config).shape


def _derive_shape(cfg: Mapping) -> AttentionShape:
    name = str(cfg.get("_name", "custom"))
    layers = _positive_int(cfg, "num_hidden_layers")
    heads = _positive_int(cfg, "num_attention_heads")
    max_pos = cfg.get("max_position_embeddings")
    dtype = cfg.get("torch_dtype") or cfg.get("dtype")
    dtype = str(dtype).replace("torch.", "") if dtype is not None else None
    if cfg.get("kv_lora_rank"):
        rank = _positive_int(cfg, "kv_lora_rank")
        # 0 is allowed: a GQA model converted to a latent cache keeps RoPE on its re-expanded keys
        rope = _non_negative_int(cfg, "qk_rope_head_dim")
        return AttentionShape(name, "MLA", layers, heads, 1, rank + rope, 0, rank, rope, max_pos, dtype)
    kv_heads = cfg.get("num_key_value_heads")
    kv_heads = heads if kv_heads is None else _positive_int(cfg, "num_key_value_heads")
    if heads % kv_heads:
        raise _fail("num_key_value_heads", f"({kv_heads}) must divide num_attention_heads ({heads})")
    if cfg.get("head_dim"):
        head_dim = _positive_int(cfg, "head_dim")
    else:
        hidden = _positive_int(cfg, "hidden_size")
        head_dim = hidden // heads
        if head_dim == 0:
            raise _fail("hidden_size", f"({hidden}) is smaller than num_attention_heads ({heads}), so the derived "
                        "head_dim is 0; set hidden_size to heads x head_dim or give `head_dim` explicitly")
    kind = "MHA" if kv_heads == heads else ("MQA" if kv_heads == 1 else "GQA")
    return AttentionShape(name, kind, layers, heads, kv_heads, head_dim, head_dim, None, None, max_pos, dtype)


__all__ = ["CONFIG_DIR", "ModelConfig", "AttentionShape", "available_configs", "load_config", "attention_shape"]
