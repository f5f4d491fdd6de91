"""dry_run(mode="generate") against the real model.generate() of the installed transformers on CPU, and the
older releases' generate() (transformers PRs #30536, #31292, #34813)."""

from __future__ import annotations

import gc

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from vramlab.configs import load_config  # noqa: E402
from vramlab.vram.dryrun import _make_mode, _Recorder, cublas_workspace_bytes, dry_run, random_model  # noqa: E402
from vramlab.vram.generation import transformers_release  # noqa: E402

MiB = 1 << 20


def _two_layers():
    cfg = dict(load_config("smollm2-135m"))
    cfg["num_hidden_layers"] = 2
    return cfg


def test_generate_mode_allocates_what_real_generate_allocates():
    """Every allocation of 64 KiB or more of a real greedy generate() (CPU, float32, eager, random weights)
    is in the dry run's generate mode, and the peaks agree within 64 KiB (generate's own small tensors:
    cache_position, the stopping criteria)."""
    from torch.utils.module_tracker import ModuleTracker

    cfg = _two_layers()
    model = random_model(cfg, dtype="float32", attn_implementation="eager")
    model.generation_config.eos_token_id = None          # random weights: never stop early
    b, l, n = 2, 40, 4
    rec = _Recorder(ModuleTracker())
    for _, p in list(model.named_parameters(remove_duplicate=False)) + list(model.named_buffers(remove_duplicate=False)):
        rec.track(p, "weights")
    rec.category = "activations"
    ids = torch.ones((b, l), dtype=torch.long)
    gc.disable()
    try:
        with rec.modules, _make_mode(rec, None), torch.inference_mode():
            out = model.generate(ids, max_new_tokens=n, do_sample=False, pad_token_id=0)
    finally:
        rec.stopped = True
        gc.enable()
    assert out.shape == (b, l + n)
    dry = dry_run(cfg, b, l, new_tokens=n, mode="generate", attn_implementation="eager", dtype="float32")
    big = lambda xs: sorted(x for x in xs if x >= 64 * 1024)  # noqa: E731
    assert big(e["bytes"] for e in rec.events) == big(e["bytes"] for e in dry.events if e["category"] != "workspace")
    real_peak = max(e["live"] for e in rec.events)
    assert abs(dry.peak_bytes - cublas_workspace_bytes(None) - real_peak) <= 64 * 1024
    assert [p for p in dry.phase_ends if p.startswith("decode")] == ["decode 1", "decode 2", "decode 3"]


def test_generate_keeps_one_logit_at_prefill():
    cfg = load_config("smollm2-135m")
    fwd = dry_run("smollm2-135m", 8, 2048)
    gen = dry_run("smollm2-135m", 8, 2048, new_tokens=2, mode="generate")
    v = cfg["vocab_size"]
    assert fwd.breakdown("prefill")["logits"] >= 8 * 2048 * v * 2
    assert gen.breakdown("prefill")["logits"] == 0      # the [8, 1, V] logits died with `del outputs`
    assert gen.peak_bytes < fwd.peak_bytes - 1000 * MiB
    assert not gen.peak["module"].endswith("lm_head")
    assert gen.mode == "generate" and gen.transformers_version == "%d.%d" % transformers_release()


def test_older_generate_upcasts_logits_and_holds_two_caches():
    cfg = load_config("smollm2-135m")
    b, l, v = 4, 1024, cfg["vocab_size"]
    new = dry_run("smollm2-135m", b, l, new_tokens=3, mode="generate", transformers_version="4.47")
    mid = dry_run("smollm2-135m", b, l, new_tokens=3, mode="generate", transformers_version="4.44")
    old = dry_run("smollm2-135m", b, l, new_tokens=3, mode="generate", transformers_version="4.41")
    # 4.44: every logit in bf16 and its float32 copy (logits.float() in modeling_llama) at the prefill
    assert mid.peak_bytes - new.peak_bytes >= b * l * v * (2 + 4) - 64 * MiB
    # 4.41: the prefill's float32 logits outlive it, and a decode step holds the old and the new cache
    assert old.peak_bytes >= mid.peak_bytes
    kv = new.breakdown("end")["kv_cache"]
    d1 = [e["live"] for e in old.events if e["phase"] == "decode 1"]
    d1_new = [e["live"] for e in new.events if e["phase"] == "decode 1"]
    assert max(d1) - max(d1_new) >= kv * 0.9
    with pytest.raises(ValueError, match="`transformers_version`"):
        dry_run("smollm2-135m", 1, 8, mode="generate", transformers_version="next")
    with pytest.raises(ValueError, match="`mode`"):
        dry_run("smollm2-135m", 1, 8, mode="sample")
