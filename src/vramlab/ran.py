"""What the learner already ran in this kernel: one registry, one reset.

A capstone's check refuses a design stored after the learner ran the very setup that answers it (lab 03: a
``cpu_plan`` of one of the design's engines; lab 04: the capstone's burst in the scheduler simulator or on the
engine; lab 06: a replay of the learner's device map; lab 08: a dry run of the T4 plan's shape), and still passes a
design that passed before that run (Run All again). The runs and the passes are noted here, by
kind, as hashable keys:

- ``"burst"``: ``(num_blocks, ((prompt tokens, new tokens), ...))`` noted by ``vramlab.serving.paged.simulate``
  and ``vramlab.serving.recorded.runs`` (read by ``paged.burst_was_run``);
- ``"dry_run shape"``: ``(batch_size, seq_len, dtype name, compute capability, attn_implementation)`` noted by
  ``vramlab.vram.dryrun.dry_run`` (read by ``dryrun.shape_was_run`` and lab 08's check);
- ``"replayed map"``: ``vramlab.dispatch.replay.design_key(trace, model, device_map)`` (the trace's shape and the
  weights off GPU 0) noted by ``vramlab.dispatch.replay`` and by lab 06's check when it shows a replay (read by
  ``replay.design_was_replayed``);
- ``"cpu plan"``: ``vramlab.serving.vllm_memory.cpu_startup_key(...)`` (bytes per block, blocks per request, KV
  bytes, override) noted by ``vllm_memory.cpu_plan`` and lab 03's private ``_service_startup`` (read by
  ``vllm_memory.cpu_startup_was_planned`` and lab 03's capstone check);
- ``"passed <check>"``: the designs a capstone check passed before its setup ran; ``"predicted design"``: lab 06's
  recorded predictions, ``((prompts per call, placement), KV cache GiB, copy GiB, order)``;
- ``"explained log"`` / ``"explained log line"``: hashes of what ``vramlab.bnb.logs.explain_log`` read (read by
  ``logs.was_explained``); ``"predicted binary (lab 07)"``: ``(order, file name)`` of lab 07's binary predictions,
  and ``"binary log before a prediction (lab 07)"``: the capstone's log was shown before any prediction;
- ``"stored prediction"``: ``(what, order, value)`` of ``checks.check_prediction`` without a measurement, and
  ``"prediction measured"``: each ``what`` whose measurement was compared (a prediction is the one stored before).

:func:`_forget` is the one reset (a fresh kernel; ``tests/conftest.py`` calls it around every test). A check's own
reference runs go inside :func:`_unrecorded`. Both are private:
a learner who calls them skips every guard (review #4 did, in labs 06, 07 and 08). This module imports nothing from vramlab, so the simulator, the dry
run and ``vramlab.checks._core`` (which re-exports it) can all use it without an import circle.
"""

from __future__ import annotations

import contextlib
from typing import Hashable, Iterator

_RAN: dict[str, set] = {}
_RECORDING = [True]


def note(kind: str, key: Hashable) -> None:
    """Remember that ``key`` of ``kind`` (``"burst"``, ``"dry_run shape"``, ...) ran here (not inside
    :func:`_unrecorded`)."""
    if _RECORDING[-1]:
        _RAN.setdefault(kind, set()).add(key)


def ran(kind: str) -> frozenset:
    """Every key of ``kind`` noted since the last :func:`_forget` (empty when none)."""
    return frozenset(_RAN.get(kind, ()))


def _forget() -> None:
    """Forget everything noted so far, of every kind: what a fresh kernel knows (the tests call it)."""
    _RAN.clear()


@contextlib.contextmanager
def _unrecorded() -> Iterator[None]:
    """Nothing noted inside the block is remembered (a check's own reference runs are not the learner's)."""
    _RECORDING.append(False)
    try:
        yield
    finally:
        _RECORDING.pop()


__all__ = ["note", "ran"]
