"""Every lab-08 check rejects the lab's stubs and a typical wrong answer, and accepts the solution."""

from __future__ import annotations

import re

import pytest

from vramlab import checks
from vramlab.checks import lab08

SOLUTIONS = {
    "check_oom_numbers": {"tried_gib": 2.0, "free_gib": 406.38 / 1024, "reserved_gib": 11.18 + 219.44 / 1024},
    "check_reserved_prediction": {"default": 200, "expandable": 150},
    "check_cap_oom_reason": "b",
    "check_peak_terms": None,   # filled below: the lab's solution, arithmetic from SmolLM2's config
    "check_t4_plan": None,      # filled below: the lab's capstone solution, arithmetic from the config and kernels
}
_TOKENS = 8 * 2048
SOLUTIONS["check_peak_terms"] = {"weights": 134_515_008 * 2, "kv_cache": 2 * 30 * 3 * 64 * 2 * _TOKENS,
                                 "logits": _TOKENS * 49152 * 2, "activations": _TOKENS * 576 * 2}
# The capstone's solution as the lesson writes it: SmolLM2's config, 4 x 4,096 tokens, bf16, a T4 under torch 2.13.
_B, _L, _H = 4, 4096, 9
_FIXED = 134_515_008 * 2 + 2 * 30 * 3 * 64 * 2 * _B * _L + (2 * 4 * 2**20 + 8 * 16 * 2**10)  # weights, cache, cuBLAS
_SCORES = _B * _H * _L * _L                          # elements of one [B, H, L, S] tensor
_MATH = _FIXED + _SCORES * (4 + 4 + 1) + _L * _L * 4 + 3 * _B * _H * _L * 64 * 4   # fp32 scores + softmax + bool,
#                                                    # the float32 causal mask, q and the repeated k, v in float32
_EAGER = _FIXED + _SCORES * (2 + 4 + 2) + _B * _L * _L * 2   # bf16 scores, fp32 softmax, its bf16 copy, bf16 mask
SOLUTIONS["check_t4_plan"] = {"sdpa_mib": _MATH / 2**20, "eager_mib": _EAGER / 2**20, "choice": "eager",
                              "why": "a T4 has no fused bf16 kernel, so sdpa runs the math path in float32"}
WRONG = {
    "check_oom_numbers": {"tried_gib": 2.0, "free_gib": 406.38 / 1024, "reserved_gib": 11.18},  # allocated only
    "check_reserved_prediction": {"default": "256 MiB", "expandable": 140},                      # not a number
    "check_cap_oom_reason": "c",                                                                 # fragmentation
    "check_peak_terms": {**SOLUTIONS["check_peak_terms"], "logits": 2 * _TOKENS * 49152 * 2},   # float32 logits
    "check_t4_plan": {**SOLUTIONS["check_t4_plan"], "choice": "sdpa"},                            # not the lower
}
# the lab's own stub first (notebook 08, exercise "read the OOM message"), then other untouched shapes
STUBS = [{"tried_gib": None, "free_gib": None, "reserved_gib": None}, None, ..., {}]


def test_every_check_is_exported_and_covered():
    assert set(lab08.__all__) == set(SOLUTIONS) == set(WRONG)
    for name in lab08.__all__:
        assert getattr(checks, name) is getattr(lab08, name)


@pytest.mark.parametrize("name", sorted(SOLUTIONS))
def test_solution_passes(name, capsys):
    result = getattr(lab08, name)(SOLUTIONS[name])
    assert result.passed and capsys.readouterr().out.startswith("PASS")


@pytest.mark.parametrize("name", sorted(SOLUTIONS))
@pytest.mark.parametrize("stub", range(len(STUBS)))
def test_stubs_fail_without_raising_or_revealing(name, stub, capsys):
    result = getattr(lab08, name)(STUBS[stub])
    out = capsys.readouterr().out
    assert not result.passed and out.startswith("FAIL")
    out = re.sub(r"0x[0-9a-f]{1,16}", "0x…", out)   # a stub function's repr holds its address (may hold "256")
    for secret in ("11.39", "11.3", "0.397", "256", "140", " b:"):
        assert secret not in out


