"""An op-by-op VRAM dry run: a real transformers forward on the meta device, every allocation recorded.

:func:`dry_run` builds the causal LM for a config on ``torch.device("meta")`` (no weights, any size),
runs its real forward (a prefill, then ``new_tokens`` greedy decode steps with transformers'
``DynamicCache``) and records, op by op, every allocation and free that PyTorch's CUDA caching
allocator would see. The result is a :class:`MemoryTrace`.

How allocations are seen. A ``TorchDispatchMode`` (:class:`_Recorder`) looks at each aten op's
outputs; a tensor whose *untyped storage* it has not seen yet is a new allocation of
``round_size(storage.nbytes())`` bytes (512-byte blocks, ``kMinBlockSize`` in
c10/cuda/CUDACachingAllocator.cpp; :func:`vramlab.vram.allocator.round_size`). A ``weakref`` on that
storage fires when the last tensor using it dies: that is the free. Views share a storage and cost
nothing; in-place ops allocate nothing. This is the technique of PyTorch's own
``torch.distributed._tools.mem_tracker.MemTracker`` (weak references on untyped storages), which
we do not use directly because it keeps per-module *peak snapshots* rather than an event stream,
applies the 512-byte rounding only to ``device.type == "cuda"`` (our tensors are on meta), and has no
notion of KV cache or logits. The module path of each op comes from PyTorch's
``torch.utils.module_tracker.ModuleTracker`` (the deepest module in its ``parents``).

Categories. ``weights`` (parameters and buffers), ``kv_cache`` (storages held by the cache after a
step: relabelled when the step ends), ``logits`` (the storage of the returned logits),
``activations`` (everything else: hidden states, inputs, masks, attention outputs) and
``workspace`` (the cuBLAS workspace, modelled: see :func:`cublas_workspace_bytes`). The CUDA
context (CUDA runtime, cuBLAS/cuDNN kernels, typically a few hundred MiB) lives *outside*
``torch.cuda.memory_allocated()`` and is not in the events; it is reported as a separate,
unmodelled term (:attr:`MemoryTrace.cuda_context_bytes`, ``None`` unless measured).

Kernel fidelity. On the meta device ``aten.scaled_dot_product_attention`` is one op that only
makes its output, whatever kernel a GPU would run. During the dry run :func:`_gpu_sdpa` replaces
``F.scaled_dot_product_attention`` with what the GPU's kernel allocates, by PyTorch release
(:mod:`vramlab.vram.kernels`: :func:`~vramlab.vram.kernels._choose_sdpa_kernel` from the ``gpu``, dtype,
head size, mask, GQA, torch and cuDNN releases): cuDNN and memory-efficient, their output; flash, its
output plus the float32 ``logsumexp`` (``batch x heads x L``); math (e.g. a T4 in bf16), the op-by-op
allocations of ``_scaled_dot_product_attention_math`` of that release
(:func:`~vramlab.vram.kernels.math_sdpa`: from torch 2.5 the float32 upcast of q/k/v, the float32 mask,
``_safe_softmax``'s temporaries and the thrown-away copy of the weights), which ``tests/test_math_sdpa.py``
holds against torch's own math path on CPU, allocation by allocation. ``attn_implementation="eager"`` keeps
the L x L scores (and their float32 softmax) by itself, as it does on a GPU. On real tensors (:func:`track`,
:func:`measure`) nothing is replaced.

Whole blocks. After recording, :func:`vramlab.vram.blocks.block_bytes` replays the allocations through the
caching allocator's best fit and its 1 MiB split rule: a large-pool block left unsplit counts whole, as in
``memory_allocated()`` (the 512-rounded request stays in the event as ``rounded``).

Generate mode. ``dry_run(..., mode="generate", transformers_version=...)`` runs greedy ``model.generate()`` as
that transformers release allocates (:mod:`vramlab.vram.generation`).

Reserved memory. :attr:`MemoryTrace.reserved` feeds the allocations above 1 MiB through
:func:`vramlab.vram.allocator.simulate` (its model covers the large pool only, so allocations of
1 MiB or less are left out of the reserved curve and listed in ``reserved_note``).
"""

from __future__ import annotations

import contextlib
import json
import math
import time
import weakref
from dataclasses import asdict, dataclass, field
from typing import Any, Iterator

from vramlab import ran
from vramlab.vram.allocator import K_SMALL_SIZE, round_size, simulate
from vramlab.vram.blocks import block_bytes
from vramlab.vram.generation import generate_loop, legacy_buffers, transformers_release
from vramlab.vram.kernels import (DEFAULT_GPU, GPUS, _choose_sdpa_kernel, cublas_workspace_bytes, fused_sdpa,
                                  gpu_capability, math_sdpa, torch_release)

MiB = 1 << 20
CATEGORIES = ("weights", "kv_cache", "activations", "logits", "workspace")

_DTYPES = ("bfloat16", "float16", "float32")

# kept here for the callers that import them from the dry run
_gpu_capability = gpu_capability


# ------------------------------------------------------------------------------------------------
# The trace
# ------------------------------------------------------------------------------------------------

