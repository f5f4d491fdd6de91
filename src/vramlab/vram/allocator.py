"""PyTorch's CUDA caching allocator: a small model of it, and real experiments in subprocesses.

Two halves:

* :func:`simulate` - a teaching model of the allocator's *large pool* (requests above 1 MiB) with the
  rules of ``c10/cuda/CUDACachingAllocator.cpp`` (pytorch/pytorch, read at commit 001074d2, 2.x):
  sizes rounded up to 512 bytes (``kMinBlockSize``); on a miss a new segment of
  ``get_allocation_size``: 20 MiB (``kLargeBuffer``) for requests under 10 MiB (``kMinLargeAlloc``),
  else the size rounded up to 2 MiB (``kRoundLarge``); best fit (the smallest free cached block that
  is large enough); a block is split when more than 1 MiB (``kSmallSize``) would remain; freed blocks
  merge with free neighbours *in the same segment*, and cached segments are never returned
  (no ``empty_cache``). With ``expandable_segments:True`` there is one segment that grows by mapping
  20 MiB pages (the large pool's page, "Note [Expandable Segments]") at its end, so freed memory
  always merges. Simplified: one stream, no small pool, no OOM retry, no ``max_split_size_mb``,
  no ``garbage_collection_threshold``, no ``roundup_power2_divisions``.

What the model leaves out, as the real allocator does it (issue 28's review; each taught in notebook 08):

* **"Tried to allocate" is the segment, not the tensor, for small requests.** ``DeviceCachingAllocator::malloc``
  prints ``format_size(alloc_size)`` with ``alloc_size = get_allocation_size(size)`` (the same file, @ 001074d2):
  a tensor of 1 MiB or less that needs a new segment reads "Tried to allocate 2.00 MiB", one under 10 MiB reads
  "Tried to allocate 20.00 MiB" (:func:`allocation_size`).
* **Expandable segments need the CUDA driver API.** ``CUDAAllocatorConfig::expandable_segments()``
  (``c10/cuda/CUDAAllocatorConfig.h`` as shipped in the torch 2.13.0 wheel) returns false and warns once
  "expandable_segments not supported on this platform" when the build lacks ``PYTORCH_C10_DRIVER_API_SUPPORTED``
  (Windows builds; ROCm before 7.0), so the setting is ignored there.
* **One expandable segment per stream and per pool**, not one per process: small requests (<= 1 MiB) get their
  own with 2 MiB pages (``kSmallBuffer``); the large pool's page is 20 MiB, which torch 2.13 makes configurable
  as ``large_segment_size_mb`` (``AcceleratorAllocatorConfig::large_segment_size_``, default 20971520,
  ``c10/core/AllocatorConfig.h`` of the 2.13.0 wheel; the parser's message "CachingAllocator option
  large_segment_size_mb must be > " is in that wheel's libc10.so).
* **Cached is not always "until empty_cache()".** Besides ``empty_cache()`` and the free-and-retry after a failed
  ``cudaMalloc`` (``release_cached_blocks``), ``max_split_size_mb`` lets ``release_available_cached_blocks`` free
  cached blocks larger than it before a retry, and ``garbage_collection_threshold`` (with a per-process fraction
  set) frees cached blocks that have not been reused once reserved memory passes that share of the cap, without
  a device synchronisation (pytorch/pytorch#74261, which added it; pytorch#134338 keeps both away from
  expandable segments).
* :func:`run_experiment` - runs one experiment in a fresh Python process, because
  ``PYTORCH_CUDA_ALLOC_CONF`` / ``PYTORCH_ALLOC_CONF`` (both are set: :func:`alloc_conf_env`) is parsed when the
  allocator starts, so setting it later in a running kernel changes nothing (torch's private
  ``torch.cuda.memory._set_allocator_settings`` can switch some options at run time, but segments
  already cached stay as they are), and because an OOM must not wedge the notebook's kernel.
  Experiments: ``fragmentation`` (8 x 16 MiB, free, 4 x 32 MiB), ``oom`` (allocate under
  ``torch.cuda.set_per_process_memory_fraction`` until the allocator refuses), ``snapshot``
  (``torch.cuda.memory._record_memory_history`` + ``_snapshot``). Without CUDA the child prints a
  labelled CPU-mode result: the model's numbers (``fragmentation``, ``snapshot``) or a real CPU
  out-of-memory under an address-space cap (``oom``; ``resource.RLIMIT_AS``, Linux).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30

# c10/cuda/CUDACachingAllocator.cpp (pytorch/pytorch @ 001074d2)
K_MIN_BLOCK_SIZE = 512            # all sizes are rounded to at least 512 bytes
K_SMALL_SIZE = 1 * MiB            # largest "small" allocation
K_MIN_LARGE_ALLOC = 10 * MiB      # allocations between 1 and 10 MiB may use kLargeBuffer
K_LARGE_BUFFER = 20 * MiB         # segment for those; also the large pool's expandable page
K_ROUND_LARGE = 2 * MiB           # round up large allocations to 2 MiB

# The pattern of the PyTorch devlog (2026-06-01) in REFERENCE: 8 x 16 MiB, free them, 4 x 32 MiB.
FRAGMENTATION_PATTERN: list[tuple] = ([("alloc", f"a{i}", 16 * MiB) for i in range(8)]
                                      + [("free", f"a{i}") for i in range(8)]
                                      + [("alloc", f"b{i}", 32 * MiB) for i in range(4)])

RESULT_PREFIX = "VRAMLAB_RESULT "


def round_size(size: int) -> int:
    """The allocator's ``round_size`` for the large pool: up to a multiple of 512 bytes."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise ValueError(f"`size` must be a non-negative number of bytes (got {size!r}).")
    return K_MIN_BLOCK_SIZE * -(-size // K_MIN_BLOCK_SIZE)


def allocation_size(size: int) -> int:
    """``get_allocation_size``: bytes cudaMalloc'ed for a new segment serving ``size`` (large pool)."""
    if size <= K_SMALL_SIZE:
        return 2 * MiB
    if size < K_MIN_LARGE_ALLOC:
        return K_LARGE_BUFFER
    return K_ROUND_LARGE * -(-size // K_ROUND_LARGE)


@dataclass
class _Block:
    segment: int
    offset: int
    size: int
    allocated: bool = False


@dataclass
class SimResult:
    """What :func:`simulate` returns: the trace (one row per event) and the final counters (bytes)."""

    expandable: bool
    trace: list[dict] = field(default_factory=list)
    allocated: int = 0
    reserved: int = 0
    peak_reserved: int = 0
    segments: int = 0

    @property
    def reserved_unallocated(self) -> int:
        return self.reserved - self.allocated


def _check_pattern(pattern) -> list[tuple]:
    if not isinstance(pattern, (list, tuple)) or not pattern:
        raise ValueError("`pattern` must be a non-empty list of ('alloc', name, bytes) / ('free', name) steps.")
    out = []
    for i, step in enumerate(pattern):
        if not isinstance(step, (list, tuple)) or not step or step[0] not in ("alloc", "free"):
            raise ValueError(f"`pattern[{i}]` = {step!r} is not ('alloc', name, bytes) or ('free', name).")
        if step[0] == "alloc":
            if len(step) != 3 or isinstance(step[2], bool) or not isinstance(step[2], int) or step[2] <= K_SMALL_SIZE:
                raise ValueError(f"`pattern[{i}]` = {step!r}: an alloc needs a size in bytes above 1 MiB "
                                 f"(the model covers the large pool only).")
        elif len(step) != 2:
            raise ValueError(f"`pattern[{i}]` = {step!r}: a free is ('free', name).")
        out.append(tuple(step))
    return out


def simulate(pattern=None, expandable: bool = False) -> SimResult:
    """Replay ``pattern`` (default :data:`FRAGMENTATION_PATTERN`) through the allocator model.

    ``pattern``: steps ``("alloc", name, bytes)`` (bytes > 1 MiB) and ``("free", name)``. Returns a
    :class:`SimResult` whose ``trace`` rows hold ``step, action, name, size, allocated, reserved``
    (bytes) after each event; actions are ``alloc``, ``free``, ``segment_alloc`` (default) and
    ``segment_map`` (expandable: pages mapped onto the one segment).
    """
    steps = _check_pattern(FRAGMENTATION_PATTERN if pattern is None else pattern)
    res = SimResult(expandable=bool(expandable))
    blocks: list[_Block] = []            # all blocks, ordered by (segment, offset)
    live: dict[str, _Block] = {}
    seg_sizes: list[int] = []

    def emit(action: str, name: str, size: int) -> None:
        res.allocated = sum(b.size for b in blocks if b.allocated)
        res.reserved = sum(seg_sizes)
        res.peak_reserved = max(res.peak_reserved, res.reserved)
        res.trace.append({"step": len(res.trace), "action": action, "name": name, "size": size,
                          "allocated": res.allocated, "reserved": res.reserved})

    def order() -> None:
        blocks.sort(key=lambda b: (b.segment, b.offset))

    for step in steps:
        if step[0] == "alloc":
            _, name, want = step
            if name in live:
                raise ValueError(f"`pattern`: {name!r} is allocated twice without a free in between.")
            size = round_size(want)
            free = [b for b in blocks if not b.allocated and b.size >= size]
            if free:
                block = min(free, key=lambda b: (b.size, b.segment, b.offset))   # best fit
            elif not expandable:
                seg_sizes.append(allocation_size(size))
                block = _Block(len(seg_sizes) - 1, 0, seg_sizes[-1])
                blocks.append(block)
                emit("segment_alloc", name, seg_sizes[-1])
            else:
                if not seg_sizes:
                    seg_sizes.append(0)
                tail = blocks[-1] if blocks and not blocks[-1].allocated else None
                have = tail.size if tail else 0
                grow = K_LARGE_BUFFER * -(-(size - have) // K_LARGE_BUFFER)
                if tail is None:
                    tail = _Block(0, seg_sizes[0], 0)
                    blocks.append(tail)
                tail.size += grow
                seg_sizes[0] += grow
                block = tail
                emit("segment_map", name, grow)
            remaining = block.size - size
            split = remaining >= K_MIN_BLOCK_SIZE if expandable else remaining > K_SMALL_SIZE
            if split:
                blocks.append(_Block(block.segment, block.offset + size, remaining))
                block.size = size
                order()
            block.allocated = True
            live[name] = block
            emit("alloc", name, block.size)
        else:
            _, name = step
            if name not in live:
                raise ValueError(f"`pattern`: {name!r} is freed but was not allocated.")
            block = live.pop(name)
            block.allocated = False
            freed = block.size
            order()
            i = blocks.index(block)
            # merge with the free neighbours in the same segment (addresses adjacent)
            if i + 1 < len(blocks) and not blocks[i + 1].allocated and blocks[i + 1].segment == block.segment:
                block.size += blocks.pop(i + 1).size
            if i > 0 and not blocks[i - 1].allocated and blocks[i - 1].segment == block.segment:
                blocks[i - 1].size += blocks.pop(i).size
            emit("free", name, freed)
    res.segments = len(seg_sizes)
    return res


# ------------------------------------------------------------------------------------------------
# Experiments in a subprocess
# ------------------------------------------------------------------------------------------------

EXPERIMENTS = ("fragmentation", "oom", "snapshot")


@dataclass
class ExperimentRun:
    """One child process: its exit code, the JSON result it printed (if any), and its stderr tail."""

    experiment: str
    alloc_conf: str | None
    returncode: int
    result: dict | None
    stderr_tail: str

    @property
    def failed(self) -> bool:
        return self.returncode != 0

    @property
    def oom_message(self) -> str | None:
        """The out-of-memory line from the child's stderr (CUDA or CPU allocator), if there is one."""
        for line in reversed(self.stderr_tail.splitlines()):
            if "out of memory" in line or "can't allocate memory" in line or "not enough memory" in line:
                return line.strip()
        return None


# The allocator settings' two names. PyTorch before 2.8 reads only the old one. From 2.8 the new one exists and
# 2.8-2.11 warn "PYTORCH_CUDA_ALLOC_CONF is deprecated, use PYTORCH_ALLOC_CONF instead" (AllocatorConfig.cpp) when
# the old one is set, yet torch 2.9.1 silently ignores PYTORCH_ALLOC_CONF=expandable_segments:True for CUDA
# (pytorch/pytorch#183387; fixed by 2.11). In torch 2.13 the device allocator's settings (expandable_segments,
# max_split_size_mb, garbage_collection_threshold, large_segment_size_mb) live in AcceleratorAllocatorConfig,
# parsed in c10/core/AllocatorConfig.cpp; its header's comment calls PYTORCH_ALLOC_CONF "primary", yet with both
# names set the 2.13.0 build keeps PYTORCH_CUDA_ALLOC_CONF's value and drops the other entirely
# (torch._C._accelerator_getAllocatorSettings() with PYTORCH_ALLOC_CONF=garbage_collection_threshold:0.5 and
# PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:200 returns 'max_split_size_mb:200'; run for this lab on
# 2.13.0+cpu). CUDAAllocatorConfig::instance() (c10/cuda/CUDAAllocatorConfig.h) reads the old name first too.
# So: set both to the same value; every release then uses it.
ALLOC_CONF_NAMES = ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")


def alloc_conf_env(value: str | None, env: dict | None = None) -> dict:
    """A copy of ``env`` (default ``os.environ``) with both allocator-setting names set to ``value`` (None: both
    removed), which every PyTorch release honours (see :data:`ALLOC_CONF_NAMES`)."""
    if value is not None and not isinstance(value, str):
        raise ValueError(f"`value` must be a string such as 'expandable_segments:True', or None (got {value!r}).")
    env = dict(os.environ if env is None else env)
    for name in ALLOC_CONF_NAMES:
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def _child_env(alloc_conf: str | None) -> dict:
    env = alloc_conf_env(alloc_conf)
    src = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


EXPERIMENT_OPTIONS = {"oom": ("cap_bytes", "chunk_bytes")}   # byte counts the child reads (see _child_oom)


def _check_options(experiment: str, options: dict) -> None:
    """One sentence for an unknown option or a byte count that is not a positive integer (a chunk of 0
    would loop until the timeout; a negative cap would end in a bare MemoryError in the child)."""
    allowed = EXPERIMENT_OPTIONS.get(experiment, ())
    for key, value in options.items():
        if key not in allowed:
            raise ValueError(f"`{key}` is not an option of the {experiment!r} experiment; "
                             f"use {', '.join(allowed) if allowed else 'no options'}.")
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"`{key}` must be a positive number of bytes (got {value!r}).")


def run_experiment(experiment: str, alloc_conf: str | None = None, timeout_s: float = 180.0,
                   **options) -> ExperimentRun:
    """Run ``experiment`` (``"fragmentation"``, ``"oom"`` or ``"snapshot"``) in a fresh Python process
    with ``PYTORCH_ALLOC_CONF`` and ``PYTORCH_CUDA_ALLOC_CONF`` both set to ``alloc_conf`` (None: both unset). ``options`` go to the child as JSON
    (``oom``: ``cap_bytes``, ``chunk_bytes``). The child prints one JSON result line; an experiment
    meant to fail (``oom``) exits non-zero and this process carries on."""
    if experiment not in EXPERIMENTS:
        raise ValueError(f"`experiment` {experiment!r} is unknown; use one of {', '.join(EXPERIMENTS)}.")
    if alloc_conf is not None and not isinstance(alloc_conf, str):
        raise ValueError(f"`alloc_conf` must be a string such as 'expandable_segments:True' (got {alloc_conf!r}).")
    _check_options(experiment, options)
    cmd = [sys.executable, "-m", "vramlab.vram.allocator", experiment, json.dumps(options)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=_child_env(alloc_conf))
    result = None
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT_PREFIX):
            result = json.loads(line[len(RESULT_PREFIX):])
    return ExperimentRun(experiment, alloc_conf, proc.returncode, result, proc.stderr[-6000:])


def fragmentation(expandable: bool = False, timeout_s: float = 180.0) -> ExperimentRun:
    """The fragmentation pattern in a child process, default or ``expandable_segments:True``."""
    return run_experiment("fragmentation", "expandable_segments:True" if expandable else None, timeout_s)


# --- the child side ----------------------------------------------------------------------------------

def _emit(result: dict) -> None:
    print(RESULT_PREFIX + json.dumps(result), flush=True)


def _alloc_conf() -> tuple[str | None, bool]:
    """This process's allocator settings (the old name first, as torch reads them) and whether they turn
    expandable segments on."""
    conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or os.environ.get("PYTORCH_ALLOC_CONF")
    return conf, "expandable_segments:true" in (conf or "").replace(" ", "").lower()


def _run_pattern_on_cuda(torch, after_step=None) -> dict:
    """Run ``FRAGMENTATION_PATTERN`` on the GPU; with ``after_step``, synchronize and call it with each step's
    label (``"alloc a"``). Returns the tensors still held."""
    live = {}
    for action, name, *size in FRAGMENTATION_PATTERN:
        if action == "alloc":
            live[name] = torch.empty(size[0], dtype=torch.uint8, device="cuda")
        else:
            del live[name]
        if after_step is not None:
            torch.cuda.synchronize()
            after_step(f"{action} {name}")
    return live


def _child_fragmentation(opts: dict) -> None:
    conf, expandable = _alloc_conf()
    import torch

    if not torch.cuda.is_available():
        sim = simulate(FRAGMENTATION_PATTERN, expandable)
        _emit({"mode": "CPU mode (computed by vramlab's allocator model)", "alloc_conf": conf,
               "expandable": expandable, "reserved": sim.reserved, "allocated": sim.allocated,
               "peak_reserved": sim.peak_reserved, "steps": [
                   {"label": r["action"] + " " + r["name"], "allocated": r["allocated"], "reserved": r["reserved"]}
                   for r in sim.trace if r["action"] in ("alloc", "free")]})
        return
    steps = []
    live = _run_pattern_on_cuda(torch, lambda label: steps.append(  # noqa: F841 - held while counters are read
        {"label": label, "allocated": torch.cuda.memory_allocated(), "reserved": torch.cuda.memory_reserved()}))
    st = torch.cuda.memory_stats()
    _emit({"mode": "GPU", "alloc_conf": conf, "expandable": expandable, "torch": torch.__version__,
           "gpu": torch.cuda.get_device_name(), "reserved": torch.cuda.memory_reserved(),
           "allocated": torch.cuda.memory_allocated(), "peak_reserved": st.get("reserved_bytes.all.peak", 0),
           "steps": steps})


def _child_oom(opts: dict) -> None:
    import torch

    chunk = int(opts.get("chunk_bytes", 256 * MiB))
    if not torch.cuda.is_available():
        if not sys.platform.startswith("linux"):  # RLIMIT_AS is Linux's; macOS does not enforce it
            _emit({"mode": "CPU mode", "skipped": f"no address-space cap on {sys.platform}: no CPU out-of-memory "
                                                  "was triggered (the GPU version needs CUDA)"})
            return
        import resource

        with open("/proc/self/status") as f:
            vm = int(next(line for line in f if line.startswith("VmSize")).split()[1]) * KiB
        cap = vm + int(opts.get("cap_bytes", 256 * MiB))
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        print(json.dumps({"mode": "CPU mode", "address_space_cap": cap, "chunk": chunk}), flush=True)
        held = []
        while True:  # the CPU allocator raises RuntimeError once the cap is reached; not caught
            held.append(torch.empty(chunk, dtype=torch.uint8))
            print(json.dumps({"held": len(held) * chunk}), flush=True)
    total = torch.cuda.get_device_properties(0).total_memory
    cap = int(opts.get("cap_bytes", 2 * GiB))
    fraction = min(1.0, cap / total)
    torch.cuda.set_per_process_memory_fraction(fraction, 0)
    free, _ = torch.cuda.mem_get_info()
    print(json.dumps({"mode": "GPU", "fraction": fraction, "total": total, "free_at_start": free}), flush=True)
    held = []
    while True:  # raises torch.OutOfMemoryError past fraction * total; not caught on purpose
        held.append(torch.empty(chunk, dtype=torch.uint8, device="cuda"))
        print(json.dumps({"held": len(held) * chunk}), flush=True)


def _child_snapshot(opts: dict) -> None:
    conf, expandable = _alloc_conf()
    import torch

    if not torch.cuda.is_available():
        sim = simulate(FRAGMENTATION_PATTERN, expandable)
        _emit({"mode": "CPU mode (computed by vramlab's allocator model)", "alloc_conf": conf,
               "events": [{"action": r["action"], "size": r["size"]} for r in sim.trace]})
        return
    torch.cuda.init()
    torch.cuda.memory._record_memory_history(max_entries=100_000)
    live = _run_pattern_on_cuda(torch)  # noqa: F841 - the tensors stay held until the snapshot is taken
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    dev = torch.cuda.current_device()
    trace = snap["device_traces"][dev] if len(snap["device_traces"]) > dev else []
    _emit({"mode": "GPU", "alloc_conf": conf, "torch": torch.__version__,
           "events": [{"action": e["action"], "size": int(e.get("size", 0)), "time_us": e.get("time_us")}
                      for e in trace],
           "segments": [{"total_size": s["total_size"], "allocated_size": s["allocated_size"]}
                        for s in snap["segments"]]})


def timeline(events: list[dict]) -> list[dict]:
    """Running totals from allocator trace events (``_snapshot()["device_traces"]`` or :func:`simulate`):
    rows ``step, action, size, allocated, reserved`` in bytes. ``alloc`` / ``free_completed``
    (or the model's ``free``) move allocated; ``segment_alloc`` / ``segment_map`` and
    ``segment_free`` / ``segment_unmap`` move reserved; ``free_requested`` and others move nothing."""
    allocated = reserved = 0
    rows = []
    for e in events:
        a, size = e["action"], int(e.get("size", 0))
        if a == "alloc":
            allocated += size
        elif a in ("free_completed", "free"):
            allocated -= size
        elif a in ("segment_alloc", "segment_map"):
            reserved += size
        elif a in ("segment_free", "segment_unmap"):
            reserved -= size
        else:
            continue
        rows.append({"step": len(rows), "action": a, "size": size, "allocated": allocated, "reserved": reserved})
    return rows


def timeline_figure(rows: list[dict], title: str):
    """A plotly step chart of allocated and reserved MiB per allocator event.

    The last state is drawn as one more step ("end", one event wide) and the x axis runs half an event past
    both ends, so the final level sits inside the plot, not on its border."""
    import plotly.graph_objects as go

    x = [r["step"] for r in rows]
    reserved = [r["reserved"] / MiB for r in rows]
    allocated = [r["allocated"] / MiB for r in rows]
    actions = [r["action"] for r in rows]
    if rows:   # hold the final state for one event's width
        x.append(x[-1] + 1)
        reserved.append(reserved[-1])
        allocated.append(allocated[-1])
        actions.append("end (final state)")
    fig = go.Figure()
    fig.add_scatter(x=x, y=reserved, name="reserved", line_shape="hv", fill="tozeroy", line_color="#9ecae1",
                    text=actions, hovertemplate="%{text}<br>%{y:.0f} MiB<extra>reserved</extra>")
    fig.add_scatter(x=x, y=allocated, name="allocated", line_shape="hv",
                    fill="tozeroy", line_color="#08519c", text=actions,
                    hovertemplate="%{text}<br>%{y:.0f} MiB<extra>allocated</extra>")
    top = max(reserved + allocated + [1.0])
    fig.update_layout(title=title, xaxis_title="allocator event (number)", yaxis_title="memory (MiB)",
                      height=340, width=720, margin=dict(l=60, r=30, t=70, b=50),
                      xaxis=dict(range=[(x[0] if x else 0) - 0.5, (x[-1] if x else 1) + 0.5]),
                      yaxis=dict(range=[0, top * 1.1]))
    return fig


def write_offline_html(fig, path: str | Path) -> Path:
    """Save ``fig`` as one self-contained HTML file (plotly.js inlined: opens with no network)."""
    path = Path(path)
    fig.write_html(str(path), include_plotlyjs=True, full_html=True)
    return path


def fragmentation_figure(default: dict, expandable: dict, title: str):
    """Bars of reserved and allocated MiB after the pattern, default vs expandable segments."""
    import plotly.graph_objects as go

    labels = ["default segments", "expandable_segments:True"]
    fig = go.Figure()
    fig.add_bar(x=labels, y=[default["reserved"] / MiB, expandable["reserved"] / MiB], name="reserved",
                marker_color="#9ecae1", text=[f"{default['reserved'] / MiB:.0f}", f"{expandable['reserved'] / MiB:.0f}"])
    fig.add_bar(x=labels, y=[default["allocated"] / MiB, expandable["allocated"] / MiB], name="allocated",
                marker_color="#08519c")
    fig.update_layout(title=title, yaxis_title="memory after the pattern (MiB)", xaxis_title="allocator setting",
                      barmode="group", height=340, width=620, margin=dict(l=60, r=20, t=70, b=50))
    return fig


def _main(argv: list[str]) -> int:
    if not argv or argv[0] not in EXPERIMENTS:
        print(f"usage: python -m vramlab.vram.allocator {{{'|'.join(EXPERIMENTS)}}} [JSON options]", file=sys.stderr)
        return 2
    opts = json.loads(argv[1]) if len(argv) > 1 else {}
    {"fragmentation": _child_fragmentation, "oom": _child_oom, "snapshot": _child_snapshot}[argv[0]](opts)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))


__all__ = ["simulate", "SimResult", "FRAGMENTATION_PATTERN", "round_size", "allocation_size", "run_experiment",
           "fragmentation", "ExperimentRun", "timeline", "timeline_figure", "fragmentation_figure",
           "write_offline_html", "EXPERIMENTS", "alloc_conf_env", "ALLOC_CONF_NAMES"]
