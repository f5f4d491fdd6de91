"""Issue acceptance for the QuaRot lab: the cached benchmark table, and a live spot check of it.

The full table (GPTQ, 3 seeds, 8 x 512 windows) takes ~40 min on 2 cores, so
``benchmarks/rotation.py`` computes it once into ``vramlab/results/quarot_table.json``. These
tests hold that artifact to the issue's targets (they fail if a re-run gets worse) and recompute
one row live so that the cached numbers cannot drift from what the code does.
"""

from __future__ import annotations

import json
import os
from importlib import resources

import pytest

from vramlab.quarot import quant

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


def test_table_fingerprint_matches_the_code():
    """The table was computed by the current code: same source fingerprint, complete, clean tree.

    Fails when quant/rotate/hadamard/attention/eval/data/models or the evaluation text changed after
    the table was written: rerun ``python benchmarks/rotation.py`` from a clean, committed tree.
    """
    assert quant.table_fingerprint_problems(TABLE) == []


def test_fingerprint_notices_a_changed_file(monkeypatch):
    stored = quant.code_fingerprint()
    fake = {**TABLE, "code_fingerprint": {**stored, "files": {**stored["files"], "quarot/quant.py": "0" * 64}},
            "complete": True, "dirty": None}
    problems = quant.table_fingerprint_problems(fake)
    assert len(problems) == 1 and "quarot/quant.py changed" in problems[0]
    assert "partial" in " ".join(quant.table_fingerprint_problems({**fake, "complete": False}))
    assert "uncommitted" in " ".join(quant.table_fingerprint_problems({**fake, "dirty": ["src/x.py"]}))
    assert "no code fingerprint" in quant.table_fingerprint_problems({"rows": [], "summary": []})[0]


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("VRAMLAB_LIVE_TABLE") != "1",
                    reason="the live 8-window W4A4KV4 row (about 45 s of one worker) runs in CI (.ci/run sets "
                           "VRAMLAB_LIVE_TABLE=1) and with `python benchmarks/rotation.py --check --live`; `make test` "
                           "holds the table by its code fingerprint and the float64 rows to 1e-6 (issue 26's 10 minutes)")
def test_live_quantized_row_matches_the_table(smollm2, windows):
    """Recompute W4A4KV4, Hadamard seed 0, RTN weights (every quantizer and the rotation) on the 8
    evaluation windows with the settings recorded in the table, on the table's path: within 1e-6 relative
    of a float64 table (the reproducible path), within the measured kernel-path spread of a float32 one.
    CI only (VRAMLAB_LIVE_TABLE=1): the fingerprint test and the float64 rows run in every `make test`."""
    from vramlab.eval import perplexity
    from vramlab.numerics import reproducible
    from vramlab.quarot.rotate import rotate_model

    row = next(r for r in TABLE["rows"] if (r["setting"], r["rotation"], r["weights"], r["seed"],
                                            r["group_size"]) == ("W4A4KV4", "hadamard", "rtn", 0, None))
    st = TABLE["settings"]
    model, _ = smollm2
    float64 = TABLE["machine"].get("dtype") == "float64"
    # float32: 78.52 in the table, 85.39 recomputed on an AVX-512 EPYC (+8.7%, issue 26) -> 15%.
    tolerance = 1e-6 if float64 else _benchmark_module().FLOAT32_LIVE_TOLERANCE
    assert (TABLE["windows"]["n"], TABLE["windows"]["length"]) == tuple(windows.shape)
    base = reproducible(model) if float64 else model
    q = quant.quantize_model(rotate_model(base, "hadamard", seed=0), 4, 4, 4, weight_method="rtn",
                             act_clip=st["act_clip"], kv_clip=st["kv_clip"], progress=False)
    live = perplexity(q, windows)
    assert abs(live - row["ppl"]) / row["ppl"] < tolerance, (live, row["ppl"], tolerance)


