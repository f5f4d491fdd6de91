"""QuaRot on SmolLM2-135M: perplexity of W/A/KV fake quantization with and without rotation.

Computes the table FP32 / W8A8 / W4A16 / W16A4 / W4A4 / W4A4KV4 x rotation {none, random orthogonal,
randomized Hadamard} x weights {RTN, GPTQ} on the 8 x 512 pydoc evaluation windows, prints one JSON
line per measured row and (re)writes ``src/vramlab/results/quarot_table.json`` after every row, so a
partial run still leaves a usable, honest file (``"complete": false`` until the end).

    python benchmarks/rotation.py                    # the full table (~30-60 min on 2 shared cores)
    python benchmarks/rotation.py --quick            # 2 windows, 4 calibration windows, one seed: a smoke run
    python benchmarks/rotation.py --phases rtn gptq4 &                                 # two processes,
    python benchmarks/rotation.py --phases seeds_rtn seeds_gptq group128 gptq8 --out part2.json
    python benchmarks/rotation.py --merge part2.json # ... joined (same commit and fingerprint only)
    python benchmarks/rotation.py --check            # does the table match the current code? (exit 1 if not)
    python benchmarks/rotation.py --check --live     # ... and recompute one quantized row (~1 min)

Provenance: the table records the git commit it was computed at and ``code_fingerprint`` (SHA-256 of
the source files that produce the numbers, ``vramlab.quarot.quant.FINGERPRINT_FILES``). The benchmark refuses
to write from a tree with uncommitted changes unless ``--allow-dirty`` (the dirty files are then
recorded in the table, and ``--check`` reports them). ``--append`` (resume) only adds rows to a table
of the same commit and fingerprint.

Settings (QuaRot, arXiv 2404.00456): activations per-token symmetric, clip 0.9; weights symmetric per
output channel with the MSE clip search, RTN or GPTQ (act-order, 1% damping, calibration windows that
start after the evaluation windows); KV asymmetric, groups of head_dim = 64, clip 0.95, K after RoPE
and after the online head-wise Hadamard; lm_head 16-bit. "none" is the original model (no norm
folding, tied embeddings). W16A4 has no quantized weights, so it has one row per rotation
(weights "-"). GPTQ weights of one rotation are computed once and reused for every activation setting.

Order of work (so the most useful rows exist first if the run is cut short): seed 0 RTN rows for
every rotation; GPTQ W4 per-channel rows; extra seeds for the rotated 4-bit rows; GPTQ W8A8 rows;
group-128 GPTQ W4A4KV4 (Hadamard and none). The "summary" in the JSON gives, per (setting, rotation,
weights), the median over the seeds measured.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

import transformers
import vramlab
from vramlab.quarot import quant
from vramlab.data import token_windows
from vramlab.eval import perplexity
from vramlab.models import MODEL_NAME, load_smollm2
from vramlab.numerics import machine_difference, machine_record, reproducible
from vramlab.quarot.rotate import rotate_model

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "src" / "vramlab" / "results" / "quarot_table.json"

SETTINGS = {  # name: (w_bits, a_bits, kv_bits)
    "FP32": (16, 16, 16),
    "W8A8": (8, 8, 16),
    "W4A16": (4, 16, 16),
    "W16A4": (16, 4, 16),
    "W4A4": (4, 4, 16),
    "W4A4KV4": (4, 4, 4),
}
ROTATIONS = ("none", "hadamard", "random")
# A float32 table's W4A4KV4 row, recomputed on another kernel path or thread count, moved by up to 8.7%
# (issue 26: 78.52 in the table, 85.39 on an AVX-512 EPYC); the bound leaves room above that.
FLOAT32_LIVE_TOLERANCE = 0.15
PHASES = ("rtn", "gptq4", "seeds_rtn", "seeds_gptq", "group128", "gptq8")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--windows", type=int, default=8, help="evaluation windows of 512 tokens (from token 0)")
    p.add_argument("--calib", type=int, default=16, help="GPTQ calibration windows of 512 tokens (after the eval ones)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="rotation seeds (first = main seed)")
    p.add_argument("--act-clip", type=float, default=0.9, help="activation clip ratio for A4 (QuaRot: 0.9)")
    p.add_argument("--act-clip-8", type=float, default=1.0,
                   help="activation clip ratio for A8 (QuaRot's default a_clip_ratio is 1.0; 0.9 clips the "
                        "unrotated outlier channels: W8A8 16.2 vs 14.8 on 2 windows)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (1: the CPU is shared)")
    p.add_argument("--dtype", choices=("float64", "float32"), default="float64",
                   help="float64: the reproducible path (vramlab.numerics.reproducible: the model in float64 up to "
                        "each quantizer, about 1.5x the CPU time); float32: the fast path, whose 4-bit rows move by several "
                        "percent between kernel paths (issue 26); the weight MSE clip search and GPTQ follow the "
                        "model's dtype (quant.py)")
    p.add_argument("--budget-min", type=float, default=0,
                   help="stop starting new phases after this many minutes (0 = no limit); skipped phases are listed")
    p.add_argument("--kv-clip", type=float, default=0.95)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--quick", action="store_true", help="2 windows, 4 calibration windows, seed 0 only, no extras")
    p.add_argument("--skip-extras", action="store_true", help="no W8 GPTQ and no group-128 rows")
    p.add_argument("--phases", nargs="+", default=None, choices=PHASES,
                   help="run only these phases (default: all, in the order listed)")
    p.add_argument("--append", action="store_true",
                   help="keep the rows already in --out and add this run's rows (same commit and code "
                        "fingerprint only; the command is recorded)")
    p.add_argument("--allow-dirty", action="store_true",
                   help="write the table even with uncommitted changes in the repository (recorded in the table)")
    p.add_argument("--merge", type=Path, default=None,
                   help="add the rows of another table of this benchmark (other phases, same commit, code "
                        "fingerprint, versions and settings) to --out; complete when every phase is done")
    p.add_argument("--allow-partial", action="store_true",
                   help="with --merge: accept a part whose process stopped early (its rows are kept; the "
                        "merged table then says complete: false and names the unfinished part)")
    p.add_argument("--check", action="store_true",
                   help="only check that --out matches the current code (fingerprint, complete, clean); exit 1 if not")
    p.add_argument("--live", action="store_true",
                   help="with --check: also recompute the W4A4KV4 Hadamard RTN seed-0 row and compare (1e-3 relative)")
    return p.parse_args(argv)


REPO_ROOT = Path(__file__).resolve().parents[1]


def git_state(out: Path = DEFAULT_OUT) -> dict:
    """``{"commit": full SHA or None, "dirty": [paths with uncommitted changes]}`` of the repository
    root (git runs with ``-C <root>``, whatever the current directory). The output table itself does
    not count as a change. Outside a git checkout: commit None, dirty ["<not a git checkout>"]."""
    import subprocess

    def git(*args):
        return subprocess.run(["git", "-C", str(REPO_ROOT), *args], capture_output=True, text=True,
                              timeout=30, check=True).stdout

    try:
        commit = git("rev-parse", "HEAD").strip()
        lines = git("status", "--porcelain", "--untracked-files=all").splitlines()
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": ["<not a git checkout>"]}
    try:
        out_rel = Path(out).resolve().relative_to(REPO_ROOT).as_posix()
    except ValueError:
        out_rel = None
    dirty = []
    for line in lines:
        path = line[3:].split(" -> ")[-1].strip('"')
        if path != out_rel and not path.endswith(".json.part"):
            dirty.append(path)
    return {"commit": commit, "dirty": dirty}


class Table:
    def __init__(self, args, argv):
        self.args = args
        self.t0 = time.time()
        self.rows: list[dict] = []
        self.meta = {
            "command": "python benchmarks/rotation.py " + " ".join(argv),
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "versions": {"python": platform.python_version(), "torch": torch.__version__,
                         "transformers": transformers.__version__,
                         "vramlab": getattr(vramlab, "__version__", "?")},
            "git": args.git["commit"],
            "dirty": args.git["dirty"] or None,
            "code_fingerprint": quant.code_fingerprint(),
            "machine": {**machine_record(), "device": "cpu", "dtype": args.dtype},
            "model": MODEL_NAME + " - weights were Q4_1 in the GGUF, so W4 re-quantizes 4-bit weights",
            "windows": {"text": "Python 3.11.7 pydoc topics frozen in the package (vramlab.data.token_windows)", "n": args.windows, "length": 512,
                        "offset_tokens": 0},
            "calibration": {"n": args.calib, "length": 512, "offset_tokens": quant.EVAL_WINDOWS * 512,
                            "note": "GPTQ calibration windows start after the 8 evaluation windows"},
            "seeds": args.seeds,
            "settings": {
                "activations": f"per-token symmetric, clip {args.act_clip} for A4 and {args.act_clip_8} for A8, inputs of all decoder linears "
                               "(down_proj: after the online Hadamard); lm_head input not quantized",
                "weights": "symmetric per output channel (or group 128 where group_size=128), MSE clip search "
                           "(grid 100, max shrink 0.8, norm 2.4); RTN or GPTQ (act-order, damp 1%, "
                           "sequential layer by layer, full-precision activations during calibration)",
                "kv": f"asymmetric, group = head_dim = 64, clip {args.kv_clip}, K post-RoPE (after the online "
                      "head-wise Hadamard when rotated), V per head",
                "lm_head": "16-bit (float32 here)",
                "rotation_none": "the original model: no norm folding, tied embeddings",
                "rotation_hadamard": "vramlab.quarot.rotate.rotate_model(rotation='hadamard', seed): randomized "
                                     "Hadamard residual rotation, online Hadamard before down_proj, head-wise "
                                     "Hadamard on V/O and on Q/K after RoPE",
                "rotation_random": "same with a Haar-random orthogonal residual rotation",
                "act_clip": args.act_clip, "act_clip_8": args.act_clip_8, "kv_clip": args.kv_clip, "kv_group": 64,
            },
            "fp32_reference_note": "rows with setting FP32 under a rotation check invariance (same ppl)",
        }

    def load_previous(self) -> None:
        """--append: keep the rows (and the first run's metadata) of the existing table."""
        old = json.loads(self.args.out.read_text())
        if old.get("code_fingerprint") != self.meta["code_fingerprint"]:
            raise SystemExit("--append: the code fingerprint differs from the table's (the code changed); "
                             "regenerate the whole table instead")
        if old.get("git") != self.meta["git"] or old.get("dirty") != self.meta["dirty"]:
            raise SystemExit(f"--append: the table was computed at commit {old.get('git')} "
                             f"(dirty: {old.get('dirty')}), this tree is {self.meta['git']} "
                             f"(dirty: {self.meta['dirty']}); resume only from the same clean commit")
        first = {"command": old["command"], "date": old["date"], "git": old.get("git", "unknown"),
                 "phases_done": old.get("phases_done")}
        if not old.get("complete"):
            first["note"] = f"this run stopped (error or interrupt) after {len(old['rows'])} rows; they are kept"
        runs = old.get("runs") or [first]
        self.rows = old["rows"]
        self.meta["runs"] = runs + [{"command": self.meta["command"], "date": self.meta["date"],
                                     "git": self.meta["git"]}]
        for key in ("command", "date"):
            self.meta[key] = old[key]
        if old["versions"] != self.meta["versions"]:
            raise SystemExit(f"--append: versions differ from the table's ({old['versions']})")

    def add(self, row: dict) -> None:
        row = {k: v for k, v in row.items()}
        row["t"] = round(time.time() - self.t0, 1)
        self.rows.append(row)
        print(json.dumps(row), flush=True)
        self.write(complete=False)

    def summary(self) -> list[dict]:
        groups: dict[tuple, list] = {}
        for r in self.rows:
            key = (r["setting"], r["rotation"], r["weights"], r.get("group_size"))
            groups.setdefault(key, []).append(r)
        out = []
        for (setting, rot, weights, gs), rs in groups.items():
            ppls = [r["ppl"] for r in rs]
            out.append({"setting": setting, "rotation": rot, "weights": weights, "group_size": gs,
                        "ppl_median": statistics.median(ppls), "ppl_min": min(ppls), "ppl_max": max(ppls),
                        "seeds": [r["seed"] for r in rs], "n": len(rs)})
        return out

    def write(self, complete: bool) -> None:
        data = dict(self.meta)
        data["complete"] = complete
        data["elapsed_s"] = round(time.time() - self.t0, 1)
        data["rows"] = self.rows
        data["summary"] = self.summary()
        self.args.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.args.out.with_suffix(".json.part")
        tmp.write_text(json.dumps(data, indent=1) + "\n")
        tmp.replace(self.args.out)


def check(args) -> int:
    """--check: report whether the table at --out is what the current code computes."""
    table = quant.load_quarot_table(args.out)
    problems = quant.table_fingerprint_problems(table)
    print(f"table: {args.out}\n  commit {table.get('git')}, {len(table['rows'])} rows, complete: {table.get('complete')}")
    print(f"  fingerprint: table {(table.get('code_fingerprint') or {}).get('sha256')}\n"
          f"               code  {quant.code_fingerprint()['sha256']}")
    # Two different things (issue 26): the code changed (the table must be regenerated: a PROBLEM), or this
    # machine computes float32 differently (expected, not a problem: the spread is stated).
    dtype = (table.get("machine") or {}).get("dtype", "float32")
    machine = machine_difference(table.get("machine"))
    tolerance = 1e-6 if dtype == "float64" else FLOAT32_LIVE_TOLERANCE
    if machine:
        print(f"  MACHINE: {machine}. " + (
            "The table is on the reproducible float64 path: it still reproduces to 1e-6." if dtype == "float64" else
            f"The table is on the float32 path: expect its 4-bit rows to differ here by up to "
            f"{FLOAT32_LIVE_TOLERANCE:.0%} (the kernel-path spread, vramlab/results/kernel_spread.json); "
            f"the float64 path (--dtype float64, the default) gives the same rows on every machine (issue 26)."))
    if args.live:
        torch.set_num_threads(args.threads)
        stored, live = live_row(table)
        rel = abs(live - stored) / stored
        print(f"  live W4A4KV4 hadamard RTN seed 0 ({dtype}): table {stored:.4f}, recomputed {live:.4f} "
              f"(rel diff {rel:.1e}, tolerance {tolerance:.0e})")
        if rel > tolerance:
            problems.append(f"the recomputed row differs by {rel:.1e} relative (> {tolerance:.0e})")
    for p in problems:
        print("  PROBLEM:", p)
    print("OK: the table matches the current code" if not problems else "NOT OK")
    return 0 if not problems else 1


def merge(args) -> int:
    """--merge: join two tables computed by separate processes (disjoint phases) of the same commit."""
    a = json.loads(args.out.read_text())
    b = json.loads(args.merge.read_text())
    for key in ("code_fingerprint", "git", "versions", "windows", "calibration", "seeds", "settings"):
        if a.get(key) != b.get(key):
            raise SystemExit(f"--merge: {key} differs between {args.out} and {args.merge}; they are not "
                             f"parts of one run")
    if a.get("dirty") or b.get("dirty"):
        raise SystemExit("--merge: a part was written from a dirty tree")
    unfinished = [str(path) for path, part in ((args.out, a), (args.merge, b)) if not part.get("finished")]
    if unfinished and not args.allow_partial:
        raise SystemExit(f"--merge: {', '.join(unfinished)} did not finish (its process stopped early); rerun "
                         f"or resume it first, or pass --allow-partial (the merged table is then partial)")
    done = list(a.get("phases_done") or []) + list(b.get("phases_done") or [])
    if len(set(done)) != len(done):
        raise SystemExit(f"--merge: the parts overlap (phases {done})")
    key = lambda r: (r["setting"], r["rotation"], r["weights"], r.get("group_size"), r.get("seed"))  # noqa: E731
    if {key(r) for r in a["rows"]} & {key(r) for r in b["rows"]}:
        raise SystemExit("--merge: the parts share rows")
    merged = dict(a)
    merged["runs"] = [{**{k: part.get(k) for k in ("command", "date", "git", "elapsed_s", "phases_done")},
                       "finished": bool(part.get("finished")), "rows": len(part["rows"])} for part in (a, b)]
    merged["rows"] = a["rows"] + b["rows"]
    merged["phases_done"] = done
    merged["phases_skipped_for_time"] = (a.get("phases_skipped_for_time") or []) + \
        (b.get("phases_skipped_for_time") or [])
    merged["complete"] = {f"phase_{p}" for p in PHASES} <= set(done) and not merged["phases_skipped_for_time"] \
        and not unfinished
    merged["finished"] = not unfinished
    if unfinished:
        merged["partial_note"] = (f"{', '.join(unfinished)} stopped before its last phase; its rows so far are "
                                  f"kept (measured by the same code), the remaining rows are missing")
    merged["elapsed_s"] = max(a.get("elapsed_s", 0), b.get("elapsed_s", 0))
    table = Table.__new__(Table)
    table.rows = merged["rows"]
    merged["summary"] = table.summary()
    args.out.write_text(json.dumps(merged, indent=1) + "\n")
    print(json.dumps({"merged": str(args.merge), "rows": len(merged["rows"]), "complete": merged["complete"]}))
    return 0


def live_row(table: dict, setting: str = "W4A4KV4", rotation: str = "hadamard", weights: str = "rtn",
             seed: int = 0) -> tuple[float, float]:
    """(table value, recomputed value) of one row, with the settings recorded in the table."""
    row = next(r for r in table["rows"] if r["setting"] == setting and r["rotation"] == rotation
               and r["weights"] == weights and r.get("seed") == seed and r.get("group_size") is None)
    st = table["settings"]
    model, tok = load_smollm2()
    if (table.get("machine") or {}).get("dtype") == "float64":
        model = reproducible(model)
    windows = token_windows(tok, table["windows"]["n"], table["windows"]["length"])
    base = rotate_model(model, rotation, seed=seed) if rotation != "none" else model
    a = row["a_bits"]
    q = quant.quantize_model(base, row["w_bits"], a, row["kv_bits"], weight_method=weights,
                             act_clip=st["act_clip"] if a <= 4 else st["act_clip_8"], kv_clip=st["kv_clip"],
                             progress=False)
    return row["ppl"], perplexity(q, windows)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.check:
        return check(args)
    if args.merge:
        return merge(args)
    args.git = git_state(args.out)
    if args.git["dirty"] and not args.allow_dirty:
        raise SystemExit(f"Refusing to write {args.out}: the repository has uncommitted changes "
                         f"({', '.join(args.git['dirty'][:8])}{' ...' if len(args.git['dirty']) > 8 else ''}); "
                         f"commit them first (the table records the commit), or pass --allow-dirty "
                         f"(recorded in the table).")
    if args.quick:
        args.windows, args.calib, args.seeds, args.skip_extras = 2, 4, [0], True
    torch.set_num_threads(args.threads)
    table = Table(args, argv)
    if args.append and args.out.exists():
        table.load_previous()
    model, tok = load_smollm2()
    if args.dtype == "float64":
        model = reproducible(model)
    windows = token_windows(tok, args.windows, 512)
    calib = quant.calibration_windows(tok, args.calib)
    seed0 = args.seeds[0]

    bases: dict[tuple, torch.nn.Module] = {}

    def base(rot: str, seed: int):
        key = (rot, seed if rot != "none" else None)
        if key not in bases:
            bases[key] = model if rot == "none" else rotate_model(model, rot, seed=seed)
        return bases[key]

    def measure(setting, rot, seed, weights="-", qweights=None, group_size=None, **extra):
        w, a, kv = SETTINGS[setting]
        t = time.time()
        m = base(rot, seed)
        if setting != "FP32":
            m = quant.quantize_model(m, w, a, kv, weight_method=weights if weights != "-" else "rtn",
                                     group_size=group_size, act_clip=args.act_clip if a <= 4 else args.act_clip_8, kv_clip=args.kv_clip,
                                     weights=qweights, progress=False)
        ppl = perplexity(m, windows)
        del m
        table.add({"setting": setting, "rotation": rot, "weights": weights, "group_size": group_size,
                   "seed": seed if rot != "none" else None, "w_bits": w, "a_bits": a, "kv_bits": kv,
                   "ppl": ppl, "seconds": round(time.time() - t, 1), **extra})

    wcache: dict[tuple, dict] = {}

    def qweights(rot, seed, bits, method, group_size=None):
        key = (rot, seed if rot != "none" else None, bits, method, group_size)
        if key not in wcache:
            t = time.time()
            wcache[key] = quant.quantize_weights(base(rot, seed), bits, method, calibration=calib,
                                                 group_size=group_size, progress=True)
            print(json.dumps({"weights_done": list(map(str, key)), "seconds": round(time.time() - t, 1)}),
                  flush=True)
        return wcache[key]

    def drop(rot, seed):
        for key in [k for k in wcache if k[0] == rot and k[1] == seed]:
            del wcache[key]
        if rot != "none":
            bases.pop((rot, seed), None)

    def phase_rtn():
        """FP32 and every RTN row, main seed (Hadamard first: the headline)."""
        measure("FP32", "none", None)
        for rot in ("hadamard", "none", "random"):
            if rot != "none":
                measure("FP32", rot, seed0)
            for setting in ("W16A4", "W4A4KV4", "W4A4", "W4A16", "W8A8"):
                w = SETTINGS[setting][0]
                if w < 16:
                    measure(setting, rot, seed0, "rtn", qweights(rot, seed0, w, "rtn"))
                else:
                    measure(setting, rot, seed0)
            for key in [k for k in wcache if k[3] == "rtn"]:
                del wcache[key]

    def phase_gptq4():
        """GPTQ W4 (per channel), main seed, reused for W4A16 / W4A4 / W4A4KV4."""
        for rot in ("hadamard", "none", "random"):
            qw = qweights(rot, seed0, 4, "gptq")
            for setting in ("W4A4KV4", "W4A4", "W4A16"):
                measure(setting, rot, seed0, "gptq", qw)
            drop(rot, seed0 if rot != "none" else None)

    def phase_seeds_rtn():
        """More seeds for the rotated RTN 4-bit rows (the seed moves them a lot: report medians)."""
        for seed in args.seeds[1:]:
            for rot in ("hadamard", "random"):
                measure("W16A4", rot, seed)
                rtn = qweights(rot, seed, 4, "rtn")
                measure("W4A4KV4", rot, seed, "rtn", rtn)
                measure("W4A4", rot, seed, "rtn", rtn)
                drop(rot, seed)

    def phase_seeds_gptq():
        """More seeds for the headline Hadamard + GPTQ rows."""
        for seed in args.seeds[1:]:
            g = qweights("hadamard", seed, 4, "gptq")
            measure("W4A4KV4", "hadamard", seed, "gptq", g)
            measure("W4A4", "hadamard", seed, "gptq", g)
            drop("hadamard", seed)

    def phase_group128():
        """Group-128 GPTQ weights for the headline row, with and without rotation."""
        for rot in ("hadamard", "none"):
            qw = qweights(rot, seed0, 4, "gptq", group_size=128)
            measure("W4A4KV4", rot, seed0, "gptq", qw, group_size=128)
            drop(rot, seed0 if rot != "none" else None)

    def phase_gptq8():
        """GPTQ W8A8."""
        for rot in ("hadamard", "none", "random"):
            measure("W8A8", rot, seed0, "gptq", qweights(rot, seed0, 8, "gptq"))
            drop(rot, seed0 if rot != "none" else None)

    phases = [phase_rtn, phase_gptq4, phase_seeds_rtn, phase_seeds_gptq]
    if not args.skip_extras:
        phases += [phase_group128, phase_gptq8]
    if args.phases:
        phases = [ph for ph in phases if ph.__name__.removeprefix("phase_") in args.phases]
    done, skipped = [], []
    for phase in phases:
        if args.budget_min and time.time() - table.t0 > 60 * args.budget_min:
            skipped.append(f"{phase.__name__}: {phase.__doc__}")
            continue
        phase()
        done.append(phase.__name__)
    if args.append and table.meta.get("runs"):
        table.meta["runs"][-1]["phases_done"] = list(done)
        done = [d for run in table.meta["runs"] for d in (run.get("phases_done") or [])]
    table.meta["phases_done"] = done
    table.meta["phases_skipped_for_time"] = skipped
    table.meta["finished"] = True  # this process ran to the end (complete: every phase of the table is in)
    table.write(complete={f"phase_{p}" for p in PHASES} <= set(done) and not skipped)
    print(json.dumps({"done": True, "elapsed_s": round(time.time() - table.t0, 1), "out": str(args.out)}))
    # The online Hadamard's cost: fwht against the dense matmul, side by side in this run
    # (acceptance: >= 1.5x at n = 4096 on [2048, 4096] float32; benchmarks/fwht.py has more widths).
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from fwht import measure_width

    torch.set_num_threads(args.threads)
    print(json.dumps({"bench": "fwht_vs_dense", "threads": torch.get_num_threads(),
                      **measure_width(4096, rows=2048, rounds=5)}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
