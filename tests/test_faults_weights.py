"""fp8 weights: a checkpoint whose q/k tensors are stored as float8 (F8_E4M3, F8_E5M2) with per-block scales
(`*.weight_scale_inv`, block size in config.json's quantization_config.weight_block_size, the DeepSeek-V3 /
Qwen fp8 format) is dequantized before scoring; one without a scale format this package knows is one
`error:` line. Each case is a tiny synthetic checkpoint quantized here from float32 weights."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import cli_in_process as cli
from safetensors.torch import save_file

from attention_geometry.scoring.scorer import score_model

FP8 = {"F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2}
BLOCK = [24, 40]  # neither divides the 64 x 64 / 32 x 64 weights: partial blocks at the edges
QK = ("self_attn.q_proj.weight", "self_attn.k_proj.weight")


def assert_one_line(result, pattern: str) -> str:
    code, _, err = result
    assert code not in (0, None), err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert re.search(pattern, err), err
    return err


def llama_config(quant: dict | None) -> dict:
    cfg = {
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "vocab_size": 50,
        "max_position_embeddings": 32,
    }
    if quant is not None:
        cfg["quantization_config"] = quant
    return cfg


def weights(seed=0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    sd = {"model.embed_tokens.weight": torch.randn(50, 64, generator=g)}
    for i in range(2):
        sd[f"model.layers.{i}.self_attn.q_proj.weight"] = torch.randn(64, 64, generator=g) * 0.05
        sd[f"model.layers.{i}.self_attn.k_proj.weight"] = torch.randn(32, 64, generator=g) * 0.05
        sd[f"model.layers.{i}.self_attn.v_proj.weight"] = torch.randn(32, 64, generator=g) * 0.05
    return sd


def quantize(w: torch.Tensor, dtype: torch.dtype, block: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(fp8 weight, float32 scale_inv) such that w ~ fp8.float() * scale_inv expanded over the blocks."""
    rows, cols = w.shape
    br, bc = block
    scale = torch.empty(math.ceil(rows / br), math.ceil(cols / bc))
    q = torch.empty(rows, cols, dtype=dtype)
    top = torch.finfo(dtype).max
    for i in range(scale.shape[0]):
        for j in range(scale.shape[1]):
            blk = w[i * br : (i + 1) * br, j * bc : (j + 1) * bc]
            s = blk.abs().max() / top
            scale[i, j] = s
            q[i * br : (i + 1) * br, j * bc : (j + 1) * bc] = (blk / s).to(dtype)
    return q, scale


def dequantize(q: torch.Tensor, scale: torch.Tensor, block: list[int]) -> torch.Tensor:
    """The reference: each entry times the scale of its block, by explicit loops."""
    out = q.float().clone()
    for i in range(scale.shape[0]):
        for j in range(scale.shape[1]):
            out[i * block[0] : (i + 1) * block[0], j * block[1] : (j + 1) * block[1]] *= scale[i, j]
    return out


