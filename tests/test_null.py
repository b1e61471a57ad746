"""The random-init null (attention_geometry.scoring.random_init_null, `attention-geometry score-null`):
rows and columns, tied
inits exactly symmetric, per-layer scores against an independent numpy computation, distinct samples, the
CLI's output and its one-line errors."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml
from helpers import SPECIAL, write_random_corpus, write_run_config_file

from attention_geometry.cli import main
from attention_geometry.errors import UserError
from attention_geometry.scoring.random_init_null import NULL_COLUMNS, NULL_INITS, NULL_SEED_OFFSET, score_null
from attention_geometry.training.models import build_model

SHAPE = {"num_layers": 3, "hidden_size": 32, "num_heads": 4, "intermediate_size": 64}
VOCAB = 50


@pytest.fixture(scope="module")
def run_yaml(tmp_path_factory):
    d = tmp_path_factory.mktemp("null")
    corpus = write_random_corpus(d / "corpus", n_train=8, n_heldout=4, vocab=VOCAB)
    return write_run_config_file(d / "RUN.yaml", corpus, max_steps=10, eval_blocks=4, overrides=SHAPE)


@pytest.fixture(scope="module")
def table(run_yaml):
    return score_null(run_yaml, NULL_INITS, samples=3)


# ------------------------------------------------------------------- an independent computation


def wqk_by_hand(model) -> list[np.ndarray]:
    """Per layer, M = sum_h W_q,h^T W_k,h from the modules' weights (nn.Linear layout, heads = row blocks)."""
    out = []
    H = model.config.num_attention_heads
    for layer in model.bert.encoder.layer:
        wq = layer.attention.self.query.weight.detach().double().numpy()
        wk = layer.attention.self.key.weight.detach().double().numpy()
        dh = wq.shape[0] // H
        out.append(sum(wq[h * dh : (h + 1) * dh].T @ wk[h * dh : (h + 1) * dh] for h in range(H)))
    return out


def scores_by_hand(M: np.ndarray, num_std: float = 2.0) -> tuple[float, float]:
    """docs/contracts.md: s = (||M_s||^2 - ||M_n||^2) / ||M||^2; d = (R - C) / (R + C) with R, C the summed
    excess of the row / column L2 norms over mean + num_std * std (Bessel-corrected), 0 when R + C = 0."""
    Ms, Mn = (M + M.T) / 2, (M - M.T) / 2
    s = (np.sum(Ms * Ms) - np.sum(Mn * Mn)) / np.sum(M * M)
    rows = np.sqrt(np.sum(M * M, axis=1))
    cols = np.sqrt(np.sum(M * M, axis=0))

    def excess(x):
        t = x.mean() + num_std * x.std(ddof=1)
        return np.sum(np.maximum(x - t, 0.0))

    R, C = excess(rows), excess(cols)
    return float(s), float(0.0 if R + C == 0 else (R - C) / (R + C))


# -------------------------------------------------------------------------------------------- rows


def test_rows_and_columns(table):
    assert list(table.columns) == NULL_COLUMNS
    assert len(table) == len(NULL_INITS) * 3 * SHAPE["num_layers"]
    assert set(table["size"]) == {"tiny"}
    keys = set(zip(table["init"], table["sample"], table["layer"]))
    assert keys == {
        (i, NULL_SEED_OFFSET + s, layer) for i in NULL_INITS for s in range(3) for layer in range(SHAPE["num_layers"])
    }
    assert table[["symmetry", "directionality"]].notna().all().all()
    eps = 1e-12  # a tied W_qk scores 1 up to rounding
    assert table["symmetry"].between(-1 - eps, 1 + eps).all()
    assert table["directionality"].between(-1 - eps, 1 + eps).all()


def test_tied_init_is_exactly_symmetric(table):
    tied = table[table["init"] == "symmetric-fresh"]
    assert len(tied) == 3 * SHAPE["num_layers"]
    assert np.abs(tied["symmetry"].to_numpy() - 1.0).max() <= 1e-12
    assert np.abs(tied["directionality"].to_numpy()).max() <= 1e-12  # row norms = column norms
    untied = table[table["init"] != "symmetric-fresh"]
    assert (untied["symmetry"].abs() < 0.9).all()


