"""The dry run against the GPU (issue 27): SmolLM2-135M in bf16, random weights, at (1, 512) and (8, 2,048),
prefill + 16 decode steps, in forward mode (vramlab's own loop) and in generate mode (the real
model.generate(max_new_tokens=17)), on the kernel the GPU picks (flash / cuDNN) and on math, forced with
torch.nn.attention.sdpa_kernel(SDPBackend.MATH) and modelled with dry_run(sdpa_kernel="math").

    PYTHONPATH=src python tests/gpu/dryrun_vs_gpu.py [--out DIR]

Prints one JSON line per point: the dry run's peak, torch.cuda.max_memory_allocated(), the difference in MiB
and percent, where each peaks, and whether it is within 2% or 8 MiB (issue 27's bar). Without CUDA it prints
one "skip" line and exits 0. Each point runs in this process one after another (torch.cuda.empty_cache()
between them, so that one point's cached blocks do not shape the next one's).
"""

from __future__ import annotations

import contextlib
import json
import sys
import time

MiB = 1 << 20


def main(argv: list[str]) -> int:
    import torch

    if not torch.cuda.is_available():
        print("skip: dry run vs GPU: no CUDA GPU (CPU mode)")
        return 0
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from vramlab.vram.dryrun import compare, dry_run, measure

    out_dir = argv[argv.index("--out") + 1] if "--out" in argv else None
    major, minor = torch.cuda.get_device_capability()
    gpu = f"sm_{major}{minor}"
    rows = []
    for batch, seq in ((1, 512), (8, 2048)):
        for mode, new_tokens in (("forward", 16), ("generate", 17)):
            for kernel in ("auto", "math"):
                t0 = time.perf_counter()
                ctx = sdpa_kernel(SDPBackend.MATH) if kernel == "math" else contextlib.nullcontext()
                torch.cuda.empty_cache()
                try:
                    with ctx:
                        real = measure("smollm2-135m", batch, seq, new_tokens=new_tokens, mode=mode)
                except torch.cuda.OutOfMemoryError as exc:
                    rows.append({"batch": batch, "seq": seq, "mode": mode, "kernel": kernel, "error": str(exc)[:200]})
                    print(json.dumps(rows[-1]), flush=True)
                    continue
                dry = dry_run("smollm2-135m", batch, seq, new_tokens=new_tokens, mode=mode, gpu=gpu,
                              sdpa_kernel="math" if kernel == "math" else None)
                c = compare(dry, real)
                row = {"batch": batch, "seq": seq, "mode": mode, "kernel": kernel, "dry_kernel": dry.sdpa_kernel,
                       "torch": torch.__version__, "gpu": torch.cuda.get_device_name(),
                       "dry_mib": round(c["dry_peak"] / MiB, 1), "max_memory_allocated_mib": round(c["real_peak"] / MiB, 1),
                       "diff_mib": round(c["diff_bytes"] / MiB, 1), "diff_pct": round(c["diff_pct"], 2),
                       "within": abs(c["diff_bytes"]) <= max(0.02 * c["real_peak"], 8 * MiB),
                       "dry_peak_at": f"{dry.peak['phase']} {dry.peak['module']}",
                       "dry_breakdown_mib": {k: round(v / MiB, 1) for k, v in dry.breakdown("peak").items()},
                       "cuda_context_mib": None if real.cuda_context_bytes is None else round(real.cuda_context_bytes / MiB),
                       "seconds": round(time.perf_counter() - t0, 1), "weights": "random"}
                rows.append(row)
                print(json.dumps(row), flush=True)
    if out_dir:
        from pathlib import Path

        Path(out_dir).mkdir(parents=True, exist_ok=True)
        (Path(out_dir) / "dryrun_vs_gpu.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
