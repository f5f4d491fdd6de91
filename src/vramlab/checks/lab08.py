"""Checks for notebook 08 (watch VRAM live, the caching allocator, a real OOM).

References are vramlab's own functions (``vramlab.vram.parse_oom_message``,
``vramlab.vram.allocator.simulate``, ``vramlab.vram.dryrun.dry_run``), so a check and the lesson cannot disagree.
"""

from __future__ import annotations

import functools
import math
import re
from typing import Any

from vramlab import ran
from vramlab.vram.allocator import MiB, simulate
from vramlab.checks._core import (CAPSTONE_MAX_WRONG, opened_by, CheckResult, add_try, as_float, check_choice, direction,
                                  exercise, fmt_number, is_untouched, keyed_dict_problem, malformed_reason, report,
                                  reset_tries, tries)
from vramlab.vram import parse_oom_message

__all__ = ["check_oom_numbers", "check_reserved_prediction", "check_cap_oom_reason", "check_peak_terms",
           "check_t4_plan"]

GiB = 1 << 30

# A real message a user of a university GPU cluster sent to their help desk ("... in my experiments in job
# 34418381 ..."), as quoted in a public set of HPC support questions (PyTorch 2.x wording); the original
# post's link could not be found.
READING_OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
               "11.91 GiB of which 406.38 MiB is free. Including non-PyTorch memory, this process has 11.51 GiB memory "
               "in use. Of the allocated memory 11.18 GiB is allocated by PyTorch, and 219.44 MiB is reserved by "
               "PyTorch but unallocated. If reserved but unallocated memory is large try setting "
               "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for "
               "Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")

_OOM_KEYS = ("tried_gib", "free_gib", "reserved_gib")
_TOL_GIB = 0.002   # tighter than the 0.0095 GiB a /1000 conversion of 406.38 MiB is off by


def _oom_expected() -> dict:
    r = parse_oom_message(READING_OOM)
    return {"tried_gib": r.tried_bytes / GiB, "free_gib": r.free_bytes / GiB, "reserved_gib": r.reserved_bytes / GiB}


def _oom_answer(**_) -> str:
    want = _oom_expected()
    return ("{{'tried_gib': {tried_gib:.3f}, 'free_gib': {free_gib:.4f}, 'reserved_gib': {reserved_gib:.4f}}}: "
            "free = 406.38 / 1024, reserved = 11.18 + 219.44 / 1024 (allocated + reserved-but-unallocated)"
            .format(**want))