@pytest.mark.parametrize("init", ["standard", "fresh"])
def test_scores_match_an_independent_computation(table, init):
    for i in range(3):
        seed = NULL_SEED_OFFSET + i
        model = build_model("tiny", "encoder", init, seed, special_tokens=SPECIAL, vocab_size=VOCAB, **SHAPE)
        got = table[(table["init"] == init) & (table["sample"] == seed)].sort_values("layer")
        assert list(got["layer"]) == list(range(SHAPE["num_layers"]))
        for (_, row), M in zip(got.iterrows(), wqk_by_hand(model)):
            s, d = scores_by_hand(M)
            assert row["symmetry"] == pytest.approx(s, abs=1e-12)
            assert row["directionality"] == pytest.approx(d, abs=1e-12)


def test_samples_differ_and_differ_from_training_seeds(table, run_yaml):
    for init in ("standard", "fresh"):
        t = table[table["init"] == init]
        per_sample = [tuple(g.sort_values("layer")["symmetry"]) for _, g in t.groupby("sample")]
        assert len(set(per_sample)) == 3
    # seed 0's model (the run's own initial weights) is not one of the null samples
    M0 = wqk_by_hand(build_model("tiny", "encoder", "standard", 0, special_tokens=SPECIAL, vocab_size=VOCAB, **SHAPE))
    s0 = scores_by_hand(M0[0])[0]
    assert not np.isclose(
        table[(table["init"] == "standard") & (table["layer"] == 0)]["symmetry"], s0, rtol=0, atol=1e-12
    ).any()


def test_run_init_and_seed_do_not_matter(table, run_yaml, tmp_path):
    raw = yaml.safe_load(run_yaml.read_text())
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump({**raw, "init": "fresh", "seed": 7, "objective": "decoder"}))
    t = score_null(other, ["standard"], samples=2)
    ref = table[(table["init"] == "standard") & (table["sample"] < NULL_SEED_OFFSET + 2)].reset_index(drop=True)
    pd.testing.assert_frame_equal(t, ref)


def test_function_errors(run_yaml, tmp_path):
    with pytest.raises(UserError, match="unknown init 'tied'"):
        score_null(run_yaml, ["standard", "tied"], 2)
    with pytest.raises(UserError, match="given more than once"):
        score_null(run_yaml, ["fresh", "fresh"], 2)
    with pytest.raises(UserError, match="samples"):
        score_null(run_yaml, ["fresh"], 0)
    with pytest.raises(UserError, match="corpus"):
        score_null(write_run_config_file(tmp_path / "r.yaml", tmp_path / "nope"), ["fresh"], 1)


# --------------------------------------------------------------------------------------------- CLI


def test_cli_writes_the_table(run_yaml, table, tmp_path, capsys):
    out = tmp_path / "t" / "null.csv"
    code = main(
        [
            "score-null",
            "--run-config",
            str(run_yaml),
            "--inits",
            *NULL_INITS,
            "--samples",
            "3",
            "--out",
            str(out),
            "--quiet",
        ]
    )
    assert code == 0
    got = pd.read_csv(out)
    pd.testing.assert_frame_equal(got, table, check_dtype=False, rtol=0, atol=1e-15)
    assert [p.name for p in out.parent.iterdir()] == ["null.csv"]  # no temporary file left


@pytest.mark.parametrize(
    "args, message",
    [
        (["--inits", "standard", "tied"], "error: inits: unknown init 'tied'"),
        (["--inits", "fresh", "fresh"], "error: inits: 'fresh' given more than once"),
        (["--samples", "0"], "error: samples: must be an integer >= 1, got 0"),
        (["--threads", "0"], "error: --threads: must be >= 1, got 0"),
        (["--out", "{tmp}/null.xlsx"], "error: {tmp}/null.xlsx: unknown output suffix '.xlsx'"),
        (["--run-config", "{tmp}/missing.yaml"], "error: run config not found: {tmp}/missing.yaml"),
        (["--run-config", "{tmp}/bad.yaml"], "error: {tmp}/bad.yaml: size: unknown size 'huge'"),
        (["--run-config", "{tmp}/nocorpus.yaml"], "error: corpus: corpus directory not found"),
    ],
)
def test_cli_errors_are_one_line(run_yaml, tmp_path, capsys, args, message):
    write_run_config_file(tmp_path / "bad.yaml", tmp_path, size="huge")
    write_run_config_file(tmp_path / "nocorpus.yaml", tmp_path / "nope")
    base = {"--run-config": str(run_yaml), "--samples": "1", "--out": str(tmp_path / "null.csv")}
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    for k in list(base):
        if k in args:
            del base[k]
    argv = ["score-null", *[x for kv in base.items() for x in kv], *args, "--quiet"]
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith(message.replace("{tmp}", str(tmp_path))), err
    assert not (tmp_path / "null.csv").exists() and not (tmp_path / "null.xlsx").exists()
