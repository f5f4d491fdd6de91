"""Checks for notebook 07 (bitsandbytes for real, and a doctor for its setup failures).

The references are vramlab's own functions and data (``vramlab.bnb.logs.explain_log``, the log corpus,
the measured table of ``benchmarks/bnb.py``), so a check and the lesson cannot disagree.
"""

from __future__ import annotations

from typing import Any

from vramlab.bnb.logs import LABELS, corpus_entry, explain_log
from vramlab.checks._core import CheckResult, as_float, check_choice, exercise, fmt_number, is_untouched, report, tries

__all__ = ["check_4bit_prediction", "check_cheapest_design", "check_log_label", "check_log_fix", "check_diagnosis"]

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


@exercise("lab07", 3, _label_answer)
def check_log_label(label: Any) -> CheckResult:
    """Exercise 3: the root-cause label of the corpus log ``issue1518_nocublaslt_cuda124``."""
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


# Exercise 4: a log rendered by the installed bitsandbytes' own functions (corpus entry bnb050_stale_override:
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
# Why each wrong choice fails, from what the learner has: nothing here names or points at another choice.
_FIX_REASONS = {
    "a": "that is the message's own advice: it supplies the library that was asked for, and leaves unexplained "
         "why this machine asked for a CUDA 12 library at all",
    "b": "pip puts that library under site-packages/nvidia/.../lib, a folder the dynamic loader does not search, "
         "so the same error comes back",
    "d": "bitsandbytes 0.50.2 ships libbitsandbytes_cuda130.so (section 4's table), so a missing CUDA 13 build "
         "is not what happened here",
    "e": "from 0.50.0 bitsandbytes refuses any value that is not digits ('value must be digits only'), so an "
         "empty value stops the load with a new error",
}


def _fix_answer(**_) -> str:
    return f"{FIX_ANSWER}: {FIX_CHOICES[FIX_ANSWER]}"


@exercise("lab07", 4, _fix_answer, choices=tuple(FIX_CHOICES))
def check_log_fix(answer: Any) -> CheckResult:
    """Exercise 4: one letter, ``"a"``-``"e"``: the root cause and the one fix of the log
    ``bnb050_stale_override`` (PyTorch for CUDA 13.0 on the machine that printed it). A wrong letter is
    told why that choice fails, nothing about the others."""
    options = {k: (v if k == FIX_ANSWER else _FIX_REASONS[k]) for k, v in FIX_CHOICES.items()}
    return check_choice("root cause and fix", answer, options, FIX_ANSWER,
                        what="the letter of the choice whose fix removes the cause")


# --------------------------------------------------------------------------- Exercise 2 (capstone): a design
# The cheapest BitsAndBytesConfig that keeps SmolLM2 (served in bfloat16) within a perplexity target on the
# first DESIGN_WINDOWS standard windows. The check measures each distinct design once (load + forward, about
# 20-40 s on a CPU) and keeps the result for the kernel's life: asking again, or re-running the cell, costs
# nothing. The reference design is the cheapest of a sweep of 17 designs (docs/instructor/lab07.md lists them
# with their bytes and perplexity); tests/test_checks_lab07.py re-measures it. bfloat16 SmolLM2 on these windows:
# perplexity 14.25 (269,030,272 bytes); the target is 25% above it.
TARGET_PPL = 17.8
REFERENCE_DESIGN = {"bits": 4, "quant_type": "nf4", "double_quant": True, "compute_dtype": "bfloat16",
                    "skip": ["lm_head", "v_proj"]}
REFERENCE_BYTES = 116_583_352   # design.measure_design(REFERENCE_DESIGN, windows 0-1)["bytes"], exact
REFERENCE_PPL = 17.61           # its perplexity (17.6096 measured; bfloat16 matmuls move the 4th digit)
BYTES_TOLERANCE = 0.01          # designs within 1% of the fewest bytes found pass (layer 29 instead of v_proj)
_MEASURED: dict[str, dict] = {}


