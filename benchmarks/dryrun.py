"""Benchmark of the VRAM dry run (vramlab.vram.dryrun): one JSON line per measurement.

    PYTHONPATH=src python benchmarks/dryrun.py [--quick] [--cpu-shape 8x2048] [--published] [--startups]

* SmolLM2-135M at 8 x 2048 (target < 2 s) and the Llama-3.1-8B config at 1 x 8192 (target < 15 s),
  each timed on a warm process (the first dry run also imports transformers' modelling code: reported
  separately as ``cold_s``).
* Dry run vs the real CPU forward at the same shape (default 2 x 512, ``--cpu-shape BxL`` to change it;
  SmolLM2 geometry, eager attention so that both
  take the same kernels, random weights): seconds of each and their ratio (target >= 10x), and whether
  both saw the same sequence of allocation sizes.
* SmolLM2 bf16 at 8 x 2,048 on a T4 (math SDPA) by torch release, and in generate mode on an A100.
* ``--published``: every published ``max_memory_allocated()`` peak of ``results/published_peaks.json`` under its
  stated conditions (target: within 10% on >= 80% of the points), one line each, then the count.
* ``--startups``: every logged vLLM start-up of ``results/logged_startups.json`` against ``profile_run_peak``
  (target: within 15% on >= 80%).
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

    for tv in ("2.4", "2.5", "2.13"):
        t = time.perf_counter()
        tr = dry_run("smollm2-135m", 8, 2048, gpu="T4", torch_version=tv)
        _line(bench="dry_run_t4_math", torch=tv, seconds=round(time.perf_counter() - t, 3),
              peak_mib=round(tr.peak_bytes / 2**20, 1), peak_at=tr.peak["module"], kernel=tr.sdpa_kernel)
    t = time.perf_counter()
    tr = dry_run("smollm2-135m", 8, 2048, new_tokens=17, mode="generate", gpu="A100")
    _line(bench="dry_run_generate", model="smollm2-135m", batch=8, seq=2048, new_tokens=17,
          seconds=round(time.perf_counter() - t, 3), peak_mib=round(tr.peak_bytes / 2**20, 1),
          peak_at=f"{tr.peak['phase']} {tr.peak['module']}")
    if "--published" in argv:
        from vramlab.vram.published import table

        rows = table()
        for r in rows:
            _line(bench="published_peak", **r)
        ok = sum(r["within_10pct"] for r in rows)
        _line(bench="published_peaks", within_10pct=ok, points=len(rows), share=round(ok / len(rows), 3),
              target_share=0.8, ok=ok >= 0.8 * len(rows))
    if "--startups" in argv:
        import json as _json
        from pathlib import Path

        from vramlab.serving.profile_run import profile_run_peak

        path = Path(__file__).resolve().parents[1] / "src/vramlab/results/logged_startups.json"
        cases = _json.loads(path.read_text())["cases"]
        ok = 0
        for c in cases:
            r = profile_run_peak(c["config"], c["max_num_batched_tokens"], c["max_num_seqs"], c["dtype"], "H100",
                                 c["vllm"], tensor_parallel_size=c["tensor_parallel_size"])
            ratio = r.total_bytes / 2**30 / c["logged_peak_gib"]
            ok += abs(ratio - 1) <= 0.15
            _line(bench="logged_startup", model=c["model"], vllm=c["vllm"], tp=c["tensor_parallel_size"],
                  logged_gib=c["logged_peak_gib"], predicted_gib=round(r.total_bytes / 2**30, 3),
                  ratio=round(ratio, 3), link=c["url"])
        _line(bench="logged_startups", within_15pct=ok, points=len(cases), target_share=0.8,
              ok=ok >= 0.8 * len(cases))

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
    same = ([e.get("rounded", e["bytes"]) for e in real.events]
            == [e.get("rounded", e["bytes"]) for e in dry.events if e["category"] != "workspace"])
    _line(bench="dry_vs_cpu_forward", model="smollm2-135m", batch=b, seq=l, dry_s=round(dry_s, 3),
          cpu_forward_s=round(real_s, 3), ratio=round(real_s / dry_s, 1), target_ratio=10,
          ok=real_s / dry_s >= 10, same_allocation_sizes=same, events=len(real.events))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
