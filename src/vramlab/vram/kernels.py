"""What the GPU's kernels allocate, by PyTorch release: SDPA kernel choice, the math SDPA path op by op,
the fused kernels' outputs and the cuBLAS workspace.

The dry run (:mod:`vramlab.vram.dryrun`) runs a real transformers forward on the meta device. There
``aten.scaled_dot_product_attention`` only makes its output, whatever kernel a GPU would run, so the dry
run replaces it with what the kernel :func:`_choose_sdpa_kernel` picks would allocate. Each rule below names
the PyTorch releases that have it and the file it rests on (pytorch/pytorch unless said otherwise):

* **Kernel order** (``select_sdp_backend``, aten/src/ATen/native/transformers/cuda/sdp_utils.cpp):
  cuDNN attention first on sm_90 / sm_100 from torch 2.11 when cuDNN is newer than 9.15 (:data:`CUDNN_FIRST`),
  then flash (sm_80+, fp16/bf16, head_dim <= 256, no ``attn_mask``, grouped-query heads allowed), then
  memory-efficient (sm_50+, bf16 only from sm_80; grouped-query heads only from torch 2.14, pytorch#191085:
  up to 2.13 ``enable_gqa`` sends it to math), else math.
* **The math path** (``_scaled_dot_product_attention_math``, aten/src/ATen/native/transformers/attention.cpp),
  modelled op by op by :func:`math_sdpa` (:data:`MATH_RULES`):

  - torch 2.0-2.4: q scaled by sqrt(scale), k^T scaled by sqrt(scale), a causal mask built bool [L, S] and
    converted to the *query dtype* (``zeros_like`` + ``masked_fill_``), scores ``q @ k^T`` [B, H, L, S] in the
    query dtype, ``softmax`` into a second [B, H, L, S], ``@ v``; the weights are returned as they are.
  - torch 2.5 (pytorch#128922 "Always use high precision for SDPA math backend", #135964 the
    ``allow_fp16_bf16_reduction_math_sdp`` switch; #131844 ``_safe_softmax``): q, k and v upcast to float32
    unless the switch is on; the causal mask float32 (``where(logical_not(mask), -inf, 0)``); GQA heads
    repeated (``repeat_interleave``) in float32; ``_safe_softmax``: ``softmax``, ``eq(-inf)`` into a bool
    [B, H, L, S], ``all`` over the last dim, and a ``where`` into *another* float32 [B, H, L, S]; the output
    and the weights both cast back (``.to(origin_dtype)``): the weights' bf16 copy is returned and thrown
    away. Peak about 13 bytes per score element in bf16 (pytorch#139612 measured it: 3,899 MB on a 2.6
    nightly against 2,361 MB on 2.1).
  - torch 2.6+ (pytorch#139613, fixing #139612): ``_safe_softmax`` takes ``isneginf`` and writes its
    ``where`` into the softmax's own storage (``where_out``): about 9 bytes per score element. The installed
    torch 2.13 shows this sequence on CPU (``tests/test_math_sdpa.py`` holds :func:`math_sdpa` against
    ``torch.ops.aten._scaled_dot_product_attention_math`` allocation by allocation). The boolean mask is
    converted by one ``where`` (no ``logical_not`` temporary) in 2.13; the release that changed this is not
    pinned here, so it is taken with the 2.6 rule.

  Freed in the order C++ destroys the locals (reverse declaration); the return tuple is evaluated right to
  left (GCC), so the weights' copy is made before the output matmul, as torch 2.13's CPU run shows.
* **Fused kernels**: flash returns its output [B, L, H, D] (transposed view) and a float32 ``logsumexp``
  [B, H, L]; memory-efficient and cuDNN compute ``logsumexp`` only with gradients, so inference allocates the
  output (and, for efficient with a mask, the mask converted to the query dtype, padded to 8 columns:
  ``preprocess_mask``).
* **cuBLAS workspace** (aten/src/ATen/cuda/CublasHandlePool.cpp, ``getChosenWorkspaceSize``): without
  ``CUBLAS_WORKSPACE_CONFIG``, ``:4096:2:16:8`` (2 x 4 MiB + 8 x 16 KiB) and 32 MiB (``4096 * 8 * 1024``) on
  sm_90; from torch 2.12 Blackwell (sm_100 and newer) gets the 32 MiB too. It comes from the caching
  allocator (pytorch#85447), so it counts in ``memory_allocated()``.

Releases are ``(major, minor)`` tuples; :func:`torch_release` parses a version string (default: the
installed torch).
"""

from __future__ import annotations

