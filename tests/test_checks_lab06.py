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


def budget_by_hand(config, quantized_head=False, tied_twice=False, factor=0.90, norms=True, unit=2**30):
    """Exercise 3's solution (and, with the flags, its known mistakes): the planned 4-bit bytes / 0.90 in GiB."""
    h, layers = config["hidden_size"], config["num_hidden_layers"]
    head_dim = config.get("head_dim") or h // config["num_attention_heads"]
    linear = layers * (2 * h * config["num_attention_heads"] * head_dim
                       + 2 * h * config["num_key_value_heads"] * head_dim + 3 * h * config["intermediate_size"])
    matrices = 1 if config.get("tie_word_embeddings") and not tied_twice else 2
    embed = config["vocab_size"] * h
    other = embed * (1 if quantized_head else matrices) + ((2 * layers + 1) * h if norms else 0)
    planned = linear * 0.5 + other * 2 + (embed * 0.5 if quantized_head and matrices == 2 else 0)
    return planned / factor / unit


SOLUTIONS = {
    "check_predicted_gpu_layers": 16,  # any honest guess in range passes
    "check_offload_device_map": _hand_map(8),
    "check_budget_gib": budget_by_hand,
    "check_map_covers": lab06.layered_map(17),
    "check_serving_map": lab06.layered_map(17),     # lm_head and the embedding resident, 17 layers on GPU 0
    "check_peak_prediction": 14.0,                   # any honest positive number of GiB, recorded for the map
}
WRONG = {
    "check_predicted_gpu_layers": 40,                 # more layers than the model has
    "check_offload_device_map": _hand_map(30),        # everything on GPU 0 (+ cpu norm): does not fit
    "check_budget_gib": lambda config: budget_by_hand(config, factor=1.0),   # forgot the 0.90
    "check_map_covers": {"model.layers": 0},          # the embedding, norm and lm_head have no device
    "check_serving_map": lab06.layered_map(22, head="cpu"),   # the headroom without the KV cache: out of memory
    "check_peak_prediction": -3,                      # not a positive number of GiB
}
# The checks that take more than the learner's answer: the map a peak prediction is recorded for.
ARGS = {"check_peak_prediction": (lab06.layered_map(17),)}
STUBS = [None, _raises]


def test_every_check_is_exported_and_covered():
    assert set(lab06.__all__) == set(SOLUTIONS) == set(WRONG)
    for name in lab06.__all__:
        assert getattr(checks, name) is getattr(lab06, name)


@pytest.mark.parametrize("name", sorted(SOLUTIONS))
def test_solution_passes(name, capsys):
    if name == "check_serving_map":       # the capstone judges a map only after its peak was predicted
        lab06.check_peak_prediction(14.0, SOLUTIONS[name])
    result = getattr(lab06, name)(SOLUTIONS[name], *ARGS.get(name, ()))
    assert result.passed and capsys.readouterr().out.startswith("PASS")


@pytest.mark.parametrize("name", sorted(SOLUTIONS))
@pytest.mark.parametrize("stub", range(len(STUBS)))
def test_stubs_fail_without_raising_or_revealing(name, stub, capsys):
    result = getattr(lab06, name)(STUBS[stub], *ARGS.get(name, ()))
    out = capsys.readouterr().out
    assert not result.passed and out.startswith("FAIL")
    out = re.sub(r"0x[0-9a-f]{1,16}", "0x…", out)   # a stub function's repr holds its address (may contain "19")
    for secret in ("19", "5.78", "163", "17 decoder", "6.09", "14.91"):
        assert secret not in out


@pytest.mark.parametrize("name", sorted(WRONG))
def test_plausible_wrong_answers_fail(name, capsys):
    result = getattr(lab06, name)(WRONG[name], *ARGS.get(name, ()))
    assert not result.passed and "expected" in capsys.readouterr().out


def test_prediction_reports_how_far_off(capsys):
    actual, total = lab06._predicted_layers_answer()
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


def test_budget_is_the_planners_smallest_to_the_byte():
    """The smallest budget is the planned 4-bit size / 0.90: the real planner keeps the whole model on GPU 0 a byte
    above it and spills 1 MiB below it, for each model the check uses."""
    from vramlab.dispatch import MiB, plan_device_map

    for name in lab06.BUDGET_CONFIGS:
        need = lab06._smallest_budget_bytes(name)
        model = lab06._meta(name, "4bit")
        fits = lambda b: set(plan_device_map(model, {0: int(b), "cpu": "256GiB"}, quantization="4bit").values()) == {0}  # noqa: E731
        assert fits(need + 1) and not fits(need - MiB), name
    assert 5.78 < lab06._smallest_budget_bytes("llama-3.1-8b") / 2**30 < 5.79