@dataclass
class MemoryTrace:
    """What :func:`dry_run` (or :func:`measure`) returns. Bytes throughout.

    ``events``: one dict per allocation or free: ``i`` (event number), ``op`` (aten op), ``module``
    (dotted module path), ``phase`` (``"load"``, ``"prefill"``, ``"decode 3"``), ``category``,
    ``bytes`` (+ allocation, - free, rounded to 512), ``live`` (allocated bytes after the event),
    ``storage`` (a number per storage: an allocation and its free share it); :func:`measure` adds
    ``measured`` (``torch.cuda.memory_allocated()`` after the event). A free's ``module`` is where the
    last reference died.
    """

    model: str
    batch_size: int
    seq_len: int
    new_tokens: int
    dtype: str
    attn_implementation: str
    gpu: str
    sdpa_kernel: str | None
    events: list[dict] = field(default_factory=list)
    phase_ends: dict = field(default_factory=dict)       # phase -> live bytes when it ended
    cuda_context_bytes: int | None = None                 # outside torch's counters; None = not measured
    torch_version: str | None = None                      # the PyTorch release whose kernels were followed
    mode: str = "forward"                                 # "forward" or "generate" (model.generate())
    transformers_version: str | None = None               # the transformers release whose generate() ran
    source: str = "dry run: computed on the meta device, no GPU"
    seconds: float = 0.0

    @property
    def peak_bytes(self) -> int:
        """The largest ``live`` (what ``torch.cuda.max_memory_allocated`` would report)."""
        return max((e["live"] for e in self.events), default=0)

    @property
    def peak_index(self) -> int:
        best, idx = -1, 0
        for e in self.events:
            if e["live"] > best:
                best, idx = e["live"], e["i"]
        return idx

    @property
    def peak(self) -> dict:
        """Where the peak happens: ``module``, ``op``, ``phase``, ``category`` of the allocation, ``bytes``."""
        e = self.events[self.peak_index]
        return {"module": e["module"], "op": e["op"], "phase": e["phase"], "category": e["category"],
                "bytes": e["live"]}

    @property
    def final_bytes(self) -> int:
        return self.events[-1]["live"] if self.events else 0

    def breakdown(self, at: Any = "peak") -> dict[str, int]:
        """Live bytes per category after event ``at`` (``"peak"``, ``"end"``, a phase name such as
        ``"prefill"`` (its last event) or an event number)."""
        if at == "peak":
            stop = self.peak_index
        elif at == "end":
            stop = len(self.events) - 1
        elif isinstance(at, str):
            idx = [e["i"] for e in self.events if e["phase"] == at]
            if not idx:
                raise ValueError(f"`at` {at!r} is not 'peak', 'end', an event number or a phase "
                                 f"({', '.join(dict.fromkeys(e['phase'] for e in self.events))}).")
            stop = idx[-1]
        elif isinstance(at, int) and not isinstance(at, bool) and 0 <= at < len(self.events):
            stop = at
        else:
            raise ValueError(f"`at` {at!r} must be 'peak', 'end', a phase or an event number "
                             f"below {len(self.events)}.")
        out = dict.fromkeys(CATEGORIES, 0)
        for e in self.events[:stop + 1]:
            out[e["category"]] += e["bytes"]
        return out

    def categories_over_time(self) -> dict[str, list[int]]:
        """Live bytes per category after every event (lists as long as ``events``)."""
        cur = dict.fromkeys(CATEGORIES, 0)
        out = {c: [] for c in CATEGORIES}
        for e in self.events:
            cur[e["category"]] += e["bytes"]
            for c in CATEGORIES:
                out[c].append(cur[c])
        return out

    @property
    def reserved(self) -> dict:
        """Reserved bytes from :func:`vramlab.vram.allocator.simulate` (the caching-allocator model).

        Only allocations above 1 MiB go through it (the model has no small pool); returns
        ``peak_reserved``, ``final_reserved``, ``segments``, ``curve`` (reserved after each event,
        ``None`` for events the model skipped), ``small_bytes_left_out`` (peak live bytes in
        allocations of 1 MiB or less) and ``note``.
        """
        pattern, which, names = [], [], {}
        small = small_peak = 0
        for e in self.events:
            key = e["storage"]
            if abs(e["bytes"]) > K_SMALL_SIZE:
                if e["bytes"] > 0:
                    names[key] = f"s{key}"
                    pattern.append(("alloc", names[key], e["bytes"]))
                else:
                    pattern.append(("free", names.pop(key)))
                which.append(e["i"])
            else:
                small += e["bytes"]
                small_peak = max(small_peak, small)
        curve: list[int | None] = [None] * len(self.events)
        if not pattern:
            return {"peak_reserved": 0, "final_reserved": 0, "segments": 0, "curve": curve,
                    "small_bytes_left_out": small_peak, "note": "no allocation above 1 MiB"}
        sim = simulate(pattern)
        rows = [r for r in sim.trace if r["action"] in ("alloc", "free")]
        for i, r in zip(which, rows):
            curve[i] = r["reserved"]
        return {"peak_reserved": sim.peak_reserved, "final_reserved": sim.reserved, "segments": sim.segments,
                "curve": curve, "small_bytes_left_out": small_peak,
                "note": "vramlab.vram.allocator.simulate: large pool only (allocations > 1 MiB), one stream, "
                        "no empty_cache"}

    def summary(self) -> dict:
        """A small dict for printing: peak, where, breakdown at the peak and after the run (MiB)."""
        def mib(d):
            return {k: round(v / MiB, 1) for k, v in d.items()}
        return {"model": self.model, "batch_size": self.batch_size, "seq_len": self.seq_len,
                "new_tokens": self.new_tokens, "attn_implementation": self.attn_implementation,
                "gpu": self.gpu, "sdpa_kernel": self.sdpa_kernel, "events": len(self.events),
                "peak_mib": round(self.peak_bytes / MiB, 1), "peak_at": self.peak,
                "breakdown_at_peak_mib": mib(self.breakdown("peak")), "end_mib": mib(self.breakdown("end")),
                "cuda_context": "not in torch's counters; not modelled" if self.cuda_context_bytes is None
                else self.cuda_context_bytes, "source": self.source, "seconds": round(self.seconds, 3)}

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "MemoryTrace":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"`text` is not JSON ({exc.msg} at position {exc.pos}).") from None
        if not isinstance(data, dict) or "events" not in data:
            raise ValueError("`text` is not a MemoryTrace (no 'events' key).")
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})