@exercise("lab08", 1, _oom_answer)
def check_oom_numbers(got: Any) -> CheckResult:
    """``got``: ``{"tried_gib", "free_gib", "reserved_gib"}`` read from :data:`READING_OOM`, in GiB
    (reserved = everything PyTorch's cache holds). Within 0.002 GiB, so a MiB figure divided by 1000 (GB)
    instead of 1024 is caught."""
    name = "reading the OOM message"
    want = _oom_expected()
    if not isinstance(got, dict):
        return report(name, False, f"a dict with keys {', '.join(_OOM_KEYS)} (GiB)", fmt_number(got),
                      "fill in the dict in the exercise cell")
    if all(is_untouched(got.get(k)) for k in _OOM_KEYS if k in got) and set(got) <= set(_OOM_KEYS):
        return report(name, False, "", "a dict of None", value=None,
                      untouched_hint="not done yet: replace each None with the number you read (in GiB), then "
                                     "run this cell again")
    missing = [k for k in _OOM_KEYS if k not in got]
    if missing:
        return report(name, False, f"keys {', '.join(_OOM_KEYS)}", f"missing {', '.join(missing)}",
                      "use exactly these key names")
    for key in _OOM_KEYS:
        value = as_float(got[key])
        if value is None or math.isnan(value):
            return report(name, False, f"{key} as a number of GiB", f"{key}={fmt_number(got[key])}",
                          "write the number (a float), not a string or None")
        if abs(value - want[key]) <= _TOL_GIB:
            continue
        hint = "read the number again, and convert MiB to GiB where the message uses MiB"
        if key == "free_gib" and abs(value - 406.38) <= 0.01:       # copied without converting
            hint = "406.38 is in MiB; the key wants GiB"
        elif abs(value - want[key] * 1024) <= 1:                    # left in MiB
            hint = f"{key} is in GiB: {value:g} MiB is {value:g} / 1024 GiB"
        elif key == "free_gib" and abs(value - 406.38 / 1000) <= _TOL_GIB:
            hint = "/1000 is GB, not GiB: 1 GiB is 1024 MiB, so divide the MiB by 1024"
        elif key == "reserved_gib" and abs(value - (11.18 + 219.44 / 1000)) <= _TOL_GIB:
            hint = "/1000 is GB, not GiB: the 219.44 MiB are 219.44 / 1024 GiB"
        elif key == "reserved_gib" and abs(value - 11.18) <= 0.01:   # only the allocated part
            hint = ("11.18 GiB is only what live tensors use; the cache also holds the 'reserved but unallocated' "
                    "part, so PyTorch's reserved memory is the sum of the two")
        elif key == "reserved_gib" and abs(value - 11.51) <= 0.01:
            hint = "11.51 GiB includes non-PyTorch memory (CUDA context); PyTorch's reserved memory is smaller"
        elif key == "reserved_gib" and abs(value - 219.44 / 1024) <= 0.01:
            hint = "that is only the unused part of the cache; add what is allocated by PyTorch"
        elif abs(value - want[key]) <= 0.01:
            hint = "close: keep three decimals (round only at the end)"
        return report(name, False, f"{key} as a number of GiB", f"{key} = {value:g}, {direction(value, want[key], name=name)}", hint)
    return report(name, True, "", "tried {tried_gib:.2f}, free {free_gib:.3f}, reserved {reserved_gib:.3f} GiB"
                  .format(**want))


def _prediction_pair(pred: Any) -> tuple[float, float] | None:
    if not isinstance(pred, dict) or set(pred) != {"default", "expandable"}:
        return None
    a, b = as_float(pred["default"]), as_float(pred["expandable"])
    if a is None or b is None or math.isnan(a) or math.isnan(b) or a < 0 or b < 0:
        return None
    return a, b


def _reserved_answer(actual: dict | None = None, **_) -> str:
    real = actual if actual is not None else _reserved_reference()
    return (f"default {real['default'] / MiB:g} MiB, expandable {real['expandable'] / MiB:g} MiB"
            + ("" if actual is not None else " (the allocator model; the GPU run may differ)"))


@exercise("lab08", 2, _reserved_answer, prediction=True)
def check_reserved_prediction(pred: Any, actual: dict | None = None, source: str = "result") -> CheckResult:
    """``pred``: ``{"default": MiB, "expandable": MiB}``, your prediction of ``memory_reserved`` after the
    fragmentation pattern. Without ``actual`` the check only confirms a prediction is stored (no reveal);
    with ``actual`` (``{"default": bytes, "expandable": bytes}``, measured or computed) it says how far off
    each number is, calling it ``source`` (``"measured"`` on a GPU, ``"computed"`` in CPU mode). Any honest
    numeric prediction passes: this check teaches, it does not grade."""
    name = "reserved-memory prediction"
    pair = _prediction_pair(pred)
    if pair is None:
        return report(name, False, 'a dict {"default": MiB, "expandable": MiB} with two non-negative numbers',
                      fmt_number(pred), "store your prediction (numbers in MiB) before running the experiment")
    if actual is None:
        return report(name, True, "", f"stored: default {pair[0]:g} MiB, expandable {pair[1]:g} MiB "
                                      f"(run the experiment to compare)")
    parts = []
    for (label, guess) in zip(("default", "expandable"), pair):
        real = actual[label] / MiB
        off = guess - real
        parts.append(f"{label}: predicted {guess:g}, {source} {real:g} MiB ({off:+g} MiB)")
    return report(name, True, "", "; ".join(parts))


