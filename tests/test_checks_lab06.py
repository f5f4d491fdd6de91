"""Every lab-06 check rejects the lab's stubs and a typical wrong answer, and accepts the solution."""

from __future__ import annotations

import re

import pytest

from vramlab import checks, dispatch
from vramlab.checks import lab06


def _raises(*args):
    raise NotImplementedError


def _solution_map():
    # the map device_map="auto" plans under the same budget, written out: it is a valid answer
    return dispatch.plan_device_map("smollm2-135m", lab06.OFFLOAD_BUDGET, quantization="8bit")


def _hand_map(n_gpu_layers):
    m = {"model.embed_tokens": 0}
    m.update({f"model.layers.{i}": 0 if i < n_gpu_layers else "cpu" for i in range(30)})
    m.update({"model.norm": "cpu", "model.rotary_emb": "cpu", "lm_head": 0})
    return m


SOLUTIONS = {
    "check_predicted_gpu_layers": 16,  # any honest guess in range passes
    "check_offload_device_map": _hand_map(8),
    "check_budget_gib": 5.9,
    "check_capstone_layers": 24,   # the planner's count, re-derived in test_capstone_answer_is_the_real_planner...
}
WRONG = {
    "check_predicted_gpu_layers": 40,                 # more layers than the model has
    "check_offload_device_map": _hand_map(30),        # everything on GPU 0 (+ cpu norm): does not fit
    "check_budget_gib": 5.21,                         # the model size, forgetting the 0.90
    "check_capstone_layers": 32,                      # the whole GPU, no headroom: everything fits
}
STUBS = [None, _raises]


def test_every_check_is_exported_and_covered():
    assert set(lab06.__all__) == set(SOLUTIONS) == set(WRONG)
    for name in lab06.__all__:
        assert getattr(checks, name) is getattr(lab06, name)


@pytest.mark.parametrize("name", sorted(SOLUTIONS))
def test_solution_passes(name, capsys):
    result = getattr(lab06, name)(SOLUTIONS[name])
    assert result.passed and capsys.readouterr().out.startswith("PASS")


@pytest.mark.parametrize("name", sorted(SOLUTIONS))
@pytest.mark.parametrize("stub", range(len(STUBS)))
def test_stubs_fail_without_raising_or_revealing(name, stub, capsys):
    result = getattr(lab06, name)(STUBS[stub])
    out = capsys.readouterr().out
    assert not result.passed and out.startswith("FAIL")
    out = re.sub(r"0x[0-9a-f]{1,16}", "0x…", out)   # a stub function's repr holds its address (may contain "19")
    for secret in ("19", "5.79", "163", "24 decoder"):
        assert secret not in out


@pytest.mark.parametrize("name", sorted(WRONG))
def test_plausible_wrong_answers_fail(name, capsys):
    result = getattr(lab06, name)(WRONG[name])
    assert not result.passed and "expected" in capsys.readouterr().out


def test_prediction_reports_how_far_off(capsys):
    actual, total = lab06.predicted_layers_answer()
    assert (actual, total) == (19, 32)  # 10 GiB: embed (1 GiB) + 19 bf16 layers, lm_head reserved
    for guess in (0, 19, 24.0, 32):
        assert lab06.check_predicted_gpu_layers(guess)
        out = capsys.readouterr().out
        assert "19 of 32" in out
    assert not lab06.check_predicted_gpu_layers(-1)
    assert not lab06.check_predicted_gpu_layers("many")


def test_offload_map_mistakes_get_their_own_hint(capsys):
    check = lab06.check_offload_device_map
    assert check(_solution_map())
    missing = _hand_map(8)
    del missing["model.layers.3"]
    assert not check(missing) and "no device for" in capsys.readouterr().out
    assert not check({k: "cpu" for k in _hand_map(8)}) and "nothing on GPU 0" in capsys.readouterr().out
    assert not check(_hand_map(27)) and "more than the 150 MB" in capsys.readouterr().out
    assert not check({**_hand_map(8), "model.norm": "tpu"}) and "device 'tpu'" in capsys.readouterr().out
    assert not check({"": 0}) and "everything on GPU 0" in capsys.readouterr().out


def test_offload_map_false_is_not_gpu_0_and_odd_keys_fail_without_raising(capsys):
    check = lab06.check_offload_device_map
    as_false = {k: (False if v == 0 else v) for k, v in _hand_map(8).items()}   # False == 0 in Python
    assert not check(as_false) and "device False" in capsys.readouterr().out
    assert not check({k: (0.0 if v == 0 else v) for k, v in _hand_map(8).items()})
    assert "device 0.0" in capsys.readouterr().out
    out = check({**_hand_map(8), 5: "cpu"})                                      # printed, never raised
    assert not out and out.got == "key 5"
    assert capsys.readouterr().out.startswith("FAIL offload device_map")
    assert not check({**_hand_map(8), ("model", "norm"): "cpu"})
    assert "FAIL offload device_map" in capsys.readouterr().out


