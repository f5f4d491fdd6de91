"""vramlab.dispatch against the real accelerate 1.15 / transformers 5.24 functions, on meta models."""

from __future__ import annotations

import gc
import logging
import os

import pytest

from vramlab import dispatch as D

logging.getLogger("accelerate").setLevel(logging.ERROR)  # "Device 0 is not available" on CPU

# Three budgets per config: one GPU + cpu, two GPUs + cpu, one GPU + cpu + disk (each spills somewhere).
BUDGETS = {
    "smollm2-135m": [{0: "80MB", "cpu": "1GB"}, {0: "40MB", 1: "200MB", "cpu": "1GB"},
                     {0: "60MB", "cpu": "70MB", "disk": "1GB"}],
    "llama-3.1-8b": [{0: "10GiB", "cpu": "30GiB"}, {0: "8GiB", 1: "8GiB", "cpu": "30GiB"},
                     {0: "6GiB", "cpu": "4GiB", "disk": "100GiB"}],
    "qwen3-8b": [{0: "10GiB", "cpu": "30GiB"}, {0: "8GiB", 1: "8GiB", "cpu": "30GiB"},
                 {0: "6GiB", "cpu": "4GiB", "disk": "100GiB"}],
    "mistral-7b": [{0: "10GiB", "cpu": "30GiB"}, {0: "8GiB", 1: "8GiB", "cpu": "30GiB"},
                   {0: "6GiB", "cpu": "4GiB", "disk": "100GiB"}],
}
CASES = [(name, i, q) for name in BUDGETS for i in range(3) for q in (None, "8bit", "4bit")]


@pytest.fixture(scope="module")
def meta_models():
    return {(name, q): D.empty_model(name, quantization=q) for name in BUDGETS for q in (None, "8bit", "4bit")}


@pytest.mark.parametrize("name,i,quant", CASES)
def test_plan_equals_infer_auto_device_map_and_from_pretrained_path(meta_models, name, i, quant):
    """plan_device_map == accelerate.infer_auto_device_map on the same meta model with the budgets
    transformers computes, and == the map transformers' own _get_device_map fork decides.

    Not an independent oracle: the budget steps here (get_balanced_memory, x 0.90) are re-done by hand
    the way vramlab does them. The independent oracle is
    test_plan_equals_the_map_the_real_from_pretrained_chose (below): the plan == hf_device_map of a real load."""
    from accelerate import infer_auto_device_map
    from transformers.integrations.accelerate import get_balanced_memory

    model = meta_models[(name, quant)]
    budget = BUDGETS[name][i]
    plan = D.plan_device_map(model, budget, quantization=quant)

    # the budgets, computed here with the real functions, not through vramlab
    mm = get_balanced_memory(model, max_memory=dict(D.parse_max_memory(budget)),
                             no_split_module_classes=model._no_split_modules, hf_quantizer=model._vramlab_quantizer)
    if quant is not None:
        mm = {k: v * 0.90 for k, v in mm.items()}
    direct = infer_auto_device_map(model, max_memory=mm, no_split_module_classes=list(model._no_split_modules),
                                   special_dtypes=D.special_dtypes(model) or None)
    assert plan == dict(direct)
    assert plan == D.transformers_device_map(model, budget)
    assert set(plan.values()) <= set(D.parse_max_memory(budget))


def test_the_cases_cover_two_gpus_disk_and_spills(meta_models):
    seen = set()
    for name, i, quant in CASES:
        plan = D.plan_device_map(meta_models[(name, quant)], BUDGETS[name][i], quantization=quant)
        seen |= {v for v in plan.values()}
    assert {0, 1, "cpu", "disk"} <= seen


def test_bnb_validate_environment_agrees_with_spills(meta_models):
    """The real quantizer check raises exactly on the maps vramlab calls spilling."""
    for name in ("smollm2-135m", "llama-3.1-8b"):
        model = meta_models[(name, "4bit")]
        for budget in BUDGETS[name]:
            plan = D.plan_device_map(model, budget, quantization="4bit")
            if D.spills(plan):
                with pytest.raises(ValueError, match=D.DISPATCH_ERROR_START):
                    model._vramlab_quantizer.validate_environment(device_map=plan)
            else:
                model._vramlab_quantizer.validate_environment(device_map=plan)


