"""The figure data the rules make for the notebooks (attention_geometry.analysis.figdata): Figure 1's median-symmetry
layer W_qk and its .npz format, and the symmetry vs speed-up tables, through the CLI."""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from attention_geometry import cli
from attention_geometry.analysis import figdata, symmetry_speedup
from attention_geometry.analysis import summaries as analysis
from attention_geometry.errors import UserError


def _example(d=8, **kw):
    meta = dict(
        name="m",
        component="encoder",
        layer=1,
        n_layers=3,
        d_model=d,
        n_heads=2,
        symmetry=0.25,
        directionality=-0.5,
        symmetry_min=0.0,
        symmetry_max=0.75,
    )
    meta.update(kw)
    return figdata.WqkExample(M=np.arange(d * d, dtype=np.float32).reshape(d, d) / 7, **meta)


def test_wqk_file_round_trip_and_same_bytes(tmp_path):
    ex = _example()
    a, b = tmp_path / "a.npz", tmp_path / "sub" / "b.npz"
    figdata.write_wqk(a, ex)
    figdata.write_wqk(b, ex)
    assert a.read_bytes() == b.read_bytes()  # no timestamps inside
    back = figdata.read_wqk(a)
    assert back.M.dtype == np.float32 and np.array_equal(back.M, ex.M)
    assert back.meta() == ex.meta()
    with np.load(a, allow_pickle=False) as z:  # plain numpy reads it
        assert set(z.files) == {"M", "meta"}


def test_read_wqk_errors(tmp_path):
    with pytest.raises(UserError, match="no such W_qk file"):
        figdata.read_wqk(tmp_path / "missing.npz")
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip")
    with pytest.raises(UserError, match="not a W_qk .npz"):
        figdata.read_wqk(bad)
    other = tmp_path / "other.npz"
    np.savez(other, M=np.zeros((2, 3)))
    with pytest.raises(UserError, match="not a W_qk .npz"):
        figdata.read_wqk(other)


