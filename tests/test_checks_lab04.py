"""Every lab-04 check rejects the lab's stubs without revealing the answer, tells a wrong choice why that choice
fails without pointing at another, reads a "why" for its mechanism rather than any number, and accepts the
solution."""

from __future__ import annotations

import re
import types

import pytest

from vramlab import checks
from vramlab.checks import lab04


def _prediction(value):
    return lab04.check_prediction(value, 4, "preemptions of the burst")


READING = {"A": ("fragmentation", "PyTorch's cache held 194.87 MiB reserved but unallocated, more than asked"),
           "B": ("shortage", "neither the free memory nor the unallocated cache could hold 22.78 GiB"),
           "C": ("cap", "30.12 GiB was free, but the process is allowed only 49.47 GiB")}

CALL = {name: getattr(lab04, name) for name in lab04.__all__}
CALL["check_prediction"] = _prediction

SOLUTIONS = {
    "check_prediction": 3,
    "check_resident_requests": 4,
    "check_preempted_request": ("c", "the newest running request, the last in the queue, is popped"),
    "check_log_triage": {"A": "one request does not fit", "B": "no room for any block", "C": "pressure under load"},
    "check_oom_reading": READING,
    "check_seqs_design": {"max_num_seqs": 3, "preemptions": 1},   # the engine's own runs (results/vllm/)
}


def _reading(**changes):
    return {**READING, **changes}


WRONG = {
    "check_prediction": [("a lot", "a number")],
    "check_resident_requests": [(5, "lend every one of its blocks"), (4.1, "whole"), (8, "every request"), (9, "divides tokens"),
                                (2, "count one request")],
    "check_preempted_request": [(("a", "the asker"), "not at who is asking"), (("b", "oldest"), "protects"),
                                (("d", "random"), "deterministic"), (("c", "because 15"), "which end"),
                                ("c", "add one sentence")],
    "check_log_triage": [({"A": "no room for any block", "B": "no room for any block", "C": "pressure under load"},
                          "above the wrapper"),
                         ({"A": "one request does not fit", "B": "one request does not fit", "C": "pressure under load"},
                          "no request's size"),
                         ({"A": "one request does not fit", "B": "no room for any block", "C": "one request does not fit"},
                          "printed its KV cache size"),
                         ({"A": "oom", "B": "no room for any block", "C": "pressure under load"}, "use one of"),
                         ({"A": "one request does not fit"}, "every log")],
    # a wrong label is told why that label fails for that message, never which label is right
    "check_oom_reading": [(_reading(A=("shortage", "22.00 MiB asked, 11.06 MiB free")), "did not compare"),
                          (_reading(A=("cap", "11.06 MiB free")), "names no limit"),
                          (_reading(B=("fragmentation", "9.35 GiB unallocated")), "(not 'allocated')"),
                          (_reading(B=("cap", "12.73 GiB free")), "names no limit"),
                          (_reading(C=("shortage", "2.00 GiB asked")), "could not have served it"),
                          (_reading(C=("fragmentation", "10.00 MiB")), "cannot serve 2.00 GiB"),
                          (_reading(C=("OOM", "2.00 GiB")), "use one of"),
                          (_reading(B="shortage"), "one sentence"),
                          (_reading(C=("cap", "2.00 GiB asked, 30.12 GiB, 49.47 GiB")), "not just the numbers"),
                          ({"A": ("fragmentation", "cache")}, "every message"),
                          ("fragmentation", "write a dict")],
    "check_seqs_design": [({"max_num_seqs": 8, "preemptions": 3}, "not both right"),
                          ({"max_num_seqs": 1, "preemptions": 1}, "not both right"),
                          ({"max_num_seqs": 3, "preemptions": 3}, "not both right"),
                          ({"max_num_seqs": 3, "preemptions": 0.5}, "a whole number of preemptions"),
                          ({"max_num_seqs": 2.5, "preemptions": 3}, "a whole max_num_seqs"),
                          ({"max_num_seqs": 2}, "two keys")],
}
STUBS = [None, lambda *a: None]


def test_every_check_is_exported_and_covered():
    assert set(lab04.__all__) == set(SOLUTIONS) == set(WRONG)
    for name in lab04.__all__:
        assert getattr(checks, name) is getattr(lab04, name)


@pytest.mark.parametrize("name", sorted(SOLUTIONS))
def test_solution_passes(name, capsys):
    result = CALL[name](SOLUTIONS[name])
    assert result.passed and capsys.readouterr().out.startswith("PASS")


