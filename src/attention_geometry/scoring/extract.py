"""Per layer and per head W_q,h and W_k,h of every self-attention stack, and M = W_qk; the same for the OV circuit
M_ov = sum_h W_o,h W_v,g(h).

Convention (docs/contracts.md): nn.Linear layout q_h = W_q,h x, k_h = W_k,h x, so the logit of head h is
x_i^T W_q,h^T W_k,h x_j and M = sum_h W_q,h^T W_k,h (rows: query side, columns: key side). Biases are
ignored. Grouped-/multi-query attention pairs query head h with key head h // (H_q / H_kv), as
transformers' repeat_kv does.

OV (docs/contracts.md): v_h = W_v,g(h) x and the attention's output before any residual is
sum_h W_o,h (sum_j p_ij v_j,h) + biases, W_o,h the columns h*d_head..(h+1)*d_head of the output projection's
nn.Linear weight [d, H * d_head]; so M_ov,h = W_o,h W_v,g(h) (rows: output side, columns: input side). It has the
form of W_qk with W_o,h^T in place of W_q,h and W_v in place of W_k: iter_layer_ov yields LayerQK records whose
`wq` holds W_o,h^T [H_q, d_head, d] and `wk` W_v [H_kv, d_head, d], so wqk() builds M_ov, grouped queries and
per-head chunks included, by the same code as W_qk.

A model family is one `Family` entry (architectures/registry.py; the entries in architectures/families/): which
stacks it has, where each layer's q and k weights are (architectures/keys.py finds their tensor names), how they
are laid out (one of LAYOUTS, split here) and which config fields give layers and heads. Extraction only needs the
config and a tensor getter, so the same code serves a loaded model's state dict and a streaming safetensors
reader.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from attention_geometry.architectures.keys import StackInfo, architecture_of, ov_keys, qk_keys
from attention_geometry.architectures.registry import LAYOUT_NAMES, ExtractionError, Family

__all__ = [
    "LayerQK",
    "LAYOUTS",
    "iter_layer_qk",
    "iter_layer_ov",
    "wqk",
]


@dataclass
class LayerQK:
    """The two factors of one applied self-attention layer's matrix M = sum_h wq_h^T wk_g(h).

    matrix "qk": wq the query projection [H_q, d_head, d_model], wk the key projection [H_kv, d_head, d_model]
    (rows = output features of nn.Linear). matrix "ov": wq the output projection's head slices transposed,
    W_o,h^T [H_q, d_head, d_model], wk the value projection [H_kv, d_head, d_model] (module docstring).
    """

    component: str
    layer: int
    wq: torch.Tensor
    wk: torch.Tensor
    keys: tuple[str, ...] = field(default_factory=tuple)
    matrix: str = "qk"

    @property
    def n_heads(self) -> int:
        return self.wq.shape[0]

    @property
    def n_kv_heads(self) -> int:
        return self.wk.shape[0]

    @property
    def d_model(self) -> int:
        return self.wq.shape[-1]


# ----------------------------------------------------------------------------------------------- layouts


def _separate(tensors: list[torch.Tensor], info: StackInfo) -> tuple[torch.Tensor, torch.Tensor]:
    q, k = tensors
    return _heads(q, info.n_heads, info), _heads(k, info.n_kv_heads, info)


def _conv1d_qkv(tensors: list[torch.Tensor], info: StackInfo) -> tuple[torch.Tensor, torch.Tensor]:
    # GPT-2 style Conv1D: weight [d_in, 3 * H * d_head], y = x @ W; q, k, v contiguous along the output.
    (w,) = tensors
    q, k, _ = _split(w.t(), 3, info)
    return _heads(q, info.n_heads, info), _heads(k, info.n_heads, info)


def _fused_qkv(tensors: list[torch.Tensor], info: StackInfo) -> tuple[torch.Tensor, torch.Tensor]:
    # nn.Linear weight [(H_q + 2 H_kv) * d_head, d]: all q rows, then all k rows, then all v rows.
    (w,) = tensors
    rows = w.shape[0]
    if rows % (info.n_heads + 2 * info.n_kv_heads):
        raise ExtractionError(
            f"fused qkv weight with {rows} rows does not split into {info.n_heads}+2x{info.n_kv_heads} heads"
        )
    dh = rows // (info.n_heads + 2 * info.n_kv_heads)
    q = w[: info.n_heads * dh]
    k = w[info.n_heads * dh : (info.n_heads + info.n_kv_heads) * dh]
    return _heads(q, info.n_heads, info), _heads(k, info.n_kv_heads, info)


def _fused_qkv_per_head(tensors: list[torch.Tensor], info: StackInfo) -> tuple[torch.Tensor, torch.Tensor]:
    # nn.Linear weight laid out [H, 3, d_head, d] (GPT-NeoX query_key_value, DeBERTa v1 in_proj).
    (w,) = tensors
    if w.ndim != 2 or w.shape[0] % (3 * info.n_heads):
        raise ExtractionError(
            f"fused per-head qkv weight of shape {tuple(w.shape)} does not split into 3 x {info.n_heads} heads"
        )
    w = w.reshape(info.n_heads, 3, w.shape[0] // (3 * info.n_heads), w.shape[1])
    return w[:, 0], w[:, 1]


def _split(w: torch.Tensor, parts: int, info: StackInfo) -> tuple[torch.Tensor, ...]:
    if w.ndim != 2 or w.shape[0] % parts:
        raise ExtractionError(f"fused weight of shape {tuple(w.shape)} does not split into {parts} parts")
    return tuple(w.chunk(parts, dim=0))


def _heads(w: torch.Tensor, n_heads: int, info: StackInfo) -> torch.Tensor:
    if w.ndim != 2 or w.shape[0] % n_heads:
        raise ExtractionError(f"projection weight of shape {tuple(w.shape)} does not split into {n_heads} heads")
    if w.shape[1] != info.d_model:
        raise ExtractionError(f"projection weight of shape {tuple(w.shape)} does not act on width {info.d_model}")
    return w.reshape(n_heads, w.shape[0] // n_heads, w.shape[1])


def _separate_v(tensors: list[torch.Tensor], info: StackInfo) -> torch.Tensor:
    return _heads(tensors[0], info.n_kv_heads, info)


def _conv1d_qkv_v(tensors: list[torch.Tensor], info: StackInfo) -> torch.Tensor:
    return _heads(_split(tensors[0].t(), 3, info)[2], info.n_heads, info)


def _fused_qkv_v(tensors: list[torch.Tensor], info: StackInfo) -> torch.Tensor:
    (w,) = tensors
    dh = w.shape[0] // (info.n_heads + 2 * info.n_kv_heads)
    _fused_qkv(tensors, info)  # the same checks of the rows
    return _heads(w[(info.n_heads + info.n_kv_heads) * dh :], info.n_kv_heads, info)


def _fused_qkv_per_head_v(tensors: list[torch.Tensor], info: StackInfo) -> torch.Tensor:
    (w,) = tensors
    _fused_qkv_per_head(tensors, info)  # the same checks of the shape
    return w.reshape(info.n_heads, 3, w.shape[0] // (3 * info.n_heads), w.shape[1])[:, 2]


def _output_heads(w: torch.Tensor, info: StackInfo, conv1d: bool) -> torch.Tensor:
    """W_o,h^T [H_q, d_head, d] of an output projection: an nn.Linear weight [d, H_q * d_head] (a GPT-2 Conv1D
    weight [H_q * d_head, d] with conv1d), head h the columns h * d_head .. (h + 1) * d_head - 1."""
    if conv1d:
        w = w.t()
    if w.ndim != 2 or w.shape[0] != info.d_model or w.shape[1] % info.n_heads:
        raise ExtractionError(
            f"output projection weight of shape {tuple(w.shape)} does not map {info.n_heads} heads to width "
            f"{info.d_model}"
        )
    return w.reshape(info.d_model, info.n_heads, w.shape[1] // info.n_heads).permute(1, 2, 0)


LAYOUTS: dict[str, Callable[[list[torch.Tensor], StackInfo], tuple[torch.Tensor, torch.Tensor]]] = {
    "separate": _separate,
    "conv1d_qkv": _conv1d_qkv,
    "fused_qkv": _fused_qkv,
    "fused_qkv_per_head": _fused_qkv_per_head,
}
assert tuple(LAYOUTS) == LAYOUT_NAMES, "registry.LAYOUT_NAMES and extract.LAYOUTS must name the same layouts"
# the value projection [H_kv, d_head, d] of each layout, from the tensors ov_keys names (less the output projection)
V_LAYOUTS: dict[str, Callable[[list[torch.Tensor], StackInfo], torch.Tensor]] = {
    "separate": _separate_v,
    "conv1d_qkv": _conv1d_qkv_v,
    "fused_qkv": _fused_qkv_v,
    "fused_qkv_per_head": _fused_qkv_per_head_v,
}
assert tuple(V_LAYOUTS) == LAYOUT_NAMES


# -------------------------------------------------------------------------------------------- extraction


def iter_layer_qk(
    family: Family,
    config: Any,
    keys: Iterable[str],
    get: Callable[[str], torch.Tensor],
) -> Iterator[LayerQK]:
    """Yield every applied self-attention layer's (W_q, W_k), stack by stack, fetching tensors lazily."""
    decoder_only = architecture_of(family, config) == "decoder-only"
    for stack, info, layer, names in qk_keys(family, config, keys):
        tensors = _fetch(names, get, "query and key")
        wq, wk = LAYOUTS[stack.layout](tensors, info)
        if wq.shape[1:] != wk.shape[1:]:
            raise ExtractionError(
                f"{names}: query heads {tuple(wq.shape)} and key heads {tuple(wk.shape)} differ in size"
            )
        component = "decoder" if decoder_only else stack.component
        yield LayerQK(component, layer, wq, wk, names)


