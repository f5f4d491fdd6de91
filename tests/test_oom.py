"""diagnose() on every error text quoted in the seeds, and the fixes it proposes."""

from __future__ import annotations

import pytest

from vramlab.oom import FIXES, KINDS, diagnose

# Verbatim from the seeds (000-004).
SEED_TEXTS = {
    "startup_kv_capacity": [
        # 002 / 000 (vLLM issue #38516)
        "ValueError: To serve at least one request with the model's max seq len (40960), (5.62 GiB KV cache is "
        "needed, which is larger than the available KV cache memory (4.89 GiB). Based on the available memory, the "
        "estimated maximum model length is 35600. Try increasing `gpu_memory_utilization` or decreasing "
        "`max_model_len` when initializing the engine.",
        # 000 (FlashInfer report), with its line breaks
        "ValueError: To serve at least one request with the model's max seq len (100352),\n3.21 GiB KV cache is "
        "needed, which is larger than the available KV cache memory\n(3.06 GiB). Try increasing "
        "`gpu_memory_utilization` ... or decreasing `max_model_len` ...",
        # 000 (V0-era wording)
        "ValueError: The model's max seq len (<X>) is larger than the maximum number of tokens that can be stored "
        "in KV cache (<Y>). Try increasing gpu_memory_utilization or decreasing max_model_len when initializing "
        "the engine.",
        # 002 TL;DR fragment
        "ValueError: To serve at least one request with the model's max seq len ...",
    ],
    "no_cache_blocks": ["ValueError: No available memory for the cache blocks"],
    "allocator_oom": [
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
        "23.99 GiB of which 1.10 GiB is free. ... If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ...",
    ],
    "engine_dead": [
        "EngineDeadError",
        "AsyncEngineDeadError: Background loop has errored already",
        "EngineCore ... died",
    ],
    "block_manager_exhausted": [
        "RuntimeError: OutOfMemoryError: Unable to allocate memory for KV cache block. Requested block size: 16, "
        "free blocks: 0",
    ],
}


@pytest.mark.parametrize("kind,text", [(k, t) for k, ts in SEED_TEXTS.items() for t in ts])
def test_every_seed_text_is_classified(kind, text):
    assert diagnose(text).kind == kind


def test_startup_numbers_are_read():
    d = diagnose(SEED_TEXTS["startup_kv_capacity"][0])
    assert d.details == {"max_model_len": 40960, "needed_gib": 5.62, "available_gib": 4.89,
                         "estimated_max_model_len": 35600}
    assert d.fixes[0].action.startswith("lower --max-model-len")
    assert all(f.needs_restart for f in d.fixes)


def test_allocator_oom_has_live_fixes_first_unless_fragmented():
    d = diagnose(SEED_TEXTS["allocator_oom"][0])
    assert d.details["tried_bytes"] == 2 << 30 and d.fixes[0].live and d.live_fixes
    assert any("expandable_segments" in f.action and f.when == "one restart, then durable" for f in d.fixes)
    frag = diagnose("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total "
                    "capacity of 8.00 GiB of which 0 bytes is free. Of the allocated memory 5.51 GiB is allocated "
                    "by PyTorch, and 2.40 GiB is reserved by PyTorch but unallocated.")
    assert frag.details["verdict"] == "fragmentation" and "expandable_segments" in frag.fixes[0].action


def test_engine_dead_wins_over_the_oom_that_killed_it():
    log = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB.\n"
           "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.")
    d = diagnose(log)
    assert d.kind == "engine_dead" and d.fixes[0].action.startswith("restart") and d.fixes[0].needs_restart
    assert not d.live_fixes


def test_block_pressure_has_a_live_fix_and_startup_errors_win():
    d = diagnose(SEED_TEXTS["block_manager_exhausted"][0])
    assert d.live_fixes and d.live_fixes[0].action.startswith("send less")
    startup = SEED_TEXTS["startup_kv_capacity"][0] + "\nRuntimeError: Engine core initialization failed."
    assert diagnose(startup).kind == "startup_kv_capacity"


def test_unknown_and_bad_input():
    d = diagnose("ImportError: No module named vllm")
    assert d.kind == "unknown" and d.fixes
    with pytest.raises(ValueError, match="text"):
        diagnose(None)
    assert set(FIXES) == set(KINDS)
    assert "startup_kv_capacity" in str(diagnose(SEED_TEXTS["startup_kv_capacity"][0]))


def test_startup_numbers_from_a_line_wrapped_message_without_parenthesis():
    """Seed 000 quotes the FlashInfer case wrapped over lines and without '(' before the needed GiB."""
    from pathlib import Path

    seed = (Path(__file__).resolve().parents[2] / "shared" / "seeds" / "000_a8cc9e9fef2fa39c.txt")
    text = ("ValueError: To serve at least one request with the model's max seq len (100352),\n"
            "3.21 GiB KV cache is needed, which is larger than the available KV cache memory\n"
            "(3.06 GiB). Try increasing `gpu_memory_utilization` ... or decreasing `max_model_len` ...")
    if seed.is_file():
        assert text.split("\n")[1] in seed.read_text()
    d = diagnose(text)
    assert d.kind == "startup_kv_capacity"
    assert d.details == {"max_model_len": 100352, "needed_gib": 3.21, "available_gib": 3.06}