# ------------------------------------------------------------------------------------------------
# Recording
# ------------------------------------------------------------------------------------------------

class _Recorder:
    """Allocation bookkeeping shared by the dispatch mode and the finalizers."""

    def __init__(self, module_tracker=None, reader=None):
        from torch.utils.weak import WeakIdKeyDictionary

        self.events: list[dict] = []
        self.live = 0
        self.seen = WeakIdKeyDictionary()       # storage -> storage id
        self.alloc_event: dict[int, int] = {}    # storage id -> index of its alloc event
        self.size: dict[int, int] = {}
        self.next_id = 0
        self.phase = "load"
        self.category = "weights"
        self.op = ""
        self.modules = module_tracker
        self.reader = reader                     # measure(): reads torch.cuda.memory_allocated
        self.refs: list = []
        self.stopped = False
        self.workspace_done = False

    def module(self) -> str:
        if self.modules is None:
            return ""
        parents = [p for p in self.modules.parents if p != "Global"]
        return max(parents, key=lambda p: p.count("."), default="")

    def _emit(self, sid: int, nbytes: int, category: str, op: str) -> None:
        self.live += nbytes
        ev = {"i": len(self.events), "op": op, "module": self.module(),
              "phase": self.phase, "category": category, "bytes": nbytes, "live": self.live, "storage": sid}
        if self.reader is not None:
            ev["measured"] = self.reader()
        self.events.append(ev)

    def track(self, t, category: str | None = None, op: str | None = None) -> None:
        import torch

        if not isinstance(t, torch.Tensor) or t.layout != torch.strided:
            return
        st = t.untyped_storage()
        if st in self.seen:
            return
        sid = self.next_id
        self.next_id += 1
        self.seen[st] = sid
        nbytes = round_size(st.nbytes()) if st.nbytes() else 0
        self.size[sid] = nbytes
        if nbytes:
            self.alloc_event[sid] = len(self.events)
            self._emit(sid, nbytes, category or self.category, op or self.op)
        self.refs.append(weakref.ref(st, lambda _r, sid=sid: self._free(sid)))

    def _free(self, sid: int) -> None:
        if self.stopped:
            return
        nbytes = self.size.pop(sid, 0)
        if nbytes:
            ev_i = self.alloc_event.pop(sid)
            self._emit(sid, -nbytes, self.events[ev_i]["category"], "free")

    def relabel(self, t, category: str) -> None:
        """Give the allocation behind ``t``'s storage (and its later free) ``category``."""
        sid = self.seen.get(t.untyped_storage())
        if sid is not None and sid in self.alloc_event:
            self.events[self.alloc_event[sid]]["category"] = category

    def add(self, nbytes: int, category: str, op: str) -> None:
        """A modelled allocation that no tensor stands for (the cuBLAS workspace): never freed."""
        sid = self.next_id
        self.next_id += 1
        self._emit(sid, round_size(nbytes), category, op)


def _make_mode(rec: _Recorder, workspace: int | None):
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    matmuls = {"mm", "bmm", "addmm", "matmul", "baddbmm", "linear", "_scaled_mm"}

    class _Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.overloadpacket.__name__
            if workspace is not None and not rec.workspace_done and name in matmuls:
                rec.workspace_done = True   # one handle and stream: cuBLAS takes its workspace once
                rec.add(workspace, "workspace", "cublas workspace (first GEMM)")
            out = func(*args, **(kwargs or {}))
            rec.op = f"aten.{name}"
            for t in tree_flatten(out)[0]:
                rec.track(t)
            return out

    return _Mode()


# ------------------------------------------------------------------------------------------------
# SDPA as the GPU would run it
# ------------------------------------------------------------------------------------------------