# Each wrong choice says why THAT choice fails, from what the learner can see (the message of section 6 and
# the exercise's text), and nothing that points to another choice (tests/test_checks.py tries every label).
_CAP_CHOICES = {
    "a": "the message says many GiB of the device were free when the allocation failed, so the driver still "
         "had memory to give",
    "b": "PyTorch's allocator refuses to reserve past fraction x total for this process, whatever the device has "
         "free",
    "c": "memory in pieces shows as 'reserved but unallocated', and in this message that part is far smaller than "
         "the request",
    "d": "memory another process holds is not free: the message's free figure is read after the failure and still "
         "shows many GiB",
}
# Why b: DeviceCachingAllocator::alloc_block returns "out of memory" when
# ``set_fraction && total_allocated_memory + size > allowed_memory_maximum``, before cudaMalloc
# (c10/cuda/CUDACachingAllocator.cpp, pytorch/pytorch @ 001074d2).


def _cap_answer(**_) -> str:
    return f"'b': {_CAP_CHOICES['b']}"


@exercise("lab08", 3, _cap_answer, choices=tuple(_CAP_CHOICES))
def check_cap_oom_reason(answer: Any) -> CheckResult:
    """``answer``: one letter, ``"a"``-``"d"``: why does a process under
    ``torch.cuda.set_per_process_memory_fraction`` get an OOM while the GPU has memory free? A wrong letter is
    told why that letter fails, nothing about the others."""
    return check_choice("why a capped process runs out of memory", answer, _CAP_CHOICES, "b",
                        what="the letter that explains it")


def _reserved_reference() -> dict:
    """The allocator model's reserved bytes after the pattern: ``{"default": ..., "expandable": ...}``."""
    return {"default": simulate(expandable=False).reserved, "expandable": simulate(expandable=True).reserved}


# --------------------------------------------------------------------------- Exercise 4: the prefill peak, term by term
#: Exercise 4's setup: SmolLM2-135M in bf16, one prefill of 8 sequences of 2,048 tokens, sdpa.
PEAK_SETUP = {"model": "smollm2-135m", "batch_size": 8, "seq_len": 2048, "dtype": "bfloat16",
              "attn_implementation": "sdpa"}
PEAK_KEYS = ("weights", "kv_cache", "logits", "activations")
# A term passes within this fraction of the dry run's value. Activations are tiny at this peak (the
# lm_head's input), so they get more room; a 2x error still fails on every term.
_PEAK_TOL = {"weights": 0.05, "kv_cache": 0.05, "logits": 0.05, "activations": 0.35}


@functools.lru_cache(maxsize=1)
def _peak_reference():
    """The dry run of :data:`PEAK_SETUP` (a :class:`vramlab.vram.dryrun.MemoryTrace`; computed once, ~1 s)."""
    from vramlab.vram.dryrun import dry_run

    setup = dict(PEAK_SETUP)
    return dry_run(setup.pop("model"), **setup)


def _peak_terms(trace: Any) -> dict[str, int]:
    from vramlab.vram.dryrun import MemoryTrace

    if trace is None:
        trace = _peak_reference()
    if not isinstance(trace, MemoryTrace) or not trace.events:
        raise TypeError("trace must be the MemoryTrace that dry_run(...) returned; run the dry-run cell first.")
    at = trace.breakdown("peak")
    return {k: int(at[k]) for k in PEAK_KEYS}


def _peak_answer(trace: Any = None, **_) -> str:
    t = _peak_terms(trace)
    return (f"weights {t['weights']:,} bytes (every parameter once, 2 bytes each), "
            f"kv_cache {t['kv_cache']:,} bytes (K and V x layers x KV heads x head_dim x 2 bytes x every token of "
            f"the batch), logits {t['logits']:,} bytes (batch x context x vocabulary x 2 bytes: a plain forward "
            f"keeps a bf16 logit for every position), activations {t['activations']:,} bytes (about one "
            f"batch x context x hidden tensor: the lm_head's input; the layers' intermediates are already freed)")