def iter_layer_ov(
    family: Family,
    config: Any,
    keys: Iterable[str],
    get: Callable[[str], torch.Tensor],
) -> Iterator[LayerQK]:
    """Yield every applied self-attention layer's OV factors (matrix "ov": wq = W_o,h^T, wk = W_v; LayerQK), in the
    order of iter_layer_qk, fetching tensors lazily."""
    decoder_only = architecture_of(family, config) == "decoder-only"
    for stack, info, layer, names in ov_keys(family, config, keys):
        tensors = _fetch(names, get, "value and output")
        wv = V_LAYOUTS[stack.layout](tensors[:-1], info)
        wo = _output_heads(tensors[-1], info, conv1d=stack.layout == "conv1d_qkv")
        if wo.shape[1:] != wv.shape[1:]:
            raise ExtractionError(
                f"{names}: output projection heads {tuple(wo.shape)} and value heads {tuple(wv.shape)} differ in size"
            )
        component = "decoder" if decoder_only else stack.component
        yield LayerQK(component, layer, wo, wv, names, matrix="ov")


def _fetch(names: tuple[str, ...], get: Callable[[str], torch.Tensor], what: str) -> list[torch.Tensor]:
    """The tensors of `names`, each checked to be floating point and dequantized."""
    tensors = [get(n) for n in names]
    for n, t in zip(names, tensors):
        if not t.is_floating_point():
            raise ExtractionError(
                f"{n}: dtype {str(t.dtype).removeprefix('torch.')} is not a floating-point type; {what} weights must be"
            )
        if t.element_size() == 1:  # float8 as stored: its scales are the source's to apply (weights.base)
            raise ExtractionError(
                f"{n}: dtype {str(t.dtype).removeprefix('torch.')} reached scoring without being dequantized "
                "(fp8 weights are read with their block scales NAME_scale_inv only)"
            )
    return tensors


