"""Where a model keeps its query and key weights: its family (get_family), the sizes of its self-attention stacks
read from its config (stack_info), and every applied layer's tensor names (qk_keys; ov_keys for the value and
output projections of the OV circuit), matched as unique suffixes of the checkpoint's keys. Torch-free: it reads
a config and a list of tensor names, never a tensor, so the weight sources (weights/: which tensors to read or
fetch) and the extractor (scoring/extract.py: the tensors into W_q, W_k per head) ask it alike.

Importing this module registers every family (families/).
"""

from __future__ import annotations

import numbers
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from attention_geometry.architectures import families  # noqa: F401  (registers every entry on import)
from attention_geometry.architectures.registry import (
    FAMILIES,
    ConfigGetter,
    ExtractionError,
    Family,
    Stack,
    UnsupportedArchitecture,
    config_field,
)

__all__ = [
    "StackInfo",
    "get_family",
    "supported_model_types",
    "stack_info",
    "qk_keys",
    "ov_keys",
    "architecture_of",
]


def supported_model_types() -> list[str]:
    return sorted(FAMILIES)


# model types refused with their reason (docs/architectures/text.md, "Refused"): a family whose attention logit is no
# single W_qk of the layer's input
_MLA = (
    "multi-head latent attention (MLA): the key (and, where q_lora_rank is set, the query) is read from a low-rank "
    "latent of the input through an RMSNorm (kv_a_layernorm, q_a_layernorm), so no fixed matrix W_qk gives the logit "
    "x_i^T W_qk x_j; and a rotary key part shared by all heads comes from another projection"
)
REFUSED = {"deepseek_v2": _MLA, "deepseek_v3": _MLA}


def get_family(model_type: str) -> Family:
    if model_type in REFUSED:
        raise UnsupportedArchitecture(f"model_type {model_type!r} is not supported: {REFUSED[model_type]}")
    try:
        return FAMILIES[model_type]
    except KeyError:
        raise UnsupportedArchitecture(
            f"unsupported model_type {model_type!r}; supported: {', '.join(sorted(FAMILIES))}"
        ) from None


# ----------------------------------------------------------------------------------------------- config


def _sub(config: Any, path: str | None) -> Any:
    if not path:
        return config
    obj = config
    for part in path.split("."):
        obj = config_field(obj, part)
        if obj is None:
            raise ExtractionError(f"config has no sub-config {path!r}")
    return obj


