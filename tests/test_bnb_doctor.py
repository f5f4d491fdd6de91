"""The bitsandbytes doctor: log corpus labels, root cause over symptoms, machine checks, fault injection."""

from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from vramlab.bnb import doctor, logs
from vramlab.bnb.logs import LABELS, _load_corpus, explain_log, missing_versions

CORPUS = _load_corpus()   # the whole corpus: the public load_corpus() leaves out lab 07 Exercise 5's log
SRC = str(Path(__file__).resolve().parents[1] / "src")


def _bnb_dir() -> Path:
    return doctor.shipped_binaries()["128"].parent if doctor.shipped_binaries() else Path("/nonexistent")


# --------------------------------------------------------------------------- corpus
def test_corpus_has_enough_sourced_logs_in_both_formats():
    assert len(CORPUS) >= 15
    ids = [e["id"] for e in CORPUS]
    assert len(ids) == len(set(ids))
    for e in CORPUS:
        assert e["label"] in LABELS and e["text"].strip() and len(e["source"]) > 20, e["id"]
    formats = {e["format"].split()[0] for e in CORPUS}
    assert {"old", "current"} <= formats
    # every label except none is represented by at least one real log
    assert set(LABELS) == {e["label"] for e in CORPUS}
    # the article's logs are in (the "article" entries are checked verbatim against its text below)
    assert sum("Troubleshooting bitsandbytes" in e["source"] for e in CORPUS) >= 3


def test_every_corpus_entry_says_where_it_comes_from():
    for e in CORPUS:
        if "scenario" in e or e["id"] == "bnb050_cpu_ok":
            continue  # rendered on this machine by the installed bitsandbytes
        has_url = str(e.get("url", "")).startswith("https://")
        assembled = e.get("assembled") is True and len(e.get("sources", [])) >= 1
        assert has_url or assembled or e.get("article"), e["id"]
        assert all(len(src) > 20 for src in e.get("sources", [])), e["id"]


_ARTICLE_TEXTS = sorted(Path("/work/shared/seeds").glob("*.txt")) if Path("/work/shared/seeds").is_dir() else []


@pytest.mark.skipif(not _ARTICLE_TEXTS, reason="the source article's text is not on this machine")
def test_article_entries_are_verbatim_substrings_of_the_article():
    articles = [p.read_text() for p in _ARTICLE_TEXTS]
    article = next(t for t in articles if "Troubleshooting bitsandbytes" in t)
    cited = [e for e in CORPUS if e.get("article")]
    assert len(cited) >= 2
    for e in cited:
        assert e["article"] in article and e["text"] in article, e["id"]


@pytest.mark.parametrize("entry", CORPUS, ids=[e["id"] for e in CORPUS])
def test_corpus_log_is_labelled_correctly(entry):
    found = explain_log(entry["text"])
    assert found.label == entry["label"], (found.label, found.detail)
    assert found.cause and found.fix and found.status in ("ok", "warning", "error")


def test_root_cause_beats_symptoms():
    by_id = {e["id"]: e["text"] for e in CORPUS}
    # the cudart warning and the final 'Something unexpected happened' are symptoms of the ABI error
    text = by_id["article_cxxabi_cuda121"]
    assert "libcudart.so not found" in text and "Something unexpected" in text
    assert explain_log(text).label == "libstdcxx_abi"
    # compute capability 7.0 only warns; the missing nocublaslt binary is why setup failed
    assert explain_log(by_id["issue1518_nocublaslt_cuda124"]).label == "binary_missing_for_cuda_version"
    # 3.7 is below the minimum: the missing binary is a consequence of the old GPU
    assert explain_log(by_id["k80_cc37_cuda117"]).label == "compute_capability_low"
    # an override that names an absent binary: the override is the cause, not the missing file
    assert explain_log(by_id["bnb050_override_missing"]).label == "bnb_cuda_version_override"
    # a symptom alone is still labelled, but only as the symptom
    assert explain_log(by_id["old_setup_failed_only"]).label == "native_library_unavailable"
    assert explain_log(by_id["bnb050_slow_int8_cc70"]).status == "warning"