@pytest.mark.parametrize("name", sorted(WRONG))
def test_plausible_wrong_answers_fail(name, capsys):
    result = getattr(lab08, name)(WRONG[name])
    assert not result.passed and "expected" in capsys.readouterr().out


def test_oom_hints_recognise_common_mistakes(capsys):
    good = SOLUTIONS["check_oom_numbers"]
    assert not checks.check_oom_numbers({**good, "reserved_gib": 11.18})
    assert "sum" in capsys.readouterr().out
    assert not checks.check_oom_numbers({**good, "free_gib": 406.38})
    assert "MiB" in capsys.readouterr().out
    assert not checks.check_oom_numbers({**good, "reserved_gib": 11.51})
    assert "non-PyTorch" in capsys.readouterr().out
    assert not checks.check_oom_numbers({**good, "tried_gib": float("nan")})


def test_prediction_any_honest_number_passes_and_reports_distance(capsys):
    from vramlab.vram.allocator import MiB

    assert checks.check_reserved_prediction({"default": 0, "expandable": 1e6})
    capsys.readouterr()
    actual = lab08._reserved_reference()
    assert actual == {"default": 256 * MiB, "expandable": 140 * MiB}
    assert checks.check_reserved_prediction({"default": 200, "expandable": 150}, actual)
    out = capsys.readouterr().out
    assert "-56 MiB" in out and "+10 MiB" in out
    assert not checks.check_reserved_prediction({"default": -1, "expandable": 3})


def test_cap_reason_hints_differ(capsys):
    hints = set()
    for letter in "acd":
        assert not checks.check_cap_oom_reason(letter)
        hints.add(capsys.readouterr().out.split("Hint:")[1])
    assert len(hints) == 3
    assert checks.check_cap_oom_reason(" B ")


def test_oom_divide_by_1000_is_caught(capsys):
    good = SOLUTIONS["check_oom_numbers"]
    assert not checks.check_oom_numbers({**good, "free_gib": 406.38 / 1000})
    assert "/1000 is GB" in capsys.readouterr().out
    assert not checks.check_oom_numbers({**good, "reserved_gib": 11.18 + 219.44 / 1000})
    assert "/1000 is GB" in capsys.readouterr().out
    assert not checks.check_oom_numbers({**good, "free_gib": 406.38})      # copied without converting
    assert "406.38 is in MiB" in capsys.readouterr().out


def test_the_untouched_dict_of_nones_is_not_done_yet(capsys):
    """The lab's stub (a dict of three Nones) is told "not done yet", not "write a float" (issue 19)."""
    result = checks.check_oom_numbers({"tried_gib": None, "free_gib": None, "reserved_gib": None})
    out = capsys.readouterr().out
    assert not result and result.untouched and "not done yet" in out and "not a string" not in out, out
    result = checks.check_oom_numbers({"tried_gib": 2.0, "free_gib": None, "reserved_gib": None})
    out = capsys.readouterr().out
    assert not result.untouched and "free_gib" in out and "0.397" not in out, out   # a partial attempt


# --------------------------------------------------------------------------- Exercise 4: the prefill peak
PEAK = SOLUTIONS["check_peak_terms"]


def _peak_secrets() -> list[str]:
    """The reference's numbers as the check would print them (bytes with commas, and MiB)."""
    ref = lab08._peak_terms(None)
    out = [f"{v:,}" for v in ref.values()] + [str(v) for v in ref.values()]
    out += [f"{sum(ref.values()) / (1 << 20):,.0f}"]
    return out


def test_peak_reference_is_the_dry_run_of_the_setup():
    trace = lab08._peak_reference()
    assert (trace.model.lower(), trace.batch_size, trace.seq_len, trace.dtype, trace.attn_implementation) == (
        "smollm2-135m", 8, 2048, "bfloat16", "sdpa")
    at = trace.breakdown("peak")
    # the lab's arithmetic is what the dry run records, within the allocator's 512-byte rounding
    assert at["kv_cache"] == PEAK["kv_cache"] and at["logits"] == PEAK["logits"]
    assert abs(at["weights"] - PEAK["weights"]) < 64 * 1024
    assert trace.peak["category"] == "logits"   # the peak is the lm_head's output


