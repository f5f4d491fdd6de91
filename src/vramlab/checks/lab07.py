"""Checks for notebook 07 (bitsandbytes for real, and a doctor for its setup failures).

The references are vramlab's own functions and data (``vramlab.bnb.logs.explain_log``, the log corpus,
the measured table of ``benchmarks/bnb.py``), so a check and the lesson cannot disagree.
"""

from __future__ import annotations

from typing import Any

from vramlab.bnb.logs import LABELS, corpus_entry, explain_log
from vramlab.checks._core import CheckResult, as_float, exercise, fmt_number, is_untouched, report

__all__ = ["check_log_label", "check_log_fix", "check_quant_ranking", "check_4bit_prediction"]

LABEL_EXERCISE_LOG = "issue1518_nocublaslt_cuda124"

_SYMPTOM_HINTS = {
    "compute_capability_low": "7.0 is above the oldest GPU bitsandbytes supports; the '< 7.5' line is a warning about speed, "
                              "not why setup failed. Which file did it look for and not find?",
    "native_library_unavailable": "'CUDA Setup failed' is the last line of every failed setup: a symptom. Look "
                                  "earlier for the first thing that went wrong",
    "no_gpu_cpu_library": "'Defaulting to libbitsandbytes_cpu.so' is a fallback, not the cause: why did it fall back?",
    "cudart_not_found": "read on: 'Possible options found for libcudart.so' means the runtime was found",
    "bnb_cuda_version_override": "the log mentions the override only in advice; nothing says it was set",
}


def _label_answer(**_) -> str:
    result = explain_log(corpus_entry(LABEL_EXERCISE_LOG)["text"])
    return f"{result.label!r}"


@exercise("lab07", 2, _label_answer)
def check_log_label(label: Any) -> CheckResult:
    """Exercise: the root-cause label of the corpus log ``issue1518_nocublaslt_cuda124``."""
    name = "log label"
    if label is None or label is Ellipsis:
        return report(name, False, "one of the labels", f"{label!r}", "set `my_label` to one of the label strings")
    if not isinstance(label, str) or label.strip() not in LABELS:
        return report(name, False, "one of: " + ", ".join(LABELS), f"{label!r}",
                      "copy one of the label strings exactly")
    want = explain_log(corpus_entry(LABEL_EXERCISE_LOG)["text"]).label
    got = label.strip()
    return report(name, got == want, "the label of the root cause", got,
                  _SYMPTOM_HINTS.get(got, "a symptom, not the root cause: which line explains all the others?"))


# Exercise 3: a log rendered by the installed bitsandbytes' own functions (corpus entry bnb050_stale_override:
# PyTorch for CUDA 13.0, BNB_CUDA_VERSION=128 left in the environment, no CUDA 12 runtime on the machine).
FIX_EXERCISE_LOG = "bnb050_stale_override"
FIX_CHOICES = {
    "a": "a CUDA 12 runtime is missing: install the CUDA 12.x toolkit and add its lib64 to LD_LIBRARY_PATH, "
         "as the message says",
    "b": "a CUDA 12 runtime is missing: pip install nvidia-cuda-runtime-cu12",
    "c": "a leftover BNB_CUDA_VERSION=128 forces the CUDA 12.8 binary onto a CUDA 13.0 PyTorch: "
         "unset BNB_CUDA_VERSION",
    "d": "this bitsandbytes ships no binary for CUDA 13.0: pip install -U bitsandbytes",
    "e": "a leftover BNB_CUDA_VERSION=128: clear it with export BNB_CUDA_VERSION=",
}
FIX_ANSWER = "c"
_FIX_HINTS = {
    "a": "that is bitsandbytes' own advice, and it treats the symptom: it would load a CUDA 12 binary beside "
         "PyTorch's CUDA 13 runtime. Read the first lines again: why was a CUDA 12 library wanted at all?",
    "b": "two problems: pip puts the library in site-packages/nvidia/.../lib, which the dynamic loader does not "
         "search, and CUDA 12 is the wrong major for this PyTorch. Why was a cuda128 binary chosen?",
    "d": "bitsandbytes 0.50.2 ships libbitsandbytes_cuda130.so and would pick it for CUDA 13.0 by itself; "
         "something stopped that choice. Which line says so?",
    "e": "the right cause, a broken fix: up to 0.49 an empty value meant 'unset', but 0.50 refuses any value "
         "that is not digits ('value must be digits only')",
}