@pytest.mark.parametrize("name", sorted(SOLUTIONS))
def test_the_stub_fails_without_revealing_the_answer(name, capsys):
    result = CALL[name](None)
    out = capsys.readouterr().out
    assert not result.passed and out.startswith("FAIL") and "not done yet" in out
    assert not re.search(r"\d", out.split("; got ")[0].split("expected", 1)[1]), out


@pytest.mark.parametrize("name,wrong,phrase", [(n, w, p) for n, ws in WRONG.items() for w, p in ws])
def test_common_wrong_answers_fail_with_their_own_hint(name, wrong, phrase, capsys):
    result = CALL[name](wrong)
    out = capsys.readouterr().out
    assert not result.passed and "expected" in out and phrase in out, out


def test_oom_misreadings_name_no_other_verdict():
    for (key, label), text in lab04._MISREAD.items():
        others = [v for v in ("shortage", "fragmentation", "cap") if v != label and re.search(rf"\b{v}\b", text)]
        assert not others, (key, label, text)


def test_reading_messages_are_parsed_to_their_verdicts_and_c_says_what_is_allowed():
    from vramlab.vram import parse_oom_message

    verdicts = {k: parse_oom_message(t).verdict for k, t in lab04.READING_MESSAGES.items()}
    assert verdicts == {"A": "fragmentation", "B": "shortage", "C": "cap"}
    assert "memory in use. 49.47 GiB allowed; Of the allocated memory" in lab04.READING_MESSAGES["C"]


def test_resident_requests_count_the_null_block():
    assert lab04._resident_requests() == 4                       # (10 - 1) // ceil(139 / 128)
    assert lab04._resident_requests(num_blocks=8) == 3


@pytest.mark.parametrize("name,stub", [("check_log_triage", {"A": None, "B": None, "C": None}),
                                       ("check_oom_reading", {"A": None, "B": None, "C": None}),
                                       ("check_seqs_design", {"max_num_seqs": None, "preemptions": None})])
def test_the_labs_stub_dicts_are_told_not_done_yet(name, stub, capsys):
    assert not CALL[name](stub) and "not done yet" in capsys.readouterr().out


def test_each_wrong_choice_names_no_other_choice(capsys):
    for label in lab04._PREEMPT_OPTIONS:
        result = lab04.check_preempted_request((label, "the newest request is popped"))
        out = capsys.readouterr().out
        assert result.passed == (label == "c")
        others = [o for o in lab04._PREEMPT_OPTIONS if o != label and re.search(rf"['\"(]{o}['\")]", out)]
        assert not others, out


def test_the_capstones_answer_is_what_the_engine_and_the_simulator_give():
    """The graded design: 3 finishes soonest with no preemption, and 8 costs one preemption, as the engine's own
    recorded runs of this burst show (cell 21 of the lesson runs them again)."""
    from vramlab.serving.engine import EngineConfig, Request
    from vramlab.serving.recorded import runs

    outcomes = lab04._seqs_outcomes()
    assert lab04._best_seqs() == 3 and outcomes[3] == (0, 40) and outcomes[8][0] == 1
    assert all(outcomes[k][0] for k in range(4, 9)) and all(outcomes[k][1] > 40 for k in (1, 2))
    burst = [Request(tuple([300 + i] * p), n) for i, (p, n) in enumerate(lab04.CAPSTONE_REQUESTS)]
    pools = [EngineConfig(model="smollm2-135m", max_model_len=1024, kv_cache_space_gib=1, num_gpu_blocks_override=10,
                          max_num_seqs=k) for k in (3, 8)]
    on_engine = runs(pools, bursts=[burst, burst], live=False)
    assert [r.metrics["num_preemptions"] for r in on_engine] == [0, 1]
    assert [len(r.steps) for r in on_engine] == [40, 30]


