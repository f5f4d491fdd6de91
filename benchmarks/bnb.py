"""bitsandbytes on SmolLM2-135M: bytes, perplexity and a generation per quantization kind.

    python benchmarks/bnb.py            # fp32, bf16, int8, fp4, nf4, nf4+dq on the 8 x 512 windows

Writes ``src/vramlab/results/bnb_table.json`` (one row per kind, with per-window NLLs so a notebook can
recompute one window live and compare) stamped with ``vramlab.bnb.quantized.code_fingerprint()``.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def main() -> None:
    import bitsandbytes
    import torch
    import transformers

    from vramlab.bnb import quantized
    from vramlab import data, models

    ap = argparse.ArgumentParser()
    ap.add_argument("--windows", type=int, default=8)
    ap.add_argument("--kinds", nargs="*", default=list(quantized.BASELINES) + list(quantized.KINDS))
    args = ap.parse_args()
    torch.set_num_threads(1)
    _, tok = models.load_smollm2()
    windows = data.token_windows(tok, n_windows=args.windows, length=512)
    t0 = time.perf_counter()
    rows = []
    for kind in args.kinds:
        row = quantized.measure(kind, windows)
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "window_nll"}), flush=True)
    out = {"command": "python benchmarks/bnb.py " + " ".join(sys.argv[1:]),
           "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
           "fingerprint": quantized.code_fingerprint(),
           "versions": {"python": platform.python_version(), "torch": torch.__version__,
                        "transformers": transformers.__version__, "bitsandbytes": bitsandbytes.__version__},
           "machine": {"platform": platform.platform(), "device": "cpu", "torch_threads": torch.get_num_threads()},
           "windows": {"n": args.windows, "length": 512, "text": "pydoc topics (vramlab.data.token_windows)"},
           "prompt": quantized.PROMPT, "llm_int8_threshold": quantized.LLM_INT8_THRESHOLD,
           "elapsed_s": round(time.perf_counter() - t0, 1), "rows": rows}
    quantized.table_path().write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {quantized.table_path()}")


if __name__ == "__main__":
    main()
