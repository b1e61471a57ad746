"""Vision families: ViT-style encoders, DETR's encoder and decoder, GIT's image-and-text transformer.

Key templates are the checkpoint's tensor names as written on disk (hub files and `save_pretrained`, which
reverts transformers' in-memory renamings such as ViT's `attention.attention.query` -> `attention.q_proj`),
matched as unique suffixes. What else enters the logits and how tests/test_proof_vision.py neutralizes it:
docs/architectures/seq2seq-vision-audio.md.
"""

from __future__ import annotations

from attention_geometry.architectures.families.seq2seq import bart_stacks
from attention_geometry.architectures.registry import Family, Stack, register


def vit_stack() -> tuple[Stack, ...]:
    """ViT-style encoder layer i: `encoder.layer.{i}.attention.attention.{query,key}` (ViT, DeiT, BEiT, DINOv2,
    and ViT-MAE's encoder, whose pretraining decoder `decoder.decoder_layers` is not matched)."""
    return (
        Stack(
            "encoder",
            "encoder.layer.{i}.attention.attention.query.weight",
            "encoder.layer.{i}.attention.attention.key.weight",
            v="encoder.layer.{i}.attention.attention.value.weight",
            o="encoder.layer.{i}.attention.output.dense.weight",
        ),
    )


for _type, _note in (
    ("vit", ""),
    ("deit", ""),
    ("beit", "relative position bias (per layer or shared) added to the logits; key has no bias"),
    ("dinov2", ""),
    ("vit_mae", "encoder only (the paper's ViT-MAE rows); the pretraining decoder is not scored"),
):
    register(Family(_type, "encoder-only", "vision", vit_stack(), note=_note))
# DETR: q and k act on hidden + position embedding (sine over the feature map in the encoder, learned object
# queries in the decoder); the decoder's self-attention over object queries is not causal.
register(
    Family(
        "detr",
        "encoder-decoder",
        "vision",
        bart_stacks(),
        note="q and k act on hidden states plus position embeddings (values do not)",
    )
)
# GIT: the paper's GIT-images rows are the 6-layer transformer over image tokens followed by text tokens
# (`git.encoder`, BERT-style), labelled encoder-only/encoder there; its CLIP-style image encoder is not scored.
register(
    Family(
        "git",
        "encoder-only",
        "vision",
        (
            Stack(
                "encoder",
                "encoder.layer.{i}.attention.self.query.weight",
                "encoder.layer.{i}.attention.self.key.weight",
                v="encoder.layer.{i}.attention.self.value.weight",
                o="encoder.layer.{i}.attention.output.dense.weight",
            ),
        ),
        note="image tokens attend to image tokens only, text tokens to image tokens and causally to text",
    )
)