def measure_design_once(design) -> dict:
    """:func:`vramlab.bnb.design.measure_design` of ``design`` on the first DESIGN_WINDOWS standard windows,
    measured once per distinct design in this process (``design_key``) and then looked up."""
    from vramlab import data
    from vramlab.bnb import design as bnb_design

    key = bnb_design.design_key(design)
    if key not in _MEASURED:
        tok = _tokenizer()
        windows = data.token_windows(tok, n_windows=bnb_design.DESIGN_WINDOWS, length=512)
        _MEASURED[key] = bnb_design.measure_design(design, windows)
    return _MEASURED[key]


def _tokenizer():
    from transformers import AutoTokenizer

    from vramlab import models

    return AutoTokenizer.from_pretrained(str(models.ensure_converted()))


def _design_answer(**_) -> str:
    return (f"{REFERENCE_DESIGN} holds {fmt_number(REFERENCE_BYTES)} bytes on the device at perplexity "
            f"{REFERENCE_PPL:.2f} (target {TARGET_PPL}); any design that meets the target in no more bytes passes")


def _unmatched_skips(design: dict, result: dict) -> list[str]:
    """The skip patterns that kept no linear out of bitsandbytes' hands (transformers matches a pattern from the
    start of a module's full name, or as its suffix)."""
    from transformers.quantizers.quantizers_utils import should_convert_module

    names = [f"model.layers.{i}.{m}" for i in range(30) for m in
             ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
              "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")]
    return [p for p in (design.get("skip") or []) if p != "lm_head"
            and all(should_convert_module(n, [p]) for n in names)]


@exercise("lab07", 2, _design_answer)
def check_cheapest_design(design: Any, prediction: Any = None) -> CheckResult:
    """Capstone: ``design``, a dict of :data:`vramlab.bnb.design.DESIGN_KEYS` (``bits``, ``quant_type``,
    ``double_quant``, ``compute_dtype``, ``skip``). The design is loaded and measured live, once
    (:func:`measure_design_once`): it passes when its perplexity is at most :data:`TARGET_PPL` and its bytes on
    the device (``get_memory_footprint()`` plus the quantization constants) are no more than the reference
    design's. ``prediction`` (optional): ``{"bytes": ..., "perplexity": ...}``, compared with the measurement."""
    from vramlab.bnb import design as bnb_design

    name = "cheapest design"
    if is_untouched(design) or (isinstance(design, dict) and not design):
        return report(name, False, "a design dict", fmt_number(None), value=None)
    try:
        d = bnb_design.normalize_design(design)
    except ValueError as exc:
        return report(name, False, "a design dict", repr(design)[:80], str(exc).rstrip("."))
    try:
        m = measure_design_once(d)
    except AssertionError:
        return report(name, False, "a design that loads and runs", json_short(d),
                      "bitsandbytes quantized lm_head, which shares its weight with the embedding in SmolLM2 "
                      "(tied), and its forward fails: a 'skip' list replaces transformers' default list, which "
                      "kept lm_head")
    except Exception as exc:  # noqa: BLE001 - one sentence, never a traceback
        return report(name, False, "a design that loads and runs", json_short(d),
                      f"loading it failed ({type(exc).__name__}: {str(exc)[:160]})")
    said = f"{fmt_number(m['bytes'])} bytes on the device, perplexity {m['ppl']:.2f}"
    if isinstance(prediction, dict):
        pb, pp = as_float(prediction.get("bytes")), as_float(prediction.get("perplexity"))
        if pb and pp:
            said += f" (you predicted {fmt_number(pb)} bytes, {pp:.2f})"
    unmatched = _unmatched_skips(d, m)
    if unmatched:
        return report(name, False, "a design whose skip patterns each keep some linear", said,
                      f"{', '.join(map(repr, unmatched))} matched no linear ({m['quantized']} of 210 quantized): "
                      "transformers compares a pattern with the start of a module's full name or with its end")
    if m["ppl"] > TARGET_PPL:
        return report(name, False, f"perplexity at most {TARGET_PPL}", said + ", above the target",
                      "where do this design's bits cost the most perplexity, and what would keeping more "
                      "precision there cost in bytes?")
    if m["bytes"] > REFERENCE_BYTES * (1 + BYTES_TOLERANCE):
        return report(name, False, "the target met in the fewest bytes", said + ": it meets the target, "
                      "but a design with fewer bytes meets it too",
                      "which of your choices buys perplexity, and which only costs bytes?")
    return report(name, True, "", said + f": within the target ({TARGET_PPL}) in the fewest bytes found (1%)")


