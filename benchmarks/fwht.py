"""Fast Walsh-Hadamard transform vs the dense matmul, measured side by side in one run.

For each width n it times, interleaved (fwht, butterfly, dense, fwht, butterfly, dense, ...) on the
same float32 input ``[rows, n]``:

* ``fwht``      — ``vramlab.quarot.hadamard.fwht`` (radix 64: one small matmul per axis of the Kronecker
                  factorisation, the non-power-of-two base K in the last one),
* ``butterfly`` — the same with radix 2 (the textbook ``(a+b, a-b)`` butterfly, log2 n passes),
* ``dense``     — ``x @ H`` with the precomputed normalised ``n x n`` matrix (the matrix build is not
                  timed),

and prints one JSON line per width with the medians and ``speedup = dense / fwht``. Acceptance:
``speedup >= 1.5`` at n = 4096 on [2048, 4096] float32. The CPU may be shared: only the ratios
measured in the same run mean anything.

    python benchmarks/fwht.py                 # widths 4096, 1536, 576, 64; 2048 rows; 7 rounds
    python benchmarks/fwht.py --rows 512 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import time

import torch

from vramlab.quarot.hadamard import decompose, fwht, hadamard_matrix


def timed(fn, x) -> float:
    t = time.perf_counter()
    fn(x)
    return time.perf_counter() - t


def measure_width(n: int, rows: int = 2048, rounds: int = 7, seed: int = 0) -> dict:
    """Median seconds of fwht, butterfly and dense on one ``[rows, n]`` float32 input, interleaved."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, n, generator=g)
    H = (hadamard_matrix(n) / math.sqrt(n)).float()
    fns = {"fwht": fwht, "butterfly": lambda t: fwht(t, radix=2), "dense": lambda t: t @ H}
    ref = x.double() @ H.double()
    err = {k: float((f(x).double() - ref).abs().max()) for k, f in fns.items()}  # also warms up
    times = {k: [] for k in fns}
    for _ in range(rounds):
        for k, f in fns.items():
            times[k].append(timed(f, x))
    med = {k: statistics.median(v) for k, v in times.items()}
    K, m, how = decompose(n)
    return {"n": n, "K": K, "pow2": m, "construction": how, "rows": rows,
            "fwht_s": round(med["fwht"], 5), "butterfly_s": round(med["butterfly"], 5),
            "dense_s": round(med["dense"], 5),
            "speedup": round(med["dense"] / med["fwht"], 2),
            "butterfly_speedup": round(med["dense"] / med["butterfly"], 2),
            "max_abs_err": {k: float(f"{v:.3g}") for k, v in err.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--widths", type=int, nargs="+", default=[4096, 1536, 576, 64])
    ap.add_argument("--rows", type=int, default=2048)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    print(json.dumps({"bench": "fwht", "torch": torch.__version__, "threads": torch.get_num_threads(),
                      "cpus": os.cpu_count(), "machine": platform.machine(), "rows": args.rows,
                      "dtype": "float32", "rounds": args.rounds}), flush=True)
    for n in args.widths:
        print(json.dumps(measure_width(n, args.rows, args.rounds)), flush=True)


if __name__ == "__main__":
    main()
