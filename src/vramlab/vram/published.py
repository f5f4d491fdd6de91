"""The dry run against published ``torch.cuda.max_memory_allocated()`` peaks (``src/vramlab/results/published_peaks.json``: gathered reference data, not computed).

Each case states its conditions (GPU, torch, transformers, dtype, batch x length, new tokens, attention, the
unit of its number) and its link. :func:`predict` runs the dry run under those conditions: a model case is
``dry_run(..., mode="generate")`` of the stated transformers release; a kernel case (one
``F.scaled_dot_product_attention`` call) is the kernel's modelled allocations on meta tensors, plus its inputs
and the cuBLAS workspace a previous matmul of the same process left (the math run came first in that script).
:func:`table` gives model, GPU, conditions, published, predicted, ratio and link for each.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CASES_FILE = Path(__file__).resolve().parents[1] / "results" / "published_peaks.json"


def load_cases(path: str | Path | None = None) -> list[dict]:
    """The published cases (a list of dicts, see the module docstring)."""
    p = Path(path) if path is not None else CASES_FILE
    if not p.is_file():
        raise ValueError(f"`path` {p} does not exist; the published peaks live in src/vramlab/results/published_peaks.json.")
    return json.loads(p.read_text())["cases"]


def _published_bytes(case: dict) -> float:
    return case["published_mb"] * (1e6 if case.get("unit", "").startswith("MB") else 2 ** 20)


def _kernel_peak(case: dict) -> int:
    import torch

    from vramlab.vram.dryrun import _make_mode, _Recorder
    from vramlab.vram.kernels import cublas_workspace_bytes, fused_sdpa, math_sdpa

    rec = _Recorder()
    dtype = getattr(torch, case["dtype"])
    shape = (case["batch"], case["heads"], case["seq_len"], case["head_dim"])
    with _make_mode(rec, None):
        rec.add(cublas_workspace_bytes(case["gpu"], case["torch"]), "workspace", "cublas workspace")
        with torch.device("meta"):
            q, k, v = (torch.empty(shape, dtype=dtype) for _ in range(3))
        for t in (q, k, v):
            rec.track(t, "activations", "input")
        if case["kernel"] == "math":
            out = math_sdpa(q, k, v, None, True, torch_version=case["torch"])
        else:
            out = fused_sdpa(case["kernel"], q, k, v, None, torch_version=case["torch"])
        del out
    return max(e["live"] for e in rec.events)


def predict(case: dict) -> dict[str, Any]:
    """The dry run's peak for one case: ``predicted_bytes``, ``published_bytes``, ``ratio``, ``peak_at``."""
    if case.get("kind") == "sdpa_kernel":
        peak, at = _kernel_peak(case), f"F.scaled_dot_product_attention ({case['kernel']})"
    else:
        from vramlab.vram.dryrun import dry_run

        tr = dry_run(case["config"], case["batch"], case["seq_len"], new_tokens=case["new_tokens"],
                     mode=case.get("mode", "generate"), transformers_version=case["transformers"],
                     torch_version=case["torch"], gpu=case["gpu"], dtype=case["dtype"],
                     attn_implementation=case["attn_implementation"], allow_longer=True)
        peak, at = tr.peak_bytes, f"{tr.peak['phase']}, {tr.peak['module'] or 'top level'}"
    pub = _published_bytes(case)
    return {"predicted_bytes": peak, "published_bytes": pub, "ratio": peak / pub, "peak_at": at}


def table(cases: list[dict] | None = None) -> list[dict]:
    """One row per case: model, gpu, conditions (short), published / predicted (MB as published), ratio, link."""
    rows = []
    for c in cases if cases is not None else load_cases():
        p = predict(c)
        scale = 1e6 if c.get("unit", "").startswith("MB") else 2 ** 20
        cond = (f"{c['dtype']}, {c['batch']}x{c['seq_len']}"
                + (f", {c['attn_implementation']}, {c['new_tokens']} new tokens, torch {c['torch']}, "
                   f"transformers {c['transformers']}" if c.get("kind") != "sdpa_kernel"
                   else f", {c['kernel']} kernel alone, torch {c['torch']}"))
        rows.append({"model": c["model"], "gpu": c["gpu"], "conditions": cond, "published": c["published_mb"],
                     "predicted": round(p["predicted_bytes"] / scale, 1), "ratio": round(p["ratio"], 3),
                     "within_10pct": abs(p["ratio"] - 1) <= 0.10, "peak_at": p["peak_at"], "link": c["url"]})
    return rows


__all__ = ["CASES_FILE", "load_cases", "predict", "table"]
