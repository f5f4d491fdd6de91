"""A doctor for "CUDA Setup failed despite GPU being available": :func:`diagnose` -> :class:`Report`.

PyTorch seeing a GPU is half the battle. bitsandbytes also needs its native library
(``libbitsandbytes_cudaNNN.so`` matching ``torch.version.cuda``, or the CPU one), the CUDA runtime
libraries that library links against, a system libstdc++ new enough for it, and a GPU with compute
capability 6.0+ (7.5+ for the fast LLM.int8() matmul). :func:`diagnose` checks each of these and
returns one :class:`~vramlab.bnb.logs.Finding` per check (``ok`` / ``warning`` / ``error``, cause,
fix). Everything that imports torch or bitsandbytes runs in a *subprocess* (:func:`probe`), so the
doctor can examine a tampered environment (``diagnose(env=...)``) without touching the caller's
process; ``vramlab doctor`` prints the text (exit 1 on errors, ``--json`` for machines).

Fault injection (:data:`FAULTS`, :func:`break_and_diagnose`) imports bitsandbytes in a subprocess
under a broken environment, captures what it prints and diagnoses it. :func:`simulate` renders the
messages the installed bitsandbytes would print on a GPU machine, by calling its own functions
(``cextension.get_cuda_bnb_library_path``, ``ErrorHandlerMockBNBNativeLibrary``,
``diagnostics.cuda``) with a given CUDA version and compute capability, in a subprocess.

Facts are from bitsandbytes 0.50.2 (``cextension.py``, ``cuda_specs.py``, ``diagnostics/``).
"""

from __future__ import annotations

import atexit
import contextlib
import html
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from vramlab.bnb.logs import (FAST_INT8_COMPUTE_CAPABILITY, MIN_COMPUTE_CAPABILITY, Finding, explain_log,
                              fix_for_missing, soname_major)

PROBE_MARK = "VRAMLAB_PROBE_JSON="
# bitsandbytes 0.50.2 diagnostics/cuda.py CUDA_RUNTIME_LIB_PATTERNS (Linux + Windows names)
CUDA_RUNTIME_PATTERNS = ("libcudart.so*", "cudart64*.dll")
USUAL_CUDA_DIRS = ("/usr/local/cuda/lib64", "/usr/local/cuda/lib", "/usr/lib/x86_64-linux-gnu", "/usr/lib64",
                   "/opt/cuda/lib64")


# --------------------------------------------------------------------------- subprocess plumbing
def child_env(env: dict | None = None, unset: tuple[str, ...] = ()) -> dict:
    """A copy of this process's environment with ``env`` applied (a ``None`` value removes a
    variable) and ``unset`` removed; what the doctor's subprocesses run under."""
    if env is not None and not isinstance(env, dict):
        raise TypeError(f"env must be a dict of environment variables, got {type(env).__name__}.")
    out = dict(os.environ)
    for key, value in (env or {}).items():
        if value is None:
            out.pop(key, None)
        else:
            out[str(key)] = str(value)
    for key in unset:
        out.pop(key, None)
    out.setdefault("OMP_NUM_THREADS", "1")
    src = str(Path(__file__).resolve().parents[2])  # so `import vramlab` works in the child too
    out["PYTHONPATH"] = src + (os.pathsep + out["PYTHONPATH"] if out.get("PYTHONPATH") else "")
    return out


def run_python(code: str, env: dict | None = None, timeout: float = 180) -> tuple[int, str]:
    """Run ``code`` with this interpreter in a subprocess; ``(exit code, stdout+stderr)``."""
    proc = subprocess.run([sys.executable, "-c", code], env=child_env(env), capture_output=True, text=True,
                          timeout=timeout)
    return proc.returncode, proc.stdout + proc.stderr


_PROBE = r'''
import io, json, logging, os, sys, traceback, warnings
buf = io.StringIO()
handler = logging.StreamHandler(buf)
handler.setFormatter(logging.Formatter("%(message)s"))
logging.getLogger().addHandler(handler)
logging.getLogger().setLevel(logging.WARNING)
import platform as _platform
out = {"python": sys.version.split()[0], "system": _platform.system()}
try:
    import torch
    out["torch"] = torch.__version__
    out["torch_cuda"] = torch.version.cuda
    out["torch_hip"] = getattr(torch.version, "hip", None)
    out["cuda_available"] = bool(torch.cuda.is_available())
    out["gpus"] = []
    if out["cuda_available"]:
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            out["gpus"].append({"index": i, "name": p.name, "cc": [p.major, p.minor],
                                "total_bytes": int(p.total_memory)})
except Exception as exc:
    out["torch_error"] = f"{type(exc).__name__}: {exc}"
try:
    import pynvml
    pynvml.nvmlInit()
    v = pynvml.nvmlSystemGetDriverVersion()
    out["driver"] = v.decode() if isinstance(v, bytes) else str(v)
    pynvml.nvmlShutdown()
except Exception as exc:
    out["driver"] = None
    out["driver_error"] = f"{type(exc).__name__}: {exc}"
try:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import bitsandbytes as bnb
        from bitsandbytes import cextension as ce
    out["bnb"] = bnb.__version__
    out["bnb_dir"] = os.path.dirname(bnb.__file__)
    out["backend"] = ce.BNB_BACKEND
    lib = ce.lib
    out["lib_class"] = type(lib).__name__
    out["lib_path"] = getattr(getattr(lib, "_lib", None), "_name", None)
    if isinstance(lib, ce.ErrorHandlerMockBNBNativeLibrary):
        out["load_error"] = lib.error_msg
        out["formatted_error"] = lib.formatted_error
    out["warnings"] = [str(w.message) for w in caught if "deprecated" not in str(w.message)]
    if out.get("torch_cuda") and not out.get("torch_hip"):
        # the binary bitsandbytes' own selection picks for this PyTorch (0.50.0+ cextension.py
        # get_cuda_bnb_library_path: exact, else the highest same-major one below the runtime, else the lowest
        # same-major one above it, or the override), also
        # on a machine where PyTorch sees no GPU: the doctor checks that file, not an exact-name guess
        try:
            from bitsandbytes.cuda_specs import CUDASpecs
            tv = tuple(int(x) for x in out["torch_cuda"].split(".")[:2])
            cc = max((tuple(g["cc"]) for g in out.get("gpus", [])), default=(0, 0))
            out["predicted_binary"] = str(ce.get_cuda_bnb_library_path(CUDASpecs(cc, f"{tv[0]}{tv[1]}", tv)))
        except Exception as exc:
            out["predicted_error"] = f"{type(exc).__name__}: {exc}"
except Exception:
    out["bnb_error"] = traceback.format_exc()
out["log"] = buf.getvalue()
print("VRAMLAB_PROBE_JSON=" + json.dumps(out))
'''


def probe(env: dict | None = None, timeout: float = 180) -> dict:
    """Import torch and bitsandbytes in a subprocess (under ``env``, see :func:`child_env`) and
    return what it saw: versions, ``cuda_available``, ``gpus`` (name, ``cc``), ``driver``, ``bnb``,
    ``backend``, ``lib_class``, ``lib_path`` (the native library that actually loaded), and
    ``load_error`` / ``formatted_error`` / ``log`` (everything bitsandbytes logged); ``output`` is
    the raw text the subprocess printed."""
    rc, text = run_python(_PROBE, env=env, timeout=timeout)
    for line in text.splitlines():
        if line.startswith(PROBE_MARK):
            data = json.loads(line[len(PROBE_MARK):])
            break
    else:
        data = {"probe_error": f"the probe exited with {rc} before reporting"}
    data["returncode"] = rc
    data["output"] = "\n".join(ln for ln in text.splitlines() if not ln.startswith(PROBE_MARK))
    return data


