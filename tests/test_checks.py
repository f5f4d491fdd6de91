"""Every exported check is proven by a test to reject the lab stub and accept the solution."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

import vramlab.checks as checks
from vramlab.checks import CheckResult, check_fp16_weight_bytes
from vramlab.checks._core import call_learner, check_close, report

TESTS = Path(__file__).resolve().parent


def test_fp16_weight_bytes_rejects_stub_and_accepts_solution(smollm2, capsys):
    model, _ = smollm2
    assert not check_fp16_weight_bytes(None, model)
    out = capsys.readouterr().out
    assert out.startswith("FAIL fp16 weight bytes: expected your answer in place of the stub; got None.")
    assert "269,030,016" not in out  # not revealed before a real attempt
    wrong = 2 * (sum(p.numel() for p in model.parameters()) + 49152 * 576)  # tied matrix counted twice
    assert not check_fp16_weight_bytes(wrong, model)
    out = capsys.readouterr().out
    assert "expected a number of bytes (an int); got 325,653,120 bytes, too high" in out, out
    assert "269,030,016" not in out  # a wrong attempt is told what is wrong, not the answer (issue 19)
    assert check_fp16_weight_bytes(2 * sum(p.numel() for p in model.parameters()), model)
    assert capsys.readouterr().out == "PASS fp16 weight bytes: 269,030,016 bytes, as expected.\n"


def test_report_and_call_learner(capsys):
    result = report("demo", False, "1", "2", hint="try 1")
    assert isinstance(result, CheckResult) and not result
    assert capsys.readouterr().out.strip() == "FAIL demo: expected 1; got 2. Hint: try 1."
    assert report("demo", True, "1", "1")
    assert capsys.readouterr().out.strip() == "PASS demo: 1, as expected."
    assert report("demo", True, "", "all 4 cases match the reference.")
    assert capsys.readouterr().out.strip() == "PASS demo: all 4 cases match the reference."

    def not_done():
        raise NotImplementedError("Exercise 1: not done yet.")

    value, failure = call_learner("demo", not_done, expected="42")
    assert value is None and not failure and failure.untouched and "NotImplementedError" in failure.got
    assert "42" not in capsys.readouterr().out
    value, failure = call_learner("demo", lambda: 3)
    assert value == 3 and failure is None
    assert not check_close("num", "abc", 1.0) and check_close("num", 1.0 + 1e-9, 1.0)
    assert "(not a number)" in capsys.readouterr().out


def test_an_exception_shows_the_learners_line(capsys):
    import linecache

    src = "def f(x):\n    y = x + 1\n    return y[0]\n"
    filename = "/tmp/ipykernel_1/123456.py"  # how ipykernel names a cell's code
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    namespace: dict = {}
    exec(compile(src, filename, "exec"), namespace)
    value, failure = call_learner("demo", namespace["f"], 1, expected="2")
    out = capsys.readouterr().out
    assert value is None and not failure.untouched
    assert out.startswith("FAIL demo: expected 2; got TypeError: 'int' object is not subscriptable, "
                          "raised at line 3 of your cell: return y[0]."), out


def _raises(*args, **kwargs):
    raise NotImplementedError("Exercise 1: not done yet.")


def _returns_none(*args, **kwargs):
    return None


# What an untouched exercise hands a check: the value stub (None / ...), or for a check of a function
# (its first parameter is named ``fn``, the convention in every labNN.py) also the function stubs.
VALUE_STUBS = [None, Ellipsis]
FUNCTION_STUBS = [None, _raises, _returns_none]
# Arguments after the learner's answer for checks that need them (callables get the model fixture).
EXTRA_ARGS = {
    "check_fp16_weight_bytes": lambda model: (model,),
    "check_prediction": lambda model: (1234.0, "bytes per token"),
    "check_zero_fraction_prediction": lambda model: (0.956,),
    "check_no_online_hadamard_prediction": lambda model: (20.4, 4.7),
    "check_w16a4_prediction": lambda model: (2379.0, 14.7),
    "check_peak_prediction": lambda model: PREDICTION_ARGS["check_peak_prediction"],   # the map it is recorded for
}


def _exported_checks():
    return sorted(n for n, obj in inspect.getmembers(checks, inspect.isfunction) if n.startswith("check_"))


@pytest.mark.parametrize("name", _exported_checks())
def test_an_untouched_stub_never_reveals_the_answer(name, smollm2, capsys):
    """Every exported check: an untouched stub fails, says "not done", and does not print its expected value."""
    fn = getattr(checks, name)
    first, *params = list(inspect.signature(fn).parameters.values())
    required = [p for p in params if p.default is inspect.Parameter.empty and p.kind in
                (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if name in EXTRA_ARGS:
        extra = EXTRA_ARGS[name](smollm2[0])
    else:
        assert not required, f"{name} needs {[p.name for p in required]}: add it to EXTRA_ARGS in tests/test_checks.py"
        extra = ()
    for stub in (FUNCTION_STUBS if first.name == "fn" else VALUE_STUBS):
        result = fn(stub, *extra)
        out = capsys.readouterr().out
        assert isinstance(result, CheckResult) and not result, (name, stub, out)
        assert result.untouched, f"{name}({stub!r}) is not recognised as not done yet: {out}"
        assert out.startswith("FAIL ") and "expected your answer in place of the stub; got" in out, out
        if re.search(r"\d", result.expected):  # a value, not a description such as "a number"
            assert result.expected not in out, f"{name}({stub!r}) reveals {result.expected!r}: {out}"
        expected_part = out.split("; got ")[0].split(": expected ", 1)[1]
        assert not re.search(r"\d", expected_part), f"{name}({stub!r}) shows a number before an attempt: {out}"


def test_every_exported_check_has_a_stub_and_solution_test():
    """Each public check_* must be exercised by some tests/test_checks*.py file."""
    names = [n for n, obj in inspect.getmembers(checks, inspect.isfunction) if n.startswith("check_")]
    assert names
    text = "\n".join(p.read_text() for p in TESTS.glob("test_checks*.py"))
    # called directly, or named as a key of a stub/solution table that the test calls by name
    missing = [n for n in names if f"{n}(" not in text and f'"{n}"' not in text]
    assert not missing, f"checks without a stub/solution test: {missing}"


def test_check_prediction_accepts_any_honest_number_and_says_how_far_off(capsys):
    from vramlab.checks.lab00 import check_prediction

    assert check_prediction(260, 256.6, "weights in MiB", "MiB")
    assert capsys.readouterr().out == "PASS weights in MiB: you predicted 260 MiB; it is 256.6 MiB (within 5%: well predicted).\n"
    assert check_prediction(1000, 256.6, "weights in GiB", "MiB")
    assert "(3.9x too high)" in capsys.readouterr().out
    assert check_prediction(200, 256.6, "weights in KiB", "MiB")
    assert "(22% too low)" in capsys.readouterr().out
    assert check_prediction(260, 256.6, "weights in MiB", "MiB")          # the same cell again (Run All): fine
    assert not check_prediction(250, 256.6, "weights in MiB", "MiB")      # another number after it ran: a reading
    capsys.readouterr()
    assert not check_prediction("lots", 256.6, "weights in MiB", "MiB")
    assert "not a finite number" in capsys.readouterr().out
    assert not check_prediction(float("nan"), 256.6)
    assert check_prediction(250, what="weights in bf16", unit="MiB")  # recorded now, revealed later
    assert "250 MiB stored; the real value comes later" in capsys.readouterr().out
    refused = check_prediction(250, what="weights in MiB", unit="MiB")   # after this quantity's measurement ran
    assert not refused and "the measurement ran before any prediction was stored" in capsys.readouterr().out


@pytest.mark.parametrize("wrong,hint", [
    ("tied", "counted twice"), ("fp32", "float32"), ("count", "number of parameters"),
    ("mib", "that is MiB"), ("gib", "that is GiB"), ("gb", "that is GB"),
])
def test_fp16_hint_follows_the_learners_number(wrong, hint, smollm2, capsys):
    model, _ = smollm2
    params = sum(p.numel() for p in model.parameters())
    value = {"tied": 2 * (params + 49152 * 576), "fp32": 4 * params, "count": params,
             "mib": 2 * params / 2**20, "gib": 2 * params / 2**30, "gb": 2 * params / 1e9}[wrong]
    assert not check_fp16_weight_bytes(value, model)
    assert hint in capsys.readouterr().out


def test_check_arguments_that_are_not_the_answer_are_refused_in_one_sentence():
    from vramlab.checks.lab00 import check_prediction

    with pytest.raises(TypeError, match="model must be the loaded SmolLM2"):
        check_fp16_weight_bytes(269030016, "SmolLM2")
    with pytest.raises(TypeError, match="actual must be the measured number"):
        check_prediction(3.0, "lots")


def test_check_prediction_names_a_wrong_sign(capsys):
    from vramlab.checks.lab00 import check_prediction

    assert check_prediction(-12, 256.6, "weights in MiB", "MiB")  # still accepted: it teaches, it does not grade
    out = capsys.readouterr().out
    assert "(the wrong sign)" in out and "too low" not in out


# --------------------------------------------------------------------------- teach without telling (issue 19)
from vramlab.checks._core import EXERCISES, answer_text  # noqa: E402

NOTEBOOKS = TESTS.parent / "notebooks"


def _boom(*args, **kwargs):
    raise ValueError("not like this")


WRONG_LABEL = "surely_not_the_label"
# Wrong attempts: a value check gets each value; a function check gets a function returning each value,
# and one raising ValueError.
WRONG_VALUES = [0, 1e12, -1, WRONG_LABEL]
# Predictions also need the measurement (and the lesson's extra numbers); their PASS line shows it.
PREDICTION_ARGS = {
    "check_prediction": (1234.0, "bytes per token"),
    "check_zero_fraction_prediction": (0.956,),
    "check_no_online_hadamard_prediction": (20.4, 4.7),
    "check_w16a4_prediction": (2379.0, 14.7),
    "check_prediction_stored": (),
    "check_prediction_recorded": (),
    "check_conversion_prediction": (),
    "check_predicted_gpu_layers": (),
    # lab 06's capstone prediction (the copy, GiB) is recorded for a design: prompts per call and map (the complete
    # lesson's: 16 prompts per call, 8 decoder layers on GPU 0, embedding and lm_head on cpu)
    "check_peak_prediction": (16, {**{f"model.layers.{i}": 0 if i < 8 else "cpu" for i in range(32)},
                                          "model.embed_tokens": "cpu", "model.rotary_emb": 0, "model.norm": "cpu",
                                          "lm_head": "cpu"}),
    "check_4bit_prediction": (123456789.0,),
    "check_reserved_prediction": ({"default": 268435456, "expandable": 146800640},),
}
_NUMBER_RE = re.compile(r"\d[\d,]{0,40}(?:\.\d{1,12})?")   # bounded: linear on any text


def _secrets(answer: str) -> list[str]:
    """What a wrong attempt must never print of a revealed answer: the answer text itself, its numbers of
    4+ digits or with 3+ significant digits after a point (6,480; 5.787; 0.3969), and "expected <label>"
    for its quoted labels (the labels themselves may be listed among the choices)."""
    out = [answer.rstrip(".")]
    for number in _NUMBER_RE.findall(answer):
        digits = number.replace(",", "").rstrip(".")
        significant = digits.replace(".", "").lstrip("0")
        if len(digits.replace(".", "")) >= 4 and not set(significant) <= {"0"} or ("." in digits and len(significant) >= 3):
            out.append(number.rstrip(".,"))
    for label in re.findall(r"'([A-Za-z_][\w.]{0,60})'", answer):
        out += [f"expected {label}", f"expected '{label}'", f"got {label}; expected", f"exactly '{label}'"]
    return out


def _shingles(text: str, n: int = 6) -> set[str]:
    """Runs of ``n`` words of a text: an answer's explanation (its formula) must not reappear in a FAIL line."""
    words = text.split()
    return {" ".join(words[i:i + n]) for i in range(len(words) - n + 1)}