@contextlib.contextmanager
def _gpu_sdpa(gpu: str | None, dtype: str, chosen: list, torch_version=None, cudnn_version=None,
              reduced_precision: bool = False, force_kernel: str | None = None):
    """Replace ``F.scaled_dot_product_attention`` with the allocation pattern of the GPU's kernel
    (:mod:`vramlab.vram.kernels`: the kernel choice, the math path op by op, the fused kernels' outputs)."""
    import torch.nn.functional as F

    original = F.scaled_dot_product_attention
    release = torch_release(torch_version)

    def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
             enable_gqa=False, **kw):
        gqa = bool(enable_gqa) and key.shape[-3] != query.shape[-3]
        if query.device.type != "meta":
            kernel = _choose_sdpa_kernel(gpu, dtype, int(query.shape[-1]), attn_mask is not None, gqa,
                                        torch_version=release, cudnn_version=cudnn_version)
            chosen.append(kernel)
            return original(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                            scale=scale, enable_gqa=enable_gqa, **kw)
        if gqa and release < (2, 5):
            # no enable_gqa before torch 2.5: transformers' repeat_kv copies K/V to every query head first
            n = query.shape[-3] // key.shape[-3]
            key = key[:, :, None].expand(key.shape[0], key.shape[1], n, *key.shape[2:]).reshape(
                key.shape[0], query.shape[-3], *key.shape[2:])
            value = value[:, :, None].expand(value.shape[0], value.shape[1], n, *value.shape[2:]).reshape(
                value.shape[0], query.shape[-3], *value.shape[2:])
            gqa = enable_gqa = False
        kernel = force_kernel or _choose_sdpa_kernel(gpu, dtype, int(query.shape[-1]), attn_mask is not None, gqa,
                                                    torch_version=release, cudnn_version=cudnn_version)
        chosen.append(kernel)
        if kernel == "math":
            return math_sdpa(query, key, value, attn_mask, is_causal, scale, gqa, torch_version=release,
                             reduced_precision=reduced_precision)
        return fused_sdpa(kernel, query, key, value, attn_mask, torch_version=release)

    F.scaled_dot_product_attention = sdpa
    try:
        yield
    finally:
        F.scaled_dot_product_attention = original


# ------------------------------------------------------------------------------------------------
# Building the model
# ------------------------------------------------------------------------------------------------

def _check_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"`{name}` must be an integer >= {minimum} (got {value!r}).")
    return value


def _prepare(model: Any, batch_size: int, seq_len: int, new_tokens: int, dtype: str,
             attn_implementation: str, gpu: str | None, allow_longer: bool = False):
    """Check every argument and build (model, name, pretrained config) before anything runs."""
    import torch

    _check_int("batch_size", batch_size, 1)
    _check_int("seq_len", seq_len, 1)
    _check_int("new_tokens", new_tokens, 0)
    dtype = str(dtype).replace("torch.", "")
    if dtype not in _DTYPES:
        raise ValueError(f"`dtype` {dtype!r} is not one of {', '.join(_DTYPES)}.")
    if attn_implementation not in ("sdpa", "eager"):
        raise ValueError(f"`attn_implementation` {attn_implementation!r} is not 'sdpa' or 'eager'.")
    _gpu_capability(gpu)
    if isinstance(model, torch.nn.Module):
        pconfig = model.config
        name = getattr(pconfig, "name_or_path", "") or type(model).__name__
        built = model
    else:
        from vramlab.dispatch.planner import _pretrained_config
        from vramlab.configs import load_config

        try:
            cfg = load_config(model)
        except ValueError as exc:                 # load_config names its argument `config`
            msg = str(exc)
            raise ValueError("`model`" + msg[len("`config`"):] if msg.startswith("`config`") else msg) from None
        name = str(cfg.get("_name", "custom"))
        try:
            pconfig = _pretrained_config(cfg)
        except Exception as exc:  # transformers: unknown model_type and friends
            if isinstance(exc, ValueError) and str(exc).startswith("`"):
                raise
            raise ValueError(f"`model` {name!r}: transformers cannot build its config "
                             f"(model_type {cfg.get('model_type')!r}: {str(exc).splitlines()[0][:160]}).") from None
        built = None
    max_pos = getattr(pconfig, "max_position_embeddings", None)
    if max_pos and seq_len + new_tokens > max_pos and not allow_longer:
        raise ValueError(f"`seq_len` + `new_tokens` = {seq_len + new_tokens} is longer than the model's "
                         f"max_position_embeddings ({max_pos}); use a shorter context.")
    if built is None:
        from transformers import AutoModelForCausalLM

        pconfig._attn_implementation = attn_implementation
        try:
            try:
                with torch.device("meta"):
                    built = AutoModelForCausalLM.from_config(pconfig, dtype=getattr(torch, dtype),
                                                             attn_implementation=attn_implementation)
            except ValueError as exc:
                # transformers has no SDPA path for this architecture (Gemma-2, BLOOM, GPT-Neo, MPT in 5.24:
                # "... does not support an attention implementation through
                # torch.nn.functional.scaled_dot_product_attention yet"): from_pretrained's default then
                # picks eager, and so does the dry run (the trace says attn_implementation="eager").
                if attn_implementation != "sdpa" or "scaled_dot_product_attention" not in str(exc):
                    raise
                pconfig._attn_implementation = "eager"
                with torch.device("meta"):
                    built = AutoModelForCausalLM.from_config(pconfig, dtype=getattr(torch, dtype),
                                                             attn_implementation="eager")
        except Exception as exc:
            raise ValueError(f"`model` {name!r}: transformers cannot build a causal LM for model_type "
                             f"{getattr(pconfig, 'model_type', None)!r} ({str(exc).splitlines()[0][:160]}).") from None
        built.tie_weights()
    else:
        built.config._attn_implementation = attn_implementation
        try:
            built.set_attn_implementation(attn_implementation)
        except Exception:
            pass
    built.eval()
    return built, name, pconfig, dtype