def test_a_design_read_off_a_run_of_this_burst_is_refused_unless_it_passed_before(capsys):
    """The prediction is made by hand: once the simulator (or the engine) has run this very burst in the kernel, a
    new design is refused as a reading; a design that passed before the run still passes (Run All again)."""
    from vramlab.serving.paged import Request, simulate

    right = {"max_num_seqs": 3, "preemptions": 1}
    simulate(10, [Request(i, p, n) for i, (p, n) in enumerate(lab04.CAPSTONE_REQUESTS)], max_num_seqs=8,
             block_size=128)
    assert not lab04.check_seqs_design(right)
    out = capsys.readouterr().out
    assert "a reading, not a prediction" in out and "reveal=True" in out
    # another burst, or the same requests on another pool, does not count
    from vramlab.ran import _forget as forget

    forget()
    simulate(12, [Request(i, p, n) for i, (p, n) in enumerate(lab04.CAPSTONE_REQUESTS)], block_size=128)
    simulate(10, [Request(i, 120, 20) for i in range(8)], block_size=128)
    assert lab04.check_seqs_design(right)
    simulate(10, [Request(i, p, n) for i, (p, n) in enumerate(lab04.CAPSTONE_REQUESTS)], block_size=128)
    assert lab04.check_seqs_design(right)                                   # passed before the run: still passes
    assert not lab04.check_seqs_design({"max_num_seqs": 3, "preemptions": 2})
    assert "a reading" in capsys.readouterr().out
    # review #17: the same burst with block_size=129 takes the same blocks per request, so it is the same reading;
    # and the refusal counts no try
    from vramlab.checks._core import tries

    forget()
    simulate(10, [Request(i, p, n) for i, (p, n) in enumerate(lab04.CAPSTONE_REQUESTS)], max_num_seqs=3,
             block_size=129)
    before = tries("max_num_seqs for the mixed burst")
    assert not lab04.check_seqs_design(right)
    assert "a reading" in capsys.readouterr().out and tries("max_num_seqs for the mixed burst") == before
    # review #18b: one late request added, or the first 7 requests only, read the answer too
    burst = [Request(i, p, n) for i, (p, n) in enumerate(lab04.CAPSTONE_REQUESTS)]
    for variant in (burst + [Request(8, 1, 1, arrival=10000)], burst[:7], burst[2:] + burst[:2]):
        forget()
        simulate(10, variant, max_num_seqs=3, block_size=128)
        assert not lab04.check_seqs_design(right), variant
        assert "a reading" in capsys.readouterr().out
    forget()
    simulate(10, burst[:5], max_num_seqs=3, block_size=128)                # three requests fewer: another burst
    simulate(10, [Request(i, 120, 20) for i in range(8)], block_size=128)   # section 1's burst
    assert lab04.check_seqs_design(right)


def test_the_engine_runs_count_as_runs_of_the_burst_live_or_replayed(capsys):
    from vramlab.serving.engine import EngineConfig, Request
    from vramlab.serving.recorded import runs

    burst = [Request(tuple([300 + i] * p), n) for i, (p, n) in enumerate(lab04.CAPSTONE_REQUESTS)]
    cfg = EngineConfig(model="smollm2-135m", max_model_len=1024, kv_cache_space_gib=1, num_gpu_blocks_override=10,
                       max_num_seqs=8)
    runs([cfg], bursts=[burst], live=False)
    assert not lab04.check_seqs_design({"max_num_seqs": 3, "preemptions": 1})
    assert "a reading" in capsys.readouterr().out


def test_a_wrong_design_is_judged_as_a_whole_and_never_says_which_part_failed(capsys):
    """Issue 29 (unseen review): a wrong max_num_seqs told "the pool runs dry" left {1, 2, 3}, and a message that
    changed once k was right confirmed k. Now every wrong design, whichever part is wrong, gets the same words
    (apart from echoing the design), no reason and no direction, and the next hint from the second try."""
    outs = []
    for design in ((5, 1), (1, 1), (3, 2), (8, 0), (3, 0)):     # k wrong, k wrong, p wrong, both, p wrong
        assert not lab04.check_seqs_design({"max_num_seqs": design[0], "preemptions": design[1]})
        out = capsys.readouterr().out
        outs.append(out.replace(f"max_num_seqs={design[0]}, preemptions={design[1]}", "<design>"))
    for out in outs:
        assert "not both right" in out, out
        assert not re.search(r"runs dry|more steps|not that count|too (high|low|many|few)|fewer|more than", out), out
    stripped = [re.sub(r" ?That is try \d.*", "", o.replace("\n    ", " ")).strip() for o in outs]
    assert len(set(stripped)) == 1, stripped                    # the same words whichever part is wrong
    assert "open Hint 1" in outs[1] and "open Hint 2" in outs[2] and "open Hint 3" in outs[3]
    assert "reveal=True" in outs[4]