def _ratio_is(ratio: float, k: float, rel: float = 0.03) -> bool:
    return math.isclose(ratio, k, rel_tol=rel)


def _term_hint(key: str, value: float, want: float, name: str | None = None) -> str:
    """What is likely wrong with one term, from the learner's number and the reference (never the number)."""
    ratio = value / want if want else float("inf")
    if want and any(_ratio_is(ratio, u) for u in (1 / 2**20, 1 / 2**30, 1e-6, 1e-9)):
        return f"{key} looks like MiB/GiB or MB/GB: the dict wants bytes"
    if key == "weights":
        if _ratio_is(ratio, 2):
            return "weights 2x too high: bfloat16 stores 2 bytes per parameter, not float32's 4"
        if _ratio_is(ratio, 0.5):
            return "weights 2x too low: bfloat16 takes 2 bytes per parameter"
        if 1.1 < ratio < 1.35:
            return ("weights too high: the embedding and the lm_head share one matrix (tied), which is stored "
                    "and counted once")
    elif key == "kv_cache":
        if _ratio_is(ratio, 0.5):
            return "KV cache 2x too low: the cache holds K and V, two tensors per layer"
        if _ratio_is(ratio, 3) or _ratio_is(ratio, 6):
            return ("KV cache too high: with grouped-query attention K and V are stored for the key/value "
                    "heads only, not for every query head")
        if _ratio_is(ratio, 2):
            return "KV cache 2x too high: count K and V once each, at 2 bytes (bf16) per element"
        if _ratio_is(ratio, 1 / 8):
            return "KV cache 8x too low: every sequence of the batch has its own cache"
    elif key == "logits":
        # transformers' LlamaForCausalLM.forward returns lm_head(hidden_states) as is, in the model's dtype:
        # no `.float()` in transformers 5 (transformers/models/llama/modeling_llama.py, `logits = self.lm_head(...)`).
        if _ratio_is(ratio, 2):
            return "logits 2x too high: are the logits float32 here? check the dtype the lm_head returns"
        if _ratio_is(ratio, 0.5):
            return "logits 2x too low: each logit is a bf16 value of 2 bytes"
        if value == 0 or ratio < 0.01:
            return ("logits far too low: a plain forward returns a logit for every position of every sequence, "
                    "not only the last token (only generate() asks for the last one)")
        if _ratio_is(ratio, 1 / 8):
            return "logits 8x too low: every sequence of the batch gets its own logits"
    elif key == "activations":
        # A question, never the insight: which op makes the peak, and which of your tensors exist at that moment
        # is what the exercise is about (issue 29: no check hands out the capstone's insight on a miss).
        if ratio > 1:
            return ("activations too high: for each tensor you counted, is it still referenced at the moment of "
                    "the peak, and does this GPU's attention kernel make it at all?")
        return ("activations too low: list what the op that makes the peak reads and writes; is each of those "
                "in your sum?")
    return f"{key} {direction(value, want, name=name)}: work it out again from the config, in bytes"