def fp8_dir(path: Path, code="F8_E4M3", scales=True, block=BLOCK, quant="config", edit=None):
    """(folder of the fp8 checkpoint, folder of the float32 weights it dequantizes to, the original float32)."""
    orig = weights()
    sd, deq = {}, {}
    for k, w in orig.items():
        if k.endswith(QK):
            q, s = quantize(w, FP8[code], BLOCK)
            sd[k] = q
            if scales:
                sd[k + "_scale_inv"] = s
            deq[k] = dequantize(q, s, BLOCK)
        else:
            sd[k] = w
            deq[k] = w
    if edit is not None:
        edit(sd)
    qc = {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3", "weight_block_size": block}
    out = {}
    for name, tensors, config in (
        ("fp8", sd, llama_config(qc if quant == "config" else None)),
        ("dequantized", deq, llama_config(None)),
        ("original", orig, llama_config(None)),
    ):
        d = path / name
        d.mkdir(parents=True)
        save_file(tensors, d / "model.safetensors")
        (d / "config.json").write_text(json.dumps(config))
        out[name] = d
    return out


def scores_of(d, per_head=True):
    return score_model(d, per_head=per_head, progress=False, name="m")


@pytest.mark.parametrize("code", sorted(FP8))
def test_fp8_with_block_scales_scores_as_its_dequantized_weights(tmp_path, code):
    dirs = fp8_dir(tmp_path, code)
    got, deq, orig = (scores_of(dirs[k]) for k in ("fp8", "dequantized", "original"))
    for c in ("symmetry", "directionality"):
        assert np.allclose(got[c], deq[c], rtol=0, atol=1e-9), c
    # and those of the float32 weights it was quantized from, within the quantization error
    tol = 0.02 if code == "F8_E4M3" else 0.05
    assert (got["symmetry"] - orig["symmetry"]).abs().max() < tol
    assert (
        (
            got[["layer", "head", "n_heads", "n_kv_heads", "d_model"]]
            == orig[["layer", "head", "n_heads", "n_kv_heads", "d_model"]]
        )
        .all()
        .all()
    )


def test_fp8_cli_score_and_extract_wqk(tmp_path):
    dirs = fp8_dir(tmp_path)
    code, _, err = cli(["score", dirs["fp8"], "--out", tmp_path / "s.csv", "--no-progress"])
    assert code == 0, err
    code, _, err = cli(["extract-wqk", dirs["fp8"], "--name", "m", "--out", tmp_path / "w.npz"])
    assert code == 0, err
    with np.load(tmp_path / "w.npz") as z:
        assert np.isfinite(z["M"]).all()


@pytest.mark.parametrize(
    "case, pattern",
    [
        ("no-scales", r"float8_e4m3fn.*no scale"),
        ("no-block-size", r"weight_block_size"),
        ("bad-scale-shape", r"scale.*shape"),
    ],
)
def test_fp8_without_a_known_scale_format_is_one_line(tmp_path, case, pattern):
    kw = {"no-scales": {"scales": False}, "no-block-size": {"quant": None}}.get(case, {})
    if case == "bad-scale-shape":
        kw["edit"] = lambda sd: sd.update(
            {"model.layers.0.self_attn.q_proj.weight_scale_inv": torch.ones(2, 2)}  # 64 x 64 in 24 x 40: 3 x 2
        )
    dirs = fp8_dir(tmp_path, **kw)
    for argv in (
        ["score", dirs["fp8"], "--out", tmp_path / "s.csv", "--no-progress"],
        ["extract-wqk", dirs["fp8"], "--name", "m", "--out", tmp_path / "w.npz"],
    ):
        assert_one_line(cli(argv), pattern)
    assert not (tmp_path / "s.csv").exists() and not (tmp_path / "w.npz").exists()


def test_fp8_prefetch_keeps_the_stored_tensors_and_their_scales(tmp_path):
    from safetensors import safe_open

    dirs = fp8_dir(tmp_path)
    code, _, err = cli(["prefetch-qk", dirs["fp8"], "--out", tmp_path / "qk", "--no-progress"])
    assert code == 0, err
    with safe_open(str(tmp_path / "qk" / "model.safetensors"), framework="pt") as st:
        keys = set(st.keys())
        assert {k for k in keys if k.endswith("_scale_inv")} == {
            f"model.layers.{i}.{t}_scale_inv" for i in range(2) for t in QK
        }
        assert st.get_tensor("model.layers.0.self_attn.q_proj.weight").dtype == torch.float8_e4m3fn
    a, b = scores_of(tmp_path / "qk"), scores_of(dirs["fp8"])
    assert (a[["symmetry", "directionality"]] == b[["symmetry", "directionality"]]).all().all()


def test_a_sparse_file_declaring_tensors_larger_than_memory_is_one_line(tmp_path):
    """Issue 59.5: a safetensors header may declare tensors its file does not really hold (a sparse file of holes
    passes every offset check); score says so in one line before allocating, instead of a 40 GB allocation."""
    d = 100_000
    cfg = {
        "model_type": "bert",
        "architectures": ["BertModel"],
        "hidden_size": d,
        "num_attention_heads": 1,
        "num_hidden_layers": 1,
        "intermediate_size": 4,
        "vocab_size": 10,
        "max_position_embeddings": 8,
    }
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg))
    nbytes = d * d * 4
    header = {
        "encoder.layer.0.attention.self.query.weight": {"dtype": "F32", "shape": [d, d], "data_offsets": [0, nbytes]},
        "encoder.layer.0.attention.self.key.weight": {
            "dtype": "F32",
            "shape": [d, d],
            "data_offsets": [nbytes, 2 * nbytes],
        },
    }
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path = folder / "model.safetensors"
    with open(path, "wb") as fh:
        fh.write(len(raw).to_bytes(8, "little") + raw)
        fh.truncate(8 + len(raw) + 2 * nbytes)  # 80 GB of holes: no disk used
    line = assert_one_line(
        cli(["score", str(folder), "--out", "-", "--no-progress"]), r"declares shape \[100000, 100000\]"
    )
    assert "GiB of memory available" in line
