"""The three log readers (serving.triage.diagnose / normalize_log, vram.parse_oom_message, bnb.logs.explain_log)
on real-format text in every layout a pasted log comes in, the look-alikes they must not confuse, and a
property test: random text, random bytes, long lines and coloured logs are read in bounded time and never
raise. Every log here is written for vramlab in the programs' real formats (no user prose is copied)."""

from __future__ import annotations

import functools
import random
import time

import pytest

from vramlab.bnb.logs import LABELS, explain_log, missing_versions
from vramlab.serving.triage import KINDS, diagnose, normalize_log
from vramlab.vram.oom_message import parse_oom_message, parse_size

MiB, GiB = 1 << 20, 1 << 30

KV_MSG = ("ValueError: To serve at least one request with the model's max seq len (32768), (4.00 GiB KV cache is "
          "needed, which is larger than the available KV cache memory (2.51 GiB). Based on the available memory, the "
          "estimated maximum model length is 20528. Try increasing `gpu_memory_utilization` or decreasing "
          "`max_model_len` when initializing the engine.")
OOM_MSG = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has a total capacity of "
           "23.55 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process has 22.51 GiB memory in "
           "use. Of the allocated memory 20.10 GiB is allocated by PyTorch, and 1.90 GiB is reserved by PyTorch but "
           "unallocated.")


def _prefixed(prefix: str, text: str, width: int = 70) -> str:
    """``text`` wrapped at a fixed width (inside words) with ``prefix`` on every line."""
    return "\n".join(prefix + text[i:i + width] for i in range(0, len(text), width))


