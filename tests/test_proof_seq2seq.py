"""Proof of W_qk extraction for encoder-decoder text families (t5, bart, mbart) against the models' own
attention, each self-attention stack (encoder, decoder) separately; cross-attention is not scored. The OV circuit
(M_ov,h = W_o,h W_v,g(h)) is proven on the same forward pass: each attention module's output (its output
projection's, before any residual) must equal sum_h P_h X M_ov,h^T plus a constant row (tests/proof.py: assert_ov).

`prove_stacks` is shared with test_proof_vision.py and test_proof_audio.py. It knows nothing of the
extraction's head or layout logic: it takes what the model computed (softmax probabilities and the hidden
states that entered each attention module) and the per-head matrices that extraction returned for the
checkpoint's tensor names, and runs the proof harness (tests/proof.py) on every layer and head.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager

import pytest
import torch
from proof import assert_bilinear, assert_ov, bilinear_error, capture_inputs, ov_error
from proof_models import enc_dec, token_ids
from transformers.core_model_loading import revert_weight_conversion

from attention_geometry.architectures.keys import get_family
from attention_geometry.scoring.extract import iter_layer_ov, iter_layer_qk, wqk


def checkpoint_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's tensors under the names a checkpoint on disk has (what save_pretrained writes): the names
    the family templates are written for."""
    return dict(revert_weight_conversion(model, model.state_dict()))


@contextmanager
def capture_each(modules: Sequence[torch.nn.Module]) -> Iterator[list[list[torch.Tensor]]]:
    """One list of captured input hidden states per module."""
    with ExitStack() as stack:
        yield [stack.enter_context(capture_inputs([m])) for m in modules]


@contextmanager
def capture_outputs(modules: Sequence[torch.nn.Module]) -> Iterator[list[list[torch.Tensor]]]:
    """One list per module of what it returned (the first element of a tuple): for an attention module that holds
    its output projection, the output of that projection before any residual."""
    seen: list[list[torch.Tensor]] = [[] for _ in modules]

    def hook(i):
        return lambda mod, args, out: seen[i].append((out[0] if isinstance(out, tuple) else out).detach())

    handles = [m.register_forward_hook(hook(i)) for i, m in enumerate(modules)]
    try:
        yield seen
    finally:
        for h in handles:
            h.remove()


def once(captured: list[list[torch.Tensor]], what: str) -> list[torch.Tensor]:
    """Each attention module must have run exactly once in the forward pass."""
    assert [len(c) for c in captured] == [1] * len(captured), (
        f"{what}: calls per attention module {[len(c) for c in captured]}"
    )
    return [c[0] for c in captured]


def prove_stacks(
    model_type: str,
    model: torch.nn.Module,
    config,
    observed: dict[str, tuple[Sequence, Sequence]],
    state_dict: dict[str, torch.Tensor] | None = None,
    tol: float = 1e-4,
    outputs: dict[str, Sequence[torch.Tensor]] | None = None,
    value_inputs: dict[str, Sequence[torch.Tensor]] | None = None,
) -> None:
    """observed: component -> (inputs x per applied layer [B, T, d], probabilities per layer [B, H, T, S]).

    The extraction must yield exactly these components, layers 0..n-1 of each, and every head of every layer
    must pass the bilinear check; the transposed matrix must fail it (the check can tell M from M^T).
    outputs: component -> the output of each layer's output projection [B, T, d] (before any residual): then the
    OV extraction (iter_layer_ov) must yield the same layers, and each layer's output must equal
    sum_h P_h X M_ov,h^T plus a constant row, X the value projection's inputs (value_inputs, default the x of
    `observed`); the transposed M_ov must fail."""
    sd = checkpoint_state_dict(model) if state_dict is None else state_dict
    layers = list(iter_layer_qk(get_family(model_type), config, sd.keys(), sd.__getitem__))
    # the same extraction from the plain config.json mapping (how a checkpoint directory is read)
    from_json = list(iter_layer_qk(get_family(model_type), config.to_dict(), sd.keys(), sd.__getitem__))
    assert [(L.component, L.layer, L.keys) for L in from_json] == [(L.component, L.layer, L.keys) for L in layers]
    got: dict[str, list] = {}
    for L in layers:
        got.setdefault(L.component, []).append(L)
    assert sorted(got) == sorted(observed), (
        f"{model_type}: extracted stacks {sorted(got)}, model has {sorted(observed)}"
    )
    for comp, (xs, probs) in observed.items():
        assert len(xs) == len(probs) > 0, f"{model_type} {comp}: {len(xs)} inputs, {len(probs)} attention maps"
        assert [L.layer for L in got[comp]] == list(range(len(xs))), (
            f"{model_type} {comp}: extracted layers {[L.layer for L in got[comp]]}, model applied {len(xs)}"
        )
        for L, x, p in zip(got[comp], xs, probs):
            what = f"{model_type} {comp} layer {L.layer}"
            assert p.shape[1] == L.n_heads, f"{what}: {L.n_heads} extracted heads, model has {p.shape[1]}"
            M = wqk(L, per_head=True)
            assert_bilinear(p, x, M, tol=tol, what=what)
            err, _ = bilinear_error(p, x, M.transpose(-1, -2))
            assert bool((err > 1e-2).all()), f"{what}: transposed M passes too ({err.tolist()})"
    if outputs is not None:
        ov = list(iter_layer_ov(get_family(model_type), config, sd.keys(), sd.__getitem__))
        assert [(L.component, L.layer) for L in ov] == [(L.component, L.layer) for L in layers]
        assert sorted(outputs) == sorted(observed)
        for comp, ys in outputs.items():
            xs = (value_inputs or {}).get(comp, observed[comp][0])
            probs = observed[comp][1]
            mine = [L for L in ov if L.component == comp]
            assert len(mine) == len(ys) == len(xs) == len(probs), f"{model_type} {comp}: layers and outputs differ"
            for L, x, p, y in zip(mine, xs, probs, ys):
                what = f"{model_type} {comp} layer {L.layer} OV"
                M = wqk(L, per_head=True)
                assert_ov(p, x, M, y, what=what)
                if not bool((x - x[:, :1]).any()):  # every token's input is the same (DETR's first decoder layer):
                    continue  # the output is one constant row, whatever the matrix, so no reading can fail
                err = ov_error(p, x, M.transpose(-1, -2), y)
                assert err > 1e-2, f"{what}: transposed M_ov passes too ({err})"


