"""attention_geometry.analysis.stats against independent computations: scipy, brute-force enumeration, hand cases."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from attention_geometry.analysis import stats as S
from attention_geometry.errors import UserError


# ------------------------------------------------------------------------------------------ intervals
@pytest.mark.parametrize("level", [0.8, 0.95, 0.99])
def test_t_interval_matches_scipy_ttest_1samp(level):
    x = np.random.default_rng(1).normal(0.4, 1.5, size=6)
    iv = S.t_interval(x, level)
    ci = sps.ttest_1samp(x, 0.0).confidence_interval(level)
    assert (iv.estimate, iv.low, iv.high, iv.n) == pytest.approx((x.mean(), ci.low, ci.high, 6))


def test_t_interval_small_n_and_nans():
    iv = S.t_interval([2.0], 0.95)
    assert iv.estimate == 2.0 and math.isnan(iv.low) and math.isnan(iv.high) and iv.n == 1
    assert S.t_interval([]).n == 0 and math.isnan(S.t_interval([]).estimate)
    assert S.t_interval([np.nan, 1.0, 3.0]).n == 2
    with pytest.raises(UserError, match="level"):
        S.t_interval([1, 2], 0)


@pytest.mark.parametrize("level", [0.9, 0.95])
def test_paired_interval_matches_scipy_ttest_rel(level):
    rng = np.random.default_rng(2)
    a = rng.normal(1.0, 1.0, 5)
    b = a - 0.3 + rng.normal(0, 0.2, 5)
    iv = S.paired_interval(a, b, level)
    res = sps.ttest_rel(a, b)
    ci = res.confidence_interval(level)
    assert (iv.estimate, iv.low, iv.high, iv.n) == pytest.approx((np.mean(a - b), ci.low, ci.high, 5))


def test_paired_interval_drops_incomplete_pairs_and_checks_length():
    iv = S.paired_interval([1.0, 2.0, np.nan, 4.0], [0.0, 1.5, 1.0, 3.0], 0.95)
    # pairs (1, 0), (2, 1.5), (4, 3): differences 1, 0.5, 1
    assert iv.n == 3 and iv.estimate == pytest.approx(2.5 / 3)
    with pytest.raises(UserError, match="same length"):
        S.paired_interval([1, 2, 3], [1, 2])


def test_welch_interval_and_p_match_scipy():
    rng = np.random.default_rng(5)
    a, b = rng.normal(1.0, 1.0, 7), rng.normal(0.2, 2.5, 5)
    iv = S.welch_interval(a, b, 0.95)
    res = sps.ttest_ind(a, b, equal_var=False)
    ci = res.confidence_interval(0.95)
    assert (iv.estimate, iv.low, iv.high, iv.n) == pytest.approx((a.mean() - b.mean(), ci.low, ci.high, 12))
    assert S.welch_p(a, b) == pytest.approx(res.pvalue)
    assert math.isnan(S.welch_p([1.0], [1.0, 2.0]))


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
    assert S.sign_test_p(np.arange(1.0, n + 1)) == pytest.approx(S.p_floor(n))
    assert math.isnan(S.p_floor(0))


@pytest.mark.parametrize("k,n", [(0, 1), (1, 1), (3, 3), (2, 3), (0, 5), (4, 7), (9, 10), (5, 10)])
def test_sign_test_p_matches_scipy_binomtest(k, n):
    diffs = [1.0] * k + [-2.0] * (n - k)
    assert S.sign_test_p(diffs) == pytest.approx(sps.binomtest(k, n, 0.5).pvalue)


def test_sign_test_p_drops_zeros():
    assert S.sign_test_p([0.0, 1.0, 2.0, 3.0]) == pytest.approx(sps.binomtest(3, 3).pvalue)
    assert math.isnan(S.sign_test_p([0.0, 0.0]))


# ------------------------------------------------------------------------------------------- verdict
@pytest.mark.parametrize(
    "low,high,sign,expected",
    [
        # directional, predicted > 0
        (0.10, 0.30, 1, "holds"),
        (0.02, 0.20, 1, "holds"),  # beyond 0, not inside the margin
        (-0.30, -0.10, 1, "contradicted"),  # other side of 0
        (-0.10, 0.30, 1, "inconclusive"),
        (-0.04, 0.04, 1, "contradicted"),  # negligible: entirely within +-margin
        (0.01, 0.04, 1, "contradicted"),  # beyond 0 but negligible
        (-0.05, 0.04, 1, "inconclusive"),  # touches -margin: not strictly within
        # directional, predicted < 0 (mirror)
        (-0.30, -0.10, -1, "holds"),
        (0.10, 0.30, -1, "contradicted"),
        (-0.30, 0.10, -1, "inconclusive"),
        (-0.04, -0.01, -1, "contradicted"),
        # claim of no effect
        (-0.04, 0.04, 0, "holds"),
        (0.01, 0.03, 0, "holds"),  # excludes 0 but within the margin: no effect of interest
        (0.02, 0.20, 0, "contradicted"),
        (-0.20, -0.06, 0, "contradicted"),
        (-0.02, 0.20, 0, "inconclusive"),
        (math.nan, math.nan, 1, "inconclusive"),
        (math.nan, math.nan, 0, "inconclusive"),
    ],
)
def test_verdict_rule(low, high, sign, expected):
    assert S.verdict(low, high, sign, 0.05) == expected


def test_verdict_bad_arguments():
    with pytest.raises(UserError, match="sign"):
        S.verdict(0.1, 0.2, 2, 0.05)
    with pytest.raises(UserError, match="margin"):
        S.verdict(0.1, 0.2, 1, -0.01)
    with pytest.raises(UserError, match="order"):
        S.verdict(0.3, 0.2, 1, 0.05)
    # margin 0: the directional rule reduces to "interval beyond 0"
    assert S.verdict(0.001, 0.002, 1, 0.0) == "holds"


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
                            run=run,
                            size="tiny",
                            dataset="w",
                            objective=obj,
                            init="standard",
                            seed=seed,
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
