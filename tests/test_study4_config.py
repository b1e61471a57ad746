"""config/study4.yaml is the design that docs/preregistration-4.md freezes: its corpus, runs, seeds, horizon,
trajectory window and Holm families, read from the config and the plan (no Snakemake), against the numbers the
pre-registration states; and each part's config differs from it only in its seed list."""

from __future__ import annotations

import re
from pathlib import Path

import jsonschema
import yaml
from helpers import config_plan, validated_config
from test_study3_config import EARLIER as BEFORE_STUDY3
from test_study3_config import PILOTS as STUDY3_PILOTS

REPO = Path(__file__).resolve().parents[1]
# every seed an earlier study, pilot or exploratory run used (study 3's list, its pilots and its seeds), and
# study 4's pilots
EARLIER = BEFORE_STUDY3 | STUDY3_PILOTS | set(range(5000, 5010))
PILOTS = {6001, 6002, 6003}


def test_the_config_validates_and_plans_the_frozen_design():
    cfg = validated_config("study4.yaml")
    jsonschema.validate(cfg, yaml.safe_load((REPO / "config" / "schema.yaml").read_text()))
    plan = config_plan(cfg)
    runs = {r: plan.runs[r] for r in plan.groups["main"]}
    seeds = sorted({r.seed for r in runs.values()})
    assert seeds == list(range(7000, 7012)) and not set(seeds) & (EARLIER | PILOTS)
    assert {(r.size, r.objective, r.init, r.max_steps, r.dataset) for r in runs.values()} == {
        ("tiny-4l", o, "standard", 3500, "wikitext2") for o in ("encoder", "decoder", "decoder-paper")
    }
    assert len(runs) == 36 and set(plan.runs) == set(runs)
    corpus = cfg["corpora"]["wikitext2"]
    assert corpus["dataset"] == "wikitext2" and corpus["block_len"] == 512 and corpus["heldout_fraction"] == 0.03
    overrides = {r.settings.get("overrides", {}).get("batch_size") for r in runs.values()}
    assert overrides == {4}
    # the tokens a step and a run, and the paper's step that equals the run (131,072 positions a step)
    assert set(plan.tokens_per_step().values()) == {2048}
    assert round(3500 * 2048 / (32 * 8 * 512)) == 55
    assert {o: len(v) for o, v in plan.emergence_runs().items()} == {"encoder": 12, "decoder": 12, "decoder-paper": 12}
    f = cfg["figures"]
    assert f["horizon_snapshots"] == 14 and cfg["training"]["provenance_table"] is True
    assert f["claim_families"] == {
        "primary": ["a", "b"],
        "secondary": ["anti", "anti_paper"],
        "paper-decoder": ["a_paper", "b_paper"],
    }
    assert cfg["results"] == "results/study4"
    design = set(plan.design_claims())
    assert {"a", "b", "anti", "anti_paper", "a_paper", "b_paper", "p_sym", "p_dir", "b1", "b2"} <= design
    assert not {"d1", "c1", "e", "p_tie"} & design
    # the trajectory: the last 14 snapshots of 3500 steps every 250 are steps 250-3500 (all but step 0)
    steps = next(iter(runs.values())).snapshot_steps
    assert list(steps) == list(range(0, 3501, 250)) and list(steps[-14:]) == list(range(250, 3501, 250))


def test_the_preregistration_states_the_configs_numbers():
    text = (REPO / "docs" / "preregistration-4.md").read_text()
    for phrase in (
        "H = 3500",
        "from step 250 to 3500",
        "7000-7011",
        "n = 12",
        "6001-6002",
        "tiny-4l",
        "15 %",
        "the paper's step 55",
        "4 blocks a step",
        "wikitext2",
    ):
        assert phrase in text, phrase
    assert re.search(r"primary \{a, b\}; secondary \{anti, anti_paper\};\s+paper-decoder \{a_paper, b_paper\}", text)
    assert re.search(r"\*\*Status: frozen at commit [0-9a-f]{7}", text) or "frozen at commit FREEZE" in text


def test_the_parts_differ_from_the_study_only_in_their_seeds_and_never_repeat_one():
    """Protocol step 2: each config/study4-partN.yaml is config/study4.yaml but for the seed list; no seed is in two
    parts, and every part's seeds are the study's."""
    study = yaml.safe_load((REPO / "config" / "study4.yaml").read_text())
    all_seeds = study["training"]["groups"]["main"]["runs"][0]["seed"]
    seen: list[int] = []
    parts = sorted((REPO / "config").glob("study4-part*.yaml"))
    assert parts and parts[0].name == "study4-part1.yaml"
    for path in parts:
        part = yaml.safe_load(path.read_text())
        seeds = part["training"]["groups"]["main"]["runs"][0]["seed"]
        assert set(seeds) <= set(all_seeds), path.name
        seen += seeds
        part["training"]["groups"]["main"]["runs"][0]["seed"] = all_seeds
        assert part == study, path.name
    assert len(seen) == len(set(seen))
    assert sorted(seen) == all_seeds  # the five parts hold the twelve seeds once each
