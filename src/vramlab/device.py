"""Which device are we on, and the workshop guard that keeps a lab from taking a whole shared GPU."""

from __future__ import annotations

import os
import platform

GPU_FRACTION_ENV = "VRAMLAB_GPU_FRACTION"
DEFAULT_GPU_FRACTION = 0.9  # leave 10% of a shared workshop GPU to its neighbours


# The variables that cap a process's CPU threads: PyTorch's OpenMP pool and the BLAS libraries' own.
THREAD_ENV_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def thread_share(processes: int, cpus: int | None = None) -> int:
    """CPU threads for each of ``processes`` processes that run at once (the tests' workers, a room's
    learners): this machine's usable CPUs (``os.sched_getaffinity``, so a container's CPU set counts, not
    the host's) split evenly, at least 1.

    PyTorch's CPU ops otherwise start one OpenMP thread per core in every process, and threads that wait
    on each other at every parallel op stall: with one other busy process on 2 cores, lab 05 forcing 2
    threads ran a cell 15x slower (27 s instead of under 2 s) than with 1.
    """
    if cpus is None:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, int(cpus) // max(1, int(processes)))


class GpuRequiredError(RuntimeError):
    """Raised when a GPU-only step runs on a machine where PyTorch sees no CUDA device."""


def has_cuda() -> bool:
    """True when PyTorch can use a CUDA device (never raises)."""
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # a broken driver must not crash a CPU lab
        return False


def in_colab() -> bool:
    import sys

    return "google.colab" in sys.modules


def require_cuda(what: str = "this step") -> None:
    """Raise :class:`GpuRequiredError` (one sentence, with the fix) when no CUDA device is visible."""
    if not isinstance(what, str):
        raise TypeError(f"what must be a short description (str) of the GPU-only step, got {type(what).__name__}.")
    if has_cuda():
        return
    import torch

    build = "a CPU-only build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
    raise GpuRequiredError(
        f"{what} needs a CUDA GPU but PyTorch {torch.__version__} ({build}) sees none: "
        f"run it on a GPU runtime (Colab: Runtime > Change runtime type > T4 GPU) or use the CPU path."
    )


def _nvml_driver() -> str | None:
    try:
        import pynvml  # from nvidia-ml-py, the [gpu] extra

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
            return version.decode() if isinstance(version, bytes) else str(version)
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return None


def summary() -> dict:
    """Versions and the GPU, as a flat dict (strings and numbers), for the environment check.

    Keys: python, platform, torch, torch_cuda_build, cuda_available, mode ("GPU" or "CPU mode"),
    and on CUDA per device 0: gpu_name, compute_capability, total_memory_gib, driver (via NVML when
    the ``gpu`` extra is installed), gpu_fraction (the workshop guard's cap, if applied).
    """
    import torch

    info: dict = {
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "torch": torch.__version__,
        "torch_cuda_build": torch.version.cuda or "none (CPU build)",
        "cuda_available": has_cuda(),
    }
    if info["cuda_available"]:
        props = torch.cuda.get_device_properties(0)
        info.update({
            "mode": "GPU",
            "gpu_count": torch.cuda.device_count(),
            "gpu_name": props.name,
            "compute_capability": f"{props.major}.{props.minor}",
            "total_memory_gib": round(props.total_memory / 2**30, 2),
            "driver": _nvml_driver() or "unknown (pip install nvidia-ml-py to see it)",
            "gpu_fraction": _applied_fraction,
        })
    else:
        info["mode"] = "CPU mode"
    return info


def describe() -> str:
    """One line a learner can read: the GPU and its compute capability, or CPU mode."""
    info = summary()
    if info["mode"] == "GPU":
        return (f"GPU: {info['gpu_name']} (compute capability {info['compute_capability']}, "
                f"{info['total_memory_gib']} GiB), torch {info['torch']} with CUDA {info['torch_cuda_build']}")
    return (f"CPU mode: PyTorch {info['torch']} sees no CUDA GPU; every lab runs on the CPU and "
            f"GPU-only cells print a labelled CPU result instead.")


_applied_fraction: float | None = None


def gpu_fraction_from_env() -> float:
    """The cap from ``VRAMLAB_GPU_FRACTION`` (default 0.9); ValueError for anything outside (0, 1]."""
    raw = os.environ.get(GPU_FRACTION_ENV, "").strip()
    if not raw:
        return DEFAULT_GPU_FRACTION
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{GPU_FRACTION_ENV}={raw!r} is not a number; set it to a fraction in (0, 1], "
                         f"e.g. 0.5 to use half the GPU.") from None
    if not 0.0 < value <= 1.0:
        raise ValueError(f"{GPU_FRACTION_ENV}={raw!r} is outside (0, 1]; set it to a fraction such as 0.5.")
    return value


def apply_workshop_guard(fraction: float | None = None) -> float | None:
    """Cap this process's PyTorch cache on the GPU it uses (``torch.cuda.set_per_process_memory_fraction``).

    ``fraction`` defaults to ``VRAMLAB_GPU_FRACTION`` (0.9). Returns the fraction applied, or None on
    a machine without CUDA (nothing to do). The caching allocator then raises OOM past
    ``fraction * total`` instead of taking memory a neighbour on a shared GPU needs.

    What it does and does not do: it starts CUDA in this process (a CUDA context of a few hundred MiB on
    that GPU, which the cap does not count), and it caps only memory that goes through PyTorch's caching
    allocator: the context, NCCL and libraries that call ``cudaMalloc`` themselves are outside it. Only the
    current device (the one ``"cuda"`` means) is capped: PyTorch's ``setMemoryFraction`` calls
    ``cudaMemGetInfo`` on the device it caps (``c10/cuda/CUDACachingAllocator.cpp``), which would create a
    CUDA context on every other visible GPU as well. A lab that spreads a model over several GPUs caps the
    others with ``torch.cuda.set_per_process_memory_fraction(f, index)`` itself.
    """
    global _applied_fraction
    if fraction is not None and (isinstance(fraction, bool) or not isinstance(fraction, (int, float))):
        raise TypeError(f"fraction must be a number in (0, 1], e.g. 0.5, got {fraction!r}.")
    value = gpu_fraction_from_env() if fraction is None else float(fraction)
    if not 0.0 < value <= 1.0:  # NaN fails too
        raise ValueError(f"fraction={value} is outside (0, 1]; pass e.g. 0.5 to use half the GPU.")
    if not has_cuda():
        return None
    import torch

    torch.cuda.set_per_process_memory_fraction(value, torch.cuda.current_device())
    _applied_fraction = value
    return value
