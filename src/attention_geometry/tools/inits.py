"""The project's four initializations on an initialized transformers model of any supported family.

`symmetric_init(model, mode)` finds every self-attention layer's query, key (and, for the fresh modes, value)
weights through the same family registry the scorer uses (architectures/registry.py, architectures/families/: the
tensor names and their layout: separate, GPT-2's Conv1D, fused qkv, fused qkv per head) and changes them in
place, in the parameters themselves (an optimizer built before keeps working). The modes are those of the BERT and
ViT runs (docs/training.md, "Initializations"; training.models.apply_init):

- standard: nothing changes (the model's own init).
- symmetric: W_q,h := W_k,g(h) for every query head h (a copy; the query bias stays its own parameter).
- fresh: W_q, W_k, W_v (and the biases stored with them) redrawn as new nn.Linear(d_model, rows) layers with
  PyTorch's default init (weights and biases U(-1/sqrt(d_model), 1/sqrt(d_model))), drawn from the global
  torch RNG in the order query, key, value, layer by layer. On a BERT model this is bitwise what
  training.models.apply_init draws (tested).
- symmetric-fresh: the same draws, then the symmetric tie.

Grouped-query and multi-query attention (H_kv < H_q key/value heads; head h reads key head g(h) = h // (H_q /
H_kv)): the tie sets each query head to its own key head, W_q,h := W_k,g(h), unscaled. Then every head's
matrix W_q,h^T W_k,g(h) = W_k,g^T W_k,g is symmetric, and so is the attention's W_qk = sum_h W_q,h^T W_k,g(h) =
(H_q / H_kv) sum_g W_k,g^T W_k,g (each head's logits have the scale they have in a multi-head model with
W_q := W_k; the query heads of one group start equal and are told apart by the output projection's gradient).

A layer shared by several positions (ALBERT) is changed once. A model whose q/k weights cannot be changed in
place (a tensor that is not a view of one of its parameters, such as a conversion transformers builds on the
fly, or an integer-quantized weight) is refused with one line, and so is a fresh mode where the value weight is
not found next to the key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from attention_geometry.architectures.keys import get_family, qk_keys
from attention_geometry.errors import UserError
from attention_geometry.training.hyper import INITS

__all__ = ["symmetric_init", "InitError"]


class InitError(UserError):
    """The model's attention weights cannot take the asked initialization (one line naming the tensor)."""


@dataclass
class _Slot:
    """One projection (query, key or value) of one layer: a [heads, d_head, d_model] view into its parameter (nn.Linear
    layout, whatever the storage) and the matching [heads, d_head] view of its bias, if there is one."""

    name: str
    weight: torch.Tensor
    bias: torch.Tensor | None


def _unwrap(model: Any) -> Any:
    while hasattr(model, "module") and not hasattr(model, "config"):  # DDP and similar wrappers
        model = model.module
    return model


class _Tensors(dict):
    """The model's tensors under the names of a saved checkpoint (the names the family templates use), and the
    parameters they are."""

    def __init__(self, model: Any):
        from attention_geometry.weights.loading import _checkpoint_state_dict

        super().__init__(_checkpoint_state_dict(model))
        self.params = {(p.data_ptr(), p.shape, p.stride()): p.data for p in model.parameters()}


def _param_view(model: Any, tensors: _Tensors, key: str) -> torch.Tensor:
    """`key`'s storage in the model: the parameter it is, so writing to it changes the model."""
    t = tensors[key]
    if not t.is_floating_point() or t.element_size() == 1:
        raise InitError(f"{key}: dtype {str(t.dtype).removeprefix('torch.')} cannot be initialized in place")
    p = tensors.params.get((t.data_ptr(), t.shape, t.stride()))
    if p is None:
        raise InitError(f"{key}: not a parameter of the model itself (a converted copy), so it cannot be set in place")
    return p


def _value_key(k_key: str, tensors: dict[str, torch.Tensor]) -> str:
    """The value projection's tensor beside a separate key projection (key -> value, k_proj -> v_proj, k -> v)."""
    head, _, last = k_key.rpartition(".")  # last: "weight"
    owner, _, proj = head.rpartition(".")
    for cand in (proj.replace("key", "value"), "v" + proj[1:] if proj.startswith("k") else None):
        if cand and cand != proj and f"{owner}.{cand}.{last}" in tensors:
            return f"{owner}.{cand}.{last}"
    raise InitError(f"{k_key}: no value projection found beside it, which the fresh inits redraw")


def _bias_of(weight_key: str, tensors: dict[str, torch.Tensor]) -> str | None:
    key = weight_key.removesuffix("weight") + "bias"
    return key if key != weight_key and key in tensors else None