def _run(model, batch_size: int, seq_len: int, new_tokens: int, rec: _Recorder, static_cache: bool,
         mode: str = "forward", tf_release: tuple[int, int] | None = None):
    """Prefill, then greedy decode steps, under the recorder. Records categories as it goes; returns
    the last output and the cache, which stay alive (as in a caller that goes on generating).
    ``mode="generate"``: :func:`vramlab.vram.generation.generate_loop` of ``tf_release`` instead."""
    import torch
    from transformers import DynamicCache, StaticCache

    device = next(model.parameters()).device
    config = model.config
    # the weights first: parameters and buffers, each storage once (tied weights share one)
    rec.phase, rec.category = "load", "weights"
    named = list(model.named_parameters(remove_duplicate=False)) + list(model.named_buffers(remove_duplicate=False))
    for pname, p in named:
        rec.op = f"load {pname}"
        rec.track(p, "weights", f"load {pname}")
    held = []          # buffers of an older release's modelling code (vramlab.vram.generation.legacy_buffers)
    if tf_release is not None:
        model_dtype = next(model.parameters()).dtype
        for i, (shape, kind) in enumerate(legacy_buffers(config, tf_release)):
            t = torch.empty(shape, dtype=torch.bool if kind == "bool" else model_dtype, device=device)
            rec.track(t, "weights", f"load buffer of transformers {tf_release[0]}.{tf_release[1]} ({i})")
            held.append(t)
    model._vramlab_held_buffers = held
    rec.category = "activations"
    import inspect

    # transformers 5.x renamed past_key_values to cache (deprecate_kwarg in modeling_llama.py)
    kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    if static_cache:
        cache = StaticCache(config=config, max_cache_len=seq_len + new_tokens)
    else:
        cache = DynamicCache(config=config)
    if mode == "generate" and device.type != "meta":
        # real tensors (track / measure): the real generate() of the installed transformers, greedy, no early stop
        with torch.inference_mode():
            rec.phase = "generate"
            ids = torch.ones((batch_size, seq_len), dtype=torch.long, device=device)
            model.generation_config.eos_token_id = None
            out = model.generate(ids, max_new_tokens=max(new_tokens, 1), do_sample=False, pad_token_id=0,
                                 return_dict_in_generate=True, **{kw: cache})
            del ids
            _label_step(rec, None, cache)
            rec.phase = "end"
        return out, cache
    if mode == "generate":
        def step(phase: str) -> None:
            rec.phase = phase

        return generate_loop(model, batch_size, seq_len, new_tokens, cache, kw, tf_release, step,
                             lambda out, c: _label_step(rec, out, c))
    with torch.inference_mode():
        rec.phase = "prefill"
        ids = torch.zeros((batch_size, seq_len), dtype=torch.long, device=device)
        out = model(input_ids=ids, use_cache=True, **{kw: cache})
        _label_step(rec, out, cache)
        del ids
        for step in range(new_tokens):
            rec.phase = f"decode {step + 1}"
            nxt = out.logits[:, -1:].argmax(-1)
            out = None                      # the previous step's logits die here, as in a generate loop
            out = model(input_ids=nxt, use_cache=True, **{kw: cache})
            del nxt
            _label_step(rec, out, cache)
        rec.phase = "end"
    return out, cache


def _label_step(rec: _Recorder, out, cache) -> None:
    if out is not None:
        rec.relabel(out.logits, "logits")
    import torch

    # keys, values and the layer's bookkeeping tensors (StaticLayer keeps a position counter per layer)
    for layer in getattr(cache, "layers", []):
        for t in vars(layer).values():
            if isinstance(t, torch.Tensor):
                rec.relabel(t, "kv_cache")


