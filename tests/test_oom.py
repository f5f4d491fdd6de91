"""diagnose() on logs of every class (at least two per class), wrapped and prefixed lines, crashes after
warnings, and the fixes it proposes. Some LOGS entries are built with vramlab's own message functions (they
check that diagnose reads what the model prints, which is circular as evidence); PUBLIC_LOGS are verbatim from
public issue threads and are the independent check for the start-up kinds."""

from __future__ import annotations

import pytest

from vramlab.serving.kvcache import GiB
from vramlab.serving.triage import CRASH_KINDS, FIXES, KINDS, diagnose, normalize_log
from vramlab.vram.oom_message import oom_verdict
from vramlab.serving.paged import burst, simulate
from vramlab.serving.vllm_memory import check_kv_cache, free_memory_message

V0_WARNING = ("WARNING 05-14 09:12:44 scheduler.py:1057] Sequence group 0 is preempted by PreemptionMode.RECOMPUTE "
              "mode because there is not enough KV cache space. This can affect the end-to-end performance. Increase "
              "gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
              "total_num_cumulative_preemption=1")
TORCH_OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
             "23.99 GiB of which 1.10 GiB is free. Including non-PyTorch memory, this process has 22.88 GiB memory in "
             "use. Of the allocated memory 21.20 GiB is allocated by PyTorch, and 1.20 GiB is reserved by PyTorch but "
             "unallocated. If reserved but unallocated memory is large try setting "
             "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.")

LOGS = {
    "startup_free_memory": [
        "ValueError: " + free_memory_message(int(13.2 * GiB), int(79.19 * GiB), 0.9),
        "(EngineCore pid=812) ERROR 09-02 11:04:51 [core.py:708] ValueError: Free memory on device (5.61/14.56 GiB)\n"
        "(EngineCore pid=812) ERROR 09-02 11:04:51 [core.py:708] on startup is less than desired GPU memory "
        "utilization (0.92, 13.4 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.",
    ],
    "startup_kv_capacity": [
        # the troubleshooting article (vLLM issue #38516), a later release's "model's"
        "ValueError: To serve at least one request with the model's max seq len (40960), (5.62 GiB KV cache is "
        "needed, which is larger than the available KV cache memory (4.89 GiB). Based on the available memory, the "
        "estimated maximum model length is 35600. Try increasing `gpu_memory_utilization` or decreasing "
        "`max_model_len` when initializing the engine.",
        # the pinned line, format_gib ("8.0"), with a log prefix
        "(EngineCore_DP0 pid=77) ERROR 11-03 08:00:01 [core.py:843] ValueError: "
        + check_kv_cache("llama-3.1-8b", 65536, 6 * GiB).message,
        # an older release, "{:.2f}" ("8.00")
        "ValueError: " + check_kv_cache("llama-3.1-8b", 65536, 6 * GiB, wording="old").message,
        # the FlashInfer report, wrapped and without "(" before the needed GiB
        "ValueError: To serve at least one request with the model's max seq len (100352),\n3.21 GiB KV cache is "
        "needed, which is larger than the available KV cache memory\n(3.06 GiB). Try increasing "
        "`gpu_memory_utilization` ... or decreasing `max_model_len` ...",
        # V0 wording
        "ValueError: The model's max seq len (32768) is larger than the maximum number of tokens that can be stored "
        "in KV cache (7344). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing "
        "the engine.",
    ],
    "no_cache_blocks": [
        "ValueError: " + check_kv_cache("qwen3-8b", 40960, 0).message,
        "[rank0]: ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
        "when initializing the engine.",
    ],
    "engine_dead": [
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the "
        "root cause.",
        "AsyncEngineDeadError: Background loop has errored already.",
    ],
    "host_oom": [
        "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.\nMemory on the node "
        "(IP: 10.0.3.7, ID: 5f2e) where the task (task ID: 3a1b, name=RayWorkerWrapper.execute_method, pid=4411, "
        "memory used=38.20GB) was running was 60.10GB / 62.80GB (0.957), which exceeds the memory usage threshold "
        "of 0.95.",
        "[Tue Jul  1 04:24:40 2025] Out of memory: Killed process 2214 (python3) total-vm:91234560kB, "
        "anon-rss:60123456kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:120000kB oom_score_adj:0",
        "[ 8123.456789] python3 invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0\n"
        "[ 8123.456912] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,task=python3,"
        "pid=2214,uid=1000",
    ],
    "allocator_oom": [
        TORCH_OOM,
        "CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total capacity; 14.56 GiB already "
        "allocated; 3.06 MiB free; 14.70 GiB reserved in total by PyTorch)",
    ],
    "cuda_error_oom": [
        "RuntimeError: CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported at some other "
        "API call, so the stacktrace below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1",
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, "
        "unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5\nncclUnhandledCudaError: "
        "Call to CUDA function failed.\nLast error:\nCuda failure 'out of memory'",
        "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
    ],
    "kv_preemption": [
        V0_WARNING,
        "WARNING 02-11 17:30:02 [scheduler.py:1560] Sequence group chatcmpl-9f2 is preempted by "
        "PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can affect the end-to-end "
        "performance. Increase gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
        "total_num_cumulative_preemption=3501",
    ],
}


