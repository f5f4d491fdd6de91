"""Lab 01's outlier explorer: one token's activation at any layer, before and after rotation.

:func:`capture_layers` records the input of q/k/v and of down_proj at every layer in ONE forward
(a short window, stored as float16: 30 layers x 128 tokens x (576 + 1536) values x 2 bytes is about
16 MiB per model); :func:`token_figure` draws one token's |x| / RMS per channel for the original and the
rotated model on one axis; :func:`outlier_explorer` puts a site dropdown and layer/token sliders on it.
"""

from __future__ import annotations

import torch

from vramlab.quarot import outliers

#: the sites the explorer can show (inputs of linear layers; K/V need the attention hook).
EXPLORER_SITES = ("qkv_in", "down_in")


def capture_layers(model, input_ids, sites=EXPLORER_SITES, max_tokens: int = 128) -> dict:
    """``{site: tensor [layers, tokens, channels]}`` (float16, CPU) of every layer, from one forward.

    ``input_ids``: LongTensor ``[length]`` or ``[1, length]``; only the first ``max_tokens`` are run.
    """
    sites = tuple([sites] if isinstance(sites, str) else sites)
    bad = [s for s in sites if s not in EXPLORER_SITES]
    if bad or not sites:
        raise ValueError(f"sites must be some of {', '.join(EXPLORER_SITES)}, got {sites!r}.")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"max_tokens must be a positive int, got {max_tokens!r}.")
    if not isinstance(input_ids, torch.Tensor) or input_ids.dtype not in (torch.int64, torch.int32) or \
            input_ids.dim() not in (1, 2) or input_ids.numel() == 0:
        raise TypeError("input_ids must be one window of token ids, a LongTensor [length] or [1, length].")
    ids = input_ids.reshape(1, -1)[:, :max_tokens]
    layers = model.model.layers
    got = {s: [None] * len(layers) for s in sites}
    handles = []

    def keep(site, i):
        def hook(_module, args):
            got[site][i] = args[0].detach().reshape(-1, args[0].shape[-1]).to("cpu", torch.float16)
        return hook

    for i, layer in enumerate(layers):
        for s in sites:
            handles.append(outliers.site_module(layer, s).register_forward_pre_hook(keep(s, i)))
    try:
        with torch.inference_mode():
            model(input_ids=ids.to(next(model.parameters()).device), use_cache=False)
    finally:
        for h in handles:
            h.remove()
    return {s: torch.stack(v) for s, v in got.items()}


def token_figure(before, after, layer: int, token: int, site: str = "down_in"):
    """|x| / RMS per channel of one token at one layer: original (blue) and rotated (red) bars on one scale,
    with each one's max/RMS in the legend. ``before`` / ``after``: :func:`capture_layers` results.

    Each token is divided by its own RMS: the rotated model folds the RMSNorm scales into the next weights,
    so its raw q/k/v inputs are on another scale than the original's (up to 5-10x apart); per unit RMS the
    bars compare what a per-token quantizer sees. The legend sits above the plot, clear of every bar."""
    import plotly.graph_objects as go

    if site not in before or site not in after:
        raise ValueError(f"site {site!r} was not captured: choose from {', '.join(before)}.")
    layers, tokens, _ = before[site].shape
    if not (0 <= layer < layers and 0 <= token < tokens):
        raise ValueError(f"layer must be 0..{layers - 1} and token 0..{tokens - 1}, got layer={layer}, token={token}.")
    fig = go.Figure()
    # rotated first, so the original's few tall bars stay visible on top of the rotated model's even ones
    for data, name, colour in ((after, "rotated", outliers.ROTATED_COLOUR),
                               (before, "original", outliers.ORIGINAL_COLOUR)):
        x = data[site][layer, token].double()
        rms = float(x.pow(2).mean().sqrt()) or 1.0
        ratio = float(outliers.max_over_rms(x))
        fig.add_trace(go.Bar(x=list(range(x.numel())), y=[round(v, 3) for v in (x.abs() / rms).tolist()],
                             name=f"{name}: max/RMS {ratio:.1f}", marker=dict(color=colour, line_width=0),
                             opacity=0.85))
    fig.update_layout(title=f"layer {layer}, {outliers.SITE_LABELS[site]}, token {token}: |x| / RMS per channel",
                      xaxis_title="channel index", yaxis_title="|x| / the token's RMS (unitless)", barmode="overlay",
                      bargap=0, height=360, width=760, margin=dict(l=60, r=20, t=80, b=50),
                      legend=dict(orientation="h", x=0, xanchor="left", y=1.0, yanchor="bottom",
                                  traceorder="reversed"))
    return fig


def outlier_explorer(before, after, layer: int = 29, token: int = 0, site: str = "down_in"):
    """The widget: a site dropdown and layer / token sliders redrawing :func:`token_figure` in a
    ``widgets.Output`` (returned: show it as a cell's last value)."""
    import ipywidgets as widgets

    layers, tokens, _ = before[site].shape
    choose = widgets.Dropdown(options=[(outliers.SITE_LABELS[s], s) for s in before], value=site,
                              description="site")
    layer_s = widgets.IntSlider(value=layer, min=0, max=layers - 1, description="layer", continuous_update=False)
    token_s = widgets.IntSlider(value=token, min=0, max=tokens - 1, description="token", continuous_update=False)
    out = widgets.Output()

    def redraw(*_):
        with out:
            out.clear_output(wait=True)
            token_figure(before, after, layer_s.value, token_s.value, choose.value).show()

    for w in (choose, layer_s, token_s):
        w.observe(redraw, names="value")
    redraw()
    return widgets.VBox([widgets.HBox([choose, layer_s, token_s]), out])


__all__ = ["EXPLORER_SITES", "capture_layers", "token_figure", "outlier_explorer"]
