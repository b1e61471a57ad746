"""The model-family registry's base types: `Stack`, `Family`, `register` and the table they fill.

A model family is one `Family` entry (see families/): which self-attention stacks it has (encoder /
decoder), where each layer's q and k weights are (a key template matched as a suffix of the checkpoint's
tensor names, so "bert." or "model." prefixes do not matter), where its value and output projections are (for
the OV circuit W_o W_v), how they are laid out (one of LAYOUT_NAMES, implemented in scoring/extract.py's
LAYOUTS), and which config fields give layers and heads.

This module imports nothing of the package but `errors`: the family modules and keys.py both import it, and
only keys.py imports the families (keys.get_family), so there is no import cycle.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from attention_geometry.errors import UserError

__all__ = [
    "Stack",
    "Family",
    "FAMILIES",
    "ARCHITECTURES",
    "MODALITIES",
    "COMPONENTS",
    "LAYOUT_NAMES",
    "ConfigGetter",
    "ExtractionError",
    "UnsupportedArchitecture",
    "config_field",
    "register",
]

ConfigGetter = str | Callable[[Any], int]

ARCHITECTURES = ("encoder-only", "decoder-only", "encoder-decoder")
MODALITIES = ("text", "vision", "audio")
COMPONENTS = ("encoder", "decoder")
# how a stack's q and k weights are stored; each name has its splitting function in scoring.extract.LAYOUTS
LAYOUT_NAMES = ("separate", "conv1d_qkv", "fused_qkv", "fused_qkv_per_head")


class ExtractionError(UserError):
    """The checkpoint does not hold what its family entry says (missing tensor, wrong shape)."""


class UnsupportedArchitecture(ExtractionError):
    """No family entry for this model_type."""


def config_field(config: Any, name: str) -> Any:
    """`name` of a config given as a dict (config.json) or as an object (a transformers config); None when
    unset."""
    return config.get(name) if isinstance(config, Mapping) else getattr(config, name, None)


@dataclass(frozen=True)
class Stack:
    """One self-attention stack of a model.

    q, k: tensor-name templates with format fields from `positions` ({i} by default); matched as a suffix
    of the checkpoint's keys. For fused layouts `k` is None and `q` names the fused tensor.
    v, o: the templates of the value projection and of the attention's output projection (the OV circuit, M_ov =
    sum_h W_o,h W_v,g(h)): `v` for the separate layout only (a fused tensor holds the values too); `o` an nn.Linear
    weight [d, H * d_head], or for the conv1d_qkv layout a GPT-2 Conv1D weight [H * d_head, d]. o None: the
    family's output projection is not located, and OV is refused for it with one error.
    sub_config: attribute path of the config that describes this stack ("vision_config", "decoder"), or
    None for the top-level config. n_layers / n_heads / n_kv_heads / d_model: an attribute name of that
    config or a callable on it; n_kv_heads None means n_heads.
    positions: per applied layer position, the template's format fields (default {"i": position}); ALBERT
    maps several positions to one shared layer.
    """

    component: str
    q: str
    k: str | None = None
    layout: str = "separate"
    sub_config: str | None = None
    n_layers: ConfigGetter = "num_hidden_layers"
    n_heads: ConfigGetter = "num_attention_heads"
    n_kv_heads: ConfigGetter | None = None
    d_model: ConfigGetter = "hidden_size"
    positions: Callable[[Any], list[dict[str, int]]] | None = None
    v: str | None = None
    o: str | None = None


@dataclass(frozen=True)
class Family:
    model_type: str
    architecture: str  # encoder-only | decoder-only | encoder-decoder
    modality: str  # text | vision | audio
    stacks: tuple[Stack, ...]
    note: str = ""  # what the logits hold beyond x^T W_qk x (docs/architectures/), if anything


FAMILIES: dict[str, Family] = {}


def register(family: Family) -> Family:
    """Check `family` and add it to FAMILIES (a model_type registered twice is an error)."""
    if family.architecture not in ARCHITECTURES:
        raise ValueError(f"{family.model_type}: architecture {family.architecture!r} not in {ARCHITECTURES}")
    if family.modality not in MODALITIES:
        raise ValueError(f"{family.model_type}: modality {family.modality!r} not in {MODALITIES}")
    for s in family.stacks:
        if s.component not in COMPONENTS:
            raise ValueError(f"{family.model_type}: component {s.component!r} not in {COMPONENTS}")
        if s.layout not in LAYOUT_NAMES:
            raise ValueError(f"{family.model_type}: layout {s.layout!r} not in {sorted(LAYOUT_NAMES)}")
        if (s.k is None) != (s.layout != "separate"):
            raise ValueError(
                f"{family.model_type}: layout {s.layout!r} needs k={'a template' if s.layout == 'separate' else 'None'}"
            )
        if s.o is not None and (s.v is None) != (s.layout != "separate"):
            raise ValueError(
                f"{family.model_type}: layout {s.layout!r} with an output projection needs "
                f"v={'a template' if s.layout == 'separate' else 'None (the fused tensor holds the values)'}"
            )
    if family.model_type in FAMILIES:
        raise ValueError(f"family {family.model_type!r} registered twice")
    FAMILIES[family.model_type] = family
    return family
