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



def test_wsl2_gpu_is_found_without_proc_driver(monkeypatch, tmp_path):
    """WSL2: no /proc/driver/nvidia, nvidia-smi only in /usr/lib/wsl/lib (not on PATH), and /dev/dxg."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA GeForce RTX 4090 (UUID: GPU-x)'\n")
    smi.chmod(0o755)
    dxg = tmp_path / "dxg"
    dxg.write_text("")
    monkeypatch.setattr(ti.shutil, "which", lambda name: None)
    monkeypatch.setattr(ti, "PROC_DRIVER", str(tmp_path / "no-proc-driver"))
    monkeypatch.setattr(ti, "WSL_NVIDIA_SMI", str(smi))
    monkeypatch.setattr(ti, "WSL_DXG", str(dxg))
    assert ti.nvidia_gpu() == "nvidia-smi lists GPU 0: NVIDIA GeForce RTX 4090 (UUID: GPU-x)"
    smi.write_text("#!/bin/sh\nexit 9\n")  # nvidia-smi fails: /dev/dxg with the WSL nvidia-smi still says GPU
    assert ti.nvidia_gpu().startswith("WSL2 with the Windows NVIDIA driver")
    monkeypatch.setattr(ti, "WSL_DXG", str(tmp_path / "no-dxg"))
    assert ti.nvidia_gpu() is None


def test_unreachable_cpu_index_takes_a_cpu_wheel_pip_already_sees(tmp_path):
    for name in ("torch-2.11.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",
                 "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",
                 "torch-2.14.0-cp311-cp311-manylinux_2_28_x86_64.whl",         # a CUDA build: never taken
                 "torch-2.13.0+cpu-cp312-cp312-manylinux_2_28_x86_64.whl"):    # another Python
        (tmp_path / name).write_bytes(b"")
    assert ti.local_cpu_wheel([str(tmp_path)], "cp311") == "torch==2.13.0+cpu"
    assert ti.local_cpu_wheel([str(tmp_path)], "cp310") is None
    args, reason = ti.choose("Linux", gpu=None, cpu_index_problem="Name or service not known",
                             local_cpu="torch==2.13.0+cpu")
    assert args == ["torch==2.13.0+cpu"] and "find-links" in reason and "\n" not in reason


def test_find_links_are_read_from_pip_config():
    folders = ti.pip_find_links()
    assert isinstance(folders, list) and all(Path(f).is_dir() for f in folders)