@exercise("lab08", 4, _peak_answer)
def check_peak_terms(predicted: Any, trace: Any = None) -> CheckResult:
    """``predicted``: ``{"weights", "kv_cache", "logits", "activations"}`` in bytes, your prediction of
    what is alive at the prefill peak; ``trace``: the :class:`~vramlab.vram.dryrun.MemoryTrace` of
    ``dry_run(...)`` (default: :data:`PEAK_SETUP`'s). Each term is judged against ``trace.breakdown("peak")``
    within 5% (activations 35%); a wrong term is told its direction and the likely mistake, never its value."""
    name = "the prefill peak, term by term"
    want = _peak_terms(trace)
    kind = "the four terms of the prefill peak, in bytes"
    form = keyed_dict_problem(name, predicted, PEAK_KEYS, expected=f"a dict with keys {', '.join(PEAK_KEYS)}",
                              untouched_hint="not done yet: replace each None with a number of bytes, then run this "
                                             "cell again",
                              keys_hint="use exactly these key names (attention memory belongs under activations)")
    if form is not None:
        return form
    values = {}
    for key in PEAK_KEYS:
        v = as_float(predicted[key])
        if v is None or math.isnan(v) or math.isinf(v) or v < 0:
            return report(name, False, f"{key} as a non-negative number of bytes",
                          f"{key}={fmt_number(predicted[key])}",
                          "write a number of bytes (an int or a float), not a string or None")
        values[key] = v
    wrong = [k for k in PEAK_KEYS if abs(values[k] - want[k]) > _PEAK_TOL[k] * want[k]]
    if not wrong:
        total = sum(want.values())
        return report(name, True, kind, f"{total / MiB:,.0f} MiB")
    got = ", ".join(f"{k} {'ok' if k not in wrong else direction(values[k], want[k], name=name)}" for k in PEAK_KEYS)
    return report(name, False, kind, got, "; ".join(_term_hint(k, values[k], want[k], name) for k in wrong))


# --------------------------------------------------------------------------- Exercise 5 (capstone): a T4 in bf16
#: The capstone's setup: the same model, a shape and a GPU the lab has not shown. A Colab T4 is compute capability
#: 7.5, so its bf16 attention kernel is not the A100's (vramlab.vram.kernels: select_sdp_backend's order, and
#: the math path of the pinned torch release). Pinned to torch 2.13 so the answer does not move with the install.
T4_SETUP = {"model": "smollm2-135m", "batch_size": 4, "seq_len": 4096, "dtype": "bfloat16", "gpu": "T4",
            "torch_version": "2.13"}
T4_IMPLEMENTATIONS = ("sdpa", "eager")
T4_KEYS = ("sdpa_mib", "eager_mib", "choice", "why")
#: A peak passes within 5% of the dry run's: at this shape the two peaks are about 12% apart, so two numbers that
#: pass are always in the right order, and the choice can be judged on the learner's own numbers.
T4_TOL = 0.05
#: Words of the mechanism a "why" must name: the T4 runs sdpa's math path, upcast to float32 (torch 2.5+).
_T4_REASON_WORDS = ("math path", "math kernel", "math backend", "math sdpa", "math attention", "math implementation",
                   "math fallback", "float32", "fp32", "32-bit", "upcast", "full precision", "no fused", "no flash",
                   "not flash", "without flash", "no memory-efficient", "falls back", "fallback")
# A bare "math" is not a mechanism: review #9 passed with "I did the math and it is lower".
# Plans that passed before this shape was dry-run here (vramlab.ran, this kind): re-running the cell after the
# comparison still passes.
_PASSED_KIND = "passed check_t4_plan"


@functools.lru_cache(maxsize=4)
def _t4_reference(attn_implementation: str, torch_version: str = "2.13", gpu: str = "T4"):
    """The dry run of :data:`T4_SETUP` with ``attn_implementation`` (a ``MemoryTrace``; about 1 s each once
    transformers is imported), not remembered as a dry run of the learner's. ``torch_version`` / ``gpu`` other
    than the setup's are for the checks' hints."""
    from vramlab.vram.dryrun import dry_run

    setup = {k: v for k, v in T4_SETUP.items() if k not in ("model", "torch_version", "gpu")}
    with ran._unrecorded():
        return dry_run(T4_SETUP["model"], attn_implementation=attn_implementation, torch_version=torch_version,
                       gpu=gpu, **setup)


def _t4_peaks_mib() -> dict[str, float]:
    return {impl: _t4_reference(impl).peak_bytes / MiB for impl in T4_IMPLEMENTATIONS}