# --------------------------------------------------------------------------- layouts
LAYOUTS = {
    "vllm_coloured_worker": "\x1b[1;36m(EngineCore pid=4121)\x1b[0;0m ERROR 07-01 04:24:37 [core.py:1195] ",
    "vllm_worker_rank": "(VllmWorker rank=0 pid=4188) ERROR 07-01 04:24:37 [multiproc_executor.py:527] ",
    "ray_worker": "(RayWorkerWrapper pid=5120, ip=10.0.3.7) ERROR 07-01 04:24:37 [worker_base.py:620] ",
    "torchrun_rank": "[rank0]: ",
    "docker_compose": "vllm-1  | ",
    "ci_gutter": "2024-05-01T10:00:00.1234567Z ",
    "exception_group": "    | ",
    "quote": "> ",
    "box_border": "│ ",
    "literal_caret_colour": "^[[0;36m(EngineCore pid=77)^[[0m ",
    "literal_syslog_colour": "#033[2m(EngineCore pid=77)#033[0m ",
    "literal_backslash_x1b": "\\x1b[36m(APIServer pid=9)\\x1b[0m ",
    "literal_backslash_033": "\\033[1;36m(EngineCore pid=9)\\033[0;0m ",
    "literal_backslash_u001b": "\\u001b[36m(EngineCore pid=9)\\u001b[0m ",
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("kind,msg", [("startup_kv_capacity", KV_MSG), ("allocator_oom", OOM_MSG)])
def test_every_layout_is_read(layout, kind, msg):
    d = diagnose(_prefixed(LAYOUTS[layout], msg))
    assert d.kind == kind, (layout, normalize_log(_prefixed(LAYOUTS[layout], msg))[:300])
    if kind == "startup_kv_capacity":
        assert d.details["needed_gib"] == 4.0 and d.details["max_model_len"] == 32768
    else:
        assert d.oom.tried_bytes == int(1.5 * GiB) and d.oom.reserved_unallocated_bytes == round(1.9 * GiB)


def test_wrap_inside_a_word_still_matches():
    d = diagnose("(EngineCore pid=1) ERROR 07-01 04:24:37 [core.py:1] ValueError: To serve at least one request "
                 "with the model's max seq len (8192), (3.00 GiB KV cach\ne is needed, which is larger than the "
                 "available KV cache memory (1.00 GiB).")
    assert d.kind == "startup_kv_capacity" and d.details["needed_gib"] == 3.0
    r = parse_oom_message("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 8.00 GiB of "
                          "which 1.00 GiB is free. Of the allocated memory 5.00 GiB is alloc\nated by PyTorch, and "
                          "3.00 GiB is reserved by PyTorch but unalloc\nated.")
    assert r.allocated_bytes == 5 * GiB and r.reserved_unallocated_bytes == 3 * GiB and r.verdict == "fragmentation"


def test_whole_traceback_on_one_line_and_html_escapes():
    one = ("(EngineCore pid=12) ERROR 07-01 04:24:37 [core.py:1] Traceback (most recent call last): (EngineCore "
           "pid=12) ERROR 07-01 04:24:37 [core.py:1] File &quot;/v/engine.py&quot;, line 3 (EngineCore pid=12) ERROR "
           "07-01 04:24:37 [core.py:1] " + OOM_MSG.replace("model's", "model&#39;s"))
    d = diagnose(one)
    assert d.kind == "allocator_oom" and d.oom.free_bytes == int(1.02 * GiB + 0.5)
    assert "&quot;" not in normalize_log(one) and "pid=12" not in normalize_log(one)
    assert diagnose(KV_MSG.replace("'", "&#39;")).kind == "startup_kv_capacity"


def test_box_borders_on_both_sides():
    box = "\n".join("│ " + OOM_MSG[i:i + 60].ljust(60) + " │" for i in range(0, len(OOM_MSG), 60))
    d = diagnose(box)
    assert d.kind == "allocator_oom" and d.oom.reserved_unallocated_bytes == round(1.9 * GiB)


def test_host_oom_in_a_pytorch_job_has_pytorch_fixes():
    d = diagnose("Out of memory: Killed process 77 (python) total-vm:1kB", context="pytorch")
    assert d.kind == "host_oom" and "DataLoader" in " ".join(f.action for f in d.fixes) and "vLLM" not in d.cause


def test_real_escape_codes_are_stripped():
    flat = normalize_log("\x1b[1;36m(EngineCore pid=8)\x1b[0;0m \x1b[32mINFO\x1b[0m text\x1b[K here")
    assert "\x1b" not in flat and "[0;0m" not in flat and flat.endswith("text here")


# --------------------------------------------------------------------------- triage classes and look-alikes
@pytest.mark.parametrize("text,kind", [
    ("vllm.engine.multiprocessing.MQEngineDeadError: Engine loop is not running. Inspect the stacktrace to find "
     "the original error: RuntimeError('Engine loop has died')", "engine_dead"),
    ("ERROR 03-02 10:11:12 engine.py:160] Engine loop has died", "engine_dead"),
    ("ERROR 07-01 04:24:40 [core_client.py:564] Engine core proc EngineCore_0 died unexpectedly, shutting down "
     "client.", "engine_dead"),
    ("ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.", "host_oom"),
    ("Out of memory: Killed process 991 (python3) total-vm:71234560kB, anon-rss:60123456kB", "host_oom"),
    ("oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),task=python3,pid=991,uid=0", "host_oom"),
    ("RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`", "cuda_error_oom"),
    ("misc/utils.cc:NN NCCL WARN Cuda failure 'out of memory'\nRuntimeError: NCCL error in: "
     "../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled cuda error", "cuda_error_oom"),
    ("OutOfMemoryError('CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 14.75 GiB "
     "of which 3.06 MiB is free.')", "allocator_oom"),
    ("torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 63.98 "
     "GiB of which 1.20 GiB is free.", "allocator_oom"),
    # look-alikes
    ("INFO 07-01 04:24:37 [shm_broadcast.py:466] No available shared memory broadcast block found in 60 second.",
     "unknown"),
    ("ERROR 07-01 04:24:37 [multiproc_executor.py:140] Worker proc VllmWorker-1 died unexpectedly, shutting down "
     "executor.", "unknown"),
    ("RuntimeError: CUDA error: an illegal memory access was encountered", "unknown"),
])
def test_triage_classes_and_lookalikes(text, kind):
    assert diagnose(text).kind == kind


def test_engine_death_notes_the_host_oom_that_caused_it():
    d = diagnose("ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.\n"
                 "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.")
    assert d.kind == "engine_dead" and any("host_oom" in n for n in d.notes)
    assert "host_oom" in KINDS and diagnose("oom-kill:constraint=X").fixes[0].live


# --------------------------------------------------------------------------- OOM message variants
def test_oom_variants():
    r = parse_oom_message("CUDA out of memory. Tried to allocate 64.00 MiB. GPU 0 has a total capacty of 10.00 GiB "
                          "of which 20.00 MiB is free. Process 11 has 6.00 GiB memory in use. Process 12 has 3.90 GiB "
                          "memory in use. Of the allocated memory 5.00 GiB is allocated by PyTorch, with 100.00 MiB "
                          "allocated in private pools (e.g., CUDA Graphs), and 30.00 MiB is reserved by PyTorch but "
                          "unallocated.")
    assert r.format == "current" and r.total_bytes == 10 * GiB and r.allocated_bytes == 5 * GiB
    assert r.reserved_unallocated_bytes == 30 * MiB and r.other_processes == {11: 6 * GiB, 12: round(3.9 * GiB)}
    assert r.verdict == "shortage"
    capped = parse_oom_message("CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity of 40.00 "
                               "GiB of which 30.00 GiB is free. 8.00 GiB allowed; Of the allocated memory 7.50 GiB is "
                               "allocated by PyTorch, and 10.00 MiB is reserved by PyTorch but unallocated.")
    assert capped.allowed_bytes == 8 * GiB and capped.verdict == "cap"
    # 1.x (c10/cuda/CUDACachingAllocator.cpp): "... F free; [X allowed; ]V reserved in total by PyTorch)"
    old = parse_oom_message("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 15.78 GiB total "
                            "capacity; 9.00 GiB already allocated; 1.50 GiB free; 12.00 GiB reserved in total by "
                            "PyTorch)")
    assert old.format == "older" and old.reserved_unallocated_bytes == 3 * GiB and old.verdict == "fragmentation"
    old_cap = parse_oom_message("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 15.78 GiB total "
                                "capacity; 4.00 GiB already allocated; 10.50 GiB free; 4.00 GiB allowed; 4.10 GiB "
                                "reserved in total by PyTorch)")
    assert old_cap.allowed_bytes == 4 * GiB and old_cap.verdict == "cap"
    assert diagnose("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 15.78 GiB total capacity; "
                    "4.00 GiB already allocated; 10.50 GiB free; 4.00 GiB allowed; 4.10 GiB reserved in total by "
                    "PyTorch)").details["verdict"] == "cap"
    hip = parse_oom_message("HIP out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 63.98 GiB "
                            "of which 1.20 GiB is free.")
    assert hip.tried_bytes == 2 * GiB and hip.free_bytes == int(round(1.2 * GiB))


def test_parse_oom_message_reads_wrapped_prefixed_bytes():
    text = _prefixed("(EngineCore pid=3) ERROR 07-01 04:24:37 [core.py:1] ", OOM_MSG, 37)
    r = parse_oom_message(text.encode())
    assert r.tried_bytes == int(1.5 * GiB) and r.allocated_bytes == int(20.1 * GiB + 0.5)


def test_bad_inputs_are_one_sentence():
    for bad in (None, 3, ["2 GiB"]):
        with pytest.raises(ValueError, match="must be"):
            parse_size(bad)
        with pytest.raises(ValueError, match="must be"):
            parse_oom_message(bad)
        with pytest.raises(ValueError, match="must be"):
            diagnose(bad)
    with pytest.raises(ValueError, match="not a size"):
        parse_size("9" * 100_000 + " GiB")


# --------------------------------------------------------------------------- bitsandbytes explain_log items
BNB = {
    # (a) 0.43.1 - 0.45 on supported Windows: a .dll binary missing is binary_missing, not windows_paths
    "dll_on_windows": ("Could not find the bitsandbytes CUDA binary at WindowsPath('C:/venv/Lib/site-packages/"
                       "bitsandbytes/libbitsandbytes_cuda128.dll')\nThe installed version of bitsandbytes was compiled "
                       "without GPU support.", "binary_missing_for_cuda_version"),
    "old_linux_build_on_windows": ("CUDA SETUP: Loading binary C:\\Users\\me\\venv\\lib\\site-packages\\bitsandbytes\\"
                                   "libbitsandbytes_cpu.so...\nargument of type 'WindowsPath' is not iterable",
                                   "windows_paths"),
    # (b) healthy 0.45 output ending in SUCCESS!
    "healthy_success": ("CUDA SETUP: WARNING! CUDA runtime files not found in any environmental path.\n"
                        "Checking that the library is importable and callable...\nSUCCESS!\n", "ok"),
    # (c) 0.46 - 0.49 raise
    "configured_binary": ("RuntimeError: Configured CUDA binary not found at /venv/lib/python3.12/site-packages/"
                          "bitsandbytes/libbitsandbytes_cuda130.so", "binary_missing_for_cuda_version"),
    # (d)
    "cuda_below_11": ("CUDA SETUP: CUDA version lower than 11 are currently not supported for LLM.int8(). You will "
                      "be only to use 8-bit optimizers and quantization routines!!", "binary_missing_for_cuda_version"),
    "setup_failed_cuda_available": ("Could not load bitsandbytes native library: boom\nCUDA Setup failed despite CUDA "
                                    "being available. Please run the following command to get more information:",
                                    "native_library_unavailable"),
    # (e)
    "source_nothing_compiled": ("🚨 Forgot to compile the bitsandbytes library? 🚨\n1. You're not using the package "
                                "but checked-out the source code\n2. You MUST compile from source",
                                "native_library_not_built"),
    "macos_mach_o": ("OSError: dlopen(/venv/lib/python3.11/site-packages/bitsandbytes/libbitsandbytes_cpu.so, 0x0006): "
                     "tried: '/venv/lib/python3.11/site-packages/bitsandbytes/libbitsandbytes_cpu.so' (not a mach-o "
                     "file)", "macos_no_cuda"),
    "triton_ops": ("ModuleNotFoundError: No module named 'triton.ops'", "triton_ops_missing"),
    "no_kernel_image": ("RuntimeError: CUDA error: no kernel image is available for execution on the device",
                        "no_kernel_for_gpu"),
    "named_symbol": ("Error named symbol not found at line 531 in file /src/csrc/ops.cu", "no_kernel_for_gpu"),
    # (f) glibc, not libstdc++
    "glibc": ("OSError: /lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.34' not found (required by /venv/lib/"
              "bitsandbytes/libbitsandbytes_cuda121.so)", "glibc_too_old"),
    # Windows false positives: random text with c:\ and .sol files
    "sol_files": ("copied c:\\contracts\\token.sol and c:\\x\\vault.sol; compile ok", "other"),
}


@pytest.mark.parametrize("name", sorted(BNB))
def test_bnb_items(name):
    text, label = BNB[name]
    f = explain_log(text)
    assert f.label == label, (name, f.label, f.detail)
    assert f.label in LABELS and f.fix


def test_glibc_fix_does_not_offer_libstdcxx_ng():
    f = explain_log(BNB["glibc"][0])
    assert "glibc" in f.cause and not any(c.startswith("conda install") for c in f.fix)
    assert missing_versions(BNB["glibc"][0])[0]["library"] == "/lib/x86_64-linux-gnu/libc.so.6"


def test_new_logs_with_cuda_setup_are_not_old_format():
    # (g) 0.43.1+ also print "CUDA SETUP: WARNING! ..." lines: a 5.2 GPU in a current log is below 0.48's floor
    new = ("CUDA SETUP: WARNING! CUDA runtime files not found in any environmental path.\n"
           "PyTorch settings found: CUDA_VERSION=124, Highest Compute Capability: (5, 2).")
    assert explain_log(new).status == "error" and "0.48.0" in explain_log(new).detail


def test_coloured_and_prefixed_bnb_log():
    text = "\x1b[31m" + _prefixed("2024-05-01T10:00:00.1234567Z ", BNB["configured_binary"][0], 400) + "\x1b[0m"
    assert explain_log(text).label == "binary_missing_for_cuda_version"


# --------------------------------------------------------------------------- property test: never raise, bounded time
READERS = {
    "diagnose": lambda t: diagnose(t).kind in KINDS,
    "normalize_log": lambda t: isinstance(normalize_log(t), str),
    "parse_oom_message": lambda t: parse_oom_message(t).format in ("current", "older", "oldest", "unknown"),
    "explain_log": lambda t: explain_log(t).label in LABELS,
}


def _random_inputs(seed: int) -> list:
    rng = random.Random(seed)
    printable = [chr(c) for c in range(32, 127)] + ["\n", "\t", "\r"]
    words = ["CUDA", "out of memory", "Tried to allocate", "GiB", "(EngineCore pid=1)", "\x1b[1;36m", "^[[0m",
             "libstdc++.so.6", "version `GLIBCXX_3.4.30' not found", "C:\\", ".so", "WindowsPath(", "SUCCESS!",
             "9" * 50, ":" * 30, "| ", "[rank0]: ", "&gt;", "\\x1b[", "libbitsandbytes_cuda", "Manual override via "
             "BNB_CUDA_VERSION", "Engine", "died", "oom-kill", "compute capability", "(", ")"]
    out = []
    for _ in range(40):
        out.append("".join(rng.choices(printable, k=rng.randint(0, 3000))))
        out.append(bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 2000))).decode("utf-8", "replace"))
        out.append(bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 200))))
        out.append(" ".join(rng.choices(words, k=rng.randint(1, 200))))
        out.append("".join(rng.choices(words, k=rng.randint(1, 200))))
    return out


