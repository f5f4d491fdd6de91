"""Activation outliers: where they are, how big, and what a rotation does to them.

:func:`activation_stats` runs a LLaMA-style model on token windows with forward hooks at the
inputs of the linear layers a quantizer sees, plus K and V after RoPE, and reduces every
activation on the fly (one window at a time; memory is O(channels + tokens) per site):

=========  ==============================================  =====================================
site       tensor                                          weights for the incoherence mu
=========  ==============================================  =====================================
qkv_in     input of q_proj / k_proj / v_proj (shared)      [q; k; v] stacked
o_in       input of o_proj                                 o_proj
mlp_in     input of gate_proj / up_proj (shared)           [gate; up] stacked
down_in    input of down_proj (rotated model: the input    down_proj (the inner Linear)
           of the inner Linear, i.e. after the online
           Hadamard — what an activation quantizer sees)
k          keys after RoPE (and after a rotated model's    —
           head-wise Hadamard), all KV heads per token
v          values, all KV heads per token                  —
=========  ==============================================  =====================================

Measures (``../shared/REFERENCE.md``):

* ``kurtosis``: ``E[(x-mean)^4] / var^2`` pooled over all elements of a site (3 for a Gaussian).
  It mixes outlier *channels* with tokens of very different scale ("massive activations").
* ``token_kurtosis``: the median over tokens of each token vector's kurtosis — only the shape
  inside a token, which is what a per-token quantizer suffers from and what a rotation flattens.
* ``max_over_rms_median`` / ``_max``: per-token ``max|x| / RMS(x)`` (at most ``sqrt(n)``; a Gaussian
  gives ~3.6 at n = 576), median and max over tokens.
* ``absmax_over_rms``: the site's largest ``|x|`` over its global RMS.
* ``channel_absmax``: the per-channel ``max|x|`` vector.
* ``weight_mu``: QuIP incoherence ``mu = max|W_ij| sqrt(m n) / ||W||_F`` of the weights reading the
  site (1 for a perfectly flat matrix, ``sqrt(m n)`` at worst).

Measured on SmolLM2 (8 x 512 pydoc windows), layer 29 down_proj input: kurtosis 633, token_kurtosis
65, absmax_over_rms 136, per-token max/RMS median 12.9 / max 21.9; after ``rotate_model`` (Hadamard):
14, 2.9, 23, 3.4 / 4.7. The pooled kurtosis stays above 3 after rotation because whole tokens differ in
scale — a rotation mixes channels within a token, never across tokens; per-token scales handle that.
"""

from __future__ import annotations

import math

import torch

from vramlab.rotate import down_linear

SITES = ("qkv_in", "o_in", "mlp_in", "down_in", "k", "v")
SITE_LABELS = {
    "qkv_in": "q/k/v input", "o_in": "o_proj input", "mlp_in": "gate/up input",
    "down_in": "down_proj input", "k": "K after RoPE", "v": "V",
}


# --------------------------------------------------------------------------- single-tensor measures
def kurtosis(x) -> float:
    """Pearson kurtosis of all elements of ``x`` (3 for a Gaussian; large = heavy tails/outliers)."""
    x = x.detach().double().flatten()
    d = x - x.mean()
    var = (d * d).mean()
    return float((d**4).mean() / (var * var))


def max_over_rms(x):
    """Per-token ``max|x| / RMS(x)`` over the last dim (a tensor with the leading shape)."""
    x = x.detach().double()
    rms = x.pow(2).mean(-1).sqrt().clamp_min(1e-30)
    return x.abs().amax(-1) / rms


def token_kurtosis(x):
    """Per-token kurtosis over the last dim (the shape of each token's vector; 3 for a Gaussian)."""
    x = x.detach().double()
    d = x - x.mean(-1, keepdim=True)
    var = (d * d).mean(-1)
    return (d**4).mean(-1) / (var * var).clamp_min(1e-300)


def incoherence(W) -> float:
    """QuIP's ``mu = max|W_ij| sqrt(m n) / ||W||_F`` of a weight matrix ``[m, n]``."""
    W = W.detach().double()
    m, n = W.shape
    return float(W.abs().max() * math.sqrt(m * n) / W.norm())


