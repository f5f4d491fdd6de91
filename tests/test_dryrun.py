"""The op-by-op VRAM dry run (vramlab.vram.dryrun): exact accounting, kernel choice, CPU agreement, bad input."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from vramlab.configs import load_config  # noqa: E402
from vramlab.serving.kvcache import kv_cache_bytes, num_parameters  # noqa: E402
from vramlab.vram.allocator import round_size  # noqa: E402
from vramlab.vram.dryrun import (MemoryTrace, _choose_sdpa_kernel, compare, cublas_workspace_bytes,  # noqa: E402
                                 dry_run, track)

MiB = 1 << 20


def _weight_tensors(cfg) -> list[int]:
    """Bytes of every weight tensor of a Llama-style decoder in bf16, from the config alone."""
    h, inter, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or h // nh
    per_layer = [h * nh * hd, h * nkv * hd, h * nkv * hd, nh * hd * h, h * inter, h * inter, inter * h, h, h]
    elems = per_layer * cfg["num_hidden_layers"] + [v * h, h] + ([] if cfg.get("tie_word_embeddings") else [v * h])
    return [2 * n for n in elems]


def _expected_after_prefill(name: str, batch: int, seq: int) -> dict:
    cfg = load_config(name)
    tensors = _weight_tensors(cfg)
    assert sum(tensors) == 2 * num_parameters(cfg)          # the formula is the published parameter count
    hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    # RoPE buffers: inv_freq and its clone original_inv_freq (transformers modeling_llama.py, nn.Buffer),
    # float32 [head_dim / 2] each
    rope = 2 * round_size(4 * (hd // 2))
    layers = cfg["num_hidden_layers"]
    kv_total = int(kv_cache_bytes(cfg, batch * seq, "bfloat16"))
    per_tensor = kv_total // (2 * layers)                     # one K or V tensor of one layer
    assert per_tensor * 2 * layers == kv_total
    return {"weights": sum(round_size(t) for t in tensors) + rope,
            "kv_cache": 2 * layers * round_size(per_tensor),
            "logits": round_size(2 * batch * seq * cfg["vocab_size"]),
            "workspace": cublas_workspace_bytes(None), "activations": 0}


@pytest.mark.parametrize("name,batch,seq", [("smollm2-135m", 1, 512), ("smollm2-135m", 8, 2048),
                                            ("llama-3.1-8b", 1, 8192), ("llama-3.1-8b", 4, 1000)])
def test_live_after_prefill_is_weights_kv_logits_exactly(name, batch, seq):
    tr = dry_run(name, batch, seq)
    want = _expected_after_prefill(name, batch, seq)
    # what memory_allocated counts: the 512-rounded sizes, plus the remainder (<= 1 MiB) of each large-pool
    # block the allocator does not split (vramlab.vram.blocks)
    got = tr.breakdown("prefill")
    unsplit = {c: 0 for c in want}
    live = {}
    for e in tr.events:
        if e["bytes"] > 0:
            live[e["storage"]] = e
        elif e["bytes"] < 0:
            live.pop(e["storage"], None)
    for e in live.values():
        if "rounded" in e:
            assert 0 < e["bytes"] - e["rounded"] <= MiB and e["rounded"] > MiB
            unsplit[e["category"]] += e["bytes"] - e["rounded"]
    assert {c: got[c] - unsplit[c] for c in got} == want
    assert tr.phase_ends["prefill"] == sum(want.values()) + sum(unsplit.values())
    # the peak is higher (activations live while the logits are written) and it is named
    assert tr.peak_bytes > sum(want.values())
    assert tr.peak["module"].endswith("lm_head") and tr.peak["phase"] == "prefill"


def test_decode_grows_the_cache_and_keeps_one_step_of_logits():
    tr = dry_run("smollm2-135m", 2, 256, new_tokens=3)
    cfg = load_config("smollm2-135m")
    end = tr.breakdown("end")
    per = int(kv_cache_bytes(cfg, 2 * (256 + 3))) // (2 * cfg["num_hidden_layers"])
    assert end["kv_cache"] == 2 * cfg["num_hidden_layers"] * round_size(per)
    assert end["logits"] == round_size(2 * 2 * 1 * cfg["vocab_size"])   # only the last step's [B, 1, V]
    assert [p for p in tr.phase_ends if p.startswith("decode")] == ["decode 1", "decode 2", "decode 3"]


def test_static_cache_is_allocated_whole_at_prefill():
    cfg = load_config("smollm2-135m")
    dyn = dry_run("smollm2-135m", 2, 256, new_tokens=3)
    sta = dry_run("smollm2-135m", 2, 256, new_tokens=3, static_cache=True)
    full = int(kv_cache_bytes(cfg, 2 * (256 + 3)))
    assert dyn.breakdown("prefill")["kv_cache"] < full
    assert sta.breakdown("prefill")["kv_cache"] >= full                # sized for all 259 tokens up front
    assert sta.breakdown("prefill")["activations"] == 0
    assert "efficient" in sta.sdpa_kernel                              # its prefill passes a mask: no flash


def test_eager_holds_the_scores_sdpa_does_not():
    b, seq = 1, 2048
    sdpa = dry_run("smollm2-135m", b, seq, attn_implementation="sdpa", gpu="A100")
    eager = dry_run("smollm2-135m", b, seq, attn_implementation="eager", gpu="A100")
    heads = load_config("smollm2-135m")["num_attention_heads"]
    scores_bf16 = round_size(b * heads * seq * seq * 2)
    assert sdpa.sdpa_kernel == "flash"
    assert eager.peak_bytes - sdpa.peak_bytes >= scores_bf16     # eager's peak holds L x L (bf16 and fp32)
    assert "self_attn" in eager.peak["module"]
    assert sdpa.peak["module"].endswith("lm_head")


def test_kernel_choice_follows_the_gpu_and_the_release():
    assert _choose_sdpa_kernel("A100", "bfloat16", 64, False, True) == "flash"
    # cuDNN first on sm_90 / sm_100 from torch 2.11 with cuDNN newer than 9.15
    assert _choose_sdpa_kernel("H100", "float16", 128, False, False, torch_version="2.13") == "cudnn"
    assert _choose_sdpa_kernel("B200", "bfloat16", 128, False, True, torch_version="2.11") == "cudnn"
    assert _choose_sdpa_kernel("H100", "float16", 128, False, False, torch_version="2.10") == "flash"
    assert _choose_sdpa_kernel("H100", "float16", 128, False, False, torch_version="2.13",
                              cudnn_version="9.10") == "flash"
    assert _choose_sdpa_kernel("L4", "bfloat16", 128, False, False, torch_version="2.13") == "flash"
    assert _choose_sdpa_kernel("T4", "float16", 64, False, False) == "efficient"   # flash needs sm_80
    assert _choose_sdpa_kernel("A100", "float32", 64, False, False) == "efficient"  # flash needs 16-bit
    assert _choose_sdpa_kernel("T4", "bfloat16", 64, False, False) == "math"
    assert _choose_sdpa_kernel("A100", "bfloat16", 64, True, False) == "efficient"  # a mask rules out flash
    # memory-efficient with grouped-query heads: math up to torch 2.13, efficient from 2.14 (pytorch#191085)
    assert _choose_sdpa_kernel("T4", "float16", 64, False, True, torch_version="2.13") == "math"
    assert _choose_sdpa_kernel("T4", "float16", 64, False, True, torch_version="2.14") == "efficient"
    # on a T4 in bf16 the math path materialises the scores: its peak is higher than the A100's
    t4 = dry_run("smollm2-135m", 1, 4096, gpu="T4")
    a100 = dry_run("smollm2-135m", 1, 4096, gpu="A100")
    heads = load_config("smollm2-135m")["num_attention_heads"]
    assert t4.sdpa_kernel == "math" and a100.sdpa_kernel == "flash"
    elems = heads * 4096 * 4096
    assert t4.peak_bytes > a100.peak_bytes
    # torch >= 2.6: float32 scores + float32 softmax + the bool isneginf, all live at once
    assert t4.breakdown("peak")["activations"] >= 9 * elems
    assert a100.breakdown("peak")["activations"] < 2 * elems
    assert "self_attn" in t4.peak["module"] and a100.peak["module"].endswith("lm_head")
    assert cublas_workspace_bytes("H100") == 32 * MiB and cublas_workspace_bytes("T4") == 8 * MiB + 128 * 1024
    # Blackwell gets the 32 MiB workspace from torch 2.12
    assert cublas_workspace_bytes("B200", "2.12") == 32 * MiB
    assert cublas_workspace_bytes("B200", "2.11") == 8 * MiB + 128 * 1024


def test_smollm2_bf16_on_a_t4_peaks_in_the_math_kernel():
    """The acceptance point of issue 28: 8 x 2,048 in bf16 on a T4 peaks in attention, not at lm_head."""
    cfg = load_config("smollm2-135m")
    elems = 8 * cfg["num_attention_heads"] * 2048 * 2048
    new = dry_run("smollm2-135m", 8, 2048, gpu="T4", torch_version="2.13")
    old = dry_run("smollm2-135m", 8, 2048, gpu="T4", torch_version="2.5")
    pre = dry_run("smollm2-135m", 8, 2048, gpu="T4", torch_version="2.4")
    flash = dry_run("smollm2-135m", 8, 2048, gpu="A100")
    assert new.peak["module"].endswith("layers.29.self_attn") and old.peak["module"].endswith("layers.29.self_attn")
    assert old.peak_bytes - new.peak_bytes == round_size(4 * elems)     # 2.5's where into a second float32
    assert new.peak_bytes > flash.peak_bytes and new.breakdown("peak")["activations"] >= 9 * elems
    assert pre.peak["module"].endswith("lm_head")                        # 2.4: bf16 scores, no upcast
    reduced = dry_run("smollm2-135m", 8, 2048, gpu="T4", allow_fp16_bf16_reduction_math_sdp=True)
    assert reduced.peak_bytes < new.peak_bytes


def test_real_cpu_forward_allocates_the_same_sizes():
    from vramlab.vram.dryrun import random_model

    model = random_model("smollm2-135m", num_hidden_layers=2)
    cfg = dict(load_config("smollm2-135m"))
    cfg["num_hidden_layers"] = 2
    rope = model.model.rotary_emb
    assert torch.isfinite(rope.inv_freq).all() and rope.inv_freq[0] == 1.0   # re-initialised, not garbage
    real = track(model, 2, 48, new_tokens=2)
    dry = dry_run(cfg, 2, 48, new_tokens=2, attn_implementation="eager")
    sizes_real = [e.get("rounded", e["bytes"]) for e in real.events]
    sizes_dry = [e.get("rounded", e["bytes"]) for e in dry.events if e["category"] != "workspace"]
    assert len(sizes_real) > 300
    assert sizes_real == sizes_dry
    assert [e["category"] for e in real.events] == [e["category"] for e in dry.events if e["category"] != "workspace"]
    # the dry run adds the cuBLAS workspace; it also shifts which cached blocks later requests get, so the
    # whole-block counts of the two runs may differ by a remainder (each <= 1 MiB)
    assert abs(compare(dry, real)["diff_bytes"] - cublas_workspace_bytes(None)) <= 2 * MiB


def test_an_unsplit_large_block_counts_whole():
    """c10/cuda/CUDACachingAllocator.cpp: a large-pool block is split only when more than 1 MiB would remain, and
    memory_allocated() counts the block. 11 MiB on a fresh segment (12 MiB) holds 12 MiB; 9 MiB from a 20 MiB
    segment is split (11 MiB remain); a cached 12 MiB block serving 11.5 MiB counts 12 MiB."""
    from vramlab.vram.blocks import block_bytes

    ev = lambda sid, n: {"storage": sid, "bytes": n}  # noqa: E731
    assert block_bytes([ev(0, 11 * MiB)]) == [12 * MiB]
    assert block_bytes([ev(0, 9 * MiB)]) == [9 * MiB]
    assert block_bytes([ev(0, 12 * MiB), ev(0, -12 * MiB), ev(1, 11 * MiB + MiB // 2)]) == [12 * MiB, -12 * MiB, 12 * MiB]
    assert block_bytes([ev(0, 512), ev(1, MiB)]) == [512, MiB]             # the small pool always splits
    # frees merge with their neighbours: 3 x 6 MiB in one 20 MiB segment, all freed, then 18 MiB fits there
    seq = [ev(i, 6 * MiB) for i in range(3)] + [ev(i, -6 * MiB) for i in range(3)]
    assert block_bytes(seq + [ev(9, 18 * MiB)])[-1] == 18 * MiB           # 2 MiB remain: split
    assert block_bytes(seq + [ev(9, 19 * MiB + MiB // 2)])[-1] == 20 * MiB  # 0.5 MiB would remain: whole


def test_json_round_trip_and_reserved():
    tr = dry_run("smollm2-135m", 1, 128, new_tokens=1)
    back = MemoryTrace.from_json(tr.to_json())
    assert back.events == tr.events and back.peak_bytes == tr.peak_bytes
    res = tr.reserved
    assert res["peak_reserved"] >= max(e["live"] for e in tr.events) - res["small_bytes_left_out"]
    assert res["peak_reserved"] % (2 * MiB) == 0
    json.dumps(tr.summary())
    with pytest.raises(ValueError, match="`text`"):
        MemoryTrace.from_json("{]")


@pytest.mark.parametrize("kwargs,field", [
    (dict(model="no-such-model", batch_size=1, seq_len=8), "`model`"),
    (dict(model="smollm2-135m", batch_size=0, seq_len=8), "`batch_size`"),
    (dict(model="smollm2-135m", batch_size=1, seq_len=9000), "`seq_len`"),
    (dict(model="smollm2-135m", batch_size=1, seq_len=8, gpu="K80"), "`gpu`"),
    (dict(model="smollm2-135m", batch_size=1, seq_len=8, dtype="int3"), "`dtype`"),
    (dict(model={"model_type": "no_such_arch", "num_hidden_layers": 1}, batch_size=1, seq_len=8), "`model`"),
])
def test_bad_input_is_one_sentence(kwargs, field):
    with pytest.raises(ValueError) as info:
        dry_run(**kwargs)
    msg = str(info.value)
    assert field in msg and "\n" not in msg and "Traceback" not in msg


def test_measure_without_cuda_says_so():
    from vramlab import device
    from vramlab.vram.dryrun import measure

    if device.has_cuda():
        pytest.skip("this machine has a GPU")
    with pytest.raises(ValueError, match="`measure` needs a CUDA GPU"):
        measure("smollm2-135m", 1, 8)


def test_an_architecture_that_cannot_be_traced_names_the_model(monkeypatch):
    import transformers.models.llama.modeling_llama as ml

    def broken(self, *a, **k):
        raise NotImplementedError("this layer has a custom kernel")

    import torch.nn.functional as F
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    sdpa = F.scaled_dot_product_attention
    monkeypatch.setattr(ml.LlamaMLP, "forward", broken)
    with pytest.raises(ValueError, match="could not be traced") as info:
        dry_run("smollm2-135m", 1, 8)
    assert "`model`" in str(info.value) and "\n" not in str(info.value)
    # nothing left behind: the SDPA stand-in, the dispatch mode and the module hooks are gone
    assert F.scaled_dot_product_attention is sdpa
    assert _get_current_dispatch_mode() is None
    import gc
    assert gc.isenabled()


def test_replay_widget_builds_and_steps():
    pytest.importorskip("ipywidgets")
    pytest.importorskip("plotly")
    from vramlab.vram.widget import replay_widget

    tr = dry_run("smollm2-135m", 1, 64)
    w = replay_widget(tr)
    assert w.slider.max == len(tr.events) - 1
    w.slider.value = tr.peak_index
    assert "no GPU" in w.figure().layout.title.text
    assert f"{tr.peak_bytes / MiB:,.1f}" in w.label.value and tr.peak["module"] in w.label.value
    assert "computed on the meta device, no GPU" in w.figure().layout.title.text
    w.slider.value = 0
    assert "load" in w.label.value and len(w.out.outputs) == 1


@pytest.mark.gpu
@pytest.mark.parametrize("batch,seq", [(1, 512), (8, 2048)])
def test_dry_run_matches_the_gpu(batch, seq):
    from vramlab import device
    from vramlab.vram.dryrun import measure

    if not device.has_cuda():
        pytest.skip("needs a CUDA GPU")
    real = measure("smollm2-135m", batch, seq, new_tokens=16)
    major, minor = torch.cuda.get_device_capability()
    dry = dry_run("smollm2-135m", batch, seq, new_tokens=16, gpu=f"sm_{major}{minor}")
    cmp = compare(dry, real)
    assert abs(cmp["diff_bytes"]) <= max(0.02 * cmp["real_peak"], 8 * MiB), cmp


def test_cli_dryrun_json_html_and_bad_input(tmp_path, capsys):
    from vramlab import cli

    html = tmp_path / "t.html"
    assert cli.main(["dryrun", "smollm2-135m", "--batch", "1", "--seq", "64", "--json", "--html", str(html)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["peak_at"]["module"] and out["source"].startswith("dry run")
    text = html.read_text()
    assert "<script src=\"https://cdn" not in text and "plotly" in text.lower()
    assert cli.main(["dryrun", "smollm2-135m", "--batch", "0", "--seq", "64"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: `--batch`") and "\n" not in err
    missing = tmp_path / "nope" / "t.html"
    assert cli.main(["dryrun", "smollm2-135m", "--seq", "8", "--html", str(missing)]) == 2
    assert "`--html`" in capsys.readouterr().err and not missing.parent.exists()