@pytest.mark.parametrize("mistake, phrase", [
    (dict(factor=1.0), "planned size"),
    (dict(factor=1 / 0.9), "which way"),
    (dict(unit=1e9), "GB vs GiB"),
    (dict(quantized_head=True), "stays bf16"),
    (dict(norms=False), "just short"),
])
def test_budget_names_each_mistake_and_never_the_number(mistake, phrase, capsys):
    result = lab06.check_budget_gib(lambda config: budget_by_hand(config, **mistake))
    out = capsys.readouterr().out
    assert not result and phrase in out, out
    if phrase == "just short":
        return                    # the learner's own value, 0.6 MiB short, prints like the answer
    for name in lab06.BUDGET_CONFIGS:
        assert f"{lab06._smallest_budget_bytes(name) / 2**30:.3f}" not in out


def test_budget_counts_a_tied_lm_head_once(capsys):
    assert lab06.check_budget_gib(budget_by_hand)
    result = lab06.check_budget_gib(lambda config: budget_by_hand(config, tied_twice=True))
    out = capsys.readouterr().out
    assert not result and "SmolLM2" in out and "counted once" in out, out


def test_budget_refuses_the_package_and_odd_returns(capsys):
    assert not lab06.check_budget_gib(lambda config: "many")
    assert "not a finite number" in capsys.readouterr().out
    assert not lab06.check_budget_gib(lambda config: config["no_such_key"])
    assert "KeyError" in capsys.readouterr().out


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


def test_serving_map_judges_fit_then_copies_against_the_dry_run(capsys):
    """The capstone: the all-GPU map and the KV-blind planner map run out of memory in the replayed dry run; the
    KV-aware planner map fits but copies lm_head every forward; the best map and the embedding-offloaded one pass."""
    from vramlab.dispatch import GiB, plan_device_map
    from vramlab.vram import dry_run

    from vramlab.checks._core import reset_tries, tries

    check = lab06.check_serving_map
    items, peak, streamed = lab06._best_serving_map()
    best = dict(items)
    assert peak <= 15 * GiB and lab06.gpu_layers(best, total=32) == 17 and best["lm_head"] == 0
    result = check(best)                                                      # no prediction recorded yet (review #3)
    out = capsys.readouterr().out
    assert not result and "no prediction recorded for this map" in out and "14.91" not in out, out
    assert tries("capstone: a device map for the workload") == 0                 # not a wrong try
    assert lab06.check_peak_prediction(14.0, best) and check(best)
    assert "14.91 GiB" in capsys.readouterr().out
    trace = dry_run("llama-3.1-8b", 8, 2048, gpu="sm_89")
    at = trace.breakdown("peak")
    model = lab06._meta("llama-3.1-8b", None)
    kv_blind = plan_device_map(model, {0: int(15 * GiB - (trace.peak_bytes - at["weights"] - at["kv_cache"])),
                                       "cpu": "64GiB"})
    assert lab06.check_peak_prediction(15.5, kv_blind) and not check(kv_blind)
    out = capsys.readouterr().out
    assert "over the 15 GiB" in out and "peaks at 16.94 GiB" in out, out
    kv_aware = plan_device_map(model, {0: int(15 * GiB - (trace.peak_bytes - at["weights"])), "cpu": "64GiB"})
    assert lab06.check_peak_prediction(14.0, kv_aware) and not check(kv_aware)
    assert kv_aware["lm_head"] == "cpu"
    out = capsys.readouterr().out
    assert "(fits)" in out and "copies less" in out and "lm_head" not in out.split("Hint:")[1], out
    assert lab06.check_peak_prediction(20.0, {"": 0}) and not check({"": 0})   # a third wrong map: no direction
    out = capsys.readouterr().out
    assert "not this map" in out and "over the" not in out and "every module" not in out, out
    reset_tries()
    assert not check({"": 0}) and "every module is on GPU 0" in capsys.readouterr().out
    assert lab06.check_peak_prediction(14.5, lab06.layered_map(19, embed="cpu"))
    assert check(lab06.layered_map(19, embed="cpu"))       # 6.26 GiB copied: within 0.25 GiB of the best
    capsys.readouterr()


def test_serving_map_input_errors_are_one_sentence(capsys):
    check = lab06.check_serving_map
    assert not check({**lab06.layered_map(17), "model.layers.3": 1})
    assert "one GPU" in capsys.readouterr().out
    assert not check({**lab06.layered_map(17), "model.layer.3": 0})
    assert "unknown module 'model.layer.3'" in capsys.readouterr().out
    missing = lab06.layered_map(17)
    del missing["model.layers.5"]
    assert not check(missing) and "no device for model.layers.5" in capsys.readouterr().out
    assert not check({**lab06.layered_map(17), "lm_head": False}) and "device False" in capsys.readouterr().out
    assert lab06.check_map_covers(lab06.layered_map(17))
    assert "17 decoder layers on GPU 0" in capsys.readouterr().out


