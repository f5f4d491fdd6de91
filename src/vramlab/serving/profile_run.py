"""vLLM's profile-run activation peak, computed by a dry run instead of a formula.

At start-up vLLM's V1 worker (``vllm/v1/worker/gpu_worker.py``, ``Worker.determine_available_memory``)
wraps one call of ``GPUModelRunner.profile_run`` (``vllm/v1/worker/gpu_model_runner.py``) in
``memory_profiling`` and subtracts the "torch peak memory increase" it measured from the KV budget.
``profile_run`` does, for a text-only decoder:

1. ``_dummy_run(self.max_num_tokens, is_profile=True)``: one forward pass of ``max_num_batched_tokens``
   tokens, split into ``num_reqs = min(num_tokens, max_num_seqs)`` dummy requests. No KV cache exists
   yet, and the attention kernel is skipped (``_dummy_run`` builds attention metadata only with
   ``force_attention`` or a FULL CUDA-graph mode, and the profile run passes neither), so nothing is kept
   from layer to layer: the peak is one decoder layer's transients on top of the residual stream.
2. ``_dummy_sampler_run(last_hidden_states)``: ``compute_logits`` on the **last token of each dummy
   request** (``num_reqs`` rows, not ``max_num_batched_tokens``), then the sampler, which works on a
   float32 copy of the logits (``vllm/v1/sample/sampler.py``).

:func:`profile_run_peak` reproduces both on the meta device: :func:`vramlab.vram.dryrun.dry_run` of the real
transformers model built from the config with **one** decoder layer (every layer is the same, and the
profile run keeps nothing from one layer to the next) at batch 1 x ``max_num_batched_tokens``, bf16,
``sdpa``; the forward peak is the largest ``activations`` total before ``lm_head`` runs (transformers'
``lm_head`` over every token, and the K/V it stores in its own cache, are not what vLLM does). The sampler
term is ``num_reqs x vocab x (dtype bytes + 4)``: the logits and their float32 copy.

What it does not model: vLLM's own kernels (fused QKV and gate/up projections, in-place fused
RMSNorm+residual, ``SiluAndMul``) allocate a little differently from transformers' modules; MoE layers
(vLLM's ``fused_moe`` is not transformers' expert loop); the sampler's top-k/top-p buffers (vLLM notes
that the profile run may skip them); torch.compile and CUDA-graph memory (estimated separately, see
:func:`vramlab.serving.vllm_memory.plan`); non-torch memory (CUDA context, NCCL).

Bytes throughout; a few hundred milliseconds per call on a CPU (the first call imports transformers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vramlab.configs import _positive_int, load_config
from vramlab.serving.kvcache import MiB

PROFILE_RUN_SOURCES = {
    "vllm/v1/worker/gpu_worker.py": "Worker.determine_available_memory: memory_profiling around profile_run",
    "vllm/v1/worker/gpu_model_runner.py": "profile_run -> _dummy_run(self.max_num_tokens, is_profile=True), "
                                          "then _dummy_sampler_run(last_hidden_states); "
                                          "_dummy_run: num_reqs = min(num_tokens, max_num_reqs)",
    "vllm/utils (MemoryProfilingResult.__repr__)": "'torch peak memory increase: {}GiB' in the "
                                                   "'Memory profiling takes ...' log line",
}

_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


@dataclass(frozen=True)
class ProfileRunPeak:
    """The profile run's activation peak for one config (bytes)."""

    model: str
    max_num_batched_tokens: int
    max_num_seqs: int
    dtype: str
    forward_bytes: int        # the dry run: one decoder layer's peak activations, before lm_head
    sampler_bytes: int        # num_reqs x vocab logits plus their float32 copy
    formula_bytes: int        # vramlab.serving.vllm_memory.estimate_activation_bytes (what plan() uses)
    peak_module: str          # where the forward peak happens
    peak_op: str
    seconds: float

    @property
    def num_reqs(self) -> int:
        return min(self.max_num_batched_tokens, self.max_num_seqs)

    @property
    def total_bytes(self) -> int:
        return self.forward_bytes + self.sampler_bytes

    def row(self) -> str:
        """One line for a table: model, dry-run forward + sampler = total, the formula (MiB)."""
        return (f"{self.model:<14} {self.forward_bytes / MiB:9.0f} {self.sampler_bytes / MiB:9.0f} "
                f"{self.total_bytes / MiB:9.0f} {self.formula_bytes / MiB:9.0f}   {self.peak_module}")


