"""Per ablation run: its symmetry, its held-out loss gain and signed speed-up over the same-seed baseline run,
and their Spearman rank correlations with percentile-bootstrap intervals: the tables behind fig_symmetry_speedup
(analysis.figdata.symmetry_speedup_tables, CLI `symmetry-speedup`).

Pure functions of tables (docs/contracts.md columns) and arrays; nothing here reads files or draws.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from attention_geometry.analysis.stats import Interval, check_level
from attention_geometry.analysis.summaries import (
    CONTRAST_COLUMNS,
    CONTRAST_MEASURES,
    contrast_runs,
    eval_curves,
    layer_medians,
)
from attention_geometry.errors import UserError
from attention_geometry.formats.columns import RUN_KEYS


# ------------------------------------------------------------------------------------------- per run
def run_symmetry(scores: pd.DataFrame) -> pd.DataFrame:
    """Per training run: median symmetry and directionality over layers at step 0 and at the run's last
    scored step, and the change. Columns: run, size, dataset, objective, init, seed, first_step, final_step,
    symmetry_start, symmetry_final, symmetry_change, directionality_start, directionality_final."""
    med = layer_medians(scores)
    rows = []
    for _, g in med.groupby("run", sort=True):
        g = g.sort_values("step")
        first, last = g.iloc[0], g.iloc[-1]
        row = {k: first[k] for k in ["run", *RUN_KEYS]}
        row.update(
            first_step=int(first["step"]),
            final_step=int(last["step"]),
            symmetry_start=float(first["symmetry"]),
            symmetry_final=float(last["symmetry"]),
            symmetry_change=float(last["symmetry"] - first["symmetry"]),
            directionality_start=float(first["directionality"]),
            directionality_final=float(last["directionality"]),
        )
        rows.append(row)
    return pd.DataFrame(rows)


def per_run_speedups(loss: pd.DataFrame, baseline_init: str = "standard") -> pd.DataFrame:
    """Every run of the table against its same-seed `baseline_init` run (contrast_runs, one common target
    per (size, dataset, objective, init)). Baseline runs get loss_gain 0 and speedup 0; a run without a
    same-seed baseline gets NaN. Columns: run, size, dataset, objective, init, seed, final_step (the run's
    own last evaluation), then final_eval_loss .. speedup as in contrast_runs."""
    ev = eval_curves(loss)
    if ev.empty:
        raise UserError("training loss table: no held-out loss (eval_loss) rows")
    parts = [contrast_runs(ev, init, baseline_init) for init in sorted(set(ev["init"]) - {baseline_init})]
    cmp = pd.concat([p for p in parts if len(p)], ignore_index=True) if any(len(p) for p in parts) else None
    rows = []
    for run, g in ev.groupby("run", sort=True):
        row = {k: g[k].iloc[0] for k in ["run", *RUN_KEYS]}
        row["final_step"] = int(g["step"].iloc[-1])
        hit = cmp[cmp["run"] == run] if cmp is not None else pd.DataFrame()
        if row["init"] == baseline_init:
            row.update(
                horizon=row["final_step"],
                final_eval_loss=float(g["eval_loss"].iloc[-1]),
                baseline_run=run,
                target=math.nan,
                baseline_s=math.nan,
                s_star=math.nan,
                loss_gain=0.0,
                speedup=0.0,
            )
            row["baseline_final_eval_loss"] = row["final_eval_loss"]
        elif len(hit):
            row.update(hit.iloc[0][CONTRAST_COLUMNS[7:]].to_dict())
        else:
            row.update(
                horizon=math.nan,
                final_eval_loss=float(g["eval_loss"].iloc[-1]),
                baseline_run="",
                baseline_final_eval_loss=math.nan,
                loss_gain=math.nan,
                target=math.nan,
                baseline_s=math.nan,
                s_star=math.nan,
                speedup=math.nan,
            )
        rows.append(row)
    return pd.DataFrame(rows, columns=["run", *RUN_KEYS, "final_step", *CONTRAST_COLUMNS[7:]])


def symmetry_vs_gain(scores: pd.DataFrame, loss: pd.DataFrame, baseline_init: str = "standard") -> pd.DataFrame:
    """One row per non-baseline ablation run with a same-seed baseline: run_symmetry joined with
    per_run_speedups (loss gain at the horizon, signed speed-up at the common target; every run has both)."""
    sym = run_symmetry(scores)
    sp = per_run_speedups(loss, baseline_init)
    sp = sp[(sp["init"] != baseline_init) & (sp["baseline_run"] != "")]
    out = sym.merge(sp[["run", *CONTRAST_MEASURES]], on="run", how="inner")
    return out.sort_values(["objective", "init", "seed"], kind="stable", ignore_index=True)


# ------------------------------------------------------------------------------------- correlations
def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman rank correlation (average ranks for ties); NaN when either side is constant."""
    from scipy.stats import rankdata

    a = np.asarray(x, dtype=float)
    b = np.asarray(y, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise UserError(f"spearman: x and y must be 1-d of equal length, got {a.shape}, {b.shape}")
    if a.size < 2:
        return math.nan
    ra, rb = rankdata(a), rankdata(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    den = math.sqrt(float((ra**2).sum() * (rb**2).sum()))
    return math.nan if den == 0 else float((ra * rb).sum() / den)


def spearman_bootstrap(
    x: Sequence[float], y: Sequence[float], n_resamples: int = 2000, seed: int = 0, level: float = 0.95
) -> Interval:
    """Spearman's rho of (x, y) with a percentile bootstrap interval: `n_resamples` resamples of the pairs
    with replacement, drawn as np.random.default_rng(seed).integers(0, n, size=(n_resamples, n)); resamples
    with a constant side (undefined rho) are left out. NaN pairs are dropped first."""
    check_level(level)
    if int(n_resamples) < 1:
        raise UserError(f"bootstrap: n_resamples must be >= 1, got {n_resamples!r}")
    a = np.asarray(x, dtype=float)
    b = np.asarray(y, dtype=float)
    ok = np.isfinite(a) & np.isfinite(b)
    a, b = a[ok], b[ok]
    n = int(a.size)
    rho = spearman(a, b)
    if n < 3 or math.isnan(rho):
        return Interval(rho, math.nan, math.nan, n)
    idx = np.random.default_rng(seed).integers(0, n, size=(int(n_resamples), n))
    boot = np.array([spearman(a[i], b[i]) for i in idx])
    boot = boot[np.isfinite(boot)]
    if boot.size == 0:
        return Interval(rho, math.nan, math.nan, n)
    lo, hi = np.percentile(boot, [100 * (0.5 - level / 2), 100 * (0.5 + level / 2)])
    return Interval(rho, float(lo), float(hi), n)


def correlation_table(
    table: pd.DataFrame,
    xs: Sequence[str],
    ys: Sequence[str],
    n_resamples: int,
    seed: int,
    level: float = 0.95,
    by: Sequence[str] = (),
) -> pd.DataFrame:
    """Spearman rho with bootstrap interval for every (x, y) pair of columns, optionally per group `by`."""
    rows = []
    groups = table.groupby(list(by), sort=True) if by else [((), table)]
    for key, g in groups:
        key = key if isinstance(key, tuple) else (key,)
        for x in xs:
            for y in ys:
                iv = spearman_bootstrap(g[x], g[y], n_resamples=n_resamples, seed=seed, level=level)
                rows.append(
                    {
                        **dict(zip(by, key)),
                        "x": x,
                        "y": y,
                        "n": iv.n,
                        "spearman": iv.estimate,
                        "low": iv.low,
                        "high": iv.high,
                    }
                )
    return pd.DataFrame(rows)
