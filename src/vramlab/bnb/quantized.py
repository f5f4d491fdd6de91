"""Real bitsandbytes quantization of SmolLM2: LLM.int8() and 4-bit (FP4 / NF4, double quant).

:func:`load_quantized` loads the cached SmolLM2-135M through transformers' ``BitsAndBytesConfig``
(:data:`KINDS`); bitsandbytes 0.46.0+ runs these layers on CPU (``device_map="cpu"``; its
backends/cpu package, git tag 0.46.0), so everything
here works without a GPU, and on CUDA with ``device="cuda"``. :func:`measure` gives the loaded
model's bytes (``get_memory_footprint``), perplexity on the standard windows and a greedy
generation. :func:`outlier_columns` reads which input columns LLM.int8() kept in 16-bit during the
last forward (``MatmulLtState.idx``, set in bitsandbytes 0.50.2 ``autograd/_functions.py``
``MatMul8bitLt.forward`` from ``int8_vectorwise_quant(A, threshold)``).

The full table (8 x 512 windows, all kinds) is computed by ``benchmarks/bnb.py`` and cached as
``vramlab/results/bnb_table.json`` with a fingerprint of this code (:func:`code_fingerprint`);
:func:`load_table` refuses a table whose fingerprint no longer matches.

Simplifications, said once: compute runs in float32 on CPU (bf16/fp16 on GPU); LLM.int8() on CPU
casts activations to float16 for the int8 quantization step, exactly as on GPU.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from pathlib import Path

# transformers BitsAndBytesConfig keyword arguments per kind. The threshold 6.0 is LLM.int8()'s
# default (transformers utils/quantization_config.py, BitsAndBytesConfig(llm_int8_threshold=6.0)).
LLM_INT8_THRESHOLD = 6.0
KINDS = {
    "int8": {"load_in_8bit": True, "llm_int8_threshold": LLM_INT8_THRESHOLD},
    "fp4": {"load_in_4bit": True, "bnb_4bit_quant_type": "fp4", "bnb_4bit_use_double_quant": False},
    "nf4": {"load_in_4bit": True, "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": False},
    "nf4+dq": {"load_in_4bit": True, "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": True},
}
BASELINES = ("fp32", "bf16")
PROMPT = "The capital of France is"
# bitsandbytes logs this once per 8-bit matmul when inputs are float32 (autograd/_functions.py);
# one line per layer per forward would bury the notebook, so it is silenced here.
_CHATTY_LOGGERS = ("bitsandbytes.autograd._functions",)


def _quiet() -> None:
    for name in _CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)


def bnb_config(kind: str, threshold: float | None = None, compute_dtype=None):
    """The ``transformers.BitsAndBytesConfig`` of ``kind`` (one of :data:`KINDS`).

    ``threshold`` overrides LLM.int8()'s outlier threshold (``int8`` only); ``compute_dtype``
    (4-bit) defaults to float32 on CPU."""
    import torch
    from transformers import BitsAndBytesConfig

    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}; got {kind!r}.")
    kwargs = dict(KINDS[kind])
    if threshold is not None:
        if kind != "int8":
            raise ValueError(f"threshold applies to kind='int8' (LLM.int8()), not {kind!r}.")
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not math.isfinite(threshold) \
                or threshold < 0:
            raise ValueError(f"`threshold` must be a finite number >= 0 (LLM.int8()'s default is "
                             f"{LLM_INT8_THRESHOLD}; 0 turns the outlier split off), got {threshold!r}.")
        kwargs["llm_int8_threshold"] = float(threshold)
    if kwargs.get("load_in_4bit"):
        kwargs["bnb_4bit_compute_dtype"] = compute_dtype or torch.float32
    return BitsAndBytesConfig(**kwargs)


def load_quantized(kind: str, threshold: float | None = None, device: str = "cpu"):
    """SmolLM2-135M quantized by bitsandbytes: ``(model, tokenizer)``.

    ``kind``: ``"int8"`` | ``"fp4"`` | ``"nf4"`` | ``"nf4+dq"`` (see :data:`KINDS`), or a baseline
    ``"fp32"`` / ``"bf16"`` (no bitsandbytes). Every decoder linear becomes a ``Linear8bitLt`` or
    ``Linear4bit``; the embedding and the tied ``lm_head`` stay in float32 (transformers keeps the
    output layer unquantized)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    from vramlab import models

    if kind in BASELINES:
        return models.load_smollm2(dtype=torch.float32 if kind == "fp32" else torch.bfloat16, device=device)
    config = bnb_config(kind, threshold)
    if str(device).startswith("cuda"):
        from vramlab import device as vdevice

        vdevice.require_cuda(f"load_quantized({kind!r}, device='cuda')")
        vdevice.apply_workshop_guard()
    _quiet()
    path = str(models.ensure_converted())
    tokenizer = AutoTokenizer.from_pretrained(path)
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        model = AutoModelForCausalLM.from_pretrained(path, quantization_config=config,
                                                     device_map=str(device) if device != "cuda" else {"": 0},
                                                     dtype=torch.float32 if device == "cpu" else torch.float16)
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    model.eval()
    return model, tokenizer


