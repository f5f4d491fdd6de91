"""A background sampler of GPU memory: torch's per-process counters and, with NVML, the whole device.

``VramMonitor(interval_s=0.1)`` samples, every ``interval_s`` seconds, in a daemon thread:

* GPU mode (PyTorch sees CUDA): ``torch.cuda.memory_stats(device)`` (one call, no device sync):
  ``allocated_bytes.all.current`` / ``.peak``, ``reserved_bytes.all.current`` / ``.peak``,
  ``num_alloc_retries`` and ``num_ooms`` (keys documented in ``torch/cuda/memory.py``,
  ``memory_stats``, torch 2.13). These are this process's bytes through the caching allocator only.
  Where ``nvidia-ml-py`` is installed it also reads ``nvmlDeviceGetMemoryInfo(handle,
  version=nvmlMemory_v2)`` (device-wide used / total, as ``nvidia-smi`` shows) and this process's
  entry of ``nvmlDeviceGetComputeRunningProcesses`` (everything the process holds on the device,
  CUDA context included; None when the PID is not visible, e.g. inside some containers). The device columns
  start once this process has started CUDA (NVML is matched to the device by UUID then, never guessed by
  index). Without ``nvidia-ml-py`` (neither ``make`` nor the Colab setup installs it), or on a MIG slice, the
  device's used and total memory come from ``torch.cuda.mem_get_info()`` instead and ``process_used`` stays
  None; :attr:`VramMonitor.device_source` and :attr:`VramMonitor.device_note` say which.
* CPU mode (no CUDA): the process's resident set size (RSS, via ``psutil`` or ``/proc/self/statm``),
  labelled ``mode="CPU mode"``; every GPU column is None. Nothing is invented.

Each row of :attr:`VramMonitor.samples` is a dict with ``t`` (seconds since start) and byte counts.
The thread stops on :meth:`VramMonitor.stop`, when the monitor is garbage-collected
(``weakref.finalize``) and at interpreter exit; starting a monitor stops the previous one with the
same ``key`` (a notebook cell run twice does not stack sampler threads).
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from typing import Any

# key -> weak reference to the running sampler; see _register()
_REGISTRY: dict[str, "weakref.ref[_Sampler]"] = {}
_REGISTRY_LOCK = threading.Lock()

GPU_COLUMNS = ("allocated", "reserved", "max_allocated", "max_reserved", "num_alloc_retries", "num_ooms",
               "device_used", "device_total", "process_used")
CPU_COLUMNS = ("rss",)
THREAD_NAME = "vramlab-vram-sampler"


def _rss_reader():
    """A function returning this process's RSS in bytes (psutil if present, else /proc)."""
    try:
        import psutil

        proc = psutil.Process()
        return lambda: int(proc.memory_info().rss)
    except Exception:  # noqa: BLE001 - psutil missing or unusable: fall back to /proc
        if not os.path.exists("/proc/self/statm"):
            raise RuntimeError("CPU mode reads this process's memory with psutil, which is not installed, and this "
                               "system has no /proc: pip install psutil (Jupyter's ipykernel normally brings it).")
        page = os.sysconf("SC_PAGE_SIZE")

        def from_proc() -> int:
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * page

        return from_proc