@pytest.mark.parametrize("reader", sorted(READERS))
def test_readers_never_raise_on_random_text(reader):
    t0 = time.process_time()
    for text in _random_inputs(seed=18):
        assert READERS[reader](text)
    assert time.process_time() - t0 < 20


@functools.lru_cache(maxsize=1)
def _adversarial() -> dict[str, str]:
    rng = random.Random(7)
    block = "".join(rng.choices([chr(c) for c in range(32, 127)] + ["\n"], k=1 << 20))
    return {
        "50MB_one_line": "a" * 50_000_000,
        "100k_digits": "9" * 100_000,
        "50MB_random_printable": block * 50,
        "2MB_token_for_bnb": "x" * 2_000_000 + "libstdc++.so.6",
        "2MB_colons": ":" * 2_000_000,
        "2MB_digits_then_unit": "1" * 2_000_000 + " GiB",
        "lib_versions": "lib" * 600_000 + "c.so.6: version `GLIBC_2.34' not found",
        "bnb_binary_tail": "libbitsandbytes_cuda" + "1" * 1_000_000 + "a" * 900_000,
        "overrides": "Manual override via BNB_CUDA_VERSION " * 50_000,
        "coloured_50MB": ("\x1b[1;36m(EngineCore pid=1)\x1b[0;0m INFO 07-01 04:24:37 [core.py:1] line\n") * 700_000,
        "escape_run": "\x1b[" + "1;" * 1_000_000,
        "spaces_then_digits": (" " * 1000 + "7" * 1000) * 1000,
        "open_parens_pid": "(EngineCore " * 200_000,
    }