# --------------------------------------------------------------------------- machine checks (no torch)
def _bnb_dir() -> Path | None:
    import importlib.util

    spec = importlib.util.find_spec("bitsandbytes")
    if spec is None or not spec.origin:
        return None
    return Path(spec.origin).parent


def shipped_binaries(bnb_dir: Path | None = None) -> dict[str, Path]:
    """The CUDA binaries shipped with the installed bitsandbytes: ``{"128": Path(...cuda128.so)}``."""
    bnb_dir = bnb_dir or _bnb_dir()
    if bnb_dir is None:
        return {}
    out = {}
    for p in sorted(bnb_dir.glob("libbitsandbytes_cuda*")):
        m = re.match(r"libbitsandbytes_cuda(\d+)", p.name)
        if m:
            out[m.group(1)] = p
    return out


def cudart_soname(version: str) -> str:
    """The CUDA runtime a ``libbitsandbytes_cuda<version>.so`` links against (its ELF NEEDED entry):
    ``libcudart.so.11.0`` for CUDA 11.x, ``libcudart.so.<major>`` from CUDA 12 on (``"118"`` ->
    ``"libcudart.so.11.0"``, ``"128"`` -> ``"libcudart.so.12"``), as the 0.50.2 binaries name it."""
    major = version[:-1] or version
    return f"libcudart.so.{major}.0" if major == "11" else f"libcudart.so.{major}"


def binary_archs(path: Path) -> dict[str, list[int]]:
    """The GPU architectures compiled into one bitsandbytes binary, read from its CUDA fat binaries:
    ``{"elf": [75, 80, ...], "ptx": [120]}`` (sm numbers: 75 = compute capability 7.5). Each fat
    binary starts with the magic 0xBA55ED50 and a 16-byte header; each entry has a 32-bit ``kind``
    (1 PTX, 2 ELF cubin) and the ``arch`` at byte 28 of its header (the layout ``cuobjdump`` reads).
    Empty when the file has none (CPU library, unreadable file)."""
    import struct

    try:
        b = Path(path).read_bytes()
    except OSError:
        return {}
    out: dict[str, set] = {}
    magic = b"\x50\xed\x55\xba"
    i = b.find(magic)
    while i != -1:
        _, hsize, fsize = struct.unpack_from("<HHQ", b, i + 4) if i + 16 <= len(b) else (0, 0, 0)
        if hsize != 16 or not 0 < fsize <= len(b) - i:
            i = b.find(magic, i + 4)
            continue
        j, end = i + hsize, i + hsize + fsize
        while j + 32 <= end:
            kind, _, ehs, size = struct.unpack_from("<HHIQ", b, j)
            if not 32 <= ehs <= 4096:
                break
            arch = struct.unpack_from("<I", b, j + 28)[0]
            if kind in (1, 2) and 10 <= arch <= 200:
                out.setdefault("ptx" if kind == 1 else "elf", set()).add(arch)
            j += ehs + size
        i = b.find(magic, end)
    return {k: sorted(v) for k, v in out.items()}


