"""Every lab-05 check rejects the lab's stubs and typical wrong answers, and accepts the solution."""

from __future__ import annotations

import math
import re
import types

import pytest
import torch

from vramlab import checks
from vramlab.checks import lab05
from vramlab.mla import apply_rope


def _raises(*args):
    raise NotImplementedError


def keys_by_hand(layer, x):
    cfg = layer.config
    c, k_rope = layer.kv_a_proj_with_mqa(x).split([cfg.kv_lora_rank, cfg.qk_rope_head_dim], dim=-1)
    c = layer.kv_a_layernorm(c)
    cos, sin = layer.rope_cos_sin(torch.arange(x.shape[1])[None], x.dtype)
    k_rope = apply_rope(k_rope, cos, sin, cfg.rope_interleave)
    w_uk, _ = layer.w_uk_uv()
    k_nope = torch.einsum("hdc,btc->bhtd", w_uk, c)
    b, h, t, _ = k_nope.shape
    return torch.cat([k_nope, k_rope[:, None].expand(b, h, t, -1)], dim=-1)


def keys_unrotated(layer, x):
    cfg = layer.config
    c, k_rope = layer.kv_a_proj_with_mqa(x).split([cfg.kv_lora_rank, cfg.qk_rope_head_dim], dim=-1)
    k_nope = torch.einsum("hdc,btc->bhtd", layer.w_uk_uv()[0], layer.kv_a_layernorm(c))
    b, h, t, _ = k_nope.shape
    return torch.cat([k_nope, k_rope[:, None].expand(b, h, t, -1)], dim=-1)


def absorbed(q, c, w):
    return torch.einsum("htd,hdc->htc", q, w) @ c.T


def naive_scores(q, c, w):
    keys = torch.einsum("hdc,sc->hsd", w, c)             # every head's keys [H, S, d_n]: what Ex 3 forbids
    return q @ keys.transpose(-1, -2)


def naive_matmul(q, c, w):
    return q @ (w @ c.T)                                  # [H, d_n, S]: the same keys, transposed


def naive_flat(q, c, w):
    h, d, r = w.shape
    keys = (w.reshape(h * d, r) @ c.T)                    # [H * d_n, S]: heads merged into one axis
    return q @ keys.reshape(h, d, -1)


SOLUTIONS = {
    "check_mla_gqa_heads": 2.25,
    "check_latent_per_layer_ratio": 1.0,
    "check_v2_lite_expansion": 16 * (128 + 64 + 128) / (512 + 64),
    "check_keys_by_hand": keys_by_hand,
    "check_absorbed_scores": absorbed,
    "check_prediction_recorded": 20.0,
    "check_conversion_prediction": 20.0,
    "check_absorbed_in_smollm2": absorbed,
    "check_plan_budget": [130] * 30,
    "check_rank_plan": "reference",          # lab05._reference_ranks(), measured in test_rank_plan_*
}
WRONG = {
    "check_mla_gqa_heads": 4.5,                                    # K and V: forgot the factor 2
    "check_latent_per_layer_ratio": 8.0,                           # scaled by the query heads
    "check_v2_lite_expansion": 16 * 2 * 64 / 576,                  # config.head_dim trap
    "check_keys_by_hand": keys_unrotated,                          # RoPE forgotten
    "check_absorbed_scores": lambda q, c, w: absorbed(q, c, w).sum(0),  # heads summed
    "check_prediction_recorded": 0.5,                             # below 1 is not a perplexity
    "check_conversion_prediction": float("nan"),
    "check_absorbed_in_smollm2": lambda q, c, w: absorbed(q, c, w) * 1.01,   # not the same logits
    "check_plan_budget": [131] * 30,                               # fits only without whole blocks
    "check_rank_plan": [130] * 30,                                 # fits, but one rank for all
}
STUBS = [None, lambda *a: None, _raises]


@pytest.fixture(scope="module")
def capstone(smollm2):
    """SmolLM2, the capstone's window and the calibration covariances, as the notebook builds them."""
    from vramlab.data import token_windows
    from vramlab.mla import collect_input_covariance

    model, tok = smollm2
    window = token_windows(tok, n_windows=1, length=512)
    covs = collect_input_covariance(model, token_windows(tok, n_windows=4, length=512, offset=8 * 512))
    return model, window, covs


