"""Checks for notebook 07 (watch VRAM live, the caching allocator, a real OOM).

References are vramlab's own functions (``vramlab.vram.parse_oom_message``,
``vramlab.vram.allocator.simulate``), so a check and the lesson cannot disagree.
"""

from __future__ import annotations

import math
from typing import Any

from vramlab.vram.allocator import MiB, simulate
from vramlab.checks._core import CheckResult, as_float, direction, exercise, fmt_number, is_untouched, report
from vramlab.vram import parse_oom_message

__all__ = ["check_oom_numbers", "check_reserved_prediction", "check_cap_oom_reason"]

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


@exercise("lab07", 1, _oom_answer)
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
        return report(name, False, f"{key} as a number of GiB", f"{key} = {value:g}, {direction(value, want[key])}", hint)
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
    real = actual if actual is not None else reserved_reference()
    return (f"default {real['default'] / MiB:g} MiB, expandable {real['expandable'] / MiB:g} MiB"
            + ("" if actual is not None else " (the allocator model; the GPU run may differ)"))


@exercise("lab07", 2, _reserved_answer, prediction=True)
def check_reserved_prediction(pred: Any, actual: dict | None = None) -> CheckResult:
    """``pred``: ``{"default": MiB, "expandable": MiB}``, your prediction of ``memory_reserved`` after the
    fragmentation pattern. Without ``actual`` the check only confirms a prediction is stored (no reveal);
    with ``actual`` (``{"default": bytes, "expandable": bytes}``, measured or computed) it says how far off
    each number is. Any honest numeric prediction passes: this check teaches, it does not grade."""
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
        parts.append(f"{label}: predicted {guess:g}, actual {real:g} MiB ({off:+g} MiB)")
    return report(name, True, "", "; ".join(parts))


_CAP_CHOICES = {
    "a": "the GPU driver had no memory left",
    "b": "PyTorch's allocator refuses to reserve past fraction x total for this process, whatever the device has free",
    "c": "fragmentation: the free memory was in pieces too small for the request",
    "d": "another process took the free memory between the allocation and the message",
}
# Why b: DeviceCachingAllocator::alloc_block returns "out of memory" when
# ``set_fraction && total_allocated_memory + size > allowed_memory_maximum``, before cudaMalloc
# (c10/cuda/CUDACachingAllocator.cpp, pytorch/pytorch @ 001074d2).
_CAP_HINTS = {
    "a": "the message itself says most of the device is free, so the driver could still hand out memory",
    "c": "with a cap the allocator does not even ask CUDA: the limit is checked before cudaMalloc",
    "d": "the free figure is read at the moment of the failure, and the other processes are listed separately",
}


def _cap_answer(**_) -> str:
    return f"'b': {_CAP_CHOICES['b']}"


@exercise("lab07", 3, _cap_answer)
def check_cap_oom_reason(answer: Any) -> CheckResult:
    """``answer``: one letter, ``"a"``-``"d"``: why does a process under
    ``torch.cuda.set_per_process_memory_fraction`` get an OOM while the GPU has memory free?"""
    name = "why a capped process runs out of memory"
    if not isinstance(answer, str) or answer.strip().lower() not in _CAP_CHOICES:
        return report(name, False, "one of the letters a, b, c, d", fmt_number(answer), "pick a letter, as a string")
    letter = answer.strip().lower()
    if letter == "b":
        return report(name, True, "", f"b: {_CAP_CHOICES['b']}")
    return report(name, False, "the letter that explains it", f"{letter}: {_CAP_CHOICES[letter]}",
                  _CAP_HINTS[letter])


def reserved_reference() -> dict:
    """The allocator model's reserved bytes after the pattern: ``{"default": ..., "expandable": ...}``."""
    return {"default": simulate(expandable=False).reserved, "expandable": simulate(expandable=True).reserved}
