"""What watching VRAM costs: the VramMonitor sampler's time per sample and its share of one core.

Run: python benchmarks/vram.py [--seconds 10] [--hz 10]

Prints JSON lines, measured side by side in one run:

* ``per_sample``: the median and p90 wall time of one sample (``VramMonitor.sample_once``), over
  2,000 samples, in microseconds, for the mode this machine has (GPU: torch counters, plus NVML
  when present; CPU mode: process RSS);
* ``at_rate``: the monitor sampling at ``--hz`` for ``--seconds``: the sampler thread's own CPU time
  (``time.thread_time``) divided by the wall time = its share of one core (target: under 1% at 10 Hz),
  next to the same process idling for the same time without a monitor (the baseline's process CPU
  share), and the samples actually taken vs the nominal rate.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from vramlab.vram.monitor import VramMonitor


def per_sample(n: int = 2000) -> dict:
    mon = VramMonitor(interval_s=0.1, key="bench-per-sample")  # never started: sample_once only
    mon.sample_once()  # warm up (psutil / NVML handles)
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        mon.sample_once()
        times.append(time.perf_counter() - t0)
    times.sort()
    return {"bench": "per_sample", "mode": mon.mode, "n": n, "median_us": round(statistics.median(times) * 1e6, 2),
            "p90_us": round(times[int(0.9 * n)] * 1e6, 2)}


def at_rate(seconds: float, hz: float) -> dict:
    # baseline: this process idling for the same time, no monitor
    c0, w0 = time.process_time(), time.perf_counter()
    time.sleep(seconds)
    idle_share = (time.process_time() - c0) / (time.perf_counter() - w0)
    # the monitor at hz
    mon = VramMonitor(interval_s=1.0 / hz, key="bench-rate")
    c0, w0 = time.process_time(), time.perf_counter()
    mon.start()
    time.sleep(seconds)
    mon.stop()
    wall = time.perf_counter() - w0
    process_share = (time.process_time() - c0) / wall
    return {"bench": "at_rate", "mode": mon.mode, "hz": hz, "seconds": round(wall, 2),
            "samples": mon.n_samples, "nominal_samples": int(seconds * hz),
            "sampler_thread_cpu_s": round(mon.sampler_cpu_s, 5),
            "sampler_share_of_one_core_pct": round(100 * mon.sampler_cpu_s / wall, 4),
            "process_share_with_monitor_pct": round(100 * process_share, 4),
            "process_share_idle_baseline_pct": round(100 * idle_share, 4),
            "target_pct": 1.0, "under_target": mon.sampler_cpu_s / wall < 0.01}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--hz", type=float, default=10.0)
    args = parser.parse_args()
    print(json.dumps(per_sample()), flush=True)
    print(json.dumps(at_rate(args.seconds, args.hz)), flush=True)


if __name__ == "__main__":
    main()