def _call(name, value, capstone):
    """Call a lab-05 check the way the notebook does (the model-scale checks get the notebook's model)."""
    model, window, covs = capstone
    if name == "check_rank_plan":
        return lab05.check_rank_plan(lab05._reference_ranks() if value == "reference" else value, model, window, covs)
    if name == "check_absorbed_in_smollm2":
        return lab05.check_absorbed_in_smollm2(value, model, window)
    return getattr(lab05, name)(value)


def test_every_check_is_exported_and_covered():
    assert set(lab05.__all__) == set(SOLUTIONS) == set(WRONG)
    for name in lab05.__all__:
        assert getattr(checks, name) is getattr(lab05, name)


@pytest.mark.parametrize("name", sorted(SOLUTIONS))
def test_solution_passes(name, capstone, capsys):
    result = _call(name, SOLUTIONS[name], capstone)
    assert result.passed and capsys.readouterr().out.startswith("PASS")


@pytest.mark.parametrize("name", sorted(SOLUTIONS))
@pytest.mark.parametrize("stub", range(len(STUBS)))
def test_stubs_fail_without_raising_or_revealing(name, stub, capsys):
    result = getattr(lab05, name)(STUBS[stub])     # a stub is refused before any model runs
    out = capsys.readouterr().out
    assert not result.passed and out.startswith("FAIL")
    out = re.sub(r" at 0x[0-9a-f]+", "", out)   # a function's repr: its address held "178" in one run
    for secret in ("2.25", "8.88", "178", "23.1"):
        assert secret not in out


@pytest.mark.parametrize("name", sorted(WRONG))
def test_plausible_wrong_answers_fail(name, capstone, capsys):
    result = _call(name, WRONG[name], capstone)
    assert not result.passed and "expected" in capsys.readouterr().out


def test_hints_name_the_actual_mistake(capsys):
    lab05.check_mla_gqa_heads(512 / 256)
    assert "RoPE key" in capsys.readouterr().out
    lab05.check_mla_gqa_heads(4.5)
    assert "a key and a value" in capsys.readouterr().out
    lab05.check_latent_per_layer_ratio(61 / 27)
    assert "whole model" in capsys.readouterr().out
    lab05.check_v2_lite_expansion(16 * 2 * 64 / 576)
    assert "trap" in capsys.readouterr().out
    lab05.check_v2_lite_expansion(128 * 320 / 576)
    assert "DeepSeek-V3's 128 heads" in capsys.readouterr().out
    lab05.check_keys_by_hand(keys_unrotated)
    assert "rotated" in capsys.readouterr().out
    lab05.check_absorbed_scores(WRONG["check_absorbed_scores"])
    assert "do not sum over h" in capsys.readouterr().out


def test_prediction_accepts_any_honest_number_and_reports_distance(capsys):
    for guess in (14.8, 100, 1e6):
        assert lab05.check_prediction_recorded(guess)
        assert "measured" not in capsys.readouterr().out     # nothing revealed before the curve
        assert lab05.check_conversion_prediction(guess)
        assert "measured" in capsys.readouterr().out


@pytest.mark.parametrize("naive", [naive_scores, naive_matmul, naive_flat])
def test_absorbed_check_refuses_right_numbers_from_per_head_keys(naive, capsys):
    """The naive functions give the right scores; the check still fails them, naming the key tensor."""
    q, c, w = torch.randn(3, 2, 5), torch.randn(37, 11), torch.randn(3, 5, 11)
    assert torch.allclose(naive(q, c, w), absorbed(q, c, w), atol=1e-5)
    result = lab05.check_absorbed_scores(naive)
    out = capsys.readouterr().out
    assert not result.passed and "every head's keys" in out and "built a tensor of shape" in out, out
    assert lab05.check_absorbed_scores(absorbed)
    assert "no per-head key was built" in capsys.readouterr().out


def test_absorbed_check_accepts_other_absorbed_spellings(capsys):
    for fn in (lambda q, c, w: torch.bmm(torch.bmm(q, w), c.T.expand(q.shape[0], -1, -1)),
               lambda q, c, w: torch.einsum("htc,sc->hts", torch.einsum("htd,hdc->htc", q, w), c)):
        assert lab05.check_absorbed_scores(fn), capsys.readouterr().out


def test_v3_softmax_scale_in_the_checks_config():
    from vramlab.mla import MLAConfig
    assert round(MLAConfig.from_config("deepseek-v3").softmax_scale(), 4) == 0.1352