def test_old_override_advice_is_not_read_as_an_invalid_value():
    # 0.41's warning contains "BNB_CUDA_VERSION=XXX can be used ..." and "export BNB_CUDA_VERSION="
    text = next(e["text"] for e in CORPUS if e["id"] == "old_override_cuda125")
    assert logs.override_value(text) == "125"
    advice_only = "Found duplicate CUDA runtime files (see below).\n    export BNB_CUDA_VERSION=122\n"
    assert logs.override_value(advice_only) is None


@pytest.mark.parametrize("text", ["", "   \n", "hello world", "\x00\xff" * 50, "CUDA SETUP:" * 10_000,
                                  "version `' not found", "Compute Capability: x.y"])
def test_unknown_or_odd_text_never_raises(text):
    found = explain_log(text)
    assert found.label in LABELS
    assert explain_log("Segmentation fault (core dumped)").label == "other"
    assert "vramlab doctor" in " ".join(explain_log("").fix)


def test_bad_input_type_is_one_sentence():
    with pytest.raises(TypeError, match="explain_log\\(text\\): text must be the log as a str"):
        explain_log(42)
    assert explain_log(b"libcudart.so.12: cannot open shared object file").label == "cuda_runtime_dependency_missing"
    with pytest.raises(ValueError, match="No corpus log with id 'nope'"):
        logs.corpus_entry("nope")


def test_missing_versions_parses_the_loader_message():
    text = ("/lib64/libstdc++.so.6: version `CXXABI_1.3.9' not found (required by /x/libbitsandbytes_cuda117.so)\n"
            "OSError: /usr/lib/libstdc++.so.6: version `GLIBCXX_3.4.29' not found (required by /y/lib.so)")
    got = missing_versions(text)
    assert [g["symbol"] for g in got] == ["CXXABI_1.3.9", "GLIBCXX_3.4.29"]
    assert got[0]["library"] == "/lib64/libstdc++.so.6" and got[0]["required_by"] == "/x/libbitsandbytes_cuda117.so"
    assert missing_versions("nothing here") == []


# --------------------------------------------------------------------------- bitsandbytes' own VERSION MISMATCH hint
def test_bitsandbytes_version_mismatch_hint_cannot_fire():
    """Read the installed source: the hint tests for a text that get_native_library never raises."""
    from bitsandbytes import cextension

    src = inspect.getsource(cextension)
    assert 'no_cuda_lib_found = f"{BNB_BACKEND} binary not found" in original_error' in src
    assert 'raise RuntimeError(f"No compatible {BNB_BACKEND} binary found at {cuda_binary_path}")' in src
    real = "No compatible CUDA binary found at /x/libbitsandbytes_cuda999.so"
    assert not doctor.version_mismatch_hint_fires(real)
    assert doctor.version_mismatch_hint_fires("CUDA binary not found")  # the text it waits for
    rendered = next(e["text"] for e in CORPUS if e["id"] == "bnb050_no_binary_cuda102")
    assert "VERSION MISMATCH" not in rendered and "COMPILE FROM SOURCE for CPU-only" in rendered
    assert explain_log(rendered).label == "binary_missing_for_cuda_version"


@pytest.mark.slow
@pytest.mark.parametrize("entry_id", ["bnb050_override_invalid", "bnb050_runtime_missing", "bnb050_unbuilt_checkout"])
def test_rendered_corpus_entries_match_the_installed_bitsandbytes(entry_id):
    entry = logs._corpus_entry(entry_id)
    now = doctor.simulate(entry["scenario"])
    stored_dir = "/work/main/.venv/lib/python3.11/site-packages/bitsandbytes"
    assert now.replace(str(_bnb_dir()), stored_dir) == entry["text"]


# --------------------------------------------------------------------------- machine checks
def test_check_override_cases():
    f = doctor.check_override(None, cuda_available=False)
    assert f.status == "ok"
    f = doctor.check_override("abc", cuda_available=False)
    assert f.status == "warning" and f.label == "bnb_cuda_version_override" and "digits" in f.detail
    assert doctor.check_override("abc", cuda_available=True).status == "error"
    f = doctor.check_override("999", cuda_available=True)
    assert f.status == "error" and "not shipped" in f.detail
    shipped = doctor.shipped_binaries()
    assert "128" in shipped and shipped["128"].name == "libbitsandbytes_cuda128.so"
    assert doctor.check_override("128", cuda_available=True).status == "warning"


