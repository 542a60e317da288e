# Two commands on a fresh machine: `make demo` (the main job on the embedded default) and
# `make test`. Both create/update the project's virtual environment in .venv from this repo.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The CPU wheel; never torchvision on CPU (it breaks transformers' Qwen3-VL image path).
TORCH_SPEC ?= torch==2.13.0
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: demo notebooks test lint format bench venv clean

venv: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[all]"
	@if $(PY) -c "import torchvision" 2>/dev/null; then echo "torchvision is installed: remove it (pip uninstall torchvision), it breaks Qwen3-VL on CPU"; exit 1; fi
	touch $(STAMP)

# Notebooks 00-05 executed headless by papermill in the kernel `rlkit` (this venv's python,
# registered inside the venv so no user-wide kernelspec is touched) -> runs/demo/
demo: $(STAMP)
	@test -f $(VENV)/share/jupyter/kernels/rlkit/kernel.json || $(PY) -m ipykernel install --prefix $(VENV) --name rlkit --display-name rlkit
	$(VENV)/bin/rlkit demo --out runs/demo

# Re-pair notebooks/*.ipynb (stored without outputs) from their jupytext py:percent sources.
notebooks: $(STAMP)
	$(VENV)/bin/jupytext --sync notebooks/*.py

test: $(STAMP) lint
	$(PY) -m pytest -q -p no:cacheprovider

lint: $(STAMP)
	$(VENV)/bin/ruff check rlkit tests benchmarks scripts notebooks
	$(VENV)/bin/ruff format --check rlkit tests benchmarks scripts notebooks

format: $(STAMP)
	$(VENV)/bin/ruff format rlkit tests benchmarks scripts notebooks
	$(VENV)/bin/ruff check --fix rlkit tests benchmarks scripts notebooks

bench: $(STAMP)
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) runs .pytest_cache