class _Nvml:
    """The NVML handle for one torch device, or nothing (``ok`` False, ``why`` says why).

    NVML (``nvidia-ml-py``) is looked up only once this process has started CUDA, by the device's UUID: before
    that, NVML's numbering (PCI bus order) need not be CUDA's (``CUDA_DEVICE_ORDER`` defaults to fastest first),
    so an index could name the wrong GPU. A MIG slice is left to ``torch.cuda.mem_get_info`` (which reports the
    slice's own memory): NVML's per-process list does not cover it and the UUID lookup can fail.
    """

    def __init__(self, device_index: int):
        self.ok = False
        self.handle = None
        self.why: str | None = None
        try:
            import pynvml  # from nvidia-ml-py
        except ImportError:
            self.why = "nvidia-ml-py is not installed"
            return
        try:
            pynvml.nvmlInit()
        except Exception:  # noqa: BLE001 - no driver: the torch counters still work
            self.why = "NVML could not start"
            return
        self.nv = pynvml
        try:
            self.handle = self._handle_for(device_index)
        except Exception:  # noqa: BLE001
            self.handle = None
        self.ok = self.handle is not None
        if not self.ok:
            self.why = self.why or "NVML does not know this device"
            try:
                pynvml.nvmlShutdown()
            except Exception:  # noqa: BLE001
                pass

    def _handle_for(self, index: int):
        import torch

        if not torch.cuda.is_initialized():   # never guess by index (see the class docstring)
            self.why = "CUDA has not started in this process yet"
            return None
        uuid = str(torch.cuda.get_device_properties(index).uuid)
        for candidate in dict.fromkeys((uuid, f"GPU-{uuid}", f"MIG-{uuid}")):
            try:
                handle = self.nv.nvmlDeviceGetHandleByUUID(candidate)
            except Exception:  # noqa: BLE001 - not this spelling
                continue
            try:
                is_mig = bool(self.nv.nvmlDeviceIsMigDeviceHandle(handle))
            except Exception:  # noqa: BLE001 - old driver: no MIG
                is_mig = False
            if is_mig:
                self.why = "this device is a MIG slice"
                return None
            return handle
        self.why = "NVML has no device with this UUID (a MIG slice?)"
        return None

    def read(self, pid: int) -> tuple[int | None, int | None, int | None]:
        """(device used, device total, this process's use) in bytes; None where NVML cannot say."""
        nv = self.nv
        try:
            info = nv.nvmlDeviceGetMemoryInfo(self.handle, version=nv.nvmlMemory_v2)
        except Exception:  # noqa: BLE001 - old driver without the v2 struct
            info = nv.nvmlDeviceGetMemoryInfo(self.handle)
        proc = None
        try:
            for p in nv.nvmlDeviceGetComputeRunningProcesses(self.handle):
                if p.pid == pid and p.usedGpuMemory is not None:
                    proc = int(p.usedGpuMemory)
        except Exception:  # noqa: BLE001
            proc = None
        return int(info.used), int(info.total), proc

    def close(self) -> None:
        if self.ok:
            try:
                self.nv.nvmlShutdown()
            except Exception:  # noqa: BLE001
                pass
            self.ok = False


FALLBACK_SOURCE = "torch.cuda.mem_get_info"
FALLBACK_NOTE = ("The device's used memory comes from torch.cuda.mem_get_info() (the whole device, or the MIG "
                 "slice), not NVML; this process's own share needs NVML: pip install nvidia-ml-py.")


def _mem_get_info(device: int) -> tuple[int, int]:
    """(used, total) bytes of the device from ``cudaMemGetInfo`` (``torch.cuda.mem_get_info``)."""
    import torch

    free, total = torch.cuda.mem_get_info(device)
    return int(total - free), int(total)


def device_memory(device: int) -> tuple[int | None, int | None, int | None, str | None]:
    """``(this process's use, device used, device total, source)`` in bytes, read once, for a started CUDA
    device: NVML where it can (``source="NVML"``), else ``torch.cuda.mem_get_info`` (``source`` says so, and
    this process's use is None). All None before CUDA starts: nothing is guessed."""
    import torch

    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None, None, None, None
    nvml = _Nvml(device)
    try:
        if nvml.ok:
            used, total, proc = nvml.read(os.getpid())
            return proc, used, total, "NVML"
    finally:
        nvml.close()
    used, total = _mem_get_info(device)
    return None, used, total, FALLBACK_SOURCE


