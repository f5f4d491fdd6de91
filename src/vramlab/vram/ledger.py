"""Where a model run's memory goes: weights, cuBLAS workspace, KV cache, logits, activations, the cache, the rest.

:func:`memory_ledger` runs one prefill of ``input_ids`` (shape ``[batch, tokens]``) through a
Hugging Face causal LM and returns one row per item, each with a *computed* value (vramlab's
arithmetic, the same on every machine) and, on a CUDA GPU, a *measured* value:

* weights - computed: :func:`vramlab.footprint.total_bytes`; measured: ``memory_allocated`` grows by
  this much when the model moves to the GPU.
* cuBLAS workspace - GPU only: the first matmul on a (cuBLAS handle, stream) pair allocates a workspace
  *through the caching allocator* and keeps it (``getNewWorkspace`` / ``getChosenWorkspaceSize`` in
  pytorch/pytorch ``aten/src/ATen/cuda/CublasHandlePool.cpp``, 2.x: ``CUBLAS_WORKSPACE_CONFIG``, by default
  ``4096 KiB x 2 + 16 KiB x 8`` = 8.125 MiB, 32 MiB on sm90; cuBLASLt shares it unless
  ``TORCH_CUBLASLT_UNIFIED_WORKSPACE=0``). The ledger warms up with small matmuls in the model's dtype (with
  and without a bias, so both the cuBLAS and the cuBLASLt path run) before it measures the forward, and shows
  what stayed allocated as this row; without the warm-up the workspace would be counted in the KV cache.
* KV cache - computed: :func:`vramlab.serving.kvcache.kv_cache_bytes` for ``batch x tokens`` in the model's
  dtype; measured: ``memory_allocated`` still held once the output's logits are freed and only the cache is
  left, minus what was allocated before the forward (the allocator's view, 512-byte rounding included).
* logits - computed: ``batch x tokens x vocab`` values in the output layer's dtype (transformers' Llama
  returns ``self.lm_head(hidden_states)`` without an upcast: ``models/llama/modeling_llama.py``, 5.x);
  measured: what ``memory_allocated`` drops by when the output's logits are deleted.
* activations (transient) - computed: the output layer's input, ``batch x tokens x hidden`` values (alive
  while the logits are written; a lower bound); measured: ``max_memory_allocated`` during the forward minus
  what the forward left allocated (the cache and the logits), both from one ``memory_stats()`` snapshot.
* reserved but unallocated - GPU only: ``reserved_bytes - allocated_bytes`` of the same ``memory_stats()``
  snapshot, taken right after the forward (the caching allocator's cache; the CPU has no such cache).
* non-PyTorch - GPU only: this process's memory on the device (NVML, needs ``nvidia-ml-py``) minus
  ``memory_reserved`` (CUDA context, kernels, libraries). Without NVML, or on a MIG slice: the device's used
  memory from ``torch.cuda.mem_get_info()`` minus ``memory_reserved``, an upper bound that includes every
  other process on the device, and the row says so.

Without CUDA the measured column is None and every row says "computed".
"""

from __future__ import annotations

from dataclasses import dataclass

MiB = 1 << 20


@dataclass
class LedgerRow:
    item: str
    computed: int | None      # bytes; None where vramlab cannot compute it
    measured: int | None      # bytes; None without a GPU (or NVML for non-PyTorch)
    how: str

    @property
    def label(self) -> str:
        return "measured" if self.measured is not None else ("computed" if self.computed is not None else "n/a")


