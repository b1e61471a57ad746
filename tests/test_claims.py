"""attention_geometry.analysis.claims on small synthetic tables whose answers are known by construction."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers import run_keys
from scipy import stats as sps

from attention_geometry.analysis import claim_effects as E
from attention_geometry.analysis import claim_rules as R
from attention_geometry.analysis import claims as C
from attention_geometry.analysis import stats as S
from attention_geometry.analysis import summaries as A
from attention_geometry.analysis.paper_claims import paper_pair_gap, paper_symmetric_init
from attention_geometry.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
PAPER = ROOT / "resources" / "paper"
STEPS = [0, 100, 200, 300, 400]
MARGINS = {"symmetry": 0.05, "directionality": 0.05, "loss": 0.01, "speedup": 0.05}


def run_name(objective, init, seed):
    return f"tiny-w-{objective}-{init}-s{seed}"


SCORE_VALUES = {  # (objective, init) -> per seed (symmetry, directionality)
    ("encoder", "standard"): lambda s: (0.5 + 0.01 * s, 0.0 + 0.01 * s),
    ("decoder", "standard"): lambda s: (0.1 + 0.02 * s, -0.4 - 0.01 * s),
    ("encoder", "symmetric-fresh"): lambda s: (0.8 - 0.01 * s, 0.0),
    ("decoder", "symmetric-fresh"): lambda s: (0.4 + 0.01 * s, -0.2),
}


FAR = 0.99  # every run's score at step 0: far from its values later, inside [-1, 1] (a claim refuses others)


def score_rows(seeds, values=None):
    """Per seed: symmetry / directionality of every run (`values`, default SCORE_VALUES), constant over the last
    snapshots; the two layers sit at value -+ 0.01, so the median over layers and snapshots is the value itself."""
    values = SCORE_VALUES if values is None else values
    rows = []
    for (obj, init), f in values.items():
        for s in seeds:
            sym, d = f(s)
            for step in STEPS[:4]:
                for layer, off in enumerate((-0.01, 0.01)):
                    # step 0 is far off: it must not enter the horizon (k = 3: steps 100, 200, 300)
                    rows.append(
                        dict(
                            **run_keys(run_name(obj, init, s), obj, init, s, dataset="w"),
                            step=step,
                            layer=layer,
                            head="all",
                            symmetry=(sym + off) if step else FAR,
                            directionality=(d + off) if step else FAR,
                        )
                    )
    return pd.DataFrame(rows)


def loss_rows(seeds):
    curves = {
        ("encoder", "standard"): lambda s: [8.0, 6.0, 5.0, 4.5, 4.0 + 0.01 * s],
        ("encoder", "symmetric-fresh"): lambda s: [8.0, 5.5, 4.5, 4.0, 3.5 + 0.01 * s],
        # fresh = symmetric-fresh up to 0.001: no effect of symmetry beyond the init scale
        ("encoder", "fresh"): lambda s: [8.0, 5.5, 4.5, 4.0, 3.5 + 0.01 * s + 0.001 * (-1) ** s],
        ("decoder", "standard"): lambda s: [7.0, 5.0, 4.0, 3.5, 3.0],
        ("decoder", "symmetric-fresh"): lambda s: [7.0, 5.0, 4.0, 3.5, 3.0 + 0.001 * (-1) ** s],
    }
    rows = []
    for (obj, init), f in curves.items():
        for s in seeds:
            for step, ev in zip(STEPS, f(s)):
                rows.append(
                    dict(
                        **run_keys(run_name(obj, init, s), obj, init, s, dataset="w"),
                        step=step,
                        train_loss=ev,
                        eval_loss=ev,
                        learning_rate=1e-3,
                    )
                )
    return pd.DataFrame(rows)


def update_rows(seeds):
    rows = []
    for obj in ("encoder", "decoder"):
        for s in seeds:
            for step in STEPS[:4]:
                for kind in ("gradient", "applied"):
                    if kind == "applied" and step == 300:
                        continue  # the last snapshot has no applied update
                    for layer in (0, 1):
                        rows.append(
                            dict(
                                **run_keys(run_name(obj, "standard", s), obj, "standard", s, dataset="w"),
                                step=step,
                                layer=layer,
                                kind=kind,
                                symmetry=0.3 if obj == "encoder" else 0.05 + 0.01 * s,
                                directionality=0.0 if obj == "encoder" else -0.3 - 0.01 * s,
                            )
                        )
    return pd.DataFrame(rows)


def null_rows():
    rng = np.random.default_rng(0)
    return pd.DataFrame(
        [
            dict(
                size="tiny",
                init=init,
                sample=i,
                layer=layer,
                symmetry=rng.normal(0, 0.02),
                directionality=rng.normal(0, 0.1),
            )
            for init in ("standard", "fresh")
            for i in range(100)
            for layer in (0, 1)
        ]
    )


def pretrained_rows(n_per_class):
    rows = []
    for arch, comp, sym in (("encoder-only", "encoder", 0.5), ("decoder-only", "decoder", 0.1)):
        for m in range(n_per_class):
            for layer in range(3):
                rows.append(
                    dict(
                        model=f"{arch}-{m}",
                        modality="text",
                        architecture=arch,
                        component=comp,
                        n_params=10 + m,
                        layer=layer,
                        head="all",
                        symmetry=sym + (0.02 if comp == "encoder" else 0.03) * m + 0.01 * layer,
                        directionality=-0.1 - 0.005 * m if comp == "encoder" else -0.4 - 0.01 * m,
                    )
                )
    return pd.DataFrame(rows)


def text_tables(seeds=(0, 1, 2), swap=False, null=True, n_models=1, training=None, pretrained=None, **kw):
    """The ClaimTables of build() (its keywords but the settings'; `loss` and `updates` replace those tables)."""
    enc = [run_name("encoder", "standard", s) for s in seeds]
    dec = [run_name("decoder", "standard", s) for s in seeds]
    loss = kw.pop("loss", loss_rows(seeds))
    return C.ClaimTables(
        training=score_rows(seeds) if training is None else training,
        loss=loss,
        updates=kw.pop("updates", update_rows(seeds)),
        pretrained=pretrained_rows(n_models) if pretrained is None else pretrained,
        null=null_rows() if null else None,
        emergence_runs={"encoder": dec, "decoder": enc} if swap else {"encoder": enc, "decoder": dec},
        ablation_runs=sorted(loss["run"].unique()),
    )


def build(seeds=(0, 1, 2), swap=False, null=True, n_models=1, training=None, pretrained=None, **kw):
    tables = text_tables(
        seeds, swap, null, n_models, training, pretrained, **{k: kw.pop(k) for k in ("loss", "updates") if k in kw}
    )
    settings = C.ClaimSettings(margins=MARGINS, horizon_snapshots=3, level=0.95, **kw)
    return C.reproduction_claims(tables, settings).set_index("id")


CORE = ["a", "b", "c1", "c2", "d1", "d2", "e", "f", "f2", "v1", "v2", "v3", "v4"]
CORE += ["a_paper", "b_paper", "e_paper", "p_sym", "p_dir", "p_tie"]  # the authors' decoder objective's arm
CORE += ["anti", "anti_paper"]  # the decoders' anti-symmetry (study 3)
FAMILY = ["a", "b", "c1", "c2", "d1", "d2", "e"]  # the text family; the vision family (v1, v4) is apart
VISION_FAMILY = ["v1", "v4"]


def test_every_claim_is_listed_with_its_columns():
    c = build()
    assert list(c.reset_index().columns) == R.CLAIM_COLUMNS
    assert list(c.index) == list(C.CLAIM_IDS)
    assert sorted(c.index[c["kind"] == "core"]) == sorted(CORE)
    assert set(c.loc[["f", "f2"], "rule"]) == {"equivalence"}
    assert set(c["verdict"]) <= {"holds", "contradicted", "inconclusive", "descriptive", "not tested"}


def test_clear_effects_hold_with_the_right_numbers():
    c = build()
    diffs = np.array([0.4 - 0.01 * s for s in (0, 1, 2)])
    ci = sps.ttest_1samp(diffs, 0).confidence_interval(0.95)
    a = c.loc["a"]
    assert a["verdict"] == "holds" and a["unit"] == "seed" and a["n"] == 3
    assert (a["estimate"], a["low"], a["high"]) == pytest.approx((diffs.mean(), ci.low, ci.high))
    assert a["p_value"] == pytest.approx(sps.ttest_1samp(diffs, 0).pvalue)
    assert a["p_signflip"] == pytest.approx(0.25) and a["p_floor"] == pytest.approx(0.25)
    assert a["margin"] == 0.05 and "opposite sign" not in a["note"]
    # decoder - encoder directionality: (-0.4 - 0.01 s) - 0.01 s
    assert c.loc["b", "estimate"] == pytest.approx(np.mean([-0.4 - 0.02 * s for s in (0, 1, 2)]))
    assert c.loc["b", "verdict"] == "holds"
    # retained symmetry, decoder - encoder: (0.4 + 0.01 s) - (0.8 - 0.01 s)
    assert c.loc["e", "estimate"] == pytest.approx(np.mean([-0.4 + 0.02 * s for s in (0, 1, 2)]))
    assert c.loc["e", "verdict"] == "holds"
    # loss gain vs standard at the horizon (step 400): 0.5 for every seed
    assert c.loc["c1", "estimate"] == pytest.approx(0.5) and c.loc["c1", "verdict"] == "holds"


def test_retained_symmetry_at_the_common_horizon_of_a_shorter_decoder_run():
    # the decoder's tied runs end at step 200 (the default's shorter run); the encoder's tied runs go on to
    # 300, where their symmetry is set far off: claim e must compare both at steps <= 200
    t = score_rows((0, 1, 2))
    tied = t["init"] == "symmetric-fresh"
    t = t[~(tied & (t["objective"] == "decoder") & (t["step"] == 300))].copy()
    t.loc[tied & (t["objective"] == "encoder") & (t["step"] == 300), "symmetry"] = -0.9
    e = build(training=t).loc["e"]
    # k = 3 snapshots up to 200 are 0, 100, 200: per run two values at FAR (step 0) and four at value -+ 0.01,
    # median = value + 0.01 for both objectives, so the paired difference is (0.4 + 0.01 s) - (0.8 - 0.01 s)
    assert e["estimate"] == pytest.approx(np.mean([-0.4 + 0.02 * s for s in (0, 1, 2)]))
    assert "steps 0, 100, 200" in e["note"] and e["verdict"] == "holds"


def test_signed_speedup_claims_by_hand():
    c = build()
    # c2_lstar, at the common target = the highest minimum: standard seed 2, 4.02. Standard reaches it between
    # 300 (4.5) and 400 (4.0 + 0.01 s); symmetric-fresh between 200 (4.5) and 300 (4.0): s* = 200 + 100 * 0.48 / 0.5
    big_s = [300 + 100 * (4.5 - 4.02) / (4.5 - 4.0 - 0.01 * s) for s in (0, 1, 2)]
    sp = [1 - 296 / b for b in big_s]
    assert c.loc["c2_lstar", "estimate"] == pytest.approx(np.mean(sp))
    assert c.loc["c2_lstar", "verdict"] == "holds" and c.loc["c2_lstar", "kind"] == "also"
    assert "L* = 4.0200" in c.loc["c2_lstar", "test"]
    # c2, at the declared target (default: the same-seed standard run's loss at the horizon, step 400, 4 + 0.01 s):
    # S = 400; symmetric-fresh crosses between 200 (4.5) and 300 (4.0): s* = 200 + 100 * (0.5 - 0.01 s) / 0.5
    declared = [1 - (200 + 100 * (0.5 - 0.01 * s) / 0.5) / 400 for s in (0, 1, 2)]
    ci = sps.ttest_1samp(declared, 0).confidence_interval(0.95)
    c2 = c.loc["c2"]
    assert (c2["estimate"], c2["low"], c2["high"]) == pytest.approx((np.mean(declared), ci.low, ci.high))
    assert c2["verdict"] == "holds" and "pre-declared target" in c2["test"]
    # the paper's definition: S_base = 400 (the baseline's last step), the same crossing: equal here
    assert c.loc["c2_paper", "estimate"] == pytest.approx(np.mean(declared))
    # fresh vs standard at the same target: the fresh curve is symmetric-fresh's up to 0.001 at step 400 only
    assert c.loc["c2_fresh", "estimate"] == pytest.approx(np.mean(declared)) and c.loc["c2_fresh", "verdict"] == (
        "descriptive"
    )


def test_declared_target_as_a_loss_value():
    c = build(speedup_target={"loss": 4.5})
    # standard reaches 4.5 at 300, symmetric-fresh and fresh at 200: 1 - 200/300 for every seed
    assert c.loc["c2", "estimate"] == pytest.approx(1 - 200 / 300)
    assert "the declared held-out loss 4.5" in c.loc["c2", "test"]
    # vs fresh: both at 200, no speed-up: a negligible effect contradicts the directional claim
    assert c.loc["d2", "estimate"] == pytest.approx(0.0) and c.loc["d2", "verdict"] == "contradicted"
    # a target neither run reaches: every seed left out, the claim cannot hold
    never = build(speedup_target={"loss": 3.0})
    assert never.loc["c2", "n"] == 0 and never.loc["c2", "verdict"] == "inconclusive"
    assert "Seed(s) 0 (both runs), 1 (both runs), 2 (both runs): never reaches" in never.loc["c2", "note"]
    # 3.8: symmetric-fresh gets there (3.5 + 0.01 s at step 400), the standard run (4 + 0.01 s) never does
    base_never = build(speedup_target={"loss": 3.8}).loc["c2"]
    assert base_never["n"] == 0 and "0 (the standard run)" in base_never["note"]
    with pytest.raises(UserError, match="speed-up target"):
        build(speedup_target={"step": 3})


def test_declared_target_at_a_given_step():
    # the standard run's loss at step 200 is 5.0 (S = 200); symmetric-fresh reaches 5.0 between 100 (5.5) and 200
    # (4.5), at 150: 1 - 150/200 for every seed, a zero-width interval
    c = build(speedup_target={"baseline_loss_at_step": 200})
    assert (c.loc["c2", "estimate"], c.loc["c2", "low"], c.loc["c2", "high"]) == pytest.approx((0.25, 0.25, 0.25))
    assert c.loc["c2", "verdict"] == "holds" and "at step 200" in c.loc["c2", "test"]
    # a step beyond a contrast's horizon (the decoder's, 400) cannot be the target: those claims are not tested
    late = build(speedup_target={"baseline_loss_at_step": 900})
    assert late.loc["c2", "verdict"] == "not tested" and "beyond the horizon 400" in late.loc["c2", "note"]
    assert late.loc["c2_lstar", "verdict"] == "holds"  # the other definitions are unaffected


def test_negligible_effect_contradicts_and_no_effect_claim_holds():
    c = build()
    # symmetric-fresh vs fresh: gains +-0.001, inside the 0.01 margin -> contradicted (negligible)
    assert c.loc["d1", "verdict"] == "contradicted" and "negligible" in c.loc["d1", "note"]
    # decoder symmetric-fresh gains nothing: the same +-0.001 -> the no-effect claim holds by TOST
    f = c.loc["f"]
    gains = [-0.001 * (-1) ** s for s in (0, 1, 2)]
    assert f["prediction"] == "within ±0.01" and f["verdict"] == "holds"
    assert f["estimate"] == pytest.approx(np.mean(gains))
    lower = sps.ttest_1samp(gains, -0.01, alternative="greater").pvalue
    upper = sps.ttest_1samp(gains, 0.01, alternative="less").pvalue
    assert f["p_tost"] == pytest.approx(max(lower, upper)) and f["p_tost"] < 0.05
    ci = sps.ttest_1samp(gains, 0).confidence_interval(0.90)
    assert (f["tost_low"], f["tost_high"]) == pytest.approx((ci.low, ci.high))
    assert math.isnan(f["p_holm"])  # not in the Holm family


def test_reversed_effect_is_contradicted_with_the_opposite_sign_note():
    c = build(swap=True)
    a = c.loc["a"]
    assert a["estimate"] == pytest.approx(-np.mean([0.4 - 0.01 * s for s in (0, 1, 2)]))
    assert a["verdict"] == "contradicted"
    assert R.OPPOSITE in a["note"]
    assert c.loc["b", "verdict"] == "contradicted" and R.OPPOSITE in c.loc["b", "note"]


def test_two_seeds_are_never_decided():
    c = build(seeds=(0, 1))
    for cid in ("a", "b", "c1", "c2", "e", "f"):
        assert c.loc[cid, "n"] == 2
        assert c.loc[cid, "verdict"] == "inconclusive", cid
        assert "Too few seeds (n = 2)" in c.loc[cid, "note"]
    assert c.loc["a", "p_floor"] == pytest.approx(0.5)


def test_null_rows():
    c = build()
    b2 = c.loc["b2"]
    # decoder d (-0.4 - 0.01 s) minus the null's mean of per-sample medians over layers
    nl = null_rows()
    per = nl[nl["init"] == "standard"].groupby("sample")["directionality"].median()
    assert b2["estimate"] == pytest.approx(np.mean([-0.4 - 0.01 * s for s in (0, 1, 2)]) - per.mean())
    assert b2["verdict"] == "holds" and "percentiles" in b2["note"] and "0 of 3 seeds inside" in b2["note"]
    assert c.loc["b1", "verdict"] == "descriptive" and "3 of 3 seeds inside" in c.loc["b1", "note"]
    missing = build(null=False)
    assert missing.loc["b1", "verdict"] == "not tested" and "null" in missing.loc["b1", "note"]
    assert missing.loc["b2", "verdict"] == "not tested"


def test_pretrained_models_are_the_unit():
    one = build(n_models=1)
    assert one.loc["g1", "unit"] == "model" and one.loc["g1", "n"] == 2
    assert one.loc["g1", "verdict"] == "descriptive" and "Descriptive" in one.loc["g1", "note"]
    three = build(n_models=3)
    # per-model medians over layers: encoders 0.51 + 0.02 m, decoders 0.11 + 0.03 m (m = 0, 1, 2)
    enc, dec = [0.51 + 0.02 * m for m in range(3)], [0.11 + 0.03 * m for m in range(3)]
    ci = sps.ttest_ind(enc, dec, equal_var=False).confidence_interval(0.95)
    g1 = three.loc["g1"]
    assert g1["n"] == 6 and g1["verdict"] == "holds"
    assert (g1["estimate"], g1["low"], g1["high"]) == pytest.approx((np.mean(enc) - np.mean(dec), ci.low, ci.high))
    assert g1["p_value"] == pytest.approx(sps.ttest_ind(enc, dec, equal_var=False).pvalue)
    assert three.loc["g2", "estimate"] == pytest.approx(-0.41 + 0.105) and three.loc["g2", "verdict"] == "holds"


def test_pretrained_caveat_named_in_the_claims():
    """A model whose logits no fixed bilinear form gives (Gemma 3's q/k norm) stays in g1/g2, named in the note."""
    rows = pretrained_rows(3).assign(model_type="bert")
    rows.loc[rows["model"] == "decoder-only-1", "model_type"] = "gemma3_text"
    c = build(pretrained=rows)
    for cid in ("g1", "g2"):
        assert c.loc[cid, "n"] == 6
        assert "Caveat: decoder-only-1 (q/k normalized per head: no fixed bilinear form" in c.loc[cid, "note"]
    plain = build(pretrained=pretrained_rows(3).assign(model_type="bert"))
    assert "Caveat" not in plain.loc["g1", "note"]
    assert plain.loc["g1", "estimate"] == c.loc["g1", "estimate"]


def test_update_claims_on_seeds():
    c = build()
    h = c.loc["h_gradient_1"]
    assert h["unit"] == "seed" and h["n"] == 3
    assert h["estimate"] == pytest.approx(np.mean([0.3 - 0.05 - 0.01 * s for s in (0, 1, 2)]))
    assert c.loc["h_gradient_2", "estimate"] == pytest.approx(-0.31)
    assert "each spanning 100 steps" in c.loc["h_applied_1", "note"]
    flipped = C.reproduction_claims(
        training=score_rows((0, 1, 2)),
        loss=None,
        updates=update_rows((0, 1, 2)).assign(directionality=lambda d: -d["directionality"]),
        emergence_runs={
            "encoder": [run_name("encoder", "standard", s) for s in (0, 1, 2)],
            "decoder": [run_name("decoder", "standard", s) for s in (0, 1, 2)],
        },
    ).set_index("id")
    assert flipped.loc["h_gradient_2", "verdict"] == "contradicted"
    assert R.OPPOSITE in flipped.loc["h_gradient_2", "note"]
    # no loss table: the loss claims are listed as not tested, not dropped
    assert flipped.loc["c1", "verdict"] == "not tested" and "loss" in flipped.loc["c1", "note"]


def test_missing_data_is_not_tested_never_dropped():
    c = C.reproduction_claims(C.ClaimTables(), C.ClaimSettings()).set_index("id")
    assert list(c.index) == list(C.CLAIM_IDS)
    assert (c["verdict"] == "not tested").all() and (c["n"] == 0).all()
    assert "no training table" in c.loc["a", "note"] and "no loss table" in c.loc["c1", "note"]
    # the keyword form gives the same table
    same = C.reproduction_claims(training=None, loss=None, emergence_runs={}).set_index("id")
    assert same["note"].equals(c["note"])
    with pytest.raises(UserError, match="unknown"):
        C.reproduction_claims(trainign=None)


def test_paper_pair_gap_from_resources():
    paper = pd.read_csv(PAPER / "paper_training_scores.csv")
    txt = paper_pair_gap(paper, "symmetry", False, 0.95)
    last = paper[paper["step"] == paper["step"].max()]
    gaps = []
    for _, g in last.groupby(["model", "dataset"]):
        e = np.median(g.loc[g["objective"] == "encoder", "symmetry"])
        d = np.median(g.loc[g["objective"] == "decoder", "symmetry"])
        gaps.append(e - d)
    assert len(gaps) == 6
    ci = sps.ttest_1samp(gaps, 0).confidence_interval(0.95)
    assert txt.startswith(f"{np.mean(gaps):+.3f} [{ci.low:+.3f}, {ci.high:+.3f}]") and "n = 6" in txt


def test_paper_symmetric_init_figures_from_resources():
    loss = pd.read_csv(PAPER / "paper_symmetric_init_loss.csv")
    t1 = pd.read_csv(PAPER / "paper_table1.csv")
    txt = paper_symmetric_init(loss, t1, None, "loss", 0.95)
    gains = [
        g[g["init"] == "standard"].sort_values("step")["train_loss"].iloc[-1]
        - g[g["init"] == "symmetric"].sort_values("step")["train_loss"].iloc[-1]
        for _, g in loss.groupby(["model", "dataset"])
    ]
    assert txt.startswith(f"{np.mean(gains):+.3f}") and "n = 6" in txt
    sp = paper_symmetric_init(loss, t1, None, "speedup", 0.95)
    assert "bert-mini wikipedia 73 %" in sp and "bert-base jigsaw none" in sp


def test_claim_sentences_and_counts():
    c = build().reset_index()
    text = [C.claim_sentence(r) for _, r in c.iterrows()]
    assert all(t.startswith("**(") for t in text)
    assert "holds" in text[0] and "n = 3" in text[0] and "margin ±0.05" in text[0]
    assert "margin ±5 %" in text[c.index[c["id"] == "c2"][0]]
    assert C.verdict_counts(c).startswith(f"{int(((c['kind'] == 'core') & (c['verdict'] == 'holds')).sum())} holds")


def test_init_table_signed_speedups_every_seed_counts():
    t = A.init_table(loss_rows((0, 1, 2)), "standard", 0.95)
    row = t[(t["objective"] == "encoder") & (t["init"] == "symmetric-fresh") & (t["compared_to"] == "standard")].iloc[0]
    big_s = [300 + 100 * (4.5 - 4.02) / (4.5 - 4.0 - 0.01 * s) for s in (0, 1, 2)]
    sp = [1 - 296 / b for b in big_s]
    ci = sps.ttest_1samp(sp, 0).confidence_interval(0.95)
    assert row["n_pairs"] == 3 and row["target"] == pytest.approx(4.02)
    assert (row["speedup_mean"], row["speedup_low"], row["speedup_high"]) == pytest.approx(
        (np.mean(sp), ci.low, ci.high)
    )
    assert row["loss_gain_mean"] == pytest.approx(0.5)
    # the paper's definition: S_base = 400, the standard run's loss there 4 + 0.01 s; symmetric-fresh reaches it
    # between 200 (4.5) and 300 (4.0)
    saved = [(400 - (200 + 100 * (0.5 - 0.01 * s) / 0.5)) / 400 for s in (0, 1, 2)]
    ci = sps.ttest_1samp(saved, 0).confidence_interval(0.95)
    assert (row["speedup_paper_mean"], row["speedup_paper_low"], row["speedup_paper_high"]) == pytest.approx(
        (np.mean(saved), ci.low, ci.high)
    )
    vs_fresh = t[(t["init"] == "symmetric-fresh") & (t["compared_to"] == "fresh")]
    assert len(vs_fresh) == 1 and vs_fresh["objective"].iloc[0] == "encoder"  # no decoder fresh run: no row
    assert (t.loc[t["init"] == "standard", "speedup_text"] == "baseline").all()
    assert math.isclose(S.p_floor(3), 0.25)


# ------------------------------------------------------------------------- family, Holm, equivalence
def _holm_by_hand(p):
    """Holm's step-down, written out: sort, multiply the i-th smallest by (m - i), carry the running maximum."""
    order = sorted(range(len(p)), key=lambda i: p[i])
    out, running = [0.0] * len(p), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p) - rank) * p[i]))
        out[i] = running
    return out