def _get(config: Any, getter: ConfigGetter, what: str) -> int:
    if callable(getter):
        value = getter(config)
    else:
        value = config_field(config, getter)
    if value is None:
        raise ExtractionError(f"config has no {what} ({getter!r})")
    low = 0 if what == "number of layers" else 1
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:  # "twelve", 12.5, -1
        name = getter if isinstance(getter, str) else getattr(getter, "__name__", "?")
        raise ExtractionError(f"config field {name} ({what}) must be an integer >= {low}, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class StackInfo:
    component: str
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_model: int
    positions: tuple[dict[str, int], ...]


def stack_info(stack: Stack, config: Any) -> StackInfo:
    cfg = _sub(config, stack.sub_config)
    n_layers = _get(cfg, stack.n_layers, "number of layers")
    n_heads = _get(cfg, stack.n_heads, "number of attention heads")
    n_kv = _get(cfg, stack.n_kv_heads, "number of key/value heads") if stack.n_kv_heads is not None else n_heads
    d_model = _get(cfg, stack.d_model, "model width")
    if n_kv <= 0 or n_heads % n_kv:
        raise ExtractionError(f"{n_heads} query heads cannot be grouped over {n_kv} key/value heads")
    try:
        positions = stack.positions(cfg) if stack.positions else [{"i": i} for i in range(n_layers)]
    except (TypeError, ValueError, ZeroDivisionError) as exc:  # a family's own reading of its config fields
        raise ExtractionError(f"config fields of the {stack.component} layers are malformed ({exc})") from None
    return StackInfo(stack.component, len(positions), n_heads, n_kv, d_model, tuple(positions))


# ------------------------------------------------------------------------------------------- tensor names


def _resolve(keys: Iterable[str], suffix: str, cache: dict[str, str]) -> str:
    """The unique key that equals `suffix` or ends with '.' + suffix."""
    if suffix in cache:
        return cache[suffix]
    keyset = keys if isinstance(keys, (set, frozenset, dict)) else set(keys)
    if suffix in keyset:
        cache[suffix] = suffix
        return suffix
    hits = [k for k in keyset if k.endswith("." + suffix)]
    if not hits:
        raise ExtractionError(f"checkpoint has no tensor named *{suffix}")
    if len(hits) > 1:
        raise ExtractionError(f"tensor name *{suffix} is ambiguous in this checkpoint: {sorted(hits)[:4]}")
    cache[suffix] = hits[0]
    return hits[0]


def qk_keys(family: Family, config: Any, keys: Iterable[str]) -> list[tuple[Stack, StackInfo, int, tuple[str, ...]]]:
    """For every applied layer: (stack, info, layer position, the full tensor names it needs)."""
    keyset = set(keys)
    cache: dict[str, str] = {}
    out = []
    for stack in family.stacks:
        info = stack_info(stack, config)
        if stack.positions is None:
            _no_layers_beyond(stack, info, keyset)
        for layer, pos in enumerate(info.positions):
            names = [stack.q] if stack.k is None else [stack.q, stack.k]
            out.append((stack, info, layer, tuple(_resolve(keyset, t.format(**pos), cache) for t in names)))
    return out


def ov_keys(family: Family, config: Any, keys: Iterable[str]) -> list[tuple[Stack, StackInfo, int, tuple[str, ...]]]:
    """For every applied layer, as qk_keys: (stack, info, layer position, the tensor names of its value and output
    projections: (v, o) for the separate layout, (fused qkv, o) for the fused ones). A stack whose output projection
    the family does not locate (Stack.o None) is one ExtractionError."""
    keyset = set(keys)
    cache: dict[str, str] = {}
    out = []
    for stack, info, layer, _ in qk_keys(family, config, keyset):
        if stack.o is None:
            raise ExtractionError(
                f"{family.model_type}: the output projection of its {stack.component} self-attention is not located, "
                "so its OV circuit W_o W_v cannot be scored"
            )
        pos = info.positions[layer]
        names = [stack.q if stack.v is None else stack.v, stack.o]
        out.append((stack, info, layer, tuple(_resolve(keyset, t.format(**pos), cache) for t in names)))
    return out


def _no_layers_beyond(stack: Stack, info: StackInfo, keys: set[str]) -> None:
    """Refuse a checkpoint that stores attention weights of layer positions the config does not name (a config
    of 3 layers read with a 6-layer checkpoint would score the first 3 and say nothing)."""
    head, _, tail = stack.q.partition("{i}")
    pattern = re.compile(r"(?:^|.*\.)" + re.escape(head) + r"(\d+)" + re.escape(tail) + "$")
    extra = sorted({int(m.group(1)) for k in keys if (m := pattern.match(k))} - set(range(info.n_layers)))
    if extra:
        raise ExtractionError(
            f"the config names {info.n_layers} {stack.component} layers, but the checkpoint holds "
            f"attention weights of layer {extra[0]} ({stack.q.format(i=extra[0])})"
        )


def architecture_of(family: Family, config: Any) -> str:
    """The family's architecture, except that an encoder family run with is_decoder=True (BERT trained as a
    causal LM) is decoder-only and its stack's component is `decoder` (docs/contracts.md)."""
    is_decoder = config_field(config, "is_decoder")
    if family.architecture == "encoder-only" and is_decoder:
        return "decoder-only"
    return family.architecture