def test_peak_stub_is_not_done_and_shows_nothing(capsys):
    for stub in ({k: None for k in PEAK}, None, ...):
        result = checks.check_peak_terms(stub)
        out = capsys.readouterr().out
        assert not result and result.untouched and "not done yet" in out, out
        assert not any(s in out for s in _peak_secrets()), out


def test_peak_solution_passes_and_the_pass_line_has_the_standard_shape(capsys):
    assert checks.check_peak_terms(PEAK, lab08._peak_reference())
    out = capsys.readouterr().out
    assert out == "PASS the prefill peak, term by term: 2,171 MiB, as expected.\n", out


@pytest.mark.parametrize("attempt", [0, 1e12, {"weights": PEAK["weights"]}, {**PEAK, "attention": 1},
                                     {k: 2 * v for k, v in PEAK.items()}, {k: v / 2 for k, v in PEAK.items()},
                                     {**PEAK, "logits": "1.5 GiB"}, {**PEAK, "kv_cache": -1}])
def test_peak_wrong_attempts_fail_without_the_answer(attempt, capsys):
    result = checks.check_peak_terms(attempt)
    out = capsys.readouterr().out
    assert not result and not result.untouched and not result.revealed and out.startswith("FAIL "), out
    assert "ANSWER" not in out
    assert not any(s in out for s in _peak_secrets()), out


@pytest.mark.parametrize("key, factor, words", [
    ("weights", 2, "bfloat16 stores 2 bytes per parameter"),
    ("kv_cache", 0.5, "K and V"),
    ("kv_cache", 3, "key/value heads only"),
    ("logits", 2, "float32 here? check the dtype"),
    ("logits", 1 / 2048, "every position"),
    ("activations", 32, "is it still referenced at the moment of the peak"),
])
def test_peak_each_term_is_judged_with_its_misconception(key, factor, words, capsys):
    result = checks.check_peak_terms({**PEAK, key: PEAK[key] * factor})
    out = capsys.readouterr().out
    assert not result and words in out, out
    others = [k for k in PEAK if k != key]
    assert all(f"{k} ok" in out for k in others), out   # only the wrong term is blamed


def test_peak_tied_embedding_counted_twice_is_named(capsys):
    assert not checks.check_peak_terms({**PEAK, "weights": PEAK["weights"] + 2 * 49152 * 576})
    assert "tied" in capsys.readouterr().out


def test_peak_terms_in_mib_are_named(capsys):
    assert not checks.check_peak_terms({k: v / 2**20 for k, v in PEAK.items()})
    assert "the dict wants bytes" in capsys.readouterr().out


def test_peak_reveal_shows_the_answer(capsys):
    result = checks.check_peak_terms({k: 2 * v for k, v in PEAK.items()}, reveal=True)
    verdict, answer = capsys.readouterr().out.rstrip("\n").split("\n")
    assert verdict.startswith("FAIL ") and answer.startswith("ANSWER ") and result.revealed
    assert "377,487,360" in answer and "1,610,612,736" in answer
    assert len(checks.reveal("lab08", 4)) == 1
    assert "1,610,612,736" in capsys.readouterr().out


def test_peak_judges_against_the_trace_it_is_given(capsys):
    from vramlab.vram.dryrun import dry_run

    eager = dry_run("smollm2-135m", 8, 2048, attn_implementation="eager")
    assert not checks.check_peak_terms(PEAK, eager)     # eager peaks inside attention, before the lm_head
    assert "logits" in capsys.readouterr().out
    with pytest.raises(TypeError, match="trace must be the MemoryTrace"):
        checks.check_peak_terms(PEAK, "trace")


def test_peak_activation_hints_ask_and_do_not_tell(capsys):
    """Issue 29: a first miss on the activations asks a question; it does not say what is alive at the peak."""
    for factor in (32, 3, 0.1):
        assert not checks.check_peak_terms({**PEAK, "activations": PEAK["activations"] * factor})
        out = capsys.readouterr().out
        assert "lm_head" not in out and "only what" not in out and "?" in out, out


