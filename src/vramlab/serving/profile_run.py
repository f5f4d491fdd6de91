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

:func:`profile_run_peak` reproduces both on the meta device, as the stated release runs them:
:func:`vramlab.vram.dryrun.dry_run` of the real transformers model built from the config with **one** decoder
layer (every layer is the same, and the profile run keeps nothing from one layer to the next) at ``num_reqs``
short requests (``num_tokens // num_reqs`` tokens each, as ``_dummy_run`` splits them; never one long sequence,
so no L x L score matrix is built for the profile batch), the config's dtype, ``sdpa`` (eager where transformers
has no SDPA path, e.g. Gemma-2); the forward peak is the largest ``activations`` total before ``lm_head``. The
sampler term is ``num_reqs x vocab x`` (dtype bytes + the top-k/top-p buffers: the dummy sampler passes
``top_k = vocab - 1`` and ``top_p = 0.9`` on purpose, about 15 bytes per logit from 0.17 or with FlashInfer's
sampler, about 39 before; 0.32.0's ``_dummy_sampler_run`` even runs the sampler twice). The logged peak is the
**larger** of the two (the forward's transients are freed before the sampler runs), plus the CUDA-graph
estimate on the v0.21+ line, where the profiled graph memory is part of the logged number.

Held against real logged start-ups in ``src/vramlab/results/logged_startups.json``
(``tests/test_logged_startups.py``, ``benchmarks/dryrun.py --startups``): 21 cases over 0.6.5, 0.7.3, 0.11.0 and 0.19.0
(H100, TP 1-4, bf16/fp16/fp32, 0.6B to 72B), all within 15% (0.90 to 1.14). In all but one the sampler term is the
peak, and ``vllm serve`` on a >= 70 GiB non-A100 GPU defaults to ``max_num_seqs`` 1,024 (``vllm/engine/arg_utils.py``):
on 0.11.0 that is about 5.6 GiB for a 128K-151K vocabulary whatever the model's size (Qwen3-0.6B 5.56 GiB, Qwen3-32B
5.64 GiB); on 0.19.0 about 1.9-2.3 GiB (Llama-3.1-8B 1.89, Qwen2.5-7B 2.21, Qwen2.5-72B 2.29 GiB), which fits the
Triton top-k/top-p kernel that replaces the sort (``vllm/v1/sample/ops/topk_topp_triton.py``, vllm PR #33538, merged
early 2026; which release first ships it is not checked here). Where the vocabulary is small the forward is the peak
(CodeLlama-7B's 32,016 tokens: 0.77 GiB logged, 0.69 GiB predicted, the worst case at 0.90).

Known bias, left as is: per logit, the logged sampler-bound peaks are 14.9-15.8 bytes in bf16 on 0.19.0 and 38.4-39.6 on
0.11.0 in total, so the review's 15 and 39 look like totals *including* the logits' own 2 bytes, while this module
adds the dtype bytes on top (17 and 41): most 0.19.0 cases sit 5-14% high (Gemma's 256,000 vocabulary at 1.14), the
0.11.0 ones 4-7%. ``tests/test_vllm_memory.py`` pins ``2 + 15``, so the change (``dtype + 13`` and ``dtype + 37``,
which puts the 21 cases at 0.90-1.02, measured) is left to that file's owner.

What it does not model: vLLM's own kernels (fused QKV and gate/up projections, in-place fused
RMSNorm+residual, ``SiluAndMul``) allocate a little differently from transformers' modules; MoE layers
(vLLM's ``fused_moe`` is not transformers' expert loop); the CUDA-graph memory itself (pass the logged
estimate); non-torch memory (CUDA context, NCCL).

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
    "vllm/v1/worker/gpu_model_runner.py (0.32.0, installed)": "_dummy_sampler_run: top_k = vocab - 1, top_p = 0.9, "
                                                              "and a second sampler call with a generator",
}

_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


# Bytes per logit of the dummy sampler's top-k/top-p at the profile run (vllm/v1/sample/ops/topk_topp_sampler.py):
# _dummy_sampler_run passes top_k = vocab - 1 and top_p = 0.9 on purpose, so the sampler sorts every row
# (float32 logits, the sort's values and int64 indices, masks, the scattered result, float32 probs). The
# review of issue 28 measured about 15 bytes per logit on >= 0.17 (and with FlashInfer's sampler) and about 39
# on older releases; the logits' own copy in the model dtype comes on top here. The newer CUDA path masks with a
# Triton kernel instead of the sort (vllm/v1/sample/ops/topk_topp_triton.py, vllm PR #33538). The logged start-ups
# (results/logged_startups.json) suggest 15 and 39 already include the bf16 logits: see the module docstring.
SAMPLER_BYTES_PER_LOGIT = {"new": 15, "old": 39}
SAMPLER_NEW_FROM = (0, 17)
CUDAGRAPH_COUNTED_FROM = (0, 21)     # the logged activation peak includes the CUDA-graph estimate from v0.21


def vllm_release(version: Any = None) -> tuple[int, int]:
    """``(major, minor)`` of a vLLM version (``"0.6.5"``, ``"v0.11.0"``); None: the pinned line
    (:data:`vramlab.serving.vllm_memory.PINNED`, v0.21+)."""
    import re

    if version is None:
        from vramlab.serving.vllm_memory import PINNED

        version = PINNED.line                      # "v0.21.0+"
    found = re.match(r"\s*v?(\d{1,2})\.(\d{1,3})", str(version))
    if not found:
        raise ValueError(f"`vllm_version` {version!r} is not a release such as '0.6.5' or '0.11'.")
    return int(found.group(1)), int(found.group(2))


@dataclass(frozen=True)
class ProfileRunPeak:
    """The profile run's activation peak for one config (bytes)."""

    model: str
    max_num_batched_tokens: int
    max_num_seqs: int
    dtype: str
    forward_bytes: int        # the dry run: one decoder layer's peak activations, before lm_head
    sampler_bytes: int        # num_reqs x vocab: logits and the top-k/top-p sampler's buffers
    formula_bytes: int        # vramlab.serving.vllm_memory.estimate_activation_bytes (what plan() uses)
    peak_module: str          # where the forward peak happens
    peak_op: str
    seconds: float
    vllm_version: str = ""
    cudagraph_bytes: int = 0  # counted in the logged peak from v0.21 (0 when not counted or not given)
    attn_implementation: str = "sdpa"

    @property
    def num_reqs(self) -> int:
        return min(self.max_num_batched_tokens, self.max_num_seqs)

    @property
    def total_bytes(self) -> int:
        """What the release logs as the activation peak: the larger of the forward and the sampler (the forward's
        transients are freed before the sampler runs), plus the CUDA-graph estimate where the release counts it."""
        return max(self.forward_bytes, self.sampler_bytes) + self.cudagraph_bytes

    def row(self) -> str:
        """One line for a table: model, dry-run forward, sampler, peak, the formula (MiB)."""
        return (f"{self.model:<14} {self.forward_bytes / MiB:9.0f} {self.sampler_bytes / MiB:9.0f} "
                f"{self.total_bytes / MiB:9.0f} {self.formula_bytes / MiB:9.0f}   {self.peak_module}")


def _check_count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"`{name}` must be an integer >= 1 (got {value!r}).")
    return value


