"""Benchmark of the VRAM dry run (vramlab.vram.dryrun): one JSON line per measurement.

    PYTHONPATH=src python benchmarks/dryrun.py [--quick] [--cpu-shape 8x2048]

* SmolLM2-135M at 8 x 2048 (target < 2 s) and the Llama-3.1-8B config at 1 x 8192 (target < 15 s),
  each timed on a warm process (the first dry run also imports transformers' modelling code: reported
  separately as ``cold_s``).
* Dry run vs the real CPU forward at the same shape (default 2 x 512, ``--cpu-shape BxL`` to change it;
  SmolLM2 geometry, eager attention so that both
  take the same kernels, random weights): seconds of each and their ratio (target >= 10x), and whether
  both saw the same sequence of allocation sizes.
"""

from __future__ import annotations

import json
import sys
import time


def _line(**kw) -> None:
    print(json.dumps(kw), flush=True)


def main(argv: list[str]) -> int:
    from vramlab.vram.dryrun import dry_run, random_model, track

    quick = "--quick" in argv
    t = time.perf_counter()
    dry_run("smollm2-135m", 1, 16)
    cold = time.perf_counter() - t
    for name, b, l, target in [("smollm2-135m", 8, 2048, 2.0), ("llama-3.1-8b", 1, 8192, 15.0)]:
        t = time.perf_counter()
        tr = dry_run(name, b, l)
        s = time.perf_counter() - t
        _line(bench="dry_run", model=name, batch=b, seq=l, seconds=round(s, 3), target_s=target, ok=s < target,
              events=len(tr.events), peak_mib=round(tr.peak_bytes / 2**20, 1), peak_at=tr.peak["module"],
              cold_s=round(cold, 3))

    b, l = (1, 128) if quick else (2, 512)
    if "--cpu-shape" in argv:                      # e.g. --cpu-shape 8x2048 (minutes on a small CPU)
        b, l = (int(x) for x in argv[argv.index("--cpu-shape") + 1].lower().split("x"))
    model = random_model("smollm2-135m", attn_implementation="eager")
    t = time.perf_counter()
    real = track(model, b, l)
    real_s = time.perf_counter() - t
    t = time.perf_counter()
    dry = dry_run("smollm2-135m", b, l, attn_implementation="eager")
    dry_s = time.perf_counter() - t
    same = [e["bytes"] for e in real.events] == [e["bytes"] for e in dry.events if e["category"] != "workspace"]
    _line(bench="dry_vs_cpu_forward", model="smollm2-135m", batch=b, seq=l, dry_s=round(dry_s, 3),
          cpu_forward_s=round(real_s, 3), ratio=round(real_s / dry_s, 1), target_ratio=10,
          ok=real_s / dry_s >= 10, same_allocation_sizes=same, events=len(real.events))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
