"""Model load time: the first (GGUF de-quantize + convert) versus later loads, in new processes.

Prints JSON lines. The acceptance target is a later load in a new process under 5 s on 2 cores;
the ratio first/later shows what the converted safetensors copy buys. Run:
    python benchmarks/model_load.py            (uses a temporary cache: includes the download)
    python benchmarks/model_load.py --reuse    (uses your cache: later loads only)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

SNIPPET = ("import time; t=time.perf_counter(); from vramlab.models import load_smollm2; "
           "m, tok = load_smollm2(); print(time.perf_counter()-t)")


def timed_load(env: dict) -> tuple[float, float]:
    """(wall seconds of the whole process, seconds inside load_smollm2 incl. imports)."""
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", SNIPPET], env=env, capture_output=True, text=True, check=True)
    return time.perf_counter() - start, float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reuse", action="store_true", help="use the existing cache (no first load)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    env = dict(os.environ)
    tmp = None
    if not args.reuse:
        tmp = tempfile.TemporaryDirectory(prefix="vramlab-bench-")
        env["VRAMLAB_CACHE"] = tmp.name
        wall, inside = timed_load(env)
        print(json.dumps({"load": "first (download + de-quantize + convert)", "process_s": round(wall, 2),
                          "load_s": round(inside, 2)}))
        first = wall
    later = []
    for i in range(args.repeats):
        wall, inside = timed_load(env)
        later.append(wall)
        print(json.dumps({"load": f"later #{i + 1}", "process_s": round(wall, 2), "load_s": round(inside, 2)}))
    best = min(later)
    summary = {"later_best_process_s": round(best, 2), "target_s": 5.0, "meets_target": best < 5.0,
               "cpu_count": os.cpu_count()}
    if tmp is not None:
        summary["first_over_later_ratio"] = round(first / best, 1)
        tmp.cleanup()
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
