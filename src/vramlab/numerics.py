"""Kernel paths, the machine record, and the reproducible (float64) path for quantized experiments.

PyTorch's CPU kernels come in one build per instruction set, chosen once when ``torch`` is imported:
``torch.backends.cpu.get_cpu_capability()`` names it ("DEFAULT", "AVX2", "AVX512"), and the environment
variable ``ATEN_CPU_CAPABILITY=default|avx2|avx512`` lowers it (read in ``aten/src/ATen/native/DispatchStub.cpp``,
``compute_cpu_capability``, torch 2.x). The builds reduce sums in a different order (8 or 16 lanes), and MKL
picks its own code path and splits the work by thread count. A float32 result therefore moves in its last
bits from one machine or thread count to the next. That is harmless for a float32 model (perplexity agrees to
about 1e-5), but a quantizer rounds to a grid: a last-bit change that crosses a rounding boundary flips a
whole code, and at 4 bits the perplexity of the same code moves by several percent.

The reproducible path runs the model in float64 (:func:`reproducible`); the quantizers of
``vramlab.quarot.quant`` (the weight MSE clip search and GPTQ included) and the loss of
``vramlab.eval.perplexity`` then compute in float64 too, as they follow the model's dtype. The last-bit
differences fall to about 1e-16, far below any rounding boundary the quantizers meet, so every kernel path and
thread count gives the same perplexity to 1e-6 relative (``benchmarks/kernel_spread.py`` measures it).
"""

from __future__ import annotations

import copy
import json
import os
import platform
import subprocess
import sys

__all__ = ["KERNEL_PATHS", "ROW_BITS", "available_kernel_paths", "format_spread", "load_kernel_spread",
           "machine_difference", "machine_record", "reproducible", "row_on_kernel_paths", "run_on_kernel_path"]

KERNEL_PATHS = ("default", "avx2", "avx512")  # the values ATEN_CPU_CAPABILITY takes on x86

# CPU flags each ATen build needs (aten/src/ATen/cpu/Utils.cpp, torch 2.x: AVX2 needs avx2+fma,
# AVX512 needs avx512f/bw/vl/dq).
_PATH_FLAGS = {"avx2": ("avx2", "fma"), "avx512": ("avx512f", "avx512bw", "avx512vl", "avx512dq")}


