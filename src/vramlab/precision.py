"""Weight memory at a precision: parameters x bits per parameter, and lab 00's precision explorer.

The widths (bits per stored parameter, scales included):

* float32 32, bfloat16 / float16 16, int8 / fp8 8;
* ``nf4`` 4.5: bitsandbytes stores 4 bits per value plus one float32 ``absmax`` per block of 64
  values (``Params4bit`` blocksize 64, bitsandbytes 0.50.2 ``nn/modules.py``), and transformers'
  ``BitsAndBytesConfig`` leaves ``bnb_4bit_use_double_quant=False`` by default (transformers 5.24
  ``utils/quantization_config.py``): 4 + 32/64 bits;
* ``nf4 + double quant`` 4.127: the absmax values themselves quantized to 8 bits in blocks of 256,
  with one float32 scale per such block: 4 + 8/64 + 32/(64 x 256) bits.

Simplified: the explorer puts every parameter at the chosen width. Real 8/4-bit loads keep the
embedding, the norms and often ``lm_head`` in 16 bits (lab 07 measures that).
"""

from __future__ import annotations

import math

#: precision name -> bits per stored parameter (scales included, see the module docstring).
PRECISIONS = {
    "float32": 32.0,
    "bfloat16": 16.0,
    "float16": 16.0,
    "int8 / fp8": 8.0,
    "nf4": 4.5,
    "nf4 + double quant": 4 + 8 / 64 + 32 / (64 * 256),
}

#: bundled configs marked on the explorer (their ``_num_parameters``).
DEFAULT_MODELS = ("qwen3-0.6b", "mistral-7b", "llama-3.1-8b", "llama-3.1-70b")


def bits_per_parameter(precision: str) -> float:
    """Bits one parameter takes at ``precision`` (a key of :data:`PRECISIONS`)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r} is unknown; use one of {', '.join(PRECISIONS)}.")
    return PRECISIONS[precision]


def _count(params, name: str = "params") -> float:
    if isinstance(params, bool) or not isinstance(params, (int, float)) or not math.isfinite(params) or params < 0:
        raise ValueError(f"{name} must be a non-negative number of parameters, got {params!r}.")
    return params


def weight_bytes(params: float, precision: str) -> float:
    """Bytes ``params`` parameters take at ``precision`` (``weight_bytes(134_515_008, "float16")``)."""
    return _count(params) * bits_per_parameter(precision) / 8


def readout(params: float, precision: str) -> str:
    """One line: the count, the precision, and the bytes in GiB (2**30) and in GB (10**9) side by side."""
    b = weight_bytes(params, precision)
    return (f"{_count(params) / 1e9:,.3g} billion parameters at {precision} "
            f"({bits_per_parameter(precision):.4g} bits each): {b / 2**30:,.3g} GiB = {b / 1e9:,.3g} GB")


def bundled_points(names=DEFAULT_MODELS) -> dict[str, int]:
    """``{config name: parameter count}`` from the bundled configs' ``_num_parameters``."""
    from vramlab.configs import load_config

    points = {}
    for name in names:
        cfg = load_config(name)
        count = cfg.get("_num_parameters")
        if count is None:
            raise ValueError(f"the bundled config {name!r} has no _num_parameters; choose another model.")
        points[str(cfg.get("_name", name))] = int(count)
    return points


def _log_ticks(lo: float, hi: float) -> list[float]:
    return [10.0 ** e for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)]


def explorer_figure(params: float, precision: str, points: dict[str, float], budgets_gib=(24, 80)):
    """Weight memory (GiB, log) against parameter count (log): one line per precision (the chosen one
    bold), the models in ``points`` on the chosen line, the slider's model as a star, and dashed
    horizontal lines at ``budgets_gib``."""
    import plotly.graph_objects as go

    _count(params)
    bits_per_parameter(precision)
    counts = [*points.values(), params]
    lo, hi = max(min(counts) / 3, 1e7), max(counts) * 3
    xs = [lo, hi]
    fig = go.Figure()
    for name in PRECISIONS:
        chosen = name == precision
        fig.add_trace(go.Scatter(x=xs, y=[weight_bytes(x, name) / 2**30 for x in xs], mode="lines", name=name,
                                 line=dict(width=4 if chosen else 1.5, dash="solid" if chosen else "dot"),
                                 opacity=1 if chosen else 0.5, hoverinfo="name"))
    ordered = sorted(points.items(), key=lambda kv: kv[1])
    fig.add_trace(go.Scatter(x=[v for _, v in ordered], y=[weight_bytes(v, precision) / 2**30 for _, v in ordered],
                             mode="markers+text", text=[k for k, _ in ordered], name="real models",
                             textposition=["top left" if i % 2 == 0 else "bottom right" for i in range(len(ordered))],
                             textfont=dict(size=11), marker=dict(size=9, color="black")))
    fig.add_trace(go.Scatter(x=[params], y=[weight_bytes(params, precision) / 2**30], mode="markers",
                             name="your slider", marker=dict(size=16, symbol="star", color="#ef553b")))
    # Budget lines as traces: plotly reads a shape's y on a log axis as log10(y), so add_hline would misplace them.
    for budget in budgets_gib:
        fig.add_trace(go.Scatter(x=xs, y=[budget, budget], mode="lines+text", text=["", f"{budget} GiB"],
                                 textposition="top left", line=dict(color="grey", dash="dash", width=1),
                                 showlegend=False, hoverinfo="skip"))
    ys = [weight_bytes(x, n) / 2**30 for x in xs for n in PRECISIONS] + list(budgets_gib)
    xt, yt = _log_ticks(lo, hi), _log_ticks(min(ys), max(ys))
    fig.update_layout(title=f"Weight memory at {precision}", height=440, width=780,
                      xaxis=dict(type="log", title="parameters (count, log scale)", tickvals=xt,
                                 ticktext=[f"{v:,.0f}" for v in xt]),
                      yaxis=dict(type="log", title="weight memory (GiB, log scale)", tickvals=yt,
                                 ticktext=[f"{v:g}" for v in yt]),
                      margin=dict(l=60, r=20, t=50, b=50), legend=dict(font=dict(size=10)))
    return fig


def explorer(points: dict[str, float], params: float | None = None, precision: str = "float16"):
    """The widget: a precision dropdown and a parameter slider (log scale) redrawing
    :func:`explorer_figure` and :func:`readout` in a ``widgets.Output`` (returned: show it as a cell's
    last value). ``points``: the marked models
    (e.g. the loaded SmolLM2's real count and :func:`bundled_points`)."""
    import ipywidgets as widgets

    if not points:
        raise ValueError("points is empty: pass {name: parameter count} for at least one model.")
    start = params if params is not None else next(iter(points.values()))
    choose = widgets.Dropdown(options=list(PRECISIONS), value=precision, description="precision")
    slider = widgets.FloatLogSlider(value=_count(start), base=10, min=7, max=12, step=0.05,
                                    description="parameters", readout_format=".3g",
                                    continuous_update=False, layout=widgets.Layout(width="520px"))
    text = widgets.HTML()
    out = widgets.Output()

    def redraw(*_):
        text.value = f"<b>{readout(slider.value, choose.value)}</b>"
        with out:
            out.clear_output(wait=True)
            explorer_figure(slider.value, choose.value, points).show()

    choose.observe(redraw, names="value")
    slider.observe(redraw, names="value")
    redraw()
    return widgets.VBox([widgets.HBox([choose, slider]), text, out])


__all__ = ["PRECISIONS", "DEFAULT_MODELS", "bits_per_parameter", "weight_bytes", "readout", "bundled_points",
           "explorer_figure", "explorer"]