def test_the_family_is_the_directional_core_claims_holm_adjusted():
    c = build()
    # the decoders' anti-symmetry is a family of its own (of one here: build() has no decoder-paper runs)
    assert c.loc["anti", "p_holm"] == pytest.approx(c.loc["anti", "p_value"])
    fam = c[c["p_holm"].notna()].drop(index="anti")
    assert sorted(fam.index) == sorted(FAMILY)
    assert (c.loc[FAMILY, "kind"] == "core").all() and (c.loc[FAMILY, "rule"] == "directional").all()
    assert fam["p_holm"].tolist() == pytest.approx(_holm_by_hand(fam["p_value"].tolist()))
    assert (fam["p_holm"] >= fam["p_value"]).all()
    assert all(f"Holm-adjusted over the {len(FAMILY)} text core directional claims" in t for t in fam["test"])


# ------------------------------------------------------------------------------------------- vision claims
VIT_STEPS = [0, 250, 500, 750]


def vit_run(init, seed):
    return f"vit-tiny-digits-classifier-{init}-s{seed}"


def vision_tables(seeds=(0, 1, 2, 3, 4, 5)):
    """ViT runs of four inits: scores (two layers at value -+ 0.01, the same at steps 250-750 and another value at
    step 0) and held-out loss curves with known gaps at the last step, 750."""
    rise = {s: 0.06 + 0.01 * s for s in seeds}  # the standard run's symmetry at the horizon minus step 0
    start = {s: 0.02 * (-1) ** s for s in seeds}
    final = {  # held-out loss at step 750 by init
        "standard": lambda s: 0.30 + 0.01 * s,
        "symmetric-fresh": lambda s: 0.30 + 0.01 * s + 0.002 * (-1) ** s,  # within +-0.01 of standard
        "fresh": lambda s: 0.35 + 0.01 * s + 0.004 * s,  # fresh worse than symmetric-fresh by 0.05 + ...
        "symmetric": lambda s: 0.32 + 0.01 * s,
    }
    scores, loss = [], []
    for init, f in final.items():
        for s in seeds:
            run = vit_run(init, s)
            ident = dict(run=run, size="vit-tiny", dataset="digits", objective="classifier", init=init, seed=s)
            for step in VIT_STEPS:
                value = start[s] + (rise[s] if step else 0.0)
                for layer, off in enumerate((-0.01, 0.01)):
                    scores.append(
                        dict(ident, step=step, layer=layer, head="all", symmetry=value + off, directionality=0.0)
                    )
            curve = [2.3, 1.0, 0.5, f(s)]
            for step, ev in zip(VIT_STEPS, curve):
                loss.append(dict(ident, step=step, train_loss=ev, eval_loss=ev, learning_rate=1e-3, eval_accuracy=0.9))
    return pd.DataFrame(scores), pd.DataFrame(loss), rise, final