def _cpu_flags() -> set[str] | None:
    """The CPU's feature flags from /proc/cpuinfo (Linux), or None elsewhere."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        return None
    return None


def available_kernel_paths() -> tuple[str, ...]:
    """The ``ATEN_CPU_CAPABILITY`` values this machine can run, lowest first (``"default"`` always).

    Read from the CPU flags on Linux, so it does not depend on an ``ATEN_CPU_CAPABILITY`` already set in this
    process; elsewhere only ``"default"`` is promised.
    """
    flags = _cpu_flags()
    if not flags or platform.machine().lower() not in ("x86_64", "amd64"):
        return ("default",)
    return ("default",) + tuple(p for p in ("avx2", "avx512") if all(f in flags for f in _PATH_FLAGS[p]))


def machine_record() -> dict:
    """What makes float32 results differ between machines: a dict for a cached table's ``machine`` entry.

    ``cpu_capability`` (torch's kernel path, e.g. "AVX512"), ``kernel_path_env`` (ATEN_CPU_CAPABILITY if set),
    ``blas`` (torch's BLAS, e.g. the MKL version line), ``onednn`` (the oneDNN version line), ``threads``
    (torch's intra-op threads), ``cpu`` (model name), ``cpu_count``, ``platform``.
    """
    import torch

    config = torch.__config__.show()

    def line(*keys):
        for text in config.splitlines():
            if any(k in text for k in keys):
                return text.strip(" -\t")
        return None

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    return {"cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "kernel_path_env": os.environ.get("ATEN_CPU_CAPABILITY"),
            "blas": line("Math Kernel Library", "OpenBLAS", "BLAS_INFO"),
            "onednn": line("MKL-DNN", "oneDNN"),
            "threads": torch.get_num_threads(), "cpu": cpu, "cpu_count": os.cpu_count(),
            "platform": platform.platform()}


def reproducible(model):
    """A float64 deep copy of ``model`` (``model`` is not changed): the reproducible path.

    Rotate, quantize and measure the copy as the float32 model: ``rotate_model``, ``quantize_model`` (its
    quantizers, MSE clip search and GPTQ) and ``vramlab.eval.perplexity`` (its loss) follow its dtype. About
    1.5x the CPU time of float32 (benchmarks/kernel_spread.py).
    """
    import torch

    try:
        next(model.parameters())
    except (AttributeError, StopIteration, TypeError):
        raise TypeError(f"model must be a torch model with parameters, e.g. the first value of "
                        f"vramlab.models.load_smollm2() (got {type(model).__name__}).") from None
    return copy.deepcopy(model).to(torch.float64)


def run_on_kernel_path(code: str, kernel_path: str, threads: int = 1, timeout: float = 600) -> dict:
    """Run ``code`` in a fresh Python with ``ATEN_CPU_CAPABILITY=kernel_path`` and ``threads`` threads.

    The kernel path is read once when torch is imported, so another path needs another process. ``code``
    must print one JSON object as its last line; that object is returned, with ``"cpu_capability"`` (what
    torch in the child reports) added. Raises ValueError for a path this machine cannot run and
    RuntimeError (with the child's last error line) when the child fails.
    """
    if not isinstance(code, str):
        raise TypeError(f"code must be Python source text (str), not {type(code).__name__}.")
    if kernel_path not in available_kernel_paths():
        raise ValueError(f"kernel_path={kernel_path!r} is not one this CPU can run; use one of "
                         f"{', '.join(map(repr, available_kernel_paths()))}.")
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive integer such as 1 or 2 (got {threads!r}).")
    env = {**os.environ, "ATEN_CPU_CAPABILITY": kernel_path, "OMP_NUM_THREADS": str(threads),
           "MKL_NUM_THREADS": str(threads)}
    wrapped = (code + "\nimport torch as _t, json as _j\n"
               "print(_j.dumps({'cpu_capability': _t.backends.cpu.get_cpu_capability()}))\n")
    proc = subprocess.run([sys.executable, "-c", wrapped], env=env, capture_output=True, text=True,
                          timeout=timeout)
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip().startswith("{")]
    if proc.returncode != 0 or len(lines) < 2:
        err = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"the run on kernel path {kernel_path!r} failed: {err}")
    return {**json.loads(lines[-2]), **json.loads(lines[-1])}


# One quantized row, run in a child per kernel path (lab 02). The child prints one JSON line.
_ROW_CODE = """
import json
from vramlab.data import token_windows
from vramlab.eval import perplexity
from vramlab.models import load_smollm2
from vramlab.numerics import reproducible
from vramlab.quarot import quant
from vramlab.quarot.rotate import rotate_model

model, tok = load_smollm2()
ids = token_windows(tok, 1, {length})
out = {{}}
for name, m in (("float32", model), ("float64", reproducible(model))):
    q = quant.quantize_model(rotate_model(m, "hadamard", seed={seed}), {w}, {a}, {kv}, progress=False)
    out[name] = perplexity(q, ids)
print(json.dumps(out))
"""

ROW_BITS = {"W16A4": (16, 4, 16), "W16A4KV4": (16, 4, 4), "W16A8": (16, 8, 16)}  # (w, a, kv) bits


def row_on_kernel_paths(setting: str = "W16A4KV4", paths=None, seed: int = 0, length: int = 512,
                        threads: int = 1) -> dict[str, dict[str, float]]:
    """Perplexity of one Hadamard-rotated row on the first pydoc window, per kernel path and dtype.

    ``setting``: a key of :data:`ROW_BITS` (no quantized weights, so no weight search: about 15 s per path on
    2 cores). ``paths``: ATEN_CPU_CAPABILITY values (default: every path this CPU runs). Returns
    ``{path: {"float32": ppl, "float64": ppl, "cpu_capability": torch's name}}``; each path runs in its own
    Python (:func:`run_on_kernel_path`).
    """
    if setting not in ROW_BITS:
        raise ValueError(f"setting={setting!r} is not a row this runs; use one of {', '.join(map(repr, ROW_BITS))}.")
    if isinstance(length, bool) or not isinstance(length, int) or not 2 <= length <= 2048:
        raise ValueError(f"length must be a window length in tokens between 2 and 2048 (got {length!r}).")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an integer rotation seed such as 0 (got {seed!r}).")
    paths = available_kernel_paths() if paths is None else paths
    if isinstance(paths, str):
        paths = [paths]
    w, a, kv = ROW_BITS[setting]
    code = _ROW_CODE.format(length=length, seed=seed, w=w, a=a, kv=kv)
    return {p: run_on_kernel_path(code, p, threads) for p in paths}


def machine_difference(recorded) -> str | None:
    """None when this process runs the kernel path, BLAS, oneDNN and thread count in ``recorded`` (a table's
    ``machine`` entry, from :func:`machine_record`); otherwise one sentence naming what differs.

    A difference is not a defect: float32 results of quantized rows then differ by the kernel-path spread
    (``vramlab/results/kernel_spread.json``), and the float64 rows still agree to 1e-6.
    """
    if not isinstance(recorded, dict) or "cpu_capability" not in recorded:
        return ("the table's machine record predates kernel-path recording (no cpu_capability), so whether this "
                "machine computes as it did is unknown")
    now = machine_record()
    diffs = [f"{key} {recorded.get(key)!r} there, {now[key]!r} here"
             for key in ("cpu_capability", "blas", "onednn", "threads") if recorded.get(key) != now[key]]
    return "this machine differs from the table's: " + "; ".join(diffs) if diffs else None


def load_kernel_spread() -> dict:
    """The measured kernel-path spread, ``vramlab/results/kernel_spread.json`` (written by
    ``benchmarks/kernel_spread.py``): ``runs`` (one per kernel path and thread count, with its ``machine``
    record and per-mode perplexities) and ``summary`` (``"<mode>/<row>"``: min, max, rel_spread)."""
    from importlib import resources

    text = (resources.files("vramlab") / "results" / "kernel_spread.json").read_text(encoding="utf-8")
    return json.loads(text)


def format_spread(spread: dict, table: dict | None = None) -> str:
    """Text: each measured row's relative spread over kernel paths and thread counts, float32 against float64,
    and (with ``table``, the QuaRot table) each 4-bit Hadamard row's spread over rotation seeds."""
    if not isinstance(spread, dict) or not isinstance(spread.get("summary"), dict):
        raise TypeError("spread must be the dict from vramlab.numerics.load_kernel_spread().")
    runs = spread.get("runs", [])
    where = ", ".join(sorted({f"{r['path']}/{r['threads']}t" for r in runs}))
    win = spread.get("windows", {})
    lines = [f"over kernel paths and threads ({where}; {win.get('n')} window(s) of {win.get('length')} tokens):"]
    rows = sorted({k.split("/", 1)[1] for k in spread["summary"] if "/" in k and not k.endswith("seconds_mean")})
    for row in rows:
        cells = []
        for mode in ("fp32", "fp64"):
            s = spread["summary"].get(f"{mode}/{row}")
            if s:
                cells.append(f"{'float32' if mode == 'fp32' else 'float64'} {s['min']:.4f}..{s['max']:.4f} "
                             f"({s['rel_spread']:.1e})")
        lines.append(f"  {row:8s} " + "   ".join(cells))
    if table is not None:
        dtype = (table.get("machine") or {}).get("dtype", "float32")
        win = table.get("windows") or {}
        lines.append(f"over rotation seeds (the table, {dtype}, {win.get('n')} windows of {win.get('length')} tokens):")
        for r in table.get("summary", []):
            if r["rotation"] == "hadamard" and r.get("n", 1) > 1 and r.get("group_size") is None:
                lines.append(f"  {r['setting']:8s} {r['weights']:4s} {r['ppl_min']:.2f}..{r['ppl_max']:.2f} "
                             f"({r['ppl_max'] / r['ppl_min'] - 1:.1e}, seeds {r['seeds']})")
    return "\n".join(lines)
