"""Proof of W_qk extraction for vision families (vit, deit, beit, dinov2, vit_mae, detr, git) against the
models' own attention (harness: tests/proof.py; per-stack driver: test_proof_seq2seq.prove_stacks), and of the OV
circuit against each attention's output before the residual (DETR's values see no position embedding)."""

from __future__ import annotations

import pytest
import torch
from proof_models import enc_dec, self_attn_stacks, token_ids
from test_proof_seq2seq import capture_each, capture_outputs, once, prove_stacks, zero_

VIT = dict(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=64,
    image_size=32,
    patch_size=8,
    num_channels=3,
    attn_implementation="eager",
)


def pixels(batch: int = 2, size: int = 32) -> torch.Tensor:
    return torch.randn(batch, 3, size, size, dtype=torch.float64)


def vit_layers(m: torch.nn.Module) -> torch.nn.ModuleList:
    """The layer list, wherever this transformers version keeps it (m.layers, m.encoder.layer, ...)."""
    for owner in (m, getattr(m, "encoder", None)):
        for name in ("layers", "layer"):
            found = getattr(owner, name, None)
            if isinstance(found, torch.nn.ModuleList):
                return found
    raise AssertionError(f"no layer list in {type(m).__name__}")


def _vit_like(name: str, config_cls, model_cls, **extra):
    cfg = config_cls(**VIT, **extra)
    m = model_cls(cfg).double().eval()
    attn = [layer.attention for layer in vit_layers(m)]
    return (
        cfg,
        m,
        {"encoder": (attn, lambda out: out.attentions)},
        lambda: m(pixel_values=pixels(), output_attentions=True),
    )


def _vit():
    from transformers import ViTConfig, ViTModel

    return _vit_like("vit", ViTConfig, ViTModel)


def _deit():
    from transformers import DeiTConfig, DeiTModel

    return _vit_like("deit", DeiTConfig, DeiTModel)


def _beit():
    from transformers import BeitConfig, BeitModel

    # real BEiT checkpoints add a learned relative position bias to the logits: switched on here and its table
    # zeroed, so the only logit term left is x^T W_qk x
    cfg, m, stacks, fwd = _vit_like("beit", BeitConfig, BeitModel, use_relative_position_bias=True)
    layers = stacks["encoder"][0]
    assert len(layers) == 2
    zero_(*[layer.relative_position_bias.relative_position_bias_table for layer in vit_layers(m)])
    return cfg, m, stacks, fwd


def _dinov2():
    from transformers import Dinov2Config, Dinov2Model

    return _vit_like("dinov2", Dinov2Config, Dinov2Model)


def _vit_mae():
    from transformers import ViTMAEConfig, ViTMAEForPreTraining

    # the pretraining model, so the checkpoint also holds the MAE decoder's self-attention, which must not be
    # picked up as encoder layers (the paper scores the encoder only)
    cfg = ViTMAEConfig(
        **VIT,
        decoder_hidden_size=16,
        decoder_num_hidden_layers=1,
        decoder_num_attention_heads=2,
        decoder_intermediate_size=32,
        mask_ratio=0.5,
    )
    m = ViTMAEForPreTraining(cfg).double().eval()
    attn = [layer.attention for layer in vit_layers(m.vit)]

    def fwd():
        return m.vit(pixel_values=pixels(), output_attentions=True)

    return cfg, m, {"encoder": (attn, lambda out: out.attentions)}, fwd


def _git():
    from transformers import GitConfig, GitModel

    cfg = GitConfig(
        vision_config=dict(
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=32,
            image_size=32,
            patch_size=16,
        ),
        vocab_size=50,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=32,
        bos_token_id=1,
        eos_token_id=2,
        attn_implementation="eager",
    )
    m = GitModel(cfg).double().eval()
    attn = [layer.attention.self for layer in m.encoder.layer]
    return (
        cfg,
        m,
        {"encoder": (attn, lambda out: out.attentions)},
        lambda: m(input_ids=token_ids(50, 6), pixel_values=pixels(), output_attentions=True),
    )


