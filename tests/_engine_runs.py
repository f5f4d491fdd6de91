"""The real engine's runs for tests/test_engine.py and tests/test_engine_triage.py, made ONCE per test session.

Two worker processes (:func:`vramlab.serving.engine.start_many`, engine core in-process; and one start with
``multiprocess=True`` for the ``(EngineCore pid=...)`` prefixes and the "Engine core initialization failed"
wrapper). Under pytest-xdist the first test process to ask makes them and saves them (engine.save_run) in a folder
of the session's pytest temporary folder; the others wait on a file lock and load them.

Without the engine environment the tests skip with the install command as reason; with VRAMLAB_ENGINE_REQUIRED=1
(CI) they fail instead.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

import pytest

from vramlab.serving import engine

# A burst that must preempt: 3 blocks of 128 tokens; each request's 120-token prompt fits one block, its 121st..
# 132nd tokens need a second block, so the three cannot all grow.
BURST_CONFIG = engine.EngineConfig(max_model_len=256, num_gpu_blocks_override=3, kv_cache_space_gib=1, max_num_seqs=3)
BURST = [engine.Request(tuple(range(1000 + 7 * i, 1120 + 7 * i)), 12) for i in range(3)]
# The start-up error: one 65536-token request needs 1.41 GiB of KV cache, 1 GiB is given.
TOO_LONG = engine.EngineConfig(max_model_len=65536, kv_cache_space_gib=1)
NAMES = ("burst", "too_long", "unsupported", "multiprocess_too_long")


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
    model = unsupported_model(folder / "unsupported-model")
    runs = engine.start_many([BURST_CONFIG, TOO_LONG, engine.EngineConfig(model=str(model), max_model_len=256)],
                             bursts=[BURST, None, None], timeout_s=900)
    runs.append(engine.start(TOO_LONG, timeout_s=600, multiprocess=True))
    for name, run in zip(NAMES, runs):
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
    for name in NAMES:
        run = engine.load_run(folder / f"{name}.json")
        run.replayed = False  # made by this session's code
        runs[name] = run
    return runs
