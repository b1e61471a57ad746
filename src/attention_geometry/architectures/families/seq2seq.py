"""Encoder-decoder text families: one Stack per self-attention stack (encoder, decoder); cross-attention is
not scored.

Key templates are the checkpoint's tensor names as written on disk (hub files and `save_pretrained`, which
reverts transformers' in-memory renamings), matched as unique suffixes. What else enters the logits, and how
the proofs in tests/test_proof_seq2seq.py neutralize it: docs/architectures/seq2seq-vision-audio.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from attention_geometry.architectures.registry import Family, Stack, config_field, register


def first_of(*names: str) -> Callable[[Any], int | None]:
    """Config getter: the first of `names` that the config sets (T5 leaves num_decoder_layers unset when it
    equals num_layers)."""

    def get(cfg: Any) -> int | None:
        for n in names:
            v = config_field(cfg, n)
            if v is not None:
                return v
        return None

    get.__name__ = "|".join(names)
    return get


def t5_stacks(sub_config: str | None = None, prefix: str = "", decoder: bool = True) -> tuple[Stack, ...]:
    """T5's self-attention: block i, sub-layer 0 (`SelfAttention`, q and k without bias, no 1/sqrt(d) scale;
    block 0 holds the relative position bias that every block adds to its logits)."""
    enc = Stack(
        "encoder",
        prefix + "encoder.block.{i}.layer.0.SelfAttention.q.weight",
        prefix + "encoder.block.{i}.layer.0.SelfAttention.k.weight",
        sub_config=sub_config,
        n_layers="num_layers",
        v=prefix + "encoder.block.{i}.layer.0.SelfAttention.v.weight",
        o=prefix + "encoder.block.{i}.layer.0.SelfAttention.o.weight",
        n_heads="num_heads",
        d_model="d_model",
    )
    if not decoder:
        return (enc,)
    dec = Stack(
        "decoder",
        prefix + "decoder.block.{i}.layer.0.SelfAttention.q.weight",
        prefix + "decoder.block.{i}.layer.0.SelfAttention.k.weight",
        sub_config=sub_config,
        n_layers=first_of("num_decoder_layers", "num_layers"),
        v=prefix + "decoder.block.{i}.layer.0.SelfAttention.v.weight",
        o=prefix + "decoder.block.{i}.layer.0.SelfAttention.o.weight",
        n_heads="num_heads",
        d_model="d_model",
    )
    return enc, dec


def bart_stacks(
    attn: str = "self_attn",
    d_model: str = "d_model",
    encoder_attn: str | None = None,
    encoder: str = "encoder.layers",
    decoder: str = "decoder.layers",
) -> tuple[Stack, ...]:
    """BART-style stacks: `<encoder>.{i}.<attn>.{q,k,v}_proj` and `<decoder>.{i}.<attn>.{q,k,v}_proj` (output
    projection `out_proj`), sized by the
    encoder_* / decoder_* config fields (BART, mBART, Whisper, Speech2Text, SpeechT5, DETR)."""
    ea = encoder_attn or attn
    return (
        Stack(
            "encoder",
            f"{encoder}.{{i}}.{ea}.q_proj.weight",
            f"{encoder}.{{i}}.{ea}.k_proj.weight",
            n_layers="encoder_layers",
            n_heads="encoder_attention_heads",
            d_model=d_model,
            v=f"{encoder}.{{i}}.{ea}.v_proj.weight",
            o=f"{encoder}.{{i}}.{ea}.out_proj.weight",
        ),
        Stack(
            "decoder",
            f"{decoder}.{{i}}.{attn}.q_proj.weight",
            f"{decoder}.{{i}}.{attn}.k_proj.weight",
            n_layers="decoder_layers",
            n_heads="decoder_attention_heads",
            d_model=d_model,
            v=f"{decoder}.{{i}}.{attn}.v_proj.weight",
            o=f"{decoder}.{{i}}.{attn}.out_proj.weight",
        ),
    )


for _type, _stacks, _note in (
    ("t5", t5_stacks(), "relative position bias (block 0's table, shared by all blocks) added to the logits"),
    ("bart", bart_stacks(), ""),
    ("mbart", bart_stacks(), ""),
    ("marian", bart_stacks(), "sinusoidal absolute positions added to the input (part of x)"),
    ("pegasus", bart_stacks(), "sinusoidal absolute positions added to the input (part of x)"),
):
    register(Family(_type, "encoder-decoder", "text", _stacks, note=_note))
