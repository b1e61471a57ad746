"""How a claim's effect becomes its row of the claims table: the decision rules of the pre-registrations
(docs/preregistration.md, docs/preregistration-2.md), applied to every claim the table lists.

Over the claim's units (attention_geometry.analysis.stats): the level t-interval (Welch over two groups of models),
the two-sided t-test p, the exact sign-flip p with its floor 2^(1-n); the directional core claims' p-values are
Holm adjusted within their family (p_holm; `_family_verdicts`). The rules (`_decide`):
- directional: holds when its p (p_holm in a family) < alpha = 1 - level and its interval's near end lies beyond
  the margin on the predicted side; contradicted when the interval lies entirely on the other side of 0 or
  entirely within +-margin; otherwise inconclusive (stats.verdict);
- equivalence: TOST against +-margin, decided by the 1 - 2 alpha interval (inside: holds; beyond: contradicted);
- descriptive: reported, never decided;
- fewer than stats.MIN_N units never decide; a censored unit (a speed-up never reached) keeps a claim from holding.
`_why` says in one sentence why the verdict; loo_stability is the share of leave-one-unit-out subsets whose
verdict, recomputed by the same rule, equals the verdict on every unit (`_loo_stability`).

`claim` is an analysis.claims.Claim, `settings` (`s`) an analysis.claims.ClaimSettings and `tables` an
analysis.claims.ClaimTables: defined with the claims table, above this module, and read here by field.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from attention_geometry.analysis.claim_effects import Context, Effect
from attention_geometry.analysis.stats import (
    MAX_SIGN_FLIP_N,
    MIN_N,
    check_level,
    holm,
    p_floor,
    sign_flip_p,
    t_interval,
    t_test_p,
    tost,
    verdict,
    welch_interval,
    welch_p,
)
from attention_geometry.analysis.summaries import check_speedup_target
from attention_geometry.errors import UserError

CLAIM_COLUMNS = [
    "id",
    "claim",
    "kind",
    "unit",
    "n",
    "rule",
    "prediction",
    "estimate",
    "low",
    "high",
    "margin",
    "test",
    "p_value",
    "p_holm",
    "p_signflip",
    "p_floor",
    "p_tost",
    "tost_low",
    "tost_high",
    "loo_stability",
    "verdict",
    "paper",
    "note",
]
OPPOSITE = "The estimate has the opposite sign to the prediction."
RULES = ("directional", "equivalence", "descriptive")


@dataclass(frozen=True)
class Claim:
    """One claim: `effect(ctx)` returns its Effect or raises a UserError (the row is then "not tested"); `inputs`
    the ClaimTables fields it needs; `paper(ctx)` the paper's figure on the same unit (or a fixed text)."""

    id: str
    text: str
    kind: str
    unit: str
    inputs: tuple[str, ...]
    effect: Callable[[Context], Effect]
    sign: int
    margin: str
    rule: str
    paper: Callable[[Context], str] | str = ""
    family: str | None = "text"  # the Holm family of a directional core claim (claims.FAMILIES); None: no family

    @property
    def in_family(self) -> bool:
        """Whether its t-test p-value is Holm adjusted (within `family`): the directional core claims."""
        return self.kind == "core" and self.rule == "directional"


def claim_text(claim: Claim, settings) -> str:
    """The claim as its row states it: its text with `{baseline}` the settings' baseline init."""
    return claim.text.format(baseline=settings.baseline_init)


# ------------------------------------------------------------------------------------------ deciding
def _stats(claim: Claim, eff: Effect, s, exact: bool = True) -> dict:
    """Interval, p-values (not yet Holm adjusted) and n of a claim's effect."""
    margin = s.margin(claim.margin)
    if eff.other is not None:  # two groups of models: Welch
        a, b = eff.values.dropna(), eff.other.dropna()
        iv = welch_interval(a, b, s.level)
        return dict(n=len(a) + len(b), n_min=min(len(a), len(b)), iv=iv, p=welch_p(a, b), p_sf=math.nan, tost=None)
    x = eff.values.dropna().to_numpy(dtype=float)
    iv = t_interval(x, s.level)
    p_sf = sign_flip_p(x) if exact and 0 < x.size <= MAX_SIGN_FLIP_N else math.nan
    eq = tost(x, margin, s.alpha) if claim.rule == "equivalence" else None
    return dict(n=int(x.size), n_min=int(x.size), iv=iv, p=t_test_p(x), p_sf=p_sf, tost=eq)


def _decide(claim: Claim, eff: Effect, st: dict, p_used: float, s) -> str:
    """The verdict of one claim from its statistics (p_used: p_holm in the family, else the unadjusted p)."""
    if claim.rule == "descriptive" or eff.descriptive:
        return "descriptive"
    if st["n_min"] < MIN_N:
        return "inconclusive"
    margin = s.margin(claim.margin)
    if claim.rule == "equivalence":
        v = verdict(st["tost"].low, st["tost"].high, 0, margin)
    else:
        v = verdict(st["iv"].low, st["iv"].high, claim.sign, margin, p_used, s.alpha)
    return "inconclusive" if v == "holds" and eff.censored else v