_ADVERSARIAL_NAMES = ["50MB_one_line", "100k_digits", "50MB_random_printable", "2MB_token_for_bnb", "2MB_colons",
                      "2MB_digits_then_unit", "lib_versions", "bnb_binary_tail", "overrides", "coloured_50MB",
                      "escape_run", "spaces_then_digits", "open_parens_pid"]


@pytest.mark.parametrize("name", _ADVERSARIAL_NAMES)
def test_long_and_adversarial_inputs_are_read_in_bounded_time(name):
    text = _adversarial()[name]
    for reader, check in READERS.items():
        t0 = time.process_time()
        assert check(text), reader
        took = time.process_time() - t0
        assert took < 3.0, f"{reader} took {took:.2f} s on {name}"


def test_escape_stripping_leaves_look_alike_text_alone():
    from vramlab.logtext import strip_escapes

    assert strip_escapes("^[[0;36mX^[[0m #033[2mY\\x1b[36mZ\\033[1mA\\u001b[0mB\x1b[1;36mC") == "X YZAB" + "C"
    assert strip_escapes(r"C:\env ^[a-z] #0333 \e") == r"C:\env ^[a-z] #0333 \e"


def test_raw_bytes_are_read():
    assert diagnose(OOM_MSG.encode() + b"\xff\xfe").kind == "allocator_oom"
    assert explain_log(b"\xff" + BNB["triton_ops"][0].encode()).label == "triton_ops_missing"
    assert "CUDA out of memory" in normalize_log(OOM_MSG.encode())


