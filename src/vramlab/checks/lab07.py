"""Checks for notebook 07 (bitsandbytes for real, and a doctor for its setup failures).

The references are vramlab's own functions and data (``vramlab.bnb.logs.explain_log``, the log corpus,
the measured table of ``benchmarks/bnb.py``), so a check and the lesson cannot disagree.
"""

from __future__ import annotations

from typing import Any

from vramlab.bnb.logs import LABELS, corpus_entry, explain_log
from vramlab.checks._core import CheckResult, as_float, check_choice, exercise, fmt_number, is_untouched, report, tries

__all__ = ["check_4bit_prediction", "check_cheapest_design", "check_log_label", "check_log_fix",
           "check_binary_prediction", "check_diagnosis"]

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
REFERENCE_PPL = 17.61           # its perplexity on avx512 (17.6096); 17.5514 on default, 17.6232 on avx2 kernels
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
# Part 2's capstone: a log the lab has not shown, rendered by the installed bitsandbytes 0.50.2's own functions
# (corpus entry bnb050_unbuilt_checkout, vramlab.bnb.doctor.simulate("unbuilt_checkout")): bitsandbytes imported
# from a git clone where cmake never ran, on a GPU machine whose PyTorch was built for CUDA 12.2. Its printed
# advice is wrong: 0.50.2's _format_lib_error_message (cextension.py) tests for "binary not found", which 0.50's
# "No compatible CUDA binary found at" never contains, so it prints the generic "your torch installation doesn't
# detect CUDA ... COMPILE FROM SOURCE for CPU-only" (vramlab.bnb.doctor.version_mismatch_hint_fires). The evidence:
# with no library in its package folder, get_cuda_bnb_library_path returns the exact version's path unselected
# (cuda122, where the wheel's rule gives cuda121, with a "No prebuilt binary" warning the log does not have), and
# the folder is a source tree. get_native_library raises before any dlopen when the file does not exist, and loads
# the CPU library only when PyTorch sees no CUDA (cextension.py, 0.50.2).
DIAGNOSIS_LOG = "bnb050_unbuilt_checkout"
DIAGNOSIS_TORCH_CUDA = "12.2"
DIAGNOSIS_FIXES = {
    "a": "do what the message says: cmake -DCOMPUTE_BACKEND=cpu -S . && make",
    "b": "export BNB_CUDA_VERSION=121, the binary section 4's rule gives for CUDA 12.2",
    "c": "install a PyTorch built for CUDA 12.8, a version bitsandbytes 0.50.2 ships a binary for",
    "d": "add the lib64 folder of the machine's CUDA 12.2 toolkit to LD_LIBRARY_PATH",
    "e": "cmake -DCOMPUTE_BACKEND=cuda -S . && make, in the folder bitsandbytes is imported from",
    "f": "pip uninstall -y bitsandbytes, then pip install bitsandbytes (the wheel from PyPI)",
}
DIAGNOSIS_FIX = ("e", "f")   # either: build the clone's CUDA library, or replace the clone with the prebuilt wheel
_DIAGNOSIS_FIX_REASONS = {
    "a": "the message guesses that PyTorch does not see CUDA; this PyTorch does, and bitsandbytes loads a CPU-only "
         "library only on a machine where PyTorch sees no CUDA",
    "b": "an override makes bitsandbytes skip its own choice and ask for libbitsandbytes_cuda121.so by name: the "
         "load stops the same way, on that name",
    "c": "with a CUDA 12.8 PyTorch bitsandbytes asks for another file name, and the load stops the same way",
    "d": "LD_LIBRARY_PATH is read by the dynamic loader, and this load never reached it: the error is raised before "
         "any dlopen",
}
#: Printed under the doctor's reading only after Exercise 5 passed or was revealed (a markdown line under the check
#: would be on screen while the learner works).
DIAGNOSIS_READING = (
    "Why the message misled: bitsandbytes 0.50.2 prints its 'VERSION MISMATCH' advice only when the error\n"
    "contains 'binary not found', which 0.50's 'No compatible CUDA binary found at' never does, so it fell back\n"
    "to advice written for a machine whose PyTorch sees no CUDA. And why cuda122, not the rule's cuda121: the\n"
    "rule chooses only among the files bitsandbytes finds in its own folder; a folder with none gets the exact\n"
    "version's name.")
#: The first wrong tries of the check (evidence or fix) are told why that line or that fix fails; from then on
#: only "not it" and the next hint, so trying lines or letters one by one does not explain the log.
REASON_TRIES = 2
_NOT_IT = "not it; read the log against your prediction, as the hints say"


def unseen_log() -> str:
    """The capstone's log as the learner sees it: bitsandbytes 0.50.2's own lines (corpus ``bnb050_unbuilt_checkout``)."""
    return corpus_entry(DIAGNOSIS_LOG)["text"].strip("\n")