# --------------------------------------------------------------------------- running statistics
class _Running:
    """Streaming moments, per-channel max|x| and per-token max/RMS of one site."""

    def __init__(self):
        self.count = 0
        self.s1 = self.s2 = self.s3 = self.s4 = 0.0
        self.channel_absmax = None
        self.ratios = []
        self.token_kurt = []

    def update(self, x):  # x: [tokens, channels]
        x = x.detach()
        x64 = x.double()
        self.count += x64.numel()
        x2 = x64 * x64
        self.s1 += float(x64.sum())
        self.s2 += float(x2.sum())
        self.s3 += float((x2 * x64).sum())
        self.s4 += float((x2 * x2).sum())
        cmax = x.abs().amax(0).float().cpu()
        self.channel_absmax = cmax if self.channel_absmax is None else torch.maximum(self.channel_absmax, cmax)
        self.ratios.append(max_over_rms(x64).float().cpu())
        self.token_kurt.append(token_kurtosis(x64).float().cpu())

    def result(self) -> dict:
        n = self.count
        mean = self.s1 / n
        m2 = self.s2 / n - mean**2
        m4 = (self.s4 / n - 4 * mean * self.s3 / n + 6 * mean**2 * self.s2 / n - 3 * mean**4)
        ratios = torch.cat(self.ratios)
        tk = torch.cat(self.token_kurt)
        rms = math.sqrt(self.s2 / n)
        absmax = float(self.channel_absmax.max())
        return {
            "kurtosis": float(m4 / (m2 * m2)) if m2 > 0 else float("nan"),
            "token_kurtosis": float(tk.median()),
            "rms": rms,
            "absmax": absmax,
            "absmax_over_rms": absmax / rms if rms > 0 else float("nan"),
            "max_over_rms_median": float(ratios.median()),
            "max_over_rms_max": float(ratios.max()),
            "tokens": int(ratios.numel()),
            "channels": int(self.channel_absmax.numel()),
            "channel_absmax": self.channel_absmax,
        }


def _tokens(x):
    """[..., n] -> [tokens, n]."""
    return x.reshape(-1, x.shape[-1])


def _kv_tokens(x):
    """[b, kv_heads, s, d] -> [b*s, kv_heads*d] (all heads of one token as one vector)."""
    b, h, s, d = x.shape
    return x.transpose(1, 2).reshape(b * s, h * d)


def site_weights(layer) -> dict:
    """The weight matrices that read each site of one decoder layer (for the incoherence mu)."""
    attn, mlp = layer.self_attn, layer.mlp
    return {
        "qkv_in": torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight], 0),
        "o_in": attn.o_proj.weight,
        "mlp_in": torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight], 0),
        "down_in": down_linear(mlp).weight,
    }


def activation_stats(model, windows, layers=None, sites=SITES) -> list[dict]:
    """Outlier statistics per (layer, site), reduced on the fly over all windows.

    ``windows``: LongTensor ``[n, length]`` (run one window at a time, no cache). ``layers``: layer
    indices (default: all). Returns a list of dicts (one per layer and site, layer-major) with keys
    ``layer, site, kurtosis, token_kurtosis, rms, absmax, absmax_over_rms, max_over_rms_median,
    max_over_rms_max, tokens, channels, channel_absmax`` (a float32 tensor ``[channels]``) and ``weight_mu`` (None for k/v). The model
    is returned to its previous attention implementation and hooks afterwards.
    """
    from vramlab import attention

    all_layers = model.model.layers
    layer_ids = list(range(len(all_layers))) if layers is None else [int(i) for i in layers]
    running = {(i, s): _Running() for i in layer_ids for s in sites}
    handles, observed = [], []

    def pre_hook(key):
        def hook(_module, args):
            running[key].update(_tokens(args[0]))
        return hook

    for i in layer_ids:
        layer = all_layers[i]
        attn, mlp = layer.self_attn, layer.mlp
        targets = {"qkv_in": attn.q_proj, "o_in": attn.o_proj, "mlp_in": mlp.gate_proj,
                   "down_in": down_linear(mlp)}
        for site, module in targets.items():
            if site in sites:
                handles.append(module.register_forward_pre_hook(pre_hook((i, site))))
        if "k" in sites or "v" in sites:
            def observer(k, v, i=i):
                if "k" in sites:
                    running[(i, "k")].update(_kv_tokens(k))
                if "v" in sites:
                    running[(i, "v")].update(_kv_tokens(v))
            attn.vramlab_kv_observer = observer
            observed.append(attn)

    previous = getattr(model.config, "_attn_implementation", "sdpa")
    if observed:
        attention.enable(model)
    try:
        with torch.inference_mode():
            device = next(model.parameters()).device
            for row in windows:
                model(input_ids=row.unsqueeze(0).to(device), use_cache=False)
    finally:
        for h in handles:
            h.remove()
        for attn in observed:
            del attn.vramlab_kv_observer
        if observed and previous != attention.NAME:
            attention.disable(model, previous)

    rows = []
    for i in layer_ids:
        weights = site_weights(all_layers[i])
        for s in sites:
            r = {"layer": i, "site": s}
            r.update(running[(i, s)].result())
            r["weight_mu"] = incoherence(weights[s]) if s in weights else None
            rows.append(r)
    return rows


def stats_table(rows, keys=("layer", "site", "kurtosis", "token_kurtosis", "max_over_rms_median",
                            "max_over_rms_max", "absmax_over_rms", "weight_mu"), digits: int = 3) -> str:
    """A plain-text table of :func:`activation_stats` rows (no pandas needed)."""
    def fmt(v):
        if v is None:
            return "-"
        if isinstance(v, float):
            return f"{v:.{digits}g}"
        return str(v)

    cells = [[k for k in keys]] + [[fmt(r.get(k)) for k in keys] for r in rows]
    widths = [max(len(c[j]) for c in cells) for j in range(len(keys))]
    return "\n".join("  ".join(c[j].rjust(widths[j]) for j in range(len(keys))) for c in cells)