def _trace(model: Any, batch_size: int, seq_len: int, new_tokens: int, dtype: str, attn_implementation: str,
           gpu: str | None, static_cache: bool, reader=None, workspace: bool = True, torch_version=None,
           cudnn_version=None, reduced_precision: bool = False, mode: str = "forward",
           transformers_version=None, allow_longer: bool = False, sdpa_kernel: str | None = None) -> MemoryTrace:
    import gc

    from torch.utils.module_tracker import ModuleTracker

    t0 = time.perf_counter()
    built, name, pconfig, dtype = _prepare(model, batch_size, seq_len, new_tokens, dtype, attn_implementation, gpu,
                                           allow_longer)
    if attn_implementation == "sdpa" and getattr(built.config, "_attn_implementation", "sdpa") == "eager":
        attn_implementation = "eager"        # no SDPA path in transformers for this architecture
    meta = next(built.parameters()).device.type == "meta"
    chosen: list[str] = []
    tracker = ModuleTracker()
    rec = _Recorder(tracker, reader)
    release = torch_release(torch_version)
    if mode not in ("forward", "generate"):
        raise ValueError(f"`mode` {mode!r} is not 'forward' or 'generate'.")
    tf_release = transformers_release(transformers_version)
    ws = cublas_workspace_bytes(gpu, release) if (workspace and reader is None) else None
    recorder_mode = _make_mode(rec, ws)
    if sdpa_kernel not in (None, "math", "flash", "efficient", "cudnn"):
        raise ValueError(f"`sdpa_kernel` {sdpa_kernel!r} is not None, 'math', 'flash', 'efficient' or 'cudnn'.")
    sdpa_ctx = (_gpu_sdpa(gpu, dtype, chosen, release, cudnn_version, reduced_precision, sdpa_kernel)
                if (meta and attn_implementation == "sdpa") else contextlib.nullcontext())
    gc_was = gc.isenabled()
    gc.disable()                            # frees must happen when the last reference dies, not later
    try:
        with tracker, recorder_mode, sdpa_ctx:
            kept = _run(built, batch_size, seq_len, new_tokens, rec, static_cache, mode, tf_release)
        rec.stopped = True
        del kept
    except ValueError:
        raise
    except Exception as exc:
        raise ValueError(f"`model` {name!r}: its forward could not be traced on the meta device "
                         f"({type(exc).__name__}: {str(exc).splitlines()[0][:200]}).") from None
    finally:
        rec.stopped = True
        if gc_was:
            gc.enable()
    _count_whole_blocks(rec.events)
    kernels = sorted(set(chosen))
    # Every tracing path (dry_run, track, measure) notes its shape and the kernel that ran, forced or chosen: review #9
    # read the T4 peaks off track(), review #10 forced the math kernel, review #11 let float32 on an A100 choose it.
    kernel = str(sdpa_kernel) if sdpa_kernel else ("math" if "math" in kernels else "")
    ran.note(SHAPE_KIND, (int(batch_size), int(seq_len), _dtype_name(dtype), gpu_capability(gpu),
                          str(attn_implementation), kernel), lasting=True)
    return MemoryTrace(model=name, batch_size=batch_size, seq_len=seq_len, new_tokens=new_tokens, dtype=dtype,
                       attn_implementation=attn_implementation, gpu=gpu or DEFAULT_GPU,
                       sdpa_kernel=", ".join(kernels) if kernels else None, events=rec.events,
                       phase_ends=_phase_ends(rec.events), seconds=time.perf_counter() - t0,
                       torch_version=f"{release[0]}.{release[1]}", mode=mode,
                       transformers_version=f"{tf_release[0]}.{tf_release[1]}",
                       source="dry run: computed on the meta device, no GPU" if meta
                       else f"tracked on {next(built.parameters()).device.type} tensors")


def _count_whole_blocks(events: list[dict]) -> None:
    """Give each event the bytes ``memory_allocated()`` counts for it (:func:`vramlab.vram.blocks.block_bytes`:
    an unsplit large-pool block counts whole) and recompute ``live``; an event whose block is larger than its
    512-rounded request keeps that request as ``rounded``."""
    live = 0
    for e, n in zip(events, block_bytes(events)):
        if n != e["bytes"]:
            e["rounded"] = e["bytes"]
            e["bytes"] = n
        live += n
        e["live"] = live


def _phase_ends(events: list[dict]) -> dict:
    out: dict = {}
    for e in events:
        out[e["phase"]] = e["live"]
    return out


# Dry runs in this process, in vramlab.ran's one registry (kind "dry_run shape"), one key per run:
# (batch_size, seq_len, dtype name, compute capability, attn_implementation). A capstone's check reads it to tell a
# prediction from one read off dry runs that give its answer (vramlab.checks.lab08.check_t4_plan: that very shape, or
# runs a quadratic fits, on a T4 or with eager attention). A check's own reference runs inside
# vramlab.ran._unrecorded() and are not remembered; vramlab.ran._forget() is the reset.
SHAPE_KIND = "dry_run shape"


def _dtype_name(dtype: Any) -> str:
    """``torch.bfloat16`` and ``"bfloat16"`` alike: ``"bfloat16"``."""
    return str(dtype).replace("torch.", "")


def shape_was_run(batch_size: int | None, seq_len: int, dtype: str) -> bool:
    """Whether :func:`dry_run` ran a forward of ``batch_size`` x ``seq_len`` tokens in ``dtype`` (a name or a
    ``torch.dtype``) in this process; ``batch_size=None``: at any batch (a peak at one batch, or two, gives every
    other batch by a straight line)."""
    name = _dtype_name(dtype)
    return any(s == int(seq_len) and d == name and (batch_size is None or b == int(batch_size))
               for b, s, d, *_gpu_and_attention in ran.ran(SHAPE_KIND))


