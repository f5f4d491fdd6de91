"""Plotly pictures of a device map: where each module lands, and how full each device is.
"""

from __future__ import annotations

from typing import Any, Mapping

from vramlab.dispatch.planner import MiB, _as_model, module_sizes, parse_max_memory, plan_device_map


# --------------------------------------------------------------------------------------------
# picture
# --------------------------------------------------------------------------------------------

def device_label(device: Any) -> str:
    return f"GPU {device}" if isinstance(device, int) else str(device)


def device_map_figure(config_or_model: Any, max_memory: Mapping[Any, Any], dtype: Any = "bfloat16",
                      quantization: str | None = None, device_map: Mapping[str, Any] | None = None,
                      title: str | None = None):
    """A plotly figure: left, each top-level module as a bar coloured by the device it lands on
    (MiB); right, how full each device is against its budget (% of ``max_memory``, one row per device).

    ``device_map`` defaults to :func:`plan_device_map`'s answer for the same inputs.
    """
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    model = _as_model(config_or_model, dtype, quantization)
    dmap = dict(device_map) if device_map is not None else plan_device_map(model, max_memory, dtype, quantization)
    sizes = module_sizes(model, dtype, quantization)
    budget = parse_max_memory(max_memory)
    palette = ["#1f77b4", "#2ca02c", "#9467bd", "#17becf", "#bcbd22", "#8c564b", "#e377c2", "#7f7f7f"]
    colours = {"cpu": "#ff7f0e", "disk": "#d62728"}
    devices = list(budget) + [d for d in dict.fromkeys(dmap.values()) if d not in budget]

    def colour(dev: Any) -> str:
        return palette[dev % len(palette)] if isinstance(dev, int) else colours.get(dev, "#7f7f7f")

    fig = make_subplots(rows=1, cols=2, column_widths=[0.64, 0.36], horizontal_spacing=0.13,
                        subplot_titles=("where each module lands", "how full each device is"))
    order = list(dmap)   # loading order, as the planner placed them
    for dev in devices:
        names = [n for n in order if dmap[n] == dev]
        if names:
            fig.add_trace(go.Bar(x=names, y=[sizes.get(n, 0) / MiB for n in names], name=device_label(dev),
                                 marker_color=colour(dev), legendgroup=str(dev)), row=1, col=1)
    used = {d: 0 for d in devices}
    for n, d in dmap.items():
        used[d] = used.get(d, 0) + sizes.get(n, 0)
    fill = [100 * used[d] / budget[d] if budget.get(d) else 0.0 for d in devices]

    def amount(b: float) -> str:
        return f"{b / 2**30:.2f} GiB" if b >= 2**30 else f"{b / MiB:,.0f} MiB"

    # horizontal bars: one row per device, so eight GPUs keep a readable label each (vertical bars with
    # "outside" text shrank the labels to a few pixels)
    fig.add_trace(go.Bar(y=[device_label(d) for d in devices], x=fill, orientation="h", showlegend=False,
                         marker_color=[colour(d) for d in devices],
                         text=[f"{amount(used[d])} / {amount(budget.get(d, 0))}" for d in devices],
                         textposition="outside", cliponaxis=False, textfont=dict(size=11)), row=1, col=2)
    fig.update_yaxes(title_text="module size (MiB)", row=1, col=1)
    top = max(100.0, max(fill, default=0))   # room to the right for the "used / budget" labels
    fig.update_xaxes(title_text="used / max_memory (%)", range=[0, top * 1.9], tickmode="array",
                     tickvals=[v for v in (0, 25, 50, 75, 100, 150, 200, 300, 500) if v <= top], row=1, col=2)
    fig.update_yaxes(title_text="device", autorange="reversed", row=1, col=2)
    # every module gets its own tick label (plotly thins crowded category ticks, which left the last bar,
    # lm_head, unlabelled); "model." is dropped to keep them short
    fig.update_xaxes(title_text="module (in loading order)", tickangle=-60, categoryorder="array",
                     categoryarray=order, tickmode="array", tickvals=order,
                     ticktext=[n.removeprefix("model.") for n in order], tickfont=dict(size=9), row=1, col=1)
    fig.update_layout(title=title or f"device_map='auto' plan ({quantization or dtype})", height=450,
                      width=980, bargap=0.15, legend_title_text="device", margin=dict(t=70, b=130))
    return fig


def replay_figure(replays: Mapping[str, Any], limit_bytes: int | None = None, title: str | None = None,
                  points: int = 600):
    """A plotly figure of GPU 0's allocated GiB through a forward for several maps: ``replays`` maps a label to a
    :class:`vramlab.dispatch.replay.MapReplay`. Each curve keeps the largest value of every stretch of events
    (at most ``points`` per curve), so no peak is lost; ``limit_bytes`` draws the GPU's budget as a line."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for label, r in replays.items():
        live = list(r.live)
        step = max(1, -(-len(live) // points))
        xs = list(range(0, len(live), step))
        ys = [max(live[i:i + step]) / 2**30 for i in xs]
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name=f"{label} (peak {r.peak_bytes / 2**30:.2f} GiB)"))
    if limit_bytes:
        fig.add_hline(y=limit_bytes / 2**30, line_dash="dash", line_color="#d62728",
                      annotation_text=f"{limit_bytes / 2**30:g} GiB for PyTorch", annotation_position="top left")
    fig.update_layout(title=title or "GPU 0 through one forward (dry run, computed on the meta device)",
                      xaxis_title="allocation event (weights loaded first, then the forward in order)",
                      yaxis_title="GPU 0 allocated (GiB)", height=420, width=900,
                      legend=dict(orientation="h", yanchor="bottom", y=-0.45))
    return fig


def copy_figure(batches: list[int], copied_gib: list[float | None], best: int | None = None,
                limit: float | None = None, title: str | None = None):
    """A plotly figure of a queue's design space: for each batch size (prompts per call) in ``batches``, the least
    weight GiB copied to the GPU for the whole queue (``copied_gib``, None where nothing fits the GPU's ``limit``
    GiB); ``best`` marks one batch size. The fit limit is drawn after the largest batch size that fits."""
    import plotly.graph_objects as go

    fits = [(b, c) for b, c in zip(batches, copied_gib) if c is not None]
    fig = go.Figure(go.Scatter(x=[b for b, _ in fits], y=[c for _, c in fits], mode="lines+markers",
                               name="least copy that fits"))
    if best is not None and any(b == best for b, _ in fits):
        fig.add_trace(go.Scatter(x=[best], y=[c for b, c in fits if b == best], mode="markers", name="best",
                                 marker=dict(size=14, symbol="star", color="#2ca02c")))
    if fits and len(fits) < len(batches):
        fig.add_vline(x=fits[-1][0] + 0.5, line_dash="dash", line_color="#d62728",
                      annotation_text=f"no map fits {limit:g} GiB beyond" if limit else "no map fits beyond",
                      annotation_position="top left")
    fig.update_layout(title=title or "Weights copied for the whole queue, by prompts per call",
                      xaxis_title="prompts per call (B)", yaxis_title="weights copied to GPU 0 (GiB)",
                      height=380, width=800)
    return fig


__all__ = ["device_label", "device_map_figure", "replay_figure", "copy_figure"]
