"""Shared fixtures: the real model (loaded once per test session) and the pydoc windows."""

from __future__ import annotations

import os

import pytest

from vramlab.device import THREAD_ENV_VARS, thread_share

# Checks keep a learner's wrong tries in a JSON file across kernel restarts (vramlab.checks._core.tries_file).
# The suite, and every notebook kernel it starts (they inherit this environment), keeps them in memory only:
# it never reads or writes a learner's file. The tests of that file set their own path.
os.environ["VRAMLAB_TRIES_FILE"] = "off"
os.environ["VRAMLAB_RAN_FILE"] = "off"       # vramlab.ran keeps its records in the process (never a learner's file)
# The notebooks' engine cells (labs 03 and 04, run by nbval in kernels that inherit this environment) replay the
# engine's recorded runs: tests/test_engine.py (and, in CI, tests/test_engine_grid.py) start the real engine, and CI
# runs the two labs live in JupyterLab (tests/browser/run_labs.sh). About a minute of each worker (issue 26).
# VRAMLAB_REPLAY_ENGINE=0 runs them live here too.
os.environ.setdefault("VRAMLAB_REPLAY_ENGINE", "1")

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


#: The files that take longest, longest first (summed test times of a fresh clone's full run, 2026-12-05, every file
#: over 8 s, labs 03 and 04 as replays; the hub test, skipped by `make test`, runs a minute in CI): pytest-xdist hands whole files to its workers
#: in collection order (``--no-loadscope-reorder`` in pyproject's addopts), so starting these first leaves the many
#: short files to fill in at the end instead of one worker idling while the other finishes a long file (that run kept
#: its two workers 92% busy). A file not listed keeps its place after these, in name order. In CI the engine grid
#: comes first: it makes the session's real engine runs (tests/_engine_runs.py), and tests/test_engine.py, placed well
#: after it, loads them instead of waiting on its lock with a worker idle; make test skips the grid, and
#: tests/test_engine.py makes the runs.
LONGEST_FIRST = ("tests/test_engine_grid.py", "notebooks/05_mla_latent_cache.ipynb", "notebooks/02_w4a4kv4.ipynb",
                 "tests/test_checks_lab05.py", "notebooks/06_accelerate_dispatch.ipynb",
                 "tests/test_bnb_doctor.py", "tests/test_workshop_hub.py", "tests/test_checks_lab06.py",
                 "notebooks/07_bitsandbytes.ipynb", "notebooks/00_start_here.ipynb",
                 "notebooks/01_outliers_and_rotation.ipynb", "tests/test_mla.py", "notebooks/08_watch_vram.ipynb",
                 "notebooks/04_vllm_under_load.ipynb", "notebooks/03_vllm_startup.ipynb",
                 "tests/test_published_peaks.py", "tests/test_engine.py", "tests/test_mixed_bits.py",
                 "tests/test_checks_lab07.py", "tests/test_checks.py",
                 "tests/test_checks_lab00.py", "tests/test_dispatch.py", "tests/test_quarot_results.py",
                 "tests/test_checks_lab02.py", "tests/test_dryrun.py", "tests/test_rotate.py", "tests/test_outliers.py",
                 "tests/test_labs.py", "tests/test_bnb_quant.py", "tests/test_quant.py", "tests/test_checks_lab08.py",
                 "tests/test_log_readers.py", "tests/test_generate_mode.py", "tests/test_data_eval.py",
                 "tests/test_configs_causal_lm.py")


def _longest_first(items) -> None:
    """Reorder ``items`` in place: the files of :data:`LONGEST_FIRST` in its order, then the rest as collected
    (each file's tests keep their order)."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    order = {id(item): (rank.get(item.nodeid.split("::")[0], len(rank)), n) for n, item in enumerate(items)}
    items.sort(key=lambda item: order[id(item)])


def pytest_collection_modifyitems(config, items):
    from vramlab.device import has_cuda

    _longest_first(items)
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