def binary_min_compute_capability(path: Path) -> tuple[int, int] | None:
    """The oldest compute capability a bitsandbytes binary has kernels for, e.g. ``(7, 5)`` for
    0.50.2's ``libbitsandbytes_cuda130.so`` (sm_75 ... sm_120) and ``(6, 0)`` for its cuda118-126
    ones, from :func:`binary_archs`; None when nothing can be read. (Simplified: a cubin for sm_XY
    also runs on later minors of the same major, and PTX is compiled for newer GPUs only, so the
    lowest listed arch is the floor.)"""
    archs = binary_archs(path)
    all_archs = archs.get("elf", []) + archs.get("ptx", [])
    if not all_archs:
        return None
    low = min(all_archs)
    return (low // 10, low % 10)


_PREDICT = r"""
import json, logging, sys
logging.disable(logging.CRITICAL)
from bitsandbytes import cextension as ce
from bitsandbytes.cuda_specs import CUDASpecs
out = {}
for v in sys.argv[1:]:
    try:
        tv = tuple(int(x) for x in v.split(".")[:2])
        out[v] = ce.get_cuda_bnb_library_path(CUDASpecs((0, 0), f"{tv[0]}{tv[1]}", tv)).name
    except Exception as exc:
        out[v] = f"error: {exc}"
print("VRAMLAB_PREDICT=" + json.dumps(out))
"""


#: ``vramlab.ran``: the CUDA versions :func:`predict_binaries` was asked about (lab 07's binary prediction is refused
#: after its own version was asked: review #10).
ASKED_KIND = "binaries asked"


def predict_binaries(cuda_versions, env: dict | None = None, timeout: float = 120) -> dict[str, str]:
    """The binary the installed bitsandbytes picks for each PyTorch CUDA version (``"12.9"`` ->
    ``"libbitsandbytes_cuda128.so"``), asked of bitsandbytes itself (0.50.0+ ``cextension.py``
    ``get_cuda_bnb_library_path``: the exact version, else the highest shipped one below it with the same
    major, else the lowest above it with the same major, never across majors; ``BNB_CUDA_VERSION``
    wins over all). A name that is not shipped means "No compatible CUDA binary found"; an invalid
    override gives ``"error: ..."``. Runs in one subprocess (under ``env``)."""
    versions = [str(v) for v in cuda_versions]
    for v in versions:
        if not re.fullmatch(r"\d{1,2}\.\d{1,2}", v):
            raise ValueError(f"cuda_versions: {v!r} is not a CUDA version like '12.8'; pass 'MAJOR.MINOR' strings.")
    from vramlab import ran

    ran.note_many(ASKED_KIND, versions, lasting=True)     # lab 07's capstone predicts one of these by hand
    proc = subprocess.run([sys.executable, "-c", _PREDICT, *versions], env=child_env(env), capture_output=True,
                          text=True, timeout=timeout)
    for line in proc.stdout.splitlines():
        if line.startswith("VRAMLAB_PREDICT="):
            return json.loads(line.split("=", 1)[1])
    raise RuntimeError(f"predict_binaries: the subprocess failed ({(proc.stderr.strip().splitlines() or ['?'])[-1]})")


def needed_libraries(path: Path) -> list[str]:
    """The shared libraries an ELF file names as ``DT_NEEDED`` (what ``readelf -d`` lists as NEEDED,
    what ``ldd`` resolves), read from its dynamic section: ``["libcudart.so.12", "libcublas.so.12",
    ...]``. Empty for a file that is not a 64-bit little-endian ELF (a Windows .dll, a text file)."""
    import struct

    try:
        b = Path(path).read_bytes()
    except OSError:
        return []
    if len(b) < 64 or b[:4] != b"\x7fELF" or b[4] != 2 or b[5] != 1:
        return []
    shoff, = struct.unpack_from("<Q", b, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", b, 0x3A)
    sections = []
    for i in range(min(shnum, 4096)):
        off = shoff + i * shentsize
        if off + 64 > len(b):
            return []
        _, stype, _, _, soff, ssize, link = struct.unpack_from("<IIQQQQI", b, off)
        sections.append((stype, soff, ssize, link))
    out = []
    for stype, soff, ssize, link in sections:
        if stype != 6 or link >= len(sections):   # SHT_DYNAMIC; its sh_link is the string table
            continue
        stroff = sections[link][1]
        for j in range(soff, min(soff + ssize, len(b) - 15), 16):
            tag, val = struct.unpack_from("<qQ", b, j)
            if tag == 0:                            # DT_NULL ends the table
                break
            if tag == 1:                            # DT_NEEDED: an offset into the string table
                end = b.find(b"\x00", stroff + val, stroff + val + 256)
                if end > 0:
                    out.append(b[stroff + val:end].decode("ascii", "replace"))
    return out


_OPEN_NEEDED = r"""
import ctypes, json, sys
if sys.argv[1] == "1":
    import torch  # as bitsandbytes does: PyTorch loads its own CUDA libraries first (pip's nvidia-* wheels)
out = {}
for name in sys.argv[2:]:
    try:
        ctypes.CDLL(name)
        out[name] = None
    except OSError as exc:
        out[name] = str(exc)
print("VRAMLAB_NEEDED=" + json.dumps(out))
"""

# the C and C++ runtime every Linux process has; the ones worth testing are the CUDA libraries
_SYSTEM_LIBS = ("libc.so", "libm.so", "libdl.so", "librt.so", "libpthread.so", "libgcc_s.so", "libstdc++.so",
                "ld-linux")


def open_needed(path: Path, env: dict | None = None, import_torch: bool = True, timeout: float = 120) -> dict:
    """Ask the dynamic loader to open each CUDA library a binary needs (:func:`needed_libraries`), in a
    subprocess under ``env`` that first imports torch as bitsandbytes does: ``{soname: None}`` when it
    opens, ``{soname: "the loader's error"}`` when not. This is ``ldd``'s question asked the way
    bitsandbytes' own ``ctypes.cdll.LoadLibrary`` meets it (a library PyTorch already loaded counts)."""
    names = [n for n in needed_libraries(path) if not n.startswith(_SYSTEM_LIBS)]
    if not names:
        return {}
    proc = subprocess.run([sys.executable, "-c", _OPEN_NEEDED, "1" if import_torch else "0", *names],
                          env=child_env(env), capture_output=True, text=True, timeout=timeout)
    for line in proc.stdout.splitlines():
        if line.startswith("VRAMLAB_NEEDED="):
            return json.loads(line.split("=", 1)[1])
    return {n: f"the check did not run ({(proc.stderr.strip().splitlines() or ['?'])[-1]})" for n in names}


_GLIBC_RE = re.compile(rb"GLIBC_(\d{1,2}\.\d{1,3}(?:\.\d{1,3})?)\x00")


def system_glibc() -> tuple[int, ...] | None:
    """This system's glibc version, ``(2, 36)`` (``os.confstr("CS_GNU_LIBC_VERSION")``, else
    ``platform.libc_ver()``); None on a non-glibc system (musl, macOS)."""
    text = ""
    with contextlib.suppress(ValueError, OSError, AttributeError):
        text = os.confstr("CS_GNU_LIBC_VERSION") or ""
    m = re.search(r"glibc (\d+(?:\.\d+)+)", text)
    if not m:
        name, ver = platform.libc_ver()
        if name != "glibc" or not ver:
            return None
        return tuple(int(x) for x in ver.split(".") if x.isdigit())
    return tuple(int(x) for x in m.group(1).split("."))


def glibc_check(library: Path, have: tuple[int, ...] | None = None) -> Finding:
    """The newest ``GLIBC_x.y`` symbol version ``library`` needs against this system's glibc
    (:func:`system_glibc`). Missing glibc versions are what the loader reports as ``libc.so.6: version
    `GLIBC_2.34' not found``: glibc is the C library of the operating system, not libstdc++, so conda's
    ``libstdcxx-ng`` cannot help; a newer OS image or a source build can."""
    have = have if have is not None else system_glibc()
    try:
        need = sorted({tuple(int(x) for x in m.group(1).decode().split("."))
                       for m in _GLIBC_RE.finditer(Path(library).read_bytes())})
    except OSError:
        need = []
    top = ".".join(map(str, need[-1])) if need else None
    if have is None:
        return Finding("glibc", "warning", f"not a glibc system ({platform.libc_ver()[0] or 'unknown C library'})",
                       cause="bitsandbytes' Linux wheels are built against glibc (manylinux); musl-based images "
                             "(Alpine) cannot load them", fix=["use a glibc-based image (Debian, Ubuntu)"])
    sys_v = ".".join(map(str, have))
    if not need:
        return Finding("glibc", "ok", f"glibc {sys_v} (no GLIBC_ version needs read from {Path(library).name})")
    if need[-1] > have:
        return Finding("glibc", "error", f"{Path(library).name} needs GLIBC_{top}; this system has glibc {sys_v}",
                       cause="the system C library (glibc) is older than the one the binary was built against; the "
                             "loader will report \"version `GLIBC_" + top + "' not found\"",
                       fix=["ldd --version   # the system glibc",
                            "run on a newer OS image or container whose glibc is at least " + top,
                            "or build bitsandbytes from source on this system: cmake -DCOMPUTE_BACKEND=cuda -S . && "
                            "make && pip install -e .",
                            "conda's libstdcxx-ng does NOT help: it replaces libstdc++, not glibc"],
                       label="libstdcxx_abi", evidence=[f"GLIBC_{top}"])
    return Finding("glibc", "ok", f"glibc {sys_v}; {Path(library).name} needs up to GLIBC_{top}")


def check_override(value: str | None, cuda_available: bool, bnb_dir: Path | None = None,
                   torch_cuda: str | None = None) -> Finding:
    """``BNB_CUDA_VERSION`` as bitsandbytes 0.50.2 reads it (``cextension.get_cuda_bnb_library_path``):
    digits only, naming ``libbitsandbytes_cuda<value>.so``; applied only when torch sees CUDA.
    ``torch_cuda`` (``torch.version.cuda``, e.g. ``"12.8"``, None on CPU builds) is the only override
    the doctor ever suggests, since any other one forces a runtime that may not be installed."""
    if value is None:
        return Finding("BNB_CUDA_VERSION", "ok", "not set: bitsandbytes picks the binary for torch.version.cuda (exact, else the "
                       "highest shipped one below it of the same major, else the lowest above it)")
    shipped = shipped_binaries(bnb_dir)
    where = ("on this machine bitsandbytes fails to load its library" if cuda_available else
             "ignored here because PyTorch sees no CUDA device, but on a GPU machine bitsandbytes fails to load")
    if value == "":
        # up to 0.49 cextension.py read it with `if override_value:` (empty = unset); 0.50.0 tests `is not None` and
        # `isdigit()`, so the old advice "export BNB_CUDA_VERSION=" now stops the library from loading
        return Finding("BNB_CUDA_VERSION", "error" if cuda_available else "warning",
                       "set but empty: ignored up to bitsandbytes 0.49, refused from 0.50.0 on",
                       cause="bitsandbytes 0.50+ raises \"BNB_CUDA_VERSION='': value must be digits only\"; an empty "
                             f"value no longer means 'unset' ({where})",
                       fix=["unset BNB_CUDA_VERSION   # not 'export BNB_CUDA_VERSION=': the variable must be gone"],
                       label="bnb_cuda_version_override")
    if not value.isdigit():
        return Finding("BNB_CUDA_VERSION", "error" if cuda_available else "warning",
                       f"{value!r} is invalid (digits only, e.g. 124 for CUDA 12.4)",
                       cause=f"bitsandbytes raises \"BNB_CUDA_VERSION={value!r}: value must be digits only\"; {where}",
                       fix=["unset BNB_CUDA_VERSION"] + (
                           [f"or export BNB_CUDA_VERSION={torch_cuda.replace('.', '')}   # PyTorch's own CUDA"]
                           if torch_cuda and torch_cuda.replace(".", "").isdigit() else []),
                       label="bnb_cuda_version_override")
    if value not in shipped:
        return Finding("BNB_CUDA_VERSION", "error" if cuda_available else "warning",
                       f"{value} names libbitsandbytes_cuda{value}.so, which is not shipped",
                       cause=f"an override loads exactly that binary with no fallback ({where}: \"No compatible "
                             f"CUDA binary found at ...\"); shipped: {', '.join(shipped) or 'none'}",
                       fix=["unset BNB_CUDA_VERSION", f"or pick one of: {', '.join(shipped) or 'none'}"],
                       label="bnb_cuda_version_override")
    return Finding("BNB_CUDA_VERSION", "warning", f"{value}: overrides the automatic choice (binary is shipped)",
                   cause=f"an active override; its CUDA runtime ({cudart_soname(value)}) must be installed",
                   fix=["unset BNB_CUDA_VERSION   # unless you need a CUDA runtime other than PyTorch's"],
                   label="bnb_cuda_version_override")


def find_cuda_runtimes(env: dict | None = None) -> dict[str, list[str]]:
    """Where ``libcudart`` lives: ``{"LD_LIBRARY_PATH": [...], "CONDA_PREFIX": [...], "usual dirs":
    [...], "ldconfig": [...], "pip (nvidia-*)": [...]}`` (file paths). Mirrors the search order of
    bitsandbytes 0.50.2 ``diagnostics/cuda.py`` (CONDA_PREFIX, LD_LIBRARY_PATH) plus the loader's
    cache and the usual folders."""
    env = child_env(env)

    def scan(dirs) -> list[str]:
        found = []
        for d in dirs:
            p = Path(d)
            try:
                if not p.is_dir():
                    continue
                for pat in CUDA_RUNTIME_PATTERNS:
                    found += [str(f) for f in sorted(p.glob(pat)) if f.is_file()]
            except OSError:
                continue
        return list(dict.fromkeys(found))

    out = {"LD_LIBRARY_PATH": scan(x for x in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if x)}
    conda = env.get("CONDA_PREFIX")
    out["CONDA_PREFIX"] = scan([Path(conda) / "lib", conda]) if conda else []
    out["usual dirs"] = scan(list(USUAL_CUDA_DIRS) + sorted(str(p) for p in Path("/usr/local").glob("cuda-*/lib*")))
    try:
        text = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=10).stdout
        out["ldconfig"] = sorted({ln.split("=>")[-1].strip() for ln in text.splitlines() if "libcudart" in ln})
    except (OSError, subprocess.SubprocessError):
        out["ldconfig"] = []
    import site  # pip's nvidia-cuda-runtime wheel (what CUDA builds of PyTorch use) sits in site-packages

    pip_dirs = [str(d) for sp in site.getsitepackages() for d in Path(sp).glob("nvidia/*/lib")]  # cuda_runtime/lib (cu12), cu13/lib
    out["pip (nvidia-*)"] = scan(pip_dirs)
    return out


_VERSION_RE = re.compile(rb"(GLIBCXX|CXXABI)_(\d+(?:\.\d+)*)")


def _versions_in(path: Path) -> dict[str, list[tuple[int, ...]]]:
    data = Path(path).read_bytes()
    out: dict[str, set] = {"GLIBCXX": set(), "CXXABI": set()}
    for m in _VERSION_RE.finditer(data):
        out[m.group(1).decode()].add(tuple(int(x) for x in m.group(2).decode().split(".")))
    return {k: sorted(v) for k, v in out.items()}


def system_libstdcxx() -> Path | None:
    """The ``libstdc++.so.6`` the dynamic loader would use (``ldconfig -p``, then usual folders)."""
    try:
        text = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=10).stdout
        for ln in text.splitlines():
            if "libstdc++.so.6 " in ln and "=>" in ln:
                p = Path(ln.split("=>")[-1].strip())
                if p.exists():
                    return p
    except (OSError, subprocess.SubprocessError):
        pass
    for d in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/usr/lib"):
        p = Path(d) / "libstdc++.so.6"
        if p.exists():
            return p
    return None


