"""Unit tests of attention_geometry.training: initializations, the training forward, masking, data order,
schedule, regularizer and config validation (tiny random models, no corpus download)."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import fresh_linear_std

from attention_geometry.errors import UserError
from attention_geometry.training.batches import Order, global_indices, lr_at, mask_tokens
from attention_geometry.training.hyper import resolve_hyper
from attention_geometry.training.models import (
    SumCrossEntropy,
    build_model,
    lm_loss,
    self_attentions,
    symmetry_penalty,
)
from attention_geometry.training.run_config import run_config_from_dict

torch.set_num_threads(1)

SMALL = dict(num_layers=2, hidden_size=64, num_heads=2, intermediate_size=128, vocab_size=97)
SPECIAL = {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}


def _model(objective="encoder", init="standard", seed=0, **kw):
    return build_model("tiny", objective, init, seed, **{**SMALL, **kw})


def _params(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


# ---------------------------------------------------------------------------------------------- inits


@pytest.mark.parametrize("objective", ["encoder", "decoder"])
def test_standard_init_is_the_stock_model_under_the_seed(objective):
    from transformers import BertForMaskedLM, BertLMHeadModel

    m = _model(objective, "standard", seed=3)
    torch.manual_seed(3)
    cls = BertForMaskedLM if objective == "encoder" else BertLMHeadModel
    ref = cls(m.config)
    for k, v in ref.state_dict().items():
        assert torch.equal(v, m.state_dict()[k]), k
    for sa in self_attentions(m):
        assert not torch.equal(sa.query.weight, sa.key.weight)
        assert abs(sa.key.weight.std().item() - 0.02) < 0.002
    assert m.config.is_decoder == (objective == "decoder")


@pytest.mark.parametrize("objective", ["encoder", "decoder"])
def test_symmetric_init_ties_wq_to_wk_and_changes_nothing_else(objective):
    std = _params(_model(objective, "standard", seed=5))
    m = _model(objective, "symmetric", seed=5)
    sym = _params(m)
    for sa in self_attentions(m):
        assert torch.equal(sa.query.weight, sa.key.weight)
        assert sa.query.weight.data_ptr() != sa.key.weight.data_ptr()  # a copy, not a shared parameter
        assert sa.query.bias is not sa.key.bias
    for k in std:
        if k.endswith("attention.self.query.weight"):
            assert torch.equal(sym[k], std[k.replace("query", "key")])
        else:
            assert torch.equal(sym[k], std[k]), k
    # the copy is independent: training one does not move the other
    sa = self_attentions(m)[0]
    with torch.no_grad():
        sa.query.weight.add_(1.0)
        sa.query.bias.add_(1.0)
    assert not torch.equal(sa.query.weight, sa.key.weight)
    assert not torch.equal(sa.query.bias, sa.key.bias)


@pytest.mark.parametrize("objective", ["encoder", "decoder"])
def test_fresh_inits_follow_pytorch_default_linear_init(objective):
    fresh = _model(objective, "fresh", seed=7)
    symf = _model(objective, "symmetric-fresh", seed=7)
    std = _params(_model(objective, "standard", seed=7))
    fan_in = SMALL["hidden_size"]
    predicted = fresh_linear_std(fan_in)
    bound = 1.0 / math.sqrt(fan_in)
    for sa_f, sa_s in zip(self_attentions(fresh), self_attentions(symf)):
        for lin in (sa_f.query, sa_f.key, sa_f.value):
            w = lin.weight.detach()
            # sample std of fan_in^2 uniform draws: relative sampling error ~ 1 / sqrt(n) ~ 1.6 %
            assert w.std().item() == pytest.approx(predicted, rel=0.08)
            assert abs(w.std().item() - 0.02) > 0.05
            assert w.abs().max().item() <= bound
            assert lin.bias.abs().max().item() <= bound
            assert lin.bias.std().item() > 0.02  # non-zero biases, unlike BERT's zeros
        assert not torch.equal(sa_f.query.weight, sa_f.key.weight)
        # symmetric-fresh: the same fresh draws, then W_q := W_k; biases stay independent
        assert torch.equal(sa_s.query.weight, sa_s.key.weight)
        assert torch.equal(sa_s.key.weight, sa_f.key.weight)
        assert torch.equal(sa_s.value.weight, sa_f.value.weight)
        assert torch.equal(sa_s.query.bias, sa_f.query.bias)
        assert not torch.equal(sa_s.query.bias, sa_s.key.bias)
    # everything outside q, k, v is the standard init
    for k, v in _params(fresh).items():
        if ".attention.self." not in k:
            assert torch.equal(v, std[k]), k


def test_build_model_is_deterministic_and_leaves_global_rng_alone():
    torch.manual_seed(123)
    before = torch.get_rng_state()
    a = _params(_model("encoder", "symmetric-fresh", seed=11))
    assert torch.equal(torch.get_rng_state(), before)
    b = _params(_model("encoder", "symmetric-fresh", seed=11))
    c = _params(_model("encoder", "symmetric-fresh", seed=12))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)


# -------------------------------------------------------------------------------------------- forward


def _batch(B=4, L=12, V=97, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, V, (B, L), generator=g)
    ids[:, 0], ids[:, -1] = 2, 3
    return ids


def test_lean_encoder_loss_matches_stock_forward():
    m = _model("encoder", "fresh", seed=1).eval()
    ids = _batch()
    sel = torch.rand(ids.shape, generator=torch.Generator().manual_seed(1)) < 0.3
    labels = torch.where(sel, ids, -100)
    inp = torch.where(sel, 4, ids)
    with torch.no_grad():
        logits = m(input_ids=inp).logits
        ref = F.cross_entropy(logits.reshape(-1, 97), labels.reshape(-1), reduction="sum")
        mine = lm_loss(m, inp, labels, "encoder")
    assert mine.item() == pytest.approx(ref.item(), rel=1e-5)


def test_lean_decoder_loss_matches_stock_forward_with_padding():
    m = _model("decoder", "symmetric", seed=2).eval()
    ids = _batch()
    ids[1, 8:] = 0  # right padding in one row
    labels = torch.where(ids == 0, -100, ids)
    attn = (ids != 0).long()
    with torch.no_grad():
        logits = m(input_ids=ids, attention_mask=attn).logits
        ref = F.cross_entropy(logits[:, :-1].reshape(-1, 97), labels[:, 1:].reshape(-1), reduction="sum")
        mine = lm_loss(m, ids, labels, "decoder", pad_id=0)
    assert mine.item() == pytest.approx(ref.item(), rel=1e-5)


def test_cpu_bf16_autocast_runs_the_attention_in_float32(monkeypatch):
    """Under CPU bf16 autocast the attention itself gets float32 q, k, v (its bf16 backward is slow on the
    CPU), the projections stay bf16, and the loss and gradients stay close to the fp32 ones; without
    autocast nothing changes (fp32 in, bitwise the same loss)."""

    seen = []
    real = F.scaled_dot_product_attention

    def spy(q, k, v, **kw):
        seen.append((q.dtype, k.dtype, v.dtype, torch.is_autocast_enabled("cpu")))
        return real(q, k, v, **kw)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    m = _model("decoder", "standard", seed=5)
    ids = _batch(B=3, L=10)
    ref = lm_loss(m, ids, ids, "decoder")
    ref.backward()
    g32 = m.bert.encoder.layer[0].attention.self.query.weight.grad.clone()
    m.zero_grad()
    assert seen == [(torch.float32,) * 3 + (False,)] * 2
    seen.clear()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = lm_loss(m, ids, ids, "decoder")
        q = m.bert.encoder.layer[0].attention.self.query(torch.zeros(1, 64))
    low.backward()
    g16 = m.bert.encoder.layer[0].attention.self.query.weight.grad
    assert q.dtype == torch.bfloat16  # the projections run in bf16
    assert seen == [(torch.float32,) * 3 + (False,)] * 2  # the attention in fp32, autocast off inside it
    assert low.item() == pytest.approx(ref.item(), rel=2e-2)
    assert torch.nn.functional.cosine_similarity(g16.flatten(), g32.flatten(), dim=0) > 0.98
    assert lm_loss(m, ids, ids, "decoder").item() == ref.item()


def test_fast_cross_entropy_matches_torch_value_and_gradient():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(50, 31, generator=g) * 4
    y = torch.randint(0, 31, (50,), generator=g)
    x[3, y[3]] = -150.0  # rows whose label probability underflows in fp32 (exp(-150) < 1e-45)
    x[7, y[7]] = -75.0
    a = x.clone().requires_grad_()
    b = x.clone().double().requires_grad_()  # the reference in float64
    la = SumCrossEntropy.apply(a, y)
    lb = F.cross_entropy(b, y, reduction="sum")
    (la * 0.7).backward()
    (lb * 0.7).backward()
    assert la.item() == pytest.approx(lb.item(), rel=1e-6)
    assert torch.allclose(a.grad.double(), b.grad, atol=1e-6)
    rows = torch.tensor([3, 7, 0])  # the underflow rows on their own, against the float64 per-row losses
    per_row = F.cross_entropy(x[rows].double(), y[rows], reduction="none")
    for r, want in zip(rows, per_row):
        assert SumCrossEntropy.apply(x[r : r + 1], y[r : r + 1]).item() == pytest.approx(want.item(), rel=1e-6)


def test_causal_model_position_i_never_sees_later_tokens():
    dec = _model("decoder", "standard", seed=4).eval()
    enc = _model("encoder", "standard", seed=4).eval()
    ids = _batch(B=1, L=10)
    changed = ids.clone()
    changed[0, 6] = 50 if ids[0, 6] != 50 else 51
    with torch.no_grad():
        for model, causal in ((dec, True), (enc, False)):
            a = model(input_ids=ids).logits
            b = model(input_ids=changed).logits
            earlier_same = torch.equal(a[0, :6], b[0, :6])
            assert earlier_same == causal  # the encoder sees the change everywhere, the decoder does not
            assert not torch.allclose(a[0, 6:], b[0, 6:])
        # and the lean training forward agrees: the loss on positions < 6 (predicting tokens <= 6 only)
        lab = ids.clone()
        lab[0, 6:] = -100
        lab_c = changed.clone()
        lab_c[0, 6:] = -100
        assert lm_loss(dec, ids, lab, "decoder").item() == lm_loss(dec, changed, lab_c, "decoder").item()


# -------------------------------------------------------------------------------------------- masking


def test_mlm_masking_rates_and_special_tokens():
    h = resolve_hyper("tiny")
    n, L, V = 2000, 64, 500
    rng = np.random.default_rng(0)
    ids = rng.integers(5, V, size=(n, L))
    ids[:, 0], ids[:, -1] = SPECIAL["cls"], SPECIAL["sep"]
    ids[:5, 40:] = SPECIAL["pad"]
    keys = [[9, 0, 1, i] for i in range(n)]
    inp, lab = mask_tokens(ids, keys, h, SPECIAL, V)
    sel = lab != -100
    assert not sel[:, 0].any() and not sel[:, -1].any() and not sel[:5, 40:].any()
    assert np.array_equal(lab[sel], ids[sel])
    assert np.array_equal(inp[~sel], ids[~sel])
    maskable = (n * (L - 2)) - 5 * 23
    rate = sel.sum() / maskable
    # binomial standard errors: 0.15 rate over ~124k positions (sd 0.001); fractions over ~18.6k picks
    assert abs(rate - 0.15) < 0.005
    k = sel.sum()
    frac_mask = (inp[sel] == SPECIAL["mask"]).sum() / k
    changed_random = ((inp[sel] != SPECIAL["mask"]) & (inp[sel] != ids[sel])).sum() / k
    unchanged = (inp[sel] == ids[sel]).sum() / k
    assert abs(frac_mask - 0.8) < 0.015
    # a random replacement equals the original with probability 1/V
    assert abs(changed_random - 0.1 * (1 - 1 / V)) < 0.01
    assert abs(unchanged - (0.1 + 0.1 / V)) < 0.01
    # per-example keys: the same key gives the same mask whatever batch the example sits in
    inp2, lab2 = mask_tokens(ids[7:9], keys[7:9], h, SPECIAL, V)
    assert np.array_equal(inp2, inp[7:9]) and np.array_equal(lab2, lab[7:9])
    inp3, _ = mask_tokens(ids[7:9], [[10, 0, 1, 7], [10, 0, 1, 8]], h, SPECIAL, V)
    assert not np.array_equal(inp3, inp[7:9])


def test_data_order_is_a_per_epoch_permutation_and_rank_slices_tile_the_batch():
    n, B = 10, 4
    order = Order(n, seed=3)
    seq = np.concatenate([order(global_indices(t, B)) for t in range(1, 6)])  # 20 examples = 2 epochs
    assert sorted(seq[:10]) == list(range(10)) and sorted(seq[10:20]) == list(range(10))
    assert not np.array_equal(seq[:10], seq[10:20])
    # pure function of (seed, step): a fresh sampler asked for step 4 alone gives the same blocks
    assert np.array_equal(Order(n, seed=3)(global_indices(4, B)), seq[12:16])
    assert not np.array_equal(Order(n, seed=4)(global_indices(4, B)), seq[12:16])


def test_lr_schedule_warmup_then_linear_decay():
    h = resolve_hyper("tiny", {"max_steps": 1000})
    assert lr_at(h, 1) == pytest.approx(1e-3 / 100)
    assert lr_at(h, 100) == pytest.approx(1e-3)
    assert lr_at(h, 101) == pytest.approx(1e-3 * 900 / 901)
    assert lr_at(h, 1000) == pytest.approx(1e-3 / 901)
    assert all(lr_at(h, t) > lr_at(h, t + 1) for t in range(100, 999))


def test_symmetry_penalty_is_one_per_layer_for_symmetric_wqk_and_larger_otherwise():
    sym = _model("encoder", "symmetric-fresh", seed=0)
    std = _model("encoder", "standard", seed=0)
    assert symmetry_penalty(sym).item() == pytest.approx(2.0, abs=1e-5)
    p = symmetry_penalty(std)
    assert p.item() > 2.2  # random W_q, W_k: ||M|| / ||sym M|| ~ sqrt(2) per layer
    p.backward()
    assert self_attentions(std)[0].query.weight.grad.abs().sum() > 0


def test_paper_sizes():
    for size, (L, D, H, I) in {
        "bert-mini": (4, 256, 4, 1024),
        "bert-base": (12, 768, 12, 3072),
        "bert-large": (24, 1024, 16, 4096),
    }.items():
        h = resolve_hyper(size)
        assert (h.num_layers, h.hidden_size, h.num_heads, h.intermediate_size) == (L, D, H, I)
        assert (h.lr, h.warmup_steps, h.weight_decay, h.max_steps, h.seq_len) == (5e-5, 200, 0.01, 200_000, 512)
    t = resolve_hyper("tiny")
    assert (t.num_layers, t.hidden_size, t.num_heads, t.intermediate_size, t.batch_size) == (2, 128, 2, 512, 32)
    assert (t.lr, t.betas, t.weight_decay, t.grad_clip, t.warmup_steps, t.hidden_dropout) == (
        1e-3,
        (0.9, 0.98),
        0.01,
        1.0,
        100,
        0.0,
    )


# ------------------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    "raw, key",
    [
        ({"corpus": "c", "size": "huge"}, "size"),
        ({"corpus": "c", "objective": "seq2seq"}, "objective"),
        ({"corpus": "c", "init": "orthogonal"}, "init"),
        ({"corpus": "c", "learning_rate": 1}, "learning_rate"),
        ({"corpus": "c", "overrides": {"hidden": 3}}, "overrides.hidden"),
        ({"corpus": "c", "overrides": {"lr": "fast"}}, "overrides.lr"),
        ({"corpus": "c", "overrides": {"hidden_size": 30, "num_heads": 4}}, "overrides.num_heads"),
        ({"corpus": "c", "max_steps": 0}, "max_steps"),
        ({"corpus": "c", "regularizer": {"lambda": -1}}, "regularizer.lambda"),
        ({"corpus": "c", "snapshot_steps": [0, 10], "snapshot_every": 5}, "snapshot_steps"),
        # an explicit step the run never reaches (the workflow refuses it too: rundir.snapshot_steps)
        ({"corpus": "c", "max_steps": 20, "snapshot_steps": [0, 10, 30]}, "snapshot_steps"),
        ({"corpus": "c", "overrides": {"max_steps": 20}, "eval_steps": [25]}, "eval_steps"),
        ({"corpus": "c", "overrides": {"mask_token_fraction": -0.1}}, "overrides.mask_token_fraction"),
        ({"size": "tiny"}, "corpus"),
        ({"corpus": "c", "device": "tpu"}, "device"),
        ({"corpus": "c", "seed": -1}, "seed"),
    ],
)
def test_bad_run_config_names_the_key(raw, key):
    with pytest.raises(UserError) as e:
        run_config_from_dict(raw, where="RUN.yaml")
    msg = str(e.value)
    assert key in msg and "\n" not in msg


@pytest.mark.parametrize(
    "args, key",
    [
        (("huge", "encoder", "standard"), "size"),
        (("tiny", "seq2seq", "standard"), "objective"),
        (("tiny", "encoder", "orthogonal"), "init"),
    ],
)
def test_build_model_rejects_unknown_names(args, key):
    with pytest.raises(UserError, match=key):
        build_model(*args, seed=0)


_MALLINFO_PROBE = r"""
import ctypes, sys
import torch
from attention_geometry.training.runtime import HEAP_ALLOC_LIMIT, keep_large_allocations_on_heap

