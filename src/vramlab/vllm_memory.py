"""vLLM's start-up memory arithmetic, reproduced without a GPU.

What vLLM (V1 engine) does at start-up, and what this module mirrors (read from the vLLM source,
``vllm/v1/worker/gpu_worker.py`` and ``vllm/v1/core/kv_cache_utils.py``):

1. ``requested_memory = ceil(total * gpu_memory_utilization)`` per GPU.
2. ``determine_available_memory``: load the weights, run one dummy forward pass of
   ``max_num_batched_tokens`` tokens (the activation peak), measure non-torch memory (CUDA
   context, NCCL, attention workspaces) and estimate CUDA-graph memory; then
   ``available = requested - non_kv_cache_memory - cudagraph_estimate``. This module cannot
   measure, so the activation, non-torch and CUDA-graph lines are *estimates*, labelled as such
   and overridable.
3. Page size per layer (``kv_cache_interface.py``): ``block_size * num_kv_heads * (head_size +
   head_size_v) * dtype_bytes``; MLA: ``block_size * 1 * (kv_lora_rank + qk_rope_head_dim) *
   dtype_bytes``. One request at ``max_model_len`` needs ``cdiv(max_model_len, block_size) *
   page`` per layer (``FullAttentionSpec.max_memory_usage_bytes``).
4. ``_check_enough_kv_cache_memory``: raises "No available memory for the cache blocks" when
   available <= 0, or "To serve at least one request ..." with a binary-searched estimate when one
   request does not fit.
5. ``get_num_blocks = available // page_size // num_layers``; the log says ``GPU KV cache size:
   {num_blocks * block_size:,} tokens`` and ``Maximum concurrency for {max_model_len:,} tokens
   per request: {num_blocks / cdiv(max_model_len, block_size):.2f}x``.

Units: bytes unless a name says GiB; lengths in tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from vramlab.kvcache import GiB, MiB, attention_shape, cdiv, dtype_bits, load_config, num_parameters

DEFAULT_BLOCK_SIZE = 16          # vLLM CacheConfig.block_size default for CUDA attention backends
DEFAULT_UTILIZATION = 0.92       # vLLM CacheConfig.gpu_memory_utilization (0.9 before; seeds 001/002)
DEFAULT_MAX_NUM_SEQS = 256       # vLLM SchedulerConfig.max_num_seqs default (online serving, most GPUs)
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192  # vLLM's usual default for online serving on datacenter GPUs
CONSERVING_MEMORY_URL = "https://docs.vllm.ai/en/latest/configuration/conserving_memory/"

# Estimates (vramlab's, not vLLM's): vLLM measures these lines at start-up.
EST_NON_TORCH_BYTES = 512 * MiB          # CUDA context + cuBLAS/attention workspaces, one GPU
EST_NCCL_BYTES_PER_TP = 256 * MiB        # extra non-torch memory per GPU when tensor_parallel_size > 1
EST_CUDAGRAPH_BYTES = 512 * MiB          # vLLM logs "Estimated CUDA graph memory" of 0.3-1.6 GiB


@dataclass(frozen=True)
class GPU:
    """A GPU as vLLM sees it: ``total_bytes`` is what ``torch.cuda.mem_get_info`` reports
    (nvidia-smi's ``memory.total`` in MiB, times 2**20), not the marketing number."""

    name: str
    total_bytes: int
    marketing: str
    source: str

    @property
    def total_gib(self) -> float:
        return self.total_bytes / GiB


# Totals as nvidia-smi's "memory.total" prints them (MiB); marketing sizes are decimal GB and
# include memory the driver reserves (ECC, firmware). Sources: nvidia-smi tables in public logs
# and docs (found with the code search): e.g. "Tesla T4 ... 0MiB / 15360MiB", "NVIDIA L4 ...
# 23034MiB", "NVIDIA A10G ... 23028MiB", "RTX 4090 ... 24564MiB", "A100-SXM4-40GB ... 40960",
# "A100-SXM4-80GB ... 81920MiB", "H100 80GB HBM3 ... 81559MiB", "NVIDIA H200 ... 143771MiB".
# Cross-check: the seed's torch OOM on a 24 GB card says "total capacity of 23.99 GiB"
# (= 24564 MiB). The CUDA context takes a few hundred MiB more, counted as non-torch memory.
GPUS: dict[str, GPU] = {
    "T4": GPU("T4", 15360 * MiB, "16 GB GDDR6", "nvidia-smi memory.total 15360 MiB (Tesla T4)"),
    "L4": GPU("L4", 23034 * MiB, "24 GB GDDR6", "nvidia-smi memory.total 23034 MiB (NVIDIA L4)"),
    "A10G": GPU("A10G", 23028 * MiB, "24 GB GDDR6", "nvidia-smi memory.total 23028 MiB (AWS g5 A10G)"),
    "RTX 4090": GPU("RTX 4090", 24564 * MiB, "24 GB GDDR6X", "nvidia-smi memory.total 24564 MiB"),
    "A100 40GB": GPU("A100 40GB", 40960 * MiB, "40 GB HBM2", "nvidia-smi memory.total 40960 MiB (A100-SXM4-40GB)"),
    "A100 80GB": GPU("A100 80GB", 81920 * MiB, "80 GB HBM2e", "nvidia-smi memory.total 81920 MiB (A100-SXM4-80GB, A100 80GB PCIe)"),
    "H100 80GB": GPU("H100 80GB", 81559 * MiB, "80 GB HBM3", "nvidia-smi memory.total 81559 MiB (H100 80GB HBM3)"),
    "H200": GPU("H200", 143771 * MiB, "141 GB HBM3e", "nvidia-smi memory.total 143771 MiB (NVIDIA H200)"),
}


def get_gpu(gpu: str | GPU | int | float) -> GPU:
    """A preset by name (case-insensitive, spaces optional), a :class:`GPU`, or a total in bytes."""
    if isinstance(gpu, GPU):
        if gpu.total_bytes <= 0:
            raise ValueError(f"`gpu.total_bytes` must be positive (got {gpu.total_bytes}).")
        return gpu
    if isinstance(gpu, (int, float)) and not isinstance(gpu, bool):
        if not gpu > 0:
            raise ValueError(f"`gpu` memory must be a positive number of bytes (got {gpu!r}).")
        return GPU(f"{gpu / GiB:.2f} GiB GPU", int(gpu), "custom", "given by the caller")
    key = str(gpu).replace(" ", "").lower()
    for name, preset in GPUS.items():
        if name.replace(" ", "").lower() == key:
            return preset
    raise ValueError(f"`gpu` {gpu!r} is not a preset; use one of {', '.join(GPUS)} or a number of bytes.")


def format_gib(n_bytes: int) -> str:
    """vLLM's ``format_gib``: ``f"{round(b / GiB, 2)}"`` (so 6 GiB prints as ``6.0``)."""
    return f"{round(n_bytes / GiB, 2)}"


# --------------------------------------------------------------------------------------------
# Pages and the start-up check
# --------------------------------------------------------------------------------------------

def _check_block_size(block_size: int) -> int:
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size <= 0:
        raise ValueError(f"`block_size` must be a positive integer number of tokens (got {block_size!r}).")
    return block_size


def _check_tp(tensor_parallel_size: int) -> int:
    if isinstance(tensor_parallel_size, bool) or not isinstance(tensor_parallel_size, int) or tensor_parallel_size < 1:
        raise ValueError(f"`tensor_parallel_size` must be an integer >= 1 (got {tensor_parallel_size!r}).")
    return tensor_parallel_size


def _check_len(max_model_len: int) -> int:
    if isinstance(max_model_len, bool) or not isinstance(max_model_len, int) or max_model_len <= 0:
        raise ValueError(f"`max_model_len` must be a positive integer number of tokens (got {max_model_len!r}).")
    return max_model_len


def page_size_bytes(config: Any, block_size: int = DEFAULT_BLOCK_SIZE, kv_cache_dtype: str = "auto",
                    tensor_parallel_size: int = 1) -> int:
    """Bytes of one block of one layer on one GPU (vLLM ``AttentionSpec.page_size_bytes``)."""
    shape = attention_shape(config)
    _check_block_size(block_size)
    _check_tp(tensor_parallel_size)
    bits = dtype_bits(kv_cache_dtype, config)
    per_token_layer = shape.kv_heads_per_rank(tensor_parallel_size) * (shape.head_dim + shape.v_head_dim)
    return block_size * per_token_layer * bits // 8


def needed_bytes(config: Any, max_model_len: int, block_size: int = DEFAULT_BLOCK_SIZE,
                 kv_cache_dtype: str = "auto", tensor_parallel_size: int = 1) -> int:
    """KV bytes one request of ``max_model_len`` tokens needs on one GPU, whole blocks
    (``cdiv(max_model_len, block_size) * page * num_layers``)."""
    _check_len(max_model_len)
    page = page_size_bytes(config, block_size, kv_cache_dtype, tensor_parallel_size)
    return attention_shape(config).layers * cdiv(max_model_len, block_size) * page


def estimate_max_model_len(config: Any, available_bytes: int, upper: int, block_size: int = DEFAULT_BLOCK_SIZE,
                           kv_cache_dtype: str = "auto", tensor_parallel_size: int = 1) -> int:
    """vLLM's binary search (``estimate_max_model_len``): the largest length in [1, upper] whose
    request fits in ``available_bytes``; 0 if not even one token fits. Because memory grows in
    whole blocks the answer is a multiple of ``block_size`` whenever it is below ``upper``."""
    layers = attention_shape(config).layers
    page = page_size_bytes(config, block_size, kv_cache_dtype, tensor_parallel_size)

    def fits(n: int) -> bool:
        return layers * cdiv(n, block_size) * page <= available_bytes

    left, right = 1, upper
    if not fits(left):
        return 0
    result = 1
    while left <= right:
        mid = (left + right) // 2
        if fits(mid):
            result, left = mid, mid + 1
        else:
            right = mid - 1
    return result


@dataclass
class KVCheck:
    """The outcome of vLLM's start-up KV check (bytes, tokens). ``message`` is vLLM's ValueError text
    ("" if ok); ``estimated_max_model_len`` is vLLM's binary-search estimate when the check fails
    (a multiple of the block size, 0 if not one block fits) and ``max_model_len`` itself when it passes."""

    ok: bool
    needed_bytes: int
    available_bytes: int
    max_model_len: int
    estimated_max_model_len: int
    message: str

    @property
    def needed_gib(self) -> float:
        return self.needed_bytes / GiB

    @property
    def available_gib(self) -> float:
        return self.available_bytes / GiB


def vllm_error_message(max_model_len: int, needed: int, available: int, estimated: int,
                       wording: str = "current") -> str:
    """The text of vLLM's ValueError, in the current wording or the older one (``wording="old"``:
    "models's" and no remark about the CPU backend), from ``_check_enough_kv_cache_memory``."""
    if wording not in ("current", "old"):
        raise ValueError(f"`wording` must be 'current' or 'old' (got {wording!r}).")
    if available <= 0:
        return ("No available memory for the cache blocks. "
                "Try increasing `gpu_memory_utilization` when initializing the engine. "
                f"See {CONSERVING_MEMORY_URL} for more details.")
    estimated_msg = ""
    if estimated > 0:
        estimated_msg = ("Based on the available memory, "
                         f"the estimated maximum model length is {estimated}. ")
    model_s = "model's" if wording == "current" else "models's"
    util = ("`gpu_memory_utilization` (which also controls CPU memory on the CPU backend)"
            if wording == "current" else "`gpu_memory_utilization`")
    return (f"To serve at least one request with the {model_s} max seq len "
            f"({max_model_len}), ({format_gib(needed)} GiB KV "
            f"cache is needed, which is larger than the available KV cache "
            f"memory ({format_gib(available)} GiB). {estimated_msg}"
            f"Try increasing {util} or decreasing `max_model_len` "
            f"when initializing the engine. "
            f"See {CONSERVING_MEMORY_URL} for more details.")


def check_kv_cache(config: Any, max_model_len: int, available_bytes: int, block_size: int = DEFAULT_BLOCK_SIZE,
                   kv_cache_dtype: str = "auto", tensor_parallel_size: int = 1,
                   wording: str = "current") -> KVCheck:
    """vLLM's start-up check for one GPU: can one request of ``max_model_len`` tokens fit in
    ``available_bytes`` of KV memory? ``available_bytes`` 0 gives vLLM's "No available memory"
    message; negative values are rejected (ValueError)."""
    _check_len(max_model_len)
    if isinstance(available_bytes, bool) or not isinstance(available_bytes, (int, float)) or math.isnan(available_bytes):
        raise ValueError(f"`available_bytes` must be a number of bytes (got {available_bytes!r}).")
    if available_bytes < 0:
        raise ValueError(f"`available_bytes` must be >= 0 bytes (got {available_bytes}); "
                         "a plan whose overheads exceed the budget reports 0 available.")
    available = int(available_bytes)
    need = needed_bytes(config, max_model_len, block_size, kv_cache_dtype, tensor_parallel_size)
    if available <= 0:
        return KVCheck(False, need, available, max_model_len, 0, vllm_error_message(max_model_len, need, 0, 0, wording))
    if need <= available:
        return KVCheck(True, need, available, max_model_len, max_model_len, "")
    est = estimate_max_model_len(config, available, max_model_len, block_size, kv_cache_dtype, tensor_parallel_size)
    return KVCheck(False, need, available, max_model_len, est,
                   vllm_error_message(max_model_len, need, available, est, wording))


# --------------------------------------------------------------------------------------------
# The ledger
# --------------------------------------------------------------------------------------------

@dataclass
class Plan:
    """One GPU's memory ledger for a vLLM deployment (all bytes, per GPU)."""

    model: str
    gpu: GPU
    gpu_memory_utilization: float
    max_model_len: int
    kv_cache_dtype: str
    tensor_parallel_size: int
    block_size: int
    weight_bits: float
    max_num_seqs: int
    requested_bytes: int
    weights_bytes: int
    non_torch_bytes: int
    activation_bytes: int
    cudagraph_bytes: int
    available_kv_bytes: int          # may be negative: the overheads exceed the budget
    page_bytes: int                  # one block of one layer
    num_layers: int
    num_blocks: int
    check: KVCheck
    estimates: tuple[str, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return self.check.ok

    @property
    def kv_cache_tokens(self) -> int:
        """``GPU KV cache size`` in tokens."""
        return self.num_blocks * self.block_size

    @property
    def max_concurrency(self) -> float:
        """How many full-length requests fit at once (vLLM's ``get_max_concurrency_for_kv_cache_config``)."""
        return self.num_blocks / cdiv(self.max_model_len, self.block_size)

    @property
    def kv_pool_bytes(self) -> int:
        return self.num_blocks * self.page_bytes * self.num_layers

    def log_lines(self) -> list[str]:
        """What vLLM would print at start-up (the lines vramlab can reproduce)."""
        if not self.ok:
            return [f"ValueError: {self.check.message}"]
        return [
            f"Available KV cache memory: {self.available_kv_bytes / GiB:.2f} GiB",
            f"GPU KV cache size: {self.kv_cache_tokens:,} tokens",
            f"Maximum concurrency for {self.max_model_len:,} tokens per request: {self.max_concurrency:.2f}x",
        ]

    def ledger(self) -> list[tuple[str, int, bool]]:
        """(label, bytes, is_estimate) rows that add up to the GPU's total."""
        unreserved = self.gpu.total_bytes - self.requested_bytes
        kv = max(self.available_kv_bytes, 0)
        return [
            ("weights", self.weights_bytes, "weights" in self.estimates),
            ("non-torch (CUDA context, NCCL)", self.non_torch_bytes, "non_torch" in self.estimates),
            ("activation peak (profile run)", self.activation_bytes, "activation" in self.estimates),
            ("CUDA graphs", self.cudagraph_bytes, "cudagraph" in self.estimates),
            ("KV cache pool", kv, False),
            ("outside gpu_memory_utilization", unreserved, False),
        ]

    def summary(self) -> str:
        """A short text ledger in GiB, estimates marked with '~'."""
        lines = [f"{self.model} on {self.gpu.name} ({self.gpu.total_gib:.2f} GiB), "
                 f"TP={self.tensor_parallel_size}, utilization {self.gpu_memory_utilization:g}, "
                 f"max_model_len {self.max_model_len:,}, kv_cache_dtype {self.kv_cache_dtype}"]
        for label, n, est in self.ledger():
            lines.append(f"  {'~' if est else ' '}{n / GiB:8.2f} GiB  {label}")
        if self.available_kv_bytes < 0:
            lines.append(f"   overheads exceed the budget by {-self.available_kv_bytes / GiB:.2f} GiB")
        lines += ["  " + s for s in self.log_lines()]
        return "\n".join(lines)

    def figure(self):
        """A plotly horizontal stacked bar of :meth:`ledger` (GiB)."""
        import plotly.graph_objects as go

        colors = ["#636efa", "#ab63fa", "#ffa15a", "#ff6692", "#00cc96" if self.ok else "#ef553b", "#d3d3d3"]
        fig = go.Figure()
        for (label, n, est), color in zip(self.ledger(), colors):
            fig.add_trace(go.Bar(y=[self.gpu.name], x=[n / GiB], name=label + (" (estimate)" if est else ""),
                                 orientation="h", marker_color=color,
                                 hovertemplate=f"{label}: %{{x:.2f}} GiB<extra></extra>"))
        fig.add_vline(x=self.requested_bytes / GiB, line_dash="dash",
                      annotation_text=f"utilization {self.gpu_memory_utilization:g}")
        fig.update_layout(barmode="stack", height=230, margin=dict(l=10, r=10, t=40, b=10),
                          xaxis_title="GiB (per GPU)", title=("OK: " if self.ok else "FAILS: ") + self.model,
                          legend=dict(orientation="h", y=-0.5))
        return fig


def _check_utilization(u: float) -> float:
    if isinstance(u, bool) or not isinstance(u, (int, float)) or not (0 < u <= 1):
        raise ValueError(f"`gpu_memory_utilization` must be in (0, 1] (got {u!r}).")
    return float(u)


def _nonneg(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or math.isnan(value):
        raise ValueError(f"`{name}` must be a non-negative number of bytes (got {value!r}).")
    return int(value)


def estimate_activation_bytes(config: Any, max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
                              max_num_seqs: int = DEFAULT_MAX_NUM_SEQS, tensor_parallel_size: int = 1) -> int:
    """A rough activation peak for vLLM's profile run (an estimate, bytes): the dummy batch of
    ``max_num_batched_tokens`` tokens holds a few hidden-size and MLP-width tensors in 16-bit,
    plus float32 logits for ``max_num_seqs`` sampled rows."""
    cfg = load_config(config)
    hidden = int(cfg.get("hidden_size") or 0)
    inter = int(cfg.get("moe_intermediate_size") or cfg.get("intermediate_size") or 4 * hidden)
    vocab = int(cfg.get("vocab_size") or 0)
    per_token = (4 * hidden + 2 * inter // tensor_parallel_size) * 2
    return max_num_batched_tokens * per_token + max_num_seqs * vocab * 4


def plan(config: Any, gpu: str | GPU | int = "H100 80GB", gpu_memory_utilization: float = DEFAULT_UTILIZATION,
         max_model_len: int | None = None, kv_cache_dtype: str = "auto", tensor_parallel_size: int = 1,
         block_size: int = DEFAULT_BLOCK_SIZE, weight_bits: float = 16, max_num_seqs: int = DEFAULT_MAX_NUM_SEQS,
         max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS, enforce_eager: bool = False,
         weights_bytes: int | None = None, non_torch_bytes: int | None = None,
         activation_bytes: int | None = None, cudagraph_bytes: int | None = None,
         wording: str = "current") -> Plan:
    """The per-GPU ledger vLLM would compute, and its verdict.

    ``max_model_len`` defaults to the config's ``max_position_embeddings`` (as vLLM does).
    Weights are ``parameters * weight_bits / 8 / tensor_parallel_size``; the non-torch,
    activation and CUDA-graph lines are vramlab estimates unless you pass measured bytes.
    """
    cfg = load_config(config)
    shape = attention_shape(cfg)
    g = get_gpu(gpu)
    u = _check_utilization(gpu_memory_utilization)
    _check_tp(tensor_parallel_size)
    _check_block_size(block_size)
    if max_model_len is None:
        max_model_len = shape.max_position_embeddings
        if not max_model_len:
            raise ValueError("`max_model_len` is not given and the config has no max_position_embeddings.")
    _check_len(max_model_len)
    if isinstance(weight_bits, bool) or not isinstance(weight_bits, (int, float)) or not weight_bits > 0:
        raise ValueError(f"`weight_bits` must be a positive number of bits (got {weight_bits!r}).")
    if isinstance(max_num_seqs, bool) or not isinstance(max_num_seqs, int) or max_num_seqs < 1:
        raise ValueError(f"`max_num_seqs` must be an integer >= 1 (got {max_num_seqs!r}).")
    if shape.kind != "MLA" and shape.num_kv_heads % tensor_parallel_size and tensor_parallel_size % shape.num_kv_heads:
        raise ValueError(f"`tensor_parallel_size` ({tensor_parallel_size}) must divide, or be a multiple of, "
                         f"the {shape.num_kv_heads} KV heads.")

    estimates = []
    requested = math.ceil(g.total_bytes * u)
    if weights_bytes is None:
        weights_bytes = int(num_parameters(cfg) * weight_bits / 8 / tensor_parallel_size)
        # an estimate when the count is derived, or when quantized (real checkpoints add scales and
        # keep some layers, e.g. embeddings, in 16-bit)
        if not cfg.get("_num_parameters") or weight_bits != 16:
            estimates.append("weights")
    weights_bytes = _nonneg("weights_bytes", weights_bytes)
    if non_torch_bytes is None:
        non_torch_bytes = EST_NON_TORCH_BYTES + (EST_NCCL_BYTES_PER_TP if tensor_parallel_size > 1 else 0)
        estimates.append("non_torch")
    if activation_bytes is None:
        activation_bytes = estimate_activation_bytes(cfg, max_num_batched_tokens, max_num_seqs, tensor_parallel_size)
        estimates.append("activation")
    if cudagraph_bytes is None:
        cudagraph_bytes = 0 if enforce_eager else EST_CUDAGRAPH_BYTES
        if not enforce_eager:
            estimates.append("cudagraph")
    non_torch_bytes = _nonneg("non_torch_bytes", non_torch_bytes)
    activation_bytes = _nonneg("activation_bytes", activation_bytes)
    cudagraph_bytes = _nonneg("cudagraph_bytes", cudagraph_bytes)

    available = requested - weights_bytes - non_torch_bytes - activation_bytes - cudagraph_bytes
    page = page_size_bytes(cfg, block_size, kv_cache_dtype, tensor_parallel_size)
    chk = check_kv_cache(cfg, max_model_len, max(available, 0), block_size, kv_cache_dtype,
                         tensor_parallel_size, wording)
    num_blocks = max(available, 0) // page // shape.layers if chk.ok else 0
    return Plan(shape.name, g, u, max_model_len, kv_cache_dtype, tensor_parallel_size, block_size, weight_bits,
                max_num_seqs, requested, weights_bytes, non_torch_bytes, activation_bytes, cudagraph_bytes,
                available, page, shape.layers, num_blocks, chk, tuple(estimates))


# --------------------------------------------------------------------------------------------
# Fixes
# --------------------------------------------------------------------------------------------

@dataclass
class Fix:
    """One change that makes the plan pass, and the plan it gives."""

    knob: str
    value: Any
    flag: str
    plan: Plan

    def __str__(self) -> str:
        p = self.plan
        return (f"{self.flag:<36} -> KV pool {p.kv_pool_bytes / GiB:6.2f} GiB, "
                f"{p.kv_cache_tokens:,} tokens, concurrency {p.max_concurrency:.2f}x")


def fixes(config: Any, gpu: str | GPU | int = "H100 80GB", max_utilization: float = 0.95, **plan_kwargs) -> list[Fix]:
    """The smallest single change that passes, per knob, in the order: max_model_len,
    kv_cache_dtype fp8, gpu_memory_utilization (up to ``max_utilization``; 0.95 is the seeds'
    ceiling on a dedicated GPU), tensor_parallel_size (2, 4, 8), weight quantization (8 then 4
    bits). A knob that cannot fix it alone is left out. Empty when the plan already passes."""
    base = plan(config, gpu, **plan_kwargs)
    if base.ok:
        return []
    kw = dict(plan_kwargs)
    kw.setdefault("max_model_len", base.max_model_len)
    out: list[Fix] = []

    est = base.check.estimated_max_model_len
    if est > 0:
        p = plan(config, gpu, **{**kw, "max_model_len": est})
        if p.ok:
            out.append(Fix("max_model_len", est, f"--max-model-len {est}", p))
    if str(kw.get("kv_cache_dtype", "auto")) not in ("fp8", "fp8_e4m3", "fp8_e5m2"):
        p = plan(config, gpu, **{**kw, "kv_cache_dtype": "fp8"})
        if p.ok:
            out.append(Fix("kv_cache_dtype", "fp8", "--kv-cache-dtype fp8", p))
    u0 = kw.get("gpu_memory_utilization", DEFAULT_UTILIZATION)
    steps = range(int(round(u0 * 100)) + 1, int(round(max_utilization * 100)) + 1)
    for pct in steps:
        p = plan(config, gpu, **{**kw, "gpu_memory_utilization": pct / 100})
        if p.ok:
            out.append(Fix("gpu_memory_utilization", pct / 100, f"--gpu-memory-utilization {pct / 100:.2f}", p))
            break
    tp0 = kw.get("tensor_parallel_size", 1)
    for tp in (2, 4, 8):
        if tp <= tp0:
            continue
        try:
            p = plan(config, gpu, **{**kw, "tensor_parallel_size": tp})
        except ValueError:
            continue
        if p.ok:
            out.append(Fix("tensor_parallel_size", tp, f"--tensor-parallel-size {tp}", p))
            break
    wb0 = kw.get("weight_bits", 16)
    for bits in (8, 4):
        if bits >= wb0:
            continue
        p = plan(config, gpu, **{**kw, "weight_bits": bits})
        if p.ok:
            name = "FP8/INT8" if bits == 8 else "AWQ/GPTQ 4-bit"
            out.append(Fix("weight_bits", bits, f"{name} weights ({bits}-bit)", p))
            break
    return out


__all__ = [
    "GPU", "GPUS", "get_gpu", "format_gib", "page_size_bytes", "needed_bytes", "estimate_max_model_len",
    "KVCheck", "vllm_error_message", "check_kv_cache", "Plan", "plan", "estimate_activation_bytes",
    "Fix", "fixes", "DEFAULT_BLOCK_SIZE", "DEFAULT_UTILIZATION",
]

