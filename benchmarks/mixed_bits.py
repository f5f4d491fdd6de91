"""The reference search of lab 02's capstone: which decoder layers keep 8 bits, and the KV cache's bits.

Run: python benchmarks/mixed_bits.py [--threads 2]   (about 4 minutes on 2 idle cores)

On the Hadamard-rotated SmolLM2 (seed 0), every decoder layer W4A4 (RTN per channel, absmax scales) and a KV4
cache is the starting point. It measures, live on the capstone's window (the first 256 tokens of the first
evaluation window, float64, vramlab.quarot.mixed_bits.MixedBits): every layer alone at W8A8 and the cache alone at
8 bits, then the designs the 66 MiB budget allows: the layers with the largest single gains (with a KV4 cache, and
with a KV8 cache and fewer layers), the first layers, the last layers, the first and last. Writes src/vramlab/results/mixed_bits.json; the notebook shows it only after the capstone's check.
"""

from __future__ import annotations

import argparse
import datetime
import json
import time

import torch

from vramlab.data import token_windows
from vramlab.models import load_smollm2
from vramlab.quarot import mixed_bits as mb
from vramlab.quarot import quant
from vramlab.quarot.rotate import rotate_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    model, tok = load_smollm2()
    window = token_windows(tok, 1, 512)[:, :mb.SCORE_TOKENS]
    scorer = mb.MixedBits(rotate_model(model, "hadamard", seed=0), window)
    n = scorer.n_layers
    out = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "command": "python benchmarks/mixed_bits.py", "window_tokens": mb.SCORE_TOKENS,
           "fingerprint": quant.code_fingerprint(), "threads": args.threads}
    out["all4_kv4"] = scorer.score({}, 4, 4)
    out["all4_kv8"] = scorer.score({}, 4, 8)
    single = {}
    for i in range(n):
        single[i] = scorer.score({i: 8}, 4, 4)
        print(json.dumps({"layer": i, "ppl": single[i], "s": round(time.perf_counter() - t0)}), flush=True)
    out["single_w8"] = [single[i] for i in range(n)]
    ranking = sorted(range(n), key=single.get)
    out["ranking"] = ranking
    k4, k8 = (mb.layers_within_budget(kv) for kv in (4, 8))   # 8-bit layers the budget allows with KV4, KV8
    out["budget_layers"] = {"4": k4, "8": k8}
    designs = {"largest single gains": (ranking[:k4], 4), "largest single gains, KV8": (ranking[:k8], 8),
               "first layers": (list(range(k4)), 4), "last layers": (list(range(n - k4, n)), 4),
               "first and last": (sorted(set(range((k4 + 1) // 2)) | set(range(n - k4 // 2, n))), 4)}
    fixed = {}
    for name, (layers, kv) in designs.items():
        fixed[name] = {"eight_bit_layers": sorted(layers), "kv_bits": kv,
                       "ppl": scorer.score(dict.fromkeys(layers, 8), 4, kv)}
        print(json.dumps({name: fixed[name]}), flush=True)
    out["designs"] = fixed
    out["seconds"] = round(time.perf_counter() - t0)
    path = mb._RESULTS
    path.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {path} ({out['seconds']} s)")


if __name__ == "__main__":
    main()
