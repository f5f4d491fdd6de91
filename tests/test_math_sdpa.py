"""The modelled math SDPA path (vramlab.vram.kernels.math_sdpa) against PyTorch's own, allocation by allocation.

PyTorch's ``_scaled_dot_product_attention_math`` runs on CPU tensors here, under ``torch.profiler`` with
``profile_memory=True``: the CPU allocator reports every allocation and free, including the temporaries
inside ``_safe_softmax`` that no dispatch mode sees (its ``isneginf`` bool, the ``all``). The same profiler
then watches :func:`math_sdpa` run on the same tensors. The sequences of (+/- bytes) must be equal.

Allocations under 64 bytes are left out: they are Python scalars wrapped into CPU tensors (``q * 0.35``)
and 0-dim ``scalar_tensor``s, which in a GPU run stay on the host or take one 512-byte block.
"""

from __future__ import annotations

import json
import math

import pytest

torch = pytest.importorskip("torch")

from vramlab.vram.kernels import math_sdpa, torch_release  # noqa: E402

INSTALLED = torch_release()


def _allocations(fn, tmp_path) -> list[int]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    mem = sorted((e for e in events if e.get("name") == "[memory]"), key=lambda e: e["ts"])
    return [int(e["args"]["Bytes"]) for e in mem if abs(int(e["args"]["Bytes"])) >= 64]


def _qkv(dtype, b=2, h=6, hkv=2, lq=48, lk=48, d=16):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(b, h, lq, d, generator=g).to(dtype)
    k = torch.randn(b, hkv, lk, d, generator=g).to(dtype)
    v = torch.randn(b, hkv, lk, d, generator=g).to(dtype)
    return q, k, v


CASES = [
    ("bf16 causal GQA", torch.bfloat16, dict(is_causal=True, enable_gqa=True)),
    ("fp16 causal GQA", torch.float16, dict(is_causal=True, enable_gqa=True)),
    ("fp32 causal", torch.float32, dict(is_causal=True, enable_gqa=True)),
    ("bf16 float32 mask, MHA", torch.bfloat16, dict(mask="float32", hkv=6)),
    ("bf16 decode row against 48 keys", torch.bfloat16, dict(lq=1, enable_gqa=True)),
]


@pytest.mark.parametrize("label,dtype,opts", CASES, ids=[c[0] for c in CASES])
def test_math_path_allocates_what_torch_allocates(label, dtype, opts, tmp_path):
    opts = dict(opts)
    mask_kind = opts.pop("mask", None)
    shape = {k: opts.pop(k) for k in ("hkv", "lq") if k in opts}
    q, k, v = _qkv(dtype, **shape)
    mask = None
    if mask_kind == "float32":   # a float32 additive mask (no cast on the in-place add)
        mask = torch.zeros(q.shape[0], 1, q.shape[-2], k.shape[-2], dtype=torch.float32)
        mask[..., :, -3:] = -math.inf
    causal, gqa = opts.get("is_causal", False), opts.get("enable_gqa", False)

    def real():
        with torch.inference_mode():
            out = torch.ops.aten._scaled_dot_product_attention_math(q, k, v, mask, 0.0, causal, None,
                                                                    enable_gqa=gqa)
            del out

    def modelled():
        with torch.inference_mode():
            out = math_sdpa(q, k, v, mask, causal, None, gqa, outer_mask_conversion=False)
            del out

    theirs, ours = _allocations(real, tmp_path), _allocations(modelled, tmp_path)
    assert len(theirs) > 10
    assert ours == theirs, (label, theirs, ours)
    # the sequence holds the [B, H, L, S] float32 scores and softmax and the bool isneginf, at once
    scores = q.shape[0] * q.shape[1] * q.shape[2] * k.shape[2]
    live, peak = 0, 0
    for n in theirs:
        live += n
        peak = max(peak, live)
    assert peak >= scores * (4 + 4 + 1)


def test_the_output_is_torchs_output():
    q, k, v = _qkv(torch.bfloat16)
    with torch.inference_mode():
        want = torch.ops.aten._scaled_dot_product_attention_math(q, k, v, None, 0.0, True, None, enable_gqa=True)[0]
        got = math_sdpa(q, k, v, None, True, None, True, outer_mask_conversion=False)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert torch.equal(got, want)


def test_the_public_entry_converts_a_bool_mask_first(tmp_path):
    """F.scaled_dot_product_attention on the math backend converts a bool mask to the query dtype before the
    math function runs; the model does the same with outer_mask_conversion=True (float32 inputs, so that the
    CPU's in-place add needs no cast)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v = _qkv(torch.float32, hkv=6)
    mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()

    def real():
        with torch.inference_mode(), sdpa_kernel(SDPBackend.MATH):
            out = torch.nn.functional.scaled_dot_product_attention(q, k, v, mask)
            del out

    def modelled():
        with torch.inference_mode():
            out = math_sdpa(q, k, v, mask)
            del out

    assert _allocations(modelled, tmp_path) == _allocations(real, tmp_path)


def test_older_releases_differ_as_their_source_says():
    """Bytes per score element at the peak, bf16 on the meta device: 2 + 2 (scores, softmax) before 2.5;
    4 + 4 + 1 + 4 on 2.5 (the where into a new float32); 4 + 4 + 1 from 2.6 (where_out in place)."""
    from vramlab.vram.dryrun import _Recorder, _make_mode

    b, h, l, d = 1, 16, 4096, 64
    per = {}
    for release in ("2.4", "2.5", "2.6", "2.13"):
        rec = _Recorder()
        with torch.device("meta"):
            q = torch.empty(b, h, l, d, dtype=torch.bfloat16)
            k = torch.empty(b, h, l, d, dtype=torch.bfloat16)
            v = torch.empty(b, h, l, d, dtype=torch.bfloat16)
        for t in (q, k, v):
            rec.track(t)
        base = rec.live
        with _make_mode(rec, None):
            math_sdpa(q, k, v, None, True, torch_version=release)
        peak = max(e["live"] for e in rec.events) - base
        per[release] = peak / (b * h * l * l)
    assert 4.0 <= per["2.4"] < 4.4, per
    assert 13.0 <= per["2.5"] < 13.6, per
    assert 9.0 <= per["2.6"] < 9.6 and per["2.13"] == per["2.6"]


def test_installed_release_is_parsed():
    assert torch_release("2.13.0+cpu") == (2, 13) and torch_release("2.6.0a0+gitf4ee5a2") == (2, 6)
    assert INSTALLED >= (2, 5)
    with pytest.raises(ValueError, match="`torch_version`"):
        torch_release("latest")