class _Sampler:
    """The state the thread needs. It holds no reference to the VramMonitor, so the monitor can be
    garbage-collected while the thread runs (and its finalizer then stops the thread)."""

    def __init__(self, interval_s: float, device: int | None, mode: str, max_samples: int):
        self.interval_s = interval_s
        self.device = device
        self.mode = mode
        self.max_samples = max_samples
        self.rows: list[dict] = []
        self.events: list[dict] = []
        self.lock = threading.Lock()
        self.stop_event = threading.Event()
        self.thread: threading.Thread | None = None
        self.t0 = time.perf_counter()
        self.cpu_s = 0.0        # CPU time the sampler thread spent (time.thread_time)
        self.n = 0
        self.nvml: _Nvml | None = None
        self.device_source: str | None = None   # "NVML" or FALLBACK_SOURCE, once CUDA has started
        self.pid = os.getpid()
        self._rss = _rss_reader() if mode == "CPU mode" else None
        self.error: str | None = None

    # one sample -------------------------------------------------------------------------------
    def sample(self) -> dict:
        row: dict[str, Any] = {"t": time.perf_counter() - self.t0}
        if self.mode == "GPU":
            import torch

            st = torch.cuda.memory_stats(self.device)  # {} until this process initialises CUDA
            row.update(allocated=st.get("allocated_bytes.all.current", 0),
                       reserved=st.get("reserved_bytes.all.current", 0),
                       max_allocated=st.get("allocated_bytes.all.peak", 0),
                       max_reserved=st.get("reserved_bytes.all.peak", 0),
                       num_alloc_retries=st.get("num_alloc_retries", 0),
                       num_ooms=st.get("num_ooms", 0))
            used = total = proc = None
            if torch.cuda.is_initialized():   # before CUDA starts NVML could name another GPU: read nothing
                if self.nvml is None:
                    self.nvml = _Nvml(self.device)
                    self.device_source = "NVML" if self.nvml.ok else FALLBACK_SOURCE
                if self.nvml.ok:
                    used, total, proc = self.nvml.read(self.pid)
                else:
                    used, total = _mem_get_info(self.device)
            row.update(device_used=used, device_total=total, process_used=proc)
        else:
            row["rss"] = self._rss()
        return row

    def record(self) -> dict:
        row = self.sample()
        with self.lock:
            self.rows.append(row)
            if len(self.rows) > self.max_samples:
                del self.rows[: len(self.rows) - self.max_samples]
            self.n += 1
        return row

    def run(self) -> None:
        start_cpu = time.thread_time()
        try:
            while not self.stop_event.is_set():
                self.record()
                self.cpu_s = time.thread_time() - start_cpu
                self.stop_event.wait(self.interval_s)
        except Exception as exc:  # noqa: BLE001 - a sampler must never take the kernel down
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.cpu_s = time.thread_time() - start_cpu
            if self.nvml is not None:
                self.nvml.close()

    def stop(self, timeout: float = 2.0) -> None:
        self.stop_event.set()
        thread = self.thread
        if thread is not None and thread.is_alive() and thread is not threading.current_thread():
            thread.join(timeout)


def _register(key: str, sampler: _Sampler) -> None:
    """Stop whatever sampler ran under ``key`` (a re-run notebook cell) and remember this one."""
    with _REGISTRY_LOCK:
        old = _REGISTRY.get(key)
        _REGISTRY[key] = weakref.ref(sampler)
    old_sampler = old() if old is not None else None
    if old_sampler is not None and old_sampler is not sampler:
        old_sampler.stop()


def stop_all_monitors() -> int:
    """Stop every running sampler (all keys); returns how many were running."""
    with _REGISTRY_LOCK:
        samplers = [r() for r in _REGISTRY.values()]
        _REGISTRY.clear()
    n = 0
    for s in samplers:
        if s is not None and s.thread is not None and s.thread.is_alive():
            s.stop()
            n += 1
    return n


def sampler_threads() -> list[threading.Thread]:
    """The sampler threads alive in this process (for tests and for the curious)."""
    return [t for t in threading.enumerate() if t.name.startswith(THREAD_NAME) and t.is_alive()]


def _stop_sampler(sampler: _Sampler) -> None:  # module-level: a finalizer must not hold the monitor
    sampler.stop()


