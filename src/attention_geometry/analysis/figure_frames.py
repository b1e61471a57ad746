"""The data frame behind each figure the notebooks draw: every grouping, join and seed pairing a figure needs,
so that a notebook only reads its tables, calls one of these and draws (tests/test_catalog.py checks that no
notebook groups, joins, pivots or pairs data itself, and that none defines a long function).

Generic helpers for drawing:
- `split`: a frame's groups in sorted key order (one line or marker set per group);
- `group_keys`: the sorted keys of those groups (one row of panels per key);
- `edge_step_rows`: the rows at each group's first and/or last step (the tables a notebook shows);
- `counts`: the number of rows per group;
- `arm_tokens_per_step`, `PAPER_TOKENS_PER_STEP`: the tokens one update trains on, ours per arm and the paper's,
  for the tokens axes on which our curves meet the paper's (never at equal steps).

Per figure:
- fig_symmetric_init_loss: `init_contrasts` (each init minus the same-seed control run, per step),
  `contrast_panels`, `contrast_seed_table`, `rebuttal_differences`;
- fig3_emergence: `arm_layer_medians`, `arm_contrast` (one arm minus another within a seed), `null_band`;
- figS4_emergence_layers: `layer_curves`;
- fig_theory_updates: `update_spacing`, `update_summary`;
- table1_symmetric_init: `paper_table1_rows` (the paper's Table 1 beside the rebuttal's checkpoints).

Every function takes tables (the columns of docs/contracts.md) and returns new ones; nothing here reads files
or draws. Importing this module imports no torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np
import pandas as pd

from attention_geometry.analysis.stats import t_interval
from attention_geometry.analysis.summaries import (
    GROUP_KEYS,
    INIT_CONTROLS,
    mean_over_seeds,
    paired_difference,
    require_columns,
)
from attention_geometry.errors import UserError
from attention_geometry.formats.columns import SCORES

# the tokens one update of the authors' training script trains on: 32 sequences per device x 8 accumulation steps
# x 512 positions (docs/paper-code.md; padding included: a Wikipedia article, split into characters, fills its 512)
PAPER_TOKENS_PER_STEP = 32 * 8 * 512


def arm_tokens_per_step(tokens_per_step: Mapping[str, int], runs: Mapping[str, Sequence[str]]) -> dict[str, int]:
    """{arm: the tokens one update of its runs trains on} from {run: tokens} (the workflow's `tokens_per_step`
    param: batch_size x seq_len); a UserError naming the run where one lacks its count, or naming the arm where its
    runs' counts differ (one tokens axis per arm)."""
    out = {}
    for arm, names in runs.items():
        missing = [r for r in names if r not in tokens_per_step]
        if missing:
            raise UserError(f"tokens_per_step: no count for run(s) {', '.join(missing)} (arm {arm})")
        counts = sorted({int(tokens_per_step[r]) for r in names})
        if len(counts) > 1:
            raise UserError(f"tokens_per_step: the {arm} runs train on different tokens per update {counts}")
        if counts:
            if counts[0] <= 0:
                raise UserError(f"tokens_per_step: {arm}: {counts[0]} tokens per update (must be > 0)")
            out[arm] = counts[0]
    return out


__all__ = [
    "PAPER_TOKENS_PER_STEP",
    "arm_tokens_per_step",
    "split",
    "group_keys",
    "edge_step_rows",
    "counts",
    "init_order",
    "init_contrasts",
    "contrast_panels",
    "contrast_seed_table",
    "rebuttal_differences",
    "arm_layer_medians",
    "ArmContrast",
    "arm_contrast",
    "null_band",
    "layer_curves",
    "update_spacing",
    "update_summary",
    "paper_table1_rows",
]


# ------------------------------------------------------------------------------------------- generic
def split(frame: pd.DataFrame, by: str | Sequence[str]) -> list[tuple[object, pd.DataFrame]]:
    """The groups of `frame` by `by` in sorted key order, each with its rows in their order in `frame`: a
    scalar key for one column given as a string, a tuple for a list of columns. Rows with a missing key are
    left out (as pandas' groupby does)."""
    columns = [by] if isinstance(by, str) else list(by)
    require_columns(frame, columns, "figure table")
    return list(frame.groupby(by if isinstance(by, str) else columns, sort=True))


def group_keys(frame: pd.DataFrame, by: Sequence[str]) -> list[tuple]:
    """The distinct key tuples of the columns `by` that occur in `frame`, sorted (missing keys left out)."""
    by = list(by)
    require_columns(frame, by, "figure table")
    keys = frame[by].dropna().drop_duplicates()
    return sorted(tuple(k) for k in keys.itertuples(index=False, name=None))


