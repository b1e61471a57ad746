"""The authors' objectives against the library they trained with: transformers' `Trainer` computing the loss of
`DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15)` batches for `BertForMaskedLM` (encoder) and
`BertLMHeadModel` (the paper's decoder, which sees the same masking collator's batch). Our training forward
(`lm_loss` with objective `encoder` / `decoder-paper`) must give the same loss and gradients on the same batch,
and our own batches must follow the collator's rules (what is selected, how it is corrupted, which labels)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attention_geometry.training.batches import IGNORE_INDEX, make_batch, n_loss_tokens
from attention_geometry.training.hyper import resolve_hyper
from attention_geometry.training.models import build_model, lm_loss

torch.set_num_threads(1)

# real sentences (Wikipedia-style openings), padded to one length as the authors' tokenization does
DOCS = [
    "The cat sat on the mat while the dog slept by the door.",
    "A river is a natural stream of water that flows toward an ocean, a lake or another river.",
    "Paris is the capital of France.",
    "The quick brown fox jumps over the lazy dog near the river bank in the morning.",
]
WORDS = sorted({w.strip(".,").lower() for d in DOCS for w in d.split()} | {",", "."})
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import BertTokenizerFast

    return BertTokenizerFast(vocab={w: i for i, w in enumerate(SPECIALS + WORDS)}, do_lower_case=True)


def _collated(tokenizer, seed: int):
    from transformers import DataCollatorForLanguageModeling

    enc = tokenizer(DOCS, truncation=True, padding="max_length", max_length=24)
    features = [{k: enc[k][i] for k in ("input_ids", "attention_mask")} for i in range(len(DOCS))]
    collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15, seed=seed)
    return collator(features)


def _trainer_loss_and_grads(model, batch):
    """The loss and gradients that transformers' Trainer computes for one batch (its compute_loss)."""
    from transformers import Trainer, TrainingArguments

    args = TrainingArguments(
        output_dir="unused",
        per_device_train_batch_size=len(DOCS),
        learning_rate=5e-5,
        weight_decay=0.01,
        warmup_steps=200,
        max_steps=200_000,
        report_to=[],
        use_cpu=True,
    )
    trainer = Trainer(model=model, args=args)
    model.zero_grad()
    loss = trainer.compute_loss(model, dict(batch))
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("objective", ["encoder", "decoder-paper"])
@pytest.mark.parametrize("seed", [0, 1])
def test_our_loss_and_gradients_equal_the_trainers_on_the_collators_batch(tokenizer, objective, seed):
    batch = _collated(tokenizer, seed)
    labels = batch["labels"]
    assert int((labels != IGNORE_INDEX).sum()) > 0
    kw = dict(num_layers=2, hidden_size=32, num_heads=2, intermediate_size=64, vocab_size=len(tokenizer))
    stock = build_model("tiny", objective, "standard", seed=3, special_tokens={"pad": tokenizer.pad_token_id}, **kw)
    ours = build_model("tiny", objective, "standard", seed=3, special_tokens={"pad": tokenizer.pad_token_id}, **kw)
    stock.train(), ours.train()  # dropout is 0 in our sizes: train mode changes nothing but is what both run
    ref_loss, ref_grads = _trainer_loss_and_grads(stock, batch)

    ours.zero_grad()
    loss = lm_loss(ours, batch["input_ids"], labels, objective, pad_id=tokenizer.pad_token_id, reduction="mean")
    loss.backward()
    assert loss.item() == pytest.approx(ref_loss.item(), abs=1e-6)
    grads = {n: p.grad for n, p in ours.named_parameters() if p.grad is not None}
    assert set(grads) == set(ref_grads)
    for n in grads:
        torch.testing.assert_close(grads[n], ref_grads[n], atol=1e-6, rtol=1e-5, msg=n)


def test_the_paper_decoder_is_scored_only_where_the_next_position_was_selected(tokenizer):
    """BertLMHeadModel shifts labels by one: position i is scored on labels[i + 1]; under the masking
    collator that is the original token of a selected position, predicted from the corrupted prefix."""
    batch = _collated(tokenizer, 0)
    kw = dict(num_layers=1, hidden_size=16, num_heads=2, intermediate_size=32, vocab_size=len(tokenizer))
    m = build_model("tiny", "decoder-paper", "standard", seed=0, **kw).eval()
    with torch.no_grad():
        logits = m(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        lab = batch["labels"]
        sel = lab[:, 1:] != IGNORE_INDEX
        ref = torch.nn.functional.cross_entropy(logits[:, :-1][sel], lab[:, 1:][sel], reduction="sum")
        mine = lm_loss(m, batch["input_ids"], lab, "decoder-paper", pad_id=tokenizer.pad_token_id)
    assert mine.item() == pytest.approx(ref.item(), rel=1e-6)
    assert n_loss_tokens(lab.numpy(), "decoder-paper") == int(sel.sum())


def test_our_paper_decoder_batches_follow_the_collators_rules():
    """Our decoder-paper batch is the encoder's masking (BERT's 80/10/10 corruption of a mlm_probability
    selection that never picks [CLS]/[SEP]/[PAD]/[MASK]) at the authors' 15 %; the clean `decoder` is not."""
    special = {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
    rng = np.random.default_rng(0)
    n, L, V = 4000, 32, 300
    ids = rng.integers(5, V, size=(n, L))
    ids[:, 0], ids[:, -1] = special["cls"], special["sep"]
    keys = [[5, 0, 1, i] for i in range(n)]
    h = resolve_hyper("tiny")  # mlm_probability 0.15, the collator's default and the authors' value
    inp, lab = make_batch(ids, "decoder-paper", keys, h, special, V)
    enc_inp, enc_lab = make_batch(ids, "encoder", keys, h, special, V)
    assert np.array_equal(inp, enc_inp) and np.array_equal(lab, enc_lab)
    sel = lab != IGNORE_INDEX
    assert not sel[:, 0].any() and not sel[:, -1].any()
    rate = sel.sum() / (n * (L - 2))  # binomial sd ~0.0004 over 120k positions
    assert abs(rate - 0.15) < 0.003
    assert abs((inp[sel] == special["mask"]).mean() - 0.8) < 0.01
    dec_inp, dec_lab = make_batch(ids, "decoder", None, h, special, V)
    assert np.array_equal(dec_inp, ids) and np.array_equal(dec_lab, ids)
