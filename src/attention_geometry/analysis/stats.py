"""The statistics that decide the claims: intervals, t-test, exact sign-flip and equivalence (TOST) p-values,
Holm's step-down adjustment, the verdict rule, the per-run horizon statistic and the signed speed-up (at one
target, and the paper's share of steps saved).

Pure functions of arrays and tables (docs/contracts.md columns); nothing here reads files or draws.

Conventions:
- intervals are two-sided at `level` (e.g. 0.95); a t-interval needs n >= 2, otherwise its bounds are NaN;
- p-values are two-sided unless named one-sided; an exact test on n values cannot go below its floor (p_floor);
- alpha is 1 - level, so a t-test p < alpha exactly when the level interval excludes 0;
- the verdict rule (docs/contracts.md, "Claims"): see `verdict`.

The t-intervals and t-tests (one-sample, paired, Welch, TOST) are scipy.stats' (imported when
called); this module adds the NaN handling, the small-n and zero-spread cases, and the exact sign-flip test
and Holm, which scipy does not serve (see those functions).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import pandas as pd

from attention_geometry.errors import UserError
from attention_geometry.formats.columns import RUN_KEYS, SCORES

VERDICTS = ("holds", "contradicted", "inconclusive")
# the fewest units that decide a claim: fewer seeds never give a verdict, fewer models per class a descriptive row
MIN_N = 3
# exact enumeration of 2^n sign flips: 2^24 = 16.7 M flips, done in blocks; beyond that refuse
MAX_SIGN_FLIP_N = 24


# ------------------------------------------------------------------------------------------ intervals
@dataclass(frozen=True)
class Interval:
    estimate: float
    low: float
    high: float
    n: int

    def excludes_zero(self) -> bool:
        return bool(np.isfinite(self.low) and np.isfinite(self.high) and (self.low > 0 or self.high < 0))


def check_level(level: float) -> None:
    if not 0.0 < float(level) < 1.0:
        raise UserError(f"confidence level must be in (0, 1), got {level!r}")


def _finite(values: Sequence[float]) -> np.ndarray:
    x = np.asarray(values, dtype=float).ravel()
    return x[np.isfinite(x)]


@contextmanager
def _no_precision_warning() -> Iterator[None]:
    """scipy's t-tests warn "Precision loss occurred ... nearly identical" for a group that is constant or equal
    up to rounding (effects of identical scores, e.g. 0.5 and 0.49999999999999956); the numbers are those of the
    t formula all the same, which this module computed silently before it used scipy: keep it silent."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Precision loss occurred", category=RuntimeWarning)
        yield


def t_interval(values: Sequence[float], level: float = 0.95) -> Interval:
    """Mean and two-sided Student-t interval over `values` (NaNs dropped); NaN bounds when n < 2."""
    from scipy import stats

    check_level(level)
    x = _finite(values)
    n = int(x.size)
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, 0)
    mean = float(x.mean())
    if n < 2:
        return Interval(mean, math.nan, math.nan, n)
    if np.ptp(x) == 0.0:  # every value equal: a zero-width interval (scipy's scale must be > 0)
        return Interval(mean, mean, mean, n)
    low, high = stats.t.interval(level, n - 1, loc=mean, scale=float(stats.sem(x)))
    return Interval(mean, float(low), float(high), n)


def paired_differences(a: Sequence[float], b: Sequence[float]) -> np.ndarray:
    """a_i - b_i over the pairs where both are finite; a and b must have the same length."""
    x = np.asarray(a, dtype=float).ravel()
    y = np.asarray(b, dtype=float).ravel()
    if x.shape != y.shape:
        raise UserError(f"paired values: a and b must have the same length, got {x.size} and {y.size}")
    d = x - y
    return d[np.isfinite(d)]


def paired_interval(a: Sequence[float], b: Sequence[float], level: float = 0.95) -> Interval:
    """Mean of the paired differences a_i - b_i with its paired-t interval; n = number of complete pairs."""
    return t_interval(paired_differences(a, b), level)


