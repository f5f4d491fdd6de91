"""Checks for notebook 01 (outliers and rotation)."""

from __future__ import annotations

import math

from vramlab.checks._core import CheckResult, call_learner, report

__all__ = ["check_sylvester_hadamard", "check_butterfly", "check_fold_rmsnorm"]


def _as_tensor(x):
    import torch

    if x is None:
        return None
    try:
        return torch.as_tensor(x).detach().double().cpu()
    except (TypeError, ValueError, RuntimeError):
        return None


def check_sylvester_hadamard(fn) -> CheckResult:
    """``fn(n)`` builds Sylvester's Hadamard matrix of order ``n = 2^k`` (entries ±1, not normalised)."""
    import torch

    from vramlab.hadamard import sylvester

    name = "Sylvester Hadamard"
    want = "sylvester(n): H_1 = [[1]], H_2m = [[H_m, H_m], [H_m, -H_m]] for n = 1, 2, 4, 8, 64"
    for n in (1, 2, 4, 8, 64):
        got, failure = call_learner(name, fn, n, expected=want)
        if failure is not None:
            return failure
        H = _as_tensor(got)
        ref = sylvester(n)
        if H is None:
            return report(name, False, f"a {n} x {n} matrix for n={n}", f"{type(got).__name__} {got!r}"[:120],
                          hint="return the matrix (a torch tensor or nested lists), e.g. `return H`")
        if tuple(H.shape) != (n, n):
            return report(name, False, f"shape ({n}, {n}) for n={n}", f"shape {tuple(H.shape)}",
                          hint="start from [[1]] and double the size until it is n x n")
        if torch.equal(H, ref):
            continue
        if torch.allclose(H * math.sqrt(n), ref):
            return report(name, False, f"entries +-1 for n={n}", "a normalised matrix (entries +-1/sqrt(n))",
                          hint="do not divide by sqrt(n) here; the normalisation comes later")
        is_hadamard = torch.equal(H.abs(), torch.ones_like(H)) and torch.equal(H @ H.T, n * torch.eye(n, dtype=H.dtype))
        got_s = "a Hadamard matrix, but not in Sylvester's order" if is_hadamard else \
            f"H H^T has max off-diagonal {float((H @ H.T - torch.diag(torch.diagonal(H @ H.T))).abs().max()):.3g}"
        return report(name, False, f"Sylvester's matrix for n={n}", got_s,
                      hint="the new matrix is [[H, H], [H, -H]] (torch.cat twice), starting from [[1.]]")
    return report(name, True, want, "H_1 ... H_64 match Sylvester's construction and H H^T = n I")


def check_butterfly(fn) -> CheckResult:
    """``fn(x)`` is the fast Walsh-Hadamard transform ``x @ H_n / sqrt(n)`` over the last dim, n = 2^k."""
    import torch

    from vramlab.hadamard import sylvester

    name = "butterfly transform"
    want = "x @ sylvester(n) / sqrt(n) over the last dimension"
    g = torch.Generator().manual_seed(0)
    for shape in ((3, 8), (2, 5, 64), (4, 1)):
        x = torch.randn(*shape, generator=g, dtype=torch.float64)
        n = shape[-1]
        ref = x @ sylvester(n) / math.sqrt(n)
        got, failure = call_learner(name, fn, x.clone(), expected=want)
        if failure is not None:
            return failure
        y = _as_tensor(got)
        if y is None:
            return report(name, False, f"a tensor of shape {shape}", f"{type(got).__name__} {got!r}"[:120],
                          hint="return the transformed tensor")
        if tuple(y.shape) != shape:
            return report(name, False, f"shape {shape}", f"shape {tuple(y.shape)}",
                          hint="reshape back to x.shape at the end")
        if torch.allclose(y, ref, atol=1e-9):
            continue
        if n > 1 and torch.allclose(y, ref * math.sqrt(n), atol=1e-8):
            return report(name, False, want, f"x @ H without the 1/sqrt({n})",
                          hint="divide by sqrt(n) once at the end so the transform is orthonormal")
        diff = float((y - ref).abs().max())
        return report(name, False, want, f"max abs difference {diff:.3g} for input shape {shape}",
                      hint="log2(n) stages: view as (..., n/(2h), 2, h), replace the pair (a, b) by (a+b, a-b)")
    return report(name, True, want, "matches the dense product for widths 8, 64 and 1")


def check_fold_rmsnorm(fn) -> CheckResult:
    """``fn(norm_weight, linear_weight)`` returns the linear weight that absorbs the RMSNorm scale."""
    import torch

    name = "fold RMSNorm into linear"
    want = "W * gamma[None, :] (each input column scaled by its gamma)"
    g = torch.Generator().manual_seed(1)
    for out_f, in_f in ((7, 10), (10, 10)):
        gamma = torch.rand(in_f, generator=g, dtype=torch.float64) + 0.5
        W = torch.randn(out_f, in_f, generator=g, dtype=torch.float64)
        ref = W * gamma[None, :]
        got, failure = call_learner(name, fn, gamma.clone(), W.clone(), expected=want)
        if failure is not None:
            return failure
        y = _as_tensor(got)
        if y is None:
            return report(name, False, f"a tensor of shape {(out_f, in_f)}", f"{type(got).__name__} {got!r}"[:120],
                          hint="return the new weight matrix")
        if tuple(y.shape) != (out_f, in_f):
            return report(name, False, f"shape {(out_f, in_f)}", f"shape {tuple(y.shape)}",
                          hint="the folded weight has the linear layer's shape [out_features, in_features]")
        if torch.allclose(y, ref, atol=1e-9):
            continue
        if out_f == in_f and torch.allclose(y, gamma[:, None] * W, atol=1e-9):
            return report(name, False, want, "the rows (output features) scaled by gamma",
                          hint="y = (x * gamma) @ W.T: gamma multiplies the input features, i.e. W's columns")
        return report(name, False, want, f"max abs difference {float((y - ref).abs().max()):.3g}",
                      hint="linear(x * gamma) = x @ (W * gamma).T: broadcast gamma over W's last dimension")
    return report(name, True, want, "linear(rmsnorm(x) * gamma) == linear'(rmsnorm(x))")
