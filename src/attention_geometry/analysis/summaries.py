"""Pure computations behind the notebooks: summaries over layers, held-out loss contrasts and Table 1, curves
over seeds, tables and notebook I/O. The statistics are in attention_geometry.analysis.stats, the claims table
in attention_geometry.analysis.claims, the per-run symmetry vs speed-up tables and their correlations in
attention_geometry.analysis.symmetry_speedup.

Why over 600 lines: the notebooks, analysis.figure_frames, gqa and the claims address most names here as
`summaries.NAME` (the rest are what those are made of), and a name has one import path (docs/DESIGN.md: no
re-exports), so they stay where they are called; the held-out loss contrasts stay beside Table 1 (init_table),
which is made of them.

Every function takes tables (pandas DataFrames with the columns of docs/contracts.md) or arrays and returns
new ones; nothing here reads files, draws or rescales a score. The notebooks only load, call these, and draw.

Conventions used throughout:
- "over layers" summaries take the layer's summed matrix (`head == "all"` where a head column exists);
- intervals are two-sided at `level` (e.g. 0.95); a t-interval needs n >= 2, otherwise its bounds are NaN;
- speed-ups are signed and per seed: at the common target L* that every compared run reaches (contrast_runs), at
  a pre-declared target (declared_speedups), and by the paper's own definition, the share of steps saved to reach
  the baseline's final loss (paper_speedups).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

from attention_geometry.analysis.stats import (
    Interval,
    check_level,
    common_target,
    first_reaching_step,
    paired_interval,
    signed_speedup,
    speedup_at,
    steps_saved_share,
    t_interval,
)
from attention_geometry.errors import UserError
from attention_geometry.formats.columns import RUN_KEYS, SCORES

# Our pretrained models whose attention logits no fixed bilinear form x_i^T M x_j gives exactly, by model_type
# (the score rows' column): their rows carry this caveat in model_table, Figure 2 and the claims. Gemma 3
# RMS-normalizes every query and key head (q_norm, k_norm; docs/architectures/text.md), so its logits are
# x_i^T W_q^T G W_k x_j / (rms(q_i) rms(k_j)) with a per-token-pair scale M leaves out.
OUR_CAVEATS = {
    "gemma3_text": "q/k normalized per head",
    "qwen3": "q/k normalized per head",
    "qwen3_moe": "q/k normalized per head",
    "olmo2": "q/k normalized over all heads",
}


# --------------------------------------------------------------------------------------------- checks
def require_columns(df: pd.DataFrame, columns: Iterable[str], where: str) -> None:
    """Raise a UserError naming the missing columns of table `where`."""
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise UserError(f"{where}: missing column(s) {', '.join(missing)} (have: {', '.join(map(str, df.columns))})")


# ------------------------------------------------------------------------------------- score tables
def summed_rows(scores: pd.DataFrame) -> pd.DataFrame:
    """The rows of the layers' summed matrices (`head == "all"`); tables without a head column are returned
    as they are (the paper's tables hold only summed matrices)."""
    if "head" not in scores.columns:
        return scores.copy()
    return scores[scores["head"].astype(str) == "all"].copy()


def distinct_paper_models(paper: pd.DataFrame) -> pd.DataFrame:
    """The paper's pretrained-score rows without the duplicates marked by `same_as` (203 distinct score
    sets in the published tables)."""
    require_columns(paper, ["family_file", "model", "same_as"], "paper pretrained scores")
    same = paper["same_as"]
    keep = same.isna() | (same.astype(str).str.strip() == "")
    return paper[keep].copy()


def flag_caveats(table: pd.DataFrame, caveats: pd.DataFrame) -> pd.DataFrame:
    """Add a `caveat` column (empty string where none) from the (family_file, model) pairs of `caveats`."""
    require_columns(table, ["family_file", "model"], "paper table")
    require_columns(caveats, ["family_file", "model", "caveat"], "paper caveats")
    lookup = {(f, m): c for f, m, c in caveats[["family_file", "model", "caveat"]].itertuples(index=False)}
    out = table.copy()
    out["caveat"] = [lookup.get((f, m), "") for f, m in zip(out["family_file"], out["model"])]
    return out


def summarize_over_layers(scores: pd.DataFrame, by: Sequence[str], values: Sequence[str] = SCORES) -> pd.DataFrame:
    """Per group `by`: median, first and third quartile (linear interpolation, numpy's default) and number
    of layers of each score column. Columns: *by, n_layers, {v}_median, {v}_q1, {v}_q3 for v in values."""
    by = list(by)
    require_columns(scores, by + list(values), "score table")
    if scores.empty:
        raise UserError("score table: no rows to summarize")
    rows = []
    for key, g in scores.groupby(by, sort=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        row = dict(zip(by, key))
        row["n_layers"] = int(len(g))
        for v in values:
            x = g[v].to_numpy(dtype=float)
            row[f"{v}_median"] = float(np.median(x))
            row[f"{v}_q1"] = float(np.percentile(x, 25))
            row[f"{v}_q3"] = float(np.percentile(x, 75))
        rows.append(row)
    return pd.DataFrame(rows)


def final_snapshot_rows(training: pd.DataFrame, runs: Sequence[str], init: str) -> pd.DataFrame:
    """The training-score rows of those `runs` with `init` at each run's last scored step (its final snapshot),
    `model` set to the run name: a trained run drawn beside pretrained models (Figure S1's ViTs)."""
    t = select_runs(training, runs, "training scores")
    require_columns(t, ["init", "step", "model"], "training scores")
    t = t[t["init"] == init]
    last = t.groupby("run")["step"].transform("max")
    return t[t["step"] == last].assign(model=lambda d: d["run"])


def model_table(
    ours: pd.DataFrame | None,
    paper: pd.DataFrame | None,
    caveats: pd.DataFrame | None = None,
    trained: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Per model and component: median and IQR over layers of s and d, ours and the paper's side by side
    (column `source` = "ours" | "paper" | "trained"). Ours: summed rows of the score table, flagged by
    OUR_CAVEATS; the paper's: its distinct score sets, with the caveat flag; trained: rows of our own training
    runs (final_snapshot_rows), one "model" per run."""
    keys = ["source", "model", "modality", "architecture", "component", "n_params"]
    parts = []
    if trained is not None and len(trained):
        tr = summed_rows(trained)
        require_columns(
            tr, ["model", "modality", "architecture", "component", "n_params", "layer", *SCORES], "trained scores"
        )
        parts.append(summarize_over_layers(tr.assign(source="trained", caveat=""), keys + ["caveat"]))
    if ours is not None and len(ours):
        o = summed_rows(ours)
        require_columns(
            o, ["model", "modality", "architecture", "component", "n_params", "layer", *SCORES], "our pretrained scores"
        )
        cav = o["model_type"].map(OUR_CAVEATS).fillna("") if "model_type" in o.columns else ""
        o = o.assign(source="ours", caveat=cav)
        parts.append(summarize_over_layers(o, keys + ["caveat"]))
    if paper is not None and len(paper):
        p = distinct_paper_models(paper)
        p = flag_caveats(p, caveats) if caveats is not None else p.assign(caveat="")
        p = p.assign(source="paper")
        parts.append(summarize_over_layers(p, keys + ["caveat"]))
    if not parts:
        raise UserError("model table: neither our scores, our trained runs nor the paper's have rows")
    out = pd.concat(parts, ignore_index=True)
    return out.sort_values(
        ["source", "modality", "architecture", "component", "n_params", "model"], kind="stable", ignore_index=True
    )


# ------------------------------------------------------------------------- held-out loss contrasts
GROUP_KEYS = ["size", "dataset", "objective"]
# what contrast_runs measures of each (treatment, baseline) pair, after the pair's keys
CONTRAST_MEASURES = [
    "horizon",
    "final_eval_loss",
    "baseline_final_eval_loss",
    "loss_gain",
    "target",
    "baseline_s",
    "s_star",
    "speedup",
]
CONTRAST_COLUMNS = [*GROUP_KEYS, "init", "compared_to", "seed", "run", "baseline_run", *CONTRAST_MEASURES]


def eval_curves(loss: pd.DataFrame) -> pd.DataFrame:
    """Held-out loss rows only (eval_loss present), sorted by run and step."""
    require_columns(loss, ["run", *RUN_KEYS, "step", "eval_loss"], "training loss table")
    out = loss[pd.to_numeric(loss["eval_loss"], errors="coerce").notna()].copy()
    out["eval_loss"] = out["eval_loss"].astype(float)
    out["step"] = out["step"].astype(int)
    return out.sort_values(["run", "step"], kind="stable", ignore_index=True)


def _one_run(g: pd.DataFrame, what: str) -> pd.DataFrame:
    if g["run"].nunique() != 1:
        raise UserError(f"training loss table: several runs for {what}: {sorted(g['run'].unique())}")
    return g


def _paired_curves(ev: pd.DataFrame, treatment: str, baseline: str):
    """Per (size, dataset, objective) that has both inits: (key, horizon, [(seed, treatment curve, baseline
    curve)]) over the seeds with both runs, every curve cut at the horizon (the last step every compared run
    of the group evaluated)."""
    for key, g in ev.groupby(GROUP_KEYS, sort=True):
        t, b = g[g["init"] == treatment], g[g["init"] == baseline]
        seeds = sorted(set(t["seed"]) & set(b["seed"]))
        if not seeds:
            continue
        where = "/".join(map(str, key))
        pairs = [
            (
                s,
                _one_run(t[t["seed"] == s], f"{where} {treatment} seed {s}"),
                _one_run(b[b["seed"] == s], f"{where} {baseline} seed {s}"),
            )
            for s in seeds
        ]
        horizon = min(int(r["step"].max()) for _, tr, br in pairs for r in (tr, br))
        yield key, horizon, [(s, tr[tr["step"] <= horizon], br[br["step"] <= horizon]) for s, tr, br in pairs]


def contrast_runs(loss: pd.DataFrame, treatment: str, baseline: str = "standard") -> pd.DataFrame:
    """Per seed, the `treatment`-init run against the same-seed `baseline`-init run of each (size, dataset,
    objective) that has both (seeds without both runs are left out). Within a group every pair is compared
    at one horizon, the last step that every compared run evaluated (the loss there linearly interpolated
    if a run has no evaluation at it), and all curves are cut at it:
      loss_gain = baseline loss - treatment loss at the horizon (positive = the treatment is lower);
      target    = L*, the maximum over the compared runs of their minimum held-out loss (every run reaches it);
      baseline_s, s_star = the first step at which the baseline / treatment reaches L* (stats.first_reaching_step);
      speedup   = 1 - s_star / baseline_s, signed (negative = the treatment is slower); every seed has one.
    Columns: CONTRAST_COLUMNS (`init` = treatment, `compared_to` = baseline)."""
    ev = eval_curves(loss)
    rows = []
    for key, horizon, cut in _paired_curves(ev, treatment, baseline):
        target = common_target([c["eval_loss"] for _, tr, br in cut for c in (tr, br)])
        for s, tr, br in cut:
            at_t = float(np.interp(horizon, tr["step"], tr["eval_loss"]))
            at_b = float(np.interp(horizon, br["step"], br["eval_loss"]))
            big_s = first_reaching_step(br["step"], br["eval_loss"], target)
            s_star = first_reaching_step(tr["step"], tr["eval_loss"], target)
            pair = (treatment, baseline, s, tr, br)
            speedup = signed_speedup(br["step"], br["eval_loss"], tr["step"], tr["eval_loss"], target)
            row = _speedup_row(key, pair, horizon, (target, big_s, s_star, speedup))
            rows.append({**row, "final_eval_loss": at_t, "baseline_final_eval_loss": at_b, "loss_gain": at_b - at_t})
    return pd.DataFrame(rows, columns=CONTRAST_COLUMNS)


# The pre-declared target of the speed-up claims: {"loss": L} (a held-out loss value) or
# {"baseline_loss_at_step": STEP} (per seed, the same-seed baseline's held-out loss at STEP; "horizon": at the
# contrast's horizon, the last step every compared run evaluated).
DEFAULT_SPEEDUP_TARGET = {"baseline_loss_at_step": "horizon"}
SPEEDUP_COLUMNS = [*CONTRAST_COLUMNS[:9], "target", "baseline_s", "s_star", "speedup"]


def check_speedup_target(spec: dict | None) -> tuple[str, float | str]:
    """(rule, value) of a declared speed-up target (DEFAULT_SPEEDUP_TARGET when None); a UserError otherwise."""
    spec = DEFAULT_SPEEDUP_TARGET if spec is None else spec
    if not isinstance(spec, dict) or len(spec) != 1:
        raise UserError(
            f"speed-up target: one of {{loss: L}} or {{baseline_loss_at_step: STEP | horizon}}, got {spec!r}"
        )
    ((rule, value),) = spec.items()
    if rule == "loss" and isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return rule, float(value)
    if rule == "baseline_loss_at_step" and (
        value == "horizon" or (isinstance(value, int) and not isinstance(value, bool) and value > 0)
    ):
        return rule, value
    raise UserError(
        f"speed-up target: bad {rule!r} value {value!r} (loss: a number; baseline_loss_at_step: a step > 0 or horizon)"
    )


def speedup_target_text(spec: dict | None) -> str:
    """The declared target in words (the claims' test column and the report)."""
    rule, value = check_speedup_target(spec)
    if rule == "loss":
        return f"the declared held-out loss {value:g}"
    where = "the contrast's horizon" if value == "horizon" else f"step {value}"
    return f"the same-seed baseline's held-out loss at {where}"


def declared_speedups(
    loss: pd.DataFrame, treatment: str, baseline: str = "standard", target: dict | None = None
) -> pd.DataFrame:
    """Per seed (pairs and horizon as contrast_runs, curves cut at the horizon): the signed speed-up 1 - s*/S at
    the pre-declared `target` (check_speedup_target), S and s* the baseline's and the treatment's first steps at
    it; NaN where either never reaches it within the horizon (or S = 0). Columns: SPEEDUP_COLUMNS."""
    rule, value = check_speedup_target(target)
    rows = []
    for key, horizon, cut in _paired_curves(eval_curves(loss), treatment, baseline):
        if rule == "baseline_loss_at_step" and value != "horizon" and int(value) > horizon:
            raise UserError(
                f"speed-up target: step {value} lies beyond the horizon {horizon} of {'/'.join(map(str, key))}"
            )
        at = horizon if value == "horizon" else value
        for s, tr, br in cut:
            t = value if rule == "loss" else float(np.interp(int(at), br["step"], br["eval_loss"]))
            big_s, s_star, sp = speedup_at(br["step"], br["eval_loss"], tr["step"], tr["eval_loss"], t)
            rows.append(_speedup_row(key, (treatment, baseline, s, tr, br), horizon, (t, big_s, s_star, sp)))
    return pd.DataFrame(rows, columns=SPEEDUP_COLUMNS)


def paper_speedups(loss: pd.DataFrame, treatment: str, baseline: str = "standard") -> pd.DataFrame:
    """Per seed (pairs and horizon as contrast_runs): the paper's own speed-up (stats.steps_saved_share), the
    share of steps saved to reach the baseline's loss at its last step within the horizon: target = that loss,
    baseline_s = that step, s_star = the treatment's first step at it, speedup = (baseline_s - s_star) /
    baseline_s; NaN where the treatment never reaches it (the paper's "none"). Columns: SPEEDUP_COLUMNS."""
    rows = []
    for key, horizon, cut in _paired_curves(eval_curves(loss), treatment, baseline):
        for s, tr, br in cut:
            t, s_star, sp = steps_saved_share(br["step"], br["eval_loss"], tr["step"], tr["eval_loss"])
            big_s = float(br["step"].iloc[-1])
            rows.append(_speedup_row(key, (treatment, baseline, s, tr, br), horizon, (t, big_s, s_star, sp)))
    return pd.DataFrame(rows, columns=SPEEDUP_COLUMNS)


def _speedup_row(key: tuple, pair: tuple, horizon: int, values: tuple) -> dict:
    """One SPEEDUP_COLUMNS row: pair = (treatment, baseline, seed, treatment curve, baseline curve), values =
    (target, baseline_s, s_star, speedup)."""
    treatment, baseline, seed, tr, br = pair
    return dict(
        zip(GROUP_KEYS, key),
        init=treatment,
        compared_to=baseline,
        seed=seed,
        run=tr["run"].iloc[0],
        baseline_run=br["run"].iloc[0],
        horizon=horizon,
        **dict(zip(["target", "baseline_s", "s_star", "speedup"], values)),
    )


INIT_TABLE_COLUMNS = [
    "size",
    "dataset",
    "objective",
    "init",
    "compared_to",
    "n_seeds",
    "final_step",
    "final_loss_mean",
    "final_loss_low",
    "final_loss_high",
    "n_pairs",
    "horizon",
    "loss_gain_mean",
    "loss_gain_low",
    "loss_gain_high",
    "target",
    "speedup_mean",
    "speedup_low",
    "speedup_high",
    "speedup_text",
    "speedup_paper_mean",
    "speedup_paper_low",
    "speedup_paper_high",
    "speedup_paper_text",
]


# Each init whose own control is compared with it beside the baseline: symmetric-fresh (W_q := W_k on fresh
# nn.Linear weights) against fresh (the same fresh weights, untied), the contrast that isolates the tie.
INIT_CONTROLS = {"symmetric-fresh": "fresh"}

# The authors' rebuttal on vision Transformers, which it states without numbers: drawn and tabled beside our ViT
# runs (the vision training figure, Table 1's ViT rows).
REBUTTAL_VIT = (
    "The authors' rebuttal: ViTs trained on CIFAR-10 and ImageNet-1k from a symmetric initialization showed "
    "no significant speed-up (no published numbers)."
)


def init_table(
    loss: pd.DataFrame, baseline_init: str = "standard", level: float = 0.95, controls: dict[str, str] | None = None
) -> pd.DataFrame:
    """Table 1, one row per (size, dataset, objective, init, compared_to), over seeds (every seed counts):
    n_seeds and the final held-out loss (mean and t-interval); against `compared_to` (the same-seed
    `baseline_init` run, and for each init in `controls` also its control, default symmetric-fresh vs
    fresh): n_pairs, the paired loss gain at the horizon (mean and paired t-interval), the common target
    L* and the signed speed-up at it (mean and t-interval; contrast_runs), and the paper's own speed-up, the
    share of steps saved to reach the baseline's loss at the horizon (paper_speedups; a seed whose treatment
    never reaches it is left out of the mean and counted in the text), the definition of the paper's Table 1.
    The baseline's own row has compared_to "" and no contrast."""
    controls = dict(INIT_CONTROLS) if controls is None else dict(controls)
    ev = eval_curves(loss)
    if ev.empty:
        raise UserError("training loss table: no held-out loss (eval_loss) rows")
    rows = []
    for key, g in ev.groupby(GROUP_KEYS + ["init"], sort=True):
        finals = g.groupby("run")["step"].max()
        if finals.nunique() != 1:
            raise UserError(
                f"training loss table: the {'/'.join(map(str, key))} runs end at different steps "
                f"({finals.to_dict()}); select the runs of one ablation"
            )
        last = g[g["step"] == finals.iloc[0]]
        fl = t_interval(last["eval_loss"], level)
        base = dict(
            zip(GROUP_KEYS + ["init"], key),
            n_seeds=int(g["run"].nunique()),
            final_step=int(finals.iloc[0]),
            final_loss_mean=fl.estimate,
            final_loss_low=fl.low,
            final_loss_high=fl.high,
        )
        init = key[-1]
        refs = [] if init == baseline_init else [baseline_init]
        group = ev[(ev[GROUP_KEYS] == pd.Series(dict(zip(GROUP_KEYS, key[:-1])))).all(axis=1)]
        in_group = set(group["init"])
        refs += [controls[init]] if init in controls and controls[init] in in_group else []
        if not refs:
            rows.append(
                {
                    **base,
                    "compared_to": "",
                    "n_pairs": 0,
                    "speedup_text": "baseline" if init == baseline_init else f"no same-seed {baseline_init} run",
                }
            )
        if init == baseline_init:  # the baseline's loss also where shorter runs are compared with it
            hs = {int(h) for o in in_group - {baseline_init} for h in contrast_runs(group, o, baseline_init)["horizon"]}
            for h in sorted(hs - {base["final_step"]}):
                at = t_interval([float(np.interp(h, r["step"], r["eval_loss"])) for _, r in g.groupby("run")], level)
                rows.append(
                    {
                        **base,
                        "final_step": h,
                        "final_loss_mean": at.estimate,
                        "final_loss_low": at.low,
                        "final_loss_high": at.high,
                        "compared_to": "",
                        "n_pairs": 0,
                        "speedup_text": f"baseline at step {h}",
                    }
                )
        for ref in refs:
            c = contrast_runs(group, init, ref)
            gain = paired_interval(c["baseline_final_eval_loss"], c["final_eval_loss"], level)
            sp = t_interval(c["speedup"], level)
            pp = paper_speedups(group, init, ref)["speedup"]
            ppi = t_interval(pp, level)
            never = int(pp.isna().sum())
            rows.append(
                {
                    **base,
                    "compared_to": ref,
                    "n_pairs": int(len(c)),
                    "horizon": c["horizon"].iloc[0] if len(c) else math.nan,
                    "loss_gain_mean": gain.estimate,
                    "loss_gain_low": gain.low,
                    "loss_gain_high": gain.high,
                    "target": c["target"].iloc[0] if len(c) else math.nan,
                    "speedup_mean": sp.estimate,
                    "speedup_low": sp.low,
                    "speedup_high": sp.high,
                    "speedup_text": speedup_text(sp),
                    "speedup_paper_mean": ppi.estimate,
                    "speedup_paper_low": ppi.low,
                    "speedup_paper_high": ppi.high,
                    "speedup_paper_text": speedup_text(ppi)
                    + (f"; {never} of {len(pp)} never reach the baseline's loss" if never else ""),
                }
            )
    out = pd.DataFrame(rows, columns=INIT_TABLE_COLUMNS)
    order = out["init"].ne(baseline_init)  # the baseline first within each group, then inits by name
    return (
        out.assign(_o=order)
        .sort_values([*GROUP_KEYS, "_o", "init"], kind="stable")
        .drop(columns="_o")
        .reset_index(drop=True)
    )


def speedup_text(sp: Interval) -> str:
    """Display string of a signed speed-up summary, in percent ("n/a" without seeds)."""
    if sp.n == 0 or not np.isfinite(sp.estimate):
        return "n/a"
    ci = f" [{100 * sp.low:+.1f}, {100 * sp.high:+.1f}]" if np.isfinite(sp.low) else ""
    return f"{100 * sp.estimate:+.1f} %{ci} (n={sp.n})"


# ---------------------------------------------------------------------------------- seed-paired curves
def layer_medians(scores: pd.DataFrame) -> pd.DataFrame:
    """Per training run and scored step: the median over layers (the layers' summed matrices) of symmetry and
    directionality. Columns: run, size, dataset, objective, init, seed, step, symmetry, directionality."""
    s = summed_rows(scores)
    require_columns(s, ["run", *RUN_KEYS, "step", "layer", *SCORES], "training score table")
    return s.groupby(["run", *RUN_KEYS, "step"], sort=True)[list(SCORES)].median().reset_index()


def paired_difference(
    table: pd.DataFrame, by: str, a: str, b: str, values: Sequence[str], on: Sequence[str] = ("seed", "step")
) -> pd.DataFrame:
    """Per key `on` (e.g. seed and step), the rows with table[by] == a minus the rows with table[by] == b, for
    each column of `values`, over the keys that both sides have: a seed with only one of the two runs (or a
    step only one of them has) is left out, so every difference is within one seed. Each side must have one
    row per key. Columns: *on, *values (a - b), sorted by `on`."""
    on, values = list(on), list(values)
    require_columns(table, [by, *on, *values], "paired difference table")
    sides = []
    for name in (a, b):
        side = table[table[by].astype(str) == str(name)][on + values]
        dup = side.duplicated(on, keep=False)
        if dup.any():
            first = side.loc[dup, on].iloc[0].to_dict()
            raise UserError(f"paired difference: several rows of {by} = {name!r} for {first}")
        sides.append(side)
    both = sides[0].merge(sides[1], on=on, how="inner", suffixes=("_a", "_b"))
    out = both[on].copy()
    for v in values:
        out[v] = both[f"{v}_a"].astype(float) - both[f"{v}_b"].astype(float)
    return out.sort_values(on, kind="stable", ignore_index=True)


def mean_over_seeds(
    table: pd.DataFrame, by: Sequence[str], values: Sequence[str], level: float, seed: str = "seed"
) -> pd.DataFrame:
    """Per group `by` (one row per seed in each): n_seeds and, for each column v of `values`, the mean over
    seeds with its Student-t interval (stats.t_interval; NaN bounds below 2 seeds) as {v}_mean, {v}_low,
    {v}_high. Columns: *by, n_seeds, then those three per value."""
    by, values = list(by), list(values)
    require_columns(table, [*by, seed, *values], "per-seed table")
    check_level(level)
    dup = table.duplicated([*by, seed], keep=False)
    if dup.any():
        first = table.loc[dup, [*by, seed]].iloc[0].to_dict()
        raise UserError(f"mean over seeds: several rows for {first} (one row per seed expected)")
    rows = []
    groups = table.groupby(by, sort=True) if by else [((), table)]
    for key, g in groups:
        key = key if isinstance(key, tuple) else (key,)
        row = {**dict(zip(by, key)), "n_seeds": int(g[seed].nunique())}
        for v in values:
            iv = t_interval(g[v], level)
            row.update({f"{v}_mean": iv.estimate, f"{v}_low": iv.low, f"{v}_high": iv.high})
        rows.append(row)
    columns = [*by, "n_seeds", *(f"{v}_{s}" for v in values for s in ("mean", "low", "high"))]
    return pd.DataFrame(rows, columns=columns)


# The quantities of init_curves: the held-out loss and accuracy of the loss table's evaluation rows, and the
# symmetry of the score table (per run and step the median over layers).
CURVE_QUANTITIES = ("eval_loss", "eval_accuracy", "symmetry")
CURVE_COLUMNS = [*GROUP_KEYS, "init", "quantity", "step", "n_seeds", "mean", "low", "high"]


def init_curves(
    loss: pd.DataFrame, scores: pd.DataFrame, level: float, quantities: Sequence[str] = CURVE_QUANTITIES
) -> pd.DataFrame:
    """Per (size, dataset, objective, init), quantity and step, over seeds (seeds are the unit, one run per
    seed): n_seeds and the mean with its Student-t interval at `level` (mean_over_seeds; NaN bounds below two
    seeds). eval_loss and eval_accuracy come from the loss table's rows where that column has a value (a run's
    evaluation steps), symmetry and directionality from the score table (layer_medians: per run and step the
    median over layers). A seed counts at a step only where its run has a value there. Long format, columns
    CURVE_COLUMNS, sorted by group, init, quantity (in the order given) and step."""
    unknown = sorted(set(quantities) - {"eval_loss", "eval_accuracy", *SCORES})
    if unknown:
        raise UserError(f"init curves: unknown quantities {unknown} (eval_loss, eval_accuracy, {', '.join(SCORES)})")
    keys = [*GROUP_KEYS, "init"]
    parts = []
    for q in quantities:
        if q in SCORES:
            per_seed = layer_medians(scores)
        else:
            require_columns(loss, ["run", *RUN_KEYS, "step", q], "training loss table")
            per_seed = loss.assign(**{q: pd.to_numeric(loss[q], errors="coerce")})
        per_seed = per_seed[per_seed[q].notna()]
        if per_seed.empty:
            continue
        m = mean_over_seeds(per_seed, [*keys, "step"], [q], level)
        m = m.rename(columns={f"{q}_mean": "mean", f"{q}_low": "low", f"{q}_high": "high"})
        parts.append(m.assign(quantity=q, step=m["step"].astype(int)))
    if not parts:
        return pd.DataFrame(columns=CURVE_COLUMNS)
    out = pd.concat(parts, ignore_index=True)[CURVE_COLUMNS]
    order = out["quantity"].map({q: i for i, q in enumerate(quantities)})
    return (
        out.assign(_q=order).sort_values([*keys, "_q", "step"], kind="stable").drop(columns="_q").reset_index(drop=True)
    )


def markdown_table(df: pd.DataFrame, floatfmt: str = ".3f") -> str:
    """A GitHub Markdown table (tabulate), NaN shown as empty."""
    shown = df.astype(object).where(df.notna(), None)
    return shown.to_markdown(index=False, floatfmt=floatfmt, missingval="")


def latex_table(df: pd.DataFrame, float_digits: int = 3) -> str:
    """A booktabs LaTeX tabular (pandas Styler), NaN shown as empty, special characters escaped."""
    sty = df.style.hide(axis="index").format(precision=float_digits, na_rep="", escape="latex")
    sty = sty.format_index(escape="latex", axis=1)
    return sty.to_latex(hrules=True)


# ------------------------------------------------------------------------------------ notebook I/O
def require_keys(mapping: dict, keys: Iterable[str], where: str) -> None:
    """Raise a UserError naming the keys missing from a notebook's `params` / `inputs` / `outputs`."""
    missing = [k for k in keys if k not in mapping or mapping[k] in (None, "")]
    if missing:
        raise UserError(f"{where}: missing {', '.join(missing)} (have: {', '.join(sorted(map(str, mapping)))})")


def read_table(path: str, what: str, columns: Iterable[str] = ()) -> pd.DataFrame:
    """A CSV table, with one clear error when it is missing, empty or lacks `columns`."""
    import os

    if not path or not os.path.isfile(path):
        raise UserError(f"{what}: no such file {path!r}")
    try:
        df = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        raise UserError(f"{what}: {path} is empty") from None
    if df.empty:
        raise UserError(f"{what}: {path} has no rows")
    require_columns(df, columns, f"{what} ({path})")
    return df


def write_tables(
    df: pd.DataFrame,
    csv: str | None = None,
    tex: str | None = None,
    md: str | None = None,
    shown: pd.DataFrame | None = None,
    title: str = "",
) -> None:
    """Write `df` as CSV (full precision) and `shown` (default `df`) as LaTeX and Markdown."""
    import os

    shown = df if shown is None else shown
    for path in (csv, tex, md):
        if path:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    if csv:
        df.to_csv(csv, index=False, lineterminator="\n")
    if tex:
        with open(tex, "w") as fh:
            fh.write(latex_table(shown))
    if md:
        with open(md, "w") as fh:
            fh.write((f"{title}\n\n" if title else "") + markdown_table(shown) + "\n")


def select_runs(table: pd.DataFrame, runs: Sequence[str], what: str) -> pd.DataFrame:
    """The rows of `table` whose run is one of `runs`; a UserError naming the runs that have no rows."""
    runs = as_list(runs)
    if not runs:
        raise UserError(f"{what}: no runs selected (the run list is empty)")
    require_columns(table, ["run"], what)
    missing = sorted(set(runs) - set(table["run"].astype(str)))
    if missing:
        raise UserError(f"{what}: no rows for run(s) {', '.join(missing)}")
    return table[table["run"].isin(runs)].copy()


def as_list(value) -> list:
    """A run name or a list of run names as a list."""
    return [] if value is None else [value] if isinstance(value, str) else list(value)


def fmt_median_iqr(median: float, q1: float, q3: float, digits: int = 3) -> str:
    return f"{median:.{digits}f} [{q1:.{digits}f}, {q3:.{digits}f}]"
