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
  vector gives about 3.2-3.3 at n = 576 and about 3.5 at n = 1536, :func:`gaussian_max_over_rms`),
  median and max over tokens.
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

from vramlab.quarot.rotate import down_linear

SITES = ("qkv_in", "o_in", "mlp_in", "down_in", "k", "v")
SITE_LABELS = {
    "qkv_in": "q/k/v input", "o_in": "o_proj input", "mlp_in": "gate/up input",
    "down_in": "down_proj input", "k": "K after RoPE", "v": "V",
}


# Axis titles of the per-layer figure (unitless ratios say so).
VALUE_LABELS = {
    "kurtosis": "kurtosis (Gaussian = 3, no unit)",
    "token_kurtosis": "per-token kurtosis, median over tokens (Gaussian = 3)",
    "max_over_rms_median": "per-token max|x| / RMS(x), median over tokens (ratio)",
    "max_over_rms_max": "largest per-token max|x| / RMS(x) (ratio)",
    "absmax_over_rms": "site's max|x| / its RMS (ratio)",
    "weight_mu": "weight incoherence mu (1 = flat)",
    "rms": "RMS of the activations (activation units)",
    "absmax": "max |x| (activation units)",
}


# --------------------------------------------------------------------------- input checks
def _tensor(x, name: str, min_dim: int = 1):
    """``x`` as a tensor with at least ``min_dim`` dims and one element, else a one-sentence error."""
    if not isinstance(x, torch.Tensor):
        try:
            x = torch.as_tensor(x)
        except (TypeError, ValueError, RuntimeError):
            raise TypeError(f"{name} must be a tensor (or nested lists of numbers), got {type(x).__name__}.") from None
    if x.dim() < min_dim:
        raise ValueError(f"{name} must have at least {min_dim} dimension(s) [..., channels], got shape {tuple(x.shape)}.")
    if x.numel() == 0:
        raise ValueError(f"{name} is empty (shape {tuple(x.shape)}); pass at least one value.")
    if x.is_complex() or x.dtype == torch.bool:
        raise TypeError(f"{name} must hold real numbers, got dtype {x.dtype}.")
    return x


def _layers_of(model):
    layers = getattr(getattr(model, "model", None), "layers", None)
    if layers is None:
        raise TypeError(f"model must be a LLaMA-style causal LM with model.model.layers (e.g. load_smollm2()), "
                        f"got {type(model).__name__}.")
    return layers


def _layer_ids(model, layers, name: str = "layers") -> list[int]:
    n = len(_layers_of(model))
    if layers is None:
        return list(range(n))
    if isinstance(layers, int):
        layers = [layers]
    ids = []
    for i in layers:
        if isinstance(i, bool) or not isinstance(i, int) and not (hasattr(i, "__index__")):
            raise TypeError(f"{name} must be layer indices (ints), got {i!r}.")
        i = int(i)
        if not 0 <= i < n:
            said = "layers contains" if name == "layers" else f"{name} is"
            raise ValueError(f"{said} {i}, but the model has {n} layers: pass indices from 0 to {n - 1}.")
        ids.append(i)
    if not ids:
        raise ValueError("layers is empty: pass at least one layer index, or None for all layers.")
    return ids


def site_module(layer, site: str) -> torch.nn.Module:
    """The linear layer whose input is ``site`` (``qkv_in``, ``o_in``, ``mlp_in``, ``down_in``) in one decoder
    layer; q_proj stands for q/k/v and gate_proj for gate/up (they read the same input). K and V are not
    linear inputs: they need the attention hook."""
    attn, mlp = layer.self_attn, layer.mlp
    return {"qkv_in": attn.q_proj, "o_in": attn.o_proj, "mlp_in": mlp.gate_proj, "down_in": down_linear(mlp)}[site]


def _check_sites(sites) -> tuple:
    if isinstance(sites, str):
        sites = (sites,)
    sites = tuple(sites)
    bad = [s for s in sites if s not in SITES]
    if bad:
        raise ValueError(f"unknown site {bad[0]!r}: choose from {', '.join(SITES)}.")
    if not sites:
        raise ValueError(f"sites is empty: choose from {', '.join(SITES)}.")
    return sites