class MallInfo2(ctypes.Structure):  # glibc's struct mallinfo2 (all size_t)
    _fields_ = [(n, ctypes.c_size_t) for n in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]

libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2

def mmapped_while_alive(nbytes):
    before = libc.mallinfo2().hblkhd
    t = torch.empty(nbytes // 4, dtype=torch.float32)
    t.fill_(1.0)
    grew = libc.mallinfo2().hblkhd - before
    del t
    return grew

n = HEAP_ALLOC_LIMIT // 2  # a 16 MiB tensor, the size of the default decoder's logits
print(mmapped_while_alive(n) >= n, keep_large_allocations_on_heap(), mmapped_while_alive(n) >= n)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc statistics")
def test_large_training_temporaries_come_from_the_heap_after_tuning():
    """Measured through glibc's own statistics (mallinfo2: bytes in mmapped chunks): a 16 MiB tensor is a
    fresh mmap before the tuning, a heap chunk after it."""
    if "glibc" not in (os.confstr("CS_GNU_LIBC_VERSION") or ""):
        pytest.skip("not glibc")
    r = subprocess.run([sys.executable, "-c", _MALLINFO_PROBE], capture_output=True, text=True, check=True)
    assert r.stdout.split() == ["True", "True", "False"], r.stdout + r.stderr
