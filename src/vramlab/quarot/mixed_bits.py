"""Per-layer bit widths under a byte budget (lab 02's capstone), scored live on one window.

A *plan* says, for the Hadamard-rotated SmolLM2, which decoder layers run at 8 bits (weights *and* the
inputs of their linears: W8A8) while the others run at 4 (W4A4), and whether the KV cache is stored in
4 or 8 bits. Weights are round-to-nearest per output channel with one absmax scale per row (no clip search:
:func:`vramlab.quarot.quant.quantize_weights` with ``mse=False``), activations per token with clip 0.9, the
cache asymmetric in groups of ``head_dim`` with clip 0.95, as :func:`vramlab.quarot.quant.quantize_model`
does for a whole model with ``w_clip=False``; this module only lets the bits differ from layer to layer.

Bytes are counted from the real shapes: every decoder linear stores ``bits / 8`` bytes per weight plus one
float16 scale per output row; the KV cache stores, per token and layer, K and V for each KV head as
``head_dim * bits / 8`` bytes plus a float16 scale and a float16 zero point per group of ``head_dim``.
The embeddings, ``lm_head`` and the norms are the same in every plan and are left out of the budget.

Scoring runs the quantized model in float64 on one window (``vramlab.numerics``): the same plan gives the
same perplexity to about 1e-6 on every x86 kernel path and thread count, so a learner's number can be
compared with the cached reference search (``results/mixed_bits.json`` <- ``benchmarks/mixed_bits.py``).
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path

__all__ = ["BUDGET_BYTES", "CONTEXT_TOKENS", "LAYER_BITS", "KV_BITS", "SCORER_BUILT_KIND", "layers_within_budget", "SCORE_TOKENS", "MixedBits", "Plan",
           "code_fingerprint", "format_reference", "kv_bytes", "layer_weight_bytes", "normalize_plan", "plan_bytes"]

LAYER_BITS = (4, 8)            # the widths a plan may give a decoder layer (weights and linear inputs)
KV_BITS = (4, 8)               # the widths a plan may give the KV cache
CONTEXT_TOKENS = 1024          # the cache the budget pays for: 1,024 tokens (one sequence's context)
SCORE_TOKENS = 256             # the scoring window: the first 256 tokens of the first evaluation window
BUDGET_BYTES = 66 * 2**20      # the capstone's budget: 66 MiB of decoder weights + KV cache
SCALE_BYTES = 2                # one float16 scale per weight row, and per KV group a float16 scale and zero
_RESULTS = Path(__file__).resolve().parent.parent / "results" / "mixed_bits.json"
#: vramlab.ran kind (lasting, per notebook): when a :class:`MixedBits` was first built here. Lab 02's prediction of the
#: layers that gain most is stored before it, and a list stored after it is a reading: every per-layer measurement
#: runs through a scorer (unseen reviews #21-#24 scored layers one by one, built one, or swapped a layer between two
#: uniform builds, then stored the measured top five as their "prediction").
SCORER_BUILT_KIND = "mixed-bits scorer built (lab 02)"


class Plan(tuple):
    """A normalised plan: ``(eight_bit_layers, kv_bits)``, a sorted tuple of layer indices and 4 or 8."""

    __slots__ = ()

    def __new__(cls, eight_bit_layers: tuple[int, ...], kv_bits: int):
        return super().__new__(cls, (tuple(eight_bit_layers), int(kv_bits)))

    @property
    def eight_bit_layers(self) -> tuple[int, ...]:
        return self[0]

    @property
    def kv_bits(self) -> int:
        return self[1]


def _config_of(config):
    """A transformers config (or anything with its fields) -> the dict :func:`_shapes` needs."""
    if isinstance(config, dict):
        return config
    keys = ("num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads")
    if all(hasattr(config, k) for k in keys):
        heads = config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        return {"layers": config.num_hidden_layers, "hidden": config.hidden_size,
                "intermediate": config.intermediate_size, "heads": heads,
                "kv_heads": config.num_key_value_heads, "head_dim": head_dim}
    raise TypeError(f"config must be a model's config (model.config), not {type(config).__name__}.")


def _smollm2() -> dict:
    return {"layers": 30, "hidden": 576, "intermediate": 1536, "heads": 9, "kv_heads": 3, "head_dim": 64}


def _linear_shapes(s: dict) -> list[tuple[int, int]]:
    """``(out, in)`` of the seven linears of one decoder layer: q, k, v, o, gate, up, down."""
    h, i, kv = s["hidden"], s["intermediate"], s["kv_heads"] * s["head_dim"]
    return [(s["heads"] * s["head_dim"], h), (kv, h), (kv, h), (h, s["heads"] * s["head_dim"]), (i, h), (i, h),
            (h, i)]


def _bits(value, name: str, allowed) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value != int(value) or int(value) not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(map(str, allowed))} (got {value!r}); "
                         f"set it to {' or '.join(map(str, allowed))}.")
    return int(value)


def layer_weight_bytes(bits: int, config=None) -> int:
    """Bytes of one decoder layer's seven linear weights at ``bits`` bits, one float16 scale per row.

    SmolLM2-135M (``config=None``): 3,538,944 weights and 5,184 rows, so 1,779,840 bytes at 4 bits and
    3,549,312 at 8.
    """
    bits = _bits(bits, "bits", (2, 3, 4, 8, 16))
    s = _smollm2() if config is None else _config_of(config)
    shapes = _linear_shapes(s)
    return sum(o * i for o, i in shapes) * bits // 8 + sum(o for o, _ in shapes) * SCALE_BYTES


def kv_bytes(bits: int, tokens: int = CONTEXT_TOKENS, config=None) -> int:
    """Bytes of the KV cache for ``tokens`` tokens at ``bits`` bits, every layer, K and V.

    Per token, layer and KV head: ``head_dim * bits / 8`` bytes plus a float16 scale and a float16 zero point
    for its group of ``head_dim`` values (16 bits: plain float16, no group bookkeeping). SmolLM2: 6,480 bytes
    per token at 4 bits, 12,240 at 8, 23,040 at 16.
    """
    bits = _bits(bits, "kv_bits", (4, 8, 16))
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
        raise ValueError(f"tokens must be a whole number of tokens >= 0 (got {tokens!r}).")
    s = _smollm2() if config is None else _config_of(config)
    per_head = s["head_dim"] * bits // 8 + (0 if bits == 16 else 2 * SCALE_BYTES)
    return 2 * s["layers"] * s["kv_heads"] * per_head * tokens


def normalize_plan(plan, n_layers: int = 30) -> Plan:
    """``{"eight_bit_layers": [...], "kv_bits": 4 | 8}`` -> :class:`Plan`, or ValueError in one sentence.

    ``eight_bit_layers``: distinct layer indices in ``0 .. n_layers - 1`` (any iterable of ints); every other
    decoder layer runs at 4 bits. ``kv_bits``: 4 or 8.
    """
    if not isinstance(plan, Mapping):
        raise ValueError(f'the plan must be a dict {{"eight_bit_layers": [layer indices], "kv_bits": 4 or 8}}, '
                         f"not {type(plan).__name__}; store it in that form.")
    unknown = sorted(map(str, set(plan) - {"eight_bit_layers", "kv_bits"}))
    if unknown:
        raise ValueError(f"the plan has unknown key(s) {', '.join(unknown)}; use only eight_bit_layers and kv_bits.")
    for key in ("eight_bit_layers", "kv_bits"):
        if key not in plan:
            raise ValueError(f"the plan has no {key}; add it (eight_bit_layers: a list of layer indices, "
                             f"kv_bits: 4 or 8).")
    layers = plan["eight_bit_layers"]
    if isinstance(layers, (str, bytes)) or not isinstance(layers, Iterable):
        raise ValueError(f"eight_bit_layers must be a list of layer indices such as [0, 5] "
                         f"(got {type(layers).__name__}); store a list.")
    layers = list(layers)
    bad = [x for x in layers if isinstance(x, bool) or not isinstance(x, int) or not 0 <= x < n_layers]
    if bad:
        raise ValueError(f"eight_bit_layers holds {bad[0]!r}, not a layer index; use whole numbers from 0 to "
                         f"{n_layers - 1}.")
    if len(set(layers)) != len(layers):
        raise ValueError("eight_bit_layers names a layer twice; list each layer once.")
    return Plan(tuple(sorted(layers)), _bits(plan["kv_bits"], "kv_bits", KV_BITS))


def plan_bytes(plan, tokens: int = CONTEXT_TOKENS, config=None) -> dict[str, int]:
    """``{"weights", "kv", "total"}`` bytes of a plan: decoder-linear weights (scales included) + KV cache.

    ``tokens``: the context the cache holds (default :data:`CONTEXT_TOKENS`).
    """
    s = _smollm2() if config is None else _config_of(config)
    p = plan if isinstance(plan, Plan) else normalize_plan(plan, s["layers"])
    n8 = len(p.eight_bit_layers)
    weights = n8 * layer_weight_bytes(8, s) + (s["layers"] - n8) * layer_weight_bytes(4, s)
    kv = kv_bytes(p.kv_bits, tokens, s)
    return {"weights": weights, "kv": kv, "total": weights + kv}


class MixedBits:
    """Scores per-layer bit plans of a rotated model on one window, in float64.

    ``rotated``: a Hadamard-rotated SmolLM2 (``rotate_model(model, "hadamard", seed=0)``, float32 or float64);
    ``window``: LongTensor ``[1, tokens]`` (default: the first :data:`SCORE_TOKENS` tokens of the first
    evaluation window). The 4- and 8-bit RTN weights of every decoder linear are computed once here
    (about 20 s on 2 cores); :meth:`score` then costs one float64 forward (about 3 s). Building one is noted
    (:data:`SCORER_BUILT_KIND`): lab 02's prediction of the layers that gain most is stored before it.
    """

    def __init__(self, rotated, window, progress: bool = False):
        import torch

        from vramlab import numerics
        from vramlab.eval import _check_windows
        from vramlab.quarot import quant

        if getattr(rotated, "vramlab_rotation", None) is None:
            raise ValueError("rotated must be a rotated model: pass rotate_model(model, 'hadamard', seed=0).")
        _check_windows(window)
        self.window = window
        self.model = numerics.reproducible(rotated)       # float64 copy; the caller's model is untouched
        self.n_layers = len(quant._layers(self.model))
        # kept in float64: a float32 copy rounds the float64 grid's values, and at 4 bits such last-bit changes flip
        # codes downstream (W8A8KV4 moved by 0.7%; issue 26). About 0.85 GB per width for SmolLM2.
        self.weights = {b: quant.quantize_weights(self.model, b, mse=False) for b in LAYER_BITS}
        self._cache: dict = {}
        self.progress = progress
        from vramlab import ran

        ran.stamp(SCORER_BUILT_KIND)       # not inside ran._unrecorded() (a check's own scorer)

    def build(self, layer_bits: Mapping[int, int] | None = None, default: int = 4, kv_bits: int = 4):
        """A fake-quantized float64 copy: layer ``i`` at ``layer_bits.get(i, default)`` bits (4, 8 or 16)."""
        from vramlab.quarot import attention, quant

        bits = self._layer_bits(layer_bits, default)
        kv_bits = _bits(kv_bits, "kv_bits", (4, 8, 16))
        new = copy.deepcopy(self.model)
        for i, layer in enumerate(quant._layers(new)):
            b = bits[i]
            if b == 16:
                continue
            for name, lin in quant.decoder_linears(layer, f"model.layers.{i}").items():
                q = quant.QuantLinear(lin, self.weights[b][name], quant.ActQuantizer(b, 0.9), b, "rtn, per-channel")
                parent, _, child = name.rpartition(".")
                setattr(new.get_submodule(parent), child, q)
        if kv_bits != 16:
            head_dim = new.config.head_dim
            for layer in quant._layers(new):
                layer.self_attn.vramlab_k_quantizer = quant.KVQuantizer(kv_bits, head_dim, 0.95)
                layer.self_attn.vramlab_v_quantizer = quant.KVQuantizer(kv_bits, head_dim, 0.95)
            attention.enable(new)
        return new

    def _layer_bits(self, layer_bits, default) -> list[int]:
        """Every layer's width, from ``layer_bits`` and ``default`` (checked: one sentence naming the field)."""
        default = _bits(default, "default", (4, 8, 16))
        if layer_bits is None:
            layer_bits = {}
        if not isinstance(layer_bits, Mapping):
            raise ValueError(f"layer_bits must be a dict {{layer index: bits}} such as {{3: 8}} "
                             f"(got {type(layer_bits).__name__}).")
        out = [default] * self.n_layers
        for i, b in layer_bits.items():
            if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < self.n_layers:
                raise ValueError(f"layer_bits has the key {i!r}, not a layer index; use whole numbers from 0 to "
                                 f"{self.n_layers - 1}.")
            out[i] = _bits(b, f"layer_bits[{i}]", (4, 8, 16))
        return out

    def score(self, layer_bits: Mapping[int, int] | None = None, default: int = 4, kv_bits: int = 4) -> float:
        """Perplexity (float64) of the window with layer ``i`` at ``layer_bits.get(i, default)`` bits.

        E.g. ``score({3: 8})``: every layer W4A4 but layer 3 at W8A8, KV4; ``score({3: 4}, default=16)``:
        only layer 3 quantized. Cached per setting.
        """
        from vramlab.eval import perplexity

        key = (tuple(self._layer_bits(layer_bits, default)), _bits(kv_bits, "kv_bits", (4, 8, 16)))
        if key not in self._cache:
            self._cache[key] = perplexity(self.build(layer_bits, default, kv_bits), self.window)
        return self._cache[key]

    def score_plan(self, plan) -> float:
        """Perplexity of a plan (:func:`normalize_plan`): its 8-bit layers at W8A8, the rest W4A4."""
        p = plan if isinstance(plan, Plan) else normalize_plan(plan, self.n_layers)
        return self.score(dict.fromkeys(p.eight_bit_layers, 8), 4, p.kv_bits)


