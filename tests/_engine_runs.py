"""The real engine's runs for tests/test_engine.py, tests/test_engine_triage.py and (in CI) tests/test_engine_grid.py,
made ONCE per test session.

Two worker processes: :func:`vramlab.serving.engine.start_many` (engine core in-process) for this file's preempting
burst, the issue's start-up error (:data:`TOO_LONG`) and the unsupported architecture, and, with
``VRAMLAB_ENGINE_GRID=1`` (CI), the grid's start-ups and bursts too (TOO_LONG is then the grid's second start-up);
and one start with ``multiprocess=True`` for the ``(EngineCore pid=...)`` prefixes and the "Engine core
initialization failed" wrapper. Under pytest-xdist the first test process to ask makes them and saves them
(engine.save_run) in a folder of the session's pytest temporary folder; the others wait on a file lock and load them.
The grid costs about 100 s of a worker (137 s in one fresh clone's make test), so `make test` leaves it to CI to
stay under issue 26's 10 minutes.
"""

from __future__ import annotations

import fcntl
import json
import os
import random
from pathlib import Path

import pytest

from vramlab.serving import engine

# The start-up grid: (model, max_model_len, VLLM_CPU_KVCACHE_SPACE, kv_cache_dtype, num_gpu_blocks_override)
STARTUPS = [
    ("smollm2-135m", 8192, 1, "auto", None),     # starts: 364 blocks, 46,592 tokens
    ("smollm2-135m", 65536, 1, "auto", None),    # issue 25: refused, estimate 46464 (not 46592); TOO_LONG below
    ("smollm2-135m", 65536, 1, "fp8", None),     # the fp8 fix: starts (fp8 KV is accepted on an AVX-512 CPU)
    ("smollm2-135m", 2048, 1, "auto", 16),       # exactly full: 16 blocks for 16 needed, refused (0.04 GiB > 0.04)
    ("smollm2-135m", 2048, 1, "auto", 17),       # one block more: starts
    ("smollm2-135m", 8000, 1, "auto", None),     # a length that is not a multiple of 128: int(concurrency * len)
    ("qwen3-0.6b", 40960, 1, "auto", None),      # dummy weights: refused, estimate 9216
    ("qwen3-0.6b", 8192, 1, "auto", None),       # starts: 73 blocks
    ("qwen3-0.6b", 40960, 1, "fp8", None),       # refused even in fp8
    ("qwen3-0.6b", 9344, 1, "auto", None),       # exactly full from memory: 73 blocks for 73 needed
]

# The grid's bursts: (name, requests, prompt range, output range, num_gpu_blocks_override, max_num_seqs,
# max_num_batched_tokens, seed)
BURSTS = [
    ("A", 6, (100, 127), (40, 80), 8, 8, 512, 1),     # decodes cross a block boundary with 1 block spare
    ("C", 10, (60, 120), (30, 90), 12, 16, 1024, 3),  # ten at once, prefix-cache hits on re-admission
    ("D", 6, (220, 250), (30, 60), 8, 4, 192, 5),     # chunked prefill and preemption together
]
# Left out when the grid still ran in `make test` (issue 26; each start or burst costs about 6 s of a worker), each
# the same path as a case kept: fp8 on fixed blocks (16 blocks either way), Qwen3 in fp8 at 16,384 (starts, as
# SmolLM2's fp8 case), Qwen3 exactly full with an override (as SmolLM2's 16 blocks), burst "B" (chunked prefill
# with a 256-token budget, as "D" with 192).
BURST_MAX_MODEL_LEN = 512


