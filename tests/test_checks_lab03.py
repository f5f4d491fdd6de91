"""Every lab-03 check rejects the lab's stubs and accepts the solution."""

from __future__ import annotations

import pytest

from vramlab import checks
from vramlab.checks import lab03


def _raises(*args):
    raise NotImplementedError


SOLUTIONS = {
    "check_kv_bytes_by_hand": lambda l, h, d, b: 2 * l * h * d * b,
    "check_mla_bytes_by_hand": lambda l, r, p, b: l * (r + p) * b,
    "check_needed_gib": 2 * 36 * 8 * 128 * 2 * 40960 / 2**30,
    "check_max_len_that_fits": lambda pt, avail, bs: avail // (pt * bs) * bs,
    "check_fix_plan": {"max_model_len": 32768, "kv_cache_dtype": "fp8"},
    "check_oom_verdict": lambda tried, unalloc: "fragmentation" if unalloc >= tried else "shortage",
}
WRONG = {
    "check_kv_bytes_by_hand": lambda l, h, d, b: l * h * d * b,            # forgot V
    "check_mla_bytes_by_hand": lambda l, r, p, b: 2 * l * (r + p) * b,     # MLA has no K/V pair
    "check_needed_gib": 2 * 36 * 8 * 128 * 2 * 40960 / 1e9,               # GB, not GiB
    "check_max_len_that_fits": lambda pt, avail, bs: avail // pt,           # ignores whole blocks
    "check_fix_plan": {"max_model_len": 8192},                              # gives up the context
    "check_oom_verdict": lambda tried, unalloc: "fragmentation" if unalloc > tried else "shortage",
}
STUBS = [None, lambda *a: None, _raises]


def test_every_check_is_exported_and_covered():
    assert set(lab03.__all__) == set(SOLUTIONS) == set(WRONG)
    for name in lab03.__all__:
        assert getattr(checks, name) is getattr(lab03, name)


@pytest.mark.parametrize("name", sorted(SOLUTIONS))
def test_solution_passes(name, capsys):
    result = getattr(lab03, name)(SOLUTIONS[name])
    assert result.passed and capsys.readouterr().out.startswith("PASS")


@pytest.mark.parametrize("name", sorted(SOLUTIONS))
@pytest.mark.parametrize("stub", range(len(STUBS)))
def test_stubs_fail_without_raising(name, stub, capsys):
    result = getattr(lab03, name)(STUBS[stub])
    assert not result.passed and capsys.readouterr().out.startswith("FAIL")


@pytest.mark.parametrize("name", sorted(WRONG))
def test_plausible_wrong_answers_fail(name, capsys):
    result = getattr(lab03, name)(WRONG[name])
    assert not result.passed and "expected" in capsys.readouterr().out


def test_byte_checks_reject_nan_and_a_hard_coded_576():
    from vramlab.checks import check_kv_bytes_by_hand, check_mla_bytes_by_hand

    assert not check_kv_bytes_by_hand(lambda *a: float("nan"))
    assert not check_mla_bytes_by_hand(lambda l, r, p, b: l * 576 * b)


def test_fix_plan_only_accepts_engine_arguments_and_sane_utilization():
    from vramlab.checks import check_fix_plan

    assert not check_fix_plan({"weights_bytes": 0})
    assert not check_fix_plan({"non_torch_bytes": 0, "activation_bytes": 0, "cudagraph_bytes": 0})
    assert not check_fix_plan({"gpu_memory_utilization": 1.0})
    assert check_fix_plan({"max_model_len": 32768, "kv_cache_dtype": "fp8"})
