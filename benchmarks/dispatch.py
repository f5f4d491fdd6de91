"""Planning on the meta device vs loading for real, measured side by side in one run.

Part 1, for each bundled config: seconds to build the meta model (accelerate ``init_empty_weights``)
and to plan ``device_map="auto"`` for one GPU of 24 GiB + cpu (bf16), and where the plan puts it.

Part 2, the real SmolLM2 from the local cache, per quantization (none, 8-bit, 4-bit), all on cpu:
the bytes the planner counts (``vramlab.dispatch.module_sizes``) next to the loaded model's
``get_memory_footprint()``, the 4-bit ``absmax`` bytes neither counts (stored vs
``dispatch.absmax_bytes``), and plan time vs load time. ``planned == loaded`` is the point: the
planner's arithmetic is the real memory of the weights. The CPU may be shared: only the ratios
measured in the same run mean anything.

    python benchmarks/dispatch.py
    python benchmarks/dispatch.py --configs smollm2-135m llama-3.1-70b
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="*", default=None, help="bundled config names (default: all)")
    parser.add_argument("--gpu-gib", type=float, default=24.0, help="GPU 0 budget for part 1 (GiB)")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(1)
    logging.getLogger("bitsandbytes").setLevel(logging.ERROR)
    from transformers import AutoConfig

    from vramlab import dispatch, models
    from vramlab.serving.kvcache import available_configs

    env = {"python": platform.python_version(), "torch": torch.__version__, "cpus": os.cpu_count()}
    print(json.dumps({"env": env}))
    budget = {0: int(args.gpu_gib * dispatch.GiB), "cpu": 2048 * dispatch.GiB}
    for name in args.configs or available_configs():
        t0 = time.perf_counter()
        model = dispatch.empty_model(name)
        t1 = time.perf_counter()
        plan = dispatch.plan_device_map(model, budget)
        t2 = time.perf_counter()
        used = dispatch.device_usage(model, plan)
        print(json.dumps({"part": "meta", "config": name, "build_s": round(t1 - t0, 2), "plan_s": round(t2 - t1, 2),
                          "gpu_gib": args.gpu_gib,
                          "placed_gib": {dispatch.device_label(d): round(b / dispatch.GiB, 2) for d, b in used.items()}}))

    path = models.ensure_converted()
    cfg = AutoConfig.from_pretrained(path)
    for quant in (None, "8bit", "4bit"):
        t0 = time.perf_counter()
        planned = dispatch.module_sizes(cfg, dtype="bfloat16", quantization=quant)[""]
        t1 = time.perf_counter()
        if quant is None:
            from transformers import AutoModelForCausalLM

            loaded = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16)
        else:
            loaded = dispatch.load_quantized(quant, {"cpu": "1GB"})
        t2 = time.perf_counter()
        footprint = loaded.get_memory_footprint()
        # 4-bit: the float32 absmax per 64 weights lives in weight.quant_state, outside both counts
        absmax = sum(m.weight.quant_state.absmax.numel() * m.weight.quant_state.absmax.element_size()
                     for m in loaded.modules() if type(m).__name__ == "Linear4bit")
        print(json.dumps({"part": "smollm2", "quantization": quant or "bf16", "planned_bytes": planned,
                          "loaded_footprint_bytes": footprint, "equal": planned == footprint,
                          "absmax_bytes_not_counted": absmax,
                          "absmax_predicted": dispatch.absmax_bytes(cfg) if quant == "4bit" else 0,
                          "plan_s": round(t1 - t0, 2), "load_s": round(t2 - t1, 2),
                          "load_over_plan": round((t2 - t1) / max(t1 - t0, 1e-6), 1)}))
        del loaded


if __name__ == "__main__":
    main()