def test_override_advice_never_forces_another_runtime():
    f = doctor.check_override("abc", cuda_available=False)
    assert f.fix == ["unset BNB_CUDA_VERSION"]  # CPU build: nothing to pin to
    f = doctor.check_override("abc", cuda_available=True, torch_cuda="12.4")
    assert f.fix[0] == "unset BNB_CUDA_VERSION" and "BNB_CUDA_VERSION=124" in f.fix[1]
    assert not any("132" in x or "130" in x for x in f.fix)
    assert "libcudart.so.11.0" in doctor.check_override("118", cuda_available=True).cause
    assert "libcudart.so.12)" in doctor.check_override("128", cuda_available=True).cause
    # the names agree with what the shipped binaries really link against
    for ver, path in doctor.shipped_binaries().items():
        assert doctor.cudart_soname(ver).encode() + b"\x00" in path.read_bytes(), ver


@pytest.mark.slow
def test_runtime_missing_picks_a_binary_whose_runtime_is_really_missing():
    text = doctor.simulate("runtime_missing")
    first = text.splitlines()[0]
    if first.startswith("skipped:"):
        pytest.skip("every shipped binary's CUDA runtime loads on this machine: " + first)
    m = re.match(r"chosen: (libbitsandbytes_cuda\d+\.so), which needs (libcudart\.so\.[\d.]+);", first)
    assert m, first
    # the loader really cannot open it (same minimal environment as simulate: no LD_LIBRARY_PATH)
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    code = f"import ctypes\ntry:\n ctypes.CDLL({m.group(2)!r}); print('loads')\nexcept OSError: print('missing')"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True).stdout
    assert out.strip() == "missing"
    assert explain_log(text).label == "cuda_runtime_dependency_missing"


def test_abi_check_finds_a_missing_symbol(tmp_path):
    cpu_lib = _bnb_dir() / "libbitsandbytes_cpu.so"
    assert doctor.abi_check(cpu_lib).status == "ok"
    fake = tmp_path / "libneedy.so"
    fake.write_bytes(b"\x7fELF...GLIBCXX_3.4.99\x00CXXABI_1.3.99\x00")
    f = doctor.abi_check(fake)
    assert f.status == "error" and f.label == "libstdcxx_abi"
    assert f.evidence == ["GLIBCXX_3.4.99", "CXXABI_1.3.99"]


def test_child_env_applies_and_removes(monkeypatch):
    monkeypatch.setenv("LD_LIBRARY_PATH", "/somewhere")
    env = doctor.child_env({"BNB_CUDA_VERSION": "abc", "LD_LIBRARY_PATH": None})
    assert env["BNB_CUDA_VERSION"] == "abc" and "LD_LIBRARY_PATH" not in env
    with pytest.raises(TypeError, match="env must be a dict"):
        doctor.child_env(["BNB_CUDA_VERSION=1"])
    with pytest.raises(ValueError, match="Unknown fault 'melt'"):
        doctor.fault_env("melt")
    with pytest.raises(ValueError, match="Unknown scenario"):
        doctor.simulate("melt")


@pytest.fixture(scope="module")
def cpu_probe():
    return doctor.probe()


def test_probe_sees_the_real_library(cpu_probe):
    assert cpu_probe["bnb"] and cpu_probe["returncode"] == 0
    assert cpu_probe["lib_class"] in ("BNBNativeLibrary", "CudaBNBNativeLibrary")
    assert Path(cpu_probe["lib_path"]).name.startswith("libbitsandbytes_")


def test_diagnose_cpu_machine_has_no_errors(cpu_probe):
    if cpu_probe.get("cuda_available"):
        pytest.skip("a GPU machine: see test_doctor_on_gpu")
    report = doctor.diagnose(probe_result=cpu_probe)
    assert report.mode == "CPU mode" and report.ok, report.text()
    names = [f.check for f in report.findings]
    for check in ("operating system", "glibc", "Python", "torch", "CUDA available", "NVIDIA driver", "bitsandbytes",
                  "BNB_CUDA_VERSION", "CUDA runtime libraries", "libstdc++ ABI"):
        assert check in names
    assert "libbitsandbytes_cpu" in report.finding("bitsandbytes").detail
    html = report._repr_html_()
    assert "<table>" in html and "CPU mode" in html
    assert json.loads(report.to_json())["ok"] is True
    with pytest.raises(KeyError, match="No finding named"):
        report.finding("nope")


