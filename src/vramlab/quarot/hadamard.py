"""Hadamard matrices and the fast Walsh-Hadamard transform.

A Hadamard matrix of order ``n`` has entries ±1 and ``H Hᵀ = n I``; ``H / sqrt(n)`` is orthogonal.
They exist only for ``n = 1, 2`` and multiples of 4. We build them as QuaRot's ``get_hadK`` does:
``n = K * 2^k`` with a small base matrix of order ``K`` from a Paley construction, enlarged by
Sylvester doubling ``H_2m = [[H_m, H_m], [H_m, -H_m]]``::

    hadamard_matrix(n) = kron(sylvester(2^k), base(K))

* Sylvester: ``K = 1`` (n a power of two).
* Paley I: ``K = q + 1`` for a prime power ``q ≡ 3 (mod 4)`` (12 = 11+1, 20, 24, 28 = 27+1, 44, 60 …).
* Paley II: ``K = 2 (q + 1)`` for a prime power ``q ≡ 1 (mod 4)`` (36 = 2·18, 52 = 2·26, 28 = 2·14 …).

SmolLM2 needs 576 = 36·16, 1536 = 12·128 and 64 = 2^6. Orders that are multiples of 4 but have no
``K`` reachable by Paley (e.g. 4·23 = 92, 4·43·… — they need Williamson or other constructions) raise
``ValueError``; so do orders with no Hadamard matrix at all (not 1, 2 or a multiple of 4).

:func:`fwht` applies ``x @ hadamard_matrix(n) / sqrt(n)`` over the last dimension in
``O(n log n)``: butterflies over the power-of-two part and one small dense matmul with the ``K x K``
base, so non-powers of two such as 576 and 1536 work without zero padding. By default six butterfly
levels are merged into one 64x64 matmul per pass (fewer memory passes: ~7x faster than the dense
``n x n`` product at n = 4096 on 2 CPU cores, see ``benchmarks/fwht.py``); ``radix=2`` /
:func:`fwht_butterfly` is the textbook ``(a + b, a - b)`` version.
"""

from __future__ import annotations

import functools
import math

__all__ = ["hadamard_matrix", "sylvester", "paley1", "paley2", "is_hadamard_order", "decompose",
           "random_hadamard", "random_orthogonal", "random_signs", "fwht", "fwht_butterfly", "fwht_reference",
           "hadamard_transform"]

# fwht merges this many butterfly levels' worth of width into one small matmul per pass (radix).
_DENSE_BLOCK = 64


# --------------------------------------------------------------------------- argument checks
def _check_size(n, what: str = "n") -> int:
    """A positive integer size, or one sentence naming the problem."""
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"{what} must be a positive integer (a matrix order), not {n!r}.")
    if n < 1:
        raise ValueError(f"{what} must be a positive integer (a matrix order), not {n}.")
    return n


# The largest dense matrix built here: 2**14 x 2**14 float64 is 2 GiB. Larger orders are applied with
# the fast transform (fwht), never materialised; 2**20 would be 8 TiB.
MAX_DENSE_ORDER = 1 << 14


def _check_dense(n: int) -> int:
    _check_size(n)
    if n > MAX_DENSE_ORDER:
        raise ValueError(f"n={n} is too large for a dense matrix ({n * n * 8 / 2**30:,.0f} GiB in float64); "
                         f"use n <= {MAX_DENSE_ORDER}, or apply the rotation with fwht(x) instead.")
    return n


def _check_seed(seed) -> int:
    import operator

    try:
        return operator.index(seed)
    except TypeError:
        raise TypeError(f"seed must be an integer, not {seed!r}.") from None


# --------------------------------------------------------------------------- number theory
def _prime_power(q: int) -> tuple[int, int] | None:
    """``(p, m)`` with ``q = p**m`` for a prime ``p``, or None."""
    if q < 2:
        return None
    p = next((d for d in range(2, int(math.isqrt(q)) + 1) if q % d == 0), q)
    m, r = 0, q
    while r % p == 0:
        r //= p
        m += 1
    return (p, m) if r == 1 else None


def _poly_mulmod(a: list[int], b: list[int], mod_poly: list[int], p: int) -> list[int]:
    """Product of two polynomials (coefficient lists, lowest first) modulo a monic ``mod_poly``."""
    m = len(mod_poly) - 1
    prod = [0] * (2 * m - 1)
    for i, ai in enumerate(a):
        if ai:
            for j, bj in enumerate(b):
                prod[i + j] = (prod[i + j] + ai * bj) % p
    for d in range(len(prod) - 1, m - 1, -1):  # reduce x^d with the monic modulus
        c = prod[d]
        if c:
            for k in range(m + 1):
                prod[d - m + k] = (prod[d - m + k] - c * mod_poly[k]) % p
    return prod[:m]