def burst_requests(n: int, prompt: tuple[int, int], output: tuple[int, int], seed: int) -> list[tuple[tuple, int]]:
    """Deterministic token-id prompts, each starting with its own token (no shared prefix), and max_tokens."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        p, o = rng.randint(*prompt), rng.randint(*output)
        out.append(((1000 + i, *(rng.randint(100, 40000) for _ in range(p - 1))), o))
    return out


# A burst that must preempt: 3 blocks of 128 tokens; each request's 120-token prompt fits one block, its 121st..
# 132nd tokens need a second block, so the three cannot all grow.
BURST_CONFIG = engine.EngineConfig(max_model_len=256, num_gpu_blocks_override=3, kv_cache_space_gib=1, max_num_seqs=3)
BURST = [engine.Request(tuple(range(1000 + 7 * i, 1120 + 7 * i)), 12) for i in range(3)]
# The start-up error: one 65536-token request needs 1.41 GiB of KV cache, 1 GiB is given.
TOO_LONG = engine.EngineConfig(max_model_len=65536, kv_cache_space_gib=1)
assert STARTUPS[1] == (TOO_LONG.model, TOO_LONG.max_model_len, TOO_LONG.kv_cache_space_gib, TOO_LONG.kv_cache_dtype,
                       TOO_LONG.num_gpu_blocks_override)
GRID = tuple(f"startup{i}" for i in range(len(STARTUPS))) + tuple(f"burst{b[0]}" for b in BURSTS)
# Set to "1" (.ci/run does), the session's runs include the grid (tests/test_engine_grid.py); otherwise its tests skip.
GRID_ENV = "VRAMLAB_ENGINE_GRID"


def grid_on() -> bool:
    """True when this session runs the grid (``VRAMLAB_ENGINE_GRID=1``)."""
    return os.environ.get(GRID_ENV) == "1"


def names() -> tuple[str, ...]:
    """The names of the session's runs, in the order they are made."""
    own = ("burst", "unsupported", "multiprocess_too_long")
    return GRID + own if grid_on() else ("too_long",) + own


def require_engine() -> None:
    """Skip (or, with VRAMLAB_ENGINE_REQUIRED=1, fail) when there is no engine environment."""
    try:
        engine.find_python()
    except engine.EngineNotInstalled as exc:
        if os.environ.get("VRAMLAB_ENGINE_REQUIRED") == "1":
            pytest.fail(f"VRAMLAB_ENGINE_REQUIRED=1 but: {exc}")
        pytest.skip(str(exc))


def unsupported_model(folder: Path) -> Path:
    """SmolLM2's config with an architecture no vLLM release has (no weights: the check comes first)."""
    from vramlab import configs

    raw = json.loads((configs.CONFIG_DIR / "smollm2-135m.json").read_text())
    cfg = {k: v for k, v in raw.items() if not k.startswith("_")}
    cfg["architectures"] = ["VramlabToyForCausalLM"]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


def _make(folder: Path) -> None:
    configs: list = []
    bursts: list = []
    if grid_on():
        configs = [engine.EngineConfig(model=m, max_model_len=n, kv_cache_space_gib=space, kv_cache_dtype=dt,
                                       num_gpu_blocks_override=ov) for m, n, space, dt, ov in STARTUPS]
        bursts = [None] * len(configs)
        for _, n, pr, out, ov, seqs, tokens, seed in BURSTS:
            configs.append(engine.EngineConfig(model="smollm2-135m", max_model_len=BURST_MAX_MODEL_LEN,
                                               kv_cache_space_gib=1, num_gpu_blocks_override=ov, max_num_seqs=seqs,
                                               max_num_batched_tokens=tokens))
            bursts.append([engine.Request(ids, m) for ids, m in burst_requests(n, pr, out, seed)])
    else:
        configs, bursts = [TOO_LONG], [None]
    model = unsupported_model(folder / "unsupported-model")
    configs += [BURST_CONFIG, engine.EngineConfig(model=str(model), max_model_len=256)]
    bursts += [BURST, None]
    runs = engine.start_many(configs, bursts=bursts, timeout_s=4500)
    runs.append(engine.start(TOO_LONG, timeout_s=600, multiprocess=True))
    for name, run in zip(names(), runs, strict=True):
        engine.save_run(run, folder / f"{name}.json")
    (folder / "done").write_text("ok")


def engine_runs(tmp_path_factory) -> dict[str, engine.EngineRun]:
    """The session's runs by name (made here or loaded from the run that made them), kept in pytest's temporary
    folder of this session (shared by its xdist workers; pytest removes old ones)."""
    require_engine()
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "vramlab-engine-runs"
    folder.mkdir(exist_ok=True)
    with open(folder / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / "done").exists():
            _make(folder)
    runs = {}
    for name in names():
        run = engine.load_run(folder / f"{name}.json")
        run.replayed = False  # made by this session's code
        runs[name] = run
    runs.setdefault("too_long", runs.get("startup1"))
    return runs