def _layer_slots(model, tensors, stack, info, names, with_value: bool) -> list[_Slot]:
    """Query, key (and value) slots of one layer, as [heads, d_head, d_model] views into the parameters."""
    hq, hkv, d = info.n_heads, info.n_kv_heads, info.d_model
    w = _param_view(model, tensors, names[0])
    bkey = _bias_of(names[0], tensors)
    b = _param_view(model, tensors, bkey) if bkey else None
    if stack.layout == "separate":
        keys = list(names) + ([_value_key(names[1], tensors)] if with_value else [])
        slots = []
        for key, heads in zip(keys, (hq, hkv, hkv)):
            pw = _param_view(model, tensors, key)
            bk = _bias_of(key, tensors)
            pb = _param_view(model, tensors, bk) if bk else None
            _check_rows(key, pw, heads, d)
            dh = pw.shape[0] // heads
            slots.append(_Slot(key, pw.view(heads, dh, d), None if pb is None else pb.view(heads, dh)))
        return slots
    if stack.layout == "conv1d_qkv":  # Conv1D weight [d, 3 * H * d_head], y = x @ W; bias [3 * H * d_head]
        rows = w.shape[1] // 3
        dh = rows // hq
        wt = w.t()
        parts = [wt[i * rows : (i + 1) * rows].view(hq, dh, d) for i in range(3)]
        bparts = [None] * 3 if b is None else [b[i * rows : (i + 1) * rows].view(hq, dh) for i in range(3)]
    elif stack.layout == "fused_qkv":  # nn.Linear [(H_q + 2 H_kv) * d_head, d]: all q rows, then k, then v
        dh = w.shape[0] // (hq + 2 * hkv)
        bounds = [(0, hq), (hq, hq + hkv), (hq + hkv, hq + 2 * hkv)]
        parts = [w[a * dh : c * dh].view(c - a, dh, d) for a, c in bounds]
        bparts = [None] * 3 if b is None else [b[a * dh : c * dh].view(c - a, dh) for a, c in bounds]
    else:  # fused_qkv_per_head: nn.Linear [H * 3 * d_head, d] laid out [H, 3, d_head, d]
        dh = w.shape[0] // (3 * hq)
        w4 = w.view(hq, 3, dh, d)
        parts = [w4[:, i] for i in range(3)]
        bparts = [None] * 3 if b is None else [b.view(hq, 3, dh)[:, i] for i in range(3)]
    n = 3 if with_value else 2
    return [_Slot(f"{names[0]} ({role})", parts[i], bparts[i]) for i, role in enumerate(("query", "key", "value")[:n])]


def _check_rows(key: str, w: torch.Tensor, heads: int, d: int) -> None:
    if w.ndim != 2 or w.shape[0] % heads or w.shape[1] != d:
        raise InitError(f"{key}: weight of shape {tuple(w.shape)} does not split into {heads} heads of width {d}")


def _fresh(slot: _Slot) -> None:
    """Redraw as nn.Linear(d_model, rows) does (reset_parameters: kaiming_uniform_(a=sqrt(5)) = U(+-1/sqrt(fan_in)),
    then the bias U(+-1/sqrt(fan_in))), drawn in nn.Linear's own layout and copied into place."""
    heads, dh, d = slot.weight.shape
    w = torch.empty(heads * dh, d, dtype=slot.weight.dtype, device=slot.weight.device)
    nn.init.kaiming_uniform_(w, a=math.sqrt(5))
    slot.weight.copy_(w.view(heads, dh, d))
    if slot.bias is not None:
        bound = 1 / math.sqrt(d) if d > 0 else 0
        b = torch.empty(heads * dh, dtype=slot.bias.dtype, device=slot.bias.device)
        nn.init.uniform_(b, -bound, bound)
        slot.bias.copy_(b.view(heads, dh))


def _tie(q: _Slot, k: _Slot) -> None:
    """W_q,h := W_k,g(h), g(h) = h // (H_q / H_kv) (transformers' repeat_kv pairing)."""
    group = q.weight.shape[0] // k.weight.shape[0]
    q.weight.copy_(k.weight.repeat_interleave(group, dim=0) if group > 1 else k.weight)


def symmetric_init(model: Any, mode: str = "symmetric") -> Any:
    """Apply `mode` (one of standard, symmetric, symmetric-fresh, fresh; the module docstring defines them) to every
    self-attention layer of `model`, an initialized transformers model of a supported family, in place; returns
    the model. The fresh modes draw from the global torch RNG (seed it first). Raises InitError (a UserError, one
    line) for an unknown mode, an unsupported family, or weights that cannot be set in place."""
    if mode not in INITS:
        raise InitError(f"mode: unknown init {mode!r} (known: {', '.join(INITS)})")
    given, model = model, _unwrap(model)  # a wrapper (DataParallel, DDP) is returned as given
    config = getattr(model, "config", None)
    if config is None or not hasattr(model, "state_dict"):
        raise InitError(f"{type(model).__name__} is not a transformers model (no .config / .state_dict)")
    family = get_family(config.model_type)
    if mode == "standard":
        return given
    meta = next((n for n, p in model.named_parameters() if p.is_meta), None)
    if meta is not None:
        raise InitError(
            f"{meta}: the model's weights are on the meta device (no values to set); materialize them first "
            "(e.g. model.to_empty(device='cpu') and its init), then apply symmetric_init"
        )
    tensors = _Tensors(model)
    layers = []
    seen: set[tuple[str, ...]] = set()
    for stack, info, _, names in qk_keys(family, config, tensors.keys()):
        if names in seen:  # a layer applied at several positions (ALBERT)
            continue
        seen.add(names)
        layers.append(_layer_slots(model, tensors, stack, info, names, with_value=mode != "symmetric"))
    with torch.no_grad():
        for slots in layers:
            if mode in ("fresh", "symmetric-fresh"):
                for slot in slots:  # query, key, value: the order of training.models.init_attention
                    _fresh(slot)
            if mode in ("symmetric", "symmetric-fresh"):
                _tie(slots[0], slots[1])
    return given