# --------------------------------------------------------------------------- Exercise 5: the T4 capstone
T4 = SOLUTIONS["check_t4_plan"]


def _t4_secrets() -> list[str]:
    peaks = lab08._t4_peaks_mib()
    return [f"{v:,.0f}" for v in peaks.values()] + [f"{v:.0f}" for v in peaks.values()]


def test_t4_reference_is_the_dry_run_of_the_setup_on_the_math_kernel():
    from vramlab.vram.dryrun import shape_was_run

    sdpa, eager = lab08._t4_reference("sdpa"), lab08._t4_reference("eager")
    assert (sdpa.batch_size, sdpa.seq_len, sdpa.dtype, sdpa.gpu) == (4, 4096, "bfloat16", "T4")
    assert sdpa.sdpa_kernel == "math" and eager.attn_implementation == "eager"
    assert "self_attn" in sdpa.peak["module"] and "self_attn" in eager.peak["module"]
    assert sdpa.peak_bytes > 1.05 * eager.peak_bytes     # the 5% bands do not overlap: the order is decided
    assert not shape_was_run(4, 4096, "bfloat16")       # the check's own runs are not the learner's


def test_t4_solution_is_close_and_the_answer_names_the_lower_one(capsys):
    peaks = lab08._t4_peaks_mib()
    for impl in ("sdpa", "eager"):
        assert abs(T4[f"{impl}_mib"] / peaks[impl] - 1) < 0.03, (impl, T4, peaks)
    assert lab08._t4_answer().startswith("{'sdpa_mib': ") and "'choice': 'eager'" in lab08._t4_answer()


@pytest.mark.parametrize("attempt", [0, "eager", {"sdpa_mib": 1}, {**T4, "flash_mib": 1}, {**T4, "sdpa_mib": "6 GiB"},
                                     {**T4, "choice": "flash"}, {**T4, "eager_mib": -5},
                                     {**T4, "sdpa_mib": T4["sdpa_mib"] * 2}, {**T4, "eager_mib": T4["eager_mib"] / 2}])
def test_t4_wrong_attempts_fail_without_the_answer(attempt, capsys):
    result = checks.check_t4_plan(attempt)
    out = capsys.readouterr().out
    assert not result and not result.untouched and out.startswith("FAIL ") and "ANSWER" not in out, out
    assert not any(s in out for s in _t4_secrets()), out


def test_t4_a_flash_or_old_release_number_is_named_without_the_decision(capsys):
    flash = lab08._t4_reference("sdpa", gpu="A100").peak_bytes / 2**20
    assert not checks.check_t4_plan({**T4, "sdpa_mib": flash})
    out = capsys.readouterr().out
    assert "A100's kernel" in out and "eager ok" in out and "math" not in out, out
    old = lab08._t4_reference("sdpa", torch_version="2.5").peak_bytes / 2**20
    assert not checks.check_t4_plan({**T4, "sdpa_mib": old})
    assert "torch 2.5" in capsys.readouterr().out
    from vramlab.checks._core import reset_tries

    reset_tries()                  # a third wrong plan is told only "not it" (the next test)
    assert not checks.check_t4_plan({**T4, "eager_mib": T4["eager_mib"] * 2**20})
    assert "the plan wants MiB" in capsys.readouterr().out


def test_t4_choice_is_judged_on_the_learners_own_numbers_only_once_both_pass(capsys):
    assert not checks.check_t4_plan({**T4, "sdpa_mib": 100.0, "choice": "sdpa"})
    out = capsys.readouterr().out
    assert "judged once both peaks are right" in out and "choice" not in out.split("Hint:")[1], out
    assert not checks.check_t4_plan({**T4, "choice": "sdpa"})
    assert "your own two numbers" in capsys.readouterr().out
    assert checks.check_t4_plan({**T4, "choice": " Eager "})
    out = capsys.readouterr().out
    assert out.startswith("PASS a T4 plan (capstone): sdpa ") and ": eager" in out, out


