"""Device maps for real model configs, offline: where ``device_map="auto"`` puts each module.

Everything here runs on the *meta* device (accelerate's ``init_empty_weights`` puts the parameters there; the
buffers, such as RoPE's ``inv_freq``, stay on the cpu unless ``include_buffers=True``): a 70B model is
built in seconds with no weights, and accelerate / transformers plan its placement exactly as
``from_pretrained(..., device_map="auto", max_memory=...)`` would. GPU indices in ``max_memory``
are fine on a CPU-only machine for planning (accelerate only logs "Device 0 is not available").

What ``from_pretrained`` does, read in transformers 5.24.0 ``modeling_utils.py`` (``from_pretrained``:
build under meta -> ``hf_quantizer.preprocess_model`` swaps ``nn.Linear`` for bitsandbytes layers ->
``_get_device_map``) and ``integrations/accelerate.py`` (``_get_device_map``):

1. ``get_balanced_memory(model, max_memory, model._no_split_modules, hf_quantizer)`` caps every GPU
   but the last at ``model_size / n_gpus + buffer`` (not for ``device_map="sequential"``);
2. ``hf_quantizer.adjust_max_memory`` multiplies every budget by 0.90 for bitsandbytes
   (transformers' quantizers ``quantizers/quantizer_bnb_4bit.py`` / ``quantizer_bnb_8bit.py``);
3. ``infer_auto_device_map`` packs modules in order, never splitting a ``_no_split_modules`` block:
   transformers' own fork of accelerate's function, in ``integrations/accelerate.py`` (it takes the
   ``hf_quantizer`` for the quantized sizes where accelerate takes ``special_dtypes``);
4. ``hf_quantizer.validate_environment(device_map=...)`` raises "Some modules are dispatched on the
   CPU or the disk..." when the map mixes a GPU with ``"cpu"``/``"disk"``: the check of transformers'
   bitsandbytes quantizer (``quantizers/quantizer_bnb_4bit.py`` / ``quantizer_bnb_8bit.py``), not of the
   bitsandbytes package, as is the 0.90 of step 2.

:func:`plan_device_map` runs steps 1-3 with these functions: transformers' ``infer_auto_device_map`` for
step 3, as ``from_pretrained`` does (the tests check that accelerate's gives the same maps here).
"""

from __future__ import annotations

import contextlib
import logging
import math
import re
from collections import OrderedDict
from typing import Any, Mapping

GiB = 2**30
MiB = 2**20

QUANTIZATIONS = (None, "8bit", "4bit")
# Bytes per element of a quantized weight as transformers counts it when planning:
# transformers 5.24.0 quantizers/quantizer_bnb_8bit.py (quantized_element_size = 1) and
# quantizer_bnb_4bit.py (quantized_element_size = 0.5). Other parameters keep the model dtype.
QUANT_ELEMENT_SIZE = {"8bit": 1.0, "4bit": 0.5}
# Budget factor applied by adjust_max_memory in the same two files ("need more space for buffers
# that are created during quantization").
BNB_MAX_MEMORY_FACTOR = 0.90

_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
_DEVICE_NAMES = ("cpu", "disk", "mps")


@contextlib.contextmanager
def _quiet_device_check():
    """Hide accelerate's "Device 0 is not available" log line while planning on the meta device:
    ``accelerate.utils.modeling.get_max_memory`` logs it for every GPU index on a machine without
    that GPU, and planning does not need the GPU."""
    log = logging.getLogger("accelerate.utils.modeling")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


# --------------------------------------------------------------------------------------------
# budgets
# --------------------------------------------------------------------------------------------