def abi_check(library: Path, libstdcxx: Path | None = None) -> Finding:
    """GLIBCXX / CXXABI versions ``library`` needs against those the system libstdc++ provides.

    Reads the version names straight out of both ELF files (the ``.gnu.version_r`` needs of the
    library, the ``.gnu.version_d`` definitions of libstdc++); a need above the newest provided
    version is what the loader reports as ``version `CXXABI_1.3.9' not found``."""
    libstdcxx = libstdcxx or system_libstdcxx()
    if libstdcxx is None:
        return Finding("libstdc++ ABI", "warning", "no libstdc++.so.6 found on this system",
                       cause="the loader needs libstdc++ for bitsandbytes' native library",
                       fix=["apt-get install libstdc++6   # or conda install -c conda-forge libstdcxx-ng"],
                       label="libstdcxx_abi")
    need, have = _versions_in(library), _versions_in(libstdcxx)
    missing = []
    for family in ("GLIBCXX", "CXXABI"):
        top = max(have[family]) if have[family] else ()
        for v in need[family]:
            if v > top and v not in have[family]:
                missing.append(f"{family}_{'.'.join(map(str, v))}")

    def newest(d, fam):
        return f"{fam}_{'.'.join(map(str, max(d[fam])))}" if d[fam] else f"no {fam}"

    detail = (f"{library.name} needs up to {newest(need, 'GLIBCXX')} / {newest(need, 'CXXABI')}; "
              f"{libstdcxx} provides up to {newest(have, 'GLIBCXX')} / {newest(have, 'CXXABI')}")
    if missing:
        return Finding("libstdc++ ABI", "error", detail + f"; missing {', '.join(missing)}",
                       cause="the system libstdc++ is older than the compiler that built bitsandbytes",
                       fix=["conda install -c conda-forge libstdcxx-ng && export "
                            "LD_LIBRARY_PATH=$CONDA_PREFIX/lib:$LD_LIBRARY_PATH",
                            "or build bitsandbytes here: cmake -DCOMPUTE_BACKEND=cuda -S . && make && pip install -e ."],
                       label="libstdcxx_abi", evidence=missing)
    return Finding("libstdc++ ABI", "ok", detail)


