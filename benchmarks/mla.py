"""MLA side by side: one decode step absorbed vs naive at 1k-32k context, and the SmolLM2 latent-KV curve.

Run: python benchmarks/mla.py [--decode] [--conversion] [--threads 1]
(no flag: both). Prints JSON lines.

--decode: one MLA layer with DeepSeek-V2-Lite's attention geometry (hidden 2048, 16 heads,
kv_lora_rank 512, qk_nope 128, qk_rope 64, v 128, no q LoRA; float32 on CPU). For each context the
latent cache is filled with that many tokens, then one new token is decoded with the naive path
(re-expand per-head K/V from the latent, as transformers 5.x does), the absorbed path (W_UK folded
into the query, W_UV after attention, as DeepSeek-V3 inference/model.py "absorb"), and, for
reference, attention over an already-expanded per-head cache (what an MHA cache would hold).
Timings alternate between the paths in one run (best of N); cache bytes are bf16.

--conversion: SmolLM2-135M converted to a rank-r latent K/V cache (vramlab.mla.convert_to_latent_kv)
for several ranks, two ways (SVD of the weights; PCA of the K/V activations on 4 x 512 calibration
tokens disjoint from the evaluation windows), each point a real perplexity measurement on the 8 x 512
windows. Writes src/vramlab/results/mla_conversion.json with the code fingerprint.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import subprocess
import time

import torch

from vramlab.serving import kvcache
from vramlab import mla

LITE = dict(hidden_size=2048, num_attention_heads=16, kv_lora_rank=512, qk_nope_head_dim=128,
            qk_rope_head_dim=64, v_head_dim=128, q_lora_rank=None, rope_theta=10000)
CONTEXTS = (1024, 4096, 16384, 32768)
RANKS = (384, 256, 192, 128, 96, 64, 32)


def _best(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def decode_benchmark(contexts=CONTEXTS) -> list[dict]:
    torch.manual_seed(0)
    layer = mla.MultiHeadLatentAttention(LITE).eval()
    cfg = layer.config
    rows = []
    for ctx in contexts:
        cache = mla.LatentCache(1, cfg.kv_lora_rank, cfg.qk_rope_head_dim)
        with torch.no_grad():
            cache.update(0, torch.randn(1, ctx, cfg.kv_lora_rank), torch.randn(1, ctx, cfg.qk_rope_head_dim))
            keys, values = layer.expand_kv(cache.latent(), cache.rope_key())   # the per-head cache, built once
        x = torch.randn(1, 1, cfg.hidden_size)
        pos = torch.tensor([[ctx]])

        def step(absorbed):
            # one decode step against a cache of ctx tokens (the new row is written, then dropped)
            with torch.no_grad():
                out = layer(x, position_ids=pos, absorbed=absorbed, cache=cache)[0]
            cache.crop(ctx)
            return out

        def per_head():
            with torch.no_grad():
                q_nope, q_rope = layer.queries(x)
                q = torch.cat([q_nope, q_rope], -1)
                p = (q @ keys.transpose(-1, -2) * layer.scaling).softmax(-1)
                return layer.o_proj((p @ values).transpose(1, 2).reshape(1, 1, -1))

        step(False), step(True), per_head()          # warm-up
        repeats = 5 if ctx <= 4096 else 3
        naive, absorbed, expanded = [], [], []
        for _ in range(repeats):                      # alternate, so load changes hit every path alike
            naive.append(_best(lambda: step(False), 1))
            absorbed.append(_best(lambda: step(True), 1))
            expanded.append(_best(per_head, 1))
        latent_bytes = kvcache.latent_kv_bytes_per_token(1, cfg.kv_lora_rank, cfg.qk_rope_head_dim) * ctx
        per_head_bytes = kvcache.mla_expanded_kv_bytes_per_token(
            {"num_hidden_layers": 1, "num_attention_heads": 16, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
             "qk_nope_head_dim": 128, "v_head_dim": 128}) * ctx
        row = {"bench": "mla_decode_step", "context": ctx, "naive_ms": round(1e3 * min(naive), 2),
               "absorbed_ms": round(1e3 * min(absorbed), 2), "per_head_cache_ms": round(1e3 * min(expanded), 2),
               "ratio_naive_over_absorbed": round(min(naive) / min(absorbed), 2),
               "latent_cache_bytes_bf16_per_layer": int(latent_bytes),
               "per_head_cache_bytes_bf16_per_layer": int(per_head_bytes),
               "deepseek_v3_latent_cache_bytes_bf16": int(kvcache.kv_cache_bytes("deepseek-v3", ctx)),
               "threads": torch.get_num_threads()}
        print(json.dumps(row), flush=True)
        rows.append(row)
        del keys, values, cache
    return rows


def conversion_benchmark(ranks=RANKS, out=mla.CONVERSION_RESULTS) -> dict:
    from vramlab.data import token_windows
    from vramlab.models import load_smollm2

    start = time.perf_counter()
    model, tok = load_smollm2()
    windows = token_windows(tok, n_windows=8, length=512)
    calib = token_windows(tok, n_windows=4, length=512, offset=8 * 512)   # disjoint from the evaluation windows
    covs = mla.collect_input_covariance(model, calib)
    nll, ppl = mla.windows_nll_and_ppl(model, windows)
    gqa = {"ppl": ppl, "window_nll": nll, "bytes_per_token": kvcache.kv_bytes_per_token("smollm2-135m")}
    print(json.dumps({"bench": "mla_conversion", "point": "GQA original", **gqa}), flush=True)
    points = []
    for method in ("weights", "activations"):
        for rank in ranks:
            point = mla.conversion_point(model, windows, rank, method, covs)
            point["ppl_ratio"] = point["ppl"] / gqa["ppl"]
            print(json.dumps({"bench": "mla_conversion", **point}), flush=True)
            points.append(point)
    try:
        git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    except OSError:
        git = ""
    import transformers
    result = {"command": "python benchmarks/mla.py --conversion", "fingerprint": mla.code_fingerprint(),
              "fingerprint_files": list(mla.FINGERPRINT_FILES), "git": git,
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
              "machine": {"cpu": platform.processor() or platform.machine(), "threads": torch.get_num_threads()},
              "model": "SmolLM2-135M (vramlab.models.load_smollm2, float32 CPU)",
              "windows": {"n": 8, "length": 512},
              "calibration": {"n": 4, "length": 512, "offset": 4096},
              "kv_dtype_for_bytes": "bfloat16", "gqa": gqa, "points": points,
              "elapsed_s": round(time.perf_counter() - start, 1)}
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({"bench": "mla_conversion", "written": str(out), "elapsed_s": result["elapsed_s"]}), flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--decode", action="store_true")
    parser.add_argument("--conversion", action="store_true")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--contexts", type=int, nargs="*", default=list(CONTEXTS))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    both = not (args.decode or args.conversion)
    if args.decode or both:
        decode_benchmark(tuple(args.contexts))
    if args.conversion or both:
        conversion_benchmark()


if __name__ == "__main__":
    main()