def json_short(d: dict) -> str:
    import json

    return json.dumps(d)[:100]


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
        msg += (" (one eighth of float32: the embedding, shared with lm_head, stays in 32 bits: 21% of the "
                "parameters, 68% of the 4-bit footprint)")
    elif value < 1e6:
        msg += " (did you give MiB or GiB? the unit is bytes)"
    return report(name, True, "", msg)


# --------------------------------------------------------------------------- Exercise 5: diagnose a log
# Part 2's capstone: a log the lab has not shown, with a root cause that neither Exercise 3 (no binary for
# PyTorch's CUDA) nor Exercise 4 (a stale BNB_CUDA_VERSION override) had: rendered by the installed bitsandbytes
# 0.50.2's own functions with a real dlopen (corpus entry bnb050_runtime_missing, vramlab.bnb.doctor.simulate(
# "runtime_missing")): the CUDA 12.8 binary exists and is chosen from torch.version.cuda itself, but the CUDA 12
# runtime it links against (libcudart.so.12) is on no path the dynamic loader searches. Its red block is the one
# Exercise 4 showed; here the message's own advice is the fix. The lab shows the log without the first line,
# vramlab's own note that names the cause ("chosen: ..., which needs libcudart.so.12; the dynamic loader cannot
# find it"). bitsandbytes 0.50.2 cextension.py: the override warning is printed whenever BNB_CUDA_VERSION is set,
# and every CUDA 12 build links against libcudart.so.12.
DIAGNOSIS_LOG = "bnb050_runtime_missing"
DIAGNOSIS_FIXES = {
    "a": "unset BNB_CUDA_VERSION and load again",
    "b": "install a PyTorch built for CUDA 13.0, so that bitsandbytes loads its CUDA 13 binary",
    "c": "pip install -U bitsandbytes",
    "d": "add the lib64 folder of the machine's CUDA 12.8 toolkit to LD_LIBRARY_PATH",
    "e": "export BNB_CUDA_VERSION=126",
}
DIAGNOSIS_FIX = "d"
_DIAGNOSIS_FIX_REASONS = {
    "a": "bitsandbytes 0.50.2 prints a warning whenever BNB_CUDA_VERSION is set, and this log has none: the "
         "binary was chosen from PyTorch's own CUDA version, so there is nothing to unset",
    "b": "that changes which CUDA runtime the binary asks for, not whether the loader can find one: the CUDA 13 "
         "binary links against libcudart.so.13, which this machine does not provide either",
    "c": "the binary bitsandbytes chose was there: the load stopped on a library that binary links against, and "
         "the next release links against the same CUDA 12 runtime",
    "e": "every CUDA 12 build of bitsandbytes links against the same libcudart.so.12, so another 12.x binary "
         "stops on the same missing file",
}
#: After this many wrong fixes the check stops saying why a fix fails and offers the next hint instead.
FIX_REASON_TRIES = 2


def unseen_log() -> str:
    """The capstone's log as the learner sees it: bitsandbytes' own lines, without vramlab's first line (the
    ``chosen: ...`` note that states the cause)."""
    lines = corpus_entry(DIAGNOSIS_LOG)["text"].splitlines()
    return "\n".join(ln for ln in lines if not ln.startswith("chosen: ")).strip("\n")


def _is_cause_line(line: str) -> bool:
    """A line that names what could not be loaded: the missing CUDA 12 runtime."""
    return "libcudart.so.12" in line and any(w in line for w in (
        "cannot open shared object file", "Missing dependency", "were not found"))


