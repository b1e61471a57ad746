"""The pre-registration's power simulation (analysis.power) against independent computations: the noncentral-t
power of one claim, the rule functions of analysis.stats on the same draws, and the chi-square bound of an SD."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from attention_geometry.analysis.power import PlannedClaim, _holm_rows, family_power, sd_upper_bound
from attention_geometry.analysis.stats import holm, t_interval, t_test_p, verdict
from attention_geometry.errors import UserError


def _noncentral_power(effect, sd, margin, n, level=0.95):
    """P(mean - t * se > margin) for one claim alone; with margin > 0 that event implies p < alpha."""
    tq = stats.t.ppf(1 - (1 - level) / 2, n - 1)
    # mean - tq*se > margin  <=>  (mean - margin)/se > tq: a noncentral t with ncp (effect - margin)/(sd/sqrt(n))
    return float(stats.nct.sf(tq, n - 1, (effect - margin) / (sd / math.sqrt(n))))


@pytest.mark.parametrize("n", [4, 8, 14])
def test_a_family_of_one_has_the_noncentral_t_power(n):
    got = family_power({"x": PlannedClaim(0.2, 0.19, 1, 0.05)}, n, reps=40000, seed=1)["x"]
    want = _noncentral_power(0.2, 0.19, 0.05, n)
    assert abs(got - want) < 4 * math.sqrt(want * (1 - want) / 40000) + 1e-3


def test_a_negative_prediction_mirrors_a_positive_one():
    up = family_power({"x": PlannedClaim(0.3, 0.25, 1, 0.05)}, 8, reps=20000, seed=3)["x"]
    down = family_power({"x": PlannedClaim(-0.3, 0.25, -1, 0.05)}, 8, reps=20000, seed=3)["x"]
    assert abs(up - down) < 0.02


def test_holm_rows_equal_the_rule_functions_holm():
    rng = np.random.default_rng(0)
    p = rng.uniform(size=(50, 5)) ** 3
    got = _holm_rows(p)
    for i in range(p.shape[0]):
        np.testing.assert_allclose(got[i], holm(p[i]), rtol=0, atol=1e-12)


def test_the_simulated_decision_is_the_claims_rule():
    """Replays the simulation's draws through stats.t_interval / t_test_p / holm / verdict."""
    claims = {"a": PlannedClaim(0.25, 0.2, 1, 0.05), "b": PlannedClaim(-0.3, 0.3, -1, 0.05)}
    n, reps = 6, 300
    got = family_power(claims, n, reps=reps, seed=7)
    rng = np.random.default_rng(7)
    draws = {k: rng.normal(c.effect, c.sd, size=(reps, n)) for k, c in claims.items()}
    holds = {k: 0 for k in claims}
    for r in range(reps):
        ivs = {k: t_interval(draws[k][r], 0.95) for k in claims}
        p = holm([t_test_p(draws[k][r]) for k in claims])
        for j, (k, c) in enumerate(claims.items()):
            holds[k] += verdict(ivs[k].low, ivs[k].high, c.sign, c.margin, p[j], 0.05) == "holds"
    for k in claims:
        assert got[k] == pytest.approx(holds[k] / reps, abs=1e-12)


def test_more_claims_in_the_family_never_raise_power():
    a = PlannedClaim(0.2, 0.15, 1, 0.05)
    weak = PlannedClaim(0.05, 0.3, 1, 0.05)
    alone = family_power({"a": a, "w": weak}, 4, reps=20000, seed=2, family=["a"])["a"]
    together = family_power({"a": a, "w": weak}, 4, reps=20000, seed=2, family=["a", "w"])["a"]
    assert together <= alone + 1e-12 and alone - together > 0.01


def test_sd_upper_bound_is_the_chi_square_bound():
    # 80 % upper bound from 6 units: sd * sqrt(5 / chi2.ppf(0.2, 5)), chi2.ppf(0.2, 5) = 2.3425...
    assert sd_upper_bound(1.0, 6) == pytest.approx(math.sqrt(5 / 2.342534), rel=1e-5)
    with pytest.raises(UserError):
        sd_upper_bound(1.0, 1)
    with pytest.raises(UserError):
        family_power({"x": PlannedClaim(0.1, 0.1, 1, 0.0)}, 8, family=["y"])
