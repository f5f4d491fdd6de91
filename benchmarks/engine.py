"""The real vLLM engine against our re-implementation, measured side by side in one run.

Run: python benchmarks/engine.py [--timeout 900]   (needs the engine's venv: `make vllm`)

One worker process (vramlab.serving.engine.start_many, engine core in-process) starts, one after the other:
1. SmolLM2-135M with 1 GiB of KV cache: the engine's start-up time (vLLM's imports are printed apart);
2. the same with max_model_len=65536: the engine's time to its start-up error ("To serve at least one request
   ..."), against vramlab.serving.vllm_memory.check_kv_cache's time to the same verdict, as a ratio;
3. a burst on 3 blocks of 128 tokens: the engine's time for the burst, against vramlab.serving.paged.simulate's
   on the same requests, blocks, block size, max_num_seqs and token budget (with both preemption counts).
"""

from __future__ import annotations

import argparse
import re
import time

from vramlab.serving import engine, paged
from vramlab.serving.vllm_memory import check_kv_cache

GIB = 2**30


def _estimate(message: str | None) -> str:
    m = re.search(r"estimated maximum model length is (\d{1,12})", message or "")
    return m.group(1) if m else "?"


def _timed(fn, repeat: int = 200):
    t0 = time.perf_counter()
    for _ in range(repeat):
        out = fn()
    return out, (time.perf_counter() - t0) / repeat


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds for the whole engine run")
    args = parser.parse_args()
    ok_cfg = engine.EngineConfig(max_model_len=2048, kv_cache_space_gib=1)
    long_cfg = engine.EngineConfig(max_model_len=65536, kv_cache_space_gib=1)
    burst_cfg = engine.EngineConfig(max_model_len=256, num_gpu_blocks_override=3, kv_cache_space_gib=1, max_num_seqs=3,
                                    max_num_batched_tokens=1024)
    requests = [engine.Request(tuple(range(1000 + 7 * i, 1120 + 7 * i)), 12) for i in range(3)]
    t0 = time.perf_counter()
    runs = engine.start_many([ok_cfg, long_cfg, burst_cfg], bursts=[None, None, requests], timeout_s=args.timeout)
    wall = time.perf_counter() - t0
    ok, long_run, burst = runs
    print(f"engine: {ok.where}; one worker process, {wall:.1f} s in all, of which `import vllm` "
          f"{ok.import_s or 0:.1f} s")
    for run in runs:
        if run.error_type in ("EngineTimeout", "EngineExited"):
            print(f"engine run did not finish: {run.error}")
            return
    print(f"1. start-up (SmolLM2-135M, 1 GiB KV): {ok.start_s:.1f} s; it printed "
          f"{ok.startup.get('kv_cache_device', '?')} KV cache size: {ok.startup.get('kv_cache_tokens', 0):,} tokens")

    verdict, ours = _timed(lambda: check_kv_cache("smollm2-135m", 65536, 1 * GIB, block_size=128))
    print(f"2. start-up error: engine {long_run.start_s:.1f} s to its error, our check_kv_cache {ours * 1e6:.0f} us "
          f"(ratio {long_run.start_s / ours:,.0f}x)")
    ours_msg = str(getattr(verdict, "message", verdict))
    same = "the same message" if ours_msg == long_run.error else "messages differ"
    print(f"   {same}; estimated maximum model length: engine "
          f"{_estimate(long_run.error)}, ours {getattr(verdict, 'estimated_max_model_len', '?')}")

    sim_requests = [paged.Request(i, len(r.prompt_token_ids), r.max_tokens) for i, r in enumerate(requests)]
    cfg = burst.startup
    sim, sim_s = _timed(lambda: paged.simulate(cfg["num_blocks"], sim_requests, block_size=cfg["block_size"],
                                               max_num_seqs=cfg["max_num_seqs"],
                                               max_num_batched_tokens=cfg["max_num_batched_tokens"]), repeat=50)
    print(f"3. burst ({len(requests)} requests x {len(requests[0].prompt_token_ids)}+{requests[0].max_tokens} tokens, "
          f"{cfg['num_blocks']} blocks of {cfg['block_size']}): engine {burst.burst_s:.1f} s, "
          f"{burst.metrics['num_preemptions']} preemptions {burst.metrics.get('request_num_preemptions')}; "
          f"paged.simulate {sim_s * 1e3:.2f} ms, {sim.preemptions} preemptions (ratio {burst.burst_s / sim_s:,.0f}x)")


if __name__ == "__main__":
    main()
