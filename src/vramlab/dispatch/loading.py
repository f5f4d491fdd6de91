"""The real dispatch error on the real SmolLM2, and three fixes that load.

``load_quantized`` calls transformers' ``from_pretrained`` with a bitsandbytes config and a ``max_memory``
budget; on a CPU-only machine :func:`cpu_analogue` moves the budget one level down (cpu plays the GPU,
disk the overflow).
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Mapping

from vramlab.dispatch.figure import device_label
from vramlab.dispatch.planner import _quiet_device_check, _torch_dtype, bnb_config, parse_max_memory, plan_device_map


# --------------------------------------------------------------------------------------------
# the real error, on the real model, and three fixes that load
# --------------------------------------------------------------------------------------------

# 8-bit SmolLM2 plans at ~163 MB (module_sizes("smollm2-135m", quantization="8bit")[""]): a 150 MB
# GPU budget (x 0.90 for bitsandbytes) spills the last layers to the cpu.
TRIGGER_BUDGET = {0: "150MB", "cpu": "1GB"}
FIT_BUDGET = {0: "400MB", "cpu": "1GB"}
DISPATCH_ERROR_START = "Some modules are dispatched on the CPU or the disk"
OFFLOAD_PREFIX = "vramlab-offload-"   # temporary offload folders (see load_quantized)

# Two library log lines that a load which works prints, hidden by exact start (nothing else is hidden):
# - transformers 5.24 integrations/bitsandbytes.py ``replace_with_bnb_linear`` logs "You are loading your model
#   using eetq but no linear modules were found" when no Linear was replaced (every module on cpu/disk under a
#   custom map with llm_int8_enable_fp32_cpu_offload=True); "eetq" is a copy-paste slip in that bitsandbytes path.
# - accelerate 1.15 big_modeling.py ``dispatch_model`` logs "Some parameters are on the meta device because they
#   were offloaded to the ..." whenever the map holds "cpu"/"disk": offloaded weights live on the meta device
#   between forwards and are copied to the execution device by the hooks, by design.
QUIET_LOG_LINES = {
    "transformers.integrations.bitsandbytes": "You are loading your model using eetq but no linear modules",
    "accelerate.big_modeling": "Some parameters are on the meta device because they were offloaded",
}


class _DropStart(logging.Filter):
    def __init__(self, start: str):
        super().__init__()
        self.start = start

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.start)


@contextlib.contextmanager
def _quiet_known_lines():
    """Drop only the log lines in :data:`QUIET_LOG_LINES`, only while loading."""
    added = []
    for name, start in QUIET_LOG_LINES.items():
        f = _DropStart(start)
        logging.getLogger(name).addFilter(f)
        added.append((name, f))
    try:
        yield
    finally:
        for name, f in added:
            logging.getLogger(name).removeFilter(f)


def cpu_analogue(max_memory: Mapping[Any, Any]) -> dict:
    """The same budget one level down, for a machine without a GPU: the GPU budget becomes the
    ``"cpu"`` budget and the ``"cpu"`` budget becomes ``"disk"`` (bitsandbytes accepts an all-cpu
    model, so the cpu plays the fast device and the disk the overflow)."""
    budget = parse_max_memory(max_memory)
    gpus = [k for k in budget if isinstance(k, int)]
    if len(gpus) != 1:
        raise ValueError(f"`max_memory` needs exactly one GPU entry for a CPU analogue; got {gpus}.")
    out = {"cpu": budget[gpus[0]]}
    if "cpu" in budget:
        out["disk"] = budget["cpu"]
    return out


def load_quantized(quantization: str = "8bit", max_memory: Mapping[Any, Any] | None = None,
                   device_map: Any = "auto", dtype: Any = "bfloat16", **bnb_kwargs):
    """``from_pretrained`` of the real SmolLM2 (local cache) with a ``BitsAndBytesConfig``.

    Exactly the call a learner writes; ``bnb_kwargs`` go to ``BitsAndBytesConfig`` (for example
    ``llm_int8_enable_fp32_cpu_offload=True``). Raises whatever transformers raises.

    When anything goes to ``"disk"``, the weights are offloaded to a new temporary folder
    (``vramlab-offload-*``) owned by the returned model: it is removed when the model is garbage-collected
    (``del model``) or at interpreter exit, and at once when loading fails. Its path is
    ``model._vramlab_offload_folder``; call ``model._vramlab_offload_cleanup()`` to remove it earlier.
    """
    import shutil
    import tempfile
    import weakref

    from transformers import AutoModelForCausalLM

    from vramlab import models

    path = models.ensure_converted()
    kwargs: dict = {"quantization_config": bnb_config(quantization, **bnb_kwargs), "device_map": device_map,
                    "dtype": _torch_dtype(dtype)}
    if max_memory is not None:
        kwargs["max_memory"] = dict(parse_max_memory(max_memory))
    values = set(device_map.values()) if isinstance(device_map, Mapping) else set()
    folder = None
    if "disk" in values or (max_memory is not None and "disk" in kwargs["max_memory"]):
        folder = kwargs["offload_folder"] = tempfile.mkdtemp(prefix=OFFLOAD_PREFIX)
    try:
        with _quiet_device_check(), _quiet_known_lines():
            model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    except BaseException:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
        raise
    if folder is not None:
        # the model reads its offloaded weights from the folder while it lives, so the folder lives as
        # long as the model: weakref.finalize runs once, at garbage collection or at interpreter exit
        model._vramlab_offload_folder = folder
        model._vramlab_offload_cleanup = weakref.finalize(model, shutil.rmtree, folder, ignore_errors=True)
    return model


def trigger_dispatch_error(quantization: str = "8bit", max_memory: Mapping[Any, Any] | None = None) -> ValueError:
    """Load the real SmolLM2 with bitsandbytes under a budget that spills; return transformers' ValueError.

    Default budget: :data:`TRIGGER_BUDGET` (GPU 0: 150 MB, cpu: 1 GB). The error comes from
    ``validate_environment`` in transformers 5.24.0 ``quantizers/quantizer_bnb_{8,4}bit.py``, raised
    after the device map is planned and before any weight is loaded, so it is raised on a machine
    without a GPU too. Raises ``RuntimeError`` if the model loads instead (the budget fits).
    """
    budget = TRIGGER_BUDGET if max_memory is None else max_memory
    try:
        model = load_quantized(quantization, budget)
    except ValueError as exc:
        if DISPATCH_ERROR_START in str(exc):
            return exc
        raise
    where = getattr(model, "hf_device_map", None) or {"": str(model.device)}
    raise RuntimeError(f"SmolLM2 {quantization} loaded under max_memory={dict(budget)} (map {where}); "
                       "this budget does not spill, so there is no dispatch error to show.")


def _on_gpu(gpu: bool | None) -> bool:
    if gpu is None:
        from vramlab.device import has_cuda

        return has_cuda()
    return bool(gpu)


def fix_budget(gpu: bool | None = None):
    """Fix 1, a budget that fits: :data:`FIT_BUDGET` (its CPU analogue without a GPU). Returns the model."""
    budget = FIT_BUDGET if _on_gpu(gpu) else cpu_analogue(FIT_BUDGET)
    return load_quantized("8bit", budget)


def offload_map(max_memory: Mapping[Any, Any] | None = None, quantization: str = "8bit") -> dict:
    """The custom ``device_map`` for fix 2: the map ``device_map="auto"`` plans for SmolLM2 under
    ``max_memory`` (default :data:`TRIGGER_BUDGET`), written out module by module."""
    return plan_device_map("smollm2-135m", TRIGGER_BUDGET if max_memory is None else max_memory,
                           quantization=quantization)


def fix_offload(gpu: bool | None = None):
    """Fix 2: ``llm_int8_enable_fp32_cpu_offload=True`` with a custom ``device_map`` (modules on
    cpu/disk stay unquantized, in the load dtype). Without a GPU the map is the CPU analogue
    (cpu + disk), so every module is unquantized there. Returns the model."""
    budget = TRIGGER_BUDGET if _on_gpu(gpu) else cpu_analogue(TRIGGER_BUDGET)
    # The map must be a dict, not "auto". transformers 5.24 calls ``hf_quantizer.preprocess_model`` with the
    # device_map as passed, before ``_get_device_map`` resolves "auto" (modeling_utils.py ``from_pretrained``),
    # and ``_process_model_before_weight_loading`` adds the cpu/disk modules to ``modules_to_not_convert``
    # only ``if isinstance(device_map, dict)`` (quantizers/quantizer_bnb_8bit.py and quantizer_bnb_4bit.py).
    # ``validate_environment`` skips its check whenever the flag is set (same files; called from
    # integrations/accelerate.py ``_get_device_map``), so "auto" + the flag loads with every Linear
    # quantized, the offloaded ones too: on CPU, budget {"cpu": "150MB", "disk": "1GB"} loads 210 quantized
    # Linears (63 modules on disk) and then fails at the first forward.
    return load_quantized("8bit", device_map=offload_map(budget), llm_int8_enable_fp32_cpu_offload=True)


def fix_smaller(gpu: bool | None = None):
    """Fix 3, a smaller quantization: 4-bit instead of 8-bit in the same too-small budget. Returns the model."""
    budget = TRIGGER_BUDGET if _on_gpu(gpu) else cpu_analogue(TRIGGER_BUDGET)
    return load_quantized("4bit", budget)


def describe_loaded(model) -> dict:
    """Where a loaded model sits: ``{"devices": {device: n_modules}, "quantized_linears": n,
    "footprint_bytes": ...}`` (``get_memory_footprint``; offloaded-to-disk weights not counted)."""
    import torch

    dmap = getattr(model, "hf_device_map", None)
    if dmap:
        devices: dict = {}
        for d in dmap.values():
            devices[device_label(d)] = devices.get(device_label(d), 0) + 1
    else:
        devices = {str(next(model.parameters()).device): 1}
    quantized = sum(1 for m in model.modules()
                    if type(m).__name__ in ("Linear8bitLt", "Linear4bit"))
    plain = sum(1 for m in model.modules() if type(m) is torch.nn.Linear)
    return {"devices": devices, "quantized_linears": quantized, "plain_linears": plain,
            "footprint_bytes": int(model.get_memory_footprint())}


__all__ = ["QUIET_LOG_LINES", "TRIGGER_BUDGET", "FIT_BUDGET", "DISPATCH_ERROR_START", "OFFLOAD_PREFIX", "cpu_analogue",
           "load_quantized", "trigger_dispatch_error", "fix_budget", "offload_map", "fix_offload", "fix_smaller",
           "describe_loaded"]