# --------------------------------------------------------------------------- the report
@dataclass
class Report:
    """The doctor's findings, in check order. ``errors`` / ``warnings`` filter them; ``mode`` is
    ``"CPU mode"`` or ``"CUDA"``; ``text()`` for a terminal, ``_repr_html_`` for a notebook,
    ``to_dict()`` / ``to_json()`` for machines; ``probe`` is the raw subprocess result."""

    findings: list[Finding]
    mode: str
    probe: dict = field(default_factory=dict, repr=False)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.status == "error"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.status == "warning"]

    @property
    def ok(self) -> bool:
        return not self.errors

    def finding(self, check: str) -> Finding:
        for f in self.findings:
            if f.check == check:
                return f
        raise KeyError(f"No finding named {check!r}; checks: {', '.join(f.check for f in self.findings)}.")

    def summary(self) -> str:
        verdict = "no errors" if self.ok else f"{len(self.errors)} error(s)"
        return f"bitsandbytes doctor ({self.mode}): {verdict}, {len(self.warnings)} warning(s)"

    def text(self) -> str:
        return "\n".join([self.summary()] + [f.text() for f in self.findings])

    def __str__(self) -> str:
        return self.text()

    def to_dict(self) -> dict:
        return {"mode": self.mode, "ok": self.ok, "errors": len(self.errors), "warnings": len(self.warnings),
                "findings": [f.to_dict() for f in self.findings]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def _repr_html_(self) -> str:
        colour = {"ok": "#1a7f37", "warning": "#9a6700", "error": "#cf222e"}
        td = "style='text-align:left;vertical-align:top'"
        rows = []
        for f in self.findings:
            fix = "<br>".join(f"<code>{html.escape(c)}</code>" for c in f.fix)
            rows.append(
                f"<tr><td style='color:{colour[f.status]};font-weight:bold;text-align:left;vertical-align:top'>"
                f"{f.status}</td><td {td}>{html.escape(f.check)}</td><td {td}>{html.escape(f.detail)}</td>"
                f"<td {td}>{html.escape(f.cause)}</td><td {td}>{fix}</td></tr>")
        head = "".join(f"<th {td}>{h}</th>" for h in ("status", "check", "found", "cause", "fix"))
        return (f"<p><b>{html.escape(self.summary())}</b></p><table><thead><tr>{head}</tr></thead>"
                f"<tbody>{''.join(rows)}</tbody></table>")


# The checks that exist only on Linux: glibc (the C library of GNU/Linux), the libstdc++ the ELF loader picks, the
# loader's LD_LIBRARY_PATH. On Windows and macOS they do not apply, and their fixes (a glibc image, apt-get,
# LD_LIBRARY_PATH) would send a learner the wrong way.
_WINDOWS_RUNTIME_FIX = [
    "python -c \"import torch; print(torch.version.cuda)\"   # the CUDA major the bitsandbytes .dll must match",
    "install the CUDA Toolkit of that major for Windows, or pip install nvidia-cuda-runtime-cuNN nvidia-cublas-cuNN "
    "nvidia-cusparse-cuNN, and make their bin folder findable with os.add_dll_directory(<folder>) before importing "
    "bitsandbytes (Python 3.8+ does not search PATH for a DLL's dependencies)",
    "pip install -U bitsandbytes   # current releases ship Windows .dll builds for current CUDA versions",
]


def _not_on(system: str, check: str) -> Finding:
    what = {"glibc": "glibc is the C library of GNU/Linux", "libstdc++ ABI": "the libstdc++ check reads Linux ELF "
            "binaries"}[check]
    return Finding(check, "ok", f"not applicable on {system} ({what})")


def diagnose(env: dict | None = None, probe_result: dict | None = None) -> Report:
    """Check this machine (or a subprocess under ``env``) for everything bitsandbytes needs.

    Findings, in order: operating system, glibc, Python, torch (and the CUDA it was built with),
    CUDA available, NVIDIA driver, each GPU's compute capability (6.0 / 7.5 thresholds),
    bitsandbytes (version, backend, the native library that loaded), ``BNB_CUDA_VERSION``, CUDA
    runtime libraries found, libstdc++ ABI, and, when the library failed to load, the root cause
    named by :func:`~vramlab.bnb.logs.explain_log` from what bitsandbytes printed.
    ``probe_result`` reuses a :func:`probe` (tests); otherwise one runs now (a few seconds).
    """
    p = probe_result if probe_result is not None else probe(env)
    penv = child_env(env)
    cuda = bool(p.get("cuda_available"))
    mode = "CUDA" if cuda else "CPU mode"
    system = p.get("system") or platform.system()
    linux = system == "Linux"
    F: list[Finding] = []
    if system == "Darwin":
        F.append(Finding("operating system", "ok", f"{platform.platform() if platform.system() == 'Darwin' else 'macOS'}"
                         ": no CUDA on a Mac; bitsandbytes publishes macOS 14+ arm64 wheels (CPU and mps backends) "
                         "from 0.49.0"))
    else:
        F.append(Finding("operating system", "ok", platform.platform() if platform.system() == system else system))
    glibc_at = len(F)   # the glibc finding is compared with the binary below, once it is known
    F.append(Finding("Python", "ok", p.get("python", platform.python_version())))
    if "torch" not in p:
        F.append(Finding("torch", "error", p.get("torch_error", p.get("probe_error", "torch did not import")),
                         cause="PyTorch is missing or broken", fix=["pip install torch"]))
        F.insert(glibc_at, Finding("glibc", "ok", "-".join(platform.libc_ver()) or "not glibc") if linux
                 else _not_on(system, "glibc"))
        return Report(F, mode, p)
    built = f"built with CUDA {p['torch_cuda']}" if p.get("torch_cuda") else (
        f"built with ROCm {p['torch_hip']}" if p.get("torch_hip") else "CPU-only build")
    F.append(Finding("torch", "ok", f"{p['torch']} ({built})"))
    if cuda:
        F.append(Finding("CUDA available", "ok", f"torch.cuda.is_available() is True ({len(p.get('gpus', []))} GPU)"))
    elif p.get("torch_cuda"):
        F.append(Finding("CUDA available", "warning", "False, although this torch was built with CUDA",
                         cause="no driver, no GPU visible (CUDA_VISIBLE_DEVICES?) or a driver older than the build",
                         fix=["nvidia-smi", "echo %CUDA_VISIBLE_DEVICES%" if system == "Windows"
                              else "echo $CUDA_VISIBLE_DEVICES"], label="no_gpu_cpu_library"))
    else:
        F.append(Finding("CUDA available", "ok", "False: CPU mode (a CPU-only PyTorch); bitsandbytes uses its "
                         "CPU backend", label=""))
    if p.get("driver"):
        F.append(Finding("NVIDIA driver", "ok", p["driver"]))
    else:
        F.append(Finding("NVIDIA driver", "error" if cuda else "ok",
                         "not found (no NVML)" + ("" if cuda else ": fine in CPU mode"),
                         fix=["nvidia-smi"] if cuda else []))
    # the binary bitsandbytes loads, or would load: what its own selection picked in the probe
    # (get_cuda_bnb_library_path: exact match, else the highest same-major one below the runtime, else the
    # lowest same-major one above it, or the override)
    if p.get("lib_path") and "cuda" in Path(p["lib_path"]).name:
        binary = Path(p["lib_path"])
    elif p.get("predicted_binary") and Path(p["predicted_binary"]).exists():
        binary = Path(p["predicted_binary"])
    else:   # an older probe without the prediction: the exact name
        want = penv.get("BNB_CUDA_VERSION") or (p.get("torch_cuda") or "").replace(".", "")
        binary = shipped_binaries(Path(p["bnb_dir"]) if p.get("bnb_dir") else None).get(want)
    floor = binary_min_compute_capability(binary) if binary else None
    for g in p.get("gpus", []):
        cc = tuple(g["cc"])
        ccs = f"{cc[0]}.{cc[1]}"
        if floor and cc < floor and cc >= MIN_COMPUTE_CAPABILITY:
            built = ", ".join(f"sm_{a}" for a in binary_archs(binary).get("elf", []))
            F.append(Finding(f"GPU {g['index']}", "error", f"{g['name']}, compute capability {ccs}: "
                             f"{binary.name} has no kernels for it (built for {built})",
                             cause=f"the binary for this PyTorch's CUDA starts at compute capability "
                                   f"{floor[0]}.{floor[1]}; bitsandbytes' kernels fail with 'no kernel image'",
                             fix=["install a PyTorch built for an older CUDA (e.g. cu126), whose bitsandbytes "
                                  "binary has kernels from sm_60 on",
                                  "or use a GPU with compute capability " f"{floor[0]}.{floor[1]}+"],
                             label="compute_capability_low"))
        elif cc < MIN_COMPUTE_CAPABILITY:
            F.append(Finding(f"GPU {g['index']}", "error", f"{g['name']}, compute capability {ccs} < 6.0",
                             cause="bitsandbytes needs compute capability 6.0+ for 4/8-bit quantization",
                             fix=["use a GPU with compute capability 6.0+ (7.5+ for fast LLM.int8())"],
                             label="compute_capability_low"))
        elif cc < FAST_INT8_COMPUTE_CAPABILITY:
            F.append(Finding(f"GPU {g['index']}", "warning", f"{g['name']}, compute capability {ccs}: "
                             "4-bit fine, LLM.int8() slow (< 7.5)", label="compute_capability_low",
                             fix=["prefer load_in_4bit=True on this GPU"]))
        else:
            F.append(Finding(f"GPU {g['index']}", "ok", f"{g['name']}, compute capability {ccs} "
                             "(>= 7.5: every bitsandbytes feature)"))
    if "bnb" not in p:
        err = p.get("bnb_error", "bitsandbytes did not import")
        found = explain_log(err)
        F.append(Finding("bitsandbytes", "error", err.strip().splitlines()[-1] if err.strip() else err,
                         cause=found.cause, fix=found.fix or ["pip install -U bitsandbytes"], label=found.label))
        F.insert(glibc_at, Finding("glibc", "ok", "-".join(platform.libc_ver()) or "not glibc") if linux
                 else _not_on(system, "glibc"))
        return Report(F, mode, p)
    bnb_dir = Path(p["bnb_dir"])
    loaded = p.get("lib_path")
    failed = p.get("lib_class") == "ErrorHandlerMockBNBNativeLibrary"
    if failed and p.get("backend") in ("CPU", "XPU"):
        # 0.50.2 installs the error mock on CPU too when the CPU library fails; the message is generic
        F.append(Finding("bitsandbytes", "error", f"{p['bnb']}, backend {p['backend']}: the CPU library did not load",
                         cause="libbitsandbytes_cpu.so is missing or cannot be loaded",
                         fix=["pip install --force-reinstall bitsandbytes"], label="native_library_unavailable"))
    elif failed:
        F.append(Finding("bitsandbytes", "error", f"{p['bnb']}, backend {p['backend']}: the native library did not "
                         f"load ({p.get('load_error', '')})", label="native_library_unavailable"))
    else:
        F.append(Finding("bitsandbytes", "ok", f"{p['bnb']}, backend {p['backend']}, loaded {loaded}"))
    F.append(check_override(penv.get("BNB_CUDA_VERSION"), cuda, bnb_dir, p.get("torch_cuda")))
    runtimes = find_cuda_runtimes(env)
    n = sum(len(v) for v in runtimes.values())
    where = "; ".join(f"{k}: {len(v)}" for k, v in runtimes.items())
    cudart = next((x for x in needed_libraries(binary) if x.startswith("libcudart")), None) if binary else None
    if cuda and failed and n == 0:
        F.append(Finding("CUDA runtime libraries", "error", f"no libcudart found ({where})",
                         cause="the CUDA runtime bitsandbytes' binary links against is nowhere to be found",
                         fix=(fix_for_missing(cudart or cudart_soname((p.get("torch_cuda") or "12.0").replace(".", "")))
                              if linux else list(_WINDOWS_RUNTIME_FIX)),
                         label="cudart_not_found", evidence=[]))
    else:
        first = next((v[0] for v in runtimes.values() if v), None)
        note = "" if cuda else " (not needed in CPU mode)"
        F.append(Finding("CUDA runtime libraries", "ok",
                         (f"{n} found, e.g. {first} ({where})" if n else f"none found ({where})") + note,
                         evidence=[x for v in runtimes.values() for x in v][:6]))
    if linux and binary is not None and binary.exists():
        # ldd's question, asked the way bitsandbytes meets it: can the loader open each CUDA library it needs?
        opened = open_needed(binary, env)
        missing = {k: v for k, v in opened.items() if v}
        if missing:
            first = next(iter(missing))
            F.append(Finding("runtime dependencies", "error" if cuda else "warning",
                             f"{binary.name} needs {', '.join(missing)}, which the dynamic loader cannot open"
                             + ("" if cuda else " (matters on a GPU machine with this PyTorch)"),
                             cause=f"the loader's answer: {missing[first]}",
                             fix=fix_for_missing(first), label="cuda_runtime_dependency_missing",
                             evidence=list(missing)))
        elif opened:
            F.append(Finding("runtime dependencies", "ok", f"{binary.name}: {', '.join(opened)} all open"))
    lib_for_abi = binary if binary is not None and binary.exists() else (
        Path(loaded) if loaded and Path(loaded).exists() else bnb_dir / "libbitsandbytes_cpu.so")
    if not linux:
        F.insert(glibc_at, _not_on(system, "glibc"))
        F.append(_not_on(system, "libstdc++ ABI"))
    elif lib_for_abi.exists():
        F.insert(glibc_at, glibc_check(lib_for_abi))
        F.append(abi_check(lib_for_abi))
    else:
        F.insert(glibc_at, Finding("glibc", "ok", "-".join(platform.libc_ver()) or "not glibc") if linux
                 else _not_on(system, "glibc"))
    if failed and p.get("backend") not in ("CPU", "XPU"):
        log = "\n".join(x for x in (p.get("log", ""), p.get("load_error", ""), p.get("formatted_error", "")) if x)
        root = explain_log(log)
        root.check = "root cause"
        F.append(root)
    return Report(F, mode, p)


# --------------------------------------------------------------------------- fault injection
FAULTS = {
    "override_invalid": ({"BNB_CUDA_VERSION": "abc"}, (), "BNB_CUDA_VERSION=abc (not digits)"),
    "override_missing": ({"BNB_CUDA_VERSION": "999"}, (), "BNB_CUDA_VERSION=999 (no such binary)"),
    "stripped_ld_library_path": ({}, ("LD_LIBRARY_PATH", "CONDA_PREFIX"), "LD_LIBRARY_PATH and CONDA_PREFIX removed"),
}


HIDDEN_RUNTIME_PREFIX = "vramlab-hidden-cudart-"   # the fake-runtime folders of ``hidden_runtime``


def _torch_cuda_version(timeout: float = 120) -> str | None:
    """PyTorch's CUDA version (``torch.version.cuda``), read in a subprocess so the caller never imports torch."""
    rc, out = run_python("import torch; print('VRAMLAB_TORCH_CUDA=' + str(torch.version.cuda))", timeout=timeout)
    for line in out.splitlines():
        if line.startswith("VRAMLAB_TORCH_CUDA="):
            value = line.split("=", 1)[1]
            return None if value == "None" else value
    return None


def _make_hidden_runtime() -> dict:
    """The ``hidden_runtime`` environment; its fake-runtime folder exists only if this returns."""
    import tempfile

    shipped = shipped_binaries()
    major = (_torch_cuda_version() or "12.0").split(".")[0]
    other = [v for v in shipped if not v.startswith(major)]
    if not other:
        raise ValueError("hidden_runtime needs a shipped binary of another CUDA major version; none found.")
    version = max(other, key=int)
    hide = Path(tempfile.mkdtemp(prefix=HIDDEN_RUNTIME_PREFIX))
    try:
        (hide / cudart_soname(version)).write_text("not a library: hidden by vramlab's fault injection\n")
    except BaseException:
        shutil.rmtree(hide, ignore_errors=True)
        raise
    return {"BNB_CUDA_VERSION": version, "LD_LIBRARY_PATH": str(hide)}


def fault_env(fault: str) -> dict:
    """The environment changes of one of :data:`FAULTS` as a dict for :func:`child_env`
    (``None`` = remove the variable).

    ``hidden_runtime`` (GPU machines) really hides a CUDA runtime: it makes a temporary folder holding
    a fake ``libcudart.so.N`` (a few bytes of text) and puts it first on ``LD_LIBRARY_PATH``, so the
    dynamic loader finds the fake first and fails ("file too short") whether or not the real one is
    installed. The runtime hidden is the one of a shipped binary of *another* CUDA major than
    PyTorch's, forced with ``BNB_CUDA_VERSION``: PyTorch has already loaded its own major's
    ``libcudart`` by the time bitsandbytes loads, and a library already in the process is never
    searched for again, so hiding that one could not break anything. PyTorch's CUDA version is read
    in a subprocess (this process never imports torch). The folder made here is removed at interpreter
    exit; :func:`injected_fault` (what :func:`break_and_diagnose` uses) removes it as soon as it is done."""
    if fault == "hidden_runtime":
        env = _make_hidden_runtime()
        atexit.register(shutil.rmtree, env["LD_LIBRARY_PATH"], ignore_errors=True)
        return env
    if fault not in FAULTS:
        raise ValueError(f"Unknown fault {fault!r}; choose one of: {', '.join([*FAULTS, 'hidden_runtime'])}.")
    env, unset, _ = FAULTS[fault]
    out = dict(env)
    out.update({k: None for k in unset})
    return out


@contextlib.contextmanager
def injected_fault(fault: str):
    """``with injected_fault(fault) as env:`` the :func:`fault_env` dict, with any temporary folder it made
    (``hidden_runtime``) removed when the block ends, whether it ends normally or by an exception."""
    if fault != "hidden_runtime":
        yield fault_env(fault)
        return
    env = _make_hidden_runtime()
    try:
        yield env
    finally:
        shutil.rmtree(env["LD_LIBRARY_PATH"], ignore_errors=True)


_NATIVE_CALL = r'''
import logging, sys
logging.basicConfig(level=logging.WARNING, format="%(message)s")
import torch, bitsandbytes as bnb
from bitsandbytes import cextension as ce
print("bitsandbytes", bnb.__version__, "backend", ce.BNB_BACKEND, "library", type(ce.lib).__name__)
try:
    ce.lib.cquantize_blockwise_fp16_nf4  # the first native call a 4-bit load makes on CUDA
    if isinstance(ce.lib, ce.ErrorHandlerMockBNBNativeLibrary):
        ce.lib.cquantize_blockwise_fp16_nf4()
    print("native library OK:", getattr(getattr(ce.lib, "_lib", None), "_name", None))
except Exception as exc:
    print(f"{type(exc).__name__}: {exc}")
    sys.exit(1)
'''


@dataclass
class FaultRun:
    """One fault injected into a subprocess: what was changed, what bitsandbytes printed, and the
    doctor's report of that environment."""

    fault: str
    env: dict
    returncode: int
    output: str
    report: Report

    def _repr_html_(self) -> str:
        return (f"<p><b>fault:</b> {html.escape(self.fault)} <code>{html.escape(str(self.env))}</code>, exit code "
                f"{self.returncode}</p><pre>{html.escape(self.output[-3000:])}</pre>" + self.report._repr_html_())


def break_and_diagnose(fault: str, timeout: float = 180) -> FaultRun:
    """Import bitsandbytes in a subprocess under the broken environment ``fault`` (see
    :data:`FAULTS`; ``hidden_runtime`` on GPU machines), make one native call, capture the output,
    and run :func:`diagnose` on the same environment. The caller's process is never changed."""
    with injected_fault(fault) as env:   # a fake-runtime folder is removed when done (every path)
        rc, out = run_python(_NATIVE_CALL, env=env, timeout=timeout)
        return FaultRun(fault, env, rc, out, diagnose(env))


# --------------------------------------------------------------------------- what a GPU machine would print
SCENARIOS = {
    "override_invalid": "BNB_CUDA_VERSION=abc on a CUDA 12.8 machine",
    "override_missing": "BNB_CUDA_VERSION=999 on a CUDA 12.8 machine",
    "no_binary_for_cuda": "PyTorch built for CUDA 10.2: no same-major binary is shipped",
    "runtime_missing": "a shipped CUDA binary loaded where its libcudart.so.N cannot be found (a real dlopen)",
    "old_gpu": "compute capability 5.2 with PyTorch for CUDA 12.8 (python -m bitsandbytes diagnostics)",
    "slow_int8_gpu": "compute capability 7.0 with PyTorch for CUDA 12.8 (python -m bitsandbytes diagnostics)",
    "cudart_search_empty": "python -m bitsandbytes runtime search with LD_LIBRARY_PATH and CONDA_PREFIX stripped",
    "stale_override": "PyTorch for CUDA 13.0 with BNB_CUDA_VERSION=128 left from an older setup, on a machine "
                      "without a CUDA 12 runtime (a real dlopen of the shipped cuda128 binary)",
}
#: Lab 07's Exercise 5 log: simulated like the others, but not listed in :data:`SCENARIOS`, whose one-line
#: descriptions would state its cause (the corpus entry is withheld from ``logs.load_corpus`` for the same reason).
_WITHHELD_SCENARIOS = {
    "unbuilt_checkout": "a git clone of bitsandbytes installed with pip install -e . where cmake never ran (no "
                        "native library in its package folder), PyTorch built from source for CUDA 12.2",
}

_SIMULATE = r'''
import ctypes, logging, os, sys
logging.basicConfig(level=logging.WARNING, format="%(message)s", stream=sys.stdout)
from bitsandbytes import cextension as ce
from bitsandbytes.cuda_specs import CUDASpecs
from bitsandbytes.diagnostics import cuda as diag
scenario = sys.argv[1]
# What cextension sees on a GPU machine with PyTorch for CUDA 12.8 (10.2 in no_binary_for_cuda); set
# only in this subprocess: the backend name and the version the error formatter reports.
ce.BNB_BACKEND = "CUDA"
ce.get_cuda_version_tuple = (lambda: (10, 2)) if scenario == "no_binary_for_cuda" else (lambda: (12, 8))
def first_call(exc_text):
    print(f"bitsandbytes library load error: {exc_text}")
    mock = ce.ErrorHandlerMockBNBNativeLibrary(exc_text)
    try:
        mock.cquantize_blockwise_fp16_nf4()
    except RuntimeError as e:
        print(f"RuntimeError: {e}")
def load(specs):
    try:
        path = ce.get_cuda_bnb_library_path(specs)
        if not path.exists():
            raise RuntimeError(f"No compatible {ce.BNB_BACKEND} binary found at {path}")  # cextension.get_native_library
        ctypes.cdll.LoadLibrary(str(path))
        print("loaded", path)
    except Exception as e:
        first_call(str(e))
s128 = CUDASpecs((8, 0), "128", (12, 8))
if scenario == "runtime_missing":
    # a shipped binary whose CUDA runtime (its NEEDED libcudart.so.N) this machine's loader cannot
    # resolve, newest first; asking the loader itself (dlopen) is the only honest test of "missing"
    import re
    from pathlib import Path
    shipped = []
    for p in Path(ce.__file__).parent.glob("libbitsandbytes_cuda*.so"):
        m = re.fullmatch(r"libbitsandbytes_cuda(\d+)\.so", p.name)
        if m:
            shipped.append((int(m.group(1)), m.group(1), p))
    pick, resolved = None, []
    for _, ver, p in sorted(shipped, reverse=True):
        needed = sorted({n.decode() for n in re.findall(rb"libcudart\.so\.\d+(?:\.\d+)?(?=\x00)", p.read_bytes())})
        for soname in needed:
            try:
                ctypes.CDLL(soname)
                resolved.append(soname)
            except OSError:
                pick = (ver, p, soname)
                break
        if pick:
            break
    if pick is None:
        print("skipped: the CUDA runtime of every shipped binary loads on this machine "
              f"({', '.join(sorted(set(resolved))) or 'none named'}), so there is no missing runtime to show")
        sys.exit(0)
    ver, p, soname = pick
    print(f"chosen: {p.name}, which needs {soname}; the dynamic loader cannot find it on this machine")
    ce.get_cuda_version_tuple = lambda: (int(ver[:-1]), int(ver[-1]))
    load(CUDASpecs((8, 0), ver, (int(ver[:-1]), int(ver[-1]))))
elif scenario in ("override_invalid", "override_missing"):
    load(s128)
elif scenario == "stale_override":
    ce.get_cuda_version_tuple = lambda: (13, 0)
    load(CUDASpecs((8, 0), "130", (13, 0)))
elif scenario == "unbuilt_checkout":
    # bitsandbytes 0.50.2 cextension.get_cuda_bnb_library_path: with no packaged library in PACKAGE_DIR it returns
    # the exact version's path, unselected (12.2 -> cuda122, although the wheel's rule would give cuda121); the
    # error formatter then prints its "checked the code out from source ... CPU-only" advice (cextension.py,
    # _format_lib_error_message: its "binary not found" test never matches 0.50's "No compatible ... found")
    from pathlib import Path
    ce.PACKAGE_DIR = Path("/home/ana/src/bitsandbytes/bitsandbytes")   # the clone's package folder: nothing built
    ce.get_cuda_version_tuple = lambda: (12, 2)
    load(CUDASpecs((8, 0), "122", (12, 2)))
elif scenario == "no_binary_for_cuda":
    load(CUDASpecs((7, 5), "102", (10, 2)))
elif scenario == "old_gpu":
    diag.print_diagnostics(CUDASpecs((5, 2), "128", (12, 8)))
elif scenario == "slow_int8_gpu":
    diag.print_diagnostics(CUDASpecs((7, 0), "128", (12, 8)))
elif scenario == "cudart_search_empty":
    diag.print_runtime_diagnostics()
'''


def simulate(scenario: str, timeout: float = 120) -> str:
    """What the installed bitsandbytes prints on a GPU machine in ``scenario`` (see
    :data:`SCENARIOS`), rendered by its own functions in a subprocess with the given CUDA version and
    compute capability (only ``cextension.BNB_BACKEND`` is set to ``"CUDA"``, as on a GPU). The
    ``runtime_missing`` case picks the newest shipped CUDA binary whose ``libcudart.so.N`` the dynamic
    loader cannot resolve on this machine, names it on a first ``chosen: ...`` line and really dlopens
    it; where every runtime resolves it prints one ``skipped: ...`` line instead. Returns the text."""
    if scenario not in SCENARIOS and scenario not in _WITHHELD_SCENARIOS:
        raise ValueError(f"Unknown scenario {scenario!r}; choose one of: {', '.join(SCENARIOS)}.")
    # a minimal environment: the same on every machine, nothing of the caller's paths leaks in
    env = {k: v for k, v in child_env().items() if k in ("PATH", "HOME", "PYTHONPATH", "OMP_NUM_THREADS", "LANG")}
    if scenario == "override_invalid":
        env["BNB_CUDA_VERSION"] = "abc"
    elif scenario == "override_missing":
        env["BNB_CUDA_VERSION"] = "999"
    elif scenario == "stale_override":
        env["BNB_CUDA_VERSION"] = "128"
    proc = subprocess.run([sys.executable, "-c", _SIMULATE, scenario], env=env, capture_output=True,
                          text=True, timeout=timeout)
    noise = ("Failed to load CPU gemm_4bit_forward",)  # a CPU-kernel notice of this CPU machine, not of the scenario
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if not ln.startswith(noise)]
    return "\n".join(lines).strip()


