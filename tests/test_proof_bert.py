import torch
from transformers import BertConfig, BertForMaskedLM

from attention_geometry.extract import get_family, iter_layer_qk, wqk
from proof import assert_bilinear, bilinear_error, capture_inputs


def test_bert_proof():
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=64, attn_implementation="eager")
    m = BertForMaskedLM(cfg).double().eval()
    attn = [layer.attention.self for layer in m.bert.encoder.layer]
    with torch.no_grad():
        for a in attn:
            a.query.bias.zero_(); a.key.bias.zero_()
        with capture_inputs(attn) as xs:
            out = m(torch.randint(0, 50, (2, 9)), output_attentions=True)
    sd = m.state_dict()
    layers = list(iter_layer_qk(get_family("bert"), cfg, sd.keys(), sd.__getitem__))
    assert len(layers) == 2
    for L, x, p in zip(layers, xs, out.attentions):
        assert_bilinear(p, x, wqk(L, per_head=True), what=f"bert layer {L.layer}")
        # a wrong matrix (transposed per head) must fail the check
        err, _ = bilinear_error(p, x, wqk(L, per_head=True).transpose(-1, -2))
        assert bool((err > 1e-2).all())
