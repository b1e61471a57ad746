"""attention_geometry.analysis.summaries.init_curves (the vision training figure's curves over seeds) and
layer_medians, against a by-hand computation with numpy and scipy."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from attention_geometry.analysis import summaries as A
from attention_geometry.errors import UserError

INITS = ("standard", "symmetric-fresh")
SEEDS = (900, 901, 902)
EVAL_STEPS = (0, 50, 100)
SNAPSHOTS = (0, 100)
N_LAYERS = 3


def _run(init: str, seed: int) -> str:
    return f"vit-tiny-digits-classifier-{init}-s{seed}"


def _keys(init: str, seed: int) -> dict:
    return dict(run=_run(init, seed), size="vit-tiny", dataset="digits", objective="classifier", init=init, seed=seed)


def _tables(rng: np.random.Generator) -> tuple[pd.DataFrame, pd.DataFrame]:
    loss, scores = [], []
    for init in INITS:
        for seed in SEEDS:
            for step in EVAL_STEPS:
                if init == "symmetric-fresh" and seed == 902 and step == 100:
                    continue  # one seed short at the last step: n_seeds 2 there
                ev = dict(eval_loss=rng.uniform(0.5, 2.5), eval_accuracy=rng.uniform(0.1, 1.0))
                if init == "standard" and seed == 901 and step == 50:
                    ev["eval_accuracy"] = np.nan  # a missing accuracy leaves that seed out of that step only
                loss.append(dict(_keys(init, seed), step=step, train_loss=1.0, learning_rate=1e-3, **ev))
                # training-only rows (no evaluation) in between must not count
                loss.append(
                    dict(
                        _keys(init, seed),
                        step=step + 10,
                        train_loss=1.0,
                        learning_rate=1e-3,
                        eval_loss=np.nan,
                        eval_accuracy=np.nan,
                    )
                )
            for step in SNAPSHOTS:
                for layer in range(N_LAYERS):
                    for head in ("all", "0", "1"):
                        scores.append(
                            dict(
                                _keys(init, seed),
                                step=step,
                                layer=layer,
                                head=head,
                                # the per-head rows are far off: only the summed ("all") rows may count
                                symmetry=rng.uniform(-1, 1) if head == "all" else 9.0,
                                directionality=rng.uniform(-1, 1) if head == "all" else 9.0,
                            )
                        )
    return pd.DataFrame(loss).sample(frac=1.0, random_state=1), pd.DataFrame(scores).sample(frac=1.0, random_state=2)


def _by_hand(values: list[float], level: float) -> tuple[float, float, float]:
    x = np.asarray(values, dtype=float)
    if len(x) < 2:
        return float(x.mean()), math.nan, math.nan
    lo, hi = stats.t.interval(level, len(x) - 1, loc=x.mean(), scale=stats.sem(x))
    return float(x.mean()), float(lo), float(hi)


def test_init_curves_against_numpy_and_scipy():
    rng = np.random.default_rng(7)
    loss, scores = _tables(rng)
    level = 0.9
    out = A.init_curves(loss, scores, level)
    assert list(out.columns) == A.CURVE_COLUMNS
    got = out.set_index(["init", "quantity", "step"])

    expected = {}
    for init in INITS:
        for q in ("eval_loss", "eval_accuracy"):
            for step in EVAL_STEPS:
                vals = [
                    float(r[q])
                    for _, r in loss.iterrows()
                    if r["init"] == init and r["step"] == step and np.isfinite(r[q])
                ]
                if vals:
                    expected[(init, q, step)] = (len(vals), _by_hand(vals, level))
        for step in SNAPSHOTS:
            per_seed = []
            for seed in SEEDS:
                sel = scores[(scores["run"] == _run(init, seed)) & (scores["step"] == step) & (scores["head"] == "all")]
                per_seed.append(float(np.median(sel["symmetry"].to_numpy())))
            expected[(init, "symmetry", step)] = (len(per_seed), _by_hand(per_seed, level))

    assert set(got.index) == set(expected)
    for key, (n, (mean, lo, hi)) in expected.items():
        row = got.loc[key]
        assert row["n_seeds"] == n, key
        assert row["mean"] == pytest.approx(mean), key
        if math.isnan(lo):
            assert math.isnan(row["low"]) and math.isnan(row["high"])
        else:
            assert (row["low"], row["high"]) == (pytest.approx(lo), pytest.approx(hi)), key
    # the short seed and the missing accuracy
    assert got.loc[("symmetric-fresh", "eval_loss", 100), "n_seeds"] == 2
    assert got.loc[("standard", "eval_accuracy", 50), "n_seeds"] == 2
    assert got.loc[("standard", "eval_loss", 50), "n_seeds"] == 3
    # order: group, init, quantity as given, step
    assert list(out["quantity"].drop_duplicates()) == list(A.CURVE_QUANTITIES)
    first = out[out["init"] == "standard"]
    assert list(first["quantity"]) == sorted(first["quantity"], key=list(A.CURVE_QUANTITIES).index)


def test_init_curves_one_seed_has_no_interval_and_bad_input_is_refused():
    rng = np.random.default_rng(8)
    loss, scores = _tables(rng)
    one = loss[loss["seed"] == 900]
    out = A.init_curves(one, scores[scores["seed"] == 900], 0.95, quantities=["eval_loss"])
    assert set(out["n_seeds"]) == {1}
    assert out["low"].isna().all() and out["high"].isna().all()
    with pytest.raises(UserError, match="unknown quantities"):
        A.init_curves(loss, scores, 0.95, quantities=["accuracy"])
    with pytest.raises(UserError, match="eval_accuracy"):
        A.init_curves(loss.drop(columns="eval_accuracy"), scores, 0.95)
    with pytest.raises(UserError, match="one row per seed"):
        A.init_curves(pd.concat([loss, loss.iloc[:1]]).dropna(subset=["eval_loss"]), scores, 0.95, ["eval_loss"])


def test_layer_medians_takes_the_summed_rows():
    rng = np.random.default_rng(9)
    _, scores = _tables(rng)
    med = A.layer_medians(scores).set_index(["run", "step"])
    for (run, step), g in scores[scores["head"] == "all"].groupby(["run", "step"]):
        for v in ("symmetry", "directionality"):
            assert med.loc[(run, step), v] == pytest.approx(float(np.median(g[v].to_numpy())))
    assert len(med) == len(INITS) * len(SEEDS) * len(SNAPSHOTS)
