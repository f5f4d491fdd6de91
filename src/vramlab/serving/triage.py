"""Triage for vLLM out-of-memory logs: which failure is it, and what to change.

Real logs are messy: lines wrap anywhere ("reserved by\\nPyTorch but unallocated"), each line of a
traceback carries a ``(EngineCore pid=...) ERROR 07-01 04:24:37 [core.py:1195]`` prefix, and a crash
is often preceded by harmless warnings. :func:`diagnose` first collapses whitespace and strips those
prefixes, then looks for **crashes** before **warnings**, the most specific first:

Crashes
* ``startup_free_memory`` - vLLM's "Free memory on device cuda:0 (F/T GiB) on startup is less than desired
  GPU memory utilization (u, R GiB)" (older releases: no device name): another process already holds the GPU.
* ``startup_kv_capacity`` - one request at ``max_model_len`` does not fit ("To serve at least one
  request with the model's max seq len ..."; "models's" in older releases; V0: "The model's max seq
  len (X) is larger than the maximum number of tokens that can be stored in KV cache (Y)").
* ``no_cache_blocks`` - "No available memory for the cache blocks": nothing left for KV blocks.
* ``engine_dead`` - ``EngineDeadError`` (V1) or ``AsyncEngineDeadError: Background loop has errored
  already`` (V0): only a restart helps. Checked before the OOM that usually killed it.
* ``allocator_oom`` - ``torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ...``: PyTorch's
  caching allocator could not get memory (the message's numbers tell shortage, fragmentation or a
  per-process cap apart: :func:`oom_verdict`).
* ``cuda_error_oom`` - ``CUDA error: out of memory`` / NCCL "Cuda failure 'out of memory'" /
  ``CUBLAS_STATUS_ALLOC_FAILED``: a library allocating outside PyTorch's cache (NCCL buffers, cuBLAS
  workspaces, CUDA-graph capture). ``expandable_segments`` cannot help here.

Warnings (only when no crash is in the log)
* ``kv_preemption`` - the V0 scheduler's warning "Sequence group N is preempted by
  PreemptionMode.RECOMPUTE mode because there is not enough KV cache space ..." (every 50th
  preemption). V1 preempts silently (count it with the ``vllm:num_preemptions`` metric) and always
  recomputes, so ``--swap-space`` advice does not apply to V1. Latency, not a crash.

``unknown`` - none of these. Each fix says whether it needs a restart (every engine argument does)
or works on the live server.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from vramlab.vram.oom_message import OOMReport, parse_oom_message

KINDS = ("startup_free_memory", "startup_kv_capacity", "no_cache_blocks", "engine_dead", "allocator_oom",
         "cuda_error_oom", "kv_preemption", "unknown")
CRASH_KINDS = KINDS[:6]

# A line some generated error catalogues attribute to vLLM; no vLLM release prints it.
NOT_VLLM_BLOCK_LINE = "Unable to allocate memory for KV cache block"


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
    "startup_free_memory": "Start-up: less memory is free on the GPU than gpu_memory_utilization asks for; another "
                           "process (a second vLLM, a notebook kernel, a leftover worker) holds part of it.",
    "startup_kv_capacity": "Start-up sizing: after the weights and profiled overheads, the KV memory left cannot "
                           "hold one request of max_model_len tokens.",
    "no_cache_blocks": "Start-up sizing: weights, activations and backend workspaces use up the whole "
                       "gpu_memory_utilization budget; nothing is left for KV cache blocks.",
    "engine_dead": "The engine loop died (usually after an OOM escaped into it); every later request fails "
                   "until the process is restarted.",
    "allocator_oom": "A PyTorch allocation outside the KV pool failed (prefill spike, activations, sampler, or "
                     "another process on the GPU).",
    "cuda_error_oom": "A CUDA library (NCCL, cuBLAS, graph capture) failed to allocate outside PyTorch's caching "
                      "allocator: the headroom outside gpu_memory_utilization is too small.",
    "kv_preemption": "KV block pressure under load: running requests needed more blocks than the pool had, so the "
                     "scheduler preempted one and will recompute it (latency, not a crash). V1 does this silently "
                     "(metric vllm:num_preemptions) and preempts by recompute only (it has no swap preemption mode), so "
                     "--swap-space does not help on V1.",
    "unknown": "Not one of the vLLM memory failures vramlab knows.",
}

FIXES: dict[str, list[Remedy]] = {
    "startup_free_memory": [
        Remedy("find what holds the GPU (nvidia-smi: another vLLM, a notebook kernel, a leftover worker) and stop it", R),
        Remedy("or lower --gpu-memory-utilization below free/total (two instances on one GPU: a share each)", R),
    ],
    # troubleshooting article "Fixing the startup KV-cache OOM", in its order of preference
    "startup_kv_capacity": [
        Remedy("lower --max-model-len to what the workload needs (at most vLLM's estimated maximum model length)", R),
        Remedy("raise --gpu-memory-utilization (0.92-0.95 on a dedicated GPU; never 1.0)", R),
        Remedy("--kv-cache-dtype fp8 (halves KV bytes per token versus 16-bit)", R),
        Remedy("a backend without a large workspace (--attention-backend FLASH_ATTN instead of FLASHINFER)", R),
        Remedy("cap --max-num-seqs / --max-num-batched-tokens (smaller profile-run peak)", R),
        Remedy("shard: --tensor-parallel-size N (or --pipeline-parallel-size N)", R),
        Remedy("quantize the weights (FP8, AWQ, GPTQ)", R),
    ],
    # troubleshooting article "No available memory for the cache blocks": four levers, then utilization
    "no_cache_blocks": [
        Remedy("quantize the weights (FP8, AWQ, GPTQ) to shrink the static footprint", R),
        Remedy("shard the weights: --tensor-parallel-size N", R),
        Remedy("cap --max-num-batched-tokens (the profile run's activation peak)", R),
        Remedy("clamp --max-model-len to the workload's real ceiling", R),
        Remedy("raise --gpu-memory-utilization if the GPU is dedicated (up to ~0.95)", R),
    ],
    "engine_dead": [
        Remedy("restart the server (behind a load balancer / rolling deploy so it costs no downtime)", R),
        Remedy("find the first error above it (usually an OOM) and fix that cause", R),
        Remedy("if it still OOMs after the restart: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", D),
        Remedy("if it recurs, size the server down: lower max_model_len, fp8 KV cache, lower max_num_seqs", R),
    ],
    "allocator_oom": [
        Remedy("send less right now: lower client concurrency, cap max_tokens, shorten prompts", L),
        Remedy("check for other processes on the GPU (nvidia-smi)", L),
        Remedy("lower --gpu-memory-utilization to 0.85-0.90 (more headroom outside the pool)", R),
        Remedy("--enforce-eager (or fewer cudagraph_capture_sizes)", R),
        Remedy("cap --max-num-seqs / --max-num-batched-tokens", R),
        Remedy("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", D),
    ],
    "cuda_error_oom": [
        Remedy("lower --gpu-memory-utilization (NCCL/cuBLAS/graph memory comes from the slice outside it)", R),
        Remedy("--enforce-eager (no CUDA-graph capture) or fewer cudagraph_capture_sizes", R),
        Remedy("check for other processes on the GPU (nvidia-smi)", L),
        Remedy("rerun with CUDA_LAUNCH_BLOCKING=1 and NCCL_DEBUG=INFO to see which library failed", R),
    ],
    "kv_preemption": [
        Remedy("send less: fewer concurrent requests, smaller max_tokens, shorter prompts", L),
        Remedy("cap --max-num-seqs / --max-num-batched-tokens", R),
        Remedy("more KV memory: raise --gpu-memory-utilization or --tensor-parallel-size", R),
        Remedy("--kv-cache-dtype fp8 (more tokens per block pool)", R),
    ],
    "unknown": [
        Remedy("read the first error in the log (the root cause is printed above 'Engine core initialization "
               "failed'), then run diagnose() on that part", L),
    ],
}
_CAP_FIX = Remedy("memory is free on the device yet PyTorch refused: look for a per-process cap "
                  "(torch.cuda.set_per_process_memory_fraction, a workshop memory guard, a MIG slice) and raise it", L)

_PATTERNS: list[tuple[str, str]] = [
    ("startup_free_memory", r"Free memory on device (?:\S+ )?\(.{0,40}?\) on startup is less than desired GPU memory "
                            r"utilization"),
    ("startup_kv_capacity", r"To serve at least one request with the models?'s max seq len"),
    ("startup_kv_capacity", r"is larger than the maximum number of tokens that can be stored in KV cache"),
    ("startup_kv_capacity", r"Cannot auto-fit max_model_len"),
    ("no_cache_blocks", r"No available memory for the cache blocks"),
    ("engine_dead", r"\b(?:Async)?EngineDeadError\b"),
    ("engine_dead", r"Background loop has errored already"),
    ("engine_dead", r"Engine ?Core.{0,200}?\bdied"),
    ("allocator_oom", r"CUDA out of memory"),
    ("allocator_oom", r"\bOutOfMemoryError\b(?!: Unable to allocate memory for KV cache block)"),
    ("allocator_oom", r"Tried to allocate"),
    ("cuda_error_oom", r"CUDA error: out of memory"),
    ("cuda_error_oom", r"Cuda failure '?out of memory"),
    ("cuda_error_oom", r"CUBLAS_STATUS_ALLOC_FAILED"),
    ("cuda_error_oom", r"cudaErrorMemoryAllocation"),
    ("kv_preemption", r"is preempted by (?:PreemptionMode\.)?(?:RECOMPUTE|SWAP) mode because there is not enough "
                      r"KV cache space"),
    ("kv_preemption", NOT_VLLM_BLOCK_LINE),
]

# "(EngineCore pid=129) ERROR 07-01 04:24:37 [core.py:1195] ", "INFO 08-14 14:07:22 [gpu_worker.py:578] "
# and the older "WARNING 05-14 09:12:44 scheduler.py:1057] "
_LOG_PREFIX = re.compile(r"(?:\([A-Za-z_0-9]+(?: [A-Za-z_0-9]+)? pid=\d+\)\s*)?"
                         r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+\d\d-\d\d\s+\d\d:\d\d:\d\d(?:\.\d+)?\s+"
                         r"(?:\[[^\]\s]+\]|[\w./-]+:\d+\])\s*")


def normalize_log(text: str) -> str:
    """One line: log prefixes removed, every run of whitespace (line wraps included) made one space."""
    if not isinstance(text, str):
        raise ValueError(f"`text` must be a string (got {type(text).__name__}).")
    return re.sub(r"\s+", " ", _LOG_PREFIX.sub(" ", text)).strip()


@dataclass
class Diagnosis:
    """What :func:`diagnose` found: the kind, why, the matched text and the ordered fixes."""

    kind: str
    cause: str
    evidence: str
    fixes: list[Remedy]
    details: dict = field(default_factory=dict)
    oom: OOMReport | None = None
    notes: list[str] = field(default_factory=list)

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
        lines += [f"  note: {n}" for n in self.notes]
        lines += [f"  {i}. {f}" for i, f in enumerate(self.fixes, 1)]
        return "\n".join(lines)


def _num(s: str) -> float | int:
    return float(s) if "." in s else int(s)


def _startup_numbers(text: str) -> dict:
    """Numbers of the start-up messages; GiB in either "{:.2f}" ("62.00") or format_gib ("62.0") form."""
    out: dict = {}
    patterns = {
        "max_model_len": r"max seq len \((\d+)\)",
        "needed_gib": r"\(?(\d+(?:\.\d+)?) GiB KV cache is needed",
        "available_gib": r"available KV cache memory \((\d+(?:\.\d+)?) GiB\)",
        "estimated_max_model_len": r"estimated maximum model length is (\d+)",
        "kv_cache_tokens": r"stored in KV cache \((\d+)\)",
    }
    for key, pat in patterns.items():
        m = re.search(pat, text)
        if m:
            out[key] = float(m.group(1)) if "gib" in key else int(m.group(1))
    return out


def _free_memory_numbers(text: str) -> dict:
    # "device (F/T GiB)"; later releases name the device: "device cuda:0 (F/T GiB)"
    m = re.search(r"Free memory on device (?:\S+ )?\((\d+(?:\.\d+)?)/(\d+(?:\.\d+)?) GiB\) on startup is less than "
                  r"desired GPU memory utilization \((\d+(?:\.\d+)?), (\d+(?:\.\d+)?) GiB\)", text, flags=re.IGNORECASE)
    if not m:
        return {}
    return {"free_gib": float(m.group(1)), "total_gib": float(m.group(2)), "gpu_memory_utilization": float(m.group(3)),
            "requested_gib": float(m.group(4))}


CONTEXTS = ("vllm", "pytorch")

# A plain PyTorch job (training or a notebook), not a vLLM server: its allocator OOM has other levers.
PYTORCH_FIXES: dict[str, list[Remedy]] = {
    "allocator_oom": [
        Remedy("make the step smaller: a smaller batch (gradient accumulation keeps the effective batch), "
               "shorter sequences", R),
        Remedy("hold less per step: 16-bit autocast, activation (gradient) checkpointing, "
               "del tensors you no longer need", R),
        Remedy("check for other processes on the GPU (nvidia-smi)", L),
        Remedy("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (set before CUDA starts)", D),
        Remedy("a GPU with more memory, or shard the model (FSDP, device_map)", R),
    ],
    "cuda_error_oom": [
        Remedy("a library outside PyTorch's cache ran out (cuBLAS, NCCL): make the step smaller and leave headroom", R),
        Remedy("check for other processes on the GPU (nvidia-smi)", L),
        Remedy("rerun with CUDA_LAUNCH_BLOCKING=1 to see which call failed", R),
    ],
}
PYTORCH_CAUSES = {
    "allocator_oom": "A PyTorch allocation failed: the step (batch x sequence x model) needs more than the GPU has "
                     "free, or the free memory is in pieces, or a per-process cap refused it.",
}


def diagnose(text: str, context: str = "vllm") -> Diagnosis:
    """Classify a vLLM / PyTorch log or traceback (any length, wrapped or not) and return the cause and
    the ordered fixes. A crash anywhere in the log wins over preemption warnings before it.
    ``context="pytorch"`` is for a plain PyTorch job (training, a notebook): the allocator-OOM cause and
    fixes are PyTorch's (smaller batch, checkpointing, ...), not vLLM server flags."""
    if context not in CONTEXTS:
        raise ValueError(f"`context` must be one of {', '.join(CONTEXTS)} (got {context!r}): "
                         "'vllm' for a vLLM server log, 'pytorch' for a plain PyTorch job.")
    flat = normalize_log(text)
    found = None
    for kind, pattern in _PATTERNS:
        m = re.search(pattern, flat, flags=re.IGNORECASE)
        if m:
            found = (kind, m)
            break
    if found is None:
        return Diagnosis("unknown", CAUSES["unknown"], "", list(FIXES["unknown"]))
    kind, m = found
    fixes = list(PYTORCH_FIXES.get(kind, FIXES[kind]) if context == "pytorch" else FIXES[kind])
    cause = PYTORCH_CAUSES.get(kind, CAUSES[kind]) if context == "pytorch" else CAUSES[kind]
    details: dict = {}
    notes: list[str] = []
    oom = None
    if kind == "startup_kv_capacity":
        details = _startup_numbers(flat)
    elif kind == "startup_free_memory":
        details = _free_memory_numbers(flat)
    elif kind == "allocator_oom":
        oom = parse_oom_message(flat)
        # the report knows its format: old messages (PyTorch 1.0-1.7) predate per-process caps, so their
        # "free" figure is not read as one (same rule as OOMReport.verdict everywhere in the lab)
        verdict = oom.verdict
        details = {k: v for k, v in (("tried_bytes", oom.tried_bytes), ("free_bytes", oom.free_bytes),
                                      ("verdict", verdict)) if v is not None}
        if verdict == "fragmentation":  # the cache holds enough, just not in one piece
            frag = [f for f in fixes if "expandable_segments" in f.action]
            fixes = frag + [f for f in fixes if f not in frag]
        elif verdict == "cap":
            fixes = [_CAP_FIX] + fixes
    elif kind == "kv_preemption":
        counts = re.findall(r"total_(?:num_)?cumulative_preemption(?:_cnt)?=(\d+)", flat)
        if counts:
            details = {"total_num_cumulative_preemption": max(int(c) for c in counts)}
        if NOT_VLLM_BLOCK_LINE.lower() in flat.lower():
            notes.append("'Unable to allocate memory for KV cache block ... free blocks: 0' is not printed by any "
                         "vLLM release (it comes from a generated error catalogue); the real signal is the V0 "
                         "preemption warning or V1's vllm:num_preemptions metric.")
    return Diagnosis(kind, cause, m.group(0), fixes, details, oom, notes)


__all__ = ["KINDS", "CRASH_KINDS", "Remedy", "Diagnosis", "diagnose", "normalize_log",
           "FIXES", "CAUSES", "NOT_VLLM_BLOCK_LINE", "CONTEXTS", "PYTORCH_FIXES"]
