"""The claims table of the reproduction report: each claim of the paper decided on its right unit.

CLAIMS is the one list of the claims: per claim its id, its text (the prediction; written here only: the report and
the README take it from claims.csv), kind (core | also), unit, the input tables it reads, the function that computes
its effect per unit, the predicted sign, the key of its margin (`margins`) and its rule (directional | equivalence |
descriptive). `reproduction_claims` turns every entry into one row (CLAIM_COLUMNS, docs/contracts.md "Claims") and
never drops one: a claim whose data are missing is "not tested".

The statistics (attention_geometry.analysis.stats), over the claim's units: the ci_level t-interval, the two-sided
t-test p, the exact sign-flip p with its floor 2^(1-n); the directional core claims form one family whose t-test
p-values are Holm adjusted (p_holm); a directional claim holds when its p (p_holm in the family) < alpha = 1 -
ci_level and its interval's near end lies beyond the margin on the predicted side (stats.verdict); a claim of no
effect is decided by TOST against +-margin (the 1 - 2 alpha interval). Seeds are the unit of our training runs (the
encoder and decoder of one seed share their initial weights, so contrasts are paired by seed), models the unit of
pretrained checkpoints. Fewer than 3 seeds never decide; fewer than 3 models per class give a descriptive row.
loo_stability: the share of leave-one-unit-out subsets whose verdict, recomputed by the same rule, equals the
verdict on every unit (`_loo_stability`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from functools import partial

import numpy as np
import pandas as pd

from attention_geometry.analysis import summaries as A
from attention_geometry.analysis.gqa import gqa_model_table, model_labels
from attention_geometry.analysis.paper_claims import fmt_estimate as _fmt
from attention_geometry.analysis.paper_claims import paper_pair_gap, paper_symmetric_init
from attention_geometry.analysis.stats import (
    MAX_SIGN_FLIP_N,
    check_level,
    holm,
    horizon_stat,
    p_floor,
    sign_flip_p,
    t_interval,
    t_test_p,
    tost,
    verdict,
    welch_interval,
    welch_p,
)
from attention_geometry.analysis.summaries import (
    check_speedup_target,
    contrast_runs,
    declared_speedups,
    paper_speedups,
    speedup_target_text,
)
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
DEFAULT_MARGINS = {"symmetry": 0.05, "directionality": 0.05, "loss": 0.01, "speedup": 0.05}
MIN_N = 3
SYMMETRIC = "symmetric-fresh"  # the paper's "symmetric" init (resources/paper/README.md)
OPPOSITE = "The estimate has the opposite sign to the prediction."
RULES = ("directional", "equivalence", "descriptive")
VERDICT_ORDER = ("holds", "contradicted", "inconclusive", "descriptive", "not tested")
# the Holm families (docs/preregistration.md): the text runs' core claims, and apart from them the vision runs'
# (so that adding the vision runs changes no text verdict). A config may name its own families instead
# (ClaimSettings.families, config figures.claim_families: docs/preregistration-2.md).
FAMILIES = ("text", "vision", "paper-decoder")
PAPER_DECODER = "decoder-paper"  # the authors' decoder objective (training.hyper.OBJECTIVES)
VISION = "classifier"  # the objective of the ViT runs
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


@dataclass
class Effect:
    """A claim's effect per unit (`values`, indexed by unit label "size/dataset/seed" or model name; NaN = no
    value, left out with a note), or for a two-group claim over models the two groups (`values` - `other`,
    Welch). `test` says how it is computed, `notes` what the reader needs; `censored`: units left out whose
    value could still change the verdict (a speed-up never reached), which keep the claim from holding."""

    values: pd.Series
    test: str
    notes: list[str] = field(default_factory=list)
    other: pd.Series | None = None
    censored: int = 0
    descriptive: str = ""  # a reason to report the row as descriptive whatever its rule

    def without(self, unit: str) -> Effect:
        v = self.values.drop(unit, errors="ignore")
        o = None if self.other is None else self.other.drop(unit, errors="ignore")
        return Effect(v, self.test, [], o, self.censored, self.descriptive)

    def units(self) -> list[str]:
        idx = list(self.values.dropna().index)
        return idx + ([] if self.other is None else list(self.other.dropna().index))


@dataclass(frozen=True)
class Claim:
    """One claim: `effect(ctx)` returns its Effect or raises a UserError (the row is then "not tested"); `inputs`
    the ClaimTables fields it needs; `paper(ctx)` the paper's figure on the same unit (or a fixed text)."""

    id: str
    text: str
    kind: str
    unit: str
    inputs: tuple[str, ...]
    effect: Callable[[_Context], Effect]
    sign: int
    margin: str
    rule: str
    paper: Callable[[_Context], str] | str = ""
    family: str = "text"  # the Holm family of a directional core claim (FAMILIES)

    @property
    def in_family(self) -> bool:
        """Whether its t-test p-value is Holm adjusted (within `family`): the directional core claims."""
        return self.kind == "core" and self.rule == "directional"


# ------------------------------------------------------------------------------------------ context
def _labels(t: pd.DataFrame) -> list[str]:
    """Unit labels of per-seed rows: size/dataset/seed (the keys the table has)."""
    keys = [k for k in ("size", "dataset", "seed") if k in t.columns]
    return ["/".join(str(v) for v in row) for row in t[keys].itertuples(index=False)]


def _series(t: pd.DataFrame, values) -> pd.Series:
    return pd.Series(np.asarray(values, dtype=float), index=_labels(t), dtype=float)