def build_with_vision(seeds=(0, 1, 2), vision_seeds=(0, 1, 2, 3, 4, 5)):
    scores, vloss, rise, final = vision_tables(vision_seeds)
    text_loss = loss_rows(seeds)
    tables = C.ClaimTables(
        training=pd.concat([score_rows(seeds), scores], ignore_index=True),
        loss=pd.concat([text_loss, vloss], ignore_index=True),
        updates=update_rows(seeds),
        pretrained=pretrained_rows(1),
        null=null_rows(),
        emergence_runs={
            "encoder": [run_name("encoder", "standard", s) for s in seeds],
            "decoder": [run_name("decoder", "standard", s) for s in seeds],
        },
        ablation_runs=sorted(text_loss["run"].unique()),
        vision_runs=sorted(vloss["run"].unique()),
    )
    settings = C.ClaimSettings(margins=MARGINS, horizon_snapshots=3, level=0.95)
    return C.reproduction_claims(tables, settings).set_index("id"), rise, final


def test_vision_claims_from_known_per_seed_effects():
    c, rise, final = build_with_vision()
    seeds = range(6)
    # v1: the standard ViT's symmetry at the horizon (steps 250-750) minus its step 0, per seed
    v1 = np.array([rise[s] for s in seeds])
    assert c.loc["v1", "n"] == 6 and c.loc["v1", "estimate"] == pytest.approx(v1.mean())
    lo, hi = sps.t.interval(0.95, 5, loc=v1.mean(), scale=sps.sem(v1))
    assert (c.loc["v1", "low"], c.loc["v1", "high"]) == pytest.approx((lo, hi))
    # v2: standard - symmetric-fresh loss at step 750 (+-0.002): equivalent within +-0.01 by TOST
    v2 = np.array([final["standard"](s) - final["symmetric-fresh"](s) for s in seeds])
    assert c.loc["v2", "estimate"] == pytest.approx(v2.mean(), abs=1e-12)
    assert c.loc["v2", "rule"] == "equivalence" and c.loc["v2", "verdict"] == "holds"
    # v4: fresh - symmetric-fresh loss at step 750
    v4 = np.array([final["fresh"](s) - final["symmetric-fresh"](s) for s in seeds])
    assert c.loc["v4", "estimate"] == pytest.approx(v4.mean())
    assert c.loc["v4", "p_value"] == pytest.approx(sps.ttest_1samp(v4, 0).pvalue)
    # v_symmetric: descriptive, standard - symmetric loss
    assert c.loc["v_symmetric", "verdict"] == "descriptive"
    assert c.loc["v_symmetric", "estimate"] == pytest.approx(np.mean([-0.02] * 6))
    # v3: the speed-up at the standard run's loss at the horizon: the even seeds' symmetric-fresh run ends 0.002
    # above it and never reaches it (censored: left out, and the claim cannot hold); the odd seeds' reach it
    # between steps 500 (loss 0.5) and 750 (linear interpolation)
    assert c.loc["v3", "n"] == 3 and c.loc["v3", "rule"] == "equivalence"
    assert c.loc["v3", "verdict"] != "holds" and "never reaches the target" in c.loc["v3", "note"]
    odd = [s for s in seeds if s % 2]
    s_star = [500 + 250 * (0.5 - final["standard"](s)) / (0.5 - final["symmetric-fresh"](s)) for s in odd]
    assert c.loc["v3", "estimate"] == pytest.approx(np.mean([1 - x / 750 for x in s_star]))


