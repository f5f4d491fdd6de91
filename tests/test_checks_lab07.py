"""Every lab-07 check rejects the lab's stubs and a typical wrong answer, and accepts the solution."""

from __future__ import annotations

import pytest

from vramlab import checks
from vramlab.checks import lab07

SOLUTIONS = {
    "check_oom_numbers": {"tried_gib": 2.0, "free_gib": 406.38 / 1024, "reserved_gib": 11.18 + 219.44 / 1024},
    "check_reserved_prediction": {"default": 200, "expandable": 150},
    "check_cap_oom_reason": "b",
}
WRONG = {
    "check_oom_numbers": {"tried_gib": 2.0, "free_gib": 406.38 / 1024, "reserved_gib": 11.18},  # allocated only
    "check_reserved_prediction": {"default": "256 MiB", "expandable": 140},                      # not a number
    "check_cap_oom_reason": "c",                                                                 # fragmentation
}
# the lab's own stub first (notebook 07, exercise "read the OOM message"), then other untouched shapes
STUBS = [{"tried_gib": None, "free_gib": None, "reserved_gib": None}, None, ..., {}]


def test_every_check_is_exported_and_covered():
    assert set(lab07.__all__) == set(SOLUTIONS) == set(WRONG)
    for name in lab07.__all__:
        assert getattr(checks, name) is getattr(lab07, name)


@pytest.mark.parametrize("name", sorted(SOLUTIONS))
def test_solution_passes(name, capsys):
    result = getattr(lab07, name)(SOLUTIONS[name])
    assert result.passed and capsys.readouterr().out.startswith("PASS")


@pytest.mark.parametrize("name", sorted(SOLUTIONS))
@pytest.mark.parametrize("stub", range(len(STUBS)))
def test_stubs_fail_without_raising_or_revealing(name, stub, capsys):
    result = getattr(lab07, name)(STUBS[stub])
    out = capsys.readouterr().out
    assert not result.passed and out.startswith("FAIL")
    for secret in ("11.39", "11.3", "0.397", "256", "140", " b:"):
        assert secret not in out


@pytest.mark.parametrize("name", sorted(WRONG))
def test_plausible_wrong_answers_fail(name, capsys):
    result = getattr(lab07, name)(WRONG[name])
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
    actual = lab07.reserved_reference()
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