def welch_interval(a: Sequence[float], b: Sequence[float], level: float = 0.95) -> Interval:
    """mean(a) - mean(b) with the Welch-Satterthwaite t-interval (unequal variances). n = n_a + n_b.
    NaN bounds when either group has fewer than 2 values; a zero-width interval when both variances are 0."""
    from scipy import stats

    check_level(level)
    x, y = _finite(a), _finite(b)
    if x.size == 0 or y.size == 0:
        return Interval(math.nan, math.nan, math.nan, int(x.size + y.size))
    diff = float(x.mean() - y.mean())
    if x.size < 2 or y.size < 2:
        return Interval(diff, math.nan, math.nan, int(x.size + y.size))
    if np.ptp(x) == 0.0 and np.ptp(y) == 0.0:  # both variances 0 (scipy warns of precision loss)
        return Interval(diff, diff, diff, int(x.size + y.size))
    with _no_precision_warning():
        ci = stats.ttest_ind(x, y, equal_var=False).confidence_interval(level)
    return Interval(diff, float(ci.low), float(ci.high), int(x.size + y.size))


def welch_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided p-value of Welch's t-test of mean(a) == mean(b); NaN when either group has < 2 values."""
    from scipy import stats

    x, y = _finite(a), _finite(b)
    if x.size < 2 or y.size < 2:
        return math.nan
    with _no_precision_warning():
        return float(stats.ttest_ind(x, y, equal_var=False).pvalue)


# ---------------------------------------------------------------------------------- exact p-values
def sign_flip_p(diffs: Sequence[float]) -> float:
    """Exact two-sided sign-flip permutation p-value of mean(diffs) == 0: the share of all 2^n sign
    assignments (the observed one included) whose |mean| is >= the observed |mean| (up to rounding).
    NaNs dropped; NaN for n = 0; UserError above MAX_SIGN_FLIP_N values.

    Enumerated here rather than with scipy.stats.permutation_test((d,), sum, permutation_type="samples",
    n_resamples=inf), which gives the same exact p but refuses n = 1 and is far slower (measured on 2 shared
    CPU cores, scipy 1.17, two runs: n = 12: 0.6 ms here vs 11 ms; n = 16: 10-23 ms vs 0.2-0.4 s; n = 20:
    8-9 ms vs 7.2-7.6 s)."""
    d = _finite(diffs)
    n = int(d.size)
    if n == 0:
        return math.nan
    if n > MAX_SIGN_FLIP_N:
        raise UserError(f"sign-flip test: {n} values need 2^{n} flips; at most {MAX_SIGN_FLIP_N} are enumerated")
    observed = abs(float(d.sum()))
    tol = 1e-12 * max(1.0, float(np.abs(d).sum()))
    # flips as bits of the integers 0 .. 2^n - 1, enumerated in blocks of at most 2^16
    block = min(n, 16)
    low_bits = ((np.arange(2**block)[:, None] >> np.arange(block)) & 1).astype(bool)
    low_sums = np.where(low_bits, -d[:block], d[:block]).sum(axis=1)
    rest = d[block:]
    count = 0
    for hi in range(2 ** (n - block)):
        hi_bits = ((hi >> np.arange(rest.size)) & 1).astype(bool)
        offset = float(np.where(hi_bits, -rest, rest).sum()) if rest.size else 0.0
        count += int(np.count_nonzero(np.abs(low_sums + offset) >= observed - tol))
    return count / 2.0**n


def p_floor(n: int) -> float:
    """The smallest two-sided p-value an exact sign or sign-flip test can give with n values: 2^(1-n)."""
    n = int(n)
    return math.nan if n < 1 else min(1.0, 2.0 ** (1 - n))