def _call(name: str, attempt, extra, **kwargs):
    return getattr(checks, name)(attempt, *extra, **kwargs)


_CAPTURED: dict = {}


def _extra(name: str, model, tokenizer=None) -> tuple:
    if name == "check_fp16_weight_bytes":
        return (model,)
    if name == "check_online_block":   # lab 01's capstone judges a captured activation (once per session)
        if "down29" not in _CAPTURED:
            from vramlab.data import token_windows
            from vramlab.quarot import outliers

            _CAPTURED["down29"] = outliers.capture(model, token_windows(tokenizer, 1, 512)[0],
                                                   layer=29, site="down_in")
        return (_CAPTURED["down29"],)
    return PREDICTION_ARGS.get(name, ())


def _attempts(name: str) -> list:
    first = next(iter(inspect.signature(getattr(checks, name)).parameters))
    if first == "fn":
        return [(lambda value: (lambda *a, **k: value))(v) for v in WRONG_VALUES] + [_boom]
    return list(WRONG_VALUES)


def test_every_exported_check_is_registered_with_its_exercise():
    """reveal=True and checks.reveal(lab, n) work only for registered checks: every export is one."""
    names = _exported_checks()
    missing = [n for n in names if n not in EXERCISES]
    assert not missing, f"checks without @exercise(...) in their labNN.py: {missing}"
    for name in names:
        assert "reveal" in inspect.signature(getattr(checks, name)).parameters, name


def _notebook_exercises() -> dict[str, tuple[str, str]]:
    """check name -> (lab id, exercise number) read from the notebooks' '### Exercise N' headings."""
    import json

    found = {}
    for path in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        lab, current = f"lab{path.name[:2]}", None
        for cell in json.loads(path.read_text())["cells"]:
            text = "".join(cell["source"])
            heading = re.search(r"^### Exercise (\d{1,2}(?:\.\d{1,2})?)\b", text, re.M)
            if cell["cell_type"] == "markdown" and heading:
                current = heading.group(1).split(".")[-1]
            elif cell["cell_type"] == "markdown" and re.search(r"^#{1,3} ", text, re.M):
                current = None   # a new section ends the exercise
            if cell["cell_type"] == "code" and current is not None:
                for call in re.findall(r"\b(check_\w{1,60})\(", text):
                    if call in EXERCISES and EXERCISES[call].number is not None:
                        found.setdefault(call, (lab, current))
    return found


