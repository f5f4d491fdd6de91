"""A real JupyterHub room on localhost, 3 learners in headless Chromium, torn down on every path.

The hub is ``workshop/jupyterhub_config.py`` (SimpleLocalProcessSpawner, shared password, the progress board,
the idle culler) with the room's model cache filled once from this machine's cache and made read-only, as
``vramlab workshop serve`` does. ``tests/browser/hub_learners.mjs`` then logs 3 learners in through the hub's
login page at the same time; each one's server opens lab 00, and they run it up to its second check, typing
their answers (right; wrong then right; left undone). The test asserts that

* each learner's server and kernel got the room's environment: ``VRAMLAB_GPU_FRACTION``, the shared
  ``VRAMLAB_CACHE``, ``VRAMLAB_PROGRESS_DIR``, ``HF_HUB_OFFLINE=1``, their own HOME with the labs copied in;
* the model loaded from the shared cache and nothing was fetched again: the cache's files, sizes, mtimes and
  modes are unchanged, nothing was added, and every package index the learners could reach is a dead port;
* the checks' verdicts reached the board: ``/services/progress`` (admin) and ``vramlab progress`` list the 3
  learners with each check's state and attempts; a learner is refused the board;
* the hub, the proxy, the services, the servers and their kernels are gone afterwards, and the room folder too.

Needs JupyterHub (>= 5.1) + jupyterhub-idle-culler in the test's own environment (or ``VRAMLAB_HUB_BIN``, a
venv's bin/ holding ``jupyterhub``), ``configurable-http-proxy`` (PATH, ``VRAMLAB_CHP_BIN``, or the ``.bin``
beside playwright-core in ``NODE_PATH``), Node.js, Chromium (``CHROMIUM``) and playwright-core (``NODE_PATH``),
and the converted model in the cache (``vramlab fetch-model``). Missing pieces skip with the reason;
``VRAMLAB_HUB_REQUIRED=1`` (set by ``.ci/run``) turns those skips into failures. ``VRAMLAB_HUB_OUT`` keeps the
screenshots and the hub's log there. Run (about a minute):

    NODE_PATH=/tmp/pw/node_modules python -m pytest -p no:nbval -o addopts="" -m hub tests/test_workshop_hub.py
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import pytest

pytestmark = pytest.mark.hub

ROOT = Path(__file__).resolve().parents[1]
LEARNERS = ["ana", "bo", "cy"]
FRACTION = "0.3"  # the --gpu-fraction override; the hub's own environment does not reach the servers
DEAD = "http://127.0.0.1:9"  # a package index / hub endpoint nothing listens on: any download attempt fails


def _missing(reason: str):
    if os.environ.get("VRAMLAB_HUB_REQUIRED") == "1":
        pytest.fail(f"VRAMLAB_HUB_REQUIRED=1 but {reason}")
    pytest.skip(reason)


def _find(name: str, env_dir: str, extra: list[Path] = ()) -> str | None:
    folders = [os.environ.get(env_dir, ""), *map(str, extra)]
    for folder in filter(None, folders):
        candidate = Path(folder) / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which(name)


def _node_paths() -> list[Path]:
    return [Path(p) for p in os.environ.get("NODE_PATH", "").split(os.pathsep) if p]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def _snapshot(folder: Path) -> dict[str, tuple]:
    """Every entry under ``folder``: (size, mtime_ns, mode) — what a download or a re-conversion would change."""
    out = {}
    for path in sorted(folder.rglob("*")):
        st = path.lstat()
        out[str(path.relative_to(folder))] = (st.st_size if path.is_file() else 0, st.st_mtime_ns, stat.S_IMODE(st.st_mode))
    return out


def _hub_exe() -> str:
    hub_exe = _find("jupyterhub", "VRAMLAB_HUB_BIN", [Path(sys.executable).parent])
    if not hub_exe:
        _missing("jupyterhub is not installed: pip install 'jupyterhub>=5.1' jupyterhub-idle-culler "
                 "(or set VRAMLAB_HUB_BIN to that venv's bin/)")
    return hub_exe


def _tools() -> dict[str, str]:
    if not Path("/proc/self/environ").exists():
        pytest.skip("reads the servers' environment from /proc (Linux only)")
    hub_exe = _hub_exe()
    chp = _find("configurable-http-proxy", "VRAMLAB_CHP_BIN", [p / ".bin" for p in _node_paths()])
    node = shutil.which("node")
    chromium = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    hub_bin = Path(hub_exe).parent
    for exe in ("jupyterhub-singleuser",):
        if not (hub_bin / exe).is_file():
            _missing(f"{hub_bin} has jupyterhub but no {exe}; reinstall jupyterhub there")
    if subprocess.run([str(hub_bin / "python"), "-c", "import jupyterhub_idle_culler, jupyterlab"],
                      capture_output=True).returncode:
        _missing(f"{hub_bin / 'python'} lacks jupyterhub-idle-culler or jupyterlab: pip install jupyterhub-idle-culler jupyterlab")
    if not chp:
        _missing("configurable-http-proxy is not installed: npm install configurable-http-proxy "
                 "(beside playwright-core in NODE_PATH, or set VRAMLAB_CHP_BIN to node_modules/.bin)")
    if not node:
        _missing("node is not installed (apt-get install nodejs)")
    if not chromium or not Path(chromium).is_file():
        _missing("Chromium is not installed: apt-get install chromium, or set CHROMIUM")
    if not any((p / "playwright-core" / "package.json").is_file() for p in _node_paths()):
        _missing("playwright-core is not in NODE_PATH: npm install playwright-core in some folder and set "
                 "NODE_PATH=<folder>/node_modules")
    return dict(hub=hub_exe, chp=chp, node=node, chromium=chromium)


def _fill_room_cache(cache: Path) -> None:
    """The room's shared cache, fetched once (here: copied from this machine's), read-only like `serve` makes it."""
    from vramlab import models

    source = models.cache_dir()
    needed = [source / models.GGUF_PACKAGE_DIR / models.GGUF_FILE,
              *(models.converted_path(source) / f for f in ("config.json", "model.safetensors", "tokenizer.json"))]
    if not all(p.is_file() for p in needed):
        _missing(f"the model is not in {source}: run `vramlab fetch-model` first")
    for item in (models.GGUF_PACKAGE_DIR, models.CONVERTED_DIR):
        shutil.copytree(source / item, cache / item)
    subprocess.run(["chmod", "-R", "a-w", str(cache)], check=True)  # what serve_main does after fetch-model


def _stop(procs, hub_proc, base: str, token: str) -> tuple[list[str], list[str]]:
    """Stop the learners' servers through the hub's API (each shuts its kernel down), then SIGTERM the hub (it stops
    the proxy and its services), then kill whatever is left. Returns (killed, unkillable) as "pid cmdline" strings."""
    import psutil
    import requests

    auth = {"Authorization": f"token {token}"}
    try:
        for name in LEARNERS:
            requests.delete(f"{base}/hub/api/users/{name}/server", headers=auth, timeout=60)
        deadline = time.time() + 90
        while time.time() < deadline and any(
                requests.get(f"{base}/hub/api/users/{name}", headers=auth, timeout=30).json().get("servers")
                for name in LEARNERS):
            time.sleep(1)
    except (requests.RequestException, ValueError):
        pass  # the hub is gone already: the kill below cleans up
    if hub_proc.poll() is None:
        hub_proc.send_signal(signal.SIGTERM)
        try:
            hub_proc.wait(120)
        except subprocess.TimeoutExpired:
            hub_proc.kill()
            hub_proc.wait(10)
    names = {}
    for p in procs:
        try:
            names[p.pid] = f"{p.pid} {' '.join(p.cmdline())[:120]}"
        except psutil.Error:
            names[p.pid] = str(p.pid)
    _, alive = psutil.wait_procs(procs, timeout=30)  # a server's kernel may take a moment to follow it
    for p in alive:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    _, unkillable = psutil.wait_procs(alive, timeout=10)
    return [names[p.pid] for p in alive], [names[p.pid] for p in unkillable]


def _descendants(pid: int):
    import psutil

    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


@pytest.fixture(scope="module")
def hub():
    tools = _tools()
    import requests

    keep = os.environ.get("VRAMLAB_HUB_OUT")
    room = Path(tempfile.mkdtemp(prefix="vramlab-hub-room-"))
    out = Path(keep) if keep else room / "out"
    out.mkdir(parents=True, exist_ok=True)
    hub_proc, known, base, token = None, [], "", ""
    try:
        _fill_room_cache(room / "cache")
        token = secrets.token_hex(16)
        config = room / "test_config.py"
        config.write_text(
            f"exec(open({str(ROOT / 'workshop' / 'jupyterhub_config.py')!r}).read())\n"
            # a test-only service token that may read the servers' state (their pids)
            f"c.JupyterHub.services.append({{'name': 'hubtest', 'api_token': {token!r}}})\n"
            "c.JupyterHub.load_roles.append({'name': 'hubtest', 'services': ['hubtest'], 'scopes': "
            "['admin:users', 'admin:servers', 'admin:server_state', 'list:users', 'read:users']})\n"
            # no learner can download anything: every index and hub endpoint they could use is a dead port
            f"c.Spawner.environment = {{'PIP_INDEX_URL': {DEAD!r}, 'PIP_NO_INDEX': '1', 'HF_ENDPOINT': {DEAD!r},"
            " 'OMP_NUM_THREADS': '1'}\n")
        port, user_pw, admin_pw = _free_port(), "room-pass-1", secrets.token_hex(20)
        env = dict(os.environ,
                   VRAMLAB_WORKSHOP_LEARNERS="3", VRAMLAB_WORKSHOP_DIR=str(room), VRAMLAB_WORKSHOP_PASSWORD=user_pw,
                   VRAMLAB_WORKSHOP_ADMIN_PASSWORD=admin_pw, VRAMLAB_WORKSHOP_PORT=str(port),
                   VRAMLAB_WORKSHOP_HUB_PORT=str(_free_port()), VRAMLAB_WORKSHOP_PROXY_API_PORT=str(_free_port()),
                   VRAMLAB_WORKSHOP_BOARD_PORT=str(_free_port()), VRAMLAB_GPU_FRACTION=FRACTION,
                   PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])),
                   PATH=os.pathsep.join([str(Path(tools["chp"]).parent), str(Path(tools["hub"]).parent), os.environ["PATH"]]))
        env.pop("VRAMLAB_PROGRESS_DIR", None)
        log = open(room / "hub.log", "w")
        # SIGINT back to its default: a test run from a background job inherits it ignored, and then every
        # service and server the hub stops waits out its SIGINT grace (10 s each, one service after the other).
        hub_proc = subprocess.Popen([tools["hub"], "-f", str(config)], cwd=room, env=env, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True,
                                    preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        base = f"http://127.0.0.1:{port}"
        hub_log = lambda: (room / "hub.log").read_text(errors="replace")[-4000:]  # noqa: E731
        for _ in range(240):
            try:
                if requests.get(f"{base}/hub/api/", timeout=2).ok:
                    break
            except requests.ConnectionError:
                pass
            if hub_proc.poll() is not None:
                pytest.fail(f"the hub exited: {hub_log()}")
            time.sleep(0.5)
        else:
            pytest.fail(f"the hub did not answer in 120 s: {hub_log()}")
        yield dict(base=base, token=token, user_pw=user_pw, admin_pw=admin_pw, room=room, out=out, tools=tools,
                   requests=requests, log=hub_log, cache_before=_snapshot(room / "cache"), known=known)
    finally:
        killed, unkillable = [], []
        if hub_proc is not None:
            known.extend(_descendants(hub_proc.pid))
            killed, unkillable = _stop(known, hub_proc, base, token)
            log.close()
            if keep:
                shutil.copy(room / "hub.log", out / "hub.log")
        subprocess.run(["chmod", "-R", "u+w", str(room)], check=False)
        shutil.rmtree(room, ignore_errors=True)
        if killed:  # a slow machine: the hub's own shutdown did not finish in time, so the test killed them
            warnings.warn(f"the hub's shutdown left {len(killed)} processes, killed by the test: {killed}")
        assert not unkillable, f"processes that survived SIGKILL: {unkillable}"
        assert not room.exists()


def _server_pids(hub) -> dict[str, int]:
    requests = hub["requests"]
    auth = {"Authorization": f"token {hub['token']}"}
    pids = {}
    for name in LEARNERS:
        model = requests.get(f"{hub['base']}/hub/api/users/{name}", headers=auth, timeout=30).json()
        server = model.get("servers", {}).get("", {})
        assert server.get("ready"), f"{name}'s server is not running: {model}\n{hub['log']()}"
        pids[name] = server["state"]["pid"]
    return pids


def _board_rows(text: str) -> dict[str, list[str]]:
    rows = {}
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] in LEARNERS:
            rows[parts[0]] = parts[1:]
    return rows


def test_three_learners_log_in_run_lab00_and_reach_the_board(hub):
    import psutil

    room, out = hub["room"], hub["out"]
    t0 = time.perf_counter()
    proc = subprocess.run(
        [hub["tools"]["node"], str(ROOT / "tests" / "browser" / "hub_learners.mjs")],
        env=dict(os.environ, HUB_URL=hub["base"], HUB_LEARNERS=",".join(LEARNERS), HUB_PASSWORD=hub["user_pw"],
                 HUB_ADMIN_PASSWORD=hub["admin_pw"], HUB_LAB=str(ROOT / "labs" / "00_start_here.ipynb"),
                 HUB_OUT=str(out), CHROMIUM=hub["tools"]["chromium"]),
        capture_output=True, text=True, timeout=660)
    browser_s = time.perf_counter() - t0
    assert proc.returncode == 0, (f"the learners' browser run failed ({browser_s:.0f} s):\n{proc.stderr[-6000:]}\n"
                                  f"--- hub log ---\n{hub['log']()}")
    print(proc.stderr)  # the learners' steps with their times (shown by pytest on a failure, or with -s)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    by_name = {r["name"]: r for r in result["learners"]}
    assert sorted(by_name) == LEARNERS

    # 1. each learner came in through the hub to their own server, on lab 00, and ran its checks there
    for name, r in by_name.items():
        assert r["url"].startswith(f"/user/{name}/lab"), r["url"]
        assert "loaded in" in r["load"] and "download" not in r["load"] and "convert" not in r["load"], r["load"]
    ana, bo, cy = (by_name[n]["checks"] for n in LEARNERS)
    assert len(ana) == 2 and all(line.startswith("PASS ") for line in ana), ana
    assert [line.split()[0] for line in bo] == ["PASS", "FAIL", "PASS"], bo
    assert "Hint:" in bo[1], bo[1]
    assert len(cy) == 2 and all(line.startswith("FAIL ") and "not done yet" in line for line in cy), cy
    names = [line[5:line.index(":")] for line in ana]  # the two checks' names, as the board shows them

    # 2. the room's environment in every server and in the kernel that ran the lab (and its share of the CPUs)
    from vramlab.device import thread_share

    pids = _server_pids(hub)
    for name, pid in pids.items():
        kernels = [p for p in psutil.Process(pid).children(recursive=True) if "ipykernel" in " ".join(p.cmdline())]
        assert kernels, f"{name}'s server runs no kernel"
        for p in [psutil.Process(pid), *kernels]:
            env = _environ(p.pid)
            assert env.get("VRAMLAB_GPU_FRACTION") == FRACTION, (name, p.pid, env.get("VRAMLAB_GPU_FRACTION"))
            assert env.get("VRAMLAB_CACHE") == str(room / "cache")
            assert env.get("VRAMLAB_PROGRESS_DIR") == str(room / "progress")
            assert env.get("HF_HUB_OFFLINE") == "1" and env.get("PIP_INDEX_URL") == DEAD
            assert env.get("JUPYTERHUB_USER") == name and env.get("HOME") == str(room / "homes" / name)
            assert env.get("OMP_NUM_THREADS") == str(thread_share(3)), env.get("OMP_NUM_THREADS")
        assert (room / "homes" / name / "vramlab-labs" / "00_start_here.ipynb").is_file()
    assert len(set(pids.values())) == 3

    # 3. nothing fetched or rewritten: the shared cache is exactly as the room made it (read-only, same files)
    after = _snapshot(room / "cache")
    assert after == hub["cache_before"], sorted(set(after.items()) ^ set(hub["cache_before"].items()))[:10]
    assert all(not mode & 0o222 for _, _, mode in after.values())
    for name in LEARNERS:  # and no learner made a private copy
        home = room / "homes" / name
        assert not (home / ".cache" / "vramlab").exists() and not (home / ".cache" / "huggingface").exists()

    # 4. the board: the instructor's page (admin) and `vramlab progress` list all 3 with each check
    board = result["board"]
    assert board["status"] == 200 and board["html"]["refresh"] == 1, board
    rows = _board_rows(board["text"])
    assert sorted(rows) == LEARNERS, board["text"]
    # Columns by the board's legend ("e2 = float32 weights in MiB (lab00)"), not by position: lab 00 may
    # gain checks before these two (its perplexity prediction, which the learners run untouched).
    legend = dict(re.findall(r"^\s*(e\d+) = (.+?) \(lab00\)\s*$", board["text"], re.M))
    col = {name: int(key[1:]) - 1 for key, name in legend.items()}
    assert {"float32 weights in MiB", "fp16 weight bytes"} <= set(col), board["text"]
    done = len(legend)   # the "done" column follows the exercise columns
    for name, mib, fp16, passed in (("ana", "✓", "✓", "2"), ("bo", "✓", "✓", "2"), ("cy", "1", "1", "0")):
        row = rows[name]
        assert (row[col["float32 weights in MiB"]], row[col["fp16 weight bytes"]], row[done]) == (mib, fp16, passed), \
            board["text"]
    for name in names:
        assert f"= {name} (lab00)" in board["text"], (name, board["text"])
    cli = subprocess.run([sys.executable, "-m", "vramlab", "progress", str(room / "progress")], capture_output=True,
                         text=True, env=dict(os.environ, PYTHONPATH=str(ROOT / "src")), timeout=120)
    assert cli.returncode == 0 and _board_rows(cli.stdout) == rows, cli.stdout + cli.stderr
    from vramlab import progress

    attempts = [(r["passed"], r["attempt"]) for r in progress.iter_rows(room / "progress")
                if r["user"] == "bo" and r["exercise"] == names[1]]
    assert attempts == [(False, 1), (True, 2)], attempts

    # 5. a learner is refused the board
    assert result["refused"]["status"] == 403, result["refused"]
    print(f"hub test: the 3 learners' browser run took {browser_s:.0f} s (node: {result['seconds']} s)")


def test_bad_room_setting_stops_the_hub_with_one_sentence(tmp_path):
    """`jupyterhub -f workshop/jupyterhub_config.py` itself refuses a GPU fraction above 1 with the fix."""
    env = dict(os.environ, VRAMLAB_WORKSHOP_LEARNERS="3", VRAMLAB_WORKSHOP_DIR=str(tmp_path),
               VRAMLAB_WORKSHOP_PASSWORD="room-pass-1", VRAMLAB_GPU_FRACTION="1.5", PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.run([_hub_exe(), "-f", str(ROOT / "workshop" / "jupyterhub_config.py")], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if "vramlab workshop:" in line]
    assert len(lines) == 1 and "--gpu-fraction 0.2" in lines[0], proc.stdout + proc.stderr
