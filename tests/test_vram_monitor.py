"""VramMonitor: CPU mode labelled and honest, threads that stop, no stacking on re-run; the live widget."""

from __future__ import annotations

import gc
import mmap
import time

import pytest

from vramlab.device import has_cuda
from vramlab.vram import VramMonitor
from vramlab.vram.monitor import CPU_COLUMNS, GPU_COLUMNS, sampler_threads, stop_all_monitors


@pytest.fixture(autouse=True)
def _no_leftover_threads():
    yield
    stop_all_monitors()
    deadline = time.time() + 3
    while sampler_threads() and time.time() < deadline:
        time.sleep(0.05)


def _wait_for(cond, timeout=3.0):
    deadline = time.time() + timeout
    while not cond() and time.time() < deadline:
        time.sleep(0.02)
    return cond()


def test_samples_marks_and_stop_leaves_no_thread():
    mon = VramMonitor(interval_s=0.02, key="t1").start()
    assert mon.running and len(sampler_threads()) == 1
    assert _wait_for(lambda: len(mon.samples) >= 5)
    mon.mark("step one")
    mon.stop()
    assert not mon.running and sampler_threads() == []
    rows = mon.samples
    assert all(rows[i]["t"] <= rows[i + 1]["t"] for i in range(len(rows) - 1))
    assert mon.events[0]["label"] == "step one" and mon.events[0]["t"] <= rows[-1]["t"]
    n = len(rows)
    time.sleep(0.1)
    assert len(mon.samples) == n  # nothing is sampled after stop()


@pytest.mark.skipif(has_cuda(), reason="CPU-mode test")
def test_cpu_mode_is_labelled_and_invents_no_gpu_number():
    import os

    with VramMonitor(interval_s=0.02, key="t2") as mon:
        _wait_for(lambda: len(mon.samples) >= 3)
    assert mon.mode == "CPU mode" and mon.columns == ("t",) + CPU_COLUMNS
    for row in mon.samples:
        assert set(row) == {"t", "rss"} and not any(k in row for k in GPU_COLUMNS)
    # RSS is this process's: same order as /proc's own figure
    rss_proc = int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    assert 0.5 < mon.samples[-1]["rss"] / rss_proc < 2.0