def test_exercise_numbers_follow_the_notebooks():
    found = _notebook_exercises()
    assert len(found) >= 15, found
    for name, (lab, number) in found.items():
        entry = EXERCISES[name]
        assert (entry.lab, str(entry.number)) == (lab, number), (name, entry, lab, number)


@pytest.mark.parametrize("name", _exported_checks())
def test_a_wrong_attempt_never_reveals_the_answer(name, smollm2, capsys):
    """Wrong values (0, 1e12, -1, a wrong label), functions returning them and a function raising
    ValueError: the check fails, says what is wrong, and prints neither the answer nor its numbers."""
    entry = EXERCISES[name]
    extra = _extra(name, *smollm2)
    params = list(inspect.signature(getattr(checks, name)).parameters)[1:]
    context = dict(zip(params, extra))
    secrets = _secrets(answer_text(name, **context))
    for attempt in _attempts(name):
        result = _call(name, attempt, extra)
        out = re.sub(r"0x[0-9a-f]{1,16}", "0x…", capsys.readouterr().out)   # a function's repr: its address
        assert isinstance(result, CheckResult) and not result.revealed and "ANSWER" not in out, (name, out)
        if entry.prediction and result.passed:
            continue  # a stored number: the prediction's PASS line shows the measurement, that is its point
        assert not result.passed and out.startswith("FAIL "), (name, attempt, out)
        for secret in secrets:
            assert secret not in out, f"{name}({attempt!r}) shows {secret!r} of the answer: {out}"
        formula = _shingles(answer_text(name, **context)) & _shingles(out)
        assert not formula, f"{name}({attempt!r}) shows the answer's formula {sorted(formula)[:2]}: {out}"
        expected_part = out.split("; got ", 1)[0]
        assert ": expected " in expected_part, out
        for secret in secrets:
            assert secret not in expected_part, (name, attempt, out)
        if attempt is _boom:   # the learner's own line, and an expected part that is a description
            assert "ValueError: not like this, raised at line" in out and "raise ValueError" in out, out
            assert result.expected == result.expected.strip() and not result.untouched, out
    if entry.prediction:
        for measured in (str(v) for v in extra if isinstance(v, float)):
            for attempt in (None, WRONG_LABEL):
                _call(name, attempt, extra)
                out = capsys.readouterr().out
                assert measured not in out, f"{name}({attempt!r}) shows the measurement {measured}: {out}"


@pytest.mark.parametrize("name", _exported_checks())
def test_reveal_true_shows_the_answer_and_records_it(name, smollm2, capsys):
    extra = _extra(name, *smollm2)
    attempt = _attempts(name)[0]
    result = _call(name, attempt, extra, reveal=True)
    out = capsys.readouterr().out
    assert result.revealed and result.answer, (name, out)
    verdict, answer_line = out.rstrip("\n").split("\n")
    assert verdict.startswith(("FAIL ", "PASS ")) and answer_line.startswith("ANSWER ")
    assert result.answer.rstrip(".") in answer_line
    params = list(inspect.signature(getattr(checks, name)).parameters)[1:]
    assert result.answer == answer_text(name, **dict(zip(params, extra)))
    # the next call without reveal is back to normal
    again = _call(name, attempt, extra)
    assert not again.revealed and "ANSWER" not in capsys.readouterr().out


def test_reveal_by_lab_and_exercise_number(capsys):
    results = checks.reveal("lab02", 3)
    out = capsys.readouterr().out
    assert len(results) == 1 and results[0].revealed and not results[0].passed
    assert out == ("ANSWER check_kv4_bytes_per_token (lab02 exercise 3): 6,480 bytes: 2 (K and V) x 30 layers x 3 KV "
                   "heads x (64 x 4 bits / 8 + 2 x 2 bytes for the group's scale and zero point).\n")
    assert len(checks.reveal("lab05", 1)) == 3                                  # three checks in one exercise
    capsys.readouterr()
    assert checks.reveal("lab00", "0.1")[0].answer.startswith("269,030,016 bytes")  # "Exercise 0.1"
    numbered = {(e.lab, e.number) for e in EXERCISES.values() if e.number is not None}
    for lab, number in numbered:
        assert all(r.revealed for r in checks.reveal(lab, number)), (lab, number)
    with pytest.raises(ValueError, match="no exercise 9 in 'lab02'"):
        checks.reveal("lab02", 9)


def test_pass_lines_are_unchanged(capsys):
    """The committed notebooks store PASS lines and nbval compares them: reveal=False keeps them exact."""
    assert checks.check_kv4_bytes_per_token(6480)
    assert checks.check_cap_oom_reason("b")
    assert checks.check_exactly_full(("b", "the pool keeps the null block for itself"))
    assert capsys.readouterr().out == (
        "PASS KV4 bytes per token: 6,480 bytes, as expected.\n"
        "PASS why a capped process runs out of memory: b: PyTorch's allocator refuses to reserve past fraction x "
        "total for this process, whatever the device has free.\n"
        "PASS the exactly-full refusal: b: the block pool keeps one block for itself (the null block, "
        "vllm/v1/core/block_pool.py) and never lends it to a request: 15 blocks are usable, the request needs 16.\n")


def test_direction_names_a_factor_only_with_its_misconception():
    from vramlab.checks._core import direction

    kv = {2: "K and V counted twice", 0.5: "K or V left out", 1 / 8: "bits, not bytes", 1.024: "GB, not GiB"}
    assert direction(2 * 6480, 6480) == "too high"                          # a bare factor names no mistake
    assert direction(2 * 6480, 6480, kv) == "2x too high (K and V counted twice)"
    assert direction(6480 / 8, 6480, kv) == "8x too low (bits, not bytes)"
    assert direction(6480 * 1.024, 6480, kv) == "2.4% too high (GB, not GiB)"
    assert direction(16 * 6480, 6480, kv) == "too high"                     # 16x is one division from the answer
    assert direction(1.7 * 6480, 6480, kv) == "too high"
    assert direction(-3, 6480) == "the wrong sign"
    assert direction(0, 6480) == "too low"


def test_after_two_wrong_tries_a_number_gets_no_direction_and_the_hints_open_by_tries(capsys):
    from vramlab.checks._core import HINT_TIERS, check_close, tries

    lines = []
    for attempt in (100, 10, 50, 20, 30, 40):
        assert not check_close("demo number", attempt, 37, unit="bytes", hint="count the heads")
        lines.append(capsys.readouterr().out.strip())
    assert "too high" in lines[0] and "open Hint" not in lines[0]
    assert "too low" in lines[1] and f"That is try 2: open {HINT_TIERS[0]} above" in lines[1]
    for n, line in enumerate(lines[2:], start=3):
        assert "too high" not in line and "too low" not in line and "not it" in line, line
    assert f"open {HINT_TIERS[1]}" in lines[2] and f"open {HINT_TIERS[2]}" in lines[3]
    assert "reveal=True" in lines[4] and "count the heads" in lines[4]
    assert tries("demo number") == 6
    assert check_close("demo number", 37, 37, unit="bytes") and tries("demo number") == 0   # a pass starts over
    capsys.readouterr()
    assert not check_close("demo number", 1, 37) and "too low" in capsys.readouterr().out
    assert not check_close("demo number", None, 37) and tries("demo number") == 1           # a stub is no try


