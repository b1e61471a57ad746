"""The study design: which claims each committed config's design includes (Plan.design_claims, the list the
reproduction report checks so that no claim of the design comes out "not tested").

The expected lists are a regression pin: they were computed from the hand-written design_claims before it was
derived from the claims' declared arms, and the derivation must give them unchanged (a changed list changes the
report's parameters, and so what the committed reports checked)."""

from __future__ import annotations

import inspect
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
from helpers import config_plan, validated_config

from attention_geometry.analysis.claims import CLAIM_IDS, CLAIMS
from attention_geometry.analysis.study_design import (
    APPLIED,
    BASELINE,
    CLAIM_DESIGN,
    CONDITIONS,
    DECODER,
    EMERGENCE_OBJECTIVES,
    ENCODER,
    FRESH,
    NAMED,
    PAPER_DECODER,
    RUN_SELECTIONS,
    SYMMETRIC,
    TIED,
    VISION,
    designed,
    reported,
)
from attention_geometry.training.hyper import INITS, RUN_OBJECTIVES

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
# the paper configs name the claims' own Holm families, anti-symmetry included (2026-12-06: the decoders'
# anti-symmetry in the design where the paper's bert-mini decoders can show it)
PAPER = [*FULL[:FULL.index("v1")], "anti", "anti_paper", *FULL[FULL.index("v1"):]]
FIRST_LOOK = [
    "a", "b", "b1", "b2", "b_change_enc", "b_change_dec", "c1", "c2", "c2_lstar", "c2_paper",
    "a_paper", "b_paper", "p_sym", "p_dir", "e_paper", "anti", "anti_paper",
    "h_gradient_1", "h_gradient_2", "h_applied_1", "h_applied_2",
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
# issue 39 item 6's question on the CPU: one encoder and one decoder (standard init), no claim decided (one seed)
BERT_MINI_20K = [
    "a", "b", "b1", "b2", "b_change_enc", "b_change_dec",
    "h_gradient_1", "h_gradient_2", "h_applied_1", "h_applied_2",
]
# study 4 (docs/preregistration-4.md): encoders, our decoders and the authors' decoders, standard init only
STUDY4 = [
    "a", "b", "b1", "b2", "b_change_enc", "b_change_dec", "a_paper", "b_paper", "p_sym", "p_dir", "anti",
    "anti_paper", "h_gradient_1", "h_gradient_2", "h_applied_1", "h_applied_2",
]
# fmt: on
DESIGNS = {
    "config.yaml": STUDY3,
    "study2.yaml": FULL,
    "study1.yaml": STUDY1,
    "study2-part1.yaml": FULL,
    "study3-part1.yaml": STUDY3,
    "study3-part2.yaml": STUDY3,
    "study3-part3.yaml": STUDY3,
    "paper.yaml": PAPER,
    "paper-first-look.yaml": FIRST_LOOK,
    "smoke.yaml": SMOKE,
    "study3-pilots.yaml": PILOTS,
    "exploratory-bert-mini-20k.yaml": BERT_MINI_20K,
    "study4.yaml": STUDY4,
    "study4-part1.yaml": STUDY4,
    "study4-part2.yaml": STUDY4,
    "study4-part3.yaml": STUDY4,
    "study4-part4.yaml": STUDY4,
    "study4-part5.yaml": STUDY4,
}


def test_every_committed_config_has_its_design_pinned():
    committed = {p.name for p in (REPO / "config").glob("*.yaml")} - {"schema.yaml"}
    assert committed == set(DESIGNS)


@pytest.mark.parametrize("name", sorted(DESIGNS))
def test_the_design_of_each_committed_config_is_unchanged(name):
    assert config_plan(validated_config(name)).design_claims() == DESIGNS[name]


# ------------------------------------------------------------------------------------ the declared arms
def test_every_claim_declares_its_arms():
    """A CLAIMS row without an entry in CLAIM_DESIGN (or an entry without a row) fails: the design would skip it."""
    undeclared = [i for i in CLAIM_IDS if i not in CLAIM_DESIGN]
    stray = [i for i in CLAIM_DESIGN if i not in CLAIM_IDS]
    assert not undeclared, f"claims without a declaration in study_design.CLAIM_DESIGN: {undeclared}"
    assert not stray, f"declarations of no claim: {stray}"


def test_the_declared_arms_are_real_objectives_and_inits():
    assert {ENCODER, DECODER, PAPER_DECODER, VISION} <= set(RUN_OBJECTIVES)
    assert {SYMMETRIC, TIED, FRESH} <= set(INITS) and BASELINE not in INITS
    for cid, d in CLAIM_DESIGN.items():
        assert d.runs in RUN_SELECTIONS and d.when in (*CONDITIONS, None), cid
        assert all(a.objective in RUN_OBJECTIVES and a.init in (*INITS, BASELINE) for a in d.arms), cid
        assert d.arms or not d.listed, f"{cid}: a listed claim needs arms"
        assert len(d.arms) > 1 or not d.paired, f"{cid}: pairs a single arm"
    assert EMERGENCE_OBJECTIVES == (ENCODER, DECODER, PAPER_DECODER)


def _effect_arms(claim) -> tuple[set, bool]:
    """(the (objective, init) arms, whether paired by seed) that a claim's effect function reads, stated per
    function from its code in analysis.claim_effects (an init None there is the baseline)."""
    fn, kw = claim.effect, {}
    if isinstance(fn, partial):
        fn, kw = fn.func, dict(fn.keywords)
    kw = {n: p.default for n, p in inspect.signature(fn).parameters.items() if p.default is not p.empty} | kw
    base = BASELINE
    both = {(ENCODER, base), (DECODER, base)}
    name = fn.__name__
    if name in ("loss_gain", "speedup"):
        return {(kw["objective"], kw["treatment"]), (kw["objective"], kw["ref"] or base)}, True
    if name == "retained":  # the tied runs of two objectives
        return {(kw["objective"], SYMMETRIC), (kw["ref"], SYMMETRIC)}, True
    if name == "gap":
        return both, True
    if name == "against_null":  # both emergence arms (the null is drawn at their size)
        return both, False
    if name == "update_effect":  # which 2: the decoder's directionality, of a table that needs both objectives
        return both, kw["which"] == 1
    if name in ("level", "change"):
        return {(kw["objective"], base)}, False
    if name == "objective_gap":
        return {(kw["first"], base), (kw["second"], base)}, True
    if name == "vision_rise":
        return {(VISION, base)}, False
    if name in ("pretrained_gap", "gqa_shift"):
        return set(), False
    raise AssertionError(f"{claim.id}: state the arms of effect function {name} here")


@pytest.mark.parametrize("claim", CLAIMS, ids=CLAIM_IDS)
def test_each_claims_effect_reads_the_arms_it_declares(claim):
    d = CLAIM_DESIGN[claim.id]
    assert _effect_arms(claim) == ({(a.objective, a.init) for a in d.arms}, d.paired)


def test_the_design_takes_a_claim_whose_arms_have_runs():
    """designed(): a paired claim needs a unit every arm has; a NAMED claim only where named; unlisted never."""
    runs = {("emergence", ENCODER): {1, 2}, ("emergence", DECODER): {2}, ("emergence", PAPER_DECODER): {3}}
    runs |= {("updates", ENCODER): {1}, ("updates", DECODER): {2}}

    def units(selection, arm):
        return runs.get((selection, arm.objective), set()) if arm.init == BASELINE else set()

    out = designed(units, {NAMED: lambda cid: cid == "anti", APPLIED: lambda cid: False})
    assert out == ["a", "b", "b1", "b2", "b_change_enc", "b_change_dec", "anti", "h_gradient_2"]
    assert "a_paper" not in out and "a_L0" not in out  # encoder and decoder-paper share no unit; never listed


def test_the_plan_reads_the_design_without_pandas_or_torch():
    code = "import sys, attention_geometry.workflow.plan; print(sorted({'pandas', 'torch'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# the rows that came with study 3 (docs/preregistration-3.md), written out by hand
STUDY3_ROWS = ["anti", "anti_paper", *(f"{c}_L{layer}" for layer in range(4) for c in ("a", "b", "anti"))]


@pytest.mark.parametrize(
    "families, with_study3",
    [
        (None, False),  # study 1: the claims' own families
        ({"primary": ["a", "b", "d1"], "secondary": ["c1", "c2", "d2", "e"]}, False),  # study 2's kind
        ({"primary": ["a", "b"], "secondary": ["anti"]}, True),  # study 3
        ({"paper": ["anti_paper"]}, True),
        ({"primary": ["a"], "empty": None}, False),
    ],
)
def test_a_report_lists_the_study3_rows_only_where_the_families_name_the_anti_symmetry(families, with_study3):
    ids = list(CLAIM_IDS)
    assert set(STUDY3_ROWS) <= set(ids)
    want = ids if with_study3 else [i for i in ids if i not in STUDY3_ROWS]
    assert reported(ids, families) == want
    assert reported(list(reversed(ids)), families) == list(reversed(want))  # the order given is kept
    with pytest.raises(KeyError, match="no_such_claim"):
        reported(["a", "no_such_claim"], families)


@pytest.mark.parametrize("config", ["study1.yaml", "study2.yaml", "config.yaml"])
def test_each_committed_claims_table_lists_what_its_report_now_lists(config):
    """The committed claims.csv files were written before `reported` existed (studies 1 and 2 before the
    study-3 rows): with each study's own config, its redrawn report must list the same claims, in the same order."""
    import csv

    cfg = validated_config(config)
    with open(REPO / cfg["results"] / "tables" / "claims.csv", newline="") as fh:
        committed = [row["id"] for row in csv.DictReader(fh)]
    assert len(committed) == (49 if config == "config.yaml" else 35)  # study 3 added 14 rows
    assert reported(list(CLAIM_IDS), cfg["figures"].get("claim_families")) == committed


@pytest.mark.parametrize("name", ["paper.yaml", "paper-first-look.yaml"])
def test_the_paper_configs_name_the_claims_own_families(name):
    """The paper configs name their Holm families only so that the decoders' anti-symmetry is in their design and
    report: each directional core claim falls in the family it has without a config (ClaimSettings.family)."""
    from attention_geometry.analysis.claims import ClaimSettings

    families = validated_config(name)["figures"]["claim_families"]
    named, own = ClaimSettings(families=families), ClaimSettings()
    assert [named.family(c) for c in CLAIMS] == [own.family(c) for c in CLAIMS]
    assert set(families) == set(own.family_names())
