"""The effect of each claim on its units, and the paper's figure on the same unit: the functions that the claims
table (attention_geometry.analysis.claims.CLAIMS) names per claim, its `effect` and its `paper`.

Each effect function takes the Context (the claim tables and settings, with the computations several claims
share) first and its own parameters by name, as the table binds them (`partial(loss_gain, objective="encoder")`),
and returns an Effect: the effect per unit (seeds, labelled size/dataset/seed, paired by seed between runs of one
seed; or models), how it was computed and the notes the reader needs, or raises a UserError, which makes the
claim's row "not tested". The paper functions return the paper's figure on the same unit as text. Nothing here
decides: attention_geometry.analysis.claim_rules turns an Effect into the claim's row.

The Context holds an analysis.claims.ClaimTables (`ctx.t`) and an analysis.claims.ClaimSettings (`ctx.s`); they are
defined with the claims table, above this module (the notebooks build them there), and read here by field.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import pandas as pd

from attention_geometry.analysis import summaries as A
from attention_geometry.analysis.gqa import gqa_model_table, model_labels
from attention_geometry.analysis.paper_claims import fmt_estimate as _fmt
from attention_geometry.analysis.paper_claims import paper_pair_gap, paper_symmetric_init
from attention_geometry.analysis.stats import MIN_N, horizon_stat, t_interval, welch_interval
from attention_geometry.analysis.study_design import SYMMETRIC, VISION
from attention_geometry.analysis.summaries import (
    check_speedup_target,
    contrast_runs,
    declared_speedups,
    paper_speedups,
    speedup_target_text,
)
from attention_geometry.errors import UserError


# --------------------------------------------------------------------------------------------- effect
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


# ------------------------------------------------------------------------------------------ context
def _labels(t: pd.DataFrame) -> list[str]:
    """Unit labels of per-seed rows: size/dataset/seed (the keys the table has)."""
    keys = [k for k in ("size", "dataset", "seed") if k in t.columns]
    return ["/".join(str(v) for v in row) for row in t[keys].itertuples(index=False)]


def _series(t: pd.DataFrame, values) -> pd.Series:
    return pd.Series(np.asarray(values, dtype=float), index=_labels(t), dtype=float)


class Context:
    """The tables and settings every effect function reads (`t`: a claims.ClaimTables, `s`: a
    claims.ClaimSettings), with the computations several claims share."""

    def __init__(self, tables, settings) -> None:
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

    def horizon(
        self, runs: Sequence[str], what: str, upto: int | None = None, layer: int | None = None
    ) -> pd.DataFrame:
        """stats.horizon_stat of `runs` (`layer`: of that layer's rows only; a run without it is a UserError)."""
        training = self.table("training")
        if not runs:
            raise UserError(f"no {what} runs given")
        if layer is not None:
            training = training[pd.to_numeric(training["layer"], errors="coerce") == layer]
            absent = sorted(set(runs) - set(training["run"].astype(str)))
            if absent:
                raise UserError(f"no layer {layer} in the training scores of run(s) {', '.join(absent)}")
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


def _horizon_note(h: pd.DataFrame, layer: int | None = None) -> str:
    steps = sorted({s for x in h["steps_used"] for s in str(x).split(",")}, key=int)
    over = "layers and the snapshots" if layer is None else f"layer {layer}'s snapshots"
    return f"Per-seed statistic: median over {over} at steps {', '.join(steps)}."


def _moves(iv) -> str:
    if not (np.isfinite(iv.low) and np.isfinite(iv.high)):
        return "too few seeds to say"
    if iv.low > 0:
        return "move up"
    if iv.high < 0:
        return "move down"
    return "do not move on average (the interval includes 0)"


def _movement(ctx: Context, score: str = "directionality") -> str:
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
def gap(ctx: Context, score: str, sign: int, layer: int | None = None) -> Effect:
    """Encoder vs decoder `score` at the horizon, standard init, paired by seed (sign +1: encoder - decoder).
    `layer`: of that layer alone (its median over the horizon snapshots; the per-layer rows a_L*, b_L*)."""
    he = ctx.horizon(ctx.enc_runs, "encoder emergence", layer=layer)
    hd = ctx.horizon(ctx.dec_runs, "decoder emergence", layer=layer)
    m, notes = paired_by_seed(he, hd, score)
    eff = (m[f"{score}_a"] - m[f"{score}_b"]) if sign > 0 else (m[f"{score}_b"] - m[f"{score}_a"])
    what = "encoder - decoder" if sign > 0 else "decoder - encoder"
    notes = [
        f"Means over seeds: encoder {m[f'{score}_a'].mean():+.3f}, decoder {m[f'{score}_b'].mean():+.3f}.",
        _horizon_note(pd.concat([he, hd]), layer),
        *notes,
    ]
    if score == "directionality" and layer is None:
        try:
            notes.insert(1, _movement(ctx, score))
        except UserError as exc:
            notes.insert(1, f"What moves: not computed ({exc}).")
    where = "" if layer is None else f" of layer {layer}"
    return Effect(_series(m, eff), f"effect = {what} {score}{where} at the horizon, paired by seed", notes)


def objective_gap(ctx: Context, score: str, first: str, second: str) -> Effect:
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


def level(ctx: Context, objective: str, score: str, layer: int | None = None) -> Effect:
    """Per seed: the `objective`'s standard-init `score` at the horizon, against 0 (the decoders' anti-symmetry:
    docs/preregistration-3.md). `layer`: that layer's median over the horizon snapshots instead of the median
    over layers and snapshots."""
    runs = ctx.emergence_by_objective.get(objective) or []
    h = ctx.horizon(runs, f"{objective} emergence", layer=layer).sort_values(["size", "dataset", "seed"])
    where = "" if layer is None else f" of layer {layer}"
    return Effect(
        _series(h, h[score]),
        f"effect = {objective} {score}{where} at the horizon, per seed (against 0)",
        [f"Mean over seeds {h[score].mean():+.3f}.", _horizon_note(h, layer)],
    )


def change(ctx: Context, objective: str, score: str) -> Effect:
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


def vision_rise(ctx: Context) -> Effect:
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


def against_null(ctx: Context, objective: str) -> Effect:
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


def loss_gain(ctx: Context, objective: str, ref: str | None = None, treatment: str = SYMMETRIC) -> Effect:
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


def speedup(
    ctx: Context, objective: str, how: str, what: str, ref: str | None = None, treatment: str = SYMMETRIC
) -> Effect:
    """Per seed: the speed-up of `treatment` over `ref` (None: the baseline init) by definition `how`
    (Context.contrast); `what` is that definition in words (claims.SPEEDUP_WHAT[how], a template of {target})."""
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
        f"effect = {what.format(target=target)}; {treatment} vs {ref}, paired by seed",
        notes,
        censored=len(lost),
    )


