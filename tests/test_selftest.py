"""`vramlab selftest`: one PASS/FAIL line per lab with its time, exit 1 and one sentence naming the fix."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from vramlab import selftest

LINE = re.compile(r"^(PASS|FAIL) lab0\d [^(]{1,60} \(\d{1,4}\.\d s\): .{1,400}$")


def test_every_lab_has_a_step():
    notebooks = sorted(p.name[:2] for p in (Path(__file__).resolve().parents[1] / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert list(selftest.LABS) == [f"lab{n}" for n in notebooks]
    assert selftest.normalise("3") == selftest.normalise("lab03") == selftest.normalise("03") == "lab03"
    with pytest.raises(ValueError, match="unknown lab 'lab12': use 00-09"):
        selftest.normalise("lab12")


def test_cheap_labs_pass_with_their_real_code(capsys):
    """Labs 03, 06 and 08 (no model): the real planner, vLLM check and dry run, one line each."""
    outcomes = selftest.run(["03", "06", "08"])
    out = capsys.readouterr().out.splitlines()
    assert [o.passed for o in outcomes] == [True, True, True], out
    assert len(out) == 3 and all(LINE.match(line) for line in out), out
    assert "19 of 32 layers on GPU 0" in out[1]        # accelerate's own planner, not a typed-in number
    assert "computed" in out[2]                          # a dry-run figure is labelled as computed


def test_a_failing_step_prints_fail_and_one_sentence_fix(monkeypatch, capsys):
    from vramlab.models import ModelUnavailableError

    def broken(shared):
        raise ModelUnavailableError("The model is not in the cache")

    def missing(shared):
        raise ModuleNotFoundError("No module named 'bitsandbytes'", name="bitsandbytes")

    monkeypatch.setitem(selftest.LABS, "lab00", ("start here", broken))
    monkeypatch.setitem(selftest.LABS, "lab07", ("bitsandbytes", missing))
    assert selftest.selftest_main(["00", "07", "03"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("FAIL lab00 start here (") and "ModelUnavailableError" in lines[0]
    assert lines[1].startswith("FAIL lab07") and lines[2].startswith("PASS lab03")
    last = lines[-1]
    assert last.startswith("selftest: 2 of 3 labs failed in ") and "Fix: The model is not in the cache: run `vramlab fetch-model`" in last
    assert last.count(". ") <= 2 and last.endswith(".")
    assert "reinstall with `make setup`" in selftest.fix_for("lab07", ModuleNotFoundError("x", name="bitsandbytes"))
    assert "`vramlab doctor`" in selftest.fix_for("lab07", RuntimeError("boom"))
    assert "tests/test_mla.py" in selftest.fix_for("lab05", RuntimeError("boom"))


def test_all_pass_exits_zero(monkeypatch, capsys):
    for lab in selftest.LABS:
        monkeypatch.setitem(selftest.LABS, lab, ("x", lambda shared: "fine"))
    assert selftest.selftest_main(None) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("selftest: all 10 labs passed in ")


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("VRAMLAB_SELFTEST_FULL"),
                    reason="the full run takes 1-2 min (a second model load): VRAMLAB_SELFTEST_FULL=1 runs it")
def test_full_selftest_runs_every_lab_with_the_real_model():
    """The whole command as a learner runs it (loads SmolLM2 once; ~1-2 min on 2 cores)."""
    proc = subprocess.run([sys.executable, "-m", "vramlab", "selftest"], capture_output=True, text=True, timeout=600)
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    assert [line.split()[1] for line in lines[:8]] == [f"lab{n:02d}" for n in range(8)]
    assert all(LINE.match(line) and line.startswith("PASS") for line in lines[:8]), lines
    assert lines[-1].startswith("selftest: all 9 labs passed")