import math
from typing import Any

# name -> (compute capability major, minor). NVIDIA's CUDA GPUs list (developer.nvidia.com/cuda-gpus).
GPUS: dict[str, tuple[int, int]] = {
    "V100": (7, 0), "T4": (7, 5), "RTX2080TI": (7, 5), "A100": (8, 0), "A10G": (8, 6), "A10": (8, 6),
    "A40": (8, 6), "A6000": (8, 6), "RTXA6000": (8, 6), "RTX3080TI": (8, 6), "RTX3090": (8, 6),
    "L4": (8, 9), "L40": (8, 9), "L40S": (8, 9), "RTX4090": (8, 9), "RTX4060TI": (8, 9), "H100": (9, 0), "H200": (9, 0),
    "GH200": (9, 0), "B200": (10, 0), "GB200": (10, 0), "RTX5090": (12, 0),
}
DEFAULT_GPU = "A100"

# cuDNN attention is tried first on these architectures from torch 2.11, with cuDNN newer than 9.15
# (sdp_utils.cpp, select_sdp_backend's priority order).
CUDNN_FIRST = {"archs": ((9, 0), (10, 0)), "torch": (2, 11), "cudnn_above": (9, 15)}
# The memory-efficient kernel accepts grouped-query heads from this release (pytorch#191085).
EFFICIENT_GQA_FROM = (2, 14)
# cuBLAS: Blackwell's 32 MiB workspace from this release (CublasHandlePool.cpp).
BLACKWELL_WORKSPACE_FROM = (2, 12)

MATH_RULES = {
    "upcast_to_float32": ((2, 5), "pytorch#128922; off with allow_fp16_bf16_reduction_math_sdp (#135964)"),
    "enable_gqa": ((2, 5), "repeat_interleave of K/V inside the math path"),
    "safe_softmax": ((2, 5), "pytorch#131844: _safe_softmax (softmax, a bool [B,H,L,S], where)"),
    "safe_softmax_where_in_place": ((2, 6), "pytorch#139613: isneginf, where_out into the softmax"),
}


def torch_release(version: Any = None) -> tuple[int, int]:
    """``(major, minor)`` of a torch version (``"2.13.0+cpu"``, ``"2.5"``, ``(2, 5)``); None: the installed one."""
    if version is None:
        import torch

        version = torch.__version__
    if isinstance(version, tuple) and len(version) >= 2 and all(isinstance(v, int) for v in version[:2]):
        major, minor = version[0], version[1]
    else:
        import re

        found = re.match(r"\s*(\d{1,2})\.(\d{1,3})", str(version))   # "2.13.0+cpu", "2.6.0a0+git..", "2.5"
        if not found:
            raise ValueError(f"`torch_version` {version!r} is not a release such as '2.13' or '2.5.1'.")
        major, minor = int(found.group(1)), int(found.group(2))
    if (major, minor) < (2, 0) or major > 3:
        raise ValueError(f"`torch_version` {version!r}: the dry run models torch 2.x releases.")
    return major, minor


def _version_pair(version: Any, field: str) -> tuple[int, int]:
    parts = str(version).split(".")
    if len(parts) < 2 or not parts[0].isdigit() or not parts[1].isdigit():
        raise ValueError(f"`{field}` {version!r} is not a version such as '9.19'.")
    return int(parts[0]), int(parts[1])


def gpu_capability(gpu: str | None) -> tuple[int, int]:
    """Compute capability of a GPU name from :data:`GPUS` or ``"sm_XY"`` / ``"sm_XYZ"`` (``ValueError`` if unknown)."""
    name = DEFAULT_GPU if gpu is None else str(gpu)
    key = name.upper().replace("NVIDIA", "").replace("GEFORCE", "").replace(" ", "").replace("-", "").replace("_", "")
    for known, cap in GPUS.items():
        if key == known:
            return cap
    for suffix in ("SXM", "PCIE", "80GB", "40GB", "16GB", "24GB", "48GB", "NVL"):
        key = key.replace(suffix, "")
    for known, cap in GPUS.items():
        if key == known:
            return cap
    if key.startswith("SM") and key[2:].isdigit() and len(key) in (4, 5):
        return int(key[2:-1]), int(key[-1])
    raise ValueError(f"`gpu` {gpu!r} is unknown; use one of {', '.join(GPUS)} or 'sm_XY' (e.g. 'sm_80').")