def test_every_class_has_at_least_two_real_format_logs():
    assert set(LOGS) == set(KINDS) - {"unknown"}
    assert all(len(v) >= 2 for v in LOGS.values())


@pytest.mark.parametrize("kind,text", [(k, t) for k, ts in LOGS.items() for t in ts])
def test_every_log_is_classified(kind, text):
    assert diagnose(text).kind == kind


def test_the_seed_block_manager_line_is_labelled_not_vllm():
    d = diagnose("RuntimeError: OutOfMemoryError: Unable to allocate memory for KV cache block. Requested block "
                 "size: 16, free blocks: 0")
    assert d.kind == "kv_preemption" and d.notes and "not printed by any vLLM release" in d.notes[0]


def test_startup_numbers_are_read_in_both_gib_formats():
    d = diagnose(LOGS["startup_kv_capacity"][0])
    assert d.details == {"max_model_len": 40960, "needed_gib": 5.62, "available_gib": 4.89,
                         "estimated_max_model_len": 35600}
    assert d.fixes[0].action.startswith("lower --max-model-len") and all(f.needs_restart for f in d.fixes)
    new, old = diagnose(LOGS["startup_kv_capacity"][1]), diagnose(LOGS["startup_kv_capacity"][2])
    assert "(8.0 GiB" in LOGS["startup_kv_capacity"][1] and "(8.00 GiB" in LOGS["startup_kv_capacity"][2]
    assert new.details["needed_gib"] == old.details["needed_gib"] == 8.0
    assert new.details["available_gib"] == old.details["available_gib"] == 6.0
    wrapped = diagnose(LOGS["startup_kv_capacity"][3])
    assert wrapped.details == {"max_model_len": 100352, "needed_gib": 3.21, "available_gib": 3.06}
    assert diagnose(LOGS["startup_kv_capacity"][4]).details == {"max_model_len": 32768, "kv_cache_tokens": 7344}


def test_free_memory_numbers():
    d = diagnose(LOGS["startup_free_memory"][1])
    assert d.details == {"free_gib": 5.61, "total_gib": 14.56, "gpu_memory_utilization": 0.92, "requested_gib": 13.4}
    assert "nvidia-smi" in d.fixes[0].action


def test_wrapped_allocator_message_is_read():
    wrapped = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity "
               "of 8.00 GiB of which 0 bytes is free. Of the allocated memory 5.51 GiB is allocated by PyTorch, and "
               "2.40 GiB is reserved by\nPyTorch but unallocated. If reserved but unallocated memory is large try "
               "setting\nPYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.")
    d = diagnose(wrapped)
    assert d.details["verdict"] == "fragmentation" and "expandable_segments" in d.fixes[0].action


def test_a_crash_after_preemption_warnings_is_the_crash():
    log = "\n".join([V0_WARNING] * 3 + [TORCH_OOM])
    d = diagnose(log)
    assert d.kind == "allocator_oom" and d.details["verdict"] == "shortage"
    assert diagnose("\n".join([V0_WARNING, LOGS["cuda_error_oom"][1]])).kind == "cuda_error_oom"
    assert set(CRASH_KINDS) == set(KINDS) - {"kv_preemption", "unknown"}


