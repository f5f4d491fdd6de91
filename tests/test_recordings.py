"""GPU recordings: format, loader errors, label, replay. Every recording here is SYNTHETIC (written to
tmp_path with "synthetic": true and a made-up GPU name); none is ever shipped in src/vramlab/results/gpu."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from vramlab.vram import recordings as R

MiB, GiB = 1 << 20, 1 << 30
FAKE = {"gpu": "NVIDIA H200", "driver": "000.00.00-synthetic", "cuda": "12.8", "torch": "2.11.0+cu128"}

# a synthetic 1 GiB appear / disappear trace in the monitor's GPU row format (bytes, seconds)
SAMPLES = [{"t": 0.1 * i, "allocated": (GiB if 3 <= i < 6 else 0) + 2 * MiB,
            "reserved": (GiB if 3 <= i < 8 else 0) + 20 * MiB, "max_allocated": GiB + 2 * MiB,
            "max_reserved": GiB + 20 * MiB, "num_alloc_retries": 0, "num_ooms": 0,
            "device_used": 600 * MiB + (GiB if 3 <= i < 8 else 0), "device_total": 140 * GiB, "process_used": None}
           for i in range(10)]
EVENTS = [{"t": 0.3, "label": "alloc"}, {"t": 0.6, "label": "free"}]
# the current torch message shape (c10/cuda/CUDACachingAllocator.cpp), numbers made up
OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 256.00 MiB. GPU 0 has a total capacity of "
       "139.81 GiB of which 137.50 GiB is free. Including non-PyTorch memory, this process has 1.52 GiB memory in "
       "use. 1.00 GiB allowed; Of the allocated memory 1.00 GiB is allocated by PyTorch, and 0 bytes is reserved "
       "by PyTorch but unallocated.")
SNAPSHOT_EVENTS = [{"action": "segment_alloc", "size": 20 * MiB}, {"action": "alloc", "size": 16 * MiB},
                   {"action": "free_requested", "size": 16 * MiB}, {"action": "free_completed", "size": 16 * MiB},
                   {"action": "segment_alloc", "size": 32 * MiB}, {"action": "alloc", "size": 32 * MiB}]


def synth(tmp_path, kind, payload, name=None, **meta):
    return R.record(kind, payload, tmp_path, name or kind, command="pytest tests/test_recordings.py",
                    synthetic=True, **{**FAKE, **meta})


def rewrite(path: Path, change) -> Path:
    rec = json.loads(path.read_text())
    change(rec)
    path.write_text(json.dumps(rec))
    return path


def test_round_trip_of_a_synthetic_monitor_trace(tmp_path):
    path = synth(tmp_path, "monitor_trace", {"mode": "GPU", "samples": SAMPLES, "events": EVENTS})
    assert path.parent == tmp_path and path.name == "monitor_trace.json"
    rec = R.load_recording(path, expect_fingerprint=R.code_fingerprint())
    assert rec["synthetic"] is True and rec["kind"] == "monitor_trace" and rec["weights"] == "random"
    assert rec["payload"]["samples"] == SAMPLES and rec["date"][:2] == "20"
    assert rec["command"] == "pytest tests/test_recordings.py"
    assert R.list_recordings(tmp_path) == [path]


def test_large_recordings_are_gzipped_and_read_back(tmp_path):
    samples = SAMPLES * 5000  # > 1 MiB of JSON
    path = synth(tmp_path, "monitor_trace", {"mode": "GPU", "samples": samples, "events": []}, "big")
    assert path.name == "big.json.gz" and json.loads(gzip.decompress(path.read_bytes()))["kind"] == "monitor_trace"
    assert len(R.load_recording(path)["payload"]["samples"]) == len(samples)


def test_label_names_gpu_torch_date_and_weights(tmp_path):
    rec = R.load_recording(synth(tmp_path, "oom_message", {"message": OOM}))
    real = dict(rec, synthetic=False, date="2026-12-01")
    assert R.label(real) == "recorded on an NVIDIA H200, torch 2.11, 2026-12-01 (random weights)"
    assert R.label(rec).startswith("SYNTHETIC test data, not a measurement: recorded on an NVIDIA H200, torch 2.11")


@pytest.mark.parametrize("change, field", [
    (lambda r: r.pop("gpu"), "`gpu` is missing"),
    (lambda r: r.pop("fingerprint"), "`fingerprint` is missing"),
    (lambda r: r.update(kind="nvidia_smi_log"), "`kind` is 'nvidia_smi_log'"),
    (lambda r: r.update(format="something-else"), "`format`"),
    (lambda r: r.update(date="1 Dec 2026"), "`date` must be YYYY-MM-DD"),
    (lambda r: r.update(weights="pretty"), "`weights`"),
    (lambda r: r.update(fingerprint="abc123"), "`fingerprint` is not a sha256"),
    (lambda r: r.update(synthetic="yes"), "`synthetic`"),
    (lambda r: r["payload"].pop("events"), "`payload.events` is missing for kind 'monitor_trace'"),
])
def test_loader_names_the_bad_field_in_one_sentence(tmp_path, change, field):
    path = rewrite(synth(tmp_path, "monitor_trace", {"mode": "GPU", "samples": SAMPLES, "events": EVENTS}), change)
    with pytest.raises(ValueError) as info:
        R.load_recording(path)
    msg = str(info.value)
    assert field in msg and msg.startswith("recording monitor_trace.json: ") and "\n" not in msg


def test_loader_bad_json_and_wrong_fingerprint(tmp_path):
    bad = tmp_path / "broken.json"
    bad.write_text('{"format": "vramlab-gpu-recording", ')
    with pytest.raises(ValueError, match=r"recording broken.json: is not valid JSON .*; record it again\."):
        R.load_recording(bad)
    arr = tmp_path / "list.json"
    arr.write_text("[1, 2]")
    with pytest.raises(ValueError, match="holds a JSON list, not an object"):
        R.load_recording(arr)
    path = synth(tmp_path, "oom_message", {"message": OOM})
    other = "0" * 64
    with pytest.raises(ValueError, match=r"`fingerprint` is [0-9a-f]{12}\.\.\., not the expected 000000000000"):
        R.load_recording(path, expect_fingerprint=other)
    with pytest.raises(ValueError, match="is neither a file nor a shipped recording"):
        R.load_recording(tmp_path / "nope.json")


def test_fingerprint_follows_the_code(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "a.py").write_text("x = 1\n")
    (pkg / "sub" / "b.py").write_text("y = 2\n")
    (pkg / "data.json").write_text("{}")
    first = R.code_fingerprint(pkg)
    assert len(first) == 64 and first == R.code_fingerprint(pkg)
    (pkg / "data.json").write_text('{"a": 1}')  # data files are not code
    assert R.code_fingerprint(pkg) == first
    (pkg / "sub" / "b.py").write_text("y = 3\n")
    assert R.code_fingerprint(pkg) != first


def test_record_refuses_without_a_gpu_and_synthetic_never_goes_to_results(tmp_path, monkeypatch):
    monkeypatch.setattr(R, "machine_header", lambda: {"gpu": None, "driver": None, "torch": "2.x", "cuda": None})
    with pytest.raises(RuntimeError, match="PyTorch sees none here"):
        R.record("oom_message", {"message": OOM}, tmp_path)
    with pytest.raises(ValueError, match="must not go into src/vramlab/results/gpu"):
        R.record("oom_message", {"message": OOM}, R.RESULTS_DIR, synthetic=True, **FAKE)
    assert not any(R.RESULTS_DIR.glob("oom_message*"))
    with pytest.raises(ValueError, match="`name` '../x'"):
        R.record("oom_message", {"message": OOM}, tmp_path, "../x", synthetic=True, **FAKE)


def test_shipped_folder_holds_only_real_recordings():
    """src/vramlab/results/gpu/: every file is a valid, non-synthetic recording (none until a GPU run)."""
    for path in R.list_recordings():
        rec = R.load_recording(path)
        assert rec["synthetic"] is False, f"{path} is synthetic"
        assert "synthetic" not in rec["driver"] and "pytest" not in rec["command"], path
    others = [p.name for p in R.RESULTS_DIR.iterdir() if p.name != "README.md" and p not in R.list_recordings()]
    assert others == []
    if not R.list_recordings():
        assert R.status_line().startswith("No GPU recording is shipped yet")


def test_monitor_trace_replays_into_the_widget_figure(tmp_path):
    from vramlab.vram.widget import monitor_figure

    rec = R.load_recording(synth(tmp_path, "monitor_trace", {"mode": "GPU", "samples": SAMPLES, "events": EVENTS}))
    fig = R.monitor_figure_from(rec)
    ref = monitor_figure(SAMPLES, EVENTS, "GPU", None)
    assert [t.name for t in fig.data] == [t.name for t in ref.data] == [
        "allocated (PyTorch)", "reserved, unallocated", "device used (NVML)", "device total"]
    assert list(fig.data[0].y) == [s["allocated"] / MiB for s in SAMPLES] and max(fig.data[0].y) == 1026
    assert list(fig.data[1].y) == [(s["reserved"] - s["allocated"]) / MiB for s in SAMPLES]
    assert [a.text for a in fig.layout.annotations] == ["alloc", "free"]
    assert "SYNTHETIC" in fig.layout.title.text and "NVIDIA H200" in fig.layout.title.text
    with pytest.raises(ValueError, match="this function replays monitor_trace"):
        R.monitor_figure_from(dict(rec, kind="ledger"))


def test_allocator_snapshot_and_fragmentation_replay_into_the_timeline(tmp_path):
    snap = {"experiment": "snapshot", "alloc_conf": None, "returncode": 0,
            "result": {"mode": "GPU", "events": SNAPSHOT_EVENTS, "segments": []}}
    rec = R.load_recording(synth(tmp_path, "allocator_experiment", snap, "snap"))
    rows = R.allocator_rows(rec)
    assert [r["action"] for r in rows] == ["segment_alloc", "alloc", "free_completed", "segment_alloc", "alloc"]
    assert rows[-1]["reserved"] == 52 * MiB and rows[-1]["allocated"] == 32 * MiB
    fig = R.allocator_figure(rec)
    # one event per row, then the final state held for one more step ("end") so it does not sit on the border
    assert list(fig.data[0].y) == [20, 20, 20, 52, 52, 52] and list(fig.data[1].y) == [0, 16, 0, 0, 32, 32]
    assert "snapshot (default allocator)" in fig.layout.title.text
    ms = R.load_recording(synth(tmp_path, "memory_snapshot", {"events": SNAPSHOT_EVENTS, "segments": []}))
    assert R.allocator_rows(ms) == rows
    frag = {"experiment": "fragmentation", "alloc_conf": "expandable_segments:True", "returncode": 0,
            "result": {"mode": "GPU", "steps": [{"label": "alloc a0", "allocated": 16 * MiB, "reserved": 20 * MiB},
                                                {"label": "free a0", "allocated": 0, "reserved": 20 * MiB}]}}
    rows = R.allocator_rows(R.load_recording(synth(tmp_path, "allocator_experiment", frag, "frag")))
    assert [(r["action"], r["allocated"], r["reserved"]) for r in rows] == [
        ("alloc a0", 16 * MiB, 20 * MiB), ("free a0", 0, 20 * MiB)]


def test_oom_recordings_replay_into_parse_oom_message(tmp_path):
    from vramlab.vram.oom_message import parse_oom_message

    rec = R.load_recording(synth(tmp_path, "oom_message", {"message": OOM}))
    r = parse_oom_message(R.oom_text(rec))
    assert r.tried_bytes == 256 * MiB and r.allowed_bytes == GiB and r.verdict == "cap"
    run = {"experiment": "oom", "alloc_conf": None, "returncode": 1, "result": None,
           "stderr_tail": 'Traceback (most recent call last):\n  File "x"\n' + OOM + "\n"}
    rec = R.load_recording(synth(tmp_path, "allocator_experiment", run, "oom_run"))
    assert R.oom_text(rec) == OOM
    no_oom = R.load_recording(synth(tmp_path, "allocator_experiment", dict(run, stderr_tail="ok\n"), "no_oom"))
    with pytest.raises(ValueError, match="holds no out-of-memory line"):
        R.oom_text(no_oom)
    with pytest.raises(ValueError, match="has no timeline"):
        R.allocator_rows(rec)


def test_ledger_replays_into_a_ledger(tmp_path):
    rows = [{"item": "weights", "computed": 538 * MiB, "measured": 540 * MiB, "how": "footprint"},
            {"item": "non-PyTorch", "computed": None, "measured": 500 * MiB, "how": "NVML"}]
    rec = R.load_recording(synth(tmp_path, "ledger", {"mode": "GPU", "batch": 2, "tokens": 256, "rows": rows}))
    ledger = R.ledger_from(rec)
    assert [r.label for r in ledger.rows] == ["measured", "measured"] and ledger.rows[0].computed == 538 * MiB
    assert "SYNTHETIC" in ledger.table().splitlines()[0] and "540.0" in ledger.table()


def test_cli_record_skips_on_cpu_and_list_says_none(capsys, monkeypatch, tmp_path):
    import vramlab.device

    monkeypatch.setattr(vramlab.device, "has_cuda", lambda: False)
    assert R._main(["record", "--out", str(tmp_path / "rec")]) == 0
    assert capsys.readouterr().out.startswith("skip: no CUDA GPU (CPU mode)")
    assert not (tmp_path / "rec").exists()
    assert R._main(["show", str(tmp_path / "missing.json")]) == 2
    assert "neither a file nor a shipped recording" in capsys.readouterr().err


def test_doctor_recordings_say_no_model(tmp_path):
    rec = R.load_recording(synth(tmp_path, "doctor_report", {"mode": "CUDA", "ok": True, "findings": []},
                                 weights="none"))
    assert R.label(rec).endswith("(no model)")


def test_gpu_script_runs_every_gpu_test_file_and_skips_on_cpu():
    """tests/gpu/run_gpu_checks.sh lists every test file with a gpu mark, and says "skip" without CUDA."""
    import re

    root = Path(__file__).resolve().parents[1]
    script = (root / "tests" / "gpu" / "run_gpu_checks.sh").read_text()
    listed = set(re.findall(r"tests/test_[a-z0-9_]{1,60}\.py", script.split("GPU_TEST_FILES=(", 1)[1].split(")", 1)[0]))
    marked = {f"tests/{p.name}" for p in (root / "tests").glob("test_*.py") if re.search(r"^@pytest\.mark\.gpu$", p.read_text(), re.M)}
    assert marked and marked == listed, (marked, listed)
    assert "skip: $1: no CUDA GPU (CPU mode)" in script and "--junitxml" in script
    assert "--target /tmp/site .whl/*.whl" in script and "export PYTHONPATH=/tmp/site:$PWD/src" in script


def test_a_huge_bad_field_gives_a_short_sentence(tmp_path):
    path = rewrite(synth(tmp_path, "oom_message", {"message": OOM}), lambda r: r.update(kind="x" * 5_000_000))
    with pytest.raises(ValueError) as info:
        R.load_recording(path)
    assert "`kind` is 'xxx" in str(info.value) and len(str(info.value)) < 400
