"""How far do quantized perplexities move across PyTorch's CPU kernel paths and thread counts?

Runs the same rows (FP32, W8A8, W4A4KV4 with the Hadamard rotation, seed 0, RTN weights) in one child
process per (ATEN_CPU_CAPABILITY, threads) and three numeric modes:

Rows: see :func:`rows_ppl`. Modes:

* ``fp32``: the model in float32 (the fast path the labs use);
* ``exact``: float32 model, but every quantized linear multiplies in float64 (the products of two float32
  values are exact in float64: "exact fake-quant arithmetic"), everything else (norms, attention) float32;
* ``fp64``: the model in float64 up to each quantizer (``vramlab.numerics.reproducible``).

    python benchmarks/kernel_spread.py --windows 1 --out /tmp/spread.json
    python benchmarks/kernel_spread.py --merge a.json b.json --out src/vramlab/results/kernel_spread.json

``--merge`` joins the runs of several records of the same code and windows (say, 1-thread and 2-thread runs
made at different times) into one record and recomputes the summary over all of them.

Prints one JSON line per child and a summary: per mode and row, the relative spread (max - min) / min over
the runs, and the mean seconds per run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROWS = ("FP32", "W8A8", "W4A4KV4", "W4A4KV4-absmax")
MODES = ("fp32", "exact", "fp64")
MODE_NOTES = {
    "fp32": "float32 model, vramlab.eval.perplexity (the labs' fast path)",
    "exact": "float32 model, every quantized linear multiplied in float64 (exact fake-quant products)",
    "fp64": "float64 model (numerics.reproducible): quantizers, MSE clip search and loss in float64, the reproducible path",
}
SECONDS_NOTE = "CPU seconds per run for all its rows (process time, model load excluded)"


def rows_ppl(model, windows, rows=ROWS) -> dict[str, float]:
    """Perplexity of each of ``rows`` for ``model`` (float32, or float64 from ``reproducible``) on ``windows``.

    FP32: the model as it is; W8A8: 8-bit weights (absmax scales, no clip search) and activations (clip 1.0),
    as tests/test_quant.py; W4A4KV4: Hadamard rotation seed 0, RTN weights with the MSE clip search,
    activations clip 0.9, KV clip 0.95, as the QuaRot table's settings; W4A4KV4-absmax: the same with absmax
    weight scales (no clip search).
    """
    from vramlab.eval import perplexity
    from vramlab.quarot import quant
    from vramlab.quarot.rotate import rotate_model

    res = {}
    if "FP32" in rows:
        res["FP32"] = perplexity(model, windows)
    if "W8A8" in rows:
        res["W8A8"] = perplexity(quant.quantize_model(model, 8, 8, 16, act_clip=1.0, w_clip=False,
                                                      progress=False), windows)
    if "W4A4KV4" in rows:
        rot = rotate_model(model, "hadamard", seed=0)
        res["W4A4KV4"] = perplexity(quant.quantize_model(rot, 4, 4, 4, act_clip=0.9, kv_clip=0.95,
                                                         progress=False), windows)
    if "W4A4KV4-absmax" in rows:
        rot = rotate_model(model, "hadamard", seed=0)
        res["W4A4KV4-absmax"] = perplexity(quant.quantize_model(rot, 4, 4, 4, act_clip=0.9, kv_clip=0.95,
                                                                w_clip=False, progress=False), windows)
    return res


def child(args) -> dict:
    import torch
    from torch import nn

    from vramlab.data import token_windows
    from vramlab.models import load_smollm2
    from vramlab.numerics import machine_record, reproducible
    from vramlab.quarot import quant

    model, tok = load_smollm2()
    windows = token_windows(tok, n_windows=args.windows, length=args.length)
    out = {"machine": machine_record(), "windows": args.windows, "length": args.length, "ppl": {}, "seconds": {}}
    original_forward = quant.QuantLinear.forward

    def exact_forward(self, x):
        xq = self.act_quantizer(x)
        bias = None if self.bias is None else self.bias.double()
        return nn.functional.linear(xq.double(), self.weight.double(), bias).to(x.dtype)

    for mode in args.modes:
        t0 = time.process_time()
        base = reproducible(model) if mode == "fp64" else model
        quant.QuantLinear.forward = exact_forward if mode == "exact" else original_forward
        try:
            out["ppl"][mode] = rows_ppl(base, windows, args.rows)
        finally:
            quant.QuantLinear.forward = original_forward
        out["seconds"][mode] = round(time.process_time() - t0, 1)  # CPU seconds: the machine is shared
    return out


def summarise(runs: list[dict]) -> dict:
    """Per ``"<mode>/<row>"`` over the runs that measured it: min, max, rel_spread ((max - min) / min) and the
    runs (``"<path>/<threads>t"``); per ``"<mode>/seconds_mean"``: the mean CPU seconds of a run."""
    summary = {}
    modes = sorted({m for r in runs for m in r["ppl"]})
    for mode in modes:
        have = [r for r in runs if mode in r["ppl"]]
        for row in sorted({row for r in have for row in r["ppl"][mode]}):
            got = [(r["ppl"][mode][row], f"{r['path']}/{r['threads']}t") for r in have if row in r["ppl"][mode]]
            vals = [v for v, _ in got]
            summary[f"{mode}/{row}"] = {"min": min(vals), "max": max(vals),
                                        "rel_spread": (max(vals) - min(vals)) / min(vals),
                                        "runs": sorted(where for _, where in got)}
        summary[f"{mode}/seconds_mean"] = round(sum(r["seconds"][mode] for r in have) / len(have), 2)
    return summary


def merge(paths: list[Path], out: Path) -> dict:
    """One record from the records at ``paths`` (same ``code_fingerprint`` and ``windows``), written to ``out``."""
    records = [json.loads(Path(p).read_text()) for p in paths]
    for key in ("code_fingerprint", "windows"):
        if len({json.dumps(r.get(key), sort_keys=True) for r in records}) != 1:
            raise SystemExit(f"--merge: the records differ in {key}; rerun them with the same code and --windows/--length")
    commands = [c for r in records for c in (r.get("commands") or [r["command"]])]
    runs = [run for r in records for run in r["runs"]]
    record = {"commands": commands, "date": max(r["date"] for r in records), "versions": records[0]["versions"],
              "code_fingerprint": records[0]["code_fingerprint"], "windows": records[0]["windows"],
              "runs": runs, "summary": summarise(runs)}
    record["modes"] = {m: MODE_NOTES[m] for m in MODES if any(m in run["ppl"] for run in runs)}
    record["seconds_note"] = SECONDS_NOTE
    out.write_text(json.dumps(record, indent=1) + "\n")
    return record


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--windows", type=int, default=1)
    p.add_argument("--length", type=int, default=512, help="tokens per window")
    p.add_argument("--jobs", type=int, default=1, help="children at once")
    p.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    p.add_argument("--rows", nargs="+", default=list(ROWS), choices=ROWS)
    p.add_argument("--paths", nargs="+", default=None, help="kernel paths (default: all this CPU runs)")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--merge", type=Path, nargs="+", default=None, help="join these records into --out")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(args)), flush=True)
        return 0
    if args.merge:
        if args.out is None:
            raise SystemExit("--merge needs --out (the merged record's path)")
        print(json.dumps(merge(args.merge, args.out)["summary"], indent=1))
        return 0
    from vramlab.numerics import available_kernel_paths

    paths = args.paths or list(available_kernel_paths())
    from concurrent.futures import ThreadPoolExecutor

    def one(job):
        path, threads = job
        env = {**os.environ, "ATEN_CPU_CAPABILITY": path, "OMP_NUM_THREADS": str(threads),
               "MKL_NUM_THREADS": str(threads)}
        cmd = [sys.executable, __file__, "--child", "--windows", str(args.windows), "--length", str(args.length),
               "--modes", *args.modes, "--rows", *args.rows]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode:
            raise SystemExit(f"the child on {path}/{threads}t failed: {proc.stderr[-2000:]}")
        run = {"path": path, "threads": threads, **json.loads(proc.stdout.splitlines()[-1])}
        print(json.dumps({k: run[k] for k in ("path", "threads", "ppl", "seconds")}), flush=True)
        return run

    jobs = [(path, threads) for path in paths for threads in args.threads]
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        runs = list(pool.map(one, jobs))
    summary = summarise(runs)
    print(json.dumps(summary, indent=1))
    if args.out:
        import datetime as _dt
        import platform

        import torch

        from vramlab.quarot import quant

        record = {"command": "python benchmarks/kernel_spread.py " + " ".join(argv if argv is not None else sys.argv[1:]),
                  "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                  "versions": {"python": platform.python_version(), "torch": torch.__version__},
                  "code_fingerprint": quant.code_fingerprint(),
                  "windows": {"n": args.windows, "length": args.length}, "runs": runs, "summary": summary,
                  "modes": {m: MODE_NOTES[m] for m in args.modes}, "seconds_note": SECONDS_NOTE}
        args.out.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