def version_mismatch_hint_fires(error_text: str, backend: str = "CUDA") -> bool:
    """bitsandbytes 0.50.2's own test for its "VERSION MISMATCH" advice (``cextension.py``,
    ``_format_lib_error_message``): ``f"{BNB_BACKEND} binary not found" in original_error``.
    A regression: from 0.46.0 to 0.49.2 ``get_native_library`` raised ``"Configured CUDA binary not found
    at ..."`` and the advice appeared; 0.50.0 reworded the raise to ``"No compatible CUDA binary found at
    ..."`` and left the test as it was, so from 0.50.0 on it is never true (git tags 0.46.0 - 0.50.1)."""
    return f"{backend} binary not found" in error_text


def _read_stdin() -> str:
    """Standard input as text: read as bytes and decoded as UTF-8 with ``errors="replace"``, so a log
    with stray bytes (a Windows code page, a truncated multi-byte character) is still explained."""
    stream = sys.stdin
    if stream is None:
        raise OSError("no standard input")
    raw = getattr(stream, "buffer", None)
    if raw is None:   # a text-only stream (a test's StringIO): already decoded
        return stream.read()
    return raw.read().decode("utf-8", errors="replace")


def doctor_main(as_json: bool = False, log: str | None = None) -> int:
    """``vramlab doctor``: print the report (or explain a log file, ``-`` for stdin); 1 on errors."""
    if log is not None:
        try:
            text = _read_stdin() if log == "-" else Path(log).read_text(errors="replace")
        except (OSError, ValueError) as exc:
            # exit 2, not 1: 1 means "the log shows errors", and an unreadable input shows nothing
            where = "standard input" if log == "-" else f"the log file {log!r}"
            print(f"error: cannot read {where} ({getattr(exc, 'strerror', None) or exc}); "
                  "pass a readable file path or pipe the log into '-'.", file=sys.stderr)
            return 2
        from vramlab.bnb.logs import _is_withheld_log

        if _is_withheld_log(text):
            print("vramlab doctor: this is lab 07's Exercise 5 log, which you diagnose yourself; the doctor's reading "
                  "of it prints in the notebook once Exercise 5 passed or was revealed (after_diagnosis).",
                  file=sys.stderr)
            return 2
        found = explain_log(text)
        print(json.dumps(found.to_dict(), indent=2) if as_json else found.text())
        return 1 if found.status == "error" else 0
    report = diagnose()
    print(report.to_json() if as_json else report.text())
    return 0 if report.ok else 1


__all__ = ["Report", "diagnose", "probe", "check_override", "predict_binaries", "needed_libraries", "open_needed",
           "fix_for_missing", "soname_major", "system_glibc", "glibc_check", "cudart_soname", "binary_archs",
           "binary_min_compute_capability", "find_cuda_runtimes", "abi_check", "system_libstdcxx",
           "shipped_binaries", "FAULTS", "fault_env", "injected_fault", "HIDDEN_RUNTIME_PREFIX",
           "break_and_diagnose", "FaultRun", "SCENARIOS", "simulate",
           "version_mismatch_hint_fires", "doctor_main", "child_env", "run_python"]