def _t4_answer(**_) -> str:
    peaks = _t4_peaks_mib()
    at = {impl: _t4_reference(impl).peak for impl in T4_IMPLEMENTATIONS}
    lower = min(peaks, key=peaks.get)
    return ("{{'sdpa_mib': {sdpa:.0f}, 'eager_mib': {eager:.0f}, 'choice': '{lower}'}}: on a T4 (sm_75) neither "
            "flash nor memory-efficient attention takes bf16 (both need sm_80 for it; the efficient kernel also "
            "refuses grouped-query heads up to torch 2.13), so sdpa runs the math path: upcast to float32, it holds float32 scores, their float32 softmax and a bool "
            "[B, H, L, S] at once; eager holds bf16 scores, a float32 softmax and its bf16 copy. Both peak in "
            "the last layer's attention ({s_mod} / {e_mod}); the logits (1.5 GiB) are not alive then."
            .format(sdpa=peaks["sdpa"], eager=peaks["eager"], lower=lower, s_mod=at["sdpa"]["module"],
                    e_mod=at["eager"]["module"]))


def _t4_hint(impl: str, value: float, want: float, name: str) -> str:
    """What is likely wrong with one predicted peak (MiB), from known mistakes; never the number."""
    ratio = value / want if want else float("inf")
    if any(_ratio_is(ratio, u) for u in (2**20, 1 / 1024)):
        return f"{impl}_mib looks like bytes or GiB: the plan wants MiB"
    if impl == "sdpa":
        flash = _t4_reference("sdpa", gpu="A100").peak_bytes / MiB
        old = _t4_reference("sdpa", torch_version="2.5").peak_bytes / MiB
        if abs(value - flash) <= T4_TOL * flash:
            return ("sdpa_mib matches what an A100's kernel would peak at for this shape: is that the kernel a T4 "
                    "(compute capability 7.5) runs for bf16 with grouped-query heads?")
        if abs(value - old) <= 0.02 * old:
            return ("sdpa_mib matches the math path of torch 2.5, which kept one more float32 score tensor; the "
                    "setup is torch 2.13")
    return (f"{impl}_mib {direction(value, want, name=name)}: list the tensors alive at the worst op of that "
            "implementation, with their shapes and dtypes")


#: Wrong plans told which peak is off (and its direction); later wrong plans are told only "not it".
T4_MARKED_TRIES = 2

#: A dry run this close to the capstone's sequence length (relative) reads its answer off, at any batch (peaks are
#: linear in it), dtype or GPU (eager's peak barely depends on the GPU): review #3 read it off 4 x 4,095 on a T4.
T4_NEAR_SEQ = 0.25


def _shape_already_run() -> bool:
    """Whether this kernel dry-ran what hands over the capstone's peaks (``vramlab.ran``): a sequence length within
    :data:`T4_NEAR_SEQ` of the capstone's, at any batch, dtype or GPU; or any run on a GPU without the fused kernels
    (compute capability below 8.0, as the T4's 7.5), with eager attention on any GPU (its peak barely depends on
    the GPU), or with the math kernel forced (``sdpa_kernel="math"``: the T4's kernel on any GPU, review #10). One such point and the B x S^2 scaling of the score matrix give the peak: review #7 passed with one
    1 x 2,048 sdpa run on a T4 and one eager run on an A100 (each alone under the old two-runs rule), reviews
    before fitted two points on a T4 and three eager runs on an A100. The lab's own dry run (sdpa, the default A100)
    is none of these."""
    from vramlab.vram.dryrun import SHAPE_KIND

    runs = ran.ran(SHAPE_KIND)   # (batch, seq, dtype, compute capability, attn_implementation, forced kernel) per run
    return any(_gives_the_t4_peaks(seq, cap, impl, *forced) for _b, seq, _d, cap, impl, *forced in runs)