def cublas_workspace_bytes(gpu: str | None = None, torch_version: Any = None) -> int:
    """The cuBLAS workspace one handle/stream takes from the caching allocator (bytes), by architecture and
    release (module docstring: CublasHandlePool.cpp)."""
    major, minor = gpu_capability(gpu)
    release = torch_release(torch_version)
    if (major, minor) == (9, 0) or (major >= 10 and release >= BLACKWELL_WORKSPACE_FROM):
        return 4096 * 8 * 1024
    return 4096 * 1024 * 2 + 16 * 1024 * 8


def _choose_sdpa_kernel(gpu: str | None, dtype: str, head_dim: int, has_mask: bool, gqa: bool, *,
                       torch_version: Any = None, cudnn_version: str | None = None) -> str:
    """The SDPA kernel a CUDA GPU would run: ``"cudnn"``, ``"flash"``, ``"efficient"`` or ``"math"``.

    Private: the dry run calls it, and it names the kernel lab 08's capstone asks the learner to work out from
    ``select_sdp_backend`` (an unseen review read the capstone's kernel off it).

    ``select_sdp_backend`` (sdp_utils.cpp) as described in the module docstring. ``cudnn_version``: the
    cuDNN the torch build loads (``"9.19"``); None assumes one newer than 9.15 (the cu12.8/cu13 wheels of
    2.11+ bundle 9.1x). Simplified: no dropout, no nested tensors, no alignment checks.
    """
    major, minor = gpu_capability(gpu)
    sm = 10 * major + minor
    release = torch_release(torch_version)
    low = dtype in ("bfloat16", "float16")
    cudnn_new = True if cudnn_version is None else _version_pair(cudnn_version, "cudnn_version") > CUDNN_FIRST["cudnn_above"]
    if ((major, minor) in CUDNN_FIRST["archs"] and release >= CUDNN_FIRST["torch"] and cudnn_new and low
            and head_dim <= 256 and head_dim % 8 == 0):
        return "cudnn"
    if sm >= 80 and low and head_dim <= 256 and not has_mask:
        return "flash"
    if sm >= 50 and not (dtype == "bfloat16" and sm < 80) and (not gqa or release >= EFFICIENT_GQA_FROM):
        return "efficient"
    return "math"


# ------------------------------------------------------------------------------------------------
# The math path, op by op
# ------------------------------------------------------------------------------------------------

def _convert_bool_mask(mask, dtype, release: tuple[int, int]):
    """``convert_boolean_attn_mask``: a bool mask to an additive one of ``dtype`` (same shape)."""
    import torch

    if mask is None or mask.dtype != torch.bool:
        return mask
    if release < (2, 5):
        out = torch.zeros_like(mask, dtype=dtype)            # zeros_like + masked_fill_(logical_not)
        inv = mask.logical_not()
        out.masked_fill_(inv, -math.inf)
        del inv
        return out
    zero = torch.scalar_tensor(0.0, dtype=dtype, device=mask.device)
    if release < (2, 6):
        inv = mask.logical_not()                              # where(logical_not(mask), -inf, 0)
        out = torch.where(inv, -math.inf, zero)
        del inv
    else:
        out = torch.where(mask, zero, -math.inf)              # 2.13: one where, no logical_not temporary
    del zero
    return out


