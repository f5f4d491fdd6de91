"""The allocator model (the devlog's numbers), the subprocess experiments and the offline timeline."""

from __future__ import annotations

import os
import sys

import pytest

from vramlab.vram.allocator import (FRAGMENTATION_PATTERN, MiB, allocation_size, fragmentation, round_size,
                               run_experiment, simulate, timeline, timeline_figure, write_offline_html)
from vramlab.device import has_cuda


def test_fragmentation_pattern_reserves_what_pytorch_reports():
    # PyTorch devlog 2026-06-01 (REFERENCE): 256 MiB with default segments, ~140 MiB expandable
    d, e = simulate(expandable=False), simulate(expandable=True)
    assert d.reserved == 256 * MiB and d.segments == 12 and d.allocated == 128 * MiB
    assert e.reserved == 140 * MiB and e.segments == 1 and e.allocated == 128 * MiB
    assert d.reserved_unallocated == 128 * MiB and e.reserved_unallocated == 12 * MiB


def test_allocation_sizes_follow_the_source_constants():
    assert round_size(1) == 512 and round_size(513) == 1024
    assert allocation_size(5 * MiB) == 20 * MiB          # 1-10 MiB: a 20 MiB block, split
    assert allocation_size(10 * MiB) == 10 * MiB          # from 10 MiB: rounded to 2 MiB
    assert allocation_size(11 * MiB) == 12 * MiB


def test_small_requests_share_a_20_mib_segment_and_split():
    pattern = [("alloc", "x", 5 * MiB), ("alloc", "y", 5 * MiB), ("alloc", "z", 5 * MiB), ("alloc", "w", 6 * MiB)]
    r = simulate(pattern)
    assert r.reserved == 40 * MiB and r.allocated == 21 * MiB   # x, y, z share one 20 MiB segment
    # a free merges with its free neighbour in the same segment, so a 10 MiB request fits again
    r2 = simulate(pattern[:3] + [("free", "x"), ("free", "y"), ("alloc", "v", 10 * MiB)])
    assert r2.reserved == 20 * MiB


def test_best_fit_and_no_split_under_one_mib():
    # a 16 MiB block serving a 15.5 MiB request is not split (0.5 MiB would remain): allocated = 16 MiB
    r = simulate([("alloc", "a", 16 * MiB), ("free", "a"), ("alloc", "b", 15 * MiB + 512 * 1024)])
    assert r.reserved == 16 * MiB and r.allocated == 16 * MiB


def test_trace_is_consistent_with_the_timeline():
    sim = simulate()
    rows = timeline([{"action": r["action"], "size": r["size"]} for r in sim.trace])
    assert rows[-1]["allocated"] == sim.allocated and rows[-1]["reserved"] == sim.reserved
    assert max(r["reserved"] for r in rows) == sim.peak_reserved


@pytest.mark.parametrize("pattern, match", [([], "pattern"), ([("alloc", "a", 100)], "above 1 MiB"),
                                            ([("free", "a")], "not allocated"), ([("grab", "a", 1)], "pattern"),
                                            ([("alloc", "a", 2 * MiB), ("alloc", "a", 2 * MiB)], "twice")])
def test_bad_patterns_say_what_is_wrong(pattern, match):
    with pytest.raises(ValueError, match=match):
        simulate(pattern)


def test_timeline_html_is_offline(tmp_path):
    fig = timeline_figure(timeline([{"action": r["action"], "size": r["size"]} for r in simulate().trace]), "t")
    path = write_offline_html(fig, tmp_path / "timeline.html")
    html = path.read_text()
    import re

    assert re.findall(r"<script[^>]*\ssrc=", html) == []   # nothing loaded from a CDN (or anywhere)
    assert len(html) > 1_000_000                              # plotly.js is inlined
    assert fig.layout.xaxis.title.text and fig.layout.yaxis.title.text


def test_bad_experiment_names():
    with pytest.raises(ValueError, match="experiment"):
        run_experiment("explode")
    with pytest.raises(ValueError, match="alloc_conf"):
        run_experiment("fragmentation", alloc_conf=True)


@pytest.mark.skipif(has_cuda(), reason="CPU-mode test")
def test_cpu_child_gets_the_allocator_setting_and_says_cpu_mode():
    run = fragmentation(expandable=True)
    assert run.returncode == 0, run.stderr_tail
    assert run.result["alloc_conf"] == "expandable_segments:True" and run.result["expandable"]
    assert run.result["mode"].startswith("CPU mode") and run.result["reserved"] == 140 * MiB


@pytest.mark.skipif(has_cuda() or not sys.platform.startswith("linux"), reason="CPU-mode test (Linux RLIMIT_AS)")
def test_cpu_oom_subprocess_fails_and_the_parent_survives():
    import torch

    run = run_experiment("oom", cap_bytes=128 * MiB, chunk_bytes=32 * MiB)
    assert run.failed and "DefaultCPUAllocator" in run.oom_message
    assert torch.ones(4).sum().item() == 4.0  # this process is fine


@pytest.mark.gpu
def test_gpu_expandable_segments_reserve_less():
    d, e = fragmentation(False), fragmentation(True)
    assert d.returncode == 0 and e.returncode == 0, d.stderr_tail + e.stderr_tail
    assert d.result["mode"] == "GPU" and e.result["expandable"]
    assert e.result["reserved"] < d.result["reserved"]
    assert d.result["reserved"] == simulate(expandable=False).reserved  # the model matches the real allocator


