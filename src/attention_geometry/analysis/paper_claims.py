"""The paper's own figure for a claim, on the same unit as ours where resources/paper/ allows it (the
"paper" column of the claims table, attention_geometry.analysis.claims): its encoder-decoder gaps over its (model,
dataset) pairs, its symmetric-init gains and speed-ups, the rebuttal's bert-large held-out losses."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from attention_geometry.analysis.stats import signed_speedup, speedup_at, steps_saved_share, t_interval

# the speed-up definitions, computed on the paper's training-loss curves (standard vs symmetric, one pair of
# runs per (model, dataset)): as each claim computes ours on held-out loss
PAPER_SPEEDUP_WHAT = {
    "lstar": "signed speed-up at the common target of its training-loss curves",
    "declared": "signed speed-up at the standard run's final training loss (our declared target's rule)",
    "paper": "share of steps saved to reach the standard run's final training loss (its Table 1's definition)",
}


def fmt_estimate(
    est: float, low: float = math.nan, high: float = math.nan, n: int | None = None, pct: bool = False
) -> str:
    """An estimate with its interval and n as the claims table writes it (signed; percent with pct)."""
    f = (lambda v: f"{100 * v:+.1f} %") if pct else (lambda v: f"{v:+.3f}")
    if not np.isfinite(est):
        return "n/a"
    s = f(est) + (f" [{f(low)}, {f(high)}]" if np.isfinite(low) else "")
    return s + (f" (n = {n})" if n is not None else "")


def paper_pair_gap(paper_training: pd.DataFrame | None, score: str, sign_dec_minus_enc: bool, level: float) -> str:
    """The paper's encoder-decoder gap of `score` over its (model, dataset) pairs at its final step: per
    pair the median over layers of each objective, the paired interval over the pairs."""
    if paper_training is None or paper_training.empty:
        return "n/a"
    p = paper_training[paper_training["step"] == paper_training["step"].max()]
    med = p.groupby(["model", "dataset", "objective"])[score].median().unstack("objective").dropna()
    d = med["decoder"] - med["encoder"] if sign_dec_minus_enc else med["encoder"] - med["decoder"]
    iv = t_interval(d, level)
    what = "decoder - encoder" if sign_dec_minus_enc else "encoder - decoder"
    return (
        f"{fmt_estimate(iv.estimate, iv.low, iv.high)} ({what}, n = {iv.n} (model, dataset) pairs, median over "
        f"layers at step {int(p['step'].max())}; range {d.min():+.3f} to {d.max():+.3f})"
    )


def paper_symmetric_init(
    paper_loss: pd.DataFrame | None,
    paper_table1: pd.DataFrame | None,
    paper_rebuttal: pd.DataFrame | None,
    what: str,
    level: float,
    speedup: str = "lstar",
) -> str:
    """The paper's figures for symmetric vs standard init: `what` = "loss" (final training-loss gain per
    (model, dataset) pair; bert-large held-out gains of the rebuttal) or "speedup" (computed on its
    training-loss curves by the definition `speedup`: "lstar" at the common target, "declared" at the standard
    run's final loss with S its first step there, "paper" the share of steps saved to reach that loss with S
    the last step; and its published Table 1)."""
    parts = []
    if paper_loss is not None and len(paper_loss):
        vals = []
        for _, g in paper_loss.groupby(["model", "dataset"], sort=True):
            st = g[g["init"] == "standard"].sort_values("step")
            sy = g[g["init"] == "symmetric"].sort_values("step")
            if st.empty or sy.empty:
                continue
            if what == "loss":
                vals.append(float(st["train_loss"].iloc[-1] - sy["train_loss"].iloc[-1]))
            else:
                curves = (st["step"], st["train_loss"], sy["step"], sy["train_loss"])
                if speedup == "paper":
                    vals.append(steps_saved_share(*curves)[2])
                elif speedup == "declared":
                    vals.append(speedup_at(*curves, float(st["train_loss"].iloc[-1]))[2])
                else:
                    vals.append(signed_speedup(*curves))
        iv = t_interval(vals, level)
        lost = int(np.count_nonzero(~np.isfinite(vals)))
        parts.append(
            f"{fmt_estimate(iv.estimate, iv.low, iv.high, pct=what != 'loss')} over n = {iv.n} (model, dataset) "
            f"pairs, {'final training-loss gain' if what == 'loss' else PAPER_SPEEDUP_WHAT[speedup]}"
            + (f" ({lost} pair(s) never reach it)" if lost else "")
        )
    if what == "speedup" and paper_table1 is not None and len(paper_table1):
        parts.append(
            "published Table 1: "
            + "; ".join(
                f"{r.model} {r.dataset} " + (f"{r.speedup_percent:g} %" if str(r.reached).lower() == "true" else "none")
                for r in paper_table1.itertuples()
            )
        )
    if paper_rebuttal is not None and len(paper_rebuttal) and {"init", "eval_loss"} <= set(paper_rebuttal.columns):
        r = paper_rebuttal.pivot_table(index=["model", "dataset", "step"], columns="init", values="eval_loss")
        if {"standard", "symmetric"} <= set(r.columns) and what == "loss":
            gains = (r["standard"] - r["symmetric"]).dropna()
            parts.append(
                "rebuttal held-out loss gains: "
                + "; ".join(f"{m} {d} {int(s)} steps {g:+.4f}" for (m, d, s), g in gains.items())
            )
    return "; ".join(parts) if parts else "n/a"