def dry_run(model: Any, batch_size: int, seq_len: int, *, new_tokens: int = 0, dtype: str = "bfloat16",
            attn_implementation: str = "sdpa", gpu: str | None = None, static_cache: bool = False,
            torch_version: str | None = None, cudnn_version: str | None = None,
            allow_fp16_bf16_reduction_math_sdp: bool = False, mode: str = "forward",
            transformers_version: str | None = None, allow_longer: bool = False,
            sdpa_kernel: str | None = None) -> MemoryTrace:
    """Every allocation a GPU forward would make, computed on the meta device (seconds, no GPU).

    ``model``: a bundled config name (:func:`vramlab.configs.available_configs`), a config dict or
    JSON path, a ``transformers.PretrainedConfig``, or a model (on meta: a dry run; on CPU: the same
    tracking of real tensors). ``batch_size`` x ``seq_len`` prompt tokens, then ``new_tokens``
    greedy decode steps with a ``DynamicCache`` (``static_cache=True``: a ``StaticCache`` sized
    ``seq_len + new_tokens``). ``gpu``: a name from :data:`GPUS` or ``"sm_XY"`` (default
    ``"A100"``); it picks the SDPA kernel and the cuBLAS workspace size. ``torch_version``: the PyTorch
    release whose kernels to follow (default: the installed one; :mod:`vramlab.vram.kernels` lists each rule
    and the releases that have it); ``cudnn_version``: the cuDNN that build loads (None: newer than 9.15);
    ``allow_fp16_bf16_reduction_math_sdp``: PyTorch's switch of that name (the math path then skips its
    float32 upcast). ``mode="generate"``: what ``model.generate(max_new_tokens=new_tokens)`` (greedy)
    allocates in ``transformers_version`` (default: the installed one): ``logits_to_keep=1`` at prefill, the
    float32 next-token logits, and for older releases the float32 logits of every token and the second copy
    of the cache (:mod:`vramlab.vram.generation`); ``new_tokens`` forwards in all (the prefill gives the first
    token). ``allow_longer``: run past ``max_position_embeddings`` (a rotary model runs on, as a benchmark
    of 2,048 + 100 tokens on pythia did); by default that is refused. Bad input raises ``ValueError`` with
    one sentence naming the field; nothing is written but the shape, to ``vramlab.ran``'s record. ``sdpa_kernel``: force that kernel (as
    ``torch.nn.attention.sdpa_kernel(SDPBackend.MATH)`` does on a GPU) instead of choosing it.
    """
    return _trace(model, batch_size, seq_len, new_tokens, dtype, attn_implementation, gpu, static_cache,
                  workspace=True, torch_version=torch_version, cudnn_version=cudnn_version,
                  reduced_precision=bool(allow_fp16_bf16_reduction_math_sdp), mode=mode,
                  transformers_version=transformers_version, allow_longer=bool(allow_longer), sdpa_kernel=sdpa_kernel)


def track(model, batch_size: int, seq_len: int, *, new_tokens: int = 0, attn_implementation: str = "eager",
          gpu: str | None = None, mode: str = "forward") -> MemoryTrace:
    """The same recording on a model with real weights (CPU or GPU): for comparing with :func:`dry_run`.

    No cuBLAS workspace is modelled (a real GPU run allocates its own, and it is in what
    :func:`measure` reads)."""
    import torch

    if not isinstance(model, torch.nn.Module):
        raise ValueError("`model` must be a torch.nn.Module with real weights for track().")
    dtype = str(next(model.parameters()).dtype).replace("torch.", "")
    return _trace(model, batch_size, seq_len, new_tokens, dtype, attn_implementation, gpu, False,
                  workspace=False, mode=mode)


def random_model(config: Any, *, dtype: str = "bfloat16", attn_implementation: str = "eager",
                 device: str = "cpu", num_hidden_layers: int | None = None):
    """The real transformers causal LM of ``config`` with random weights on ``device`` (memory does not
    depend on the values): uniform(-0.02, 0.02) parameters, RoPE frequencies recomputed (``to_empty``
    leaves buffers uninitialised), tied weights re-tied. ``num_hidden_layers`` shortens the model for
    quick tests. The comparisons with :func:`track` / :func:`measure` use it."""
    import torch
    from transformers import AutoModelForCausalLM

    from vramlab.configs import load_config
    from vramlab.dispatch.planner import _pretrained_config

    cfg = dict(load_config(config))
    if num_hidden_layers is not None:
        cfg["num_hidden_layers"] = _check_int("num_hidden_layers", num_hidden_layers, 1)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(_pretrained_config(cfg), dtype=getattr(torch, dtype),
                                                 attn_implementation=attn_implementation)
    model = model.to_empty(device=device)
    with torch.no_grad():
        for p in model.parameters():
            p.uniform_(-0.02, 0.02)
        for mod in model.modules():   # the rotary embedding's own init (transformers' *RotaryEmbedding)
            if hasattr(mod, "inv_freq") and hasattr(mod, "rope_type"):
                from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

                init = (type(mod).compute_default_rope_parameters if mod.rope_type == "default"
                        else ROPE_INIT_FUNCTIONS[mod.rope_type])
                inv_freq, _ = init(mod.config)
                for name in ("inv_freq", "original_inv_freq"):
                    if hasattr(mod, name):
                        getattr(mod, name).copy_(inv_freq)
    model.tie_weights()
    return model


