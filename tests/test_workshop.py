"""The workshop room's decisions (vramlab.workshop): validation, GPU listing, round robin, the hub config."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from vramlab.device import thread_share
from vramlab.workshop import room as workshop
from vramlab.workshop.room import WorkshopError

ROOT = Path(__file__).resolve().parents[1]

SMI_PLAIN = """GPU 0: NVIDIA H200 (UUID: GPU-11111111-2222-3333-4444-555555555555)
GPU 1: NVIDIA H200 (UUID: GPU-66666666-2222-3333-4444-555555555555)
"""
SMI_MIG = """GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-aaaa-bbbb)
  MIG 3g.20gb     Device  0: (UUID: MIG-aaaa-0001)
  MIG 3g.20gb     Device  1: (UUID: MIG-aaaa-0002)
GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-cccc-dddd)
"""


def _one_sentence(text: str) -> bool:
    return text.replace("e.g. ", "").count(". ") == 0 and text.endswith((".", ")")) and "\n" not in text


@pytest.mark.parametrize("bad", ["thirty", "", None, 0, -3, 1000, "2.5"])
def test_bad_learner_count_gets_one_sentence(bad):
    with pytest.raises(WorkshopError) as info:
        workshop.validate_learners(bad)
    assert "--learners 30" in str(info.value) and _one_sentence(str(info.value))


@pytest.mark.parametrize("bad", [1.5, 0, -0.1, float("nan"), "half"])
def test_bad_gpu_fraction_gets_one_sentence(bad):
    with pytest.raises(WorkshopError) as info:
        workshop.validate_fraction(bad)
    assert "--gpu-fraction 0.2" in str(info.value) and _one_sentence(str(info.value))


def test_good_values_pass():
    assert workshop.validate_learners("30") == 30 and workshop.validate_fraction("0.25") == 0.25


def test_list_gpus_plain_mig_and_none():
    assert workshop.list_gpus(SMI_PLAIN) == ["0", "1"]
    assert workshop.list_gpus(SMI_MIG) == ["MIG-aaaa-0001", "MIG-aaaa-0002", "1"]
    assert workshop.list_gpus("") == []
    assert workshop.list_gpus("No devices were found\n") == []


def test_list_gpus_regex_is_linear_on_huge_input():
    import time

    for text in ("GPU 0:" + "x" * 50_000_000, "9" * 100_000, "  MIG " + "(" * 1_000_000):
        t = time.perf_counter()
        workshop.list_gpus(text)
        assert time.perf_counter() - t < 5


def test_round_robin_is_stable_per_learner():
    rr = workshop.RoundRobin(["0", "1", "2"])
    got = [rr.device_for(f"u{i}") for i in range(7)]
    assert got == ["0", "1", "2", "0", "1", "2", "0"]
    assert rr.device_for("u1") == "1"  # a restart keeps the device
    assert workshop.RoundRobin([]).device_for("u0") is None


def test_default_fraction_splits_each_device():
    assert workshop.default_fraction(30, 1) == 0.03
    assert workshop.default_fraction(30, 4) == 0.11  # 8 learners per GPU: 0.9 / 8 = 0.1125, rounded down
    assert workshop.default_fraction(2, 4) == 0.9
    assert workshop.default_fraction(30, 0) == 0.9
    # 30 learners on one 80 GiB card: 72 GiB minus 30 x 0.5 GiB of contexts, split 30 ways, over 80
    assert workshop.default_fraction(30, 1, total_gib=80) == 0.02  # 57 / 30 / 80 = 0.02375
    assert workshop.default_fraction(8, 1, total_gib=141) == 0.1   # (126.9 - 4) / 8 / 141 = 0.1089, rounded down
    with pytest.raises(WorkshopError, match="add GPUs or lower --learners"):
        workshop.default_fraction(200, 1, total_gib=16)


def test_gpu_memory_from_nvidia_smi_csv():
    assert workshop.gpu_memory_gib("81559\n143771\n") == pytest.approx(81559 / 1024)
    assert workshop.gpu_memory_gib("[N/A]\n") is None


def test_missing_proxy_names_the_npm_command(monkeypatch):
    monkeypatch.setattr(workshop.shutil, "which", lambda name: "/usr/bin/npm" if name == "npm" else None)
    with pytest.raises(WorkshopError, match="npm install -g configurable-http-proxy"):
        workshop.find_proxy()
    monkeypatch.setattr(workshop.shutil, "which", lambda name: None)
    with pytest.raises(WorkshopError) as info:
        workshop.find_proxy()
    assert "install Node.js and npm" in str(info.value) and _one_sentence(str(info.value))


def test_copy_labs_only_on_first_start(tmp_path):
    labs = tmp_path / "labs"
    labs.mkdir()
    (labs / "00_start_here.ipynb").write_text("{}")
    home = tmp_path / "home"
    target = workshop.copy_labs(home, labs)
    assert (target / "00_start_here.ipynb").read_text() == "{}"
    (target / "00_start_here.ipynb").write_text("learner work")
    workshop.copy_labs(home, labs)
    assert (target / "00_start_here.ipynb").read_text() == "learner work"


class _Cfg:
    """A stand-in for traitlets' Config: attribute groups created on first access."""

    def __init__(self):
        self._groups = {}

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return self._groups.setdefault(name, SimpleNamespace())