def test_rss_follows_a_real_allocation():
    """In a fresh process: in the full suite, memory freed by earlier tests can be handed back to a new
    tensor without the resident set growing, which says nothing about the monitor."""
    import subprocess
    import sys

    code = """
import torch
from vramlab.vram.monitor import VramMonitor
with VramMonitor(interval_s=0.02, key="t3") as mon:
    if mon.mode == "GPU":
        print("GPU"); raise SystemExit
    before = mon.sample_once()["rss"]
    x = torch.ones(64 << 20, dtype=torch.uint8)  # 64 MiB, touched
    during = mon.sample_once()["rss"]
    del x
print(during - before)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    last = out.stdout.split()[-1]
    if last == "GPU":
        pytest.skip("CPU-mode test")
    assert int(last) > 48 << 20, out.stdout


def test_rerun_does_not_stack_threads():
    first = VramMonitor(interval_s=0.02).start()
    second = VramMonitor(interval_s=0.02).start()       # a notebook cell run again
    assert _wait_for(lambda: not first.running)
    assert second.running and len(sampler_threads()) == 1
    other = VramMonitor(interval_s=0.02, key="other").start()
    assert len(sampler_threads()) == 2 and other.running
    assert stop_all_monitors() == 2 and _wait_for(lambda: sampler_threads() == [])


def test_garbage_collection_stops_the_thread():
    mon = VramMonitor(interval_s=0.02, key="gc").start()
    assert len(sampler_threads()) == 1
    del mon
    gc.collect()
    assert _wait_for(lambda: sampler_threads() == [])


def test_interpreter_exit_stops_the_thread():
    import subprocess
    import sys

    code = ("from vramlab.vram import VramMonitor; import time; m = VramMonitor(0.01).start(); time.sleep(0.1); "
            "print('ok')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok" and "Traceback" not in proc.stderr


def test_restart_after_stop_keeps_rows():
    mon = VramMonitor(interval_s=0.02, key="t4").start()
    _wait_for(lambda: len(mon.samples) >= 2)
    mon.stop()
    n = len(mon.samples)
    mon.start()
    assert _wait_for(lambda: len(mon.samples) > n + 1)
    mon.stop()
    assert sampler_threads() == []


@pytest.mark.parametrize("kwargs, field", [({"interval_s": 0}, "interval_s"), ({"interval_s": "fast"}, "interval_s"),
                                           ({"device": -1}, "device"), ({"max_samples": 0}, "max_samples")])
def test_bad_arguments_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        VramMonitor(**kwargs)


def test_mark_needs_a_label():
    mon = VramMonitor(key="t5")
    with pytest.raises(ValueError, match="label"):
        mon.mark("")


def test_max_samples_keeps_the_newest():
    mon = VramMonitor(interval_s=0.01, key="t6", max_samples=5).start()
    assert _wait_for(lambda: mon.n_samples >= 12)
    mon.stop()
    assert len(mon.samples) == 5 and mon.n_samples >= 12


# --- the widget --------------------------------------------------------------------------------------

def test_widget_redraws_and_stops_with_the_monitor():
    from vramlab.vram.widget import VramWidget

    mon = VramMonitor(interval_s=0.02, key="w").start()
    w = VramWidget(mon, refresh_s=0.1)
    assert _wait_for(lambda: w.frames >= 3)
    first = w.out.outputs[0]["data"]
    assert "application/vnd.plotly.v1+json" in first or "text/html" in first
    mon.mark("event")
    mon.stop()
    assert _wait_for(lambda: not w._thread.is_alive())  # no redraw thread left behind
    fig = w.figure()
    assert fig.layout.xaxis.title.text and fig.layout.yaxis.title.text and fig.layout.title.text
    if mon.mode == "CPU mode":
        assert "CPU mode" in fig.layout.title.text and "CPU mode" in w.status.value
        assert [tr.name for tr in fig.data] == ["process RSS"]
    assert any("event" in (a.text or "") for a in fig.layout.annotations)


def test_widget_argument_errors():
    from vramlab.vram.widget import VramWidget

    with pytest.raises(TypeError, match="monitor"):
        VramWidget(object())
    with pytest.raises(ValueError, match="refresh_s"):
        VramWidget(VramMonitor(key="w2"), refresh_s=0)


def test_monitor_figure_gpu_rows_stack_allocated_and_unallocated():
    from vramlab.vram.widget import monitor_figure

    MiB = 1 << 20  # rows shaped like GPU samples (synthetic numbers: this only tests the drawing)
    rows = [{"t": float(i), "allocated": i * MiB, "reserved": 2 * i * MiB, "max_allocated": i * MiB,
             "max_reserved": 2 * i * MiB, "num_alloc_retries": 0, "num_ooms": 0, "device_used": None,
             "device_total": None, "process_used": None} for i in range(5)]
    fig = monitor_figure(rows, [{"t": 2.0, "label": "load"}], mode="GPU")
    names = [tr.name for tr in fig.data]
    assert names == ["allocated (PyTorch)", "reserved, unallocated"]  # no NVML columns: no NVML lines
    assert list(fig.data[1].y) == [i for i in range(5)]


# --- GPU ---------------------------------------------------------------------------------------------

@pytest.mark.gpu
def test_gpu_monitor_sees_one_gib_appear_and_disappear():
    import torch

    torch.cuda.init()
    with VramMonitor(interval_s=0.02, key="gpu") as mon:
        time.sleep(0.1)
        mon.mark("alloc")
        x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
        time.sleep(0.2)
        mon.mark("free")
        del x
        torch.cuda.empty_cache()
        time.sleep(0.2)
    rows, ev = mon.samples, {e["label"]: e["t"] for e in mon.events}
    base = [r["allocated"] for r in rows if r["t"] < ev["alloc"]]
    held = [r["allocated"] for r in rows if ev["alloc"] < r["t"] < ev["free"]]
    after = [r for r in rows if r["t"] > ev["free"] + 0.05]
    assert max(held) - max(base) >= 1 << 30
    assert after[-1]["allocated"] <= max(base) and after[-1]["reserved"] < max(r["reserved"] for r in rows)
    assert mon.mode == "GPU" and all(r["num_ooms"] == 0 for r in rows)


def test_widget_rerun_does_not_stack_redraw_threads():
    import threading

    from vramlab.vram.widget import VramWidget

    def redraw_threads():
        return [t for t in threading.enumerate() if t.name == "vramlab-vram-widget" and t.is_alive()]

    first = VramWidget(VramMonitor(interval_s=0.02).start(), refresh_s=0.1)
    second = VramWidget(VramMonitor(interval_s=0.02).start(), refresh_s=0.1)  # the cell run again
    assert _wait_for(lambda: not first._thread.is_alive())
    assert second._thread.is_alive() and len(redraw_threads()) == 1 and len(sampler_threads()) == 1
    second.monitor.stop()
    assert _wait_for(lambda: redraw_threads() == [])


def test_unreferenced_widget_and_monitor_are_collected():
    from vramlab.vram.widget import VramWidget

    w = VramWidget(VramMonitor(interval_s=0.02, key="gc-widget").start(), refresh_s=0.1)
    thread = w._thread
    del w
    gc.collect()
    assert _wait_for(lambda: not thread.is_alive() and sampler_threads() == [])


def test_gpu_code_path_with_stubbed_counters(monkeypatch):
    """The GPU branch end to end on a CPU machine: torch's counters replaced by a stub (synthetic numbers,
    this only checks the plumbing); NVML without a driver leaves the device columns None."""
    import torch

    import vramlab.device
    from vramlab.vram.widget import VramWidget

    stats = {"allocated_bytes.all.current": 3 << 20, "reserved_bytes.all.current": 8 << 20,
             "allocated_bytes.all.peak": 5 << 20, "reserved_bytes.all.peak": 8 << 20,
             "num_alloc_retries": 1, "num_ooms": 0}
    monkeypatch.setattr(vramlab.device, "has_cuda", lambda: True)
    monkeypatch.setattr(torch.cuda, "memory_stats", lambda device=None: dict(stats))
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    mon = VramMonitor(interval_s=0.02, key="stub-gpu").start()
    assert mon.mode == "GPU" and mon.device == 0
    assert _wait_for(lambda: len(mon.samples) >= 3)
    mon.mark("x")
    w = VramWidget(mon, refresh_s=0.1, autostart=False)
    mon.stop()
    row = mon.samples[-1]
    assert set(row) == {"t", *GPU_COLUMNS} and row["reserved"] == 8 << 20 and row["num_alloc_retries"] == 1
    if row["device_used"] is None:  # no NVML driver here: nothing invented
        assert row["device_total"] is None and row["process_used"] is None
    assert "allocated 3 MiB, reserved 8 MiB" in w.status_text()
    assert [tr.name for tr in w.figure().data][:2] == ["allocated (PyTorch)", "reserved, unallocated"]
    with pytest.raises(ValueError, match="device"):
        VramMonitor(device=3)


@pytest.mark.parametrize("value", [True, 2.5, "10"])
def test_max_samples_must_be_a_real_integer(value):
    with pytest.raises(ValueError, match="^`max_samples` must be a positive integer"):
        VramMonitor(max_samples=value)


@pytest.mark.parametrize("window", [-5, 0, float("nan"), float("inf"), "60", True])
def test_a_window_that_would_plot_nothing_is_refused(window):
    from vramlab.vram.widget import VramWidget, monitor_figure

    rows = [{"t": float(i), "rss": i << 20} for i in range(3)]
    with pytest.raises(ValueError, match="^`window_s` must be a positive number of seconds"):
        monitor_figure(rows, mode="CPU mode", window_s=window)
    with pytest.raises(ValueError, match="window_s"):
        VramWidget(VramMonitor(key="w3"), window_s=window, autostart=False)
    assert len(monitor_figure(rows, mode="CPU mode", window_s=None).data[0].x) == 3


def test_stopped_widget_toggle_says_stopped_and_is_disabled():
    """After the monitor stops, the toggle no longer claims "live": it is off, disabled and says "stopped"."""
    from vramlab.vram.widget import VramWidget

    mon = VramMonitor(interval_s=0.02, key="w-stop").start()
    w = VramWidget(mon, refresh_s=0.1)
    assert w.live.value and w.live.description == "live" and not w.live.disabled
    w.live.value = False   # pause: the toggle says so
    assert (w.live.description, w.live.icon) == ("paused", "play")
    w.live.value = True
    assert (w.live.description, w.live.icon) == ("live", "pause")
    mon.stop()
    assert _wait_for(lambda: not w.running)
    assert w.live.disabled and not w.live.value and w.live.description == "stopped" and w.live.icon == "stop"
    assert "stopped" in w.status.value
    assert "(the whole run)" in w.figure().layout.title.text   # the last frame shows every mark
    w.live.value = True    # clicking a disabled toggle cannot happen in the browser; from code it changes nothing
    assert w.live.description == "stopped"


def test_widget_stop_by_hand_and_restart():
    from vramlab.vram.widget import VramWidget

    mon = VramMonitor(interval_s=0.02, key="w-hand").start()
    w = VramWidget(mon, refresh_s=0.1)
    w.stop()
    assert not w.running and w.live.disabled and w.live.description == "stopped"
    w.start()
    assert w.running and not w.live.disabled and w.live.value and w.live.description == "live"
    w.stop()
    mon.stop()


def test_mark_labels_close_in_time_get_different_rows():
    """Marks a fraction of a second apart ("ledger", then "generate") must not print on top of each other."""
    from vramlab.vram.widget import _label_levels, monitor_figure

    rows = [{"t": t / 10, "rss": 100 << 20} for t in range(0, 900)]
    events = [{"t": 10.0, "label": "load"}, {"t": 12.0, "label": "ledger"}, {"t": 12.4, "label": "generate"},
              {"t": 60.0, "label": "free"}]
    fig = monitor_figure(rows, events, mode="CPU mode", window_s=None)
    ann = {a.text: a for a in fig.layout.annotations}
    assert set(ann) == {"load", "ledger", "generate", "free"}
    assert all(a.textangle in (None, 0) for a in ann.values())          # horizontal labels
    assert ann["ledger"].y != ann["generate"].y and ann["load"].y != ann["ledger"].y
    assert ann["free"].y == 1.0                                          # far from the others: top row
    assert _label_levels([0.0, 50.0], ["a", "b"], 0.0, 100.0) == [0, 0]
    assert _label_levels([0.0, 0.1, 0.2], ["abc", "abc", "abc"], 0.0, 100.0) == [0, 1, 2]


def test_nvml_is_not_guessed_before_cuda_starts(monkeypatch):
    """Before CUDA starts the monitor reads no device column (NVML's numbering need not be CUDA's); once
    CUDA has started without NVML, the device columns come from torch.cuda.mem_get_info and say so."""
    import sys

    import torch

    import vramlab.device
    from vramlab.vram import monitor as monitor_mod
    from vramlab.vram.widget import monitor_figure

    stats = {"allocated_bytes.all.current": 0, "reserved_bytes.all.current": 0, "allocated_bytes.all.peak": 0,
             "reserved_bytes.all.peak": 0, "num_alloc_retries": 0, "num_ooms": 0}
    started = {"cuda": False}
    monkeypatch.setattr(vramlab.device, "has_cuda", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "memory_stats", lambda device=None: dict(stats))
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: started["cuda"])
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (6 << 30, 8 << 30))
    monkeypatch.setitem(sys.modules, "pynvml", None)     # nvidia-ml-py not installed
    mon = VramMonitor(interval_s=0.02, key="nvml-before")
    row = mon.sample_once()
    assert row["device_used"] is None and row["process_used"] is None and mon.device_source is None
    started["cuda"] = True
    row = mon.sample_once()
    assert (row["device_used"], row["device_total"], row["process_used"]) == (2 << 30, 8 << 30, None)
    assert mon.device_source == "torch.cuda.mem_get_info"
    assert "nvidia-ml-py" in mon.device_note and "mem_get_info" in mon.device_note
    fig = monitor_figure([row], mode="GPU", device_source=mon.device_source)
    assert "device used (mem_get_info)" in [tr.name for tr in fig.data]
    assert monitor_mod.device_memory(0) == (None, 2 << 30, 8 << 30, "torch.cuda.mem_get_info")


def test_mig_slice_falls_back_to_mem_get_info(monkeypatch):
    """A MIG device found by NVML is not read through NVML (its process list does not cover the slice)."""
    import types

    import torch

    from vramlab.vram import monitor as monitor_mod

    fake = types.SimpleNamespace(
        nvmlInit=lambda: None, nvmlShutdown=lambda: None,
        nvmlDeviceGetHandleByUUID=lambda u: ("handle", u) if u.startswith("MIG-") else (_ for _ in ()).throw(
            RuntimeError("not found")),
        nvmlDeviceIsMigDeviceHandle=lambda h: 1)
    monkeypatch.setitem(__import__("sys").modules, "pynvml", fake)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda i: types.SimpleNamespace(uuid="1234-abcd"))
    nv = monitor_mod._Nvml(0)
    assert not nv.ok and "MIG" in nv.why


def test_replay_opens_at_the_peak_and_holds_every_category_visible():
    """Issue 29 (what a learner met in a browser): the replay opens where the peak is, every category with any
    bytes has a bar at every event and a marker at its largest moment, the stacked bands have no outlines, and
    one sweep of the play button is about 60 steps, not one step per event."""
    pytest.importorskip("ipywidgets")
    pytest.importorskip("plotly")
    from vramlab.vram.dryrun import dry_run
    from vramlab.vram.widget import replay_widget

    tr = dry_run("smollm2-135m", 2, 256)
    w = replay_widget(tr)
    assert w.slider.value == w.play.value == tr.peak_index and "the peak" in w.label.value
    used = [c for c, ys in tr.categories_over_time().items() if any(ys)]
    assert "logits" in used and list(w.bars(0).data[0].x) == used
    at_peak = dict(zip(w.bars().data[0].x, w.bars().data[0].y))
    assert at_peak["logits"] == tr.breakdown("peak")["logits"] / 2**20 > 0
    markers = {t.name for t in w.figure().data if t.mode == "markers"}
    assert markers == {f"largest {c}" for c in used}
    assert all(t.line.width == 0 for t in w.figure().data if getattr(t, "stackgroup", None) == "alloc")
    assert len(tr.events) // w.play.step <= 61
    w.slider.value = 0
    assert "the peak" not in w.label.value and len(w.out.outputs) == 1 and len(w.bars_out.outputs) == 1
    w.peak_button.click()
    assert w.slider.value == tr.peak_index
    with pytest.raises(ValueError, match="frames"):
        replay_widget(tr, frames=0)


def test_phases_read_each_mark_from_the_samples():
    mon = VramMonitor(interval_s=0.05).start()
    try:
        mon.mark("small")
        time.sleep(0.2)
        mon.mark("big")
        # 64 MiB of fresh anonymous pages that the process really touches: a bytearray could reuse a free chunk of
        # the heap that is already resident (a long-lived pytest worker has them), and then RSS would not move.
        blob = mmap.mmap(-1, 64 << 20)
        for i in range(0, 64 << 20, 4096):
            blob[i] = 1
        time.sleep(0.3)
        mon.mark("free")
        blob.close()
        gc.collect()
        time.sleep(0.2)
    finally:
        mon.stop()
    phases = {p["label"]: p for p in mon.phases()}
    assert list(phases) == ["small", "big", "free"]
    if mon.mode == "GPU":
        return
    big = phases["big"]
    assert big["peak"] - big["start"] >= 48 << 20 and big["peak"] >= big["end"] >= big["start"]
    assert all(p["peak"] >= max(p["start"], p["end"]) for p in phases.values())
    with pytest.raises(ValueError, match="column"):
        mon.phases("t")


def test_the_live_view_backs_off_when_a_redraw_is_slow():
    """Issue 29: on busy cores a redraw (about 0.13 s of CPU) at 2 frames a second starved the cell it watched;
    the next frame waits long enough that redrawing takes at most REDRAW_SHARE of the time."""
    from vramlab.vram.widget import REDRAW_SHARE, next_wait

    assert next_wait(0.5, 0.05) == 0.5                       # a quiet machine: the asked rate
    slow = next_wait(0.5, 0.6)                                # a busy one: 0.6 s a frame
    assert slow == pytest.approx(2.4) and 0.6 / (0.6 + slow) == pytest.approx(REDRAW_SHARE)
