"""workshop/z2jh/values.yaml against Zero to JupyterHub's own schema; the Dockerfile and Binder postBuild."""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
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
