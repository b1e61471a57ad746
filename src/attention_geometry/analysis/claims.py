"""The claims table of the reproduction report: each claim of the paper decided on its right unit.

CLAIMS is the one list of the claims, written as the pre-registrations write them (docs/preregistration.md,
docs/preregistration-2.md): per claim its id, its text (the prediction; written here only: the report and the
README take it from claims.csv), kind (core | also), unit (seed | model), the input tables it reads, its effect per
unit (a function of analysis.claim_effects), its rule (directional | equivalence | descriptive) with the predicted
sign (+1: > 0, -1: < 0, 0: none), the key of its margin (ClaimSettings.margin) and its Holm family (the directional
core claims only; a config may regroup them, ClaimSettings.families), and the paper's figure on the same unit.
`reproduction_claims` turns every entry into one row (claim_rules.CLAIM_COLUMNS, docs/contracts.md "Claims") by
the rules of analysis.claim_rules and never drops one: a claim whose data are missing is "not tested".
What each claim compares (its runs, arms and pairing) is declared once in
analysis.study_design.CLAIM_DESIGN, from which the workflow derives the claims of a config's design.

Seeds are the unit of our training runs (the encoder and decoder of one seed share their initial weights, so
contrasts are paired by seed), models the unit of pretrained checkpoints. Fewer than 3 seeds never decide; fewer
than 3 models per class give a descriptive row.

Also here, as the notebooks call them: the claims' inputs (ClaimTables) and settings (ClaimSettings), the
speed-up definitions in words (SPEEDUP_WHAT), and the report's text of the table (rule_text, claim_sentence,
claim_bullet, verdict_counts, report_summary).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from functools import partial

import numpy as np
import pandas as pd

from attention_geometry.analysis.claim_effects import (
    against_null,
    change,
    gap,
    gqa_shift,
    level,
    loss_gain,
    objective_gap,
    paper_gap,
    paper_gqa,
    paper_init,
    paper_pretrained,
    pretrained_gap,
    retained,
    speedup,
    update_effect,
    vision_rise,
)
from attention_geometry.analysis.claim_rules import Claim, evaluate
from attention_geometry.analysis.completeness import check_claim_values
from attention_geometry.analysis.paper_claims import fmt_estimate as _fmt
from attention_geometry.analysis.stats import MIN_N
from attention_geometry.analysis.study_design import (
    CLAIM_DESIGN,
    PAPER_DECODER,
    PER_LAYER,
    SYMMETRIC,
    VISION,
    reported,
)
from attention_geometry.analysis.summaries import speedup_target_text
from attention_geometry.errors import UserError

DEFAULT_MARGINS = {"symmetry": 0.05, "directionality": 0.05, "loss": 0.01, "speedup": 0.05}
VERDICT_ORDER = ("holds", "contradicted", "inconclusive", "descriptive", "not tested")
# the Holm families (docs/preregistration.md): the text runs' core claims, and apart from them the vision runs'
# (so that adding the vision runs changes no text verdict). A config may name its own families instead
# (ClaimSettings.families, config figures.claim_families: docs/preregistration-2.md).
FAMILIES = ("text", "vision", "paper-decoder", "anti-symmetry")
TABLES = (
    "training",
    "loss",
    "updates",
    "pretrained",
    "null",
    "paper_pretrained",
    "paper_training",
    "paper_table1",
    "paper_loss",
    "paper_rebuttal",
    "caveats",
    "gqa",
)


# --------------------------------------------------------------------------------- inputs, settings
@dataclass(frozen=True, eq=False)
class ClaimTables:
    """The tables the claims read (docs/contracts.md columns; None = not available: its claims are "not
    tested") and the runs they use: `emergence_runs` {encoder: [runs], decoder: [runs]} (standard init, every
    seed), `ablation_runs` (every init of the init ablation; empty = every run of the loss table),
    `snapshot_steps` {run: [steps]} (None: the steps of the run's training scores, every snapshot being scored),
    which fix the span s -> next snapshot of an applied update, and `vision_runs` (the ViT runs of every init
    and seed: the vision claims; empty = they are not tested). `gqa`: the grouped-query models scored by the
    attention's W_qk and by the paper's expansion ({results}/tables/gqa_paper_method.csv, columns
    formats.columns.GQA_COLUMNS; only configs with figures.gqa_models make it)."""

    training: pd.DataFrame | None = None
    loss: pd.DataFrame | None = None
    updates: pd.DataFrame | None = None
    pretrained: pd.DataFrame | None = None
    null: pd.DataFrame | None = None
    paper_pretrained: pd.DataFrame | None = None
    paper_training: pd.DataFrame | None = None
    paper_table1: pd.DataFrame | None = None
    paper_loss: pd.DataFrame | None = None
    paper_rebuttal: pd.DataFrame | None = None
    caveats: pd.DataFrame | None = None
    emergence_runs: dict | None = None
    ablation_runs: Sequence[str] = ()
    snapshot_steps: dict | None = None
    vision_runs: Sequence[str] = ()
    gqa: pd.DataFrame | None = None


@dataclass(frozen=True)
class ClaimSettings:
    """margins: smallest effects of interest by key (DEFAULT_MARGINS fill the missing ones); horizon_snapshots:
    the per-seed statistic's last K snapshots; level: of every interval (alpha = 1 - level); speedup_target:
    the pre-declared target of the speed-up claims (summaries.check_speedup_target; None = the default);
    families: {family name: [claim id, ...]}, the Holm families of the directional core claims as a
    pre-registration names them (None: each claim's own `family`, FAMILIES). With families given, a directional
    core claim listed in none of them is tested alone (its p unadjusted), and a listed id that is no claim, or is
    listed twice, is an error."""

    margins: dict | None = None
    horizon_snapshots: int = 3
    baseline_init: str = "standard"
    level: float = 0.95
    speedup_target: dict | None = None
    families: dict | None = None

    def family(self, claim: Claim) -> str | None:
        """The Holm family of `claim` (None: not Holm adjusted)."""
        if not claim.in_family:
            return None
        if self.families is None:
            return claim.family
        for name, ids in self.families.items():
            if claim.id in ids:
                return str(name)
        return None

    def family_names(self) -> tuple[str, ...]:
        return FAMILIES if self.families is None else tuple(str(f) for f in self.families)

    def check_families(self, ids: Sequence[str]) -> None:
        if self.families is None:
            return
        if not isinstance(self.families, dict):
            raise UserError(f"claim families: expected a mapping of family name to claim ids, got {self.families!r}")
        listed = [str(i) for v in self.families.values() for i in (v or [])]
        unknown = sorted(set(listed) - set(ids))
        twice = sorted({i for i in listed if listed.count(i) > 1})
        if unknown or twice:
            raise UserError(
                "claim families: "
                + "; ".join(
                    x
                    for x in (
                        f"unknown claim id(s) {', '.join(unknown)}" if unknown else "",
                        f"listed in several families: {', '.join(twice)}" if twice else "",
                    )
                    if x
                )
            )

    @property
    def alpha(self) -> float:
        return round(1.0 - float(self.level), 12)

    def margin(self, key: str) -> float:
        return float({**DEFAULT_MARGINS, **(self.margins or {})}[key])


# ------------------------------------------------------------------------------------------ the claims
# The speed-up definitions in words (each speed-up claim's test column names its own; Table 1's title cites two).
SPEEDUP_WHAT = {
    "declared": "signed speed-up 1 - s*/S at the pre-declared target, {target}",
    "lstar": "signed speed-up 1 - s*/S at the common target L*{target}, the highest of the compared runs' lowest "
    "held-out losses up to the horizon (every run reaches it)",
    "paper": "the paper's speed-up (its Table 1): the share of steps saved, (S - s*)/S, to reach the baseline's "
    "held-out loss at its last step S within the horizon",
}
# The paper's figure where it published none on our unit.
_NO_FRESH = "not measured in the paper (no untied fresh control)"
_THEORY = "predicted by Theorems 2.3/2.4; not measured in the paper"
_REBUTTAL_DEC = "the rebuttal: no gain for decoders (no published numbers)"
_REBUTTAL_LOSE = "the rebuttal: decoders lose a symmetric initialization (no published numbers)"
_SAME_OBJECTIVE = (
    "implicit: the paper reports its decoders as causal LMs (its script trains them on the masking collator)"
)
_REBUTTAL_VIT = "the rebuttal: no significant speed-up for ViTs on CIFAR-10 / ImageNet-1k (no published numbers)"
_PAPER_ANTI = (
    "Fig. S4: the paper's bert-mini decoders (Wikipedia) turn anti-symmetric, median over layers -0.19 at 10k "
    "steps, -0.50 at 100k (+0.03 at 3k; their steps are 256 x 512 tokens)"
)
_FIG_S1 = "Fig. S1: pretrained vision Transformers have symmetric W_qk (not trained from scratch in the paper)"


def _speedup(objective: str, how: str, ref: str | None = None, treatment: str = SYMMETRIC):
    """The effect: per seed, `treatment`'s speed-up over `ref` (None: the baseline init) by definition `how`."""
    return partial(speedup, objective=objective, how=how, what=SPEEDUP_WHAT[how], ref=ref, treatment=treatment)


# One entry per claim, in the order of claims.csv. `{baseline}` in a text is the baseline init (settings). The
# effects are claim_effects' functions; `ref` None is the baseline init, `treatment` by default symmetric-fresh.
# Laid out by hand as a table (ruff format would give each field its own line).
# fmt: off
CLAIMS: tuple[Claim, ...] = (
    # --- the structures at the horizon, standard init: a, b in docs/preregistration.md's text family (study 2:
    # primary); b1, b2, b_change_*: also rows on the same runs (secondary)
    Claim(
        "a", "encoders are more symmetric than decoders (standard init, at the horizon)",
        kind="core", unit="seed", inputs=("training",), effect=partial(gap, score="symmetry", sign=+1),
        rule="directional", sign=+1, margin="symmetry", family="text",
        paper=partial(paper_gap, score="symmetry", sign=+1),
    ),
    Claim(
        "b", "decoders are more column-dominant than encoders (standard init, at the horizon)",
        kind="core", unit="seed", inputs=("training",), effect=partial(gap, score="directionality", sign=-1),
        rule="directional", sign=-1, margin="directionality", family="text",
        paper=partial(paper_gap, score="directionality", sign=-1),
    ),
    Claim(
        "b1", "encoder directionality vs the random-init null",
        kind="also", unit="seed", inputs=("training", "null"), effect=partial(against_null, objective="encoder"),
        rule="descriptive", sign=0, margin="directionality", family=None,
    ),
    Claim(
        "b2", "decoder directionality below the random-init null",
        kind="also", unit="seed", inputs=("training", "null"), effect=partial(against_null, objective="decoder"),
        rule="directional", sign=-1, margin="directionality", family=None,
    ),
    Claim(
        "b_change_enc", "encoder directionality at the horizon vs its own step 0 (no direction predicted)",
        kind="also", unit="seed", inputs=("training",),
        effect=partial(change, objective="encoder", score="directionality"),
        rule="descriptive", sign=0, margin="directionality", family=None,
    ),
    Claim(
        "b_change_dec", "decoder directionality falls from its own step 0 (toward column dominance)",
        kind="also", unit="seed", inputs=("training",),
        effect=partial(change, objective="decoder", score="directionality"),
        rule="directional", sign=-1, margin="directionality", family=None,
    ),
    # --- the symmetric init of the encoder (c: vs the baseline, d: vs the untied fresh init): c1, c2, d1, d2 in the
    # text family (study 2: d1 primary; c1, c2, d2 secondary); also rows: the other speed-up definitions, fresh alone
    Claim(
        "c1", f"{SYMMETRIC} init lowers the encoder's held-out loss vs {{baseline}}",
        kind="core", unit="seed", inputs=("loss",), effect=partial(loss_gain, objective="encoder"),
        rule="directional", sign=+1, margin="loss", family="text",
        paper=partial(paper_init, what="loss"),
    ),
    Claim(
        "c2", f"{SYMMETRIC} init speeds up the encoder's training vs {{baseline}} (at the pre-declared target)",
        kind="core", unit="seed", inputs=("loss",), effect=_speedup("encoder", "declared"),
        rule="directional", sign=+1, margin="speedup", family="text",
        paper=partial(paper_init, what="speedup", speedup="declared"),
    ),
    Claim(
        "c2_lstar", f"{SYMMETRIC} init speeds up the encoder's training vs {{baseline}} (at the common target L*)",
        kind="also", unit="seed", inputs=("loss",), effect=_speedup("encoder", "lstar"),
        rule="directional", sign=+1, margin="speedup", family=None,
        paper=partial(paper_init, what="speedup", speedup="lstar"),
    ),
    Claim(
        "c2_paper", f"{SYMMETRIC} init speeds up the encoder's training vs {{baseline}} (the paper's definition: "
        "steps saved to reach the baseline's final loss)",
        kind="also", unit="seed", inputs=("loss",), effect=_speedup("encoder", "paper"),
        rule="directional", sign=+1, margin="speedup", family=None,
        paper=partial(paper_init, what="speedup", speedup="paper"),
    ),
    Claim(
        "c2_fresh", "fresh (untied) init vs {baseline}: the encoder's speed-up at c2's target (the init scale alone)",
        kind="also", unit="seed", inputs=("loss",), effect=_speedup("encoder", "declared", treatment="fresh"),
        rule="descriptive", sign=0, margin="speedup", family=None,
        paper=_NO_FRESH,
    ),
    Claim(
        "d1", f"{SYMMETRIC} init lowers the encoder's held-out loss vs fresh",
        kind="core", unit="seed", inputs=("loss",), effect=partial(loss_gain, objective="encoder", ref="fresh"),
        rule="directional", sign=+1, margin="loss", family="text",
        paper=_NO_FRESH,
    ),
    Claim(
        "d2", f"{SYMMETRIC} init speeds up the encoder's training vs fresh (at the pre-declared target)",
        kind="core", unit="seed", inputs=("loss",), effect=_speedup("encoder", "declared", ref="fresh"),
        rule="directional", sign=+1, margin="speedup", family="text",
        paper=_NO_FRESH,
    ),
    Claim(
        "d2_lstar", f"{SYMMETRIC} init speeds up the encoder's training vs fresh (at the common target L*)",
        kind="also", unit="seed", inputs=("loss",), effect=_speedup("encoder", "lstar", ref="fresh"),
        rule="directional", sign=+1, margin="speedup", family=None,
        paper=_NO_FRESH,
    ),
    # --- the symmetric init of the decoder: e in the text family (study 2: secondary); f, f2 equivalence (TOST)
    Claim(
        "e", "decoders keep less of a tied initialization than encoders",
        kind="core", unit="seed", inputs=("training",), effect=retained,
        rule="directional", sign=-1, margin="symmetry", family="text",
        paper=_REBUTTAL_LOSE,
    ),
    Claim(
        "f", f"decoder {SYMMETRIC} init gains nothing vs {{baseline}} (held-out loss)",
        kind="core", unit="seed", inputs=("loss",), effect=partial(loss_gain, objective="decoder"),
        rule="equivalence", sign=0, margin="loss", family=None,
        paper=_REBUTTAL_DEC,
    ),
    Claim(
        "f2", f"decoder {SYMMETRIC} init does not speed up training vs {{baseline}} (at the pre-declared target)",
        kind="core", unit="seed", inputs=("loss",), effect=_speedup("decoder", "declared"),
        rule="equivalence", sign=0, margin="speedup", family=None,
        paper=_REBUTTAL_DEC,
    ),
    # --- the authors' decoder objective (decoder-paper) as a third arm (docs/preregistration-2.md): the paper's
    # claims a, b and e with their decoder (the paper-decoder family), and its symmetry, directionality and
    # tied-init retention against ours (equivalence)
    Claim(
        "a_paper", f"encoders are more symmetric than the authors' decoders ({PAPER_DECODER} objective; standard "
        "init, at the horizon)",
        kind="core", unit="seed", inputs=("training",),
        effect=partial(objective_gap, score="symmetry", first="encoder", second=PAPER_DECODER),
        rule="directional", sign=+1, margin="symmetry", family="paper-decoder",
        paper=partial(paper_gap, score="symmetry", sign=+1),
    ),
    Claim(
        "b_paper", f"the authors' decoders ({PAPER_DECODER}) are more column-dominant than encoders (standard "
        "init, at the horizon)",
        kind="core", unit="seed", inputs=("training",),
        effect=partial(objective_gap, score="directionality", first=PAPER_DECODER, second="encoder"),
        rule="directional", sign=-1, margin="directionality", family="paper-decoder",
        paper=partial(paper_gap, score="directionality", sign=-1),
    ),
    Claim(
        "e_paper", f"the authors' decoders ({PAPER_DECODER}) keep less of a tied initialization than encoders",
        kind="core", unit="seed", inputs=("training",), effect=partial(retained, objective=PAPER_DECODER),
        rule="directional", sign=-1, margin="symmetry", family="paper-decoder",
        paper=_REBUTTAL_LOSE,
    ),
    Claim(
        "p_sym", f"the authors' decoder objective ({PAPER_DECODER}) gives the same symmetry as ours (standard "
        "init, at the horizon)",
        kind="core", unit="seed", inputs=("training",),
        effect=partial(objective_gap, score="symmetry", first=PAPER_DECODER, second="decoder"),
        rule="equivalence", sign=0, margin="symmetry", family=None,
        paper=_SAME_OBJECTIVE,
    ),
    Claim(
        "p_dir", f"the authors' decoder objective ({PAPER_DECODER}) gives the same directionality as ours "
        "(standard init, at the horizon)",
        kind="core", unit="seed", inputs=("training",),
        effect=partial(objective_gap, score="directionality", first=PAPER_DECODER, second="decoder"),
        rule="equivalence", sign=0, margin="directionality", family=None,
        paper=_SAME_OBJECTIVE,
    ),
    Claim(
        "p_tie", f"the authors' decoder objective ({PAPER_DECODER}) keeps as much of a tied initialization as ours",
        kind="core", unit="seed", inputs=("training",),
        effect=partial(retained, objective=PAPER_DECODER, ref="decoder"),
        rule="equivalence", sign=0, margin="symmetry", family=None,
        paper=_SAME_OBJECTIVE,
    ),
    # --- the decoders' anti-symmetry (docs/preregistration-3.md): the paper's bert-mini decoders turn
    # anti-symmetric (Fig. S4); anti for our decoder objective, anti_paper for the authors'; and the per-layer
    # estimates of a, b and anti (descriptive: layers of one run describe, they do not replicate)
    Claim(
        "anti", "decoders turn anti-symmetric: decoder symmetry below 0 (standard init, at the horizon)",
        kind="core", unit="seed", inputs=("training",), effect=partial(level, objective="decoder", score="symmetry"),
        rule="directional", sign=-1, margin="symmetry", family="anti-symmetry",
        paper=_PAPER_ANTI,
    ),
    Claim(
        "anti_paper", f"the authors' decoders ({PAPER_DECODER}) turn anti-symmetric: symmetry below 0 (standard "
        "init, at the horizon)",
        kind="core", unit="seed", inputs=("training",),
        effect=partial(level, objective=PAPER_DECODER, score="symmetry"),
        rule="directional", sign=-1, margin="symmetry", family="anti-symmetry",
        paper=_PAPER_ANTI,
    ),
    *(
        Claim(
            f"{cid}_L{layer}", f"{text} (layer {layer} alone; descriptive)",
            kind="also", unit="seed", inputs=("training",), effect=partial(effect, layer=layer),
            rule="descriptive", sign=0, margin=margin, family=None,
        )
        for layer in PER_LAYER
        for cid, text, effect, margin in (
            ("a", "encoder - decoder symmetry", partial(gap, score="symmetry", sign=+1), "symmetry"),
            ("b", "decoder - encoder directionality", partial(gap, score="directionality", sign=-1),
             "directionality"),
            ("anti", "decoder symmetry", partial(level, objective="decoder", score="symmetry"), "symmetry"),
        )
    ),
    # --- the ViT runs (docs/preregistration.md, vision runs): v1, v4 the vision family, Holm-adjusted apart from
    # the text claims; v2, v3 equivalence (TOST); v_symmetric descriptive
    Claim(
        "v1", "training makes a ViT more symmetric than its random init ({baseline} init, at the horizon)",
        kind="core", unit="seed", inputs=("training",), effect=vision_rise,
        rule="directional", sign=+1, margin="symmetry", family="vision",
        paper=_FIG_S1,
    ),
    Claim(
        "v2", f"ViT {SYMMETRIC} init gains nothing vs {{baseline}} (held-out loss)",
        kind="core", unit="seed", inputs=("loss",), effect=partial(loss_gain, objective=VISION),
        rule="equivalence", sign=0, margin="loss", family=None,
        paper=_REBUTTAL_VIT,
    ),
    Claim(
        "v3", f"ViT {SYMMETRIC} init does not speed up training vs {{baseline}} (at the pre-declared target)",
        kind="core", unit="seed", inputs=("loss",), effect=_speedup(VISION, "declared"),
        rule="equivalence", sign=0, margin="speedup", family=None,
        paper=_REBUTTAL_VIT,
    ),
    Claim(
        "v4", f"ViT {SYMMETRIC} init lowers the held-out loss vs fresh (as the encoders' d1)",
        kind="core", unit="seed", inputs=("loss",), effect=partial(loss_gain, objective=VISION, ref="fresh"),
        rule="directional", sign=+1, margin="loss", family="vision",
        paper=_NO_FRESH,
    ),
    Claim(
        "v_symmetric", "ViT symmetric init (tied at the standard scale) vs {baseline}: held-out loss gain",
        kind="also", unit="seed", inputs=("loss",),
        effect=partial(loss_gain, objective=VISION, treatment="symmetric"),
        rule="descriptive", sign=0, margin="loss", family=None,
        paper=_REBUTTAL_VIT,
    ),
    # --- pretrained models (unit: the model; descriptive below 3 models per class)
    Claim(
        "g1", "pretrained encoders are more symmetric than decoders",
        kind="also", unit="model", inputs=("pretrained",), effect=partial(pretrained_gap, score="symmetry", sign=+1),
        rule="directional", sign=+1, margin="symmetry", family=None,
        paper=partial(paper_pretrained, score="symmetry", sign=+1),
    ),
    Claim(
        "g2", "pretrained decoders are more column-dominant than encoders",
        kind="also", unit="model", inputs=("pretrained",),
        effect=partial(pretrained_gap, score="directionality", sign=-1),
        rule="directional", sign=-1, margin="directionality", family=None,
        paper=partial(paper_pretrained, score="directionality", sign=-1),
    ),
    Claim(
        "g3", "the paper's grouped-query decoders' near-zero symmetry comes from its expansion (scored by it, a "
        "grouped-query model's median symmetry falls below that of the attention's own W_qk)",
        kind="also", unit="model", inputs=("gqa",), effect=gqa_shift,
        rule="directional", sign=-1, margin="symmetry", family=None,
        paper=paper_gqa,
    ),
    # --- the updates of W_qk (Theorems 2.3/2.4): the same two predictions for the gradient dL/dW_qk and for the
    # applied update between snapshots
    *(
        Claim(
            f"h_{update}_{which}", text.format(update=update),
            kind="also", unit="seed", inputs=("updates",), effect=partial(update_effect, kind=update, which=which),
            rule="directional", sign=sign, margin=margin, family=None,
            paper=_THEORY,
        )
        for update in ("gradient", "applied")
        for which, text, sign, margin in (
            (1, "masked-LM {update} updates are more symmetric than causal-LM ones", +1, "symmetry"),
            (2, "causal-LM {update} updates are column-dominant", -1, "directionality"),
        )
    ),
)
# fmt: on
CLAIM_IDS = tuple(c.id for c in CLAIMS)
assert len(set(CLAIM_IDS)) == len(CLAIM_IDS), "claim ids must be unique"
assert all((c.family is not None) == c.in_family for c in CLAIMS), "a family for each directional core claim only"
assert set(CLAIM_IDS) == set(CLAIM_DESIGN), (
    f"each claim declares its arms in study_design.CLAIM_DESIGN: {sorted(set(CLAIM_IDS) ^ set(CLAIM_DESIGN))}"
)


def reproduction_claims(
    tables: ClaimTables | None = None, settings: ClaimSettings | None = None, **keywords
) -> pd.DataFrame:
    """Every claim of CLAIMS as one row (CLAIM_COLUMNS, docs/contracts.md "Claims"). The inputs come as
    ClaimTables and ClaimSettings; their fields may also be given as keywords (training=..., margins=...)."""
    if keywords:
        if tables is not None or settings is not None:
            raise UserError("reproduction_claims: pass ClaimTables/ClaimSettings or their fields as keywords, not both")
        names = {f.name for f in fields(ClaimTables)}, {f.name for f in fields(ClaimSettings)}
        unknown = sorted(set(keywords) - names[0] - names[1])
        if unknown:
            raise UserError(f"reproduction_claims: unknown argument(s) {', '.join(unknown)}")
        tables = ClaimTables(**{k: v for k, v in keywords.items() if k in names[0]})
        settings = ClaimSettings(**{k: v for k, v in keywords.items() if k in names[1]})
    tables = tables or ClaimTables()
    check_claim_values(tables)
    return evaluate(CLAIMS, tables, settings or ClaimSettings())


def report_claims(claims: pd.DataFrame, families: dict | None = None) -> pd.DataFrame:
    """The rows of a claims table (reproduction_claims) that a study's report and claims.csv list, for a config
    whose Holm families are `families` (figures.claim_families; None: the claims' own): every claim but those
    that came with a later study and are not named there (analysis.study_design.reported). Dropping them changes
    no other row: they form Holm families of their own (anti-symmetry) or none (the per-layer rows)."""
    keep = reported(list(claims["id"]), families)
    return claims[claims["id"].isin(keep)].reset_index(drop=True)


# ------------------------------------------------------------------------------------------ report
_BY_ID = {c.id: c for c in CLAIMS}


def _pct(r: pd.Series) -> bool:
    c = _BY_ID.get(str(r["id"]))
    return c is not None and c.margin == "speedup"


def _p_text(r: pd.Series) -> str:
    parts = []
    if np.isfinite(r["p_value"]):
        parts.append(f"p = {r['p_value']:.3g}")
    if np.isfinite(r["p_holm"]):
        parts.append(f"p_holm = {r['p_holm']:.3g}")
    if np.isfinite(r["p_signflip"]):
        parts.append(f"sign-flip p = {r['p_signflip']:.3g} (floor {r['p_floor']:.3g} with n = {int(r['n'])})")
    if np.isfinite(r["p_tost"]):
        parts.append(f"TOST p = {r['p_tost']:.3g}")
    if np.isfinite(r["loo_stability"]):
        parts.append(f"leave-one-out stability {r['loo_stability']:.2f}")
    return "; ".join(parts)


def claim_sentence(r: pd.Series, level: float = 0.95) -> str:
    """One plain paragraph per claim for the report (every number from the claims table row)."""
    head = f"**({r['id']}) {r['claim']}** ({r['kind']}): **{r['verdict']}**."
    if r["verdict"] == "not tested":
        return f"{head} {str(r['note']).rstrip('.')}. Paper: {r['paper'] or 'n/a'}."
    pct = _pct(r)
    est = _fmt(r["estimate"], r["low"], r["high"], pct=pct)
    est += f" ({level:.0%} interval)" if np.isfinite(r["low"]) else " (no interval)"
    p = _p_text(r)
    margin = f"{100 * r['margin']:g} %" if pct else f"{r['margin']:g}"
    return (
        f"{head} Unit: {r['unit']}, n = {int(r['n'])}; rule {r['rule']}; prediction {r['prediction'] or 'none'}; "
        f"estimate {est}{'; ' + p if p else ''}; margin ±{margin}. Test: {r['test']}. {r['note']} "
        f"Paper: {r['paper'] or 'n/a'}."
    )


def claim_bullet(r: pd.Series) -> str:
    """One summary line per claim: verdict, estimate and interval, unit and n, p_holm, margin, the paper's figure."""
    if r["verdict"] == "not tested":
        return f"- ({r['id']}) {r['claim']}: **not tested** ({r['note'].removeprefix('Not tested: ')})"
    pct = _pct(r)
    margin = f"{100 * r['margin']:g} %" if pct else f"{r['margin']:g}"
    p = f", p_holm {r['p_holm']:.3g}" if np.isfinite(r["p_holm"]) else ""
    p += f", TOST p {r['p_tost']:.3g}" if np.isfinite(r["p_tost"]) else ""
    return (
        f"- ({r['id']}) {r['claim']}: **{r['verdict']}**, {_fmt(r['estimate'], r['low'], r['high'], pct=pct)} "
        f"(n = {int(r['n'])} {r['unit']}{'' if int(r['n']) == 1 else 's'}{p}, "
        f"prediction {r['prediction'] or 'none'}, margin ±{margin}); "
        f"paper: {r['paper'] or 'n/a'}"
    )


def verdict_counts(claims: pd.DataFrame, kind: str = "core") -> str:
    """The count of each verdict among the claims of `kind`, as the report and README state it."""
    c = claims[claims["kind"] == kind]["verdict"].value_counts()
    return ", ".join(f"{int(c[v])} {v}" for v in VERDICT_ORDER if v in c)


def rule_text(settings: ClaimSettings, claims: pd.DataFrame | None = None) -> str:
    """The verdict rule in one paragraph (the report's), with the margins and the family's size."""
    m = settings.margin
    names = settings.family_names()
    members = {f: sum(settings.family(c) == f for c in CLAIMS) for f in names}
    if claims is not None:
        fam = claims[claims["p_holm"].notna()]["id"].map(lambda i: settings.family(_BY_ID[i]) if i in _BY_ID else "")
        members = {f: int((fam == f).sum()) for f in names}
    families = " and ".join(f"{f} ({members[f]})" for f in names if members[f] or claims is None)
    a = settings.alpha
    return (
        f"**Verdict rule** (alpha = {a:g}; {settings.level:.0%} t-intervals over the units). A directional claim "
        f"*holds* when its t-test p-value is below alpha, Holm-adjusted within its family of directional core "
        f"claims (families: {families}), and the interval's near end lies beyond the margin on the predicted side "
        "(a meaningful effect, not only a non-zero one); it is *contradicted* when the interval lies entirely on the "
        "other side of 0, or entirely within ±margin (negligible); otherwise *inconclusive*. A claim of no effect is "
        f"decided by equivalence (TOST): it holds when the {1 - 2 * a:.0%} interval lies within ±margin (both "
        "one-sided p below alpha; p_tost the larger), is contradicted when that interval lies entirely beyond the "
        f"margin, and is otherwise inconclusive. Fewer than {MIN_N} seeds never give a verdict; fewer than {MIN_N} "
        "models per class give a *descriptive* row. Margins (smallest effects of interest): "
        f"symmetry ±{m('symmetry'):g}, directionality ±{m('directionality'):g}, held-out loss ±{m('loss'):g} nats, "
        f"speed-up ±{100 * m('speedup'):g} %. Beside each interval: the unadjusted t-test p, the exact sign-flip p "
        "with its floor 2^(1-n) (0.25 with 3 seeds: with so few seeds no exact test can reach alpha), and "
        "loo_stability, the share of leave-one-seed-out subsets that give the same verdict. The speed-up claims are "
        f"taken at the pre-declared target, {speedup_target_text(settings.speedup_target)}."
    )


def report_summary(claims: pd.DataFrame) -> list[str]:
    """The report's summary lines: the counts of each verdict (core and also), then one bullet per core claim,
    all from the claims table."""
    core = claims[claims["kind"] == "core"]
    return [
        f"Core claims ({len(core)}): {verdict_counts(claims, 'core')}. "
        f"Also reported ({int((claims['kind'] == 'also').sum())}): {verdict_counts(claims, 'also')}.",
        "",
        *[claim_bullet(r) for _, r in core.iterrows()],
    ]
