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