def test_importing_figdata_loads_no_model_code():
    import subprocess

    code = (
        "import sys, attention_geometry.analysis.figdata; "
        "bad = [m for m in ('torch', 'transformers', 'attention_geometry.scoring.scorer') if m in sys.modules]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    """Small random models saved as safetensors dirs: a BERT encoder (3 layers) and a Llama with grouped
    query heads (4 layers; the GGUF goes through the same layer_matrices)."""
    torch = pytest.importorskip("torch")
    from transformers import BertConfig, BertForMaskedLM, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("models")
    models = {
        "bert": BertForMaskedLM(
            BertConfig(
                vocab_size=64,
                hidden_size=16,
                num_hidden_layers=3,
                num_attention_heads=2,
                intermediate_size=32,
                max_position_embeddings=32,
            )
        ),
        "llama": LlamaForCausalLM(
            LlamaConfig(
                vocab_size=64,
                hidden_size=24,
                num_hidden_layers=4,
                num_attention_heads=4,
                num_key_value_heads=2,
                intermediate_size=32,
            )
        ),
    }
    for key, model in models.items():
        model.save_pretrained(folder / key)
    return folder


@pytest.mark.parametrize("key", ["bert", "llama"])
def test_median_symmetry_layer_is_the_lower_median(tiny_models, key, tmp_path):
    from attention_geometry.scoring.measures import scores
    from attention_geometry.scoring.scorer import layer_matrices

    src = tiny_models / key
    mats = list(layer_matrices(src))
    s = [float(scores(r.M)[0]) for r in mats]
    ex = figdata.median_symmetry_layer(src, name=key)
    below = sum(x < ex.symmetry for x in s)
    assert below == (len(s) - 1) // 2  # the lower median (all scores distinct here)
    chosen = mats[ex.layer]
    assert ex.symmetry == s[ex.layer] and ex.directionality == float(scores(chosen.M)[1])
    assert np.array_equal(ex.M, chosen.M.float().numpy()) and ex.M.dtype == np.float32
    assert (ex.n_layers, ex.symmetry_min, ex.symmetry_max) == (len(s), min(s), max(s))
    assert (ex.d_model, ex.n_heads, ex.component) == (chosen.d_model, chosen.n_heads, chosen.component)

    out = tmp_path / "wqk.npz"
    assert cli.main(["extract-wqk", str(src), "--name", "tiny " + key, "--out", str(out)]) == 0
    back = figdata.read_wqk(out)
    assert back.name == "tiny " + key and np.array_equal(back.M, ex.M) and back.layer == ex.layer


def test_extract_wqk_cli_refuses_another_suffix(tmp_path, capsys):
    assert cli.main(["extract-wqk", str(tmp_path), "--name", "x", "--out", str(tmp_path / "x.csv")]) == 2
    assert ".npz" in capsys.readouterr().err


def _loss_and_scores():
    """Two objectives x (standard, symmetric-fresh) x 3 seeds; the symmetric runs reach lower loss."""
    rng = np.random.default_rng(0)
    srows, lrows = [], []
    for obj in ("encoder", "decoder"):
        for init in ("standard", "symmetric-fresh"):
            for seed in range(3):
                run = f"tiny-w-{obj}-{init}-s{seed}"
                keys = dict(run=run, size="tiny", dataset="w", objective=obj, init=init, seed=seed)
                for step in (0, 50, 100):
                    for layer in range(2):
                        srows.append(
                            dict(
                                keys,
                                step=step,
                                layer=layer,
                                head="all",
                                symmetry=rng.uniform(0, 1),
                                directionality=rng.uniform(-1, 0),
                            )
                        )
                    gain = 0.2 * (init != "standard") * step / 100
                    lrows.append(
                        dict(
                            keys,
                            step=step,
                            train_loss=1.0,
                            eval_loss=5 - 2 * step / 100 - gain + 0.01 * seed,
                            learning_rate=1e-3,
                        )
                    )
    return pd.DataFrame(srows), pd.DataFrame(lrows)


def test_symmetry_speedup_cli_writes_what_the_library_computes(tmp_path):
    scores, loss = _loss_and_scores()
    scores.to_csv(tmp_path / "s.csv", index=False)
    loss.to_csv(tmp_path / "l.csv", index=False)
    runs = sorted(scores["run"].unique())
    args = [
        "symmetry-speedup",
        "--scores",
        str(tmp_path / "s.csv"),
        "--loss",
        str(tmp_path / "l.csv"),
        "--runs",
        *runs,
        "--baseline-init",
        "standard",
        "--ci-level",
        "0.9",
        "--bootstrap-resamples",
        "50",
        "--bootstrap-seed",
        "3",
        "--out-runs",
        str(tmp_path / "o" / "runs.csv"),
        "--out-correlations",
        str(tmp_path / "o" / "corr.csv"),
    ]
    assert cli.main(args) == 0
    table, corr = figdata.symmetry_speedup_tables(
        pd.read_csv(tmp_path / "s.csv"), pd.read_csv(tmp_path / "l.csv"), runs, "standard", 0.9, 50, 3
    )
    assert len(table) == 6 and set(table["init"]) == {"symmetric-fresh"}
    assert len(corr) == 2 * 2 * 2  # per objective and init, 2 x 2 column pairs
    assert set(corr["init"]) == {"symmetric-fresh"}
    analysis.write_tables(table, csv=str(tmp_path / "runs.csv"))
    analysis.write_tables(corr, csv=str(tmp_path / "corr.csv"))
    assert (tmp_path / "o" / "runs.csv").read_bytes() == (tmp_path / "runs.csv").read_bytes()
    assert (tmp_path / "o" / "corr.csv").read_bytes() == (tmp_path / "corr.csv").read_bytes()
    means = figdata.seed_means(table, figdata.SYMMETRY_COLUMNS + figdata.GAIN_COLUMNS, 0.9)
    assert list(means["n_seeds"]) == [3, 3]
    assert np.allclose(means["loss_gain_mean"], table.groupby("objective", sort=True)["loss_gain"].mean().to_numpy())


def test_symmetry_speedup_correlations_are_within_each_init():
    """Two inits whose symmetry differs by construction: each correlation is over one init's seeds, equal to
    scipy's Spearman on those seeds alone, never over the pooled runs."""
    rng = np.random.default_rng(5)
    rows = []
    for obj in ("encoder", "decoder"):
        for init, offset in (("symmetric-fresh", 0.6), ("fresh", 0.0)):
            for seed in range(5):
                rows.append(
                    dict(
                        objective=obj,
                        init=init,
                        seed=seed,
                        symmetry_final=offset + rng.normal(0, 0.05),
                        symmetry_change=rng.normal(),
                        loss_gain=offset + rng.normal(0, 0.05),
                        speedup=rng.normal(),
                    )
                )
    table = pd.DataFrame(rows)
    corr = symmetry_speedup.correlation_table(
        table, figdata.SYMMETRY_COLUMNS, figdata.GAIN_COLUMNS, n_resamples=50, seed=0, by=["objective", "init"]
    )
    assert len(corr) == 2 * 2 * 2 * 2
    for r in corr.itertuples():
        g = table[(table["objective"] == r.objective) & (table["init"] == r.init)]
        assert r.n == len(g) == 5
        assert r.spearman == pytest.approx(stats.spearmanr(g[r.x], g[r.y]).statistic)


def test_symmetric_parts_against_entrywise_definition():
    M = np.random.default_rng(6).normal(size=(7, 7)).astype(np.float32)
    S, A = figdata.symmetric_parts(M)
    assert S.dtype == A.dtype == np.float64
    for i in range(7):
        for j in range(7):
            assert S[i, j] == pytest.approx((float(M[i, j]) + float(M[j, i])) / 2)
            assert A[i, j] == pytest.approx((float(M[i, j]) - float(M[j, i])) / 2)
    assert np.allclose(S + A, M)
    # a principal block of a part is that part of the block (what Figure 1 draws)
    Sb, Ab = figdata.symmetric_parts(M[:3, :3])
    assert np.allclose(Sb, S[:3, :3]) and np.allclose(Ab, A[:3, :3])
    with pytest.raises(UserError, match="square"):
        figdata.symmetric_parts(np.zeros((2, 3)))


def test_symmetry_speedup_errors(tmp_path):
    scores, loss = _loss_and_scores()
    with pytest.raises(UserError, match="no rows for run"):
        figdata.symmetry_speedup_tables(scores, loss, ["nope"], "standard", 0.95, 10, 0)
    only = [r for r in scores["run"].unique() if "standard" not in r]
    with pytest.raises(UserError, match="same-seed baseline"):
        figdata.symmetry_speedup_tables(scores, loss, only, "standard", 0.95, 10, 0)
