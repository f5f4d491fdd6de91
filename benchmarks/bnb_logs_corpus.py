"""Write src/vramlab/results/bnb_logs.json: the labelled corpus of bitsandbytes setup logs.

    python benchmarks/bnb_logs_corpus.py

Quoted logs (old ``CUDA SETUP:`` format, 0.44, current) are stored with their source; the
``bnb050_*`` entries are rendered now by the installed bitsandbytes' own functions
(``vramlab.bnb.doctor.simulate``) and ``bnb050_cpu_ok`` is the real ``python -m bitsandbytes``
output of this CPU machine. tests/test_bnb_doctor.py re-renders them and compares.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

ARTICLE_TITLE = ("Troubleshooting bitsandbytes: Resolving \u2018RuntimeError: CUDA Setup failed despite GPU being "
                 "available\u2019")
BNB_REPO = "https://github.com/bitsandbytes-foundation/bitsandbytes"
# Provenance fields of each quoted entry (tests/test_bnb_doctor.py holds them):
#   "url": where the text can be read (a link), or
#   "article": the article's title; the text is a verbatim substring of that article (the page's own
#     "[email protected]" e-mail obfuscation included; no public URL of the article was found), or
#   "assembled": true + "sources": [...] when the text was put together from several places;
#   "abridged": true when lines of a quoted log were left out.
ARTICLE = ("article 'Troubleshooting bitsandbytes: Resolving \u2018RuntimeError: CUDA Setup failed despite GPU being "
           "available\u2019' (LLM Inference & Serving Guides), quoting a user's python -m bitsandbytes output")
SETUP_FAILED_041 = """Traceback (most recent call last):
  File "/usr/local/lib/python3.10/site-packages/bitsandbytes/cextension.py", line 20, in <module>
    raise RuntimeError('''
RuntimeError:
        CUDA Setup failed despite GPU being available. Please run the following command to get more information:

        python -m bitsandbytes

        Inspect the output of the command and see if you can locate CUDA libraries. You might need to add them
        to your LD_LIBRARY_PATH. If you suspect a bug, please take the information from python -m bitsandbytes
        and open an issue at: https://github.com/TimDettmers/bitsandbytes/issues"""

QUOTED = [
    {"id": "article_cxxabi_cuda121", "format": "old", "label": "libstdcxx_abi", "source": ARTICLE,
     "article": ARTICLE_TITLE,
     "text": """CUDA_SETUP: WARNING! libcudart.so not found in any environmental path. Searching in backup paths...
CUDA SETUP: CUDA runtime path found: /usr/local/cuda/lib64/libcudart.so
CUDA SETUP: Highest compute capability among GPUs detected: 7.5
CUDA SETUP: Detected CUDA version 121
CUDA SETUP: Loading binary /home/yed_dev/.local/lib/python3.10/site-packages/bitsandbytes/libbitsandbytes_cuda121.so...
/lib64/libstdc++.so.6: version `CXXABI_1.3.9' not found (required by /home/yed_dev/.local/lib/python3.10/site-packages/bitsandbytes/libbitsandbytes_cuda121.so)
CUDA SETUP: Something unexpected happened. Please compile from source:
git clone [email protected]:TimDettmers/bitsandbytes.git
cd bitsandbytes
CUDA_VERSION=121
python setup.py install"""},
    {"id": "article_cxxabi_cuda117", "format": "old", "label": "libstdcxx_abi", "source": ARTICLE,
     "article": ARTICLE_TITLE,
     "text": """CUDA SETUP: CUDA runtime path found: /usr/local/cuda/lib64/libcudart.so
CUDA SETUP: Highest compute capability among GPUs detected: 7.5
CUDA SETUP: Detected CUDA version 117
CUDA SETUP: Loading binary /usr/local/lib/python3.9/site-packages/bitsandbytes/libbitsandbytes_cuda117.so...
/lib64/libstdc++.so.6: version `CXXABI_1.3.9' not found (required by /usr/local/lib/python3.9/site-packages/bitsandbytes/libbitsandbytes_cuda117.so)"""},
    {"id": "article_windows", "format": "old", "label": "windows_paths", "source": ARTICLE.replace(
        "a user's python -m bitsandbytes output", "Windows users' logs (CUDA 11.8, PyTorch 2.0.1)"),
     "assembled": True, "sources": [ARTICLE_TITLE + " (its summary of Windows users' logs, not one log)",
                                    BNB_REPO + " bitsandbytes/cuda_setup/main.py, releases 0.38-0.41 (the messages)"],
     "text": """bin C:\\...\\bitsandbytes\\libbitsandbytes_cpu.so
UserWarning: C:\\... did not contain ['libcudart.so', 'libcudart.so.11.0', 'libcudart.so.12.0'] as expected! Searching further paths...
CUDA_SETUP: WARNING! libcudart.so not found in any environmental path. Searching in backup paths...
UserWarning: WARNING: The following directories listed in your path were found to be non-existent: {WindowsPath('/usr/local/cuda/lib64')}
CUDA SETUP: WARNING! libcuda.so not found! Do you have a CUDA driver installed?
UserWarning: WARNING: No GPU detected! Check your CUDA paths. Proceeding to load CPU-only library...
CUDA SETUP: Loading binary ...\\libbitsandbytes_cpu.so...
argument of type 'WindowsPath' is not iterable
CUDA SETUP: Problem: The main issue seems to be that the main CUDA library was not detected.
CUDA SETUP: Solution 1): Your paths are probably not up-to-date. You can update them via: sudo ldconfig."""},
    {"id": "issue1518_nocublaslt_cuda124", "format": "old", "label": "binary_missing_for_cuda_version",
     "source": "github.com/bitsandbytes-foundation/bitsandbytes/issues/1518 (an old release on a V100 with "
               "CUDA 12.4; the maintainers' answer: upgrade bitsandbytes), abridged",
     "url": BNB_REPO + "/issues/1518", "abridged": True,
     "text": """/home/user/miniconda3/envs/env/lib/python3.10/site-packages/bitsandbytes/cuda_setup/main.py:167: UserWarning: /trinity/shared/apps/tr17.10/x86_64/cuda-12.4/lib64 did not contain ['libcudart.so', 'libcudart.so.11.0', 'libcudart.so.12.0'] as expected! Searching further paths...
DEBUG: Possible options found for libcudart.so: {PosixPath('/trinity/shared/apps/tr17.10/x86_64/cuda-12.4/lib64/libcudart.so')}
CUDA SETUP: PyTorch settings found: CUDA_VERSION=124, Highest Compute Capability: 7.0.
CUDA SETUP: To manually override the PyTorch CUDA version please see:https://github.com/TimDettmers/bitsandbytes/blob/main/how_to_use_nonpytorch_cuda.md
UserWarning: WARNING: Compute capability < 7.5 detected! Only slow 8-bit matmul is supported for your GPU!                     If you run into issues with 8-bit matmul, you can try 4-bit quantization: https://huggingface.co/blog/4bit-transformers-bitsandbytes
CUDA SETUP: Required library version not found: libbitsandbytes_cuda124_nocublaslt.so. Maybe you need to compile it from source?
CUDA SETUP: Defaulting to libbitsandbytes_cpu.so...

================================================ERROR=====================================
CUDA SETUP: CUDA detection failed! Possible reasons:
1. You need to manually override the PyTorch CUDA version. Please see: "https://github.com/TimDettmers/bitsandbytes/blob/main/how_to_use_nonpytorch_cuda.md
2. CUDA driver not installed
3. CUDA not installed
4. You have multiple conflicting CUDA libraries
5. Required library not pre-compiled for this bitsandbytes release!
================================================================================

CUDA SETUP: Something unexpected happened. Please compile from source:
git clone https://github.com/TimDettmers/bitsandbytes.git
cd bitsandbytes
CUDA_VERSION=124_nomatmul
python setup.py install
CUDA SETUP: Setup Failed!
""" + SETUP_FAILED_041},
    {"id": "k80_cc37_cuda117", "format": "old", "label": "compute_capability_low",
     "source": "bitsandbytes 0.41.2 output on Tesla K80 GPUs, quoted in the bartleby project's Docker setup notes "
               "on GitHub, abridged (interleaved warnings left out)",
     "url": "https://github.com/gperdrizet/bartleby/blob/main/docker_setup_notes.md", "abridged": True,
     "text": """CUDA_SETUP: WARNING! libcudart.so not found in any environmental path. Searching in backup paths...
DEBUG: Possible options found for libcudart.so: {PosixPath('/usr/local/cuda/lib64/libcudart.so.11.0')}
CUDA SETUP: PyTorch settings found: CUDA_VERSION=117, Highest Compute Capability: 3.7.
CUDA SETUP: To manually override the PyTorch CUDA version please see:https://github.com/TimDettmers/bitsandbytes/blob/main/how_to_use_nonpytorch_cuda.md
CUDA SETUP: Required library version not found: libbitsandbytes_cuda117_nocublaslt.so. Maybe you need to compile it from source?
CUDA SETUP: Defaulting to libbitsandbytes_cpu.so...
UserWarning: WARNING: Compute capability < 7.5 detected! Only slow 8-bit matmul is supported for your GPU!
CUDA SETUP: Something unexpected happened. Please compile from source:
git clone https://github.com/TimDettmers/bitsandbytes.git
cd bitsandbytes
CUDA_VERSION=117 make cuda11x_nomatmul
python setup.py install
CUDA SETUP: Setup Failed!"""},
    {"id": "old_cudart_not_detected", "format": "old", "label": "cudart_not_found",
     "source": "messages of bitsandbytes/cuda_setup/main.py (evaluate/generate_instructions, releases 0.38-0.41) "
               "and cextension.py, in the order they print when no libcudart.so exists",
     "assembled": True, "sources": [BNB_REPO + " bitsandbytes/cuda_setup/main.py (0.38-0.41)",
                                    BNB_REPO + " bitsandbytes/cextension.py (0.41)"],
     "text": """CUDA_SETUP: WARNING! libcudart.so not found in any environmental path. Searching /usr/local/cuda/lib64...
CUDA SETUP: Problem: The main issue seems to be that the main CUDA runtime library was not detected.
CUDA SETUP: Solution 1: To solve the issue the libcudart.so location needs to be added to the LD_LIBRARY_PATH variable
CUDA SETUP: Solution 1a): Find the cuda runtime library via: find / -name libcudart.so 2>/dev/null
CUDA SETUP: Solution 1b): Once the library is found add it to the LD_LIBRARY_PATH: export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:FOUND_PATH_FROM_1a
CUDA SETUP: Solution 2: If no library was found in step 1a) you need to install CUDA.
""" + SETUP_FAILED_041},
    {"id": "old_libcusparse_missing", "format": "old", "label": "cuda_runtime_dependency_missing",
     "source": "assembled: the loader's line for a missing libcusparse.so.11 as public READMEs quote it (fixed "
               "there by installing the CUDA 11.8 toolkit), followed by bitsandbytes 0.41's setup-failed error",
     "assembled": True,
     "sources": ["https://github.com/liyazi712/MultiGeoDTA/blob/main/README.md (the libcusparse.so.11 line and "
                 "its fix: conda install -c nvidia cudatoolkit=11.8)",
                 BNB_REPO + " bitsandbytes/cextension.py (0.41): the RuntimeError text"],
     "text": "libcusparse.so.11: cannot open shared object file: No such file or directory\n" + SETUP_FAILED_041},
    {"id": "old_setup_failed_only", "format": "old", "label": "native_library_unavailable",
     "source": "bitsandbytes 0.41 cextension.py RuntimeError text alone (as pasted in many issue titles)",
     "url": BNB_REPO + "/blob/0.41.0/bitsandbytes/cextension.py",
     "text": SETUP_FAILED_041},
    {"id": "old_no_driver_cpu_library", "format": "old", "label": "no_gpu_cpu_library",
     "source": "messages of bitsandbytes/cuda_setup/main.py (get_cuda_lib_handle, run_cuda_setup) and "
               "cextension.py, releases 0.38-0.41, on a machine without an NVIDIA driver",
     "assembled": True, "sources": [BNB_REPO + " bitsandbytes/cuda_setup/main.py (0.38-0.41)",
                                    BNB_REPO + " bitsandbytes/cextension.py (0.41)"],
     "text": """CUDA SETUP: WARNING! libcuda.so not found! Do you have a CUDA driver installed? If you are on a cluster, make sure you are on a CUDA machine!
CUDA SETUP: Loading binary /usr/lib/python3/dist-packages/bitsandbytes/libbitsandbytes_cpu.so...
UserWarning: The installed version of bitsandbytes was compiled without GPU support. 8-bit optimizers, 8-bit multiplication, and GPU quantization are unavailable."""},
    {"id": "old_override_cuda125", "format": "old", "label": "bnb_cuda_version_override",
     "source": "bitsandbytes/cuda_setup/main.py manual_override() (0.41) warning, followed by its missing-binary "
               "lines; the override names a binary the release does not ship",
     "assembled": True, "sources": [BNB_REPO + " bitsandbytes/cuda_setup/main.py (0.41): manual_override() and "
                                    "the missing-binary lines"],
     "text": """================================================================================
WARNING: Manual override via BNB_CUDA_VERSION env variable detected!
BNB_CUDA_VERSION=XXX can be used to load a bitsandbytes version that is different from the PyTorch CUDA version.
If this was unintended set the BNB_CUDA_VERSION variable to an empty string: export BNB_CUDA_VERSION=
If you use the manual override make sure the right libcudart.so is in your LD_LIBRARY_PATH
For example by adding the following to your .bashrc: export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:<path_to_cuda_dir/lib64
Loading CUDA version: BNB_CUDA_VERSION=125
================================================================================
CUDA SETUP: Required library version not found: libbitsandbytes_cuda125.so. Maybe you need to compile it from source?
CUDA SETUP: Defaulting to libbitsandbytes_cpu.so...
CUDA SETUP: Setup Failed!"""},
    {"id": "bnb044_cuda128_missing", "format": "0.43-0.44", "label": "binary_missing_for_cuda_version",
     "source": "assembled: bitsandbytes 0.44.1 with torch 2.7.1+cu128 (0.44 shipped no CUDA 12.8 binary), as "
               "public projects' notes on GitHub report it; the two lines are cextension.py's warnings of 0.43/0.44, "
               "the path a placeholder",
     "assembled": True,
     "sources": [BNB_REPO + "/blob/0.44.1/bitsandbytes/cextension.py (the two warnings)",
                 "public project notes quoting these lines for bitsandbytes 0.44.1 + torch 2.7.1+cu128 (found by code "
                 "search; their repository was not identified)"],
     "text": """Could not find the bitsandbytes CUDA binary at PosixPath('/venv/lib/python3.11/site-packages/bitsandbytes/libbitsandbytes_cuda128.so')
The installed version of bitsandbytes was compiled without GPU support. 8-bit optimizers, 8-bit multiplication, and GPU quantization are unavailable."""},
    {"id": "triton_ops_bnb045", "format": "current (0.45.0)", "label": "triton_ops_missing",
     "source": "assembled: the import error bitsandbytes 0.43 - 0.45.0 raise with Triton 3.2+, written for vramlab "
               "in the real format (paths are placeholders)",
     "assembled": True, "sources": [BNB_REPO + " bitsandbytes/triton/int8_matmul_mixed_dequantize.py (0.43 - 0.45.0 "
                                    "import triton.ops.matmul_perf_model)",
                                    "https://github.com/triton-lang/triton (3.2.0 removed the triton.ops package)"],
     "text": """Traceback (most recent call last):
  File "/opt/venv/lib/python3.11/site-packages/bitsandbytes/triton/int8_matmul_mixed_dequantize.py", line 12, in <module>
    from triton.ops.matmul_perf_model import early_config_prune, estimate_matmul_time
ModuleNotFoundError: No module named 'triton.ops'"""},
    {"id": "no_kernel_image_sm120", "format": "current (0.44)", "label": "no_kernel_for_gpu",
     "source": "assembled: CUDA's launch error for a GPU the wheel has no kernels for, as torch reports it, written "
               "for vramlab in the real format",
     "assembled": True, "sources": ["CUDA runtime error string cudaErrorNoKernelImageForDevice: 'no kernel image is "
                                    "available for execution on the device'",
                                    BNB_REPO + " csrc/ops.cu (older releases: 'Error named symbol not found at line N "
                                    "in file .../csrc/ops.cu')"],
     "text": """  File "/opt/venv/lib/python3.12/site-packages/bitsandbytes/functional.py", line 1305, in quantize_4bit
    lib.cquantize_blockwise_bf16_nf4(*args)
RuntimeError: CUDA error: no kernel image is available for execution on the device
CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect."""},
    {"id": "healthy_bnb045_success", "format": "current (0.45.5)", "label": "ok",
     "source": "assembled: python -m bitsandbytes of 0.43.1 - 0.45.5 on a working GPU machine, written for vramlab in "
               "the real format; the runtime warning is printed even when the library loads",
     "assembled": True, "sources": [BNB_REPO + " bitsandbytes/diagnostics/main.py and diagnostics/cuda.py at tags "
                                    "0.43.1 and 0.45.5: print_cuda_runtime_diagnostics, then 'SUCCESS!' and "
                                    "'Installation was successful!'"],
     "text": """=================== bitsandbytes v0.45.5 ===================
Platform: Linux-5.15.0-119-generic-x86_64-with-glibc2.35
  libc: glibc-2.35
Python: 3.11.9
PyTorch: 2.6.0+cu124
  CUDA: 12.4
  HIP: N/A
  XPU: N/A
torch.cuda.is_available(): True
CUDA specs: CUDASpecs(highest_compute_capability=(8, 9), cuda_version_string='124', cuda_version_tuple=(12, 4))
PyTorch settings found: CUDA_VERSION=124, Highest Compute Capability: (8, 9).
CUDA SETUP: WARNING! CUDA runtime files not found in any environmental path.
Checking that the library is importable and CUDA is callable...
SUCCESS!
Installation was successful!"""},
    {"id": "unknown_segfault", "format": "none", "label": "other",
     "source": "not a bitsandbytes message: a crash with no setup lines (the doctor must answer 'other')",
     "assembled": True, "sources": ["the shell's generic crash line (no single source)"],
     "text": "Segmentation fault (core dumped)"},
]


# Issue 28's misreadings, each in the real format of the release named (written for vramlab; paths are placeholders).
QUOTED += [
    {"id": "bnb045_unbuilt_checkout", "format": "current (0.45.5)", "label": "native_library_not_built",
     "source": "assembled: bitsandbytes 0.45.5 imported from a git checkout where cmake/make never ran, written for "
               "vramlab in the real format (paths are placeholders)",
     "assembled": True, "sources": [BNB_REPO + " bitsandbytes/cextension.py at tag 0.45.5: get_native_library falls "
                                    "back to libbitsandbytes_cpu when the CUDA binary is absent ('Could not find the "
                                    "bitsandbytes CUDA binary at %r'), then 'Could not load bitsandbytes native "
                                    "library: {e}' and 'CUDA Setup failed despite CUDA being available'"],
     "text": """Could not find the bitsandbytes CUDA binary at PosixPath('/home/lee/code/bnb/bitsandbytes/libbitsandbytes_cuda124.so')
Could not load bitsandbytes native library: /home/lee/code/bnb/bitsandbytes/libbitsandbytes_cpu.so: cannot open shared object file: No such file or directory
Traceback (most recent call last):
  File "/home/lee/code/bnb/bitsandbytes/cextension.py", line 85, in <module>
    lib = get_native_library()
  File "/home/lee/code/bnb/bitsandbytes/cextension.py", line 72, in get_native_library
    dll = ct.cdll.LoadLibrary(str(binary_path))
OSError: /home/lee/code/bnb/bitsandbytes/libbitsandbytes_cpu.so: cannot open shared object file: No such file or directory

CUDA Setup failed despite CUDA being available. Please run the following command to get more information:

python -m bitsandbytes
"""},
    {"id": "old_egg_source_build", "format": "old (0.41)", "label": "native_library_not_built",
     "source": "assembled: bitsandbytes 0.41.1 installed with `python setup.py install` (an .egg) after a CPU-only "
               "make, on a CUDA 11.8 machine, written for vramlab in the real format",
     "assembled": True, "sources": [BNB_REPO + " bitsandbytes/cuda_setup/main.py at tag 0.41.1: 'Required library "
                                    "version not found: {binary_name}. Maybe you need to compile it from source?', "
                                    "'Defaulting to libbitsandbytes_cpu.so...', 'Loading binary {binary_path}...'"],
     "text": """===================================BUG REPORT===================================
CUDA SETUP: CUDA runtime path found: /usr/local/cuda/lib64/libcudart.so.11.0
CUDA SETUP: Highest compute capability among GPUs detected: 8.6
CUDA SETUP: Detected CUDA version 118
CUDA SETUP: Required library version not found: libbitsandbytes_cuda118.so. Maybe you need to compile it from source?
CUDA SETUP: Defaulting to libbitsandbytes_cpu.so...
CUDA SETUP: Loading binary /opt/conda/lib/python3.10/site-packages/bitsandbytes-0.41.1-py3.10.egg/bitsandbytes/libbitsandbytes_cpu.so...
/opt/conda/lib/python3.10/site-packages/bitsandbytes-0.41.1-py3.10.egg/bitsandbytes/cextension.py:34: UserWarning: The installed version of bitsandbytes was compiled without GPU support. 8-bit optimizers, 8-bit multiplication, and GPU quantization are unavailable.
"""},
    {"id": "bnb044_glibc_old_system", "format": "current (0.44)", "label": "glibc_too_old",
     "source": "assembled: a bitsandbytes CUDA binary loaded on an old Linux image whose glibc lacks a symbol version "
               "it needs, written for vramlab in the real format (glibc's loader message as cextension.py logs it)",
     "assembled": True, "sources": [BNB_REPO + " bitsandbytes/cextension.py at tag 0.44.1: logger.error(f'Could not "
                                    "load bitsandbytes native library: {e}') with the loader's OSError text"],
     "text": """Could not load bitsandbytes native library: /lib64/libc.so.6: version `GLIBC_2.34' not found (required by /usr/local/lib/python3.10/site-packages/bitsandbytes/libbitsandbytes_cuda121.so)
Traceback (most recent call last):
  File "/usr/local/lib/python3.10/site-packages/bitsandbytes/cextension.py", line 109, in <module>
    lib = get_native_library()
OSError: /lib64/libc.so.6: version `GLIBC_2.34' not found (required by /usr/local/lib/python3.10/site-packages/bitsandbytes/libbitsandbytes_cuda121.so)

CUDA Setup failed despite CUDA being available. Please run the following command to get more information:
"""},
    {"id": "old_macos_mach_o", "format": "old (0.42)", "label": "macos_no_cuda",
     "source": "assembled: bitsandbytes 0.42.0 on an Apple-silicon Mac, written for vramlab in the real format: "
               "macOS dlopen refuses the Linux .so",
     "assembled": True, "sources": [BNB_REPO + " bitsandbytes/cuda_setup/main.py and cextension.py at tag 0.42.0 "
                                    "('Required library version not found', 'compiled without GPU support'); macOS "
                                    "dlopen's 'tried: ... (not a mach-o file)' wording"],
     "text": """CUDA SETUP: Required library version not found: libbitsandbytes_cpu.so. Maybe you need to compile it from source?
CUDA SETUP: Defaulting to libbitsandbytes_cpu.so...
dlopen(/Users/lee/miniforge3/lib/python3.11/site-packages/bitsandbytes/libbitsandbytes_cpu.so, 0x0006): tried: '/Users/lee/miniforge3/lib/python3.11/site-packages/bitsandbytes/libbitsandbytes_cpu.so' (not a mach-o file)
/Users/lee/miniforge3/lib/python3.11/site-packages/bitsandbytes/cextension.py:34: UserWarning: The installed version of bitsandbytes was compiled without GPU support. 8-bit optimizers, 8-bit multiplication, and GPU quantization are unavailable.
'NoneType' object has no attribute 'cadam32bit_grad_fp32'
"""},
    {"id": "bnb050_windows_dll_dependency", "format": "current (0.50)", "label": "windows_dll_dependency_missing",
     "source": "assembled: bitsandbytes 0.50 on Windows where libbitsandbytes_cuda124.dll exists but a CUDA DLL it "
               "links against is not found, written for vramlab in the real format (ctypes on Python 3.8+)",
     "assembled": True, "sources": [BNB_REPO + " bitsandbytes/cextension.py at tag 0.50.1: logger.error(f'bitsandbytes "
                                    "library load error: {error_msg}') around ct.cdll.LoadLibrary; CPython "
                                    "Lib/ctypes/__init__.py on Windows: 'Could not find module ... (or one of its "
                                    "dependencies)'"],
     "text": r"""bitsandbytes library load error: Could not find module 'C:\Users\kim\AppData\Local\Programs\Python\Python311\Lib\site-packages\bitsandbytes\libbitsandbytes_cuda124.dll' (or one of its dependencies). Try using the full path with constructor syntax.
Traceback (most recent call last):
  File "C:\Users\kim\AppData\Local\Programs\Python\Python311\Lib\site-packages\bitsandbytes\cextension.py", line 313, in <module>
    lib = get_native_library()
  File "C:\Users\kim\AppData\Local\Programs\Python\Python311\Lib\ctypes\__init__.py", line 376, in __init__
    self._handle = _dlopen(self._name, mode)
FileNotFoundError: Could not find module 'C:\Users\kim\AppData\Local\Programs\Python\Python311\Lib\site-packages\bitsandbytes\libbitsandbytes_cuda124.dll' (or one of its dependencies). Try using the full path with constructor syntax.
"""},
]

RENDERED = {  # id -> (scenario, label)
    "bnb050_override_invalid": ("override_invalid", "bnb_cuda_version_override"),
    "bnb050_override_missing": ("override_missing", "bnb_cuda_version_override"),
    "bnb050_no_binary_cuda102": ("no_binary_for_cuda", "binary_missing_for_cuda_version"),
    "bnb050_runtime_missing": ("runtime_missing", "cuda_runtime_dependency_missing"),
    "bnb050_old_gpu_cc52": ("old_gpu", "compute_capability_low"),
    "bnb050_slow_int8_cc70": ("slow_int8_gpu", "compute_capability_low"),
    "bnb050_cudart_search_empty": ("cudart_search_empty", "cudart_not_found"),
    "bnb050_stale_override": ("stale_override", "bnb_cuda_version_override"),
    "bnb050_unbuilt_checkout": ("unbuilt_checkout", "native_library_not_built"),
}


def cpu_ok_text() -> str:
    from vramlab.bnb.doctor import child_env

    out = subprocess.run([sys.executable, "-m", "bitsandbytes"], capture_output=True, text=True, env=child_env(),
                         timeout=180)
    keep = [ln for ln in (out.stdout + out.stderr).splitlines()
            if not ln.startswith("Failed to load CPU gemm_4bit_forward")]
    return "\n".join(keep).strip()


def main() -> None:
    import bitsandbytes

    from vramlab.bnb.doctor import SCENARIOS, _WITHHELD_SCENARIOS, simulate

    described = {**SCENARIOS, **_WITHHELD_SCENARIOS}   # lab 07's capstone scenario is not in the public list

    logs = list(QUOTED)
    for entry_id, (scenario, label) in RENDERED.items():
        logs.append({"id": entry_id, "format": f"current ({bitsandbytes.__version__})", "label": label,
                     "scenario": scenario,
                     "source": f"rendered by the installed bitsandbytes {bitsandbytes.__version__}'s own functions: "
                               f"{described[scenario]} (vramlab.bnb.doctor.simulate('{scenario}'))",
                     "text": simulate(scenario)})
    logs.append({"id": "bnb050_cpu_ok", "format": f"current ({bitsandbytes.__version__})",
                 "label": "no_gpu_cpu_library",
                 "source": "python -m bitsandbytes on the CPU machine that built this corpus (package versions as printed)",
                 "text": cpu_ok_text()})
    data = {"command": "python benchmarks/bnb_logs_corpus.py",
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "bitsandbytes": bitsandbytes.__version__,
            "note": "a labelled corpus of quoted and rendered logs (not a measurement); paths in quoted logs are "
                    "the posters' own, user names shortened",
            "logs": logs}
    path = ROOT / "src" / "vramlab" / "results" / "bnb_logs.json"
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {len(logs)} logs to {path}")


if __name__ == "__main__":
    main()
