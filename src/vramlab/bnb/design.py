"""A bitsandbytes design for SmolLM2: one ``BitsAndBytesConfig`` chosen by a learner, measured live.

A design is a small dict (:data:`DESIGN_KEYS`): ``bits`` (8 or 4), ``quant_type``, ``double_quant``,
``compute_dtype`` and ``skip`` (transformers' ``llm_int8_skip_modules``). :func:`_measure_design` loads
SmolLM2 in bfloat16, as it is served on a GPU, with that config on the CPU (bitsandbytes 0.46.0+ runs
``Linear8bitLt`` / ``Linear4bit`` there) and measures its bytes on the device and its perplexity. It is private:
lab 07's capstone check measures a design only with the learner's prediction of its bytes (review #9 measured any
design with the public function, no prediction and no record).

Facts it rests on (transformers 5.25, bitsandbytes 0.50.2):
- a ``skip`` list *replaces* transformers' default list of modules not to convert (``["lm_head"]``, from
  ``get_keys_to_not_convert``): ``quantizers/base.py`` ``get_modules_to_not_convert`` adds the default only
  when ``skip_modules is None``. SmolLM2 ties ``lm_head`` to the embedding, and a quantized tied ``lm_head``
  fails its first forward in bitsandbytes (``nn/modules.py`` ``fix_4bit_weight_quant_state_from_module``
  asserts a packed weight);
- a pattern matches a module's full name from its start up to a ``.`` boundary, as a regex with that boundary,
  or as its suffix (``quantizers/quantizers_utils.py`` ``should_convert_module``): ``"self_attn"`` matches
  no linear (their names end in ``q_proj`` ...), ``"down_proj"`` and ``"model.layers.3"`` do.
"""

from __future__ import annotations

import gc
import json
import math
import time

from vramlab.bnb.quantized import _quiet, quant_state_bytes, quantized_linears, window_nlls

# The lab's capstone loads SmolLM2 in bfloat16, as it would be served on a GPU, with one learner-chosen
# BitsAndBytesConfig, and measures bytes on the device and perplexity on DESIGN_WINDOWS.
DESIGN_KEYS = ("bits", "quant_type", "double_quant", "compute_dtype", "skip")
DESIGN_DTYPES = ("bfloat16", "float16", "float32")
DESIGN_WINDOWS = 2   # windows 0 and 1 of the standard 512-token windows


def normalize_design(design) -> dict:
    """A design dict checked and filled in: ``bits`` (8 or 4), ``quant_type`` (``"nf4"`` / ``"fp4"``, 4-bit),
    ``double_quant`` (bool, 4-bit), ``compute_dtype`` (``"bfloat16"`` / ``"float16"`` / ``"float32"``,
    4-bit), ``skip`` (``None``: transformers' default, which keeps ``lm_head``; or a list of module-name
    patterns, passed as ``llm_int8_skip_modules``). Keys that do not apply to 8 bits are dropped.
    Bad input raises one ``ValueError`` naming the field and the fix."""
    if not isinstance(design, dict):
        raise ValueError(f"a design is a dict with the keys {', '.join(DESIGN_KEYS)}; got {type(design).__name__}.")
    unknown = sorted(set(design) - set(DESIGN_KEYS))
    if unknown:
        raise ValueError(f"unknown key(s) {', '.join(map(repr, unknown))}: a design has only {', '.join(DESIGN_KEYS)}.")
    bits = design.get("bits")
    if isinstance(bits, bool) or bits not in (4, 8):
        raise ValueError(f"'bits' must be 8 (LLM.int8()) or 4 (FP4 / NF4); got {bits!r}.")
    skip = design.get("skip")
    if skip is not None:
        if isinstance(skip, str) or not isinstance(skip, (list, tuple)) or \
                not all(isinstance(x, str) and 0 < len(x) <= 200 for x in skip) or len(skip) > 64:
            raise ValueError("'skip' must be None or a list of module-name strings such as ['lm_head', "
                             f"'model.layers.0'] (at most 64); got {skip!r}.")
        skip = sorted(set(x.strip() for x in skip))
    out = {"bits": bits, "skip": skip}
    if bits == 4:
        qt = design.get("quant_type", "nf4")
        if qt not in ("nf4", "fp4"):
            raise ValueError(f"'quant_type' must be 'nf4' or 'fp4'; got {qt!r}.")
        dq = design.get("double_quant", False)
        if not isinstance(dq, bool):
            raise ValueError(f"'double_quant' must be True or False; got {dq!r}.")
        cd = design.get("compute_dtype", "bfloat16")
        if cd not in DESIGN_DTYPES:
            raise ValueError(f"'compute_dtype' must be one of {', '.join(DESIGN_DTYPES)}; got {cd!r}.")
        out.update(quant_type=qt, double_quant=dq, compute_dtype=cd)
    return out


def design_key(design) -> str:
    """A stable string naming a normalized design (equal designs, equal keys)."""
    return json.dumps(normalize_design(design), sort_keys=True)


def design_config(design):
    """The ``transformers.BitsAndBytesConfig`` of a design (see :func:`normalize_design`)."""
    import torch
    from transformers import BitsAndBytesConfig

    d = normalize_design(design)
    kwargs = {"llm_int8_skip_modules": d["skip"]}
    if d["bits"] == 8:
        kwargs.update(load_in_8bit=True)
    else:
        kwargs.update(load_in_4bit=True, bnb_4bit_quant_type=d["quant_type"],
                      bnb_4bit_use_double_quant=d["double_quant"],
                      bnb_4bit_compute_dtype=getattr(torch, d["compute_dtype"]))
    return BitsAndBytesConfig(**kwargs)


def _measure_design(design, windows) -> dict:
    """Load SmolLM2 in bfloat16 with the design's ``BitsAndBytesConfig`` on the CPU and measure it:
    ``bytes`` (``get_memory_footprint()`` plus :func:`quant_state_bytes`, the bytes on the device),
    ``footprint_bytes``, ``quant_state_bytes``, ``ppl`` (exp of the mean NLL over ``windows``, LongTensor
    ``[n, length]``), ``window_nll``, ``quantized`` (how many linears bitsandbytes replaced), ``lm_head``
    (its class name) and the seconds spent. About 20 s for 2 x 512 tokens on one core."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    from vramlab import models

    config = design_config(design)
    _quiet()
    t0 = time.perf_counter()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        model = AutoModelForCausalLM.from_pretrained(str(models.ensure_converted()), quantization_config=config,
                                                     device_map="cpu", dtype=torch.bfloat16)
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    model.eval()
    extra = quant_state_bytes(model)   # before the first forward (see there)
    footprint = int(model.get_memory_footprint())
    nlls = window_nlls(model, windows)
    out = {"design": normalize_design(design), "bytes": footprint + extra, "footprint_bytes": footprint,
           "quant_state_bytes": extra, "ppl": math.exp(sum(nlls) / len(nlls)), "window_nll": nlls,
           "quantized": len(quantized_linears(model)), "lm_head": type(model.lm_head).__name__,
           "seconds": round(time.perf_counter() - t0, 1)}
    del model
    gc.collect()   # the next design's load should not meet this one's bytes
    return out


__all__ = ["DESIGN_KEYS", "DESIGN_DTYPES", "DESIGN_WINDOWS", "normalize_design", "design_key", "design_config"]