def parse_max_memory(max_memory: Mapping[Any, Any]) -> "OrderedDict[int | str, int]":
    """Validate a ``max_memory`` budget and return it in bytes, GPUs first, then cpu, then disk.

    Keys: GPU indices (``0``, ``1``, ... or ``"cuda:0"``), ``"cpu"``, ``"disk"``, ``"mps"``.
    Values: bytes (int) or accelerate's size strings (``"10GiB"``, ``"600KB"``, ``"1GB"``; GB is
    10**9, GiB is 2**30, parsed by ``accelerate.utils.convert_file_size_to_int``).
    Raises one ``ValueError`` naming the bad entry (``"12 gigs"``, ``"gpu0"``, ``-1``, ``{}``).
    """
    from accelerate.utils import convert_file_size_to_int

    if not isinstance(max_memory, Mapping):
        raise ValueError(f"`max_memory` must be a dict like {{0: '10GiB', 'cpu': '30GiB'}}; "
                         f"got {type(max_memory).__name__}.")
    if len(max_memory) == 0:
        raise ValueError("`max_memory` is an empty dict: give at least one device budget, "
                         "e.g. {0: '10GiB', 'cpu': '30GiB'}.")
    out: dict[int | str, int] = {}
    for key, value in max_memory.items():
        device = _parse_device(key)
        if isinstance(value, bool) or value is None:
            raise ValueError(f"`max_memory[{key!r}]` = {value!r} is not a size; use bytes or a string like '10GiB'.")
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, str):
            text = value.strip().replace(" ", "")
            if text.startswith("-"):
                raise ValueError(f"`max_memory[{key!r}]` = {value!r} is negative; a budget is 0 or more bytes.")
            try:
                size = convert_file_size_to_int(text)
            except (ValueError, TypeError):
                size = None
            if size is None or not re.fullmatch(r"-?\d+(\.\d+)?([KMGT]i?B|[KMGT]?b)?", text, re.IGNORECASE):
                raise ValueError(f"`max_memory[{key!r}]` = {value!r} is not a size; write bytes or a number "
                                 "with a unit such as '12GiB' (2**30 bytes) or '12GB' (10**9 bytes).")
        elif isinstance(value, int):
            size = value
        else:
            raise ValueError(f"`max_memory[{key!r}]` = {value!r} is not a size; use bytes or a string like '10GiB'.")
        if size < 0:
            raise ValueError(f"`max_memory[{key!r}]` = {value!r} is negative; a budget is 0 or more bytes.")
        if device in out:
            raise ValueError(f"`max_memory` names device {device!r} twice (as {key!r}); give each device once.")
        out[device] = int(size)
    gpus = sorted(k for k in out if isinstance(k, int))
    order = gpus + [k for k in ("mps", "cpu", "disk") if k in out]
    return OrderedDict((k, out[k]) for k in order)


def _parse_device(key: Any) -> int | str:
    if isinstance(key, bool):
        raise ValueError(f"`max_memory` key {key!r} is not a device; use 0, 1, ... for GPUs, 'cpu' or 'disk'.")
    if isinstance(key, int):
        if key < 0:
            raise ValueError(f"`max_memory` key {key!r} is a negative GPU index; GPUs are 0, 1, ...")
        return key
    if isinstance(key, str):
        k = key.strip().lower()
        if k in _DEVICE_NAMES:
            return k
        m = re.fullmatch(r"(?:cuda:)?(\d+)", k)
        if m:
            return int(m.group(1))
    raise ValueError(f"`max_memory` key {key!r} is not a device accelerate knows; use 0, 1, ... (or 'cuda:0') "
                     "for GPUs, 'cpu' or 'disk'.")


# --------------------------------------------------------------------------------------------
# meta models
# --------------------------------------------------------------------------------------------

def _torch_dtype(dtype: Any):
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    name = str(dtype).replace("torch.", "")
    if name not in _DTYPE_BYTES:
        raise ValueError(f"`dtype` {dtype!r} is not one of {sorted(_DTYPE_BYTES)}.")
    return getattr(torch, name)


# The config keys that size a decoder's parameters; a dict missing one is refused (see _pretrained_config).
SIZING_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size")


