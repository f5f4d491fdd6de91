"""Every vLLM message vramlab prints, held against a copy of the format string in the vLLM file it
comes from (copied by hand from the pinned source; see vramlab.serving.vllm_memory.PINNED). The copies here
are independent of the module's constants, so a typo on either side fails."""

from __future__ import annotations

import re

import pytest

from vramlab.serving.kvcache import GiB
from vramlab.serving.paged import burst, simulate
from vramlab.serving.vllm_memory import PINNED, check_kv_cache, cpu_plan, free_memory_message, plan

# (file @ commit, the format string as written in that file: f-string pieces joined, or a %-format)
SOURCE = {
    "no_cache_blocks": ("vllm/v1/core/kv_cache_utils.py",
                        "No available memory for the cache blocks. "
                        "Try increasing `gpu_memory_utilization` when initializing the engine "
                        "(this flag also controls CPU memory reservation on the CPU "
                        "backend, despite its name). "
                        "See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ "
                        "for more details."),
    "one_request": ("vllm/v1/core/kv_cache_utils.py",
                    "To serve at least one request with the model's max seq len "
                    "({max_model_len}), ({format_gib(needed_memory)} GiB KV "
                    "cache is needed, which is larger than the available KV cache "
                    "memory ({format_gib(available_memory)} GiB). {estimated_msg}"
                    "Try increasing `gpu_memory_utilization` (which also controls "
                    "CPU memory on the CPU backend) or decreasing `max_model_len` "
                    "when initializing the engine. "
                    "See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ "
                    "for more details."),
    "estimated": ("vllm/v1/core/kv_cache_utils.py",
                  "Based on the available memory, the estimated maximum model length is {estimated_max_len}. "),
    "format_gib_no_cache_blocks": ("vllm/v1/core/kv_cache_utils.py@001cabc1",
                                   "No available memory for the cache blocks. "
                                   "Try increasing `gpu_memory_utilization` when initializing the engine. "
                                   "See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ "
                                   "for more details."),
    "format_gib_one_request": ("vllm/v1/core/kv_cache_utils.py@001cabc1",
                               "To serve at least one request with the models's max seq len "
                               "({max_model_len}), ({format_gib(needed_memory)} GiB KV "
                               "cache is needed, which is larger than the available KV cache "
                               "memory ({format_gib(available_memory)} GiB). {estimated_msg}"
                               "Try increasing `gpu_memory_utilization` or decreasing `max_model_len` "
                               "when initializing the engine. "
                               "See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ "
                               "for more details."),
    "old_no_cache_blocks": ("vllm/v1/core/kv_cache_utils.py@bbf906a8",
                            "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
                            "when initializing the engine."),
    "old_one_request": ("vllm/v1/core/kv_cache_utils.py@bbf906a8",
                        "To serve at least one request with the models's max seq len "
                        "({max_model_len}), ({needed_memory/GiB_bytes:.2f} GiB KV "
                        "cache is needed, which is larger than the available KV cache "
                        "memory ({available_memory/GiB_bytes:.2f} GiB). "
                        "{estimated_msg} "
                        "Try increasing `gpu_memory_utilization` or decreasing "
                        "`max_model_len` when initializing the engine."),
    "free_memory": ("vllm/v1/worker/utils.py (request_memory)",
                    "Free memory on device {init_snapshot.device_} "
                    "({format_gib(init_snapshot.free_memory)}/"
                    "{format_gib(init_snapshot.total_memory)} GiB) on startup "
                    "is less than desired GPU memory utilization "
                    "({cache_config.gpu_memory_utilization}, "
                    "{format_gib(requested_memory)} GiB). Decrease GPU memory "
                    "utilization or reduce GPU memory used by other processes."),
    "cudagraph_profiling": ("vllm/v1/worker/gpu_worker.py",
                            "CUDA graph memory profiling is enabled (default since "
                            "v0.21.0). The current --gpu-memory-utilization=%.4f is "
                            "equivalent to --gpu-memory-utilization=%.4f without "
                            "CUDA graph memory profiling. To maintain the same "
                            "effective KV cache size as before, increase "
                            "--gpu-memory-utilization to %.4f. To disable, set "
                            "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0."),
    "available": ("vllm/v1/worker/gpu_worker.py", "Available KV cache memory: %s GiB"),
    "kv_capacity": ("vllm/v1/core/kv_cache_utils.py",
                    "%s KV cache size: %s tokens, "
                    "Maximum concurrency for %s tokens per request: %.2fx"),
    "override": ("vllm/v1/core/kv_cache_utils.py",
                 "Overriding num_gpu_blocks=%d with num_gpu_blocks_override=%d"),
    # before 0.32.0 (public v0.21+ logs): two lines
    "cache_size": ("vllm/v1/core/kv_cache_utils.py (older releases)", "GPU KV cache size: %s tokens"),
    "concurrency": ("vllm/v1/core/kv_cache_utils.py (older releases)",
                    "Maximum concurrency for %s tokens per request: %.2fx"),
    "v0_preemption": ("vllm/core/scheduler.py (V0, _preempt)",
                      "Sequence group %s is preempted by %s mode because there is "
                      "not enough KV cache space. This can affect the end-to-end "
                      "performance. Increase gpu_memory_utilization or "
                      "tensor_parallel_size to provide more KV cache memory. "
                      "total_num_cumulative_preemption=%d"),
}