def test_the_vision_family_is_holm_adjusted_apart_and_changes_no_text_verdict():
    c, _, _ = build_with_vision()
    text_only = build()
    vis = c.loc[VISION_FAMILY]
    assert vis["p_holm"].tolist() == pytest.approx(_holm_by_hand(vis["p_value"].tolist()))
    assert all("Holm-adjusted over the 2 vision core directional claims" in t for t in vis["test"])
    text = c.loc[FAMILY]
    assert text["p_holm"].tolist() == pytest.approx(text_only.loc[FAMILY, "p_holm"].tolist())
    assert text["verdict"].tolist() == text_only.loc[FAMILY, "verdict"].tolist()
    assert (text_only.loc[["v1", "v2", "v3", "v4"], "verdict"] == "not tested").all()


def _fixed(values, unit_labels=None):
    labels = unit_labels or [f"tiny/w/{i}" for i in range(len(values))]

    def effect(ctx):
        return E.Effect(pd.Series(values, index=labels, dtype=float), "fixed values")

    return effect


def _claims_of(*specs):
    """Claims with fixed per-unit values: (id, kind, values, sign, rule)."""
    return [
        R.Claim(cid, f"claim {cid}", kind, "seed", (), _fixed(v), sign, "symmetry", rule)
        for cid, kind, v, sign, rule in specs
    ]


