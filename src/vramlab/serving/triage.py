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
* ``engine_dead`` - ``EngineDeadError`` (V1; also glued to a prefix, ``MQEngineDeadError`` of the 0.6-0.7
  multiprocessing front end), ``AsyncEngineDeadError: Background loop has errored already`` (V0), "Engine loop
  has died", "Engine core proc ... died unexpectedly": only a restart helps. Checked before the OOM that
  usually killed it (the diagnosis notes that cause when the log shows it). A worker's "Worker proc ... died
  unexpectedly" alone is not engine death.
* ``host_oom`` - the machine's RAM, not the GPU's, ran out: Ray's memory monitor ("Task was killed due to the
  node running low on memory", raised as ``ray.exceptions.OutOfMemoryError``) or the kernel's OOM killer
  ("Out of memory: Killed process N", "oom-kill:"). GPU settings do not help.
* ``allocator_oom`` - ``torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ...``: PyTorch's
  caching allocator could not get memory (the message's numbers tell shortage, fragmentation or a
  per-process cap apart: :func:`oom_verdict`). ROCm builds print "HIP out of memory"; some wrappers print
  ``OutOfMemoryError('CUDA out of memory. ...')`` without ``torch.``.
* ``cuda_error_oom`` - ``CUDA error: out of memory`` / NCCL "Cuda failure 'out of memory'" /
  ``CUBLAS_STATUS_ALLOC_FAILED``: a library allocating outside PyTorch's cache (NCCL buffers, cuBLAS
  workspaces, CUDA-graph capture). ``expandable_segments`` cannot help here.

Warnings (only when no crash is in the log)
* ``kv_preemption`` - the V0 scheduler's warning "Sequence group N is preempted by
  PreemptionMode.RECOMPUTE mode because there is not enough KV cache space ..." (every 50th
  preemption). V1 preempts silently (count it with the ``vllm:num_preemptions`` metric) and always
  recomputes, so ``--swap-space`` advice does not apply to V1. Latency, not a crash.

``unknown`` - none of these (also look-alikes: "No available shared memory broadcast block" is a
message-queue wait, not ``no_cache_blocks``; "an illegal memory access was encountered" is a kernel bug,
not an OOM).