def layers_within_budget(kv_bits: int, budget: int = BUDGET_BYTES, tokens: int = CONTEXT_TOKENS, config=None) -> int:
    """How many decoder layers can run at 8 bits within ``budget`` bytes with a ``kv_bits`` cache."""
    s = _smollm2() if config is None else _config_of(config)
    k = 0
    while k < s["layers"] and plan_bytes({"eight_bit_layers": list(range(k + 1)), "kv_bits": kv_bits},
                                         tokens, s)["total"] <= budget:
        k += 1
    return k


def code_fingerprint() -> dict:
    """What made the cached reference (``results/mixed_bits.json``): :func:`vramlab.quarot.quant.code_fingerprint`
    (the quantizers, the rotation, the loss, the data) and this module's own SHA-256, as
    ``{"sha256": combined hex digest, "files": {relative path: hex digest}}``."""
    import hashlib
    from importlib import resources

    from vramlab.quarot import quant

    files = dict(quant.code_fingerprint()["files"])
    data = (resources.files("vramlab") / "quarot" / "mixed_bits.py").read_bytes().replace(b"\r\n", b"\n")
    files["quarot/mixed_bits.py"] = hashlib.sha256(data).hexdigest()
    combined = hashlib.sha256("".join(f"{k}:{v}\n" for k, v in files.items()).encode()).hexdigest()
    return {"sha256": combined, "files": files}


