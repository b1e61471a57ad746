"""Sample size of a pre-registered study: the probability that each claim holds under the claims' own rule
(`stats.verdict` on the two-sided t-interval, the two-sided t-test p Holm-adjusted within the claim's family),
simulated for the whole family at once, with per-seed effects drawn from normal distributions.

`family_power` is what docs/preregistration-2.md's power table is computed with; `tests/test_power.py` checks it
against the noncentral-t power of a single claim (a family of one) and against the rule functions themselves.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from attention_geometry.errors import UserError

__all__ = ["PlannedClaim", "family_power", "sd_upper_bound"]


@dataclass(frozen=True)
class PlannedClaim:
    """One directional claim as planned: its expected per-seed effect, the per-seed SD, the predicted sign
    (+1 / -1) and its margin (the smallest effect of interest)."""

    effect: float
    sd: float
    sign: int
    margin: float

    def __post_init__(self) -> None:
        if self.sign not in (-1, 1):
            raise UserError(f"planned claim: sign must be -1 or +1, got {self.sign!r}")
        if not self.sd > 0:
            raise UserError(f"planned claim: sd must be > 0, got {self.sd!r}")


def sd_upper_bound(sd: float, n: int, level: float = 0.8) -> float:
    """The upper one-sided `level` confidence bound of a normal SD estimated as `sd` from `n` units:
    sd * sqrt((n - 1) / chi2_{1 - level}(n - 1))."""
    from scipy import stats

    if n < 2:
        raise UserError(f"sd_upper_bound: need n >= 2, got {n}")
    return float(sd * np.sqrt((n - 1) / stats.chi2.ppf(1.0 - level, n - 1)))


def _holm_rows(p: np.ndarray) -> np.ndarray:
    """Holm-adjusted p-values of each row of p [reps, m] (step-down, monotone, capped at 1)."""
    reps, m = p.shape
    order = np.argsort(p, axis=1)
    ps = np.take_along_axis(p, order, axis=1)
    adj = np.maximum.accumulate(ps * (m - np.arange(m)), axis=1).clip(max=1.0)
    out = np.empty_like(adj)
    np.put_along_axis(out, order, adj, axis=1)
    return out


def family_power(
    claims: Mapping[str, PlannedClaim],
    n: int,
    *,
    level: float = 0.95,
    reps: int = 20000,
    seed: int = 0,
    family: Sequence[str] | None = None,
) -> dict[str, float]:
    """P(claim holds) for each claim when `n` seeds are drawn: per seed each claim's effect ~ N(effect, sd),
    independent across claims (a pessimistic choice for Holm: correlated p-values would help). `family`: the
    claims Holm-adjusted together (default: all of `claims`); the others are tested alone. A claim holds when
    its p (Holm-adjusted within the family) < alpha = 1 - level and the near end of its two-sided `level`
    t-interval lies beyond its margin on the predicted side."""
    from scipy import stats

    if n < 2:
        raise UserError(f"family_power: need n >= 2 seeds, got {n}")
    names = list(claims)
    fam = list(names if family is None else family)
    unknown = sorted(set(fam) - set(names))
    if unknown:
        raise UserError(f"family_power: family names unknown claims {unknown}")
    rng = np.random.default_rng(seed)
    alpha = 1.0 - level
    tq = stats.t.ppf(1.0 - alpha / 2.0, n - 1)
    lows, highs, ps = {}, {}, {}
    for name in names:
        c = claims[name]
        x = rng.normal(c.effect, c.sd, size=(reps, n))
        mean, se = x.mean(axis=1), x.std(axis=1, ddof=1) / np.sqrt(n)
        lows[name], highs[name] = mean - tq * se, mean + tq * se
        ps[name] = 2.0 * stats.t.sf(np.abs(mean / se), n - 1)
    if fam:
        adj = _holm_rows(np.column_stack([ps[f] for f in fam]))
        for j, f in enumerate(fam):
            ps[f] = adj[:, j]
    out = {}
    for name in names:
        c = claims[name]
        beyond = lows[name] > c.margin if c.sign > 0 else highs[name] < -c.margin
        out[name] = float(np.mean(beyond & (ps[name] < alpha)))
    return out