def test_t4_reveal_shows_the_answer(capsys):
    result = checks.check_t4_plan({**T4, "choice": "sdpa"}, reveal=True)
    verdict, answer = capsys.readouterr().out.rstrip("\n").split("\n")
    assert verdict.startswith("FAIL ") and answer.startswith("ANSWER ") and result.revealed
    assert all(s in answer for s in _t4_secrets()[2:])


def test_t4_a_plan_stored_after_a_dry_run_of_this_shape_is_refused_unless_it_passed_before(capsys):
    """The prediction comes first: once dry_run has run 4 x 4,096 bf16 tokens in the kernel (any GPU, either
    implementation), a new plan is refused as a reading; a plan that passed before still passes (Run All again)."""
    from vramlab.ran import _forget as forget
    from vramlab.vram.dryrun import dry_run

    dry_run("smollm2-135m", batch_size=4, seq_len=4096, dtype="bfloat16", attn_implementation="eager", gpu="A100")
    assert not checks.check_t4_plan(T4)
    out = capsys.readouterr().out
    assert "a reading, not a prediction" in out and "reveal=True" in out
    assert not any(s in out for s in _t4_secrets()), out
    forget()
    dry_run("smollm2-135m", batch_size=8, seq_len=2048, dtype="bfloat16")      # Exercise 4's shape does not count
    assert checks.check_t4_plan(T4)
    dry_run("smollm2-135m", batch_size=4, seq_len=4096, dtype="bfloat16", gpu="T4")
    assert checks.check_t4_plan(T4)                                             # passed before the dry run
    assert not checks.check_t4_plan({**T4, "sdpa_mib": T4["sdpa_mib"] + 1})
    assert "a reading" in capsys.readouterr().out


def test_t4_why_is_checked_for_the_mechanism_not_a_number(capsys):
    for why in ("it is lower", "6114 vs 5470 MiB", "eager uses less memory here", "I did the math and it is lower"):
        assert not checks.check_t4_plan({**T4, "why": why})
        out = capsys.readouterr().out
        assert "names the mechanism" in out and "math" not in out.split("Hint:")[1], out
    assert not checks.check_t4_plan({**T4, "why": "eager"}) and "one sentence" in capsys.readouterr().out
    assert checks.check_t4_plan({**T4, "why": "sdpa upcasts to fp32 on this GPU"})


def test_t4_comparison_waits_for_a_pass_or_a_reveal(capsys):
    lab08.t4_comparison(checks.check_t4_plan({**T4, "choice": "sdpa"}))
    out = capsys.readouterr().out
    assert "appears here once Exercise 5 passes" in out and not any(s in out for s in _t4_secrets()), out
    assert "What the T4 does" not in out and "9 bytes" not in out, out
    lab08.t4_comparison(checks.check_t4_plan(T4))
    out = capsys.readouterr().out
    assert "T4    sdpa" in out and "math" in out and all(s in out for s in _t4_secrets()[:2]), out
    assert lab08._T4_READING in out, out
    revealed = checks.check_t4_plan({**T4, "choice": "sdpa"}, reveal=True)
    capsys.readouterr()
    lab08.t4_comparison(revealed)
    assert "What the T4 does" in capsys.readouterr().out


def test_no_markdown_between_the_capstone_and_the_next_section_gives_it_away():
    """The unseen review: JupyterLab shows the markdown below a check while the learner works, so what explains the
    capstone is printed only after a pass or a reveal; the markdown from Exercise 5's prompt to the next section
    (the takeaways and stretch questions included) holds none of it."""
    import re
    from pathlib import Path

    import nbformat

    cells = nbformat.read(Path(__file__).resolve().parents[1] / "notebooks" / "08_watch_vram.ipynb", as_version=4).cells
    start = next(i for i, c in enumerate(cells) if c.cell_type == "markdown" and re.search(r"^#+\s*Exercise 5\b", c.source, re.M))
    end = next((i for i, c in enumerate(cells) if i > start and c.cell_type == "markdown"
                and re.search(r"^## Going deeper", c.source, re.M)), len(cells))
    for cell in cells[start + 1:end]:
        if cell.cell_type == "markdown":
            text = cell.source.split("## Going deeper")[0]
            found = [s for s in ('What the T4 does', '9 bytes', 'math path', 'float32 upcast', 'no fused') if s in text]
            assert not found, (found, text[:200])


