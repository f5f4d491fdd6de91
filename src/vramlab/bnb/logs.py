"""Read a bitsandbytes log and name its root cause: :func:`explain_log` -> :class:`Finding`.

bitsandbytes has printed two families of setup logs:

* the old ``CUDA SETUP: ...`` lines of ``bitsandbytes/cuda_setup/main.py`` (releases 0.35 - 0.42),
  which end in ``RuntimeError: CUDA Setup failed despite GPU being available`` (``cextension.py``);
* the current messages of ``bitsandbytes/cextension.py`` and ``diagnostics/`` (0.43 and later;
  the installed 0.50.2 is the reference here): ``No compatible CUDA binary found at ...``,
  ``CUDA SETUP ERROR: Missing dependency: ...``, ``Attempted to use bitsandbytes native library
  functionality but it's not available.``, ``BNB_CUDA_VERSION='abc': value must be digits only``.

A log usually shows several lines; most are *symptoms* (``Defaulting to libbitsandbytes_cpu.so``,
``Compute capability < 7.5``, the final ``CUDA Setup failed``). :func:`explain_log` tests the
causes in a fixed order, root causes first (see ``_RULES``), so the cause that explains the other
lines wins. Unknown text gives the label ``other`` with the most useful next step; it never raises.

The labelled corpus of real logs (old and current, each with its source) is
``vramlab/results/bnb_logs.json``; :func:`load_corpus` reads it.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field

LABELS = (
    "cudart_not_found",
    "libstdcxx_abi",
    "windows_paths",
    "no_gpu_cpu_library",
    "compute_capability_low",
    "binary_missing_for_cuda_version",
    "native_library_unavailable",
    "cuda_runtime_dependency_missing",
    "bnb_cuda_version_override",
    "other",
)
STATUSES = ("ok", "warning", "error")

# The bitsandbytes installation guide, v0.50.0 (huggingface.co/docs/bitsandbytes/v0.50.0/installation):
# "supported on NVIDIA GPUs with Compute Capability 6.0+" (8-bit optimizers/quantization, NF4/FP4), and
# LLM.int8() 7.5+ (in 0.50.2's cuda_specs.py: ``CUDASpecs.has_imma`` is ``highest_compute_capability >= (7, 5)``).
# The minimum moved over time: Kepler (3.x) binaries left PyPI in 0.39.1 (guide v0.43.0) and Maxwell (5.x)
# in 0.48.0 (guide v0.48.1: "Maxwell support is not included in PyPI distributions from v0.48.0 on"),
# so a 5.x GPU in an old 0.4x log was not below that release's minimum.
MIN_COMPUTE_CAPABILITY = (6, 0)
MIN_COMPUTE_CAPABILITY_BEFORE_048 = (5, 0)
FAST_INT8_COMPUTE_CAPABILITY = (7, 5)


@dataclass
class Finding:
    """One diagnosis: what was checked, its status (``ok`` / ``warning`` / ``error``), the cause and
    the fix (shell commands or one instruction each), plus the evidence (the log lines or the
    observed value) it rests on. ``label`` is one of :data:`LABELS` for log findings (``""`` for
    a machine check that is fine)."""

    check: str
    status: str
    detail: str
    cause: str = ""
    fix: list[str] = field(default_factory=list)
    label: str = ""
    evidence: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"Finding.status must be one of {STATUSES}, got {self.status!r}.")

    def to_dict(self) -> dict:
        return asdict(self)

    def text(self) -> str:
        mark = {"ok": "[ok]   ", "warning": "[warn]  ", "error": "[error] "}[self.status]
        lines = [f"{mark}{self.check}: {self.detail}"]
        if self.label and self.label not in ("", "ok"):
            lines.append(f"        label: {self.label}")
        if self.cause:
            lines.append(f"        cause: {self.cause}")
        for cmd in self.fix:
            lines.append(f"        fix:   {cmd}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text()


# --------------------------------------------------------------------------- log parsing helpers
_MISSING_VERSION = re.compile(
    r"(?P<lib>[^\s:`']*lib(?:stdc\+\+|c)\.so\.6)?:?\s*version\s+[`'‘]?(?P<sym>(?:GLIBCXX|CXXABI|GLIBC)_[0-9.]+)"
    r"[`'’]?\s+not found(?:\s+\(required by\s+(?P<by>[^)]+)\))?")
# glibc's loader messages (elf/dl-load.c): not found, or found but unusable ("file too short" / "invalid
# ELF header": a truncated or fake file earlier on the search path shadows the real library)
_CANNOT_OPEN = re.compile(r"(?P<lib>[\w.+-]+\.so[\w.]*): (?:cannot open shared object file|file too short|"
                          r"invalid ELF header)")
_CC = re.compile(r"(?:Compute Capability|compute capability among GPUs detected|Compute capability)[:\s]+\(?"
                 r"(?P<maj>\d+)(?:\.|,\s*)(?P<min>\d+)\)?", re.IGNORECASE)
_BNB_BINARY = re.compile(r"libbitsandbytes_(?P<kind>cuda|rocm|cpu)(?P<ver>\d*)(?P<tail>[\w]*)\.(?:so|dll|dylib)")


def missing_versions(text: str) -> list[dict]:
    """Every ``version `X' not found`` in ``text``: ``[{"symbol", "library", "required_by"}]``.

    ``symbol`` is the versioned symbol set the loader could not find (``CXXABI_1.3.9``,
    ``GLIBCXX_3.4.29``, ``GLIBC_2.34``); ``library`` the system library that lacks it
    (``/lib64/libstdc++.so.6``); ``required_by`` the binary that needs it.
    """
    if not isinstance(text, str):
        raise TypeError(f"missing_versions(text): text must be a str (a log), got {type(text).__name__}.")
    out = []
    for m in _MISSING_VERSION.finditer(text):
        out.append({"symbol": m.group("sym"), "library": m.group("lib") or "",
                    "required_by": (m.group("by") or "").strip()})
    return out


def compute_capabilities(text: str) -> list[tuple[int, int]]:
    """The compute capabilities a log reports (``Highest Compute Capability: 3.7`` -> ``(3, 7)``)."""
    return [(int(m.group("maj")), int(m.group("min"))) for m in _CC.finditer(text)]


def bnb_binaries(text: str) -> list[str]:
    """Names of bitsandbytes native libraries mentioned in a log (``libbitsandbytes_cuda121.so``)."""
    return [m.group(0) for m in _BNB_BINARY.finditer(text)]


def _lines(text: str, *needles: str) -> list[str]:
    low = [n.lower() for n in needles]
    return [ln.strip() for ln in text.splitlines() if any(n in ln.lower() for n in low)][:4]


# --------------------------------------------------------------------------- the rules, root causes first
FIXES = {
    "windows_paths": [
        "pip install -U bitsandbytes   # 0.43+ ships native Windows (.dll) builds; old releases only had Linux .so files",
        "or run the project inside WSL2 (wsl --install), where the Linux wheels work",
    ],
    "bnb_cuda_version_override": [
        "unset BNB_CUDA_VERSION   # let bitsandbytes pick the binary that matches torch.version.cuda",
        "or set it to digits naming a shipped binary whose CUDA runtime is installed, e.g. export BNB_CUDA_VERSION=126",
        "python -m bitsandbytes   # check which libbitsandbytes_cuda*.so it loads now",
    ],
    "compute_capability_low": [
        "nvidia-smi --query-gpu=name,compute_cap --format=csv   # bitsandbytes needs 6.0+, fast LLM.int8() 7.5+",
        "use a newer GPU (e.g. a T4 is 7.5), or load the model without bitsandbytes (bf16/fp16) or on CPU",
    ],
    "libstdcxx_abi": [
        "strings /lib64/libstdc++.so.6 | grep -E 'GLIBCXX_|CXXABI_'   # what the system library provides",
        "conda install -c conda-forge libstdcxx-ng && export LD_LIBRARY_PATH=$CONDA_PREFIX/lib:$LD_LIBRARY_PATH",
        "or build bitsandbytes against this system: cmake -DCOMPUTE_BACKEND=cuda -S . && make && pip install -e .",
    ],
    "cuda_runtime_dependency_missing": [
        "ldd $(python -c 'import bitsandbytes,glob,os;print(glob.glob(os.path.dirname(bitsandbytes.__file__)+\"/libbitsandbytes_cuda*.so\")[-1])') | grep 'not found'",
        "pip install nvidia-cuda-runtime-cu12 nvidia-cublas-cu12   # or the matching CUDA toolkit",
        "export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:/usr/local/cuda/lib64   # where libcudart.so.NN lives",
    ],
    "cudart_not_found": [
        "find / -name 'libcudart.so*' 2>/dev/null   # is a CUDA runtime installed at all?",
        "export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:/usr/local/cuda/lib64   # add the folder that holds it (and to ~/.bashrc)",
        "pip install -U bitsandbytes   # current releases use the CUDA runtime that ships with PyTorch",
    ],
    "binary_missing_for_cuda_version": [
        "python -c \"import torch; print(torch.version.cuda)\"   # the CUDA version bitsandbytes looks for",
        "pip install -U bitsandbytes   # newer releases ship binaries for newer CUDA versions",
        "ls $(python -c 'import bitsandbytes,os;print(os.path.dirname(bitsandbytes.__file__))')/libbitsandbytes_*   # what is shipped",
        "or compile for your CUDA: cmake -DCOMPUTE_BACKEND=cuda -S . && make && pip install -e .",
    ],
    "no_gpu_cpu_library": [
        "python -c \"import torch; print(torch.__version__, torch.version.cuda, torch.cuda.is_available())\"",
        "nvidia-smi   # is a driver installed and a GPU visible?",
        "pip install torch --index-url https://download.pytorch.org/whl/cu128   # a CUDA build of PyTorch, if you meant to use the GPU",
    ],
    "native_library_unavailable": [
        "python -m bitsandbytes   # prints why the native library did not load",
        "vramlab doctor   # checks the machine and names the cause",
        "scroll up to the first error before this message: that line is the cause",
    ],
    "other": [
        "vramlab doctor   # checks torch, the driver, the GPU, the native library and libstdc++",
        "python -m bitsandbytes   # and read the first error it prints",
    ],
}

CAUSES = {
    "windows_paths": "an old bitsandbytes built only for Linux runs on native Windows: it searches .so files and "
                     "Linux folders, finds nothing and falls back to a CPU library (the WindowsPath lines show it)",
    "bnb_cuda_version_override": "BNB_CUDA_VERSION overrides the automatic choice of the native library; the value "
                                 "is invalid or names a binary that is not shipped or whose CUDA runtime is missing",
    "compute_capability_low": "the GPU's compute capability is below what bitsandbytes supports (6.0 for 4/8-bit, "
                              "7.5 for the fast LLM.int8() matmul); no binary or kernel exists for it",
    "libstdcxx_abi": "the system libstdc++ (or glibc) is older than the one bitsandbytes' native library was built "
                     "with: the dynamic loader cannot find a versioned symbol it needs",
    "cuda_runtime_dependency_missing": "the bitsandbytes CUDA binary exists, but a CUDA library it links against "
                                       "(libcudart / libcublas / libcusparse / libnvJitLink) cannot be found by the "
                                       "dynamic loader",
    "cudart_not_found": "the CUDA runtime library libcudart.so is not in any searched path (LD_LIBRARY_PATH, "
                        "CONDA_PREFIX/lib, /usr/local/cuda/lib64)",
    "binary_missing_for_cuda_version": "this bitsandbytes release ships no native binary for the CUDA version PyTorch "
                                       "was built with, so it cannot load its GPU kernels",
    "no_gpu_cpu_library": "PyTorch sees no usable CUDA GPU (CPU-only build or no driver), so bitsandbytes loaded its "
                          "CPU library: GPU quantization is unavailable",
    "native_library_unavailable": "the native library did not load and the log does not show why; this message is a "
                                  "symptom printed at the first native call",
    "other": "nothing in this text matches a known bitsandbytes setup failure",
}


def _finding(label: str, status: str, detail: str, evidence: list[str], cause: str = "",
             fix: list[str] | None = None) -> Finding:
    return Finding(check="log", status=status, detail=detail, cause=cause or CAUSES[label],
                   fix=list(fix if fix is not None else FIXES[label]), label=label, evidence=evidence)


def _rule_windows(t: str) -> Finding | None:
    low = t.lower()
    if "windowspath" in low or ("c:\\" in low and (".so" in low or "ldconfig" in low)):
        return _finding("windows_paths", "error", "a Linux-only bitsandbytes on native Windows",
                        _lines(t, "WindowsPath", "C:\\"))
    return None


_OVERRIDE_PATTERNS = (
    re.compile(r"BNB_CUDA_VERSION='(?P<value>[^']*)': value must be digits"),        # 0.50 cextension.py
    re.compile(r"BNB_CUDA_VERSION=(?P<value>\S+) environment variable detected"),    # 0.50 cextension.py
    re.compile(r"Loading CUDA version: BNB_CUDA_VERSION=(?P<value>\S*)"),            # 0.41 cuda_setup/main.py
    re.compile(r"Manual override via BNB_CUDA_VERSION[\s\S]*?Loading: libbitsandbytes_cuda(?P<value>\w+?)\."),  # 0.42
)


def override_value(text: str) -> str | None:
    """The ``BNB_CUDA_VERSION`` value a log shows in effect (``None`` when it shows no override)."""
    for pat in _OVERRIDE_PATTERNS:
        m = pat.search(text)
        if m:
            return m.group("value")
    return None


def _rule_override(t: str) -> Finding | None:
    value = override_value(t)
    if value is None:
        return None
    ev = _lines(t, "BNB_CUDA_VERSION")
    if value and not value.isdigit():
        return _finding("bnb_cuda_version_override", "error",
                        f"BNB_CUDA_VERSION={value!r} is not digits only; bitsandbytes refuses to load its library", ev,
                        cause=f"BNB_CUDA_VERSION must be digits such as 124 (CUDA 12.4); {value!r} is not, so "
                              "bitsandbytes 0.50 raises before loading any native library (cextension.py)")
    failed = any(s in t for s in ("No compatible", "not found", "cannot open shared object", "not available",
                                  "Setup Failed", "setup failed", "Could not find"))
    if failed:
        return _finding("bnb_cuda_version_override", "error",
                        f"BNB_CUDA_VERSION={value or '?'} forced a library that could not be loaded", ev)
    return _finding("bnb_cuda_version_override", "warning",
                    f"BNB_CUDA_VERSION={value or '?'} overrides the automatic library choice", ev,
                    cause="an override is active; it is only right when that CUDA runtime is installed and "
                          "torch.version.cuda cannot be matched")


def _rule_cc_too_low(t: str) -> Finding | None:
    ccs = compute_capabilities(t)
    old_format = "CUDA SETUP" in t or "CUDA_SETUP" in t  # releases up to 0.42, long before 0.48
    floor = MIN_COMPUTE_CAPABILITY_BEFORE_048 if old_format else MIN_COMPUTE_CAPABILITY
    low = [cc for cc in ccs if cc < floor]
    if low:
        when = ("older than any GPU the PyPI binaries of that release were built for (Kepler 3.x left in 0.39.1)"
                if old_format else "below bitsandbytes' minimum 6.0 (Maxwell 5.x left the PyPI builds in 0.48.0)")
        return _finding("compute_capability_low", "error",
                        f"GPU compute capability {low[0][0]}.{low[0][1]} is {when}", _lines(t, "compute capability"))
    return None


def _rule_abi(t: str) -> Finding | None:
    missing = missing_versions(t)
    if not missing:
        return None
    syms = ", ".join(dict.fromkeys(m["symbol"] for m in missing))
    lib = missing[0]["library"] or "the system C++ runtime"
    glibc_only = all(m["symbol"].startswith("GLIBC_") for m in missing)
    cause = (f"{lib} lacks {syms}, which the native library was built against: the system "
             + ("glibc is too old for this binary" if glibc_only else "libstdc++ is older than the compiler that "
                "built bitsandbytes"))
    return _finding("libstdcxx_abi", "error", f"missing {syms} in {lib}", _lines(t, "not found (required by"),
                    cause=cause)


def _cannot_open(t: str) -> list[str]:
    return [m.group("lib") for m in _CANNOT_OPEN.finditer(t)]


def _rule_dependency(t: str) -> Finding | None:
    libs = [lib for lib in _cannot_open(t) if not lib.startswith("libbitsandbytes")]
    m = re.search(r"Missing dependency:\s*(\S+)", t)
    if m and m.group(1) not in libs:
        libs.insert(0, m.group(1))
    if not libs and "could not be read from path" not in t:
        return None
    name = libs[0] if libs else "libcudart.so"
    return _finding("cuda_runtime_dependency_missing", "error", f"{name} cannot be opened by the dynamic loader",
                    _lines(t, "cannot open shared object", "Missing dependency", "could not be read",
                           "file too short", "invalid ELF header"))


def _cudart_unresolved(t: str) -> bool:
    low = t.lower()
    searched = ("libcudart.so not found" in low or "cuda runtime library was not detected" in low
                or "runtime files not found in any environmental path" in low)
    found = ("cuda runtime path found" in low or "possible options found for libcudart" in low
             or re.search(r"loading binary \S*libbitsandbytes_cuda", low) is not None)
    return searched and not found


def _rule_cudart(t: str) -> Finding | None:
    if _cudart_unresolved(t):
        return _finding("cudart_not_found", "error", "libcudart.so was not found in any searched path",
                        _lines(t, "libcudart", "runtime library was not detected", "runtime files not found"))
    return None


def _rule_binary_missing(t: str) -> Finding | None:
    patterns = ("Required library version not found", "Could not find the bitsandbytes CUDA binary",
                "No compatible CUDA binary found", "No compatible CUDA library found", "VERSION MISMATCH",
                "No compatible ROCm binary found")
    cannot = [lib for lib in _cannot_open(t) if lib.startswith("libbitsandbytes_cuda")]
    if not (any(p in t for p in patterns) or cannot):
        return None
    names = [b for b in bnb_binaries(t) if "_cpu" not in b]
    wanted = names[0] if names else "the CUDA binary"
    return _finding("binary_missing_for_cuda_version", "error",
                    f"{wanted} is not shipped with this bitsandbytes", _lines(t, *patterns, "cannot open"))


def _rule_cpu_library(t: str) -> Finding | None:
    needles = ("compiled without GPU support", "not available in CPU-only version", "No GPU detected",
               "No CUDA, ROCm, or XPU detected", "libcuda.so not found", "main CUDA library was not detected",
               "running as CPU-only")
    if not any(n.lower() in t.lower() for n in needles):
        return None
    if "CPU library loaded successfully" in t:
        return _finding("no_gpu_cpu_library", "ok", "no GPU: the CPU library loaded (expected on a CPU machine)",
                        _lines(t, "No CUDA, ROCm"),
                        cause="PyTorch sees no CUDA, ROCm or XPU device, so bitsandbytes uses its CPU backend; "
                              "4-bit and 8-bit layers still work on CPU in 0.49+",
                        fix=["nothing to fix on a CPU machine; on a GPU machine check nvidia-smi and "
                             "torch.cuda.is_available()"])
    return _finding("no_gpu_cpu_library", "error", "bitsandbytes fell back to its CPU library",
                    _lines(t, *needles))


def _rule_native(t: str) -> Finding | None:
    needles = ("native library functionality but it's not available", "CUDA Setup failed despite GPU",
               "Something unexpected happened", "CUDA SETUP: Setup Failed", "library load error",
               "Failed to load CPU-only bitsandbytes library")
    sym = re.search(r"(?:function|undefined symbol:?)\s*'?(c\w+)'?(?: not found)?", t)
    if any(n.lower() in t.lower() for n in needles) or (sym and "bitsandbytes" in t):
        return _finding("native_library_unavailable", "error", "the native library is not available",
                        _lines(t, *needles, "undefined symbol", "function 'c"))
    return None


def _rule_cc_slow(t: str) -> Finding | None:
    ccs = compute_capabilities(t)
    if "Compute capability < 7.5" in t or any(cc < FAST_INT8_COMPUTE_CAPABILITY for cc in ccs):
        return _finding("compute_capability_low", "warning",
                        "compute capability below 7.5: only the slow LLM.int8() matmul", _lines(t, "capability"),
                        cause="GPUs below compute capability 7.5 have no int8 tensor cores; bitsandbytes works but "
                              "8-bit matmul is slow (4-bit is the usual choice there)",
                        fix=["use load_in_4bit=True on this GPU, or a GPU with compute capability 7.5+"])
    return None


# Root causes first: each later rule describes something the earlier ones would explain.
_RULES = (_rule_windows, _rule_override, _rule_cc_too_low, _rule_abi, _rule_dependency, _rule_cudart,
          _rule_binary_missing, _rule_cpu_library, _rule_native, _rule_cc_slow)


def explain_log(text) -> Finding:
    """Name the root cause of a bitsandbytes log (old ``CUDA SETUP:`` or current format).

    Returns a :class:`Finding` with ``label`` (one of :data:`LABELS`), ``status``, ``cause``, ``fix``
    (commands) and ``evidence`` (the lines it rests on). Never raises on text: anything it does not
    recognise is ``other`` with the next step to take. ``text`` that is not a string (bytes are
    decoded) raises one ``TypeError``.
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    if not isinstance(text, str):
        raise TypeError(f"explain_log(text): text must be the log as a str, got {type(text).__name__}.")
    for rule in _RULES:
        try:
            found = rule(text)
        except Exception:  # noqa: BLE001 - a weird log must never crash the explainer
            found = None
        if found is not None:
            return found
    snippet = text.strip().splitlines()[:1]
    return _finding("other", "warning", "no known bitsandbytes setup failure in this text", snippet)


# --------------------------------------------------------------------------- the corpus
def load_corpus() -> list[dict]:
    """The labelled log corpus: ``[{"id", "text", "label", "format", "source"}]`` (old and current)."""
    from importlib import resources

    return json.loads((resources.files("vramlab") / "results" / "bnb_logs.json").read_text())["logs"]


def corpus_entry(entry_id: str) -> dict:
    """One corpus entry by id (``ValueError`` naming the ids when unknown)."""
    logs = load_corpus()
    for e in logs:
        if e["id"] == entry_id:
            return e
    raise ValueError(f"No corpus log with id {entry_id!r}; ids: {', '.join(e['id'] for e in logs)}.")


__all__ = ["LABELS", "Finding", "explain_log", "missing_versions", "compute_capabilities", "bnb_binaries",
           "load_corpus", "corpus_entry", "override_value", "MIN_COMPUTE_CAPABILITY", "MIN_COMPUTE_CAPABILITY_BEFORE_048",
           "FAST_INT8_COMPUTE_CAPABILITY"]