@pytest.mark.gpu
def test_gpu_oom_subprocess_fails_parent_survives_and_message_is_explained():
    import torch

    from vramlab.serving.triage import diagnose
    from vramlab.vram import parse_oom_message

    run = run_experiment("oom", cap_bytes=1 << 30, chunk_bytes=256 * MiB)
    assert run.failed and run.oom_message and "CUDA out of memory" in run.oom_message
    r = parse_oom_message(run.oom_message)
    assert r.allowed_bytes is not None and r.free_bytes > r.allowed_bytes  # memory free, still OOM: the cap
    assert diagnose(run.oom_message).kind == "allocator_oom"
    assert torch.ones(4, device="cuda").sum().item() == 4.0


@pytest.mark.gpu
def test_gpu_snapshot_trace_reaches_the_reserved_bytes():
    run = run_experiment("snapshot")
    assert run.returncode == 0 and run.result["mode"] == "GPU", run.stderr_tail
    rows = timeline(run.result["events"])
    assert any(r["action"] == "segment_alloc" for r in rows) and rows[-1]["allocated"] >= 128 * MiB


@pytest.mark.parametrize("size", [-5, -1, 1.5, "512", True])
def test_round_size_refuses_what_is_not_a_byte_count(size):
    with pytest.raises(ValueError, match="^`size` must be a non-negative number of bytes"):
        round_size(size)
    assert round_size(0) == 0


@pytest.mark.parametrize("options,field", [({"chunk_bytes": 0}, "chunk_bytes"), ({"cap_bytes": -1}, "cap_bytes"),
                                           ({"chunk_bytes": 1.5}, "chunk_bytes"), ({"cap_bytes": True}, "cap_bytes"),
                                           ({"chunk": 1}, "chunk")])
def test_oom_options_are_checked_before_the_child_starts(options, field):
    import time

    start = time.perf_counter()
    with pytest.raises(ValueError, match=f"^`{field}`"):
        run_experiment("oom", **options)
    assert time.perf_counter() - start < 1   # no child process ran (a chunk of 0 used to loop for 14 s)
    with pytest.raises(ValueError, match="^`cap_bytes` is not an option of the 'fragmentation' experiment"):
        run_experiment("fragmentation", cap_bytes=1)


def test_timeline_figure_keeps_the_final_state_off_the_border():
    from vramlab.vram.allocator import simulate, timeline, timeline_figure

    rows = timeline(simulate().trace)
    fig = timeline_figure(rows, "t")
    last = rows[-1]["step"]
    lo, hi = fig.layout.xaxis.range
    assert lo < 0 and hi > last + 1                       # padded on both sides
    reserved = fig.data[0]
    assert reserved.x[-1] == last + 1 and reserved.y[-1] == reserved.y[-2] == rows[-1]["reserved"] / (1 << 20)
    assert fig.layout.yaxis.range[1] > max(reserved.y)    # and not on the top border either


def test_both_allocator_setting_names_are_set(monkeypatch):
    """Every PyTorch release honours one of the two names (2.9.1 ignores PYTORCH_ALLOC_CONF for CUDA,
    pytorch#183387; before 2.8 only the old one exists), so the experiments set both, or neither."""
    from vramlab.vram.allocator import ALLOC_CONF_NAMES, _alloc_conf, _child_env, alloc_conf_env

    monkeypatch.setenv("PYTORCH_ALLOC_CONF", "max_split_size_mb:64")
    env = _child_env("expandable_segments:True")
    assert all(env[n] == "expandable_segments:True" for n in ALLOC_CONF_NAMES)
    assert not any(n in _child_env(None) for n in ALLOC_CONF_NAMES)
    assert alloc_conf_env("x", {"A": "1"}) == {"A": "1", "PYTORCH_ALLOC_CONF": "x", "PYTORCH_CUDA_ALLOC_CONF": "x"}
    with pytest.raises(ValueError, match="`value` must be a string"):
        alloc_conf_env(3)
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    monkeypatch.setenv("PYTORCH_ALLOC_CONF", "expandable_segments:True")
    assert _alloc_conf() == ("expandable_segments:True", True)


def test_round_size_and_options_refuse_bad_numbers():
    from vramlab.vram.allocator import round_size, run_experiment

    for bad in (-5, True, 1.5):
        with pytest.raises(ValueError, match="`size`"):
            round_size(bad)
    with pytest.raises(ValueError, match="`chunk_bytes` must be a positive"):
        run_experiment("oom", chunk_bytes=0)
    with pytest.raises(ValueError, match="`cap_bytes` must be a positive"):
        run_experiment("oom", cap_bytes=-1)


def test_tried_to_allocate_reads_the_segment_for_small_requests():
    """Issue 28: the OOM message prints get_allocation_size(size), so a small tensor reads as its segment."""
    assert allocation_size(4096) == 2 * MiB                      # "Tried to allocate 2.00 MiB"
    assert allocation_size(5 * MiB) == 20 * MiB                  # "Tried to allocate 20.00 MiB"
    assert allocation_size(33 * MiB) == 34 * MiB                 # large: the request rounded to 2 MiB


def test_with_both_names_set_torch_keeps_the_old_one():
    """What the lab teaches about the two environment variables, on the installed torch (2.13 here): with both
    set to different values, PYTORCH_CUDA_ALLOC_CONF's is the one parsed (c10/core/AllocatorConfig.cpp)."""
    import subprocess

    torch = pytest.importorskip("torch")
    if not hasattr(torch._C, "_accelerator_getAllocatorSettings"):
        pytest.skip("this torch has no _accelerator_getAllocatorSettings (before 2.9)")
    env = {**os.environ, "PYTORCH_ALLOC_CONF": "garbage_collection_threshold:0.5",
           "PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:200"}
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch._C._accelerator_getAllocatorSettings())"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-500:]
    assert out.stdout.strip() == "max_split_size_mb:200"