@torch.no_grad()
def zero_(*params) -> None:
    for p in params:
        if p is not None:
            p.zero_()


# --------------------------------------------------------------------------------------------- models


def _t5():
    from transformers import T5Config, T5Model

    # d_kv * num_heads (24) != d_model (32): the projections are not square; 2 encoder, 3 decoder blocks
    cfg = T5Config(
        vocab_size=50,
        d_model=32,
        d_kv=6,
        d_ff=64,
        num_layers=2,
        num_decoder_layers=3,
        num_heads=4,
        attn_implementation="eager",
    )
    m = T5Model(cfg).double().eval()
    enc = [b.layer[0].SelfAttention for b in m.encoder.block]
    dec = [b.layer[0].SelfAttention for b in m.decoder.block]
    # the relative position bias (block 0 of each stack computes it, all blocks add it) is not part of W_qk
    zero_(
        m.encoder.block[0].layer[0].SelfAttention.relative_attention_bias.weight,
        m.decoder.block[0].layer[0].SelfAttention.relative_attention_bias.weight,
    )
    return (
        cfg,
        m,
        enc,
        dec,
        lambda: m(input_ids=token_ids(50, 7, low=0), decoder_input_ids=token_ids(50, 6, low=0), output_attentions=True),
    )


def _bart_like(config_cls, model_cls, **extra):
    def build():
        # different widths of head count and depth per stack, so a stack sized by the other's fields fails
        cfg = config_cls(**enc_dec(vocab_size=50, max_position_embeddings=32), **extra)
        m = model_cls(cfg).double().eval()
        enc = [layer.self_attn for layer in m.encoder.layers]
        dec = [layer.self_attn for layer in m.decoder.layers]
        return (
            cfg,
            m,
            enc,
            dec,
            lambda: m(input_ids=token_ids(50, 7), decoder_input_ids=token_ids(50, 6), output_attentions=True),
        )

    return build


def _bart():
    from transformers import BartConfig, BartModel

    return _bart_like(BartConfig, BartModel)()


def _mbart():
    from transformers import MBartConfig, MBartModel

    return _bart_like(MBartConfig, MBartModel)()


def _marian():
    from transformers import MarianConfig, MarianModel

    return _bart_like(MarianConfig, MarianModel, pad_token_id=0, decoder_start_token_id=0)()


def _pegasus():
    from transformers import PegasusConfig, PegasusModel

    return _bart_like(PegasusConfig, PegasusModel)()


BUILDERS = {"t5": _t5, "bart": _bart, "mbart": _mbart, "marian": _marian, "pegasus": _pegasus}


@pytest.mark.parametrize("model_type", sorted(BUILDERS))
def test_seq2seq_proof(model_type):
    torch.manual_seed(0)
    cfg, m, enc, dec, forward = BUILDERS[model_type]()
    assert cfg.model_type == model_type
    with torch.no_grad():
        for a in [*enc, *dec]:  # biases are not part of W_qk
            zero_(
                getattr(getattr(a, "q", None) or a.q_proj, "bias", None),
                getattr(getattr(a, "k", None) or a.k_proj, "bias", None),
            )
        with capture_each(enc) as xe, capture_each(dec) as xd, capture_outputs([*enc, *dec]) as ys:
            out = forward()
    observed = {
        "encoder": (once(xe, "encoder"), out.encoder_attentions),
        "decoder": (once(xd, "decoder"), out.decoder_attentions),
    }
    ys = once(ys, "outputs")
    # the decoder is causal: masked keys have p = 0 and the harness leaves them out
    assert bool((out.decoder_attentions[0][..., 0, 1:] == 0).all())
    prove_stacks(model_type, m, cfg, observed, outputs={"encoder": ys[: len(enc)], "decoder": ys[len(enc) :]})