def test_holm_can_turn_a_nominal_effect_inconclusive_and_the_margin_is_required():
    strong = [0.5, 0.52, 0.55, 0.51]
    weak = [0.1, 0.3, 0.08, 0.25]  # p = 0.044: below alpha alone, not after Holm (2nd largest of 4: x 2)
    small = [0.03, 0.08, 0.04, 0.07]  # non-zero, but its interval [0.017, 0.093] does not clear a 0.05 margin
    null = [0.1, -0.2, 0.05, 0.0]  # no effect: the largest p of the family
    claims = _claims_of(
        ("x", "core", strong, 1, "directional"),
        ("y", "core", weak, 1, "directional"),
        ("z", "core", small, 1, "directional"),
        ("v", "core", null, 1, "directional"),
        ("w", "also", weak, 1, "directional"),  # the same values outside the family: unadjusted
    )
    c = R.evaluate(claims, C.ClaimTables(), C.ClaimSettings(margins={"symmetry": 0.001})).set_index("id")
    p = [sps.ttest_1samp(v, 0).pvalue for v in (strong, weak, small, null)]
    assert c.loc[["x", "y", "z", "v"], "p_holm"].tolist() == pytest.approx(_holm_by_hand(p))
    assert c.loc["y", "p_value"] < 0.05 <= c.loc["y", "p_holm"]
    assert c.loc["y", "verdict"] == "inconclusive" and "p_holm" in c.loc["y", "note"]
    assert c.loc["w", "verdict"] == "holds" and math.isnan(c.loc["w", "p_holm"])
    assert c.loc["x", "verdict"] == "holds"
    wide = R.evaluate(claims, C.ClaimTables(), C.ClaimSettings(margins={"symmetry": 0.05})).set_index("id")
    ci = sps.ttest_1samp(small, 0).confidence_interval(0.95)
    assert ci.low > 0 and ci.low < 0.05 < ci.high
    assert wide.loc["z", "verdict"] == "inconclusive" and "does not clear the margin +0.05" in wide.loc["z", "note"]