def test_capstone_seqs_is_yours_after_a_pass_vramlabs_after_a_reveal_and_refused_before(capsys):
    right = {"max_num_seqs": 3, "preemptions": 1}
    assert lab04.capstone_seqs(lab04.check_seqs_design(right), right) == 3
    revealed = lab04.check_seqs_design({"max_num_seqs": 8, "preemptions": 0}, reveal=True)
    assert not revealed and lab04.capstone_seqs(revealed, None) == 3
    assert "ANSWER" in capsys.readouterr().out
    with pytest.raises(ValueError, match="run its check first"):
        lab04.capstone_seqs(lab04.check_seqs_design({"max_num_seqs": 8, "preemptions": 0}), None)


def _capstone_reqs(shorter: int = 0):
    from vramlab.serving.paged import Request

    return [Request(i, p - shorter, n) for i, (p, n) in enumerate(lab04.CAPSTONE_REQUESTS)]


@pytest.mark.parametrize("k", range(1, 9))
def test_the_public_scheduler_notes_the_burst_it_runs(k, capsys):
    """Unseen review #16: ``Scheduler(10, 128, k, 4096, 1024, True).run(...)`` printed ``.preemptions`` for every k
    and the check then passed. Every Scheduler notes the burst it steps through (run(), or add() and step() by
    hand); the check's own runs of the burst note nothing."""
    from vramlab.serving.paged import Scheduler, burst_was_run

    right = {"max_num_seqs": 3, "preemptions": 1}
    lab04._seqs_outcomes()                                       # the check's own runs
    assert not burst_was_run(10, lab04.CAPSTONE_REQUESTS, 128)
    Scheduler(10, 128, k, 4096, 1024, True).run(_capstone_reqs())
    assert burst_was_run(10, lab04.CAPSTONE_REQUESTS, 128)
    assert not lab04.check_seqs_design(right)
    assert "a reading, not a prediction" in capsys.readouterr().out


def test_a_scheduler_stepped_by_hand_notes_the_burst(capsys):
    from vramlab.serving.paged import Scheduler

    sched = Scheduler(10, 128, 8, 4096, 1024, True)
    for r in _capstone_reqs():
        sched.add(r)
    while sched.waiting or sched.running or sched._pending:
        sched.step()
    assert not lab04.check_seqs_design({"max_num_seqs": 3, "preemptions": 1})
    assert "a reading" in capsys.readouterr().out


@pytest.mark.parametrize("shorter", [1, 2, 10])
def test_a_burst_that_takes_the_same_blocks_is_the_same_burst(shorter, capsys):
    """Unseen review #16: each prompt one token shorter (249 and 59) gives the same answers, and the gate keyed on
    the exact token counts let it through. The gate is keyed on the pool, the block size and each request's
    blocks; a burst whose requests take other blocks, or another pool or block size, is not this burst."""
    from vramlab.serving.paged import simulate

    right = {"max_num_seqs": 3, "preemptions": 1}
    simulate(10, _capstone_reqs(shorter), block_size=128, max_num_seqs=8)
    assert not lab04.check_seqs_design(right)
    assert "a reading" in capsys.readouterr().out


def test_a_burst_on_other_blocks_is_not_this_burst(capsys):
    from vramlab.serving.paged import Request, simulate

    simulate(10, _capstone_reqs(), block_size=256)               # another block size: other blocks per request
    simulate(10, [Request(i, min(p, 120), n) for i, (p, n) in enumerate(lab04.CAPSTONE_REQUESTS)],
             block_size=128)                                     # 120-token prompts: one block each, not two
    simulate(11, _capstone_reqs(), block_size=128)               # another pool
    assert lab04.check_seqs_design({"max_num_seqs": 3, "preemptions": 1})


@pytest.mark.parametrize("fake", [True, 1, "yes", types.SimpleNamespace(revealed=True, passed=True)])
def test_capstone_seqs_opens_only_for_a_result_the_check_issued(fake, capsys):
    """Unseen review #16: ``capstone_seqs(types.SimpleNamespace(revealed=True), None)`` returned 3 with no record
    and no reveal. Only what check_seqs_design returned as passed or revealed opens it."""
    from vramlab.checks._core import CheckResult

    for result in (fake, CheckResult("max_num_seqs for the mixed burst", True, "", "", revealed=True)):
        with pytest.raises(ValueError, match="run its check first"):
            lab04.capstone_seqs(result, {"max_num_seqs": 3, "preemptions": 1})
    failed = lab04.check_seqs_design({"max_num_seqs": 8, "preemptions": 0})
    failed.passed = True
    with pytest.raises(ValueError, match="run its check first"):
        lab04.capstone_seqs(failed, {"max_num_seqs": 3, "preemptions": 1})