def _restart_kernel():
    """What a kernel restart leaves: the module's in-memory counts gone (the file stays)."""
    from vramlab.checks import _core

    _core._TRIES.clear()


def test_tries_survive_a_kernel_restart_in_the_file_and_reset_tries_still_clears_them(tmp_path, monkeypatch, capsys):
    """Issue 29: a learner must not restart the kernel to get the directions back. The tries live in the file
    named by VRAMLAB_TRIES_FILE, per notebook (JPY_SESSION_NAME) and check."""
    import json

    from vramlab.checks._core import check_close, reset_tries, tries, tries_file

    path = tmp_path / "tries.json"
    monkeypatch.setenv("VRAMLAB_TRIES_FILE", str(path))
    monkeypatch.setenv("JPY_SESSION_NAME", "/home/ana/labs/00_start_here.ipynb")
    assert tries_file() == path
    for attempt in (100, 10):
        assert not check_close("demo number", attempt, 37)
    capsys.readouterr()
    _restart_kernel()
    assert tries("demo number") == 2
    assert not check_close("demo number", 1, 37)
    line = capsys.readouterr().out
    assert "too low" not in line and "not it" in line and "That is try 3" in line     # no direction after a restart
    assert json.loads(path.read_text()) == {"/home/ana/labs/00_start_here.ipynb :: demo number": 3}
    monkeypatch.setenv("JPY_SESSION_NAME", "/home/ana/labs/01_outliers_and_rotation.ipynb")
    _restart_kernel()
    assert tries("demo number") == 0                                                  # another notebook: its own count
    monkeypatch.setenv("JPY_SESSION_NAME", "/home/ana/labs/00_start_here.ipynb")
    assert check_close("demo number", 37, 37) and tries("demo number") == 0          # a pass starts over, in the file
    assert json.loads(path.read_text()) == {}
    assert not check_close("demo number", 1, 37) and tries("demo number") == 1
    reset_tries()
    _restart_kernel()
    assert tries("demo number") == 0 and json.loads(path.read_text()) == {}


def test_the_tries_file_is_off_in_the_suite_named_by_the_notebook_otherwise_and_never_raises(tmp_path, monkeypatch,
                                                                                              capsys):
    from vramlab.checks._core import check_close, tries, tries_file

    assert tries_file() is None                                # tests/conftest.py: the suite keeps tries in memory
    monkeypatch.delenv("VRAMLAB_TRIES_FILE")
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    assert tries_file() is None                                # a script or nbclient: no notebook name, no file
    monkeypatch.setenv("VRAMLAB_CACHE", str(tmp_path / "cache"))               # a room's shared cache: not there
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("JPY_SESSION_NAME", "labs/00_start_here.ipynb")
    assert tries_file() == tmp_path / "state" / "vramlab" / "check_tries.json"
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))                          # each learner's own home
    assert tries_file() == tmp_path / "home" / ".local" / "state" / "vramlab" / "check_tries.json"
    for text in ("off", "0", "", "none"):
        monkeypatch.setenv("VRAMLAB_TRIES_FILE", text)
        assert tries_file() is None
    bad = tmp_path / "bad.json"
    for content in ("[1, 2]", "{not json", '{"labs/00_start_here.ipynb :: demo number": "many"}'):
        bad.write_text(content)
        monkeypatch.setenv("VRAMLAB_TRIES_FILE", str(bad))
        _restart_kernel()
        assert tries("demo number") == 0                      # a damaged file counts as empty
        assert not check_close("demo number", 1, 37) and tries("demo number") == 1
        capsys.readouterr()
    blocked = tmp_path / "a file" / "tries.json"                 # its folder is a file: it cannot be written
    (tmp_path / "a file").write_text("x")
    monkeypatch.setenv("VRAMLAB_TRIES_FILE", str(blocked))
    _restart_kernel()
    assert not check_close("demo number", 1, 37) and tries("demo number") == 1      # still counted, in memory
    assert "too low" in capsys.readouterr().out


def test_check_choice_says_why_that_choice_fails_and_nothing_more(capsys):
    from vramlab.checks._core import check_choice

    options = {"a": "the message names no cap", "b": "the reason the message gives", "c": "free memory is not the limit"}
    assert not check_choice("demo choice", "a", options, "b")
    out = capsys.readouterr().out
    assert "Hint: the message names no cap" in out and "'b'" not in out.split("expected")[0]
    assert check_choice("demo choice", " B ", options, "b")
    assert capsys.readouterr().out.strip() == "PASS demo choice: b: the reason the message gives."
    assert not check_choice("demo choice", "z", options, "b") and "not one of the choices" in capsys.readouterr().out
    assert not check_choice("demo choice", None, options, "b") and "not done" in capsys.readouterr().out
    with pytest.raises(ValueError, match="not among the options"):
        check_choice("demo choice", "a", options, "d")


def test_learners_or_package_says_which_function_the_lab_runs():
    from vramlab.checks import CheckResult, learners_or_package
    from vramlab.quarot.hadamard import fwht

    said = []
    mine = lambda x: x  # noqa: E731
    ok = CheckResult("butterfly", True, "", "")
    assert learners_or_package(ok, mine, fwht, "butterfly", said.append) is mine
    assert learners_or_package(CheckResult("butterfly", False, "", ""), mine, fwht, "butterfly", said.append) is fwht
    assert learners_or_package(True, None, fwht, "butterfly", said.append) is fwht
    assert said[0] == "Your butterfly passed its check: the lab runs it from here on."
    assert said[1] == ("Your butterfly has not passed its check yet, so the lab runs vramlab's "
                       "vramlab.quarot.hadamard.fwht in its place.")


# --------------------------------------------------------------------------- no narrowing by tries (issue 29)
_FACTOR_RE = re.compile(r"\b\d{1,6}(?:\.\d{1,6})?x too (?:high|low)\b|\b\d{1,3}(?:\.\d{1,3})?% too (?:high|low)\b")


def _bisect(name: str, extra: tuple, capsys, steps: int = 12):
    """A learner who bisects: each try is the geometric middle of what the messages left open (from 1e-6 to
    1e15), read for "too high" / "too low". Returns ("found", try), ("factor", message) or (lo, hi, directed)."""
    import math

    first = next(iter(inspect.signature(getattr(checks, name)).parameters))
    lo, hi, directed = 1e-6, 1e15, 0
    for step in range(steps):
        value = float(f"{math.sqrt(lo * hi):.6g}")
        attempt = (lambda v: (lambda *a, **k: v))(value) if first == "fn" else value
        result = _call(name, attempt, extra)
        out = capsys.readouterr().out
        if result.passed:
            return "found", step + 1
        if _FACTOR_RE.search(out):
            return "factor", out
        high, low = bool(re.search(r"\btoo (?:high|large|big|many|much)\b", out)), bool(
            re.search(r"\btoo (?:low|small|few|little)\b", out))
        if high != low:
            directed += 1
            lo, hi = (lo, value) if high else (value, hi)
    return lo, hi, directed


def _number_checks() -> list[str]:
    return [n for n in _exported_checks() if not EXERCISES[n].prediction and not EXERCISES[n].choices]


