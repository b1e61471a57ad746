"""attention_geometry.analysis.stats against independent computations: hand formulas with tabulated quantiles,
statsmodels (its own t-test code; stats.py uses scipy's), brute-force enumeration, hand cases."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from helpers import run_keys
from statsmodels.stats import weightstats as smw

from attention_geometry.analysis import stats as S
from attention_geometry.errors import UserError

# ------------------------------------------------------------------------------------------ intervals
# Student t quantiles t_{q, 5} from a printed table (not computed by the library under test)
T5 = {0.8: 1.475884049, 0.95: 2.570581836, 0.99: 4.032142984}


@pytest.mark.parametrize("level", [0.8, 0.95, 0.99])
def test_t_interval_by_hand_and_statsmodels(level):
    x = np.random.default_rng(1).normal(0.4, 1.5, size=6)
    iv = S.t_interval(x, level)
    half = T5[level] * np.std(x, ddof=1) / math.sqrt(6)
    assert (iv.estimate, iv.low, iv.high, iv.n) == pytest.approx((x.mean(), x.mean() - half, x.mean() + half, 6))
    low, high = smw.DescrStatsW(x).tconfint_mean(alpha=1 - level)
    assert (iv.low, iv.high) == pytest.approx((low, high))


def test_t_interval_zero_spread_is_zero_width():
    iv = S.t_interval([0.3, 0.3, 0.3])
    assert (iv.estimate, iv.low, iv.high, iv.n) == pytest.approx((0.3, 0.3, 0.3, 3))


def test_t_interval_small_n_and_nans():
    iv = S.t_interval([2.0], 0.95)
    assert iv.estimate == 2.0 and math.isnan(iv.low) and math.isnan(iv.high) and iv.n == 1
    assert S.t_interval([]).n == 0 and math.isnan(S.t_interval([]).estimate)
    assert S.t_interval([np.nan, 1.0, 3.0]).n == 2
    with pytest.raises(UserError, match="level"):
        S.t_interval([1, 2], 0)


@pytest.mark.parametrize("level", [0.9, 0.95])
def test_paired_interval_matches_statsmodels(level):
    rng = np.random.default_rng(2)
    a = rng.normal(1.0, 1.0, 5)
    b = a - 0.3 + rng.normal(0, 0.2, 5)
    iv = S.paired_interval(a, b, level)
    low, high = smw.DescrStatsW(a - b).tconfint_mean(alpha=1 - level)
    assert (iv.estimate, iv.low, iv.high, iv.n) == pytest.approx((np.mean(a - b), low, high, 5))


def test_paired_interval_drops_incomplete_pairs_and_checks_length():
    iv = S.paired_interval([1.0, 2.0, np.nan, 4.0], [0.0, 1.5, 1.0, 3.0], 0.95)
    # pairs (1, 0), (2, 1.5), (4, 3): differences 1, 0.5, 1
    assert iv.n == 3 and iv.estimate == pytest.approx(2.5 / 3)
    with pytest.raises(UserError, match="same length"):
        S.paired_interval([1, 2, 3], [1, 2])


def test_welch_interval_and_p_match_statsmodels():
    rng = np.random.default_rng(5)
    a, b = rng.normal(1.0, 1.0, 7), rng.normal(0.2, 2.5, 5)
    iv = S.welch_interval(a, b, 0.95)
    cm = smw.CompareMeans.from_data(a, b)
    low, high = cm.tconfint_diff(alpha=0.05, usevar="unequal")
    assert (iv.estimate, iv.low, iv.high, iv.n) == pytest.approx((a.mean() - b.mean(), low, high, 12))
    assert S.welch_p(a, b) == pytest.approx(cm.ttest_ind(usevar="unequal")[1])
    assert math.isnan(S.welch_p([1.0], [1.0, 2.0]))


def test_welch_interval_by_hand():
    # equal sizes and variances: Welch's dof = 2 (n - 1) = 4, se^2 = 1/3 + 1/3; t_{0.975, 4} = 2.776445105 (table)
    iv = S.welch_interval([1.0, 2.0, 3.0], [5.0, 6.0, 7.0], 0.95)
    half = 2.776445105 * math.sqrt(2 / 3)
    assert (iv.estimate, iv.low, iv.high, iv.n) == pytest.approx((-4.0, -4.0 - half, -4.0 + half, 6))
    # one group without spread: se^2 = 1/3, dof = (1/3)^2 / ((1/3)^2 / 2) = 2; t_{0.975, 2} = 4.302652730 (table)
    iv = S.welch_interval([1.0, 2.0, 3.0], [0.5, 0.5, 0.5], 0.95)
    half = 4.302652730 * math.sqrt(1 / 3)
    assert (iv.estimate, iv.low, iv.high) == pytest.approx((1.5, 1.5 - half, 1.5 + half))
    # no spread in either group: a zero-width interval at the difference
    iv0 = S.welch_interval([1.0, 1.0], [0.5, 0.5, 0.5])
    assert (iv0.estimate, iv0.low, iv0.high) == pytest.approx((0.5, 0.5, 0.5))
    assert math.isnan(S.welch_interval([1.0], [1.0, 2.0]).low)


# ------------------------------------------------------------------------------------ exact p-values
def _brute_sign_flip(d):
    """All sign vectors from itertools.product; two-sided on the absolute mean."""
    d = [float(v) for v in d]
    obs = abs(sum(d) / len(d))
    hits = 0
    total = 0
    for signs in itertools.product((1.0, -1.0), repeat=len(d)):
        m = abs(sum(s * v for s, v in zip(signs, d)) / len(d))
        hits += m >= obs - 1e-12
        total += 1
    return hits / total


def test_sign_flip_p_hand_cases():
    # [1, 2, 3]: only all-plus and all-minus reach |sum| = 6 -> 2 / 8
    assert S.sign_flip_p([1, 2, 3]) == pytest.approx(0.25)
    # [3, 1]: sums +-4, +-2; |sum| >= 4 for 2 of 4 flips
    assert S.sign_flip_p([3, 1]) == pytest.approx(0.5)
    # mean 0: every flip is at least as extreme
    assert S.sign_flip_p([1, -1]) == pytest.approx(1.0)
    # one value: both flips have the same |mean|
    assert S.sign_flip_p([0.7]) == pytest.approx(1.0)
    # ties from equal magnitudes: [1, 1, -1] sum 1; flips with |sum| >= 1 are all 8 (sums +-1, +-3)
    assert S.sign_flip_p([1, 1, -1]) == pytest.approx(1.0)
    assert math.isnan(S.sign_flip_p([]))
    assert S.sign_flip_p([1.0, np.nan, 2.0, 3.0]) == pytest.approx(0.25)  # NaN dropped


@pytest.mark.parametrize("n", [2, 3, 4, 5, 7, 9])
def test_sign_flip_p_matches_brute_force(n):
    rng = np.random.default_rng(n)
    for _ in range(5):
        d = rng.normal(0.3, 1.0, n)
        assert S.sign_flip_p(d) == pytest.approx(_brute_sign_flip(d))


def test_sign_flip_p_block_path_matches_matrix_enumeration():
    # n > 16 uses the blocked enumeration; compare with a full sign matrix built differently
    d = np.random.default_rng(7).normal(0.2, 1.0, 17)
    signs = np.array(list(itertools.product((1, -1), repeat=17)), dtype=float)
    sums = np.abs(signs @ d)
    expected = float(np.mean(sums >= abs(d.sum()) - 1e-9))
    assert S.sign_flip_p(d) == pytest.approx(expected)
    with pytest.raises(UserError, match="at most"):
        S.sign_flip_p(np.ones(S.MAX_SIGN_FLIP_N + 1))


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_p_floor_is_the_smallest_exact_p(n):
    assert S.p_floor(n) == pytest.approx(2.0 ** (1 - n))
    # all differences positive and distinct: only the observed flip and its mirror are as extreme
    assert S.sign_flip_p(np.arange(1.0, n + 1)) == pytest.approx(S.p_floor(n))
    assert math.isnan(S.p_floor(0))


# --------------------------------------------------------------------------------- t-test, Holm, TOST
SM_ALTERNATIVE = {"two-sided": "two-sided", "greater": "larger", "less": "smaller"}


@pytest.mark.parametrize("alternative", ["two-sided", "greater", "less"])
@pytest.mark.parametrize("mu", [0.0, 0.3, -0.2])
def test_t_test_p_matches_statsmodels(alternative, mu):
    x = np.random.default_rng(3).normal(0.2, 0.5, size=5)
    expected = smw.DescrStatsW(x).ttest_mean(mu, alternative=SM_ALTERNATIVE[alternative])[1]
    assert S.t_test_p(x, mu, alternative) == pytest.approx(expected)


def test_t_test_p_at_tabulated_quantiles():
    # values with mean m and sd s: t = m / (s / sqrt(6)) set to the table's t_{0.975, 5}, t_{0.9, 5}
    base = np.array([-1.0, 1.0, -1.0, 1.0, 0.0, 0.0])
    se = np.std(base, ddof=1) / math.sqrt(6)
    for q, level in ((0.975, 0.95), (0.9, 0.8)):
        x = base + T5[level] * se
        assert S.t_test_p(x) == pytest.approx(2 * (1 - q), rel=1e-6)
        assert S.t_test_p(x, 0.0, "greater") == pytest.approx(1 - q, rel=1e-6)
        assert S.t_test_p(x, 0.0, "less") == pytest.approx(q, rel=1e-6)


def test_t_test_p_small_n_and_zero_spread():
    assert math.isnan(S.t_test_p([1.0]))
    assert S.t_test_p([0.2, 0.2, 0.2]) == 0.0 and S.t_test_p([0.0, 0.0]) == 1.0
    assert S.t_test_p([0.2, 0.2], 0.5, "greater") == 1.0 and S.t_test_p([0.2, 0.2], 0.5, "less") == 0.0
    assert S.t_test_p([1.0, np.nan, 2.0, 4.0]) == pytest.approx(S.t_test_p([1.0, 2.0, 4.0]))
    assert S.t_test_p([1.0, np.nan, 2.0, 4.0]) == pytest.approx(smw.DescrStatsW([1.0, 2.0, 4.0]).ttest_mean(0)[1])
    with pytest.raises(UserError, match="alternative"):
        S.t_test_p([1, 2], 0, "both")


def _holm_by_closed_testing(p):
    """Holm as the closed test of Bonferroni-tested intersections (an independent definition): the adjusted p
    of H_i is the largest, over every subset S of hypotheses containing i, of min(1, |S| * min_{j in S} p_j)."""
    m = len(p)
    out = []
    for i in range(m):
        worst = 0.0
        for k in range(1, m + 1):
            for sub in itertools.combinations(range(m), k):
                if i in sub:
                    worst = max(worst, min(1.0, k * min(p[j] for j in sub)))
        out.append(worst)
    return out


def test_holm_hand_worked():
    # sorted 0.01, 0.02, 0.03, 0.04 times 4, 3, 2, 1: 0.04, 0.06, 0.06, 0.04 -> running max 0.04, 0.06, 0.06, 0.06
    assert S.holm([0.03, 0.01, 0.04, 0.02]).tolist() == pytest.approx([0.06, 0.04, 0.06, 0.06])
    # capped at 1; NaN stays NaN and is not counted: m = 2
    out = S.holm([0.6, np.nan, 0.2])
    assert out[0] == pytest.approx(0.6) and math.isnan(out[1]) and out[2] == pytest.approx(0.4)
    assert S.holm([0.7, 0.8]).tolist() == pytest.approx([1.0, 1.0])
    assert S.holm([]).size == 0 and math.isnan(S.holm([np.nan])[0])
    with pytest.raises(UserError, match="Holm"):
        S.holm([1.5])


@pytest.mark.parametrize("seed", range(6))
def test_holm_matches_closed_testing(seed):
    rng = np.random.default_rng(seed)
    p = rng.uniform(0, 0.2, size=int(rng.integers(1, 8))).tolist()
    p[0] = p[-1]  # ties
    assert S.holm(p).tolist() == pytest.approx(_holm_by_closed_testing(p))


def test_holm_matches_statsmodels():
    multitest = pytest.importorskip("statsmodels.stats.multitest")
    p = np.random.default_rng(11).uniform(0, 0.1, size=7)
    assert S.holm(p) == pytest.approx(multitest.multipletests(p, method="holm")[1])


@pytest.mark.parametrize("margin", [0.05, 0.2])
def test_tost_matches_statsmodels_ttost_mean(margin):
    x = np.random.default_rng(4).normal(0.03, 0.05, size=6)
    t = S.tost(x, margin, alpha=0.05)
    d = smw.DescrStatsW(x)
    p, (_, lower, _), (_, upper, _) = d.ttost_mean(-margin, margin)
    assert (t.p_lower, t.p_upper, t.p) == pytest.approx((lower, upper, p))
    low, high = d.tconfint_mean(alpha=0.10)
    assert (t.low, t.high, t.n) == pytest.approx((low, high, 6))
    # the 90 % interval within +-margin exactly when both one-sided p < 0.05
    assert (-margin < t.low and t.high < margin) == (t.p < 0.05)


def test_tost_arguments():
    assert math.isnan(S.tost([0.1], 0.05).p)
    with pytest.raises(UserError, match="margin"):
        S.tost([0.1, 0.2], -1)
    with pytest.raises(UserError, match="alpha"):
        S.tost([0.1, 0.2], 0.1, alpha=0.5)


# ------------------------------------------------------------------------------------------- verdict
@pytest.mark.parametrize(
    "low,high,sign,p,expected",
    [
        # directional, predicted > 0; margin 0.05, alpha 0.05
        (0.10, 0.30, 1, 0.01, "holds"),  # significant and the near end clears the margin
        (0.10, 0.30, 1, 0.06, "inconclusive"),  # the near end clears the margin but p (e.g. Holm) >= alpha
        (0.02, 0.20, 1, 0.01, "inconclusive"),  # non-zero but not shown to be meaningful
        (0.05, 0.20, 1, 0.01, "inconclusive"),  # the near end on the margin: not beyond it
        (-0.30, -0.10, 1, 0.01, "contradicted"),  # the other side of 0
        (-0.10, 0.30, 1, 0.50, "inconclusive"),
        (-0.04, 0.04, 1, 0.90, "contradicted"),  # negligible: entirely within +-margin
        (0.01, 0.04, 1, 0.01, "contradicted"),  # beyond 0 but negligible
        (-0.05, 0.04, 1, 0.50, "inconclusive"),  # touches -margin: not strictly within
        (0.10, 0.30, 1, math.nan, "inconclusive"),  # no p: cannot hold
        # directional, predicted < 0 (mirror)
        (-0.30, -0.10, -1, 0.01, "holds"),
        (-0.30, -0.06, -1, 0.2, "inconclusive"),
        (-0.30, -0.02, -1, 0.01, "inconclusive"),
        (0.10, 0.30, -1, 0.01, "contradicted"),
        (-0.30, 0.10, -1, 0.3, "inconclusive"),
        (-0.04, -0.01, -1, 0.01, "contradicted"),
        # claim of no effect: [low, high] the (1 - 2 alpha) interval; p unused
        (-0.04, 0.04, 0, math.nan, "holds"),
        (0.01, 0.03, 0, math.nan, "holds"),  # excludes 0 but within the margin: no effect of interest
        (0.06, 0.20, 0, math.nan, "contradicted"),  # entirely beyond +margin
        (-0.20, -0.06, 0, math.nan, "contradicted"),  # entirely beyond -margin
        (0.02, 0.20, 0, math.nan, "inconclusive"),  # excludes 0, reaches beyond the margin: not decided
        (-0.02, 0.20, 0, math.nan, "inconclusive"),
        (math.nan, math.nan, 1, 0.01, "inconclusive"),
        (math.nan, math.nan, 0, math.nan, "inconclusive"),
    ],
)
def test_verdict_rule(low, high, sign, p, expected):
    assert S.verdict(low, high, sign, 0.05, p, 0.05) == expected


def test_verdict_bad_arguments():
    with pytest.raises(UserError, match="sign"):
        S.verdict(0.1, 0.2, 2, 0.05)
    with pytest.raises(UserError, match="margin"):
        S.verdict(0.1, 0.2, 1, -0.01)
    with pytest.raises(UserError, match="order"):
        S.verdict(0.3, 0.2, 1, 0.05)
    # margin 0: "beyond the margin" is "beyond 0"
    assert S.verdict(0.001, 0.002, 1, 0.0, 0.01, 0.05) == "holds"


# ---------------------------------------------------------------------------------- horizon statistic
def _scores():
    rows = []
    spec = {
        "r-enc-s0": ("encoder", 0, {0: [0.0, 0.0], 100: [0.1, 0.3], 200: [0.5, 0.7], 300: [0.2, 0.9]}),
        "r-dec-s0": ("decoder", 0, {0: [0.0, 0.0], 100: [0.05, 0.15]}),
    }
    for run, (obj, seed, by_step) in spec.items():
        for step, vals in by_step.items():
            for layer, v in enumerate(vals):
                for head in ("all", "0"):
                    rows.append(
                        dict(
                            **run_keys(run, obj, "standard", seed, dataset="w"),
                            step=step,
                            layer=layer,
                            head=head,
                            symmetry=v if head == "all" else 99.0,
                            directionality=-v if head == "all" else 99.0,
                        )
                    )
    return pd.DataFrame(rows)


def test_horizon_stat_by_hand():
    h = S.horizon_stat(_scores(), ["r-enc-s0", "r-dec-s0"], 2).set_index("run")
    # encoder, last 2 steps (200, 300): values 0.5, 0.7, 0.2, 0.9 -> median (0.5 + 0.7) / 2 = 0.6
    assert h.loc["r-enc-s0", "symmetry"] == pytest.approx(0.6)
    assert h.loc["r-enc-s0", "directionality"] == pytest.approx(-0.6)
    assert h.loc["r-enc-s0", "steps_used"] == "200,300" and h.loc["r-enc-s0", "n_values"] == 4
    # decoder: both of its 2 snapshots: 0, 0, 0.05, 0.15 -> 0.025
    assert h.loc["r-dec-s0", "symmetry"] == pytest.approx(0.025)
    # k = 1: the last snapshot only
    assert S.horizon_stat(_scores(), ["r-enc-s0"], 1)["symmetry"].iloc[0] == pytest.approx(0.55)
    # k larger than the number of snapshots: all of them
    h9 = S.horizon_stat(_scores(), ["r-dec-s0"], 9)
    assert h9["n_steps"].iloc[0] == 2 and h9["symmetry"].iloc[0] == pytest.approx(0.025)
    assert len(S.horizon_stat(_scores(), None, 1)) == 2
    assert list(h.columns[:7]) == ["size", "dataset", "objective", "init", "seed", "symmetry", "directionality"]


def test_horizon_stat_common_horizon():
    # upto 200: the encoder's last 2 snapshots at or before step 200 are 100, 200: 0.1, 0.3, 0.5, 0.7 -> 0.4
    h = S.horizon_stat(_scores(), ["r-enc-s0", "r-dec-s0"], 2, upto=200).set_index("run")
    assert h.loc["r-enc-s0", "symmetry"] == pytest.approx(0.4)
    assert h.loc["r-enc-s0", "steps_used"] == "100,200"
    assert h.loc["r-dec-s0", "symmetry"] == pytest.approx(0.025)  # the decoder ends at 100 anyway
    # upto between snapshots: 150 -> the encoder's 100 (and 0 with k = 2): 0, 0, 0.1, 0.3 -> 0.05
    assert S.horizon_stat(_scores(), ["r-enc-s0"], 2, upto=150)["symmetry"].iloc[0] == pytest.approx(0.05)
    with pytest.raises(UserError, match="no snapshot at or before step -1"):
        S.horizon_stat(_scores(), ["r-enc-s0"], 2, upto=-1)


def test_horizon_stat_errors():
    with pytest.raises(UserError, match="no training scores for run"):
        S.horizon_stat(_scores(), ["nope"], 2)
    with pytest.raises(UserError, match="k must be"):
        S.horizon_stat(_scores(), None, 0)
    with pytest.raises(UserError, match="missing column"):
        S.horizon_stat(_scores().drop(columns="layer"), None, 1)


# ------------------------------------------------------------------------------------------ speed-up
STEPS = [0, 100, 200, 300, 400]


def test_first_reaching_step_first_crossing_by_hand():
    loss = [10.0, 6.0, 4.0, 3.0, 2.5]
    assert S.first_reaching_step(STEPS, loss, 3.5) == pytest.approx(250.0)
    assert S.first_reaching_step(STEPS, loss, 4.0) == pytest.approx(200.0)
    assert math.isnan(S.first_reaching_step(STEPS, loss, 2.0))
    assert S.first_reaching_step([0, 10, 20, 30], [5.0, 3.0, 6.0, 1.0], 4.0) == pytest.approx(5.0)
    with pytest.raises(UserError, match="increase"):
        S.first_reaching_step([0, 100, 100], [3, 2, 1], 1.5)


def test_common_target_by_hand():
    assert S.common_target([[5, 3, 2.5], [5, 4, 3.1, 3.2], [9, 2]]) == pytest.approx(3.1)
    with pytest.raises(UserError, match="no loss curves"):
        S.common_target([])


def test_signed_speedup_reached():
    base = [10.0, 6.0, 4.0, 3.0, 2.5]
    treat = [10.0, 5.0, 3.0, 2.5, 2.0]
    # common target max(2.5, 2.0) = 2.5: S = 400, s* = 300
    assert S.signed_speedup(STEPS, base, STEPS, treat) == pytest.approx(0.25)
    # an explicit target 3.5: S = 250, s* = 150 (5 -> 3 between 100 and 200: (5 - 3.5) / 2 = 0.75)
    assert S.signed_speedup(STEPS, base, STEPS, treat, 3.5) == pytest.approx(1 - 175 / 250)


def test_signed_speedup_treatment_never_beats_baseline_is_negative():
    base = [10.0, 6.0, 4.0, 3.0, 2.5]
    treat = [10.0, 8.0, 6.0, 5.0, 4.0]
    # target max(2.5, 4.0) = 4.0: S = 200, s* = 400 -> 1 - 2 = -1
    assert S.signed_speedup(STEPS, base, STEPS, treat) == pytest.approx(-1.0)


def test_signed_speedup_non_monotone_baseline_uses_first_crossing():
    base = [10.0, 3.0, 6.0, 2.0, 2.5]  # dips below 3.5 at ~93, rises, falls again
    treat = [10.0, 5.0, 4.0, 3.0, 2.0]
    big_s = 100 * (10 - 3.5) / (10 - 3.0)
    assert S.signed_speedup(STEPS, base, STEPS, treat, 3.5) == pytest.approx(1 - 250 / big_s)
    # common target max(2.0, 2.0) = 2.0: baseline first reaches it at 300, treatment at 400
    assert S.signed_speedup(STEPS, base, STEPS, treat) == pytest.approx(1 - 400 / 300)


def test_signed_speedup_errors():
    base = [10.0, 6.0, 4.0, 3.0, 2.5]
    with pytest.raises(UserError, match="never reaches"):
        S.signed_speedup(STEPS, base, STEPS, base, 1.0)
    with pytest.raises(UserError, match="S = 0"):
        S.signed_speedup(STEPS, base, STEPS, base, 11.0)


# --------------------------------------------------------------------- speed-up curve and steps saved
def test_speedup_at_returns_nan_instead_of_raising():
    base = [10.0, 6.0, 4.0, 3.0, 2.5]
    assert S.speedup_at(STEPS, base, STEPS, base, 3.5) == pytest.approx((250.0, 250.0, 0.0))
    big_s, s_star, sp = S.speedup_at(STEPS, base, STEPS, base, 1.0)
    assert math.isnan(big_s) and math.isnan(sp)
    assert math.isnan(S.speedup_at(STEPS, base, STEPS, base, 11.0)[2])  # S = 0


def test_speedup_at_with_a_plateau():
    steps = [0, 100, 200, 300, 400, 500]
    base = [10.0, 6.0, 5.0, 5.0, 5.0, 3.0]  # on a plateau at 5 from step 200 to 400
    treat = [10.0, 5.0, 4.0, 3.0, 2.0, 2.0]
    # 5: the baseline reaches it at the plateau's start, 200; the treatment at 100
    assert S.speedup_at(steps, base, steps, treat, 5.0)[2] == pytest.approx(1 - 100 / 200)
    # 4: just below the plateau the baseline needs the drop after it: 400 + 100 * (5 - 4) / (5 - 3) = 450
    assert S.speedup_at(steps, base, steps, treat, 4.0)[:2] == pytest.approx((450.0, 200.0))
    assert S.speedup_at(steps, base, steps, treat, 3.0)[2] == pytest.approx(1 - 300 / 500)
    assert S.speedup_at(steps, base, steps, treat, 6.0)[2] == pytest.approx(1 - 100 * 4 / 5 / 100)
    # a target between evaluations is interpolated: 4.5 -> S = 425, s* = 150
    assert S.speedup_at(steps, base, steps, treat, 4.5) == pytest.approx((425.0, 150.0, 1 - 150 / 425))


def test_speedup_at_a_target_never_reached_is_nan_not_an_error():
    base = [10.0, 6.0, 4.0, 3.0, 2.5]
    treat = [10.0, 8.0, 6.0, 5.0, 4.0]
    big_s, s_star, sp = S.speedup_at(STEPS, base, STEPS, treat, 2.0)
    assert math.isnan(sp) and math.isnan(s_star) and math.isnan(big_s)  # neither reaches 2
    big_s, s_star, sp = S.speedup_at(STEPS, base, STEPS, treat, 3.0)
    assert math.isnan(sp) and math.isnan(s_star) and big_s == pytest.approx(300.0)  # the treatment never does
    assert math.isnan(S.speedup_at(STEPS, base, STEPS, treat, 12.0)[2])  # S = 0: at the target from the start
    # 5: baseline 100 + 100 * (6 - 5) / (6 - 4) = 150, treatment 300: slower, negative
    assert S.speedup_at(STEPS, base, STEPS, treat, 5.0)[2] == pytest.approx(1 - 300 / 150)


def test_speedup_at_non_monotone_uses_first_crossings():
    base = [10.0, 3.0, 6.0, 2.0, 2.5]  # dips to 3 at 100, back up, then 2
    treat = [10.0, 5.0, 4.0, 3.0, 2.0]
    # 4: the baseline's first crossing is in the first dip, 100 * (10 - 4) / (10 - 3); the treatment's at 200
    big_s, _, sp = S.speedup_at(STEPS, base, STEPS, treat, 4.0)
    assert big_s == pytest.approx(600 / 7) and sp == pytest.approx(1 - 200 / (600 / 7))
    # 2.5: below the dip: the baseline reaches it between 200 (6) and 300 (2), 200 + 100 * 3.5 / 4 = 287.5
    assert S.speedup_at(STEPS, base, STEPS, treat, 2.5)[:2] == pytest.approx((287.5, 350.0))
    # every target both curves reach (but 10, where S = 0) agrees with signed_speedup at it
    for t in (6.0, 5.0, 4.0, 3.0, 2.5, 2.0):
        assert S.speedup_at(STEPS, base, STEPS, treat, t)[2] == pytest.approx(
            S.signed_speedup(STEPS, base, STEPS, treat, t)
        )


def test_steps_saved_share_is_the_papers_table_1_definition():
    base = [10.0, 6.0, 4.0, 3.0, 2.5]
    treat = [10.0, 5.0, 3.0, 2.5, 2.0]
    # the baseline's last step 400 at loss 2.5; the treatment reaches 2.5 at 300: (400 - 300) / 400
    assert S.steps_saved_share(STEPS, base, STEPS, treat) == pytest.approx((2.5, 300.0, 0.25))
    # a non-monotone baseline: S_base stays its last step although it was lower before
    base2 = [10.0, 2.0, 3.0, 3.0, 2.5]
    assert S.steps_saved_share(STEPS, base2, STEPS, treat)[2] == pytest.approx(0.25)
    # never reached: the paper's "none"
    target, s_treat, share = S.steps_saved_share(STEPS, [10, 6, 4, 3, 1.0], STEPS, treat)
    assert target == 1.0 and math.isnan(s_treat) and math.isnan(share)
