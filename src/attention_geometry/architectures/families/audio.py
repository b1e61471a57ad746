"""Audio families: Whisper, Speech2Text, SpeechT5, MusicGen (encoder-decoder) and the wav2vec2 line (HuBERT,
wav2vec2 / MMS, WavLM, UniSpeech-SAT; encoder-only).

Key templates are the checkpoint's tensor names as written on disk, matched as unique suffixes. What else
enters the logits and how tests/test_proof_audio.py neutralizes it: docs/architectures/seq2seq-vision-audio.md.
"""

from __future__ import annotations

from attention_geometry.architectures.families.seq2seq import bart_stacks, t5_stacks
from attention_geometry.architectures.registry import Family, Stack, register

register(Family("whisper", "encoder-decoder", "audio", bart_stacks()))
# The paper scored only Speech2Text's encoder (rows labelled encoder-only/encoder); the model is an
# encoder-decoder and both self-attention stacks are extracted here.
register(Family("speech_to_text", "encoder-decoder", "audio", bart_stacks()))
register(
    Family(
        "speecht5",
        "encoder-decoder",
        "audio",
        bart_stacks(
            encoder_attn="attention",
            d_model="hidden_size",
            encoder="wrapped_encoder.layers",
            decoder="wrapped_decoder.layers",
        ),
        note="encoder logits add q_i . r(j - i), a learned relative position embedding seen by the query",
    )
)
# MusicGen: a frozen T5 text encoder (sub-config text_encoder; the paper's MusicGenEncoder rows equal t5-base's)
# and a causal decoder over audio codes (sub-config decoder). EnCodec has no attention.
register(
    Family(
        "musicgen",
        "encoder-decoder",
        "audio",
        (
            *t5_stacks(sub_config="text_encoder", prefix="text_encoder.", decoder=False),
            Stack(
                "decoder",
                "decoder.model.decoder.layers.{i}.self_attn.q_proj.weight",
                "decoder.model.decoder.layers.{i}.self_attn.k_proj.weight",
                sub_config="decoder",
                v="decoder.model.decoder.layers.{i}.self_attn.v_proj.weight",
                o="decoder.model.decoder.layers.{i}.self_attn.out_proj.weight",
            ),
        ),
        note="text encoder: T5 relative position bias added to the logits",
    )
)


def wav2vec2_stack() -> tuple[Stack, ...]:
    """Transformer layer i over the conv feature encoder's frames: `encoder.layers.{i}.attention.{q,k}_proj`
    (both the post-norm and the stable-layer-norm encoders)."""
    return (
        Stack(
            "encoder",
            "encoder.layers.{i}.attention.q_proj.weight",
            "encoder.layers.{i}.attention.k_proj.weight",
            v="encoder.layers.{i}.attention.v_proj.weight",
            o="encoder.layers.{i}.attention.out_proj.weight",
        ),
    )


for _type, _note in (
    ("hubert", ""),
    ("wav2vec2", ""),
    ("unispeech-sat", ""),
    (
        "wavlm",
        "gated relative position bias (layer 0's buckets, gated per query by its hidden state) added to the logits",
    ),
):
    register(Family(_type, "encoder-only", "audio", wav2vec2_stack(), note=_note))
