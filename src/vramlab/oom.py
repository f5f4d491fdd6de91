"""Triage for vLLM out-of-memory logs: which of the five failures is it, and what to change.

Kinds (checked in this order, the most specific first):

* ``startup_kv_capacity`` - start-up ValueError: one request at ``max_model_len`` does not fit
  ("To serve at least one request with the model's max seq len ...", older "models's", and the
  V0-era "The model's max seq len (X) is larger than the maximum number of tokens that can be
  stored in KV cache (Y)").
* ``no_cache_blocks`` - start-up ValueError "No available memory for the cache blocks": weights
  and overheads leave nothing for the KV cache.
* ``engine_dead`` - ``EngineDeadError`` (V1) or ``AsyncEngineDeadError: Background loop has errored
  already`` (V0): the engine is gone; only a restart helps. Checked before the allocator OOM
  that usually killed it, because the dead engine is what must be handled first.
* ``block_manager_exhausted`` - the KV block pool ran dry under load ("free blocks: 0", a
  RECOMPUTE preemption warning).
* ``allocator_oom`` - ``torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ...``
  outside the KV pool (prefill spike, activations, CUDA graphs, another process).
* ``unknown`` - none of these.

The fixes and their order come from the seeds (001-004); each says whether it needs a restart
(every engine argument does) or works on the live server.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from vramlab.vram import OOMReport, parse_oom_message

KINDS = ("startup_kv_capacity", "no_cache_blocks", "engine_dead", "block_manager_exhausted",
         "allocator_oom", "unknown")


@dataclass(frozen=True)
class Remedy:
    """One fix. ``when`` is "live" (no restart), "restart" or "one restart, then durable"."""

    action: str
    when: str

    @property
    def needs_restart(self) -> bool:
        return self.when != "live"

    @property
    def live(self) -> bool:
        return self.when == "live"

    def __str__(self) -> str:
        return f"[{self.when}] {self.action}"


R, L, D = "restart", "live", "one restart, then durable"

CAUSES = {
    "startup_kv_capacity": "Start-up sizing: after the weights and profiled overheads, the KV memory left cannot "
                           "hold one request of max_model_len tokens.",
    "no_cache_blocks": "Start-up sizing: weights, activations and CUDA graphs use up the whole "
                       "gpu_memory_utilization budget; nothing is left for KV cache blocks.",
    "engine_dead": "The engine loop died (usually after an OOM escaped into it); every later request fails "
                   "until the process is restarted.",
    "block_manager_exhausted": "KV block pressure under load: running sequences need more blocks than the pool has; "
                               "V1 preempts the newest and recomputes it later (latency, not a crash; --swap-space "
                               "does not help on V1, which recomputes instead of swapping).",
    "allocator_oom": "A PyTorch allocation outside the KV pool failed (prefill spike, activations, CUDA-graph "
                     "capture, or another process on the GPU).",
    "unknown": "Not one of the vLLM memory failures vramlab knows.",
}

FIXES: dict[str, list[Remedy]] = {
    # seed 002 "Fixing the startup KV-cache OOM", in its order of preference
    "startup_kv_capacity": [
        Remedy("lower --max-model-len to what the workload needs (at most vLLM's estimated maximum model length)", R),
        Remedy("raise --gpu-memory-utilization (0.92-0.95 on a dedicated GPU; never 1.0)", R),
        Remedy("--kv-cache-dtype fp8 (halves KV bytes per token versus 16-bit)", R),
        Remedy("cap --max-num-seqs / --max-num-batched-tokens", R),
        Remedy("shard: --tensor-parallel-size N (or --pipeline-parallel-size N)", R),
        Remedy("quantize the weights (FP8, AWQ, GPTQ)", R),
    ],
    # seed 001 "No available memory for the cache blocks": four levers, then the utilization knob
    "no_cache_blocks": [
        Remedy("quantize the weights (FP8, AWQ, GPTQ) to shrink the static footprint", R),
        Remedy("shard the weights: --tensor-parallel-size N", R),
        Remedy("--enforce-eager (no CUDA-graph memory)", R),
        Remedy("clamp --max-model-len to the workload's real ceiling", R),
        Remedy("raise --gpu-memory-utilization if the GPU is dedicated (up to ~0.95)", R),
    ],
    # seed 002 "When every request fails after one bad one"
    "engine_dead": [
        Remedy("restart the server (behind a load balancer / rolling deploy so it costs no downtime)", R),
        Remedy("if it still OOMs after the restart: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", D),
        Remedy("make sure the V0 engine is not pinned (unset VLLM_USE_V1=0; upgrade)", R),
        Remedy("if it recurs, size the server down: lower max_model_len, fp8 KV cache, lower max_num_seqs", R),
    ],
    # seeds 001/002/004: runtime admission pressure
    "block_manager_exhausted": [
        Remedy("send less: fewer concurrent requests, smaller max_tokens, shorter prompts", L),
        Remedy("cap --max-num-seqs / --max-num-batched-tokens", R),
        Remedy("more KV memory: raise --gpu-memory-utilization or --tensor-parallel-size", R),
        Remedy("--kv-cache-dtype fp8 (more tokens per block pool)", R),
    ],
    # seed 002 "Fixing runtime OOM under load"
    "allocator_oom": [
        Remedy("send less right now: lower client concurrency, cap max_tokens, shorten prompts", L),
        Remedy("check for other processes on the GPU (nvidia-smi)", L),
        Remedy("lower --gpu-memory-utilization to 0.85-0.90 (more headroom outside the pool)", R),
        Remedy("--enforce-eager (or fewer cudagraph_capture_sizes)", R),
        Remedy("cap --max-num-seqs / --max-num-batched-tokens", R),
        Remedy("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", D),
    ],
    "unknown": [
        Remedy("read the first error in the log (the root cause is printed above 'Engine core initialization "
               "failed'), then run diagnose() on that part", L),
    ],
}

_PATTERNS: list[tuple[str, str]] = [
    ("startup_kv_capacity", r"To serve at least one request with the models?'s max seq len"),
    ("startup_kv_capacity", r"is larger than the maximum number of tokens that can be stored in KV cache"),
    ("startup_kv_capacity", r"Cannot auto-fit max_model_len"),
    ("no_cache_blocks", r"No available memory for the cache blocks"),
    ("engine_dead", r"\b(?:Async)?EngineDeadError\b"),
    ("engine_dead", r"Background loop has errored already"),
    ("engine_dead", r"Engine ?Core[^\n]{0,200}\bdied"),
    ("block_manager_exhausted", r"free blocks:\s*0\b"),
    ("block_manager_exhausted", r"Unable to allocate memory for KV cache block"),
    ("block_manager_exhausted", r"preempted by PreemptionMode\.RECOMPUTE"),
    ("block_manager_exhausted", r"not enough KV cache space"),
    ("allocator_oom", r"CUDA out of memory"),
    ("allocator_oom", r"\bOutOfMemoryError\b"),
    ("allocator_oom", r"Tried to allocate"),
]


@dataclass
class Diagnosis:
    """What :func:`diagnose` found: the kind, why, the matched text and the ordered fixes."""

    kind: str
    cause: str
    evidence: str
    fixes: list[Remedy]
    details: dict = field(default_factory=dict)
    oom: OOMReport | None = None

    @property
    def live_fixes(self) -> list[Remedy]:
        return [f for f in self.fixes if f.live]

    @property
    def restart_fixes(self) -> list[Remedy]:
        return [f for f in self.fixes if f.needs_restart]

    def __str__(self) -> str:
        lines = [f"{self.kind}: {self.cause}"]
        if self.details:
            lines.append("  numbers: " + ", ".join(f"{k}={v}" for k, v in self.details.items()))
        lines += [f"  {i}. {f}" for i, f in enumerate(self.fixes, 1)]
        return "\n".join(lines)


def _startup_numbers(text: str) -> dict:
    out: dict = {}
    patterns = {
        # whitespace-tolerant: logs and articles wrap these lines anywhere (seed 000 quotes one wrapped
        # and without the "(" before the needed GiB)
        "max_model_len": r"max\s+seq\s+len\s*\((\d+)\)",
        "needed_gib": r"\(?([\d.]+)\s*GiB\s+KV\s+cache\s+is\s+needed",
        "available_gib": r"available\s+KV\s+cache\s+memory\s*\(([\d.]+)\s*GiB\)",
        "estimated_max_model_len": r"estimated\s+maximum\s+model\s+length\s+is\s+(\d+)",
        "kv_cache_tokens": r"stored in KV cache \((\d+)\)",
    }
    for key, pat in patterns.items():
        m = re.search(pat, text, flags=re.DOTALL)
        if m:
            out[key] = float(m.group(1)) if "gib" in key else int(m.group(1))
    return out


def diagnose(text: str) -> Diagnosis:
    """Classify a vLLM / PyTorch log or traceback and return the cause and the ordered fixes."""
    if not isinstance(text, str):
        raise ValueError(f"`text` must be a string (got {type(text).__name__}).")
    for kind, pattern in _PATTERNS:
        m = re.search(pattern, text, flags=re.IGNORECASE | re.DOTALL)
        if m:
            break
    else:
        return Diagnosis("unknown", CAUSES["unknown"], "", list(FIXES["unknown"]))
    fixes = list(FIXES[kind])
    details: dict = {}
    oom = None
    if kind == "startup_kv_capacity":
        details = _startup_numbers(text)
    elif kind == "allocator_oom":
        oom = parse_oom_message(text)
        details = {k: v for k, v in (("tried_bytes", oom.tried_bytes), ("free_bytes", oom.free_bytes),
                                      ("verdict", oom.verdict)) if v is not None}
        if oom.verdict == "fragmentation":  # the cache holds enough, just not in one piece
            frag = [f for f in fixes if "expandable_segments" in f.action]
            fixes = frag + [f for f in fixes if f not in frag]
    return Diagnosis(kind, CAUSES[kind], m.group(0), fixes, details, oom)


__all__ = ["KINDS", "Remedy", "Diagnosis", "diagnose", "FIXES", "CAUSES"]