@pytest.mark.slow
def test_doctor_reports_invalid_override_in_a_subprocess():
    run = doctor.break_and_diagnose("override_invalid")
    f = run.report.finding("BNB_CUDA_VERSION")
    assert f.label == "bnb_cuda_version_override" and "'abc' is invalid" in f.detail
    if not run.report.probe.get("cuda_available"):
        assert run.returncode == 0 and "native library OK" in run.output  # CPU: bitsandbytes ignores it
        assert f.status == "warning"
    else:
        assert run.returncode != 0 and f.status == "error"
    import os

    assert os.environ.get("BNB_CUDA_VERSION") != "abc"  # the caller's environment is untouched


@pytest.mark.slow
def test_cli_doctor_exit_codes(tmp_path):
    env = doctor.child_env()
    cmd = [sys.executable, "-m", "vramlab", "doctor", "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    data = json.loads(proc.stdout)
    assert proc.returncode == (0 if data["ok"] else 1)
    if data["mode"] == "CPU mode":
        assert proc.returncode == 0 and data["errors"] == 0
    log = tmp_path / "bnb.log"
    log.write_text(logs.corpus_entry("article_cxxabi_cuda117")["text"])
    proc = subprocess.run([sys.executable, "-m", "vramlab", "doctor", "--log", str(log)], capture_output=True,
                          text=True, env=env, timeout=120)
    assert proc.returncode == 1 and "libstdcxx_abi" in proc.stdout and "CXXABI_1.3.9" in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "vramlab", "doctor", "--log", str(tmp_path / "none.log")],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2 and proc.stderr.startswith("error: cannot read the log file")
    assert len(proc.stderr.strip().splitlines()) == 1


# --------------------------------------------------------------------------- on a real GPU
@pytest.mark.gpu
def test_doctor_on_gpu_and_one_fault():
    report = doctor.diagnose()
    assert report.mode == "CUDA"
    gpu = report.finding("GPU 0")
    assert "compute capability" in gpu.detail
    loaded = report.finding("bitsandbytes")
    assert loaded.status == "ok" and "libbitsandbytes_cuda" in loaded.detail, report.text()
    # break it: hide the CUDA runtime of another major's binary behind a fake libcudart on LD_LIBRARY_PATH
    run = doctor.break_and_diagnose("hidden_runtime")
    hide = Path(run.env["LD_LIBRARY_PATH"])
    assert hide.name.startswith(doctor.HIDDEN_RUNTIME_PREFIX) and not hide.exists()   # removed when done
    assert run.returncode != 0, run.output
    root = run.report.finding("root cause")
    assert root.status == "error"
    assert root.label in ("bnb_cuda_version_override", "cuda_runtime_dependency_missing"), root.text()
    assert explain_log(run.output).label in ("bnb_cuda_version_override", "cuda_runtime_dependency_missing")
    assert not run.report.ok


def test_binary_archs_read_from_the_installed_binaries():
    shipped = doctor.shipped_binaries()
    # 0.50.2: the CUDA 13 binaries start at sm_75, the CUDA 11.8-12.6 ones at sm_60 (installation guide v0.50.0)
    assert doctor.binary_min_compute_capability(shipped["130"]) == (7, 5)
    assert 60 in doctor.binary_archs(shipped["126"])["elf"]
    assert doctor.binary_min_compute_capability(shipped["126"]) == (6, 0)
    assert doctor.binary_archs(_bnb_dir() / "libbitsandbytes_cpu.so") == {}


def test_a_v100_with_a_cuda13_torch_is_warned(cpu_probe):
    p = dict(cpu_probe, cuda_available=True, torch_cuda="13.0", lib_path=None,
             gpus=[{"index": 0, "name": "Tesla V100-SXM2-16GB", "cc": [7, 0]}])
    gpu = doctor.diagnose(probe_result=p).finding("GPU 0")
    assert gpu.status == "error" and gpu.label == "compute_capability_low"
    assert "libbitsandbytes_cuda130.so" in gpu.detail and "sm_75" in gpu.detail
    p["torch_cuda"] = "12.6"  # the 12.6 binary has sm_70: only LLM.int8() is slow
    assert doctor.diagnose(probe_result=p).finding("GPU 0").status == "warning"


