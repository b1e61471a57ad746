"""Each study's committed claims, recomputed here from its committed tidy tables with pandas and scipy alone (no
`attention_geometry` code): the text claims on seeds (a, b, c1, d1, e, f, study 2's a_paper, b_paper, e_paper and
the objective's equivalence claims p_sym, p_dir, p_tie, and study 3's anti and per-layer rows) as the
pre-registrations define them: per seed the median over layers and the last K snapshots up to the run's horizon,
effects paired by seed, a two-sided 95 % t-interval, a two-sided one-sample t-test, Holm within the family, and
the verdict rule. A study folder without a claims.csv yet (a run in progress) is skipped by name."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats

REPO = Path(__file__).resolve().parents[1]
# (folder, its config, the claims a family holds: Holm over exactly these)
STUDIES = {
    "study1": ("config/study1.yaml", {"text": ["a", "b", "c1", "c2", "d1", "d2", "e"]}),
    "study2": (
        "config/study2.yaml",
        {"primary": ["a", "b", "d1"], "secondary": ["c1", "c2", "d2", "e"], "paper": ["a_paper", "b_paper", "e_paper"]},
    ),
    # docs/preregistration-3.md: the standard arms only; anti (the decoders' anti-symmetry) and the per-layer rows
    "study3": ("config/config.yaml", {"primary": ["a", "b"], "secondary": ["anti"]}),
}
MARGIN = {"symmetry": 0.05, "directionality": 0.05, "loss": 0.01}


def _study(name: str):
    folder = REPO / "results" / name
    if not (folder / "tables" / "claims.csv").exists():
        pytest.skip(f"results/{name} has no claims.csv yet")
    cfg = yaml.safe_load((REPO / STUDIES[name][0]).read_text())
    claims = pd.read_csv(folder / "tables" / "claims.csv").set_index("id")
    scores = pd.read_csv(folder / "tables" / "training_scores.csv")
    loss = pd.read_csv(folder / "tables" / "training_loss.csv")
    return cfg, claims, scores[scores["modality"] == "text"], loss


def _k(cfg) -> int:
    return int(cfg.get("figures", {}).get("horizon_snapshots", 3))


def _per_seed(scores, objective, init, column, k, last_step=None, layer=None) -> pd.Series:
    """Per seed: median over layers (or of one layer) and the run's last k snapshots (up to last_step when given)."""
    rows = scores[(scores["objective"] == objective) & (scores["init"] == init)]
    if layer is not None:
        rows = rows[rows["layer"] == layer]
    out = {}
    for seed, run in rows.groupby("seed"):
        steps = sorted(s for s in run["step"].unique() if last_step is None or s <= last_step)[-k:]
        out[seed] = run[run["step"].isin(steps)][column].median()
    return pd.Series(out).sort_index()


def _loss_at(loss, objective, init, step) -> pd.Series:
    rows = loss[(loss["objective"] == objective) & (loss["init"] == init) & (loss["step"] == step)]
    return rows.dropna(subset=["eval_loss"]).set_index("seed")["eval_loss"].sort_index()


def _last_step(scores, objective, init) -> int:
    return int(scores[(scores["objective"] == objective) & (scores["init"] == init)]["step"].max())


