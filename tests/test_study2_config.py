"""config/study2.yaml (the default until study 3 landed) is the design docs/preregistration-2.md freezes: its
runs, seeds, horizons and Holm families, read from the config and the plan (no Snakemake), against the numbers the
pre-registration states."""

from __future__ import annotations

import re
from pathlib import Path

import jsonschema
import yaml
from helpers import config_plan, validated_config

REPO = Path(__file__).resolve().parents[1]
# every seed any earlier run used (docs/preregistration.md, docs/experiment-design.md, docs/training.md) and the
# pilot seeds of study 2 (docs/preregistration-2.md, "Pilots")
EARLIER = {*range(0, 5), *range(10, 13), 777, 778, *range(900, 1000), *range(1000, 1006), 1, 2001, 2002, 2003}


def test_the_config_validates_and_plans_the_frozen_design():
    cfg = validated_config("study2.yaml")
    jsonschema.validate(cfg, yaml.safe_load((REPO / "config" / "schema.yaml").read_text()))
    plan = config_plan(cfg)
    text = {r: plan.runs[r] for r in plan.groups["main"]}
    seeds = sorted({r.seed for r in text.values()})
    assert seeds == list(range(3000, 3008)) and not set(seeds) & EARLIER
    steps = {(r.objective, r.init): r.max_steps for r in text.values()}
    assert steps == {
        ("encoder", "standard"): 4500,
        ("decoder", "standard"): 4500,
        ("decoder-paper", "standard"): 4500,
        ("encoder", "symmetric-fresh"): 2500,
        ("encoder", "fresh"): 2500,
        ("decoder", "symmetric-fresh"): 1500,
        ("decoder-paper", "symmetric-fresh"): 1500,
    }
    # every run kind on every seed: 7 kinds x 8 seeds, paired contrasts throughout
    assert len(text) == 56 and all(sum(r.seed == s for r in text.values()) == 7 for s in seeds)
    masking = {r.objective: r.settings.get("overrides", {}).get("mlm_probability") for r in text.values()}
    assert masking == {"encoder": 0.3, "decoder": None, "decoder-paper": 0.15}
    assert {o: len(v) for o, v in plan.emergence_runs().items()} == {"encoder": 8, "decoder": 8, "decoder-paper": 8}
    f = cfg["figures"]
    assert f["horizon_snapshots"] == 5 and cfg["training"]["provenance_table"] is True
    assert f["claim_families"] == {
        "primary": ["a", "b", "d1"],
        "secondary": ["c1", "c2", "d2", "e"],
        "paper-decoder": ["a_paper", "b_paper", "e_paper"],
        "vision": ["v1", "v4"],
    }
    assert cfg["results"] == "results/study2"


def test_the_preregistration_states_the_configs_numbers():
    text = (REPO / "docs" / "preregistration-2.md").read_text()
    for phrase in ("H = 4500", "C = 2500", "T = 1500", "3000-3007", "last 5 snapshots", "n = 8"):
        assert phrase in text, phrase
    fams = re.findall(r"primary \{a, b, d1\}", text)
    assert fams, "the primary family is named"
