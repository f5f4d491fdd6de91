"""A real JupyterHub room on localhost: 3 learners log in, their servers get the room's environment,
the instructor's progress board lists all 3, a learner is refused the board; everything torn down.

Needs JupyterHub (>= 5.1) with jupyterhub-idle-culler and jupyterlab, and configurable-http-proxy.
They are looked up on PATH, or in ``VRAMLAB_HUB_BIN`` (a venv's bin/ holding ``jupyterhub``) and
``VRAMLAB_CHP_BIN`` (a folder holding ``configurable-http-proxy``, e.g. node_modules/.bin). Skipped
with the reason when missing. Run:

    VRAMLAB_HUB_BIN=/tmp/hubvenv/bin VRAMLAB_CHP_BIN=/tmp/chp/node_modules/.bin \
        python -m pytest -m hub tests/test_workshop_hub.py
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.hub

ROOT = Path(__file__).resolve().parents[1]
LEARNERS = ["ana", "bo", "cy"]


def _which(name: str, env_dir: str) -> str | None:
    folder = os.environ.get(env_dir)
    if folder and (Path(folder) / name).is_file():
        return str(Path(folder) / name)
    return shutil.which(name)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    requests = pytest.importorskip("requests", reason="the hub test talks HTTP with `requests`")
    hub_exe = _which("jupyterhub", "VRAMLAB_HUB_BIN")
    chp = _which("configurable-http-proxy", "VRAMLAB_CHP_BIN")
    if not hub_exe:
        pytest.skip("jupyterhub not installed: pip install 'jupyterhub>=5.1' jupyterhub-idle-culler jupyterlab "
                    "(or set VRAMLAB_HUB_BIN to that venv's bin/)")
    if not chp:
        pytest.skip("configurable-http-proxy not installed: npm install -g configurable-http-proxy "
                    "(or set VRAMLAB_CHP_BIN to node_modules/.bin)")
    if not Path("/proc/self/environ").exists():
        pytest.skip("reads the servers' environment from /proc (Linux only)")
    room = tmp_path_factory.mktemp("room")
    token = secrets.token_hex(16)
    config = room / "test_config.py"
    config.write_text(
        f"import sys\nsys.path.insert(0, {str(ROOT / 'src')!r})\n"
        f"exec(open({str(ROOT / 'workshop' / 'jupyterhub_config.py')!r}).read())\n"
        # a test-only service token that may read the servers' state (their pids)
        f"c.JupyterHub.services.append({{'name': 'hubtest', 'api_token': {token!r}}})\n"
        "c.JupyterHub.load_roles.append({'name': 'hubtest', 'services': ['hubtest'], 'scopes': "
        "['admin:users', 'admin:servers', 'admin:server_state', 'list:users', 'read:users']})\n")
    port, user_pw, admin_pw = _free_port(), "room-pass-1", secrets.token_hex(20)
    env = dict(os.environ,
               VRAMLAB_WORKSHOP_LEARNERS="3", VRAMLAB_WORKSHOP_DIR=str(room), VRAMLAB_WORKSHOP_PASSWORD=user_pw,
               VRAMLAB_WORKSHOP_ADMIN_PASSWORD=admin_pw, VRAMLAB_WORKSHOP_PORT=str(port),
               VRAMLAB_WORKSHOP_HUB_PORT=str(_free_port()), VRAMLAB_WORKSHOP_PROXY_API_PORT=str(_free_port()),
               VRAMLAB_WORKSHOP_BOARD_PORT=str(_free_port()), VRAMLAB_GPU_FRACTION="0.3",
               PYTHONPATH=str(ROOT / "src"),
               PATH=os.pathsep.join([str(Path(chp).parent), str(Path(hub_exe).parent), os.environ["PATH"]]))
    log = open(room / "hub.log", "w")
    proc = subprocess.Popen([hub_exe, "-f", str(config)], cwd=room, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                if requests.get(f"{base}/hub/api/", timeout=2).ok:
                    break
            except requests.ConnectionError:
                pass
            if proc.poll() is not None:
                pytest.fail(f"the hub exited: {(room / 'hub.log').read_text()[-3000:]}")
            time.sleep(0.5)
        else:
            pytest.fail(f"the hub did not answer in 60 s: {(room / 'hub.log').read_text()[-3000:]}")
        yield dict(base=base, token=token, user_pw=user_pw, admin_pw=admin_pw, room=room, requests=requests)
    finally:
        proc.send_signal(signal.SIGTERM)  # the hub stops the proxy, its services and the learners' servers
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


def _login(hub, name: str, password: str):
    requests = hub["requests"]
    s = requests.Session()
    s.get(f"{hub['base']}/hub/login", timeout=30)
    r = s.post(f"{hub['base']}/hub/login?next=", data={"username": name, "password": password,
                                                      "_xsrf": s.cookies.get("_xsrf", "")},
               allow_redirects=False, timeout=30)
    assert r.status_code == 302, f"login of {name} failed: {r.status_code}"
    return s


def test_three_learners_get_the_room(hub):
    requests = hub["requests"]
    api = f"{hub['base']}/hub/api"
    auth = {"Authorization": f"token {hub['token']}"}
    pids = {}
    for name in LEARNERS:
        _login(hub, name, hub["user_pw"])
        r = requests.post(f"{api}/users/{name}/server", headers=auth, timeout=120)
        assert r.status_code in (201, 202), r.text
    deadline = time.time() + 180
    for name in LEARNERS:
        while True:
            model = requests.get(f"{api}/users/{name}", headers=auth, timeout=30).json()
            server = model.get("servers", {}).get("", {})
            if server.get("ready"):
                pids[name] = server["state"]["pid"]
                break
            failed = not model.get("pending") and not server
            log = (hub["room"] / "hub.log").read_text()[-3000:]
            assert time.time() < deadline and not failed, f"{name}'s server did not start: {model}\n{log}"
            time.sleep(1)
    room = hub["room"]
    for name, pid in pids.items():
        env = _environ(pid)
        assert env["VRAMLAB_GPU_FRACTION"] == "0.3"
        assert env["VRAMLAB_CACHE"] == str(room / "cache")
        assert env["VRAMLAB_PROGRESS_DIR"] == str(room / "progress")
        assert env["JUPYTERHUB_USER"] == name and env["HOME"] == str(room / "homes" / name)
        assert (room / "homes" / name / "vramlab-labs" / "00_start_here.ipynb").is_file()
        # a check run with this learner's environment lands on the board
        subprocess.run([sys.executable, "-c", "from vramlab.checks._core import report; report('check_hub', True, '1', '1')"],
                       env=dict(env, PYTHONPATH=str(ROOT / "src")), check=True, capture_output=True)

    admin = _login(hub, "instructor", hub["admin_pw"])
    board = admin.get(f"{hub['base']}/services/progress/?format=text", timeout=60)
    assert board.status_code == 200, board.text[:500]
    for name in LEARNERS:
        assert name in board.text
    assert board.text.count("✓") >= 3
    page = admin.get(f"{hub['base']}/services/progress/", timeout=60)
    assert 'http-equiv="refresh"' in page.text and "Plotly.newPlot" in page.text

    learner = _login(hub, "ana", hub["user_pw"])
    refused = learner.get(f"{hub['base']}/services/progress/?format=text", timeout=60)
    assert refused.status_code == 403, (refused.status_code, refused.text[:300])

    for name in LEARNERS:
        requests.delete(f"{api}/users/{name}/server", headers=auth, timeout=120)
