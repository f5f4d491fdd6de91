"""Checks for notebook 06 (bitsandbytes for real, and a doctor for its setup failures).

The references are vramlab's own functions (``vramlab.bnb.logs.explain_log`` / ``missing_versions``
and the measured footprint), so a check and the lesson cannot disagree.
"""

from __future__ import annotations

from typing import Any

from vramlab.bnb.logs import LABELS, corpus_entry, explain_log, missing_versions
from vramlab.checks._core import CheckResult, as_float, call_learner, exercise, fmt_number, report

__all__ = ["check_log_label", "check_missing_symbol", "check_4bit_prediction"]

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


@exercise("lab06", 2, _label_answer)
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


_SYMBOL_CASES = [
    corpus_entry("article_cxxabi_cuda121")["text"],
    "OSError: /usr/lib/x86_64-linux-gnu/libstdc++.so.6: version `GLIBCXX_3.4.29' not found (required by "
    "/opt/venv/lib/python3.10/site-packages/bitsandbytes/libbitsandbytes_cuda124.so)",
    corpus_entry("old_libcusparse_missing")["text"],  # no version symbol at all: expect None
]


def _symbol_answer(**_) -> str:
    return ("re.search(r\"version `([^']{1,80})' not found\", log_text): return match.group(1), or None without a "
            "match; for these logs: " + ", ".join(repr(missing_versions(t)[0]["symbol"]) if missing_versions(t)
                                                  else "None" for t in _SYMBOL_CASES))


@exercise("lab06", 3, _symbol_answer)
def check_missing_symbol(fn) -> CheckResult:
    """Exercise: ``fn(log_text)`` returns the versioned symbol the loader did not find
    (``'CXXABI_1.3.9'``), or ``None`` when the log has no such line."""
    name = "missing symbol"
    for text in _SYMBOL_CASES:
        found = missing_versions(text)
        want = found[0]["symbol"] if found else None
        # a real None answer (the third log has no version line) is judged; None where a symbol is
        # expected is read as the untouched stub and reveals nothing
        got, failed = call_learner(name, fn, text, expected="a symbol string, or None", none_is_untouched=want is not None)
        if failed is not None:
            return failed
        if isinstance(got, str):
            got = got.strip()
        if got != want:
            hint = "return just the versioned symbol as a string (a name like 'GLIBC_2.34'), nothing else"
            if want is None:
                hint = "does this log have a \"version `...' not found\" line at all? What should you return then?"
            elif isinstance(got, str) and want in got:
                hint = "the symbol is in there: strip the quotes and the rest of the line"
            elif isinstance(got, str) and "libstdc++" in got:
                hint = "that is the library that lacks the symbol; return the symbol itself"
            return report(name, False, "the symbol the loader did not find, if the log names one", repr(got)[:120],
                          hint)
    return report(name, True, "", f"all {len(_SYMBOL_CASES)} logs right (e.g. {missing_versions(_SYMBOL_CASES[0])[0]['symbol']!r})")


def _footprint_answer(actual_bytes=None, **_) -> str:
    if actual_bytes is None:
        return "a prediction has no answer to reveal: the 4-bit model is loaded and measured next"
    return f"the measured footprint is {fmt_number(int(actual_bytes))} bytes"


@exercise("lab06", 1, _footprint_answer, prediction=True)
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