_LINE_REASONS = (  # (a phrase of a line that is not the cause, why)
    ("Attempted to use bitsandbytes native library functionality", "this is printed at the first call into the "
     "native library, after the load already failed: it says that something failed, not what"),
    ("Native code method attempted to call", "it names the call that noticed the failure, not why it failed"),
    ("runtime libraries were not found", "the message's general reading, the same for any CUDA 12 library: "
     "copy the line that names the file the loader could not open"),
    ("RuntimeError", "the exception's first line carries no cause; the lines that follow it do"),
    ("python -m bitsandbytes", "advice to run a diagnostic, not evidence of a cause"),
    ("export LD_LIBRARY_PATH", "advice printed with this kind of failure, not evidence of a cause"),
    ("You have installed", "advice printed with this kind of failure, not evidence of a cause"),
    ("To fix this", "advice printed with this kind of failure, not evidence of a cause"),
    ("You can add them", "advice printed with this kind of failure, not evidence of a cause"),
    ("are in your LD_LIBRARY_PATH", "advice printed with this kind of failure, not evidence of a cause"),
)


def _diagnosis_answer(**_) -> str:
    return ("evidence: the line 'bitsandbytes library load error: libcudart.so.12: cannot open shared object file: "
            "No such file or directory' (or the 'Original error:' / 'Missing dependency' line that repeats it): the "
            "CUDA 12.8 binary was chosen from PyTorch's own CUDA (no override warning), but the CUDA 12 runtime it "
            f"links against is on no path the loader searches; fix: {DIAGNOSIS_FIX}: "
            f"{DIAGNOSIS_FIXES[DIAGNOSIS_FIX]}")


@exercise("lab07", 5, _diagnosis_answer)
def check_diagnosis(diagnosis: Any) -> CheckResult:
    """Exercise 5: ``{"evidence": <one line of the log, copied>, "fix": <a letter of DIAGNOSIS_FIXES>}`` for the
    log :func:`unseen_log` (``bnb050_runtime_missing``). The evidence must be a line of the log that shows the
    root cause; the fix must remove it. A wrong line is told why that line fails; a wrong fix is told why that
    fix fails on the first :data:`FIX_REASON_TRIES` wrong tries, then only that it is not it, with the next hint
    (the tries of ``vramlab.checks._core``), so trying the letters one by one does not explain the log."""
    name = "diagnosis"
    if is_untouched(diagnosis) or (isinstance(diagnosis, dict) and all(is_untouched(diagnosis.get(k))
                                                                       for k in ("evidence", "fix"))):
        return report(name, False, "a dict with 'evidence' and 'fix'", fmt_number(None), value=None)
    if not isinstance(diagnosis, dict) or set(diagnosis) != {"evidence", "fix"}:
        return report(name, False, "a dict with the keys 'evidence' and 'fix'", repr(diagnosis)[:80],
                      "give my_diagnosis exactly the keys 'evidence' (one line of the log) and 'fix' (a letter)")
    evidence, fix = diagnosis["evidence"], diagnosis["fix"]
    log_lines = [ln.strip() for ln in unseen_log().splitlines() if ln.strip()]
    line = evidence.strip() if isinstance(evidence, str) else ""
    if not line or line not in log_lines:
        return report(name, False, "'evidence': one line of the log, copied as printed", repr(evidence)[:80],
                      "copy one whole line of the log above into 'evidence' (select it, copy, paste between quotes)")
    letter = str(fix).strip().strip("'\"").lower() if isinstance(fix, str) else ""
    if letter not in DIAGNOSIS_FIXES:
        return report(name, False, "'fix': one of the letters " + ", ".join(DIAGNOSIS_FIXES), repr(fix)[:40],
                      "store the letter of one fix, as a string")
    if not _is_cause_line(line):
        why = next((w for phrase, w in _LINE_REASONS if phrase in line),
                   "this line reads the same whatever went wrong: it states no cause")
        return report(name, False, "the line that shows the root cause", repr(line[:70]), why)
    if letter != DIAGNOSIS_FIX:
        why = (_DIAGNOSIS_FIX_REASONS[letter] if tries(name) < FIX_REASON_TRIES else
               "not that fix either; read the log for what it shows and what it does not show, as the hints say")
        return report(name, False, "the fix that removes that cause", f"{letter}: {DIAGNOSIS_FIXES[letter]}", why)
    return report(name, True, "", "the CUDA 12 runtime that the chosen binary links against is on no path the "
                  f"loader searches; {letter}: {DIAGNOSIS_FIXES[letter]}")