def find(rows, layer: int, site: str) -> dict:
    """The row of ``layer`` and ``site``."""
    for r in rows:
        if r["layer"] == layer and r["site"] == site:
            return r
    raise KeyError(f"No statistics for layer {layer}, site {site!r}; pass layers=[{layer}] to activation_stats.")


def capture(model, input_ids, layer: int, site: str = "down_in"):
    """One activation matrix ``[tokens, channels]`` (float32, CPU) at ``site`` of ``layer``."""
    got = []

    def keep(x):
        got.append(x.detach().float().cpu())

    attn, mlp = model.model.layers[layer].self_attn, model.model.layers[layer].mlp
    from vramlab import attention

    previous = getattr(model.config, "_attn_implementation", "sdpa")
    handle, observed = None, False
    if site in ("k", "v"):
        attn.vramlab_kv_observer = lambda k, v: keep(_kv_tokens(k if site == "k" else v))
        observed = True
        attention.enable(model)
    else:
        module = {"qkv_in": attn.q_proj, "o_in": attn.o_proj, "mlp_in": mlp.gate_proj,
                  "down_in": down_linear(mlp)}[site]
        handle = module.register_forward_pre_hook(lambda _m, args: keep(_tokens(args[0])))
    try:
        ids = input_ids if input_ids.dim() == 2 else input_ids.unsqueeze(0)
        with torch.inference_mode():
            model(input_ids=ids.to(next(model.parameters()).device), use_cache=False)
    finally:
        if handle is not None:
            handle.remove()
        if observed:
            del attn.vramlab_kv_observer
            if previous != attention.NAME:
                attention.disable(model, previous)
    return torch.cat(got)


# --------------------------------------------------------------------------- plotly figures
def channel_figure(channel_absmax, title: str = "", after=None, labels=("original", "rotated")):
    """Per-channel max|x| (bars) of one site; ``after`` overlays the same site after rotation."""
    import plotly.graph_objects as go

    fig = go.Figure()
    c = torch.as_tensor(channel_absmax).float()
    fig.add_trace(go.Bar(x=list(range(c.numel())), y=[_round(v) for v in c.tolist()], name=labels[0],
                         marker_line_width=0))
    if after is not None:
        a = torch.as_tensor(after).float()
        fig.add_trace(go.Bar(x=list(range(a.numel())), y=[_round(v) for v in a.tolist()], name=labels[1],
                             marker_line_width=0,
                             opacity=0.8))
    fig.update_layout(title=title or "max |x| per channel", xaxis_title="channel", yaxis_title="max |x|",
                      barmode="overlay", bargap=0, height=320, margin=dict(l=50, r=20, t=40, b=40))
    return fig


def histogram_figure(before, after=None, title: str = "", bins: int = 121, labels=("original", "rotated")):
    """Histogram of the values of one activation before (and after) rotation, log-count axis.

    Values are normalised by their RMS so both fit one axis; the counts are computed here
    (``torch.histc`` on a shared range) so the stored figure holds ``bins`` numbers per trace,
    not the raw values.
    """
    import plotly.graph_objects as go

    data = []
    for x, name in ((before, labels[0]), (after, labels[1])):
        if x is None:
            continue
        v = torch.as_tensor(x).detach().double().flatten()
        data.append((v / v.pow(2).mean().sqrt(), name))
    lim = max(float(v.abs().max()) for v, _ in data)
    width = 2 * lim / bins
    centres = [_round(-lim + width * (i + 0.5)) for i in range(bins)]
    fig = go.Figure()
    for v, name in data:
        counts = torch.histc(v, bins=bins, min=-lim, max=lim)
        fig.add_trace(go.Bar(x=centres, y=[int(c) if c > 0 else None for c in counts.tolist()], name=name,
                             opacity=0.7, marker_line_width=0))
    fig.update_layout(title=title or "values / RMS", barmode="overlay", bargap=0, yaxis_type="log",
                      xaxis_title="x / RMS(x)", yaxis_title="count", height=320,
                      margin=dict(l=50, r=20, t=40, b=40))
    return fig


def _round(v, digits: int = 4):
    """Round to a few significant digits (keeps the stored figures small)."""
    if v is None or not math.isfinite(v) or v == 0:
        return v
    return round(v, digits - 1 - int(math.floor(math.log10(abs(v)))))


def kurtosis_figure(rows, title: str = "", value: str = "kurtosis", after=None):
    """One line per site: ``value`` (default kurtosis) per layer, log y; ``after`` adds dashed lines."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for data, dash, suffix in ((rows, "solid", ""), (after, "dash", " (rotated)")):
        if data is None:
            continue
        sites = [s for s in SITES if any(r["site"] == s for r in data)]
        for s in sites:
            pts = sorted((r["layer"], r[value]) for r in data if r["site"] == s)
            fig.add_trace(go.Scatter(x=[p[0] for p in pts], y=[_round(p[1]) for p in pts], mode="lines+markers",
                                     name=SITE_LABELS.get(s, s) + suffix, line=dict(dash=dash)))
    fig.update_layout(title=title or f"{value} per layer", xaxis_title="layer", yaxis_title=value,
                      yaxis_type="log", height=360, margin=dict(l=50, r=20, t=40, b=40))
    return fig