def _fix_answer(**_) -> str:
    return f"{FIX_ANSWER}: {FIX_CHOICES[FIX_ANSWER]}"


@exercise("lab07", 3, _fix_answer)
def check_log_fix(answer: Any) -> CheckResult:
    """Exercise: one letter, ``"a"``-``"e"``: the root cause and the one fix of the log
    ``bnb050_stale_override`` (PyTorch for CUDA 13.0 on the machine that printed it)."""
    name = "root cause and fix"
    letters = ", ".join(FIX_CHOICES)
    if not isinstance(answer, str) or answer.strip().lower() not in FIX_CHOICES:
        return report(name, False, f"one of the letters {letters}", fmt_number(answer), "pick a letter, as a string")
    letter = answer.strip().lower()
    if letter == FIX_ANSWER:
        return report(name, True, "", f"{letter}: {FIX_CHOICES[letter]}")
    return report(name, False, "the letter whose fix removes the cause", f"{letter}: {FIX_CHOICES[letter]}",
                  _FIX_HINTS[letter])


# Exercise 4 (capstone): rank the four kinds by bytes on the device and by perplexity, judged against the
# measured table (benchmarks/bnb.py). Values within 1% of each other are a tie: either order passes.
RANK_KINDS = ("int8", "fp4", "nf4", "nf4+dq")
_TIE = 0.01


def device_bytes(row: dict) -> int:
    """Bytes a quantized model holds: ``get_memory_footprint()`` plus the quantization constants it misses."""
    return int(row["footprint_bytes"]) + int(row["quant_state_bytes"])


def _measured() -> dict[str, dict[str, float]]:
    from vramlab.bnb.quantized import load_table, table_row

    table = load_table()
    rows = {k: table_row(table, k) for k in RANK_KINDS}
    return {"bytes": {k: float(device_bytes(r)) for k, r in rows.items()},
            "perplexity": {k: float(r["ppl"]) for k, r in rows.items()}}


def _groups(values: dict[str, float]) -> list[list[str]]:
    """The kinds in increasing order, neighbours within 1% grouped as ties."""
    order = sorted(values, key=values.get)
    groups = [[order[0]]]
    for k in order[1:]:
        prev = values[groups[-1][-1]]
        if abs(values[k] - prev) <= _TIE * max(abs(prev), 1e-12):
            groups[-1].append(k)
        else:
            groups.append([k])
    return groups


def _ranking_answer(**_) -> str:
    m = _measured()
    words = {"bytes": "bytes on the device, fewest first", "perplexity": "perplexity, best first"}
    parts = []
    for key in ("bytes", "perplexity"):
        parts.append(words[key] + ": " + ", then ".join(" and ".join(g) + (" (tied)" if len(g) > 1 else "")
                                                       for g in _groups(m[key])))
    return "; ".join(parts)


_RANK_HINTS = {
    ("bytes", "int8"): "int8 keeps 8 bits per weight, twice what the 4-bit kinds keep; its one scale per row is small",
    ("bytes", "nf4+dq"): "double quantization stores the per-block scales themselves in 8 bits instead of 32: "
                         "count the constants, not only get_memory_footprint()",
    ("bytes", "fp4"): "FP4 and NF4 store the same things (4 bits per weight, one scale per block of 64): only the "
                      "16 levels differ, not the bytes",
    ("bytes", "nf4"): "FP4 and NF4 store the same things (4 bits per weight, one scale per block of 64): only the "
                      "16 levels differ, not the bytes",
    ("perplexity", "int8"): "LLM.int8() keeps 256 levels per weight and its outlier activation columns in 16-bit: "
                            "the 4-bit kinds have 16 levels",
    ("perplexity", "fp4"): "FP4's 16 levels are a tiny float format; NF4 puts its levels at the quantiles of a normal "
                           "distribution, which is how the weights are spread",
    ("perplexity", "nf4"): "double quantization only changes how the scales are stored (8-bit scales, rounded "
                           "slightly): compare it with plain NF4, not with FP4",
    ("perplexity", "nf4+dq"): "double quantization only changes how the scales are stored (8-bit scales, rounded "
                              "slightly): compare it with plain NF4, not with FP4",
}


