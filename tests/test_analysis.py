"""attention_geometry.analysis.summaries (and symmetry_speedup) against hand computations and scipy."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers import run_keys
from scipy import stats

from attention_geometry.analysis import summaries as A
from attention_geometry.analysis import symmetry_speedup as SS
from attention_geometry.errors import UserError
from attention_geometry.workflow.provenance import package_versions

ROOT = Path(__file__).resolve().parents[1]
PAPER = ROOT / "resources" / "paper"


def _loss_table(curves: dict[tuple[str, str, int], list[tuple[int, float]]]) -> pd.DataFrame:
    rows = []
    for (objective, init, seed), pts in curves.items():
        run = f"tiny-wiki-{objective}-{init}-s{seed}"
        for step, ev in pts:
            rows.append(
                dict(
                    **run_keys(run, objective, init, seed, dataset="wiki"),
                    step=step,
                    train_loss=ev + 0.1,
                    eval_loss=ev,
                    learning_rate=1e-3,
                )
            )
            # a train-only row in between (eval_loss empty) must be ignored
            rows.append(
                dict(
                    **run_keys(run, objective, init, seed, dataset="wiki"),
                    step=step + 5,
                    train_loss=ev,
                    eval_loss=np.nan,
                    learning_rate=1e-3,
                )
            )
    return pd.DataFrame(rows)


def test_per_run_speedups_and_init_table_by_hand():
    steps = [0, 100, 200, 300, 400]
    curves = {
        ("encoder", "standard", 0): list(zip(steps, [8.0, 6.0, 5.0, 4.5, 4.0])),
        ("encoder", "standard", 1): list(zip(steps, [8.0, 6.2, 5.2, 4.6, 4.2])),
        ("encoder", "symmetric-fresh", 0): list(zip(steps, [8.0, 5.5, 4.5, 3.5, 3.2])),
        ("encoder", "symmetric-fresh", 1): list(zip(steps, [8.0, 5.0, 4.0, 3.8, 3.6])),
        ("encoder", "fresh", 0): list(zip(steps, [8.0, 6.5, 5.5, 4.9, 4.4])),
        ("encoder", "fresh", 1): list(zip(steps, [8.0, 6.5, 5.5, 4.9, 4.5])),
    }
    per = SS.per_run_speedups(_loss_table(curves), "standard").set_index(["init", "seed"])
    # symmetric-fresh vs standard: common target = highest minimum of the four runs = 4.2 (standard s1).
    # standard s0 reaches 4.2 at 300 + 100 * 0.3 / 0.5 = 360, s1 at 400; symmetric-fresh s0 at
    # 200 + 100 * 0.3 / 1.0 = 230, s1 at 100 + 100 * 0.8 / 1.0 = 180
    assert per.loc[("symmetric-fresh", 0), "target"] == pytest.approx(4.2)
    assert per.loc[("symmetric-fresh", 0), "baseline_s"] == pytest.approx(360)
    assert per.loc[("symmetric-fresh", 0), "s_star"] == pytest.approx(230)
    assert per.loc[("symmetric-fresh", 0), "speedup"] == pytest.approx(1 - 230 / 360)
    assert per.loc[("symmetric-fresh", 1), "speedup"] == pytest.approx(1 - 180 / 400)
    assert per.loc[("symmetric-fresh", 0), "loss_gain"] == pytest.approx(0.8)
    assert per.loc[("symmetric-fresh", 1), "loss_gain"] == pytest.approx(0.6)
    # fresh never beats standard: target 4.5; standard s0 at 300, s1 at 325; fresh s0 at 380, s1 at 400
    assert per.loc[("fresh", 0), "speedup"] == pytest.approx(1 - 380 / 300)
    assert per.loc[("fresh", 1), "speedup"] == pytest.approx(1 - 400 / 325)
    assert per.loc[("fresh", 1), "baseline_run"] == "tiny-wiki-encoder-standard-s1"
    assert per.loc[("standard", 0), "speedup"] == 0.0 and per.loc[("standard", 0), "loss_gain"] == 0.0

    tab = A.init_table(_loss_table(curves), "standard", 0.95).set_index(["init", "compared_to"])
    row = tab.loc[("symmetric-fresh", "standard")]
    assert row["n_seeds"] == 2 and row["n_pairs"] == 2 and row["target"] == pytest.approx(4.2)
    sp = [1 - 230 / 360, 1 - 180 / 400]
    # t-interval with n = 2 by hand: mean +- t_{0.975, 1} * sd / sqrt(2)
    half = 12.706204736174707 * np.std(sp, ddof=1) / math.sqrt(2)
    assert (row["speedup_mean"], row["speedup_low"], row["speedup_high"]) == pytest.approx(
        (np.mean(sp), np.mean(sp) - half, np.mean(sp) + half)
    )
    assert row["final_loss_mean"] == pytest.approx(3.4)
    assert row["loss_gain_mean"] == pytest.approx(0.7)
    assert row["speedup_text"].startswith(f"{100 * np.mean(sp):+.1f} %")
    # symmetric-fresh vs fresh: target 4.5; fresh s0 at 380, s1 at 400; symmetric-fresh s0 at 200, s1 at 150
    ctl = tab.loc[("symmetric-fresh", "fresh")]
    assert ctl["target"] == pytest.approx(4.5)
    assert ctl["speedup_mean"] == pytest.approx(np.mean([1 - 200 / 380, 1 - 150 / 400]))
    assert ctl["loss_gain_mean"] == pytest.approx(np.mean([4.4 - 3.2, 4.5 - 3.6]))
    assert tab.loc[("fresh", "standard"), "speedup_mean"] < 0  # slower: negative, never "not reached"
    assert tab.loc[("standard", ""), "speedup_text"] == "baseline"
    assert tab.loc[("standard", ""), "final_loss_mean"] == pytest.approx(4.1)


def test_contrast_runs_compares_at_the_common_horizon():
    # a shorter treatment run: the pair is compared at its last step (200), both curves cut there
    t = _loss_table(
        {
            ("decoder", "standard", 0): list(zip([0, 100, 200, 300], [5.0, 4.0, 3.0, 2.0])),
            ("decoder", "symmetric-fresh", 0): list(zip([0, 100, 200], [5.0, 3.5, 3.2])),
        }
    )
    c = A.contrast_runs(t, "symmetric-fresh", "standard").iloc[0]
    assert c["horizon"] == 200 and c["loss_gain"] == pytest.approx(3.0 - 3.2)
    # target = max(3.0, 3.2) = 3.2: standard at 100 + 100 * 0.8 = 180; symmetric-fresh at 200
    assert c["target"] == pytest.approx(3.2) and c["speedup"] == pytest.approx(1 - 200 / 180)
    assert A.contrast_runs(t, "fresh", "standard").empty
    # Table 1 gives the baseline's loss also at that horizon (mean over its runs), beside its own final one
    tab = A.init_table(t, "standard", 0.95)
    base = tab[tab["init"] == "standard"].set_index("final_step")
    assert base.loc[300, "final_loss_mean"] == pytest.approx(2.0) and base.loc[300, "speedup_text"] == "baseline"
    assert base.loc[200, "final_loss_mean"] == pytest.approx(3.0)
    assert base.loc[200, "speedup_text"] == "baseline at step 200"


def test_init_table_refuses_runs_of_different_lengths_and_select_runs():
    t = _loss_table(
        {
            ("encoder", "standard", 0): list(zip([0, 100], [2.0, 1.0])),
            ("encoder", "standard", 1): list(zip([0, 100, 200], [2.0, 1.0, 0.9])),
        }
    )
    with pytest.raises(UserError, match="different steps"):
        A.init_table(t, "standard")
    one = A.select_runs(t, ["tiny-wiki-encoder-standard-s0"], "loss")
    assert set(one["run"]) == {"tiny-wiki-encoder-standard-s0"}
    assert A.init_table(one, "standard")["n_seeds"].tolist() == [1]
    with pytest.raises(UserError, match="no rows for run"):
        A.select_runs(t, ["nope"], "loss")
    with pytest.raises(UserError, match="empty"):
        A.select_runs(t, [], "loss")


def test_per_run_speedups_refuses_ambiguous_baseline():
    steps = [0, 100]
    t = _loss_table(
        {
            ("encoder", "standard", 0): list(zip(steps, [2.0, 1.0])),
            ("encoder", "symmetric", 0): list(zip(steps, [2.0, 0.5])),
        }
    )
    dup = t[t["init"] == "standard"].assign(run="other-standard-run")
    with pytest.raises(UserError, match="several"):
        SS.per_run_speedups(pd.concat([t, dup]), "standard")


# ------------------------------------------------------------------------------------------ Spearman
def test_spearman_matches_scipy_with_ties():
    x = [1, 2, 2, 3, 5, 4, 7, 7]
    y = [2, 1, 4, 3, 6, 6, 5, 9]
    assert SS.spearman(x, y) == pytest.approx(stats.spearmanr(x, y).statistic)
    assert math.isnan(SS.spearman([1, 1, 1], [1, 2, 3]))


def test_spearman_bootstrap_against_explicit_loop():
    rng = np.random.default_rng(11)
    x = rng.normal(size=12)
    y = x + rng.normal(scale=1.0, size=12)
    iv = SS.spearman_bootstrap(x, y, n_resamples=300, seed=4, level=0.9)
    # independent computation: same resampling contract, scipy's spearmanr, explicit loop
    idx = np.random.default_rng(4).integers(0, 12, size=(300, 12))
    boot = []
    for i in idx:
        if np.ptp(x[i]) == 0 or np.ptp(y[i]) == 0:
            continue
        boot.append(stats.spearmanr(x[i], y[i]).statistic)
    assert iv.estimate == pytest.approx(stats.spearmanr(x, y).statistic)
    assert (iv.low, iv.high) == pytest.approx(tuple(np.percentile(boot, [5, 95])))
    assert iv.low <= iv.estimate <= iv.high
    # monotone data: every resample has rho = 1
    mono = SS.spearman_bootstrap(np.arange(6.0), np.arange(6.0) ** 3, n_resamples=50, seed=0)
    assert (mono.estimate, mono.low, mono.high) == pytest.approx((1.0, 1.0, 1.0))
    # too few pairs: no interval
    assert math.isnan(SS.spearman_bootstrap([1, 2], [2, 1], 10, 0).low)


# ------------------------------------------------------------------------------------------ summaries
def test_summarize_over_layers_by_hand():
    df = pd.DataFrame(
        {
            "model": ["a"] * 4 + ["b"] * 3,
            "symmetry": [0.1, 0.4, 0.2, 0.3, 1.0, -1.0, 0.0],
            "directionality": [0, 0, 0, 1, 0.5, 0.5, 0.5],
        }
    )
    out = A.summarize_over_layers(df, ["model"]).set_index("model")
    # a: sorted 0.1 0.2 0.3 0.4 -> median 0.25, q1 at position 0.75 -> 0.175, q3 at 2.25 -> 0.325
    assert out.loc["a", ["symmetry_median", "symmetry_q1", "symmetry_q3"]].tolist() == pytest.approx(
        [0.25, 0.175, 0.325]
    )
    assert out.loc["a", "n_layers"] == 4
    assert out.loc["b", ["symmetry_median", "symmetry_q1", "symmetry_q3"]].tolist() == pytest.approx([0.0, -0.5, 0.5])
    assert out.loc["a", "directionality_q3"] == pytest.approx(0.25)
    with pytest.raises(UserError, match="missing column"):
        A.summarize_over_layers(df.drop(columns="symmetry"), ["model"])


def test_paper_distinct_models_and_caveats_from_resources():
    paper = pd.read_csv(PAPER / "paper_pretrained_scores.csv")
    caveats = pd.read_csv(PAPER / "paper_caveats.csv")
    pairs = paper[["family_file", "model"]].drop_duplicates()
    assert len(pairs) == 223
    distinct = A.distinct_paper_models(paper)
    assert len(distinct[["family_file", "model"]].drop_duplicates()) == 203
    flagged = A.flag_caveats(distinct, caveats)
    fl = flagged.drop_duplicates(["family_file", "model"]).set_index("model")["caveat"]
    assert fl["mistralai/Mistral-7B-v0.1"] == "gqa-expansion"
    assert fl["meta-llama/Llama-2-70b-hf"] == "gqa-expansion"
    assert fl["meta-llama/Llama-2-7b-hf"] == ""  # full multi-head attention: comparable
    assert fl["EleutherAI/pythia-70m"] == "pythia-qkv-split"
    assert fl["bert-base"] == ""


def test_model_table_sides_and_head_filter():
    ours = pd.DataFrame(
        {
            "model": ["m"] * 4,
            "modality": "text",
            "architecture": "encoder-only",
            "component": "encoder",
            "n_params": 10,
            "layer": [0, 0, 1, 1],
            "head": ["all", "0", "all", "0"],
            "symmetry": [0.2, 9.0, 0.4, 9.0],
            "directionality": [0.0, 9.0, -0.2, 9.0],
        }
    )
    paper = pd.DataFrame(
        {
            "modality": "language",
            "family_file": "F",
            "model": ["p", "p", "q", "q"],
            "architecture": "decoder-only",
            "component": "decoder",
            "n_params": 5,
            "layer": [0, 1, 0, 1],
            "symmetry": [0.0, 0.1, 0.5, 0.5],
            "directionality": [-0.5, -0.3, 0, 0],
            "same_as": [np.nan, np.nan, "p", "p"],
        }
    )
    t = A.model_table(ours, paper, None).set_index("source")
    assert t.loc["ours", "symmetry_median"] == pytest.approx(0.3)  # per-head rows (9.0) left out
    assert t.loc["ours", "n_layers"] == 2
    assert t.loc["paper", "model"] == "p"  # the same_as duplicate q left out
    assert t.loc["paper", "directionality_median"] == pytest.approx(-0.4)


def test_model_table_flags_our_caveated_model_types():
    ours = pd.DataFrame(
        {
            "model": ["g", "g", "s", "s"],
            "model_type": ["gemma3_text", "gemma3_text", "llama", "llama"],
            "modality": "text",
            "architecture": "decoder-only",
            "component": "decoder",
            "n_params": 10,
            "layer": [0, 1, 0, 1],
            "head": "all",
            "symmetry": [0.1, 0.2, 0.3, 0.4],
            "directionality": 0.0,
        }
    )
    t = A.model_table(ours, None).set_index("model")
    assert t.loc["g", "caveat"] == A.OUR_CAVEATS["gemma3_text"] and t.loc["s", "caveat"] == ""
    assert t.loc["g", "symmetry_median"] == pytest.approx(0.15)
    # a table without model_type (older score tables) has no caveats
    assert (A.model_table(ours.drop(columns="model_type"), None)["caveat"] == "").all()


def test_our_caveats_are_the_families_with_per_head_qk_norms():
    """OUR_CAVEATS (torch-free, for the notebooks) lists exactly the registered families whose note says they
    normalize queries and keys (q_norm, k_norm: per head, or olmo2's over all heads together)."""
    from attention_geometry.architectures import families  # importing the package registers every family
    from attention_geometry.architectures.registry import FAMILIES

    assert families.text and {t for t, f in FAMILIES.items() if "q_norm" in f.note} == set(A.OUR_CAVEATS)


# ------------------------------------------------------------------------------------- run symmetry
def _training_scores(spec: dict[str, tuple[str, str, int, dict[int, list[float]]]]) -> pd.DataFrame:
    rows = []
    for run, (objective, init, seed, by_step) in spec.items():
        for step, syms in by_step.items():
            for layer, s in enumerate(syms):
                for head in ("all", "0"):
                    rows.append(
                        dict(
                            model=run,
                            **run_keys(run, objective, init, seed, dataset="wiki"),
                            step=step,
                            layer=layer,
                            head=head,
                            symmetry=s if head == "all" else -5.0,
                            directionality=-0.5 + 0.05 * layer if head == "all" else 5.0,
                        )
                    )
    return pd.DataFrame(rows)


def test_run_symmetry_and_symmetry_vs_gain():
    steps = [0, 100, 200]
    scores = _training_scores(
        {
            "tiny-wiki-encoder-standard-s0": ("encoder", "standard", 0, {0: [0.0, 0.1], 200: [0.2, 0.4]}),
            "tiny-wiki-encoder-symmetric-fresh-s0": ("encoder", "symmetric-fresh", 0, {0: [1.0, 1.0], 200: [0.7, 0.9]}),
        }
    )
    rs = SS.run_symmetry(scores).set_index("init")
    assert rs.loc["standard", "symmetry_final"] == pytest.approx(0.3)
    assert rs.loc["symmetric-fresh", "symmetry_change"] == pytest.approx(0.8 - 1.0)
    assert rs.loc["standard", "directionality_final"] == pytest.approx(-0.475)
    loss = _loss_table(
        {
            ("encoder", "standard", 0): list(zip(steps, [5.0, 4.0, 3.0])),
            ("encoder", "symmetric-fresh", 0): list(zip(steps, [5.0, 3.0, 2.5])),
        }
    )
    j = SS.symmetry_vs_gain(scores, loss, "standard")
    assert list(j["init"]) == ["symmetric-fresh"]
    assert j["loss_gain"].iloc[0] == pytest.approx(0.5)
    assert j["speedup"].iloc[0] == pytest.approx(0.5)  # reaches 3.0 exactly at step 100 of 200


def test_correlation_table_shapes():
    t = pd.DataFrame({"a": [1, 2, 3, 4, 5.0], "b": [2, 1, 4, 3, 5.0], "c": [5, 4, 3, 2, 1.0]})
    out = SS.correlation_table(t, ["a"], ["b", "c"], n_resamples=20, seed=0).set_index("y")
    assert out.loc["b", "spearman"] == pytest.approx(stats.spearmanr(t["a"], t["b"]).statistic)
    assert out.loc["c", "spearman"] == pytest.approx(-1.0)


def test_paired_difference_keeps_only_seeds_with_both_runs():
    rng = np.random.default_rng(3)
    rows = []
    # encoder seeds 0-3, decoder seeds 0-2; seed 1's decoder lacks step 200
    for comp, seeds in (("encoder", [0, 1, 2, 3]), ("decoder", [0, 1, 2])):
        for seed in seeds:
            for step in (0, 100, 200):
                if comp == "decoder" and seed == 1 and step == 200:
                    continue
                rows.append(dict(component=comp, seed=seed, step=step, s=rng.normal(), d=rng.normal()))
    t = pd.DataFrame(rows).sample(frac=1.0, random_state=0)  # order must not matter
    out = A.paired_difference(t, "component", "encoder", "decoder", ["s", "d"], on=["seed", "step"])
    # by hand: a dict lookup per (seed, step) present on both sides
    look = {(r.component, r.seed, r.step): (r.s, r.d) for r in t.itertuples()}
    want = sorted((seed, step) for (c, seed, step) in look if c == "encoder" and ("decoder", seed, step) in look)
    assert list(zip(out["seed"], out["step"])) == want
    assert 3 not in set(out["seed"]) and (1, 200) not in want
    for r in out.itertuples():
        e, d = look[("encoder", r.seed, r.step)], look[("decoder", r.seed, r.step)]
        assert r.s == pytest.approx(e[0] - d[0]) and r.d == pytest.approx(e[1] - d[1])
    with pytest.raises(UserError, match="several rows"):
        A.paired_difference(pd.concat([t, t.iloc[:1]]), "component", "encoder", "decoder", ["s"])


def test_mean_over_seeds_against_scipy():
    rng = np.random.default_rng(4)
    t = pd.DataFrame(
        [dict(g=g, step=st, seed=s, v=rng.normal()) for g in ("a", "b") for st in (0, 10) for s in range(4)]
    )
    t = t[~((t["g"] == "b") & (t["step"] == 10) & (t["seed"] > 0))]  # one seed only: no interval
    out = A.mean_over_seeds(t, ["g", "step"], ["v"], 0.9).set_index(["g", "step"])
    for (g, st), grp in t.groupby(["g", "step"]):
        x = grp["v"].to_numpy()
        row = out.loc[(g, st)]
        assert row["n_seeds"] == len(x)
        assert row["v_mean"] == pytest.approx(x.mean())
        if len(x) > 1:
            lo, hi = stats.t.interval(0.9, len(x) - 1, loc=x.mean(), scale=stats.sem(x))
            assert (row["v_low"], row["v_high"]) == (pytest.approx(lo), pytest.approx(hi))
        else:
            assert math.isnan(row["v_low"]) and math.isnan(row["v_high"])
    with pytest.raises(UserError, match="one row per seed"):
        A.mean_over_seeds(pd.concat([t, t.iloc[:1]]), ["g", "step"], ["v"], 0.9)


# ------------------------------------------------------------------------------------------- claims
def test_tables_render():
    df = pd.DataFrame({"model": ["bert_x"], "s": [0.12345], "d": [np.nan]})
    md = A.markdown_table(df)
    assert "0.123" in md and "bert_x" in md and "nan" not in md
    tex = A.latex_table(df)
    assert r"bert\_x" in tex and "0.123" in tex and r"\toprule" in tex


def test_package_versions_name_the_source_tree_when_the_project_is_not_installed(monkeypatch):
    """Under --sdm conda the package runs from the checkout's src/ on PYTHONPATH, not installed: the report
    names the version of that code (pyproject.toml's), not "not installed"."""
    import importlib.metadata

    import tomllib

    assert package_versions(["numpy", "no-such-dist-zz"]) == {
        "numpy": np.__version__,
        "no-such-dist-zz": "not installed",
    }
    real = importlib.metadata.version

    def version(name):
        if name == "attention-geometry":
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "version", version)
    pyproject = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    assert package_versions(["attention-geometry"]) == {
        "attention-geometry": f"{pyproject['project']['version']} (source tree)"
    }