def _regex(fmt: str) -> re.Pattern:
    """A regex for the format: literal text exact, each {field} / %-conversion any non-empty text."""
    parts = re.split(r"(\{[^{}]*\}|%[-+ #0]*\d*(?:\.\d+)?[sdfx])", fmt)
    body = "".join(".*?" if (p.startswith("{") or (p.startswith("%") and len(p) > 1)) else re.escape(p)
                   for p in parts)
    return re.compile(body, flags=re.DOTALL)


def _matches(key: str, text: str) -> bool:
    return _regex(SOURCE[key][1]).fullmatch(text) is not None


def test_the_source_commits_are_the_pinned_ones():
    """A format with a commit is one of PINNED.older; one without comes from a PINNED (pinned-line) file."""
    for _, (where, _fmt) in SOURCE.items():
        path = where.split(" ")[0].split("@")[0]
        if "@" in where:
            commit = where.split("@")[1]
            assert any(k.startswith(f"{path}@{commit}") for k in PINNED.older), where
        elif path.startswith("vllm/v1/") and "scheduler" not in path and "older" not in where:
            assert path in PINNED.files, where


def test_start_up_errors_pinned_and_old():
    assert _matches("no_cache_blocks", check_kv_cache("qwen3-8b", 40960, 0).message)
    fail = check_kv_cache("qwen3-8b", 40960, int(4.89 * GiB)).message
    assert _matches("one_request", fail) and _regex(SOURCE["estimated"][1]).search(fail)
    # 1 MB left, less than the block 0.32.0 holds back for the null block: "No available memory"
    none_fits = plan("llama-3.1-8b", "L4", max_model_len=8192, weights_bytes=int(GPUS_L4 * 0.92) - 1_000_000,
                     non_torch_bytes=0, activation_bytes=0, enforce_eager=True).check.message
    assert _matches("no_cache_blocks", none_fits) and "estimated" not in none_fits
    # a release before the reservation (wording="format_gib") refused it with the one-request message
    old_fits = plan("llama-3.1-8b", "L4", max_model_len=8192, weights_bytes=int(GPUS_L4 * 0.92) - 1_000_000,
                    non_torch_bytes=0, activation_bytes=0, enforce_eager=True, wording="format_gib").check.message
    assert _matches("format_gib_one_request", old_fits) and "estimated" not in old_fits
    assert _matches("format_gib_no_cache_blocks", check_kv_cache("qwen3-8b", 40960, 0, wording="format_gib").message)
    assert _matches("format_gib_one_request",
                    check_kv_cache("qwen3-8b", 40960, int(4.89 * GiB), wording="format_gib").message)
    assert _matches("old_no_cache_blocks", check_kv_cache("qwen3-8b", 40960, 0, wording="old").message)
    assert _matches("old_one_request", check_kv_cache("qwen3-8b", 40960, int(4.89 * GiB), wording="old").message)


GPUS_L4 = plan("qwen3-0.6b", "L4", max_model_len=16).gpu.total_bytes


def test_free_memory_error():
    assert _matches("free_memory", free_memory_message(10 * GiB, 15 * GiB, 0.92))
    assert _matches("free_memory", plan("qwen3-0.6b", "T4", max_model_len=4096, free_bytes=3 * GiB).message)


def test_start_up_log_lines():
    lines = plan("llama-3.1-8b", "H100 80GB", max_model_len=32768).log_lines()
    assert _matches("available", lines[0]) and _matches("cudagraph_profiling", lines[1])
    assert _matches("kv_capacity", lines[2]) and lines[2].startswith("GPU KV cache size: ")
    old = plan("llama-3.1-8b", "H100 80GB", max_model_len=32768, wording="old").log_lines()
    assert _matches("cache_size", old[2]) and _matches("concurrency", old[3])
    cpu = cpu_plan("smollm2-135m", 2048, 1, num_gpu_blocks_override=17).log_lines()
    assert cpu == ["Overriding num_gpu_blocks=364 with num_gpu_blocks_override=17",
                   "CPU KV cache size: 2,176 tokens, Maximum concurrency for 2,048 tokens per request: 1.06x"]
    assert _matches("override", cpu[0]) and _matches("kv_capacity", cpu[1])
    failing = plan("llama-3.1-8b", "L4", max_model_len=65536).log_lines()
    assert _matches("available", failing[0]) and _matches("one_request", failing[2][len("ValueError: "):])


def test_v0_preemption_warnings():
    res = simulate(150, burst(32, seed=0))
    warnings = res.v0_warnings()
    assert warnings and len(warnings) == -(-res.preemptions // 50)
    for w in warnings:
        assert _matches("v0_preemption", w[len("WARNING scheduler.py: "):])
        assert "PreemptionMode.RECOMPUTE mode" in w


@pytest.mark.parametrize("key", sorted(SOURCE))
def test_each_format_is_used(key):
    import inspect

    import vramlab.serving.paged
    import vramlab.serving.vllm_memory

    src = inspect.getsource(vramlab.serving.vllm_memory) + inspect.getsource(vramlab.serving.paged)
    first_words = re.split(r"[{%(]", SOURCE[key][1])[0][:30]
    assert first_words in src
