"""Issue 58.3: the families added for the tools' users (registry rows in architectures/families/text.py, each proven
against the model's own attention in tests/test_proof_text.py, symmetric_init in tests/test_tools_inits.py, the
callback in tests/test_tools_callback.py) are scored by `attention-geometry score` from a saved folder, as a user
scores a checkpoint: a small random model of each is saved with save_pretrained and scored from disk, and every
layer's symmetry and directionality equal a numpy computation from the proven per-layer W_qk of the model in
memory."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest
from helpers import cli_in_process
from test_proof_text import ADDED_FOR_USERS
from test_tools_inits import _built

from attention_geometry.architectures.keys import get_family
from attention_geometry.scoring.extract import iter_layer_qk, wqk

NEW_FAMILIES = [*ADDED_FOR_USERS, "marian", "pegasus"]  # the seq2seq ones: tests/test_proof_seq2seq.py


def symmetry(M: np.ndarray) -> float:
    """s = (||M_s||^2 - ||M_n||^2) / ||M||^2 (the paper's definition)."""
    sym, anti = (M + M.T) / 2, (M - M.T) / 2
    return float((np.sum(sym**2) - np.sum(anti**2)) / np.sum(M**2))


def directionality(M: np.ndarray) -> float:
    """d = (R - C) / (R + C): the summed excess of row and of column norms over their mean + 2 std (the sample std,
    n - 1, as the authors' code takes it)."""
    rows, cols = np.linalg.norm(M, axis=1), np.linalg.norm(M, axis=0)
    R = np.sum(np.clip(rows - (rows.mean() + 2 * rows.std(ddof=1)), 0, None))
    C = np.sum(np.clip(cols - (cols.mean() + 2 * cols.std(ddof=1)), 0, None))
    return float((R - C) / (R + C)) if R + C > 0 else 0.0


@pytest.mark.slow
@pytest.mark.parametrize("model_type", NEW_FAMILIES)
def test_score_reads_a_saved_model_of_each_new_family(model_type, tmp_path):
    model, _ = _built(model_type)
    model.float().save_pretrained(tmp_path / "model")
    code, out, err = cli_in_process(["score", tmp_path / "model", "--name", model_type, "--out", "-"])
    assert code == 0, err
    got = pd.read_csv(io.StringIO(out)).set_index(["component", "layer"])
    seq2seq = model_type in ("marian", "pegasus")
    assert set(got.index.get_level_values("component")) == (
        {"encoder", "decoder"} if seq2seq else {"encoder" if model_type == "camembert" else "decoder"}
    )
    sd = {k: v.float() for k, v in model.state_dict().items()}
    layers = list(iter_layer_qk(get_family(model_type), model.config, sd.keys(), sd.__getitem__))
    assert sorted(got.index) == sorted((L.component, L.layer) for L in layers)
    for L in layers:
        M = wqk(L).double().numpy()
        assert got.loc[(L.component, L.layer), "symmetry"] == pytest.approx(symmetry(M), abs=1e-6)
        assert got.loc[(L.component, L.layer), "directionality"] == pytest.approx(directionality(M), abs=1e-6)


@pytest.mark.slow
def test_a_multi_head_latent_attention_model_is_refused_with_the_reason(tmp_path):
    """deepseek_v3 (MLA): its key (and query) come from low-rank latents through RMSNorms, so no W_qk of the input
    gives its logits; `score` refuses it in one line that says so, not as an unknown model type."""
    import transformers as tf

    config = tf.DeepseekV3Config(
        vocab_size=60, hidden_size=32, intermediate_size=64, moe_intermediate_size=16, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=4, q_lora_rank=16, kv_lora_rank=16, qk_rope_head_dim=4,
        qk_nope_head_dim=4, v_head_dim=8, n_routed_experts=2, num_experts_per_tok=1, n_group=1, topk_group=1,
        first_k_dense_replace=1,
    )  # fmt: skip
    model = tf.AutoModel.from_config(config)
    assert any(n.endswith("kv_a_layernorm") for n, _ in model.named_modules())  # the norm between input and key
    model.save_pretrained(tmp_path / "model")
    code, out, err = cli_in_process(["score", tmp_path / "model", "--out", "-"])
    lines = err.strip().splitlines()
    assert code != 0 and out == "" and len(lines) == 1, (code, err)
    assert "deepseek_v3" in lines[0] and "multi-head latent attention" in lines[0] and "; supported: " not in lines[0]


@pytest.mark.parametrize(
    "flags,why",
    [
        (dict(new_decoder_architecture=True, num_kv_heads=2), "grouped per key head"),
        (dict(new_decoder_architecture=False, multi_query=False), "interleaved per head"),
    ],
)
def test_falcons_other_layouts_are_refused_with_the_reason(flags, why):
    """falcon-40b / 180b (grouped) and falcon without multi-query (interleaved per head) fuse q, k and v in layouts
    the registry does not read: one error naming the layout, never a silently wrong split of the same tensor."""
    import transformers as tf

    from attention_geometry.architectures.registry import UnsupportedArchitecture

    config = tf.FalconConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, vocab_size=60, **flags)
    model = tf.AutoModel.from_config(config)
    sd = model.state_dict()
    with pytest.raises(UnsupportedArchitecture, match=why):
        list(iter_layer_qk(get_family("falcon"), config, sd.keys(), sd.__getitem__))
