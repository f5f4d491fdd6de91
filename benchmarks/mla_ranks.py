"""The reference plan of lab 05's capstone: per-group latent ranks for SmolLM2 under the 480 MiB cache budget.

Run: python benchmarks/mla_ranks.py [--step 24] [--threads 1]   (about 15 minutes on one core)

A hill climb over six groups of five layers: start from one rank for every layer (the largest that fits 16 users
x 4,000 tokens in 64-token blocks, bf16, 480 MiB), move ``step`` ranks from one group to another whenever that
lowers the perplexity on the capstone's window (the first 512-token evaluation window; PCA subspace from
4 x 512 calibration tokens), halve the step when no move helps, stop below 4. Every point is a live
measurement (vramlab.mla.measure_ranks). Prints one JSON line per improvement and the best plan last; the
check (vramlab.checks.lab05._REFERENCE_GROUP_RANKS) stores only the ranks and re-measures them live.
"""

from __future__ import annotations

import argparse
import itertools
import json

import torch

from vramlab import mla
from vramlab.checks import lab05
from vramlab.data import token_windows
from vramlab.models import load_smollm2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--step", type=int, default=24)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, tok = load_smollm2()
    window = token_windows(tok, n_windows=1, length=512)
    covs = mla.collect_input_covariance(model, token_windows(tok, n_windows=4, length=512, offset=8 * 512))
    uniform = max(r for r in range(1, 385) if lab05.plan_budget_ok([r] * 30))

    def ppl(groups):
        return mla.measure_ranks(model, mla.expand_groups(groups, lab05.PLAN_GROUP), window, covs)["ppl"]

    best = [uniform] * (30 // lab05.PLAN_GROUP)
    best_ppl = ppl(best)
    print(json.dumps({"start": best, "ppl": round(best_ppl, 3)}), flush=True)
    step = args.step
    while step >= 4:
        improved = False
        for i, j in itertools.permutations(range(len(best)), 2):
            trial = list(best)
            trial[i] += step
            trial[j] -= step
            if trial[j] < 8 or trial[i] > 384 or not lab05.plan_budget_ok(mla.expand_groups(trial, lab05.PLAN_GROUP)):
                continue
            p = ppl(trial)
            if p < best_ppl - 1e-9:
                best, best_ppl, improved = trial, p, True
                print(json.dumps({"step": step, "groups": best, "ppl": round(best_ppl, 3)}), flush=True)
        if not improved:
            step //= 2
    print(json.dumps({"best": best, "ppl": round(best_ppl, 3), "uniform": uniform}))


if __name__ == "__main__":
    main()
