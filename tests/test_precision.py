"""Lab 00's precision explorer: bytes = parameters x bits / 8, the marked models, the figure and the widget."""

from __future__ import annotations

import pytest

from vramlab import precision


def test_weight_bytes_follow_the_width():
    n = 134_515_008                       # SmolLM2-135M, tied embedding counted once
    assert precision.weight_bytes(n, "float16") == 2 * n
    assert precision.weight_bytes(n, "float32") == 4 * n
    assert precision.weight_bytes(n, "int8 / fp8") == n
    # nf4: 4 bits + one float32 absmax per 64 values
    assert precision.weight_bytes(64, "nf4") == 64 * 4 / 8 + 4
    assert 4 < precision.bits_per_parameter("nf4 + double quant") < precision.bits_per_parameter("nf4")


def test_readout_shows_gib_and_gb_side_by_side():
    line = precision.readout(8e9, "bfloat16")     # 16e9 bytes
    assert "14.9 GiB" in line and "16 GB" in line, line


@pytest.mark.parametrize("bad, field", [(("x", "float16"), "params"), ((-1, "float16"), "params"),
                                        ((float("nan"), "float16"), "params"), ((10, "fp12"), "precision")])
def test_bad_input_names_the_field(bad, field):
    with pytest.raises(ValueError, match=field):
        precision.weight_bytes(*bad)


def test_bundled_points_are_the_configs_counts():
    from vramlab.configs import load_config

    points = precision.bundled_points(("llama-3.1-8b", "smollm2-135m"))
    assert list(points.values()) == [load_config("llama-3.1-8b")["_num_parameters"], 134_515_008]


def test_figure_marks_the_models_and_the_slider():
    points = {"SmolLM2-135M": 134_515_008, "big": 7e10}
    fig = precision.explorer_figure(3e9, "nf4", points)
    names = [t.name for t in fig.data]
    assert names[:len(precision.PRECISIONS)] == list(precision.PRECISIONS)
    models = next(t for t in fig.data if t.name == "real models")
    assert list(models.text) == list(points)
    assert models.y[0] == pytest.approx(134_515_008 * 4.5 / 8 / 2**30)
    star = next(t for t in fig.data if t.name == "your slider")
    assert star.y[0] == pytest.approx(3e9 * 4.5 / 8 / 2**30)
    chosen = next(t for t in fig.data if t.name == "nf4")
    assert chosen.line.width > next(t for t in fig.data if t.name == "float32").line.width
    assert "GiB" in fig.layout.yaxis.title.text and "parameters" in fig.layout.xaxis.title.text


def test_widget_redraws_when_moved():
    box = precision.explorer({"SmolLM2-135M": 134_515_008})
    choose, slider = box.children[0].children
    text = box.children[1]
    assert "float16" in text.value and "0.251 GiB" in text.value, text.value
    choose.value = "float32"
    assert "0.501 GiB" in text.value, text.value
    slider.value = 1e10
    assert "10 billion" in text.value and "37.3 GiB" in text.value, text.value
    with pytest.raises(ValueError, match="points"):
        precision.explorer({})


def test_budget_lines_are_data_on_the_log_axis_not_shapes():
    """A shape's y on a log axis is read as log10(y): the 24/80 GiB lines must be traces at y = 24 and 80."""
    fig = precision.explorer_figure(1e9, "float16", {"m": 1e9}, budgets_gib=(24, 80))
    assert not fig.layout.shapes
    lines = [t for t in fig.data if t.mode == "lines+text"]
    assert [list(t.y) for t in lines] == [[24, 24], [80, 80]]
    assert fig.layout.yaxis.type == "log"
