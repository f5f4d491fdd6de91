"""Every lab-05 check rejects the lab's stubs and typical wrong answers, and accepts the solution."""

from __future__ import annotations

import math

import pytest
import torch

from vramlab import checks
from vramlab.checks import lab05
from vramlab.mla import apply_rope


def _raises(*args):
    raise NotImplementedError


def keys_by_hand(layer, x):
    cfg = layer.config
    c, k_rope = layer.kv_a_proj_with_mqa(x).split([cfg.kv_lora_rank, cfg.qk_rope_head_dim], dim=-1)
    c = layer.kv_a_layernorm(c)
    cos, sin = layer.rope_cos_sin(torch.arange(x.shape[1])[None], x.dtype)
    k_rope = apply_rope(k_rope, cos, sin, cfg.rope_interleave)
    w_uk, _ = layer.w_uk_uv()
    k_nope = torch.einsum("hdc,btc->bhtd", w_uk, c)
    b, h, t, _ = k_nope.shape
    return torch.cat([k_nope, k_rope[:, None].expand(b, h, t, -1)], dim=-1)


def keys_unrotated(layer, x):
    cfg = layer.config
    c, k_rope = layer.kv_a_proj_with_mqa(x).split([cfg.kv_lora_rank, cfg.qk_rope_head_dim], dim=-1)
    k_nope = torch.einsum("hdc,btc->bhtd", layer.w_uk_uv()[0], layer.kv_a_layernorm(c))
    b, h, t, _ = k_nope.shape
    return torch.cat([k_nope, k_rope[:, None].expand(b, h, t, -1)], dim=-1)


def absorbed(q, c, w):
    return torch.einsum("htd,hdc->htc", q, w) @ c.T


def naive_scores(q, c, w):
    keys = torch.einsum("hdc,sc->hsd", w, c)             # every head's keys [H, S, d_n]: what Ex 3 forbids
    return q @ keys.transpose(-1, -2)


def naive_matmul(q, c, w):
    return q @ (w @ c.T)                                  # [H, d_n, S]: the same keys, transposed


def naive_flat(q, c, w):
    h, d, r = w.shape
    keys = (w.reshape(h * d, r) @ c.T)                    # [H * d_n, S]: heads merged into one axis
    return q @ keys.reshape(h, d, -1)


def plan(points, budget_mib, context, batch):
    tokens = batch * math.ceil(context / 64) * 64
    fits = [(p["ppl"], p["rank"], tokens * 30 * p["rank"] * 2 / 2**20) for p in points]
    fits = [f for f in fits if f[2] <= budget_mib]
    return None if not fits else min(fits)[1:]


def plan_unpaged(points, budget_mib, context, batch):
    fits = [(p["ppl"], p["rank"], batch * context * 30 * p["rank"] * 2 / 2**20) for p in points]
    fits = [f for f in fits if f[2] <= budget_mib]
    return None if not fits else min(fits)[1:]


def plan_in_mb(points, budget_mib, context, batch):
    tokens = batch * math.ceil(context / 64) * 64
    fits = [(p["ppl"], p["rank"], tokens * 30 * p["rank"] * 2 / 1e6) for p in points]
    fits = [f for f in fits if f[2] <= budget_mib]
    return None if not fits else min(fits)[1:]


def plan_largest_rank_any(points, budget_mib, context, batch):
    return (384, 1.0)                                     # ignores the budget


SOLUTIONS = {
    "check_mla_gqa_heads": 2.25,
    "check_latent_per_layer_ratio": 1.0,
    "check_v2_lite_expansion": 16 * (128 + 64 + 128) / (512 + 64),
    "check_keys_by_hand": keys_by_hand,
    "check_absorbed_scores": absorbed,
    "check_prediction_recorded": 20.0,
    "check_conversion_prediction": 20.0,
    "check_latent_cache_plan": plan,
}
WRONG = {
    "check_mla_gqa_heads": 4.5,                                    # K and V: forgot the factor 2
    "check_latent_per_layer_ratio": 8.0,                           # scaled by the query heads
    "check_v2_lite_expansion": 16 * 2 * 64 / 576,                  # config.head_dim trap
    "check_keys_by_hand": keys_unrotated,                          # RoPE forgotten
    "check_absorbed_scores": lambda q, c, w: absorbed(q, c, w).sum(0),  # heads summed
    "check_prediction_recorded": 0.5,                             # below 1 is not a perplexity
    "check_conversion_prediction": float("nan"),
    "check_latent_cache_plan": plan_unpaged,                       # forgot whole blocks
}
STUBS = [None, lambda *a: None, _raises]


def test_every_check_is_exported_and_covered():
    assert set(lab05.__all__) == set(SOLUTIONS) == set(WRONG)
    for name in lab05.__all__:
        assert getattr(checks, name) is getattr(lab05, name)