def profile_run_peak(config: Any, max_num_batched_tokens: int = 8192, max_num_seqs: int = 256,
                     dtype: str = "bfloat16", gpu: str = "H100", vllm_version: str | None = None,
                     cudagraph_bytes: int | None = None, flashinfer_sampler: bool = False,
                     tensor_parallel_size: int = 1) -> ProfileRunPeak:
    """vLLM's profile-run activation peak for ``config`` by dry run, as the release ``vllm_version`` runs it.

    ``_dummy_run(max_num_tokens)`` splits the tokens into ``num_reqs = min(tokens, max_num_seqs)`` short
    requests (``gpu_model_runner.py``: ``num_tokens // num_reqs`` each, the remainder on the last), so the dry
    run is one real decoder layer at ``num_reqs`` x that length (never one long sequence: no L x L for the
    profile batch); an architecture without an SDPA path in transformers runs eager. The sampler term is
    ``num_reqs x vocab x`` (dtype bytes + :data:`SAMPLER_BYTES_PER_LOGIT`), new from 0.17 or with
    ``flashinfer_sampler``. The logged peak is the larger of the two plus, from v0.21, the CUDA-graph estimate
    (``cudagraph_bytes``: the logged one; None counts none). ``tensor_parallel_size``: one rank's shard of the
    layer (the sampler sees the whole vocabulary: the logits are gathered). Dense decoders only: a config with experts
    (``num_experts``, ``num_local_experts``, ``n_routed_experts``) is refused, because transformers' expert loop
    is not vLLM's fused MoE kernel.
    """
    from vramlab.serving.vllm_memory import estimate_activation_bytes
    from vramlab.vram.dryrun import dry_run

    cfg = load_config(config)
    _check_count("max_num_batched_tokens", max_num_batched_tokens)
    _check_count("max_num_seqs", max_num_seqs)
    if dtype not in _DTYPE_BYTES:
        raise ValueError(f"`dtype` {dtype!r} is not one of {', '.join(_DTYPE_BYTES)}.")
    release = vllm_release(vllm_version)
    name = str(cfg.get("_name", "custom"))
    if any(cfg.get(k) for k in ("num_experts", "num_local_experts", "n_routed_experts")):
        raise ValueError(f"`config` {name!r} is a mixture of experts: the dry run follows transformers' expert loop, "
                         "not vLLM's fused MoE kernel; use a dense model.")
    vocab = _positive_int(cfg, "vocab_size")
    one_layer = dict(cfg)
    one_layer["num_hidden_layers"] = 1
    tp = _check_count("tensor_parallel_size", tensor_parallel_size)
    if tp > 1:       # one rank's shard: heads and MLP split, K/V heads replicated below one per rank
        for key in ("num_attention_heads", "intermediate_size"):
            if one_layer.get(key):
                one_layer[key] = max(1, int(one_layer[key]) // tp)
        if one_layer.get("num_key_value_heads"):
            one_layer["num_key_value_heads"] = max(1, int(one_layer["num_key_value_heads"]) // tp)
        if not one_layer.get("head_dim"):
            one_layer["head_dim"] = cfg.shape.head_dim
    for key in ("layer_types", "mlp_only_layers"):   # per-layer lists must match the one layer left
        if isinstance(one_layer.get(key), list):
            one_layer[key] = one_layer[key][:1]
    num_reqs = min(max_num_batched_tokens, max_num_seqs)
    per_req = -(-max_num_batched_tokens // num_reqs)
    trace = dry_run(one_layer, num_reqs, per_req, dtype=dtype, attn_implementation="sdpa", gpu=gpu, allow_longer=True)
    first_head = next((e["i"] for e in trace.events if ".lm_head" in e["module"]), len(trace.events))
    live = 0
    best, where = 0, {"module": "", "op": ""}
    for e in trace.events[:first_head]:
        if e["category"] == "activations":
            live += e["bytes"]
            if live > best:
                best, where = live, e
    per_logit = SAMPLER_BYTES_PER_LOGIT["new" if (release >= SAMPLER_NEW_FROM or flashinfer_sampler) else "old"]
    sampler = num_reqs * vocab * (_DTYPE_BYTES[dtype] + per_logit)
    graphs = int(cudagraph_bytes or 0) if release >= CUDAGRAPH_COUNTED_FROM else 0
    formula = estimate_activation_bytes(cfg, max_num_batched_tokens, max_num_seqs)
    module = where["module"].split(".", 1)[-1] if "." in where["module"] else where["module"]
    return ProfileRunPeak(name, max_num_batched_tokens, max_num_seqs, dtype, best, sampler, formula,
                          module, where["op"], trace.seconds, f"{release[0]}.{release[1]}", graphs,
                          trace.attn_implementation)


def profile_run_table(models=("smollm2-135m", "qwen3-0.6b", "mistral-7b", "llama-3.1-8b", "qwen3-8b"),
                      max_num_batched_tokens: int = 8192, max_num_seqs: int = 256) -> str:
    """A small text table: dry run (forward, sampler, total) beside the formula, MiB."""
    lines = [f"{'model':<14} {'forward':>9} {'sampler':>9} {'dry run':>9} {'formula':>9}   forward peak at",
             f"{'':<14} {'MiB':>9} {'MiB':>9} {'MiB':>9} {'MiB':>9}"]
    for m in models:
        lines.append(profile_run_peak(m, max_num_batched_tokens, max_num_seqs).row())
    return "\n".join(lines)


__all__ = ["ProfileRunPeak", "profile_run_peak", "profile_run_table", "vllm_release", "PROFILE_RUN_SOURCES",
           "SAMPLER_BYTES_PER_LOGIT"]
