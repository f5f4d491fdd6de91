"""The vLLM labs' engine runs: live on the real engine where it is installed, else replayed from recordings.

Labs 03 and 04 start the real vLLM (:mod:`vramlab.serving.engine`). Where no engine environment exists (Colab, a
machine without ``make vllm``), :func:`runs` replays the recorded run of the same config from
``vramlab/results/vllm/`` and says where it was recorded. Recording: run a lab with ``VRAMLAB_RECORD=1`` and the engine installed
(``VRAMLAB_RECORD=1 python -m vramlab.labs execute notebooks/03_vllm_startup.ipynb notebooks/04_vllm_under_load.ipynb``):
every live run is saved there (``engine.save_run``: the engine code's fingerprint and where it ran), one file per
config and burst.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import time
from pathlib import Path
from typing import Any, Sequence

from vramlab.serving.vllm_memory import note_engine_startup

RESULTS = Path(__file__).resolve().parents[1] / "results" / "vllm"

# vllm/v1/core/kv_cache_utils.py (0.32.0), _check_enough_kv_cache_memory: the refusal's three numbers.
_REFUSAL_RE = re.compile(r"max seq len \((\d{1,9})\), \((\d{1,6}(?:\.\d{1,4})?) GiB KV cache is needed, which is "
                         r"larger than the available KV cache memory \((\d{1,6}(?:\.\d{1,4})?) GiB\)\."
                         r"(?: Based on the available memory, the estimated maximum model length is (\d{1,9})\.)?")
# vllm/v1/core/kv_cache_utils.py (0.32.0), update_kv_cache_capacity: "%s KV cache size: %s tokens, Maximum
# concurrency for %s tokens per request: %.2fx".
_CAPACITY_RE = re.compile(r"(?:GPU|CPU|XPU|TPU)(?: \+ host)? KV cache size: ([\d,]{1,15}) tokens, Maximum concurrency "
                          r"for ([\d,]{1,15}) tokens per request: (\d{1,9}\.\d{2})x")


def refusal_numbers(text: str | None) -> dict[str, Any]:
    """The numbers of vLLM's "To serve at least one request ..." refusal in ``text``: ``max_model_len`` (tokens),
    ``needed_gib``, ``available_gib`` (as printed), ``estimated_max_model_len`` (tokens, or None); {} if absent."""
    if not text or "To serve at least one request" not in text:
        return {}
    m = _REFUSAL_RE.search(text)
    if not m:
        return {}
    return {"max_model_len": int(m.group(1)), "needed_gib": float(m.group(2)), "available_gib": float(m.group(3)),
            "estimated_max_model_len": int(m.group(4)) if m.group(4) else None}


def capacity_line(log: str | None) -> str:
    """The engine's "KV cache size: N tokens, Maximum concurrency ..." line from its ``log`` ("" if none)."""
    if not log or "KV cache size" not in log:
        return ""
    m = _CAPACITY_RE.search(log)
    return m.group(0) if m else ""


def capacity_numbers(log: str | None) -> dict[str, Any]:
    """``kv_cache_tokens`` and ``max_concurrency`` as the engine printed them in ``log`` ({} if it did not start)."""
    m = _CAPACITY_RE.search(capacity_line(log))
    if not m:
        return {}
    return {"kv_cache_tokens": int(m.group(1).replace(",", "")), "max_model_len": int(m.group(2).replace(",", "")),
            "max_concurrency": float(m.group(3))}


def _key(config: Any, burst: Sequence | None, multiprocess: bool = False) -> str:
    d = dataclasses.asdict(config)
    if burst:
        d["burst"] = [[len(r.prompt_token_ids), r.max_tokens] for r in burst]
    if multiprocess:
        d["multiprocess"] = True     # the same config, its core in its own process: another log
    return json.dumps(d, sort_keys=True)


#: Set to "1", the labs' engine cells replay the recorded runs even where the engine is installed: `make test`'s
#: notebooks (tests/conftest.py), whose engine runs the live tests already hold (tests/_engine_runs.py starts it 4
#: times, in CI 16 with the grid), while CI runs labs 03 and 04 live in the browser. Issue 26's 10 minutes.
REPLAY_ENV = "VRAMLAB_REPLAY_ENGINE"


