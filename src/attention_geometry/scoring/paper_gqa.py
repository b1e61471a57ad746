"""The paper's grouped-query expansion, reproduced beside the matrix the attention computes.

Under grouped-query attention (H_kv key/value heads shared by H_q query heads), the attention's bilinear form
pairs query head h with key head h // (H_q / H_kv) (extract.wqk). The authors' code builds another matrix for
these models (its `grouped-attention` path), and the paper's near-zero symmetry of grouped-query decoders
(Mistral, Mixtral, the Llama 3 family, Llama-2-70B, MobileLLM) comes from that matrix. This module reproduces
it, so that a user can see how far those published numbers are from the matrix the attention computes. It is
the reproduction of a known error, never a score of the model: `attention-geometry score` uses it only when
asked (`--gqa-method paper`), and `attention-geometry compare-gqa` writes both side by side (scoring/scorer.py).

The paper's steps, in its x·W layout (A = W_q^T: [d, H_q d_h]; B = W_k^T: [d, H_kv d_h]; d the hidden size):
  1. B is viewed as [d, d', n], with d' = d / H_q (the head size it assumes) and n = H_kv d_h / d';
  2. it is repeated r = (d / d') / n times along its first axis, the hidden one, each row r times in place;
  3. the result is viewed as [d, d];
  M_paper = A B'^T, read like M (rows: query side).
The correct expansion repeats whole key/value heads along the head axis instead. With one key/value head
(multi-query attention) the two coincide: each key row tiled across the heads is the correct expansion; with
1 < H_kv < H_q they differ. Where the head size is not
d / H_q (google/gemma-3-270m: 256 against 640 / 4), step 1 cannot view B and the method is refused.

Rows of GGUF files of the llama family are stored in llama.cpp's rotary order (weights/gguf_qk.py); the paper
read transformers' rows, so they are put back in that order first (`hf_rows`). The correct W_qk does not depend
on that order; the paper's does.
"""

from __future__ import annotations

from typing import Any

import torch

from attention_geometry.errors import UserError
from attention_geometry.scoring.extract import LayerQK, wqk
from attention_geometry.scoring.gqa_methods import GQA_METHODS

__all__ = ["hf_rows", "paper_wqk", "layer_wqk"]


def hf_rows(w: torch.Tensor) -> torch.Tensor:
    """[H, d_h, d] per-head rows from llama.cpp's rotary order back to transformers' order (the inverse of
    llama.cpp's permutation: within each head, rows [0, d_h/2) and [d_h/2, d_h) were interleaved)."""
    H, dh, d = w.shape
    return w.reshape(H, dh // 2, 2, d).transpose(1, 2).reshape(H, dh, d)


def paper_wqk(layer: LayerQK, dtype: torch.dtype = torch.float64, device: Any = None) -> torch.Tensor:
    """M_paper of one layer ([d, d]) by the paper's steps (module docstring); UserError where they cannot run."""
    n_q, d_h, d = layer.wq.shape
    n_kv = layer.n_kv_heads
    if d % n_q or n_q * d_h != d:
        raise UserError(
            f"{layer.component} layer {layer.layer}: the paper's grouped-query path needs head size = hidden / "
            f"query heads ({d} / {n_q}), but the heads have size {d_h}: it cannot reshape the key weight"
        )
    A = layer.wq.reshape(n_q * d_h, d).t().to(device=device, dtype=dtype)  # [d, d]
    B = layer.wk.reshape(n_kv * d_h, d).t().to(device=device, dtype=dtype)  # [d, H_kv d_h]
    d_prime = d // n_q
    n = B.shape[1] // d_prime
    r = (d // d_prime) // n
    B = B.reshape(d, d_prime, n).repeat_interleave(r, dim=0).reshape(d, d)
    return A @ B.t()


def layer_wqk(
    layer: LayerQK, method: str, permuted_rows: bool = False, dtype: torch.dtype = torch.float64, device: Any = None
) -> torch.Tensor:
    """The summed M of a layer by `method`: "correct" (extract.wqk) or "paper" (for grouped-query layers; a
    layer with as many key as query heads has one matrix either way). permuted_rows: the layer's q/k rows are in
    llama.cpp's order (a llama-family GGUF file), put back in transformers' order for the paper's path."""
    if method not in GQA_METHODS:
        raise UserError(f"gqa method {method!r}: not one of {', '.join(GQA_METHODS)}")
    if method == "paper" and layer.n_kv_heads < layer.n_heads:
        if permuted_rows:
            layer = LayerQK(layer.component, layer.layer, hf_rows(layer.wq), hf_rows(layer.wk), layer.keys)
        return paper_wqk(layer, dtype=dtype, device=device)
    return wqk(layer, dtype=dtype, device=device)