# --------------------------------------------------------------------------- bitsandbytes: issue 28's misreadings
# Each log below is written for vramlab in the real format of the release named (the format strings are those of
# bitsandbytes' cextension.py / cuda_setup/main.py / diagnostics/*.py at the git tags named, and of the loaders).
_DIAG_045_HEAD = ("=================== bitsandbytes v0.45.5 ===================\nPlatform: Linux-6.8.0-x86_64-with-glibc2.39\n"
                  "PyTorch: {torch}\n  CUDA: {cuda}\n")
_DIAG_045_TAIL = ("CUDA SETUP: WARNING! CUDA runtime files not found in any environmental path.\n"
                  "================================ DEBUG INFO END ================================\n"
                  "Checking that the library is importable and CUDA is callable...\n")


def test_healthy_043_to_045_diagnostics_ending_in_installation_successful_is_ok():
    # 0.43.1 - 0.45.5 diagnostics/main.py print "SUCCESS!" then "Installation was successful!"
    text = (_DIAG_045_HEAD.format(torch="2.5.1+cu124", cuda="12.4")
            + "PyTorch settings found: CUDA_VERSION=124, Highest Compute Capability: (8, 9).\n" + _DIAG_045_TAIL
            + "SUCCESS!\nInstallation was successful!\n")
    found = explain_log(text)
    assert found.label == "ok" and found.status == "ok", found.text()