def test_gpu_layers_counts_parent_entries():
    assert lab06.gpu_layers({"": 0}, total=32) == 32
    assert lab06.gpu_layers({"model": 0, "lm_head": "cpu"}, total=4) == 4
    assert lab06.gpu_layers({"model.layers.0": 0, "model.layers.1": "cpu"}) == 1
    assert lab06.gpu_layers({"model.layers.0": False, "model.layers.1": 0}) == 1


def test_after_capstone_holds_the_decision_until_a_pass_or_a_reveal(capsys):
    """The lesson under the capstone's check (the planner's maps, the best map, why lm_head stays) prints only
    after check_serving_map passed or revealed: a failed try sees one line that names neither map nor module."""
    for k in (17, 22):
        lab06.check_peak_prediction(14.0, lab06.layered_map(k, head="cpu" if k == 22 else 0))
    failed = lab06.check_serving_map(lab06.layered_map(22, head="cpu"))
    capsys.readouterr()
    assert lab06.after_capstone(failed) is None
    out = capsys.readouterr().out
    assert out.strip() == lab06.AFTER_CAPSTONE_WAITS
    assert not re.search(r"lm_head|KV cache|resident|\d+\.\d\d GiB", out), out
    for result in (lab06.check_serving_map(lab06.layered_map(17)),
                   lab06.check_serving_map(lab06.layered_map(22, head="cpu"), reveal=True)):
        capsys.readouterr()
        fig = lab06.after_capstone(result)
        out = capsys.readouterr().out
        assert "best map                     peak 14.91 GiB, 6.09 GiB copied per forward" in out, out
        assert "planner, KV cache left out   peak 16.94 GiB" in out and "keeps lm_head resident" in out
        assert len(fig.data) == 3


def test_no_markdown_under_the_capstones_check_holds_its_decision():
    """JupyterLab shows the markdown below a check while the learner works: from the capstone's check to the next
    section, no markdown cell names what the best map does (lm_head resident, the KV cache left out)."""
    import nbformat

    from vramlab import labs

    nb = nbformat.read(lab06_notebook(), as_version=4)
    at = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and "check_serving_map(" in c.source)
    end = next(i for i, c in enumerate(nb.cells) if i > at and c.cell_type == "markdown"
               and re.search(r"^## ", c.source, re.M))
    after = [c.source for c in nb.cells[at + 1:end] if c.cell_type == "markdown"]
    after += [labs.marked_source(c) for c in nb.cells[at + 1:end] if c.cell_type == "code"]
    for text in after:
        assert not re.search(r"resident|left out|best map", text, re.I), text
    key = next(c.source for c in nb.cells[end:] if c.cell_type == "markdown" and "Key takeaways" in c.source)
    assert not re.search(r"lm_head", key), key


def lab06_notebook():
    from pathlib import Path

    return Path(__file__).resolve().parents[1] / "notebooks" / "06_accelerate_dispatch.ipynb"


def test_the_peak_prediction_is_recorded_before_anything_shows_the_peak(capsys):
    """Issue 29's last review: Exercise 4's peak could be read off dispatch.replay before the prediction. The
    prediction is recorded per map (check_peak_prediction, its own cell); the replay's peak shows only for a
    recorded prediction of that very map (replay_predicted_map, check_serving_map); a prediction stored after the
    learner replayed that map is refused as a reading, without counting a try; the checks' own replays do not count."""
    from vramlab.checks._core import tries
    from vramlab.dispatch import replay

    best = dict(lab06._best_serving_map()[0])
    peak_text = re.compile(r"\d+\.\d\d GiB in|peaks at")
    assert lab06.replay_predicted_map(14.0, best) is None                       # nothing recorded yet
    assert not lab06.check_serving_map(best)                                    # the check's own replay
    out = capsys.readouterr().out
    assert "prediction" in out and not peak_text.search(out) and "14.91" not in out, out
    assert lab06.check_peak_prediction(None, best).untouched
    assert not lab06.check_peak_prediction(-3, best) and tries("predicted GPU 0 peak") == 0
    capsys.readouterr()
    assert lab06.check_peak_prediction(14.0, best)                              # the check's replay did not count
    assert "14 GiB stored" in capsys.readouterr().out
    assert lab06.replay_predicted_map(13.0, best) is None                       # another number was not recorded
    assert "14.91" not in capsys.readouterr().out
    mine = lab06.replay_predicted_map(14.0, best)
    out = capsys.readouterr().out
    assert mine is not None and "GPU 0 peaks at 14.91 GiB" in out and "you predicted 14 GiB" in out, out
    assert lab06.check_peak_prediction(14.0, best)                              # Run All: recorded before, still passes
    # a map the learner replayed before predicting it: the prediction is a reading
    other = lab06.layered_map(16)
    replay(lab06.serving_trace(), lab06._meta("llama-3.1-8b", None), other)
    capsys.readouterr()
    refused = lab06.check_peak_prediction(14.0, other)
    out = capsys.readouterr().out
    assert not refused and "a reading, not a prediction" in out and tries("predicted GPU 0 peak") == 0, out
    assert lab06.replay_predicted_map(14.0, other) is None
