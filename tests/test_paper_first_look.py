"""config/paper-first-look.yaml: config/paper.yaml cut to a first look (bert-mini, Wikipedia, seed 0 per run
kind) under the same authors' recipe, checked on the parsed config and the workflow's run expansion; its dry
run (marked `workflow`) plans exactly those runs under its own results folder."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from helpers import job_counts, snakemake

from attention_geometry.training.hyper import resolve_hyper
from attention_geometry.training.run_config import run_config_from_dict
from attention_geometry.workflow.runs import expand_runs

REPO = Path(__file__).resolve().parents[1]
SCHEMA = yaml.safe_load((REPO / "config" / "schema.yaml").read_text())
# (objective, init) of the first look's runs: one seed each
KINDS = {
    ("encoder", "standard"),
    ("encoder", "symmetric-fresh"),
    ("decoder-paper", "standard"),
    ("decoder-paper", "symmetric-fresh"),
    ("decoder", "standard"),
}


def load(name: str) -> dict:
    return yaml.safe_load((REPO / "config" / name).read_text())


@pytest.fixture(scope="module")
def cfg():
    return load("paper-first-look.yaml")


@pytest.fixture(scope="module")
def runs(cfg):
    planned, _ = expand_runs(cfg["training"]["groups"], cfg["corpora"], cfg.get("images") or {})
    return planned


def test_it_validates_against_the_schema(cfg):
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(cfg, SCHEMA)


def test_it_plans_exactly_the_five_first_look_runs(cfg, runs):
    assert sorted((r.objective, r.init) for r in runs.values()) == sorted(KINDS)
    assert {(r.size, r.dataset, r.seed) for r in runs.values()} == {("bert-mini", "wikipedia", 0)}
    assert list(cfg["corpora"]) == ["wikipedia"] and not cfg.get("images")
    assert cfg["results"] == "results-first-look"
    assert "results-first-look/" in (REPO / ".gitignore").read_text().splitlines()


def test_its_runs_are_the_paper_configs_runs_of_the_same_name(cfg, runs):
    """Each run is config/paper.yaml's run of that name with the same RUN.yaml content (the authors' recipe, the
    same corpus and schedule), so a first look is a subset of the paper's design, not another design."""
    paper = load("paper.yaml")
    theirs, _ = expand_runs(paper["training"]["groups"], paper["corpora"], paper.get("images") or {})
    for name, r in runs.items():
        assert name in theirs, name
        assert r.run_config() == theirs[name].run_config(), name
        assert r.snapshot_steps == theirs[name].snapshot_steps, name
        assert cfg["corpora"][r.dataset] == paper["corpora"][r.dataset]
        rc = run_config_from_dict({**r.run_config(), "corpus": "x"}, where=name)
        h = resolve_hyper(rc.size, rc.overrides)
        assert (h.recipe, h.batch_size, h.grad_accum, h.precision) == ("authors", 256, 8, "fp16"), name
    for key in ("emergence_group", "ablation_group"):
        assert cfg["figures"][key] == cfg["updates"]["group"] == "paper"


@pytest.mark.workflow
def test_dry_run_plans_the_five_runs_under_its_own_results_folder():
    proc = snakemake("-n", "-p", "--configfile", "config/paper-first-look.yaml")
    counts = job_counts(proc.stdout)
    assert counts["train_model"] == counts["score_checkpoints"] == len(KINDS)
    assert counts["prepare_corpus"] == 1
    assert "results-first-look/runs/" in proc.stdout and "results-paper/" not in proc.stdout
