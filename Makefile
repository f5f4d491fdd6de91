# vramlab: `make lab` sets up and opens JupyterLab; `make test` sets up and runs every test.
# Variables: PYTHON (the interpreter that makes the venv), VENV, TORCH (how torch is installed
# when the venv has none, e.g. TORCH="torch --index-url https://download.pytorch.org/whl/cpu").
PYTHON ?= python3
VENV ?= .venv
TORCH ?= "torch>=2.4"
PY := $(VENV)/bin/python
# JupyterLab refuses to run as root (Docker, some cloud VMs) without --allow-root.
JUPYTER_ARGS ?= $(if $(filter 0,$(shell id -u)),--allow-root)

.PHONY: setup lab test model labs notebooks clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install $(TORCH)
	$(PY) -m pip install -q -e ".[lab,dev]"
	mkdir -p $(VENV)/share/jupyter/lab/settings
	echo '{"@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": false}}' \
		> $(VENV)/share/jupyter/lab/settings/overrides.json
	touch $@

setup: $(VENV)/.installed model

model: $(VENV)/.installed
	$(VENV)/bin/vramlab fetch-model

lab: setup
	$(VENV)/bin/jupyter lab $(JUPYTER_ARGS) labs/00_start_here.ipynb

test: setup
	$(PY) -m pytest

labs: $(VENV)/.installed
	$(PY) -m vramlab.labs build

notebooks: $(VENV)/.installed
	$(PY) -m vramlab.labs execute notebooks/*.ipynb
	$(PY) -m vramlab.labs build

clean:
	rm -rf $(VENV) .pytest_cache