def test_diagnostics_missing_binary_beats_the_runtime_warning():
    # 0.45.5 diagnostics/cuda.py print_cuda_diagnostics: "Library not found: {binary_path}. Maybe you need to
    # compile it from source?" (the runtime warning is printed on healthy machines too)
    text = (_DIAG_045_HEAD.format(torch="2.7.1+cu128", cuda="12.8")
            + "PyTorch settings found: CUDA_VERSION=128, Highest Compute Capability: (8, 9).\n"
            "Library not found: /usr/local/lib/python3.11/dist-packages/bitsandbytes/libbitsandbytes_cuda128.so. "
            "Maybe you need to compile it from source?\nIf you compiled from source, try again with "
            "`make CUDA_VERSION=DETECTED_CUDA_VERSION`,\nfor example, `make CUDA_VERSION=113`.\n" + _DIAG_045_TAIL
            + "Traceback (most recent call last):\nRuntimeError: the native library is the CPU one\n")
    found = explain_log(text)
    assert found.label == "binary_missing_for_cuda_version", found.text()
    assert "libbitsandbytes_cuda128.so" in found.detail


def test_diagnostics_cpu_only_torch_beats_the_runtime_warning():
    text = (_DIAG_045_HEAD.format(torch="2.5.1+cpu", cuda="None") + "CUDA specs: None\n"
            "Torch says CUDA is not available. Possible reasons:\n1. CUDA driver not installed\n2. CUDA not installed\n"
            "3. You have multiple conflicting CUDA libraries\n" + _DIAG_045_TAIL
            + "Traceback (most recent call last):\nAssertionError: Torch not compiled with CUDA enabled\n")
    found = explain_log(text)
    assert found.label == "no_gpu_cpu_library", found.text()


def test_diagnostics_runtime_warning_alone_is_still_read_when_nothing_else_explains():
    text = (_DIAG_045_HEAD.format(torch="2.5.1+cu124", cuda="12.4")
            + "PyTorch settings found: CUDA_VERSION=124, Highest Compute Capability: (8, 9).\n" + _DIAG_045_TAIL
            + "Traceback (most recent call last):\nRuntimeError: CUDA error\n")
    assert explain_log(text).label == "cudart_not_found"


def test_unbuilt_checkout_and_source_egg_have_no_binary_for_any_cuda():
    from vramlab.bnb.logs import corpus_entry

    for entry_id in ("bnb045_unbuilt_checkout", "old_egg_source_build"):
        found = explain_log(corpus_entry(entry_id)["text"])
        assert found.label == "native_library_not_built", (entry_id, found.text())
        assert "any CUDA" in found.cause and "for your CUDA" not in found.cause
    # 0.46+ cextension.py: "Forgot to compile the bitsandbytes library?"; 0.45 diagnostics' "Couldn't load ..."
    assert explain_log("RuntimeError: ... Forgot to compile the bitsandbytes library?").label == "native_library_not_built"
    assert explain_log("Couldn't load the bitsandbytes library, likely due to missing binaries.\n"
                       "For source installations, compile the binaries with `cmake -DCOMPUTE_BACKEND=cuda -S .`."
                       ).label == "native_library_not_built"
    # a wheel that lacks only this CUDA's binary is still the release's gap, not an unbuilt tree
    wheel = ("Could not find the bitsandbytes CUDA binary at PosixPath('/usr/lib/python3/site-packages/bitsandbytes/"
             "libbitsandbytes_cuda128.so')\nThe installed version of bitsandbytes was compiled without GPU support.")
    assert explain_log(wheel).label == "binary_missing_for_cuda_version"


