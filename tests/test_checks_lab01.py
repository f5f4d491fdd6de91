"""Every lab-01 check rejects the lab's stubs (and plausible wrong answers) and accepts the solution."""

from __future__ import annotations

import math

import pytest
import torch

from vramlab import checks
from vramlab.checks import lab01
from vramlab.quarot import blocks


def _raises(*args):
    raise NotImplementedError


def _returns_none(*args):
    return None


def sylvester_solution(n):
    H = torch.ones(1, 1)
    while H.shape[0] < n:
        H = torch.cat([torch.cat([H, H], 1), torch.cat([H, -H], 1)], 0)
    return H


def butterfly_solution(x):
    n = x.shape[-1]
    shape = x.shape
    y = x.reshape(-1, n)
    h = 1
    while h < n:
        y = y.view(-1, n // (2 * h), 2, h)
        a, b = y[:, :, 0], y[:, :, 1]
        y = torch.stack((a + b, a - b), dim=2).view(-1, n)
        h *= 2
    return (y / math.sqrt(n)).reshape(shape)


def fold_solution(norm_weight, linear_weight):
    return linear_weight * norm_weight[None, :]


# check_rotation_placement, check_zero_fraction_prediction and check_no_online_hadamard_prediction
# are tested below (test_rotation_placement_*, test_predictions_*).
SOLUTIONS = {
    "check_sylvester_hadamard": sylvester_solution,
    "check_butterfly": butterfly_solution,
    "check_fold_rmsnorm": fold_solution,
}
WRONG = {
    "check_sylvester_hadamard": [
        lambda n: sylvester_solution(n) / math.sqrt(n),          # normalised
        lambda n: sylvester_solution(n)[:, torch.arange(n).flip(0)],  # a Hadamard matrix, other order
        lambda n: torch.ones(n, n),
        lambda n: sylvester_solution(max(1, n // 2)),             # one doubling short
    ],
    "check_butterfly": [
        lambda x: butterfly_solution(x) * math.sqrt(x.shape[-1]),  # forgot 1/sqrt(n)
        lambda x: x,
        lambda x: butterfly_solution(x).reshape(-1, x.shape[-1]),  # wrong shape
    ],
    "check_fold_rmsnorm": [
        lambda g, W: g[:, None] * W,   # rows instead of columns (fails on the square case / raises)
        lambda g, W: W / g[None, :],
        lambda g, W: W,
    ],
}


def call(name, answer):
    return getattr(lab01, name)(answer)


# --- Exercise 4 (where Q goes) and the predictions --------------------------------------------

PLACEMENT_SOLUTION = {"embed_tokens": "W Q", "q_proj": "W Q", "k_proj": "W Q", "v_proj": "W Q",
                      "o_proj": "Q^T W", "gate_proj": "W Q", "up_proj": "W Q", "down_proj": "Q^T W",
                      "lm_head": "W Q"}


def test_rotation_placement_solution_and_spellings_pass(capsys):
    assert lab01.check_rotation_placement(PLACEMENT_SOLUTION)
    spelled = {k: ("W @ Q" if v == "W Q" else "Qᵀ W") for k, v in PLACEMENT_SOLUTION.items()}
    assert lab01.check_rotation_placement(spelled)
    assert capsys.readouterr().out.count("PASS") == 2


@pytest.mark.parametrize("change, hint", [
    ({"embed_tokens": "Q^T W"}, "stored [vocab, hidden]"),
    ({k: ("Q^T W" if v == "W Q" else "W Q") for k, v in PLACEMENT_SOLUTION.items()}, "sort the weights"),
    ({"lm_head": "Q^T W"}, "stored [vocab, hidden]"),
    ({"down_proj": "W Q"}, "added to the stream must produce"),
    ({"q_proj": "Q W"}, "stored [out, in]"),
    ({"v_proj": "Q^T W"}, "reads the stream sees x Q"),
])
def test_rotation_placement_common_mistakes_get_their_hint(change, hint, capsys):
    result = lab01.check_rotation_placement({**PLACEMENT_SOLUTION, **change})
    out = capsys.readouterr().out
    assert not result and out.startswith("FAIL") and hint in out, out


def test_rotation_placement_names_no_wrong_key_and_no_count(capsys):
    """Issue 29: each key is a two-way choice; a line that named the wrong keys (or how many) let a learner flip
    exactly those and pass. Two answers with different wrong keys of one kind get the same line."""
    from vramlab.checks._core import reset_tries

    flipped = {"W Q": "Q^T W", "Q^T W": "W Q"}
    lines = {}
    for key in ("q_proj", "k_proj", "gate_proj", "up_proj"):
        reset_tries()
        lab01.check_rotation_placement({**PLACEMENT_SOLUTION, key: flipped[PLACEMENT_SOLUTION[key]]})
        lines[key] = capsys.readouterr().out
        assert key not in lines[key] and " of 9" not in lines[key], lines[key]
    assert len(set(lines.values())) == 1, lines
    reset_tries()
    lab01.check_rotation_placement({**PLACEMENT_SOLUTION, "o_proj": "W Q", "down_proj": "W Q"})
    out = capsys.readouterr().out
    assert "o_proj" not in out and "down_proj" not in out and "2 of" not in out, out


@pytest.mark.parametrize("stub", [None, ..., {}, "W Q"])
def test_rotation_placement_stubs_fail(stub, capsys):
    assert not lab01.check_rotation_placement(stub)
    assert capsys.readouterr().out.startswith("FAIL")


@pytest.mark.parametrize("check, args", [
    (lab01.check_zero_fraction_prediction, (0.956,)),
    (lab01.check_no_online_hadamard_prediction, (21.3, 4.4)),
])
def test_predictions_never_reveal_the_measurement_before_a_guess(check, args, capsys):
    for stub in (None, ...):
        assert not check(stub, *args)
        out = capsys.readouterr().out
        assert out.startswith("FAIL") and "0.956" not in out and "21.3" not in out and "4.4" not in out, out
    assert not check("a lot", *args)
    assert "not a number" in capsys.readouterr().out


def test_predictions_accept_any_honest_number_and_say_how_far_off(capsys):
    assert lab01.check_zero_fraction_prediction(0.5, 0.956)
    out = capsys.readouterr().out
    assert out.startswith("PASS") and "you predicted 0.5, measured 0.956" in out and "too low" in out
    assert lab01.check_zero_fraction_prediction(95, 0.956)  # percent is read as percent
    out = capsys.readouterr().out
    assert "spot on" in out and "percent" in out
    assert not lab01.check_zero_fraction_prediction(-3, 0.956)
    capsys.readouterr()
    assert lab01.check_no_online_hadamard_prediction(5, 21.3, 4.4)
    out = capsys.readouterr().out
    assert "4.3x too low" in out and "online Hadamard" in out


@pytest.mark.parametrize("name", sorted(SOLUTIONS))
def test_stubs_are_rejected(name, capsys):
    for stub in (None, _returns_none, _raises):
        result = call(name, stub)
        assert not result, (name, stub)
        out = capsys.readouterr().out
        assert out.startswith("FAIL ") and "expected" in out


@pytest.mark.parametrize("name", sorted(SOLUTIONS))
def test_wrong_answers_are_rejected(name, capsys):
    for wrong in WRONG[name]:
        assert not call(name, wrong), name
        assert capsys.readouterr().out.startswith("FAIL ")


@pytest.mark.parametrize("name", sorted(SOLUTIONS))
def test_solution_is_accepted(name, capsys):
    result = call(name, SOLUTIONS[name])
    out = capsys.readouterr().out
    assert result, out
    assert out.startswith("PASS ") and out.count("\n") == 1
    assert getattr(checks, name) is getattr(lab01, name)  # re-exported from vramlab.checks


def test_package_reference_functions_agree_with_the_solutions():
    """The lesson's own functions and the checks' references cannot disagree (the checks refuse the
    package functions themselves as an answer, see test_calling_vramlabs_own_answer_is_refused)."""
    from vramlab.quarot.hadamard import fwht, fwht_butterfly, sylvester
    from vramlab.quarot.rotate import fold_rmsnorm_into_linear

    g = torch.Generator().manual_seed(5)
    for n in (1, 2, 8, 64):
        assert torch.equal(sylvester(n).double(), sylvester_solution(n).double())
        x = torch.randn(3, n, generator=g, dtype=torch.float64)
        assert torch.allclose(fwht_butterfly(x), butterfly_solution(x), atol=1e-9)
        assert torch.allclose(fwht(x), butterfly_solution(x), atol=1e-9)
    gamma, W = torch.rand(10, generator=g) + 0.5, torch.randn(7, 10, generator=g)
    assert torch.allclose(fold_rmsnorm_into_linear(gamma, W), fold_solution(gamma, W))


def test_calling_vramlabs_own_answer_is_refused(capsys):
    """Lab 01's exercises cannot be bypassed with the imported solution (issue 19)."""
    from vramlab.quarot import hadamard
    from vramlab.quarot.hadamard import fwht, sylvester
    from vramlab.quarot.rotate import fold_rmsnorm_into_linear

    def via_global(x):           # `from vramlab.quarot.hadamard import fwht` in the notebook
        return FWHT(x)

    def via_module(x):           # `hadamard.fwht(x)`
        return hadamard.fwht(x)

    def via_closure(x):          # a name from an enclosing scope
        return fwht(x)

    globals()["FWHT"] = fwht
    try:
        for fn in (via_global, via_module, via_closure, fwht):
            assert not lab01.check_butterfly(fn)
            out = capsys.readouterr().out
            assert "vramlab's own quarot.hadamard.fwht" in out and "write it yourself" in out, out
    finally:
        del globals()["FWHT"]
    assert hadamard.fwht is fwht   # put back
    assert not lab01.check_sylvester_hadamard(lambda n: sylvester(n))
    assert "vramlab's own quarot.hadamard.sylvester" in capsys.readouterr().out
    assert not lab01.check_fold_rmsnorm(lambda g, w: fold_rmsnorm_into_linear(g, w))
    assert "vramlab's own quarot.rotate.fold_rmsnorm_into_linear; write it yourself" in capsys.readouterr().out
    assert lab01.check_butterfly(butterfly_solution)  # the guard is gone: a real solution still passes


def test_fold_rows_instead_of_columns_gets_the_rows_hint(capsys):
    """gamma[:, None] * W raises on a non-square W: the square case comes first so the hint is reached."""
    assert not lab01.check_fold_rmsnorm(lambda g, w: g[:, None] * w)
    out = capsys.readouterr().out
    assert "the rows (output features) scaled by gamma" in out and "input features" in out, out


def test_hints_name_the_mistake(capsys):
    lab01.check_butterfly(WRONG["check_butterfly"][0])
    assert "sqrt" in capsys.readouterr().out
    lab01.check_fold_rmsnorm(WRONG["check_fold_rmsnorm"][0])
    out = capsys.readouterr().out
    assert "FAIL" in out
    lab01.check_sylvester_hadamard(WRONG["check_sylvester_hadamard"][1])
    assert "not in Sylvester's order" in capsys.readouterr().out


def test_prediction_without_a_measurement_fails_politely(capsys):
    assert not lab01.prediction_report("p", 3.0, None, "the perplexity", log=True)
    assert "measurement is missing" in capsys.readouterr().out


def test_prediction_stored(capsys):
    for stub in (None, ..., "lots"):
        assert not lab01.check_prediction_stored(stub)
        assert capsys.readouterr().out.startswith("FAIL")
    assert lab01.check_prediction_stored(0.9, 0, 100)
    assert "now run the next cell" in capsys.readouterr().out
    assert not lab01.check_prediction_stored(-1, 0, 100)
    assert "between 0 and 100" in capsys.readouterr().out
    assert not lab01.check_prediction_stored(0.5, low=1)
    assert "at least 1" in capsys.readouterr().out


# --- Exercise 5 (how much rotation shrinks the largest per-token max/RMS) -------------

def test_rotation_shrink_passes_near_the_measurement(capsys):
    assert lab01.check_rotation_shrink(5.0, 5.48, before=22.3)
    assert lab01.check_rotation_shrink(22.3 / 4.44, 5.48, before=22.3)   # a simulated Gaussian's largest
    assert capsys.readouterr().out.count("PASS") == 2


@pytest.mark.parametrize("got, hint", [
    (4.07 / 22.3, "divide after by before"),
    (1.0, "no change"),
    (22.3, "as if the rotated token were flat"),
    (22.3 / 3.29, "the same statistic as 'before'"),   # the typical Gaussian token instead of the largest
    (2.0, "too low"),
    (-3, "positive"),
])
def test_rotation_shrink_wrong_factors_are_told_what_is_wrong(got, hint, capsys):
    result = lab01.check_rotation_shrink(got, 5.48, before=22.3)
    out = capsys.readouterr().out
    assert not result and out.startswith("FAIL") and hint in out, out
    assert "5.48" not in out and "4.07" not in out, out


def test_rotation_shrink_stub_missing_measurement_and_reveal(capsys):
    for stub in (None, ...):
        assert lab01.check_rotation_shrink(stub, 5.48).untouched
    assert "5.48" not in capsys.readouterr().out
    assert not lab01.check_rotation_shrink(5.0)
    assert "measured=" in capsys.readouterr().out
    result = lab01.check_rotation_shrink(2.0, 5.48, before=22.3, reveal=True)
    assert result.revealed and "5.48x" in result.answer and "4.07 after" in result.answer


def test_gaussian_max_over_rms_is_about_3_3_at_576():
    """Section 1's reference: a Gaussian 576-vector's max/RMS is about 3.2-3.3 (not 3.6)."""
    from vramlab.quarot.outliers import gaussian_max_over_rms

    assert 3.2 <= gaussian_max_over_rms(576) <= 3.35
    assert 3.45 <= gaussian_max_over_rms(1536) <= 3.65
    with pytest.raises(ValueError, match="n must"):
        gaussian_max_over_rms(0)


def test_outlier_explorer_shows_one_token_before_and_after():
    from vramlab.quarot.explorer import outlier_explorer, token_figure

    g = torch.Generator().manual_seed(0)
    before = {"down_in": torch.randn(3, 4, 64, generator=g).half()}
    before["down_in"][1, 2, 5] = 100.0
    after = {"down_in": torch.randn(3, 4, 64, generator=g).half()}
    after["down_in"][1, 2] *= 7          # the rotated model's folded norm: another scale, the same token shape
    fig = token_figure(before, after, layer=1, token=2)
    assert [t.name.split(":")[0] for t in fig.data] == ["rotated", "original"]   # the original drawn on top
    original, rotated = fig.data[1], fig.data[0]
    assert "max/RMS 8.0" in original.name and abs(float(original.y[5]) - 8.0) < 0.05   # bars in units of the RMS
    rms = float((after["down_in"][1, 2].double() ** 2).mean().sqrt())
    assert abs(max(rotated.y) - float(after["down_in"][1, 2].double().abs().max()) / rms) < 1e-3   # one scale
    assert fig.layout.legend.orientation == "h" and fig.layout.legend.yanchor == "bottom"   # above the bars
    with pytest.raises(ValueError, match="layer must be"):
        token_figure(before, after, layer=3, token=0)
    box = outlier_explorer(before, after, layer=0)
    site, layer, token = box.children[0].children
    assert layer.max == 2 and token.max == 3
    layer.value = 1
    token.value = 2   # redraws without error


# --- the learner's butterfly at model scale (issue 29) ---------------------------------------------

def _reference_butterfly(x):
    """Exercise 2's solution, as the complete lesson writes it."""
    return butterfly_solution(x)


@pytest.mark.parametrize("n", [1536, 576, 64, 12])
def test_fwht_with_a_learners_butterfly_equals_fwht(n):
    from vramlab.quarot.butterfly import fwht_with
    from vramlab.quarot.hadamard import fwht

    x = torch.randn(2, 3, n, dtype=torch.float64, generator=torch.Generator().manual_seed(n))
    assert torch.allclose(fwht_with(_reference_butterfly, x), fwht(x), atol=1e-12)
    with pytest.raises(TypeError, match="butterfly must be a function"):
        fwht_with(None, x)


def test_use_butterfly_refuses_a_model_without_an_online_hadamard(smollm2):
    from vramlab.quarot import butterfly

    model, _ = smollm2
    with pytest.raises(ValueError, match="no online Hadamard before down_proj: rotate it first"):
        butterfly.use_butterfly(model, _reference_butterfly)


def test_the_online_hadamard_runs_the_learners_butterfly_and_the_model_stays_invariant(smollm2, windows):
    """The rotated model's online Hadamard calls the learner's function (counted), and the rotated model gives
    the original's logits on a short window: the invariance re-checked with the learner's code inside."""
    from vramlab.quarot import butterfly, rotate

    calls = []

    def mine(x):
        calls.append(tuple(x.shape))
        return _reference_butterfly(x)

    model, _ = smollm2
    rotated = butterfly.use_butterfly(rotate.rotate_model(model, rotation="hadamard", seed=0), mine)
    assert "butterfly=mine" in repr(rotated.model.layers[0].mlp.down_proj[0])
    ids = windows[:1, :64]
    with torch.inference_mode():
        a, b = model(ids).logits, rotated(ids).logits
    assert len(calls) == model.config.num_hidden_layers and calls[0][-1] == 128
    assert (a - b).abs().max() < 1e-3


# --- Exercise 6 (capstone: the cheapest online Hadamard) -----------------------------------------

@pytest.fixture(scope="module")
def down29(smollm2, windows):
    from vramlab.quarot import outliers

    return outliers.capture(smollm2[0], windows[0], layer=29, site="down_in")


def test_online_block_errors_and_the_cheapest_design(down29):
    errors = lab01._block_errors(down29)
    assert set(errors) == set(lab01.BLOCK_CHOICES)
    best = lab01._cheapest_block(errors)
    assert best == "256", {k: round(v, 4) for k, v in errors.items()}
    assert errors["256"] <= 1.1 * errors["full"] < errors["128"]          # a margin either side
    assert errors["32"] < errors["64"]                                      # not monotonic: measure, do not assume
    assert lab01._block_cost("256") == 1536 * 8 and lab01._block_cost("full") == 1536 * (7 + 12)
    assert lab01._block_cost("none") == 0
    # the learner's butterfly gives the same errors as vramlab's fwht
    Xs = down29.double() * __import__("vramlab.quarot.hadamard", fromlist=["x"]).random_signs(1536, 0).double()
    mine = blocks.int4_window_error(_reference_butterfly(Xs.reshape(512, 6, 256)).reshape(512, 1536))
    assert abs(mine - errors["256"]) < 1e-9


def test_online_block_check_teaches_without_telling(down29, capsys):
    from vramlab.checks._core import reset_tries

    reset_tries()
    assert lab01.check_online_block("256", down29) and lab01.check_online_block(256, down29)
    assert capsys.readouterr().out.count("PASS") == 2
    errors = lab01._block_errors(down29)
    target = lab01.BLOCK_TARGET * errors["full"]
    lab01.check_online_block("128", down29)
    out = capsys.readouterr().out
    assert "misses the target" in out and "'256'" not in out and "256:" not in out, out
    # what is wrong, never the target's value nor the errors it is judged on (issue 29's last review)
    assert f"{target:.4f}" not in out and f"{target:.3f}" not in out and "0.1" not in out, out
    lab01.check_online_block("full", down29)
    out = capsys.readouterr().out
    # the designs are ordered: from the second wrong try, no "meets" / "misses" (either points one way)
    assert "not it" in out and "That is try 2" in out and "meets" not in out and "0.1" not in out, out
    reset_tries()
    lab01.check_online_block("512", down29)
    out = capsys.readouterr().out
    # a design that meets the target but is not the cheapest: only that, no cost and no "is it the fewest?"
    assert "this design meets the target" in out and "operations" not in out and "fewest" not in out, out
    assert "13,824" not in out and "?" not in out.split("Hint:")[-1], out
    lab01.check_online_block("64", down29)
    out = capsys.readouterr().out
    assert "not it" in out and "misses" not in out and "0.15" not in out, out   # then no facts, the next hint
    assert lab01.check_online_block(None, down29).untouched
    assert not lab01.check_online_block("3", down29) and "not one of the choices" in capsys.readouterr().out
    result = lab01.check_online_block("8", down29, reveal=True)
    assert result.revealed and result.answer.startswith("'256'")


def test_the_capstone_compares_the_stored_prediction_only_once_the_design_passed(down29, capsys):
    from vramlab import ran
    from vramlab.checks._core import reset_tries

    for stored, words in (("256", "you predicted '256': right"),
                          ("128", "you predicted '128', whose error"),
                          ("full", f"you predicted 'full', which meets the target but costs {1536 * 11:,} more")):
        reset_tries()
        ran._forget()
        assert lab01.check_prediction_stored(stored, choices=lab01.BLOCK_CHOICES)
        assert lab01.check_online_block("256", down29, predicted=stored)
        assert words in capsys.readouterr().out, stored
    reset_tries()
    ran._forget()
    assert lab01.check_online_block("256", down29, predicted=None)
    assert "you predicted" not in capsys.readouterr().out
    assert lab01.check_online_block("256", down29, predicted="128")              # given, never stored: not compared
    out = capsys.readouterr().out
    assert "you predicted" not in out and "no design was stored" in out, out
    ran._forget()
    assert lab01.check_prediction_stored("128", choices=lab01.BLOCK_CHOICES)
    assert not lab01.check_online_block("512", down29, predicted="128")          # a wrong choice: no comparison
    assert "you predicted" not in capsys.readouterr().out
    result = lab01.check_online_block("8", down29, predicted="64", reveal=True)
    assert "you predicted '128' (the label stored first" in result.answer, result.answer


def test_the_design_compared_is_the_first_stored_before_the_measurement(down29, capsys):
    """Review #16 stored '2', then passed predicted='256' to the check and read "right": the check compares the
    first label stored before it first ran, and a changed label stored after it is a reading (refused, not
    counted); the same label again (Run All) passes."""
    from vramlab.checks._core import reset_tries

    reset_tries()
    assert lab01.check_prediction_stored("2", choices=lab01.BLOCK_CHOICES)
    assert lab01.check_online_block("256", down29, predicted="256")
    out = capsys.readouterr().out
    assert "you predicted '2' (the label stored first" in out and ": right" not in out, out
    refused = lab01.check_prediction_stored("256", choices=lab01.BLOCK_CHOICES)
    out = capsys.readouterr().out
    assert not refused and not refused.details.get("counted") and "reading" in out and "'2'" in out, out
    assert lab01.check_prediction_stored("2", choices=lab01.BLOCK_CHOICES)               # Run All: the same label
    assert lab01.check_online_block("256", down29, predicted="2")
    assert "you predicted '2', whose error" in capsys.readouterr().out
    # stored twice before the measurement: the first counts
    from vramlab import ran

    ran._forget()
    assert lab01.check_prediction_stored("64", choices=lab01.BLOCK_CHOICES)
    assert lab01.check_prediction_stored("256", choices=lab01.BLOCK_CHOICES)
    assert "the first you stored, '64'" in capsys.readouterr().out
    assert lab01.check_online_block("256", down29, predicted="256")
    assert "you predicted '64' (the label stored first" in capsys.readouterr().out


def test_the_capstone_judges_fewer_wrong_labels_than_there_are(down29, capsys):
    """Review #16: a cap of 12 wrong attempts never bit on 10 wrong labels; the cap is half of them."""
    from vramlab.checks._core import reset_tries

    reset_tries()
    wrong = [label for label in lab01.BLOCK_CHOICES if label != "256"]
    assert lab01.BLOCK_MAX_WRONG <= len(wrong) // 2
    for label in wrong[:lab01.BLOCK_MAX_WRONG]:
        assert not lab01.check_online_block(label, down29)
    capsys.readouterr()
    refused = lab01.check_online_block("256", down29)
    assert not refused and "judges no more" in capsys.readouterr().out
    assert lab01.check_online_block("256", down29, reveal=True).revealed
    assert lab01.check_online_block("256", down29)
    reset_tries()


def test_the_block_helpers_are_private():
    """Review #16: with block_transform and block_cost public the capstone was one dict comprehension."""
    assert blocks.__all__ == ["int4_window_error"]
    assert not hasattr(blocks, "block_transform") and not hasattr(blocks, "block_cost")
    assert not hasattr(lab01, "block_transform") and not hasattr(lab01, "block_cost")


def test_a_predicted_design_is_stored_as_one_of_the_labels(capsys):
    assert lab01.check_prediction_stored("128", choices=lab01.BLOCK_CHOICES)
    assert lab01.check_prediction_stored(512, choices=lab01.BLOCK_CHOICES)
    assert "'512' stored; the prediction compared with your measurement is the first you stored, '128'" in \
        capsys.readouterr().out
    assert not lab01.check_prediction_stored("huge", choices=lab01.BLOCK_CHOICES)
    assert "not one of them" in capsys.readouterr().out
    assert not lab01.check_prediction_stored(None, choices=lab01.BLOCK_CHOICES)


def test_the_stored_design_outlives_a_kernel_restart(down29, tmp_path, monkeypatch, capsys):
    """The predicted label and the measurement are lasting records: after a restart a changed label is a reading."""
    from vramlab import ran
    from vramlab.checks._core import reset_tries

    monkeypatch.setenv(ran.RAN_ENV, str(tmp_path / "ran.jsonl"))
    reset_tries()
    ran._forget()
    assert lab01.check_prediction_stored("32", choices=lab01.BLOCK_CHOICES)
    assert lab01.check_online_block("256", down29)
    ran._RAN.clear()                      # a kernel restart: only the lasting file remains
    ran._APPENDED.clear()
    assert not lab01.check_prediction_stored("256", choices=lab01.BLOCK_CHOICES)
    assert "reading" in capsys.readouterr().out
    assert lab01.check_online_block("256", down29, predicted="256")
    assert "you predicted '32' (the label stored first" in capsys.readouterr().out
    ran._forget()