def test_no_split_default_is_the_models():
    model = D.empty_model("smollm2-135m")
    budget = {0: "100MB", "cpu": "1GB"}
    assert D.plan_device_map(model, budget) == D.plan_device_map(model, budget,
                                                                 no_split_module_classes=["LlamaDecoderLayer"])
    split = D.plan_device_map(model, budget, no_split_module_classes=[])
    assert any(k.count(".") >= 3 for k in split)  # without no-split a decoder layer can be cut


def test_empty_model_is_meta_and_quick_for_70b():
    import time

    t = time.perf_counter()
    model = D.empty_model("llama-3.1-70b")
    assert time.perf_counter() - t < 30
    assert all(p.is_meta for p in model.parameters())
    assert abs(sum(p.numel() for p in model.parameters()) - 70.55e9) < 0.01e9


def test_empty_model_accepts_dict_and_pretrainedconfig():
    from transformers import AutoConfig

    from vramlab.serving.kvcache import load_config

    cfg = load_config("qwen3-0.6b")
    a = D.empty_model(cfg)
    fields = {k: v for k, v in cfg.items() if not k.startswith("_") and k != "model_type"}
    b = D.empty_model(AutoConfig.for_model(cfg["model_type"], **fields))
    assert D.module_sizes(a)[""] == D.module_sizes(b)[""]


def test_module_sizes_per_dtype_and_quantization():
    s32 = D.module_sizes("smollm2-135m", dtype="float32")
    s16 = D.module_sizes("smollm2-135m", dtype="bfloat16")
    s8 = D.module_sizes("smollm2-135m", quantization="8bit")
    s4 = D.module_sizes("smollm2-135m", quantization="4bit")
    n = 134_515_008  # parameters, tied embedding counted once
    rope = sum(b.numel() * b.element_size() for b in D.empty_model("smollm2-135m").buffers())  # fp32 inv_freq
    assert 0 < rope <= 512
    assert s32[""] == 4 * n + rope and s16[""] == 2 * n + rope
    emb = 49152 * 576 * 2  # bf16 embedding: bitsandbytes leaves it alone
    assert s8["model.embed_tokens"] == s4["model.embed_tokens"] == emb
    linear = s16["model.layers.0.mlp.up_proj"]
    assert s8["model.layers.0.mlp.up_proj"] == linear // 2 and s4["model.layers.0.mlp.up_proj"] == linear // 4
    assert s16[""] > s8[""] > s4[""] > emb


@pytest.mark.parametrize("bad,word", [
    ({0: "12 gigs"}, "12 gigs"), ({"gpu0": "10GiB"}, "gpu0"), ({0: -5}, "negative"), ({}, "empty"),
    ({0: "-3GB"}, "negative"), ({"cpu": None}, "cpu"), ({"tpu": 1}, "tpu"), ({0: "10GiB", "cuda:0": "1GiB"}, "twice"),
    ("10GiB", "dict"), ({True: 5}, "True"),
])
def test_bad_budgets_one_clear_error(bad, word):
    with pytest.raises(ValueError) as info:
        D.parse_max_memory(bad)
    msg = str(info.value)
    assert word in msg and "\n" not in msg
    with pytest.raises(ValueError):
        D.plan_device_map("smollm2-135m", bad)


def test_good_budgets_parse():
    got = D.parse_max_memory({"cpu": "1GB", 1: "2GiB", "cuda:0": 1000, "disk": "600KB"})
    assert list(got) == [0, 1, "cpu", "disk"]
    assert got == {0: 1000, 1: 2 * 2**30, "cpu": 10**9, "disk": 600 * 10**3}


def test_other_bad_arguments():
    with pytest.raises(ValueError, match="quantization"):
        D.plan_device_map("smollm2-135m", {0: "1GB"}, quantization="3bit")
    with pytest.raises(ValueError, match="dtype"):
        D.empty_model("smollm2-135m", dtype="float8")
    with pytest.raises(ValueError, match="strategy"):
        D.plan_device_map("smollm2-135m", {0: "1GB"}, strategy="greedy")
    model = D.empty_model("smollm2-135m")
    with pytest.raises(ValueError, match="quantization"):
        D.plan_device_map(model, {0: "1GB"}, quantization="4bit")