@exercise("lab07", 4, _ranking_answer)
def check_quant_ranking(ranking: Any) -> CheckResult:
    """Capstone: ``{"bytes": [...], "perplexity": [...]}``, each a list of the four kinds ``int8``,
    ``fp4``, ``nf4``, ``nf4+dq``: ``bytes`` ordered from the fewest bytes on the device
    (``get_memory_footprint()`` plus the quantization constants it misses), ``perplexity`` from the best
    (lowest). Judged against the measured table; kinds within 1% of each other may come in either order."""
    name = "bytes and perplexity ranking"
    keys = ("bytes", "perplexity")
    if is_untouched(ranking) or (isinstance(ranking, dict) and all(is_untouched(ranking.get(k)) for k in keys)):
        return report(name, False, "a dict of two rankings", fmt_number(None), "fill in my_ranking")
    if not isinstance(ranking, dict) or set(ranking) != set(keys):
        return report(name, False, "a dict with the keys 'bytes' and 'perplexity'", repr(ranking)[:80],
                      "give my_ranking exactly the keys 'bytes' and 'perplexity', each a list of the four kinds")
    for key in keys:
        got = ranking[key]
        if not isinstance(got, (list, tuple)) or sorted(map(str, got)) != sorted(RANK_KINDS):
            return report(name, False, f"'{key}': a list of the four kinds " + ", ".join(RANK_KINDS), repr(got)[:80],
                          f"list each of {', '.join(RANK_KINDS)} exactly once under '{key}'")
    measured = _measured()
    for key in keys:
        got = [str(k) for k in ranking[key]]
        # each kind's allowed positions: its group of ties spans a range of places in the measured order
        allowed, start = {}, 0
        for group in _groups(measured[key]):
            for k in group:
                allowed[k] = (start, start + len(group) - 1)
            start += len(group)
        off = {k: max(allowed[k][0] - i, i - allowed[k][1], 0) for i, k in enumerate(got)}
        if any(off.values()):
            # the kind furthest from where it belongs carries the likely misconception
            culprit = max(got, key=lambda k: off[k])
            return report(name, False, f"the measured order of '{key}'", " < ".join(got),
                          f"{culprit} is out of place. " + _RANK_HINTS[(key, culprit)])
    return report(name, True, "", "both rankings match the measured table (" + _ranking_answer() + ")")


def _footprint_answer(actual_bytes=None, **_) -> str:
    if actual_bytes is None:
        return "a prediction has no answer to reveal: the 4-bit model is loaded and measured next"
    return f"the measured footprint is {fmt_number(int(actual_bytes))} bytes"


@exercise("lab07", 1, _footprint_answer, prediction=True)
def check_4bit_prediction(predicted: Any, actual_bytes: float | None = None,
                          fp32_bytes: float | None = None) -> CheckResult:
    """Predict, then reveal: any honest number passes; it reports how far off it was.

    ``predicted``: the learner's guess of ``get_memory_footprint()`` of the 4-bit model, in bytes.
    Called without ``actual_bytes`` (before the reveal) it only confirms that a prediction is stored,
    revealing nothing. With ``actual_bytes`` (the measured value) it says how far off the guess was;
    ``fp32_bytes`` (optional) recognises the common guess "one eighth of the float32 model"."""
    name = "4-bit footprint prediction"
    value = as_float(predicted)
    if predicted is None or value is None or value != value or value <= 0:
        return report(name, False, "your prediction in bytes (a positive number)", fmt_number(predicted),
                      "store a guess before running the reveal cell; any honest number counts")
    if actual_bytes is None:
        return report(name, True, "", f"{fmt_number(value)} bytes stored; the 4-bit model is loaded next")
    ratio = value / actual_bytes
    msg = f"{fmt_number(value)} bytes, {ratio:.2f}x the measured {fmt_number(int(actual_bytes))} bytes"
    if fp32_bytes and abs(value - fp32_bytes / 8) / (fp32_bytes / 8) < 0.15:
        msg += (" (one eighth of float32: the embedding and the tied lm_head stay in 32 bits, and they are "
                "40% of this model)")
    elif value < 1e6:
        msg += " (did you give MiB or GiB? the unit is bytes)"
    return report(name, True, "", msg)
