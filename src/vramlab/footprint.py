"""Where a model's bytes go: parameters and buffers by component and dtype."""

from __future__ import annotations

from collections import OrderedDict

# Component of a parameter from its name in a Hugging Face LLaMA-style model.
_COMPONENTS = (
    ("embed_tokens", "embedding"),
    ("lm_head", "lm_head"),
    ("self_attn", "attention (q, k, v, o)"),
    ("mlp", "MLP (gate, up, down)"),
    ("norm", "RMSNorm scales"),
    ("rotary", "RoPE frequencies"),
)


def _module(model):
    import torch

    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module (e.g. the model load_smollm2() returns), "
                        f"got {type(model).__name__}.")
    return model


def component_of(name: str) -> str:
    """The component a parameter/buffer name belongs to (e.g. ``model.layers.3.mlp.up_proj.weight``)."""
    if not isinstance(name, str):
        raise TypeError(f"name must be a parameter name (str), got {type(name).__name__}.")
    for key, label in _COMPONENTS:
        if key in name:
            return label
    return "other"


def parameter_table(model) -> list[dict]:
    """Rows ``{component, dtype, tensors, elements, bytes}``, largest first.

    Tensors shared between modules (tied ``lm_head``/``embed_tokens``) are counted once, under the
    first name PyTorch reports, and the row notes the tie. Buffers (e.g. RoPE ``inv_freq``) are
    included as ``kind="buffer"``. ``bytes`` is ``elements * element_size`` of the stored dtype.
    """
    _module(model)
    rows: "OrderedDict[tuple, dict]" = OrderedDict()
    seen: set[int] = set()
    items = [(n, t, "parameter") for n, t in model.named_parameters(remove_duplicate=False)]
    items += [(n, t, "buffer") for n, t in model.named_buffers(remove_duplicate=False)]
    tied: dict[int, list[str]] = {}
    for name, tensor, kind in items:
        tied.setdefault(id(tensor), []).append(name)
    for name, tensor, kind in items:
        if id(tensor) in seen:
            continue
        seen.add(id(tensor))
        label = component_of(name)
        names = tied[id(tensor)]
        if len(names) > 1:
            label = " + ".join(sorted({component_of(n) for n in names})) + " (tied, stored once)"
        key = (label, str(tensor.dtype).replace("torch.", ""), kind)
        row = rows.setdefault(key, {"component": label, "dtype": key[1], "kind": kind,
                                    "tensors": 0, "elements": 0, "bytes": 0})
        row["tensors"] += 1
        row["elements"] += tensor.numel()
        row["bytes"] += tensor.numel() * tensor.element_size()
    return sorted(rows.values(), key=lambda r: -r["bytes"])


def total_bytes(model) -> int:
    """Bytes of all unique parameters and buffers."""
    return sum(r["bytes"] for r in parameter_table(model))


def bytes_at_dtype(model, bytes_per_element: float) -> float:
    """Bytes the unique parameters would take at another width (2 for fp16/bf16, 0.5 for 4-bit)."""
    if isinstance(bytes_per_element, bool) or not isinstance(bytes_per_element, (int, float)) or \
            not bytes_per_element > 0:
        raise ValueError(f"bytes_per_element must be a positive number (2 for float16, 0.5 for 4-bit), "
                         f"got {bytes_per_element!r}.")
    return sum(r["elements"] for r in parameter_table(model) if r["kind"] == "parameter") * bytes_per_element


def footprint_figure(rows: list[dict], title: str = "Where the model's bytes go"):
    """A plotly horizontal bar chart of MiB per component, coloured by dtype (``rows``: :func:`parameter_table`)."""
    import plotly.graph_objects as go

    if not rows or not all(isinstance(r, dict) and {"component", "dtype", "bytes"} <= set(r) for r in rows):
        raise ValueError("rows must be the non-empty list parameter_table(model) returns "
                         "(dicts with component, dtype and bytes).")

    fig = go.Figure()
    for dtype in sorted({r["dtype"] for r in rows}):
        sel = [r for r in rows if r["dtype"] == dtype]
        fig.add_bar(y=[r["component"] for r in sel], x=[r["bytes"] / 2**20 for r in sel], orientation="h",
                    name=dtype, text=[f"{r['bytes'] / 2**20:.1f} MiB" for r in sel], textposition="auto")
    fig.update_layout(title=title, xaxis_title="memory (MiB = 2^20 bytes)", yaxis_title="component",
                      legend_title="stored as", showlegend=True, barmode="stack", height=340,
                      margin=dict(l=10, r=10, t=50, b=50), yaxis=dict(autorange="reversed"))
    return fig
