"""Text encoders and decoders (and ImageGPT, a GPT-2 decoder over pixel clusters).

One `register(Family(...))` entry per transformers model_type; see registry.Stack for the fields and
docs/architectures/text.md for where each family keeps q and k and what else enters its logits. Config
fields are named as in the model's config.json (GPT-2's n_layer, DistilBERT's dim, ...), so the entries
work on a raw config dict as well as on a transformers config object. Every entry is proven against the
model's own attention in tests/test_proof_text.py.
"""

from __future__ import annotations

from typing import Any

from attention_geometry.architectures.registry import Family, Stack, UnsupportedArchitecture, config_field, register


def num_key_value_heads(config: Any) -> int | None:
    """num_key_value_heads, which config.json may leave out (or null) to mean one per query head."""
    kv = config_field(config, "num_key_value_heads")
    return kv if kv is not None else config_field(config, "num_attention_heads")


def _albert_positions(config: Any) -> list[dict[str, int]]:
    """ALBERT applies layer group g = int(i / (L / G)) at step i of L and, inside it, its inner_group_num
    layers in order; one position per applied attention (AlbertTransformer.forward)."""
    n_layers = int(config_field(config, "num_hidden_layers"))
    n_groups = int(config_field(config, "num_hidden_groups") or 1)
    n_inner = int(config_field(config, "inner_group_num") or 1)
    return [{"g": int(i / (n_layers / n_groups)), "j": j} for i in range(n_layers) for j in range(n_inner)]


# ------------------------------------------------------------------------------------------- encoders

_BERT_Q = "encoder.layer.{i}.attention.self.query.weight"
_BERT_K = "encoder.layer.{i}.attention.self.key.weight"
_BERT_OV = dict(v="encoder.layer.{i}.attention.self.value.weight", o="encoder.layer.{i}.attention.output.dense.weight")

for _type in ("bert", "roberta", "xlm-roberta", "electra", "camembert"):
    register(Family(_type, "encoder-only", "text", (Stack("encoder", _BERT_Q, _BERT_K, **_BERT_OV),)))

register(
    Family(
        "albert",
        "encoder-only",
        "text",
        (
            Stack(
                "encoder",
                "encoder.albert_layer_groups.{g}.albert_layers.{j}.attention.query.weight",
                "encoder.albert_layer_groups.{g}.albert_layers.{j}.attention.key.weight",
                positions=_albert_positions,
                v="encoder.albert_layer_groups.{g}.albert_layers.{j}.attention.value.weight",
                o="encoder.albert_layer_groups.{g}.albert_layers.{j}.attention.dense.weight",
            ),
        ),
        note="layers shared across positions: one row per applied position",
    )
)

register(
    Family(
        "distilbert",
        "encoder-only",
        "text",
        (
            Stack(
                "encoder",
                "transformer.layer.{i}.attention.q_lin.weight",
                "transformer.layer.{i}.attention.k_lin.weight",
                n_layers="n_layers",
                n_heads="n_heads",
                d_model="dim",
                v="transformer.layer.{i}.attention.v_lin.weight",
                o="transformer.layer.{i}.attention.out_lin.weight",
            ),
        ),
    )
)

register(
    Family(
        "deberta",
        "encoder-only",
        "text",
        (
            Stack(
                "encoder",
                "encoder.layer.{i}.attention.self.in_proj.weight",
                layout="fused_qkv_per_head",
                o="encoder.layer.{i}.attention.output.dense.weight",
            ),
        ),
        note="relative_attention adds c2p/p2c position terms; talking_head mixes heads",
    )
)

register(
    Family(
        "deberta-v2",
        "encoder-only",
        "text",
        (
            Stack(
                "encoder",
                "encoder.layer.{i}.attention.self.query_proj.weight",
                "encoder.layer.{i}.attention.self.key_proj.weight",
                v="encoder.layer.{i}.attention.self.value_proj.weight",
                o="encoder.layer.{i}.attention.output.dense.weight",
            ),
        ),
        note="relative_attention adds c2p/p2c position terms",
    )
)