def edge_step_rows(
    frame: pd.DataFrame, by: Sequence[str], first: bool = True, last: bool = True, step: str = "step"
) -> pd.DataFrame:
    """The rows of `frame` at each group's (by `by`) first step and/or last step, in their order in `frame`."""
    by = list(by)
    require_columns(frame, [*by, step], "figure table")
    if frame.empty:
        return frame.copy()
    steps = frame.groupby(by)[step]
    keep = pd.Series(False, index=frame.index)
    if first:
        keep |= frame[step] == steps.transform("min")
    if last:
        keep |= frame[step] == steps.transform("max")
    return frame[keep]


def counts(frame: pd.DataFrame, by: Sequence[str]) -> pd.Series:
    """The number of rows per group (by `by`), indexed by the group's key, sorted."""
    by = list(by)
    require_columns(frame, by, "figure table")
    return frame.groupby(by, sort=True).size()


def init_order(inits, first: str = "symmetric-fresh") -> list[str]:
    """The inits sorted with `first` (the paper's symmetric init, our symmetric-fresh) ahead of the others."""
    return sorted(inits, key=lambda i: (i != first, i))


# ----------------------------------------------------------------------------- fig_symmetric_init_loss
CONTRAST_FRAME_COLUMNS = ["seed", "step", "difference", *GROUP_KEYS, "treatment", "control"]


def init_contrasts(
    loss: pd.DataFrame, baseline_init: str = "standard", controls: Mapping[str, str] = INIT_CONTROLS
) -> tuple[pd.DataFrame, list[str]]:
    """Per (size, dataset, objective) and seed, the held-out loss of each init minus that of the same seed's
    control run at the steps both evaluated: every other init against `baseline_init` (symmetric-fresh first,
    then by name), then each pair of `controls` (symmetric-fresh minus fresh) where the group has both inits.
    `loss` holds the evaluation rows (summaries.eval_curves). Returns (the differences, columns
    CONTRAST_FRAME_COLUMNS; the seeds that have only one run of a contrast, one line per contrast, not
    drawn). A UserError when no contrast has a seed with both runs."""
    require_columns(loss, ["run", *GROUP_KEYS, "init", "seed", "step", "eval_loss"], "training loss")
    inits = init_order(set(loss["init"]) - {baseline_init})
    parts, unpaired = [], []
    for key, g in loss.groupby(GROUP_KEYS, sort=True):
        present = set(g["init"])
        contrasts = [(i, baseline_init) for i in inits if i in present and baseline_init in present]
        contrasts += [(t, c) for t, c in controls.items() if {t, c} <= present]
        for t, c in contrasts:
            d = paired_difference(g, "init", t, c, ["eval_loss"], on=["seed", "step"])
            left = sorted(set(g.loc[g["init"].isin([t, c]), "seed"]) - set(d["seed"]))
            if left:
                unpaired.append(f"{'/'.join(map(str, key))} {t} - {c}: seeds {left}")
            if len(d):
                d = d.rename(columns={"eval_loss": "difference"})
                parts.append(d.assign(**dict(zip(GROUP_KEYS, key)), treatment=t, control=c))
    if not parts:
        raise UserError(f"training loss: no ablation run has a same-seed {baseline_init!r} run to be compared with")
    return pd.concat(parts, ignore_index=True), unpaired


def contrast_panels(diff: pd.DataFrame, baseline_init: str = "standard") -> list[tuple]:
    """The panels of init_contrasts' differences, one per (size, dataset, objective, control): first every group
    against `baseline_init`, then against the inits' own controls; within each, by size and dataset, the
    encoder before the other objectives."""
    keys = group_keys(diff, [*GROUP_KEYS, "control"])
    return sorted(keys, key=lambda k: (k[3] != baseline_init, k[0], k[1], k[2] != "encoder", k[2]))


def contrast_seed_table(diff: pd.DataFrame) -> pd.DataFrame:
    """init_contrasts' differences at each contrast's last row per seed: one row per (group, treatment,
    control), one column per seed (the table the notebook shows)."""
    keys = [*GROUP_KEYS, "treatment", "control", "seed"]
    require_columns(diff, [*keys, "difference"], "loss differences")
    return diff.groupby(keys)["difference"].last().unstack("seed")


