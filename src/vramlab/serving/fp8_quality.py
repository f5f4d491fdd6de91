"""What vLLM's fp8 KV cache costs SmolLM2 in perplexity: the course's quality evidence for an fp8 cache.

vLLM 0.32 stores ``kv_cache_dtype="fp8"`` as ``fp8_e4m3`` (``vllm/config/cache.py``: "CUDA 11.8+ supports fp8
(=fp8_e4m3)") with per-layer ``k_scale`` / ``v_scale`` of 1.0 unless the checkpoint ships scales
(``vllm/model_executor/layers/attention/attention.py``: ``layer._k_scale_float = 1.0``). Here each post-RoPE K and V
value is rounded to ``torch.float8_e4m3fn`` at scale 1.0 and back, through the attention hooks of
:mod:`vramlab.quarot.attention`, and the perplexity of the course's 8 x 512-token windows is measured against the
unhooked float32 model. It simplifies in one way: the rounding is simulated in float32 (the same values vLLM's
kernels read back), not stored in a packed cache.

``python -m vramlab.serving.fp8_quality`` re-measures and writes :data:`RESULTS` (about 30 s on one core).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "results" / "fp8_kv_quality.json"
WINDOWS = {"n": 8, "length": 512}   # the windows of labs 05 and 07's tables (vramlab.data.token_windows)
#: The files whose code makes :data:`RESULTS` (package-relative): the stored result carries their SHA-256.
FINGERPRINT_FILES = ("serving/fp8_quality.py", "quarot/attention.py", "eval.py", "data.py", "models.py")


def code_fingerprint() -> str:
    """SHA-256 (16 hex digits) of :data:`FINGERPRINT_FILES`, line endings normalised: what :data:`RESULTS` was made by."""
    import hashlib

    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for name in FINGERPRINT_FILES:
        h.update(name.encode() + b"\0" + (root / name).read_bytes().replace(b"\r\n", b"\n") + b"\0")
    return h.hexdigest()[:16]


def _round_fp8(x):
    """``x`` (any float tensor) rounded to float8 e4m3 at scale 1.0 and back, in ``x``'s dtype."""
    import torch

    return x.to(torch.float8_e4m3fn).to(x.dtype)


def measure() -> dict:
    """Perplexity of float32 SmolLM2 with a 16-bit-exact cache and with K and V rounded to fp8 e4m3 (scale 1.0):
    ``{"ppl_16bit", "ppl_fp8", "ppl_ratio", ...}`` (ratio = fp8 / 16-bit, dimensionless)."""
    import torch

    from vramlab.data import token_windows
    from vramlab.eval import perplexity
    from vramlab.models import load_smollm2
    from vramlab.quarot import attention

    start = time.time()
    model, tok = load_smollm2()
    windows = token_windows(tok, n_windows=WINDOWS["n"], length=WINDOWS["length"])
    with torch.no_grad():
        base = perplexity(model, windows)
        attention.enable(model)
        for module in attention.attention_modules(model):
            module.vramlab_k_quantizer = _round_fp8
            module.vramlab_v_quantizer = _round_fp8
        fp8 = perplexity(model, windows)
        attention.clear_hooks(model)
        attention.disable(model)
    import transformers

    return {"command": "python -m vramlab.serving.fp8_quality", "date": time.strftime("%Y-%m-%dT%H:%M:%S+00:00",
                                                                                        time.gmtime()),
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
            "model": "SmolLM2-135M (vramlab.models.load_smollm2, float32 CPU)", "windows": WINDOWS,
            "kv_cache_dtype": "fp8 (fp8_e4m3, k_scale = v_scale = 1.0)", "fingerprint": code_fingerprint(),
            "fingerprint_files": list(FINGERPRINT_FILES), "threads": torch.get_num_threads(),
            "ppl_16bit": base, "ppl_fp8": fp8, "ppl_ratio": fp8 / base, "elapsed_s": round(time.time() - start, 1)}


def load() -> dict:
    """The stored measurement (:data:`RESULTS`): ``ppl_16bit``, ``ppl_fp8``, ``ppl_ratio`` and how it was made."""
    return json.loads(RESULTS.read_text())


if __name__ == "__main__":
    result = measure()
    RESULTS.write_text(json.dumps(result, indent=1) + "\n")
    print(f"16-bit {result['ppl_16bit']:.4f}, fp8 KV {result['ppl_fp8']:.4f}: x{result['ppl_ratio']:.4f} "
          f"({result['elapsed_s']} s) -> {RESULTS}")