class VramMonitor:
    """Sample GPU memory (or, without CUDA, the process RSS) in a background thread.

    ``interval_s``: seconds between samples (0.1 = 10 Hz; at least 0.01). ``device``: CUDA device index
    (default: the current device). ``key``: starting a monitor stops the running one with the same key.
    ``max_samples``: the oldest rows are dropped beyond this many (36,000 = one hour at 10 Hz).

    Use ``with VramMonitor() as mon: ...`` or ``mon.start()`` / ``mon.stop()``; ``mon.mark("load")``
    records an event; ``mon.samples`` is a list of row dicts (bytes; ``t`` in seconds); ``mon.mode`` is
    ``"GPU"`` or ``"CPU mode"``.
    """

    def __init__(self, interval_s: float = 0.1, device: int | None = None, key: str = "default",
                 max_samples: int = 36_000):
        if isinstance(interval_s, bool) or not isinstance(interval_s, (int, float)) or not interval_s >= 0.01:
            raise ValueError(f"`interval_s` must be a number of seconds >= 0.01 (got {interval_s!r}); "
                             f"0.1 samples at 10 Hz.")
        if device is not None and (isinstance(device, bool) or not isinstance(device, int) or device < 0):
            raise ValueError(f"`device` must be a CUDA device index such as 0, or None (got {device!r}).")
        if isinstance(max_samples, bool) or not isinstance(max_samples, int) or max_samples < 1:
            raise ValueError(f"`max_samples` must be a positive integer (got {max_samples!r}).")
        from vramlab.device import has_cuda

        self.mode = "GPU" if has_cuda() else "CPU mode"
        if self.mode == "GPU" and device is None:
            import torch

            # current_device() would initialise CUDA; before that, the current device is 0
            device = torch.cuda.current_device() if torch.cuda.is_initialized() else 0
        elif self.mode == "GPU":
            import torch

            if device >= torch.cuda.device_count():
                raise ValueError(f"`device` {device} does not exist: PyTorch sees "
                                 f"{torch.cuda.device_count()} CUDA device(s).")
        self.interval_s = float(interval_s)
        self.device = device
        self.key = key
        self._sampler = _Sampler(self.interval_s, device, self.mode, max_samples)
        self._finalizer = weakref.finalize(self, _stop_sampler, self._sampler)  # GC and interpreter exit

    # life cycle ----------------------------------------------------------------------------------
    def start(self) -> "VramMonitor":
        """Start sampling (stops an earlier monitor with the same key). Returns self."""
        s = self._sampler
        if s.thread is not None and s.thread.is_alive():
            return self
        if s.stop_event.is_set():  # restarted after stop(): keep the rows, new thread
            s.stop_event = threading.Event()
        _register(self.key, s)
        s.record()  # the first row at once, so a short run is never empty
        s.thread = threading.Thread(target=s.run, name=f"{THREAD_NAME}-{self.key}", daemon=True)
        s.thread.start()
        return self

    def stop(self) -> "VramMonitor":
        """Stop the sampler thread (joins it) after one last sample. Returns self."""
        s = self._sampler
        was_running = s.thread is not None and s.thread.is_alive()
        s.stop()
        if was_running:
            s.record()
        return self

    @property
    def running(self) -> bool:
        t = self._sampler.thread
        return t is not None and t.is_alive()

    def __enter__(self) -> "VramMonitor":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # data ----------------------------------------------------------------------------------------
    def mark(self, label: str) -> None:
        """Record an event (e.g. ``"weights loaded"``) at the current time, with a sample taken now."""
        if not isinstance(label, str) or not label:
            raise ValueError(f"`label` must be a non-empty string (got {label!r}).")
        row = self._sampler.record()
        with self._sampler.lock:
            self._sampler.events.append({"t": row["t"], "label": label})

    @property
    def samples(self) -> list[dict]:
        """A copy of the rows so far, oldest first (bytes; ``t`` in seconds since the monitor was made)."""
        with self._sampler.lock:
            return [dict(r) for r in self._sampler.rows]

    @property
    def events(self) -> list[dict]:
        """A copy of the marks: ``{"t": seconds, "label": str}``."""
        with self._sampler.lock:
            return [dict(e) for e in self._sampler.events]

    def phases(self, column: str | None = None) -> list[dict]:
        """What ``column`` did between marks: one dict per mark, ``{"label", "start", "peak", "end"}`` in bytes
        (the sample taken at the mark, the largest sample before the next mark, the sample at the next mark or
        the last one). ``column``: default ``"rss"`` in CPU mode, ``"allocated"`` on a GPU.

        In CPU mode this is how the live plot's jumps are read: a model loaded from safetensors is memory-mapped,
        so its weights enter the process's RAM when a forward first reads them, not at load (SmolLM2-135M in
        float32: resident memory 408 MiB after ``load_smollm2()``, 912 MiB after one 2-token forward, the
        file-backed "shared" part 120 -> 625 MiB; psutil, torch 2.13 on CPU, measured for this lab)."""
        column = column or ("allocated" if self.mode == "GPU" else "rss")
        if column not in self.columns or column == "t":
            raise ValueError(f"`column` must be one of {', '.join(self.columns[1:])} (got {column!r}).")
        rows = [r for r in self.samples if r.get(column) is not None]
        marks = self.events
        out = []
        for k, ev in enumerate(marks):
            t1 = marks[k + 1]["t"] if k + 1 < len(marks) else float("inf")
            inside = [r for r in rows if ev["t"] <= r["t"] <= t1]
            before = [r for r in rows if r["t"] <= ev["t"]]
            if not inside and not before:
                continue
            start = (before or inside)[-1 if before else 0][column]
            span = inside or [(before or inside)[-1]]
            out.append({"label": ev["label"], "start": start, "peak": max(r[column] for r in span),
                        "end": span[-1][column]})
        return out

    @property
    def columns(self) -> tuple[str, ...]:
        return ("t",) + (GPU_COLUMNS if self.mode == "GPU" else CPU_COLUMNS)

    def latest(self) -> dict | None:
        with self._sampler.lock:
            return dict(self._sampler.rows[-1]) if self._sampler.rows else None

    @property
    def device_source(self) -> str | None:
        """Where the device columns come from: ``"NVML"``, ``"torch.cuda.mem_get_info"`` (nvidia-ml-py missing,
        or a MIG slice; this process's own use is then None), or None (CPU mode, or CUDA not started yet)."""
        return self._sampler.device_source

    @property
    def device_note(self) -> str | None:
        """One sentence when the device columns fall back to ``torch.cuda.mem_get_info``; else None."""
        if self._sampler.device_source != FALLBACK_SOURCE:
            return None
        why = self._sampler.nvml.why if self._sampler.nvml is not None else None
        return (f"{why[0].upper()}{why[1:]}: " if why else "") + FALLBACK_NOTE

    @property
    def sampler_cpu_s(self) -> float:
        """CPU seconds the sampler thread has used so far (its own ``time.thread_time``)."""
        return self._sampler.cpu_s

    @property
    def n_samples(self) -> int:
        """Samples taken in total (``samples`` keeps at most ``max_samples``)."""
        return self._sampler.n

    @property
    def error(self) -> str | None:
        """The exception that stopped the sampler thread, if one did."""
        return self._sampler.error

    def sample_once(self) -> dict:
        """Take one sample without recording it (what the thread does every ``interval_s``)."""
        return self._sampler.sample()

    def to_pandas(self):
        """The samples as a pandas DataFrame (needs pandas)."""
        import pandas as pd

        return pd.DataFrame(self.samples)

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return (f"VramMonitor({self.mode}, every {self.interval_s:g} s, {state}, "
                f"{len(self._sampler.rows)} samples, {len(self._sampler.events)} events)")


__all__ = ["VramMonitor", "device_memory", "stop_all_monitors", "sampler_threads", "GPU_COLUMNS", "CPU_COLUMNS"]