def _pretrained_config(config: Any):
    """A transformers ``PretrainedConfig`` from a bundled name, JSON path, dict or config."""
    from transformers import AutoConfig, PretrainedConfig

    if isinstance(config, PretrainedConfig):
        return config
    from vramlab.serving.kvcache import load_config

    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from vramlab.configs import _positive_int

    cfg = {k: v for k, v in load_config(config).items() if not k.startswith("_")}
    model_type = cfg.pop("model_type", None)
    if not model_type:
        raise ValueError("`config` has no 'model_type'; transformers needs it to pick the architecture.")
    if not isinstance(model_type, str) or model_type not in CONFIG_MAPPING:
        raise ValueError(f"unknown model_type {model_type!r}; use a transformers model_type such as "
                         "llama, qwen3, deepseek_v3.")
    # transformers fills a missing key with its class default (LlamaConfig: the 7B sizes), so a
    # partial dict would silently plan a 7B-wide model: require the keys that size it.
    for key in SIZING_KEYS:
        if cfg.get(key) is None:
            raise ValueError(f"`config` has no {key!r}; give {', '.join(SIZING_KEYS)} (transformers would "
                             f"otherwise fill {key!r} with its {model_type} default and size a different model).")
        _positive_int(cfg, key)
    return AutoConfig.for_model(model_type, **cfg)


def empty_model(config: Any, dtype: Any = "bfloat16", quantization: str | None = None):
    """Build the causal-LM for ``config`` on the meta device (no weights, any size, seconds).

    ``config``: a bundled name (``"llama-3.1-70b"``), a JSON path, a dict or a ``PretrainedConfig``.
    ``dtype``: ``"bfloat16"`` / ``"float16"`` / ``"float32"``. Tied weights (``tie_word_embeddings``)
    are tied, so a shared embedding counts once, as in ``from_pretrained``. With ``quantization``
    (``"8bit"``/``"4bit"``) the ``nn.Linear`` layers are swapped for bitsandbytes layers by the
    transformers quantizer exactly as ``from_pretrained`` does; the quantizer is stored on the model
    as ``model._vramlab_quantizer``.
    """
    import torch
    from accelerate import init_empty_weights
    from transformers import AutoModelForCausalLM

    _check_quantization(quantization)
    pconfig = _pretrained_config(config)
    tdtype = _torch_dtype(dtype)
    # init_empty_weights puts registered parameters on meta; torch.device("meta") also keeps
    # ``torch.empty(...)`` inside __init__ off the CPU (DeepSeek-V3's 3-D expert tensors would
    # otherwise allocate 15-30 GB before being moved), as from_pretrained's own init context does.
    with init_empty_weights(), torch.device("meta"):
        model = AutoModelForCausalLM.from_config(pconfig, dtype=tdtype)
    quantizer = None
    if quantization is not None:
        quantizer = make_quantizer(quantization)
        quantizer.preprocess_model(model=model, dtype=tdtype, device_map="auto", checkpoint_files=None,
                                   use_kernels=False)
    model.tie_weights()
    model._vramlab_quantizer = quantizer
    model._vramlab_dtype = tdtype
    assert all(p.device == torch.device("meta") for p in model.parameters())
    return model


def _check_quantization(quantization: str | None) -> None:
    if quantization not in QUANTIZATIONS:
        raise ValueError(f"`quantization` {quantization!r} is not one of None, '8bit', '4bit'.")


def bnb_config(quantization: str, **kwargs):
    """A ``BitsAndBytesConfig`` for ``"8bit"``/``"4bit"`` (extra keyword arguments passed on)."""
    from transformers import BitsAndBytesConfig

    _check_quantization(quantization)
    if quantization is None:
        raise ValueError("`quantization` must be '8bit' or '4bit' for a BitsAndBytesConfig.")
    import inspect

    known = set(inspect.signature(BitsAndBytesConfig.__init__).parameters) - {"self", "kwargs"}
    unknown = sorted(set(kwargs) - known)
    if unknown:
        # BitsAndBytesConfig only logs "Unused kwargs" at info level, so a typo would be silently ignored
        raise TypeError(f"`{unknown[0]}` is not a BitsAndBytesConfig argument; use one of {', '.join(sorted(known))}.")
    threshold = kwargs.get("llm_int8_threshold")
    if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, (int, float))
                                  or not math.isfinite(threshold) or threshold < 0):
        # transformers only checks isinstance(float) (utils/quantization_config.py post_init): NaN passes
        raise ValueError(f"`llm_int8_threshold` must be a finite number >= 0 (default 6.0), got {threshold!r}.")
    if threshold is not None:
        kwargs["llm_int8_threshold"] = float(threshold)
    return BitsAndBytesConfig(**{f"load_in_{quantization}": True}, **kwargs)