def _effects(cfg, scores, loss) -> dict[str, pd.Series]:
    k = _k(cfg)
    sym = lambda o, i, last=None: _per_seed(scores, o, i, "symmetry", k, last)  # noqa: E731
    dirn = lambda o, i: _per_seed(scores, o, i, "directionality", k)  # noqa: E731
    out = {
        "a": sym("encoder", "standard") - sym("decoder", "standard"),
        "b": dirn("decoder", "standard") - dirn("encoder", "standard"),
    }
    if not (scores["init"] == "symmetric-fresh").any():  # study 3: the standard arms, per layer too
        out["anti"] = sym("decoder", "standard")
        for layer in sorted(scores["layer"].unique()):
            one = lambda o, col, layer=layer: _per_seed(scores, o, "standard", col, k, layer=layer)  # noqa: E731
            out[f"a_L{layer}"] = one("encoder", "symmetry") - one("decoder", "symmetry")
            out[f"b_L{layer}"] = one("decoder", "directionality") - one("encoder", "directionality")
            out[f"anti_L{layer}"] = one("decoder", "symmetry")
        return out
    c = _last_step(scores, "encoder", "symmetric-fresh")  # the ablation's cut-off
    t = _last_step(scores, "decoder", "symmetric-fresh")  # the tied decoders' horizon
    out |= {
        "c1": _loss_at(loss, "encoder", "standard", c) - _loss_at(loss, "encoder", "symmetric-fresh", c),
        "d1": _loss_at(loss, "encoder", "fresh", c) - _loss_at(loss, "encoder", "symmetric-fresh", c),
        "e": sym("decoder", "symmetric-fresh") - sym("encoder", "symmetric-fresh", t),
        "f": _loss_at(loss, "decoder", "standard", t) - _loss_at(loss, "decoder", "symmetric-fresh", t),
    }
    if (scores["objective"] == "decoder-paper").any():
        out["a_paper"] = sym("encoder", "standard") - sym("decoder-paper", "standard")
        out["b_paper"] = dirn("decoder-paper", "standard") - dirn("encoder", "standard")
        out["e_paper"] = sym("decoder-paper", "symmetric-fresh") - sym("encoder", "symmetric-fresh", t)
        out["p_sym"] = sym("decoder-paper", "standard") - sym("decoder", "standard")
        out["p_dir"] = dirn("decoder-paper", "standard") - dirn("decoder", "standard")
        out["p_tie"] = sym("decoder-paper", "symmetric-fresh") - sym("decoder", "symmetric-fresh")
    return out


def _t(x: np.ndarray, level: float):
    n, m, se = len(x), x.mean(), x.std(ddof=1) / np.sqrt(len(x))
    h = stats.t.ppf(0.5 + level / 2, n - 1) * se
    return m, m - h, m + h, 2 * stats.t.sf(abs(m / se), n - 1)


def _holm(p: dict[str, float]) -> dict[str, float]:
    order = sorted(p, key=p.get)
    out, running = {}, 0.0
    for i, key in enumerate(order):
        running = max(running, min(1.0, (len(order) - i) * p[key]))
        out[key] = running
    return out


def _directional_verdict(est_low_high, p_holm, margin, sign):
    _, low, high = est_low_high
    near = low if sign > 0 else high
    if p_holm < 0.05 and sign * near > margin:
        return "holds"
    if (sign > 0 and high < 0) or (sign < 0 and low > 0) or (-margin < low and high < margin):
        return "contradicted"
    return "inconclusive"


@pytest.mark.parametrize("name", list(STUDIES))
def test_committed_claims_match_an_independent_recomputation(name):
    cfg, claims, scores, loss = _study(name)
    effects = _effects(cfg, scores, loss)
    p = {}
    for cid, per_seed in effects.items():
        x = per_seed.dropna().to_numpy()
        row = claims.loc[cid]
        assert int(row["n"]) == len(x) == scores["seed"][scores["objective"] == "encoder"].nunique(), cid
        m, low, high, p[cid] = _t(x, 0.95)
        np.testing.assert_allclose(
            [row["estimate"], row["low"], row["high"], row["p_value"]], [m, low, high, p[cid]], rtol=1e-9, err_msg=cid
        )
        if row["rule"] == "equivalence":  # TOST: the 90 % interval decides
            _, lo90, hi90, _ = _t(x, 0.90)
            np.testing.assert_allclose([row["tost_low"], row["tost_high"]], [lo90, hi90], rtol=1e-9, err_msg=cid)
            inside, beyond = (
                -row["margin"] < lo90 and hi90 < row["margin"],
                lo90 > row["margin"] or hi90 < -row["margin"],
            )
            assert row["verdict"] == ("holds" if inside else "contradicted" if beyond else "inconclusive"), cid
    for members in STUDIES[name][1].values():
        # the family's p-values: ours where recomputed here, the committed ones for the speed-ups (c2, d2)
        family = {c: p.get(c, claims.loc[c, "p_value"]) for c in members if c in claims.index}
        for cid, adjusted in _holm(family).items():
            np.testing.assert_allclose(claims.loc[cid, "p_holm"], adjusted, rtol=1e-9, err_msg=cid)
            if cid in effects:
                row = claims.loc[cid]
                sign = 1 if row["prediction"].startswith(">") else -1
                want = _directional_verdict((row["estimate"], row["low"], row["high"]), adjusted, row["margin"], sign)
                assert row["verdict"] == want, cid
