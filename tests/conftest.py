"""Shared fixtures: the real model (loaded once per test session) and the pydoc windows."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config, items):
    from vramlab.device import has_cuda

    if has_cuda():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU: PyTorch sees none on this machine (CPU mode)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture(scope="session")
def smollm2():
    """(model, tokenizer): the real SmolLM2-135M in float32 on CPU. Do not modify it in place."""
    from vramlab.models import load_smollm2

    return load_smollm2()


@pytest.fixture(scope="session")
def windows(smollm2):
    """LongTensor [8, 512]: the first 8 windows of 512 tokens of the pydoc text."""
    from vramlab.data import token_windows

    return token_windows(smollm2[1], n_windows=8, length=512)
