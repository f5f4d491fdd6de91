"""Shared fixtures: the real model (loaded once per test session) and the pydoc windows."""

from __future__ import annotations

import os

import pytest

from vramlab.device import THREAD_ENV_VARS, thread_share

# Checks keep a learner's wrong tries in a JSON file across kernel restarts (vramlab.checks._core.tries_file).
# The suite, and every notebook kernel it starts (they inherit this environment), keeps them in memory only:
# it never reads or writes a learner's file. The tests of that file set their own path.
os.environ["VRAMLAB_TRIES_FILE"] = "off"

# pytest-xdist runs N workers (and each notebook's kernel beside its worker). Left alone, every one of
# them starts as many BLAS/OpenMP threads as the machine has cores: N x cores spinning threads on a
# 2-core machine made the heaviest tests 3-4x slower. Each worker (and the kernels it starts, which
# inherit its environment) gets an equal share instead, unless the caller chose a number. Set before
# torch is imported (vramlab.device does not import it).
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    _share = str(thread_share(_WORKERS))
    for _var in THREAD_ENV_VARS:
        os.environ.setdefault(_var, _share)


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


@pytest.fixture(autouse=True)
def _fresh_check_tries():
    """Each test starts with no wrong tries recorded: checks withhold directions and offer hints by tries
    (vramlab.checks._core.tries), which would otherwise carry over from test to test."""
    from vramlab.checks._core import reset_tries

    reset_tries()
    yield


@pytest.fixture(autouse=True)
def _fresh_kernel():
    """Each test starts as a fresh kernel would: nothing run yet and no capstone design passed (the one registry,
    vramlab.ran, which vramlab.checks._core re-exports: a burst simulated, a shape dry-run, a design passed)."""
    from vramlab.checks._core import forget_runs

    forget_runs()
    yield
    forget_runs()