def retained(ctx: Context, objective: str = "decoder", ref: str = "encoder") -> Effect:
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


def pretrained_gap(ctx: Context, score: str, sign: int) -> Effect:
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


def paper_pretrained(ctx: Context, score: str, sign: int) -> str:
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


def gqa_shift(ctx: Context) -> Effect:
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


def paper_gqa(ctx: Context) -> str:
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


def _update_table(ctx: Context, kind: str) -> tuple[pd.DataFrame, list[str]]:
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


def update_effect(ctx: Context, kind: str, which: int) -> Effect:
    per, notes = _update_table(ctx, kind)
    e, d = per[per["objective"] == "encoder"], per[per["objective"] == "decoder"]
    if which == 1:
        m, pn = paired_by_seed(e, d, "symmetry")
        return Effect(
            _series(m, m["symmetry_a"] - m["symmetry_b"]), "effect = encoder - decoder, paired by seed", notes + pn
        )
    d = d.sort_values(["size", "dataset", "seed"])
    return Effect(_series(d, d["directionality"]), "effect = decoder directionality", notes)


def paper_init(ctx: Context, what: str, speedup: str = "lstar") -> str:
    """The paper's symmetric-init figure, its speed-up by our definition `speedup` where its curves allow it."""
    if speedup == "declared" and check_speedup_target(ctx.s.speedup_target) != ("baseline_loss_at_step", "horizon"):
        return "n/a for this target (the paper's curves fit only the rule: the baseline's loss at the horizon)"
    t = ctx.t
    return paper_symmetric_init(t.paper_loss, t.paper_table1, t.paper_rebuttal, what, ctx.s.level, speedup)


def paper_gap(ctx: Context, score: str, sign: int) -> str:
    return paper_pair_gap(ctx.t.paper_training, score, sign < 0, ctx.s.level)