def test_rank_plan_judges_the_budget_exactly_in_whole_blocks(capsys):
    """16 users x 4,000 tokens in 64-token blocks = 64,512 tokens; 480 MiB / (64,512 x 2 bytes) allows 3,900
    values per token: 130 per layer fits, 131 fits only without paging, and the check says which."""
    from vramlab.mla import plan_cache_mib

    assert plan_cache_mib([130] * 30, 4000, 16) <= 480 < plan_cache_mib([131] * 30, 4000, 16)
    assert sum(lab05._reference_ranks()) == 3900 and lab05.plan_budget_ok(lab05._reference_ranks())
    assert not lab05.check_rank_plan([131] * 30)
    assert "whole 64-token blocks" in capsys.readouterr().out
    assert lab05.check_plan_budget([130] * 30) and "479.9 MiB of 480" in capsys.readouterr().out
    assert not lab05.check_plan_budget([131] * 30)
    assert "whole 64-token blocks" in capsys.readouterr().out
    assert not lab05.check_rank_plan([200] * 30)
    out = capsys.readouterr().out
    assert "over the budget" in out and "blocks" not in out.split("Hint:")[1]
    assert not lab05.check_rank_plan([130] * 6)
    assert "expand_groups" in capsys.readouterr().out
    assert not lab05.check_rank_plan([130.5] * 30)
    assert "whole number" in capsys.readouterr().out
    assert not lab05.check_rank_plan([385] + [100] * 29)
    assert "1..384" in capsys.readouterr().out
    assert not lab05.check_rank_plan("130")
    capsys.readouterr()


def test_rank_plan_measures_live_and_never_tells_the_ranks(capstone, capsys):
    """One rank for all fits but fails; the reference plan passes; the complete lesson's plan (cheapest group
    gives 48 to the dearest) passes; the spectrum's plan fails; no FAIL line prints the reference's ranks."""
    from vramlab import mla

    model, window, covs = capstone
    check = lambda ranks: lab05.check_rank_plan(ranks, model, window, covs)  # noqa: E731
    assert not check([130] * 30)
    out = capsys.readouterr().out
    assert "one rank for every layer" in out and "178" not in out and "82, 124" not in out, out
    assert check(lab05._reference_ranks())
    capsys.readouterr()
    lesson = mla.expand_groups([130, 130, 130, 130, 178, 82], 5)
    assert check(lesson), capsys.readouterr().out
    capsys.readouterr()
    spectra = mla.kv_spectra(model, covs)
    assert not check(mla.variance_plan(spectra, 3900))
    out = capsys.readouterr().out
    assert "measures clearly lower" in out and "178" not in out, out
    ref = lab05._measured_ppl(model, window, covs, lab05._reference_ranks())
    uniform = lab05._measured_ppl(model, window, covs, [130] * 30)
    assert ref < 0.93 * uniform                              # the budget is worth spending unevenly


def test_absorbed_in_smollm2_runs_the_learners_function_in_every_layer(capstone, capsys):
    model, window, _ = capstone
    calls = []

    def counting(q, c, w):
        calls.append(tuple(q.shape))
        return absorbed(q, c, w)

    assert lab05.check_absorbed_in_smollm2(counting, model, window)
    assert len(calls) == 1 + 30 * 3 and calls[1] == (3, 128, 128)   # the probe, then 30 layers x 3 KV heads
    assert "max |logit difference|" in capsys.readouterr().out
    assert not lab05.check_absorbed_in_smollm2(lambda q, c, w: q @ w @ c.T if q.shape[1] == 1 else 1 / 0,
                                               model, window)
    out = capsys.readouterr().out
    assert "ZeroDivisionError" in out and "any sizes" in out, out
    assert type(model.model.layers[0].self_attn).__name__ == "LlamaAttention"       # restored
    assert type(model.model.layers[0].self_attn.k_proj).__name__ == "Linear"