def t_test_p(values: Sequence[float], mu: float = 0.0, alternative: str = "two-sided") -> float:
    """One-sample Student t-test of mean(values) == mu (NaNs dropped): `alternative` "two-sided", "greater"
    (H1: mean > mu) or "less". NaN when n < 2. Zero spread: 0 when the mean lies on the alternative's side of mu,
    else 1 (scipy gives NaN there)."""
    from scipy import stats

    if alternative not in ("two-sided", "greater", "less"):
        raise UserError(f"t-test: alternative must be two-sided, greater or less, got {alternative!r}")
    x = _finite(values)
    n = int(x.size)
    if n < 2:
        return math.nan
    if np.ptp(x) == 0.0:  # every value equal (the computed sd may be a rounding error above 0)
        mean = float(x.mean())
        side = {"two-sided": mean != mu, "greater": mean > mu, "less": mean < mu}[alternative]
        return 0.0 if side else 1.0
    with _no_precision_warning():
        return float(stats.ttest_1samp(x, float(mu), alternative=alternative).pvalue)


def holm(p_values: Sequence[float]) -> np.ndarray:
    """Holm-Bonferroni step-down adjusted p-values, in the input order. With the m finite p-values sorted
    p_(1) <= ... <= p_(m): adj_(i) = max over j <= i of min(1, (m - j + 1) p_(j)). NaN entries stay NaN and
    do not count in m (a claim that could not be tested is not in the family).

    Hand-written: scipy has no Holm (false_discovery_control is Benjamini-Hochberg/-Yekutieli), and
    statsmodels' multipletests is only a dev dependency (tests/test_stats.py compares the two)."""
    p = np.asarray(p_values, dtype=float).ravel()
    out = np.full(p.shape, math.nan)
    ok = np.flatnonzero(np.isfinite(p))
    if ok.size == 0:
        return out
    if np.any((p[ok] < 0) | (p[ok] > 1)):
        raise UserError(f"Holm: p-values must lie in [0, 1], got {p[ok].tolist()}")
    m = ok.size
    order = ok[np.argsort(p[ok], kind="stable")]
    scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])
    out[order] = np.maximum.accumulate(scaled)
    return out


@dataclass(frozen=True)
class Tost:
    """Two one-sided t-tests of |mean| < margin: p_lower of H0 mean <= -margin, p_upper of H0 mean >= +margin,
    p = max of the two; [low, high] the (1 - 2 alpha) t-interval that decides (within +-margin <=> p < alpha)."""

    p: float
    p_lower: float
    p_upper: float
    low: float
    high: float
    n: int


def tost(values: Sequence[float], margin: float, alpha: float = 0.05) -> Tost:
    """Equivalence test of the mean of `values` (NaNs dropped) against +-margin at `alpha` (TOST). NaN p and
    bounds when n < 2."""
    margin = float(margin)
    if not (math.isfinite(margin) and margin >= 0):
        raise UserError(f"TOST: margin must be a finite number >= 0, got {margin!r}")
    if not 0.0 < float(alpha) < 0.5:
        raise UserError(f"TOST: alpha must be in (0, 0.5), got {alpha!r}")
    iv = t_interval(values, 1.0 - 2.0 * float(alpha))
    lower = t_test_p(values, -margin, "greater")
    upper = t_test_p(values, margin, "less")
    return Tost(max(lower, upper), lower, upper, iv.low, iv.high, iv.n)