@pytest.mark.parametrize("missing", ["hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                                     "vocab_size"])
def test_a_partial_config_names_the_missing_sizing_key(missing):
    """transformers would fill the gap with LlamaConfig's 7B defaults (a "2-layer" model of 1.33 GB)."""
    cfg = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
           "intermediate_size": 128, "vocab_size": 100}
    assert D.module_sizes(cfg, dtype="float32")[""] < 10**6      # the full dict: a tiny model, as written
    del cfg[missing]
    with pytest.raises(ValueError, match=f"^`config` has no '{missing}'"):
        D.module_sizes(cfg)
    with pytest.raises(ValueError, match=f"'{missing}'"):
        D.empty_model(cfg)
    with pytest.raises(ValueError, match="`num_hidden_layers` must be a positive integer"):
        D.empty_model({**cfg, missing: 1, "num_hidden_layers": float("nan")})


def test_unknown_model_type_names_real_ones():
    with pytest.raises(ValueError, match="^unknown model_type 'lama'; use a transformers model_type such as llama, "
                                         "qwen3, deepseek_v3"):
        D.empty_model({"model_type": "lama", "hidden_size": 64})


def test_no_split_list_spills_map_and_bnb_kwargs_are_checked():
    with pytest.raises(TypeError, match="^`no_split_module_classes` must be a list of class names"):
        D.plan_device_map("smollm2-135m", {0: "100MB", "cpu": "1GB"}, no_split_module_classes="LlamaDecoderLayer")
    with pytest.raises(TypeError, match="^`device_map` must be a dict"):
        D.spills(None)
    with pytest.raises(ValueError, match="^`llm_int8_threshold` must be a finite number >= 0"):
        D.bnb_config("8bit", llm_int8_threshold=float("nan"))
    with pytest.raises(TypeError, match="^`threshold` is not a BitsAndBytesConfig argument"):
        D.bnb_config("8bit", threshold=6.0)
    assert D.bnb_config("8bit", llm_int8_threshold=4).llm_int8_threshold == 4.0


def _offload_folders() -> set[str]:
    import tempfile
    from pathlib import Path

    return {p.name for p in Path(tempfile.gettempdir()).glob(D.OFFLOAD_PREFIX + "*")}


def test_load_quantized_removes_its_offload_folder_when_loading_fails(monkeypatch):
    from transformers import AutoModelForCausalLM

    def fail(*args, **kwargs):
        assert os.path.isdir(kwargs["offload_folder"])
        raise RuntimeError("simulated load failure")

    before = _offload_folders()
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", fail)
    with pytest.raises(RuntimeError, match="simulated"):
        D.load_quantized("8bit", {"cpu": "150MB", "disk": "1GB"}, llm_int8_enable_fp32_cpu_offload=True)
    assert _offload_folders() == before


# ---------------------------------------------------------------- under-packing
UNDERPACK_BUDGET = {**{i: "4GiB" for i in range(8)}, "cpu": "64GiB"}


def test_buffers_match_the_installed_sources():
    """old == accelerate 1.15 get_balanced_memory, fixed == transformers 5.24 get_balanced_memory."""
    from accelerate.utils import get_balanced_memory as acc_balanced

    model = D.empty_model("llama-3.1-8b", quantization="4bit")
    want_old = acc_balanced(model, D.parse_max_memory(UNDERPACK_BUDGET),
                            no_split_module_classes=list(model._no_split_modules),
                            special_dtypes=D.special_dtypes(model))
    want_old = model._vramlab_quantizer.adjust_max_memory(want_old)
    assert D.balanced_budget(model, UNDERPACK_BUDGET, "old") == want_old
    assert D.balanced_budget(model, UNDERPACK_BUDGET, "fixed") == D.planned_max_memory(model, UNDERPACK_BUDGET)
    assert D.plan_with_buffer(model, UNDERPACK_BUDGET, "fixed") == D.plan_device_map(model, UNDERPACK_BUDGET,
                                                                                     quantization="4bit")
    s = D.buffer_inputs(model)
    assert s["largest_leaf"] == 128256 * 4096 * 2  # bf16 embed_tokens / lm_head, not shrunk by 4-bit
    assert D.old_buffer(s["first_block"], s["mean_leaf"]) < s["largest_leaf"] < D.fixed_buffer(
        s["largest_block"], s["largest_leaf"])


def test_old_buffer_spills_where_fixed_fits():
    model = D.empty_model("llama-3.1-8b", quantization="4bit")
    total = D.module_sizes(model, quantization="4bit")[""]
    assert 8 * 4 * 2**30 > 6 * total  # eight 4 GiB GPUs: six times the model
    old = D.plan_with_buffer(model, UNDERPACK_BUDGET, "old")
    fixed = D.plan_with_buffer(model, UNDERPACK_BUDGET, "fixed")
    assert D.spills(old) and not D.spills(fixed)
    assert {v for v in old.values() if isinstance(v, int)} == {7}  # GPUs 0-6 skipped


def test_buffer_formulas():
    assert D.old_buffer(100, 40) == 125 and D.old_buffer(10, 40) == 50
    assert D.fixed_buffer(100, 400) == 500 and D.fixed_buffer(400, 100) == 500
    with pytest.raises(ValueError, match="formula"):
        D.balanced_budget(D.empty_model("smollm2-135m"), {0: "1GB", 1: "1GB"}, "new")


# ---------------------------------------------------------------- estimate table, figure
def test_estimate_memory_uses_accelerates_arithmetic():
    from accelerate.commands.estimate import estimate_training_usage

    rows = {r["dtype"]: r for r in D.estimate_memory("smollm2-135m")}
    n = 134_515_008
    rope = sum(b.numel() * b.element_size() for b in D.empty_model("smollm2-135m", dtype="float32").buffers())
    total = 4 * n + rope  # accelerate counts buffers too (AutoModel: the tied lm_head is not there anyway)
    assert rows["float32"]["total"] == total and rows["float16"]["total"] == total // 2
    assert rows["int8"]["total"] == total // 4 and rows["int4"]["total"] == total // 8
    assert rows["float32"]["training_adam"] == max(estimate_training_usage(total, "float32").values()) == 4 * total
    assert rows["int4"]["training_adam"] is None
    assert rows["int4"]["loaded"] > rows["int4"]["total"]  # the bf16 embedding is not shrunk
    assert rows["float32"]["largest_layer"] == 49152 * 576 * 4
    assert "SmolLM2-135M" in D.format_estimate_table(list(rows.values()))


def test_figure_has_titles_and_every_module():
    budget = {0: "150MB", "cpu": "1GB"}
    fig = D.device_map_figure("smollm2-135m", budget, quantization="8bit")
    plan = D.plan_device_map("smollm2-135m", budget, quantization="8bit")
    names = [x for tr in fig.data[:-1] for x in tr.x]
    assert sorted(names) == sorted(plan)
    assert fig.layout.title.text and fig.layout.yaxis.title.text and fig.layout.yaxis2.title.text
    assert fig.layout.xaxis.title.text and fig.layout.xaxis2.title.text
    used = D.device_usage("smollm2-135m", plan, quantization="8bit")
    assert used[0] <= 0.9 * 150e6 and used["cpu"] > 0


# ---------------------------------------------------------------- the real error and fixes (CPU)
def test_cpu_analogue():
    assert D.cpu_analogue({0: "150MB", "cpu": "1GB"}) == {"cpu": 150 * 10**6, "disk": 10**9}
    with pytest.raises(ValueError, match="one GPU"):
        D.cpu_analogue({"cpu": "1GB"})


def test_trigger_returns_the_real_transformers_error():
    exc = D.trigger_dispatch_error()
    assert type(exc) is ValueError
    assert str(exc).startswith(D.DISPATCH_ERROR_START)
    assert "llm_int8_enable_fp32_cpu_offload=True" in str(exc)
    # raised by transformers' quantizer, not by vramlab
    assert "quantizer_bnb_8bit" in exc.__traceback__.tb_next.tb_frame.f_code.co_filename or any(
        "quantizer_bnb_8bit" in f.filename for f in __import__("traceback").extract_tb(exc.__traceback__))
    exc_cpu = D.trigger_dispatch_error(max_memory=D.cpu_analogue(D.TRIGGER_BUDGET))
    assert str(exc_cpu).startswith(D.DISPATCH_ERROR_START)


@pytest.mark.parametrize("dtype,quant,budget", [
    ("bfloat16", "8bit", {"cpu": "150MB", "disk": "1GB"}),
    ("bfloat16", "4bit", {"cpu": "100MB", "disk": "1GB"}),
    ("float32", None, {"cpu": "300MB", "disk": "1GB"}),
])
def test_plan_equals_the_map_the_real_from_pretrained_chose(dtype, quant, budget, tmp_path):
    """The real SmolLM2, loaded with device_map="auto" (cpu + disk, so it loads without a GPU; with
    llm_int8_enable_fp32_cpu_offload=True transformers skips its spill check, but under "auto" it still
    quantizes every Linear, offloaded ones included): model.hf_device_map == plan."""
    import tempfile

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from vramlab import models

    path = models.ensure_converted()
    if quant is None:
        model = AutoModelForCausalLM.from_pretrained(path, device_map="auto", max_memory=D.parse_max_memory(budget),
                                                     dtype=getattr(torch, dtype),
                                                     offload_folder=str(tmp_path / "offload"))
    else:
        before = _offload_folders()
        model = D.load_quantized(quant, budget, dtype=dtype, llm_int8_enable_fp32_cpu_offload=True)
        folder = model._vramlab_offload_folder
        assert os.path.isdir(folder)   # (may stay empty: safetensors weights are read from the checkpoint)
        # with device_map="auto" the flag does NOT keep offloaded modules unquantized: preprocess_model sees
        # the string "auto", and only a dict map adds cpu/disk modules to modules_to_not_convert
        # (transformers quantizers/quantizer_bnb_{8,4}bit.py); see dispatch.fix_offload
        assert D.describe_loaded(model)["quantized_linears"] == 210
    plan = D.plan_device_map(AutoConfig.from_pretrained(path), budget, dtype=dtype, quantization=quant)
    assert {"cpu", "disk"} <= set(plan.values())
    assert dict(model.hf_device_map) == plan
    if quant is not None:   # the offload folder belongs to the model: gone with it
        del model
        gc.collect()
        assert not os.path.exists(folder) and _offload_folders() <= before


def test_trigger_says_when_the_budget_fits():
    with pytest.raises(RuntimeError, match="does not spill"):
        D.trigger_dispatch_error(max_memory={"cpu": "1GB"})


@pytest.mark.parametrize("fix,quantized", [(D.fix_budget, True), (D.fix_offload, False), (D.fix_smaller, True)])
def test_each_fix_loads_and_runs_on_cpu(fix, quantized):
    import torch

    model = fix(gpu=False)
    info = D.describe_loaded(model)
    assert (info["quantized_linears"] == 210) is quantized
    if fix is not D.fix_offload:  # one device: the planner's bytes are the loaded model's bytes, exactly
        quant = "8bit" if fix is D.fix_budget else "4bit"
        assert info["footprint_bytes"] == D.module_sizes("smollm2-135m", quantization=quant)[""]
    ids = torch.arange(10, 42).unsqueeze(0)
    with torch.no_grad():
        loss = model(ids, labels=ids).loss
    assert torch.isfinite(loss)


@pytest.mark.gpu
def test_gpu_trigger_and_fix_with_smollm2():
    """On a real GPU: too-small max_memory -> the ValueError; each fix loads and runs on cuda."""
    import torch

    exc = D.trigger_dispatch_error("8bit", D.TRIGGER_BUDGET)
    assert str(exc).startswith(D.DISPATCH_ERROR_START)
    for fix in (D.fix_budget, D.fix_offload, D.fix_smaller):
        model = fix(gpu=True)
        info = D.describe_loaded(model)
        assert "GPU 0" in info["devices"] or next(model.parameters()).is_cuda
        if fix is D.fix_offload:   # the modules on GPU 0 are quantized, the offloaded ones stay fp32
            assert 0 < info["quantized_linears"] < 210 and info["plain_linears"] > 0
        ids = torch.arange(10, 42).unsqueeze(0).to(model.device)
        with torch.no_grad():
            assert torch.isfinite(model(ids, labels=ids).loss)
        del model
        torch.cuda.empty_cache()


# ---------------------------------------------------------------- issue 18: what the lab now teaches
def test_estimate_reproduces_the_cli_on_automodel_without_lm_head():
    """accelerate 1.15 commands/estimate.py builds AutoModel (no lm_head) in float32 and prints the largest
    training entry: Llama-3.1-8B float32 total 27.96 (its "GB" are GiB), training 4 x total."""
    import torch
    from accelerate import init_empty_weights
    from accelerate.commands.estimate import estimate_training_usage
    from accelerate.utils import calculate_maximum_sizes
    from transformers import AutoModel

    from vramlab.dispatch.planner import _pretrained_config

    with init_empty_weights():
        base = AutoModel.from_config(_pretrained_config("llama-3.1-8b"), dtype=torch.float32)
    total, (largest, _) = calculate_maximum_sizes(base)
    rows = {r["dtype"]: r for r in D.estimate_memory("llama-3.1-8b")}
    assert list(rows) == ["float32", "float16", "int8", "int4"]
    assert rows["float32"]["total"] == total and f"{total / 2**30:.2f}" == "27.96"
    assert rows["float16"]["total"] == total // 2 and rows["int4"]["total"] == total // 8
    assert rows["float32"]["training_adam"] == max(estimate_training_usage(total, "float32").values())
    assert rows["float16"]["training_adam"] == max(estimate_training_usage(total, "float16").values())
    lm_head = 128256 * 4096 * 4
    assert rows["float32"]["loaded"] == total + lm_head   # the causal LM adds lm_head (not tied in Llama-3.1-8B)
    assert "causal LM as loaded" in D.format_estimate_table(list(rows.values()))


def test_absmax_is_what_bitsandbytes_stores_and_nobody_counts():
    model = D.load_quantized("4bit", {"cpu": "1GB"})
    stored = sum(m.weight.quant_state.absmax.numel() * m.weight.quant_state.absmax.element_size()
                 for m in model.modules() if type(m).__name__ == "Linear4bit")
    assert stored == D.absmax_bytes("smollm2-135m") and 6.5e6 < stored < 6.8e6
    planned = D.module_sizes("smollm2-135m", quantization="4bit")[""]
    assert model.get_memory_footprint() == planned          # neither counts the absmax
    assert 0.05 < stored / planned < 0.07
    assert 0.40 < D.absmax_bytes("llama-3.1-8b") / 2**30 < 0.42


def test_default_budgets_without_max_memory():
    """No max_memory, one GPU: transformers plans with 90% of free GPU and of cpu RAM; bitsandbytes' 0.90 comes
    on top (81%); "sequential" skips get_balanced_memory, so its GPU gets no first 0.90."""
    G = 2**30
    q = D.empty_model("smollm2-135m", quantization="8bit")
    auto = D.default_max_memory(q, 20 * G, 40 * G, "auto")
    assert abs(auto[0] / (20 * G) - 0.81) < 1e-6 and abs(auto["cpu"] / (40 * G) - 0.81) < 1e-6
    seq = D.default_max_memory(q, 20 * G, 40 * G, "sequential")
    assert abs(seq[0] / (20 * G) - 0.90) < 1e-6
    plain = D.default_max_memory(D.empty_model("smollm2-135m"), 20 * G, 40 * G, "balanced")
    assert abs(plain[0] / (20 * G) - 0.90) < 1e-6
    with pytest.raises(ValueError, match="^`free_gpu_bytes` must be"):
        D.default_max_memory(q, float("nan"), 1)


def test_lower_case_b_means_bits():
    """accelerate's convert_file_size_to_int divides by 8 when the unit ends in a lower-case 'b'."""
    assert D.parse_max_memory({0: "150Mb"})[0] == 150 * 10**6 // 8
    assert D.parse_max_memory({0: "150mb"})[0] == 150 * 10**6 // 8
    assert D.parse_max_memory({0: "150MB"})[0] == 150 * 10**6
    assert D.parse_max_memory({0: "1GiB"})[0] == 2**30


def test_bnb_check_fires_for_cpu_disk_and_disk_only_maps_and_not_with_the_flag():
    q = D.make_quantizer("8bit")
    for dmap in ({"a": "cpu", "b": "disk"}, {"": "disk"}, {"a": 0, "b": "cpu"}):
        with pytest.raises(ValueError, match=D.DISPATCH_ERROR_START):
            q.validate_environment(device_map=dmap)
    q.validate_environment(device_map={"": "cpu"})
    q.validate_environment(device_map="auto")        # a string is checked later, after planning
    flagged = D.make_quantizer("8bit", llm_int8_enable_fp32_cpu_offload=True)
    for dmap in ({"a": 0, "b": "cpu"}, {"": "disk"}, "auto"):
        flagged.validate_environment(device_map=dmap)   # the flag skips the check for every map


def test_auto_with_the_flag_quantizes_offloaded_layers_and_fails_at_forward():
    """Fix 2 under device_map="auto": loads with every Linear quantized, disk ones too, then the first forward
    fails on a machine without a GPU."""
    import torch

    model = D.load_quantized("8bit", {"cpu": "150MB", "disk": "1GB"}, llm_int8_enable_fp32_cpu_offload=True)
    info = D.describe_loaded(model)
    assert info["quantized_linears"] == 210 and info["devices"].get("disk", 0) > 0
    if not torch.cuda.is_available():
        ids = torch.arange(10, 42).unsqueeze(0)
        with pytest.raises(RuntimeError, match="Cannot access accelerator device when none is available"):
            with torch.no_grad():
                model(ids)


def test_quiet_lines_drop_only_the_two_known_lines():
    from vramlab.dispatch.loading import QUIET_LOG_LINES, _quiet_known_lines

    seen = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    for name, start in QUIET_LOG_LINES.items():
        log = logging.getLogger(name)
        h = Keep()
        log.addHandler(h)
        old = log.level
        log.setLevel(logging.WARNING)
        try:
            with _quiet_known_lines():
                log.warning(start + " ... rest of the line")
                log.warning("another warning")
            log.warning(start + " after the load")
        finally:
            log.removeHandler(h)
            log.setLevel(old)
    assert seen == ["another warning", next(iter(QUIET_LOG_LINES.values())) + " after the load",
                    "another warning", list(QUIET_LOG_LINES.values())[1] + " after the load"]


def test_figure_labels_every_module_and_one_row_per_device():
    model = D.empty_model("llama-3.1-8b", quantization="4bit")
    budget = {**{i: "4GiB" for i in range(8)}, "cpu": "64GiB"}
    plan = D.plan_with_buffer(model, budget, "old")
    fig = D.device_map_figure(model, budget, quantization="4bit", device_map=plan)
    assert list(fig.layout.xaxis.tickvals) == list(plan) and "lm_head" in fig.layout.xaxis.ticktext
    right = fig.data[-1]
    assert right.orientation == "h" and len(right.y) == 9 and all("/" in t for t in right.text)


# --------------------------------------------------------------------------------------------
# dispatch.replay: a dry run on a one-GPU + cpu map
# --------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def smol_trace():
    from vramlab.vram import dry_run

    return dry_run("smollm2-135m", 2, 64)


def _smol_map(gpu_layers, head=0, embed=0):
    m = {"model.embed_tokens": embed, "model.rotary_emb": "cpu", "model.norm": "cpu", "lm_head": head}
    m.update({f"model.layers.{i}": 0 if i < gpu_layers else "cpu" for i in range(30)})
    return m


def test_replay_of_an_all_gpu_map_is_the_dry_run(smol_trace):
    r = D.replay(smol_trace, "smollm2-135m", {"": 0})
    assert r.peak_bytes == smol_trace.peak_bytes and r.streamed_bytes == 0 and r.offloaded == []
    assert r.live == [e["live"] for e in smol_trace.events]


def test_replay_streams_the_offloaded_weights_and_keeps_buffers_on_the_gpu(smol_trace):
    sizes = D.module_sizes("smollm2-135m")
    r = D.replay(smol_trace, "smollm2-135m", _smol_map(10))
    layers_off = sum(sizes[f"model.layers.{i}"] for i in range(10, 30))
    exact = layers_off + sizes["model.norm"]                                # inv_freq (a buffer) is not streamed
    assert exact <= r.streamed_bytes <= exact + 512 * (20 * 9 + 1)       # each tensor rounded to 512-byte blocks
    assert "model.rotary_emb" not in r.offloaded and "model.layers.29.mlp.down_proj" in r.offloaded
    assert r.peak_bytes < smol_trace.peak_bytes
    # at every event GPU 0 holds the dry run's bytes less the offloaded weights, plus at most one submodule's
    biggest = max(sizes[f"model.layers.29.{m}"] for m in ("mlp.down_proj", "mlp.up_proj", "mlp.gate_proj"))
    for e, live in zip(smol_trace.events, r.live):
        if e["phase"] != "load":
            assert e["live"] - r.streamed_bytes <= live <= e["live"] - r.streamed_bytes + biggest + 512


def test_replay_counts_a_cpu_lm_head_at_the_peak(smol_trace):
    on, off = (D.replay(smol_trace, "smollm2-135m", {"": 0, "lm_head": head}) for head in (0, "cpu"))
    # SmolLM2 ties lm_head to the embedding: the tied weight stays with embed_tokens on GPU 0
    assert on.peak_bytes == off.peak_bytes


def test_replay_of_generate_counts_every_forward_and_keys_by_placement():
    """A generate() trace (prefill + decode steps) replays as one: all on GPU 0 it is the dry run; offloaded, every
    forward copies the offloaded weights again (forwards = max_new_tokens). The registry keys a replay by the
    trace's shape and the weights off GPU 0, not by the dict's spelling."""
    from vramlab import ran
    from vramlab.vram import dry_run

    trace = dry_run("smollm2-135m", 2, 64, mode="generate", new_tokens=4)
    whole = D.replay(trace, "smollm2-135m", {"": 0})
    assert whole.peak_bytes == trace.peak_bytes and whole.forwards == 4 and whole.copied_bytes == 0
    r = D.replay(trace, "smollm2-135m", _smol_map(10))
    assert r.forwards == 4 and r.copied_bytes == 4 * r.streamed_bytes > 0
    assert D.replay(dry_run("smollm2-135m", 2, 64), "smollm2-135m", _smol_map(10)).forwards == 1
    model = D.empty_model("smollm2-135m")
    variant = {k: v for k, v in reversed(list(_smol_map(10).items())) if k != "model.rotary_emb"}
    assert D.placement_key(model, variant) == D.placement_key(model, _smol_map(10))
    assert D.placement_key(model, {"": 0}) == () and D.placement_key(model, _smol_map(11)) != D.placement_key(
        model, _smol_map(10))
    assert D.design_was_replayed(D.design_key(trace, model, variant))
    with ran._unrecorded():
        D.replay(trace, "smollm2-135m", _smol_map(3))
    assert not D.design_was_replayed(D.design_key(trace, model, _smol_map(3)))


def test_replay_refuses_what_it_does_not_model(smol_trace):
    with pytest.raises(ValueError, match="one GPU"):
        D.replay(smol_trace, "smollm2-135m", {"": 1})
    with pytest.raises(ValueError, match="no device"):
        D.replay(smol_trace, "smollm2-135m", {"model.layers": 0})
    with pytest.raises(ValueError, match="dict"):
        D.replay(smol_trace, "smollm2-135m", [0])
    with pytest.raises(ValueError, match="MemoryTrace"):
        D.replay(object(), "smollm2-135m", {"": 0})


def test_accelerate_materialises_one_offloaded_submodule_at_a_time():
    """The rule replay models, seen in the real accelerate 1.15 hooks: with every module offloaded (disk, main
    device cpu), an op finds the weights of at most the submodule it runs in, and the buffers stay put."""
    import tempfile

    import torch
    from accelerate import dispatch_model
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.module_tracker import ModuleTracker
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=100)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).eval()
    names = ["model.embed_tokens", "model.rotary_emb", "model.layers.0", "model.layers.1", "model.norm", "lm_head"]
    with tempfile.TemporaryDirectory() as folder:
        dispatch_model(model, device_map={n: "disk" for n in names}, main_device="cpu", offload_dir=folder)
        assert all(b.device.type == "cpu" for b in model.buffers())
        tracker, seen = ModuleTracker(), []

        class Spy(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                live = {n.rsplit(".", 1)[0] for n, p in model.named_parameters() if p.device.type != "meta"}
                where = max((p for p in tracker.parents if p != "Global"), key=lambda p: p.count("."), default="")
                seen.append((where.split(".", 1)[-1], live))
                return func(*args, **(kwargs or {}))

        with torch.no_grad(), tracker, Spy():
            model(torch.tensor([[1, 2, 3]]))
    assert any(live for _, live in seen)
    for where, live in seen:
        assert len(live) <= 1 and all(where == owner or where.startswith(owner + ".") for owner in live), (where, live)
