"""Every lab-04 check rejects the lab's stubs and typical wrong answers, and accepts the solution."""

from __future__ import annotations

import pytest
import torch

from vramlab import checks
from vramlab.checks import lab04
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


SOLUTIONS = {
    "check_v3_latent_elements": 61 * (512 + 64),
    "check_v3_latent_bytes": 61 * (512 + 64) * 2,
    "check_v3_per_head_elements": 61 * 128 * (128 + 64 + 128),
    "check_keys_by_hand": keys_by_hand,
    "check_absorbed_scores": lambda q, c, w: torch.einsum("htd,hdc->htc", q, w) @ c.T,
    "check_prediction_recorded": 20.0,
    "check_conversion_prediction": 20.0,
}
WRONG = {
    "check_v3_latent_elements": 61 * 512,                         # forgot the RoPE key
    "check_v3_latent_bytes": 2 * 61 * (512 + 64) * 2,              # a K/V factor 2
    "check_v3_per_head_elements": 61 * 128 * 2 * 64,               # config.head_dim trap
    "check_keys_by_hand": keys_unrotated,                          # RoPE forgotten
    "check_absorbed_scores": lambda q, c, w: (torch.einsum("htd,hdc->htc", q, w) @ c.T).sum(0),  # heads summed
    "check_prediction_recorded": 0.5,                             # below 1 is not a perplexity
    "check_conversion_prediction": float("nan"),
}
STUBS = [None, lambda *a: None, _raises]


def test_every_check_is_exported_and_covered():
    assert set(lab04.__all__) == set(SOLUTIONS) == set(WRONG)
    for name in lab04.__all__:
        assert getattr(checks, name) is getattr(lab04, name)


@pytest.mark.parametrize("name", sorted(SOLUTIONS))
def test_solution_passes(name, capsys):
    result = getattr(lab04, name)(SOLUTIONS[name])
    assert result.passed and capsys.readouterr().out.startswith("PASS")


@pytest.mark.parametrize("name", sorted(SOLUTIONS))
@pytest.mark.parametrize("stub", range(len(STUBS)))
def test_stubs_fail_without_raising_or_revealing(name, stub, capsys):
    result = getattr(lab04, name)(STUBS[stub])
    out = capsys.readouterr().out
    assert not result.passed and out.startswith("FAIL")
    for secret in ("35,136", "70,272", "2,498,560"):
        assert secret not in out


@pytest.mark.parametrize("name", sorted(WRONG))
def test_plausible_wrong_answers_fail(name, capsys):
    result = getattr(lab04, name)(WRONG[name])
    assert not result.passed and "expected" in capsys.readouterr().out


def test_hints_name_the_actual_mistake(capsys):
    lab04.check_v3_latent_elements(61 * 512)
    assert "RoPE key" in capsys.readouterr().out
    lab04.check_v3_per_head_elements(61 * 128 * 2 * 64)
    assert "trap" in capsys.readouterr().out
    lab04.check_keys_by_hand(keys_unrotated)
    assert "rotated" in capsys.readouterr().out
    lab04.check_absorbed_scores(WRONG["check_absorbed_scores"])
    assert "do not sum over h" in capsys.readouterr().out


def test_prediction_accepts_any_honest_number_and_reports_distance(capsys):
    for guess in (14.8, 100, 1e6):
        assert lab04.check_prediction_recorded(guess)
        assert "measured" not in capsys.readouterr().out     # nothing revealed before the curve
        assert lab04.check_conversion_prediction(guess)
        assert "measured" in capsys.readouterr().out