def test_verdict_accounts_for_free_memory():
    assert oom_verdict(2 * GiB, 30 * GiB, 0) == "cap"
    assert oom_verdict(2 * GiB, GiB, 3 * GiB) == "fragmentation"
    assert oom_verdict(2 * GiB, GiB, GiB) == "shortage"
    assert oom_verdict(None, GiB, GiB) is None and oom_verdict(GiB, None, None) is None
    capped = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
              "of 79.15 GiB of which 30.12 GiB is free. Including non-PyTorch memory, this process has 48.00 GiB "
              "memory in use. Of the allocated memory 47.50 GiB is allocated by PyTorch, and 10.00 MiB is reserved "
              "by PyTorch but unallocated.")
    d = diagnose(capped)
    assert d.details["verdict"] == "cap" and "per-process cap" in d.fixes[0].action and d.fixes[0].live


def test_cuda_error_oom_does_not_offer_expandable_segments():
    d = diagnose(LOGS["cuda_error_oom"][0])
    assert not any("expandable_segments" in f.action for f in d.fixes)
    assert d.fixes[0].action.startswith("lower --gpu-memory-utilization")


def test_engine_dead_wins_over_the_oom_that_killed_it():
    log = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB.\n"
           "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.")
    d = diagnose(log)
    assert d.kind == "engine_dead" and d.fixes[0].action.startswith("restart") and not d.live_fixes


def test_preemption_has_a_live_fix_and_startup_errors_win():
    d = diagnose(LOGS["kv_preemption"][1])
    assert d.details == {"total_num_cumulative_preemption": 3501}
    assert d.live_fixes and d.live_fixes[0].action.startswith("send less") and "--swap-space" in d.cause
    startup = LOGS["startup_kv_capacity"][0] + "\nRuntimeError: Engine core initialization failed."
    assert diagnose(startup).kind == "startup_kv_capacity"


def test_simulator_v0_warnings_are_read_as_preemption():
    warnings = simulate(150, burst(32, seed=0)).v0_warnings()
    assert diagnose("\n".join(warnings)).kind == "kv_preemption"


def test_normalize_log_joins_wraps_and_strips_prefixes():
    text = "(EngineCore pid=1) ERROR 07-01 04:24:37 [core.py:1195] a\n(EngineCore pid=1) ERROR 07-01 04:24:37 " \
           "[core.py:1195]   b\n\n c"
    assert normalize_log(text) == "a b c"


def test_unknown_and_bad_input():
    d = diagnose("ImportError: No module named vllm")
    assert d.kind == "unknown" and d.fixes
    with pytest.raises(ValueError, match="`text`"):
        diagnose(None)
    assert set(FIXES) == set(KINDS)
    assert "startup_kv_capacity" in str(diagnose(LOGS["startup_kv_capacity"][0]))


@pytest.mark.parametrize("args,field", [(("2 GiB", 1, 1), "tried_bytes"), ((1, -1, 1), "free_bytes"),
                                        ((1, 1, True), "reserved_unallocated_bytes")])
def test_oom_verdict_bad_input(args, field):
    with pytest.raises(ValueError, match=f"`{field}`"):
        oom_verdict(*args)


def test_diagnose_verdict_agrees_with_report_for_every_format():
    """diagnose() and OOMReport.verdict give one answer for every PyTorch message format; the PyTorch 1.0-1.3
    message ('9.28 GiB free; 4.68 MiB cached') predates per-process caps (1.8), so it is not called a cap."""
    from test_vram_parse import CAPPED, CURRENT, OLD_GB, OLDER, OLDEST, SEED_OOM, TORCH_21
    from vramlab.vram import parse_oom_message

    seen = set()
    for msg in (SEED_OOM, CURRENT, TORCH_21, CAPPED, OLDER, OLDEST, OLD_GB, TORCH_OOM):
        report = parse_oom_message(msg)
        d = diagnose(msg)
        assert d.kind == "allocator_oom"
        assert d.details.get("verdict") == report.verdict, msg
        seen.add(report.format)
    assert {"current", "older", "oldest"} <= seen
    assert diagnose(OLDEST).details.get("verdict") != "cap"


def test_diagnose_pytorch_context():
    d = diagnose(TORCH_OOM, context="pytorch")
    text = " ".join(f.action for f in d.fixes)
    assert "batch" in text and "--" not in text and "vLLM" not in d.cause
    with pytest.raises(ValueError, match="`context`"):
        diagnose(TORCH_OOM, context="training")