def generate(model, tokenizer, prompt: str = PROMPT, max_new_tokens: int = 12) -> str:
    """Greedy continuation of ``prompt`` (the new text only)."""
    import torch

    ids = tokenizer(prompt, return_tensors="pt").to(next(model.parameters()).device)
    with torch.inference_mode():
        out = model.generate(**ids, max_new_tokens=max_new_tokens, do_sample=False,
                             pad_token_id=tokenizer.eos_token_id)
    return tokenizer.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)


def window_nlls(model, windows) -> list[float]:
    """Mean next-token NLL (nats per token) of each window (``windows``: LongTensor ``[n, length]``)."""
    from vramlab.eval import window_nll

    return [window_nll(model, w.unsqueeze(0))[0] / (w.shape[0] - 1) for w in windows]


def measure(kind: str, windows, threshold: float | None = None) -> dict:
    """Load ``kind`` and measure it: ``footprint_bytes`` (``model.get_memory_footprint()``),
    ``quant_state_bytes`` (:func:`quant_state_bytes`), ``ppl`` (exp of the mean NLL over ``windows``), ``window_nll`` (per window), ``generation``, and the
    seconds spent loading and evaluating."""
    import math

    t0 = time.perf_counter()
    model, tok = load_quantized(kind, threshold=threshold)
    t1 = time.perf_counter()
    extra = quant_state_bytes(model) if kind not in BASELINES else 0  # before the first forward (see there)
    nlls = window_nlls(model, windows)
    t2 = time.perf_counter()
    text = generate(model, tok)
    return {"kind": kind, "footprint_bytes": int(model.get_memory_footprint()), "quant_state_bytes": extra,
            "ppl": math.exp(sum(nlls) / len(nlls)), "window_nll": nlls, "generation": text,
            "load_s": round(t1 - t0, 2), "eval_s": round(t2 - t1, 2), "n_windows": len(nlls)}


def quantized_linears(model) -> dict:
    """``{name: module}`` of the bitsandbytes layers (``Linear8bitLt`` / ``Linear4bit``) in ``model``."""
    import bitsandbytes as bnb

    return {n: m for n, m in model.named_modules() if isinstance(m, (bnb.nn.Linear8bitLt, bnb.nn.Linear4bit))}


def quant_state_bytes(model) -> int:
    """Bytes of the quantization constants that ``get_memory_footprint()`` does not count (they are
    not parameters or buffers): 4-bit ``quant_state.absmax`` (float32 per block of 64 weights, or
    uint8 with double quant plus float32 second-level scales) and the code book; LLM.int8()'s ``SCB``
    (one float32 scale per output row). Measure right after loading: on CPU, bitsandbytes 0.50 repacks
    4-bit weights and their scales for its kernels at the first forward."""
    total = 0

    def nbytes(t) -> int:
        return 0 if t is None else int(t.numel() * t.element_size())

    for lin in quantized_linears(model).values():
        w = lin.weight
        qs = getattr(w, "quant_state", None)
        if qs is not None:
            total += nbytes(qs.absmax) + nbytes(qs.code)
            if qs.nested and qs.state2 is not None:
                total += nbytes(qs.state2.absmax) + nbytes(qs.state2.code) + nbytes(qs.offset)
        else:
            scb = getattr(w, "SCB", None)
            total += nbytes(scb if scb is not None else getattr(getattr(lin, "state", None), "SCB", None))
    return total