register(
    Family(
        "modernbert",
        "encoder-only",
        "text",
        (Stack("encoder", "layers.{i}.attn.Wqkv.weight", layout="fused_qkv", o="layers.{i}.attn.Wo.weight"),),
        note="rotary position embedding; local (sliding-window) attention in some layers",
    )
)

# ------------------------------------------------------------------------------------------- decoders

_GPT2 = dict(layout="conv1d_qkv", n_layers="n_layer", n_heads="n_head", d_model="n_embd", o="h.{i}.attn.c_proj.weight")
register(Family("openai-gpt", "decoder-only", "text", (Stack("decoder", "h.{i}.attn.c_attn.weight", **_GPT2),)))
register(Family("gpt2", "decoder-only", "text", (Stack("decoder", "h.{i}.attn.c_attn.weight", **_GPT2),)))
register(Family("imagegpt", "decoder-only", "vision", (Stack("decoder", "h.{i}.attn.c_attn.weight", **_GPT2),)))

register(
    Family(
        "gpt_neo",
        "decoder-only",
        "text",
        (
            Stack(
                "decoder",
                "h.{i}.attn.attention.q_proj.weight",
                "h.{i}.attn.attention.k_proj.weight",
                n_layers="num_layers",
                n_heads="num_heads",
                v="h.{i}.attn.attention.v_proj.weight",
                o="h.{i}.attn.attention.out_proj.weight",
            ),
        ),
        note="local (sliding-window) attention in alternate layers; no 1/sqrt(d_head) scaling",
    )
)

register(
    Family(
        "gptj",
        "decoder-only",
        "text",
        (
            Stack(
                "decoder",
                "h.{i}.attn.q_proj.weight",
                "h.{i}.attn.k_proj.weight",
                n_layers="n_layer",
                n_heads="n_head",
                d_model="n_embd",
                v="h.{i}.attn.v_proj.weight",
                o="h.{i}.attn.out_proj.weight",
            ),
        ),
        note="rotary position embedding on the first rotary_dim features of each head",
    )
)

register(
    Family(
        "gpt_neox",
        "decoder-only",
        "text",
        (
            Stack(
                "decoder",
                "layers.{i}.attention.query_key_value.weight",
                layout="fused_qkv_per_head",
                o="layers.{i}.attention.dense.weight",
            ),
        ),
        note="rotary position embedding on a fraction of each head",
    )
)

_LLAMA_Q = "layers.{i}.self_attn.q_proj.weight"
_LLAMA_K = "layers.{i}.self_attn.k_proj.weight"
_LLAMA_V = "layers.{i}.self_attn.v_proj.weight"
_ROPE = "rotary position embedding"
for _type, _note in (
    ("llama", _ROPE),
    ("mistral", _ROPE + "; sliding-window attention"),
    ("mixtral", _ROPE + "; sliding-window attention"),
    ("qwen2", _ROPE + "; optional sliding-window attention"),
    ("phi", _ROPE + " (partial); optional q/k LayerNorm (qk_layernorm)"),
    ("gemma", _ROPE),
    ("gemma3_text", _ROPE + "; RMSNorm on every query and key head (q_norm, k_norm); sliding-window layers"),
    ("gemma2", _ROPE + "; tanh soft-capping of the logits (attn_logit_softcapping); sliding-window layers"),
    ("qwen3", _ROPE + "; RMSNorm on every query and key head (q_norm, k_norm); optional sliding window"),
    ("qwen3_moe", _ROPE + "; RMSNorm on every query and key head (q_norm, k_norm); the MoE is in the MLP only"),
    ("qwen2_moe", _ROPE + "; q/k biases; the MoE is in the MLP only"),
    ("olmo2", _ROPE + "; RMSNorm over all query heads and over all key heads together (q_norm, k_norm)"),
    ("starcoder2", _ROPE + "; q/k biases; optional sliding window"),
    ("stablelm", _ROPE + " (partial); optional LayerNorm on every query and key head (qk_layernorm)"),
    ("cohere", _ROPE + " (interleaved pairs); optional LayerNorm on q and k (use_qk_norm)"),
    ("granite", _ROPE + "; the logits scaled by attention_multiplier instead of 1/sqrt(d_head)"),
    ("smollm3", _ROPE + " except in the NoPE layers (no position term there)"),
):
    register(
        Family(
            _type,
            "decoder-only",
            "text",
            (
                Stack(
                    "decoder",
                    _LLAMA_Q,
                    _LLAMA_K,
                    n_kv_heads=num_key_value_heads,
                    v=_LLAMA_V,
                    # Phi calls its output projection `dense`, the others `o_proj`
                    o="layers.{i}.self_attn." + ("dense" if _type == "phi" else "o_proj") + ".weight",
                ),
            ),
            note=_note,
        )
    )