@pytest.mark.parametrize("name", _number_checks())
def test_a_bisecting_learner_never_narrows_an_answer_below_four_candidates(name, smollm2, capsys):
    """Wrong tries, each at the middle of what the messages left open: the check gives a direction on two
    tries at most, never a bare factor, so after 12 tries at least three decades (far more than 4 candidates
    at any tolerance a check uses) are still open, and the answer was not found by bisection."""
    from vramlab.checks._core import DIRECTION_TRIES

    outcome = _bisect(name, _extra(name, *smollm2), capsys)
    assert outcome[0] != "found", f"{name}: a bisecting learner found the answer in {outcome[1]} tries"
    assert outcome[0] != "factor", f"{name}: a bare factor message gives the answer away: {outcome[1]}"
    lo, hi, directed = outcome
    assert directed <= DIRECTION_TRIES, f"{name}: {directed} tries told a direction (at most {DIRECTION_TRIES})"
    assert hi / lo >= 1e3, f"{name}: the messages narrowed the answer to [{lo:g}, {hi:g}]"


# Ordered choices (a batch size, a block size, max_num_seqs): a wrong try's "over the budget", "misses the target"
# or "is that the fewest?" points one way along the order, as "too high" does on a number. check name ->
# (the candidates in order, attempt(candidate), [(regex meaning "the answer lies below this try", "... above")]).
_DOWN = r"\btoo (?:high|large|big|many|much)\b|\bover the budget\b|\bpeaks over\b|\bsmaller\b|\bfewer\b|\bfewest\b|" \
        r"\bcheaper\b|\blower\b|\bless\b"
_UP = r"\btoo (?:low|small|few|little)\b|\broom for more\b|\bbigger\b|\blarger\b|\bhigher\b|\bmore prompts\b"


def _ordered_checks() -> dict:
    from vramlab.checks import lab00, lab01, lab04

    return {
        # lab 00's capstone: the batch of the design that wins, from 1 to the largest the check searches
        "check_serving_plan": (list(range(1, lab00.SERVE_MAX_BATCH + 1)),
                               lambda n: {"design": lab00._SERVE_BEST, "batch": n}, _DOWN, _UP),
        # lab 01's capstone: the online transforms by cost; "meets the target" says a cheaper one may too
        "check_online_block": (list(lab01.BLOCK_CHOICES), lambda label: label,
                               _DOWN + r"|\bmeets the target\b", _UP + r"|\bmisses the target\b"),
        # lab 04's capstone: max_num_seqs from 1 to 8 (with the right preemption count, so only k is judged)
        "check_seqs_design": (list(range(1, len(lab04.CAPSTONE_REQUESTS) + 1)),
                              lambda k: {"max_num_seqs": k,
                                         "preemptions": lab04._seqs_outcomes()[len(lab04.CAPSTONE_REQUESTS)][0]},
                              _DOWN + r"|\bruns dry\b", _UP + r"|\bmore steps than\b"),
    }


def test_every_ordered_choice_is_judged_as_ordered():
    """A multiple-choice check whose labels are mostly numbers is an ordered choice: it must be in the table above,
    so the bisecting learner below reads its messages as directions."""
    ordered = _ordered_checks()
    for name in _exported_checks():
        labels = EXERCISES[name].choices or ()
        if sum(str(label).isdigit() for label in labels) >= 3:
            assert name in ordered, f"{name}: an ordered choice {labels}; add it to _ordered_checks()"


#: Found by the test below in a lab another helper was fixing at the same time (issue 29's review, 2026-12-05);
#: expected to fail until that fix is merged; the lead drops the entry once it passes.
_ORDERED_FIXED_ELSEWHERE = {
}


@pytest.mark.parametrize("name, upper", [
    pytest.param(n, u, marks=pytest.mark.xfail(reason=_ORDERED_FIXED_ELSEWHERE[n, u], strict=False))
    if (n, u) in _ORDERED_FIXED_ELSEWHERE else (n, u) for n in sorted(_ordered_checks()) for u in (False, True)],
    ids=[f"{n}-{'upper' if u else 'lower'}-middle" for n in sorted(_ordered_checks()) for u in (False, True)])