def test_t4_the_guard_sees_a_torch_dtype_and_any_batch():
    """An unseen reviewer read the answer off dry_run(..., dtype=torch.bfloat16, gpu="T4") (the guard keyed on the
    dtype's text) and off batches 1 and 2 (a straight line gives batch 4): both count as having run the shape."""
    import torch

    from vramlab.ran import _forget as forget
    from vramlab.vram.dryrun import dry_run, shape_was_run

    forget()
    try:
        assert not lab08._shape_already_run()
        dry_run("smollm2-135m", batch_size=1, seq_len=4096, dtype=torch.bfloat16, gpu="T4")
        assert shape_was_run(1, 4096, "bfloat16") and shape_was_run(None, 4096, torch.bfloat16)
        assert not shape_was_run(4, 4096, "bfloat16") and not shape_was_run(None, 2048, "bfloat16")
        assert lab08._shape_already_run()
        forget()       # review #3: one token off, in float32, or another GPU reads the answer off as well
        for kwargs in ({"seq_len": 4095, "gpu": "T4"}, {"seq_len": 3500, "dtype": "float32"}, {"seq_len": 5000}):
            dry_run("smollm2-135m", **{"batch_size": 2, **kwargs})
            assert lab08._shape_already_run(), kwargs
            forget()
        dry_run("smollm2-135m", batch_size=1, seq_len=2048, gpu="A100")  # fused kernels, half the length: not it
        assert not lab08._shape_already_run()
        # review #7: ONE point on a T4, or one eager point, and the B x S^2 scaling of the scores give the peak
        for kwargs in ({"seq_len": 512, "gpu": "T4"}, {"seq_len": 2048, "gpu": "sm_75"},
                       {"seq_len": 512, "attn_implementation": "eager"},
                       {"seq_len": 2048, "gpu": "A100", "attn_implementation": "eager"}):
            dry_run("smollm2-135m", **{"batch_size": 1, **kwargs})
            assert lab08._shape_already_run(), kwargs
            forget()
        dry_run("smollm2-135m", batch_size=8, seq_len=2048, dtype="bfloat16")   # the lab's own run (sdpa, A100)
        dry_run("smollm2-135m", batch_size=2, seq_len=1024, gpu="H100")         # fused kernels on Hopper
        assert not lab08._shape_already_run()
    finally:
        forget()


def test_t4_why_is_read_for_whole_words(capsys):
    """Review #5: "eager is mathematically simpler" passed on the substring "math". The reason is read for whole words
    (a plural or past form allowed), so the mechanism must be named."""
    import re

    words = lab08._T4_REASON_WORDS
    said = lambda why: any(re.search(rf"(?<![a-z]){re.escape(w)}(?:s|ed|ing)?(?![a-z])", why.lower())  # noqa: E731
                           for w in words)
    assert not said("eager is mathematically simpler")
    assert said("sdpa runs the math path") and said("the scores are upcasted to float32") and said("it upcasts")
    plan = dict(SOLUTIONS["check_t4_plan"], why="eager is mathematically simpler")
    assert not lab08.check_t4_plan(plan)
    capsys.readouterr()


def test_the_dryrun_command_refuses_the_capstones_telling_shapes(capsys):
    """Review #8 read both peaks off `vramlab dryrun smollm2-135m --batch 4 --seq 4096 --gpu T4 [--attn eager]`: a
    command runs in its own process, outside the kernel's record. It refuses what the check would count as a reading
    of SmolLM2 (one sentence, exit 2), and runs other models and shapes."""
    from vramlab import cli

    for extra in (["--seq", "4096", "--gpu", "T4"], ["--seq", "512", "--gpu", "T4"], ["--seq", "512", "--attn", "eager"],
                  ["--seq", "3500"]):
        assert cli.main(["dryrun", "smollm2-135m", "--batch", "4", *extra]) == 2, extra
        err = capsys.readouterr().err
        assert "lab 08's Exercise 5" in err and "MiB" not in err and err.count("\n") == 1, err
    assert cli.main(["dryrun", "smollm2-135m", "--batch", "1", "--seq", "64", "--json"]) == 0
    assert cli.main(["dryrun", "qwen3-0.6b", "--batch", "1", "--seq", "128", "--gpu", "T4", "--json"]) == 0