def _spread_module():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "kernel_spread.py"
    spec = importlib.util.spec_from_file_location("_kernel_spread_benchmark", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SPREAD = json.loads((resources.files("vramlab") / "results" / "kernel_spread.json").read_text(encoding="utf-8"))


def test_kernel_spread_record_matches_the_code_and_is_reproducible_on_float64():
    """The measured spread (benchmarks/kernel_spread.py) is the current code's, ran on more than one kernel
    path, and shows the float64 path agreeing to 1e-6 where float32 4-bit rows do not."""
    assert SPREAD["code_fingerprint"]["files"] == quant.code_fingerprint()["files"], \
        "the quantization code changed: rerun python benchmarks/kernel_spread.py (see its docstring)"
    assert len({(r["path"], r["threads"]) for r in SPREAD["runs"]}) >= 2
    for row in ("FP32", "W8A8", "W4A4KV4", "W4A4KV4-absmax"):
        assert SPREAD["summary"][f"fp64/{row}"]["rel_spread"] < 1e-6, row


def test_kernel_spread_record_covers_every_kernel_path_at_one_and_two_threads():
    """Issue 26: the float32 bounds come from a spread measured over the kernel paths (default, avx2, avx512)
    and thread counts 1 and 2, so the record holds all six for the rows the bounds use."""
    for key in ("fp32/W8A8", "fp32/W4A4KV4", "fp32/W4A4KV4-absmax", "fp64/W8A8", "fp64/W4A4KV4", "fp64/W4A4KV4-absmax"):
        assert {"default/1t", "default/2t", "avx2/1t", "avx2/2t", "avx512/1t", "avx512/2t"} <= \
            set(SPREAD["summary"][key]["runs"]), key


def test_kernel_spread_merge_recomputes_the_summary_and_refuses_other_code(tmp_path):
    bench = _spread_module()
    base = {"date": "2026-12-05T00:00:00+00:00", "versions": {}, "code_fingerprint": {"files": "x"},
            "windows": {"n": 1, "length": 256}}

    def record(name, path, threads, ppl):
        data = {**base, "command": f"run {name}",
                "runs": [{"path": path, "threads": threads, "ppl": {"fp32": {"W8A8": ppl}}, "seconds": {"fp32": 2.0}}]}
        (tmp_path / name).write_text(json.dumps(data))
        return tmp_path / name

    merged = bench.merge([record("a", "avx2", 1, 10.0), record("b", "avx512", 2, 10.5)], tmp_path / "out.json")
    assert merged["summary"]["fp32/W8A8"] == {"min": 10.0, "max": 10.5, "rel_spread": 0.05,
                                              "runs": ["avx2/1t", "avx512/2t"]}
    assert merged["commands"] == ["run a", "run b"]
    other = json.loads((tmp_path / "b").read_text())
    other["code_fingerprint"] = {"files": "y"}
    (tmp_path / "c").write_text(json.dumps(other))
    with pytest.raises(SystemExit, match="differ in code_fingerprint"):
        bench.merge([tmp_path / "a", tmp_path / "c"], tmp_path / "out2.json")


def _reproducible_rows(model, tok, rows):
    from vramlab.data import token_windows
    from vramlab.numerics import reproducible

    windows = token_windows(tok, SPREAD["windows"]["n"], SPREAD["windows"]["length"])
    live = _spread_module().rows_ppl(reproducible(model), windows, rows)
    for row, value in live.items():
        ref = SPREAD["summary"][f"fp64/{row}"]["min"]
        assert abs(value / ref - 1) < 1e-6, (row, value, ref)


@pytest.mark.slow
def test_reproducible_rows_match_the_reference_to_1e_6(smollm2):
    """On the float64 path, W8A8 and the W4A4KV4 Hadamard row with absmax weight scales give the numbers measured on
    the other kernel paths and thread counts to 1e-6 relative, on this machine's own path (about 15 s)."""
    _reproducible_rows(*smollm2, ("W8A8", "W4A4KV4-absmax"))


# tests/kernel_paths.sh sets it: the clip-searched row runs there, under every kernel path, and not in make test
KERNEL_PATHS_ENV = "VRAMLAB_KERNEL_PATHS"


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get(KERNEL_PATHS_ENV) != "1",
                    reason="the clip-searched float64 W4A4KV4 row (about 70 s) runs in tests/kernel_paths.sh, under "
                           "each kernel path (CI: default, avx2 and avx512); make test checks the absmax row")
def test_reproducible_clip_searched_row_matches_the_reference_to_1e_6(smollm2):
    """The table's W4A4KV4 Hadamard RTN row (MSE clip search, in float64 too) gives the number measured on the other
    kernel paths and thread counts to 1e-6 relative: issue 26's acceptance, held under every path by
    tests/kernel_paths.sh. Kept out of make test on the machine's own path to keep it under 10 minutes."""
    _reproducible_rows(*smollm2, ("W4A4KV4",))


def test_live_w16a4_rotation_wins_on_one_window(smollm2, windows):
    """Recompute W16A4 none vs hadamard (seed 0) on one window: rotation must win by far."""
    from vramlab.eval import perplexity
    from vramlab.quarot.rotate import rotate_model

    model, _ = smollm2
    one = windows[:1]
    fp32 = perplexity(model, one)
    plain = perplexity(quant.quantize_model(model, 16, 4, 16), one)
    rotated = perplexity(quant.quantize_model(rotate_model(model, "hadamard", seed=0), 16, 4, 16), one)
    assert plain / rotated >= 20, (plain, rotated)
    assert rotated < 2.5 * fp32, (rotated, fp32)