@dataclass
class Ledger:
    rows: list[LedgerRow]
    mode: str                 # "GPU" or "CPU mode"
    batch: int
    tokens: int

    def table(self) -> str:
        """A fixed-width text table in MiB."""
        def mib(x):
            return "-" if x is None else f"{x / MiB:,.1f}"

        head = f"{'item':<26}{'computed MiB':>14}{'measured MiB':>14}  how"
        lines = [f"{self.mode}: one prefill of batch {self.batch} x {self.tokens} tokens", head, "-" * len(head)]
        for r in self.rows:
            lines.append(f"{r.item:<26}{mib(r.computed):>14}{mib(r.measured):>14}  {r.how}")
        return "\n".join(lines)

    def figure(self, title: str | None = None):
        """Grouped bars (MiB): computed and, on a GPU, measured, per item."""
        import plotly.graph_objects as go

        items = [r.item for r in self.rows]
        fig = go.Figure()
        fig.add_bar(y=items, x=[None if r.computed is None else r.computed / MiB for r in self.rows],
                    name="computed", orientation="h", marker_color="#9ecae1")
        if any(r.measured is not None for r in self.rows):
            fig.add_bar(y=items, x=[None if r.measured is None else r.measured / MiB for r in self.rows],
                        name="measured (GPU)", orientation="h", marker_color="#08519c")
        fig.update_layout(title=title or f"Memory ledger ({self.mode}; batch {self.batch} x {self.tokens} tokens)",
                          xaxis_title="memory (MiB)", yaxis_title="item", barmode="group", height=320, width=720,
                          margin=dict(l=170, r=20, t=50, b=50), yaxis=dict(autorange="reversed"))
        return fig


def _cache_tensor_bytes(cache) -> int:
    """Bytes of every tensor held by a transformers cache object (or legacy tuple of tuples)."""
    import torch

    seen, total = set(), 0

    def walk(obj, depth=0):
        nonlocal total
        if depth > 6:
            return
        if isinstance(obj, torch.Tensor):
            if id(obj) not in seen:
                seen.add(id(obj))
                total += obj.numel() * obj.element_size()
        elif isinstance(obj, (list, tuple)):
            for x in obj:
                walk(x, depth + 1)
        elif hasattr(obj, "__dict__"):
            for x in vars(obj).values():
                walk(x, depth + 1)

    walk(cache)
    return total


def computed_rows(model, batch: int, tokens: int) -> list[LedgerRow]:
    """The computed column: footprint + kvcache arithmetic (bytes)."""
    from vramlab.footprint import total_bytes
    from vramlab.serving.kvcache import kv_cache_bytes

    param = next(model.parameters())
    dtype = str(param.dtype).replace("torch.", "")
    elem = param.element_size()
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    weight = getattr(head, "weight", None)
    logit_elem = weight.element_size() if weight is not None else elem
    logit_dtype = str(weight.dtype).replace("torch.", "") if weight is not None else dtype
    vocab = int(model.config.vocab_size)
    hidden = int(model.config.hidden_size)
    n = batch * tokens
    return [
        LedgerRow("weights", total_bytes(model), None, "parameters + buffers (vramlab.footprint)"),
        LedgerRow("cuBLAS workspace", None, None, "GPU only: kept by cuBLAS after its first matmul (allocator)"),
        LedgerRow("KV cache", int(kv_cache_bytes(model.config, n, kv_dtype=dtype)), None,
                  f"2 x layers x kv_heads x head_dim x {elem} B x {n} tokens (vramlab.serving.kvcache)"),
        LedgerRow("logits", n * vocab * logit_elem, None,
                  f"{n} tokens x {vocab} vocab x {logit_elem} B ({logit_dtype} logits)"),
        LedgerRow("activations (transient)", n * hidden * elem, None,
                  f"computed: the output layer's input, {n} x {hidden} x {elem} B (a lower bound)"),
        LedgerRow("reserved but unallocated", None, None, "GPU only: the caching allocator's cache"),
        LedgerRow("non-PyTorch", None, None, "GPU only: CUDA context, libraries (NVML)"),
    ]