def _why(claim: Claim, st: dict, v: str, p_used: float, p_name: str, s) -> str:
    """The sentence that says why the verdict."""
    margin, iv = s.margin(claim.margin), st["iv"]
    if st["n_min"] < MIN_N and v != "descriptive":
        per = " per class" if claim.unit == "model" else ""
        return f"Too few {claim.unit}s{per} (n = {st['n_min']}): at least {MIN_N} are needed for a verdict."
    if claim.rule == "equivalence":
        eq = st["tost"]
        ci = f"The {1 - 2 * s.alpha:.0%} interval [{eq.low:+.3g}, {eq.high:+.3g}] (TOST p = {eq.p:.3g})"
        return {
            "holds": f"{ci} lies inside ±{margin:g}: no effect of interest.",
            "contradicted": f"{ci} lies beyond the margin ±{margin:g}: an effect larger than the margin.",
            "inconclusive": f"{ci} is neither inside ±{margin:g} nor beyond it.",
        }[v]
    ci = f"The {s.level:.0%} interval [{iv.low:+.3g}, {iv.high:+.3g}]"
    if v == "descriptive":
        return "Descriptive (no direction predicted)." if claim.rule == "descriptive" else ""
    if v == "contradicted":
        if -margin < iv.low and iv.high < margin:
            return f"{ci} lies inside ±{margin:g}: the effect is negligible."
        return f"{ci} lies on the other side of 0."
    near = iv.low if claim.sign > 0 else iv.high
    side = f"{'+' if claim.sign > 0 else '-'}{margin:g}"
    if v == "holds":
        return (
            f"{p_name} = {p_used:.3g} < {s.alpha:g}, and the interval's near end {near:+.3g} lies beyond the margin "
            f"{side} on the predicted side ({ci[4:]})."
        )
    why = []
    if not (np.isfinite(near) and (near > margin if claim.sign > 0 else near < -margin)):
        why.append(f"the interval's near end {near:+.3g} does not clear the margin {side}")
    if not p_used < s.alpha:
        why.append(f"{p_name} = {p_used:.3g} is not below {s.alpha:g}")
    if not why:
        why.append("some seed's value is missing (see below)")
    return f"Inconclusive: {' and '.join(why)} ({ci[4:]})."


def _test_text(claim: Claim, eff: Effect, s, m_family: int) -> str:
    if eff.other is not None:
        return f"{s.level:.0%} Welch t-interval over models; Welch t-test p; {eff.test}"
    parts = [f"{s.level:.0%} t-interval over {claim.unit}s; two-sided t-test p"]
    family = s.family(claim)
    if family is not None:
        parts[0] += f", Holm-adjusted over the {m_family} {family} core directional claims tested"
    if claim.rule == "equivalence":
        parts.append(f"TOST against ±margin at alpha {s.alpha:g} (the {1 - 2 * s.alpha:.0%} interval decides)")
    parts.append("exact two-sided sign-flip p")
    return "; ".join(parts + [eff.test])


def _row(claim: Claim, eff: Effect, st: dict, p_holm: float, v: str, s, m_family: int) -> dict:
    margin, iv = s.margin(claim.margin), st["iv"]
    p_used, p_name = (p_holm, "p_holm") if s.family(claim) is not None else (st["p"], "p")
    notes = [_why(claim, st, v, p_used, p_name, s)]
    if eff.descriptive:
        notes = [eff.descriptive]
    if claim.sign and st["n"] and np.sign(iv.estimate) == -claim.sign:
        notes.append(OPPOSITE)
    lost = [u for u, x in eff.values.items() if not np.isfinite(x)]
    if lost and not eff.censored:
        notes.append(f"Unit(s) {', '.join(map(str, lost))} without a value left out.")
    notes += eff.notes
    if claim.rule != "descriptive" and not eff.descriptive:
        notes.append(
            f"Margin {margin:g}: "
            + (
                "an effect inside ±margin counts as none."
                if claim.rule == "equivalence"
                else "an effect inside ±margin is negligible and contradicts the claim; a claim holds only when "
                "its interval clears the margin."
            )
        )
    eq = st["tost"]
    two_group_few = eff.other is not None and bool(eff.descriptive)
    return {
        "estimate": iv.estimate,
        "low": math.nan if two_group_few else iv.low,
        "high": math.nan if two_group_few else iv.high,
        "margin": margin,
        "n": st["n"],
        "prediction": ""
        if claim.rule == "descriptive"
        else {1: "> 0", -1: "< 0", 0: f"within ±{margin:g}"}[claim.sign],
        "test": _test_text(claim, eff, s, m_family),
        "p_value": math.nan if two_group_few else st["p"],
        "p_holm": p_holm,
        "p_signflip": st["p_sf"],
        "p_floor": p_floor(st["n"]) if eff.other is None else math.nan,
        "p_tost": eq.p if eq else math.nan,
        "tost_low": eq.low if eq else math.nan,
        "tost_high": eq.high if eq else math.nan,
        "verdict": v,
        "note": " ".join(x for x in notes if x),
    }