def _check_ids(input_ids, name: str = "input_ids"):
    if not isinstance(input_ids, torch.Tensor) or input_ids.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"{name} must be a LongTensor of token ids [n, length] (e.g. token_windows(...)), "
                        f"got {type(input_ids).__name__}" + (f" of {input_ids.dtype}" if isinstance(input_ids, torch.Tensor) else "") + ".")
    if input_ids.dim() not in (1, 2) or input_ids.numel() == 0:
        raise ValueError(f"{name} must be [n, length] (or one window [length]) with at least one token, "
                         f"got shape {tuple(input_ids.shape)}.")
    return input_ids if input_ids.dim() == 2 else input_ids.unsqueeze(0)


# --------------------------------------------------------------------------- single-tensor measures
def kurtosis(x) -> float:
    """Pearson kurtosis of all elements of ``x`` (3 for a Gaussian; large = heavy tails/outliers)."""
    x = _tensor(x, "x").detach().double().flatten()
    d = x - x.mean()
    var = (d * d).mean()
    return float((d**4).mean() / (var * var)) if var > 0 else float("nan")


def max_over_rms(x):
    """Per-token ``max|x| / RMS(x)`` over the last dim (a tensor with the leading shape)."""
    x = _tensor(x, "x").detach().double()
    rms = x.pow(2).mean(-1).sqrt().clamp_min(1e-30)
    return x.abs().amax(-1) / rms


