"""Reading GPU memory: the numbers inside PyTorch's CUDA out-of-memory message.

PyTorch's caching allocator (``c10/cuda/CUDACachingAllocator.cpp``) prints sizes with
``format_size``: two decimals, ``"bytes"`` up to 1024 bytes, then ``KiB``, ``MiB``, ``GiB``
(powers of 1024). Older builds and other allocators (MPS) print ``KB``/``MB``/``GB`` meaning the
same powers of 1024, so this parser reads both as binary units.

Three message generations are understood:

* current (PyTorch 2.1+): ``Tried to allocate X. GPU n has a total capacity of T of which F is
  free. [Process p has M memory in use.] Including non-PyTorch memory, this process has U memory
  in use. Of the allocated memory A is allocated by PyTorch, and R is reserved by PyTorch but
  unallocated.`` (2.1 spelled "capacty").
* older (1.x-2.0): ``Tried to allocate X (GPU n; T total capacity; A already allocated; F free;
  [Y allowed; ]V reserved in total by PyTorch)``; reserved-but-unallocated is V - A. The ``allowed_info``
  ("Y allowed; ") is printed from 1.8 on when ``set_per_process_memory_fraction`` set a cap: such a message
  is a cap (verdict "cap"). Format string: ``"CUDA out of memory. Tried to allocate ", format_size(alloc_size),
  " (GPU ", device, "; ", format_size(device_total), " total capacity; ", ... " already allocated; ",
  format_size(device_free), " free; ", allowed_info, ... " reserved in total by PyTorch)"`` in
  ``c10/cuda/CUDACachingAllocator.cpp`` of the 1.8-1.13 series (read in copies of that file found with the
  code search; the pytorch/pytorch tag itself was not opened).
* oldest (1.0-1.3): ``... A already allocated; F free; C cached)``; "cached" was already the
  reserved-but-unallocated part (the allocator's comment above the message: '"cached": memory held
  by the allocator but not used by the program').

The current message, as ``DeviceCachingAllocator::malloc`` builds it (pytorch/pytorch
``c10/cuda/CUDACachingAllocator.cpp``, read at commit 001074d2, the 2.x series): ``"CUDA out of memory.
Tried to allocate " format_size(alloc_size) ". GPU " n " has a total capacity of " format_size(total)
" of which " format_size(free) " is free. " proc_info allowed_info "Of the allocated memory " ...``
where ``proc_info`` (from NVML, when the driver lists processes) holds ``Process <pid> has <X> memory in
use.`` for each process and ``Including non-PyTorch memory, this process has <X> memory in use.`` for this
one (real messages show either or both), and ``allowed_info`` is ``"<Y> allowed; "``
only when ``torch.cuda.set_per_process_memory_fraction`` set a cap. Both are read too. Later 2.x releases
add ``with <P> allocated in private pools (e.g., CUDA Graphs), `` after "is allocated by PyTorch, " (A then
includes P). ROCm builds print the same text with "HIP out of memory".

Pasted text is cleaned first (:func:`vramlab.logtext.flatten`: colour codes, prefixes, wraps; bytes are
decoded), and only a window of 4,000 characters from the message's first phrase is parsed, so a long log
costs one scan. Every number pattern is bounded and cannot start inside a run of digits (linear).

:func:`oom_verdict` judges the numbers (cap, fragmentation or shortage); the vLLM log triage
(:mod:`vramlab.serving.triage`) uses it for the allocator OOMs it finds, so the dependency runs one way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from vramlab.logtext import as_text, bounded, flatten, loose

# Binary multipliers, as torch's format_size uses them (and "GB"/"MB"/"KB" in older prints).
_UNITS = {"bytes": 1, "byte": 1, "b": 1, "kib": 1 << 10, "kb": 1 << 10, "mib": 1 << 20, "mb": 1 << 20,
          "gib": 1 << 30, "gb": 1 << 30, "tib": 1 << 40, "tb": 1 << 40}
# Bounded and anchored: the look-behind stops a match from starting inside a run of digits, and at most 15
# digits are read, so a 100k-digit run costs one pass (an unbounded ``\d+`` here took 65 s on 16k digits).
_SIZE = r"(?<![\d.])(\d{1,15}(?:\.\d{1,6})?) ?(bytes|byte|[KMGT] ?i? ?B|B)\b"   # "G iB": a wrap inside the unit


def parse_size(text: str) -> int:
    """``"2.00 GiB"`` -> 2147483648 bytes; accepts bytes, KiB/MiB/GiB/TiB and KB/MB/GB (binary)."""
    if not isinstance(text, str):
        raise ValueError(f"`text` must be a size as a str like '2.00 GiB' or '512 bytes' (got {type(text).__name__}).")
    m = re.fullmatch(r"\s{0,64}" + _SIZE + r"\s{0,64}", text[:256], flags=re.IGNORECASE) if len(text) <= 256 else None
    if not m:
        raise ValueError(f"`text` {text[:80]!r} is not a size like '2.00 GiB' or '512 bytes'.")
    return _bytes(m)


def _bytes(m: re.Match, num: int = 1) -> int:
    return int(round(float(m.group(num)) * _UNITS[m.group(num + 1).lower().replace(" ", "")]))


def _find(pattern: str, text: str) -> int | None:
    m = re.search(pattern, text, flags=re.IGNORECASE)
    return _bytes(m) if m else None


# The phrases of the messages, each allowed one wrap break inside a word (see vramlab.logtext.loose).
_L = loose
_ANCHORS = [re.compile(_L("tried to allocate")), re.compile(_L("total capa") + r" ?c? ?i? ?t ?y"),
            re.compile(_L("out of memory"))]
_CURRENT = _L("has a total ") + r"capa ?c? ?i? ?t ?y"   # 2.1 printed "capacty"


VERDICTS = ("cap", "fragmentation", "shortage")
# format_size prints two decimals of the unit it picks: "15.77 GiB" is off by up to 0.005 GiB, 0.03%; 0.5% is
# far above that and far below any cap a user sets on purpose (a fraction of 0.995 or less).
_ROUNDING = 0.005


@dataclass
class OOMReport:
    """Numbers from one torch OOM message (bytes; None when the message does not state them)."""

    tried_bytes: int | None
    total_bytes: int | None
    free_bytes: int | None
    allocated_bytes: int | None              # allocated by PyTorch (live tensors)
    reserved_unallocated_bytes: int | None   # reserved by PyTorch's cache but not in use
    device: int | None
    format: str                              # "current", "older", "oldest" or "unknown"
    allowed_bytes: int | None = None         # the per-process cap ("X allowed; "), if one was set
    process_bytes: int | None = None         # "this process has X memory in use" (incl. non-PyTorch)
    other_processes: dict[int, int] | None = None  # "Process <pid> has X memory in use" -> {pid: bytes}

    @property
    def reserved_bytes(self) -> int | None:
        """Reserved by PyTorch in total (allocated + reserved-but-unallocated)."""
        if self.allocated_bytes is None or self.reserved_unallocated_bytes is None:
            return None
        return self.allocated_bytes + self.reserved_unallocated_bytes

    @property
    def capped(self) -> bool:
        """True when the message names a per-process cap below the device's capacity.

        PyTorch prints ``"<Y> allowed; "`` whenever ``set_per_process_memory_fraction`` was called, with
        ``Y = fraction x total`` (``allowed_memory_maximum`` in ``DeviceCachingAllocator::setMemoryFraction``,
        ``c10/cuda/CUDACachingAllocator.cpp``, read at commit 001074d2, 2.x; the 1.8-1.13 message has the same
        clause). A fraction of 1.0 prints the total capacity itself: that limits nothing, so such a message is judged on its free and cached numbers like any other. Both
        sizes pass through ``format_size`` (two decimals), so "equal" allows that rounding (0.5%)."""
        if self.allowed_bytes is None:
            return False
        if self.total_bytes is None:
            return True
        return self.allowed_bytes < self.total_bytes * (1 - _ROUNDING)

    @property
    def verdict(self) -> str | None:
        """``"cap"`` when a per-process limit refused the allocation (the message prints "X allowed" with X
        below the total capacity: :attr:`capped`),
        or, in the current format, the device had at least the requested size free), ``"fragmentation"``
        when the cache already holds at least the requested size unused (not in one piece), else
        ``"shortage"``; None if unknown. The rule is :func:`oom_verdict`'s; the older
        formats predate per-process caps (PyTorch 1.8), so their free figure is not read as a cap."""
        if self.tried_bytes is None or self.reserved_unallocated_bytes is None:
            return None
        if self.capped:
            return "cap"
        free = self.free_bytes if self.format == "current" else None
        return oom_verdict(self.tried_bytes, free, self.reserved_unallocated_bytes)


def parse_oom_message(text: str) -> OOMReport:
    """Extract tried / total / free / allocated / reserved-but-unallocated bytes from a torch
    CUDA (or ROCm "HIP") OOM message in any of its formats (see the module docstring). The text may be
    wrapped, coloured or prefixed as a pasted log is (it is cleaned as :func:`vramlab.logtext.flatten`
    does); bytes are decoded. Anything else raises one ``ValueError``."""
    text = flatten(bounded(as_text(text))[0])
    # Read only the message itself: find its first phrase (one pass each, in this order), then parse a window
    # of 4,000 characters from just before it. A long log then costs one scan, not one per number.
    low = text.lower()
    anchor = None
    for pat in _ANCHORS:
        anchor = pat.search(low)
        if anchor:
            break
    if anchor is None:
        return OOMReport(None, None, None, None, None, None, "unknown")
    text = text[max(0, anchor.start() - 300):anchor.start() + 4000]
    tried = _find(_L("Tried to allocate") + " ?" + _SIZE, text)
    dev_m = re.search(r"\b(?:GPU|HIP|device) ?(\d{1,4})\b", text)
    device = int(dev_m.group(1)) if dev_m else None
    if re.search(_CURRENT, text, flags=re.IGNORECASE):
        total = _find(r"total capa ?c? ?i? ?t ?y " + _L("of") + " ?" + _SIZE, text)
        free = _find(_L("of which") + " ?" + _SIZE + " ?" + _L("is free"), text)
        # "Of the allocated memory A is allocated by PyTorch, [with P allocated in private pools (e.g., CUDA
        # Graphs), ]and R is reserved by PyTorch but unallocated." (A includes P)
        allocated = _find(_L("Of the allocated memory") + " ?" + _SIZE + " ?" + _L("is allocated by PyTorch"), text)
        unalloc = _find(_SIZE + " ?" + _L("is reserved by PyTorch but unallocated"), text)
        allowed = _find(_SIZE + " ?" + _L("allowed;"), text)
        process = _find(_L("this process has") + " ?" + _SIZE + " ?" + _L("memory in use"), text)
        others = {int(m.group(1)): _bytes(m, 2)
                  for m in re.finditer(_L("Process") + r" ?(\d{1,10}) ?" + _L("has") + " ?" + _SIZE + " ?"
                                       + _L("memory in use"), text, flags=re.IGNORECASE)}
        return OOMReport(tried, total, free, allocated, unalloc, device, "current", allowed, process,
                         others or None)
    total = _find(_SIZE + " ?" + _L("total capacity"), text)
    allocated = _find(_SIZE + " ?" + _L("already allocated"), text)
    free = _find(_SIZE + " ?" + _L("free;"), text) or _find(_SIZE + " ?" + r"f ?r ?e ?e\b", text)
    # 1.8-1.13 print "F free; X allowed; V reserved in total by PyTorch)" when a per-process fraction is set
    allowed = _find(_SIZE + " ?" + _L("allowed;"), text)
    reserved = _find(_SIZE + " ?" + _L("reserved in total by PyTorch"), text)
    if reserved is not None:
        unalloc = None if allocated is None else max(reserved - allocated, 0)
        return OOMReport(tried, total, free, allocated, unalloc, device, "older", allowed)
    cached = _find(_SIZE + " ?" + r"c ?a ?c ?h ?e ?d\b", text)
    if cached is not None:
        return OOMReport(tried, total, free, allocated, cached, device, "oldest")
    return OOMReport(tried, total, free, allocated, None, device, "older" if total is not None else "unknown",
                     allowed)


def oom_verdict(tried_bytes: int | None, free_bytes: int | None, reserved_unallocated_bytes: int | None) -> str | None:
    """Why did a PyTorch allocation of ``tried_bytes`` fail? ``"cap"`` when the device had at least that much
    free (so a per-process limit refused it), ``"fragmentation"`` when PyTorch's cache already held at least
    that much unused (not in one piece), else ``"shortage"``. None when the message lacks the numbers.

    What the numbers mean at that moment (``DeviceCachingAllocator::malloc``, ``c10/cuda/CUDACachingAllocator.cpp``,
    pytorch/pytorch @ 001074d2): before the message is built the allocator has already released every cached
    segment that was entirely free and retried (``release_cached_blocks``), so "reserved but unallocated" is free
    space *inside segments that still hold a live tensor*: a pattern that only leaves whole free segments behind
    never ends in an OOM. A MIG slice reports its own total and free memory, so its OOM is judged like any GPU's
    (a shortage in the slice, not a cap). On Windows under WDDM the free figure can overstate what the process
    may get, so a message there can read as ``"cap"`` without any "allowed" in it."""
    for name, v in (("tried_bytes", tried_bytes), ("free_bytes", free_bytes),
                    ("reserved_unallocated_bytes", reserved_unallocated_bytes)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0):
            raise ValueError(f"`{name}` must be a number of bytes >= 0 or None (got {v!r}).")
    if tried_bytes is None or (free_bytes is None and reserved_unallocated_bytes is None):
        return None
    if free_bytes is not None and free_bytes >= tried_bytes:
        return "cap"
    if reserved_unallocated_bytes is not None and reserved_unallocated_bytes >= tried_bytes:
        return "fragmentation"
    return "shortage"


__all__ = ["OOMReport", "VERDICTS", "oom_verdict", "parse_oom_message", "parse_size"]