def rebuttal_differences(rebuttal: pd.DataFrame) -> pd.DataFrame:
    """Per (model, dataset, step) of the rebuttal's checkpoints: each init's held-out loss (one column per
    init), `difference` = symmetric - standard, and the symmetric row's `speedup_percent`. Columns: model,
    dataset, step, the inits (sorted), difference, speedup_percent."""
    keys = ["model", "dataset", "step"]
    require_columns(rebuttal, [*keys, "init", "eval_loss", "speedup_percent"], "the rebuttal's checkpoints")
    reb = rebuttal.pivot_table(index=keys, columns="init", values="eval_loss").reset_index()
    reb["difference"] = reb["symmetric"] - reb["standard"]
    sp = rebuttal[rebuttal["init"] == "symmetric"][[*keys, "speedup_percent"]]
    return reb.merge(sp, on=keys, how="left")


# -------------------------------------------------------------------------------------- fig3_emergence
def arm_layer_medians(arms: Mapping[str, pd.DataFrame], values: Sequence[str] = SCORES) -> pd.DataFrame:
    """Per arm (e.g. encoder, decoder: its runs' score rows of the summed matrices), run, seed and step: the
    median over layers of each column of `values`. Columns: run, seed, step, *values, component (the arm);
    arms in the order given, rows sorted by run, seed and step."""
    parts = []
    for arm, rows in arms.items():
        require_columns(rows, ["run", "seed", "step", *values], f"training scores ({arm})")
        med = rows.groupby(["run", "seed", "step"], sort=True)[list(values)].median().reset_index()
        parts.append(med.assign(component=arm))
    return pd.concat(parts, ignore_index=True)


class ArmContrast(NamedTuple):
    """One arm minus another within a seed: the mean over seeds per step (mean_over_seeds' columns; None when
    no seed has both), the seeds that have both arms and those with only one (sorted ints)."""

    summary: pd.DataFrame | None
    seeds: list[int]
    unpaired: list[int]


def arm_contrast(per_seed: pd.DataFrame, a: str, b: str, level: float, values: Sequence[str] = SCORES) -> ArmContrast:
    """Arm `a` minus arm `b` of arm_layer_medians' frame within each seed, at the steps both have: the mean over
    the seeds that have both, with its Student-t interval at `level`, per step."""
    diff = paired_difference(per_seed, "component", a, b, values, on=["seed", "step"])
    seeds = sorted(int(s) for s in diff["seed"].unique())
    both = per_seed[per_seed["component"].isin([a, b])]
    unpaired = sorted(int(s) for s in set(both["seed"]) - set(seeds))
    summary = mean_over_seeds(diff, ["step"], values, level) if len(diff) else None
    return ArmContrast(summary, seeds, unpaired)


def null_band(
    null: pd.DataFrame, runs: pd.DataFrame, level: float, where: str, values: Sequence[str] = SCORES
) -> tuple[dict[str, np.ndarray], int]:
    """The random-init null of the runs' own shape and init (the (size, init) pairs of `runs`): per sample the
    median over layers, and of those the central `level` range per column of `values`. Returns ({value:
    [low, high]}, the number of samples). A UserError naming `where` when the null has no such rows."""
    require_columns(null, ["size", "init", "sample", *values], where)
    shape = runs[["size", "init"]].drop_duplicates()
    rows = null.merge(shape, on=["size", "init"])
    if rows.empty:
        raise UserError(
            f"the random-init null scores {where}: no rows for size/init {shape.to_dict('records')} (the "
            f"emergence runs' shape and init; have {null[['size', 'init']].drop_duplicates().to_dict('records')})"
        )
    per_sample = rows.groupby(["size", "init", "sample"], sort=True)[list(values)].median()
    q = 100 * (1 - level) / 2
    band = {v: np.percentile(per_sample[v].to_numpy(dtype=float), [q, 100 - q]) for v in values}
    return band, int(len(per_sample))


# ------------------------------------------------------------------------------ figS4_emergence_layers
def layer_curves(rows: pd.DataFrame, value: str, stat: str = "mean") -> pd.DataFrame:
    """Per layer and step, the `stat` (mean or median) of `value` over the rows there (our seeds: the mean;
    one published model's layers: the median of its one value). Columns: layer, step, value; sorted."""
    if stat not in ("mean", "median"):
        raise UserError(f"layer curves: stat must be mean or median, not {stat!r}")
    require_columns(rows, ["layer", "step", value], "score table")
    return getattr(rows.groupby(["layer", "step"], sort=True)[value], stat)().reset_index()


