"""The figure frames (attention_geometry.analysis.figure_frames): every grouping and seed pairing the notebooks
draw from, each checked on a small hand-made table against values written out or computed here another way
(plain loops over dictionaries, numpy on the few numbers by hand), never against the function itself."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from attention_geometry.analysis import figure_frames as frames
from attention_geometry.errors import UserError

LEVEL = 0.95


def _t_interval(values):
    """Mean and Student-t interval, written out (not stats.t_interval)."""
    x = np.asarray(values, dtype=float)
    m = float(x.mean())
    if len(x) < 2:
        return m, math.nan, math.nan
    h = stats.t.ppf(0.5 + LEVEL / 2, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x))
    return m, m - h, m + h


# ------------------------------------------------------------------------------------------- generic
def test_split_gives_each_group_in_sorted_key_order_with_its_rows_in_order():
    df = pd.DataFrame({"a": ["y", "x", "y", "x", None], "b": [2, 1, 1, 1, 3], "v": [10, 11, 12, 13, 14]})
    one = frames.split(df, "a")
    assert [k for k, _ in one] == ["x", "y"]  # scalar keys, sorted; the missing key left out
    assert one[0][1]["v"].tolist() == [11, 13] and one[1][1]["v"].tolist() == [10, 12]
    two = frames.split(df, ["a", "b"])
    assert [k for k, _ in two] == [("x", 1), ("y", 1), ("y", 2)]
    assert [g["v"].tolist() for _, g in two] == [[11, 13], [12], [10]]
    with pytest.raises(UserError, match="missing column"):
        frames.split(df, "nope")


def test_group_keys_are_the_distinct_sorted_tuples():
    df = pd.DataFrame({"a": ["y", "x", "y", "x"], "b": ["q", "p", "q", "r"]})
    assert frames.group_keys(df, ["a", "b"]) == [("x", "p"), ("x", "r"), ("y", "q")]


def test_edge_step_rows_keeps_each_groups_first_and_last_step():
    df = pd.DataFrame({"g": ["a", "a", "a", "b", "b"], "step": [0, 5, 10, 3, 7], "v": [1, 2, 3, 4, 5]})
    assert frames.edge_step_rows(df, ["g"])["v"].tolist() == [1, 3, 4, 5]
    assert frames.edge_step_rows(df, ["g"], first=False)["v"].tolist() == [3, 5]
    assert frames.edge_step_rows(df, ["g"], last=False)["v"].tolist() == [1, 4]
    assert frames.edge_step_rows(df.iloc[:0], ["g"]).empty


def test_counts_per_group():
    df = pd.DataFrame({"s": ["ours", "paper", "paper", "ours", "paper"], "c": ["e", "e", "d", "e", "e"]})
    got = frames.counts(df, ["s", "c"])
    assert got.to_dict() == {("ours", "e"): 2, ("paper", "d"): 1, ("paper", "e"): 2}


def test_init_order_puts_symmetric_fresh_first():
    assert frames.init_order({"symmetric", "fresh", "symmetric-fresh"}) == ["symmetric-fresh", "fresh", "symmetric"]


# ----------------------------------------------------------------------------- fig_symmetric_init_loss
def _loss_rows():
    """Held-out loss of tiny/wiki/encoder runs: every init for seeds 0 and 1 at steps 0 and 10, seed 2 only a
    standard run, seed 3 only a symmetric run; a decoder group with standard and symmetric of seed 0."""
    loss = {}
    for init, off in {"standard": 0.0, "symmetric": -0.1, "symmetric-fresh": -0.3, "fresh": 0.2}.items():
        for seed in (0, 1):
            for step in (0, 10):
                loss[("encoder", init, seed, step)] = 5.0 + off + 0.01 * seed - 0.05 * step
    loss[("encoder", "standard", 2, 0)] = 4.0
    loss[("encoder", "symmetric", 3, 0)] = 4.5
    loss[("decoder", "standard", 0, 0)] = 6.0
    loss[("decoder", "symmetric", 0, 0)] = 5.5
    rows = [
        {
            "run": f"{o}-{i}-s{s}",
            "size": "tiny",
            "dataset": "wiki",
            "objective": o,
            "init": i,
            "seed": s,
            "step": t,
            "eval_loss": v,
        }
        for (o, i, s, t), v in loss.items()
    ]
    return pd.DataFrame(rows), loss


def test_init_contrasts_are_within_seed_differences_against_the_baseline_and_the_inits_own_controls():
    df, loss = _loss_rows()
    diff, unpaired = frames.init_contrasts(df, "standard")
    assert list(diff.columns) == frames.CONTRAST_FRAME_COLUMNS
    expected = {}
    for (o, i, s, t), v in loss.items():
        for control in ["standard"] + (["fresh"] if i == "symmetric-fresh" else []):
            if i != control and (o, control, s, t) in loss:
                expected[(o, i, control, s, t)] = v - loss[(o, control, s, t)]
    got = {(r.objective, r.treatment, r.control, r.seed, r.step): r.difference for r in diff.itertuples(index=False)}
    assert got.keys() == expected.keys()
    for k, v in expected.items():
        assert got[k] == pytest.approx(v, abs=1e-12), k
    # seed 2 has only a standard run, seed 3 only a symmetric one: named per contrast, not drawn
    assert "tiny/wiki/encoder symmetric - standard: seeds [2, 3]" in unpaired
    assert "tiny/wiki/encoder symmetric-fresh - standard: seeds [2]" in unpaired
    # order: by group (decoder before encoder), then symmetric-fresh first, then the control pairs
    enc = diff[diff["objective"] == "encoder"].drop_duplicates(["treatment", "control"])
    assert list(zip(enc["treatment"], enc["control"])) == [
        ("symmetric-fresh", "standard"),
        ("fresh", "standard"),
        ("symmetric", "standard"),
        ("symmetric-fresh", "fresh"),
    ]
    assert diff["objective"].iloc[0] == "decoder"


def test_init_contrasts_without_any_same_seed_pair_is_an_error():
    df, _ = _loss_rows()
    only = df[(df["init"] == "symmetric") & (df["seed"] == 3) | (df["init"] == "standard") & (df["seed"] == 2)]
    with pytest.raises(UserError, match="no ablation run has a same-seed 'standard' run"):
        frames.init_contrasts(only, "standard")


def test_contrast_panels_baseline_first_encoder_first():
    diff = pd.DataFrame(
        {
            "size": ["tiny", "tiny", "tiny", "tiny", "small"],
            "dataset": ["wiki"] * 5,
            "objective": ["decoder", "encoder", "encoder", "decoder", "encoder"],
            "control": ["standard", "fresh", "standard", "standard", "standard"],
            "difference": [0.0] * 5,
        }
    )
    assert frames.contrast_panels(diff, "standard") == [
        ("small", "wiki", "encoder", "standard"),
        ("tiny", "wiki", "encoder", "standard"),
        ("tiny", "wiki", "decoder", "standard"),
        ("tiny", "wiki", "encoder", "fresh"),
    ]


def test_contrast_seed_table_is_the_last_difference_per_seed():
    diff = pd.DataFrame(
        {
            "size": "tiny",
            "dataset": "wiki",
            "objective": "encoder",
            "treatment": "symmetric",
            "control": "standard",
            "seed": [0, 0, 1, 1],
            "step": [0, 10, 0, 10],
            "difference": [0.1, 0.2, 0.3, 0.4],
        }
    )
    table = frames.contrast_seed_table(diff)
    assert list(table.columns) == [0, 1]
    assert table.iloc[0].tolist() == [0.2, 0.4]


def test_rebuttal_differences_symmetric_minus_standard_with_its_speedup():
    rebuttal = pd.DataFrame(
        {
            "model": ["bert-large"] * 4,
            "dataset": ["jigsaw", "jigsaw", "wiki", "wiki"],
            "step": [100000, 100000, 200000, 200000],
            "init": ["standard", "symmetric", "symmetric", "standard"],
            "eval_loss": [2.0, 1.9, 1.5, 1.75],
            "speedup_percent": [np.nan, 12.0, 30.0, np.nan],
        }
    )
    reb = frames.rebuttal_differences(rebuttal)
    assert reb[["model", "dataset", "step"]].values.tolist() == [
        ["bert-large", "jigsaw", 100000],
        ["bert-large", "wiki", 200000],
    ]
    assert reb["difference"].tolist() == pytest.approx([1.9 - 2.0, 1.5 - 1.75])
    assert reb["speedup_percent"].tolist() == [12.0, 30.0]
    assert reb["standard"].tolist() == [2.0, 1.75] and reb["symmetric"].tolist() == [1.9, 1.5]


# -------------------------------------------------------------------------------------- fig3_emergence
def _arm_rows(component, seeds, offset):
    rows = []
    for s in seeds:
        for step in (0, 100):
            for layer, base in enumerate((0.1, 0.5, 0.2)):
                rows.append(
                    {
                        "run": f"{component}-s{s}",
                        "seed": s,
                        "step": step,
                        "layer": layer,
                        "size": "tiny",
                        "init": "standard",
                        "symmetry": base + offset + 0.01 * s + 0.001 * step,
                        "directionality": -base,
                    }
                )
    return pd.DataFrame(rows)


def test_arm_layer_medians_is_the_median_over_layers_per_run_and_step():
    enc, dec = _arm_rows("encoder", [0, 1], 0.3), _arm_rows("decoder", [1], 0.0)
    per_seed = frames.arm_layer_medians({"encoder": enc, "decoder": dec})
    assert list(per_seed.columns) == ["run", "seed", "step", "symmetry", "directionality", "component"]
    assert per_seed["component"].tolist() == ["encoder"] * 4 + ["decoder"] * 2
    # the middle layer value of (0.1, 0.5, 0.2) is 0.2
    for r in per_seed.itertuples(index=False):
        offset = 0.3 if r.component == "encoder" else 0.0
        assert r.symmetry == pytest.approx(0.2 + offset + 0.01 * r.seed + 0.001 * r.step)
        assert r.directionality == pytest.approx(-0.2)


def test_arm_contrast_pairs_seeds_and_means_over_them():
    per_seed = pd.DataFrame(
        {
            "component": ["encoder"] * 6 + ["decoder"] * 4,
            "seed": [0, 0, 1, 1, 2, 2, 0, 0, 1, 1],
            "step": [0, 100] * 5,
            "symmetry": [0.5, 0.7, 0.6, 0.9, 0.1, 0.1, 0.2, 0.3, 0.2, 0.2],
            "directionality": [0.0] * 10,
        }
    )
    got = frames.arm_contrast(per_seed, "encoder", "decoder", LEVEL)
    assert got.seeds == [0, 1] and got.unpaired == [2]
    s = got.summary.set_index("step")
    for step, diffs in {0: [0.5 - 0.2, 0.6 - 0.2], 100: [0.7 - 0.3, 0.9 - 0.2]}.items():
        m, lo, hi = _t_interval(diffs)
        assert s.loc[step, "symmetry_mean"] == pytest.approx(m)
        assert (s.loc[step, "symmetry_low"], s.loc[step, "symmetry_high"]) == pytest.approx((lo, hi))
        assert s.loc[step, "n_seeds"] == 2
    none = frames.arm_contrast(per_seed, "encoder", "decoder-paper", LEVEL)
    assert none.summary is None and none.seeds == [] and none.unpaired == [0, 1, 2]


def test_null_band_is_the_central_range_of_the_per_sample_medians_of_the_runs_shape():
    rows = []
    for sample, layers in enumerate([(0.1, 0.2, 0.9), (0.3, 0.0, 0.4), (0.5, 0.6, 0.7), (0.2, 0.2, 0.2)]):
        for layer, v in enumerate(layers):
            rows.append(
                {
                    "size": "tiny",
                    "init": "standard",
                    "sample": sample,
                    "layer": layer,
                    "symmetry": v,
                    "directionality": -v,
                }
            )
    rows.append({"size": "base", "init": "standard", "sample": 0, "layer": 0, "symmetry": 9.0, "directionality": 9.0})
    null = pd.DataFrame(rows)
    runs = pd.DataFrame({"size": ["tiny", "tiny"], "init": ["standard", "standard"]})
    band, n = frames.null_band(null, runs, 0.5, "null.csv")
    assert n == 4
    medians = [0.2, 0.3, 0.6, 0.2]  # per sample, by hand
    assert band["symmetry"].tolist() == pytest.approx(np.percentile(medians, [25, 75]).tolist())
    assert band["directionality"].tolist() == pytest.approx(np.percentile([-m for m in medians], [25, 75]).tolist())
    with pytest.raises(UserError, match="null.csv: no rows for size/init"):
        frames.null_band(null, pd.DataFrame({"size": ["large"], "init": ["standard"]}), 0.5, "null.csv")


# ------------------------------------------------------------------------------ figS4_emergence_layers
def test_layer_curves_mean_or_median_per_layer_and_step():
    rows = pd.DataFrame(
        {
            "layer": [1, 0, 0, 0, 1],
            "step": [0, 0, 0, 5, 0],
            "seed": [0, 0, 1, 0, 1],
            "symmetry": [0.4, 0.1, 0.3, 0.2, 0.8],
        }
    )
    mean = frames.layer_curves(rows, "symmetry")
    assert mean[["layer", "step"]].values.tolist() == [[0, 0], [0, 5], [1, 0]]
    assert mean["symmetry"].tolist() == pytest.approx([0.2, 0.2, 0.6])
    med = frames.layer_curves(rows.assign(symmetry=[0.4, 0.1, 0.3, 0.2, 0.9]).iloc[1:], "symmetry", "median")
    assert med["symmetry"].tolist() == pytest.approx([0.2, 0.2, 0.9])
    with pytest.raises(UserError, match="mean or median"):
        frames.layer_curves(rows, "symmetry", "max")


# ---------------------------------------------------------------------------------- fig_theory_updates
def _updates(steps_by_run):
    return pd.DataFrame(
        [
            {"run": run, "kind": kind, "step": s}
            for run, steps in steps_by_run.items()
            for s in steps
            for kind in ("gradient", "applied")
        ]
    )


def test_update_spacing_per_run_and_its_errors():
    assert frames.update_spacing(_updates({"a": [0, 5, 10], "b": [10, 0, 5]}), "u.csv") == {"a": 5, "b": 5}
    assert frames.update_spacing(_updates({"a": [3]}), "u.csv") == {"a": 0}
    with pytest.raises(UserError, match=r"u.csv: run a is scored at steps \[0, 5, 7\], not equally spaced"):
        frames.update_spacing(_updates({"a": [0, 5, 7]}), "u.csv")
    with pytest.raises(UserError, match=r"u.csv: the runs are scored at different spacings \[5, 10\]"):
        frames.update_spacing(_updates({"a": [0, 5], "b": [0, 10]}), "u.csv")


def test_update_summary_is_the_mean_over_seeds_of_the_median_over_layers():
    rows = []
    values = {}  # (objective, seed, step) -> layer values
    for objective, base in (("encoder", 0.5), ("decoder", -0.2)):
        for seed in (0, 1, 2):
            for step in (0, 10):
                layers = [base + 0.1 * seed, base - 0.3, base + 0.05 * step]
                values[(objective, seed, step)] = layers
                for layer, v in enumerate(layers):
                    rows.append(
                        {
                            "objective": objective,
                            "init": "standard",
                            "kind": "gradient",
                            "seed": seed,
                            "run": f"{objective}-s{seed}",
                            "step": step,
                            "layer": layer,
                            "symmetry": v,
                            "directionality": 2 * v,
                        }
                    )
    summary = frames.update_summary(pd.DataFrame(rows), LEVEL)
    assert summary[["objective", "step"]].values.tolist() == [
        ["decoder", 0],
        ["decoder", 10],
        ["encoder", 0],
        ["encoder", 10],
    ]
    for r in summary.itertuples(index=False):
        medians = [sorted(values[(r.objective, s, r.step)])[1] for s in (0, 1, 2)]
        m, lo, hi = _t_interval(medians)
        assert r.n_seeds == 3
        assert (r.symmetry_mean, r.symmetry_low, r.symmetry_high) == pytest.approx((m, lo, hi))
        assert r.directionality_mean == pytest.approx(2 * m)


# ------------------------------------------------------------------------------- table1_symmetric_init
def test_paper_table1_rows_with_the_rebuttals_checkpoints():
    paper_t1 = pd.DataFrame(
        {
            "model": ["bert-mini", "bert-large"],
            "dataset": ["wiki", "jigsaw"],
            "speedup_percent": [20.0, 0.0],
            "reached": ["True", "false"],
            "note": ["a", "b"],
        }
    )
    rebuttal = pd.DataFrame(
        {
            "model": ["bert-large", "bert-large", "bert-mini"],
            "dataset": ["jigsaw", "jigsaw", "wiki"],
            "step": [150000, 150000, 10],
            "init": ["standard", "symmetric", "standard"],
            "eval_loss": [2.5, 2.25, 1.0],
        }
    )
    rows = frames.paper_table1_rows(paper_t1, rebuttal)
    assert rows["speedup_paper_mean"].iloc[0] == pytest.approx(0.2) and math.isnan(rows["speedup_paper_mean"].iloc[1])
    assert rows["speedup_paper_text"].tolist() == ["20 %", "none reported"]
    # bert-mini has no symmetric checkpoint: published note only
    assert rows["note"].iloc[0] == "published, training loss: a" and math.isnan(rows["final_loss_mean"].iloc[0])
    assert rows[["final_loss_mean", "loss_gain_mean", "horizon"]].iloc[1].tolist() == [2.25, 0.25, 150000]
    assert rows["note"].iloc[1] == (
        "authors' rebuttal: held-out loss at step 150000 (standard 2.5000); speed-up as reported"
    )
    plain = frames.paper_table1_rows(paper_t1)
    assert "final_loss_mean" not in plain.columns and plain["note"].tolist() == [
        "published, training loss: a",
        "published, training loss: b",
    ]


# ------------------------------------------------------------------------------------------- tokens axes


def test_paper_tokens_per_step_is_the_authors_batch():
    # the authors' train.py: 32 sequences per device, 8 accumulation steps, 512 positions; study 3's 17.4 M tokens
    # (8500 x 32 x 64) are its step 133
    assert frames.PAPER_TOKENS_PER_STEP == 131_072
    assert round(8500 * 32 * 64 / frames.PAPER_TOKENS_PER_STEP) == 133


def test_arm_tokens_per_step_one_count_per_arm_and_clear_errors():
    runs = {"encoder": ["e0", "e1"], "decoder": ["d0"]}
    assert frames.arm_tokens_per_step({"e0": 2048, "e1": 2048, "d0": 4096}, runs) == {"encoder": 2048, "decoder": 4096}
    with pytest.raises(UserError, match="no count for run.*e1"):
        frames.arm_tokens_per_step({"e0": 2048, "d0": 2048}, runs)
    with pytest.raises(UserError, match=r"encoder runs train on different tokens per update \[2048, 4096\]"):
        frames.arm_tokens_per_step({"e0": 2048, "e1": 4096, "d0": 2048}, runs)


def test_tokens_text():
    from attention_geometry.analysis.plotting import tokens_text

    assert [tokens_text(x) for x in (2048, 17_408_000, 26_214_400_000, 512)] == ["2.05 k", "17.4 M", "26.2 G", "512"]