def test_a_bisecting_learner_never_narrows_an_ordered_choice_below_four(name, upper, smollm2, capsys):
    """Issue 29's review: an ordered choice is bisected like a number. Each try is the middle of the candidates the
    messages left open; "over the budget", "misses the target", "is that the fewest?" move the bounds as "too
    high" does. After every wrong try at least 4 candidates (or all of them, when fewer) are still consistent
    with the messages: the tries themselves eliminate, the messages may not. Directions come on two tries at most."""
    from vramlab.checks._core import DIRECTION_TRIES, reset_tries
    from vramlab.ran import _forget as forget

    candidates, attempt, down, up = _ordered_checks()[name]
    extra = _extra(name, *smollm2)
    reset_tries()
    forget()        # lab 04 refuses a design stored after its burst was simulated in this process
    lo, hi, tried, directed = 0, len(candidates) - 1, set(), 0
    for _ in range(8):
        open_ = [i for i in range(lo, hi + 1) if i not in tried]
        if not open_:
            break
        index = open_[len(open_) // 2 if upper else (len(open_) - 1) // 2]
        result = _call(name, attempt(candidates[index]), extra)
        out = capsys.readouterr().out
        if result.passed:
            break
        tried.add(index)
        below, above = bool(re.search(down, out)), bool(re.search(up, out))
        if below != above:
            directed += 1
            lo, hi = (lo, index - 1) if below else (index + 1, hi)
        left = hi - lo + 1
        assert left >= min(4, len(candidates)), (
            f"{name}: after trying {candidates[index]!r}, the messages leave {candidates[lo:hi + 1]}: {out}")
    assert directed <= DIRECTION_TRIES, f"{name}: {directed} tries told a direction (at most {DIRECTION_TRIES})"
    reset_tries()


def _quoted(label: str) -> re.Pattern:
    return re.compile(rf"(?<![\w])['\"(]{re.escape(label)}['\")](?![\w])")


def _uncap(name: str) -> None:
    """Forget the wrong attempts a capstone counted toward its cap (``max_wrong``; lab 01's judges 5 of its 10 wrong
    labels, review #16), so the tests below can judge every label; the other tries stay as they were."""
    from vramlab.checks._core import reset_tries

    if EXERCISES[name].max_wrong:
        reset_tries(f"{name} (wrong attempts)")


@pytest.mark.parametrize("name", [n for n in _exported_checks() if EXERCISES[n].choices])
def test_a_wrong_choice_is_told_why_it_fails_and_names_no_other_choice(name, smollm2, capsys):
    """Every label of a multiple-choice check: the right ones pass; a wrong one fails with a reason that
    names no other label, so trying the choices one by one never narrows them more than the tries themselves."""
    labels = EXERCISES[name].choices
    extra = _extra(name, *smollm2)
    passed = []
    for label in labels:
        _uncap(name)
        result = _call(name, label, extra)
        out = capsys.readouterr().out
        if result.passed:
            passed.append(label)
            continue
        assert result.hint, f"{name}({label!r}) says nothing about why that choice fails: {out}"
        named = [other for other in labels if other != label and _quoted(other).search(out)]
        assert not named, f"{name}({label!r}) names the other choices {named}: {out}"
    assert passed and len(passed) < len(labels), (name, passed)


@pytest.mark.parametrize("name", [n for n in _exported_checks() if EXERCISES[n].choices])
def test_a_sequence_of_wrong_choices_never_points_to_the_answer(name, smollm2, capsys):
    """Issue 29: a learner who tries the wrong labels one after another (the tries counted, so the later lines
    change) is never shown the right label, in any order; only elimination narrows the choice, and the right
    label still passes at the end."""
    from vramlab.checks._core import reset_tries

    labels = EXERCISES[name].choices
    extra = _extra(name, *smollm2)
    right = [label for label in labels if _uncap(name) or _call(name, label, extra).passed]
    capsys.readouterr()
    assert right, f"{name}: no label passes"
    wrong = [label for label in labels if label not in right]
    for order in (wrong, wrong[::-1]):
        reset_tries()
        for label in order:
            result = _call(name, label, extra)
            out = capsys.readouterr().out
            assert not result, (name, label, out)
            shown = [r for r in right if _quoted(r).search(out)]
            assert not shown, f"{name}: trying {label!r} shows the right label {shown}: {out}"
        _uncap(name)       # a capped capstone refuses the right label too after its wrong attempts (not a hint)
        assert _call(name, right[0], extra).passed
        capsys.readouterr()


def _answer_values(answer: str) -> list[str]:
    """The value an answer text gives (not the inputs its explanation mentions): the first number of a plain
    answer, or the numbers of a ``{...}`` answer, when it has 3+ significant digits; each as written and
    without its thousands commas."""
    head = answer[:answer.index("}") + 1] if answer.startswith("{") and "}" in answer else answer.split(" ", 1)[0]
    values = []
    for number in _NUMBER_RE.findall(head):
        number = number.rstrip(".,")
        if len(number.replace(",", "").replace(".", "").lstrip("0")) >= 3:
            values += sorted({number, number.replace(",", "")})
    return values


def _lab_screen_before(path: Path, number: str) -> tuple[int, str]:
    """(index of the ``### Exercise <number>`` cell, what the learner version shows before it: markdown, the
    lab's code, and the outputs of a learner who solved everything before)."""
    import nbformat

    from vramlab import labs

    cells = nbformat.read(path, as_version=4).cells
    pattern = re.compile(rf"^#+\s*Exercise\s+(?:\d{{1,2}}\.)?{re.escape(number)}\b", re.M)
    start = next(i for i, c in enumerate(cells) if c.cell_type == "markdown" and pattern.search(c.source))
    shown = []
    for cell in cells[:start]:
        if cell.cell_type == "markdown":
            shown.append(cell.source)
            continue
        shown.append(labs.strip_solutions(labs.marked_source(cell)))
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            shown.append("".join(out.get("text", "")) + "".join(data.get("text/plain", "")) + "".join(data.get("text/html", "")))
    return start, "\n".join(shown)


@pytest.mark.parametrize("name", sorted(_notebook_exercises()))
def test_no_answer_value_is_on_screen_before_its_exercise(name, smollm2):
    """Issue 29: the value each exercise asks for appears in no cell before the exercise (markdown, code or
    output of the executed lesson), so no learner reads it off the screen."""
    lab, number = _notebook_exercises()[name]
    path = next(NOTEBOOKS.glob(f"{lab[3:]}_*.ipynb"))
    params = list(inspect.signature(getattr(checks, name)).parameters)[1:]
    answer = answer_text(name, **dict(zip(params, _extra(name, *smollm2))))
    start, shown = _lab_screen_before(path, number)
    early = [v for v in _answer_values(answer) if re.search(rf"(?<![\d.,]){re.escape(v)}(?![\d])", shown)]
    assert not early, f"{path.name}: {early} (the answer of {name}) is on screen before Exercise {number} (cell {start})"


def test_secrets_regex_is_linear():
    import time

    start = time.process_time()
    _secrets("9" * 100_000)
    _secrets("1," * 50_000 + ".")
    _NUMBER_RE.findall("x" * 50_000_000)
    assert time.process_time() - start < 20


def test_the_wrong_values_cover_zero_a_large_number_and_a_wrong_label():
    """The sweep above tries each of these on every check in the registry (values, and functions returning them)."""
    assert 0 in WRONG_VALUES and any(isinstance(v, float) and v >= 1e9 for v in WRONG_VALUES)
    assert any(isinstance(v, str) for v in WRONG_VALUES)
    names = set(_exported_checks())
    registered = {n for n, e in EXERCISES.items() if hasattr(checks, n)}
    assert names == registered, (names ^ registered)   # the sweep iterates the registry, not a fixed list
    fn_checks = [n for n in names if next(iter(inspect.signature(getattr(checks, n)).parameters)) == "fn"]
    assert fn_checks and all(len(_attempts(n)) == len(WRONG_VALUES) + 1 for n in fn_checks)


def test_a_reveal_is_recorded_in_the_result_and_the_progress_folder(tmp_path, monkeypatch, capsys):
    import json

    monkeypatch.setenv("VRAMLAB_PROGRESS_DIR", str(tmp_path))
    monkeypatch.setenv("JUPYTERHUB_USER", "ada")
    result = checks.check_kv4_bytes_per_token(5760, reveal=True)
    assert result.revealed and result.details["revealed"] and not result.passed
    assert checks.check_kv4_bytes_per_token(6480)
    revealed = checks.reveal("lab02", 3)
    assert revealed[0].revealed
    capsys.readouterr()
    rows = [json.loads(line) for p in tmp_path.glob("*.jsonl") for line in p.read_text().splitlines()]
    assert [r["revealed"] for r in rows] == [True, False, True], rows
    assert [r["passed"] for r in rows] == [False, True, False], rows


# --------------------------------------------------------------------------- printed lines wrap at spaces (issue 19)
LONG_FAIL = ("a number of bytes", "12 bytes, too low",
             "count both K and V for every layer and every KV head, and the scale and zero point of each group too")


def test_printed_check_lines_break_at_spaces_in_a_kernel(monkeypatch, capsys):
    from vramlab.checks import _core

    monkeypatch.setattr(_core, "_in_kernel", lambda: True)
    monkeypatch.delenv(_core.WRAP_ENV, raising=False)
    result = report("a long demo check name", False, *LONG_FAIL)
    out = capsys.readouterr().out.rstrip("\n")
    lines = out.split("\n")
    assert len(lines) >= 2 and all(len(ln) <= _core.WRAP_WIDTH for ln in lines), out
    assert all(ln.startswith(_core.WRAP_INDENT) and not ln[len(_core.WRAP_INDENT)].isspace() for ln in lines[1:])
    assert " ".join(ln.strip() for ln in lines) == result.message       # broken only at spaces: no word split
    assert "\n" not in result.message and "\n" not in result.verdict    # the strings tests match stay one line
    word = "x" * 150                                                   # a word longer than a line stays whole
    report("demo", False, "a word", word)
    assert word in capsys.readouterr().out


def test_a_fail_line_keeps_expected_and_got_on_its_first_line():
    """The browser smoke test (tests/browser/smoke_jupyterlab.mjs) reads "expected ... got" on the FAIL line."""
    from vramlab.checks._core import wrap_check_line

    line = ("FAIL a start-up config for llama-3.1-8b on one L4 at 65,536 tokens: expected your answer in place of "
            "the stub; got None. Hint: this exercise is not done yet: replace the stub with your code, then run it")
    wrapped = wrap_check_line(line, 100).split("\n")
    assert wrapped[0].endswith("; got") or "; got " in wrapped[0], wrapped
    assert "expected" in wrapped[0] and all(len(ln) <= 100 for ln in wrapped[1:])
    assert " ".join(ln.strip() for ln in wrapped) == line
    short = "PASS x: " + "word " * 40
    assert all(len(ln) <= 100 for ln in wrap_check_line(short.strip(), 100).split("\n"))


def test_printed_check_lines_stay_one_line_outside_a_kernel_unless_asked(monkeypatch, capsys):
    from vramlab.checks import _core

    monkeypatch.delenv(_core.WRAP_ENV, raising=False)
    monkeypatch.setattr(_core, "_in_kernel", lambda: False)
    result = report("a long demo check name", False, *LONG_FAIL)
    assert capsys.readouterr().out == result.message + "\n"
    monkeypatch.setenv(_core.WRAP_ENV, "60")
    report("a long demo check name", False, *LONG_FAIL)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("; got 12") and max(len(ln) for ln in lines[1:]) <= 60, lines   # "got" stays on line 1
    monkeypatch.setenv(_core.WRAP_ENV, "0")
    monkeypatch.setattr(_core, "_in_kernel", lambda: True)
    capsys.readouterr()
    report("x", False, *LONG_FAIL)
    assert "\n" not in capsys.readouterr().out.rstrip("\n")


def test_reveal_wraps_its_answer_line_too(monkeypatch, capsys):
    from vramlab.checks import _core

    monkeypatch.setattr(_core, "_in_kernel", lambda: True)
    monkeypatch.delenv(_core.WRAP_ENV, raising=False)
    results = checks.reveal("lab02", 3)
    out = capsys.readouterr().out
    assert all(len(ln) <= _core.WRAP_WIDTH for ln in out.splitlines()) and out.startswith("ANSWER ")
    assert " ".join(ln.strip() for ln in out.splitlines()) == results[0].message


def test_one_registry_of_what_ran_and_one_reset():
    """The simulator's bursts, the dry run's shapes and the capstones' passed designs live in one registry
    (vramlab.ran, re-exported by vramlab.checks._core) with one reset; the simulator and the dry run import no
    check code to note a run."""
    import subprocess
    import sys

    from vramlab.checks import _core, lab04
    from vramlab.serving.paged import Request, burst_was_run, simulate
    from vramlab.vram.dryrun import dry_run, shape_was_run

    assert _core.forget_runs is __import__("vramlab.ran").ran._forget
    simulate(10, [Request(i, p, n) for i, (p, n) in enumerate(lab04.CAPSTONE_REQUESTS)], block_size=128)
    dry_run("smollm2-135m", 1, 256)
    with _core.unrecorded():
        dry_run("smollm2-135m", 2, 128)
    assert burst_was_run(10, lab04.CAPSTONE_REQUESTS) and shape_was_run(1, 256, "bfloat16")
    assert not shape_was_run(2, 128, "bfloat16")            # a check's own run is not the learner's
    assert {k for k in _core.runs_noted("burst")} and not _core.runs_noted("passed check_seqs_design")
    _core.forget_runs()
    assert not burst_was_run(10, lab04.CAPSTONE_REQUESTS) and not shape_was_run(None, 256, "bfloat16")
    code = ("import sys, vramlab.serving.paged, vramlab.vram.dryrun, vramlab.serving.recorded; "
            "print(sorted(m for m in sys.modules if m.startswith('vramlab.checks')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out


# Words that mark a name holding or computing an exercise's answer: a learner imports the check modules, so such
# a public name is an answer on screen (`from vramlab.checks import lab01; lab01.cheapest_block(...)`, issue 29's
# last review). Each check module keeps its answers private (a leading underscore, out of __all__).
_ANSWER_WORDS = {"answer", "answers", "best", "cheapest", "correct", "expected", "reference", "solution", "solutions",
                 "winner"}
# The names the review found, and the others of their kind found with them: each stays private.
_KNOWN_ANSWER_NAMES = {
    "lab00": ("SERVE_BEST", "SERVE_MISS_BAR", "SERVE_DESIGNS", "serve_max_batch", "serve_peak_mib", "greedy_differ"),
    "lab01": ("block_errors", "cheapest_block", "PLACEMENT"),
    "lab03": ("reference_fixes", "reference_bytes_per_token", "engine_startup", "service_startup", "capstone_designs",
              "EXACTLY_FULL_OPTIONS"),
    "lab04": ("resident_requests", "TRIAGE_LOGS", "PREEMPT_OPTIONS", "REASON_WORDS"),
    "lab05": ("reference_ranks", "REFERENCE_GROUP_RANKS"),
    "lab06": ("predicted_layers_answer", "smallest_budget_bytes", "best_serving_map", "serving_replay", "best_design",
              "design_space", "family_best", "design_replay", "serving_trace"),
    "lab08": ("reserved_reference", "peak_reference"),
}


def _answer_like(name: str) -> bool:
    """A public name spelled like an answer; the checks themselves (``check_...``) are public by design."""
    return (not name.startswith(("_", "check_"))) and bool(_ANSWER_WORDS & set(name.lower().split("_")))


def test_answer_like_names_are_recognised():
    for name in ("SERVE_BEST", "cheapest_block", "reference_ranks", "REFERENCE_GROUP_RANKS", "FIX_ANSWER",
                 "predicted_layers_answer", "best_serving_map"):
        assert _answer_like(name), name
    for name in ("_SERVE_BEST", "check_online_block", "check_cheapest_design", "BLOCK_TARGET", "after_capstone", "referenced", "bestow"):
        assert not _answer_like(name), name


@pytest.mark.parametrize("lab", [f"lab{n:02d}" for n in range(10)])
def test_no_check_module_exports_an_answer(lab):
    """No public name of a check module (no leading underscore, or listed in __all__) holds or computes an
    exercise's answer: none is spelled like one (_ANSWER_WORDS), and none of the names found by the review is
    public."""
    import importlib

    module = importlib.import_module(f"vramlab.checks.{lab}")
    public = {n for n in vars(module) if not n.startswith("_")} | set(getattr(module, "__all__", ()))
    spelled = sorted(n for n in public if _answer_like(n) or (n.startswith("_") and n in getattr(module, "__all__", ())))
    known = sorted(n for n in _KNOWN_ANSWER_NAMES.get(lab, ()) if n in public)
    assert not spelled and not known, (f"vramlab.checks.{lab} exports answer helpers {spelled + known}: make them "
                                       "private (a leading underscore, out of __all__)")


_MALFORMED_WHYS = (42, "", "   \n", None, ("because",))


def _why_cases():
    """(check name as it reports, call with a why) for every check that takes a choice plus a why."""
    from vramlab.checks import lab03, lab04, lab08
    from vramlab.vram.oom_message import parse_oom_message

    verdicts = {k: parse_oom_message(t).verdict for k, t in lab04.READING_MESSAGES.items()}
    return {
        "the exactly-full refusal": lambda why: lab03.check_exactly_full(("a", why)),
        "which request is preempted": lambda why: lab04.check_preempted_request(("a", why)),
        "reading three OOM messages": lambda why: lab04.check_oom_reading(
            {k: (v, why if k == "B" else "because of its free, reserved and allowed figures") for k, v in verdicts.items()}),
        "a T4 plan (capstone)": lambda why: lab08.check_t4_plan({"sdpa_mib": 9000, "eager_mib": 8000, "choice": "eager",
                                                                 "why": why}),
    }


@pytest.mark.parametrize("name", ["the exactly-full refusal", "which request is preempted", "reading three OOM messages",
                                  "a T4 plan (capstone)"])
def test_a_malformed_why_is_told_in_one_sentence_and_is_not_a_try(name, capsys):
    """Issue 29's last review: a why that is not a sentence (not a string, empty, whitespace) gets one line naming the
    field and the fix, and is not counted as a wrong try (tries open the hints and withhold the directions)."""
    from vramlab.checks._core import FAIL_MARK, tries

    call = _why_cases()[name]
    for why in _MALFORMED_WHYS:
        result = call(why)
        out = capsys.readouterr().out
        assert not result and not result.untouched, (why, out)
        assert out.startswith(FAIL_MARK) and out.count("\n") == 1, out          # one line (no wrapping outside a kernel)
        assert "why" in result.expected and "one sentence in quotes" in result.hint, out
        assert "try" not in out.lower() and tries(name) == 0, (why, out)
    # a real why is a real try: the choice ("a", wrong in both multiple choices) or the reason is judged and counted
    call("because it is what the log says")
    assert tries(name) == 1, capsys.readouterr().out


def test_a_cell_after_a_capstone_opens_only_for_that_checks_own_result():
    """Review #3: `after_capstone(True)` printed lab 02's reference search. opened_by accepts only the CheckResult the
    named check returned, passed or revealed; a truthy value, a result built by hand or another check's does not."""
    from vramlab.checks import _core, lab02

    assert not _core.opened_by(True, "check_mixed_plan") and not _core.opened_by(1, "check_mixed_plan")
    assert not _core.opened_by(CheckResult("x", True, "", ""), "check_mixed_plan")
    passed = lab02.check_kv4_bytes_per_token(2 * 30 * 3 * (64 // 2 + 2 + 2))
    assert passed and passed.details["check"] == "check_kv4_bytes_per_token"
    assert _core.opened_by(passed, "check_kv4_bytes_per_token") and not _core.opened_by(passed, "check_mixed_plan")
    failed = lab02.check_kv4_bytes_per_token(5760)
    assert not _core.opened_by(failed, "check_kv4_bytes_per_token")
    assert _core.opened_by(lab02.check_kv4_bytes_per_token(5760, reveal=True), "check_kv4_bytes_per_token")
    # reviews #9 and #9b: a failed result with passed set afterwards, or one built by hand with the check's name in its
    # details, opened the cells; and check_x.exercise.answer() gave any answer with no reveal recorded
    failed.passed = True
    assert not _core.opened_by(failed, "check_kv4_bytes_per_token")
    built = CheckResult("x", True, "", "", details={"check": "check_kv4_bytes_per_token"})
    assert not _core.opened_by(built, "check_kv4_bytes_per_token")
    from vramlab import checks

    exported = [getattr(checks, n) for n in dir(checks) if n.startswith("check_")]
    assert len(exported) > 40
    for fn in exported:
        assert not hasattr(fn, "exercise"), fn.__name__


def test_a_prediction_is_the_one_stored_before_its_measurement(capsys):
    """Review #7: check_prediction stored nothing, so a learner could edit a prediction after its measurement and run
    the measurement again. The value stored before the measurement is what is compared; a different value stored
    after it is refused as a reading (no try counted); the same value again (Run All) is fine."""
    from vramlab.checks import check_prediction
    from vramlab.checks._core import tries

    what = "a test quantity"
    assert check_prediction(100, what=what, unit="MiB")
    assert check_prediction(100, 400, what, "MiB")
    assert "you predicted 100 MiB; it is 400 MiB (4x too low)" in capsys.readouterr().out
    assert check_prediction(100, what=what, unit="MiB")             # Run All again: the same prediction
    refused = check_prediction(390, what=what, unit="MiB")          # edited after the measurement
    out = capsys.readouterr().out
    assert not refused and "reading" in out and "100 MiB" in out and tries(what) == 0, out
    assert check_prediction(390, 400, what, "MiB")                  # the measurement again: the stored one counts
    out = capsys.readouterr().out
    assert "you predicted 100 MiB (the one stored before the measurement; the cell now holds 390)" in out, out
    assert check_prediction(7, 8, "never stored first")              # no stored prediction: compared as given
    assert "you predicted 7; it is 8" in capsys.readouterr().out
    # review #10b: the measurement ran with the prediction still None, then a value was stored and measured again
    assert not check_prediction(None, 0.52, "skipped first")
    refused = check_prediction(0.3, what="skipped first")
    assert not refused and "the measurement ran before any prediction was stored" in capsys.readouterr().out
    refused = check_prediction(0.52, 0.52, "skipped first")          # the measurement again: still a reading
    assert not refused and "you predicted" not in capsys.readouterr().out


def test_a_check_name_cannot_be_registered_twice_and_a_forged_pass_opens_nothing():
    """Review #10b decorated its own function named check_l4_plan with the public `exercise` and opened lab 09's cells
    with its forged pass: a registered name cannot be taken by another exercise, and only a check of vramlab.checks
    marks its results as opening its cells."""
    from vramlab.checks import _core
    from vramlab.checks import lab09  # noqa: F401 - registers check_l4_plan

    with pytest.raises(ValueError, match="already registered"):
        @_core.exercise("labXX", 99, lambda **_: "")
        def check_l4_plan(x):
            return _core.report("forged", True, "", "ok")

    @_core.exercise("labXX", 98, lambda **_: "")
    def check_forged_elsewhere(x):
        return _core.report("forged", True, "", "ok")

    assert not _core.opened_by(check_forged_elsewhere(0), "check_forged_elsewhere")
    _core.EXERCISES.pop("check_forged_elsewhere", None)


CAPSTONES = {"check_serving_plan", "check_online_block", "check_mixed_plan", "check_three_engines", "check_seqs_design",
             "check_rank_plan", "check_serving_map", "check_cheapest_design", "check_diagnosis", "check_t4_plan",
             "check_l4_plan", "check_reduced_length"}


def test_every_capstone_stops_judging_after_its_wrong_attempts(capsys):
    """Review #12 reached PASS in four capstones with a loop over every design (59 to 651 calls): each capstone judges
    at most CAPSTONE_MAX_WRONG counted wrong attempts, then only a reveal (the tries last across restarts)."""
    from vramlab.checks import _core, lab09

    assert {name for name, e in _core.EXERCISES.items() if e.max_wrong} == CAPSTONES
    reset = _core.reset_tries
    reset()
    from vramlab import ran

    ran.note(_core.OPENED_KIND, "check_l4_plan")         # Exercise 3 waits for Exercise 1
    for length in range(1000, 1000 + 128 * _core.CAPSTONE_MAX_WRONG, 128):
        assert not lab09.check_reduced_length(length)
    capsys.readouterr()
    right = 10496
    refused = lab09.check_reduced_length(right)
    assert not refused and "judges no more" in capsys.readouterr().out
    assert lab09.check_reduced_length(right, reveal=True).revealed
    assert lab09.check_reduced_length(right)                 # a reveal opens it again
    reset()