def make_quantizer(quantization: str, **kwargs):
    """The transformers ``HfQuantizer`` that ``from_pretrained`` builds for this bitsandbytes config."""
    from transformers.quantizers import AutoHfQuantizer

    return AutoHfQuantizer.from_config(bnb_config(quantization, **kwargs), pre_quantized=False)


def _as_model(config_or_model: Any, dtype: Any, quantization: str | None):
    import torch

    if isinstance(config_or_model, torch.nn.Module):
        have = getattr(config_or_model, "_vramlab_quantizer", None)
        have_q = None if have is None else ("4bit" if "4Bit" in type(have).__name__ else "8bit")
        if have_q != quantization:
            raise ValueError(f"the model was built with quantization={have_q!r} but `quantization`="
                             f"{quantization!r}; build it with empty_model(config, quantization=...).")
        return config_or_model
    return empty_model(config_or_model, dtype=dtype, quantization=quantization)


# --------------------------------------------------------------------------------------------
# sizes
# --------------------------------------------------------------------------------------------

def special_dtypes(model) -> dict:
    """``{param_name: dtype}`` for the parameters the model's quantizer shrinks (accelerate's way of
    passing per-parameter sizes to ``infer_auto_device_map``); empty when not quantized."""
    import torch
    from accelerate.utils import CustomDtype

    quantizer = getattr(model, "_vramlab_quantizer", None)
    if quantizer is None:
        return {}
    size = quantizer.quantized_element_size
    dtype = {1: torch.int8, 0.5: CustomDtype.INT4}[size]
    return {name: dtype for name, _ in model.named_parameters()
            if quantizer.param_needs_quantization(model, name)}


def module_sizes(config_or_model: Any, dtype: Any = "bfloat16", quantization: str | None = None) -> dict[str, int]:
    """Bytes of every module (``""`` = whole model) as transformers counts them when planning.

    Uses transformers 5.24 ``integrations.accelerate.compute_module_sizes`` with the quantizer, so
    4-bit Linear weights count 0.5 byte per element, 8-bit 1 byte, everything else the model dtype.
    """
    from transformers.integrations.accelerate import compute_module_sizes

    model = _as_model(config_or_model, dtype, quantization)
    sizes, _ = compute_module_sizes(model, getattr(model, "_vramlab_quantizer", None))
    return {k: int(v) for k, v in sizes.items()}


# --------------------------------------------------------------------------------------------
# planning
# --------------------------------------------------------------------------------------------

def planned_max_memory(model, max_memory: Mapping[Any, Any], strategy: str = "auto",
                       no_split_module_classes: list[str] | None = None) -> dict:
    """The per-device budgets ``infer_auto_device_map`` actually receives (steps 1-2 above), bytes.
    ``no_split_module_classes`` defaults to the model's ``_no_split_modules``."""
    from transformers.integrations.accelerate import get_balanced_memory, get_max_memory

    _check_no_split(no_split_module_classes)
    budget = dict(parse_max_memory(max_memory))
    quantizer = getattr(model, "_vramlab_quantizer", None)
    if strategy not in ("auto", "balanced", "balanced_low_0", "sequential"):
        raise ValueError(f"`strategy` {strategy!r} is not one of 'auto', 'balanced', 'balanced_low_0', 'sequential'.")
    with _quiet_device_check():
        if strategy == "sequential":
            inferred = get_max_memory(budget)
        else:
            no_split = model._no_split_modules if no_split_module_classes is None else no_split_module_classes
            inferred = get_balanced_memory(model, max_memory=budget, no_split_module_classes=no_split,
                                           hf_quantizer=quantizer, low_zero=(strategy == "balanced_low_0"))
    if quantizer is not None:
        inferred = quantizer.adjust_max_memory(inferred)
    return dict(inferred)


def _check_no_split(classes: Any) -> None:
    """A list of class names or None: a bare string would be read letter by letter."""
    if classes is None:
        return
    if isinstance(classes, str) or not isinstance(classes, (list, tuple, set)) \
            or not all(isinstance(c, str) for c in classes):
        raise TypeError(f"`no_split_module_classes` must be a list of class names such as ['LlamaDecoderLayer'] "
                        f"(got {classes!r}).")


