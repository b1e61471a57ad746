"""symmetric_init on a small random model of every supported family (the proof tests' builders: built from a
config, no download, float64).

- symmetric and symmetric-fresh: the attention's own W_qk of every layer, and of every head, has s = 1 at step 0,
  scored by the scorer (score_model on the in-memory model); only query weights change (symmetric) or only
  query, key and value weights and their biases (the fresh modes);
- fresh: the redrawn weights have PyTorch's nn.Linear default spread, and W_qk is not symmetric;
- standard: the model's outputs are bitwise unchanged;
- on a BERT model every mode is bitwise what training.models.apply_init draws under the same seed.
Families that refuse: none of the registered ones (each stores W_q and W_k with the same shape per head, and a
grouped-query tie always exists); the refusals tested are an unknown mode, an unsupported model type, a weight
that is not a parameter of the model (a converted copy) and an integer-quantized weight.
"""

from __future__ import annotations

import copy

import pytest
import test_proof_audio
import test_proof_seq2seq
import test_proof_text
import test_proof_vision
import torch
from helpers import fresh_linear_std

from attention_geometry.architectures.keys import get_family, supported_model_types
from attention_geometry.errors import UserError
from attention_geometry.scoring.extract import iter_layer_qk
from attention_geometry.scoring.scorer import score_model
from attention_geometry.tools.inits import InitError, symmetric_init
from attention_geometry.training.models import apply_init

# the families whose registry entry refuses a mode, with the reason (tested to refuse with that line): none
REFUSED: dict[tuple[str, str], str] = {}


def _text(case):
    def build():
        cfg = case.make()
        model = test_proof_text._build(case.model_cls, cfg)
        ids = torch.randint(4, test_proof_text.VOCAB, (2, 7), generator=torch.Generator().manual_seed(1))
        kw = dict(attention_mask=torch.ones_like(ids))
        if case.causal:
            kw["use_cache"] = False
        return model, lambda: model(ids, **kw)

    return build


def _other(fn):
    def build():
        out = fn()
        return out[1], out[-1]

    return build


BUILDERS = {c.model_type: _text(c) for c in test_proof_text.CASES}
BUILDERS.update({k: _other(f) for k, f in test_proof_seq2seq.BUILDERS.items()})
BUILDERS.update({k: _other(f) for k, f in test_proof_vision.BUILDERS.items()})
BUILDERS.update({k: _other(f) for k, f in test_proof_audio.BUILDERS.items() if k in supported_model_types()})


def _built(model_type: str):
    torch.manual_seed(0)
    model, forward = BUILDERS[model_type]()
    return model.eval(), forward


def _outputs(out) -> list[torch.Tensor]:
    values = out.values() if hasattr(out, "values") else out
    return [v for v in values if isinstance(v, torch.Tensor)]


def _qkv_keys(model) -> set[str]:
    """The state-dict names (in memory) of every q/k/v projection and their biases, independently of the package:
    by the module names the families use."""
    names = ("query", "key", "value", "query_proj", "key_proj", "value_proj", "q_proj", "k_proj", "v_proj")
    names += ("q_lin", "k_lin", "v_lin", "q", "k", "v")
    fused = ("c_attn", "Wqkv", "query_key_value", "in_proj", "qkv_proj")
    out = set()
    for name, _ in model.named_parameters():
        parts = name.split(".")
        if len(parts) >= 2 and (parts[-2] in names or parts[-2] in fused):
            out.add(name)
    return out


def test_every_family_has_a_builder():
    assert set(BUILDERS) == set(supported_model_types())


@pytest.mark.parametrize("model_type", sorted(BUILDERS))
def test_symmetric_init_every_family(model_type):
    for mode in ("symmetric", "symmetric-fresh"):
        model, _ = _built(model_type)
        before = {k: v.clone() for k, v in model.state_dict().items()}
        if (model_type, mode) in REFUSED:
            with pytest.raises(InitError, match=REFUSED[model_type, mode]):
                symmetric_init(model, mode)
            continue
        assert symmetric_init(model, mode) is model
        df = score_model(model, per_head=True, progress=False)
        assert len(df) and df["symmetry"].min() > 1 - 1e-6, (model_type, mode, df["symmetry"].min())
        changed = {k for k, v in model.state_dict().items() if not torch.equal(v, before[k])}
        assert changed and changed <= _qkv_keys(model), (model_type, mode, sorted(changed - _qkv_keys(model)))
        if mode == "symmetric":
            assert all("bias" not in k for k in changed), (model_type, sorted(changed))