def math_sdpa(query, key, value, attn_mask=None, is_causal: bool = False, scale: float | None = None,
              enable_gqa: bool = False, *, torch_version: Any = None, reduced_precision: bool = False,
              outer_mask_conversion: bool = True):
    """``F.scaled_dot_product_attention`` on the math backend, op by op as the release runs it (module docstring).

    ``query`` [B, H, L, D], ``key`` / ``value`` [B, Hkv, S, D] (any device, meta included: the ops are real
    torch ops, so a recorder sees each allocation and free). ``reduced_precision``: PyTorch's
    ``allow_fp16_bf16_reduction_math_sdp(True)`` (no upcast). ``outer_mask_conversion``: the bool mask is
    converted by ``scaled_dot_product_attention`` before the math function (the public entry does this;
    ``torch.ops.aten._scaled_dot_product_attention_math`` called directly does not). Returns the output
    [B, H, L, D] in the query dtype.
    """
    import torch

    release = torch_release(torch_version)
    if outer_mask_conversion:
        attn_mask = _convert_bool_mask(attn_mask, query.dtype, release)
    origin = query.dtype
    heads = query.shape[-3]
    if enable_gqa and release < MATH_RULES["enable_gqa"][0] and key.shape[-3] != heads:
        # before 2.5 there is no enable_gqa: the caller (transformers' repeat_kv) expands K/V itself
        n = heads // key.shape[-3]
        key = key[:, :, None].expand(key.shape[0], key.shape[1], n, *key.shape[2:]).reshape(
            key.shape[0], heads, *key.shape[2:])
        value = value[:, :, None].expand(value.shape[0], value.shape[1], n, *value.shape[2:]).reshape(
            value.shape[0], heads, *value.shape[2:])
        enable_gqa = False
    upcast = (release >= MATH_RULES["upcast_to_float32"][0] and not reduced_precision)
    low = (torch.float16, torch.bfloat16)
    q_acc = query.to(torch.float32) if upcast and query.dtype in low else query
    k_acc = key.to(torch.float32) if upcast and key.dtype in low else key
    v_acc = value.to(torch.float32) if upcast and value.dtype in low else value
    sf = math.sqrt(scale if scale is not None else 1.0 / math.sqrt(query.shape[-1]))
    q = q_acc * sf
    mask = attn_mask
    if is_causal:
        lq, lk = q.shape[-2], k_acc.shape[-2]
        ones = torch.ones((lq, lk), dtype=torch.bool, device=q.device)
        tril = ones.tril()
        del ones
        mask = _convert_bool_mask(tril, q.dtype, release)
        del tril
    if enable_gqa and k_acc.shape[-3] != heads:
        k_exp = k_acc.repeat_interleave(heads // k_acc.shape[-3], dim=-3)
        v_exp = v_acc.repeat_interleave(heads // v_acc.shape[-3], dim=-3)
    else:
        k_exp, v_exp = k_acc, v_acc
    kt = k_exp.transpose(-2, -1) * sf
    attn = torch.matmul(q, kt)
    del kt
    if mask is not None:
        attn.add_(mask)
    if release >= MATH_RULES["safe_softmax"][0]:
        out = torch.softmax(attn, -1)
        if release >= MATH_RULES["safe_softmax_where_in_place"][0]:
            masked = torch.isneginf(attn)
        else:
            neg_inf = torch.scalar_tensor(-math.inf, dtype=out.dtype, device=out.device)
            masked = attn.eq(neg_inf)
            del neg_inf
        rows = masked.all(-1, keepdim=True)
        zero = torch.scalar_tensor(0.0, dtype=out.dtype, device=out.device)
        if release >= MATH_RULES["safe_softmax_where_in_place"][0]:
            torch.where(rows, zero, out, out=out)
            probs = out
            del out
        else:
            probs = torch.where(rows, zero, out)
            del out
        del zero, rows, masked
        del attn
        attn = probs
        del probs
    else:
        probs = torch.softmax(attn, -1)
        del attn
        attn = probs
        del probs
    # make_tuple(matmul(attn, v).to(origin), attn.to(origin)): GCC evaluates the second element first
    weights = attn.to(origin)
    out_acc = torch.matmul(attn, v_exp)
    output = out_acc.to(origin)
    del out_acc
    # locals die in reverse order of declaration: attn, value/key expanded, query, mask, v/k/q_acc
    del attn, v_exp, k_exp, q, mask, v_acc, k_acc, q_acc
    del weights                                              # the caller keeps std::get<0> only
    return output


def fused_sdpa(kernel: str, query, key, value, attn_mask=None, *, torch_version: Any = None):
    """The allocations of a fused kernel at inference (module docstring): its output as a [B, H, L, Dv] view of
    [B, L, H, Dv]; flash adds the float32 logsumexp [B, H, L]; memory-efficient converts a mask."""
    import torch

    b, h, lq = query.shape[0], query.shape[-3], query.shape[-2]
    keep = None
    if kernel == "efficient" and attn_mask is not None:
        conv = _convert_bool_mask(attn_mask, query.dtype, torch_release(torch_version))
        if conv.shape[-1] % 8:                               # preprocess_mask: pad_bias to 8 columns
            pad = 8 - conv.shape[-1] % 8
            padded = torch.nn.functional.pad(conv, (0, pad))
            del conv
            conv = padded[..., :attn_mask.shape[-1]]
            del padded
        keep = conv
    out = torch.empty((b, lq, h, value.shape[-1]), dtype=query.dtype, device=query.device).transpose(1, 2)
    if kernel == "flash":
        torch.empty((b, h, lq), dtype=torch.float32, device=query.device)
    del keep
    return out


__all__ = ["GPUS", "DEFAULT_GPU", "MATH_RULES", "CUDNN_FIRST", "EFFICIENT_GQA_FROM", "BLACKWELL_WORKSPACE_FROM",
           "torch_release", "gpu_capability", "cublas_workspace_bytes", "math_sdpa",
           "fused_sdpa"]