# ---------------------------------------------------------------------------------- fig_theory_updates
def update_spacing(updates: pd.DataFrame, where: str) -> dict[str, int]:
    """Per run, the spacing of its gradient rows' scored steps (0 with one step). A UserError naming `where`
    when a run's steps are not equally spaced or the runs' spacings differ."""
    require_columns(updates, ["run", "kind", "step"], where)
    spacing = {}
    for run, g in updates[updates["kind"] == "gradient"].groupby("run"):
        steps = np.sort(g["step"].unique())
        gaps = set(np.diff(steps).tolist())
        if len(gaps) > 1:
            raise UserError(
                f"{where}: run {run} is scored at steps {steps.tolist()}, not equally spaced; "
                "set config updates.steps to equal spacing (e.g. [0, 750, 1500, 2250, 3000])"
            )
        spacing[run] = gaps.pop() if gaps else 0
    if len(set(spacing.values())) > 1:
        raise UserError(f"{where}: the runs are scored at different spacings {sorted(set(spacing.values()))}")
    return spacing


def update_summary(updates: pd.DataFrame, level: float, values: Sequence[str] = SCORES) -> pd.DataFrame:
    """Per seed (run) the median over layers of each column of `values`; over seeds, per objective, init, kind
    and step, n_seeds and the mean with its Student-t interval at `level` ({v}_mean, {v}_low, {v}_high).
    Sorted by objective, init, kind and step."""
    keys = ["objective", "init", "kind", "step"]
    require_columns(updates, [*keys, "seed", "run", *values], "update scores")
    per_seed = updates.groupby(["objective", "init", "seed", "run", "kind", "step"], sort=True)[list(values)]
    per_seed = per_seed.median().reset_index()
    rows = []
    for (objective, init, kind, step), g in per_seed.groupby(keys, sort=True):
        row = {
            "objective": objective,
            "init": init,
            "kind": kind,
            "step": int(step),
            "n_seeds": int(g["seed"].nunique()),
        }
        for v in values:
            iv = t_interval(g[v], level)
            row.update({f"{v}_mean": iv.estimate, f"{v}_low": iv.low, f"{v}_high": iv.high})
        rows.append(row)
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------- table1_symmetric_init
def paper_table1_rows(paper_t1: pd.DataFrame, rebuttal: pd.DataFrame | None = None) -> pd.DataFrame:
    """The paper's Table 1 as rows of our Table 1: its speed-up (the share of steps saved to reach the standard
    run's final training loss) under speedup_paper_*, none where it reports none. Where `rebuttal` has exactly
    one standard and one symmetric checkpoint of a row's (model, dataset): the symmetric run's held-out loss
    (final_loss_mean), the gain standard - symmetric (loss_gain_mean) and that step (horizon)."""
    require_columns(paper_t1, ["model", "dataset", "speedup_percent", "reached", "note"], "the paper's Table 1")
    reached = paper_t1["reached"].astype(str).str.lower().eq("true")
    paper = pd.DataFrame(
        {
            "source": "paper",
            "size": paper_t1["model"],
            "dataset": paper_t1["dataset"],
            "objective": "encoder",
            "init": "symmetric (paper) = symmetric-fresh",
            "compared_to": "standard",
            "speedup_paper_mean": np.where(reached, paper_t1["speedup_percent"] / 100.0, np.nan),
            "speedup_paper_text": [
                f"{v:g} %" if r else "none reported" for v, r in zip(paper_t1["speedup_percent"], reached)
            ],
            "note": "published, training loss: " + paper_t1["note"],
        }
    )
    if rebuttal is None:
        return paper
    require_columns(rebuttal, ["model", "dataset", "step", "init", "eval_loss"], "the rebuttal's checkpoints")
    for i, r in paper.iterrows():
        rb = rebuttal[(rebuttal["model"] == r["size"]) & (rebuttal["dataset"] == r["dataset"])]
        st, sy = rb[rb["init"] == "standard"], rb[rb["init"] == "symmetric"]
        if len(st) == 1 and len(sy) == 1:
            standard, symmetric, step = (
                float(st["eval_loss"].iloc[0]),
                float(sy["eval_loss"].iloc[0]),
                int(sy["step"].iloc[0]),
            )
            paper.loc[i, ["final_loss_mean", "loss_gain_mean", "horizon"]] = [
                symmetric,
                float(st["eval_loss"].iloc[0] - sy["eval_loss"].iloc[0]),
                step,
            ]
            paper.loc[i, "note"] = (
                f"authors' rebuttal: held-out loss at step {step} (standard {standard:.4f}); speed-up as reported"
            )
    return paper