@pytest.mark.parametrize("name", sorted(SOLUTIONS))
def test_solution_passes(name, capsys):
    result = getattr(lab05, name)(SOLUTIONS[name])
    assert result.passed and capsys.readouterr().out.startswith("PASS")


@pytest.mark.parametrize("name", sorted(SOLUTIONS))
@pytest.mark.parametrize("stub", range(len(STUBS)))
def test_stubs_fail_without_raising_or_revealing(name, stub, capsys):
    result = getattr(lab05, name)(STUBS[stub])
    out = capsys.readouterr().out
    assert not result.passed and out.startswith("FAIL")
    for secret in ("2.25", "8.88", "472.5"):
        assert secret not in out


@pytest.mark.parametrize("name", sorted(WRONG))
def test_plausible_wrong_answers_fail(name, capsys):
    result = getattr(lab05, name)(WRONG[name])
    assert not result.passed and "expected" in capsys.readouterr().out


def test_hints_name_the_actual_mistake(capsys):
    lab05.check_mla_gqa_heads(512 / 256)
    assert "RoPE key" in capsys.readouterr().out
    lab05.check_mla_gqa_heads(4.5)
    assert "a key and a value" in capsys.readouterr().out
    lab05.check_latent_per_layer_ratio(61 / 27)
    assert "whole model" in capsys.readouterr().out
    lab05.check_v2_lite_expansion(16 * 2 * 64 / 576)
    assert "trap" in capsys.readouterr().out
    lab05.check_v2_lite_expansion(128 * 320 / 576)
    assert "DeepSeek-V3's 128 heads" in capsys.readouterr().out
    lab05.check_keys_by_hand(keys_unrotated)
    assert "rotated" in capsys.readouterr().out
    lab05.check_absorbed_scores(WRONG["check_absorbed_scores"])
    assert "do not sum over h" in capsys.readouterr().out


def test_prediction_accepts_any_honest_number_and_reports_distance(capsys):
    for guess in (14.8, 100, 1e6):
        assert lab05.check_prediction_recorded(guess)
        assert "measured" not in capsys.readouterr().out     # nothing revealed before the curve
        assert lab05.check_conversion_prediction(guess)
        assert "measured" in capsys.readouterr().out


@pytest.mark.parametrize("naive", [naive_scores, naive_matmul, naive_flat])
def test_absorbed_check_refuses_right_numbers_from_per_head_keys(naive, capsys):
    """The naive functions give the right scores; the check still fails them, naming the key tensor."""
    q, c, w = torch.randn(3, 2, 5), torch.randn(37, 11), torch.randn(3, 5, 11)
    assert torch.allclose(naive(q, c, w), absorbed(q, c, w), atol=1e-5)
    result = lab05.check_absorbed_scores(naive)
    out = capsys.readouterr().out
    assert not result.passed and "every head's keys" in out and "built a tensor of shape" in out, out
    assert lab05.check_absorbed_scores(absorbed)
    assert "no per-head key was built" in capsys.readouterr().out


def test_absorbed_check_accepts_other_absorbed_spellings(capsys):
    for fn in (lambda q, c, w: torch.bmm(torch.bmm(q, w), c.T.expand(q.shape[0], -1, -1)),
               lambda q, c, w: torch.einsum("htc,sc->hts", torch.einsum("htd,hdc->htc", q, w), c)):
        assert lab05.check_absorbed_scores(fn), capsys.readouterr().out


@pytest.mark.parametrize("wrong,phrase", [
    (plan_unpaged, "whole 64-token blocks"),
    (plan_in_mb, "MiB is 2**20 bytes"),
    (plan_largest_rank_any, "does not fit"),
    (lambda points, budget, context, batch: None if budget < 1 else (128, 472.5), "rank"),
    (lambda points, budget, context, batch: (128, 472.5), ""),
])
def test_latent_cache_plan_names_the_mistake(wrong, phrase, capsys):
    result = lab05.check_latent_cache_plan(wrong)
    out = capsys.readouterr().out
    assert not result.passed and out.startswith("FAIL") and phrase in out, out
    assert "472.5" not in out.split("; got ")[0]          # the expected part never holds the value


def test_latent_cache_plan_wants_none_when_nothing_fits(capsys):
    def never_none(points, budget, context, batch):
        return plan(points, budget, context, batch) or (32, 7.38)
    assert not lab05.check_latent_cache_plan(never_none)
    assert "return None" in capsys.readouterr().out


def test_v3_softmax_scale_in_the_checks_config():
    from vramlab.mla import MLAConfig
    assert round(MLAConfig.from_config("deepseek-v3").softmax_scale(), 4) == 0.1352


def test_latent_cache_plan_refuses_the_package_function(capsys):
    from vramlab.mla import plan_latent_cache
    assert not lab05.check_latent_cache_plan(plan_latent_cache)
    assert not lab05.check_latent_cache_plan(lambda *a: plan_latent_cache(*a))
    assert "write it yourself" in capsys.readouterr().out