def _gives_the_t4_peaks(seq_len: int, capability: tuple[int, int], attn_implementation: str,
                        sdpa_kernel: str = "") -> bool:
    """Whether a dry run of SmolLM2 at ``seq_len`` tokens on a GPU of ``capability`` with ``attn_implementation``
    hands over Exercise 5's peaks (see :func:`_shape_already_run`). ``vramlab dryrun`` asks it too: a command runs
    in its own process, where this kernel's record cannot see it (review #8 read both peaks off the command line)."""
    want = T4_SETUP["seq_len"]
    return (abs(int(seq_len) - want) <= T4_NEAR_SEQ * want or tuple(capability) < (8, 0)
            or attn_implementation == "eager" or sdpa_kernel == "math")   # review #10 forced math on an A100


@exercise("lab08", 5, _t4_answer, max_wrong=CAPSTONE_MAX_WRONG)
def check_t4_plan(plan: Any) -> CheckResult:
    """``plan``: ``{"sdpa_mib": MiB, "eager_mib": MiB, "choice": "sdpa" or "eager", "why": "<one sentence>"}``: the
    prefill peak of ``memory_allocated`` you predict for :data:`T4_SETUP` with each ``attn_implementation``, the one
    you would load, and why it peaks lower there. Each peak is judged against the dry run the check computes now
    (within 5%); once both pass, the choice must be the lower of your two numbers, and the why must name the
    mechanism (:data:`_T4_REASON_WORDS`), not a number. A wrong peak is told its direction (two tries) and a known
    mistake it matches, never its value.

    A prediction comes before the dry run: a plan stored after ``dry_run`` ran this very shape (4 x 4,096 tokens,
    bf16) in this kernel is refused as a reading (a plan that passed before that still passes)."""
    name = "a T4 plan (capstone)"
    kind = "two peaks in MiB, a choice and why"
    form = keyed_dict_problem(name, plan, T4_KEYS, expected=f"a dict with keys {', '.join(T4_KEYS)}",
                              untouched_hint="not done yet: replace each None (two numbers of MiB, one name, one "
                                             "sentence), then run this cell again")
    if form is not None:
        return form
    values = {}
    for impl in T4_IMPLEMENTATIONS:
        key = f"{impl}_mib"
        v = as_float(plan[key])
        if v is None or math.isnan(v) or math.isinf(v) or v <= 0:
            return report(name, False, f"{key} as a positive number of MiB", f"{key}={fmt_number(plan[key])}",
                          "write a number of MiB (an int or a float), not a string or None", counts=False)
        values[impl] = v
    choice = str(plan["choice"]).strip().strip("'\"").lower() if isinstance(plan["choice"], str) else None
    if choice not in T4_IMPLEMENTATIONS:
        return report(name, False, "choice as one of the two attn_implementation names",
                      f"choice={fmt_number(plan['choice'])}", "write the name you would pass to from_pretrained, "
                      "as a string", counts=False)
    malformed = malformed_reason(name, plan["why"], 'plan["why"]')   # a matter of form: not a wrong try
    if malformed is not None:
        return malformed
    why = plan["why"]
    if len(why.split()) < 3:
        return report(name, False, "why as one sentence", repr(plan["why"])[:60],
                      "say in one sentence why the implementation you chose peaks lower on this GPU")
    key = (round(values["sdpa"], 3), round(values["eager"], 3), choice)
    if _shape_already_run() and key not in ran.ran(_PASSED_KIND):
        return report(name, False, "a plan predicted before any dry run of this shape",
                      "a plan stored after a dry run that gives its peaks (about 4,096 tokens, eager "
                      "attention, or a GPU without fused attention)",
                      "that is a reading, not a prediction: predict from the config and the kernels as the hints "
                      "say, or ask for the answer with reveal=True", counts=False)
    want = _t4_peaks_mib()
    wrong = [impl for impl in T4_IMPLEMENTATIONS if abs(values[impl] - want[impl]) > T4_TOL * want[impl]]
    if wrong:
        # Which peak is off is told on the first two wrong plans only: a marker that never stops lets a learner scan
        # one peak in 10% steps with the other fixed until it reads "ok" (review #8).
        peaks_tried = f"{name}: peaks"
        first_two = tries(peaks_tried) < T4_MARKED_TRIES
        add_try(peaks_tried)
        if not first_two:
            return report(name, False, kind, "not both peaks within 5% (the choice is judged once both are right)",
                          "not it: list the tensors alive at each implementation's worst op, as the hints say")
        got = ", ".join(f"{impl} {'ok' if impl not in wrong else 'off'}" for impl in T4_IMPLEMENTATIONS)
        return report(name, False, kind, got + " (the choice is judged once both peaks are right)",
                      "; ".join(_t4_hint(impl, values[impl], want[impl], name) for impl in wrong))
    mine = min(values, key=values.get)
    if choice != mine:
        return report(name, False, kind, f"both peaks ok, choice {choice}",
                      "your choice is not the implementation your own two numbers say peaks lower")
    if not any(re.search(rf"(?<![a-z]){re.escape(w)}(?:s|ed|ing)?(?![a-z])", why.lower()) for w in _T4_REASON_WORDS):
        return report(name, False, "a why that names the mechanism", repr(why)[:80],
                      "not the numbers: say what the attention of the other implementation does on this GPU that "
                      "costs it more")
    reset_tries(f"{name}: peaks")
    ran.note(_PASSED_KIND, key, lasting=True)
    return report(name, True, kind, f"sdpa {values['sdpa']:,.0f} MiB, eager {values['eager']:,.0f} MiB "
                                    f"(dry run {want['sdpa']:,.0f} and {want['eager']:,.0f}): {choice}")