def plan_device_map(config_or_model: Any, max_memory: Mapping[Any, Any], dtype: Any = "bfloat16",
                    quantization: str | None = None, no_split_module_classes: list[str] | None = None,
                    strategy: str = "auto") -> dict[str, int | str]:
    """Where ``from_pretrained(..., device_map=strategy, max_memory=max_memory)`` puts each module.

    Returns transformers 5.24's ``infer_auto_device_map`` result (``integrations/accelerate.py``, the function
    ``from_pretrained`` calls) ``{module_name: 0 | 1 | ... | "cpu" | "disk"}`` for a meta model of
    ``config_or_model`` (a config as in :func:`empty_model`, or such a model), with transformers' budget
    balancing and its bitsandbytes quantizer's adjustment (see the module docstring).
    ``no_split_module_classes`` defaults to the model's ``_no_split_modules``.
    """
    from transformers.integrations.accelerate import infer_auto_device_map

    _check_no_split(no_split_module_classes)
    model = _as_model(config_or_model, dtype, quantization)
    no_split = (list(model._no_split_modules) if no_split_module_classes is None
                else list(no_split_module_classes))
    budgets = planned_max_memory(model, max_memory, strategy, no_split)
    with _quiet_device_check():
        return dict(infer_auto_device_map(model, max_memory=budgets, no_split_module_classes=no_split,
                                          hf_quantizer=getattr(model, "_vramlab_quantizer", None),
                                          no_placement_params=getattr(model, "_no_placement_params", None)))


def transformers_device_map(model, max_memory: Mapping[Any, Any], strategy: str = "auto") -> dict:
    """The map transformers' own ``_get_device_map`` (the function ``from_pretrained`` calls) returns
    for this meta model, without the final bitsandbytes environment check. For comparison."""
    from transformers.integrations.accelerate import infer_auto_device_map as hf_infer

    budgets = planned_max_memory(model, max_memory, strategy)
    with _quiet_device_check():
        return dict(hf_infer(model, max_memory=budgets, no_split_module_classes=model._no_split_modules,
                             hf_quantizer=getattr(model, "_vramlab_quantizer", None),
                             no_placement_params=getattr(model, "_no_placement_params", None)))


def spills(device_map: Mapping[str, Any]) -> bool:
    """True when a map mixes a GPU with ``"cpu"``/``"disk"``: the case transformers' bitsandbytes quantizer refuses
    (same test as transformers 5.24 ``Bnb4BitHfQuantizer.validate_environment``)."""
    if not isinstance(device_map, Mapping):
        raise TypeError(f"`device_map` must be a dict {{module_name: device}} such as plan_device_map returns "
                        f"(got {type(device_map).__name__}).")
    values = set(device_map.values())
    return values != {"cpu"} and ("cpu" in values or "disk" in values)


def device_usage(config_or_model: Any, device_map: Mapping[str, Any], dtype: Any = "bfloat16",
                 quantization: str | None = None) -> dict:
    """Bytes placed on each device by ``device_map`` ({device: bytes}), from :func:`module_sizes`."""
    sizes = module_sizes(config_or_model, dtype, quantization)
    used: dict = {}
    for name, device in device_map.items():  # a tied lm_head has no bytes of its own
        used[device] = used.get(device, 0) + sizes.get(name, 0)
    return used


# --------------------------------------------------------------------------------------------
# the under-packing bug (transformers issue #46823) and its fix (PRs #47203 + #47211)
# --------------------------------------------------------------------------------------------

def old_buffer(first_block_bytes: int, mean_leaf_bytes: int) -> int:
    """The balancing buffer before the fix, bytes: 1.25 x max(the FIRST no-split block found, the MEAN
    leaf module). This is what accelerate 1.15.0 ``utils/modeling.py::get_balanced_memory`` still
    computes (``buffer = int(1.25 * max(buffer, mean_leaves))``, ``buffer`` from the first module of
    each no-split class)."""
    return int(1.25 * max(first_block_bytes, mean_leaf_bytes))


