"""The study design: which claims each committed config's design includes (Plan.design_claims, the list the
reproduction report checks so that no claim of the design comes out "not tested").

The expected lists are a regression pin: they were computed from the hand-written design_claims before it was
derived from the claims' declared arms, and the derivation must give them unchanged (a changed list changes the
report's parameters, and so what the committed reports checked)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import config_plan, validated_config

REPO = Path(__file__).resolve().parents[1]

# fmt: off
FULL = [
    "a", "b", "b1", "b2", "b_change_enc", "b_change_dec", "c1", "c2", "c2_lstar", "c2_paper", "c2_fresh",
    "d1", "d2", "d2_lstar", "e", "f", "f2", "a_paper", "b_paper", "p_sym", "p_dir", "e_paper", "p_tie",
    "v1", "v2", "v3", "v4", "v_symmetric", "h_gradient_1", "h_gradient_2", "h_applied_1", "h_applied_2",
]
STUDY1 = [
    "a", "b", "b1", "b2", "b_change_enc", "b_change_dec", "c1", "c2", "c2_lstar", "c2_paper", "c2_fresh",
    "d1", "d2", "d2_lstar", "e", "f", "f2", "v1", "v2", "v3", "v4", "v_symmetric",
    "h_gradient_1", "h_gradient_2", "h_applied_1", "h_applied_2",
]
STUDY3 = [
    "a", "b", "b1", "b2", "b_change_enc", "b_change_dec", "anti",
    "h_gradient_1", "h_gradient_2", "h_applied_1", "h_applied_2",
]
FIRST_LOOK = [
    "a", "b", "b1", "b2", "b_change_enc", "b_change_dec", "c1", "c2", "c2_lstar", "c2_paper",
    "a_paper", "b_paper", "p_sym", "p_dir", "e_paper", "h_gradient_1", "h_gradient_2", "h_applied_1", "h_applied_2",
]
SMOKE = [
    "a", "b", "b1", "b2", "b_change_enc", "b_change_dec", "c1", "c2", "c2_lstar", "c2_paper", "c2_fresh",
    "d1", "d2", "d2_lstar", "e", "f", "f2", "v1", "v2", "v3", "v4",
    "h_gradient_1", "h_gradient_2", "h_applied_1", "h_applied_2",
]
PILOTS = [
    "a", "b", "b1", "b2", "b_change_enc", "b_change_dec", "a_paper", "b_paper", "p_sym", "p_dir",
    "h_gradient_1", "h_gradient_2", "h_applied_1", "h_applied_2",
]
# fmt: on
DESIGNS = {
    "config.yaml": FULL,
    "study1.yaml": STUDY1,
    "study2-part1.yaml": FULL,
    "study3.yaml": STUDY3,
    "study3-part1.yaml": STUDY3,
    "study3-part2.yaml": STUDY3,
    "study3-part3.yaml": STUDY3,
    "paper.yaml": FULL,
    "paper-first-look.yaml": FIRST_LOOK,
    "smoke.yaml": SMOKE,
    "study3-pilots.yaml": PILOTS,
}


def test_every_committed_config_has_its_design_pinned():
    committed = {p.name for p in (REPO / "config").glob("*.yaml")} - {"schema.yaml"}
    assert committed == set(DESIGNS)


@pytest.mark.parametrize("name", sorted(DESIGNS))
def test_the_design_of_each_committed_config_is_unchanged(name):
    assert config_plan(validated_config(name)).design_claims() == DESIGNS[name]
