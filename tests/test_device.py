import pytest
import torch

from vramlab import device


def test_cpu_mode_is_reported_when_no_cuda():
    if device.has_cuda():
        pytest.skip("this machine has a GPU")
    info = device.summary()
    assert info["mode"] == "CPU mode" and info["cuda_available"] is False
    assert device.describe().startswith("CPU mode")
    assert device.apply_workshop_guard() is None


def test_require_cuda_says_what_and_how_to_fix():
    if device.has_cuda():
        pytest.skip("this machine has a GPU")
    with pytest.raises(device.GpuRequiredError) as info:
        device.require_cuda("the VRAM widget")
    message = str(info.value)
    assert message.startswith("the VRAM widget needs a CUDA GPU") and "GPU runtime" in message
    assert torch.__version__ in message


@pytest.mark.parametrize("raw,expected", [("", 0.9), ("0.5", 0.5), ("1", 1.0)])
def test_gpu_fraction_from_env(monkeypatch, raw, expected):
    monkeypatch.setenv(device.GPU_FRACTION_ENV, raw)
    assert device.gpu_fraction_from_env() == expected


@pytest.mark.parametrize("raw,match", [("abc", "not a number"), ("0", "outside"), ("1.5", "outside"), ("-1", "outside")])
def test_gpu_fraction_rejects_bad_values(monkeypatch, raw, match):
    monkeypatch.setenv(device.GPU_FRACTION_ENV, raw)
    with pytest.raises(ValueError, match=match):
        device.gpu_fraction_from_env()
    with pytest.raises(ValueError):
        device.apply_workshop_guard()


def test_explicit_fraction_is_validated():
    with pytest.raises(ValueError, match="outside"):
        device.apply_workshop_guard(0.0)


@pytest.mark.gpu
def test_workshop_guard_caps_the_allocator():
    fraction = device.apply_workshop_guard(0.5)
    assert fraction == 0.5
    total = torch.cuda.get_device_properties(0).total_memory
    with pytest.raises(torch.OutOfMemoryError):
        torch.empty(int(total * 0.6), dtype=torch.uint8, device="cuda")
    device.apply_workshop_guard(1.0)


@pytest.mark.parametrize("bad", ["0.5", None.__class__, [0.5], True])
def test_fraction_must_be_a_number(bad):
    with pytest.raises(TypeError, match="fraction must be a number in"):
        device.apply_workshop_guard(bad)


@pytest.mark.parametrize("bad", [float("nan"), 2, -0.1])
def test_fraction_out_of_range(bad):
    with pytest.raises(ValueError, match="outside"):
        device.apply_workshop_guard(bad)


def test_require_cuda_what_must_be_text():
    with pytest.raises(TypeError, match="what must be a short description"):
        device.require_cuda(3)


def test_guard_caps_only_the_current_gpu(monkeypatch):
    """setMemoryFraction calls cudaMemGetInfo on the GPU it caps, which creates a CUDA context there: the guard
    touches only the GPU this process uses (stubbed CUDA with 4 devices; no GPU needed)."""
    calls = []
    monkeypatch.setattr(device, "has_cuda", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction", lambda f, d=None: calls.append((f, d)))
    assert device.apply_workshop_guard(0.5) == 0.5
    assert calls == [(0.5, 2)]
    monkeypatch.setattr(device, "_applied_fraction", None)
