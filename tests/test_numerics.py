"""Kernel paths, the machine record and the reproducible (float64) path (vramlab.numerics, issue 26)."""

from __future__ import annotations

import pytest
import torch

from vramlab import numerics


def test_available_kernel_paths_start_with_default_and_include_this_process_path():
    paths = numerics.available_kernel_paths()
    assert paths[0] == "default" and set(paths) <= set(numerics.KERNEL_PATHS)
    # torch runs at most what the CPU has: the path of this process is one of them
    assert torch.backends.cpu.get_cpu_capability().lower() in paths


def test_machine_record_names_what_moves_float32_results():
    rec = numerics.machine_record()
    assert rec["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert rec["threads"] == torch.get_num_threads() and rec["cpu_count"] >= 1
    assert rec["blas"] and rec["onednn"]  # torch's CPU wheels carry both version lines


def test_reproducible_is_a_float64_copy():
    lin = torch.nn.Linear(4, 3)
    copy = numerics.reproducible(lin)
    assert copy.weight.dtype == torch.float64 and lin.weight.dtype == torch.float32
    assert torch.equal(copy.weight.float(), lin.weight)
    with pytest.raises(TypeError, match="model must be a torch model with parameters"):
        numerics.reproducible("model")


def test_run_on_kernel_path_runs_in_a_child_with_that_path():
    got = numerics.run_on_kernel_path("import json; print(json.dumps({'x': 1}))", "default")
    assert got == {"x": 1, "cpu_capability": "DEFAULT"}


def test_run_on_kernel_path_names_the_bad_argument():
    with pytest.raises(ValueError, match="kernel_path='avx1024' is not one this CPU can run; use one of 'default'"):
        numerics.run_on_kernel_path("pass", "avx1024")
    with pytest.raises(ValueError, match="threads must be a positive integer"):
        numerics.run_on_kernel_path("pass", "default", threads=0)
    with pytest.raises(TypeError, match="code must be Python source text"):
        numerics.run_on_kernel_path(None, "default")
    with pytest.raises(RuntimeError, match="the run on kernel path 'default' failed: ZeroDivisionError"):
        numerics.run_on_kernel_path("1 / 0", "default")


def test_machine_difference_names_what_differs_and_is_silent_on_the_same_machine():
    here = numerics.machine_record()
    assert numerics.machine_difference(here) is None
    other = {**here, "cpu_capability": "AVX2" if here["cpu_capability"] != "AVX2" else "DEFAULT", "threads": 64}
    msg = numerics.machine_difference(other)
    assert msg.startswith("this machine differs from the table's: cpu_capability") and "threads 64 there" in msg
    assert "predates kernel-path recording" in numerics.machine_difference({"platform": "Linux"})


def test_format_spread_shows_both_paths_and_the_seed_spread():
    spread = {"windows": {"n": 1, "length": 256},
              "runs": [{"path": "avx2", "threads": 1}, {"path": "default", "threads": 1}],
              "summary": {"fp32/W4A4KV4": {"min": 80.0, "max": 88.0, "rel_spread": 0.1},
                          "fp64/W4A4KV4": {"min": 81.0, "max": 81.0, "rel_spread": 0.0}, "fp32/seconds_mean": 3}}
    table = {"summary": [{"setting": "W4A4KV4", "rotation": "hadamard", "weights": "rtn", "group_size": None,
                          "n": 3, "ppl_min": 78.5, "ppl_max": 132.9, "seeds": [0, 1, 2]}]}
    text = numerics.format_spread(spread, table)
    assert "avx2/1t, default/1t; 1 window(s) of 256 tokens" in text
    assert "W4A4KV4  float32 80.0000..88.0000 (1.0e-01)   float64 81.0000..81.0000 (0.0e+00)" in text
    assert "W4A4KV4  rtn  78.50..132.90 (6.9e-01, seeds [0, 1, 2])" in text
    with pytest.raises(TypeError, match="spread must be the dict from vramlab.numerics.load_kernel_spread"):
        numerics.format_spread({}, table)


def test_row_on_kernel_paths_names_the_bad_argument():
    with pytest.raises(ValueError, match="setting='W4A4' is not a row this runs; use one of 'W16A4'"):
        numerics.row_on_kernel_paths("W4A4")
    with pytest.raises(ValueError, match="length must be a window length"):
        numerics.row_on_kernel_paths("W16A4", length=1)
    with pytest.raises(ValueError, match="seed must be an integer"):
        numerics.row_on_kernel_paths("W16A4", seed="0")