def _check_count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"`{name}` must be an integer >= 1 (got {value!r}).")
    return value


def profile_run_peak(config: Any, max_num_batched_tokens: int = 8192, max_num_seqs: int = 256,
                     dtype: str = "bfloat16", gpu: str = "H100") -> ProfileRunPeak:
    """vLLM's profile-run activation peak for ``config`` by dry run (see the module docstring).

    ``config``: a bundled config name, a dict or a ``ModelConfig``. Dense decoders only: a config with
    experts (``num_experts``, ``num_local_experts``, ``n_routed_experts``) is refused, because
    transformers' expert loop is not vLLM's fused MoE kernel.
    """
    from vramlab.serving.vllm_memory import estimate_activation_bytes
    from vramlab.vram.dryrun import dry_run

    cfg = load_config(config)
    _check_count("max_num_batched_tokens", max_num_batched_tokens)
    _check_count("max_num_seqs", max_num_seqs)
    if dtype not in _DTYPE_BYTES:
        raise ValueError(f"`dtype` {dtype!r} is not one of {', '.join(_DTYPE_BYTES)}.")
    name = str(cfg.get("_name", "custom"))
    if any(cfg.get(k) for k in ("num_experts", "num_local_experts", "n_routed_experts")):
        raise ValueError(f"`config` {name!r} is a mixture of experts: the dry run follows transformers' expert loop, "
                         "not vLLM's fused MoE kernel; use a dense model.")
    vocab = _positive_int(cfg, "vocab_size")
    one_layer = dict(cfg)
    one_layer["num_hidden_layers"] = 1
    for key in ("layer_types", "mlp_only_layers"):   # per-layer lists must match the one layer left
        if isinstance(one_layer.get(key), list):
            one_layer[key] = one_layer[key][:1]
    trace = dry_run(one_layer, 1, max_num_batched_tokens, dtype=dtype, attn_implementation="sdpa", gpu=gpu)
    first_head = next((e["i"] for e in trace.events if ".lm_head" in e["module"]), len(trace.events))
    live = 0
    best, where = 0, {"module": "", "op": ""}
    for e in trace.events[:first_head]:
        if e["category"] == "activations":
            live += e["bytes"]
            if live > best:
                best, where = live, e
    num_reqs = min(max_num_batched_tokens, max_num_seqs)
    sampler = num_reqs * vocab * (_DTYPE_BYTES[dtype] + 4)
    formula = estimate_activation_bytes(cfg, max_num_batched_tokens, max_num_seqs)
    module = where["module"].split(".", 1)[-1] if "." in where["module"] else where["module"]
    return ProfileRunPeak(name, max_num_batched_tokens, max_num_seqs, dtype, best, sampler, formula,
                          module, where["op"], trace.seconds)


def profile_run_table(models=("smollm2-135m", "qwen3-0.6b", "mistral-7b", "llama-3.1-8b", "qwen3-8b"),
                      max_num_batched_tokens: int = 8192, max_num_seqs: int = 256) -> str:
    """A small text table: dry run (forward, sampler, total) beside the formula, MiB."""
    lines = [f"{'model':<14} {'forward':>9} {'sampler':>9} {'dry run':>9} {'formula':>9}   forward peak at",
             f"{'':<14} {'MiB':>9} {'MiB':>9} {'MiB':>9} {'MiB':>9}"]
    for m in models:
        lines.append(profile_run_peak(m, max_num_batched_tokens, max_num_seqs).row())
    return "\n".join(lines)


__all__ = ["ProfileRunPeak", "profile_run_peak", "profile_run_table", "PROFILE_RUN_SOURCES"]