def test_macos_is_not_a_missing_binary_for_your_cuda():
    from vramlab.bnb.logs import corpus_entry

    found = explain_log(corpus_entry("old_macos_mach_o")["text"])
    assert found.label == "macos_no_cuda" and "for your CUDA" not in found.cause, found.text()
    short = ("/Users/lee/venv/lib/python3.11/site-packages/bitsandbytes/cextension.py:34: UserWarning: The installed "
             "version of bitsandbytes was compiled without GPU support. 8-bit optimizers, 8-bit multiplication, and "
             "GPU quantization are unavailable.\n'NoneType' object has no attribute 'cadam32bit_grad_fp32'\n")
    assert explain_log(short).label == "macos_no_cuda"
    # a macOS log whose self-test passed (0.49+ wheels) is fine
    assert explain_log("Platform: macOS-14.5-arm64-arm-64bit\nChecking that the library is importable...\nSUCCESS!\n"
                       ).label == "ok"


def test_a_glibc_failure_has_its_own_label_and_no_libstdcxx_fix():
    from vramlab.bnb.logs import corpus_entry

    found = explain_log(corpus_entry("bnb044_glibc_old_system")["text"])
    assert found.label == "glibc_too_old", found.text()
    assert not any("conda install" in f for f in found.fix) and any("ldd --version" in f for f in found.fix)
    both = ("/lib64/libc.so.6: version `GLIBC_2.34' not found (required by /x/libbitsandbytes_cuda121.so)\n"
            "/lib64/libstdc++.so.6: version `GLIBCXX_3.4.29' not found (required by /x/libbitsandbytes_cuda121.so)\n")
    assert explain_log(both).label == "libstdcxx_abi"


def test_windows_dll_dependency_failure_names_the_dll():
    from vramlab.bnb.logs import corpus_entry

    found = explain_log(corpus_entry("bnb050_windows_dll_dependency")["text"])
    assert found.label == "windows_dll_dependency_missing", found.text()
    assert "libbitsandbytes_cuda124.dll" in found.detail and "CUDA 12.x" in found.cause
    assert not any("LD_LIBRARY_PATH" in f or "apt-get" in f for f in found.fix)
    named = ("bitsandbytes library load error: Could not find module 'C:\\b\\libbitsandbytes_cuda121.dll' (or one of "
             "its dependencies).\nOSError: [WinError 126] The specified module could not be found. Error loading "
             "\"C:\\b\\cublasLt64_12.dll\" or one of its dependencies.")
    found = explain_log(named)
    assert found.label == "windows_dll_dependency_missing" and "cublasLt64_12.dll" in found.detail, found.text()


@pytest.mark.parametrize("name", ["huge_line", "digit_run"])
def test_new_bnb_rules_stay_linear(name):
    from vramlab.bnb import logs

    big = ("C:\\Users\\" + "a" * 50_000_000) if name == "huge_line" else ("libbitsandbytes_cuda" + "9" * 50_000_000)
    for rule in (logs._rule_macos, logs._rule_not_built, logs._rule_windows_dll, logs._rule_cudart_diagnostics):
        t0 = time.process_time()
        rule(big)
        assert time.process_time() - t0 < 5.0, rule.__name__
    t0 = time.process_time()
    assert explain_log(big).label in LABELS
    assert time.process_time() - t0 < 10.0


def test_allowed_equal_to_the_total_capacity_is_no_cap():
    # set_per_process_memory_fraction(1.0) still prints "<total> allowed; " (CUDACachingAllocator.cpp set_fraction)
    full = parse_oom_message("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
                             "capacity of 14.74 GiB of which 1.12 GiB is free. 14.74 GiB allowed; Of the allocated "
                             "memory 12.90 GiB is allocated by PyTorch, and 0.50 GiB is reserved by PyTorch but "
                             "unallocated.")
    assert full.allowed_bytes == full.total_bytes and full.verdict == "shortage"
