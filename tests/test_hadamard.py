"""vramlab.quarot.hadamard: constructions, error messages, random rotations, fast transform."""

from __future__ import annotations

import math

import pytest
import torch

from vramlab.quarot import hadamard as H

BASES = (1, 12, 20, 28, 36, 40, 52, 60)


def supported_orders(limit=4096):
    orders = set()
    for K in BASES:
        n = K
        while n <= limit:
            orders.add(n)
            n *= 2
    return sorted(orders | {2, 44, 76, 68, 24})


def test_every_listed_order_up_to_4096_is_hadamard():
    g = torch.Generator().manual_seed(0)
    checked = 0
    for n in supported_orders():
        M = H.hadamard_matrix(n)
        assert M.dtype == torch.float64 and M.shape == (n, n), n
        assert torch.equal(M.abs(), torch.ones_like(M)), f"order {n} has entries other than +-1"
        if n <= 1024:  # the whole Gram matrix
            rows, gram = slice(None), M @ M.T
            want = n * torch.eye(n, dtype=torch.float64)
        else:  # 64 random rows against all: O(64 n^2) instead of O(n^3)
            idx = torch.randperm(n, generator=g)[:64]
            gram = M[idx] @ M.T
            want = n * torch.eye(n, dtype=torch.float64)[idx]
        assert torch.equal(gram, want), f"H H^T != n I for order {n}"
        checked += 1
    assert checked >= 60


def test_smollm2_orders_and_decomposition():
    assert H.decompose(576)[:2] == (36, 16)
    assert H.decompose(1536)[:2] == (12, 128)
    assert H.decompose(64)[:2] == (1, 64)
    for n in (576, 1536, 64):
        assert H.is_hadamard_order(n)


def test_paley_constructions_directly():
    for q, n in ((11, 12), (19, 20), (27, 28), (59, 60)):  # Paley I, 27 = 3^3 needs GF(27)
        M = H.paley1(q)
        assert torch.equal(M @ M.T, n * torch.eye(n, dtype=torch.float64)), q
    for q, n in ((5, 12), (13, 28), (17, 36), (25, 52)):  # Paley II, 25 = 5^2 needs GF(25)
        M = H.paley2(q)
        assert torch.equal(M @ M.T, n * torch.eye(n, dtype=torch.float64)), q
    with pytest.raises(ValueError):
        H.paley1(13)  # 13 = 1 mod 4
    with pytest.raises(ValueError):
        H.paley2(15)  # not a prime power


def test_sylvester_is_the_doubling():
    S4 = H.sylvester(4)
    S2 = torch.tensor([[1.0, 1.0], [1.0, -1.0]], dtype=torch.float64)
    assert torch.equal(S4, torch.kron(S2, S2))
    with pytest.raises(ValueError, match="power of two"):
        H.sylvester(12)


@pytest.mark.parametrize("n", [9, 18, 6, 3, 10])
def test_no_hadamard_matrix_exists(n):
    with pytest.raises(ValueError) as info:
        H.hadamard_matrix(n)
    msg = str(info.value)
    assert f"No Hadamard matrix of order {n} exists" in msg
    assert "multiple of 4" in msg and "random_orthogonal" in msg  # the reason and the way out


@pytest.mark.parametrize("n", [92, 4 * 47])
def test_unsupported_multiple_of_four(n):
    with pytest.raises(ValueError) as info:
        H.hadamard_matrix(n)
    msg = str(info.value)
    assert f"No Hadamard construction of order {n} is implemented" in msg
    assert "random_orthogonal" in msg
    assert not H.is_hadamard_order(n)


@pytest.mark.parametrize("bad", [0, -4])
def test_non_positive_order(bad):
    with pytest.raises(ValueError, match="positive integer"):
        H.hadamard_matrix(bad)


