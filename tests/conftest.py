"""Shared test setup: offline, single-threaded processes (2-core machines), the test tiers, and the helpers'
folder on the import path."""

import os
import sys

import pytest
import torch

# Tests run offline and single-threaded per process (2-core machines; subprocesses get OMP_NUM_THREADS=1).
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
torch.set_num_threads(1)
sys.path.insert(0, os.path.dirname(__file__))
# the one-off studies under benchmarks/ (precision_acceptance) are tested as modules too
sys.path.insert(1, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))

HEAVY = ("workflow", "notebook", "weights", "venv", "slow")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if any(item.get_closest_marker(m) for m in HEAVY):
            item.add_marker(pytest.mark.heavy)


@pytest.fixture(scope="session")
def smoke_workflow(tmp_path_factory):
    """The smoke config run end to end once per session in a copy of the workflow; the tests that use it read
    its outputs (and the incremental test, which runs last among them, edits one notebook)."""
    from helpers import copy_workflow, snakemake

    wf = copy_workflow(tmp_path_factory.mktemp("smoke") / "wf")
    snakemake("--configfile", "config/smoke.yaml", "--cores", "2", cwd=wf, timeout=1800)
    return wf
