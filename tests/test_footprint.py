import torch

from vramlab.footprint import bytes_at_dtype, component_of, footprint_figure, parameter_table, total_bytes


def test_tied_embedding_counted_once(smollm2):
    model, _ = smollm2
    rows = parameter_table(model)
    params = sum(r["elements"] for r in rows if r["kind"] == "parameter")
    assert params == sum(p.numel() for p in model.parameters()) == 134_515_008
    tied = [r for r in rows if "tied" in r["component"]]
    assert len(tied) == 1 and tied[0]["elements"] == 49152 * 576
    assert total_bytes(model) == sum(r["bytes"] for r in rows)
    assert bytes_at_dtype(model, 2) == 2 * params
    assert len(footprint_figure(rows).data) == 1


def test_components_and_dtypes():
    assert component_of("model.layers.0.self_attn.q_proj.weight").startswith("attention")
    assert component_of("model.layers.0.mlp.down_proj.weight").startswith("MLP")
    assert component_of("model.norm.weight") == "RMSNorm scales"
    lin = torch.nn.Sequential(torch.nn.Linear(4, 4).half(), torch.nn.Linear(4, 2))
    rows = parameter_table(lin)
    assert {r["dtype"] for r in rows} == {"float16", "float32"}
    assert sum(r["bytes"] for r in rows) == (16 + 4) * 2 + (8 + 2) * 4


def test_bad_input_is_one_sentence():
    import pytest

    with pytest.raises(TypeError, match="model must be a torch.nn.Module"):
        parameter_table("SmolLM2")
    with pytest.raises(TypeError, match="model must be a torch.nn.Module"):
        total_bytes(None)
    lin = torch.nn.Linear(4, 4)
    for bad in (0, -2, "2", None, True):
        with pytest.raises(ValueError, match="bytes_per_element must be a positive number"):
            bytes_at_dtype(lin, bad)
    with pytest.raises(ValueError, match="rows must be the non-empty list parameter_table"):
        footprint_figure([])
    with pytest.raises(ValueError, match="rows must be the non-empty list"):
        footprint_figure([{"component": "x"}])
    with pytest.raises(TypeError, match="name must be a parameter name"):
        component_of(3)


def test_footprint_figure_has_titles_with_units():
    fig = footprint_figure(parameter_table(torch.nn.Linear(4, 4)))
    assert fig.layout.title.text and fig.layout.xaxis.title.text == "memory (MiB = 2^20 bytes)"
    assert fig.layout.yaxis.title.text == "component"