def _detr():
    from transformers import DetrConfig, DetrModel, ResNetConfig

    backbone = ResNetConfig(
        embedding_size=8, hidden_sizes=[8, 8, 8, 16], depths=[1, 1, 1, 1], layer_type="basic", out_features=["stage4"]
    )
    cfg = DetrConfig(
        **enc_dec(num_queries=5),
        backbone_config=backbone,
        use_timm_backbone=False,
        use_pretrained_backbone=False,
    )
    m = DetrModel(cfg).double().eval()
    return (
        cfg,
        m,
        self_attn_stacks(m.encoder, m.decoder),
        lambda: m(pixel_values=pixels(size=64), output_attentions=True),
    )


BUILDERS = {
    "vit": _vit,
    "deit": _deit,
    "beit": _beit,
    "dinov2": _dinov2,
    "vit_mae": _vit_mae,
    "git": _git,
    "detr": _detr,
}


def q_k(attn: torch.nn.Module) -> list[torch.nn.Linear]:
    return [getattr(attn, n) for n in ("q_proj", "k_proj", "query", "key") if hasattr(attn, n)]


@pytest.mark.parametrize("model_type", sorted(BUILDERS))
def test_vision_proof(model_type):
    torch.manual_seed(0)
    cfg, m, stacks, forward = BUILDERS[model_type]()
    assert cfg.model_type == model_type
    pos_embeddings: dict[int, list[torch.Tensor]] = {}

    def keep_position_embeddings(mod, args, kwargs):
        # DETR adds position embeddings to the q/k input (not to v): the proof's x is hidden + position
        pe = kwargs.get("position_embeddings")
        if pe is not None:
            pos_embeddings.setdefault(id(mod), []).append(pe.detach())

    with torch.no_grad():
        modules = [a for mods, _ in stacks.values() for a in mods]
        for a in modules:  # biases are not part of W_qk
            zero_(*[lin.bias for lin in q_k(a)])
        handles = [a.register_forward_pre_hook(keep_position_embeddings, with_kwargs=True) for a in modules]
        # the output projection: inside the attention module (its output), else GIT's BERT-style output.dense
        parent = {id(c): p for p in m.modules() for c in p.children()}
        o_mods = [
            a if any(hasattr(a, n) for n in ("o_proj", "out_proj")) else parent[id(a)].output.dense for a in modules
        ]
        try:
            with capture_each(modules) as xs, capture_outputs(o_mods) as ys:
                out = forward()
        finally:
            for h in handles:
                h.remove()
    x_of = {id(a): x for a, x in zip(modules, once(xs, model_type))}
    y_of = {id(a): y for a, y in zip(modules, once(ys, model_type))}
    if model_type == "detr":
        assert len(pos_embeddings) == len(modules), "DETR self-attention ran without position embeddings"
    observed, outputs, values = {}, {}, {}
    for comp, (mods, probs_of) in stacks.items():
        xs_comp = [x_of[id(a)] + pos_embeddings[id(a)][0] if id(a) in pos_embeddings else x_of[id(a)] for a in mods]
        observed[comp] = (xs_comp, probs_of(out))
        outputs[comp] = [y_of[id(a)] for a in mods]
        values[comp] = [x_of[id(a)] for a in mods]  # the values see the hidden states alone
    prove_stacks(model_type, m, cfg, observed, outputs=outputs, value_inputs=values)


def test_templates_name_checkpoint_tensors(tmp_path):
    """Templates are written for the names a checkpoint has on disk (save_pretrained reverts transformers'
    in-memory renamings, hub files carry them too); ViT's in-memory names differ and must not match."""
    from safetensors import safe_open
    from transformers import ViTConfig, ViTModel

    from attention_geometry.architectures.keys import get_family
    from attention_geometry.architectures.registry import ExtractionError
    from attention_geometry.scoring.extract import iter_layer_qk

    torch.manual_seed(0)
    cfg = ViTConfig(**VIT)
    m = ViTModel(cfg)
    m.save_pretrained(tmp_path)
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        layers = list(iter_layer_qk(get_family("vit"), cfg, list(f.keys()), f.get_tensor))
    attn = [layer.attention for layer in vit_layers(m)]
    assert len(layers) == len(attn) == 2
    for L, a in zip(layers, attn):
        assert torch.equal(L.wq.reshape(-1, 32), a.q_proj.weight.detach())
        assert torch.equal(L.wk.reshape(-1, 32), a.k_proj.weight.detach())
    sd = m.state_dict()
    with pytest.raises(ExtractionError, match="no tensor named"):
        list(iter_layer_qk(get_family("vit"), cfg, sd.keys(), sd.__getitem__))