def engine_available() -> bool:
    """True when an engine environment is installed here (:func:`vramlab.serving.engine.find_python`) and
    :data:`REPLAY_ENV` does not ask for the recorded runs."""
    from vramlab.serving import engine

    if os.environ.get(REPLAY_ENV) == "1":
        return False

    try:
        engine.find_python()
    except engine.EngineNotInstalled:
        return False
    return True


def recording_path(config: Any, burst: Sequence | None = None, multiprocess: bool = False) -> Path:
    """Where the recording of ``config`` (``burst``, ``multiprocess``) lives: ``results/vllm/<model>-<hash>.json``.
    Asking is noted as planning that start-up (:func:`vramlab.serving.vllm_memory.note_engine_startup`): whether a
    recording exists, and its log, are readings of the engine's lines (unseen review #9 found lab 03's capstone
    engines by the recordings that exist)."""
    note_engine_startup(config)
    digest = hashlib.sha256(_key(config, burst, multiprocess).encode()).hexdigest()[:12]
    return RESULTS / f"{config.model}-{digest}.json"


def _save(run: Any, burst: Sequence | None, multiprocess: bool = False) -> Path:
    from vramlab.serving import engine

    RESULTS.mkdir(parents=True, exist_ok=True)
    path = engine.save_run(run, recording_path(run.config, burst, multiprocess))
    if burst:
        d = json.loads(path.read_text())
        d["burst"] = [[len(r.prompt_token_ids), r.max_tokens] for r in burst]
        path.write_text(json.dumps(d, indent=1))
    return path


def runs(configs: Sequence[Any], bursts: Sequence[Sequence | None] | None = None, live: bool | None = None,
         timeout_s: float = 900.0, multiprocess: bool = False, fallback: Sequence[Any] | None = None) -> list:
    """One :class:`vramlab.serving.engine.EngineRun` per config: live (``engine.start_many``, one worker, vLLM's
    imports paid once) where the engine is installed and ``live`` is not False, else replayed from the recording
    of the same config (a config with no recording replays the same position of ``fallback``, and says so).
    Prints one line saying which. With ``VRAMLAB_RECORD=1`` every live run is saved under :data:`RESULTS`.
    Raises ValueError (one sentence) for a config with neither an engine nor a recording."""
    from vramlab.serving import engine
    from vramlab.serving.paged import note_burst

    configs = list(configs)
    bursts = list(bursts) if bursts is not None else [None] * len(configs)
    for cfg, burst in zip(configs, bursts):   # remembered whether it runs live or replays (a capstone reads it)
        if burst:
            note_burst(getattr(cfg, "num_gpu_blocks_override", None),
                       [(len(r.prompt_token_ids), r.max_tokens) for r in burst])
        note_engine_startup(cfg)
    if live is None:
        live = engine_available()
    if live:
        t0 = time.perf_counter()
        out = engine.start_many(configs, timeout_s=timeout_s, multiprocess=multiprocess, bursts=bursts)
        print(f"Live: the real vLLM ran {len(out)} engine start(s) in {time.perf_counter() - t0:.0f} s "
              f"({out[0].where}).")
        if os.environ.get("VRAMLAB_RECORD") == "1":
            for run, burst in zip(out, bursts):
                _save(run, burst, multiprocess)
        return out
    out = []
    for i, (cfg, burst) in enumerate(zip(configs, bursts)):
        path = recording_path(cfg, burst, multiprocess)
        if not path.is_file() and fallback is not None:
            print(f"No recording of {cfg}: replaying vramlab's config in its place.")
            path = recording_path(list(fallback)[i], burst, multiprocess)
        if not path.is_file():
            raise ValueError(f"no engine here and no recording of {cfg}: run `make vllm` to install the engine, or "
                             "use one of the lab's configs.")
        out.append(engine.load_run(path))
    why = f"{REPLAY_ENV}=1 asks for them" if os.environ.get(REPLAY_ENV) == "1" else "no engine is installed here"
    print(f"Replayed: {why}, so these are recorded runs of the real vLLM ({out[0].where}).")
    return out
