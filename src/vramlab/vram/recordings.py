"""GPU recordings: what a real GPU run measured, saved as JSON so that a CPU machine can replay it.

One recording is one JSON file (``.json``, or ``.json.gz`` when large) under
``src/vramlab/results/gpu/``. It holds a header and a payload::

    {"format": "vramlab-gpu-recording", "version": 1,
     "kind": "monitor_trace",            # one of KINDS
     "gpu": "NVIDIA H200", "driver": "570.124.06", "torch": "2.11.0+cu128", "cuda": "12.8",
     "date": "2026-12-01",               # UTC, the day it was recorded
     "weights": "random",                # the memory experiments use SmolLM2's config, random weights
     "command": "python -m vramlab.vram.recordings record --out ...",
     "fingerprint": "<sha256 of the vramlab .py files that produced it>",
     "synthetic": false,                 # true only for test fixtures; never shipped
     "payload": {...}}

:func:`record` writes one (refused without a CUDA GPU unless ``synthetic=True``: nothing here
fabricates a GPU number), :func:`load_recording` checks the header and payload and raises ``ValueError``
with one sentence naming the field, :func:`list_recordings` lists the shipped ones (none until a GPU
run has happened), :func:`label` says where a recording comes from. The replay functions turn a
payload back into what the lab shows: :func:`monitor_figure_from` (the live widget's figure,
:func:`vramlab.vram.widget.monitor_figure`), :func:`allocator_rows` / :func:`allocator_figure` (the
allocator timeline, :func:`vramlab.vram.allocator.timeline_figure`), :func:`oom_text` (the input of
:func:`vramlab.vram.oom_message.parse_oom_message`), :func:`ledger_from` (a
:class:`vramlab.vram.ledger.Ledger`).

``python -m vramlab.vram.recordings record --out DIR`` runs the experiments on a GPU and writes one
recording per experiment (``tests/gpu/run_gpu_checks.sh`` calls it); ``list`` and ``show NAME`` read them.
"""

from __future__ import annotations

import datetime as _dt
import gzip
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

FORMAT = "vramlab-gpu-recording"
VERSION = 1
KINDS = ("monitor_trace", "allocator_experiment", "oom_message", "memory_snapshot", "ledger", "doctor_report",
         "dryrun_compare")
HEADER_FIELDS = ("format", "version", "kind", "gpu", "driver", "torch", "cuda", "date", "weights", "command",
                 "fingerprint", "synthetic")
WEIGHTS = ("random", "real", "none")   # "none": no model involved (the doctor)
# payload keys each kind must have (the replay functions read them)
PAYLOAD_KEYS: dict[str, tuple[str, ...]] = {
    "monitor_trace": ("mode", "samples", "events"),
    "allocator_experiment": ("experiment", "alloc_conf", "returncode", "result"),
    "oom_message": ("message",),
    "memory_snapshot": ("events", "segments"),
    "ledger": ("mode", "batch", "tokens", "rows"),
    "doctor_report": ("mode", "ok", "findings"),
    "dryrun_compare": ("rows",),
}
PACKAGE_DIR = Path(__file__).resolve().parents[1]          # src/vramlab
RESULTS_DIR = PACKAGE_DIR / "results" / "gpu"
GZIP_ABOVE_BYTES = 1 << 20                                  # files above 1 MiB are written gzipped
_HEX64 = re.compile(r"[0-9a-f]{64}")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,100}")


# ---------------------------------------------------------------------------------------- header
def code_fingerprint(package_dir: Path | None = None) -> str:
    """sha256 (hex) of every ``.py`` file under ``src/vramlab`` (relative path, NUL, bytes, NUL; sorted by path).

    Data files (``results/``, ``texts/``, configs) are not part of it: a recording depends on the code."""
    root = Path(package_dir) if package_dir is not None else PACKAGE_DIR
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py"), key=lambda p: p.relative_to(root).as_posix()):
        if "__pycache__" in path.parts:
            continue
        h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def _driver_version() -> str | None:
    try:
        import pynvml  # nvidia-ml-py

        pynvml.nvmlInit()
        try:
            v = pynvml.nvmlSystemGetDriverVersion()
            return v.decode() if isinstance(v, bytes) else str(v)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no NVML: ask nvidia-smi
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=30)
            return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
        except (OSError, subprocess.SubprocessError):
            return None


