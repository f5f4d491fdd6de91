"""Every lab-02 check rejects the lab's stubs (and plausible wrong answers) and accepts the solution."""

from __future__ import annotations

import pytest
import torch

from vramlab import checks
from vramlab.checks import lab02


def _raises(*args):
    raise NotImplementedError


def per_token_solution(x, bits, clip_ratio):
    qmax = 2 ** (bits - 1) - 1
    scale = (x.abs().amax(dim=-1, keepdim=True) * clip_ratio / qmax).clamp_min(1e-12)
    return torch.clamp(torch.round(x / scale), -qmax - 1, qmax) * scale


def kv_solution(x, bits, group_size, clip_ratio):
    g = x.reshape(*x.shape[:-1], x.shape[-1] // group_size, group_size)
    lo = g.amin(-1, keepdim=True).clamp_max(0) * clip_ratio
    hi = g.amax(-1, keepdim=True).clamp_min(0) * clip_ratio
    scale = ((hi - lo) / (2 ** bits - 1)).clamp_min(1e-12)
    zero = torch.round(-lo / scale)
    q = torch.clamp(torch.round(g / scale) + zero, 0, 2 ** bits - 1)
    return ((q - zero) * scale).reshape(x.shape)


def per_token_whole_tensor(x, bits, clip_ratio):  # one scale for the whole tensor
    qmax = 2 ** (bits - 1) - 1
    scale = x.abs().max() * clip_ratio / qmax
    return torch.clamp(torch.round(x / scale), -qmax - 1, qmax) * scale


def per_token_no_clamp(x, bits, clip_ratio):  # clip ratio used but values never clamped
    qmax = 2 ** (bits - 1) - 1
    scale = (x.abs().amax(dim=-1, keepdim=True) * clip_ratio / qmax).clamp_min(1e-12)
    return torch.round(x / scale) * scale


def kv_symmetric(x, bits, group_size, clip_ratio):  # symmetric, not asymmetric
    g = x.reshape(*x.shape[:-1], x.shape[-1] // group_size, group_size)
    qmax = 2 ** (bits - 1) - 1
    scale = (g.abs().amax(-1, keepdim=True) * clip_ratio / qmax).clamp_min(1e-12)
    return (torch.clamp(torch.round(g / scale), -qmax - 1, qmax) * scale).reshape(x.shape)


def kv_per_token_not_grouped(x, bits, group_size, clip_ratio):  # ignores group_size
    return kv_solution(x, bits, x.shape[-1], clip_ratio)


SOLUTIONS = {
    "check_per_token_quantizer": per_token_solution,
    "check_kv_quantizer": kv_solution,
    "check_kv4_bytes_per_token": 2 * 30 * 3 * (64 // 2 + 2 + 2),
    "check_mixed_plan": None,      # filled below: the reference search's best plan, as the notebook stores it
    "check_layers_prediction": [0, 1, 29],
}
WRONG = {
    "check_per_token_quantizer": [per_token_whole_tensor, per_token_no_clamp,
                                  lambda x, b, c: x, lambda x, b, c: per_token_solution(x, b, c)[..., :-1]],
    "check_kv_quantizer": [kv_symmetric, kv_per_token_not_grouped, lambda x, b, g, c: x.tolist()],
    "check_kv4_bytes_per_token": [2 * 30 * 3 * 64 // 2, 2 * 30 * 9 * (32 + 4), 2 * 30 * 3 * 64 * 2],
    # over the budget (6 layers; KV8 with 2 layers), malformed (a float, a bare list, a layer out of range,
    # a repeated layer, kv_bits 16)
    "check_mixed_plan": [{"eight_bit_layers": list(range(6)), "kv_bits": 4}, {"eight_bit_layers": [0, 1], "kv_bits": 8},
                         3.5, [0, 1, 2], {"eight_bit_layers": [30], "kv_bits": 4},
                         {"eight_bit_layers": [1, 1], "kv_bits": 4}, {"eight_bit_layers": [0], "kv_bits": 16}],
    "check_layers_prediction": [[], [0, 1, 2, 3, 4, 5], [31], "0, 1", [1, 1], 2.5],
}


def _reference_plan():
    return lab02._reference()["plan"]


SOLUTIONS["check_mixed_plan"] = _reference_plan()
STUBS = [None, lambda *a: None, _raises]


def test_every_check_is_exported_and_covered():
    assert set(lab02.__all__) == set(SOLUTIONS) | {"check_w16a4_prediction"} and set(SOLUTIONS) == set(WRONG)
    for name in lab02.__all__:
        assert getattr(checks, name) is getattr(lab02, name)


@pytest.mark.parametrize("name", sorted(SOLUTIONS))
def test_solution_passes(name, capsys):
    result = getattr(lab02, name)(SOLUTIONS[name])
    out = capsys.readouterr().out
    assert result.passed and out.startswith("PASS"), out


def test_package_quantizers_agree_with_the_solutions():
    """The checks' references are vramlab's own quantizers; the hand-written solutions match them."""
    import torch

    from vramlab.quarot.quant import quantize_groupwise_asym, quantize_per_token_sym

    g = torch.Generator().manual_seed(7)
    x = torch.randn(2, 3, 5, 64, generator=g)
    assert torch.allclose(quantize_per_token_sym(x, 4, 0.9), per_token_solution(x, 4, 0.9))
    assert torch.allclose(quantize_groupwise_asym(x, 4, 32, 0.95), kv_solution(x, 4, 32, 0.95), atol=1e-6)


def _per_token_via_import(x, b, c):
    from vramlab.quarot.quant import quantize_per_token_sym   # imported inside the learner's function

    return quantize_per_token_sym(x, b, c)


def _per_token_via_module_quantizer(x, b, c):
    from vramlab.quarot import quant

    return quant.ActQuantizer(b, c)(x)     # the nn.Module the quantized model uses calls the same function


def _per_token_via_package(x, b, c):
    import vramlab.quarot.quant

    return vramlab.quarot.quant.quantize_per_token_sym(x, b, c)


@pytest.mark.parametrize("bypass", [_per_token_via_import, _per_token_via_module_quantizer, _per_token_via_package])
def test_every_route_to_vramlabs_quantizer_is_refused(bypass, capsys):
    """Issue 19: however the learner reaches quant.quantize_per_token_sym, the check says to write it."""
    assert not lab02.check_per_token_quantizer(bypass)
    out = capsys.readouterr().out
    assert "vramlab's own quarot.quant.quantize_per_token_sym; write it yourself" in out, out
    from vramlab.quarot import quant

    assert quant.quantize_per_token_sym.__name__ == "quantize_per_token_sym"   # put back afterwards
    assert lab02.check_per_token_quantizer(per_token_solution)


def test_mixed_plan_says_what_is_wrong_and_never_the_plan(capsys):
    """Over budget: by how much, in bytes and MiB. Within budget but above the target: room left is said (budget
    arithmetic); a full plan, KV4 or KV8, reads the same (review #19), never the reference plan or its perplexity."""
    from vramlab.quarot import mixed_bits as mb

    ref = lab02._reference()
    secret_layers = str(ref["plan"]["eight_bit_layers"])
    assert not lab02.check_mixed_plan({"eight_bit_layers": list(range(6)), "kv_bits": 4})
    out = capsys.readouterr().out
    over = mb.plan_bytes({"eight_bit_layers": list(range(6)), "kv_bits": 4})["total"] - mb.BUDGET_BYTES
    assert f"over the 66 MiB budget by {over:,} bytes" in out, out
    ranking = mb._load_reference()["ranking"]
    weakest = sorted(ranking[-5:])                       # the five layers that gain least: within budget, far off
    full = []
    for plan, phrase in (({"eight_bit_layers": ranking[-2:], "kv_bits": 4}, "leaves part of the budget unused"),
                         ({"eight_bit_layers": ranking[-1:], "kv_bits": 8}, "perplexity is above the target"),
                         ({"eight_bit_layers": weakest, "kv_bits": 4}, "perplexity is above the target")):
        result = lab02.check_mixed_plan(plan)
        out = capsys.readouterr().out
        assert not result and phrase in out, out
        assert "8-bit cache" not in out and "measure" not in out, out     # review #19: neither names the part or the way
        if phrase.startswith("perplexity"):
            full.append(out.split("Hint:")[1].split(".")[0])
        assert secret_layers not in out and f"{ref['ppl']:.2f}" not in out and f"{ref['target']:.2f}" not in out, out
        assert "room for" not in out and "to spare" not in out, out     # no counting done for the learner


def test_layers_prediction_stores_then_compares(capsys):
    assert lab02.check_layers_prediction([29, 0])
    assert "[0, 29] stored; now measure" in capsys.readouterr().out
    ranking = list(range(29, -1, -1))
    assert lab02.check_layers_prediction([29, 0], ranking)
    assert "layer 0 ranks #30, layer 29 ranks #1 of 30" in capsys.readouterr().out


def test_calling_vramlabs_own_quantizer_is_refused(capsys):
    """Lab 02's exercises cannot be bypassed with quant.quantize_per_token_sym (issue 19)."""
    from vramlab.quarot import quant

    for fn in (lambda x, b, c: quant.quantize_per_token_sym(x, b, c), quant.quantize_per_token_sym):
        assert not lab02.check_per_token_quantizer(fn)
        out = capsys.readouterr().out
        assert "vramlab's own quarot.quant.quantize_per_token_sym; write it yourself" in out, out
    assert not lab02.check_kv_quantizer(lambda x, b, gs, c: quant.quantize_groupwise_asym(x, b, gs, c))
    assert "vramlab's own quarot.quant.quantize_groupwise_asym" in capsys.readouterr().out
    assert lab02.check_per_token_quantizer(per_token_solution)   # everything put back


@pytest.mark.parametrize("name", sorted(SOLUTIONS))
@pytest.mark.parametrize("stub", range(len(STUBS)))
def test_stubs_fail_without_raising(name, stub, capsys):
    result = getattr(lab02, name)(STUBS[stub])
    out = capsys.readouterr().out
    assert not result.passed and out.startswith("FAIL") and "expected" in out, out


@pytest.mark.parametrize("name,index", [(n, i) for n in sorted(WRONG) for i in range(len(WRONG[n]))])
def test_plausible_wrong_answers_fail(name, index, capsys):
    result = getattr(lab02, name)(WRONG[name][index])
    out = capsys.readouterr().out
    assert not result.passed and "expected" in out, out


def test_quantizer_checks_reject_nan_and_a_missing_scale_clamp():
    import math

    import torch

    from vramlab.checks import check_kv_quantizer, check_per_token_quantizer

    assert not check_per_token_quantizer(lambda x, b, c: torch.full_like(x, math.nan))
    assert not check_kv_quantizer(lambda x, b, g, c: torch.full_like(x, math.nan))

    def no_clamp(x, bits, clip):  # the all-zero token gives 0/0
        s = x.abs().amax(-1, keepdim=True) * clip / (2 ** (bits - 1) - 1)
        return (x / s).round().clamp(-2 ** (bits - 1), 2 ** (bits - 1) - 1) * s

    assert not check_per_token_quantizer(no_clamp)


def test_in_place_solution_does_not_corrupt_later_cases():
    from vramlab.checks import check_per_token_quantizer

    def in_place(x, bits, clip):   # written by hand: vramlab's own quantizer would be refused
        x.copy_(per_token_solution(x, bits, clip))
        return x

    assert check_per_token_quantizer(in_place)


@pytest.mark.parametrize("value, hint", [
    (5760, "also stores a float16 scale"),
    (3240, "the cache holds K and V"),
    (19440, "9 is the number of query heads"),
    (23040, "that is float16"),
])
def test_kv4_bytes_hint_matches_the_mistake(value, hint, capsys):
    assert not lab02.check_kv4_bytes_per_token(value)
    out = capsys.readouterr().out
    assert hint in out and "6,480" not in out, out


def test_untouched_value_stub_does_not_reveal_the_answer(capsys):
    assert not lab02.check_kv4_bytes_per_token(None)
    out = capsys.readouterr().out
    assert "not done yet" in out and "6,480" not in out


@pytest.mark.parametrize("wrong, hint", [
    (per_token_whole_tensor, "one scale for the whole tensor"),
    (per_token_no_clamp, "clamp the integers"),
])
def test_per_token_hint_matches_the_mistake(wrong, hint, capsys):
    assert not lab02.check_per_token_quantizer(wrong)
    assert hint in capsys.readouterr().out


def test_per_token_hint_for_the_unsigned_range_and_missing_dequantize(capsys):
    def unsigned(x, bits, clip):
        qmax = 2 ** bits - 1
        s = (x.abs().amax(-1, keepdim=True) * clip / qmax).clamp_min(1e-12)
        return torch.clamp(torch.round(x / s), -qmax - 1, qmax) * s

    def integers(x, bits, clip):
        qmax = 2 ** (bits - 1) - 1
        s = (x.abs().amax(-1, keepdim=True) * clip / qmax).clamp_min(1e-12)
        return torch.clamp(torch.round(x / s), -qmax - 1, qmax)

    assert not lab02.check_per_token_quantizer(unsigned)
    assert "positive side (7 at 4 bits)" in capsys.readouterr().out
    assert not lab02.check_per_token_quantizer(integers)
    assert "multiply them back" in capsys.readouterr().out


def test_per_token_hint_for_a_step_set_by_the_grids_negative_end(capsys):
    """Exercise 1 asks the learner to choose the step: dividing by 2**(bits-1) (the negative end, 8 at 4 bits)
    clamps a positive maximum; the hint names that, not the divisor."""
    def negative_end(x, bits, clip):
        s = (x.abs().amax(-1, keepdim=True) * clip / 2 ** (bits - 1)).clamp_min(1e-12)
        return torch.clamp(torch.round(x / s), -2 ** (bits - 1), 2 ** (bits - 1) - 1) * s

    assert not lab02.check_per_token_quantizer(negative_end)
    out = capsys.readouterr().out
    assert "both signs of the clipped range must fit" in out and "2**(bits-1) - 1" not in out


@pytest.mark.parametrize("wrong, hint", [
    (kv_symmetric, "zero point"),
    (kv_per_token_not_grouped, "one range per group"),
])
def test_kv_hint_matches_the_mistake(wrong, hint, capsys):
    assert not lab02.check_kv_quantizer(wrong)
    assert hint in capsys.readouterr().out


def test_w16a4_prediction(capsys):
    assert not lab02.check_w16a4_prediction(None, 2379.4, 14.7)
    out = capsys.readouterr().out
    assert out.startswith("FAIL") and "2,379" not in out and "2379" not in out
    assert lab02.check_w16a4_prediction(30, 2379.4, 14.7)
    out = capsys.readouterr().out
    assert out.startswith("PASS") and "79.3x too low" in out
    assert not lab02.check_w16a4_prediction(-1, 2379.4, 14.7)


def _lab02_screens():
    """Per cell of the complete lesson: its source and every output (the chart's JSON included), as text."""
    import json
    from pathlib import Path

    nb = json.loads((Path(__file__).resolve().parents[1] / "notebooks" / "02_w4a4kv4.ipynb").read_text("utf-8"))
    return [("".join(c["source"]) + "\n" + json.dumps(c.get("outputs", []))) for c in nb["cells"]]


def test_the_capstones_reference_comes_after_its_check():
    """Issue 29: no cell before the capstone's check shows the reference plan, its perplexity or the per-layer
    ranking; the reference search is printed after the check (and only for a plan that passed). The cached
    QuaRot table still comes after the KV4 prediction it answers."""
    import re

    from vramlab.quarot import mixed_bits as mb

    ref, cached = lab02._reference(), mb._load_reference()
    answers = [str(ref["plan"]["eight_bit_layers"]), f"{ref['ppl']:.2f}", f"{ref['target']:.2f}",
               str(cached["ranking"][:5])[1:-1]]
    screens = _lab02_screens()
    check = next(i for i, s in enumerate(screens) if "check_mixed_plan(my_plan, scorer)" in s)
    for i, screen in enumerate(screens[:check]):
        for answer in answers:
            assert not re.search(rf"(?<![\d.]){re.escape(answer)}(?!\d)", screen), (i, answer)
    shown = next(i for i, s in enumerate(screens) if "after_capstone(capstone, predicted_layers)" in s)
    assert shown > check
    compared = next(i for i, s in enumerate(screens) if "check_prediction(predicted_kv4_cost_pct, measured_cost_pct" in s)
    printed = next(i for i, s in enumerate(screens) if "print(quant.format_table(table))" in s)
    assert compared < printed


def test_the_layers_prediction_compared_is_the_last_stored_before_the_capstones_check(capsys, monkeypatch, tmp_path):
    """Review #18a stored a list after the search and read a perfect ranking: the list compared after the capstone is
    the last stored before the capstone's check first ran (review #23: a revision before any measurement was reported
    as stored, then ignored), it lasts, and a changed list after that check is a reading (refused, no try counted)."""
    from vramlab import ran

    monkeypatch.setenv(ran.RAN_ENV, str(tmp_path / "ran.jsonl"))
    ran._forget()
    assert lab02.check_layers_prediction([2, 3])
    assert lab02.check_layers_prediction([0, 1, 29])                    # before the check: a revision counts
    lab02.check_mixed_plan({"eight_bit_layers": [0], "kv_bits": 8}, scorer="no scorer")
    capsys.readouterr()
    refused = lab02.check_layers_prediction([7, 11, 18, 21, 29])
    out = capsys.readouterr().out
    assert not refused and "that is a reading" in out and "the last one stored before it, [0, 1, 29]" in out, out
    assert lab02.check_layers_prediction([0, 1, 29])                     # Run All: the same list passes
    assert not lab02.check_layers_prediction([2, 3])                     # the earlier list is no longer the one
    ranking = list(range(29, -1, -1))
    ran._RAN.clear()                                                     # a restart keeps the lasting records
    lab02.check_layers_prediction([7, 11, 18, 21, 29], ranking)
    out = capsys.readouterr().out
    assert "layer 0 ranks #30, layer 1 ranks #29, layer 29 ranks #1" in out and "the cell now holds" in out, out
    ran._forget()
    lab02.check_mixed_plan({"eight_bit_layers": [0], "kv_bits": 8}, scorer="no scorer")
    assert not lab02.check_layers_prediction([0, 1])                     # nothing stored before the check
    lab02.check_layers_prediction([0, 1], ranking)
    assert "no prediction was stored" in capsys.readouterr().out
    ran._forget()


@pytest.mark.parametrize("how", ["reveal=True", "checks.reveal"])
def test_a_layers_prediction_after_the_capstones_answer_was_revealed_is_a_reading(how, capsys, monkeypatch, tmp_path):
    """Review #23 revealed Exercise 4's answer (it names the best plan's layers), then stored a "prediction" and read
    #1, #2 and #3 after the capstone."""
    from vramlab import ran

    monkeypatch.setenv(ran.RAN_ENV, str(tmp_path / "ran.jsonl"))
    ran._forget()
    if how == "reveal=True":
        lab02.check_mixed_plan(None, reveal=True)
    else:
        checks.reveal("lab02", 4)
    assert "ANSWER" in capsys.readouterr().out
    refused = lab02.check_layers_prediction([7, 11, 29])
    out = capsys.readouterr().out
    assert not refused and "that is a reading" in out and "revealed" in out, out
    ran._forget()


def test_a_capstone_attempt_run_again_or_reordered_is_one_try(capsys):
    """Review #23: re-running one over-budget plan moved its hint offer from try 2 to try 4, and a plan whose layers
    were reordered was judged again toward the cap. An attempt counts once, toward both."""
    from vramlab.checks._core import tries

    over = [{"eight_bit_layers": [0, 1, 2, 3, 4, 5], "kv_bits": 4}, {"eight_bit_layers": [5, 4, 3, 2, 1, 0], "kv_bits": 4}]
    assert not lab02.check_mixed_plan(over[0])
    assert not lab02.check_mixed_plan({"eight_bit_layers": [0, 1], "kv_bits": 8})
    out = capsys.readouterr().out
    assert "That is try 2" in out, out
    for plan in (over[0], over[1], over[0]):
        assert not lab02.check_mixed_plan(plan)
        out = capsys.readouterr().out
        assert "over the 66 MiB budget" in out and "That is try 2" in out and "try 3" not in out, out
    assert tries(lab02._CAPSTONE) == 2 and tries("check_mixed_plan (wrong attempts)") == 2
    assert not lab02.check_mixed_plan({"eight_bit_layers": [0, 1, 2], "kv_bits": 8})
    assert "That is try 3" in capsys.readouterr().out


def test_a_layers_prediction_after_the_scorer_was_built_is_a_reading(capsys, monkeypatch, tmp_path):
    """Review #21 scored every layer alone with the notebook's scorer (reviews #22-#24: built, or swapped layers between
    builds), then stored the measured top five as its prediction and read a perfect ranking after the capstone. A list
    stored after the scorer was built is refused (no try counted); one stored before it still counts, and lasts."""
    from vramlab import ran
    from vramlab.quarot import mixed_bits

    monkeypatch.setenv(ran.RAN_ENV, str(tmp_path / "ran.jsonl"))
    ranking = list(range(29, -1, -1))
    ran._forget()
    ran.stamp(mixed_bits.SCORER_BUILT_KIND)                              # what MixedBits(...) notes
    refused = lab02.check_layers_prediction([25, 26, 27, 28, 29])
    out = capsys.readouterr().out
    assert not refused and "that is a reading" in out and "the capstone's scorer was built" in out, out
    assert "goes on without one" in out, out
    lab02.check_layers_prediction([25, 26, 27, 28, 29], ranking)
    out = capsys.readouterr().out
    assert "no prediction was stored" in out and "ranks #" not in out, out
    ran._forget()
    assert lab02.check_layers_prediction([0, 1, 29])
    ran.stamp(mixed_bits.SCORER_BUILT_KIND)
    assert lab02.check_layers_prediction([0, 1, 29])                     # Run All: the same first list passes
    refused = lab02.check_layers_prediction([25, 26, 27, 28, 29])
    out = capsys.readouterr().out
    assert not refused and "the last one stored before it, [0, 1, 29]" in out, out
    ran._RAN.clear()                                                     # a restart keeps the lasting records
    lab02.check_layers_prediction([25, 26, 27, 28, 29], ranking)
    out = capsys.readouterr().out
    assert "layer 0 ranks #30, layer 1 ranks #29, layer 29 ranks #1" in out, out
    ran._forget()


@pytest.mark.parametrize("target, value", [
    ("vramlab.quarot.mixed_bits.MixedBits.score_plan", lambda self, plan: 1.0),
    ("vramlab.quarot.mixed_bits.BUDGET_BYTES", 2**40),
    ("vramlab.quarot.mixed_bits.plan_bytes", lambda plan, *a, **k: {"weights": 0, "kv": 0, "total": 0}),
    ("vramlab.eval.perplexity", lambda *a, **k: 1.0),
    ("vramlab.checks.lab02.PLAN_TOLERANCE", 10.0),
    ("vramlab.ran.stamp", lambda kind: None),
])
def test_a_replaced_scoring_tool_is_refused_before_any_judgement_and_costs_no_try(target, value, capsys, monkeypatch):
    """Review #22 replaced MixedBits.score_plan on the class (which reaches the check's own scorer too) and raised
    BUDGET_BYTES: the check compares what it scores with against their source files and refuses to judge."""
    from vramlab.checks._core import tries

    monkeypatch.setattr(target, value)
    result = lab02.check_mixed_plan({"eight_bit_layers": list(range(30)), "kv_bits": 8})
    out = capsys.readouterr().out
    assert not result and "replaced in this kernel" in out and "restart the kernel" in out, out
    assert target.rsplit(".", 2)[-2] + "." + target.rsplit(".", 1)[-1] in out or target.rsplit(".", 1)[-1] in out, out
    assert tries(lab02._CAPSTONE) == 0 and "on the window" not in out, out


def test_slips_of_form_cost_no_try(capsys):
    """Review #22: a malformed plan or a scorer of the wrong type used up the capped tries and opened the hints."""
    from vramlab.checks._core import tries

    for plan, scorer in (({"eight_bit_layers": [0], "kv_bits": 3}, None), ({"layers": [0]}, None),
                         ({"eight_bit_layers": [0], "kv_bits": 4}, object())):
        result = lab02.check_mixed_plan(plan, scorer)
        out = capsys.readouterr().out
        assert not result and "try" not in out.lower(), out
    assert tries(lab02._CAPSTONE) == 0


def test_the_calibration_plan_must_read_the_references_number():
    """A change below vramlab (in PyTorch) that checks.tampering cannot see moves the calibration plan's score."""
    class Fixed:
        def __init__(self, value):
            self.value = value

        def score(self, layer_bits, default, kv_bits):
            assert (layer_bits, default, kv_bits) == ({}, 4, 4)
            return self.value

    assert lab02._calibration_off(Fixed(164.89 * (1 + 5e-7)), 164.89) is None
    off = lab02._calibration_off(Fixed(1.0), 164.89)
    assert "measures 1.0000, not 164.8900" in off


def test_a_half_written_reference_is_refused(monkeypatch, tmp_path):
    """Review #22 read results/mixed_bits.json while benchmarks/mixed_bits.py was still writing it (its best was the
    greedy plan): the benchmark now writes it once, at the end, marked complete, and a record without the mark is
    refused."""
    import json

    from vramlab.quarot import mixed_bits

    record = mixed_bits._load_reference()
    assert record["complete"] is True
    record.pop("complete")
    path = tmp_path / "mixed_bits.json"
    path.write_text(json.dumps(record), encoding="utf-8")
    monkeypatch.setattr(mixed_bits, "_RESULTS", path)
    with pytest.raises(ValueError, match="not a finished search"):
        lab02._reference()


def test_a_pass_is_confirmed_on_the_checks_own_scorer(capsys):
    """Review #20 replaced the notebook scorer's score_plan with `lambda p: 1.0` and passed; a pass is scored again on
    a scorer the check keeps to itself."""
    from vramlab.quarot import mixed_bits

    scorer = lab02.capstone_scorer()
    original = scorer.score_plan
    try:
        scorer.score_plan = lambda p: 1.0
        result = lab02.check_mixed_plan({"eight_bit_layers": [0, 1, 2, 3, 4], "kv_bits": 4}, scorer)
        out = capsys.readouterr().out
        assert not result and "perplexity 1.00" not in out, out
    finally:
        del scorer.score_plan
    assert scorer.score_plan == original and lab02._own_scorer() is not scorer
    assert isinstance(lab02._own_scorer(), mixed_bits.MixedBits)