def gaussian_max_over_rms(n: int, samples: int = 4096, seed: int = 0) -> float:
    """The mean of ``max|x| / RMS(x)`` over ``samples`` standard Gaussian vectors of ``n`` entries.

    What a per-token max/RMS looks like without outliers: about 3.29 at n = 576, 3.55 at n = 1536
    (it grows like ``sqrt(2 ln n)``), far below the ``sqrt(n)`` of a single spike.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int (the vector length), got {n!r}.")
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise ValueError(f"samples must be a positive int, got {samples!r}.")
    g = torch.Generator().manual_seed(seed)
    return float(max_over_rms(torch.randn(samples, n, generator=g, dtype=torch.float64)).mean())


def token_kurtosis(x):
    """Per-token kurtosis over the last dim (the shape of each token's vector; 3 for a Gaussian)."""
    x = _tensor(x, "x").detach().double()
    d = x - x.mean(-1, keepdim=True)
    var = (d * d).mean(-1)
    return (d**4).mean(-1) / (var * var).clamp_min(1e-300)


def incoherence(W) -> float:
    """QuIP's ``mu = max|W_ij| sqrt(m n) / ||W||_F`` of a weight matrix ``[m, n]``."""
    W = _tensor(W, "W", min_dim=2).detach().double()
    if W.dim() != 2:
        raise ValueError(f"W must be a weight matrix [out_features, in_features], got shape {tuple(W.shape)}.")
    if not bool(W.abs().max() > 0):
        raise ValueError("W is all zeros: the incoherence max|W| sqrt(mn) / ||W||_F is undefined.")
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
    if not (hasattr(layer, "self_attn") and hasattr(layer, "mlp")):
        raise TypeError(f"layer must be one decoder layer (model.model.layers[i]), got {type(layer).__name__}.")
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
    from vramlab.quarot import attention

    all_layers = _layers_of(model)
    layer_ids = _layer_ids(model, layers)
    sites = _check_sites(sites)
    windows = _check_ids(windows, "windows")
    running = {(i, s): _Running() for i in layer_ids for s in sites}
    handles, observed = [], []

    def pre_hook(key):
        def hook(_module, args):
            running[key].update(_tokens(args[0]))
        return hook

    for i in layer_ids:
        layer = all_layers[i]
        attn = layer.self_attn
        for site in ("qkv_in", "o_in", "mlp_in", "down_in"):
            if site in sites:
                handles.append(site_module(layer, site).register_forward_pre_hook(pre_hook((i, site))))
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
    """The row of ``layer`` and ``site`` (KeyError, in one sentence, when it was not measured)."""
    for r in rows:
        if r["layer"] == layer and r["site"] == site:
            return r
    raise KeyError(f"No statistics for layer {layer}, site {site!r}; pass layers=[{layer}] to activation_stats.")


def capture(model, input_ids, layer: int, site: str = "down_in"):
    """One activation matrix ``[tokens, channels]`` (float32, CPU) at ``site`` of ``layer``.

    ``input_ids``: LongTensor ``[length]`` or ``[1, length]``; ``site``: one of :data:`SITES`.
    """
    if isinstance(layer, bool) or not isinstance(layer, int):
        raise TypeError(f"layer must be one layer index (an int), got {layer!r}.")
    (layer,) = _layer_ids(model, [layer], name="layer")
    (site,) = _check_sites([site])
    input_ids = _check_ids(input_ids)
    got = []

    def keep(x):
        got.append(x.detach().float().cpu())

    attn = model.model.layers[layer].self_attn
    from vramlab.quarot import attention

    previous = getattr(model.config, "_attn_implementation", "sdpa")
    handle, observed = None, False
    if site in ("k", "v"):
        attn.vramlab_kv_observer = lambda k, v: keep(_kv_tokens(k if site == "k" else v))
        observed = True
        attention.enable(model)
    else:
        handle = site_module(model.model.layers[layer], site).register_forward_pre_hook(lambda _m, args: keep(_tokens(args[0])))
    try:
        with torch.inference_mode():
            model(input_ids=input_ids.to(next(model.parameters()).device), use_cache=False)
    finally:
        if handle is not None:
            handle.remove()
        if observed:
            del attn.vramlab_kv_observer
            if previous != attention.NAME:
                attention.disable(model, previous)
    return torch.cat(got)


# --------------------------------------------------------------------------- plotly figures
# One colour per site, shared by a site's original and rotated traces (plotly's default palette).
SITE_COLOURS = dict(zip(SITES, ("#636efa", "#ef553b", "#00cc96", "#ab63fa", "#ffa15a", "#19d3f3")))
ORIGINAL_COLOUR, ROTATED_COLOUR = "#636efa", "#ef553b"


def log_ticks(lo: float, hi: float) -> list[float]:
    """Tick values covering ``[lo, hi]`` (> 0) for a log axis, to be labelled in full (20, 30, not "2", "3").

    1-2-5 steps over many decades, 1-2-3-(4)-5 over one or two, finer steps over a narrow range.
    """
    if not (lo > 0 and hi > 0 and math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(f"a log axis needs positive finite limits, got lo={lo}, hi={hi}.")
    lo, hi = min(lo, hi), max(lo, hi)
    decades = math.log10(hi / lo)
    if decades > 4:
        mantissas = (1,)
    elif decades > 2:
        mantissas = (1, 2, 5)
    elif decades > 1.3:
        mantissas = (1, 2, 3, 5)
    elif decades > 0.7:
        mantissas = (1, 2, 3, 4, 5, 7)
    else:
        mantissas = tuple(m / 2 for m in range(2, 20))  # 1, 1.5, 2, ..., 9.5
    ticks = sorted({float(f"{m * 10.0**e:.12g}")
                    for e in range(math.floor(math.log10(lo)) - 1, math.floor(math.log10(hi)) + 1)
                    for m in mantissas if lo / 1.05 <= m * 10.0**e <= hi * 1.05})
    if len(ticks) < 2:
        ticks = sorted({float(f"{lo:.2g}"), float(f"{hi:.2g}")})
    return ticks


def _tick_text(v: float) -> str:
    return f"{v:,.0f}" if v >= 1 and float(v).is_integer() else f"{v:g}"


def _log_axis(values) -> dict:
    vals = [float(v) for v in values if v is not None and math.isfinite(v) and v > 0]
    if not vals:
        return dict(type="log")
    ticks = log_ticks(min(vals), max(vals))
    return dict(type="log", tickvals=ticks, ticktext=[_tick_text(t) for t in ticks])


def channel_figure(channel_absmax, title: str = "", after=None, labels=("original", "rotated")):
    """Per-channel max|x| (bars) of one site; ``after`` overlays the same site after rotation.

    ``channel_absmax``: 1-D ``[channels]`` (e.g. a row's ``"channel_absmax"``).
    """
    import plotly.graph_objects as go

    c = _tensor(channel_absmax, "channel_absmax").float().flatten()
    fig = go.Figure()
    fig.add_trace(go.Bar(x=list(range(c.numel())), y=[_round(v) for v in c.tolist()], name=labels[0],
                         marker=dict(color=ORIGINAL_COLOUR, line_width=0)))
    if after is not None:
        a = _tensor(after, "after").float().flatten()
        fig.add_trace(go.Bar(x=list(range(a.numel())), y=[_round(v) for v in a.tolist()], name=labels[1],
                             marker=dict(color=ROTATED_COLOUR, line_width=0), opacity=0.8))
    fig.update_layout(title=title or "max |x| per channel", xaxis_title="channel index",
                      yaxis_title="max |x| over tokens (activation value)",
                      barmode="overlay", bargap=0, height=340, margin=dict(l=60, r=20, t=50, b=50))
    return fig


def histogram_figure(before, after=None, title: str = "", bins: int = 121, labels=("original", "rotated")):
    """Histogram of the values of one activation before (and after) rotation, log-count axis.

    Values are normalised by their RMS so both fit one axis; the counts are computed here
    (``torch.histc`` on a shared range) so the stored figure holds ``bins`` numbers per trace,
    not the raw values.
    """
    import plotly.graph_objects as go

    if not isinstance(bins, int) or isinstance(bins, bool) or bins < 2:
        raise ValueError(f"bins must be an integer >= 2, got {bins!r}.")
    data = []
    for x, name, colour in ((before, labels[0], ORIGINAL_COLOUR), (after, labels[1], ROTATED_COLOUR)):
        if x is None:
            continue
        v = _tensor(x, "before" if name == labels[0] else "after").detach().double().flatten()
        rms = v.pow(2).mean().sqrt()
        if not bool(rms > 0):
            raise ValueError(f"the {name} values are all zero: there is no RMS to normalise by.")
        data.append((v / rms, name, colour))
    lim = max(float(v.abs().max()) for v, _, _ in data)
    width = 2 * lim / bins
    centres = [_round(-lim + width * (i + 0.5)) for i in range(bins)]
    counts_all = []
    fig = go.Figure()
    for v, name, colour in data:
        counts = torch.histc(v, bins=bins, min=-lim, max=lim)
        counts_all += [c for c in counts.tolist() if c > 0]
        fig.add_trace(go.Bar(x=centres, y=[int(c) if c > 0 else None for c in counts.tolist()], name=name,
                             opacity=0.7, marker=dict(color=colour, line_width=0)))
    fig.update_layout(title=title or "values / RMS", barmode="overlay", bargap=0, yaxis=_log_axis(counts_all),
                      xaxis_title="x / RMS(x) (unitless)", yaxis_title="count of values (log scale)", height=340,
                      margin=dict(l=60, r=20, t=50, b=50))
    return fig


def _round(v, digits: int = 4):
    """Round to a few significant digits (keeps the stored figures small)."""
    if v is None or not math.isfinite(v) or v == 0:
        return v
    return round(v, digits - 1 - int(math.floor(math.log10(abs(v)))))


def kurtosis_figure(rows, title: str = "", value: str = "kurtosis", after=None):
    """One line per site: ``value`` (default kurtosis) per layer, log y; ``after`` adds dashed lines.

    ``rows`` / ``after``: :func:`activation_stats` rows. A site's rotated (dashed) line has the colour
    of its original line; the y axis is labelled in full (20, 30, not 2, 3) with ``value``'s name.
    """
    import plotly.graph_objects as go

    if not rows:
        raise ValueError("rows is empty: pass the list activation_stats(...) returned.")
    if value not in rows[0] or value in ("layer", "site", "channel_absmax"):
        numeric = [k for k, v in rows[0].items() if isinstance(v, (int, float)) and k not in ("layer", "tokens", "channels")]
        raise ValueError(f"value={value!r} is not a measure of these rows: choose from {', '.join(numeric)}.")
    fig = go.Figure()
    shown = []
    for data, dash, suffix in ((rows, "solid", ""), (after, "dash", " (rotated)")):
        if data is None:
            continue
        sites = [s for s in SITES if any(r["site"] == s for r in data)]
        for s in sites:
            pts = sorted((r["layer"], r[value]) for r in data if r["site"] == s)
            shown += [p[1] for p in pts]
            fig.add_trace(go.Scatter(x=[p[0] for p in pts], y=[_round(p[1]) for p in pts], mode="lines+markers",
                                     name=SITE_LABELS.get(s, s) + suffix, legendgroup=s,
                                     line=dict(dash=dash, color=SITE_COLOURS.get(s)),
                                     marker=dict(color=SITE_COLOURS.get(s), symbol="circle-open" if dash == "dash" else "circle")))
    label = VALUE_LABELS.get(value, value.replace("_", " "))
    fig.update_layout(title=title or f"{label} per layer", xaxis_title="layer index", yaxis_title=label,
                      yaxis=_log_axis(shown), height=420, legend=dict(tracegroupgap=2),
                      margin=dict(l=60, r=20, t=50, b=50))
    return fig


__all__ = ["SITES", "SITE_LABELS", "VALUE_LABELS", "SITE_COLOURS", "kurtosis", "max_over_rms", "gaussian_max_over_rms",
           "token_kurtosis", "incoherence", "site_weights", "activation_stats", "stats_table", "find",
           "capture", "log_ticks", "channel_figure", "histogram_figure", "kurtosis_figure"]
