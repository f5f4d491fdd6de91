# vramlab: `make lab` sets up and opens JupyterLab; `make test` sets up and runs every test.
# torch: installed into the venv only when it has none, by src/vramlab/torch_install.py, which picks
# PyTorch's CPU build on a machine without an NVIDIA GPU and says which build it chose and why.
# Variables: PYTHON (the interpreter that makes the venv), VENV, PORT (for `make lab`, default 8888).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# JupyterLab refuses to run as root (Docker, some cloud VMs) without --allow-root.
JUPYTER_ARGS ?= $(if $(filter 0,$(shell id -u)),--allow-root)
PORT ?= 8888

.PHONY: setup lab test model labs notebooks wheel workshop clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) src/vramlab/torch_install.py
	$(PY) -m pip install -q -e ".[lab,dev]"
	mkdir -p $(VENV)/share/jupyter/lab/settings
	echo '{"@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": false}}' \
		> $(VENV)/share/jupyter/lab/settings/overrides.json
	touch $@

setup: $(VENV)/.installed model

model: $(VENV)/.installed
	$(VENV)/bin/vramlab fetch-model

# Rooted at the repository (notebooks/, the complete lessons, are one click away), with lab 00 open.
lab: setup
	$(VENV)/bin/jupyter lab $(JUPYTER_ARGS) --port $(PORT) --ServerApp.root_dir="$(CURDIR)" labs/00_start_here.ipynb

test: setup
	$(PY) -m pytest

labs: $(VENV)/.installed
	$(PY) -m vramlab.labs build

notebooks: $(VENV)/.installed
	$(PY) -m vramlab.labs execute notebooks/*.ipynb
	$(PY) -m vramlab.labs build

# A workshop room: JupyterHub for LEARNERS learners on this machine (docs/workshop.md).
LEARNERS ?= 30
workshop: $(VENV)/.installed
	$(VENV)/bin/vramlab workshop serve --learners "$(LEARNERS)"

# The wheel an instructor uploads to Colab (VRAMLAB_SOURCE=/content/<wheel> in the setup cell).
wheel: $(VENV)/.installed
	rm -rf dist
	$(PY) -m pip wheel --no-deps -w dist .
	@ls dist/*.whl

clean:
	rm -rf $(VENV) .pytest_cache dist build