def test_the_prediction_is_graded_on_windows_the_plan_was_not_tuned_on(capstone, windows, capsys):
    """try_plan and the check measure window 1; the prediction is compared with windows 6-8, which neither measures,
    so no number printed while exploring is the one predicted. The yardstick printed before the prediction is one
    rank for all there (it names no rank)."""
    from vramlab import mla

    model, window, covs = capstone
    held = lab05.heldout_windows(windows)
    assert torch.equal(window[0], windows[0]) and tuple(held.shape) == (3, 512)
    assert not any(torch.equal(held[i], window[0]) for i in range(3))
    base = lab05.heldout_baseline(model, windows, covs)
    out = capsys.readouterr().out
    assert "windows 6-8" in out and f"{base:.2f}" in out and "130" not in out, out
    lesson = mla.expand_groups([130, 130, 130, 130, 178, 82], 5)
    assert lab05.check_rank_plan(lesson, model, window, covs)
    explored = capsys.readouterr().out
    result = lab05.heldout_prediction(18.0, lesson, model, windows, covs)
    out = capsys.readouterr().out
    actual = lab05._measured_ppl(model, held, covs, lesson)
    assert result.passed and f"{actual:.2f}" in out and "windows 6-8" in out, out
    assert f"{actual:.2f}" not in explored
    assert abs(actual - lab05._measured_ppl(model, window, covs, lesson)) > 1     # another number than window 1's
    assert actual < base                                                        # the plan's lead survives there
    for bad in (None, [131] * 30, [130] * 6):
        assert lab05.heldout_prediction(18.0, bad, model, windows, covs) is None
        assert "once plan_ranks is 30 ranks that fit" in capsys.readouterr().out
    with pytest.raises(ValueError, match="8, 512"):
        lab05.heldout_windows(window)


def test_after_capstone_holds_the_reference_plan_until_a_pass_or_a_reveal(capstone, windows, capsys):
    model, window, covs = capstone
    failed = lab05.check_rank_plan([130] * 30, model, window, covs)
    capsys.readouterr()
    lab05.after_capstone(failed, model, window, windows, covs)
    out = capsys.readouterr().out
    assert out.strip() == lab05.AFTER_CAPSTONE_WAITS and "178" not in out and "variance" not in out
    for result in (lab05.check_rank_plan(lab05._reference_ranks(), model, window, covs),
                   lab05.check_rank_plan([130] * 30, model, window, covs, reveal=True)):
        capsys.readouterr()
        lab05.after_capstone(result, model, window, windows, covs)
        out = capsys.readouterr().out
        assert "reference plan" in out and "[178, 82, 124, 130, 178, 88]" in out and "Kept variance" in out, out
        rows = {m[1].strip(): (float(m[2]), float(m[3])) for m in
                re.finditer(r"^(.{20}) +[\d.]+ MiB +([\d.]+) +([\d.]+) ", out, re.M)}
        assert set(rows) == {"one rank for all", "most variance kept", "reference plan"}, out
        for column in (0, 1):      # window 1, and windows 6-8 the plan was not tuned on
            assert rows["reference plan"][column] < min(rows["one rank for all"][column],
                                                        rows["most variance kept"][column]), out


def test_no_markdown_under_the_capstones_check_holds_its_decision():
    """JupyterLab shows the markdown below a check while the learner works: from the capstone's check to the end of
    the lab, no markdown cell says how to spend the budget or names the reference plan's ranks."""
    from pathlib import Path

    import nbformat

    nb = nbformat.read(Path(__file__).resolve().parents[1] / "notebooks" / "05_mla_latent_cache.ipynb", as_version=4)
    at = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and "check_rank_plan(" in c.source)
    going_deeper = next(i for i, c in enumerate(nb.cells) if c.cell_type == "markdown" and "## Going deeper" in c.source)
    for cell in nb.cells[at + 1:going_deeper]:
        if cell.cell_type == "markdown":
            assert not re.search(r"variance|evenly|178|reference plan", cell.source, re.I), cell.source
    predict = next(i for i, c in enumerate(nb.cells) if "predicted_plan_ppl, None" in c.source)
    assert predict < at                                  # the prediction is stored before the plan is measured


# ------------------------------------------------------------------ unseen review #16: the held-out number is a reading
LESSON_GROUPS = [130, 130, 130, 130, 178, 82]


def _store(value, capsys):
    from vramlab.checks import check_prediction
    from vramlab.mla.heldout import HELDOUT_PREDICTION

    result = check_prediction(value, None, HELDOUT_PREDICTION)
    return result, capsys.readouterr().out


def test_the_heldout_record_is_check_predictions_own_kind_and_the_notebooks_words():
    import json
    from pathlib import Path

    from vramlab.checks import lab00
    from vramlab.mla import heldout

    assert heldout.MEASURED_KIND == lab00._REVEALED_KIND
    cells = json.loads(Path(__file__).parents[1].joinpath("labs/05_mla_latent_cache.ipynb").read_text())["cells"]
    assert any(f'"{heldout.HELDOUT_PREDICTION}"' in "".join(c["source"]) for c in cells)
    assert not hasattr(lab05, "measured_ppl")          # the check's measuring helper is private now


