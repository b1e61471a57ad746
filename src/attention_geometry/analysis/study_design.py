"""The study design: what each claim compares, declared once, without pandas (the workflow's plan reads it at
parse time, the claims and their effects in the notebooks).

Every claim of analysis.claims.CLAIMS has one entry in CLAIM_DESIGN (tests/test_study_design.py): the runs it
reads (`runs`: a run selection of the config, below), its arms (objective, init; BASELINE is the config's
figures.baseline_init) and whether it pairs them by seed (`paired`: its effect needs a unit, size/dataset/seed,
that every arm has). From it the plan derives the claims of a config's design (Plan.design_claims: each must come
out tested, or the report stops) and the objectives of the emergence runs.

A claim is in a config's design when each arm has a run in its selection (a paired claim: one unit that every
arm has), its extra condition `when` holds, and it is `listed`. The run selections:

    emergence   the baseline-init runs of figures.emergence_group (Plan.emergence_runs)
    ablation    every run of figures.ablation_group (Plan.ablation_runs)
    vision      every run of figures.vision_group (Plan.vision_runs; none without one)
    updates     the emergence runs whose W_qk updates are scored (Plan.update_runs)
    pretrained  the pretrained models (no arms: the models scored decide; never listed)

The extra conditions: NAMED, the config's figures.claim_families names the claim (the decoders' anti-symmetry
came with study 3, so that the earlier studies' designs and reports stay as they were); APPLIED, an update step
lies before an update run's last snapshot (an applied update spans a step to the next snapshot).

A report lists every claim, "not tested" where its arms have no runs, except the claims that came with a later
study (`reported_with`: the decoders' anti-symmetry and the per-layer rows, ANTI_SYMMETRY): they enter a report
only where the config's Holm families name one of those ids (`reported`), so that a redrawn report of study 1 or 2
lists the claims it listed when its results landed.

The arm names (objectives and inits of training.hyper) are defined here once; claims.py and claim_effects.py use
them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

__all__ = [
    "ENCODER",
    "DECODER",
    "PAPER_DECODER",
    "VISION",
    "SYMMETRIC",
    "TIED",
    "FRESH",
    "BASELINE",
    "PER_LAYER",
    "ANTI_SYMMETRY",
    "EMERGENCE",
    "ABLATION",
    "VISION_RUNS",
    "UPDATES",
    "PRETRAINED",
    "RUN_SELECTIONS",
    "NAMED",
    "APPLIED",
    "CONDITIONS",
    "Arm",
    "Design",
    "CLAIM_DESIGN",
    "REQUIRED_EMERGENCE",
    "EMERGENCE_OBJECTIVES",
    "designed",
    "reported",
]

# ------------------------------------------------------------------------------------------- the arms
# objectives (training.hyper.RUN_OBJECTIVES)
ENCODER = "encoder"
DECODER = "decoder"
PAPER_DECODER = "decoder-paper"  # the authors' decoder objective
VISION = "classifier"  # the ViT runs
# inits (training.hyper.INITS)
SYMMETRIC = "symmetric-fresh"  # the paper's "symmetric" init (resources/paper/README.md)
TIED = "symmetric"  # tied at the standard scale
FRESH = "fresh"  # the untied control of SYMMETRIC
BASELINE = "baseline"  # not an init: the config's figures.baseline_init (standard)

# the claims whose naming in a config's Holm families brings the study-3 rows into its report (`reported`)
ANTI_SYMMETRY = ("anti", "anti_paper")
# the layers of the per-layer rows (a_L*, b_L*, anti_L*: descriptive; docs/preregistration-3.md): bert-mini's four
PER_LAYER = (0, 1, 2, 3)

# the run selections and the extra conditions (the module docstring)
EMERGENCE, ABLATION, VISION_RUNS, UPDATES, PRETRAINED = "emergence", "ablation", "vision", "updates", "pretrained"
RUN_SELECTIONS = (EMERGENCE, ABLATION, VISION_RUNS, UPDATES, PRETRAINED)
NAMED, APPLIED = "named", "applied"
CONDITIONS = (NAMED, APPLIED)


@dataclass(frozen=True)
class Arm:
    """The runs of one objective and init (BASELINE: the config's baseline init)."""

    objective: str
    init: str = BASELINE


@dataclass(frozen=True)
class Design:
    """What one claim compares: its run selection, its arms, whether it pairs them by seed, an extra condition
    (NAMED | APPLIED | None), whether a design lists it (False: it may come out "not tested" by design), and the
    claim ids of which a config's Holm families must name one for a report to list it at all (empty: always)."""

    runs: str
    arms: tuple[Arm, ...] = ()
    paired: bool = False
    when: str | None = None
    listed: bool = True
    reported_with: tuple[str, ...] = ()


_ENC, _DEC, _PAPER, _VIT = Arm(ENCODER), Arm(DECODER), Arm(PAPER_DECODER), Arm(VISION)
_ENC_SYM, _DEC_SYM, _PAPER_SYM = Arm(ENCODER, SYMMETRIC), Arm(DECODER, SYMMETRIC), Arm(PAPER_DECODER, SYMMETRIC)
_VIT_SYM = Arm(VISION, SYMMETRIC)


def _pair(runs: str, *arms: Arm, **kw) -> Design:
    return Design(runs, arms, paired=True, **kw)


def _both(runs: str, *arms: Arm, **kw) -> Design:
    return Design(runs, arms, paired=False, **kw)


# One entry per claim, in the order of the design lists (Plan.design_claims: the report's parameter). Each claim's
# effect function (claim_effects) reads these arms: a test checks that its objectives and inits are declared here.
CLAIM_DESIGN: dict[str, Design] = {
    # the structures at the horizon: encoder vs decoder, baseline init (b1, b2 read both arms: the null is drawn
    # at their size)
    "a": _pair(EMERGENCE, _ENC, _DEC),
    "b": _pair(EMERGENCE, _ENC, _DEC),
    "b1": _both(EMERGENCE, _ENC, _DEC),
    "b2": _both(EMERGENCE, _ENC, _DEC),
    "b_change_enc": _both(EMERGENCE, _ENC),
    "b_change_dec": _both(EMERGENCE, _DEC),
    # the symmetric init of the encoder, vs the baseline (c) and vs the untied fresh init (d)
    "c1": _pair(ABLATION, _ENC_SYM, _ENC),
    "c2": _pair(ABLATION, _ENC_SYM, _ENC),
    "c2_lstar": _pair(ABLATION, _ENC_SYM, _ENC),
    "c2_paper": _pair(ABLATION, _ENC_SYM, _ENC),
    "c2_fresh": _pair(ABLATION, Arm(ENCODER, FRESH), _ENC),
    "d1": _pair(ABLATION, _ENC_SYM, Arm(ENCODER, FRESH)),
    "d2": _pair(ABLATION, _ENC_SYM, Arm(ENCODER, FRESH)),
    "d2_lstar": _pair(ABLATION, _ENC_SYM, Arm(ENCODER, FRESH)),
    # the symmetric init of the decoder
    "e": _pair(ABLATION, _DEC_SYM, _ENC_SYM),
    "f": _pair(ABLATION, _DEC_SYM, _DEC),
    "f2": _pair(ABLATION, _DEC_SYM, _DEC),
    # the authors' decoder objective as a third arm
    "a_paper": _pair(EMERGENCE, _ENC, _PAPER),
    "b_paper": _pair(EMERGENCE, _ENC, _PAPER),
    "p_sym": _pair(EMERGENCE, _PAPER, _DEC),
    "p_dir": _pair(EMERGENCE, _PAPER, _DEC),
    "e_paper": _pair(ABLATION, _PAPER_SYM, _ENC_SYM),
    "p_tie": _pair(ABLATION, _PAPER_SYM, _DEC_SYM),
    # the decoders' anti-symmetry: in a design only where the config's Holm families name it
    "anti": _both(EMERGENCE, _DEC, when=NAMED, reported_with=ANTI_SYMMETRY),
    "anti_paper": _both(EMERGENCE, _PAPER, when=NAMED, reported_with=ANTI_SYMMETRY),
    # the per-layer rows: never listed (a model with fewer than PER_LAYER's layers leaves some "not tested")
    **{
        f"{cid}_L{layer}": Design(EMERGENCE, arms, paired=len(arms) > 1, listed=False, reported_with=ANTI_SYMMETRY)
        for layer in PER_LAYER
        for cid, arms in (("a", (_ENC, _DEC)), ("b", (_ENC, _DEC)), ("anti", (_DEC,)))
    },
    # the ViT runs
    "v1": _both(VISION_RUNS, _VIT),
    "v2": _pair(VISION_RUNS, _VIT_SYM, _VIT),
    "v3": _pair(VISION_RUNS, _VIT_SYM, _VIT),
    "v4": _pair(VISION_RUNS, _VIT_SYM, Arm(VISION, FRESH)),
    "v_symmetric": _pair(VISION_RUNS, Arm(VISION, TIED), _VIT),
    # pretrained models: the models scored decide, not the config's groups
    "g1": Design(PRETRAINED, listed=False),
    "g2": Design(PRETRAINED, listed=False),
    "g3": Design(PRETRAINED, listed=False),
    # the updates of W_qk (h_*_2, the decoder's directionality, reads the encoder's rows too)
    **{
        f"h_{kind}_{which}": Design(
            UPDATES, (_ENC, _DEC), paired=which == 1, when=None if kind == "gradient" else APPLIED
        )
        for kind in ("gradient", "applied")
        for which in (1, 2)
    },
}

# The emergence group must have these arms (Figure 3, claims a and b); the others of EMERGENCE_OBJECTIVES are
# optional arms (the authors' decoder objective).
REQUIRED_EMERGENCE = (ENCODER, DECODER)
EMERGENCE_OBJECTIVES = tuple(
    dict.fromkeys(
        [*REQUIRED_EMERGENCE]
        + [a.objective for d in CLAIM_DESIGN.values() if d.runs in (EMERGENCE, UPDATES) for a in d.arms]
    )
)


def designed(units: Callable[[str, Arm], set], holds: Mapping[str, Callable[[str], bool]]) -> list[str]:
    """The listed claims, in CLAIM_DESIGN's order, whose arms have runs: `units(selection, arm)` is the set of
    units (size, dataset, seed) of that arm's runs in that selection, `holds[condition](claim id)` whether an
    extra condition holds for it."""
    out = []
    for cid, d in CLAIM_DESIGN.items():
        if not d.listed:
            continue
        found = [units(d.runs, arm) for arm in d.arms]
        if not all(found) or (d.paired and not set.intersection(*found)):
            continue
        if d.when is None or holds[d.when](cid):
            out.append(cid)
    return out


def reported(claim_ids, families: Mapping[str, object] | None) -> list[str]:
    """The ids of `claim_ids` that a report lists, in their order, for a config whose Holm families
    (figures.claim_families; None: the claims' own) are `families`: all but the claims whose `reported_with` ids
    the families name none of. An id that CLAIM_DESIGN does not know is an error (a claim without a design)."""
    named = {str(i) for ids in (families or {}).values() for i in (ids or [])}
    unknown = [str(c) for c in claim_ids if c not in CLAIM_DESIGN]
    if unknown:
        raise KeyError(f"claims without a design (analysis.study_design.CLAIM_DESIGN): {', '.join(unknown)}")
    return [c for c in claim_ids if not CLAIM_DESIGN[c].reported_with or named & set(CLAIM_DESIGN[c].reported_with)]