def _fake_proxy(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "configurable-http-proxy"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return str(bin_dir)


def test_configure_sets_the_room_and_the_hook(tmp_path):
    c = _Cfg()
    labs = tmp_path / "labs"
    labs.mkdir()
    (labs / "00_start_here.ipynb").write_text("{}")
    rr = workshop.configure(c, learners=4, room=tmp_path / "room", user_password="room-pass",
                            nvidia_smi_l=SMI_MIG, proxy_dirs=[_fake_proxy(tmp_path)], labs_dir=str(labs))
    assert c.JupyterHub.authenticator_class == "shared-password"
    assert c.JupyterHub.spawner_class == "simple"
    assert c.Authenticator.admin_users == {"instructor"}
    names = [s["name"] for s in c.JupyterHub.services]
    assert names == ["jupyterhub-idle-culler", "progress"]
    spawners = []
    for i in range(4):
        home = tmp_path / "room" / "homes" / f"l{i}"
        sp = SimpleNamespace(user=SimpleNamespace(name=f"l{i}"), home_dir=str(home), environment={})
        c.Spawner.pre_spawn_hook(sp)
        spawners.append(sp)
    env = spawners[0].environment
    assert env["VRAMLAB_GPU_FRACTION"] == "0.45"  # 4 learners on 3 devices: up to 2 share one, 0.9 / 2
    assert env["VRAMLAB_CACHE"].endswith("cache") and env["VRAMLAB_PROGRESS_DIR"].endswith("progress")
    share = str(thread_share(4))
    assert env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == env["OPENBLAS_NUM_THREADS"] == share
    assert [s.environment["CUDA_VISIBLE_DEVICES"] for s in spawners] == ["MIG-aaaa-0001", "MIG-aaaa-0002", "1", "MIG-aaaa-0001"]
    assert (tmp_path / "room" / "homes" / "l2" / "vramlab-labs" / "00_start_here.ipynb").is_file()
    assert rr.assigned["l3"] == "MIG-aaaa-0001"


def test_cpu_threads_are_split_between_learners():
    assert thread_share(30, cpus=32) == 1
    assert thread_share(3, cpus=32) == 10
    assert thread_share(3, cpus=2) == 1  # never 0
    assert thread_share(1, cpus=2) == 2
    assert thread_share(2) >= 1  # this machine's CPU set


def test_configure_rejects_short_password(tmp_path):
    with pytest.raises(WorkshopError, match="8 or more"):
        workshop.configure(_Cfg(), learners=2, room=tmp_path, user_password="short", nvidia_smi_l="",
                           proxy_dirs=[_fake_proxy(tmp_path)])


def test_serve_dry_run_prints_url_and_passwords(tmp_path, capsys, monkeypatch):
    from vramlab.cli import main

    monkeypatch.setenv("PATH", _fake_proxy(tmp_path) + os.pathsep + os.environ["PATH"])
    assert main(["workshop", "serve", "--learners", "30", "--dir", str(tmp_path / "room"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    admin_pw = (tmp_path / "room" / "passwords.txt").read_text().split()[1]
    assert "http://localhost:8000/" in out and admin_pw in out and len(admin_pw) >= 32
    assert main(["workshop", "serve", "--learners", "many", "--dir", str(tmp_path / "room"), "--dry-run"]) == 1
    assert main(["workshop", "serve", "--learners", "3", "--gpu-fraction", "1.5", "--dir", str(tmp_path), "--dry-run"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 2 and "--gpu-fraction 0.2" in err


def test_hub_config_file_compiles():
    source = (ROOT / "workshop" / "jupyterhub_config.py").read_text()
    compile(source, "jupyterhub_config.py", "exec")
    assert "configure_from_env(c)" in source


def test_serve_fetches_once_then_starts_the_hub(tmp_path, capsys, monkeypatch):
    calls = []

    def fake_run(cmd, **kwargs):
        calls.append((cmd, kwargs.get("env") or {}))
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(workshop.subprocess, "run", fake_run)
    monkeypatch.setattr(workshop, "_ensure_tools", lambda install, dirs: None)
    room = tmp_path / "room"
    assert workshop.serve_main("30", str(room)) == 0
    (fetch, fenv), (chmod, _), (hub, henv) = calls
    assert fetch[-1] == "fetch-model" and fenv["VRAMLAB_CACHE"] == str(room / "cache")
    assert chmod == ["chmod", "-R", "a-w", str(room / "cache")]
    assert hub[1:4] == ["-m", "jupyterhub", "-f"] and hub[4] == str(ROOT / "workshop" / "jupyterhub_config.py")
    user_pw, admin_pw = (room / "passwords.txt").read_text().split()
    assert henv["VRAMLAB_WORKSHOP_LEARNERS"] == "30" and henv["VRAMLAB_WORKSHOP_PASSWORD"] == user_pw
    assert user_pw in capsys.readouterr().out
    # a model that cannot be fetched stops before the hub, with one sentence
    calls.clear()
    monkeypatch.setattr(workshop.subprocess, "run",
                        lambda cmd, **kw: calls.append(cmd) or subprocess.CompletedProcess(cmd, 1))
    assert workshop.serve_main(30, str(room)) == 1
    assert len(calls) == 1 and "vramlab fetch-model" in capsys.readouterr().err