def test_only_a_run_on_the_heldout_windows_shares_them(windows, smollm2):
    """Windows 1-5 (try_plan's window 1, Exercise 4's windows 1-2) and the calibration windows share no tokens with
    windows 6-8; a slice, a copy, a shift by one token or 200 tokens of one of them do."""
    from vramlab.data import token_windows
    from vramlab.mla.heldout import shares_heldout

    calibration = token_windows(smollm2[1], n_windows=4, length=512, offset=8 * 512)
    assert not any(shares_heldout(windows[i:i + 1]) for i in range(5))
    assert not shares_heldout(windows[:5]) and not shares_heldout(calibration)
    for held in (windows[5:8], windows[5:8].clone(), windows[6], windows[5:8, 1:], windows[7:8, :200],
                 windows[5:8].tolist()):
        assert shares_heldout(held)
    assert not shares_heldout(windows[6, :100]) and not shares_heldout("windows 6-8") and not shares_heldout(None)


def test_a_learners_measurement_on_the_heldout_windows_makes_a_later_prediction_a_reading(capstone, windows,
                                                                                           capsys):
    """Unseen review #16: ``measured_ppl(model, heldout_windows(windows), covariances, plan_ranks)`` and
    ``mla.measure_ranks(..., windows[5:8], ...)`` returned the number step 2 asks to predict, and a prediction stored
    after it passed. Now such a run is the prediction's measurement: a prediction stored after it is refused
    (counts=False), and the comparison after the check does not take a number stored after it either."""
    from vramlab import mla

    model, _, covs = capstone
    lesson = mla.expand_groups(LESSON_GROUPS, 5)
    read = mla.measure_ranks(model, lesson, windows[5:8], covs)["ppl"]
    result, out = _store(round(read, 2), capsys)
    assert not result.passed and "counted" not in result.details and "a reading" in out, out
    compared = lab05.heldout_prediction(round(read, 2), lesson, model, windows, covs)
    assert not compared.passed and "a reading" in capsys.readouterr().out


def test_a_run_by_hand_inside_latent_ranks_counts_and_the_prediction_stored_before_still_does(capstone, windows,
                                                                                               capsys):
    from vramlab import mla
    from vramlab.mla.conversion import windows_nll_and_ppl
    from vramlab.mla.heldout import heldout_was_measured

    model, _, covs = capstone
    lesson = mla.expand_groups(LESSON_GROUPS, 5)
    assert _store(17.0, capsys)[0].passed
    with mla.latent_ranks(model, lesson, covs):
        windows_nll_and_ppl(model, windows[6:7, 1:])          # one held-out window, shifted by a token
    assert heldout_was_measured()
    assert _store(17.0, capsys)[0].passed                       # Run All again: the same prediction
    result, out = _store(15.0, capsys)
    assert not result.passed and "counted" not in result.details and "17" in out, out
    compared = lab05.heldout_prediction(15.0, lesson, model, windows, covs)
    out = capsys.readouterr().out
    assert compared.passed and "you predicted 17" in out, out


def test_the_labs_own_cells_and_the_checks_runs_note_no_reading(capstone, windows, capsys):
    """The yardstick before the prediction, try_plan on window 1, both checks and the cells after the prediction
    (the comparison, the three plans side by side) are the lab's: a prediction stored after them still counts."""
    from vramlab import mla
    from vramlab.mla.heldout import heldout_was_measured

    model, window, covs = capstone
    lesson = mla.expand_groups(LESSON_GROUPS, 5)
    lab05.heldout_baseline(model, windows, covs)
    mla.measure_ranks(model, lesson, window, covs)               # try_plan
    passed = lab05.check_rank_plan(lesson, model, window, covs)
    lab05.after_capstone(passed, model, window, windows, covs)
    assert passed and not heldout_was_measured()
    assert _store(17.0, capsys)[0].passed


@pytest.mark.parametrize("fake", [True, 1, "passed", types.SimpleNamespace(revealed=True, passed=True)])
def test_after_capstone_opens_only_for_a_result_the_check_issued(fake, capsys):
    from vramlab.checks._core import CheckResult

    for result in (fake, CheckResult("capstone: latent ranks under a 480 MiB cache", True, "", "", revealed=True)):
        lab05.after_capstone(result, None, None, None, None)
        assert capsys.readouterr().out.strip() == lab05.AFTER_CAPSTONE_WAITS