#: What the T4 does, printed under the table only after a pass or a reveal (an unseen reviewer found it in a markdown
#: box under the check, which JupyterLab shows while the learner works). torch 2.13 ``attention.cpp``
#: (``_scaled_dot_product_attention_math``: float32 unless ``allow_fp16_bf16_reduction_math_sdp``) and
#: ``sdp_utils.cpp`` (``select_sdp_backend``: flash and memory-efficient need sm_80+ for bf16); vramlab.vram.kernels.
_T4_READING = ("What the T4 does: it has no fused attention kernel for bf16, so sdpa runs PyTorch's math path,\n"
              "in float32 since torch 2.5 (attention.cpp): about 9 bytes per score element against eager's 8. An\n"
              "A100's flash kernel never holds the scores. The kernel sets the cost, not the name.\n"
              "Try next: torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True) skips the math path's float32\n"
              "upcast. Predict the T4's sdpa peak with it, then run\n"
              "dry_run(..., allow_fp16_bf16_reduction_math_sdp=True).")


def t4_comparison(result: Any) -> None:
    """Print the capstone's dry runs (A100 and T4, sdpa and eager) once Exercise 5 passed or was revealed; before
    that, print one line saying so. ``result``: Exercise 5's :class:`CheckResult`."""
    if not opened_by(result, "check_t4_plan"):
        print("The comparison appears here once Exercise 5 passes (or after reveal=True).")
        return
    print(f"{'GPU':<6}{'attention':<10}{'kernel':>8}{'peak (MiB)':>12}  where the peak is")
    for gpu in ("A100", "T4"):
        for impl in T4_IMPLEMENTATIONS:
            t = _t4_reference(impl, gpu=gpu)
            print(f"{gpu:<6}{impl:<10}{t.sdpa_kernel or '-':>8}{t.peak_bytes / MiB:>12,.0f}  "
                  f"{t.peak['module']} ({t.peak['op']})")
    print("dry runs of SmolLM2-135M, bf16, 4 x 4,096, torch 2.13 kernels; computed on the meta device, no GPU")
    print(_T4_READING)