def fixed_buffer(largest_block_bytes: int, largest_leaf_bytes: int) -> int:
    """The buffer after the fix, bytes: 1.25 x max(the LARGEST no-split block, the LARGEST leaf
    module). transformers 5.24.0 ``integrations/accelerate.py::get_balanced_memory``
    (``buffer = int(1.25 * max(biggest_no_split_module, biggest_leaf))``; PR #47203 takes the max
    over all blocks, PR #47211 adds the largest leaf such as an unquantized ``lm_head``)."""
    return int(1.25 * max(largest_block_bytes, largest_leaf_bytes))


def buffer_inputs(model) -> dict[str, int]:
    """The four sizes the two buffers use, bytes, measured as transformers measures them:
    ``first_block``, ``largest_block`` (no-split blocks), ``mean_leaf`` (accelerate's mean over
    leaf modules), ``largest_leaf`` (the biggest module that holds parameters directly)."""
    from accelerate.utils.modeling import get_module_leaves
    from transformers.integrations.accelerate import compute_module_sizes

    sizes, leaves = compute_module_sizes(model, getattr(model, "_vramlab_quantizer", None))
    classes = set(model._no_split_modules or [])
    blocks = [name for name, mod in model.named_modules() if type(mod).__name__ in classes]
    # accelerate's mean_leaves: leaf *modules* (drop parameter names, then take the childless ones)
    module_sizes_ = {k: v for k, v in sizes.items()}
    leaf_mods = get_module_leaves(module_sizes_)
    mean_leaf = int(sum(module_sizes_[n] for n in leaf_mods) / max(len(leaf_mods), 1))
    return {"first_block": int(sizes[blocks[0]]) if blocks else 0,
            "largest_block": int(max((sizes[b] for b in blocks), default=0)),
            "mean_leaf": mean_leaf,
            "largest_leaf": int(max(leaves.values(), default=0)),
            "total": int(sizes[""])}


def balanced_budget(model, max_memory: Mapping[Any, Any], formula: str = "fixed") -> dict:
    """Per-device budgets for ``device_map="auto"`` with the ``"old"`` or ``"fixed"`` buffer, bytes.

    Every GPU but the last is capped at ``total // n_gpus + buffer`` (the last keeps its full
    budget), then bitsandbytes multiplies every budget by 0.90 — the steps of
    ``get_balanced_memory`` + ``adjust_max_memory`` (see the module docstring).
    """
    budget = dict(parse_max_memory(max_memory))
    gpus = [k for k, v in budget.items() if isinstance(k, int) and v > 0]
    if len(gpus) > 1:
        s = buffer_inputs(model)
        if formula == "old":
            buf = old_buffer(s["first_block"], s["mean_leaf"])
        elif formula == "fixed":
            buf = fixed_buffer(s["largest_block"], s["largest_leaf"])
        else:
            raise ValueError(f"`formula` {formula!r} is not 'old' or 'fixed'.")
        per_gpu = s["total"] // len(gpus) + buf
        for g in gpus[:-1]:
            budget[g] = min(per_gpu, budget[g])
    quantizer = getattr(model, "_vramlab_quantizer", None)
    if quantizer is not None:
        budget = quantizer.adjust_max_memory(budget)
    return budget


def plan_with_buffer(model, max_memory: Mapping[Any, Any], formula: str = "fixed") -> dict:
    """accelerate's ``infer_auto_device_map`` under :func:`balanced_budget` with the given formula."""
    from accelerate import infer_auto_device_map

    with _quiet_device_check():
        return dict(infer_auto_device_map(model, max_memory=balanced_budget(model, max_memory, formula),
                                          no_split_module_classes=list(model._no_split_modules),
                                          special_dtypes=special_dtypes(model) or None))


# --------------------------------------------------------------------------------------------
# estimate-memory table
# --------------------------------------------------------------------------------------------

ESTIMATE_DTYPES = ("float32", "float16", "int8", "int4")   # accelerate estimate-memory's --dtypes default