def test_trained_runs_enter_the_model_table_at_their_final_snapshot():
    rows = []
    for init, base in (("standard", 0.1), ("symmetric-fresh", 0.9)):
        for seed in (0, 1):
            run = f"vit-tiny-digits-classifier-{init}-s{seed}"
            for step in (0, 250, 500):
                for layer, sym in enumerate((base + 0.01 * seed, base + 0.03 * seed + step / 1000)):
                    rows.append(
                        dict(run=run, model=run, modality="vision", architecture="encoder-only", component="encoder",
                             n_params=1000, layer=layer, head="all", init=init, seed=seed, step=step,
                             symmetry=sym, directionality=-0.1 * layer)
                    )  # fmt: skip
    training = pd.DataFrame(rows)
    runs = sorted(training["run"].unique())
    final = A.final_snapshot_rows(training, runs, "standard")
    assert set(final["step"]) == {500} and set(final["init"]) == {"standard"} and len(final) == 4
    table = A.model_table(None, None, trained=final).set_index("model")
    assert set(table["source"]) == {"trained"}
    for seed in (0, 1):  # median over the two layers at step 500, by hand
        layers = [0.1 + 0.01 * seed, 0.1 + 0.03 * seed + 0.5]
        assert table.loc[f"vit-tiny-digits-classifier-standard-s{seed}", "symmetry_median"] == pytest.approx(
            np.median(layers)
        )
    with pytest.raises(UserError, match="no rows for run"):
        A.final_snapshot_rows(training, ["nope"], "standard")
