"""Pure computations behind the notebooks: summaries over layers, intervals, speed-ups, correlations, claims.

Every function takes tables (pandas DataFrames with the columns of docs/contracts.md) or arrays and returns
new ones; nothing here reads files, draws or rescales a score. The notebooks only load, call these, and draw.

Conventions used throughout:
- "over layers" summaries take the layer's summed matrix (`head == "all"` where a head column exists);
- intervals are two-sided at `level` (e.g. 0.95); a t-interval needs n >= 2, otherwise its bounds are NaN;
- a decision "holds" when the estimate has the expected sign and its interval excludes 0, "contradicted"
  when the interval excludes 0 on the other side, else "inconclusive".
"""

from __future__ import annotations

import importlib.metadata
import math
import platform
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .errors import UserError
from .files import file_sha256  # noqa: F401  (notebooks call analysis.file_sha256)

SCORES = ("symmetry", "directionality")


# --------------------------------------------------------------------------------------------- checks
def require_columns(df: pd.DataFrame, columns: Iterable[str], where: str) -> None:
    """Raise a UserError naming the missing columns of table `where`."""
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise UserError(f"{where}: missing column(s) {', '.join(missing)} (have: {', '.join(map(str, df.columns))})")


def _check_level(level: float) -> None:
    if not 0.0 < float(level) < 1.0:
        raise UserError(f"confidence level must be in (0, 1), got {level!r}")


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


def summarize_over_layers(scores: pd.DataFrame, by: Sequence[str],
                          values: Sequence[str] = SCORES) -> pd.DataFrame:
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