def _verdict_by_hand(values, sign, margin, p_used):
    if len(values) < S.MIN_N:
        return "inconclusive"
    ci = sps.ttest_1samp(values, 0).confidence_interval(0.95)
    if (sign > 0 and ci.high < 0) or (sign < 0 and ci.low > 0) or (-margin < ci.low and ci.high < margin):
        return "contradicted"
    near_ok = ci.low > margin if sign > 0 else ci.high < -margin
    return "holds" if near_ok and p_used < 0.05 else "inconclusive"


def test_leave_one_out_stability_by_brute_force():
    x = [0.30, 0.32, 0.35, 0.31, 0.9]  # unit 4 is far off: without it the interval narrows
    y = [0.40, 0.45, 0.38, 0.60, 0.41]
    z = [0.2, 0.25, -0.1, 0.22]  # units 0-3 only
    claims = _claims_of(
        ("x", "core", x, 1, "directional"), ("y", "core", y, 1, "directional"), ("z", "core", z, 1, "directional")
    )
    # z's fixed values carry units 0-3: leaving unit 4 out changes x and y only
    c = R.evaluate(claims, C.ClaimTables(), C.ClaimSettings()).set_index("id")
    data = {"x": x, "y": y, "z": z}
    p_full = [sps.ttest_1samp(v, 0).pvalue for v in data.values()]
    full = {k: _verdict_by_hand(v, 1, 0.05, a) for (k, v), a in zip(data.items(), _holm_by_hand(p_full))}
    assert c["verdict"].to_dict() == full
    for cid in data:
        same = []
        for u in range(len(data[cid])):
            sub = {k: [v for i, v in enumerate(vals) if i != u] for k, vals in data.items()}
            adj = _holm_by_hand([sps.ttest_1samp(v, 0).pvalue for v in sub.values()])
            same.append(_verdict_by_hand(sub[cid], 1, 0.05, dict(zip(sub, adj))[cid]) == full[cid])
        assert c.loc[cid, "loo_stability"] == pytest.approx(np.mean(same)), cid


def test_three_seed_claims_are_never_stable_to_leaving_one_out():
    c = build()
    # two seeds left: never decided, so every decided 3-seed claim has stability 0, every inconclusive one 1
    decided = c[c["verdict"].isin(["holds", "contradicted"]) & (c["unit"] == "seed")]
    assert len(decided) and (decided["loo_stability"] == 0).all()
    assert c.loc[c["verdict"] == "descriptive", "loo_stability"].isna().all()


def test_equivalence_contradicted_beyond_the_margin_and_censored_speedups():
    # the decoder's tied init gains 0.05 nats at every step after 0 (+-0.001): beyond the 0.01 margin
    loss = loss_rows((0, 1, 2))
    tied = (loss["objective"] == "decoder") & (loss["init"] == "symmetric-fresh") & (loss["step"] > 0)
    loss.loc[tied, "eval_loss"] -= 0.05
    f = build(loss=loss).loc["f"]
    gains = [0.05 - 0.001 * (-1) ** s for s in (0, 1, 2)]
    ci = sps.ttest_1samp(gains, 0).confidence_interval(0.90)
    assert (f["tost_low"], f["tost_high"]) == pytest.approx((ci.low, ci.high))
    assert f["verdict"] == "contradicted" and "beyond the margin" in f["note"]
    # in the plain tables the tied decoder ends at 3.0 +- 0.001: seeds 0 and 2 (3.001) never reach the standard's
    # final 3.0, a speed-up of unknown size: left out, and no verdict on the one seed left
    f2 = build().loc["f2"]
    assert f2["n"] == 1 and f2["verdict"] == "inconclusive"
    assert "Seed(s) 0 (the symmetric-fresh run), 2 (the symmetric-fresh run): never reaches" in f2["note"]