The text is cleaned first (:mod:`vramlab.logtext`): colour codes (real or pasted as ``^[[0;36m``, ``#033[2m``),
HTML escapes, worker tags, CI gutters, docker-compose and exception-group prefixes; phrases match across a
fixed-width wrap inside a word. A log longer than 1 M characters is read at its start and end only (a note
says so), so any text is read in bounded time; nothing raises on text or bytes. Each fix says whether it needs a restart (every engine argument does)
or works on the live server.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# Both names: torch 2.8+ reads PYTORCH_ALLOC_CONF and warns that PYTORCH_CUDA_ALLOC_CONF is deprecated,
# but torch 2.9.1 ignores the new name for CUDA (pytorch#183387), and torch < 2.8 knows only the old one
# (c10/cuda/CUDAAllocatorConfig.h reads the old name first in 2.13). Setting both is right on every release.
_EXPANDABLE = ("PYTORCH_ALLOC_CONF=expandable_segments:True and PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
               "(both names: which one is read depends on the torch release)")

from vramlab.logtext import HEAD_CHARS, as_text, bounded, flatten, loose, skipped_note
from vramlab.vram.oom_message import OOMReport, parse_oom_message

KINDS = ("startup_free_memory", "startup_kv_capacity", "no_cache_blocks", "engine_dead", "host_oom",
         "allocator_oom", "cuda_error_oom", "kv_preemption", "unknown")
CRASH_KINDS = KINDS[:7]

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
    "host_oom": "The machine's RAM (host memory, not the GPU's) ran out: the kernel's OOM killer or Ray's memory "
                "monitor killed a process. Weights loading through CPU memory, --swap-space, --cpu-offload-gb and "
                "several workers per node all use host RAM.",
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
        Remedy(f"if it still OOMs after the restart: {_EXPANDABLE}", D),
        Remedy("if it recurs, size the server down: lower max_model_len, fp8 KV cache, lower max_num_seqs", R),
    ],
    "host_oom": [
        Remedy("see what holds host RAM: free -g; dmesg -T | grep -iE 'killed process|oom-kill' (Ray: its dashboard)", L),
        Remedy("give the machine or container more RAM (docker --memory, the Kubernetes memory limit)", R),
        Remedy("use less host RAM: lower --swap-space and --cpu-offload-gb, fewer replicas or API servers per node", R),
        Remedy("Ray only: its killer acts at RAY_memory_usage_threshold (0.95); fix the usage before raising it", R),
    ],
    "allocator_oom": [
        Remedy("send less right now: lower client concurrency, cap max_tokens, shorten prompts", L),
        Remedy("check for other processes on the GPU (nvidia-smi)", L),
        Remedy("lower --gpu-memory-utilization to 0.85-0.90 (more headroom outside the pool)", R),
        Remedy("--enforce-eager (or fewer cudagraph_capture_sizes)", R),
        Remedy("cap --max-num-seqs / --max-num-batched-tokens", R),
        Remedy(_EXPANDABLE, D),
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

# (kind, needle, regex): the needle (lower case, spaces removed) is looked for in the flattened text with its
# spaces removed (one fast substring search); only then is the regex, built with ``loose`` so that a phrase
# still matches across a fixed-width wrap inside a word, run for the evidence. Every repetition is bounded.
_L = loose
_PATTERNS: list[tuple[str, str]] = [
    # vllm/v1/worker/utils.py request_memory (older: vllm/worker/worker.py determine_num_available_blocks)
    ("startup_free_memory", _L("Free memory on device") + r" ?(?:\S{1,40} )?\(.{0,40}?\) ?" + _L("on startup is less than desired GPU memory utilization")),
    # vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory ("models's" in older releases)
    ("startup_kv_capacity", _L("To serve at least one request with the model") + r" ?s? ?'? ?s " + _L("max seq len")),
    ("startup_kv_capacity", _L("is larger than the maximum number of tokens that can be stored in KV cache")),
    ("startup_kv_capacity", _L("Cannot auto-fit max_model_len")),
    ("no_cache_blocks", _L("No available memory for the cache blocks")),
    # vllm/v1/engine/exceptions.py EngineDeadError; 0.6-0.7 vllm/engine/multiprocessing MQEngineDeadError;
    # V0 vllm/engine/async_llm_engine.py AsyncEngineDeadError / "Background loop has errored already"
    ("engine_dead", r"E ?n ?g ?i ?n ?e ?D ?e ?a ?d ?E ?r ?r ?o ?r\b"),
    ("engine_dead", _L("Background loop has errored already")),
    ("engine_dead", _L("Engine loop has died")),
    ("engine_dead", r"\bE ?n ?g ?i ?n ?e ?(?:C ?o ?r ?e|c ?o ?r ?e)[ _\w]{0,12}? ?p ?r ?o ?c ?\S{0,40} ?d ?i ?e ?d\b"),
    # ray/_private/memory_monitor.py (raised as ray.exceptions.OutOfMemoryError); Linux mm/oom_kill.c
    ("host_oom", _L("Task was killed due to the node running low on memory")),
    ("host_oom", _L("Out of memory: Killed process")),
    ("host_oom", r"\boom[-_]kill\b"),
    # c10/cuda/CUDACachingAllocator.cpp ("HIP out of memory" once hipified for ROCm)
    ("allocator_oom", r"(?:CUDA|HIP) " + _L("out of memory. Tried to allocate")),
    ("allocator_oom", r"\bCUDA " + _L("out of memory") + r"(?! ?')"),
    ("allocator_oom", r"\bHIP " + _L("out of memory")),
    ("allocator_oom", _L("OutOfMemoryError") + r"\b(?!: Unable to allocate memory for KV cache block)"),
    ("allocator_oom", _L("Tried to allocate") + r" ?\d"),
    ("cuda_error_oom", _L("CUDA error: out of memory")),
    ("cuda_error_oom", _L("Cuda failure") + r" ?'? ?" + _L("out of memory")),   # NCCL's CUDACHECK
    ("cuda_error_oom", _L("CUBLAS_STATUS_ALLOC_FAILED")),
    ("cuda_error_oom", _L("cudaErrorMemoryAllocation")),
    # V0 vllm/core/scheduler.py _preempt
    ("kv_preemption", _L("is preempted by") + r" (?:PreemptionMode\.)?(?:RECOMPUTE|SWAP) " + _L("mode because there is not enough KV cache space")),
    ("kv_preemption", _L(NOT_VLLM_BLOCK_LINE)),
]


def _needle(pattern: str) -> str:
    """The longest literal stretch of a pattern, lower case without spaces (a fast pre-check)."""
    plain = pattern.replace("\\ ?", "").replace(" ?", "").replace("\\ ", "").replace(" ", "")
    plain = re.sub(r"\\[bdSsw]|\(\?[!:<=]{1,2}[^)]*\)|\[[^\]]*\]|\{\d+,\d+\}\??|\S\?|[()|*+]", "\0", plain)
    plain = re.sub(r"\\(.)", r"\1", plain)
    return max(plain.split("\0"), key=len).lower()


_COMPILED = [(kind, _needle(p), re.compile(p, re.IGNORECASE)) for kind, p in _PATTERNS]


def normalize_log(text: str) -> str:
    """One line: colour codes, HTML escapes and log prefixes removed, every run of whitespace (line wraps
    included) made one space (:func:`vramlab.logtext.flatten`). Bytes are decoded; a text longer than 1 M
    characters keeps its start and end, with a marker where the middle was. Not text: one ``ValueError``."""
    text, skipped = bounded(as_text(text))
    if not skipped:
        return flatten(text)
    return (flatten(text[:HEAD_CHARS]) + f" [... {skipped} characters not read ...] "
            + flatten(text[HEAD_CHARS + 1:]))


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
    # the engine process whose error the log ends in, e.g. "EngineCore pid=23849: ValueError" (None: no prefix)
    failed_process: str | None = None

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
    num = r"(?<![\d.])(\d{1,12}(?:\.\d{1,6})?)"   # bounded, never starts inside a digit run (linear)
    patterns = {
        "max_model_len": _L("max seq len") + r" ?\(" + num + r"\)",
        "needed_gib": num + " ?" + _L("GiB KV cache is needed"),
        "available_gib": _L("available KV cache memory") + r" ?\(" + num + r" ?GiB\)",
        "estimated_max_model_len": _L("estimated maximum model length is") + " ?" + num,
        "kv_cache_tokens": _L("stored in KV cache") + r" ?\(" + num + r"\)",
    }
    for key, pat in patterns.items():
        m = re.search(pat, text, flags=re.IGNORECASE)
        if m:
            out[key] = float(m.group(1)) if "gib" in key else int(float(m.group(1)))
    return out


def _free_memory_numbers(text: str) -> dict:
    # "device (F/T GiB)"; later releases name the device: "device cuda:0 (F/T GiB)"
    n = r"(\d{1,9}(?:\.\d{1,6})?)"
    m = re.search(_L("Free memory on device") + r" ?(?:\S{1,40} )?\(" + n + "/" + n + r" ?GiB\) ?"
                  + _L("on startup is less than desired GPU memory utilization") + r" ?\(" + n + ", ?" + n + r" ?GiB\)",
                  text, flags=re.IGNORECASE)
    if not m:
        return {}
    return {"free_gib": float(m.group(1)), "total_gib": float(m.group(2)), "gpu_memory_utilization": float(m.group(3)),
            "requested_gib": float(m.group(4))}


# The engine's own output (vLLM 0.32.0): a process that is not the front end prefixes each line with its name and
# pid, "(EngineCore pid=N)" (vllm/v1/engine/core.py), "(Worker pid=N)" / "(VllmWorker rank=0 pid=N)"
# (vllm/v1/executor/multiproc_executor.py); in-process the front end's own lines read "(MainProcess pid=N)". A core
# that fails at start-up logs "EngineCore failed to start." and its traceback, ending in its error; the front end
# then raises RuntimeError("Engine core initialization failed. See root cause above. Failed core proc(s): {...}")
# (vllm/v1/engine/utils.py), which only says that the core died: its cause is the core's error above it.
ENGINE_WRAPPER = "Engine core initialization failed"
_PROCESS_ERROR = re.compile(r"^\(([A-Za-z_][\w-]{0,40})(?:[ \t][\w=.:-]{1,40}){0,3}[ \t]pid=(\d{1,10})\)[^\n]{0,120}?"
                            r"(?<![\w.])([A-Za-z_][\w.]{0,80}(?:Error|Exception)): ", re.M)


def _engine_process_notes(text: str) -> tuple[str | None, list[str]]:
    """Which engine process raised (the last ``(Name pid=N) ... SomeError: `` line) and what the wrapper means."""
    notes: list[str] = []
    last = None
    if "pid=" in text:
        for m in _PROCESS_ERROR.finditer(text):
            last = m
    process = None
    if last is not None:
        process = f"{last.group(1)} pid={last.group(2)}: {last.group(3).rsplit('.', 1)[-1]}"
    if ENGINE_WRAPPER.lower() in text.lower():
        if last is not None and last.group(1) != "MainProcess":
            notes.append(f"'{ENGINE_WRAPPER}' (the front end's RuntimeError) only says that the engine core "
                         f"process died at start-up; the cause is its own error above, from {process}.")
        else:
            notes.append(f"'{ENGINE_WRAPPER}' (the front end's RuntimeError) only says that the engine core "
                         f"process died at start-up; its cause is printed above it in the lines prefixed "
                         f"(EngineCore pid=N): paste those too.")
    return process, notes


CONTEXTS = ("vllm", "pytorch")

# A plain PyTorch job (training or a notebook), not a vLLM server: its allocator OOM has other levers.
PYTORCH_FIXES: dict[str, list[Remedy]] = {
    "allocator_oom": [
        Remedy("make the step smaller: a smaller batch (gradient accumulation keeps the effective batch), "
               "shorter sequences", R),
        Remedy("hold less per step: 16-bit autocast, activation (gradient) checkpointing, "
               "del tensors you no longer need", R),
        Remedy("check for other processes on the GPU (nvidia-smi)", L),
        Remedy(f"{_EXPANDABLE} (set before CUDA starts)", D),
        Remedy("a GPU with more memory, or shard the model (FSDP, device_map)", R),
    ],
    "host_oom": [
        Remedy("see what holds host RAM: free -g; dmesg -T | grep -iE 'killed process|oom-kill'", L),
        Remedy("use less host RAM: fewer DataLoader workers, no pin_memory on huge batches, load weights with "
               "mmap/safetensors (low_cpu_mem_usage) instead of a full copy", R),
        Remedy("give the machine or container more RAM (docker --memory, the Kubernetes memory limit)", R),
    ],
    "cuda_error_oom": [
        Remedy("a library outside PyTorch's cache ran out (cuBLAS, NCCL): make the step smaller and leave headroom", R),
        Remedy("check for other processes on the GPU (nvidia-smi)", L),
        Remedy("rerun with CUDA_LAUNCH_BLOCKING=1 to see which call failed", R),
    ],
}
PYTORCH_CAUSES = {
    "host_oom": "The machine's RAM (host memory, not the GPU's) ran out and the kernel's OOM killer (or Ray's memory "
                "monitor) killed the process: data loading workers, pinned buffers or a full CPU copy of the "
                "weights use host RAM.",
    "allocator_oom": "A PyTorch allocation failed: the step (batch x sequence x model) needs more than the GPU has "
                     "free, or the free memory is in pieces, or a per-process cap refused it.",
}


def diagnose(text: str | bytes, context: str = "vllm") -> Diagnosis:
    """Classify a vLLM / PyTorch log or traceback (any length, wrapped or not) and return the cause and
    the ordered fixes. A crash anywhere in the log wins over preemption warnings before it.
    ``context="pytorch"`` is for a plain PyTorch job (training, a notebook): the allocator-OOM cause and
    fixes are PyTorch's (smaller batch, checkpointing, ...), not vLLM server flags."""
    if context not in CONTEXTS:
        raise ValueError(f"`context` must be one of {', '.join(CONTEXTS)} (got {context!r}): "
                         "'vllm' for a vLLM server log, 'pytorch' for a plain PyTorch job.")
    try:
        text = as_text(text)
    except ValueError as err:
        raise ValueError(f"diagnose: {err}") from None
    text, skipped = bounded(text)
    flat = flatten(text)
    compact = flat.lower().replace(" ", "")
    hits: list[tuple[str, re.Match]] = []
    for kind, needle, pattern in _COMPILED:
        if any(k == kind for k, _ in hits) or needle not in compact:
            continue
        m = pattern.search(flat)
        if m:
            hits.append((kind, m))
    found = hits[0] if hits else None
    process, process_notes = _engine_process_notes(text)
    if found is None:
        d = Diagnosis("unknown", CAUSES["unknown"], "", list(FIXES["unknown"]), notes=process_notes,
                      failed_process=process)
        if skipped:
            d.notes.append(skipped_note(skipped))
        return d
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
        counts = re.findall(r"total_(?:num_)?cumulative_preemption(?:_cnt)?=(\d{1,15})", flat)
        if counts:
            details = {"total_num_cumulative_preemption": max(int(c) for c in counts)}
        if NOT_VLLM_BLOCK_LINE.lower() in flat.lower():
            notes.append("'Unable to allocate memory for KV cache block ... free blocks: 0' is not printed by any "
                         "vLLM release (it comes from a generated error catalogue); the real signal is the V0 "
                         "preemption warning or V1's vllm:num_preemptions metric.")
    elif kind == "engine_dead":
        causes = [k for k, _ in hits if k in ("host_oom", "allocator_oom", "cuda_error_oom")]
        if causes:
            notes.append(f"the log also shows {causes[0]} ({dict(hits)[causes[0]].group(0)!r}): that is most likely "
                         f"what killed the engine; see diagnose() of that part for its fixes.")
    notes += process_notes
    if skipped:
        notes.append(skipped_note(skipped))
    return Diagnosis(kind, cause, m.group(0), fixes, details, oom, notes, process)


__all__ = ["KINDS", "CRASH_KINDS", "ENGINE_WRAPPER", "Remedy", "Diagnosis", "diagnose", "normalize_log",
           "FIXES", "CAUSES", "NOT_VLLM_BLOCK_LINE", "CONTEXTS", "PYTORCH_FIXES"]