class _Context:
    """The tables and settings every effect function reads, with the computations several claims share."""

    def __init__(self, tables: ClaimTables, settings: ClaimSettings) -> None:
        self.t, self.s = tables, settings
        em = tables.emergence_runs or {}
        self.enc_runs, self.dec_runs = A.as_list(em.get("encoder")), A.as_list(em.get("decoder"))
        self.emergence_by_objective = {o: A.as_list(r) for o, r in em.items()}
        self.abl = A.as_list(tables.ablation_runs)
        self.vision = A.as_list(tables.vision_runs)
        self._cache: dict = {}

    def table(self, name: str) -> pd.DataFrame:
        t = getattr(self.t, name)
        if t is None or t.empty:
            raise UserError(f"no {name} table")
        return t

    def horizon(self, runs: Sequence[str], what: str, upto: int | None = None) -> pd.DataFrame:
        training = self.table("training")
        if not runs:
            raise UserError(f"no {what} runs given")
        return horizon_stat(training, runs, self.s.horizon_snapshots, upto)

    def emergence(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        return self.horizon(self.enc_runs, "encoder emergence"), self.horizon(self.dec_runs, "decoder emergence")

    def ablation_loss(self) -> pd.DataFrame:
        """The loss rows of the ablation runs and the vision runs (the contrasts pick their objective)."""
        loss = self.table("loss")
        runs = self.abl + [r for r in self.vision if r not in self.abl]
        return A.select_runs(loss, runs, "training loss") if self.abl else loss

    def contrast(self, how: str, objective: str, ref: str, treatment: str = SYMMETRIC) -> pd.DataFrame:
        """Per seed: `how` = "lstar" (contrast_runs: loss gain, speed-up at L*), "declared" (the speed-up at the
        declared target) or "paper" (the paper's steps saved), of `treatment` vs `ref` for `objective`."""
        key = (how, objective, ref, treatment)
        if key not in self._cache:
            lt = self.ablation_loss()
            fn = {
                "lstar": contrast_runs,
                "declared": partial(declared_speedups, target=self.s.speedup_target),
                "paper": paper_speedups,
            }[how]
            c = fn(lt, treatment, ref)
            self._cache[key] = c[c["objective"] == objective].sort_values(["size", "dataset", "seed"])
        c = self._cache[key]
        if c.empty:
            raise UserError(f"no {objective} {treatment} run with a same-seed {ref} run among the ablation runs")
        return c

    def start_and_horizon(self, runs: Sequence[str], what: str) -> pd.DataFrame:
        """Per run: the horizon statistic and the median over layers at the run's step 0 (`*_start`)."""
        h = self.horizon(runs, what)
        s = A.summed_rows(self.table("training"))
        s = s[s["run"].isin(list(runs)) & (s["step"].astype(int) == 0)]
        start = s.groupby("run")[["symmetry", "directionality"]].median()
        missing = sorted(set(h["run"]) - set(start.index))
        if missing:
            raise UserError(f"no step-0 training scores for run(s) {', '.join(missing)}")
        return h.merge(start.add_suffix("_start"), left_on="run", right_index=True, how="left")

    def snapshots(self, run: str) -> np.ndarray:
        """The run's snapshot steps: ClaimTables.snapshot_steps, else the steps of its training scores."""
        given = (self.t.snapshot_steps or {}).get(run)
        if given is not None:
            return np.unique(np.asarray(list(given), dtype=int))
        training = self.t.training
        steps = training.loc[training["run"] == run, "step"] if training is not None else pd.Series([], dtype=int)
        if steps.empty:
            raise UserError(f"no snapshot steps for run {run} (neither snapshot_steps nor its training scores)")
        return np.unique(steps.astype(int).to_numpy())


def paired_by_seed(a: pd.DataFrame, b: pd.DataFrame, column: str) -> tuple[pd.DataFrame, list[str]]:
    """Per-seed values of `column` of two per-run tables, joined on seed within each (size, dataset) cell
    (the paper config trains several sizes and corpora under the same seeds); notes on units left out."""
    keys = [k for k in ("size", "dataset", "seed") if k in a.columns and k in b.columns]
    for t in (a, b):
        if t[keys].duplicated().any():
            raise UserError(f"several runs of one {'/'.join(keys)} among {sorted(t['run'])}: pass one run per seed")
    m = a[keys + [column]].merge(b[keys + [column]], on=keys, suffixes=("_a", "_b"), how="outer")
    lone = m[m.isna().any(axis=1)]
    notes = []
    if len(lone):
        which = ", ".join("/".join(str(v) for v in row) for row in lone[keys].itertuples(index=False))
        notes.append(f"Unit(s) {which} without a partner left out.")
    return m.dropna().sort_values(keys), notes


def _runs_of(table: pd.DataFrame, runs: Sequence[str], objective: str, init: str | None = None) -> list[str]:
    t = table[table["objective"] == objective]
    t = t[t["run"].isin(list(runs))] if runs else t  # no run list: every run of the table
    if init is not None:
        t = t[t["init"] == init]
    return sorted(t["run"].astype(str).unique())


def _horizon_note(h: pd.DataFrame) -> str:
    steps = sorted({s for x in h["steps_used"] for s in str(x).split(",")}, key=int)
    return f"Per-seed statistic: median over layers and the snapshots at steps {', '.join(steps)}."


def _moves(iv) -> str:
    if not (np.isfinite(iv.low) and np.isfinite(iv.high)):
        return "too few seeds to say"
    if iv.low > 0:
        return "move up"
    if iv.high < 0:
        return "move down"
    return "do not move on average (the interval includes 0)"


def _movement(ctx: _Context, score: str = "directionality") -> str:
    """What moves: each objective's change of `score` from each seed's own step-0 value, in words decided by
    the numbers (the claim's text stays the prediction)."""
    parts, changes = [], []
    for obj, runs in (("encoders", ctx.enc_runs), ("decoders", ctx.dec_runs)):
        h = ctx.start_and_horizon(runs, obj)
        changes.append(h.assign(change=h[score] - h[f"{score}_start"]))
        iv = t_interval(changes[-1]["change"], ctx.s.level)
        parts.append(f"{obj} {_fmt(iv.estimate, iv.low, iv.high)} (n = {iv.n}): {_moves(iv)}")
    m, _notes = paired_by_seed(changes[0], changes[1], "change")
    iv = t_interval(m["change_b"] - m["change_a"], ctx.s.level)
    return (
        f"What moves ({score} at the horizon minus each seed's own step 0, {ctx.s.level:.0%} interval): "
        + "; ".join(parts)
        + f"; decoder change - encoder change, paired by seed, {_fmt(iv.estimate, iv.low, iv.high)} (n = {iv.n})."
    )


# ---------------------------------------------------------------------------------- effect functions
def _gap(score: str, sign: int, ctx: _Context) -> Effect:
    """Encoder vs decoder `score` at the horizon, standard init, paired by seed (sign +1: encoder - decoder)."""
    he, hd = ctx.emergence()
    m, notes = paired_by_seed(he, hd, score)
    eff = (m[f"{score}_a"] - m[f"{score}_b"]) if sign > 0 else (m[f"{score}_b"] - m[f"{score}_a"])
    what = "encoder - decoder" if sign > 0 else "decoder - encoder"
    notes = [
        f"Means over seeds: encoder {m[f'{score}_a'].mean():+.3f}, decoder {m[f'{score}_b'].mean():+.3f}.",
        _horizon_note(pd.concat([he, hd])),
        *notes,
    ]
    if score == "directionality":
        try:
            notes.insert(1, _movement(ctx, score))
        except UserError as exc:
            notes.insert(1, f"What moves: not computed ({exc}).")
    return Effect(_series(m, eff), f"effect = {what} {score} at the horizon, paired by seed", notes)


def _objective_gap(score: str, first: str, second: str, ctx: _Context) -> Effect:
    """Per seed: `first` - `second` objective's `score` at the horizon, standard init, paired by seed (the runs of
    both objectives of one seed share their initial weights where their models are of one class)."""
    runs = {o: ctx.emergence_by_objective.get(o) or [] for o in (first, second)}
    h = {o: ctx.horizon(runs[o], f"{o} emergence") for o in (first, second)}
    m, notes = paired_by_seed(h[first], h[second], score)
    return Effect(
        _series(m, m[f"{score}_a"] - m[f"{score}_b"]),
        f"effect = {first} - {second} {score} at the horizon, paired by seed",
        [
            f"Means over seeds: {first} {m[f'{score}_a'].mean():+.3f}, {second} {m[f'{score}_b'].mean():+.3f}.",
            _horizon_note(pd.concat(list(h.values()))),
            *notes,
        ],
    )


def _change(objective: str, score: str, ctx: _Context) -> Effect:
    """Per seed: `score` at the horizon minus the run's own step-0 value (standard init)."""
    runs = ctx.enc_runs if objective == "encoder" else ctx.dec_runs
    h = ctx.start_and_horizon(runs, f"{objective} emergence").sort_values(["size", "dataset", "seed"])
    notes = [
        f"Means over seeds: step 0 {h[f'{score}_start'].mean():+.3f}, horizon {h[score].mean():+.3f}.",
        _horizon_note(h),
    ]
    return Effect(
        _series(h, h[score] - h[f"{score}_start"]),
        f"effect = {objective} {score} at the horizon minus the same run's at step 0 (median over layers), per seed",
        notes,
    )


def _vision_rise(ctx: _Context) -> Effect:
    """Per seed: the standard-init ViT's symmetry at the horizon minus its own step 0 (a random init)."""
    if not ctx.vision:
        raise UserError("no vision runs given")
    runs = _runs_of(ctx.table("training"), ctx.vision, VISION, ctx.s.baseline_init)
    if not runs:
        raise UserError(f"no {ctx.s.baseline_init} ViT runs among the vision runs' training scores")
    h = ctx.start_and_horizon(runs, "vision").sort_values(["size", "dataset", "seed"])
    return Effect(
        _series(h, h["symmetry"] - h["symmetry_start"]),
        "effect = the ViT's symmetry at the horizon minus the same run's at step 0 (its random init), per seed",
        [
            f"Means over seeds: step 0 {h['symmetry_start'].mean():+.3f}, horizon {h['symmetry'].mean():+.3f}.",
            _horizon_note(h),
        ],
    )


def _null(objective: str, ctx: _Context) -> Effect:
    """Per seed: the run's directionality at the horizon minus the random-init null's mean."""
    null = ctx.table("null")
    A.require_columns(null, ["init", "sample", "layer", "directionality"], "null table")
    he, hd = ctx.emergence()
    h = he if objective == "encoder" else hd
    nl = null[null["init"] == "standard"]
    if "size" in nl.columns:
        nl = nl[nl["size"].isin(h["size"].unique())]
    if nl.empty:
        raise UserError("the null table has no standard-init samples of our model size")
    per = nl.groupby("sample")["directionality"].median().to_numpy(dtype=float)
    mean, lo, hi = float(per.mean()), *np.percentile(per, [2.5, 97.5])
    d = h.sort_values(["size", "dataset", "seed"])
    pct = [100.0 * float(np.mean(per <= x)) for x in d["directionality"]]
    where = (
        f"Seeds at null percentiles {', '.join(f'{q:.0f}' for q in pct)} (null of {per.size} standard "
        f"inits, mean {mean:+.3f}, 2.5-97.5 % range [{lo:+.3f}, {hi:+.3f}]); "
        f"{sum(lo <= x <= hi for x in d['directionality'])} of {len(d)} seeds inside it."
    )
    notes = [where]
    if objective == "decoder":
        try:
            notes.append(_movement(ctx))
        except UserError as exc:
            notes.append(f"What moves: not computed ({exc}).")
    return Effect(
        _series(d, d["directionality"] - mean),
        "effect = per-seed d minus the null's mean of per-sample medians over layers",
        notes,
    )


def _loss_gain(objective: str, ref: str | None, ctx: _Context, treatment: str = SYMMETRIC) -> Effect:
    """Per seed: ref - treatment held-out loss at the contrast's horizon (ref None: the baseline init)."""
    ref = ref or ctx.s.baseline_init
    c = ctx.contrast("lstar", objective, ref, treatment)
    return Effect(
        _series(c, c["loss_gain"]),
        f"effect = {ref} - {treatment} held-out loss at step {int(c['horizon'].iloc[0])}, paired by seed",
        [
            f"Held-out loss at the horizon: {ref} {c['baseline_final_eval_loss'].mean():.4f}, "
            f"{treatment} {c['final_eval_loss'].mean():.4f} (means)."
        ],
    )


SPEEDUP_WHAT = {
    "declared": "signed speed-up 1 - s*/S at the pre-declared target, {target}",
    "lstar": "signed speed-up 1 - s*/S at the common target L*{target}, the highest of the compared runs' lowest "
    "held-out losses up to the horizon (every run reaches it)",
    "paper": "the paper's speed-up (its Table 1): the share of steps saved, (S - s*)/S, to reach the baseline's "
    "held-out loss at its last step S within the horizon",
}


def _speedup(objective: str, ref: str | None, how: str, treatment: str, ctx: _Context) -> Effect:
    """Per seed: the speed-up of `treatment` over `ref` (None: the baseline init) by definition `how`."""
    ref = ref or ctx.s.baseline_init
    c = ctx.contrast(how, objective, ref, treatment)
    target = (
        speedup_target_text(ctx.s.speedup_target)
        if how == "declared"
        else f" = {c['target'].iloc[0]:.4f}"
        if how == "lstar"
        else ""
    )
    per = ", ".join(
        f"s{r.seed} "
        + (f"{100 * r.speedup:+.1f} %" if np.isfinite(r.speedup) else "never reached")
        + f" (S = {r.baseline_s:.0f}, s* = {r.s_star:.0f}, target {r.target:.4f})"
        for r in c.itertuples()
    )
    notes = [f"Per seed: {per}; curves cut at step {int(c['horizon'].iloc[0])}, the last step both runs evaluated."]
    lost = c[~np.isfinite(c["speedup"].astype(float))]
    if len(lost):
        who = [
            f"{r.seed} ({'the ' + treatment if not np.isfinite(r.s_star) else 'the ' + ref} run)"
            if np.isfinite(r.s_star) != np.isfinite(r.baseline_s)
            else f"{r.seed} (both runs)"
            for r in lost.itertuples()
        ]
        notes.append(
            f"Seed(s) {', '.join(who)}: never reaches the target within the horizon, a speed-up of unknown size: "
            "left out, and the claim cannot hold."
        )
    return Effect(
        _series(c, c["speedup"]),
        f"effect = {SPEEDUP_WHAT[how].format(target=target)}; {treatment} vs {ref}, paired by seed",
        notes,
        censored=len(lost),
    )


def _retained(ctx: _Context, objective: str = "decoder", ref: str = "encoder") -> Effect:
    """Per seed: `objective` - `ref` symmetry of the symmetric-fresh runs at their common horizon."""
    training = ctx.table("training")
    runs = {o: _runs_of(training, ctx.abl, o, SYMMETRIC) for o in (ref, objective)}
    if not runs[ref] or not runs[objective]:
        raise UserError(f"need {SYMMETRIC} training scores of both objectives among the ablation runs")
    # one horizon for both: the last snapshot step every compared run has (a shorter decoder run is compared
    # with the encoder's snapshots up to its own last step)
    both = training[training["run"].isin(runs[ref] + runs[objective])]
    upto = int(both.groupby("run")["step"].max().min())
    he, hd = ctx.horizon(runs[ref], ref, upto), ctx.horizon(runs[objective], objective, upto)
    m, notes = paired_by_seed(he, hd, "symmetry")
    return Effect(
        _series(m, m["symmetry_b"] - m["symmetry_a"]),
        f"effect = {objective} - {ref} symmetry of the {SYMMETRIC} runs at the horizon, paired by seed",
        [
            f"Retained symmetry (starts at 1): {ref} {m['symmetry_a'].mean():+.3f}, {objective} "
            f"{m['symmetry_b'].mean():+.3f} (means).",
            _horizon_note(pd.concat([he, hd])),
            *notes,
        ],
    )


def _pretrained(score: str, sign: int, ctx: _Context) -> Effect:
    """Per model (text models of our pretrained scores): median over layers; encoders vs decoders, Welch."""
    ours = A.model_table(ctx.table("pretrained"), None)
    t = ours[ours["modality"] == "text"]
    e = t[t["architecture"] == "encoder-only"]
    d = t[t["architecture"] == "decoder-only"]
    if e.empty or d.empty:
        raise UserError("our pretrained scores need both an encoder-only and a decoder-only text model")
    ev = pd.Series(e[f"{score}_median"].to_numpy(dtype=float), index=e["model"].astype(str))
    dv = pd.Series(d[f"{score}_median"].to_numpy(dtype=float), index=d["model"].astype(str))
    a, b = (dv, ev) if sign < 0 else (ev, dv)
    both = pd.concat([e, d])
    flagged = [
        f"{m} ({c}: no fixed bilinear form gives its logits exactly)"
        for m, c in zip(both["model"].astype(str), both["caveat"])
        if c
    ]
    notes = [f"Models: {', '.join(both['model'].astype(str))}."]
    notes += ["Caveat: " + "; ".join(flagged) + "."] if flagged else []
    few = ""
    if min(e.shape[0], d.shape[0]) < MIN_N:
        few = (
            f"Descriptive: {len(e)} encoder and {len(d)} decoder model(s); at least {MIN_N} models per class are "
            "needed for a verdict, and layers of one model are not independent models."
        )
    what = "decoder - encoder" if sign < 0 else "encoder - decoder"
    return Effect(a, f"{what} of per-model medians over layers", notes, other=b, descriptive=few)


def _paper_pretrained(score: str, sign: int, ctx: _Context) -> str:
    pp = ctx.t.paper_pretrained
    if pp is None or pp.empty:
        return "n/a"
    paper = A.model_table(None, pp[pp["modality"] == "language"], ctx.t.caveats)
    paper = paper[paper["caveat"] == ""]
    e = paper.loc[paper["architecture"] == "encoder-only", f"{score}_median"]
    dd = paper.loc[paper["architecture"] == "decoder-only", f"{score}_median"]
    piv = welch_interval(dd, e, ctx.s.level) if sign < 0 else welch_interval(e, dd, ctx.s.level)
    return (
        f"{_fmt(piv.estimate, piv.low, piv.high)} over {len(e)} encoder and {len(dd)} decoder language "
        f"models (per-model median over layers, Welch; not-comparable points left out)"
    )


def _gqa_shift(ctx: _Context) -> Effect:
    """Per grouped-query model: its median symmetry over layers by the paper's expansion minus by the attention's
    own W_qk (analysis.gqa); descriptive with fewer than MIN_N models."""
    models = gqa_model_table(ctx.table("gqa"), ctx.t.paper_pretrained)
    labels = model_labels(models)
    per = []
    for label, r in zip(labels, models.itertuples(index=False)):
        pub = r.published_symmetry_median
        per.append(
            f"{label} {r.symmetry_median:+.3f} by the attention's W_qk, {r.symmetry_paper_median:+.3f} by the "
            f"expansion" + (f", {pub:+.3f} published" if np.isfinite(pub) else ", not published by the paper")
        )
    notes = [
        f"Per model, median symmetry over layers: {'; '.join(per)}.",
        "Median relative Frobenius distance between the two matrices over layers: "
        + ", ".join(f"{lab} {d:.2f}" for lab, d in zip(labels, models["relative_distance_median"]))
        + ".",
    ]
    few = ""
    if len(models) < MIN_N:
        few = (
            f"Descriptive: {len(models)} grouped-query model(s); at least {MIN_N} models are needed for a verdict, "
            "and layers of one model are not independent models."
        )
    return Effect(
        pd.Series(models["symmetry_shift"].to_numpy(dtype=float), index=labels),
        "effect = the median symmetry over layers by the paper's grouped-query expansion minus by the attention's "
        "own W_qk, per model",
        notes,
        descriptive=few,
    )


def _paper_gqa(ctx: _Context) -> str:
    """The paper's published medians of its grouped-query language models (those its caveats flag)."""
    pp, cav = ctx.t.paper_pretrained, ctx.t.caveats
    if pp is None or pp.empty or cav is None or cav.empty:
        return "n/a"
    t = A.model_table(None, pp[pp["modality"] == "language"], cav)
    x = t.loc[t["caveat"] == "gqa-expansion", "symmetry_median"].to_numpy(dtype=float)
    if not x.size:
        return "n/a"
    return (
        f"published by its expansion: median symmetry over layers {np.median(x):+.3f} (median of {x.size} "
        f"grouped-query language models; range {x.min():+.3f} to {x.max():+.3f})"
    )


def _update_table(kind: str, ctx: _Context) -> tuple[pd.DataFrame, list[str]]:
    """Per seed (median over layers and steps) of the `kind` update scores of the emergence runs. An applied
    update at step s spans s -> the run's next snapshot (ctx.snapshots); only the most common span is kept
    (equal spacing), rows at a run's last snapshot have none."""
    updates = ctx.table("updates")
    A.require_columns(
        updates,
        ["run", "objective", "size", "dataset", "seed", "step", "layer", "kind", "symmetry", "directionality"],
        "update scores",
    )
    u = updates[updates["run"].isin(ctx.enc_runs + ctx.dec_runs) & (updates["kind"] == kind)].copy()
    notes = []
    if kind == "applied" and len(u):
        nxt = {}
        for run in u["run"].unique():
            snaps = ctx.snapshots(run)
            for s in u.loc[u["run"] == run, "step"].astype(int).unique():
                later = snaps[snaps > s]
                nxt[(run, int(s))] = int(later[0]) - int(s) if later.size else -1
        u["length"] = [nxt[(r, int(s))] for r, s in zip(u["run"], u["step"])]
        lengths = u.loc[u["length"] > 0, "length"]
        if lengths.empty:
            raise UserError("no applied updates with a next snapshot")
        mode = int(lengths.mode().min())
        dropped = int((u["length"] != mode).sum())
        u = u[u["length"] == mode]
        notes.append(
            f"Applied updates: M at the run's next snapshot minus M at the scored step, each spanning {mode} steps"
            + (f" ({dropped} row(s) of other spans or without a next snapshot left out)." if dropped else ".")
        )
    per = u.groupby(["run", "objective", "size", "dataset", "seed"])[["symmetry", "directionality"]].median()
    per = per.reset_index()
    if (per["objective"] == "encoder").sum() == 0 or (per["objective"] == "decoder").sum() == 0:
        raise UserError(f"need {kind} update rows of the emergence runs of both objectives")
    notes.append("Per-seed statistic: median over layers and steps.")
    return per, notes


def _update_effect(kind: str, which: int, ctx: _Context) -> Effect:
    per, notes = _update_table(kind, ctx)
    e, d = per[per["objective"] == "encoder"], per[per["objective"] == "decoder"]
    if which == 1:
        m, pn = paired_by_seed(e, d, "symmetry")
        return Effect(
            _series(m, m["symmetry_a"] - m["symmetry_b"]), "effect = encoder - decoder, paired by seed", notes + pn
        )
    d = d.sort_values(["size", "dataset", "seed"])
    return Effect(_series(d, d["directionality"]), "effect = decoder directionality", notes)


def _paper_init(what: str, ctx: _Context, speedup: str = "lstar") -> str:
    """The paper's symmetric-init figure, its speed-up by our definition `speedup` where its curves allow it."""
    if speedup == "declared" and check_speedup_target(ctx.s.speedup_target) != ("baseline_loss_at_step", "horizon"):
        return "n/a for this target (the paper's curves fit only the rule: the baseline's loss at the horizon)"
    t = ctx.t
    return paper_symmetric_init(t.paper_loss, t.paper_table1, t.paper_rebuttal, what, ctx.s.level, speedup)


def _paper_gap(score: str, sign: int, ctx: _Context) -> str:
    return paper_pair_gap(ctx.t.paper_training, score, sign < 0, ctx.s.level)


# ------------------------------------------------------------------------------------------- claims
def _claim(cid, text, kind, inputs, effect, sign, margin, rule, paper="", unit="seed", family="text") -> Claim:  # noqa: PLR0913 (one argument per Claim field)
    return Claim(cid, text, kind, unit, tuple(inputs), effect, sign, margin, rule, paper, family)


_NO_FRESH = "not measured in the paper (no untied fresh control)"
_THEORY = "predicted by Theorems 2.3/2.4; not measured in the paper"
_REBUTTAL_DEC = "the rebuttal: no gain for decoders (no published numbers)"
_SAME_OBJECTIVE = (
    "implicit: the paper reports its decoders as causal LMs (its script trains them on the masking collator)"
)
_REBUTTAL_VIT = "the rebuttal: no significant speed-up for ViTs on CIFAR-10 / ImageNet-1k (no published numbers)"
_FIG_S1 = "Fig. S1: pretrained vision Transformers have symmetric W_qk (not trained from scratch in the paper)"
SEED_TABLES = ("training",)

# One entry per claim, in the order of the table. `{baseline}` in a text is the baseline init (settings).
CLAIMS: tuple[Claim, ...] = (
    _claim(
        "a",
        "encoders are more symmetric than decoders (standard init, at the horizon)",
        "core",
        SEED_TABLES,
        partial(_gap, "symmetry", 1),
        1,
        "symmetry",
        "directional",
        partial(_paper_gap, "symmetry", 1),
    ),
    _claim(
        "b",
        "decoders are more column-dominant than encoders (standard init, at the horizon)",
        "core",
        SEED_TABLES,
        partial(_gap, "directionality", -1),
        -1,
        "directionality",
        "directional",
        partial(_paper_gap, "directionality", -1),
    ),
    _claim(
        "b1",
        "encoder directionality vs the random-init null",
        "also",
        ("training", "null"),
        partial(_null, "encoder"),
        0,
        "directionality",
        "descriptive",
    ),
    _claim(
        "b2",
        "decoder directionality below the random-init null",
        "also",
        ("training", "null"),
        partial(_null, "decoder"),
        -1,
        "directionality",
        "directional",
    ),
    _claim(
        "b_change_enc",
        "encoder directionality at the horizon vs its own step 0 (no direction predicted)",
        "also",
        SEED_TABLES,
        partial(_change, "encoder", "directionality"),
        0,
        "directionality",
        "descriptive",
    ),
    _claim(
        "b_change_dec",
        "decoder directionality falls from its own step 0 (toward column dominance)",
        "also",
        SEED_TABLES,
        partial(_change, "decoder", "directionality"),
        -1,
        "directionality",
        "directional",
    ),
    _claim(
        "c1",
        f"{SYMMETRIC} init lowers the encoder's held-out loss vs {{baseline}}",
        "core",
        ("loss",),
        partial(_loss_gain, "encoder", None),
        1,
        "loss",
        "directional",
        partial(_paper_init, "loss"),
    ),
    _claim(
        "c2",
        f"{SYMMETRIC} init speeds up the encoder's training vs {{baseline}} (at the pre-declared target)",
        "core",
        ("loss",),
        partial(_speedup, "encoder", None, "declared", SYMMETRIC),
        1,
        "speedup",
        "directional",
        partial(_paper_init, "speedup", speedup="declared"),
    ),
    _claim(
        "c2_lstar",
        f"{SYMMETRIC} init speeds up the encoder's training vs {{baseline}} (at the common target L*)",
        "also",
        ("loss",),
        partial(_speedup, "encoder", None, "lstar", SYMMETRIC),
        1,
        "speedup",
        "directional",
        partial(_paper_init, "speedup", speedup="lstar"),
    ),
    _claim(
        "c2_paper",
        f"{SYMMETRIC} init speeds up the encoder's training vs {{baseline}} (the paper's definition: steps saved "
        "to reach the baseline's final loss)",
        "also",
        ("loss",),
        partial(_speedup, "encoder", None, "paper", SYMMETRIC),
        1,
        "speedup",
        "directional",
        partial(_paper_init, "speedup", speedup="paper"),
    ),
    _claim(
        "c2_fresh",
        "fresh (untied) init vs {baseline}: the encoder's speed-up at c2's target (the init scale alone)",
        "also",
        ("loss",),
        partial(_speedup, "encoder", None, "declared", "fresh"),
        0,
        "speedup",
        "descriptive",
        _NO_FRESH,
    ),
    _claim(
        "d1",
        f"{SYMMETRIC} init lowers the encoder's held-out loss vs fresh",
        "core",
        ("loss",),
        partial(_loss_gain, "encoder", "fresh"),
        1,
        "loss",
        "directional",
        _NO_FRESH,
    ),
    _claim(
        "d2",
        f"{SYMMETRIC} init speeds up the encoder's training vs fresh (at the pre-declared target)",
        "core",
        ("loss",),
        partial(_speedup, "encoder", "fresh", "declared", SYMMETRIC),
        1,
        "speedup",
        "directional",
        _NO_FRESH,
    ),
    _claim(
        "d2_lstar",
        f"{SYMMETRIC} init speeds up the encoder's training vs fresh (at the common target L*)",
        "also",
        ("loss",),
        partial(_speedup, "encoder", "fresh", "lstar", SYMMETRIC),
        1,
        "speedup",
        "directional",
        _NO_FRESH,
    ),
    _claim(
        "e",
        "decoders keep less of a tied initialization than encoders",
        "core",
        SEED_TABLES,
        _retained,
        -1,
        "symmetry",
        "directional",
        "the rebuttal: decoders lose a symmetric initialization (no published numbers)",
    ),
    _claim(
        "f",
        f"decoder {SYMMETRIC} init gains nothing vs {{baseline}} (held-out loss)",
        "core",
        ("loss",),
        partial(_loss_gain, "decoder", None),
        0,
        "loss",
        "equivalence",
        _REBUTTAL_DEC,
    ),
    _claim(
        "f2",
        f"decoder {SYMMETRIC} init does not speed up training vs {{baseline}} (at the pre-declared target)",
        "core",
        ("loss",),
        partial(_speedup, "decoder", None, "declared", SYMMETRIC),
        0,
        "speedup",
        "equivalence",
        _REBUTTAL_DEC,
    ),
    # the authors' decoder objective (decoder-paper) as a third arm (docs/preregistration-2.md): the paper's claims
    # a, b and e with their decoder, and its symmetry, directionality and tied-init retention against ours
    _claim(
        "a_paper",
        f"encoders are more symmetric than the authors' decoders ({PAPER_DECODER} objective; standard init, at the "
        "horizon)",
        "core",
        SEED_TABLES,
        partial(_objective_gap, "symmetry", "encoder", PAPER_DECODER),
        1,
        "symmetry",
        "directional",
        partial(_paper_gap, "symmetry", 1),
        family="paper-decoder",
    ),
    _claim(
        "b_paper",
        f"the authors' decoders ({PAPER_DECODER}) are more column-dominant than encoders (standard init, at the "
        "horizon)",
        "core",
        SEED_TABLES,
        partial(_objective_gap, "directionality", PAPER_DECODER, "encoder"),
        -1,
        "directionality",
        "directional",
        partial(_paper_gap, "directionality", -1),
        family="paper-decoder",
    ),
    _claim(
        "e_paper",
        f"the authors' decoders ({PAPER_DECODER}) keep less of a tied initialization than encoders",
        "core",
        SEED_TABLES,
        partial(_retained, objective=PAPER_DECODER),
        -1,
        "symmetry",
        "directional",
        "the rebuttal: decoders lose a symmetric initialization (no published numbers)",
        family="paper-decoder",
    ),
    _claim(
        "p_sym",
        f"the authors' decoder objective ({PAPER_DECODER}) gives the same symmetry as ours (standard init, at the "
        "horizon)",
        "core",
        SEED_TABLES,
        partial(_objective_gap, "symmetry", PAPER_DECODER, "decoder"),
        0,
        "symmetry",
        "equivalence",
        _SAME_OBJECTIVE,
    ),
    _claim(
        "p_dir",
        f"the authors' decoder objective ({PAPER_DECODER}) gives the same directionality as ours (standard init, "
        "at the horizon)",
        "core",
        SEED_TABLES,
        partial(_objective_gap, "directionality", PAPER_DECODER, "decoder"),
        0,
        "directionality",
        "equivalence",
        _SAME_OBJECTIVE,
    ),
    _claim(
        "p_tie",
        f"the authors' decoder objective ({PAPER_DECODER}) keeps as much of a tied initialization as ours",
        "core",
        SEED_TABLES,
        partial(_retained, objective=PAPER_DECODER, ref="decoder"),
        0,
        "symmetry",
        "equivalence",
        _SAME_OBJECTIVE,
    ),
    _claim(
        "v1",
        "training makes a ViT more symmetric than its random init ({baseline} init, at the horizon)",
        "core",
        SEED_TABLES,
        _vision_rise,
        1,
        "symmetry",
        "directional",
        _FIG_S1,
        family="vision",
    ),
    _claim(
        "v2",
        f"ViT {SYMMETRIC} init gains nothing vs {{baseline}} (held-out loss)",
        "core",
        ("loss",),
        partial(_loss_gain, VISION, None),
        0,
        "loss",
        "equivalence",
        _REBUTTAL_VIT,
        family="vision",
    ),
    _claim(
        "v3",
        f"ViT {SYMMETRIC} init does not speed up training vs {{baseline}} (at the pre-declared target)",
        "core",
        ("loss",),
        partial(_speedup, VISION, None, "declared", SYMMETRIC),
        0,
        "speedup",
        "equivalence",
        _REBUTTAL_VIT,
        family="vision",
    ),
    _claim(
        "v4",
        f"ViT {SYMMETRIC} init lowers the held-out loss vs fresh (as the encoders' d1)",
        "core",
        ("loss",),
        partial(_loss_gain, VISION, "fresh"),
        1,
        "loss",
        "directional",
        _NO_FRESH,
        family="vision",
    ),
    _claim(
        "v_symmetric",
        "ViT symmetric init (tied at the standard scale) vs {baseline}: held-out loss gain",
        "also",
        ("loss",),
        partial(_loss_gain, VISION, None, treatment="symmetric"),
        0,
        "loss",
        "descriptive",
        _REBUTTAL_VIT,
        family="vision",
    ),
    _claim(
        "g1",
        "pretrained encoders are more symmetric than decoders",
        "also",
        ("pretrained",),
        partial(_pretrained, "symmetry", 1),
        1,
        "symmetry",
        "directional",
        partial(_paper_pretrained, "symmetry", 1),
        unit="model",
    ),
    _claim(
        "g2",
        "pretrained decoders are more column-dominant than encoders",
        "also",
        ("pretrained",),
        partial(_pretrained, "directionality", -1),
        -1,
        "directionality",
        "directional",
        partial(_paper_pretrained, "directionality", -1),
        unit="model",
    ),
    _claim(
        "g3",
        "the paper's grouped-query decoders' near-zero symmetry comes from its expansion (scored by it, a "
        "grouped-query model's median symmetry falls below that of the attention's own W_qk)",
        "also",
        ("gqa",),
        _gqa_shift,
        -1,
        "symmetry",
        "directional",
        _paper_gqa,
        unit="model",
    ),
    *(
        _claim(
            f"h_{kind}_{which}",
            text,
            "also",
            ("updates",),
            partial(_update_effect, kind, which),
            -1 if which == 2 else 1,
            "directionality" if which == 2 else "symmetry",
            "directional",
            _THEORY,
        )
        for kind in ("gradient", "applied")
        for which, text in (
            (1, f"masked-LM {kind} updates are more symmetric than causal-LM ones"),
            (2, f"causal-LM {kind} updates are column-dominant"),
        )
    ),
)
CLAIM_IDS = tuple(c.id for c in CLAIMS)
assert len(set(CLAIM_IDS)) == len(CLAIM_IDS), "claim ids must be unique"


def claim_text(claim: Claim, settings: ClaimSettings) -> str:
    return claim.text.format(baseline=settings.baseline_init)


# ------------------------------------------------------------------------------------------ deciding
def _stats(claim: Claim, eff: Effect, s: ClaimSettings, exact: bool = True) -> dict:
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


def _decide(claim: Claim, eff: Effect, st: dict, p_used: float, s: ClaimSettings) -> str:
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


def _why(claim: Claim, st: dict, v: str, p_used: float, p_name: str, s: ClaimSettings) -> str:
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


def _test_text(claim: Claim, eff: Effect, s: ClaimSettings, m_family: int) -> str:
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


def _row(claim: Claim, eff: Effect, st: dict, p_holm: float, v: str, s: ClaimSettings, m_family: int) -> dict:
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


def _family_verdicts(done: dict, s: ClaimSettings, stats: dict) -> tuple[dict, dict]:
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


def _loo_stability(done: dict, s: ClaimSettings, full: dict) -> dict:
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


def _untested(claim: Claim, reason: str, paper: str, s: ClaimSettings) -> dict:
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


def _paper_text(claim: Claim, ctx: _Context) -> str:
    if not callable(claim.paper):
        return claim.paper
    try:
        return claim.paper(ctx)
    except UserError as exc:
        return f"n/a ({exc})"


def evaluate(claims: Sequence[Claim], tables: ClaimTables, settings: ClaimSettings) -> pd.DataFrame:
    """Every claim of `claims` as one row (CLAIM_COLUMNS), in their order: the effect per unit, the statistics,
    Holm over the family (the directional core claims tested), the verdict and its leave-one-out stability."""
    check_level(settings.level)
    check_speedup_target(settings.speedup_target)
    settings.check_families([c.id for c in claims])
    ctx = _Context(tables, settings)
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
    return evaluate(CLAIMS, tables or ClaimTables(), settings or ClaimSettings())


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
