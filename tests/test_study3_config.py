"""config/config.yaml (frozen as config/study3.yaml; the default since its results landed) is the design that
docs/preregistration-3.md freezes: its runs, seeds, horizon, window and Holm families, read from the config and the
plan (no Snakemake), against the numbers the pre-registration states."""

from __future__ import annotations

import re
from pathlib import Path

import jsonschema
import yaml
from helpers import config_plan, validated_config

REPO = Path(__file__).resolve().parents[1]
# every seed an earlier run used (studies 1 and 2, their pilots, the exploratory runs) and study 3's pilots
EARLIER = {*range(0, 5), *range(10, 13), 777, 778, *range(900, 1000), *range(1000, 1006), 1, 2001, 2002, 2003}
EARLIER |= {*range(3000, 3008)}
PILOTS = {4001, 4002, 4003, 4004}


def test_the_config_validates_and_plans_the_frozen_design():
    cfg = validated_config("config.yaml")
    jsonschema.validate(cfg, yaml.safe_load((REPO / "config" / "schema.yaml").read_text()))
    plan = config_plan(cfg)
    runs = {r: plan.runs[r] for r in plan.groups["main"]}
    seeds = sorted({r.seed for r in runs.values()})
    assert seeds == list(range(5000, 5010)) and not set(seeds) & (EARLIER | PILOTS)
    assert {(r.size, r.objective, r.init, r.max_steps) for r in runs.values()} == {
        ("tiny-4l", "encoder", "standard", 8500),
        ("tiny-4l", "decoder", "standard", 8500),
    }
    assert len(runs) == 20 and set(plan.runs) == set(runs)  # no other group (no ablation, no ViTs)
    masking = {r.objective: r.settings.get("overrides", {}).get("mlm_probability") for r in runs.values()}
    assert masking == {"encoder": 0.15, "decoder": 0.15}  # the decoder ignores it (it masks nothing)
    assert {o: len(v) for o, v in plan.emergence_runs().items()} == {"encoder": 10, "decoder": 10}
    f = cfg["figures"]
    assert f["horizon_snapshots"] == 9 and cfg["training"]["provenance_table"] is True
    assert f["claim_families"] == {"primary": ["a", "b"], "secondary": ["anti"]}
    assert cfg["results"] == "results/study3"
    design = plan.design_claims()
    assert {"a", "b", "anti", "b1", "b2"} <= set(design) and "anti_paper" not in design and "d1" not in design
    # the horizon window: the last 9 snapshots of 8500 steps every 250 are steps 6500-8500
    steps = next(iter(runs.values())).snapshot_steps
    assert list(steps[-9:]) == list(range(6500, 8501, 250))


def test_the_preregistration_states_the_configs_numbers():
    text = (REPO / "docs" / "preregistration-3.md").read_text()
    for phrase in ("H = 8500", "steps 6500-8500, 9 snapshots", "5000-5009", "n = 10", "4001-4004", "tiny-4l", "15 %"):
        assert phrase in text, phrase
    assert re.search(r"primary \{a, b\}; secondary \{anti\}", text)
    assert re.search(r"\*\*Status: frozen at commit [0-9a-f]{7}", text) or "frozen at commit FREEZE" in text


def test_the_parts_differ_from_the_study_only_in_their_seeds_and_cover_it_once():
    """Protocol step 2: each config/study3-partN.yaml is the study's config (config/config.yaml) but for the seed
    list, and the parts' seeds are the study's ten, each in exactly one part (so concatenating their tables repeats
    no run)."""
    study = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    seen: list[int] = []
    parts = sorted((REPO / "config").glob("study3-part*.yaml"))
    assert [p.name for p in parts] == ["study3-part1.yaml", "study3-part2.yaml", "study3-part3.yaml"]
    for path in parts:
        part = yaml.safe_load(path.read_text())
        seeds = part["training"]["groups"]["main"]["runs"][0]["seed"]
        seen += seeds
        part["training"]["groups"]["main"]["runs"][0]["seed"] = study["training"]["groups"]["main"]["runs"][0]["seed"]
        assert part == study, path.name
    assert sorted(seen) == list(range(5000, 5010)) and len(seen) == len(set(seen))