def measure(model: Any, batch_size: int, seq_len: int, *, new_tokens: int = 0, dtype: str = "bfloat16",
            attn_implementation: str = "sdpa", mode: str = "forward") -> MemoryTrace:
    """Run the same forward on the GPU: a :class:`MemoryTrace` whose events also carry ``measured``
    (``torch.cuda.memory_allocated()`` after each event) and whose ``cuda_context_bytes`` is what
    NVML sees beyond PyTorch's reserved memory (when NVML is available: opened by the device's UUID, as
    :mod:`vramlab.vram.monitor` does). Needs CUDA.

    ``model``: a config (random weights are made on the GPU: memory does not depend on values) or a
    CUDA model. The peak to compare with :func:`dry_run` is ``torch.cuda.max_memory_allocated()``,
    stored in ``phase_ends["max_memory_allocated"]``. ``mode="generate"``: the real ``model.generate(
    max_new_tokens=new_tokens)`` of the installed transformers (greedy, no early stop), to hold against
    ``dry_run(..., mode="generate")``.
    """
    import torch

    from vramlab import device

    if not device.has_cuda():
        raise ValueError("`measure` needs a CUDA GPU (none found); use dry_run() on this machine.")
    if not isinstance(model, torch.nn.Module):
        from transformers import AutoModelForCausalLM

        _, _, pconfig, dtype = _prepare(model, batch_size, seq_len, new_tokens, dtype, attn_implementation, None)
        with torch.device("cuda"):
            model = AutoModelForCausalLM.from_config(pconfig, dtype=getattr(torch, dtype),
                                                     attn_implementation=attn_implementation)
        model.tie_weights()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    major, minor = torch.cuda.get_device_capability()
    trace = _trace(model, batch_size, seq_len, new_tokens, dtype, attn_implementation, f"sm_{major}{minor}",
                   False, reader=lambda: torch.cuda.memory_allocated(), workspace=False, mode=mode)
    torch.cuda.synchronize()
    trace.phase_ends["max_memory_allocated"] = torch.cuda.max_memory_allocated()
    trace.phase_ends["allocated_before"] = base
    trace.source = f"measured on {torch.cuda.get_device_name()}"
    # NVML matched to this CUDA device by UUID, as the monitor does (vramlab.vram.monitor.device_memory):
    # NVML numbers GPUs in PCI bus order, CUDA fastest first, so an index can name another GPU
    from vramlab.vram.monitor import device_memory

    proc, _, _, source = device_memory(torch.cuda.current_device())
    if proc is not None and source == "NVML":
        trace.cuda_context_bytes = int(proc) - torch.cuda.memory_reserved()
    return trace


def compare(dry: MemoryTrace, real: MemoryTrace) -> dict:
    """Peaks side by side: the dry run's ``peak_bytes`` against the real run's
    ``max_memory_allocated`` (or its own ``peak_bytes``), difference in bytes and percent."""
    real_peak = real.phase_ends.get("max_memory_allocated", real.peak_bytes)
    diff = dry.peak_bytes - real_peak
    return {"dry_peak": dry.peak_bytes, "real_peak": real_peak, "diff_bytes": diff,
            "diff_pct": 100.0 * diff / real_peak if real_peak else math.nan,
            "dry_peak_at": dry.peak, "real_source": real.source}


# ------------------------------------------------------------------------------------------------
# Figure
# ------------------------------------------------------------------------------------------------

COLOURS = {"weights": "#6baed6", "kv_cache": "#fd8d3c", "activations": "#74c476", "logits": "#9e9ac8",
           "workspace": "#969696"}


def trace_figure(trace: MemoryTrace, upto: int | None = None, title: str | None = None):
    """A plotly figure: allocated bytes stacked by category per event (MiB), reserved (the allocator
    model) as a line, module/op on hover; events after ``upto`` are hidden."""
    import plotly.graph_objects as go

    n = len(trace.events) if upto is None else max(1, min(upto + 1, len(trace.events)))
    ev = trace.events[:n]
    x = [e["i"] for e in ev]
    hover = [f"{e['phase']} · {e['module'] or '(top)'} · {e['op']} · {e['bytes'] / MiB:+.2f} MiB" for e in ev]
    fig = go.Figure()
    per_cat = trace.categories_over_time()
    for c in CATEGORIES:
        ys = per_cat[c][:n]
        if not any(per_cat[c]):
            continue
        fig.add_scatter(x=x, y=[v / MiB for v in ys], name=c, stackgroup="alloc", line_shape="hv",
                        line_color=COLOURS[c], text=hover,
                        hovertemplate="%{text}<br>" + c + ": %{y:.1f} MiB<extra></extra>")
    res = trace.reserved
    curve = res["curve"][:n]
    fig.add_scatter(x=[x[i] for i, v in enumerate(curve) if v is not None],
                    y=[v / MiB for v in curve if v is not None], name="reserved (allocator model, > 1 MiB)",
                    line=dict(color="#000000", dash="dot"), line_shape="hv")
    # The peak often comes in the last few events (the logits): a short spike at the right edge that a
    # stacked area hardly shows, so it is marked and named.
    peak_i = max(range(len(trace.events)), key=lambda i: trace.events[i]["live"])
    if peak_i < n:
        pe = trace.events[peak_i]
        fig.add_annotation(x=pe["i"], y=pe["live"] / MiB, ax=-110, ay=-10, arrowhead=2, showarrow=True,
                           text=f"peak {pe['live'] / MiB:,.1f} MiB ({pe['category']}, {pe['module'] or 'top level'})",
                           bgcolor="rgba(255,255,255,0.8)")
    span = max(1, len(trace.events) - 1)
    new = f", {trace.new_tokens} new tokens" if trace.new_tokens else ""
    fig.update_layout(title=title or f"{trace.model} {trace.batch_size}x{trace.seq_len}{new}, {trace.attn_implementation} "
                      f"kernels as on {trace.gpu} - {trace.source}",
                      xaxis_title="allocator event (number)", yaxis_title="memory (MiB)", height=380, width=820,
                      xaxis_range=[-0.02 * span, 1.04 * span],
                      margin=dict(l=60, r=20, t=60, b=50), legend=dict(orientation="h", y=-0.25))
    return fig


__all__ = ["dry_run", "shape_was_run", "track", "measure", "compare", "MemoryTrace", "cublas_workspace_bytes",
           "trace_figure", "random_model", "GPUS", "CATEGORIES"]
