"""The precision acceptance rule (benchmarks/precision_acceptance.py): claims recomputed on a subset of seeds,
and the comparison of a candidate run's claims with a reference run's."""

import numpy as np
import pandas as pd
import pytest
from precision_acceptance import compare_claims, main, seed_claims
from scipy import stats


def _claims(rows):
    return pd.DataFrame(rows, columns=["id", "estimate", "low", "high", "verdict"])


def test_compare_accepts_inside_and_same_verdict_only():
    ref = _claims([("a", 0.25, 0.10, 0.40, "holds"), ("f", 0.013, 0.003, 0.024, "contradicted")])
    same, ok = compare_claims(ref, _claims([("a", 0.30, 0.2, 0.5, "holds"), ("f", 0.024, 0.0, 0.05, "contradicted")]))
    assert ok and same["inside"].all() and same["same_verdict"].all()  # the interval's ends count as inside
    outside, ok = compare_claims(ref, _claims([("a", 0.41, 0.2, 0.6, "holds"), ("f", 0.01, 0.0, 0.02, "contradicted")]))
    assert not ok and outside.set_index("id").loc["a", "inside"] == False  # noqa: E712
    flipped, ok = compare_claims(
        ref, _claims([("a", 0.25, -0.1, 0.6, "inconclusive"), ("f", 0.01, 0.0, 0.02, "contradicted")])
    )
    assert not ok and list(flipped["same_verdict"]) == [False, True]
    missing, ok = compare_claims(ref, _claims([("a", 0.25, 0.1, 0.4, "holds")]))
    assert not ok and missing.set_index("id").loc["f", "verdict"] == "missing"
    no_interval, ok = compare_claims(
        _claims([("a", 0.25, np.nan, np.nan, "inconclusive")]), _claims([("a", 0.25, np.nan, np.nan, "inconclusive")])
    )
    assert not ok  # a reference without an interval cannot accept anything


def _training_table(rng, seeds):
    rows = []
    for seed in seeds:
        for objective in ("encoder", "decoder"):
            run = f"tiny-x-{objective}-standard-s{seed}"
            for step in (0, 250, 500, 750):
                for layer in (0, 1):
                    rows.append(
                        {
                            "model": run,
                            "model_type": "bert",
                            "architecture": "encoder-only",
                            "modality": "text",
                            "component": objective,
                            "layer": layer,
                            "head": "all",
                            "symmetry": rng.uniform(0.2, 0.6) if objective == "encoder" else rng.uniform(0, 0.1),
                            "directionality": rng.uniform(-1, 1),
                            "n_params": 1,
                            "d_model": 8,
                            "n_heads": 2,
                            "n_kv_heads": 2,
                            "run": run,
                            "size": "tiny",
                            "dataset": "x",
                            "objective": objective,
                            "init": "standard",
                            "seed": seed,
                            "step": step,
                        }
                    )
    return pd.DataFrame(rows)


def test_seed_claims_uses_only_the_given_seeds(tmp_path):
    rng = np.random.default_rng(3)
    t = _training_table(rng, [0, 1, 2, 3, 4])
    (tmp_path / "tables").mkdir()
    t.to_csv(tmp_path / "tables" / "training_scores.csv", index=False)
    t.iloc[:0][["run", "size", "dataset", "objective", "init", "seed", "step"]].assign(
        train_loss=[], eval_loss=[], learning_rate=[]
    ).to_csv(tmp_path / "tables" / "training_loss.csv", index=False)
    claims = seed_claims(str(tmp_path), [0, 1, 2]).set_index("id")
    # independently: per seed, the median over layers and the last 3 snapshots (250, 500, 750); the paired
    # encoder - decoder differences over seeds 0-2 and their t-interval
    last = t[t["step"] >= 250]
    med = last.groupby(["seed", "objective"])["symmetry"].median().unstack()
    diff = (med["encoder"] - med["decoder"]).loc[[0, 1, 2]].to_numpy()
    half = stats.t.ppf(0.975, 2) * diff.std(ddof=1) / np.sqrt(3)
    assert claims.loc["a", "n"] == 3
    assert claims.loc["a", "estimate"] == pytest.approx(diff.mean(), abs=1e-12)
    assert claims.loc["a", "low"] == pytest.approx(diff.mean() - half, abs=1e-12)
    assert "g1" not in claims.index  # pretrained rows are not compared


def test_cli_prints_the_decision(tmp_path, capsys):
    rng = np.random.default_rng(4)
    for name in ("ref", "cand"):
        (tmp_path / name / "tables").mkdir(parents=True)
        _training_table(rng, [0, 1, 2]).to_csv(tmp_path / name / "tables" / "training_scores.csv", index=False)
        pd.DataFrame(
            columns=[
                "run",
                "size",
                "dataset",
                "objective",
                "init",
                "seed",
                "step",
                "train_loss",
                "eval_loss",
                "learning_rate",
            ]
        ).to_csv(tmp_path / name / "tables" / "training_loss.csv", index=False)
    ref = str(tmp_path / "ref")
    assert main([ref, ref, "--seeds", "0", "1", "2", "--config", str(tmp_path / "none.yaml")]) == 2  # no config
    cfg = tmp_path / "c.yaml"
    cfg.write_text("figures: {horizon_snapshots: 3}\n")
    assert main([ref, ref, "--seeds", "0", "1", "2", "--config", str(cfg), "--out", str(tmp_path / "o.csv")]) == 0
    out = capsys.readouterr().out
    # the synthetic run has no loss or update rows: those claims are "not tested" in both, have no interval,
    # and so cannot pass (nothing is accepted by default)
    assert out.strip().endswith("rejected")
    table = pd.read_csv(tmp_path / "o.csv").set_index("id")
    # a run compared with itself: every estimate sits inside its own interval, verdicts equal
    decided = table[np.isfinite(table["ref_low"])]
    assert set(decided.index) == {"a", "b"} and decided["inside"].all() and decided["same_verdict"].all()
