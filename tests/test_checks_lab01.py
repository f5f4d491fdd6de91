"""Every lab-01 check rejects the lab's stubs (and plausible wrong answers) and accepts the solution."""

from __future__ import annotations

import math

import pytest
import torch

from vramlab import checks
from vramlab.checks import lab01


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


def test_package_reference_functions_pass_the_checks():
    from vramlab.hadamard import fwht_butterfly, sylvester
    from vramlab.rotate import fold_rmsnorm_into_linear

    assert lab01.check_sylvester_hadamard(sylvester)
    assert lab01.check_butterfly(fwht_butterfly)
    assert lab01.check_fold_rmsnorm(fold_rmsnorm_into_linear)


def test_hints_name_the_mistake(capsys):
    lab01.check_butterfly(WRONG["check_butterfly"][0])
    assert "sqrt" in capsys.readouterr().out
    lab01.check_fold_rmsnorm(WRONG["check_fold_rmsnorm"][0])
    out = capsys.readouterr().out
    assert "FAIL" in out
    lab01.check_sylvester_hadamard(WRONG["check_sylvester_hadamard"][1])
    assert "not in Sylvester's order" in capsys.readouterr().out
