"""Proof of W_qk extraction for audio families (whisper, speech_to_text, speecht5, musicgen, hubert, wav2vec2,
wavlm, unispeech-sat) against the models' own attention (harness: tests/proof.py; per-stack driver:
test_proof_seq2seq.prove_stacks), and of the OV circuit against each attention module's output (its output
projection's, before the residual)."""

from __future__ import annotations

from unittest import mock

import pytest
import torch
from proof_models import enc_dec, enc_dec_stacks, self_attn_stacks, token_ids
from test_proof_seq2seq import capture_each, capture_outputs, once, prove_stacks, zero_


def _whisper():
    from transformers import WhisperConfig, WhisperModel

    cfg = WhisperConfig(
        **enc_dec(vocab_size=60, num_mel_bins=8, max_source_positions=10, max_target_positions=16),
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        decoder_start_token_id=1,
    )
    m = WhisperModel(cfg).double().eval()
    return (
        cfg,
        m,
        self_attn_stacks(m.encoder, m.decoder),
        lambda: m(
            input_features=torch.randn(2, 8, 20, dtype=torch.float64),
            decoder_input_ids=token_ids(60, 6),
            output_attentions=True,
        ),
    )


def _speech_to_text():
    from transformers import Speech2TextConfig, Speech2TextModel

    cfg = Speech2TextConfig(
        **enc_dec(vocab_size=60, max_source_positions=32, max_target_positions=16),
        conv_channels=16,
        input_feat_per_channel=8,
        input_channels=1,
    )
    m = Speech2TextModel(cfg).double().eval()
    return (
        cfg,
        m,
        self_attn_stacks(m.encoder, m.decoder),
        lambda: m(
            input_features=torch.randn(2, 24, 8, dtype=torch.float64),
            decoder_input_ids=token_ids(60, 6),
            output_attentions=True,
        ),
    )


def _speecht5():
    from transformers import SpeechT5Config, SpeechT5Model

    cfg = SpeechT5Config(**enc_dec("hidden_size", vocab_size=60, encoder_max_relative_position=16))
    m = SpeechT5Model(cfg).double().eval()  # no pre-nets: encoder and decoder take hidden states directly
    enc, dec = m.encoder.wrapped_encoder, m.decoder.wrapped_decoder
    # the encoder adds q_i . r(j - i) to its logits (learned relative position embeddings pe_k): zeroed
    zero_(enc.embed_positions.pe_k.weight)
    return (
        cfg,
        m,
        enc_dec_stacks([l.attention for l in enc.layers], [l.self_attn for l in dec.layers]),
        lambda: m(
            input_values=torch.randn(2, 9, 32, dtype=torch.float64),
            decoder_input_values=torch.randn(2, 6, 32, dtype=torch.float64),
            output_attentions=True,
        ),
    )


def _musicgen():
    from transformers import (
        EncodecConfig,
        MusicgenConfig,
        MusicgenDecoderConfig,
        MusicgenForConditionalGeneration,
        T5Config,
    )

    text = T5Config(vocab_size=50, d_model=24, d_kv=8, d_ff=48, num_layers=2, num_heads=3)
    audio = EncodecConfig(hidden_size=8, num_filters=4, upsampling_ratios=[2, 2], codebook_size=16, num_lstm_layers=1)
    decoder = MusicgenDecoderConfig(
        vocab_size=16,
        hidden_size=32,
        num_hidden_layers=3,
        num_attention_heads=4,
        ffn_dim=64,
        num_codebooks=2,
        max_position_embeddings=32,
        pad_token_id=16,
        bos_token_id=16,
    )
    cfg = MusicgenConfig(text_encoder=text, audio_encoder=audio, decoder=decoder, attn_implementation="eager")
    m = MusicgenForConditionalGeneration(cfg).double().eval()
    enc = [b.layer[0].SelfAttention for b in m.text_encoder.encoder.block]
    # the frozen T5 text encoder's relative position bias (block 0's table) is not part of W_qk
    zero_(m.text_encoder.encoder.block[0].layer[0].SelfAttention.relative_attention_bias.weight)
    return (
        cfg,
        m,
        enc_dec_stacks(enc, [l.self_attn for l in m.decoder.model.decoder.layers]),
        lambda: m(
            input_ids=token_ids(50, 7, low=0),
            decoder_input_ids=token_ids(16, 6, low=0, batch=2 * 2),  # one row per codebook
            output_attentions=True,
        ),
    )


CONV = dict(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=64,
    conv_dim=(8, 8),
    conv_stride=(5, 2),
    conv_kernel=(10, 3),
    num_conv_pos_embeddings=8,
    num_conv_pos_embedding_groups=2,
    attn_implementation="eager",
)


