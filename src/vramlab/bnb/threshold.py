"""LLM.int8()'s outlier threshold, swept on one loaded 8-bit model: :func:`threshold_sweep`.

Every ``Linear8bitLt`` keeps its threshold in ``layer.state.threshold`` and bitsandbytes reads it at
each forward (0.50.2 ``autograd/_functions.py`` ``MatMul8bitLt.forward``: ``int8_vectorwise_quant(A,
threshold=state.threshold)`` marks the input columns where some ``|x| >= threshold``, the test in
``backends/default/ops.py`` and ``backends/cuda/ops.py``, and ``if
state.threshold > 0.0`` routes them through ``int8_mixed_scaled_mm``). So one loaded model can be run
at several thresholds without reloading: set the attribute on every layer, run a window, read
``state.idx`` (the columns kept) and the loss. What those columns cost: in ``int8_mixed_scaled_mm``
(``backends/default/ops.py``) the kept *activation* columns stay 16-bit, multiplied by the matching
weight columns *dequantized* from int8 (``int8_vectorwise_dequant(CB[:, outlier_cols], SCB)``); the
weights are never kept in 16-bit. Threshold 0 turns the split off: every column goes through int8.

The sweep takes one forward per threshold (about a second for 512 tokens on a CPU), so a notebook
computes a handful once and lets a slider look them up (:func:`threshold_widget`).
"""

from __future__ import annotations

import math

DEFAULT_THRESHOLDS = (0.0, 3.0, 6.0, 10.0, 20.0)


def _int8_layers(model) -> dict:
    import bitsandbytes as bnb

    out = {n: m for n, m in model.named_modules() if isinstance(m, bnb.nn.Linear8bitLt)}
    if not out:
        raise TypeError("model has no bitsandbytes Linear8bitLt layers: load it with quantized.load_quantized('int8').")
    return out


def _check_thresholds(thresholds) -> list[float]:
    out = []
    for t in thresholds:
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0:
            raise ValueError(f"thresholds must be finite numbers >= 0 (0 turns the outlier split off), got {t!r}.")
        out.append(float(t))
    if not out:
        raise ValueError("thresholds is empty: pass at least one number, e.g. (0, 6, 20).")
    return out


def threshold_sweep(model, input_ids, thresholds=DEFAULT_THRESHOLDS, module: str = "mlp.down_proj") -> list[dict]:
    """Run ``input_ids`` (LongTensor ``[tokens]`` or ``[1, tokens]``) through an 8-bit ``model`` at each
    threshold and measure, per threshold: ``nll`` (mean next-token NLL, nats/token), ``columns``
    (``{layer: columns of <module>'s input kept in 16-bit}``, counts), ``kept_16bit`` (the share of all
    8-bit layers' multiply-adds done in 16-bit: kept columns x output rows / all weights). The model's
    own thresholds are restored afterwards, whatever happens."""
    import torch
    import torch.nn.functional as F

    from vramlab.bnb.quantized import _quiet

    ts = _check_thresholds(thresholds)
    layers = _int8_layers(model)
    ids = input_ids if input_ids.dim() == 2 else input_ids.unsqueeze(0)
    ids = ids.to(next(model.parameters()).device)
    saved = {n: (m.state.threshold, m.state.idx) for n, m in layers.items()}
    total = sum(m.in_features * m.out_features for m in layers.values())
    suffix = "." + module
    _quiet()
    rows = []
    try:
        for t in ts:
            for m in layers.values():
                m.state.threshold = t
                m.state.idx = None   # with threshold 0 bitsandbytes does not touch idx: clear the last run's
            with torch.inference_mode():
                logits = model(input_ids=ids, use_cache=False).logits.float()
            nll = float(F.cross_entropy(logits[0, :-1], ids[0, 1:]))
            kept = {n: (0 if m.state.idx is None else int(m.state.idx.numel())) for n, m in layers.items()}
            columns = {int(n.split(".layers.")[1].split(".")[0]): k for n, k in kept.items() if n.endswith(suffix)}
            rows.append({"threshold": t, "nll": nll, "columns": dict(sorted(columns.items())),
                         "kept_16bit": sum(kept[n] * m.out_features for n, m in layers.items()) / total})
    finally:
        for n, m in layers.items():
            m.state.threshold, m.state.idx = saved[n]
    return rows


def threshold_figure(row: dict, n_columns: int, y_max: int, reference_nll: float | None = None):
    """One threshold's bar chart: the columns kept in 16-bit per layer, the NLL in the title."""
    import plotly.graph_objects as go

    layers = list(row["columns"])
    title = (f"threshold {row['threshold']:g}: window NLL {row['nll']:.4f} nats/token"
             + (f" (float32 {reference_nll:.4f})" if reference_nll is not None else "")
             + f"; {row['kept_16bit']:.1%} of the multiply-adds in 16-bit")
    fig = go.Figure(go.Bar(x=layers, y=[row["columns"][i] for i in layers], marker_color="#4c78a8"))
    fig.update_layout(title=dict(text=title, font_size=13), xaxis_title="decoder layer",
                      yaxis_title=f"down_proj input columns kept in 16-bit (of {n_columns})",
                      yaxis_range=[0, y_max * 1.05], height=360, width=760, margin=dict(t=50))
    return fig


def threshold_widget(rows: list[dict], n_columns: int, reference_nll: float | None = None):
    """A slider over the swept thresholds (``rows`` from :func:`threshold_sweep`) redrawing
    :func:`threshold_figure` in an ``Output``: nothing is recomputed when it moves."""
    import ipywidgets as widgets
    from IPython.display import display

    if not rows:
        raise ValueError("rows is empty: pass the list threshold_sweep returned.")
    by_t = {r["threshold"]: r for r in rows}
    y_max = max(max(r["columns"].values(), default=0) for r in rows) or 1
    start = 6.0 if 6.0 in by_t else rows[0]["threshold"]
    slider = widgets.SelectionSlider(options=[(f"{t:g}", t) for t in by_t], value=start,
                                     description="llm_int8_threshold", style={"description_width": "initial"},
                                     layout=widgets.Layout(width="520px"))
    out = widgets.Output()

    def draw(change=None):
        out.clear_output(wait=True)
        with out:
            threshold_figure(by_t[slider.value], n_columns, y_max, reference_nll).show()

    slider.observe(draw, names="value")
    draw()
    box = widgets.VBox([slider, out])
    display(box)
    return box


__all__ = ["DEFAULT_THRESHOLDS", "threshold_sweep", "threshold_figure", "threshold_widget"]