def outlier_columns(model, input_ids, layer: int | None = None, module: str = "mlp.down_proj"):
    """The input columns LLM.int8() kept in 16-bit in ``layers[layer].<module>`` for ``input_ids``.

    Runs one forward and reads each layer's ``MatmulLtState.idx``: the columns where some token's
    input exceeds the threshold in absolute value (bitsandbytes' own ``int8_vectorwise_quant``).
    Returns a sorted list for one ``layer``, or ``{layer: list}`` for every layer when ``layer`` is
    None. ``model`` must be loaded with ``kind="int8"``; ``input_ids``: LongTensor ``[tokens]`` or
    ``[1, tokens]``."""
    import torch

    layers = range(len(model.model.layers)) if layer is None else [layer]
    lins = {i: model.model.layers[i].get_submodule(module) for i in layers}
    for i, lin in lins.items():
        if not hasattr(lin, "state"):
            raise TypeError(f"layers[{i}].{module} is a {type(lin).__name__}, not a Linear8bitLt: "
                            "load the model with load_quantized('int8').")
    ids = input_ids if input_ids.dim() == 2 else input_ids.unsqueeze(0)
    _quiet()
    with torch.inference_mode():
        model(input_ids=ids.to(next(model.parameters()).device), use_cache=False)
    out = {i: ([] if lin.state.idx is None else sorted(int(c) for c in lin.state.idx.flatten().tolist()))
           for i, lin in lins.items()}
    return out if layer is None else out[layer]


def columns_above(x, threshold: float = LLM_INT8_THRESHOLD) -> list[int]:
    """Columns of an activation matrix ``x`` ``[tokens, channels]`` where some ``|x| >= threshold`` (in
    float16, as LLM.int8() sees them): the reference for :func:`outlier_columns`.

    The test is ``>=``, as bitsandbytes 0.50.2 writes it (``backends/default/ops.py`` and
    ``backends/cuda/ops.py``, ``int8_vectorwise_quant``: ``outliers = A.abs() >= threshold``), so a column
    whose largest value is exactly the threshold is kept in 16-bit."""
    import torch

    xa = x.detach().to(torch.float16).abs().amax(dim=0)
    return sorted(int(i) for i in torch.nonzero(xa >= threshold).flatten().tolist())


# --------------------------------------------------------------------------- the cached table
def code_fingerprint() -> str:
    """sha256 (first 16 hex digits) of the code that produces the table: this module, ``eval.py``,
    ``data.py`` and ``models.py``."""
    here = Path(__file__).resolve().parents[1]   # the package root
    h = hashlib.sha256()
    for name in ("bnb/quantized.py", "eval.py", "data.py", "models.py"):
        h.update((here / name).read_bytes())
    return h.hexdigest()[:16]


def table_path() -> Path:
    return Path(__file__).resolve().parents[1] / "results" / "bnb_table.json"


def load_table(path=None, check: bool = True) -> dict:
    """The table written by ``benchmarks/bnb.py`` (``rows``: one :func:`measure` dict per kind).

    With ``check`` a table whose ``fingerprint`` differs from :func:`code_fingerprint` raises one
    ``ValueError`` saying to re-run the benchmark."""
    data = json.loads(Path(path or table_path()).read_text())
    if check and data.get("fingerprint") != code_fingerprint():
        raise ValueError("bnb_table.json was made by different code (fingerprint "
                         f"{data.get('fingerprint')} != {code_fingerprint()}): run python benchmarks/bnb.py.")
    return data


def table_row(table: dict, kind: str) -> dict:
    for row in table["rows"]:
        if row["kind"] == kind:
            return row
    raise ValueError(f"No row {kind!r} in the table; rows: {', '.join(r['kind'] for r in table['rows'])}.")


__all__ = ["KINDS", "BASELINES", "LLM_INT8_THRESHOLD", "PROMPT", "bnb_config", "load_quantized", "generate",
           "window_nlls", "measure", "quantized_linears", "quant_state_bytes", "outlier_columns", "columns_above", "code_fingerprint",
           "load_table", "table_row", "table_path"]