register(
    Family(
        "phi3",
        "decoder-only",
        "text",
        (
            Stack(
                "decoder",
                "layers.{i}.self_attn.qkv_proj.weight",
                layout="fused_qkv",
                n_kv_heads=num_key_value_heads,
                o="layers.{i}.self_attn.o_proj.weight",
            ),
        ),
        note=_ROPE + " (partial); optional sliding-window attention",
    )
)

register(
    Family(
        "opt",
        "decoder-only",
        "text",
        (
            Stack(
                "decoder",
                "decoder.layers.{i}.self_attn.q_proj.weight",
                "decoder.layers.{i}.self_attn.k_proj.weight",
                n_heads="num_attention_heads",
                v="decoder.layers.{i}.self_attn.v_proj.weight",
                o="decoder.layers.{i}.self_attn.out_proj.weight",
            ),
        ),
        note="learned absolute positions (part of x); q/k biases",
    )
)


def _bigcode_kv_heads(config: Any) -> int:
    """GPT-BigCode's key/value heads: one under multi-query attention (its default), else one per query head."""
    multi = config_field(config, "multi_query")
    return 1 if multi is None or multi else int(config_field(config, "n_head"))


register(
    Family(
        "gpt_bigcode",
        "decoder-only",
        "text",
        (
            Stack(
                "decoder",
                "h.{i}.attn.c_attn.weight",
                layout="fused_qkv",
                n_layers="n_layer",
                n_heads="n_head",
                n_kv_heads=_bigcode_kv_heads,
                d_model="n_embd",
                o="h.{i}.attn.c_proj.weight",
            ),
        ),
        note="multi-query (one key/value head) by default: nn.Linear c_attn with q | k | v along the output; "
        "learned absolute positions (part of x); q/k biases",
    )
)


def _falcon_kv_heads(config: Any) -> int:
    """Falcon's key/value heads where its fused tensor is q | k | v with one key head (multi_query, falcon-7b; or
    new_decoder_architecture with num_kv_heads 1). Its other two layouts are refused with the reason: grouped
    [q..., k, v] per key head (new_decoder_architecture, falcon-40b / 180b) and q, k, v interleaved per head
    (neither flag)."""
    if config_field(config, "new_decoder_architecture"):
        kv = int(config_field(config, "num_kv_heads") or 1)
        if kv != 1:
            raise UnsupportedArchitecture(
                f"falcon with new_decoder_architecture and {kv} key/value heads stores q, k and v grouped per key "
                "head in one tensor, a layout not supported: only falcon's multi-query layout is"
            )
        return 1
    if not config_field(config, "multi_query"):
        raise UnsupportedArchitecture(
            "falcon without multi_query stores q, k and v interleaved per head, a layout not supported: only falcon's "
            "multi-query layout is"
        )
    return 1


register(
    Family(
        "falcon",
        "decoder-only",
        "text",
        (
            Stack(
                "decoder",
                "h.{i}.self_attention.query_key_value.weight",
                layout="fused_qkv",
                n_kv_heads=_falcon_kv_heads,
                o="h.{i}.self_attention.dense.weight",
            ),
        ),
        note=_ROPE + " (or ALiBi, alibi: a key-position term outside W_qk); multi-query: one key/value head",
    )
)