def _wav2vec2_like(config_cls, model_cls, **extra):
    cfg = config_cls(**CONV, **extra)
    m = model_cls(cfg).double().eval()
    attn = [l.attention for l in m.encoder.layers]
    return (
        cfg,
        m,
        {"encoder": (attn, lambda o: o.attentions)},
        lambda: m(input_values=torch.randn(2, 400, dtype=torch.float64), output_attentions=True),
    )


def _hubert():
    from transformers import HubertConfig, HubertModel

    return _wav2vec2_like(HubertConfig, HubertModel)


def _wav2vec2():
    from transformers import Wav2Vec2Config, Wav2Vec2Model

    return _wav2vec2_like(Wav2Vec2Config, Wav2Vec2Model)


def _wav2vec2_stable():
    # the pre-norm encoder of the large checkpoints and MMS
    from transformers import Wav2Vec2Config, Wav2Vec2Model

    return _wav2vec2_like(Wav2Vec2Config, Wav2Vec2Model, do_stable_layer_norm=True, feat_extract_norm="layer")


def _unispeech_sat():
    from transformers import UniSpeechSatConfig, UniSpeechSatModel

    return _wav2vec2_like(UniSpeechSatConfig, UniSpeechSatModel)


def _wavlm():
    from transformers import WavLMConfig, WavLMModel

    cfg, m, stacks, fwd = _wav2vec2_like(WavLMConfig, WavLMModel)
    # gated relative position bias: layer 0 computes bucketed biases from rel_attn_embed, every layer scales them
    # by a gate of its query's hidden state; a zero table makes the bias zero whatever the gate
    tables = [l.attention.rel_attn_embed.weight for l in m.encoder.layers if hasattr(l.attention, "rel_attn_embed")]
    assert len(tables) == 1
    zero_(*tables)
    return cfg, m, stacks, fwd


BUILDERS = {
    "whisper": _whisper,
    "speech_to_text": _speech_to_text,
    "speecht5": _speecht5,
    "musicgen": _musicgen,
    "hubert": _hubert,
    "wav2vec2": _wav2vec2,
    "wav2vec2-stable-layer-norm": _wav2vec2_stable,
    "unispeech-sat": _unispeech_sat,
    "wavlm": _wavlm,
}


class PerHeadWeights:
    """WavLM attends through F.multi_head_attention_forward, whose returned weights are averaged over heads
    (what output_attentions then broadcasts to every head). While active, every call also records the
    unaveraged per-head probabilities of that same computation; the model still receives the average."""

    def __init__(self):
        self.seen: list[torch.Tensor] = []
        self._orig = torch.nn.functional.multi_head_attention_forward

    def __call__(self, *args, **kwargs):
        kwargs["average_attn_weights"] = False
        out, w = self._orig(*args, **kwargs)
        self.seen.append(w.detach())
        return out, w.mean(dim=1)

    def __enter__(self):
        self._patch = mock.patch.object(torch.nn.functional, "multi_head_attention_forward", self)
        self._patch.start()
        return self

    def __exit__(self, *exc):
        self._patch.stop()


@pytest.mark.parametrize("case", sorted(BUILDERS))
def test_audio_proof(case):
    torch.manual_seed(0)
    cfg, m, stacks, forward = BUILDERS[case]()
    model_type = cfg.model_type
    assert case.startswith(model_type)
    modules = [a for mods, _ in stacks.values() for a in mods]
    with torch.no_grad():
        for a in modules:  # biases are not part of W_qk
            for name in ("q_proj", "k_proj", "q", "k"):
                zero_(getattr(getattr(a, name, None), "bias", None))
        with capture_each(modules) as xs, capture_outputs(modules) as ys, PerHeadWeights() as per_head:
            out = forward()
    x_of = {id(a): x for a, x in zip(modules, once(xs, case))}
    y_of = {id(a): y for a, y in zip(modules, once(ys, case))}
    outputs = {comp: [y_of[id(a)] for a in mods] for comp, (mods, _) in stacks.items()}
    observed = {}
    for comp, (mods, probs_of) in stacks.items():
        probs = list(probs_of(out))
        if model_type == "wavlm":
            assert len(per_head.seen) == len(mods) and torch.allclose(
                probs[0], per_head.seen[0].mean(1, keepdim=True).expand_as(probs[0])
            )
            probs = per_head.seen
        else:
            assert not per_head.seen
        observed[comp] = ([x_of[id(a)] for a in mods], probs)
    prove_stacks(model_type, m, cfg, observed, outputs=outputs)