def test_old_logs_are_judged_by_their_release_floor():
    # a Maxwell GPU was supported by 0.4x releases (dropped from PyPI in 0.48.0): not "below the minimum" there
    old = "CUDA SETUP: PyTorch settings found: CUDA_VERSION=117, Highest Compute Capability: 5.2.\n"
    f = explain_log(old)
    assert f.status == "warning" and "below 7.5" in f.detail  # only the slow-int8 warning, not an error
    k80 = logs.corpus_entry("k80_cc37_cuda117")["text"]
    assert explain_log(k80).label == "compute_capability_low" and "0.39.1" in explain_log(k80).detail
    assert "0.48.0" in explain_log(logs.corpus_entry("bnb050_old_gpu_cc52")["text"]).detail


def test_a_fake_runtime_first_on_the_path_really_hides_it(tmp_path):
    """The mechanism of the gpu test's hidden_runtime, shown on any Linux machine: a fake libcudart.so.N
    first on LD_LIBRARY_PATH makes the dynamic loader fail on that binary, and the doctor names it."""
    shipped = doctor.shipped_binaries()
    version = max(shipped, key=int)
    (tmp_path / doctor.cudart_soname(version)).write_text("not a library\n")
    code = f"import ctypes\ntry:\n ctypes.CDLL({str(shipped[version])!r})\nexcept OSError as e: print(e)"
    env = dict(os.environ, LD_LIBRARY_PATH=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True).stdout
    assert f"{tmp_path}/{doctor.cudart_soname(version)}: file too short" in out, out
    f = explain_log(out)
    assert f.label == "cuda_runtime_dependency_missing" and doctor.cudart_soname(version) in f.detail


# --------------------------------------------------------------------------- hardening
_HIDDEN = r'''
import json, sys, tempfile
from pathlib import Path
from vramlab.bnb import doctor
def count():
    return len(list(Path(tempfile.gettempdir()).glob(doctor.HIDDEN_RUNTIME_PREFIX + "*")))
before = count()
with doctor.injected_fault("hidden_runtime") as env:
    inside = sorted(p.name for p in Path(env["LD_LIBRARY_PATH"]).iterdir())
try:
    with doctor.injected_fault("hidden_runtime") as env2:
        raise KeyError("boom")
except KeyError:
    pass
kept = doctor.fault_env("hidden_runtime")["LD_LIBRARY_PATH"]   # removed at interpreter exit
print(json.dumps({"before": before, "after": count(), "inside": inside, "soname": doctor.cudart_soname(
    env["BNB_CUDA_VERSION"]), "gone": not Path(env["LD_LIBRARY_PATH"]).exists() and not Path(env2["LD_LIBRARY_PATH"]).exists(),
    "kept_now": Path(kept).is_dir(), "kept": kept, "torch": "torch" in sys.modules}))
'''


