"""A dry run replayed on a device map: what GPU 0 holds, op by op, when some modules live on the cpu.

:func:`vramlab.vram.dry_run` records every allocation of a forward as if the whole model sat on one GPU.
A device map with ``"cpu"`` (or ``"disk"``) modules changes three things, read in accelerate 1.15
(``big_modeling.py`` ``dispatch_model``, ``hooks.py`` ``AlignDevicesHook`` / ``attach_align_device_hook``),
which ``from_pretrained(..., device_map=...)`` calls through transformers 5.24 ``accelerate_dispatch``
(``integrations/accelerate.py``):

* an offloaded module's weights are **not** resident on GPU 0: they wait in cpu RAM (or on disk);
* every module still **runs on GPU 0** (the main device: ``execution_device`` is the first GPU of the map for
  each ``"cpu"``/``"disk"`` entry), so its activations, and the KV cache its attention appends, are on GPU 0;
* each submodule with its own parameters (a ``Linear``, a norm, the embedding) gets a hook that copies its
  weights to GPU 0 just before its forward and drops them right after (``pre_forward`` / ``post_forward`` with
  ``offload=True``): those weights are on GPU 0 only while that submodule runs, and are copied in at
  **every** forward.

:func:`replay` applies these rules to a trace: the result is GPU 0's allocated bytes after every event, its
peak and what is live there, and the bytes streamed per forward (and, for a ``generate()`` trace, the forwards it runs: each copies them
again). It covers maps over one GPU (``0``) plus
``"cpu"``/``"disk"``; several GPUs would add the copies of hidden states at each device boundary and of the
output back to the input's device (the top-level hook's ``io_same_device``), which this replay does not model.
It is a computation on the meta device, not a measurement.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from vramlab import ran

OFFLOADED = ("cpu", "disk")
# Maps replayed in this process, in vramlab.ran's one registry (this kind): lab 06's capstone refuses a prediction of
# GPU 0's peak stored after the learner replayed that very map (vramlab.checks.lab06.check_peak_prediction). A
# check's own replays run inside vramlab.ran._unrecorded().
REPLAYED_KIND = "replayed map"


def map_key(device_map: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """One hashable key per device map: its ``(module, device)`` entries as text, sorted (``"cuda:0"`` read as 0)."""
    return tuple(sorted((str(k), str(0 if v in ("cuda:0", "cuda") else v)) for k, v in device_map.items()))


def placement_key(model, device_map: Mapping[str, Any]) -> tuple[str, ...]:
    """What a map does to the weights, whatever its keys: the sorted names of ``model``'s parameters it puts off
    GPU 0 (on ``"cpu"`` or ``"disk"``). Two maps with one key are one placement: adding a module without weights
    (``model.rotary_emb``), reordering keys, or naming ``model.layers`` instead of each layer changes nothing.
    ``model``: a meta model (:func:`vramlab.dispatch.empty_model`)."""
    dmap = _check_map(device_map)
    return tuple(sorted(n for n, _ in model.named_parameters() if _device_of(n, dmap) in OFFLOADED))


def offload_shape_key(model, device_map: Mapping[str, Any]) -> tuple[str, ...]:
    """:func:`placement_key` up to which decoder layer is which: ``model.layers.N.`` read as ``model.layers.*.``
    (a sorted list, repeats kept). Maps that offload the same kinds and counts of weights, such as layers 0-7 or
    1-8 on GPU 0, copy the same bytes and hold the same KV cache: a replay of one reads the other's numbers
    (review #8 of lab 06)."""
    import re

    return tuple(sorted(re.sub(r"\.layers\.\d{1,6}\.", ".layers.*.", n) for n in placement_key(model, device_map)))


def design_key(trace, model, device_map: Mapping[str, Any]) -> tuple:
    """The key a replay is remembered by: the trace's shape (batch, prompt length, new tokens, mode) and the
    map's :func:`offload_shape_key`."""
    return (int(trace.batch_size), int(trace.seq_len), int(trace.new_tokens), str(trace.mode),
            offload_shape_key(model, device_map))


def design_was_replayed(key: tuple) -> bool:
    """Whether :func:`replay` ran a design with this :func:`design_key` in this process (outside
    :func:`vramlab.ran._unrecorded`)."""
    return key in ran.ran(REPLAYED_KIND)


def _device_of(name: str, device_map: Mapping[str, Any]) -> Any:
    """The device the map gives module or parameter ``name`` (the longest matching entry; ``""`` covers all)."""
    best, found = -1, None
    for key, device in device_map.items():
        if key == "" or name == key or name.startswith(key + "."):
            if len(key) > best:
                best, found = len(key), device
    if found is None:
        raise ValueError(f"`device_map` puts no device on {name!r}: give every module a device "
                         "(a parent name such as 'model.layers' covers its children).")
    return found


def _check_map(device_map: Any) -> dict:
    if not isinstance(device_map, Mapping) or not device_map:
        raise ValueError("`device_map` must be a dict {module name: 0, 'cpu' or 'disk'}, such as "
                         "vramlab.dispatch.plan_device_map returns.")
    out = {}
    for key, device in device_map.items():
        if not isinstance(key, str):
            raise ValueError(f"`device_map` key {key!r} is not a module name (a string such as 'model.layers.0').")
        if device in ("cuda:0", "cuda"):
            device = 0
        if isinstance(device, bool) or not (device in OFFLOADED or (type(device) is int and device == 0)):
            raise ValueError(f"`device_map`[{key!r}] = {device!r}: this replay covers one GPU, so use 0 for the GPU "
                             "and 'cpu' or 'disk' for offloaded modules.")
        out[key] = device
    return out


def _param_owner(param_name: str) -> str:
    """The module that holds a parameter: ``model.layers.0.mlp.down_proj.weight`` -> ``model.layers.0.mlp.down_proj``."""
    return param_name.rsplit(".", 1)[0] if "." in param_name else ""


def _module_path(traced: str, prefix: str) -> str:
    """A trace's module path without the model class: ``LlamaForCausalLM.model.norm`` -> ``model.norm``."""
    if traced == prefix:
        return ""
    return traced[len(prefix) + 1:] if traced.startswith(prefix + ".") else traced


@dataclass
class MapReplay:
    """What :func:`replay` returns. Bytes throughout; ``live`` has one entry per trace event."""

    device_map: dict
    forwards: int = 1                                    # model forwards in the trace (generate: one per new token)
    live: list[int] = field(default_factory=list)      # GPU 0's allocated bytes after each event
    peak_bytes: int = 0
    peak_index: int = 0
    peak_module: str = ""
    at_peak: dict = field(default_factory=dict)         # category -> bytes on GPU 0 at the peak
    streamed_bytes: int = 0                              # weights copied to GPU 0 at every forward (as allocated:
                                                         # each tensor in whole 512-byte blocks, as the trace)
    offloaded: list[str] = field(default_factory=list)   # the modules with weights off GPU 0

    @property
    def copied_bytes(self) -> int:
        """Weight bytes copied to GPU 0 over the whole trace: ``streamed_bytes`` at each of ``forwards``."""
        return self.streamed_bytes * self.forwards

    def summary(self) -> dict:
        gib = 1 << 30
        return {"peak_gib": round(self.peak_bytes / gib, 2), "peak_module": self.peak_module,
                "at_peak_gib": {k: round(v / gib, 2) for k, v in self.at_peak.items()},
                "streamed_gib": round(self.streamed_bytes / gib, 2), "forwards": self.forwards}


def replay(trace, config_or_model: Any, device_map: Mapping[str, Any]) -> MapReplay:
    """GPU 0's allocations during ``trace`` (a :class:`vramlab.vram.MemoryTrace` of the model ``config_or_model``:
    one forward, or ``mode="generate"``: the prefill and every decode step: a config as in :func:`vramlab.dispatch.empty_model`, or such a meta model) when it is
    dispatched with ``device_map`` (one GPU, ``0``, plus ``"cpu"``/``"disk"``), by the rules in the module docstring.
    Buffers (RoPE's ``inv_freq``) stay on GPU 0 wherever their module is mapped: accelerate puts the buffers of
    offloaded modules on the execution device (``AlignDevicesHook.init_hook`` without ``offload_buffers``; with it,
    non-persistent buffers such as ``inv_freq`` still go there).

    ``at_peak`` splits GPU 0's bytes at its peak into ``resident weights``, ``streamed weights`` (an offloaded
    submodule's weights, copied in for its forward), and the trace's ``kv_cache``, ``activations``, ``logits``
    and ``workspace``."""
    import torch

    from vramlab.dispatch.planner import empty_model

    dmap = _check_map(device_map)
    model = config_or_model if isinstance(config_or_model, torch.nn.Module) else empty_model(config_or_model)
    buffers = {name for name, _ in model.named_buffers()}
    events = getattr(trace, "events", None)
    if not isinstance(events, list) or not events:
        raise ValueError("`trace` must be a MemoryTrace from vramlab.vram.dry_run (it has no events).")
    ran.note(REPLAYED_KIND, design_key(trace, model, dmap), lasting=True)
    # generate(max_new_tokens=n) runs n forwards (the prefill gives the first token); a forward trace runs one
    forwards = max(int(trace.new_tokens), 1) if getattr(trace, "mode", "forward") == "generate" else 1
    # the class name the module tracker puts in front of every path
    prefix = next((e["module"].split(".", 1)[0] for e in events if e["phase"] != "load" and e["module"]), "")
    owner_bytes: dict[str, int] = {}      # offloaded parameter-holding module -> its weight bytes
    resident = 0
    off_storage: set[int] = set()         # load events of offloaded weights: their storages
    for e in events:
        if e["phase"] != "load":
            continue
        name = e["op"].removeprefix("load ")
        if name not in buffers and _device_of(name, dmap) in OFFLOADED:
            owner = _param_owner(name)
            owner_bytes[owner] = owner_bytes.get(owner, 0) + e["bytes"]
            off_storage.add(e["storage"])
        else:
            resident += e["bytes"]
    owners = sorted(owner_bytes, key=len, reverse=True)   # deepest first: a Linear before its parent
    owner_cache: dict[str, str | None] = {}

    def owner_of(path: str) -> str | None:
        if path not in owner_cache:
            owner_cache[path] = next((o for o in owners if path == o or path.startswith(o + ".")), None)
        return owner_cache[path]

    cats = {"resident weights": 0, "streamed weights": 0, "kv_cache": 0, "activations": 0, "logits": 0,
            "workspace": 0}
    live_list, best = [], (-1, 0, "", {})
    current: str | None = None            # the offloaded submodule whose weights are on GPU 0 now
    for e in events:
        if e["phase"] == "load":
            if e["storage"] not in off_storage:
                cats["resident weights"] += e["bytes"]
        else:
            path = _module_path(e["module"], prefix)
            owner = owner_of(path)
            if owner != current and e["bytes"] > 0:      # a new submodule starts: drop the last one's weights
                if current is not None:
                    cats["streamed weights"] -= owner_bytes[current]
                current = owner
                if current is not None:
                    cats["streamed weights"] += owner_bytes[current]
            cat = e["category"]
            if cat == "weights":        # a weight the trace counts after loading: resident unless offloaded
                cat = "resident weights" if e["storage"] not in off_storage else None
            if cat is not None:
                cats[cat] = cats.get(cat, 0) + e["bytes"]
        total = sum(cats.values())
        live_list.append(total)
        if total > best[0]:
            best = (total, e["i"], _module_path(e["module"], prefix), dict(cats))
    streamed = sum(owner_bytes.values())
    return MapReplay(device_map=dmap, forwards=forwards, live=live_list, peak_bytes=best[0], peak_index=best[1],
                     peak_module=best[2] or "(model)", at_peak=best[3], streamed_bytes=streamed,
                     offloaded=sorted(owner_bytes))


__all__ = ["MapReplay", "replay", "OFFLOADED", "map_key", "placement_key", "offload_shape_key", "design_key",
           "design_was_replayed"]