def test_budget_hints(capsys):
    need = lab06.smallest_budget_gib()
    assert 5.7 < need < 5.9  # 4-bit Llama-3.1-8B plans at 5.21 GiB; / 0.90
    assert lab06.check_budget_gib(need)
    assert not lab06.check_budget_gib(need - 0.01)
    assert not lab06.check_budget_gib(8.0) and "more than 10%" in capsys.readouterr().out
    assert not lab06.check_budget_gib(5.21) and "90%" in capsys.readouterr().out
    assert not lab06.check_budget_gib(3.74) and "stay bf16" in capsys.readouterr().out
    assert not lab06.check_budget_gib(float("nan"))


def test_budget_right_in_gib_passes_even_near_the_gb_figure(capsys):
    """6.2-6.22 GiB are right answers (inside [need, 1.10 x need]) though they sit near the GB figure of the
    same bytes: the range test runs before the GB hint, and a FAIL never prints the range (issue 19)."""
    need = lab06.smallest_budget_gib()
    gb = need * dispatch.GiB / 1e9                                  # the right bytes, in GB: inside 10% of GiB
    for value in (6.2, 6.21, 6.22, round(gb, 2), gb):
        assert checks.check_budget_gib(value), capsys.readouterr().out
    capsys.readouterr()
    wrong_way = need * 1e9 / dispatch.GiB                            # GiB figure converted the wrong way
    assert not checks.check_budget_gib(round(wrong_way, 2))
    out = capsys.readouterr().out
    assert "GB vs GiB" in out and "too low" in out, out
    for value in (wrong_way, 8.0, 5.21, 3.74, 0, 1e12):
        checks.check_budget_gib(value)
        out = capsys.readouterr().out
        assert f"{need:.3f}" not in out and f"{1.10 * need:.3f}" not in out and "between" not in out, out


def test_a_mistyped_key_is_named_in_full(capsys):
    """A typo in a module name is reported as an unknown module, not as accelerate's cut-off list."""
    m = _hand_map(8)
    del m["model.layers.3"]
    m["model.layers.3.self_attn.oproj"] = 0
    assert not checks.check_offload_device_map(m)
    out = capsys.readouterr().out
    assert "unknown module 'model.layers.3.self_attn.oproj'" in out and ", ." not in out, out
    missing = _hand_map(8)
    del missing["model.layers.3"]
    assert not checks.check_offload_device_map(missing)
    out = capsys.readouterr().out
    assert "no device for model.layers.3." in out and " more. Every module" in out and ", ." not in out, out


def test_hand_map_may_use_the_whole_budget(capsys):
    """transformers applies bitsandbytes' 0.90 (adjust_max_memory) only to string device_maps: a hand map
    up to the full 150 MB passes, with a remark about headroom; over 150 MB fails."""
    assert checks.check_offload_device_map(_hand_map(25))          # ~145 MB on GPU 0: above 0.9 x 150, below 150
    assert "headroom" in capsys.readouterr().out
    assert not checks.check_offload_device_map(_hand_map(27))      # ~152 MB
    assert "more than the 150 MB budget" in capsys.readouterr().out


def test_capstone_answer_is_the_real_planner_after_the_dry_run_headroom(capsys):
    """Exercise 4: headroom = dry-run peak - weights - KV cache at the peak; accelerate's infer_auto_device_map
    (called directly here) on GPU 0 = 16 GiB - headroom; the check accepts exactly that layer count."""
    from accelerate import infer_auto_device_map

    from vramlab.vram import dry_run

    trace = dry_run("llama-3.1-8b", 8, 2048)
    at = trace.breakdown("peak")
    headroom = trace.peak_bytes - at["weights"] - at["kv_cache"]
    assert headroom == lab06.activation_headroom() and 3 * 2**30 < headroom < 5 * 2**30
    model = dispatch.empty_model("llama-3.1-8b")
    plan = infer_auto_device_map(model, max_memory={0: 16 * 2**30 - headroom, "cpu": 30 * 2**30},
                                 no_split_module_classes=list(model._no_split_modules))
    n = sum(1 for k, v in plan.items() if k.startswith("model.layers.") and v == 0)
    assert (n, 32, 32) == lab06.capstone_answer()
    assert checks.check_capstone_layers(n)
    assert not checks.check_capstone_layers(32) and "headroom" in capsys.readouterr().out.split("Hint:")[1]
    assert not checks.check_capstone_layers(n + 2) and "lm_head" in capsys.readouterr().out
    assert not checks.check_capstone_layers(n - 3) and "too few" in capsys.readouterr().out
    assert not checks.check_capstone_layers(n + 0.5) and "whole" in capsys.readouterr().out


def test_gpu_layers_counts_parent_entries():
    assert lab06.gpu_layers({"": 0}, total=32) == 32
    assert lab06.gpu_layers({"model": 0, "lm_head": "cpu"}, total=4) == 4
    assert lab06.gpu_layers({"model.layers.0": 0, "model.layers.1": "cpu"}) == 1
    assert lab06.gpu_layers({"model.layers.0": False, "model.layers.1": 0}) == 1
