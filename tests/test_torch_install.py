"""make's torch choice: CPU wheels on a machine without an NVIDIA GPU, CUDA where there is one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from vramlab import torch_install as ti


def test_linux_without_gpu_takes_the_cpu_index():
    args, reason = ti.choose("Linux", gpu=None, cpu_index_problem=None)
    assert args == ["torch>=2.4", "--index-url", "https://download.pytorch.org/whl/cpu"]
    assert reason.startswith("torch: CPU build from https://download.pytorch.org/whl/cpu, because no NVIDIA GPU")


def test_unreachable_cpu_index_falls_back_to_the_default_index_in_one_line():
    args, reason = ti.choose("Linux", gpu=None, cpu_index_problem="Name or service not known")
    assert args == ["torch>=2.4"]
    assert "cannot be reached (Name or service not known)" in reason and "\n" not in reason


def test_a_gpu_gets_the_cuda_build_and_other_systems_pypi():
    args, reason = ti.choose("Linux", gpu="nvidia-smi lists GPU 0: NVIDIA L4", cpu_index_problem=None)
    assert args == ["torch>=2.4"] and "CUDA build" in reason and "NVIDIA L4" in reason
    args, reason = ti.choose("Darwin", gpu=None, cpu_index_problem=None)
    assert args == ["torch>=2.4"] and "Darwin" in reason


def test_requirement_matches_pyproject():
    text = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    assert f'"{ti.REQUIREMENT}"' in text


def test_an_installed_torch_is_kept():
    """As in .ci/run and Colab: torch is importable, so nothing is installed."""
    script = Path(ti.__file__)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.startswith("torch: keeping the installed torch 2."), proc.stdout

