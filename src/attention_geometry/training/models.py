"""Model sizes, initializations and the training forward pass of BERT encoders and decoders.

The weights live in the stock transformers modules (BertForMaskedLM for `encoder`, BertLMHeadModel with
is_decoder=True for `decoder`), so snapshots are ordinary Hugging Face checkpoints. For training speed the
loss is computed by `lm_loss`, a lean forward over the same modules (fused scaled-dot-product attention,
masked-LM logits only at masked positions, no mask-building or output bookkeeping); `tests/test_training.py`
checks it against the stock forward.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from attention_geometry.errors import UserError

__all__ = [
    "build_model",
    "apply_init",
    "init_attention",
    "self_attentions",
    "lm_loss",
    "symmetry_penalty",
]

from attention_geometry.training.hyper import CAUSAL_OBJECTIVES, INITS, OBJECTIVES, Hyper, resolve_hyper


def encoder_keywords(h: Hyper) -> dict[str, Any]:
    """What a Hyper sets alike in a BertConfig and a ViTConfig (both BERT-style encoder layers): the layers'
    shape, activation, dropout, weight init and layer-norm epsilon."""
    return dict(
        hidden_size=h.hidden_size,
        num_hidden_layers=h.num_layers,
        num_attention_heads=h.num_heads,
        intermediate_size=h.intermediate_size,
        hidden_act=h.hidden_act,
        hidden_dropout_prob=h.hidden_dropout,
        attention_probs_dropout_prob=h.attention_dropout,
        initializer_range=h.initializer_range,
        layer_norm_eps=h.layer_norm_eps,
    )


@contextmanager
def seeded_quietly(seed: int) -> Iterator[None]:
    """The body under torch.manual_seed(seed), with transformers logging errors only (a model built from a
    config warns of nothing the run needs to see); the global torch RNG and the verbosity are restored
    afterwards."""
    from transformers.utils import logging as hf_logging

    rng_state = torch.get_rng_state()
    verbosity = hf_logging.get_verbosity()
    try:
        hf_logging.set_verbosity_error()
        torch.manual_seed(seed)
        yield
    finally:
        torch.set_rng_state(rng_state)
        hf_logging.set_verbosity(verbosity)


def bert_config(h: Hyper, objective: str, special_tokens: dict | None = None):
    from transformers import BertConfig

    if objective not in OBJECTIVES:
        raise UserError(f"objective: unknown objective {objective!r} (known: {', '.join(OBJECTIVES)})")
    if h.vocab_size is None:
        raise UserError("vocab_size: not set (give a corpus or overrides.vocab_size)")
    special_tokens = special_tokens or {}
    cfg = BertConfig(
        vocab_size=h.vocab_size,
        **encoder_keywords(h),
        max_position_embeddings=h.max_position_embeddings,
        type_vocab_size=2,
        is_decoder=objective in CAUSAL_OBJECTIVES,
        pad_token_id=special_tokens.get("pad", 0),
        attn_implementation="sdpa",
    )
    if objective in CAUSAL_OBJECTIVES:
        cfg.use_cache = False
    return cfg


def self_attentions(model) -> list:
    """The BertSelfAttention module of every layer, in order."""
    return [layer.attention.self for layer in model.bert.encoder.layer]


def apply_init(model, init: str) -> None:
    """Apply `init` to every self-attention layer of a freshly built model, drawing from the global torch
    RNG (seed it first):
    - standard: unchanged (the model's own init: normal(0, 0.02) weights, zero biases).
    - symmetric: W_q := W_k (a copy; the biases stay separate parameters).
    - fresh: query, key, value replaced by new nn.Linear layers (PyTorch's default init: weights and biases
      U(-1/sqrt(fan_in), 1/sqrt(fan_in))), created in the order query, key, value.
    - symmetric-fresh: the same fresh layers (same draws as `fresh`), then W_q := W_k: the authors'
      released variant."""
    if init not in INITS:
        raise UserError(f"init: unknown init {init!r} (known: {', '.join(INITS)})")
    for att in self_attentions(model):
        init_attention(att, init)


def init_attention(att, init: str, names: tuple[str, str, str] = ("query", "key", "value")) -> None:
    """`init` (apply_init's definition) on one self-attention module whose query, key and value nn.Linear
    layers are the attributes `names` (BERT's query/key/value; the ViT's q_proj/k_proj/v_proj)."""
    q, k, v = names
    if init in ("fresh", "symmetric-fresh"):
        ref = getattr(att, q)
        d_in, d_out = ref.in_features, ref.out_features
        dev, dt = ref.weight.device, ref.weight.dtype
        for name in (q, k, v):  # drawn in this order
            setattr(att, name, nn.Linear(d_in, d_out, bias=ref.bias is not None, device=dev, dtype=dt))
    if init in ("symmetric", "symmetric-fresh"):
        with torch.no_grad():
            getattr(att, q).weight.copy_(getattr(att, k).weight)


def build_model(
    size: str = "tiny",
    objective: str = "encoder",
    init: str = "standard",
    seed: int = 0,
    special_tokens: dict | None = None,
    **overrides,
):
    """The initialized transformers model of a run: BertForMaskedLM (`encoder`) or BertLMHeadModel with
    is_decoder=True (`decoder`, `decoder-paper`), of the named size with `overrides` (Hyper fields, e.g.
    vocab_size=2048), initialized under `seed` with `init`. Deterministic for a given (size, objective, init, seed,
    overrides); the global torch RNG is restored afterwards."""
    if objective not in OBJECTIVES:
        raise UserError(f"objective: unknown objective {objective!r} (known: {', '.join(OBJECTIVES)})")
    if init not in INITS:
        raise UserError(f"init: unknown init {init!r} (known: {', '.join(INITS)})")
    h = overrides.pop("_hyper", None) or resolve_hyper(size, overrides)
    if h.vocab_size is None:
        h = dataclasses.replace(h, vocab_size=2048)
    from transformers import BertForMaskedLM, BertLMHeadModel

    cfg = bert_config(h, objective, special_tokens)
    cls = BertForMaskedLM if objective == "encoder" else BertLMHeadModel
    with seeded_quietly(seed):
        model = cls(cfg)
        apply_init(model, init)
    return model


# ---------------------------------------------------------------------------------------------- forward


def _act(name: str):
    if name == "gelu":
        return F.gelu
    if name == "gelu_new":
        return lambda x: F.gelu(x, approximate="tanh")
    if name == "relu":
        return F.relu
    return F.silu


def hidden_states(model, input_ids: torch.Tensor, key_padding: torch.Tensor | None, causal: bool) -> torch.Tensor:
    """Last hidden states [B, L, D] of model.bert for token type 0 and positions 0..L-1: the same
    computation as the stock BertModel forward (tested), without its mask and output bookkeeping.
    `key_padding`: None (no mask), True where a key is a real token [B, L], or int32 segment boundaries [2B + 1]
    (segment_bounds: each token attends within its segment; the device path's `padded_attention: varlen`)."""
    bert = model.bert
    cfg = model.config
    act = _act(cfg.hidden_act)
    B, L = input_ids.shape
    emb = bert.embeddings
    x = emb.word_embeddings(input_ids) + emb.token_type_embeddings.weight[0] + emb.position_embeddings.weight[:L]
    x = emb.dropout(emb.LayerNorm(x))
    H = cfg.num_attention_heads
    dh = cfg.hidden_size // H
    attn_mask = segments = None
    if key_padding is not None and key_padding.dtype == torch.int32:
        segments = key_padding
    elif key_padding is not None:  # True where the key is a real token
        attn_mask = key_padding[:, None, None, :]
        if causal:
            attn_mask = attn_mask & torch.ones(L, L, dtype=torch.bool, device=x.device).tril()
            causal = False
    p_drop = cfg.attention_probs_dropout_prob if model.training else 0.0
    attn_fp32 = x.device.type == "cpu" and torch.is_autocast_enabled("cpu")
    for layer in bert.encoder.layer:
        sa = layer.attention.self
        q, k, v = sa.query(x), sa.key(x), sa.value(x)
        if segments is not None and q.is_cuda and q.dtype in (torch.float16, torch.bfloat16):
            a = _segment_flash(
                q.view(B * L, H, dh), k.view(B * L, H, dh), v.view(B * L, H, dh), segments, L, p_drop, causal
            )
            x = _layer_rest(layer, a.view(B, L, H * dh), x, act)
            continue
        if segments is not None:  # elsewhere the same attention through a dense mask (the CPU tests)
            attn_mask, causal, segments = segment_mask(segments, B, L, causal)[:, None], False, None
        q, k, v = (t.view(B, L, H, dh).transpose(1, 2) for t in (q, k, v))
        if attn_fp32:
            a = _attention_fp32(q, k, v, attn_mask, p_drop, causal)
        else:
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=p_drop, is_causal=causal)
        x = _layer_rest(layer, a.transpose(1, 2).reshape(B, L, H * dh), x, act)
    return x


def _layer_rest(layer, a: torch.Tensor, x: torch.Tensor, act) -> torch.Tensor:
    """A BERT layer after its attention `a` [B, L, D] of the layer's input `x`: output projection, residual and
    LayerNorm, the feed-forward block."""
    so = layer.attention.output
    x = so.LayerNorm(so.dropout(so.dense(a)) + x)
    hmid = act(layer.intermediate.dense(x))
    out = layer.output
    return out.LayerNorm(out.dropout(out.dense(hmid)) + x)


def segment_bounds(real: torch.Tensor) -> torch.Tensor:
    """The attention segments of rows whose real tokens come first (`real` [B, L] True at a real token, a prefix
    of each row): row b's real tokens and its padding as two segments of the flattened rows, int32 boundaries
    [2B + 1] = (0, n_0, L, L + n_1, 2L, ..., BL) (a row without padding has an empty second segment). A real token
    attends the real tokens of its row, as under the key-padding mask; a padding token attends the padding, which
    no real token and no loss reads. Made on the device without a synchronization."""
    B, L = real.shape
    start = torch.arange(B, dtype=torch.int32, device=real.device) * L
    bounds = torch.stack([start, start + real.sum(1, dtype=torch.int32)], 1).reshape(-1)
    return torch.cat([bounds, bounds.new_full((1,), B * L)])


def segment_mask(bounds: torch.Tensor, B: int, L: int, causal: bool) -> torch.Tensor:
    """The boolean attention mask [B, L, L] of segment_bounds' segments: query i and key j of a row in the same
    segment (and j <= i where `causal`)."""
    n = (bounds[1:-1:2] - bounds[0:-1:2]).long()  # each row's first segment
    first = torch.arange(L, device=bounds.device)[None, :] < n[:, None]  # [B, L]
    mask = first[:, :, None] == first[:, None, :]
    if causal:
        mask = mask & torch.ones(L, L, dtype=torch.bool, device=bounds.device).tril()
    return mask


def _segment_flash(q, k, v, bounds: torch.Tensor, L: int, p_drop: float, causal: bool) -> torch.Tensor:
    """Variable-length flash attention (CUDA, 16-bit) of q, k, v [B*L, H, dh] within segment_bounds' segments,
    each at most L long: the kernel nested tensors use (PyTorch's flash attention with cumulative sequence
    lengths), attention dropout included; [B*L, H, dh]."""
    out = torch.ops.aten._flash_attention_forward(q, k, v, bounds, bounds, L, L, p_drop, causal, False)
    return out[0]


def _attention_fp32(q, k, v, attn_mask, p_drop: float, causal: bool) -> torch.Tensor:
    """Scaled dot-product attention in float32 under CPU bf16 autocast (the projections around it stay bf16).
    On CPU the fused attention kernel's bf16 backward is about 4x slower than its fp32 one at the tiny
    shape ([32, 2, 64, 64], one thread): in fp32 the bf16 step is 1.5-1.7x faster than the fp32 step instead
    of 1.0-1.3x (docs/training.md), and the attention probabilities keep fp32 precision."""
    with torch.autocast("cpu", enabled=False):
        return F.scaled_dot_product_attention(
            q.float(), k.float(), v.float(), attn_mask=attn_mask, dropout_p=p_drop, is_causal=causal
        )


def _head(model, h: torch.Tensor) -> torch.Tensor:
    pred = model.cls.predictions
    t = pred.transform
    h = t.LayerNorm(_act(model.config.hidden_act)(t.dense(h)))
    return F.linear(h, pred.decoder.weight, pred.bias)


def lm_loss(
    model,
    input_ids: torch.Tensor,
    labels: torch.Tensor,
    objective: str,
    pad_id: int | None = None,
    reduction: str = "sum",
    hidden_fn=None,
    key_padding: torch.Tensor | None = None,
) -> torch.Tensor:
    """Summed (or mean) token cross-entropy of a batch.

    encoder: `input_ids` are the corrupted inputs, `labels` the original ids at masked positions and -100
    elsewhere; logits are computed only at masked positions. decoder: `labels` are the token ids (usually
    `input_ids` itself, -100 where ignored); position i predicts labels[i + 1] under a causal mask.
    decoder-paper: the encoder's (inputs, labels) under the decoder's causal mask and shift; logits only where
    labels[i + 1] is set (BertLMHeadModel's loss on the masking collator's batch).
    `pad_id`: keys equal to it are masked out of attention (None: the batch has no padding).
    `hidden_fn`: a drop-in for the transformer stack (e.g. torch.compile(hidden_states)).
    `key_padding`: True where a key is a real token (an attention mask given by the caller; then `pad_id` is
    not read)."""
    if key_padding is None and pad_id is not None:
        real = input_ids != pad_id
        if not bool(real.all()):
            key_padding = real
    causal = objective in CAUSAL_OBJECTIVES
    h = (hidden_fn or hidden_states)(model, input_ids, key_padding, causal)
    if causal:
        h = h[:, :-1]
        labels = labels[:, 1:]
    sel = labels != -100
    logits = _head(model, h[sel])
    target = labels[sel]
    if logits.is_cuda:  # the fused kernel is fast there and does not keep the [N, V] softmax
        loss = F.cross_entropy(logits.float(), target, reduction="sum")
    else:
        loss = SumCrossEntropy.apply(logits.float(), target)
    return loss if reduction == "sum" else loss / max(int(target.numel()), 1)


class SumCrossEntropy(torch.autograd.Function):
    """sum_i (logsumexp(logits_i) - logits_i[label_i]), with the softmax kept for the backward pass: the
    same value and gradient as F.cross_entropy(..., reduction="sum") (tested). On one CPU thread at
    [2016, 2048] it is several times faster than F.cross_entropy: it skips log_softmax's slow backward
    kernel, and forward and backward make few passes over the [N, V] logits: one softmax (a fused kernel),
    whose label entries give the loss, -log p_i[label_i]; only rows where that entry underflows (below
    1e-30, a logit gap of ~69 nats) take logsumexp. The backward scales the kept softmax in place."""

    @staticmethod
    def forward(ctx, logits, labels):
        p = torch.softmax(logits, -1)
        p_label = p.gather(-1, labels[:, None]).squeeze(-1)
        per_row = p_label.log().neg_()
        tiny = p_label < 1e-30
        if bool(tiny.any()):
            x = logits[tiny]
            per_row[tiny] = torch.logsumexp(x, -1) - x.gather(-1, labels[tiny][:, None]).squeeze(-1)
        ctx.save_for_backward(p, labels)
        return per_row.sum()

    @staticmethod
    def backward(ctx, grad):
        p, labels = ctx.saved_tensors
        g = p.mul_(grad)  # the kept softmax is used once: scale it in place
        g[torch.arange(labels.numel(), device=labels.device), labels] -= grad
        return g, None


def symmetry_penalty(model, pairs=None) -> torch.Tensor:
    """sum over layers of ||W_qk|| / ||sym(W_qk)|| (Frobenius), W_qk = W_q^T W_k = sum_h W_q,h^T W_k,h:
    1 per layer for a symmetric W_qk, larger otherwise (the rebuttal's symmetry regularizer). `pairs`: the
    (query, key) nn.Linear layers of each layer (default: the BERT model's; a ViT's: vit.qk_layers)."""
    total = None
    for q, k in pairs if pairs is not None else ((sa.query, sa.key) for sa in self_attentions(model)):
        M = q.weight.float().t() @ k.weight.float()
        r = torch.linalg.matrix_norm(M) / torch.linalg.matrix_norm(0.5 * (M + M.t()))
        total = r if total is None else total + r
    return total