def test_t4_which_peak_is_off_is_told_on_two_wrong_plans_only(capsys):
    """Review #8: "sdpa off, eager ok" never stopped, so one peak could be scanned in 10% steps with the other
    fixed until it read "ok". From the third wrong plan on, the check says only that the two are not both right."""
    from vramlab.checks._core import reset_tries

    reset_tries()
    outs = []
    for factor in (1.3, 1.5, 1.7, 1.9):
        assert not checks.check_t4_plan({**T4, "sdpa_mib": T4["sdpa_mib"] * factor})
        outs.append(capsys.readouterr().out)
    assert "eager ok" in outs[0] and "eager ok" in outs[1]
    for out in outs[2:]:
        assert " ok" not in out and " off" not in out and "not both peaks" in out and "not it" in out, out
    assert checks.check_t4_plan(T4)


def test_t4_a_dry_run_in_a_child_process_of_the_notebook_is_seen(capsys, monkeypatch, tmp_path):
    """Review #8 ran the capstone's dry run in a Python subprocess, which the kernel's record never saw. A child of
    a notebook kernel writes to the same lasting record (vramlab.ran.records_file), so the plan is refused."""
    import os
    import subprocess
    import sys

    from vramlab import ran

    monkeypatch.setenv(ran.RAN_ENV, str(tmp_path / "ran.jsonl"))
    ran._forget()
    child = ("from vramlab.vram.dryrun import dry_run; dry_run('smollm2-135m', batch_size=1, seq_len=4096, "
             "dtype='bfloat16', gpu='T4')")
    subprocess.run([sys.executable, "-c", child], env=dict(os.environ), check=True, timeout=300, capture_output=True)
    assert not checks.check_t4_plan(T4)
    assert "a reading, not a prediction" in capsys.readouterr().out
    ran._forget()


def test_t4_a_track_of_the_shape_is_a_reading_too(capsys):
    """Review #9 read both peaks off the public ``vram.track`` on a meta model, which noted nothing: every tracing path
    (dry_run, track, measure) notes its shape now."""
    from vramlab.vram import random_model, track

    m = random_model("smollm2-135m", attn_implementation="eager", device="meta", num_hidden_layers=1)
    track(m, 1, 256, attn_implementation="eager", gpu="T4")
    assert not checks.check_t4_plan(T4)
    assert "a reading, not a prediction" in capsys.readouterr().out


def test_t4_a_dry_run_with_the_math_kernel_forced_is_a_reading(capsys):
    """Review #10 forced sdpa_kernel="math" on an A100 (the T4's kernel) at two lengths and fitted the sdpa peak."""
    from vramlab.vram.dryrun import dry_run

    dry_run("smollm2-135m", batch_size=1, seq_len=256, dtype="bfloat16", gpu="A100", sdpa_kernel="math")
    assert not checks.check_t4_plan(T4)
    assert "a reading, not a prediction" in capsys.readouterr().out


def test_t4_a_dry_run_whose_chooser_picked_math_is_a_reading(capsys):
    """Review #11: float32 sdpa on the default A100 runs the math path by the chooser's own rules (no flash for
    float32, no efficient kernel for grouped-query heads), and one such run scaled by (4096/S)^2 passed."""
    from vramlab.vram.dryrun import dry_run

    trace = dry_run("smollm2-135m", batch_size=1, seq_len=256, dtype="float32", attn_implementation="sdpa")
    assert trace.sdpa_kernel == "math"
    assert not checks.check_t4_plan(T4)
    assert "a reading, not a prediction" in capsys.readouterr().out
