"""The claims table of the reproduction report: each claim of the paper decided on its right unit.

One row per claim (CLAIM_COLUMNS, docs/contracts.md "Claims"). Seeds are the unit of our training runs
(encoder and decoder of one seed share their initial weights, so their contrasts are paired by seed), models
the unit of pretrained checkpoints. A directional claim is decided by the t-interval of its effect and the
verdict rule of stats.verdict with the claim's smallest effect of interest (`margins`); an exact sign-flip
p-value and its floor for n values are reported beside it. Fewer than 3 seeds never give a verdict; fewer
than 3 models per class give a descriptive row. A claim whose data are missing is "not tested", never dropped.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd

from attention_geometry.analysis import summaries as A
from attention_geometry.analysis.paper_claims import fmt_estimate as _fmt
from attention_geometry.analysis.paper_claims import paper_pair_gap, paper_symmetric_init
from attention_geometry.analysis.stats import (
    horizon_stat,
    p_floor,
    sign_flip_p,
    t_interval,
    verdict,
    welch_interval,
    welch_p,
)
from attention_geometry.errors import UserError

CLAIM_COLUMNS = [
    "id",
    "claim",
    "kind",
    "unit",
    "n",
    "prediction",
    "estimate",
    "low",
    "high",
    "margin",
    "test",
    "p_value",
    "p_floor",
    "verdict",
    "paper",
    "note",
]
DEFAULT_MARGINS = {"symmetry": 0.05, "directionality": 0.05, "loss": 0.01, "speedup": 0.05}
MIN_N = 3
SYMMETRIC = "symmetric-fresh"  # the paper's "symmetric" init (resources/paper/README.md)
OPPOSITE = "The estimate has the opposite sign to the prediction."


# ------------------------------------------------------------------------------------- row builders
def _pred(sign: int, margin: float) -> str:
    return {1: "> 0", -1: "< 0", 0: f"within ±{margin:g}"}[sign]


def _why(v: str, sign: int, low: float, high: float, margin: float, level: float) -> str:
    ci = f"The {level:.0%} interval [{low:+.3g}, {high:+.3g}]"
    if sign == 0:
        return {
            "holds": f"{ci} lies inside ±{margin:g}: no effect of interest.",
            "contradicted": f"{ci} excludes 0: there is an effect.",
            "inconclusive": f"{ci} includes 0 but reaches beyond ±{margin:g}.",
        }[v]
    if v == "holds":
        return f"{ci} lies {'above' if sign > 0 else 'below'} 0 on the predicted side."
    if v == "contradicted":
        if -margin < low and high < margin:
            return f"{ci} lies inside ±{margin:g}: the effect is negligible."
        return f"{ci} lies on the other side of 0."
    return f"{ci} includes 0."


def decided_row(  # noqa: PLR0913 (one row's fields, all named at each call)
    cid: str,
    claim: str,
    kind: str,
    values: Sequence[float],
    sign: int,
    margin: float,
    level: float,
    test: str,
    paper: str = "",
    notes: Sequence[str] = (),
    unit: str = "seed",
) -> dict:
    """A claim decided on per-unit effects `values` (NaNs dropped): t-interval, exact sign-flip p and its
    floor, stats.verdict with `margin`; with fewer than MIN_N values the verdict is "inconclusive"."""
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    iv = t_interval(x, level)
    n = iv.n
    p = sign_flip_p(x) if n else math.nan
    notes = list(notes)
    if n < MIN_N:
        v = "inconclusive"
        notes.insert(0, f"Too few {unit}s (n = {n}): at least {MIN_N} are needed for a verdict.")
    else:
        v = verdict(iv.low, iv.high, sign, margin)
        notes.insert(0, _why(v, sign, iv.low, iv.high, margin, level))
    if sign and n and np.sign(iv.estimate) == -sign:
        notes.insert(1, OPPOSITE)
    notes.append(
        f"Margin {margin:g}: "
        + (
            "an effect inside ±margin counts as none."
            if sign == 0
            else "an effect inside ±margin is negligible and contradicts the claim."
        )
    )
    return {
        "id": cid,
        "claim": claim,
        "kind": kind,
        "unit": unit,
        "n": n,
        "prediction": _pred(sign, margin),
        "estimate": iv.estimate,
        "low": iv.low,
        "high": iv.high,
        "margin": margin,
        "test": f"{level:.0%} t-interval over {unit}s; exact two-sided sign-flip p" + (f"; {test}" if test else ""),
        "p_value": p,
        "p_floor": p_floor(n),
        "verdict": v,
        "paper": paper,
        "note": " ".join(notes),
    }


def untested_row(cid: str, claim: str, kind: str, unit: str, reason: str, paper: str = "") -> dict:
    row = {c: math.nan for c in CLAIM_COLUMNS}
    row.update(
        id=cid,
        claim=claim,
        kind=kind,
        unit=unit,
        n=0,
        prediction="",
        margin=math.nan,
        test="",
        verdict="not tested",
        paper=paper,
        note=f"Not tested: {reason}",
    )
    return row


# -------------------------------------------------------------------------------- paired contrasts
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


# ------------------------------------------------------------------------------------------ claims
def _null_rows(h: pd.DataFrame, null: pd.DataFrame | None, margin: float, level: float) -> list[dict]:
    names = {
        "encoder": ("1", "encoder directionality vs the random-init null", 0),
        "decoder": ("2", "decoder directionality below the random-init null", -1),
    }
    rows = []
    for obj, (suffix, claim, sign) in names.items():
        cid = f"b{suffix}"
        try:
            if null is None or null.empty:
                raise UserError("no null table (null_scores.csv)")
            A.require_columns(null, ["init", "sample", "layer", "directionality"], "null table")
            nl = null[null["init"] == "standard"]
            if "size" in nl.columns and "size" in h.columns:
                nl = nl[nl["size"].isin(h["size"].unique())]
            if nl.empty:
                raise UserError("the null table has no standard-init samples of our model size")
            per = nl.groupby("sample")["directionality"].median().to_numpy(dtype=float)
            mean, lo, hi = float(per.mean()), *np.percentile(per, [2.5, 97.5])
            d = h.loc[h["objective"] == obj].sort_values("seed")
            if d.empty:
                raise UserError(f"no {obj} runs in the emergence runs")
            pct = [100.0 * float(np.mean(per <= x)) for x in d["directionality"]]
            where = (
                f"Seeds at null percentiles {', '.join(f'{q:.0f}' for q in pct)} (null of {per.size} standard "
                f"inits, mean {mean:+.3f}, 2.5-97.5 % range [{lo:+.3f}, {hi:+.3f}]); "
                f"{sum(lo <= x <= hi for x in d['directionality'])} of {len(d)} seeds inside it."
            )
            diffs = d["directionality"].to_numpy(dtype=float) - mean
            test = "effect = per-seed d minus the null's mean of per-sample medians over layers"
            if sign == 0:
                iv = t_interval(diffs, level)
                rows.append(
                    {
                        **decided_row(cid, claim, "also", diffs, 0, margin, level, test),
                        "prediction": "",
                        "verdict": "descriptive",
                        "estimate": iv.estimate,
                        "note": f"Descriptive (no direction predicted for encoders). {where}",
                    }
                )
            else:
                rows.append(decided_row(cid, claim, "also", diffs, sign, margin, level, test, notes=[where]))
        except UserError as exc:
            rows.append(untested_row(cid, claim, "also", "seed", str(exc)))
    return rows


def _pretrained_rows(pretrained, paper_pretrained, caveats, margins, level) -> list[dict]:
    rows = []
    ours = A.model_table(pretrained, None) if pretrained is not None and len(pretrained) else None
    paper = None
    if paper_pretrained is not None and len(paper_pretrained):
        paper = A.model_table(None, paper_pretrained[paper_pretrained["modality"] == "language"], caveats)
        paper = paper[paper["caveat"] == ""]
    for cid, score, sign, claim in (
        ("g1", "symmetry", 1, "pretrained encoders are more symmetric than decoders"),
        ("g2", "directionality", -1, "pretrained decoders are more column-dominant than encoders"),
    ):
        margin = float(margins[score])
        ptxt = "n/a"
        if paper is not None:
            e = paper.loc[paper["architecture"] == "encoder-only", f"{score}_median"]
            dd = paper.loc[paper["architecture"] == "decoder-only", f"{score}_median"]
            piv = welch_interval(dd, e, level) if sign < 0 else welch_interval(e, dd, level)
            ptxt = (
                f"{_fmt(piv.estimate, piv.low, piv.high)} over {len(e)} encoder and {len(dd)} decoder language "
                f"models (per-model median over layers, Welch; not-comparable points left out)"
            )
        if ours is None:
            rows.append(untested_row(cid, claim, "also", "model", "no pretrained scores", ptxt))
            continue
        t = ours[ours["modality"] == "text"]
        e = t.loc[t["architecture"] == "encoder-only", f"{score}_median"].to_numpy(dtype=float)
        dd = t.loc[t["architecture"] == "decoder-only", f"{score}_median"].to_numpy(dtype=float)
        if e.size == 0 or dd.size == 0:
            rows.append(
                untested_row(
                    cid,
                    claim,
                    "also",
                    "model",
                    "our pretrained scores need both an encoder-only and a decoder-only text model",
                    ptxt,
                )
            )
            continue
        a, b = (dd, e) if sign < 0 else (e, dd)
        iv = welch_interval(a, b, level)
        both = t[t["architecture"].isin(["encoder-only", "decoder-only"])]
        models = ", ".join(both["model"].astype(str))
        flagged = [
            f"{m} ({c}: no fixed bilinear form gives its logits exactly)"
            for m, c in zip(both["model"].astype(str), both["caveat"])
            if c
        ]
        caveat = (" Caveat: " + "; ".join(flagged) + ".") if flagged else ""
        what = "decoder - encoder" if sign < 0 else "encoder - decoder"
        row = {
            "id": cid,
            "claim": claim,
            "kind": "also",
            "unit": "model",
            "n": int(e.size + dd.size),
            "prediction": _pred(sign, margin),
            "estimate": iv.estimate,
            "low": iv.low,
            "high": iv.high,
            "margin": margin,
            "test": f"{level:.0%} Welch t-interval over models ({what} of per-model medians over layers)",
            "p_value": welch_p(a, b),
            "p_floor": math.nan,
            "paper": ptxt,
        }
        if min(e.size, dd.size) < MIN_N:
            row.update(
                verdict="descriptive",
                low=math.nan,
                high=math.nan,
                p_value=math.nan,
                note=f"Descriptive: {e.size} encoder and {dd.size} decoder model(s) ({models}); at least "
                f"{MIN_N} models per class are needed for a verdict, and layers of one model are not "
                "independent models." + (f" {OPPOSITE}" if np.sign(iv.estimate) == -sign else "") + caveat,
            )
        else:
            v = verdict(iv.low, iv.high, sign, margin)
            row.update(
                verdict=v,
                note=" ".join(
                    [_why(v, sign, iv.low, iv.high, margin, level)]
                    + ([OPPOSITE] if np.sign(iv.estimate) == -sign else [])
                    + [f"Models: {models}.{caveat}"]
                ),
            )
        rows.append(row)
    return rows


def _update_rows(updates, enc_runs, dec_runs, margins, level) -> list[dict]:
    rows = []
    for kind in ("gradient", "applied"):
        ids = (f"h_{kind}_1", f"h_{kind}_2")
        claims = (
            f"masked-LM {kind} updates are more symmetric than causal-LM ones",
            f"causal-LM {kind} updates are column-dominant",
        )
        try:
            if updates is None or updates.empty:
                raise UserError("no update scores (update_scores.csv)")
            A.require_columns(
                updates,
                ["run", "objective", "seed", "step", "layer", "kind", "symmetry", "directionality"],
                "update score table",
            )
            u = updates[updates["run"].isin(list(enc_runs) + list(dec_runs))]
            notes = []
            if kind == "applied":
                steps = updates.groupby("run")["step"].apply(lambda s: np.sort(s.unique()))
                nxt = {(r, int(a)): int(b) - int(a) for r, st in steps.items() for a, b in zip(st[:-1], st[1:])}
                u = u[u["kind"] == kind].copy()
                u["length"] = [nxt.get((r, int(s)), -1) for r, s in zip(u["run"], u["step"])]
                lengths = u.loc[u["length"] > 0, "length"]
                if lengths.empty:
                    raise UserError("no applied updates with a next snapshot")
                mode = int(lengths.mode().min())
                dropped = int((u["length"] != mode).sum())
                u = u[u["length"] == mode]
                notes.append(
                    f"Applied updates (M at the run's next snapshot minus M at the scored step, equal "
                    f"snapshot spacing) at scored steps {mode} steps apart"
                    + (f" ({dropped} row(s) of other lengths left out)." if dropped else ".")
                )
            u = u[u["kind"] == kind]
            per = u.groupby(["run", "objective", "seed"])[["symmetry", "directionality"]].median().reset_index()
            e, d = per[per["objective"] == "encoder"], per[per["objective"] == "decoder"]
            if e.empty or d.empty:
                raise UserError(f"need {kind} update rows of the emergence runs of both objectives")
            notes.append("Per-seed statistic: median over layers and steps.")
            m, pn = paired_by_seed(e, d, "symmetry")
            paper = "predicted by Theorems 2.3/2.4; not measured in the paper"
            rows.append(
                decided_row(
                    ids[0],
                    claims[0],
                    "also",
                    m["symmetry_a"] - m["symmetry_b"],
                    1,
                    float(margins["symmetry"]),
                    level,
                    "effect = encoder - decoder, paired by seed",
                    paper,
                    notes + pn,
                )
            )
            rows.append(
                decided_row(
                    ids[1],
                    claims[1],
                    "also",
                    d["directionality"],
                    -1,
                    float(margins["directionality"]),
                    level,
                    "effect = decoder directionality",
                    paper,
                    notes,
                )
            )
        except UserError as exc:
            rows += [untested_row(i, c, "also", "seed", str(exc)) for i, c in zip(ids, claims)]
    return rows


def reproduction_claims(  # noqa: PLR0913 (keyword-only: one per input table and setting)
    *,
    training: pd.DataFrame | None,
    loss: pd.DataFrame | None,
    emergence_runs: dict,
    ablation_runs: Sequence[str] = (),
    updates: pd.DataFrame | None = None,
    pretrained: pd.DataFrame | None = None,
    null: pd.DataFrame | None = None,
    paper_pretrained: pd.DataFrame | None = None,
    paper_training: pd.DataFrame | None = None,
    paper_table1: pd.DataFrame | None = None,
    paper_loss: pd.DataFrame | None = None,
    paper_rebuttal: pd.DataFrame | None = None,
    caveats: pd.DataFrame | None = None,
    margins: dict | None = None,
    horizon_snapshots: int = 3,
    baseline_init: str = "standard",
    level: float = 0.95,
) -> pd.DataFrame:
    """Every claim as one row (CLAIM_COLUMNS). Core claims (a)-(f) on the `emergence_runs` ({encoder: [runs],
    decoder: [runs]}, standard init, all seeds) and the `ablation_runs` (every init, all seeds); also rows:
    directionality vs the random-init `null`, pretrained encoders vs decoders over models, update structure."""
    margins = {**DEFAULT_MARGINS, **(margins or {})}
    enc_runs = A.as_list((emergence_runs or {}).get("encoder"))
    dec_runs = A.as_list((emergence_runs or {}).get("decoder"))
    abl = A.as_list(ablation_runs)
    ms, md, ml, mp = (float(margins[k]) for k in ("symmetry", "directionality", "loss", "speedup"))
    rows: list[dict] = []

    def attempt(
        cid: str,
        claim: str,
        fn: Callable[[], dict | list[dict]],
        kind: str = "core",
        unit: str = "seed",
        paper: str = "",
    ) -> None:
        try:
            out = fn()
        except UserError as exc:
            rows.append(untested_row(cid, claim, kind, unit, str(exc), paper))
            return
        rows.extend(out if isinstance(out, list) else [out])

    def horizon(runs: Sequence[str], what: str, upto: int | None = None) -> pd.DataFrame:
        if training is None or training.empty:
            raise UserError("no training scores (training_scores.csv)")
        if not runs:
            raise UserError(f"no {what} runs given")
        return horizon_stat(training, runs, horizon_snapshots, upto)

    def enc_dec(score: str, sign: int, margin: float, cid: str, claim: str) -> dict:
        he, hd = horizon(enc_runs, "encoder emergence"), horizon(dec_runs, "decoder emergence")
        m, notes = paired_by_seed(he, hd, score)
        eff = (m[f"{score}_a"] - m[f"{score}_b"]) if sign > 0 else (m[f"{score}_b"] - m[f"{score}_a"])
        what = "encoder - decoder" if sign > 0 else "decoder - encoder"
        means = f"Means over seeds: encoder {m[f'{score}_a'].mean():+.3f}, decoder {m[f'{score}_b'].mean():+.3f}."
        return decided_row(
            cid,
            claim,
            "core",
            eff,
            sign,
            margin,
            level,
            f"effect = {what} {score} at the horizon, paired by seed",
            paper_pair_gap(paper_training, score, sign < 0, level),
            [means, _horizon_note(pd.concat([he, hd]))] + notes,
        )

    attempt(
        "a",
        "encoders are more symmetric than decoders (standard init, at the horizon)",
        lambda: enc_dec(
            "symmetry", 1, ms, "a", "encoders are more symmetric than decoders (standard init, at the horizon)"
        ),
    )
    attempt(
        "b",
        "decoders are more column-dominant than encoders (standard init, at the horizon)",
        lambda: enc_dec(
            "directionality",
            -1,
            md,
            "b",
            "decoders are more column-dominant than encoders (standard init, at the horizon)",
        ),
    )
    try:
        hh = pd.concat([horizon(enc_runs, "encoder emergence"), horizon(dec_runs, "decoder emergence")])
        rows.extend(_null_rows(hh, null, md, level))
    except UserError as exc:
        rows += [
            untested_row("b1", "encoder directionality vs the random-init null", "also", "seed", str(exc)),
            untested_row("b2", "decoder directionality below the random-init null", "also", "seed", str(exc)),
        ]

    def loss_contrast(
        objective: str, ref: str, what: str, sign: int, margin: float, cid: str, claim: str, paper: str
    ) -> dict:
        if loss is None or loss.empty:
            raise UserError("no training loss table (training_loss.csv)")
        lt = A.select_runs(loss, abl, "training loss") if abl else loss
        c = A.contrast_runs(lt, SYMMETRIC, ref)
        c = c[c["objective"] == objective]
        if c.empty:
            raise UserError(f"no {objective} {SYMMETRIC} run with a same-seed {ref} run among the ablation runs")
        if what == "loss":
            eff, test = (
                c["loss_gain"],
                f"effect = {ref} - {SYMMETRIC} held-out loss at step {int(c['horizon'].iloc[0])}, paired by seed",
            )
            extra = (
                f"Final held-out loss: {ref} {c['baseline_final_eval_loss'].mean():.4f}, "
                f"{SYMMETRIC} {c['final_eval_loss'].mean():.4f} (means)."
            )
        else:
            eff, test = (
                c["speedup"],
                f"effect = signed speed-up 1 - s*/S at the common target L* = {c['target'].iloc[0]:.4f}",
            )
            extra = (
                "Per seed: "
                + ", ".join(
                    f"s{int(r.seed)} {100 * r.speedup:+.1f} % (S = {r.baseline_s:.0f}, s* = {r.s_star:.0f})"
                    for r in c.itertuples()
                )
                + "; L* is the highest of the compared runs' lowest held-out losses up to step "
                + f"{int(c['horizon'].iloc[0])}, reached by every run."
            )
        return decided_row(cid, claim, "core", eff, sign, margin, level, test, paper, [extra])

    for cid, ref, what, margin in (
        ("c1", baseline_init, "loss", ml),
        ("c2", baseline_init, "speedup", mp),
        ("d1", "fresh", "loss", ml),
        ("d2", "fresh", "speedup", mp),
    ):
        claim = (
            f"{SYMMETRIC} init lowers the encoder's held-out loss vs {ref}"
            if what == "loss"
            else f"{SYMMETRIC} init speeds up the encoder's training vs {ref}"
        )
        paper = (
            paper_symmetric_init(paper_loss, paper_table1, paper_rebuttal, what, level)
            if ref == baseline_init
            else "not measured in the paper (no untied fresh control)"
        )
        attempt(
            cid,
            claim,
            lambda ref=ref, what=what, margin=margin, cid=cid, claim=claim, paper=paper: loss_contrast(
                "encoder", ref, what, 1, margin, cid, claim, paper
            ),
            paper=paper,
        )

    def retained() -> dict:
        if training is None or training.empty:
            raise UserError("no training scores (training_scores.csv)")
        runs = {o: _runs_of(training, abl, o, SYMMETRIC) for o in ("encoder", "decoder")}
        if not runs["encoder"] or not runs["decoder"]:
            raise UserError(f"need {SYMMETRIC} training scores of both objectives among the ablation runs")
        # one horizon for both: the last snapshot step every compared run has (a shorter decoder run
        # is compared with the encoder's snapshots up to its own last step)
        both = training[training["run"].isin(runs["encoder"] + runs["decoder"])]
        upto = int(both.groupby("run")["step"].max().min())
        he, hd = horizon(runs["encoder"], "encoder", upto), horizon(runs["decoder"], "decoder", upto)
        m, notes = paired_by_seed(he, hd, "symmetry")
        return decided_row(
            "e",
            "decoders keep less of a tied initialization than encoders",
            "core",
            m["symmetry_b"] - m["symmetry_a"],
            -1,
            ms,
            level,
            f"effect = decoder - encoder symmetry of the {SYMMETRIC} runs at the horizon, paired by seed",
            "the rebuttal: decoders lose a symmetric initialization (no published numbers)",
            [
                f"Retained symmetry (starts at 1): encoder {m['symmetry_a'].mean():+.3f}, decoder "
                f"{m['symmetry_b'].mean():+.3f} (means).",
                _horizon_note(pd.concat([he, hd])),
            ]
            + notes,
        )

    attempt("e", "decoders keep less of a tied initialization than encoders", retained)
    attempt(
        "f",
        f"decoder {SYMMETRIC} init gains nothing vs {baseline_init}",
        lambda: loss_contrast(
            "decoder",
            baseline_init,
            "loss",
            0,
            ml,
            "f",
            f"decoder {SYMMETRIC} init gains nothing vs {baseline_init}",
            "the rebuttal: no gain for decoders (no published numbers)",
        ),
    )
    rows += _pretrained_rows(pretrained, paper_pretrained, caveats, margins, level)
    rows += _update_rows(updates, enc_runs, dec_runs, margins, level)
    return pd.DataFrame(rows, columns=CLAIM_COLUMNS)


# ------------------------------------------------------------------------------------------ report
def claim_sentence(r: pd.Series, level: float = 0.95) -> str:
    """One plain paragraph per claim for the report."""
    head = f"**({r['id']}) {r['claim']}** ({r['kind']}): **{r['verdict']}**."
    if r["verdict"] == "not tested":
        return f"{head} {str(r['note']).rstrip('.')}. Paper: {r['paper'] or 'n/a'}."
    pct = "speed-up" in str(r["test"])
    est = _fmt(r["estimate"], r["low"], r["high"], pct=pct)
    est += f" ({level:.0%} interval)" if np.isfinite(r["low"]) else " (no interval)"
    p = (
        f"; p = {r['p_value']:.3g}"
        + (f" (floor {r['p_floor']:.3g} with n = {int(r['n'])})" if np.isfinite(r["p_floor"]) else "")
        if np.isfinite(r["p_value"])
        else ""
    )
    margin = f"{100 * r['margin']:g} %" if pct else f"{r['margin']:g}"
    return (
        f"{head} Unit: {r['unit']}, n = {int(r['n'])}; prediction {r['prediction'] or 'none'}; estimate {est}"
        f"{p}; margin ±{margin}. Test: {r['test']}. {r['note']} "
        f"Paper: {r['paper'] or 'n/a'}."
    )


def claim_bullet(r: pd.Series) -> str:
    """One summary line per claim: verdict, estimate and interval, unit and n, margin, the paper's figure."""
    if r["verdict"] == "not tested":
        return f"- ({r['id']}) {r['claim']}: **not tested** ({r['note'].removeprefix('Not tested: ')})"
    pct = "speed-up" in str(r["test"])
    margin = f"{100 * r['margin']:g} %" if pct else f"{r['margin']:g}"
    return (
        f"- ({r['id']}) {r['claim']}: **{r['verdict']}**, {_fmt(r['estimate'], r['low'], r['high'], pct=pct)} "
        f"(n = {int(r['n'])} {r['unit']}{'' if int(r['n']) == 1 else 's'}, "
        f"prediction {r['prediction'] or 'none'}, margin ±{margin}); "
        f"paper: {r['paper'] or 'n/a'}"
    )


def verdict_counts(claims: pd.DataFrame, kind: str = "core") -> str:
    c = claims[claims["kind"] == kind]["verdict"].value_counts()
    return ", ".join(
        f"{int(c[v])} {v}" for v in ("holds", "contradicted", "inconclusive", "descriptive", "not tested") if v in c
    )
