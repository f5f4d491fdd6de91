import subprocess
import sys


def test_vramlab_info_runs():
    proc = subprocess.run([sys.executable, "-m", "vramlab", "info"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "torch" in proc.stdout and "mode" in proc.stdout and "cache" in proc.stdout


def test_labs_build_check_via_console_command():
    proc = subprocess.run([sys.executable, "-m", "vramlab", "labs", "build", "--check"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_vramlab_version():
    import vramlab

    proc = subprocess.run([sys.executable, "-m", "vramlab", "--version"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == f"vramlab {vramlab.__version__}"


def test_version_matches_pyproject():
    import re
    from pathlib import Path

    import vramlab

    text = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    assert re.search(r'^version = "([^"]+)"', text, re.M).group(1) == vramlab.__version__