def _digits(x: int, p: int, m: int) -> list[int]:
    return [(x // p**i) % p for i in range(m)]


def _number(digits: list[int], p: int) -> int:
    return sum(d * p**i for i, d in enumerate(digits))


@functools.lru_cache(maxsize=None)
def _field(q: int):
    """GF(q) for a prime power q: ``(p, m, nonzero squares)``, elements numbered by base-p digits."""
    p, m = _prime_power(q)
    if m == 1:
        squares = frozenset((x * x) % p for x in range(1, p))
        return p, m, squares
    # GF(p^m) = GF(p)[x] / (f) for a monic irreducible f of degree m (any one gives the same field
    # up to isomorphism, and the quadratic character does not depend on the choice); brute force.
    def irreducible(poly):
        # a degree-m polynomial is irreducible iff it has no monic factor of degree 1..m//2
        for deg in range(1, m // 2 + 1):
            for coeffs in range(p**deg):
                f = _digits(coeffs, p, deg) + [1]
                # polynomial long division of poly by f over GF(p)
                r = list(poly)
                for d in range(len(r) - 1, deg - 1, -1):
                    c = r[d]
                    if c:
                        for k in range(deg + 1):
                            r[d - deg + k] = (r[d - deg + k] - c * f[k]) % p
                if not any(r[:deg]):
                    return False
        return True

    mod_poly = next(_digits(c, p, m) + [1] for c in range(p**m) if irreducible(_digits(c, p, m) + [1]))
    squares = set()
    for x in range(1, q):
        d = _digits(x, p, m)
        squares.add(_number(_poly_mulmod(d, d, mod_poly, p), p))
    return p, m, frozenset(squares)


def _jacobsthal(q: int):
    """The Jacobsthal matrix ``Q[i, j] = chi(x_j - x_i)`` over GF(q) (chi: quadratic character)."""
    import torch

    p, m, squares = _field(q)
    digits = [_digits(x, p, m) for x in range(q)]
    Q = torch.zeros(q, q, dtype=torch.float64)
    for i in range(q):
        for j in range(q):
            if i != j:
                diff = _number([(a - b) % p for a, b in zip(digits[j], digits[i])], p)
                Q[i, j] = 1.0 if diff in squares else -1.0
    return Q


# --------------------------------------------------------------------------- constructions
def sylvester(n: int):
    """Sylvester's Hadamard matrix of order ``n = 2^k`` (float64 ±1)."""
    import torch

    _check_dense(n)
    if n & (n - 1):
        raise ValueError(f"Sylvester's construction needs a power of two, not {n}; use hadamard_matrix({n}) "
                         f"for other orders.")
    H = torch.ones(1, 1, dtype=torch.float64)
    while H.shape[0] < n:
        H = torch.cat([torch.cat([H, H], 1), torch.cat([H, -H], 1)], 0)
    return H


@functools.lru_cache(maxsize=None)
def _paley1(q: int):
    import torch

    Q = _jacobsthal(q)
    S = torch.zeros(q + 1, q + 1, dtype=torch.float64)
    S[0, 1:] = 1.0
    S[1:, 0] = -1.0
    S[1:, 1:] = Q
    return torch.eye(q + 1, dtype=torch.float64) + S


def paley1(q: int):
    """Paley construction I: order ``q + 1`` for a prime power ``q ≡ 3 (mod 4)``."""
    if _prime_power(q) is None or q % 4 != 3:
        raise ValueError(f"Paley I needs a prime power q with q % 4 == 3, not q={q}.")
    return _paley1(q).clone()


@functools.lru_cache(maxsize=None)
def _paley2(q: int):
    import torch

    Q = _jacobsthal(q)
    C = torch.zeros(q + 1, q + 1, dtype=torch.float64)
    C[0, 1:] = 1.0
    C[1:, 0] = 1.0
    C[1:, 1:] = Q
    zero_block = torch.tensor([[1.0, -1.0], [-1.0, -1.0]], dtype=torch.float64)
    one_block = torch.tensor([[1.0, 1.0], [1.0, -1.0]], dtype=torch.float64)
    # C has zeros only on the diagonal: replace 0 -> zero_block, ±1 -> ±one_block
    return torch.kron(C, one_block) + torch.kron(torch.eye(q + 1, dtype=torch.float64), zero_block)


def paley2(q: int):
    """Paley construction II: order ``2 (q + 1)`` for a prime power ``q ≡ 1 (mod 4)``."""
    if _prime_power(q) is None or q % 4 != 1:
        raise ValueError(f"Paley II needs a prime power q with q % 4 == 1, not q={q}.")
    return _paley2(q).clone()


def _base_construction(K: int):
    """How to build a base matrix of order K (K = 1, 2 or a multiple of 4), or None."""
    if K in (1, 2):
        return ("sylvester", K)
    if K % 4:
        return None
    pp = _prime_power(K - 1)
    if pp is not None and (K - 1) % 4 == 3:
        return ("paley1", K - 1)
    pp = _prime_power(K // 2 - 1)
    if pp is not None and (K // 2 - 1) % 4 == 1:
        return ("paley2", K // 2 - 1)
    return None


@functools.lru_cache(maxsize=None)
def decompose(n: int) -> tuple[int, int, str]:
    """``(K, 2^k, construction)`` with ``n = K * 2^k`` and the smallest K that we can build.

    Raises ValueError (one sentence: why, and what to do) when there is none.
    """
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"A Hadamard order must be a positive integer, not {n!r}.")
    if n not in (1, 2) and n % 4:
        raise ValueError(f"No Hadamard matrix of order {n} exists (orders are 1, 2 or multiples of 4); "
                         f"pad the dimension to a multiple of 4 or use random_orthogonal({n}) instead.")
    if n & (n - 1) == 0:
        return 1, n, "sylvester"
    odd = n
    while odd % 2 == 0:
        odd //= 2
    K = odd * 4
    while K <= n:
        how = _base_construction(K)
        if how is not None:
            return K, n // K, f"{how[0]}(q={how[1]})"
        K *= 2
    raise ValueError(f"No Hadamard construction of order {n} is implemented here (n = K * 2^k needs a base "
                     f"K with K-1 a prime power = 3 mod 4 or K/2-1 a prime power = 1 mod 4, e.g. "
                     f"12, 20, 28, 36, 52, 60); choose a nearby supported order or use random_orthogonal({n}).")


def is_hadamard_order(n: int) -> bool:
    """True when :func:`hadamard_matrix` can build order ``n``."""
    try:
        decompose(n)
        return True
    except ValueError:
        return False


@functools.lru_cache(maxsize=64)
def _base_matrix(K: int):
    import torch

    if K in (1, 2):
        return sylvester(K)
    kind, q = _base_construction(K)
    H = _paley1(q) if kind == "paley1" else _paley2(q)
    return H.to(torch.float64)


@functools.lru_cache(maxsize=8)
def _hadamard_cached(n: int):
    import torch

    K, m, _ = decompose(n)
    return torch.kron(sylvester(m), _base_matrix(K))


def hadamard_matrix(n: int):
    """A Hadamard matrix of order ``n``: float64 entries ±1 with ``H Hᵀ = n I``.

    ``H = kron(sylvester(2^k), base(K))`` with ``n = K 2^k`` (see :func:`decompose`); not normalised
    (divide by ``sqrt(n)`` for an orthogonal matrix). Raises ValueError for orders with no Hadamard
    matrix (not 1, 2 or a multiple of 4) or none implemented here, and for ``n`` above
    :data:`MAX_DENSE_ORDER` (use :func:`fwht`).
    """
    return _hadamard_cached(_check_dense(n)).clone()


# --------------------------------------------------------------------------- random rotations
def random_signs(n: int, seed: int = 0):
    """``n`` random ±1 (float64) from a private generator seeded with ``seed``."""
    import torch

    _check_size(n)
    g = torch.Generator().manual_seed(_check_seed(seed))
    return torch.randint(0, 2, (n,), generator=g).to(torch.float64) * 2 - 1


def random_hadamard(n: int, seed: int = 0):
    """A randomized Hadamard rotation: ``diag(s) H / sqrt(n)`` with random signs ``s`` (float64).

    Orthonormal. With this ordering ``x @ random_hadamard(n, seed) == fwht(x * s)``. Raises
    ValueError for an order with no Hadamard matrix (see :func:`decompose`).
    """
    _check_dense(n)
    decompose(n)
    s = random_signs(n, seed)
    return s[:, None] * hadamard_matrix(n) / math.sqrt(n)


def random_orthogonal(n: int, seed: int = 0):
    """A Haar-random orthogonal matrix (float64): QR of a Gaussian matrix, signs fixed by diag(R)."""
    import torch

    _check_dense(n)
    g = torch.Generator().manual_seed(_check_seed(seed))
    A = torch.randn(n, n, generator=g, dtype=torch.float64)
    Q, R = torch.linalg.qr(A)
    return Q * torch.sign(torch.diagonal(R))[None, :]


# --------------------------------------------------------------------------- fast transform
@functools.lru_cache(maxsize=64)
def _factor(size: int, K: int, dtype, device):
    """``kron(sylvester(size / K), base(K))`` (±1) in ``dtype`` on ``device``, for :func:`fwht`."""
    import torch

    return torch.kron(sylvester(size // K), _base_matrix(K)).to(dtype=dtype, device=device)


def _plan(n: int, radix: int) -> tuple[int, list[int]]:
    """``(last, [b1, b2, ...])``: n = b1·b2·…·last, ``last = K 2^j`` holds the base K, b_i powers of two."""
    K, m, _ = decompose(n)
    last = K
    while m > 1 and last * 2 <= max(radix, K):
        last *= 2
        m //= 2
    factors = []
    b = max(2, min(radix, m)) if m > 1 else 1
    while m > 1:
        b = min(b, m)
        factors.append(b)
        m //= b
    return last, factors


def fwht(x, normalize: bool = True, radix: int = _DENSE_BLOCK):
    """Fast Walsh-Hadamard transform over the last dimension: ``x @ hadamard_matrix(n) / sqrt(n)``.

    ``hadamard_matrix(n) = kron(H_2, …, H_2, base(K))``, so the transform factors into stages, each
    acting on one axis of ``x.view(…, b1, b2, …, last)``: the last axis (size ``last = K 2^j``, which
    holds the non-power-of-two base ``K``) gets one small dense matmul, every other axis a
    power-of-two Hadamard "butterfly". ``radix=2`` is the textbook butterfly ``(a + b, a - b)``,
    ``log2(n)`` passes; the default ``radix=64`` merges six butterfly levels into one small 64x64
    matmul per pass — still ``O(n log n)`` work, but two or three memory passes instead of twelve,
    which is what makes it fast on a CPU (all vectorised; no Python loop over elements).
    Works for every order :func:`hadamard_matrix` supports, any float dtype/device, any leading
    shape. ``normalize=False`` returns ``x @ hadamard_matrix(n)`` (the ±1 transform).
    """
    import torch

    if not isinstance(x, torch.Tensor):
        raise TypeError(f"fwht needs a torch.Tensor (the transform runs over its last dimension), "
                        f"not {type(x).__name__}; wrap it with torch.as_tensor(...).")
    if x.dim() == 0:
        raise ValueError("fwht needs a tensor with at least one dimension (got a 0-d scalar).")
    if isinstance(radix, bool) or not isinstance(radix, int) or radix < 2 or radix & (radix - 1):
        raise ValueError(f"radix must be a power of two >= 2, not {radix!r}.")
    n = x.shape[-1]
    last, factors = _plan(n, radix)
    K = decompose(n)[0]
    shape = x.shape
    y = x if x.is_floating_point() else x.to(torch.get_default_dtype())
    y = y.reshape(-1, n).contiguous()
    N = y.shape[0]
    if last > 1:
        y = (y.view(-1, last) @ _factor(last, K, y.dtype, y.device)).view(N, n)
    prefix = 1
    for b in factors:
        suffix = n // (prefix * b)
        if b == 2:  # the classic butterfly (a + b, a - b)
            v = y.view(N * prefix, 2, suffix)
            y = torch.stack((v[:, 0] + v[:, 1], v[:, 0] - v[:, 1]), dim=1)
        else:  # b butterfly levels at once: sylvester(b) (symmetric) on this axis
            y = torch.matmul(_factor(b, 1, y.dtype, y.device), y.view(N * prefix, b, suffix))
        y = y.reshape(N, n)
        prefix *= b
    y = y.reshape(shape)
    return y * (1.0 / math.sqrt(n)) if normalize else y


def fwht_butterfly(x, normalize: bool = True):
    """The textbook radix-2 version of :func:`fwht` (``log2`` passes of ``(a + b, a - b)``)."""
    return fwht(x, normalize=normalize, radix=2)


hadamard_transform = fwht


def fwht_reference(x):
    """The dense reference ``x @ hadamard_matrix(n) / sqrt(n)`` (what :func:`fwht` must equal)."""
    import torch

    if not isinstance(x, torch.Tensor):
        raise TypeError(f"fwht_reference needs a torch.Tensor, not {type(x).__name__}.")
    n = x.shape[-1]
    return x @ (hadamard_matrix(n) / math.sqrt(n)).to(dtype=x.dtype, device=x.device)
