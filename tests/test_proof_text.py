"""Proof that extraction returns the W_qk each text family really uses.

For every model_type: a small random model built from a config (no download), float64, eager attention,
q/k biases zeroed, position effects outside W_qk neutralized (position ids all zero so rotary embeddings are
the identity, relative-position terms off, q/k norms replaced by the identity), run with output_attentions.
The model's own log-probability differences must equal c_h x_i^T M_h (x_j - x_k) for every layer and head
(tests/proof.py), with M_h from extract.iter_layer_qk + wqk(per_head=True). The test only uses the matrices
extraction returns; which module ran at which position, the masks and the deliberately wrong matrices are
worked out here, independently of extract.py's head and layout logic.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch
import transformers as tf
from proof import assert_bilinear, assert_ov, bilinear_error, capture_inputs, ov_error

from attention_geometry.architectures.keys import get_family, supported_model_types
from attention_geometry.architectures.registry import UnsupportedArchitecture
from attention_geometry.scoring.extract import iter_layer_ov, iter_layer_qk, wqk

VOCAB = 60
BATCH, SEQ = 2, 9
WRONG = 1e-2  # a wrong matrix must miss by far more than the 1e-4 tolerance


@dataclass
class Case:
    model_type: str
    make: Callable[[], Any]  # -> config
    attention: str  # class name of the module whose input is x and whose output are the probabilities
    model_cls: Any = tf.AutoModel
    causal: bool = False
    rotary: bool = False  # pass position_ids = 0 so that rotary embeddings are the identity
    prepare: Callable[[torch.nn.Module], None] | None = None
    raw_layout: str | None = None  # fused layouts: "per_head" | "contiguous" | "conv1d", for the wrong reading
    n_kv: int | None = None  # key/value heads where the config has no num_key_value_heads (GPT-BigCode's MQA)


SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
GQA = dict(SMALL, num_key_value_heads=2)
EAGER = dict(attn_implementation="eager", vocab_size=VOCAB)
MOE = dict(experts_implementation="eager")


def _identity_qk_norms(model: torch.nn.Module) -> None:
    for mod in model.modules():
        if type(mod).__name__ in ("Gemma3Attention", "Qwen3Attention", "Qwen3MoeAttention", "Olmo2Attention"):
            mod.q_norm = torch.nn.Identity()
            mod.k_norm = torch.nn.Identity()


CASES = [
    Case("bert", lambda: tf.BertConfig(**SMALL, **EAGER), "BertSelfAttention", tf.BertForMaskedLM),
    Case("roberta", lambda: tf.RobertaConfig(**SMALL, **EAGER), "RobertaSelfAttention"),
    Case("xlm-roberta", lambda: tf.XLMRobertaConfig(**SMALL, **EAGER), "XLMRobertaSelfAttention"),
    Case(
        "albert",
        lambda: tf.AlbertConfig(
            embedding_size=16, num_hidden_groups=2, inner_group_num=2, **dict(SMALL, num_hidden_layers=3), **EAGER
        ),
        "AlbertAttention",
        tf.AlbertForMaskedLM,
    ),
    Case(
        "distilbert",
        lambda: tf.DistilBertConfig(dim=32, n_layers=2, n_heads=4, hidden_dim=64, **EAGER),
        "DistilBertSelfAttention",
    ),
    Case("electra", lambda: tf.ElectraConfig(embedding_size=16, **SMALL, **EAGER), "ElectraSelfAttention"),
    Case(
        "deberta",
        lambda: tf.DebertaConfig(**SMALL, relative_attention=False, **EAGER),
        "DisentangledSelfAttention",
        raw_layout="per_head",
    ),
    Case(
        "deberta-v2",
        lambda: tf.DebertaV2Config(**SMALL, relative_attention=False, **EAGER),
        "DisentangledSelfAttention",
    ),
    Case(
        "modernbert",
        lambda: tf.ModernBertConfig(
            **dict(SMALL, num_hidden_layers=3),
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
            cls_token_id=1,
            sep_token_id=2,
            global_attn_every_n_layers=2,
            local_attention=4,
            **EAGER,
        ),
        "ModernBertAttention",
        rotary=True,
        raw_layout="contiguous",
    ),
    Case(
        "openai-gpt",
        lambda: tf.OpenAIGPTConfig(n_embd=32, n_layer=2, n_head=4, **EAGER),
        "Attention",
        causal=True,
        raw_layout="conv1d",
    ),
    Case(
        "gpt2",
        lambda: tf.GPT2Config(n_embd=32, n_layer=2, n_head=4, **EAGER),
        "GPT2Attention",
        tf.GPT2LMHeadModel,
        causal=True,
        raw_layout="conv1d",
    ),
    Case(
        "imagegpt",
        lambda: tf.ImageGPTConfig(n_embd=32, n_layer=2, n_head=4, **EAGER),
        "ImageGPTAttention",
        causal=True,
        raw_layout="conv1d",
    ),
    Case(
        "gpt_neo",
        lambda: tf.GPTNeoConfig(
            hidden_size=32,
            num_layers=2,
            num_heads=4,
            window_size=4,
            attention_types=[[["global", "local"], 1]],
            **EAGER,
        ),
        "GPTNeoSelfAttention",
        causal=True,
    ),
    Case(
        "gptj",
        lambda: tf.GPTJConfig(n_embd=32, n_layer=2, n_head=4, rotary_dim=4, **EAGER),
        "GPTJAttention",
        causal=True,
        rotary=True,
    ),
    Case(
        "gpt_neox",
        lambda: tf.GPTNeoXConfig(**SMALL, **EAGER),
        "GPTNeoXAttention",
        causal=True,
        rotary=True,
        raw_layout="per_head",
    ),
    Case(
        "llama", lambda: tf.LlamaConfig(**GQA, **EAGER), "LlamaAttention", tf.LlamaForCausalLM, causal=True, rotary=True
    ),
    Case(
        "mistral",
        lambda: tf.MistralConfig(**GQA, sliding_window=4, **EAGER),
        "MistralAttention",
        causal=True,
        rotary=True,
    ),
    Case(
        "mixtral",
        lambda: tf.MixtralConfig(
            **GQA, num_local_experts=2, num_experts_per_tok=1, experts_implementation="eager", **EAGER
        ),
        "MixtralAttention",
        causal=True,
        rotary=True,
    ),
    Case("qwen2", lambda: tf.Qwen2Config(**GQA, **EAGER), "Qwen2Attention", causal=True, rotary=True),
    Case("phi", lambda: tf.PhiConfig(**GQA, **EAGER), "PhiAttention", causal=True, rotary=True),
    Case(
        "phi3",
        lambda: tf.Phi3Config(**GQA, pad_token_id=0, bos_token_id=1, eos_token_id=2, **EAGER),
        "Phi3Attention",
        causal=True,
        rotary=True,
        raw_layout="contiguous",
    ),
    # gemma: multi-query (one key/value head), as in gemma-2b
    Case(
        "gemma",
        lambda: tf.GemmaConfig(**dict(SMALL, num_key_value_heads=1), head_dim=8, **EAGER),
        "GemmaAttention",
        causal=True,
        rotary=True,
    ),
    Case(
        "gemma3_text",
        lambda: tf.Gemma3TextConfig(**GQA, head_dim=8, query_pre_attn_scalar=8, sliding_window=4, **EAGER),
        "Gemma3Attention",
        causal=True,
        rotary=True,
        prepare=_identity_qk_norms,
    ),
    Case(
        "gemma2",
        lambda: tf.Gemma2Config(
            **GQA, head_dim=8, query_pre_attn_scalar=8, sliding_window=4, attn_logit_softcapping=None, **EAGER
        ),
        "Gemma2Attention",
        causal=True,
        rotary=True,
    ),
    Case(
        "qwen3",
        lambda: tf.Qwen3Config(**GQA, head_dim=8, **EAGER),
        "Qwen3Attention",
        causal=True,
        rotary=True,
        prepare=_identity_qk_norms,
    ),
    Case(
        "qwen3_moe",
        lambda: tf.Qwen3MoeConfig(
            **GQA, head_dim=8, num_experts=2, num_experts_per_tok=1, moe_intermediate_size=16, **MOE, **EAGER
        ),
        "Qwen3MoeAttention",
        causal=True,
        rotary=True,
        prepare=_identity_qk_norms,
    ),
    Case(
        "qwen2_moe",
        lambda: tf.Qwen2MoeConfig(
            **GQA,
            num_experts=2,
            num_experts_per_tok=1,
            moe_intermediate_size=16,
            shared_expert_intermediate_size=16,
            **MOE,
            **EAGER,
        ),
        "Qwen2MoeAttention",
        causal=True,
        rotary=True,
    ),
    # olmo2 normalizes after attention, not before: its attention sees the embeddings as they are, so they are drawn
    # large enough (initializer_range) that the logits' differences stand above the float32 softmax's rounding
    Case(
        "olmo2",
        lambda: tf.Olmo2Config(**GQA, initializer_range=0.2, **EAGER),
        "Olmo2Attention",
        causal=True,
        rotary=True,
        prepare=_identity_qk_norms,
    ),
    Case("starcoder2", lambda: tf.Starcoder2Config(**GQA, **EAGER), "Starcoder2Attention", causal=True, rotary=True),
    Case("stablelm", lambda: tf.StableLmConfig(**GQA, **EAGER), "StableLmAttention", causal=True, rotary=True),
    Case("cohere", lambda: tf.CohereConfig(**GQA, **EAGER), "CohereAttention", causal=True, rotary=True),
    Case(
        "granite",
        lambda: tf.GraniteConfig(**GQA, attention_multiplier=0.3, **EAGER),
        "GraniteAttention",
        causal=True,
        rotary=True,
    ),
    Case(
        "smollm3",
        lambda: tf.SmolLM3Config(**GQA, pad_token_id=0, **EAGER),
        "SmolLM3Attention",
        causal=True,
        rotary=True,
    ),
    Case("camembert", lambda: tf.CamembertConfig(**SMALL, **EAGER), "CamembertSelfAttention"),
    Case(
        "opt",
        lambda: tf.OPTConfig(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=4, ffn_dim=64, word_embed_proj_dim=32, **EAGER
        ),
        "OPTAttention",
        causal=True,
    ),
    Case(
        "falcon",
        lambda: tf.FalconConfig(
            **dict(SMALL, num_hidden_layers=2), multi_query=True, new_decoder_architecture=False, alibi=False, **EAGER
        ),
        "FalconAttention",
        causal=True,
        rotary=True,
        raw_layout="contiguous",
        n_kv=1,
    ),
    # gpt_bigcode: multi-query, one key/value head (its default, as in StarCoder and SantaCoder)
    Case(
        "gpt_bigcode",
        lambda: tf.GPTBigCodeConfig(n_embd=32, n_layer=2, n_head=4, **EAGER),
        "GPTBigCodeAttention",
        causal=True,
        raw_layout="contiguous",
        n_kv=1,
    ),
]
BY_TYPE = {c.model_type: c for c in CASES}


# --------------------------------------------------------------------------------------------- harness


def _expected_applied(config) -> int:
    """Applied self-attention layers, from the config alone (ALBERT: every step runs its group's layers)."""
    if config.model_type == "albert":
        return config.num_hidden_layers * config.inner_group_num
    return config.num_hidden_layers


def _build(cls, config) -> torch.nn.Module:
    model = cls.from_config(config) if hasattr(cls, "from_config") else cls(config)
    return model.double().eval()


def run_case(case: Case, prepare: bool = True):
    """Build the model, run it; return (config, model, [(module name, x)], attention probabilities)."""
    torch.manual_seed(0)
    config = case.make()
    assert config.model_type == case.model_type
    model = _build(case.model_cls, config)
    if prepare and case.prepare:
        case.prepare(model)
    named = [(n, m) for n, m in model.named_modules() if type(m).__name__ == case.attention]
    assert named, f"no {case.attention} in {type(model).__name__}"
    with torch.no_grad():
        for _, mod in named:  # zero every bias inside attention: q/k biases are not part of W_qk
            for pname, p in mod.named_parameters():
                if "bias" in pname.split(".")[-1]:
                    p.zero_()
        calls: list[str] = []
        hooks = [m.register_forward_pre_hook(lambda mod, args, name=n: calls.append(name)) for n, m in named]
        ids = torch.randint(4, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(1))
        kwargs: dict[str, Any] = dict(attention_mask=torch.ones(BATCH, SEQ, dtype=torch.long), output_attentions=True)
        if case.rotary:
            kwargs["position_ids"] = torch.zeros(BATCH, SEQ, dtype=torch.long)
        if case.causal:
            kwargs["use_cache"] = False
        try:
            with capture_inputs([m for _, m in named]) as xs:
                out = model(ids, **kwargs)
        finally:
            for h in hooks:
                h.remove()
    assert len(calls) == len(xs) == len(out.attentions)
    return config, model, list(zip(calls, xs)), out.attentions


def _extract(case: Case, config, model):
    sd = model.state_dict()
    return sd, list(iter_layer_qk(get_family(case.model_type), config, sd.keys(), sd.__getitem__))


def _check_mask(case: Case, probs: torch.Tensor) -> None:
    """Each query sees itself and no later key (decoder) or every key (encoder; ModernBERT's local layers a
    window of them), and at least two keys from the second position on, so every row has differences to
    check. Sliding windows of the test configs are shorter than the sequence: a mask only removes keys."""
    valid = probs > 1e-30
    assert bool(valid.diagonal(dim1=-2, dim2=-1).all())
    assert bool((valid[..., 1:, :].sum(-1) >= 2).all())
    if case.causal:
        assert not valid.triu(1).any(), "a decoder attends to a later position"
    elif case.model_type != "modernbert":
        assert bool(valid.all())


def _wrong_layouts(case: Case, sd, layer, n_heads: int, n_kv: int) -> dict[str, torch.Tensor]:
    """Per-head matrices from readings of the checkpoint that a buggy extraction could make."""
    wq, wk = layer.wq.double(), layer.wk.double()
    group = n_heads // n_kv
    out = {"transposed": torch.einsum("hed,hef->hfd", wq, wk.repeat_interleave(group, 0))}
    if group > 1 and n_kv > 1:  # query head h paired with key head h % H_kv instead of h // group
        out["heads paired wrong"] = torch.einsum("hed,hef->hdf", wq, wk.repeat(group, 1, 1))
    if case.raw_layout:
        w = sd[layer.keys[0]].double()
        if case.raw_layout == "conv1d":
            w = w.t()
        dh = w.shape[0] // (n_heads + 2 * n_kv)
        if case.raw_layout == "contiguous" and n_kv == n_heads:  # read as per-head interleaved instead
            w4 = w.reshape(n_heads, 3, dh, -1)
            q, k = w4[:, 0], w4[:, 1]
        elif case.raw_layout == "contiguous" and n_kv == 1:  # multi-query: the value rows read as the key
            q = w[: n_heads * dh].reshape(n_heads, dh, -1)
            k = w[(n_heads + 1) * dh : (n_heads + 2) * dh].reshape(1, dh, -1).repeat(n_heads, 1, 1)
        elif case.raw_layout == "contiguous":  # grouped split read as if every query head had its own key
            q, k = (
                w[: n_heads * dh].reshape(n_heads, dh, -1),
                w[n_heads * dh : 2 * n_heads * dh].reshape(n_heads, dh, -1),
            )
        else:  # per-head interleaved (or Conv1D q|k|v) read the other way round
            if case.raw_layout == "per_head":
                q, k = w[: n_heads * dh], w[n_heads * dh : 2 * n_heads * dh]
                q, k = q.reshape(n_heads, dh, -1), k.reshape(n_heads, dh, -1)
            else:
                w4 = w.reshape(n_heads, 3, dh, -1)
                q, k = w4[:, 0], w4[:, 1]
        out["fused layout read the other way"] = torch.einsum("hed,hef->hdf", q, k)
    return out


# ----------------------------------------------------------------------------------------------- proofs


# the text families added for the tools' users (issue 58.3); tests/test_families_cli.py scores each from disk
ADDED_FOR_USERS = [
    "gemma2", "qwen3", "qwen3_moe", "qwen2_moe", "olmo2", "starcoder2", "stablelm", "cohere", "granite", "smollm3",
    "camembert", "opt", "gpt_bigcode", "falcon",
]  # fmt: skip
REQUIRED = {
    "bert",
    "roberta",
    "xlm-roberta",
    "albert",
    "distilbert",
    "electra",
    "deberta",
    "deberta-v2",
    "modernbert",
    "openai-gpt",
    "gpt2",
    "gpt_neo",
    "gptj",
    "gpt_neox",
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "phi",
    "phi3",
    "gemma",
    "gemma3_text",
    "imagegpt",
} | set(ADDED_FOR_USERS)


def _registered_by(module_name: str, monkeypatch) -> list[str]:
    """The model types a family module registers, in order: its source run again with `register` recording."""
    from attention_geometry.architectures import registry

    seen: list[str] = []
    monkeypatch.setattr(registry, "register", lambda family: seen.append(family.model_type) or family)
    spec = importlib.util.find_spec(module_name)
    exec(compile(spec.loader.get_source(module_name), spec.origin, "exec"), {"__name__": f"{module_name}.copy"})
    return seen


def test_every_text_family_is_registered_and_proven(monkeypatch):
    """Every family that families/text.py registers has a case here, which test_proof proves against the model's
    own attention, and the families this project requires are among them."""
    registered = _registered_by("attention_geometry.architectures.families.text", monkeypatch)
    assert len(registered) == len(set(registered)) and set(registered) == set(BY_TYPE) == REQUIRED
    assert set(registered) <= set(supported_model_types())
    assert {c.model_type for c in CASES} == set(BY_TYPE) and len(CASES) == len(BY_TYPE)  # what test_proof runs
    assert get_family("imagegpt").modality == "vision"
    for t in REQUIRED - {"imagegpt"}:
        assert get_family(t).modality == "text"


@pytest.mark.parametrize("model_type", [c.model_type for c in CASES])
def test_proof(model_type):
    case = BY_TYPE[model_type]
    config, model, inputs, attentions = run_case(case)
    sd, layers = _extract(case, config, model)
    family = get_family(model_type)
    component = "decoder" if family.architecture == "decoder-only" else "encoder"

    # exactly the applied self-attention layers, in the order the model applies them
    assert len(layers) == len(inputs) == _expected_applied(config)
    assert [L.layer for L in layers] == list(range(len(layers)))
    assert {L.component for L in layers} == {component}
    for L, (module_name, _) in zip(layers, inputs):
        assert all(k.startswith(module_name + ".") for k in L.keys), (L.keys, module_name)

    n_heads = attentions[0].shape[1]
    kv_expected = case.n_kv or getattr(config, "num_key_value_heads", None) or n_heads
    for L, (name, x), p in zip(layers, inputs, attentions):
        _check_mask(case, p)
        assert (L.n_heads, L.n_kv_heads) == (n_heads, kv_expected)
        M = wqk(L, per_head=True)
        assert_bilinear(p, x, M, what=f"{model_type} layer {L.layer} ({name})")
        # the summed M is the sum of the per-head ones
        torch.testing.assert_close(wqk(L), M.sum(0))
        for what, W in _wrong_layouts(case, sd, L, n_heads, L.n_kv_heads).items():
            err, _ = bilinear_error(p, x, W)
            assert err.max() > WRONG, f"{model_type}: {what} passes the check ({err.tolist()})"
            if what == "transposed":
                assert bool((err > WRONG).all()), f"{model_type}: transposed passes for some head {err.tolist()}"


# ---------------------------------------------------------------------------------------- the OV circuit


def run_ov_case(case: Case):
    """Build the model with every bias drawn at random (the proof must hold with biases, not only without), run it
    at its real positions (P is the model's own: rotary embeddings, q/k norms and position terms change P only);
    return (config, OV layers from the checkpoint's names, [(x, P, output of the output projection)])."""
    torch.manual_seed(0)
    config = case.make()
    model = _build(case.model_cls, config)
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if pname.split(".")[-1].endswith("bias"):
                p.normal_(0.0, 0.5, generator=torch.Generator().manual_seed(len(pname)))
    sd = model.state_dict()
    layers = list(iter_layer_ov(get_family(case.model_type), config, sd.keys(), sd.__getitem__))
    modules = dict(model.named_modules())
    attn = [m for m in modules.values() if type(m).__name__ == case.attention]
    # the output projection of each layer, found by the checkpoint name extraction returned (nothing else)
    o_names = sorted({L.keys[-1].removesuffix(".weight") for L in layers})
    assert all(n in modules for n in o_names), o_names
    outputs: list[tuple[str, torch.Tensor]] = []
    hooks = [
        modules[n].register_forward_hook(lambda mod, args, out, n=n: outputs.append((n, out.detach()))) for n in o_names
    ]
    ids = torch.randint(4, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(1))
    kwargs: dict[str, Any] = dict(attention_mask=torch.ones(BATCH, SEQ, dtype=torch.long), output_attentions=True)
    if case.causal:
        kwargs["use_cache"] = False
    try:
        with torch.no_grad(), capture_inputs(attn) as xs:
            out = model(ids, **kwargs)
    finally:
        for h in hooks:
            h.remove()
    assert len(xs) == len(outputs) == len(out.attentions) == len(layers)
    return config, layers, list(zip(xs, out.attentions, outputs))


@pytest.mark.parametrize("model_type", [c.model_type for c in CASES])
def test_proof_ov(model_type):
    """The OV circuit extraction returns what the model computes: for every layer, the output of the attention's
    output projection (before any residual) equals sum_h P_h X M_ov,h^T plus one constant row (the biases), with P
    the model's own probabilities, X the inputs of its value projection and M_ov,h = W_o,h W_v,g(h) from
    iter_layer_ov + wqk(per_head=True); grouped query heads mapped as in the attention. Readings a buggy
    extraction could make fail: M transposed, query heads paired with the wrong value head, and the output
    projection split into heads by its rows (as the authors' W&B callback splits it) instead of its columns."""
    case = BY_TYPE[model_type]
    config, layers, observed = run_ov_case(case)
    family = get_family(model_type)
    assert {L.component for L in layers} == {"decoder" if family.architecture == "decoder-only" else "encoder"}
    assert [L.layer for L in layers] == list(range(len(layers))) and {L.matrix for L in layers} == {"ov"}
    for L, (x, p, (o_name, y)) in zip(layers, observed):
        what = f"{model_type} layer {L.layer} ({o_name})"
        assert L.keys[-1] == o_name + ".weight", (L.keys, o_name)  # the module that ran at this position
        kv = case.n_kv or getattr(config, "num_key_value_heads", None) or p.shape[1]
        assert (L.n_heads, L.n_kv_heads) == (p.shape[1], kv)
        M = wqk(L, per_head=True)
        assert_ov(p, x, M, y, what=what)
        torch.testing.assert_close(wqk(L), M.sum(0))
        # readings that must fail
        group = L.n_heads // L.n_kv_heads
        wo_t, wv = L.wq.double(), L.wk.double()  # W_o,h^T [H, d_head, d], W_v [H_kv, d_head, d]
        wrong = {"transposed": M.transpose(-1, -2)}
        if group > 1 and L.n_kv_heads > 1:
            wrong["heads paired wrong"] = torch.einsum("hed,hef->hdf", wo_t, wv.repeat(group, 1, 1))
        wo = wo_t.permute(2, 0, 1).reshape(wo_t.shape[2], -1)  # the output projection [d, H * d_head]
        if group == 1 and wo.shape[0] == wo.shape[1]:
            rows = wo.reshape(L.n_heads, -1, wo.shape[1])  # head h: rows h * d_head ..., not columns
            wrong["output split by rows"] = torch.einsum("hed,hef->hdf", rows, wv)
        for name, W in wrong.items():
            err = ov_error(p, x, W, y)
            assert err > WRONG, f"{what}: {name} passes the OV check ({err})"


def test_wrong_readings_are_exercised():
    """The fused and grouped families really get a layout / pairing mistake to fail on."""
    assert {c.model_type for c in CASES if c.raw_layout} >= {
        "gpt2",
        "openai-gpt",
        "imagegpt",
        "gpt_neox",
        "deberta",
        "modernbert",
        "phi3",
        "gpt_bigcode",
        "falcon",
    }
    grouped = [t for t in BY_TYPE if get_family(t).stacks[0].n_kv_heads is not None]
    old = {"llama", "mistral", "mixtral", "qwen2", "phi", "phi3", "gemma", "gemma3_text"}
    assert set(grouped) == old | set(ADDED_FOR_USERS) - {"camembert", "opt"}  # every added one but these two


# ------------------------------------------------------------------------- what the proof switches off


@pytest.mark.parametrize(
    "model_type,make",
    [
        (
            "deberta-v2",
            lambda: tf.DebertaV2Config(
                **SMALL, relative_attention=True, pos_att_type=["p2c", "c2p"], max_relative_positions=8, **EAGER
            ),
        ),
        (
            "deberta",
            lambda: tf.DebertaConfig(
                **SMALL, relative_attention=True, pos_att_type=["p2c", "c2p"], max_relative_positions=8, **EAGER
            ),
        ),
        ("gemma3_text", BY_TYPE["gemma3_text"].make),  # q_norm / k_norm left in place
        ("phi", lambda: tf.PhiConfig(**GQA, qk_layernorm=True, **EAGER)),
    ],
)
def test_switched_off_terms_do_enter_the_logits(model_type, make):
    """What docs/architectures/text.md lists beyond x^T W_qk x is real: left on, the bilinear check fails."""
    base = BY_TYPE[model_type]
    case = Case(model_type, make, base.attention, base.model_cls, base.causal, base.rotary)
    config, model, inputs, attentions = run_case(case, prepare=False)
    _, layers = _extract(case, config, model)
    errs = [
        bilinear_error(p, x, wqk(L, per_head=True))[0].max().item() for L, (_, x), p in zip(layers, inputs, attentions)
    ]
    assert max(errs) > WRONG, errs


def test_rotary_is_not_identity_at_real_positions():
    """The proof's position_ids = 0 matter: at positions 0..T-1 rotary breaks the bilinear form."""
    case = BY_TYPE["llama"]
    torch.manual_seed(0)
    config = case.make()
    model = _build(case.model_cls, config)
    attn = [m for m in model.modules() if type(m).__name__ == case.attention]
    ids = torch.randint(4, VOCAB, (BATCH, SEQ))
    with torch.no_grad(), capture_inputs(attn) as xs:
        out = model(ids, output_attentions=True, use_cache=False)
    _, layers = _extract(case, config, model)
    err, _ = bilinear_error(out.attentions[0], xs[0], wqk(layers[0], per_head=True))
    assert err.max() > WRONG


def test_bert_as_decoder():
    """A BERT run with is_decoder=True is causal; its rows are component `decoder` (docs/contracts.md)."""
    case = Case(
        "bert",
        lambda: tf.BertConfig(**SMALL, is_decoder=True, **EAGER),
        "BertSelfAttention",
        tf.BertLMHeadModel,
        causal=True,
    )
    config, model, inputs, attentions = run_case(case)
    _, layers = _extract(case, config, model)
    assert [L.component for L in layers] == ["decoder"] * config.num_hidden_layers
    for L, (_, x), p in zip(layers, inputs, attentions):
        _check_mask(case, p)
        assert_bilinear(p, x, wqk(L, per_head=True), what=f"bert decoder layer {L.layer}")


# ---------------------------------------------------------------------------------------------- ALBERT


@pytest.mark.parametrize("layers,groups,inner", [(3, 2, 2), (4, 2, 1), (2, 1, 3), (6, 3, 2)])
def test_albert_positions(layers, groups, inner):
    """One row per applied position; the tensors of each row belong to the group/inner layer that ran."""
    case = Case(
        "albert",
        lambda: tf.AlbertConfig(
            embedding_size=16,
            hidden_size=16,
            num_attention_heads=2,
            intermediate_size=32,
            num_hidden_layers=layers,
            num_hidden_groups=groups,
            inner_group_num=inner,
            **EAGER,
        ),
        "AlbertAttention",
    )
    config, model, inputs, attentions = run_case(case)
    sd, rows = _extract(case, config, model)
    assert len(rows) == layers * inner == len(inputs)
    for L, (module_name, x), p in zip(rows, inputs, attentions):
        assert L.keys == (module_name + ".query.weight", module_name + ".key.weight")
        assert_bilinear(p, x, wqk(L, per_head=True), what=f"albert position {L.layer}")
    # a shared layer gives identical matrices at every position that applies it
    by_module: dict[str, torch.Tensor] = {}
    for L, (module_name, _) in zip(rows, inputs):
        M = wqk(L)
        if module_name in by_module:
            torch.testing.assert_close(M, by_module[module_name])
        by_module[module_name] = M
    assert len(by_module) == groups * inner


# ----------------------------------------------------------------------------------------------- errors


def test_unknown_model_type_names_it_and_lists_supported():
    with pytest.raises(UnsupportedArchitecture) as e:
        get_family("nonexistent")
    msg = str(e.value)
    assert "'nonexistent'" in msg and "\n" not in msg
    for t in ("bert", "gpt2", "llama", "albert", "gemma3_text"):
        assert t in msg


def test_raw_config_dict_without_kv_heads_means_one_per_query_head():
    """A config.json that leaves out num_key_value_heads (older Llama) or uses GPT-2's own names."""
    from attention_geometry.architectures.keys import stack_info

    llama = {"model_type": "llama", "num_hidden_layers": 3, "num_attention_heads": 4, "hidden_size": 32}
    info = stack_info(get_family("llama").stacks[0], llama)
    assert (info.n_layers, info.n_heads, info.n_kv_heads, info.d_model) == (3, 4, 4, 32)
    info = stack_info(get_family("llama").stacks[0], dict(llama, num_key_value_heads=1))
    assert info.n_kv_heads == 1
    gpt2 = {"model_type": "gpt2", "n_layer": 5, "n_head": 2, "n_embd": 16}
    info = stack_info(get_family("gpt2").stacks[0], gpt2)
    assert (info.n_layers, info.n_heads, info.d_model) == (5, 2, 16)


def test_a_family_entry_states_its_value_projection_as_its_layout_needs_and_ov_needs_an_output_projection():
    """register refuses an output projection without a value template (separate layout) or with one (fused: the
    fused tensor holds the values); a family without an output projection is one error for OV, not for W_qk."""
    from attention_geometry.architectures.keys import ov_keys, qk_keys
    from attention_geometry.architectures.registry import ExtractionError, Family, Stack, register

    q, k = "layers.{i}.q.weight", "layers.{i}.k.weight"
    with pytest.raises(ValueError, match="with an output projection needs v=a template"):
        register(Family("no-such-a", "encoder-only", "text", (Stack("encoder", q, k, o="layers.{i}.o.weight"),)))
    fused = Stack("encoder", "layers.{i}.qkv.weight", layout="fused_qkv", v="layers.{i}.v.weight", o="x.{i}.weight")
    with pytest.raises(ValueError, match="needs v=None"):
        register(Family("no-such-b", "encoder-only", "text", (fused,)))
    assert "no-such-a" not in supported_model_types() and "no-such-b" not in supported_model_types()
    family = Family("no-such-c", "encoder-only", "text", (Stack("encoder", q, k),))
    config = {"num_hidden_layers": 1, "num_attention_heads": 2, "hidden_size": 4}
    keys = ["layers.0.q.weight", "layers.0.k.weight"]
    assert len(qk_keys(family, config, keys)) == 1
    with pytest.raises(ExtractionError, match="no-such-c: the output projection of its encoder self-attention is not"):
        ov_keys(family, config, keys)