@pytest.mark.parametrize("n", [1, 2, 4, 12, 20, 36, 40, 52, 60, 64, 128, 576, 1536, 4096])
def test_fwht_equals_dense(n):
    torch.manual_seed(n)
    x = torch.randn(3, 5, n, dtype=torch.float64)
    ref = x @ (H.hadamard_matrix(n) / math.sqrt(n))
    for radix in (2, 16, 64):
        got = H.fwht(x, radix=radix)
        assert got.shape == x.shape
        assert torch.allclose(got, ref, atol=1e-12, rtol=0), (n, radix)
    assert torch.allclose(H.fwht(x, normalize=False), x @ H.hadamard_matrix(n), atol=1e-9, rtol=0)
    x32 = x.float()
    assert torch.allclose(H.fwht(x32), ref.float(), atol=1e-5, rtol=1e-5)


def test_fwht_non_contiguous_and_involution():
    x = torch.randn(576, 40, dtype=torch.float64).T  # non-contiguous [40, 576]
    assert torch.allclose(H.fwht(x), H.fwht_reference(x), atol=1e-12)
    y = torch.randn(4, 1024, dtype=torch.float64)
    assert torch.allclose(H.fwht(H.fwht(y)), y, atol=1e-12)  # symmetric Sylvester: H/sqrt(n) squared = I
    assert torch.allclose(H.fwht_butterfly(y), H.fwht_reference(y), atol=1e-12)


def test_fwht_rejects_unsupported_width():
    with pytest.raises(ValueError, match="order 18"):
        H.fwht(torch.randn(2, 18))


@pytest.mark.parametrize("n", [12, 576, 1536])
def test_random_hadamard(n):
    Q = H.random_hadamard(n, seed=3)
    assert torch.allclose(Q @ Q.T, torch.eye(n, dtype=torch.float64), atol=1e-12)
    assert torch.equal(Q, H.random_hadamard(n, seed=3))
    assert not torch.equal(Q, H.random_hadamard(n, seed=4))
    s = H.random_signs(n, 3)
    x = torch.randn(7, n, dtype=torch.float64)
    assert torch.allclose(x @ Q, H.fwht(x * s), atol=1e-12)


def test_random_orthogonal():
    Q = H.random_orthogonal(96, seed=1)
    assert torch.allclose(Q @ Q.T, torch.eye(96, dtype=torch.float64), atol=1e-12)
    assert torch.equal(Q, H.random_orthogonal(96, seed=1))
    assert not torch.allclose(Q, H.random_orthogonal(96, seed=2))
    Q9 = H.random_orthogonal(9, seed=0)  # any order works, Hadamard or not
    assert torch.allclose(Q9.T @ Q9, torch.eye(9, dtype=torch.float64), atol=1e-12)


@pytest.mark.parametrize("fn", [H.random_hadamard, H.random_signs, H.random_orthogonal, H.sylvester])
@pytest.mark.parametrize("n", [-4, 0])
def test_random_rotations_reject_bad_orders_in_one_sentence(fn, n):
    with pytest.raises(ValueError, match=f"must be a positive integer .*not {n}"):
        fn(n)


def test_bad_seed_radix_and_input_one_sentence():
    with pytest.raises(TypeError, match="seed must be an integer"):
        H.random_hadamard(4, seed="a")
    with pytest.raises(TypeError, match="n must be a positive integer"):
        H.random_orthogonal(4.0)
    with pytest.raises(ValueError, match="No Hadamard matrix of order 6"):
        H.random_hadamard(6)
    with pytest.raises(TypeError, match="needs a torch.Tensor"):
        H.fwht([1.0, 2.0])
    with pytest.raises(ValueError, match="radix must be a power of two"):
        H.fwht(torch.ones(4), radix=3)
    with pytest.raises(ValueError, match="at least one dimension"):
        H.fwht(torch.tensor(1.0))


@pytest.mark.parametrize("build", ["hadamard_matrix", "random_hadamard", "sylvester", "random_orthogonal"])
def test_dense_matrix_too_large_is_one_sentence(build):
    # 2**20 would be an 8 TiB float64 matrix: refused before any allocation, naming n and the fix
    from vramlab.quarot import hadamard

    with pytest.raises(ValueError, match=r"n=1048576 is too large for a dense matrix .* fwht"):
        getattr(hadamard, build)(2**20)