# ---------------------------------------------------------------------------------------- verdict
def verdict(low: float, high: float, sign: int, margin: float, p: float = math.nan, alpha: float = 0.05) -> str:
    """The decision on a claim from an interval [low, high] of its effect.

    Directional claim (sign +1: effect > 0 predicted; -1: effect < 0), [low, high] the two-sided (1 - alpha)
    interval and `p` its test's p-value (Holm-adjusted for a claim of the core family):
      interval entirely on the side of 0 opposite the prediction -> "contradicted";
      interval entirely within (-margin, +margin)                  -> "contradicted" (the effect is negligible);
      p < alpha and the interval's near end beyond the margin on
      the predicted side (low > +margin, or high < -margin)        -> "holds" (a meaningful effect, not only a
                                                                      non-zero one);
      else                                                         -> "inconclusive".
    Claim of no effect (sign 0), [low, high] the (1 - 2 alpha) interval of the TOST (`tost`; p unused):
      interval entirely within (-margin, +margin)                  -> "holds" (both one-sided p < alpha);
      interval entirely beyond the margin (low > +margin or
      high < -margin)                                              -> "contradicted";
      else                                                         -> "inconclusive".
    An undefined interval (NaN bounds, e.g. n < 2) is "inconclusive"."""
    if sign not in (-1, 0, 1):
        raise UserError(f"verdict: sign must be -1, 0 or +1, got {sign!r}")
    margin = float(margin)
    if not (math.isfinite(margin) and margin >= 0):
        raise UserError(f"verdict: margin must be a finite number >= 0, got {margin!r}")
    low, high = float(low), float(high)
    if not (math.isfinite(low) and math.isfinite(high)):
        return "inconclusive"
    if low > high:
        raise UserError(f"verdict: interval bounds out of order ({low}, {high})")
    negligible = -margin < low and high < margin
    if sign == 0:
        if negligible:
            return "holds"
        return "contradicted" if (low > margin or high < -margin) else "inconclusive"
    if (sign > 0 and high < 0) or (sign < 0 and low > 0) or negligible:
        return "contradicted"
    meaningful = low > margin if sign > 0 else high < -margin
    return "holds" if meaningful and float(p) < float(alpha) else "inconclusive"


# --------------------------------------------------------------------------------- horizon statistic
def horizon_stat(
    training_scores: pd.DataFrame, runs: Iterable[str] | None, k: int, upto: int | None = None
) -> pd.DataFrame:
    """Per run: median symmetry and directionality over layers AND the run's last `k` snapshot steps
    (all (layer, step) values pooled; summed rows, head == "all", where a head column exists).
    `upto`: only snapshots at steps <= upto count (a common horizon for runs of different lengths).

    `runs`: the runs to summarize (None = every run in the table); a run without rows is a UserError.
    A run with fewer than k snapshots uses all of them (see `steps_used`). Columns: run, size, dataset,
    objective, init, seed, symmetry, directionality, steps_used ("s1,s2,..."), n_steps, n_values."""
    k = int(k)
    if k < 1:
        raise UserError(f"horizon statistic: the number of snapshots k must be >= 1, got {k}")
    s = training_scores
    if "head" in s.columns:
        s = s[s["head"].astype(str) == "all"]
    missing = [c for c in ["run", *RUN_KEYS, "step", "layer", *SCORES] if c not in s.columns]
    if missing:
        raise UserError(f"training score table: missing column(s) {', '.join(missing)}")
    if runs is not None:
        runs = [runs] if isinstance(runs, str) else list(runs)
        absent = sorted(set(runs) - set(s["run"].astype(str)))
        if absent:
            raise UserError(f"horizon statistic: no training scores for run(s) {', '.join(absent)}")
        s = s[s["run"].isin(runs)]
    if upto is not None:
        early = s.groupby("run")["step"].min()
        late = sorted(early[early.astype(int) > int(upto)].index)
        if late:
            raise UserError(
                f"horizon statistic: run(s) {', '.join(late)} have no snapshot at or before step {int(upto)}"
            )
        s = s[s["step"].astype(int) <= int(upto)]
    rows = []
    for _, g in s.groupby("run", sort=True):
        steps = np.sort(g["step"].astype(int).unique())[-k:]
        last = g[g["step"].astype(int).isin(steps)]
        row = {key: g[key].iloc[0] for key in ["run", *RUN_KEYS]}
        for v in SCORES:
            row[v] = float(np.median(last[v].to_numpy(dtype=float)))
        row.update(steps_used=",".join(str(int(x)) for x in steps), n_steps=int(steps.size), n_values=int(len(last)))
        rows.append(row)
    cols = ["run", *RUN_KEYS, *SCORES, "steps_used", "n_steps", "n_values"]
    return pd.DataFrame(rows, columns=cols)