def _family_verdicts(done: dict, s, stats: dict) -> tuple[dict, dict]:
    """(p_holm, verdict) by claim id, each family's p-values from `stats` (id -> _stats) adjusted together."""
    adj = {}
    for family in s.family_names():
        fam = [cid for cid, (c, _e) in done.items() if s.family(c) == family]
        adj.update(zip(fam, holm([stats[cid]["p"] for cid in fam])))
    verdicts = {}
    for cid, (c, e) in done.items():
        p_used = adj[cid] if s.family(c) is not None else stats[cid]["p"]
        verdicts[cid] = _decide(c, e, stats[cid], p_used, s)
    return adj, verdicts


def _loo_stability(done: dict, s, full: dict) -> dict:
    """Per decided claim (not descriptive): the share of its leave-one-unit-out subsets whose verdict, by the same
    rule, equals `full` (the verdict on every unit). Leaving unit u out removes it from every claim of the Holm
    family that has it and adjusts the family's p-values again (claims without u keep theirs), so a family claim's
    subset verdict uses the subset's own p_holm, not the unadjusted p; claims outside the family use their
    unadjusted p as on every unit. A subset with fewer than 3 units is "inconclusive" (the rule's minimum), so
    with 3 seeds a decided claim is never stable to leaving one out."""
    out: dict[str, float] = {}
    base = {cid: _stats(c, e, s, exact=False) for cid, (c, e) in done.items()}
    units = {cid: set(e.units()) for cid, (_c, e) in done.items()}
    for cid, (c, e) in done.items():
        if c.rule == "descriptive" or e.descriptive or full[cid] in ("descriptive", "not tested"):
            continue
        same = []
        for u in e.units():
            stats = dict(base)
            for oid, (oc, oe) in done.items():
                same_family = s.family(c) is not None and s.family(oc) == s.family(c)
                if (oid == cid or same_family) and u in units[oid]:
                    stats[oid] = _stats(oc, oe.without(u), s, exact=False)
            # the effects' flags (descriptive, censored) do not change with a unit left out
            _adj, verdicts = _family_verdicts(done, s, stats)
            same.append(verdicts[cid] == full[cid])
        out[cid] = float(np.mean(same)) if same else math.nan
    return out


def _untested(claim: Claim, reason: str, paper: str, s) -> dict:
    row = {c: math.nan for c in CLAIM_COLUMNS}
    row.update(
        id=claim.id,
        claim=claim_text(claim, s),
        kind=claim.kind,
        unit=claim.unit,
        n=0,
        rule=claim.rule,
        prediction="",
        test="",
        verdict="not tested",
        paper=paper,
        note=f"Not tested: {reason}",
    )
    return row


def _paper_text(claim: Claim, ctx: Context) -> str:
    if not callable(claim.paper):
        return claim.paper
    try:
        return claim.paper(ctx)
    except UserError as exc:
        return f"n/a ({exc})"


def evaluate(claims: Sequence[Claim], tables, settings) -> pd.DataFrame:
    """Every claim of `claims` as one row (CLAIM_COLUMNS), in their order: the effect per unit, the statistics,
    Holm over the family (the directional core claims tested), the verdict and its leave-one-out stability."""
    check_level(settings.level)
    check_speedup_target(settings.speedup_target)
    settings.check_families([c.id for c in claims])
    ctx = Context(tables, settings)
    done: dict[str, tuple[Claim, Effect]] = {}
    untested: dict[str, str] = {}
    for c in claims:
        if c.rule not in RULES or c.kind not in ("core", "also"):
            raise UserError(f"claim {c.id}: bad rule {c.rule!r} or kind {c.kind!r}")
        missing = [name for name in c.inputs if getattr(tables, name) is None or getattr(tables, name).empty]
        try:
            if missing:
                raise UserError(f"no {' or '.join(missing)} table")
            done[c.id] = (c, c.effect(ctx))
        except UserError as exc:
            untested[c.id] = str(exc)
    stats = {cid: _stats(c, e, settings) for cid, (c, e) in done.items()}
    adj, verdicts = _family_verdicts(done, settings, stats)
    loo = _loo_stability(done, settings, verdicts)
    m_family = {f: sum(settings.family(c) == f for c, _e in done.values()) for f in settings.family_names()}
    rows = []
    for c in claims:
        paper = _paper_text(c, ctx)
        if c.id in untested:
            rows.append(_untested(c, untested[c.id], paper, settings))
            continue
        _c, e = done[c.id]
        family = settings.family(c)
        row = _row(c, e, stats[c.id], adj.get(c.id, math.nan), verdicts[c.id], settings, m_family.get(family, 0))
        rows.append(
            {
                "id": c.id,
                "claim": claim_text(c, settings),
                "kind": c.kind,
                "unit": c.unit,
                "rule": c.rule,
                **row,
                "loo_stability": loo.get(c.id, math.nan),
                "paper": paper,
            }
        )
    return pd.DataFrame(rows, columns=CLAIM_COLUMNS)
