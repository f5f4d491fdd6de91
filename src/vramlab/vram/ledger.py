"""Where a model run's memory goes: weights, KV cache, activations, reserved-unallocated, non-PyTorch.

:func:`memory_ledger` runs one prefill of ``input_ids`` (shape ``[batch, tokens]``) through a
Hugging Face causal LM and returns one row per item, each with a *computed* value (vramlab's
arithmetic, the same on every machine) and, on a CUDA GPU, a *measured* value:

* weights - computed: :func:`vramlab.footprint.total_bytes`; measured: ``memory_allocated`` grows by
  this much when the model moves to the GPU.
* KV cache - computed: :func:`vramlab.serving.kvcache.kv_cache_bytes` for ``batch x tokens`` in the model's
  dtype; measured: ``memory_allocated`` still held once everything the forward returned except the cache
  is freed, minus what was allocated before the forward (the allocator's view, 512-byte rounding included).
* activations (transient) - computed: the logits tensor ``batch x tokens x vocab x 4`` bytes (the
  largest single activation of a prefill for a small model with a large vocabulary; a lower bound);
  measured: ``max_memory_allocated`` during the forward minus what is still allocated afterwards.
* reserved but unallocated - GPU only: ``memory_reserved - memory_allocated`` after the forward
  (the caching allocator's cache; the CPU has no such cache).
* non-PyTorch - GPU only, needs nvidia-ml-py: this process's memory on the device (NVML) minus
  ``memory_reserved`` (CUDA context, cuBLAS workspaces, kernels).

Without CUDA the measured column is None and every row says "computed".
"""

from __future__ import annotations

import os
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

    dtype = str(next(model.parameters()).dtype).replace("torch.", "")
    elem = next(model.parameters()).element_size()
    vocab = int(model.config.vocab_size)
    return [
        LedgerRow("weights", total_bytes(model), None, "parameters + buffers (vramlab.footprint)"),
        LedgerRow("KV cache", int(kv_cache_bytes(model.config, batch * tokens, kv_dtype=dtype)), None,
                  f"2 x layers x kv_heads x head_dim x {elem} B x {batch * tokens} tokens (vramlab.serving.kvcache)"),
        LedgerRow("activations (transient)", batch * tokens * vocab * 4, None,
                  "computed: the float32 logits tensor only (a lower bound)"),
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
    torch.cuda.synchronize()
    a0 = torch.cuda.memory_allocated()
    model.to("cuda")
    torch.cuda.synchronize()
    weights = torch.cuda.memory_allocated() - a0
    ids = input_ids.to("cuda")
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    with torch.no_grad():
        out = model(ids, use_cache=True)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    after = torch.cuda.memory_allocated()
    # KV cache, measured by the allocator (not numel x element size): free everything the forward returned
    # except the cache; what is still allocated above `before` is the cache (plus the allocator's rounding
    # of each block to 512 bytes).
    cache = out.past_key_values
    del out
    torch.cuda.synchronize()
    kv = torch.cuda.memory_allocated() - before
    reserved = torch.cuda.memory_reserved()
    from vramlab.vram.monitor import _Nvml

    nvml = _Nvml(torch.cuda.current_device())  # None values when nvidia-ml-py or the driver is missing
    process_used = nvml.read(os.getpid())[2] if nvml.ok else None
    nvml.close()
    non_torch = None if process_used is None else process_used - reserved
    measured = [weights, kv, peak - after, reserved - after, non_torch]
    del cache, ids
    for row, value in zip(rows, measured):
        row.measured = value
    rows[2].how += f"; measured: peak during the forward minus what stayed ({(after - before) / MiB:,.1f} MiB stayed)"
    return Ledger(rows, "GPU (measured and computed)", batch, tokens)


__all__ = ["memory_ledger", "Ledger", "LedgerRow", "computed_rows"]
