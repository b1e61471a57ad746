"""What the proof tests' small random models share (test_proof_seq2seq.py, test_proof_audio.py,
test_proof_vision.py): one encoder-decoder shape, the stacks argument of the per-stack driver
(test_proof_seq2seq.prove_stacks) for models whose layers keep their self-attention in `self_attn`, and the random
token ids they are run on.

The shape differs per stack on purpose (2 encoder layers of 4 heads, 3 decoder layers of 2 heads), so that a stack
sized by the other stack's config fields fails its proof."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

# width 32, feed-forward 64 in both stacks
ENC_DEC = dict(
    encoder_layers=2,
    decoder_layers=3,
    encoder_attention_heads=4,
    decoder_attention_heads=2,
    encoder_ffn_dim=64,
    decoder_ffn_dim=64,
)


def enc_dec(width: str = "d_model", **extra) -> dict:
    """The config keywords of ENC_DEC's shape, the width under the family's own name for it."""
    return {width: 32, **ENC_DEC, "attn_implementation": "eager", **extra}


Stacks = dict[str, tuple[list[torch.nn.Module], Callable]]


def enc_dec_stacks(encoder: Sequence[torch.nn.Module], decoder: Sequence[torch.nn.Module]) -> Stacks:
    """component -> (its attention modules, where the model's output keeps their probabilities)."""
    return {
        "encoder": (list(encoder), lambda out: out.encoder_attentions),
        "decoder": (list(decoder), lambda out: out.decoder_attentions),
    }


def self_attn_stacks(encoder, decoder) -> Stacks:
    """enc_dec_stacks of two stacks whose layers (`.layers`) hold their self-attention as `self_attn`."""
    return enc_dec_stacks([layer.self_attn for layer in encoder.layers], [layer.self_attn for layer in decoder.layers])


def token_ids(vocab: int, length: int, low: int = 3, batch: int = 2) -> torch.Tensor:
    """A batch of random token ids in [low, vocab) (below `low`: the special tokens the configs name)."""
    return torch.randint(low, vocab, (batch, length))