def _load_reference(path=None) -> dict:
    """The cached reference search (``benchmarks/mixed_bits.py``): plans, their perplexities, the ranking.

    Private: its ``best`` is lab 02's capstone answer (``checks.lab02.after_capstone`` prints it after a pass)."""
    with open(path or _RESULTS, encoding="utf-8") as f:
        return json.load(f)


def format_reference(reference: dict, margin: float | None = None) -> str:
    """The reference search as text (``reference`` from :func:`_load_reference`): the single-layer measurements,
    the greedy steps, the swaps, the KV8 branch, the best plan and, with ``margin`` (the pass mark is
    ``best * margin``), which rule-of-thumb and random plans pass."""
    base, single = reference["all4_kv4"], reference["single_w8"]
    top = ", ".join(f"{i}: {single[i]:.1f}" for i in reference["ranking"][:10])
    if "greedy" not in reference:      # a record of hand-picked designs only (before the search)
        lines = [f"every layer W4A4: {base:.2f} with KV4, {reference['all4_kv8']:.2f} with KV8 "
                 f"({reference['window_tokens']} tokens, float64)",
                 f"one layer at 8 bits, largest gain first (layer: perplexity): {top}, ..."]
        for name, p in sorted(reference["designs"].items(), key=lambda d: d[1]["ppl"]):
            lines.append(f"  {p['ppl']:8.2f}  {name:26s} layers {p['eight_bit_layers']}, KV{p['kv_bits']}")
        return "\n".join(lines)
    greedy, local, best = reference["greedy"], reference["local_search"], reference["best"]
    steps = ", ".join(f"+{s['added']} {s['ppl']:.1f}" for s in greedy["steps"])
    lines = [f"every layer W4A4: {base:.2f} with KV4, {reference['all4_kv8']:.2f} with KV8 "
             f"({reference['window_tokens']} tokens, float64; {reference['n_scores']} plans scored)",
             f"one layer at 8 bits, largest gain first (layer: perplexity): {top}, ...",
             f"greedy, one layer at a time by whole-plan score: {steps}",
             f"then one-for-one swaps: {len(local['swaps'])} improved it, {local['new_scores']} new scores, "
             f"{local['stopped']}"]
    if "kv8_branch" in reference:
        k = reference["kv8_branch"]
        lines.append(f"KV8 leaves room for {reference['budget_layers']['8']} layer: best {k['eight_bit_layers']}, "
                     f"{k['ppl']:.2f}")
    mark = None if margin is None else best["ppl"] * margin
    lines.append(f"the search's best: layers {best['eight_bit_layers']}, KV{best['kv_bits']}: {best['ppl']:.2f}"
                 + ("" if mark is None else f" (pass mark {mark:.2f})"))
    ranked = [f"{i} #{reference['ranking'].index(i) + 1}" for i in best["eight_bit_layers"]]
    worst = max(best["eight_bit_layers"], key=reference["ranking"].index)
    twist = (f": layer {worst} alone at 8 bits measures {single[worst]:.2f}, worse than every layer at 4 bits "
             f"({base:.2f}), yet the best plan keeps it" if single[worst] > base else "")
    lines.append(f"  its layers' ranks alone (of {len(reference['ranking'])}): {', '.join(ranked)}{twist}")
    lines.append("  one layer's gain is not a plan's: on a model this damaged the 8-bit layers interact, so only whole "
                 "plans, scored under the budget, decide")
    for name, p in sorted(reference["designs"].items(), key=lambda d: d[1]["ppl"]):
        verdict = "" if mark is None else ("  passes" if p["ppl"] <= mark else "  fails")
        lines.append(f"  {p['ppl']:8.2f}  {name:22s} layers {p['eight_bit_layers']}, KV{p['kv_bits']}{verdict}")
    rand = [r["ppl"] for r in reference.get("random", [])]
    if rand:
        passed = "" if mark is None else f"; {sum(r <= mark for r in rand)} of {len(rand)} pass"
        lines.append(f"  {len(rand)} random plans of {len(reference['random'][0]['eight_bit_layers'])} layers: "
                     f"{min(rand):.1f} to {max(rand):.1f}{passed}")
    return "\n".join(lines)
