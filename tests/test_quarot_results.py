"""Issue acceptance for the QuaRot lab: the cached benchmark table, and a live spot check of it.

The full table (GPTQ, 3 seeds, 8 x 512 windows) takes ~40 min on 2 cores, so
``benchmarks/rotation.py`` computes it once into ``vramlab/results/quarot_table.json``. These
tests hold that artifact to the issue's targets (they fail if a re-run gets worse) and recompute
one row live so that the cached numbers cannot drift from what the code does.
"""

from __future__ import annotations

import pytest

from vramlab import quant

TABLE = quant.load_quarot_table()


def ppl(setting, rotation="none", weights="rtn", group_size=None):
    value = quant.table_ppl(TABLE, setting, rotation, weights, group_size)
    assert value is not None, f"{setting}/{rotation}/{weights}/g{group_size} missing from the cached table"
    return value


def test_table_records_how_it_was_made():
    assert TABLE["complete"] and TABLE["windows"] == {**TABLE["windows"], "n": 8, "length": 512}
    assert TABLE["command"].startswith("python benchmarks/rotation.py")
    assert {"torch", "transformers"} <= set(TABLE["versions"])


def test_rotation_is_invariant_in_fp32():
    fp32 = ppl("FP32")
    for rotation in ("random", "hadamard"):
        assert abs(ppl("FP32", rotation) / fp32 - 1) < 1e-3


def test_rotation_cuts_w16a4_50x_to_under_2x_fp32():
    fp32, plain, rotated = ppl("FP32"), ppl("W16A4"), ppl("W16A4", "hadamard")
    assert plain / rotated >= 50, (plain, rotated)
    assert rotated < 2 * fp32, (rotated, fp32)


def test_w4a4kv4_hadamard_gptq_under_3x_fp32_and_20x_better_than_unrotated():
    fp32 = ppl("FP32")
    rotated = ppl("W4A4KV4", "hadamard", "gptq")  # per-output-channel weights
    plain = ppl("W4A4KV4", "none", "gptq")
    assert rotated < 3 * fp32, (rotated, fp32)
    assert plain / rotated >= 20, (plain, rotated)


def test_live_w16a4_row_matches_the_cached_direction(smollm2, windows):
    """Recompute W16A4 none vs hadamard (seed 0) on one window: rotation must win by far."""
    from vramlab.eval import perplexity
    from vramlab.rotate import rotate_model

    model, _ = smollm2
    one = windows[:1]
    fp32 = perplexity(model, one)
    plain = perplexity(quant.quantize_model(model, 16, 4, 16), one)
    rotated = perplexity(quant.quantize_model(rotate_model(model, "hadamard", seed=0), 16, 4, 16), one)
    assert plain / rotated >= 20, (plain, rotated)
    assert rotated < 2.5 * fp32, (rotated, fp32)
