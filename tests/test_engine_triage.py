"""vramlab.serving.triage on the real engine's own output: logs the engine printed in this test session
(tests/_engine_runs.py), in-process ("(MainProcess pid=N)" lines, the "[rank0]:"-free traceback the worker prints)
and with the engine core in its own process ("(EngineCore pid=N)" lines, its traceback, the front end's
"Engine core initialization failed" wrapper)."""

from __future__ import annotations

import re
import time

import pytest

from vramlab.serving import triage

import _engine_runs as er


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return er.engine_runs(tmp_path_factory)


def test_in_process_startup_error(runs):
    run = runs["too_long"]
    d = triage.diagnose(run.log)
    assert d.kind == "startup_kv_capacity"
    assert d.details == {"max_model_len": 65536, "needed_gib": 1.41, "available_gib": 1.0,
                         "estimated_max_model_len": 46464}
    assert "(MainProcess pid=" in run.log and d.failed_process is None   # the traceback has no process prefix


def test_engine_core_traceback_behind_prefixes(runs):
    run = runs["multiprocess_too_long"]
    assert re.search(r"^\(EngineCore pid=\d+\) ERROR .*EngineCore failed to start\.", run.log, re.M)
    d = triage.diagnose(run.log)
    assert d.kind == "startup_kv_capacity"                    # not engine_dead: the wrapper is not the cause
    assert d.details["max_model_len"] == 65536 and d.details["estimated_max_model_len"] == 46464
    pid = re.search(r"^\(EngineCore pid=(\d+)\)", run.log, re.M).group(1)
    assert d.failed_process == f"EngineCore pid={pid}: ValueError"
    assert any(triage.ENGINE_WRAPPER in n and f"EngineCore pid={pid}" in n for n in d.notes)


def test_the_wrapper_alone_asks_for_the_core_lines(runs):
    run = runs["multiprocess_too_long"]
    wrapper = [line for line in run.log.splitlines() if triage.ENGINE_WRAPPER in line]
    assert wrapper, "the front end's RuntimeError is in the log"
    d = triage.diagnose(wrapper[-1])
    assert d.kind == "unknown" and d.failed_process is None
    assert any("(EngineCore pid=N)" in n for n in d.notes)


def test_a_successful_burst_log_is_no_crash(runs):
    run = runs["burst"]
    d = triage.diagnose(run.log)
    assert d.kind not in triage.CRASH_KINDS and d.failed_process is None


def test_unsupported_architecture_log(runs):
    d = triage.diagnose(runs["unsupported"].log)
    assert d.kind == "unknown" and d.kind not in triage.CRASH_KINDS


def test_process_reader_is_linear():
    head = "(EngineCore pid=1) ERROR 12-05 04:51:19 [core.py:1510] "
    for text in (head + "x" * 50_000_000, head * 200_000, "(" + "9" * 5_000_000 + " pid=1)"):
        t0 = time.process_time()
        triage.diagnose(text)
        assert time.process_time() - t0 < 10