def test_change_from_step_0():
    c = build()
    # score_rows puts every run at FAR at step 0 and at its value from step 100 on
    enc = [0.0 + 0.01 * s - FAR for s in (0, 1, 2)]
    dec = [-0.4 - 0.01 * s - FAR for s in (0, 1, 2)]
    assert c.loc["b_change_enc", "estimate"] == pytest.approx(np.mean(enc))
    assert c.loc["b_change_enc", "verdict"] == "descriptive"
    ci = sps.ttest_1samp(dec, 0).confidence_interval(0.95)
    assert (c.loc["b_change_dec", "low"], c.loc["b_change_dec", "high"]) == pytest.approx((ci.low, ci.high))
    assert c.loc["b_change_dec", "verdict"] == "holds"
    # the words follow the numbers: both move down from FAR; the paired change contrast equals b
    assert "encoders -0.980" in c.loc["b", "note"] and "move down" in c.loc["b", "note"]
    assert f"paired by seed, {c.loc['b', 'estimate']:+.3f}" in c.loc["b", "note"]


# ------------------------------------------------------------------------ written once, counted once
def test_claim_texts_are_written_once():
    c = build()
    texts = {cl.id: R.claim_text(cl, C.ClaimSettings()) for cl in C.CLAIMS}
    assert c["claim"].to_dict() == texts
    assert len(set(texts.values())) == len(texts)
    for path in [*ROOT.glob("notebooks/*.ipynb"), ROOT / "README.md", *ROOT.glob("docs/*.md")]:
        body = path.read_text()
        assert not [t for t in texts.values() if t in body], path  # texts come from claims.csv, never restated


def test_report_counts_come_from_the_table():
    c = build().reset_index()
    lines = C.report_summary(c)
    for kind in ("core", "also"):
        counts = c[c["kind"] == kind]["verdict"].value_counts()
        expected = ", ".join(f"{int(counts[v])} {v}" for v in C.VERDICT_ORDER if v in counts)
        assert C.verdict_counts(c, kind) == expected
        assert f"({int((c['kind'] == kind).sum())}): {expected}" in lines[0]
    core = c[c["kind"] == "core"]
    assert lines[2:] == [C.claim_bullet(r) for _, r in core.iterrows()]
    # the report notebook states no count or claim text of its own: it calls these
    import json

    nb = json.loads((ROOT / "notebooks" / "reproduction_report.ipynb").read_text())
    code = "\n".join("".join(cell["source"]) for cell in nb["cells"] if cell["cell_type"] == "code")
    assert "claims_lib.report_summary(claims)" in code and "claims_lib.rule_text(" in code
    assert not [w for w in ("five hold", "one is contradicted", "holds and") if w in code]


def gqa_rows(shifts_by_model):
    """A grouped-query table (formats.columns.GQA_COLUMNS) with, per model, per-layer scores given by hand."""
    rows = []
    for model, (s, sp) in shifts_by_model.items():
        for layer, (a, b) in enumerate(zip(s, sp)):
            rows.append(
                dict(
                    model=model,
                    component="decoder",
                    layer=layer,
                    n_heads=8,
                    n_kv_heads=2,
                    symmetry=a,
                    directionality=-0.2,
                    symmetry_paper=b,
                    directionality_paper=-0.1,
                    relative_distance=1.0,
                )
            )
    return pd.DataFrame(rows)


def test_gqa_expansion_claim_on_models_by_hand():
    """g3: per model, the paper's expansion's median symmetry over layers minus the attention's W_qk's (the
    medians taken by hand here); descriptive below 3 models, decided (one-sample t over models) from 3."""
    layers = {
        "m1": ([0.10, 0.30, 0.20], [0.00, 0.05, 0.02]),  # medians 0.20 and 0.02
        "m2": ([0.15, 0.25, 0.19, 0.21], [0.01, 0.03, 0.02, 0.05]),  # 0.20 and 0.025 (even count: mean of the middle)
        "m3": ([0.40, 0.20, 0.25], [0.10, 0.12, 0.08]),  # 0.25 and 0.10
    }
    expected = {"m1": 0.02 - 0.20, "m2": 0.025 - 0.20, "m3": 0.10 - 0.25}
    three = C.reproduction_claims(C.ClaimTables(gqa=gqa_rows(layers)), C.ClaimSettings()).set_index("id").loc["g3"]
    x = np.array(list(expected.values()))
    ci = sps.ttest_1samp(x, 0).confidence_interval(0.95)
    assert three["unit"] == "model" and three["n"] == 3 and three["kind"] == "also" and three["prediction"] == "< 0"
    assert (three["estimate"], three["low"], three["high"]) == pytest.approx((x.mean(), ci.low, ci.high))
    assert three["p_value"] == pytest.approx(sps.ttest_1samp(x, 0).pvalue)
    assert three["verdict"] == _verdict_by_hand(x, -1, 0.05, sps.ttest_1samp(x, 0).pvalue) == "holds"
    assert "m2 +0.200 by the attention's W_qk, +0.025 by the expansion, not published by the paper" in three["note"]

    two = {k: layers[k] for k in ("m1", "m2")}
    g3 = C.reproduction_claims(C.ClaimTables(gqa=gqa_rows(two)), C.ClaimSettings()).set_index("id").loc["g3"]
    assert g3["verdict"] == "descriptive" and g3["n"] == 2 and "Descriptive: 2 grouped-query model(s)" in g3["note"]
    assert g3["estimate"] == pytest.approx((expected["m1"] + expected["m2"]) / 2)

    # a model the paper published: its published median is named (the paper's distinct score set, same component)
    paper = pd.DataFrame(
        [
            dict(
                modality="language",
                family_file="F",
                model="m1",
                architecture="decoder-only",
                component="decoder",
                n_params=10,
                layer=i,
                symmetry=v,
                directionality=0.0,
                same_as="",
            )
            for i, v in enumerate([0.01, 0.03, 0.02])
        ]
    )
    named = C.reproduction_claims(C.ClaimTables(gqa=gqa_rows(two), paper_pretrained=paper), C.ClaimSettings())
    assert (
        "m1 +0.200 by the attention's W_qk, +0.020 by the expansion, +0.020 published"
        in named.set_index("id").loc["g3", "note"]
    )
    untested = C.reproduction_claims(C.ClaimTables(), C.ClaimSettings()).set_index("id").loc["g3"]
    assert untested["verdict"] == "not tested" and "no gqa table" in untested["note"]


