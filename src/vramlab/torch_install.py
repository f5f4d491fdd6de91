"""Install the right PyTorch build into a fresh venv: CPU wheels unless the machine has an NVIDIA GPU.

Run by ``make`` with the venv's interpreter *before* vramlab itself is installed, so it uses the
standard library only and runs as a plain file::

    .venv/bin/python src/vramlab/torch_install.py

A plain ``pip install torch`` on Linux takes PyPI's CUDA build (several GB of ``nvidia-*`` wheels),
which a laptop without an NVIDIA GPU never uses. So:

* torch already importable (Colab, ``.ci/run``, a re-run): keep it;
* an NVIDIA GPU is visible (``nvidia-smi -L`` lists one, or ``/proc/driver/nvidia/version`` exists):
  PyPI's default build, which is the CUDA build on Linux;
* not Linux (macOS, Windows): PyPI's default build (it has no CUDA libraries there);
* otherwise: PyTorch's CPU index (``CPU_INDEX``); when it cannot be reached, a CPU wheel that pip can
  already see in its configured ``find-links`` folders (a mirror or a copied wheel) is taken; failing
  that, one line says so and PyPI's default index is used.

It prints which build it chose and why, in one line, before installing.
"""

from __future__ import annotations

import glob
import os
import platform
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request

# The official CPU-only wheel index (https://pytorch.org/get-started/locally/, "Compute Platform: CPU").
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
REQUIREMENT = "torch>=2.4"  # the same lower bound as pyproject.toml's dependencies


def installed_torch(python: str = sys.executable) -> str | None:
    """``"2.13.0+cpu (CPU build)"`` for the torch importable by ``python``, or None when there is none."""
    code = ("import torch; c = torch.version.cuda; "
            "print(torch.__version__, '(CUDA ' + c + ' build)' if c else '(CPU build)')")
    try:
        proc = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() if proc.returncode == 0 and proc.stdout.strip() else None


# WSL2 has no /proc/driver/nvidia: the Windows driver exposes the GPU through /dev/dxg and puts
# nvidia-smi (with libcuda) in /usr/lib/wsl/lib, which is not always on PATH (NVIDIA's "CUDA on WSL User
# Guide", docs.nvidia.com/cuda/wsl-user-guide).
WSL_NVIDIA_SMI = "/usr/lib/wsl/lib/nvidia-smi"
WSL_DXG = "/dev/dxg"
PROC_DRIVER = "/proc/driver/nvidia/version"


def nvidia_gpu() -> str | None:
    """How an NVIDIA GPU was detected (a short phrase), or None when there is none."""
    smi = shutil.which("nvidia-smi") or (WSL_NVIDIA_SMI if os.path.exists(WSL_NVIDIA_SMI) else None)
    if smi:
        try:
            proc = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
            if proc.returncode == 0 and "GPU" in proc.stdout:
                return f"nvidia-smi lists {proc.stdout.strip().splitlines()[0]}"
        except (OSError, subprocess.TimeoutExpired):
            pass
    if os.path.exists(PROC_DRIVER):
        return f"an NVIDIA driver is loaded ({PROC_DRIVER})"
    if os.path.exists(WSL_DXG) and os.path.exists(WSL_NVIDIA_SMI):
        return f"WSL2 with the Windows NVIDIA driver ({WSL_DXG}, {WSL_NVIDIA_SMI})"
    return None


def index_reachable(url: str = CPU_INDEX, timeout: float = 10.0) -> str | None:
    """None when ``url``'s torch page answers, else the reason it cannot be reached (one phrase)."""
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/torch/", timeout=timeout) as response:
            response.read(1)
        return None
    except urllib.error.HTTPError as exc:
        return f"HTTP {exc.code}"
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return str(reason) or type(exc).__name__


def pip_find_links(python: str = sys.executable) -> list[str]:
    """The folders in pip's configured ``find-links`` (``pip config list``), which pip searches offline."""
    try:
        proc = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return []
    found: list[str] = []
    for line in proc.stdout.splitlines():
        key, _, value = line.partition("=")
        if key.strip().endswith("find-links"):
            found += [v for v in value.strip().strip("'\"").split() if v and os.path.isdir(v)]
    return list(dict.fromkeys(found))


def local_cpu_wheel(folders: list[str], python_tag: str | None = None) -> str | None:
    """``"torch==2.13.0+cpu"`` for the newest CPU torch wheel for this Python in ``folders``, else None."""
    python_tag = python_tag or f"cp{sys.version_info.major}{sys.version_info.minor}"
    best: tuple[tuple[int, ...], str] | None = None
    for folder in folders:
        for path in glob.glob(os.path.join(folder, f"torch-*+cpu-{python_tag}-*.whl")):
            version = os.path.basename(path).split("-")[1]
            key = tuple(int(x) for x in re.findall(r"\d+", version.split("+")[0]))
            if best is None or key > best[0]:
                best = (key, version)
    return f"torch=={best[1]}" if best else None


def choose(system: str | None = None, gpu: str | None = None, cpu_index_problem: str | None = None,
           local_cpu: str | None = None) -> tuple[list[str], str]:
    """The pip arguments and a one-line reason, from the facts (separated from probing for tests).

    ``system``: ``platform.system()``; ``gpu``: :func:`nvidia_gpu`'s answer; ``cpu_index_problem``:
    :func:`index_reachable`'s answer for the CPU index (only consulted on Linux without a GPU).
    """
    system = system or platform.system()
    if gpu:
        return [REQUIREMENT], f"torch: CUDA build from PyPI, because {gpu}"
    if system != "Linux":
        return [REQUIREMENT], f"torch: PyPI's build, because on {system} it has no CUDA libraries to skip"
    if cpu_index_problem is None:
        return ([REQUIREMENT, "--index-url", CPU_INDEX],
                f"torch: CPU build from {CPU_INDEX}, because no NVIDIA GPU was found (no nvidia-smi GPU, "
                f"no /proc/driver/nvidia)")
    if local_cpu:
        return ([local_cpu],
                f"torch: CPU build {local_cpu.split('==')[1]} from pip's find-links, because no NVIDIA GPU was "
                f"found and {CPU_INDEX} cannot be reached ({cpu_index_problem})")
    return ([REQUIREMENT],
            f"torch: {CPU_INDEX} cannot be reached ({cpu_index_problem}), so the default index is used "
            f"(on Linux that can be the multi-GB CUDA build)")


def main(argv: list[str] | None = None) -> int:
    python = sys.executable
    have = installed_torch(python)
    if have:
        print(f"torch: keeping the installed torch {have}")
        return 0
    system = platform.system()
    gpu = nvidia_gpu()
    problem = index_reachable() if (system == "Linux" and not gpu) else None
    local = local_cpu_wheel(pip_find_links(python)) if problem else None
    args, reason = choose(system, gpu, problem, local)
    print(reason, flush=True)
    proc = subprocess.run([python, "-m", "pip", "install", "-q", *args])
    if proc.returncode != 0:
        print(f"torch: `pip install {' '.join(args)}` failed (exit {proc.returncode}); see pip's message above.",
              file=sys.stderr)
        return proc.returncode
    print(f"torch: installed {installed_torch(python) or '(import failed)'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