def _is_cause_line(line: str) -> bool:
    """A line that shows the cause: the exact, unselected CUDA 12.2 binary asked for in a source tree."""
    return "No compatible CUDA binary found at" in line and "bitsandbytes/bitsandbytes/libbitsandbytes_cuda122" in line


_LINE_REASONS = (  # (a phrase of a line that is not the cause, why): none names the kind of line wanted
    ("Attempted to use bitsandbytes native library functionality", "every failed load prints this line, whatever "
     "the cause: it says that something failed, not what"),
    ("Native code method attempted to call", "it names the call that noticed the failure, not why it failed"),
    ("This typically happens when", "a guess the message prints for many failures: it is not something this "
     "machine reported"),
    ("COMPILE FROM SOURCE", "advice the message prints, not evidence of a cause"),
    ("cmake -DCOMPUTE_BACKEND", "advice the message prints, not evidence of a cause"),
    ("python -m bitsandbytes", "advice to run a diagnostic, not evidence of a cause"),
)


def _binary_name(text: str) -> str | None:
    import re

    found = re.findall(r"libbitsandbytes_cuda\d{2,4}\.so", str(text)[:2000])
    return found[-1] if found else None


def _binary_prediction_answer(**_) -> str:
    return f"the log shows the file bitsandbytes asked for: {_binary_name(unseen_log())}"


@exercise("lab07", None, _binary_prediction_answer, prediction=True)
def check_binary_prediction(predicted: Any, log: str | None = None) -> CheckResult:
    """Predict, then read: the native library file bitsandbytes 0.50.2 will ask for on the capstone's machine
    (``torch.version.cuda`` '12.2'), e.g. ``"libbitsandbytes_cuda118.so"``. Without ``log`` it only stores the
    prediction; with the log it says which file the log shows and whether it is the one predicted, nothing more."""
    name = "which binary bitsandbytes asks for"
    what = "a file name such as 'libbitsandbytes_cuda118.so'"
    if is_untouched(predicted):
        return report(name, False, what, fmt_number(predicted), value=predicted)
    mine = _binary_name(predicted) if isinstance(predicted, str) else None
    if mine is None:
        return report(name, False, what, repr(predicted)[:60], "store the file name as a string, e.g. "
                      "'libbitsandbytes_cuda118.so'")
    if log is None:
        return report(name, True, "", f"{mine} stored; the log comes next")
    shown = _binary_name(log)
    if shown is None:
        return report(name, True, "", f"you predicted {mine}; the log names no CUDA binary")
    same = "the file you predicted" if shown == mine else "not the file you predicted"
    return report(name, True, "", f"you predicted {mine}; the log shows {shown}: {same}")


def _diagnosis_answer(**_) -> str:
    return ("evidence: the line 'bitsandbytes library load error: No compatible CUDA binary found at "
            "/home/ana/src/bitsandbytes/bitsandbytes/libbitsandbytes_cuda122.so' (or the 'Original error:' line "
            "that repeats it): bitsandbytes runs from a source clone whose native library was never built; with no "
            "library in its folder it asks for the exact cuda122 instead of choosing cuda121, and the message's "
            "CPU-only advice is wrong for a GPU machine; fix: e (build the clone's CUDA backend) or f (the PyPI "
            "wheel): " + DIAGNOSIS_FIXES["e"] + " / " + DIAGNOSIS_FIXES["f"])


@exercise("lab07", 5, _diagnosis_answer)
def check_diagnosis(diagnosis: Any) -> CheckResult:
    """Exercise 5: ``{"evidence": <one line of the log, copied>, "fix": <a letter of DIAGNOSIS_FIXES>}`` for the
    log :func:`unseen_log` (``bnb050_unbuilt_checkout``). The evidence must be a line of the log that shows the
    root cause; the fix must remove it (two letters do). On the first :data:`REASON_TRIES` wrong tries a wrong line
    or a wrong fix is told why *that* one fails (never what kind of line or fix is wanted); from then on only "not
    it", with the next hint (the tries of ``vramlab.checks._core``)."""
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
    explain = tries(name) < REASON_TRIES
    if not _is_cause_line(line):
        why = (next((w for phrase, w in _LINE_REASONS if phrase in line),
                    "this line reads the same whatever went wrong: it states no cause") if explain else _NOT_IT)
        return report(name, False, "the line that shows the root cause", repr(line[:70]), why)
    if letter not in DIAGNOSIS_FIX:
        why = _DIAGNOSIS_FIX_REASONS[letter] if explain else _NOT_IT
        return report(name, False, "the fix that removes that cause", f"{letter}: {DIAGNOSIS_FIXES[letter]}", why)
    return report(name, True, "", "bitsandbytes runs from a clone whose native library was never built (no library "
                  f"in its folder, so it asked for the exact cuda122 unselected); {letter}: {DIAGNOSIS_FIXES[letter]}")