def test_hidden_runtime_leaves_no_folder_and_no_torch_in_the_caller():
    proc = subprocess.run([sys.executable, "-c", _HIDDEN], env=doctor.child_env(), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["inside"] == [got["soname"]] and got["gone"]
    assert got["after"] == got["before"] + 1 and got["kept_now"]   # fault_env's folder lives until exit ...
    assert not Path(got["kept"]).exists()                         # ... and no longer
    assert got["torch"] is False                                   # torch's CUDA version was read in a child


def test_doctor_log_from_stdin_with_undecodable_bytes():
    text = logs.corpus_entry("article_cxxabi_cuda117")["text"].encode() + b"\n\xff\xfe stray bytes \x80\n"
    proc = subprocess.run([sys.executable, "-m", "vramlab", "doctor", "--log", "-"], input=text,
                          capture_output=True, env=doctor.child_env(), timeout=120)
    assert proc.returncode == 1, proc.stderr   # 1: the log shows an error (not a decode failure)
    assert b"libstdcxx_abi" in proc.stdout and b"Traceback" not in proc.stderr


def test_doctor_log_unreadable_stdin_exits_2_with_one_sentence(monkeypatch, capsys):
    class Broken:
        buffer = None

        def read(self):
            raise OSError(5, "Input/output error")

    monkeypatch.setattr(sys, "stdin", Broken())
    assert doctor.doctor_main(log="-") == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot read standard input (Input/output error)") and len(err.strip().splitlines()) == 1
    monkeypatch.setattr(sys, "stdin", None)
    assert doctor.doctor_main(log="-") == 2


# --------------------------------------------------------------------------- issue 18: the binary, its NEEDED libraries, glibc
def test_predicted_binary_is_bitsandbytes_own_same_major_choice():
    got = doctor.predict_binaries(["12.9", "12.0", "12.8", "11.8", "10.2", "13.1"])
    # 0.50.2 cextension.get_cuda_bnb_library_path: highest same-major <= runtime, else lowest same-major above
    assert got["12.9"] == "libbitsandbytes_cuda128.so" and got["12.0"] == "libbitsandbytes_cuda121.so"
    assert got["12.8"] == "libbitsandbytes_cuda128.so" and got["11.8"] == "libbitsandbytes_cuda118.so"
    assert got["13.1"] == "libbitsandbytes_cuda130.so"
    assert got["10.2"] == "libbitsandbytes_cuda102.so" and "102" not in doctor.shipped_binaries()  # never across majors
    assert doctor.predict_binaries(["12.9"], env={"BNB_CUDA_VERSION": "abc"})["12.9"].startswith("error: ")
    with pytest.raises(ValueError, match="not a CUDA version"):
        doctor.predict_binaries(["twelve"])


def test_doctor_checks_the_predicted_binary_not_the_exact_name(cpu_probe):
    # a V100 with PyTorch for CUDA 12.9: no cuda129 is shipped; bitsandbytes picks cuda128 (sm_70 ... sm_120)
    shipped = doctor.shipped_binaries()
    p = dict(cpu_probe, cuda_available=True, torch_cuda="12.9", lib_path=None, predicted_binary=str(shipped["128"]),
             gpus=[{"index": 0, "name": "Tesla P100-PCIE-16GB", "cc": [6, 0]}])
    gpu = doctor.diagnose(probe_result=p).finding("GPU 0")
    assert gpu.status == "error" and "libbitsandbytes_cuda128.so" in gpu.detail and "sm_70" in gpu.detail


def test_needed_libraries_read_from_the_elf_dynamic_section(tmp_path):
    shipped = doctor.shipped_binaries()
    assert doctor.needed_libraries(shipped["118"])[:3] == ["libcudart.so.11.0", "libcublas.so.11", "libcublasLt.so.11"]
    assert "libcudart.so.12" in doctor.needed_libraries(shipped["128"])
    for ver, path in shipped.items():  # the runtime each binary needs is the one cudart_soname names
        assert doctor.cudart_soname(ver) in doctor.needed_libraries(path), ver
    (tmp_path / "x.so").write_bytes(b"\x7fELF" + b"\x00" * 10)
    assert doctor.needed_libraries(tmp_path / "x.so") == [] and doctor.needed_libraries(tmp_path / "none") == []


def test_open_needed_asks_the_loader(tmp_path):
    shipped = doctor.shipped_binaries()
    version = max(shipped, key=int)
    (tmp_path / doctor.cudart_soname(version)).write_text("not a library\n")
    opened = doctor.open_needed(shipped[version], env={"LD_LIBRARY_PATH": str(tmp_path)}, import_torch=False)
    assert doctor.cudart_soname(version) in opened
    assert "file too short" in opened[doctor.cudart_soname(version)] or "invalid ELF" in opened[doctor.cudart_soname(version)]
    assert not any(k.startswith("libc.so") for k in opened)   # the system C runtime is not the question


def test_missing_library_fix_follows_the_soname_major():
    fix = logs.fix_for_missing("libcudart.so.11.0")
    assert fix[0].startswith("pip install nvidia-cuda-runtime-cu11") and "cu12" not in " ".join(fix)
    assert any("LD_LIBRARY_PATH" in x and "nvidia/*/lib" in x for x in fix)  # pip alone is not on the loader path
    assert "'nvidia-cublas==13.*'" in logs.fix_for_missing("libcublas.so.13")[0]
    assert logs.soname_major("libcudart.so.12") == "12" and logs.soname_major("libfoo.so") is None
    text = ("OSError: libcudart.so.11.0: cannot open shared object file: No such file or directory")
    f = explain_log(text)
    assert f.label == "cuda_runtime_dependency_missing" and "cu11" in " ".join(f.fix) and "cu12" not in " ".join(f.fix)


def test_glibc_is_compared_with_what_the_binary_needs(tmp_path):
    lib = doctor.shipped_binaries()["128"]
    assert doctor.glibc_check(lib).status == "ok"
    needy = tmp_path / "libneedy.so"
    needy.write_bytes(b"\x7fELF...GLIBC_2.2.5\x00GLIBC_2.34\x00GLIBCXX_3.4.30\x00")
    f = doctor.glibc_check(needy, have=(2, 31))
    assert f.status == "error" and "GLIBC_2.34" in f.detail and "2.31" in f.detail
    assert not any(x.startswith("conda install") for x in f.fix) and any("libstdcxx-ng does NOT" in x for x in f.fix)
    assert doctor.glibc_check(needy, have=(2, 35)).status == "ok"
    sys_glibc = doctor.system_glibc()
    assert sys_glibc is None or (sys_glibc[0] == 2 and len(sys_glibc) >= 2)


def test_version_mismatch_hint_is_a_0_50_regression():
    # 0.46.0 - 0.49.2 get_native_library raised this (git tags): the hint fired then
    assert doctor.version_mismatch_hint_fires("RuntimeError: Configured CUDA binary not found at /x/libbitsandbytes_cuda102.so")
    assert not doctor.version_mismatch_hint_fires("RuntimeError: No compatible CUDA binary found at /x/libbitsandbytes_cuda102.so")


def test_an_empty_override_was_unset_up_to_0_49_and_fails_now():
    f = doctor.check_override("", cuda_available=True)
    assert f.status == "error" and "0.49" in f.detail and "0.50" in f.detail
    assert f.fix[0].startswith("unset BNB_CUDA_VERSION") and "export BNB_CUDA_VERSION=" in f.fix[0]
    log = ("bitsandbytes library load error: BNB_CUDA_VERSION='': value must be digits only (e.g. '124' for 12.4).\n"
           "RuntimeError: Attempted to use bitsandbytes native library functionality but it's not available.")
    found = explain_log(log)
    assert found.label == "bnb_cuda_version_override" and "empty" in found.detail and "unset" in found.fix[0]


def test_the_manual_override_text_is_0_43_0_old_format():
    # git tag 0.43.0 bitsandbytes/cuda_setup/main.py: the two-line warning, then the old CUDA SETUP failure
    log = ("WARNING: Manual override via BNB_CUDA_VERSION env variable detected!\nBNB_CUDA_VERSION=XXX can be used to "
           "load a bitsandbytes version that is different from the PyTorch CUDA version.\nLoading: "
           "libbitsandbytes_cuda125.so\nCUDA SETUP: Required library version not found: libbitsandbytes_cuda125.so.")
    assert logs.override_value(log) == "125" and logs._is_old_format(log)
    assert explain_log(log).label == "bnb_cuda_version_override"


@pytest.mark.parametrize("system", ["Windows", "Darwin"])
def test_no_linux_advice_on_windows_or_macos(cpu_probe, system):
    """On Windows and macOS the doctor neither checks glibc / libstdc++ nor advises a glibc image, apt-get or
    LD_LIBRARY_PATH; a Windows runtime failure gets the DLL-folder advice."""
    p = dict(cpu_probe, system=system)
    if system == "Windows":   # a GPU machine whose native library failed and no CUDA runtime is found
        p.update(cuda_available=True, gpus=[{"index": 0, "name": "NVIDIA GeForce RTX 4070", "cc": [8, 9],
                                             "total_bytes": 12 << 30}], driver="572.16", torch_cuda="12.4",
                 lib_class="ErrorHandlerMockBNBNativeLibrary", backend="CUDA", lib_path=None,
                 load_error="Could not find module 'C:\\x\\bitsandbytes\\libbitsandbytes_cuda124.dll' "
                            "(or one of its dependencies). Try using the full path with constructor syntax.")
    empty = {"LD_LIBRARY_PATH": "", "CONDA_PREFIX": "", "PATH": "/nonexistent"}
    report = doctor.diagnose(env=empty, probe_result=p)
    text = report.text()
    for linux_only in ("apt-get", "glibc-based image", "libstdcxx-ng", "LD_LIBRARY_PATH=", "ldd "):
        assert linux_only not in text, (linux_only, text)
    assert "not applicable on " + system in report.finding("glibc").detail
    assert "not applicable" in report.finding("libstdc++ ABI").detail
    if system == "Windows":
        assert report.finding("root cause").label == "windows_dll_dependency_missing"
        assert "os.add_dll_directory" in text
    else:
        assert "0.49.0" in report.finding("operating system").detail