def model_table(ours: pd.DataFrame | None, paper: pd.DataFrame | None,
                caveats: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per model and component: median and IQR over layers of s and d, ours and the paper's side by side
    (column `source` = "ours" | "paper"). Ours: summed rows of the score table; the paper's: its distinct
    score sets, with the caveat flag."""
    keys = ["source", "model", "modality", "architecture", "component", "n_params"]
    parts = []
    if ours is not None and len(ours):
        o = summed_rows(ours)
        require_columns(o, ["model", "modality", "architecture", "component", "n_params", "layer", *SCORES],
                        "our pretrained scores")
        o = o.assign(source="ours", caveat="")
        parts.append(summarize_over_layers(o, keys + ["caveat"]))
    if paper is not None and len(paper):
        p = distinct_paper_models(paper)
        p = flag_caveats(p, caveats) if caveats is not None else p.assign(caveat="")
        p = p.assign(source="paper")
        parts.append(summarize_over_layers(p, keys + ["caveat"]))
    if not parts:
        raise UserError("model table: neither our scores nor the paper's have rows")
    out = pd.concat(parts, ignore_index=True)
    return out.sort_values(["source", "modality", "architecture", "component", "n_params", "model"],
                           kind="stable", ignore_index=True)


# ------------------------------------------------------------------------------------------ intervals
@dataclass(frozen=True)
class Interval:
    estimate: float
    low: float
    high: float
    n: int

    def excludes_zero(self) -> bool:
        return bool(np.isfinite(self.low) and np.isfinite(self.high) and (self.low > 0 or self.high < 0))


def t_interval(values: Sequence[float], level: float = 0.95) -> Interval:
    """Mean and two-sided Student-t interval over `values` (NaNs dropped); NaN bounds when n < 2."""
    from scipy import stats

    _check_level(level)
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    n = int(x.size)
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, 0)
    mean = float(x.mean())
    if n < 2:
        return Interval(mean, math.nan, math.nan, n)
    se = float(x.std(ddof=1)) / math.sqrt(n)
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * se
    return Interval(mean, mean - half, mean + half, n)


def welch_interval(a: Sequence[float], b: Sequence[float], level: float = 0.95) -> Interval:
    """mean(a) - mean(b) with the Welch-Satterthwaite t-interval (unequal variances). n = n_a + n_b.
    NaN bounds when either group has fewer than 2 values or both variances are zero."""
    from scipy import stats

    _check_level(level)
    x = np.asarray(a, dtype=float)
    y = np.asarray(b, dtype=float)
    x, y = x[np.isfinite(x)], y[np.isfinite(y)]
    if x.size == 0 or y.size == 0:
        return Interval(math.nan, math.nan, math.nan, int(x.size + y.size))
    diff = float(x.mean() - y.mean())
    if x.size < 2 or y.size < 2:
        return Interval(diff, math.nan, math.nan, int(x.size + y.size))
    va, vb = x.var(ddof=1) / x.size, y.var(ddof=1) / y.size
    se2 = va + vb
    if se2 == 0:
        return Interval(diff, diff, diff, int(x.size + y.size))
    dof = se2**2 / (va**2 / (x.size - 1) + vb**2 / (y.size - 1))
    half = float(stats.t.ppf(0.5 + level / 2, dof)) * math.sqrt(se2)
    return Interval(diff, diff - half, diff + half, int(x.size + y.size))


# ------------------------------------------------------------------------------------------ speed-up
def first_reaching_step(steps: Sequence[float], losses: Sequence[float], target: float) -> float:
    """The first step at which the loss curve reaches `target` (loss <= target), linearly interpolated
    between consecutive evaluation points; NaN when it never does. Steps must increase strictly."""
    s = np.asarray(steps, dtype=float)
    y = np.asarray(losses, dtype=float)
    if s.shape != y.shape or s.ndim != 1 or s.size == 0:
        raise UserError(f"loss curve: steps and losses must be 1-d of equal non-zero length, got {s.shape}, {y.shape}")
    if np.any(np.diff(s) <= 0):
        raise UserError("loss curve: steps must increase strictly")
    if not np.all(np.isfinite(y)):
        raise UserError("loss curve: non-finite held-out loss")
    hit = np.flatnonzero(y <= target)
    if hit.size == 0:
        return math.nan
    i = int(hit[0])
    if i == 0:
        return float(s[0])
    # y[i-1] > target >= y[i]: the crossing lies in (s[i-1], s[i]]
    frac = (y[i - 1] - target) / (y[i - 1] - y[i])
    return float(s[i - 1] + frac * (s[i] - s[i - 1]))


def speedup(steps: Sequence[float], losses: Sequence[float], target: float, total_steps: float) -> float:
    """1 - s*/S with s* = first_reaching_step(steps, losses, target) and S = `total_steps` (the standard
    run's steps). NaN ("not reached") when the curve never reaches the target."""
    if not total_steps > 0:
        raise UserError(f"speed-up: the baseline's number of steps must be positive, got {total_steps!r}")
    s_star = first_reaching_step(steps, losses, target)
    return math.nan if math.isnan(s_star) else 1.0 - s_star / float(total_steps)


RUN_KEYS = ["size", "dataset", "objective", "init", "seed"]
GROUP_KEYS = ["size", "dataset", "objective"]


def eval_curves(loss: pd.DataFrame) -> pd.DataFrame:
    """Held-out loss rows only (eval_loss present), sorted by run and step."""
    require_columns(loss, ["run", *RUN_KEYS, "step", "eval_loss"], "training loss table")
    out = loss[pd.to_numeric(loss["eval_loss"], errors="coerce").notna()].copy()
    out["eval_loss"] = out["eval_loss"].astype(float)
    out["step"] = out["step"].astype(int)
    return out.sort_values(["run", "step"], kind="stable", ignore_index=True)


def per_run_speedups(loss: pd.DataFrame, baseline_init: str = "standard") -> pd.DataFrame:
    """For every run of the ablation: its final held-out loss, the same-seed baseline run's final held-out
    loss, the loss gain (baseline final - run final), s* and the speed-up 1 - s*/S (NaN = not reached).

    Baseline runs appear too (speed-up 0 by construction is not reported: their s* is S). Columns: run,
    size, dataset, objective, init, seed, final_step, final_eval_loss, baseline_run, baseline_final_eval_loss,
    loss_gain, s_star, total_steps, speedup, reached."""
    ev = eval_curves(loss)
    if ev.empty:
        raise UserError("training loss table: no held-out loss (eval_loss) rows")
    rows = []
    for run, g in ev.groupby("run", sort=True):
        meta = g.iloc[0]
        base = ev[(ev["init"] == baseline_init) & (ev["seed"] == meta["seed"])
                  & (ev["size"] == meta["size"]) & (ev["dataset"] == meta["dataset"])
                  & (ev["objective"] == meta["objective"])]
        row = {k: meta[k] for k in ["run", *RUN_KEYS]}
        row["final_step"] = int(g["step"].iloc[-1])
        row["final_eval_loss"] = float(g["eval_loss"].iloc[-1])
        if base.empty:
            row.update(baseline_run="", baseline_final_eval_loss=math.nan, loss_gain=math.nan,
                       s_star=math.nan, total_steps=math.nan, speedup=math.nan, reached=False)
        else:
            if base["run"].nunique() != 1:
                raise UserError(f"training loss table: several {baseline_init} runs for seed {meta['seed']} "
                                f"of {meta['size']}/{meta['dataset']}/{meta['objective']}: {sorted(base['run'].unique())}")
            target = float(base["eval_loss"].iloc[-1])
            total = float(base["step"].iloc[-1])
            s_star = first_reaching_step(g["step"], g["eval_loss"], target)
            row.update(baseline_run=base["run"].iloc[0], baseline_final_eval_loss=target,
                       loss_gain=target - row["final_eval_loss"], s_star=s_star, total_steps=total,
                       speedup=(math.nan if math.isnan(s_star) else 1.0 - s_star / total),
                       reached=not math.isnan(s_star))
        rows.append(row)
    return pd.DataFrame(rows)


def init_table(loss: pd.DataFrame, baseline_init: str = "standard", level: float = 0.95) -> pd.DataFrame:
    """Table 1: per (size, dataset, objective, init), over seeds: n, final held-out loss mean and t-interval,
    paired loss gain vs the baseline (mean and interval), speed-up mean and interval over the seeds that
    reached the baseline's final loss, and how many did. `speedup_text` is a display string ("not reached"
    when no seed reached it)."""
    runs = per_run_speedups(loss, baseline_init)
    rows = []
    for key, g in runs.groupby(GROUP_KEYS + ["init"], sort=True):
        row = dict(zip(GROUP_KEYS + ["init"], key))
        if g["final_step"].nunique() != 1:
            raise UserError(f"training loss table: the {'/'.join(map(str, key))} runs end at different steps "
                            f"({dict(zip(g['run'], g['final_step']))}); select the runs of one ablation")
        row["n_seeds"] = int(len(g))
        fl = t_interval(g["final_eval_loss"], level)
        row.update(final_loss_mean=fl.estimate, final_loss_low=fl.low, final_loss_high=fl.high)
        is_base = key[-1] == baseline_init
        gain = t_interval(g["loss_gain"], level) if not is_base else Interval(math.nan, math.nan, math.nan, 0)
        row.update(loss_gain_mean=gain.estimate, loss_gain_low=gain.low, loss_gain_high=gain.high)
        n_reached = int(g["reached"].sum()) if not is_base else 0
        sp = t_interval(g.loc[g["reached"], "speedup"], level) if not is_base else Interval(math.nan, math.nan, math.nan, 0)
        row.update(n_reached=n_reached, speedup_mean=sp.estimate, speedup_low=sp.low, speedup_high=sp.high)
        row["speedup_text"] = speedup_text(is_base, n_reached, int(len(g)), sp)
        rows.append(row)
    return pd.DataFrame(rows)


def speedup_text(is_baseline: bool, n_reached: int, n: int, sp: Interval) -> str:
    """Display string of a speed-up summary, in percent."""
    if is_baseline:
        return "baseline"
    if n_reached == 0:
        return f"not reached (0 of {n} seeds)"
    txt = f"{100 * sp.estimate:.1f} %"
    if np.isfinite(sp.low):
        txt += f" [{100 * sp.low:.1f}, {100 * sp.high:.1f}]"
    if n_reached < n:
        txt += f" ({n - n_reached} of {n} seeds not reached)"
    return txt


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


def spearman_bootstrap(x: Sequence[float], y: Sequence[float], n_resamples: int = 2000, seed: int = 0,
                       level: float = 0.95) -> Interval:
    """Spearman's rho of (x, y) with a percentile bootstrap interval: `n_resamples` resamples of the pairs
    with replacement, drawn as np.random.default_rng(seed).integers(0, n, size=(n_resamples, n)); resamples
    with a constant side (undefined rho) are left out. NaN pairs are dropped first."""
    _check_level(level)
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


def run_symmetry(scores: pd.DataFrame) -> pd.DataFrame:
    """Per training run: median symmetry and directionality over layers at step 0 and at the run's last
    scored step, and the change. Columns: run, size, dataset, objective, init, seed, first_step, final_step,
    symmetry_start, symmetry_final, symmetry_change, directionality_start, directionality_final."""
    s = summed_rows(scores)
    require_columns(s, ["run", *RUN_KEYS, "step", "layer", *SCORES], "training score table")
    med = s.groupby(["run", *RUN_KEYS, "step"], sort=True)[list(SCORES)].median().reset_index()
    rows = []
    for run, g in med.groupby("run", sort=True):
        g = g.sort_values("step")
        first, last = g.iloc[0], g.iloc[-1]
        row = {k: first[k] for k in ["run", *RUN_KEYS]}
        row.update(first_step=int(first["step"]), final_step=int(last["step"]),
                   symmetry_start=float(first["symmetry"]), symmetry_final=float(last["symmetry"]),
                   symmetry_change=float(last["symmetry"] - first["symmetry"]),
                   directionality_start=float(first["directionality"]),
                   directionality_final=float(last["directionality"]))
        rows.append(row)
    return pd.DataFrame(rows)


def symmetry_vs_gain(scores: pd.DataFrame, loss: pd.DataFrame, baseline_init: str = "standard") -> pd.DataFrame:
    """One row per non-baseline ablation run with a same-seed baseline: run_symmetry joined with
    per_run_speedups (loss_gain, speedup, reached)."""
    sym = run_symmetry(scores)
    sp = per_run_speedups(loss, baseline_init)
    sp = sp[(sp["init"] != baseline_init) & (sp["baseline_run"] != "")]
    out = sym.merge(sp[["run", "final_eval_loss", "baseline_final_eval_loss", "loss_gain", "s_star",
                        "total_steps", "speedup", "reached"]], on="run", how="inner")
    return out.sort_values(["objective", "init", "seed"], kind="stable", ignore_index=True)


def correlation_table(table: pd.DataFrame, xs: Sequence[str], ys: Sequence[str], n_resamples: int, seed: int,
                      level: float = 0.95, by: Sequence[str] = ()) -> pd.DataFrame:
    """Spearman rho with bootstrap interval for every (x, y) pair of columns, optionally per group `by`."""
    rows = []
    groups = table.groupby(list(by), sort=True) if by else [((), table)]
    for key, g in groups:
        key = key if isinstance(key, tuple) else (key,)
        for x in xs:
            for y in ys:
                iv = spearman_bootstrap(g[x], g[y], n_resamples=n_resamples, seed=seed, level=level)
                rows.append({**dict(zip(by, key)), "x": x, "y": y, "n": iv.n, "spearman": iv.estimate,
                             "low": iv.low, "high": iv.high})
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------------------- claims
CLAIM_COLUMNS = ["claim", "paper", "ours", "test", "estimate", "low", "high", "n", "holds"]


def decide(iv: Interval, expected_sign: int) -> bool:
    """True when the estimate has the expected sign (+1 or -1) and the interval excludes 0 on that side."""
    if expected_sign not in (1, -1):
        raise UserError(f"expected_sign must be +1 or -1, got {expected_sign!r}")
    if not (np.isfinite(iv.low) and np.isfinite(iv.high)):
        return False
    return bool(iv.low > 0) if expected_sign > 0 else bool(iv.high < 0)


def claim_row(claim: str, paper: str, ours: str, test: str, iv: Interval, expected_sign: int) -> dict:
    return {"claim": claim, "paper": paper, "ours": ours, "test": test, "estimate": iv.estimate,
            "low": iv.low, "high": iv.high, "n": iv.n, "holds": decide(iv, expected_sign), "sign": expected_sign}


def _fmt(iv: Interval, digits: int = 3) -> str:
    if not np.isfinite(iv.estimate):
        return "n/a"
    s = f"{iv.estimate:+.{digits}f}"
    if np.isfinite(iv.low):
        s += f" [{iv.low:+.{digits}f}, {iv.high:+.{digits}f}]"
    return s + f" (n={iv.n})"


def final_layer_scores(training: pd.DataFrame, runs: Sequence[str]) -> pd.DataFrame:
    """Summed per-layer rows of the given runs at each run's last scored step."""
    s = summed_rows(training)
    require_columns(s, ["run", "step", "layer", *SCORES], "training score table")
    s = s[s["run"].isin(list(runs))]
    last = s.groupby("run")["step"].transform("max")
    return s[s["step"] == last]


def claim_encoder_above_decoder(training: pd.DataFrame, encoder_runs: Sequence[str], decoder_runs: Sequence[str],
                                paper_training: pd.DataFrame | None, level: float) -> dict:
    """Encoder symmetry above decoder at the end of training (standard init): Welch interval over the
    final per-layer scores of the encoder runs vs the decoder runs (layers and seeds pooled)."""
    enc = final_layer_scores(training, encoder_runs)["symmetry"]
    dec = final_layer_scores(training, decoder_runs)["symmetry"]
    if enc.empty or dec.empty:
        raise UserError(f"claim encoder vs decoder symmetry: no training scores for runs {list(encoder_runs)} / {list(decoder_runs)}")
    iv = welch_interval(enc, dec, level)
    paper = "n/a"
    if paper_training is not None and len(paper_training):
        p = paper_training[paper_training["step"] == paper_training["step"].max()]
        piv = welch_interval(p.loc[p["objective"] == "encoder", "symmetry"],
                             p.loc[p["objective"] == "decoder", "symmetry"], level)
        paper = f"{_fmt(piv)} at step {int(p['step'].max())} (all models and datasets pooled)"
    ours = (f"{_fmt(iv)}; medians {np.median(enc):.3f} (encoder) vs {np.median(dec):.3f} (decoder)")
    return claim_row("encoder symmetry above decoder (trained from scratch, standard init)", paper, ours,
                     f"mean symmetry encoder - decoder over final layers; holds if > 0 and its {level:.0%} "
                     "Welch t-interval over layers (and seeds) excludes 0", iv, +1)


def claim_decoder_column_dominance(training: pd.DataFrame, decoder_runs: Sequence[str],
                                   paper_training: pd.DataFrame | None, level: float) -> dict:
    d = final_layer_scores(training, decoder_runs)["directionality"]
    if d.empty:
        raise UserError(f"claim decoder column dominance: no training scores for runs {list(decoder_runs)}")
    iv = t_interval(d, level)
    paper = "n/a"
    if paper_training is not None and len(paper_training):
        p = paper_training[(paper_training["step"] == paper_training["step"].max())
                           & (paper_training["objective"] == "decoder")]
        paper = f"{_fmt(t_interval(p['directionality'], level))} at step {int(paper_training['step'].max())}"
    return claim_row("decoder directionality is negative (column dominance)", paper, _fmt(iv),
                     f"mean directionality of the decoder's final layers; holds if < 0 and its {level:.0%} "
                     "t-interval over layers (and seeds) excludes 0", iv, -1)


def claim_symmetric_init(loss: pd.DataFrame, objective: str, init: str, baseline_init: str,
                         paper_table1: pd.DataFrame | None, level: float) -> list[dict]:
    """Two claims for (objective, init): final held-out loss below the same-seed baseline (paired gain > 0),
    and speed-up > 0 (every seed must reach the baseline's final loss)."""
    runs = per_run_speedups(loss, baseline_init)
    g = runs[(runs["objective"] == objective) & (runs["init"] == init) & (runs["baseline_run"] != "")]
    if g.empty:
        raise UserError(f"claim symmetric init: no {objective} runs with init {init!r} and a same-seed "
                        f"{baseline_init!r} run in the training loss table")
    gain = t_interval(g["loss_gain"], level)
    reached = g[g["reached"]]
    sp = t_interval(reached["speedup"], level)
    paper = "n/a"
    if paper_table1 is not None and len(paper_table1):
        paper = "; ".join(
            f"{r.model} {r.dataset}: " + (f"{r.speedup_percent:g} %" if str(r.reached).lower() == "true" else "none")
            for r in paper_table1.itertuples())
    rows = [claim_row(f"{init} init lowers the final held-out loss ({objective})",
                      "lower loss (Table 1)" if objective == "encoder" else "no gain for decoders (rebuttal)",
                      _fmt(gain), f"paired loss gain (baseline final - {init} final) over seeds; holds if > 0 and "
                      f"its {level:.0%} t-interval excludes 0", gain, +1)]
    sp_row = claim_row(f"{init} init speeds up training ({objective})", paper,
                       (_fmt(sp) + f"; reached in {len(reached)} of {len(g)} seeds") if len(reached)
                       else f"not reached (0 of {len(g)} seeds)",
                       "speed-up 1 - s*/S per seed; holds if every seed reaches the baseline's final loss and "
                       f"the {level:.0%} t-interval of the mean speed-up excludes 0", sp, +1)
    if len(reached) < len(g):
        sp_row["holds"] = False
    rows.append(sp_row)
    return rows


def claim_decoder_loses_symmetry(training: pd.DataFrame, decoder_runs: Sequence[str], level: float) -> dict:
    """Decoders lose a symmetric init: per layer (and seed), final symmetry - step-0 symmetry < 0."""
    if not list(decoder_runs):
        raise UserError(f"no decoder run with a tied initialization ({', '.join(TIED_INITS)}) in the training scores")
    s = summed_rows(training)
    s = s[s["run"].isin(list(decoder_runs))]
    if s.empty:
        raise UserError(f"claim decoders lose symmetric init: no training scores for runs {list(decoder_runs)}")
    first = s.groupby("run")["step"].transform("min")
    last = s.groupby("run")["step"].transform("max")
    a = s[s["step"] == first].set_index(["run", "layer"])["symmetry"]
    b = s[s["step"] == last].set_index(["run", "layer"])["symmetry"]
    diff = (b - a).dropna()
    iv = t_interval(diff, level)
    return claim_row("decoders lose a symmetric initialization", "symmetry decays during training (rebuttal)",
                     f"{_fmt(iv)}; step-0 mean {a.mean():.3f}, final mean {b.mean():.3f}",
                     f"per-layer change of symmetry (final - step 0); holds if < 0 and its {level:.0%} "
                     "t-interval over layers (and seeds) excludes 0", iv, -1)


def claim_pretrained_encoders_above(pretrained: pd.DataFrame, paper: pd.DataFrame | None,
                                    caveats: pd.DataFrame | None, level: float) -> dict:
    """Pretrained language encoders above decoders. Ours: Welch interval over the per-layer symmetry of
    our encoder-only vs decoder-only text models (few models: layers pooled). The paper's: Welch interval
    over the per-model median symmetry of its distinct encoder-only vs decoder-only language models, the
    caveat-flagged ones left out."""
    o = summed_rows(pretrained)
    o = o[o["modality"] == "text"] if "modality" in o.columns else o
    enc = o.loc[o["architecture"] == "encoder-only", "symmetry"]
    dec = o.loc[o["architecture"] == "decoder-only", "symmetry"]
    if enc.empty or dec.empty:
        raise UserError("claim pretrained encoders above decoders: our pretrained scores need both an "
                        "encoder-only and a decoder-only text model")
    iv = welch_interval(enc, dec, level)
    paper_txt = "n/a"
    if paper is not None and len(paper):
        mt = model_table(None, paper[paper["modality"] == "language"], caveats)
        mt = mt[mt["caveat"] == ""]
        piv = welch_interval(mt.loc[mt["architecture"] == "encoder-only", "symmetry_median"],
                             mt.loc[mt["architecture"] == "decoder-only", "symmetry_median"], level)
        paper_txt = f"{_fmt(piv)} over models (per-model medians; not-comparable points left out)"
    used = o[o["architecture"].isin(["encoder-only", "decoder-only"])]
    models = ", ".join(sorted(used["model"].astype(str).unique()))
    return claim_row("pretrained encoders are more symmetric than decoders", paper_txt, f"{_fmt(iv)} ({models})",
                     f"mean symmetry encoder-only - decoder-only over layers; holds if > 0 and its {level:.0%} "
                     "Welch t-interval excludes 0", iv, +1)


def claim_updates(updates: pd.DataFrame, level: float, kind: str = "gradient") -> list[dict]:
    """From update_scores.csv: masked-LM (encoder) updates more symmetric than causal-LM (decoder) ones,
    and causal-LM updates column-dominant. Intervals over (run, step, layer) rows of `kind`."""
    require_columns(updates, ["objective", "kind", "step", "layer", *SCORES], "update score table")
    u = updates[updates["kind"] == kind]
    enc, dec = u[u["objective"] == "encoder"], u[u["objective"] == "decoder"]
    if enc.empty or dec.empty:
        raise UserError(f"update score table: need {kind!r} rows for both objectives (encoder, decoder)")
    sym = welch_interval(enc["symmetry"], dec["symmetry"], level)
    col = t_interval(dec["directionality"], level)
    return [
        claim_row(f"masked-LM updates are more symmetric than causal-LM updates ({kind})",
                  "predicted (Theorems 2.3, 2.4); not measured in the paper",
                  f"{_fmt(sym)}; means {enc['symmetry'].mean():.3f} vs {dec['symmetry'].mean():.3f}",
                  f"mean update symmetry encoder - decoder over steps and layers; holds if > 0 and its "
                  f"{level:.0%} Welch t-interval excludes 0", sym, +1),
        claim_row(f"causal-LM updates are column-dominant ({kind})",
                  "predicted (Theorem 2.4); not measured in the paper", _fmt(col),
                  f"mean update directionality of the decoder over steps and layers; holds if < 0 and its "
                  f"{level:.0%} t-interval excludes 0", col, -1),
    ]


# --------------------------------------------------------------------------------------- provenance
def package_versions(names: Iterable[str]) -> dict[str, str]:
    """Installed distribution versions ("not installed" where missing)."""
    out = {}
    for n in names:
        try:
            out[n] = importlib.metadata.version(n)
        except importlib.metadata.PackageNotFoundError:
            out[n] = "not installed"
    return out


def machine() -> dict[str, str]:
    import os

    return {"platform": platform.platform(), "machine": platform.machine(), "python": platform.python_version(),
            "cpus": str(os.cpu_count())}


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


def write_tables(df: pd.DataFrame, csv: str | None = None, tex: str | None = None, md: str | None = None,
                 shown: pd.DataFrame | None = None, title: str = "") -> None:
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
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def fmt_median_iqr(median: float, q1: float, q3: float, digits: int = 3) -> str:
    return f"{median:.{digits}f} [{q1:.{digits}f}, {q3:.{digits}f}]"


# --------------------------------------------------------------------------------- the claims table
# Inits that tie W_q := W_k at step 0 (attention_geometry.training), and the one that matches the paper's
# "symmetric" (its released code: fresh nn.Linear q, k, v, then W_q := W_k; resources/paper/README.md).
TIED_INITS = ("symmetric", "symmetric-fresh")
PAPER_SYMMETRIC_INIT = "symmetric-fresh"


def _untested(claim: str, reason: str) -> dict:
    return {"claim": claim, "paper": "", "ours": f"not tested: {reason}", "test": "", "estimate": math.nan,
            "low": math.nan, "high": math.nan, "n": 0, "holds": "not tested"}


def reproduction_claims(*, pretrained: pd.DataFrame, training: pd.DataFrame, loss: pd.DataFrame,
                        updates: pd.DataFrame, paper_pretrained: pd.DataFrame | None,
                        paper_training: pd.DataFrame | None, paper_table1: pd.DataFrame | None,
                        caveats: pd.DataFrame | None, encoder_runs: Sequence[str], decoder_runs: Sequence[str],
                        baseline_init: str = "standard", level: float = 0.95) -> pd.DataFrame:
    """Every claim of the report as one row (CLAIM_COLUMNS; `holds` = "holds" | "contradicted" |
    "inconclusive" | "not tested", see `verdict`). A claim whose data are missing is listed as "not tested" with the reason, never dropped."""
    rows: list[dict] = []

    def attempt(name: str, fn) -> None:
        try:
            out = fn()
        except UserError as exc:
            rows.append(_untested(name, str(exc)))
            return
        rows.extend(out if isinstance(out, list) else [out])

    tied_decoders = []
    if {"objective", "init", "run"} <= set(training.columns):
        t = training[(training["objective"] == "decoder") & training["init"].isin(TIED_INITS)]
        tied_decoders = sorted(t["run"].unique())
    sym = PAPER_SYMMETRIC_INIT
    attempt("encoder symmetry above decoder (trained from scratch, standard init)",
            lambda: claim_encoder_above_decoder(training, encoder_runs, decoder_runs, paper_training, level))
    attempt("decoder directionality is negative (column dominance)",
            lambda: claim_decoder_column_dominance(training, decoder_runs, paper_training, level))
    attempt(f"{sym} init lowers the final held-out loss / speeds up training (encoder)",
            lambda: claim_symmetric_init(loss, "encoder", sym, baseline_init, paper_table1, level))
    attempt("decoders lose a symmetric initialization",
            lambda: claim_decoder_loses_symmetry(training, tied_decoders, level))
    attempt("pretrained encoders are more symmetric than decoders",
            lambda: claim_pretrained_encoders_above(pretrained, paper_pretrained, caveats, level))
    for kind in ("gradient", "applied"):
        attempt(f"update claims ({kind})", lambda kind=kind: claim_updates(updates, level, kind))
    for r in rows:
        r["holds"] = verdict(r["holds"], r["low"], r["high"], r.get("sign", 0))
    return pd.DataFrame(rows, columns=CLAIM_COLUMNS)


def verdict(holds, low: float, high: float, expected_sign: int) -> str:
    """The report's word for a claim: "holds"; "contradicted" when the interval excludes 0 on the side
    opposite to the claim's sign; else "inconclusive" (the interval includes 0, too few samples for one, e.g.
    2 layers of one run, or a speed-up that not every seed reached). Strings ("not tested") pass through."""
    if isinstance(holds, str):
        return holds
    if holds:
        return "holds"
    if np.isfinite(low) and np.isfinite(high) and ((expected_sign > 0 and high < 0) or (expected_sign < 0 and low > 0)):
        return "contradicted"
    return "inconclusive"