def machine_header() -> dict:
    """gpu, driver, torch, cuda of this machine (the GPU fields None without CUDA)."""
    import torch

    cuda = torch.cuda.is_available()
    return {"gpu": torch.cuda.get_device_name(0) if cuda else None, "driver": _driver_version() if cuda else None,
            "torch": torch.__version__, "cuda": torch.version.cuda}


def _short(value: Any) -> str:
    """``repr(value)``, cut to 80 characters (a bad field may hold megabytes)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _bad(where: str, field: str, problem: str, fix: str) -> ValueError:
    return ValueError(f"{where}: `{field}` {problem}; {fix}.")


def validate(rec: Any, where: str = "recording", expect_fingerprint: str | None = None) -> dict:
    """Check a recording dict; returns it. Raises ValueError with one sentence naming the field."""
    if not isinstance(rec, dict):
        raise ValueError(f"{where}: the file holds a JSON {type(rec).__name__}, not an object with a header and a "
                         f"payload; write it with vramlab.vram.recordings.record.")
    for f in HEADER_FIELDS + ("payload",):
        if f not in rec:
            raise _bad(where, f, "is missing", "write recordings with vramlab.vram.recordings.record")
    if rec["format"] != FORMAT:
        raise _bad(where, "format", f"is {_short(rec['format'])}, not {FORMAT!r}", "this is not a vramlab GPU recording")
    if rec["version"] != VERSION:
        raise _bad(where, "version", f"is {_short(rec['version'])}; this vramlab reads version {VERSION}",
                   "record it again with this vramlab")
    if rec["kind"] not in KINDS:
        raise _bad(where, "kind", f"is {_short(rec['kind'])}", f"use one of {', '.join(KINDS)}")
    for f in ("gpu", "driver", "torch", "command"):
        if not isinstance(rec[f], str) or not rec[f].strip():
            raise _bad(where, f, f"must be a non-empty string (got {_short(rec[f])})",
                       "a recording states the machine and the command that made it")
    if rec["cuda"] is not None and not isinstance(rec["cuda"], str):
        raise _bad(where, "cuda", f"must be a version string or null (got {_short(rec['cuda'])})", "e.g. '12.8'")
    if not isinstance(rec["date"], str) or not _DATE.fullmatch(rec["date"]):
        raise _bad(where, "date", f"must be YYYY-MM-DD (got {_short(rec['date'])})", "use the UTC day it was recorded")
    if rec["weights"] not in WEIGHTS:
        raise _bad(where, "weights", f"is {_short(rec['weights'])}",
                   "use 'random' (SmolLM2's config), 'real' or 'none' (no model)")
    if not isinstance(rec["fingerprint"], str) or not _HEX64.fullmatch(rec["fingerprint"]):
        raise _bad(where, "fingerprint",
                   f"is not a sha256 in 64 lowercase hex digits (got {_short(rec['fingerprint'])})",
                   "use code_fingerprint() of the code that recorded it")
    if expect_fingerprint is not None and rec["fingerprint"] != expect_fingerprint:
        raise _bad(where, "fingerprint",
                   f"is {rec['fingerprint'][:12]}..., not the expected {expect_fingerprint[:12]}...",
                   "the recording was made by other vramlab code: record it again")
    if not isinstance(rec["synthetic"], bool):
        raise _bad(where, "synthetic", f"must be true or false (got {_short(rec['synthetic'])})",
                   "only test fixtures are true")
    payload = rec["payload"]
    if not isinstance(payload, dict):
        raise _bad(where, "payload", f"must be an object (got {type(payload).__name__})", "see PAYLOAD_KEYS")
    for key in PAYLOAD_KEYS[rec["kind"]]:
        if key not in payload:
            raise _bad(where, f"payload.{key}", f"is missing for kind {_short(rec['kind'])}",
                       f"a {rec['kind']} payload has {', '.join(PAYLOAD_KEYS[rec['kind']])}")
    return rec


# ---------------------------------------------------------------------------------------- write / read
def record(kind: str, payload: dict, out_dir: str | Path | None = None, name: str | None = None,
           command: str | None = None, weights: str = "random", synthetic: bool = False, **meta) -> Path:
    """Write one recording of ``kind`` to ``out_dir`` (default ``results/gpu``) as ``<name>.json`` (gzip above
    1 MiB). Header fields come from this machine (:func:`machine_header`), today's UTC date, ``command``
    (default: this process's command line) and :func:`code_fingerprint`; ``meta`` overrides or adds header
    fields (e.g. ``note=``). Refused without a CUDA GPU unless ``synthetic=True``, and a synthetic recording
    is never written into ``results/gpu``. Returns the path."""
    head = machine_header()
    if not synthetic and head["gpu"] is None:
        raise RuntimeError("record() writes what a CUDA GPU measured and PyTorch sees none here; "
                           "run it on a GPU machine (tests/gpu/run_gpu_checks.sh).")
    out = Path(out_dir) if out_dir is not None else RESULTS_DIR
    if synthetic and out.resolve() == RESULTS_DIR.resolve():
        raise ValueError("`out_dir`: a synthetic recording must not go into src/vramlab/results/gpu (shipped files); "
                         "write it to a temporary folder.")
    name = name or kind
    if not _SAFE_NAME.fullmatch(name):
        raise ValueError(f"`name` {name!r} must be letters, digits, '_', '.' or '-' (a file name without a folder).")
    rec = {"format": FORMAT, "version": VERSION, "kind": kind, **head,
           "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d"), "weights": weights,
           "command": command or " ".join([Path(sys.executable).name] + sys.argv),
           "fingerprint": code_fingerprint(), "synthetic": bool(synthetic)}
    rec.update(meta)
    rec["payload"] = payload
    validate(rec, f"recording {name!r}")
    out.mkdir(parents=True, exist_ok=True)
    data = json.dumps(rec, indent=1, sort_keys=False).encode()
    if len(data) > GZIP_ABOVE_BYTES:
        path = out / f"{name}.json.gz"
        path.write_bytes(gzip.compress(data, mtime=0))
    else:
        path = out / f"{name}.json"
        path.write_bytes(data)
    return path


def _resolve(path_or_name: str | Path) -> Path:
    p = Path(path_or_name)
    if p.exists():
        return p
    if isinstance(path_or_name, str) and _SAFE_NAME.fullmatch(path_or_name):
        for cand in (RESULTS_DIR / path_or_name, RESULTS_DIR / f"{path_or_name}.json",
                     RESULTS_DIR / f"{path_or_name}.json.gz"):
            if cand.is_file():
                return cand
    shipped = ", ".join(p.name for p in list_recordings()) or "none are shipped yet"
    raise ValueError(f"`path_or_name` {str(path_or_name)!r} is neither a file nor a shipped recording "
                     f"({shipped}); pass a path to a .json or .json.gz recording.")


def load_recording(path_or_name: str | Path, expect_fingerprint: str | None = None) -> dict:
    """Read and check one recording (a path, or the name of a shipped one); returns the dict.

    ``expect_fingerprint``: also require this code fingerprint (e.g. ``code_fingerprint()``). Raises
    ValueError with one sentence naming the field or the file's problem."""
    path = _resolve(path_or_name)
    where = f"recording {path.name}"
    try:
        raw = path.read_bytes()
        if path.name.endswith(".gz"):
            raw = gzip.decompress(raw)
        rec = json.loads(raw.decode("utf-8"))
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise ValueError(f"{where}: cannot be read ({exc}); check the file or record it again.") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{where}: is not valid JSON ({exc}); record it again.") from None
    return validate(rec, where, expect_fingerprint)


def list_recordings(directory: str | Path | None = None) -> list[Path]:
    """The recordings shipped in ``results/gpu`` (or ``directory``), sorted by name; empty when none."""
    d = Path(directory) if directory is not None else RESULTS_DIR
    if not d.is_dir():
        return []
    return sorted(p for p in d.iterdir() if p.is_file() and (p.name.endswith(".json") or p.name.endswith(".json.gz")))


def _torch_short(version: str) -> str:
    m = re.match(r"(\d{1,4})\.(\d{1,4})", version)
    return f"{m.group(1)}.{m.group(2)}" if m else version


def label(rec: dict) -> str:
    """``"recorded on an NVIDIA H200, torch 2.11, 2026-12-01 (random weights)"``; synthetic ones say so."""
    weights = "no model" if rec["weights"] == "none" else f"{rec['weights']} weights"
    text = f"recorded on an {rec['gpu']}, torch {_torch_short(rec['torch'])}, {rec['date']} ({weights})"
    return ("SYNTHETIC test data, not a measurement: " + text) if rec.get("synthetic") else text


def status_line(directory: str | Path | None = None) -> str:
    """One line for the lab: how many GPU recordings are shipped, or that there are none."""
    recs = list_recordings(directory)
    if not recs:
        return ("No GPU recording is shipped yet: no GPU run has happened for this lab "
                "(docs/gpu-validation.md); the figures below are CPU-mode results.")
    return f"{len(recs)} GPU recording(s) shipped: " + ", ".join(p.name for p in recs)


# ---------------------------------------------------------------------------------------- replay
def _expect(rec: dict, *kinds: str) -> dict:
    if rec.get("kind") not in kinds:
        raise ValueError(f"`rec`: kind is {rec.get('kind')!r}; this function replays {' or '.join(kinds)}.")
    return rec["payload"]


def monitor_figure_from(rec: dict, window_s: float | None = None):
    """The live widget's figure (:func:`vramlab.vram.widget.monitor_figure`) of a ``monitor_trace``,
    titled with :func:`label`."""
    from vramlab.vram.widget import monitor_figure

    p = _expect(rec, "monitor_trace")
    return monitor_figure(p["samples"], p["events"], p["mode"], window_s, title=f"GPU memory, {label(rec)}")


def allocator_rows(rec: dict) -> list[dict]:
    """Timeline rows (``step, action, size, allocated, reserved``; bytes) of an ``allocator_experiment``
    (``snapshot``: :func:`vramlab.vram.allocator.timeline` of its trace; ``fragmentation``: its per-step
    counters) or a ``memory_snapshot``."""
    from vramlab.vram.allocator import timeline

    p = _expect(rec, "allocator_experiment", "memory_snapshot")
    if rec["kind"] == "memory_snapshot":
        return timeline(p["events"])
    result = p["result"] or {}
    if "events" in result:
        return timeline(result["events"])
    if "steps" in result:
        return [{"step": i, "action": s["label"], "size": None, "allocated": s["allocated"],
                 "reserved": s["reserved"]} for i, s in enumerate(result["steps"])]
    raise ValueError(f"`rec`: the {p['experiment']!r} experiment has no timeline (its result holds neither "
                     f"'events' nor 'steps'); use oom_text() for an oom run.")


def allocator_figure(rec: dict):
    """The allocator timeline figure (:func:`vramlab.vram.allocator.timeline_figure`) of a recording."""
    from vramlab.vram.allocator import timeline_figure

    p = rec["payload"]
    what = p.get("experiment", "memory snapshot")
    conf = p.get("alloc_conf") or "default allocator"
    return timeline_figure(allocator_rows(rec), f"{what} ({conf}), {label(rec)}")


def oom_text(rec: dict) -> str:
    """The CUDA out-of-memory line, ready for :func:`vramlab.vram.oom_message.parse_oom_message`, of an
    ``oom_message`` recording or an ``allocator_experiment`` of the ``oom`` experiment."""
    p = _expect(rec, "oom_message", "allocator_experiment")
    if rec["kind"] == "oom_message":
        return p["message"]
    from vramlab.vram.allocator import ExperimentRun

    run = ExperimentRun(p["experiment"], p["alloc_conf"], p["returncode"], p["result"], p.get("stderr_tail", ""))
    if run.oom_message is None:
        raise ValueError("`rec`: the experiment's stderr holds no out-of-memory line; record the 'oom' experiment.")
    return run.oom_message


def ledger_from(rec: dict):
    """A :class:`vramlab.vram.ledger.Ledger` of a ``ledger`` recording (``.table()``, ``.figure()``)."""
    from vramlab.vram.ledger import Ledger, LedgerRow

    p = _expect(rec, "ledger")
    return Ledger([LedgerRow(r["item"], r["computed"], r["measured"], r["how"]) for r in p["rows"]],
                  f"{p['mode']} ({label(rec)})", p["batch"], p["tokens"])


def experiment_payload(run) -> dict:
    """The payload of an ``allocator_experiment`` from an :class:`~vramlab.vram.allocator.ExperimentRun`."""
    return {"experiment": run.experiment, "alloc_conf": run.alloc_conf, "returncode": run.returncode,
            "result": run.result, "stderr_tail": run.stderr_tail}


# ---------------------------------------------------------------------------------------- GPU runs
def random_smollm2(device: str = "cuda"):
    """SmolLM2-135M from its bundled config with random weights (memory does not depend on the values)."""
    import torch
    from transformers import AutoModelForCausalLM

    from vramlab.dispatch.planner import _pretrained_config

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(_pretrained_config("smollm2-135m"), dtype=torch.float32).eval().to(device)


def _record_monitor(out: Path, cmd: str) -> Path:
    import time

    import torch

    from vramlab.vram.monitor import VramMonitor

    torch.cuda.init()
    with VramMonitor(interval_s=0.02, key="recording") as mon:
        time.sleep(0.2)
        mon.mark("alloc 1 GiB")
        x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
        time.sleep(0.3)
        mon.mark("free")
        del x
        time.sleep(0.2)
        mon.mark("empty_cache")
        torch.cuda.empty_cache()
        time.sleep(0.3)
    return record("monitor_trace", {"mode": mon.mode, "samples": mon.samples, "events": mon.events,
                                    "interval_s": mon.interval_s}, out, "monitor_trace", cmd)


def _record_ledger(out: Path, cmd: str) -> Path:
    import torch

    from vramlab.vram.ledger import memory_ledger

    model = random_smollm2("cpu")
    ledger = memory_ledger(model, torch.zeros(2, 256, dtype=torch.long))
    rows = [{"item": r.item, "computed": r.computed, "measured": r.measured, "how": r.how} for r in ledger.rows]
    return record("ledger", {"mode": ledger.mode, "batch": ledger.batch, "tokens": ledger.tokens, "rows": rows,
                             "model": "smollm2-135m config, float32"}, out, "ledger", cmd)


def _record_doctor(out: Path, cmd: str) -> list[Path]:
    from vramlab.bnb import doctor

    rep = doctor.diagnose()
    paths = [record("doctor_report", rep.to_dict(), out, "doctor_report", cmd, weights="none")]
    run = doctor.break_and_diagnose("hidden_runtime")
    root = next((f.label for f in run.report.findings if f.check == "root cause"), None)
    print(f"fault {run.fault} ({run.env}): exit {run.returncode}; root cause: {root}")
    print(run.output[-1500:])
    print(run.report.text())
    payload = dict(run.report.to_dict(), fault=run.fault, fault_env={k: str(v) for k, v in run.env.items()},
                   returncode=run.returncode, output_tail=run.output[-6000:])
    paths.append(record("doctor_report", payload, out, "doctor_fault_hidden_runtime", cmd, weights="none"))
    return paths


def _record_dispatch(out: Path, cmd: str) -> Path:
    """The dispatch error and its three fixes on CUDA, with SmolLM2's config and random weights saved to a
    temporary folder (``models.ensure_converted`` pointed at it for this process only)."""
    import tempfile

    import torch

    from vramlab import models
    from vramlab.dispatch import loading as D

    tmp = Path(tempfile.mkdtemp(prefix="vramlab-random-smollm2-"))
    random_smollm2("cpu").save_pretrained(tmp)
    models.ensure_converted = lambda *a, **k: tmp  # this recording process only
    exc = D.trigger_dispatch_error("8bit", D.TRIGGER_BUDGET)
    rows = [{"step": "trigger", "budget": {str(k): v for k, v in D.TRIGGER_BUDGET.items()}, "error": str(exc)}]
    for fix in (D.fix_budget, D.fix_offload, D.fix_smaller):
        torch.cuda.reset_peak_memory_stats()
        model = fix(gpu=True)
        info = D.describe_loaded(model)
        rows.append({"step": fix.__name__, "devices": {str(k): v for k, v in info["devices"].items()},
                     "quantized_linears": info.get("quantized_linears"), "plain_linears": info.get("plain_linears"),
                     "footprint_bytes": info.get("footprint_bytes"),
                     "max_allocated": torch.cuda.max_memory_allocated()})
        del model
        torch.cuda.empty_cache()
    return record("dryrun_compare", {"what": "dispatch error and fixes on CUDA", "rows": rows}, out, "dispatch", cmd)


def _record_allocator(out: Path, cmd: str) -> list[Path]:
    """Default vs expandable segments, the capped OOM in a child process, the memory-history snapshot."""
    from vramlab.vram.allocator import GiB, MiB, fragmentation, run_experiment

    paths = []
    for expandable in (False, True):
        run = fragmentation(expandable)
        paths.append(record("allocator_experiment", experiment_payload(run), out,
                            "fragmentation_" + ("expandable" if expandable else "default"), cmd))
    run = run_experiment("oom", cap_bytes=1 * GiB, chunk_bytes=256 * MiB)
    paths.append(record("allocator_experiment", experiment_payload(run), out, "oom_capped", cmd))
    if run.oom_message:
        paths.append(record("oom_message", {"message": run.oom_message, "cap_bytes": 1 * GiB}, out, "oom_message", cmd))
    run = run_experiment("snapshot")
    paths.append(record("allocator_experiment", experiment_payload(run), out, "snapshot_experiment", cmd))
    if run.result and "segments" in run.result:
        paths.append(record("memory_snapshot", {"events": run.result["events"], "segments": run.result["segments"]},
                            out, "memory_snapshot", cmd))
    return paths


STEPS = {"monitor": _record_monitor, "allocator": _record_allocator, "ledger": _record_ledger,
         "doctor": _record_doctor, "dispatch": _record_dispatch}


def record_all(out_dir: str | Path, only: list[str] | None = None) -> list[Path]:
    """Run the GPU experiments of :data:`STEPS` (``only``: some of them) and write one recording each into
    ``out_dir``. Needs CUDA. A failing step prints one ``error:`` line and the others still run."""
    out = Path(out_dir)
    paths: list[Path] = []
    for name in only or list(STEPS):
        cmd = f"python -m vramlab.vram.recordings record --out {out} --only {name}"
        try:
            got = STEPS[name](out, cmd)
            paths.extend(got if isinstance(got, list) else [got])
        except Exception as exc:  # noqa: BLE001 - one failed step must not lose the others' recordings
            print(f"error: {name} not recorded: {type(exc).__name__}: {str(exc)[:2000]}", file=sys.stderr)
    return paths


def _main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m vramlab.vram.recordings", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record", help="run the GPU experiments and write recordings (needs CUDA)")
    r.add_argument("--out", default=os.environ.get("OUT", "gpu-check") + "/recordings")
    r.add_argument("--only", action="append", choices=list(STEPS), help="one step (repeatable); default: all")
    sub.add_parser("list", help="the shipped recordings")
    s = sub.add_parser("show", help="check one recording and print its label")
    s.add_argument("name")
    args = parser.parse_args(argv)
    if args.cmd == "record":
        from vramlab.device import has_cuda

        if not has_cuda():
            print("skip: no CUDA GPU (CPU mode): no recording written")
            return 0
        paths = record_all(args.out, args.only)
        for p in paths:
            rec = load_recording(p)
            print(f"recorded {p.name} ({rec['kind']}): {label(rec)}")
        return 0 if paths else 1
    if args.cmd == "list":
        print(status_line())
        return 0
    try:
        rec = load_recording(args.name)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{rec['kind']}: {label(rec)}; command: {rec['command']}")
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))


__all__ = ["FORMAT", "VERSION", "KINDS", "HEADER_FIELDS", "PAYLOAD_KEYS", "RESULTS_DIR", "code_fingerprint",
           "machine_header", "validate", "record", "load_recording", "list_recordings", "label", "status_line",
           "monitor_figure_from", "allocator_rows", "allocator_figure", "oom_text", "ledger_from",
           "experiment_payload", "random_smollm2", "record_all", "STEPS"]
