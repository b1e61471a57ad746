"""Study 3's claims (docs/preregistration-3.md): the decoders' anti-symmetry (anti, anti_paper) and the per-layer
estimates of a, b and anti (a_L*, b_L*, anti_L*), on a synthetic 4-layer table whose answers are computed here
with numpy and scipy alone (medians over the horizon snapshots, per-seed differences, t-intervals)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from attention_geometry.analysis import claims as C
from attention_geometry.analysis import stats as S

SEEDS = (0, 1, 2, 3, 4)
STEPS = (0, 250, 500, 750, 1000)
K = 3  # the horizon: steps 500, 750, 1000
OBJECTIVES = ("encoder", "decoder", "decoder-paper")


def run_name(objective, seed):
    return f"bert-mini-w-{objective}-standard-s{seed}"


def random_scores(rng):
    """Per (objective, seed, step, layer): symmetry and directionality drawn at random, the decoders below 0."""
    rows = []
    base = {"encoder": (0.3, 0.0), "decoder": (-0.2, -0.4), "decoder-paper": (-0.1, -0.3)}
    for obj in OBJECTIVES:
        for seed in SEEDS:
            for step in STEPS:
                for layer in range(4):
                    s0, d0 = base[obj]
                    rows.append(
                        dict(
                            run=run_name(obj, seed),
                            size="bert-mini",
                            dataset="w",
                            objective=obj,
                            init="standard",
                            seed=seed,
                            step=step,
                            layer=layer,
                            head="all",
                            symmetry=s0 + 0.1 * layer + rng.normal(0, 0.05),
                            directionality=d0 + rng.normal(0, 0.1),
                        )
                    )
    return pd.DataFrame(rows)


def claims_of(training, families=None):
    tables = C.ClaimTables(
        training=training,
        emergence_runs={o: [run_name(o, s) for s in SEEDS] for o in OBJECTIVES},
    )
    settings = C.ClaimSettings(horizon_snapshots=K, level=0.95, families=families)
    return C.reproduction_claims(tables, settings).set_index("id")


def by_hand(training, objective, score, layer=None):
    """Per seed: the median of `score` over the last K snapshots (and over layers, or of one layer)."""
    t = training[(training["objective"] == objective) & (training["step"] >= STEPS[-K])]
    if layer is not None:
        t = t[t["layer"] == layer]
    return np.array([np.median(t.loc[t["seed"] == s, score]) for s in SEEDS])


def interval(x):
    r = sps.ttest_1samp(x, 0)
    ci = r.confidence_interval(0.95)
    return x.mean(), ci.low, ci.high, r.pvalue


@pytest.mark.parametrize("seed", [0, 1])
def test_anti_symmetry_and_per_layer_rows_by_hand(seed):
    training = random_scores(np.random.default_rng(seed))
    c = claims_of(training)
    want = {
        "anti": by_hand(training, "decoder", "symmetry"),
        "anti_paper": by_hand(training, "decoder-paper", "symmetry"),
    }
    for layer in range(4):
        enc_s, dec_s = (by_hand(training, o, "symmetry", layer) for o in ("encoder", "decoder"))
        enc_d, dec_d = (by_hand(training, o, "directionality", layer) for o in ("encoder", "decoder"))
        want[f"a_L{layer}"] = enc_s - dec_s
        want[f"b_L{layer}"] = dec_d - enc_d
        want[f"anti_L{layer}"] = dec_s
    for cid, x in want.items():
        est, low, high, p = interval(x)
        row = c.loc[cid]
        assert row["n"] == len(SEEDS), cid
        assert (row["estimate"], row["low"], row["high"]) == pytest.approx((est, low, high)), cid
        assert row["p_value"] == pytest.approx(p), cid
    # the per-layer rows describe; anti and anti_paper decide, Holm-adjusted together (their default family)
    assert set(c.loc[[i for i in want if "_L" in i], "verdict"]) == {"descriptive"}
    p = S.holm([c.loc[i, "p_value"] for i in ("anti", "anti_paper")])
    assert list(c.loc[["anti", "anti_paper"], "p_holm"]) == pytest.approx(list(p))
    # decoders at about -0.05 .. -0.25 (+0.1 per layer): anti's interval lies below 0
    assert c.loc["anti", "high"] < 0 and c.loc["anti", "prediction"] == "< 0"


def test_anti_holds_contradicts_and_layers_missing():
    training = random_scores(np.random.default_rng(2))
    # the decoders far below 0 with little spread: anti holds
    dec = training["objective"] == "decoder"
    low = training.assign(symmetry=np.where(dec, -0.4 + 0.01 * training["seed"], training["symmetry"]))
    assert claims_of(low).loc["anti", "verdict"] == "holds"
    # the decoders above 0: contradicted (the interval lies on the other side of 0)
    high = training.assign(symmetry=np.where(dec, 0.3 + 0.01 * training["seed"], training["symmetry"]))
    assert claims_of(high).loc["anti", "verdict"] == "contradicted"
    # a 2-layer model: layers 2 and 3 are not tested (never dropped), layers 0 and 1 are
    two = claims_of(training[training["layer"] < 2])
    assert two.loc["a_L2", "verdict"] == "not tested" and "layer 2" in two.loc["a_L2", "note"]
    assert two.loc["a_L1", "verdict"] == "descriptive"


def test_configured_family_names_anti_with_the_primary_claims():
    training = random_scores(np.random.default_rng(3))
    fams = {"primary": ["a", "b"], "secondary": ["anti", "anti_paper"]}
    c = claims_of(training, fams)
    p = S.holm([c.loc[i, "p_value"] for i in ("anti", "anti_paper")])
    assert list(c.loc[["anti", "anti_paper"], "p_holm"]) == pytest.approx(list(p))
    # left out of every family, a claim is tested alone
    c = claims_of(training, {"primary": ["a", "b"]})
    assert math.isnan(c.loc["anti", "p_holm"])