def memory_ledger(model, input_ids) -> Ledger:
    """One prefill of ``input_ids`` (LongTensor ``[batch, tokens]``) through ``model``: the ledger.

    Pass the model on the CPU. On a CUDA GPU it is moved to the GPU (it stays there) and every row
    is also measured; on
    CPU only the computed column is filled and the ledger says so.
    """
    import torch

    from vramlab.device import has_cuda

    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2:
        raise ValueError("`input_ids` must be a LongTensor of shape [batch, tokens] "
                         f"(got {type(input_ids).__name__} {getattr(input_ids, 'shape', '')}).")
    if not hasattr(model, "config") or not hasattr(model, "parameters"):
        raise TypeError(f"`model` must be a transformers causal LM (got {type(model).__name__}).")
    batch, tokens = (int(x) for x in input_ids.shape)
    rows = computed_rows(model, batch, tokens)
    if not has_cuda():
        return Ledger(rows, "CPU mode (computed, not measured)", batch, tokens)

    if next(model.parameters()).is_cuda:
        raise ValueError("`model` is already on the GPU; pass it on the CPU so the ledger can measure what "
                         "moving its weights to the GPU costs.")

    def stats() -> dict:   # one snapshot: allocated, reserved and the peak read at the same moment
        torch.cuda.synchronize()
        return torch.cuda.memory_stats()

    a0 = stats().get("allocated_bytes.all.current", 0)
    model.to("cuda")
    st = stats()
    weights = st["allocated_bytes.all.current"] - a0
    # Warm-up: cuBLAS (and cuBLASLt) allocate their workspace through the caching allocator on the first
    # matmul of a handle and stream, and keep it. One small matmul in the model's dtype, with and without a
    # bias (addmm can take the cuBLASLt path), so the forward below does not count it as KV cache.
    param = next(model.parameters())
    x = torch.ones(16, 64, dtype=param.dtype, device="cuda")
    with torch.no_grad():
        y = torch.nn.functional.linear(x, x) + torch.nn.functional.linear(x, x, x[0, :16])
    del x, y
    workspace = stats()["allocated_bytes.all.current"] - st["allocated_bytes.all.current"]
    ids = input_ids.to("cuda")
    torch.cuda.reset_peak_memory_stats()
    before = stats()["allocated_bytes.all.current"]
    with torch.no_grad():
        out = model(ids, use_cache=True)
    st = stats()                       # right after the forward: peak, allocated and reserved of one moment
    peak, after = st["allocated_bytes.all.peak"], st["allocated_bytes.all.current"]
    unallocated = st["reserved_bytes.all.current"] - after
    # The logits and the KV cache, measured by the allocator (not numel x element size): free the logits, then
    # what is still allocated above `before` is the cache (plus the allocator's 512-byte rounding per block).
    cache, logits = out.past_key_values, out.logits
    del out
    held = stats()["allocated_bytes.all.current"]
    del logits
    st = stats()
    logits_measured = held - st["allocated_bytes.all.current"]
    kv = st["allocated_bytes.all.current"] - before
    reserved = st["reserved_bytes.all.current"]
    from vramlab.vram.monitor import device_memory

    process_used, device_used, _total, source = device_memory(torch.cuda.current_device())
    if process_used is not None:
        non_torch, how = process_used - reserved, "this process on the device (NVML) minus reserved"
    elif device_used is not None:
        non_torch = device_used - reserved
        how = (f"device used ({source}) minus reserved: an upper bound, other processes included "
               "(pip install nvidia-ml-py for this process alone)")
    else:
        non_torch, how = None, "GPU only: CUDA context, libraries (needs nvidia-ml-py)"
    measured = [weights, workspace, kv, logits_measured, peak - after, unallocated, non_torch]
    del cache, ids
    for row, value in zip(rows, measured):
        row.measured = value
    rows[4].how += (f"; measured: peak during the forward minus what the forward left allocated "
                    f"(cache + logits, {(after - before) / MiB:,.1f} MiB)")
    rows[5].how += "; reserved - allocated of one memory_stats() snapshot after the forward"
    rows[6].how = how
    return Ledger(rows, "GPU (measured and computed)", batch, tokens)


__all__ = ["memory_ledger", "Ledger", "LedgerRow", "computed_rows"]