def estimate_memory(config: Any) -> list[dict]:
    """``accelerate estimate-memory``'s table for one config, offline, plus what transformers loads.

    One row per dtype (float32, float16, int8, int4), bytes. The CLI's numbers, read in accelerate 1.15.0
    ``commands/estimate.py``: ``create_empty_model`` builds ``AutoModel.from_config(config, torch_dtype=float32)``
    under ``init_empty_weights`` (the base model: no ``lm_head``; an ``AutoModelFor*`` class only when the
    repo's config has an ``auto_map``, which none of the bundled configs has); ``gather_data`` takes
    ``calculate_maximum_sizes`` of it and divides by 2 (float16), 4 (int8), 8 (int4), as if *every*
    parameter shrank; ``estimate_command`` prints ``max(estimate_training_usage(...).values())``, the
    largest single entry (model, gradients, optimizer or step), not their sum, and "N/A" for int8/int4.
    Keys: ``largest_layer``, ``total``, ``training_adam`` (None for N/A) -- the CLI; ``loaded``: the
    causal LM (with ``lm_head``) as transformers plans its load (:func:`module_sizes`: float32 for the
    float32 row, bf16 for float16, bitsandbytes 8/4-bit for int8/int4, where only ``nn.Linear`` weights
    shrink). The CLI prints with ``convert_bytes`` (divides by 1024, labels "GB"): its "GB" are GiB.
    """
    import torch
    from accelerate import init_empty_weights
    from accelerate.commands.estimate import estimate_training_usage
    from accelerate.utils import calculate_maximum_sizes
    from transformers import AutoModel

    pconfig = _pretrained_config(config)
    with init_empty_weights(), torch.device("meta"):
        base = AutoModel.from_config(pconfig, dtype=torch.float32)
    total, (largest, _names) = calculate_maximum_sizes(base)
    from vramlab.serving.kvcache import load_config

    name = pconfig.to_dict().get("_name_or_path") or ""
    label = load_config(config).get("_name", name) if not hasattr(config, "to_dict") else (name or "custom")
    rows = []
    for dtype in ESTIMATE_DTYPES:
        div = {"float32": 1, "float16": 2, "int8": 4, "int4": 8}[dtype]
        peak = max(estimate_training_usage(total, dtype).values())   # on the float32 total, as gather_data does
        loaded = module_sizes(config, dtype="float32" if dtype == "float32" else "bfloat16",
                              quantization={"int8": "8bit", "int4": "4bit"}.get(dtype))[""]
        rows.append({"model": label, "dtype": dtype, "largest_layer": int(largest // div),
                     "total": int(total // div), "training_adam": None if peak == -1 else int(peak),
                     "loaded": int(loaded)})
    return rows


def estimate_table(configs: list[Any] | None = None) -> list[dict]:
    """:func:`estimate_memory` rows for several configs (default: every bundled config)."""
    from vramlab.serving.kvcache import available_configs

    rows: list[dict] = []
    for cfg in (configs if configs is not None else available_configs()):
        rows.extend(estimate_memory(cfg))
    return rows


def format_estimate_table(rows: list[dict]) -> str:
    """The rows as a fixed-width text table in GiB: the CLI's three columns, then the causal LM as loaded."""
    head = (f"{'model':<18} {'dtype':<8} | {'largest layer':>13} {'total':>7} {'train (Adam)':>12} | "
            f"{'causal LM as loaded':>19}")
    lines = [head, "-" * len(head)]
    for r in rows:
        train = "N/A" if r["training_adam"] is None else f"{r['training_adam'] / GiB:.2f}"
        lines.append(f"{r['model']:<18} {r['dtype']:<8} | {r['largest_layer'] / GiB:>13.2f} {r['total'] / GiB:>7.2f} "
                     f"{train:>12} | {r['loaded'] / GiB:>19.2f}")
    return "\n".join(lines) + ("\n(GiB. Left of the second bar: what `accelerate estimate-memory` prints (AutoModel, "
                               "no lm_head; its 'GB' are GiB). Right: AutoModelForCausalLM as transformers plans "
                               "it (bitsandbytes for int8/int4; float16 row: bf16).)")


# --------------------------------------------------------------------------------------------
# what the planner does not count, and what it uses when you give no max_memory
# --------------------------------------------------------------------------------------------

# bitsandbytes 0.50.2 stores one float32 absmax per block of 64 weights of a 4-bit layer
# (bitsandbytes/nn/modules.py Params4bit, blocksize=64 by default; transformers' BitsAndBytesConfig
# passes no other blocksize). transformers 5.24 plans 4-bit weights at 0.5 byte per element
# (quantizer_bnb_4bit.py quantized_element_size) and get_memory_footprint sums parameters and
# buffers: neither counts the absmax, which lives in ``weight.quant_state``.
ABSMAX_BLOCK = 64
ABSMAX_BYTES = 4


def absmax_bytes(config_or_model: Any, dtype: Any = "bfloat16") -> int:
    """Bytes of the float32 ``absmax`` scales of a 4-bit bitsandbytes model (one per 64 weights of
    every quantized Linear), which neither the planner nor ``get_memory_footprint`` counts."""
    model = _as_model(config_or_model, dtype, "4bit")
    quantizer = model._vramlab_quantizer
    n = sum(p.numel() for name, p in model.named_parameters()
            if quantizer.param_needs_quantization(model, name))
    # a 4-bit Params4bit on meta reports its unpacked shape; numel() counts weights, not bytes
    return int(math.ceil(n / ABSMAX_BLOCK) * ABSMAX_BYTES)


def default_max_memory(model, free_gpu_bytes: int, free_cpu_bytes: int, strategy: str = "auto") -> dict:
    """The budgets ``from_pretrained(..., device_map=strategy)`` plans with when you pass **no**
    ``max_memory``, on a machine with one GPU of ``free_gpu_bytes`` free and ``free_cpu_bytes`` of
    available RAM, bytes. Runs transformers 5.24's own ``get_max_memory`` / ``get_balanced_memory``
    (``integrations/accelerate.py``) with accelerate's ``get_max_memory`` (which would read
    ``torch.cuda.mem_get_info`` and ``psutil``) answering the given sizes, then the quantizer's
    ``adjust_max_memory``: cpu x 0.90 (transformers' ``get_max_memory``), GPU x 0.90 for a single GPU
    when not "sequential" (``get_balanced_memory``), then x 0.90 again for bitsandbytes."""
    from unittest import mock

    import transformers.integrations.accelerate as hf_acc

    if strategy not in ("auto", "balanced", "balanced_low_0", "sequential"):
        raise ValueError(f"`strategy` {strategy!r} is not one of 'auto', 'balanced', 'balanced_low_0', 'sequential'.")
    for key, value in (("free_gpu_bytes", free_gpu_bytes), ("free_cpu_bytes", free_cpu_bytes)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise ValueError(f"`{key}` must be a number of bytes >= 0, got {value!r}.")

    def fake(max_memory=None):
        assert max_memory is None
        return {0: int(free_gpu_bytes), "cpu": int(free_cpu_bytes)}

    quantizer = getattr(model, "_vramlab_quantizer", None)
    with mock.patch.object(hf_acc, "accelerate_max_memory", fake), _quiet_device_check():
        if strategy == "sequential":
            inferred = hf_acc.get_max_memory(None)
        else:
            inferred = hf_acc.get_balanced_memory(model, max_memory=None,
                                                  no_split_module_classes=model._no_split_modules,
                                                  hf_quantizer=quantizer, low_zero=(strategy == "balanced_low_0"))
    if quantizer is not None:
        inferred = quantizer.adjust_max_memory(inferred)
    return {k: int(v) for k, v in inferred.items()}


__all__ = ["GiB", "MiB", "QUANTIZATIONS", "QUANT_ELEMENT_SIZE", "BNB_MAX_MEMORY_FACTOR", "parse_max_memory",
           "empty_model", "bnb_config", "make_quantizer", "special_dtypes", "module_sizes",
           "planned_max_memory", "plan_device_map", "transformers_device_map", "spills", "device_usage",
           "old_buffer", "fixed_buffer", "buffer_inputs", "balanced_budget", "plan_with_buffer",
           "ESTIMATE_DTYPES", "estimate_memory", "estimate_table", "format_estimate_table", "SIZING_KEYS",
           "ABSMAX_BLOCK", "absmax_bytes", "default_max_memory"]