# ------------------------------------------------------------------------------------------ speed-up
def first_reaching_step(steps: Sequence[float], losses: Sequence[float], target: float) -> float:
    """The FIRST step at which the loss curve reaches `target` (loss <= target), linearly interpolated
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


def common_target(curves: Iterable[Sequence[float]]) -> float:
    """The loss L* that every curve reaches: the maximum over the curves of their minimum loss.
    `curves` are the held-out loss values of each compared run (any order)."""
    mins = []
    for c in curves:
        y = _finite(c)
        if y.size == 0:
            raise UserError("common target: a loss curve without finite values")
        mins.append(float(y.min()))
    if not mins:
        raise UserError("common target: no loss curves")
    return max(mins)


def signed_speedup(
    baseline_steps: Sequence[float],
    baseline_losses: Sequence[float],
    treatment_steps: Sequence[float],
    treatment_losses: Sequence[float],
    target: float | None = None,
) -> float:
    """1 - s*/S: S = the baseline's first step reaching `target`, s* = the treatment's (first crossing,
    linear interpolation). Positive = the treatment gets there sooner, negative = later. `target` None =
    common_target of the two curves. Both curves must reach the target, and S must be > 0."""
    if target is None:
        target = common_target([baseline_losses, treatment_losses])
    big_s = first_reaching_step(baseline_steps, baseline_losses, target)
    s_star = first_reaching_step(treatment_steps, treatment_losses, target)
    if math.isnan(big_s) or math.isnan(s_star):
        who = "baseline" if math.isnan(big_s) else "treatment"
        raise UserError(
            f"signed speed-up: the {who} curve never reaches the target {target:.4g}; "
            "use a common target that every compared run reaches (common_target)"
        )
    if big_s <= 0:
        raise UserError(
            f"signed speed-up: the baseline is at the target {target:.4g} from its first "
            "evaluation (S = 0); the speed-up is undefined"
        )
    return 1.0 - s_star / big_s


def speedup_at(
    baseline_steps: Sequence[float],
    baseline_losses: Sequence[float],
    treatment_steps: Sequence[float],
    treatment_losses: Sequence[float],
    target: float,
) -> tuple[float, float, float]:
    """(S, s*, 1 - s*/S) at `target` (first crossings, linear interpolation, as signed_speedup), with NaN in
    place of an error: the speed-up is NaN when either curve never reaches the target or when S = 0."""
    big_s = first_reaching_step(baseline_steps, baseline_losses, target)
    s_star = first_reaching_step(treatment_steps, treatment_losses, target)
    ok = math.isfinite(big_s) and math.isfinite(s_star) and big_s > 0
    return big_s, s_star, (1.0 - s_star / big_s) if ok else math.nan


def steps_saved_share(
    baseline_steps: Sequence[float],
    baseline_losses: Sequence[float],
    treatment_steps: Sequence[float],
    treatment_losses: Sequence[float],
) -> tuple[float, float, float]:
    """The paper's speed-up (its Table 1): the share of steps saved to reach the baseline's final loss,
    (S_base - s_treat) / S_base, S_base = the baseline's last step, s_treat = the treatment's first step at the
    baseline's loss there (linear interpolation). Returns (target, s_treat, share); share NaN when the treatment
    never reaches the target (the paper's "none")."""
    s = np.asarray(baseline_steps, dtype=float)
    y = np.asarray(baseline_losses, dtype=float)
    if s.size == 0 or s.shape != y.shape:
        raise UserError("steps saved: the baseline curve needs steps and losses of equal non-zero length")
    big_s, target = float(s[-1]), float(y[-1])
    if big_s <= 0:
        raise UserError("steps saved: the baseline's last step must be > 0")
    s_treat = first_reaching_step(treatment_steps, treatment_losses, target)
    return target, s_treat, (big_s - s_treat) / big_s if math.isfinite(s_treat) else math.nan
