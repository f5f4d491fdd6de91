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