@pytest.mark.parametrize("model_type", sorted(BUILDERS))
def test_standard_leaves_outputs_and_fresh_redraws(model_type):
    model, forward = _built(model_type)
    with torch.no_grad():
        torch.manual_seed(5)
        ref = _outputs(forward())
        symmetric_init(model, "standard")
        torch.manual_seed(5)
        got = _outputs(forward())
    assert len(ref) == len(got) > 0
    assert all(torch.equal(a, b) for a, b in zip(ref, got)), model_type

    symmetric_init(model, "fresh")
    sd = test_proof_seq2seq.checkpoint_state_dict(model)
    family = get_family(model.config.model_type)
    for layer in iter_layer_qk(family, model.config, sd.keys(), sd.__getitem__):
        for w in (layer.wq, layer.wk):
            bound = 1 / layer.d_model**0.5
            assert float(w.abs().max()) <= bound
            assert abs(float(w.std()) / fresh_linear_std(layer.d_model) - 1) < 0.2, (model_type, float(w.std()))
    s = score_model(model, progress=False)["symmetry"]
    assert float(s.abs().max()) < 0.5, (model_type, s.tolist())


@pytest.mark.parametrize("mode", ["standard", "symmetric", "fresh", "symmetric-fresh"])
def test_bert_is_bitwise_the_training_init(mode):
    from transformers import BertConfig, BertForMaskedLM

    cfg = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, vocab_size=60)
    torch.manual_seed(0)
    a = BertForMaskedLM(cfg)
    b = copy.deepcopy(a)
    torch.manual_seed(1)
    apply_init(a, mode)
    torch.manual_seed(1)
    symmetric_init(b, mode)
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    assert all(torch.equal(sa[k], sb[k]) for k in sa), [k for k in sa if not torch.equal(sa[k], sb[k])]


def test_grouped_query_tie_is_per_head():
    """Llama with 4 query heads over 2 key/value heads: query head h is key head h // 2, unscaled."""
    model, _ = _built("llama")
    symmetric_init(model, "symmetric")
    att = model.model.layers[0].self_attn
    wq = att.q_proj.weight.view(4, -1, att.q_proj.weight.shape[1])
    wk = att.k_proj.weight.view(2, -1, att.k_proj.weight.shape[1])
    for h in range(4):
        assert torch.equal(wq[h], wk[h // 2])


def test_refusals_are_one_line():
    model, _ = _built("bert")
    with pytest.raises(InitError, match="unknown init 'tied'"):
        symmetric_init(model, "tied")
    with pytest.raises(UserError, match="unsupported model_type"):
        model.config.model_type = "not-a-family"
        symmetric_init(model, "symmetric")
    with pytest.raises(UserError, match="not a transformers model"):
        symmetric_init(torch.nn.Linear(2, 2), "symmetric")


def test_refuses_weights_it_cannot_set_in_place(monkeypatch):
    import attention_geometry.weights.loading as loading

    model, _ = _built("bert")
    real = loading._checkpoint_state_dict
    monkeypatch.setattr(loading, "_checkpoint_state_dict", lambda m: {k: v.clone() for k, v in real(m).items()})
    with pytest.raises(InitError, match=r"query\.weight: not a parameter of the model itself"):
        symmetric_init(model, "symmetric")
    quantized = lambda m: {k: v.to(torch.int8) if "query" in k else v for k, v in real(m).items()}  # noqa: E731
    monkeypatch.setattr(loading, "_checkpoint_state_dict", quantized)
    with pytest.raises(InitError, match="dtype int8 cannot be initialized in place"):
        symmetric_init(model, "symmetric")


def test_a_wrapper_is_returned_as_given_and_meta_weights_are_refused():
    """symmetric_init(nn.DataParallel(m)) used to return the unwrapped model, and a meta-device model came back
    unchanged without a word."""
    model, _ = _built("bert")
    wrapped = torch.nn.DataParallel(model)
    assert symmetric_init(wrapped, "symmetric") is wrapped
    assert symmetric_init(wrapped, "standard") is wrapped
    q = model.bert.encoder.layer[0].attention.self.query.weight
    k = model.bert.encoder.layer[0].attention.self.key.weight
    assert torch.equal(q, k)  # the wrapped model was tied in place
    with torch.device("meta"):
        meta = type(model)(model.config)
    with pytest.raises(InitError, match="meta device"):
        symmetric_init(meta, "symmetric")