def _benchmark_module():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "rotation.py"
    spec = importlib.util.spec_from_file_location("_rotation_benchmark", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_benchmark_reads_git_at_the_repository_root_and_refuses_a_dirty_tree(tmp_path, monkeypatch):
    import subprocess

    bench = _benchmark_module()
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / "benchmarks").mkdir()
    (repo / "src" / "a.py").write_text("x = 1\n")
    run = lambda *a: subprocess.run(["git", "-C", str(repo), *a], check=True, capture_output=True)  # noqa: E731
    run("init", "-q")
    run("-c", "user.name=t", "-c", "user.email=t@t", "add", ".")
    run("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    monkeypatch.setattr(bench, "REPO_ROOT", repo)
    monkeypatch.chdir(repo / "benchmarks")  # the old code ran git here and missed src/ changes
    out = repo / "src" / "table.json"
    clean = bench.git_state(out)
    assert len(clean["commit"]) == 40 and clean["dirty"] == []
    out.write_text("{}")  # the table being written does not make the tree dirty
    (repo / "src" / "a.py").write_text("x = 2\n")
    assert bench.git_state(out)["dirty"] == ["src/a.py"]
    with pytest.raises(SystemExit, match="Refusing to write .*uncommitted changes \\(src/a.py\\).*--allow-dirty"):
        bench.main(["--out", str(out)])


def test_benchmark_check_reports_the_fingerprint(capsys):
    bench = _benchmark_module()
    rc = bench.main(["--check"])
    out = capsys.readouterr().out
    assert "fingerprint: table" in out and ("OK:" in out) == (rc == 0)


def test_benchmark_merges_two_parts_of_one_run_only(tmp_path):
    import json

    bench = _benchmark_module()
    base = {k: TABLE.get(k) for k in ("code_fingerprint", "git", "versions", "windows", "calibration", "seeds",
                                       "settings", "command", "date")}
    row = lambda setting, rot: {"setting": setting, "rotation": rot, "weights": "-", "group_size": None,  # noqa: E731
                                "seed": 0, "ppl": 20.0}
    a = {**base, "dirty": None, "finished": True, "complete": False, "rows": [row("FP32", "none")],
         "phases_done": [f"phase_{p}" for p in ("rtn", "gptq4")], "phases_skipped_for_time": []}
    b = {**a, "rows": [row("W16A4", "hadamard")],
         "phases_done": [f"phase_{p}" for p in ("seeds_rtn", "seeds_gptq", "group128", "gptq8")]}
    pa, pb = tmp_path / "a.json", tmp_path / "b.json"
    pa.write_text(json.dumps(a))
    pb.write_text(json.dumps({**b, "git": "another commit"}))
    with pytest.raises(SystemExit, match="git differs"):
        bench.main(["--out", str(pa), "--merge", str(pb)])
    pb.write_text(json.dumps({**b, "finished": False}))
    with pytest.raises(SystemExit, match="did not finish"):
        bench.main(["--out", str(pa), "--merge", str(pb)])
    pc = tmp_path / "c.json"
    pc.write_text(json.dumps(a))
    assert bench.main(["--out", str(pc), "--merge", str(pb), "--allow-partial"]) == 0
    partial = json.loads(pc.read_text())
    assert not partial["complete"] and "stopped before its last phase" in partial["partial_note"]
    assert quant.table_fingerprint_problems(partial)  # a partial table never passes the fingerprint test
    pb.write_text(json.dumps(b))
    assert bench.main(["--out", str(pa), "--merge", str(pb)]) == 0
    merged = json.loads(pa.read_text())
    assert merged["complete"] and len(merged["rows"]) == 2 and len(merged["runs"]) == 2
    assert {r["setting"] for r in merged["summary"]} == {"FP32", "W16A4"}


def test_benchmark_check_tells_a_code_change_from_another_machine(capsys, tmp_path):
    """Another machine (same code) is stated with the expected spread and is not a problem; changed code is a
    problem that asks for a regeneration."""
    from vramlab.numerics import machine_record

    bench = _benchmark_module()
    other = {**TABLE, "complete": True, "dirty": None, "code_fingerprint": quant.code_fingerprint(),
             "machine": {**machine_record(), "cpu_capability": "XYZ", "dtype": "float32"}}
    path = tmp_path / "table.json"
    path.write_text(json.dumps(other))
    assert bench.main(["--check", "--out", str(path)]) == 0
    out = capsys.readouterr().out
    assert "MACHINE: this machine differs from the table's: cpu_capability 'XYZ' there" in out
    assert "expect its 4-bit rows to differ here by up to 15%" in out and "OK: the table matches" in out
    path.write_text(json.dumps({**other, "machine": {**other["machine"], "dtype": "float64"}}))
    assert bench.main(["--check", "--out", str(path)]) == 0
    assert "reproducible float64 path: it still reproduces to 1e-6" in capsys.readouterr().out
    stale = quant.code_fingerprint()
    stale["files"]["quarot/quant.py"] = "0" * 64
    path.write_text(json.dumps({**other, "machine": machine_record(), "code_fingerprint": stale}))
    assert bench.main(["--check", "--out", str(path)]) == 1
    out = capsys.readouterr().out
    assert "PROBLEM: quarot/quant.py changed since the table was computed; regenerate it" in out
    assert "MACHINE" not in out