# ------------------------------------------------------------------ the authors' decoder objective (study 2)
PAPER_DEC = {  # per seed: (symmetry, directionality) of the standard run, symmetry of the symmetric-fresh run
    "standard": lambda s: (0.12 + 0.015 * s, -0.1 + 0.02 * s),
    "symmetric-fresh": lambda s: (0.41 + 0.005 * s, -0.2),
}


def paper_decoder_rows(seeds):
    return score_rows(seeds, {("decoder-paper", init): f for init, f in PAPER_DEC.items()})


def build_with_paper_decoder(seeds=(0, 1, 2, 3), **kw):
    training = pd.concat([score_rows(seeds), paper_decoder_rows(seeds)], ignore_index=True)
    loss = loss_rows(seeds)
    decoder = loss[loss["objective"] == "decoder"]
    paper = decoder.assign(objective="decoder-paper", run=decoder["run"].str.replace("-decoder-", "-decoder-paper-"))
    loss = pd.concat([loss, paper], ignore_index=True)
    tables = C.ClaimTables(
        training=training,
        loss=loss,
        updates=update_rows(seeds),
        pretrained=pretrained_rows(1),
        null=null_rows(),
        emergence_runs={
            o: [run_name(o, "standard", s) for s in seeds] for o in ("encoder", "decoder", "decoder-paper")
        },
        ablation_runs=sorted(loss["run"].unique()),
    )
    settings = C.ClaimSettings(margins=MARGINS, horizon_snapshots=3, level=0.95, **kw)
    return C.reproduction_claims(tables, settings).set_index("id")


def test_the_paper_decoder_claims_are_the_per_seed_differences_against_each_arm():
    seeds = (0, 1, 2, 3)
    c = build_with_paper_decoder(seeds)
    enc = {s: (0.5 + 0.01 * s, 0.0 + 0.01 * s) for s in seeds}
    dec = {s: (0.1 + 0.02 * s, -0.4 - 0.01 * s) for s in seeds}
    decp = {s: PAPER_DEC["standard"](s) for s in seeds}
    tied = {"encoder": {s: 0.8 - 0.01 * s for s in seeds}, "decoder": {s: 0.4 + 0.01 * s for s in seeds}}
    tied["decoder-paper"] = {s: PAPER_DEC["symmetric-fresh"](s)[0] for s in seeds}
    want = {
        "a_paper": [enc[s][0] - decp[s][0] for s in seeds],
        "b_paper": [decp[s][1] - enc[s][1] for s in seeds],
        "e_paper": [tied["decoder-paper"][s] - tied["encoder"][s] for s in seeds],
        "p_sym": [decp[s][0] - dec[s][0] for s in seeds],
        "p_dir": [decp[s][1] - dec[s][1] for s in seeds],
        "p_tie": [tied["decoder-paper"][s] - tied["decoder"][s] for s in seeds],
    }
    for cid, diffs in want.items():
        ci = sps.ttest_1samp(diffs, 0).confidence_interval(0.95)
        assert c.loc[cid, "n"] == len(seeds), cid
        assert (c.loc[cid, "estimate"], c.loc[cid, "low"], c.loc[cid, "high"]) == pytest.approx(
            (np.mean(diffs), ci.low, ci.high)
        ), cid
    # a_paper and e_paper clear their margins with tiny spread: they hold (Holm over the paper-decoder family)
    assert c.loc["a_paper", "verdict"] == "holds" and c.loc["e_paper", "verdict"] == "holds"
    # b_paper: -0.10, -0.09, -0.08, -0.07 per seed, beyond the -0.05 margin with little spread: holds
    assert c.loc["b_paper", "verdict"] == "holds"
    # p_dir: the two decoders differ by ~0.35 in directionality: equivalence is contradicted
    assert c.loc["p_dir", "verdict"] == "contradicted" and c.loc["p_dir", "rule"] == "equivalence"
    fam = ["a_paper", "b_paper", "e_paper"]
    p = S.holm([c.loc[i, "p_value"] for i in fam])
    assert list(c.loc[fam, "p_holm"]) == pytest.approx(list(p))


def test_configured_families_decide_which_claims_are_adjusted_together():
    fams = {"primary": ["a", "b", "d1"], "secondary": ["c1", "c2", "d2", "e"], "paper": ["a_paper", "b_paper"]}
    c = build_with_paper_decoder(families=fams)
    assert c.loc[[i for m in fams.values() for i in m], "p_value"].notna().all()
    for members in fams.values():
        p = S.holm([c.loc[i, "p_value"] for i in members])
        assert list(c.loc[members, "p_holm"]) == pytest.approx(list(p))
    # a directional core claim in no family is tested alone: its p is not adjusted
    assert math.isnan(c.loc["e_paper", "p_holm"])
    assert "Holm" not in c.loc["e_paper", "test"] and "primary" in c.loc["a", "test"]
    with pytest.raises(UserError, match="unknown claim id"):
        build_with_paper_decoder(families={"x": ["a", "zz"]})
    with pytest.raises(UserError, match="several families"):
        build_with_paper_decoder(families={"x": ["a"], "y": ["a"]})


def test_without_paper_decoder_runs_its_claims_are_not_tested():
    c = build()
    for cid in ("a_paper", "b_paper", "e_paper", "p_sym", "p_dir", "p_tie"):
        assert c.loc[cid, "verdict"] == "not tested", cid


def test_a_report_without_the_study3_rows_is_the_evaluation_of_the_other_claims_alone():
    """report_claims drops the decoders' anti-symmetry and the per-layer rows where the families do not name them;
    every other row (Holm-adjusted p, verdict, leave-one-out stability) must be what evaluating the other claims
    alone gives."""
    tables = text_tables()
    for families in (None, {"primary": ["a", "b", "d1"], "secondary": ["c1", "c2", "d2", "e"]}):
        settings = C.ClaimSettings(margins=MARGINS, horizon_snapshots=3, level=0.95, families=families)
        kept = C.report_claims(C.reproduction_claims(tables, settings), families)
        assert "anti" not in set(kept["id"]) and "a_L0" not in set(kept["id"]) and "a" in set(kept["id"])
        alone = R.evaluate([c for c in C.CLAIMS if not c.id.startswith("anti") and "_L" not in c.id], tables, settings)
        pd.testing.assert_frame_equal(kept, alone)
    named = {"primary": ["a", "b"], "secondary": ["anti"]}
    settings = C.ClaimSettings(margins=MARGINS, horizon_snapshots=3, level=0.95, families=named)
    full = C.reproduction_claims(tables, settings)
    pd.testing.assert_frame_equal(C.report_claims(full, named), full)