def wqk(
    layer: LayerQK,
    per_head: bool = False,
    dtype: torch.dtype = torch.float64,
    device: str | torch.device | None = None,
) -> torch.Tensor:
    """M = sum_h W_q,h^T W_k,g(h) ([d, d]) or, with per_head, the stack of W_q,h^T W_k,g(h) ([H_q, d, d]); for a
    matrix "ov" layer (iter_layer_ov) the same computation gives M_ov = sum_h W_o,h W_v,g(h).

    For the summed M under grouped-query attention, the query heads of each key/value group are summed
    first: sum_h W_q,h^T W_k,g(h) = sum_g (sum_{h in g} W_q,h)^T W_k,g, the same matrix with H_q / H_kv
    times fewer multiply-adds and no repeated copy of the keys. Each group is converted to `dtype` on its
    own, so no full float64 copy of W_q is made.
    """
    group = layer.n_heads // layer.n_kv_heads
    wk = layer.wk.to(device=device, dtype=dtype)
    if per_head:
        wq = layer.wq.to(device=device, dtype=dtype)
        if group > 1:
            wk = wk.repeat_interleave(group, dim=0)
        return torch.einsum("hed,hef->hdf", wq, wk)
    if group > 1:
        wq = torch.empty((layer.n_kv_heads,) + tuple(layer.wq.shape[1:]), dtype=dtype, device=wk.device)
        for g in range(layer.n_kv_heads):
            torch.sum(layer.wq[g * group : (g + 1) * group].to(device=wk.device, dtype=dtype), dim=0, out=wq[g])
    else:
        wq = layer.wq.to(device=device, dtype=dtype)
    d = wq.shape[-1]
    return wq.reshape(-1, d).t() @ wk.reshape(-1, d)