# Verbatim from public vLLM issue threads (copied as posted, truncation included), so the triage is held against
# text no vramlab function produced. Each entry: (thread, kind, text, the numbers diagnose must read).
PUBLIC_LOGS = [
    ("vllm-project/vllm#25837", "startup_free_memory",
     "(EngineCore_DP0 pid=17374) ERROR 09-28 15:47:24 [core.py:718] ValueError: Free memory on device (3.22/4.0 GiB) "
     "on startup is less than desired GPU memory utilization (0.9, 3.6 GiB). Decrease GPU memory utilization or "
     "reduce GPU memory used by other processes.",
     {"free_gib": 3.22, "total_gib": 4.0, "gpu_memory_utilization": 0.9, "requested_gib": 3.6}),
    ("vllm-project/vllm#23192", "startup_free_memory",
     "(EngineCore_0 pid=1810465) ERROR 09-03 11:03:37 [core.py:712] ValueError: Free memory on device "
     "(7.34/139.72 GiB) on startup is less than desired GPU memory utilization (0.9, 125.75 GiB). Decrease GPU "
     "memory utilization or reduce GPU memory used by other processes.",
     {"free_gib": 7.34, "total_gib": 139.72, "gpu_memory_utilization": 0.9, "requested_gib": 125.75}),
    # a later release names the device (pytorch/pytorch#175666, its title, as posted)
    ("pytorch/pytorch#175666", "startup_free_memory",
     "[release 2.11][vllm] Distributed failures - free memory on device cuda:0 (19.77/22.05 GiB) on startup is less "
     "than desired GPU memory utilization (0.9, 19.84 GiB)",
     {"free_gib": 19.77, "total_gib": 22.05, "gpu_memory_utilization": 0.9, "requested_gib": 19.84}),
    ("vllm-project/vllm#10439", "no_cache_blocks",
     "vllm-1  | ERROR 11-18 18:07:28 engine.py:366] ValueError: No available memory for the cache blocks. Try "
     "increasing `gpu_memory_utilization` when initializing the engine.", {}),
    ("vllm-project/vllm#27508", "no_cache_blocks",
     "(EngineCore_DP0 pid=223840) ERROR 10-25 13:08:43 [core.py:708]     raise ValueError(\"No available memory for "
     "the cache blocks. \"\n(EngineCore_DP0 pid=223840) ERROR 10-25 13:08:43 [core.py:708]                      "
     "\"Try increasing `gpu_memory_utilization` when \"", {}),
    # vLLM 0.15.2rc1 (format_gib "24.0", "models's", docs link), excerpt ends where the post was cut
    ("vllm-project/vllm#34076", "startup_kv_capacity",
     "(EngineCore_DP0 pid=1094) ValueError: To serve at least one request with the models's max seq len (262144), "
     "(24.0 GiB KV cache is needed, which is larger than the available KV cache memory (3.18 GiB). Based on the "
     "available memory, the estimated maximum model length is 34736. Try increasing `gpu_memory_utilization` or "
     "decreasing `max_model_len` when initializing the engine. See "
     "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for mo",
     {"max_model_len": 262144, "needed_gib": 24.0, "available_gib": 3.18, "estimated_max_model_len": 34736}),
    ("vllm-project/vllm#27508", "startup_kv_capacity",
     "(EngineCore_DP0 pid=6880) ValueError: To serve at least one request with the models's max seq len (131072), "
     "(4.54 GiB KV cache is needed, which is larger than the available KV cache memory (1.71 GiB). Based on the "
     "available memory, the estimated maximum model lengt",
     {"max_model_len": 131072, "needed_gib": 4.54, "available_gib": 1.71}),
    # the later "model's" wording, wrapped mid-word by the terminal (SergiioB/intel-arc-pro-b70-inference-cookbook#4)
    ("SergiioB/intel-arc-pro-b70-inference-cookbook#4", "startup_kv_capacity",
     "(EngineCore pid=316) ValueError: To serve at least one request with the model's max seq len (100000), "
     "(4.26 GiB KV cach\ne is needed, which is larger than the available KV cache memory (4.25 GiB). Based on the avai",
     {"max_model_len": 100000, "available_gib": 4.25}),
]


@pytest.mark.parametrize("thread,kind,text,numbers", PUBLIC_LOGS, ids=[f"{t[0]}-{t[1]}" for t in PUBLIC_LOGS])
def test_verbatim_public_logs(thread, kind, text, numbers):
    d = diagnose(text)
    assert d.kind == kind, thread
    for key, value in numbers.items():
        assert d.details.get(key) == value, (thread, key)


def test_public_logs_cover_every_startup_kind():
    assert {k for _, k, _, _ in PUBLIC_LOGS} == {"startup_free_memory", "no_cache_blocks", "startup_kv_capacity"}
